"""A/B timing of the library at an older commit against the working tree, in one process (issue 11 check).

The older ``lib/hubnorm`` is exported with ``git archive`` into a temporary folder and imported as
``hubnorm_old`` (the package uses relative imports only), so both versions run under the same load. Every
repetition times both versions back to back, alternating which goes first; the report gives the minimum of each
and the per-repetition ratios (after / before), all from one run. Sizes are reduced (2000 targets, d = 512) so
that the whole run takes a few minutes on 2 cores.

    python benchmarks/bench_ab.py --before 3abcc36 --reps 5                       # issue 11: kernels, fits, ranks
    python benchmarks/bench_ab.py --suite protocol --before 3a6176e --reps 5     # issue 21: fits and sweeps

``--suite protocol`` (report ``protocol_ab``) times what issue 21 moved behind the block protocol and its engines:
NNN, IS, SN and DBSN fits (2,000 targets; banks of 40,000, or 10,000 for the Sinkhorn methods with a 5,000-row
target bank for DBSN) and the ``grid_search`` sweeps of NNN (its App. B grid, 110 points), IS and SN (their paper
grids; SN with ``n_iter=5``) on a validation task of 5,000 queries, 1,000 targets and a 20,000-row bank.
"""

import argparse
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from _common import HERE, write_report


