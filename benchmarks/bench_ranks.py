"""The evaluator's ranks (hubnorm.positive_ranks) on both sides of its counting seam, against the bare work.

Every evaluation ends in the rank of each query's best positive: per score block, the targets scoring above the best
positive plus those tied with it at a smaller index. That is a compare and a count per score, after the GEMM that
made the scores. This benchmark times, in alternating rounds in one process, on the Flickr30k and COCO test shapes
(t2i: one positive per query; i2t: five):

* the GEMM of the queries against the gallery (the scores every evaluation computes first), for scale;
* ``positive_ranks`` on the precomputed score matrix, numpy side of ``hubnorm.evaluation.counts_namespace`` (the
  CPU default) and torch side (what a torch device runs, forced here on CPU tensors);
* the floor: one compare and count of every score against its row's value, by numpy (``count_nonzero``) and by
  torch (a boolean row sum), on the same matrix, in blocks of 2,048 rows through one reused boolean buffer.

Each peer starts after ``settle()`` (OpenBLAS's threads spin-wait after the GEMM). The ranks of both sides are
checked equal in every round. Writes reports/ranks.md and .csv.

Run: flock /tmp/hubnorm-bench.lock .venv/bin/python benchmarks/bench_ranks.py
"""

import os

import numpy as np
import torch
from _common import Timer, forced, load_average, settle, write_report

import hubnorm as hn
from hubnorm import evaluation

ROUNDS = int(os.environ.get("HUBNORM_BENCH_ROUNDS", "5"))

#: (name, gallery size, captions per image, direction)
SHAPES = [("Flickr30k test", 1000, 5, "t2i"), ("Flickr30k test", 1000, 5, "i2t"),
          ("COCO 5k test", 5000, 5, "t2i"), ("COCO 5k test", 5000, 5, "i2t")]


def unit(rng, n, d=512):
    x = rng.standard_normal((n, d), dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def case(n_images, per, direction, seed=0):
    """Images and captions around them (caption i describes image i // per), float32 unit vectors; the scores and
    the positives of ``direction``."""
    rng = np.random.default_rng(seed)
    imgs = unit(rng, n_images)
    caps = np.repeat(imgs, per, axis=0) + 0.9 * unit(rng, n_images * per)
    caps /= np.linalg.norm(caps, axis=1, keepdims=True)
    c2i = np.repeat(np.arange(n_images), per)
    if direction == "t2i":
        q, g, pos = caps, imgs, hn.Positives.from_labels(c2i, n_images)
    else:
        q, g, pos = imgs, caps, hn.Positives.from_groups(c2i, n_queries=n_images)
    return torch.from_numpy(q), torch.from_numpy(g), pos


#: rows per block of the floors: one reused boolean buffer, as the evaluator's blocks (a fresh block-sized
#: temporary per call costs page faults, which made the whole-matrix floor bimodal at the COCO sizes)
FLOOR_ROWS = 2048


def floor_numpy(S, b):
    mask = np.empty((min(FLOOR_ROWS, S.shape[0]), S.shape[1]), dtype=np.bool_)
    out = np.empty(S.shape[0], dtype=np.int64)
    for i in range(0, S.shape[0], FLOOR_ROWS):
        m = mask[: min(FLOOR_ROWS, S.shape[0] - i)]
        out[i:i + len(m)] = np.count_nonzero(np.greater(S[i:i + len(m)], b[i:i + len(m)], out=m), axis=1)
    return out


def floor_torch(S, b):
    mask = torch.empty((min(FLOOR_ROWS, S.shape[0]), S.shape[1]), dtype=torch.bool)
    out = torch.empty(S.shape[0], dtype=torch.int64)
    for i in range(0, S.shape[0], FLOOR_ROWS):
        m = mask[: min(FLOOR_ROWS, S.shape[0] - i)]
        out[i:i + len(m)] = torch.gt(S[i:i + len(m)], b[i:i + len(m)], out=m).sum(dim=1)
    return out


def main():
    load_start = load_average()
    rows, notes = [], []
    for name, n_images, per, direction in SHAPES:
        q, g, pos = case(n_images, per, direction)
        S = q @ g.T
        Sn = S.numpy()
        best_col = np.array([pos.indices[pos.indptr[i]:pos.indptr[i + 1]][np.argmax(
            Sn[i, pos.indices[pos.indptr[i]:pos.indptr[i + 1]]])] for i in range(S.shape[0])])
        b = Sn[np.arange(S.shape[0]), best_col][:, None]
        bt = torch.from_numpy(b)

        def torch_side():
            with forced(evaluation, "counts_namespace", torch):
                return hn.positive_ranks(S, pos)

        peers = {"GEMM (queries x gallery, torch.mm)": lambda: q @ g.T,
                 "positive_ranks, numpy side (CPU default)": lambda: hn.positive_ranks(S, pos),
                 "positive_ranks, torch side (forced)": torch_side,
                 "floor: compare + count, numpy": lambda: floor_numpy(Sn, b),
                 "floor: compare + count, torch": lambda: floor_torch(S, bt)}
        times = {k: [] for k in peers}
        for r in range(ROUNDS):
            order = list(peers) if r % 2 == 0 else list(peers)[::-1]
            out = {}
            for key in order:
                settle()
                with Timer() as t:
                    out[key] = peers[key]()
                times[key].append(t.seconds)
            assert np.array_equal(out["positive_ranks, numpy side (CPU default)"],
                                  out["positive_ranks, torch side (forced)"])
        gemm = np.array(times["GEMM (queries x gallery, torch.mm)"])
        torch_r = np.array(times["positive_ranks, torch side (forced)"])
        for key in peers:
            t = np.array(times[key])
            rows.append({"shape": f"{name}, {direction}: {S.shape[0]:,} x {S.shape[1]:,}", "peer": key,
                         "seconds (fastest)": float(t.min()), "seconds (median)": float(np.median(t)),
                         "x the GEMM (median of rounds)": float(np.median(t / gemm)),
                         "x the torch side (median of rounds)": float(np.median(t / torch_r))})
        print(rows[-5:], flush=True)
    notes.append("Ratios are taken within each round (the peers timed seconds apart, each after 0.3 s idle), then "
                 "the median over rounds. The ranks of the two sides are identical in every round (asserted).")
    intro = (f"Scores: float32 unit vectors, d = 512, captions around their images (synthetic). {ROUNDS} rounds, "
             "peers in alternating order, one process. Load average at the start: " + load_start + ".")
    write_report("ranks", "The evaluator's ranks: positive_ranks, numpy vs torch counting, against the GEMM",
                 intro, rows, notes)


if __name__ == "__main__":
    main()
