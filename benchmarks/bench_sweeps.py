"""grid_search's two engines: the one-pass sweep vs the per-point reference loop, on a Flickr30k-sized split.

Validation split: 1,000 images / 5,000 captions (synthetic flickr30k preset, seed 0); the query bank is 20% of
the 145,000 training captions (29,000). Target: the full NNN grid (11 alphas x 10 ks = 110 points) in at most
2x the time of one (alpha, k) evaluation (fit + evaluate, as grid_search does per point), with identical
numbers. The IS and SN tau sweeps likewise.
"""

import numpy as np
from _common import Timer, write_report

import hubnorm as hn
from hubnorm.selection import PAPER_GRIDS
from hubnorm.synthetic import make_dataset


def single(method, task, **params):
    with Timer() as t:
        norm = task.fit(hn.make_normalizer(method, **params))
        hn.evaluate(norm, task)
    return t.seconds


def main():
    ds = make_dataset("flickr30k", n_train_images=29000, n_test_images=1000, seed=0)
    tr, va = ds.splits["train"], ds.splits["val"]
    rng = np.random.default_rng(0)
    bank = tr.captions[np.sort(rng.choice(len(tr.captions), len(tr.captions) // 5, replace=False))]
    task = hn.build_tasks(va.images, va.captions, va.caption_to_image, caption_bank=bank, image_bank=tr.images,
                          directions=("t2i",))["t2i"]
    cols = ["R@1", "R@5", "R@10", "MdR"]
    rows = []
    single(*("nnn", task), alpha=0.75, k=8)  # warm-up
    t_single = {k: min(single("nnn", task, alpha=0.75, k=k) for _ in range(2)) for k in (1, 128, 512)}
    with Timer() as ts:
        best = hn.grid_search("nnn", task)
    table = best.table
    with Timer() as tg:
        ref = hn.grid_search("nnn", task, engine="reference")
    same = bool(np.array_equal(ref.table[cols].to_numpy(), table[cols].to_numpy()))
    for k, t in t_single.items():
        rows.append({"run": f"one NNN evaluation (alpha 0.75, k {k}): fit + evaluate", "seconds": t})
    rows.append({"run": "grid_search (sweep engine), NNN grid 11 x 10 = 110 points", "seconds": ts.seconds,
                 "x one evaluation (k=128)": ts.seconds / t_single[128],
                 "x one evaluation (k=512)": ts.seconds / t_single[512], "target": "<= 2x",
                 "sweep equals reference": same, "best": f"{best.best_params} R@1 {best.best_score:.2f}"})
    rows.append({"run": "grid_search (reference engine), same grid", "seconds": tg.seconds,
                 "x one evaluation (k=128)": tg.seconds / t_single[128],
                 "best": f"{ref.best_params} R@1 {ref.best_score:.2f}"})
    print(rows, flush=True)
    for method in ("is", "sn"):  # DBSN: same code path as SN (tested in tests/test_fast_paths.py)
        taus = PAPER_GRIDS[method]["tau"]
        t1 = min(single(method, task, tau=taus[1]) for _ in range(2))
        with Timer() as ts:
            table = hn.grid_search(method, task, {"tau": taus}).table
        with Timer() as tg:
            ref = hn.grid_search(method, task, {"tau": taus}, engine="reference")
        same = bool(np.array_equal(ref.table[cols].to_numpy(), table[cols].to_numpy()))
        rows.append({"run": f"{method} tau sweep ({len(taus)} taus) vs one evaluation {t1:.2f} s",
                     "seconds": ts.seconds, "x one evaluation (k=128)": ts.seconds / t1,
                     "sweep equals reference": same, "grid_search seconds": tg.seconds})
        print(rows[-1], flush=True)
    write_report("sweeps", "One-pass hyperparameter sweeps", "t2i on the held-out split (1,000 images / 5,000 "
                 "captions, synthetic flickr30k), query bank 29,000 training captions, target bank 29,000 training "
                 "images (DBSN). 'x one evaluation' for the tau sweeps is relative to one evaluation of that "
                 "method.", rows,
                 ["sweep equals reference: R@1, R@5, R@10 and MdR of every grid point identical (MnR: metric='MnR')."])


if __name__ == "__main__":
    main()
