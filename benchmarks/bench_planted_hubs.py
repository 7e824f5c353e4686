"""Planted hubs (issue 27): crafted gallery items against raw retrieval and each normalizer, and the detector.

For each synthetic preset and seed (text -> image; test 1,000 images / 5,000 captions; the defender's query bank
is the 5,000 captions of 1,000 training images and the target bank those images; the attacker holds the 5,000
*validation* captions, never the test queries), 5 gallery images are turned into hubs
(:func:`hubnorm.adversarial.plant_hubs`, "mean" and "gradient" constructions) within a chord-distance budget, and
appended to the gallery. Columns: R@1 on the clean and on the attacked gallery and the damage (points), the share
of test queries with a planted item first (captured@1) and in the top 10, and the detector's precision / recall on
the 5 planted items (robust z of the bank statistic > 3.5; "bias": mean top-16 bank similarity, "n_k": the
k-occurrence over the bank queries). Every number is synthetic.

    flock /tmp/hubnorm-bench.lock .venv/bin/python benchmarks/bench_planted_hubs.py
"""

import sys
import time

from _common import REPORTS, write_report

import numpy as np

import hubnorm as hn
from hubnorm import adversarial as adv

PRESETS = ("flickr30k", "coco")
SEEDS = (0, 1, 2)
BUDGETS = (0.1, 0.25, 0.5)
CONSTRUCTIONS = ("mean", "gradient")
N_HUBS = 5


def methods():
    return {"NNN": hn.NearestNeighborNormalization(alpha=0.75, k=16), "IS": hn.InvertedSoftmax(tau=0.02),
            "SN": hn.SinkhornNormalization(tau=0.01), "DBSN": hn.DualBankSinkhornNormalization(tau=0.01)}


def main():
    t0 = time.perf_counter()
    rows = []
    f = np.float64
    for preset in PRESETS:
        for seed in SEEDS:
            ds = hn.load_embeddings(f"synthetic:{preset}", seed=seed, n_train_images=1000, n_test_images=1000)
            te, tr, va = ds.split("test"), ds.split("train"), ds.split("val")
            task = hn.build_tasks(te.images.astype(f), te.captions.astype(f), te.caption_to_image,
                                  image_bank=tr.images.astype(f), caption_bank=tr.captions.astype(f),
                                  directions=("t2i",))["t2i"]
            clean = None
            for construction in CONSTRUCTIONS:
                for budget in BUDGETS:
                    planted = adv.plant_hubs(task.targets, va.captions.astype(f), N_HUBS, budget=budget,
                                             method=construction, seed=seed)
                    rep = adv.planted_hub_report(task, planted, methods(), clean_r1=clean)
                    clean = dict(zip(rep["method"], rep["R@1 clean"]))
                    att = adv.attacked_task(task, planted)
                    pl = np.arange(task.n_targets, att.n_targets)
                    det = {}
                    for stat in ("bias", "n_k"):
                        d = adv.detect_hubs(att.targets, att.query_bank, statistic=stat)
                        sc = adv.detection_scores(d["flagged"], pl)
                        det[stat] = sc
                    for r in rep.to_dict("records"):
                        rows.append({"preset": preset, "seed": seed, "construction": construction, "budget": budget,
                                     "method": r["method"], "R@1 clean": round(r["R@1 clean"], 2),
                                     "R@1 attacked": round(r["R@1 attacked"], 2), "damage": round(r["damage"], 2),
                                     "captured@1 %": round(r["captured@1 %"], 2),
                                     "captured@10 %": round(r["captured@10 %"], 2),
                                     "detector bias P": round(det["bias"]["precision"], 3),
                                     "detector bias R": round(det["bias"]["recall"], 3),
                                     "detector n_k P": round(det["n_k"]["precision"], 3),
                                     "detector n_k R": round(det["n_k"]["recall"], 3)})
                    print(preset, seed, construction, budget, f"{time.perf_counter() - t0:.0f} s", flush=True)
    write_report("planted_hubs", "Planted hubs: capture, R@1 damage raw and after each method, detection (synthetic)",
                 f"Synthetic presets {PRESETS}, seeds {SEEDS}, t2i; {N_HUBS} planted images appended to a 1,000-image "
                 f"gallery (5,000 test captions); budgets = chord distance from the real image they were made from; "
                 f"constructions {CONSTRUCTIONS} (hubnorm.adversarial, docs/methods.md). Methods at fixed paper "
                 f"defaults: NNN alpha 0.75 k 16, IS tau 0.02, SN and DBSN tau 0.01 (10 iterations); defender bank = "
                 f"5,000 training captions (1,000 images). Total {time.perf_counter() - t0:.0f} s. All numbers synthetic.",
                 rows,
                 ["damage = R@1 clean - R@1 attacked (points); captured@k = % of test queries with a planted item in "
                  "their top k after the method.",
                  "The detector sees only the attacked gallery and the defender's query bank (no test query, no label); "
                  "its precision counts the natural hubs it also flags as false positives.",
                  "The detector columns do not depend on the method (they repeat on each method's row)."])
    summarize()


def summarize():
    """Append the means over presets and seeds to the report (also: ``--summarize-only`` re-does it from the CSV)."""
    import pandas as pd

    d = pd.read_csv(REPORTS / "planted_hubs.csv")
    cols = ["R@1 clean", "R@1 attacked", "damage", "captured@1 %", "captured@10 %"]
    g = d.groupby(["construction", "budget", "method"], sort=False)[cols].mean().round(2).reset_index()
    det = (d[d["method"] == "raw"].groupby(["construction", "budget"], sort=False)
           [["detector bias P", "detector bias R", "detector n_k P", "detector n_k R"]].mean().round(3).reset_index())
    md = (REPORTS / "planted_hubs.md").read_text().split("\n## Summary")[0].rstrip("\n")
    md += ("\n\n## Summary: means over presets and seeds\n\n" + g.to_markdown(index=False) +
           "\n\nDetector (same for every method), means over presets and seeds:\n\n" + det.to_markdown(index=False) + "\n")
    (REPORTS / "planted_hubs.md").write_text(md)
    print(md[-3000:])


if __name__ == "__main__":
    if "--summarize-only" in sys.argv:
        summarize()
    else:
        main()