def export(commit: str, dest: Path) -> None:
    repo = HERE.parent
    tar = dest / "old.tar"
    subprocess.run(["git", "-C", str(repo), "archive", "-o", str(tar), commit, "lib/hubnorm"], check=True)
    with tarfile.open(tar) as fh:
        fh.extractall(dest, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    shutil.move(str(dest / "lib" / "hubnorm"), str(dest / "hubnorm_old"))


def operations(hn, topk_similarity, data):
    T, B, Q = data
    t, b = torch.from_numpy(T), torch.from_numpy(B)
    pos = hn.Positives.from_labels(np.arange(len(Q)) % len(T), len(T))
    nnn = hn.NearestNeighborNormalization(alpha=0.75, k=128, device="cpu").fit(T, query_bank=B)
    raw = hn.Identity(device="cpu").fit(T)
    return {
        f"topk_similarity k=128 ({len(T)} x {len(B)} x 512)": lambda: topk_similarity(t, b, 128),
        f"NNN fit k=128 (bank {len(B)})": lambda: hn.NearestNeighborNormalization(
            alpha=0.75, k=128, device="cpu").fit(T, query_bank=B),
        f"IS fit tau=0.02 (bank {len(B)})": lambda: hn.InvertedSoftmax(tau=0.02, device="cpu").fit(T, query_bank=B),
        "SN fit tau=0.01, 5 iterations (bank 10000)": lambda: hn.SinkhornNormalization(
            tau=0.01, n_iter=5, device="cpu").fit(T, query_bank=B[:10000]),
        f"positive_ranks of a fitted NNN ({len(Q)} x {len(T)})": lambda: hn.positive_ranks(nnn, pos, Q),
        f"Normalizer.topk k=10 ({len(Q)} x {len(T)})": lambda: raw.topk(Q, 10),
    }


def protocol_operations(hn, data):
    """Issue 21: the fits and sweeps that now run through the block protocol (same data for both versions)."""
    T, B, Q, TB, val = data
    task = hn.RetrievalTask(*val[:2], hn.Positives.from_labels(np.arange(len(val[0])) % len(val[1]), len(val[1])),
                            query_bank=val[2])
    grids = hn.PAPER_GRIDS
    return {
        f"NNN fit k=128 (bank {len(B)})": lambda: hn.NearestNeighborNormalization(
            alpha=0.75, k=128, device="cpu").fit(T, query_bank=B),
        f"IS fit tau=0.02 (bank {len(B)})": lambda: hn.InvertedSoftmax(tau=0.02, device="cpu").fit(T, query_bank=B),
        "SN fit tau=0.01, 5 iterations (bank 10000)": lambda: hn.SinkhornNormalization(
            tau=0.01, n_iter=5, device="cpu").fit(T, query_bank=B[:10000]),
        f"DBSN fit tau=0.01, 5 iterations (bank 10000, target bank {len(TB)})": lambda: hn.DualBankSinkhornNormalization(
            tau=0.01, n_iter=5, device="cpu").fit(T, query_bank=B[:10000], target_bank=TB),
        f"NNN sweep, paper grid 110 points ({len(val[0])} queries x {len(val[1])} targets, bank {len(val[2])})":
            lambda: _sweep(hn, "nnn", task, grids["nnn"], {}),
        "IS sweep, paper grid 6 taus (same task)": lambda: _sweep(hn, "is", task, grids["is"], {}),
        "SN sweep, paper grid 5 taus, n_iter=5 (same task)": lambda: _sweep(hn, "sn", task, grids["sn"], {"n_iter": 5}),
    }


def _sweep(hn, method, task, grid, fixed):
    res = hn.grid_search(method, task, grid, fixed=fixed)
    assert res.engine == "sweep"
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", default="3abcc36", help="git commit of the 'before' library")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--suite", choices=("hardening", "protocol"), default="hardening")
    ap.add_argument("--only", default=None, help="time only the operations whose name contains this text")
    ap.add_argument("--report", default=None, help="report name (default: the suite's)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="hubnorm-ab-"))
    try:
        export(args.before, tmp)
        sys.path.insert(0, str(tmp))
        import hubnorm as new
        import hubnorm_old as old
        rng = np.random.default_rng(0)

        def unit(n):
            x = rng.standard_normal((n, 512)).astype(np.float32)
            return x / np.linalg.norm(x, axis=1, keepdims=True)

        if args.suite == "protocol":
            data = (unit(2000), unit(40000), None, unit(5000), (unit(5000), unit(1000), unit(20000)))
            before, after = protocol_operations(old, data), protocol_operations(new, data)
        else:
            from hubnorm.kernels import topk_similarity as tk_new
            old_ops = __import__("hubnorm_old._ops", fromlist=["topk_similarity"])
            data = (unit(2000), unit(40000), unit(10000))
            before, after = operations(old, old_ops.topk_similarity, data), operations(new, tk_new, data)
        rows = []
        for name in before:
            if args.only and args.only not in name:
                continue
            ob, oa = before[name](), after[name]()
            _same_result(ob, oa, name)
            tb, ta, ratios = [], [], []
            for r in range(args.reps):
                order = [("b", before[name]), ("a", after[name])]
                res = {}
                for tag, f in (order if r % 2 == 0 else order[::-1]):
                    t0 = time.perf_counter()
                    f()
                    res[tag] = time.perf_counter() - t0
                tb.append(res["b"])
                ta.append(res["a"])
                ratios.append(res["a"] / res["b"])
            rows.append({"operation": name, "before s (min)": min(tb), "after s (min)": min(ta),
                         "after / before (of the minima)": min(ta) / min(tb),
                         "after / before (median per repetition)": float(np.median(ratios)),
                         "per-repetition ratios": ", ".join(f"{x:.2f}" for x in ratios)})
            print(rows[-1], flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report = args.report or ("protocol_ab" if args.suite == "protocol" else "hardening_ab")
    notes = ["Both versions compute the same numbers: the warm-up call of each operation is compared (fitted "
             "offsets equal to 1e-6, sweep tables identical) before timing."] if args.suite == "protocol" else ()
    write_report(report, f"A/B: library at {args.before} (before) vs the working tree (after)",
                 "Same process, same data, one thread; each repetition runs both versions back to back, "
                 "alternating the order. Random unit vectors, d = 512, seed 0.", rows, notes=notes)


def _same_result(before, after, name):
    """The two versions' results of one operation agree (a timing of different computations would be void)."""
    if hasattr(before, "offsets_"):
        diff = float((before.offsets_ - after.offsets_).abs().max())
        assert diff < 1e-6, f"{name}: offsets differ by {diff}"
    elif hasattr(before, "table"):
        assert before.table.equals(after.table), f"{name}: sweep tables differ"


if __name__ == "__main__":
    main()
