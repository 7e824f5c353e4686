"""Calibration of the synthetic presets against zero-shot CLIP ViT-B/32 (prints and writes data/calibration_synthetic.md).

    .venv/bin/python scripts/calibrate_synthetic.py [--seed 0] [--out data/calibration_synthetic.md] [--skip-coco]

Every number computed here is on SYNTHETIC data (hubnorm.synthetic); the published values are the real CLIP
numbers the generator was tuned to reproduce. Targets (issue spec):
- raw t2i R@1 within 3 points of 30.4 (COCO 5k) and 58.8 (Flickr30k 1k);
- NNN gain in t2i R@1 (caption bank = train split, alpha/k chosen on the val split) within 2 points of +7.1 / +5.8;
- top-10 k-occurrence skewness of raw t2i test scores within 0.5 of 2.24 (Flickr30k, DBSN Table 5);
- query-aware IS (tau 0.02) and SN (tau 0.01, 10 iterations) both improve t2i R@1 with SN > IS (DBSN Table 2);
- mean matched / unmatched cosine and the modality gap within 20% of real CLIP ViT-B/32 embeddings
  (../shared/data/embeddings/flickr8k-100x5-clip-vitb32, or the constants in hubnorm.synthetic when absent);
- generating the COCO preset with a 100k-caption bank takes < 30 s.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "lib"))

import hubnorm as hn  # noqa: E402
from hubnorm.synthetic import PRESETS, REAL_CLIP_GEOMETRY, geometry_stats, make_dataset  # noqa: E402

SHARED = Path(os.environ.get("HUBNORM_SHARED_DATA", REPO.parent / "shared" / "data"))
REAL_DIR = SHARED / "embeddings" / "flickr8k-100x5-clip-vitb32"

PUBLISHED = {  # METHODS.md "Published reference numbers"
    "coco": {"raw": 30.4, "nnn_gain": 7.1, "src_raw": "NNN Table 1 (30.43)", "src_nnn": "NNN Table 1 (30.43 -> 37.53)"},
    "flickr30k": {"raw": 58.8, "nnn_gain": 5.8, "skew": 2.24, "is": 66.8, "sn": 69.3,
                  "src_raw": "NNN Table 1 (58.82)", "src_nnn": "NNN Table 1 (58.82 -> 64.60)"},
}
NNN_GRID = {"alpha": [0.5, 0.75, 1.0], "k": [16, 64]}


def real_geometry():
    if (REAL_DIR / "image_embeddings.npy").exists():
        imgs = np.load(REAL_DIR / "image_embeddings.npy")[::5]
        caps = np.load(REAL_DIR / "text_embeddings.npy")
        return geometry_stats(imgs, caps, np.arange(len(caps)) // 5), f"measured now on {REAL_DIR.name} (real CLIP ViT-B/32)"
    return dict(REAL_CLIP_GEOMETRY["flickr8k-100x5-clip-vitb32"]), \
        "constants recorded in hubnorm.synthetic.REAL_CLIP_GEOMETRY (shared folder absent)"


class Report:
    def __init__(self):
        self.rows, self.lines = [], []

    def say(self, text=""):
        print(text, flush=True)
        self.lines.append(text)

    def check(self, preset, target, published, ours, ok, rule):
        self.rows.append((preset, target, published, ours, rule, "PASS" if ok else "FAIL"))
        self.say(f"  [{'PASS' if ok else 'FAIL'}] {preset:9s} {target:38s} published {published:>10s}   synthetic {ours:>10s}   ({rule})")


def r1(norm, task):
    return hn.evaluate(norm, task)["R@1"]


def select_nnn(val):
    """NNN alpha, k maximising R@1 on the val task over NNN_GRID (as hubnorm.grid_search, first best wins), with one
    bias computation per k: NNN's bias is linear in alpha, so the alpha=1 fit is rescaled for the other alphas."""
    best, best_r1 = None, -1.0
    for k in NNN_GRID["k"]:
        fitted = val.fit(hn.NearestNeighborNormalization(alpha=1.0, k=k))
        bias = fitted.bias_.clone()
        for alpha in NNN_GRID["alpha"]:
            fitted.alpha, fitted.bias_ = alpha, alpha * bias
            fitted.offsets_ = -fitted.bias_
            score = r1(fitted, val)
            if score > best_r1:
                best, best_r1 = {"alpha": alpha, "k": k}, score
    return best


def calibrate(preset, seed, rep, real):
    pub = PUBLISHED[preset]
    rep.say(f"\n== preset {preset!r} (synthetic-{preset}, seed {seed}) ==")
    t0 = time.perf_counter()
    ds = make_dataset(preset, seed=seed)
    gen_s = time.perf_counter() - t0
    sizes = {k: f"{s.n_images} img / {s.n_captions} cap" for k, s in ds.splits.items()}
    rep.say(f"  generated in {gen_s:.1f} s: {sizes}")
    test = ds.split("test")
    t2i = ds.tasks("test", "train", directions=("t2i",))["t2i"]
    val = ds.tasks("val", "train", directions=("t2i",))["t2i"]
    raw = r1(t2i.fit(hn.Identity()), t2i)
    rep.check(preset, "raw t2i R@1", f"{pub['raw']:.1f}", f"{raw:.2f}", abs(raw - pub["raw"]) <= 3, "within 3 points")
    # NNN: caption bank = train split; alpha, k chosen on val (NNN App. B)
    best = select_nnn(val)
    nnn = r1(t2i.fit(hn.NearestNeighborNormalization(**best)), t2i)
    gain = nnn - raw
    rep.check(preset, f"NNN gain t2i R@1 (val-picked {best})".replace("'", ""), f"+{pub['nnn_gain']:.1f}",
              f"{gain:+.2f}", abs(gain - pub["nnn_gain"]) <= 2, "within 2 points")
    rep.say(f"         NNN t2i R@1 {raw:.2f} -> {nnn:.2f} (bank: {ds.split('train').n_captions} train captions)")
    h = hn.hubness(t2i.fit(hn.Identity()), k=10, queries=t2i.queries)
    if "skew" in pub:
        rep.check(preset, "top-10 k-occurrence skewness (raw t2i)", f"{pub['skew']:.2f}", f"{h['skewness']:.2f}",
                  abs(h["skewness"] - pub["skew"]) <= 0.5, "within 0.5")
    else:
        rep.say(f"         top-10 k-occurrence skewness (raw t2i) {h['skewness']:.2f} (no published target)")
    if "is" in pub:
        is_ = r1(t2i.fit(hn.InvertedSoftmax(tau=0.02), query_aware=True), t2i)
        sn = r1(t2i.fit(hn.SinkhornNormalization(tau=0.01, n_iter=10), query_aware=True), t2i)
        rep.check(preset, "query-aware IS t2i R@1 (tau 0.02)", f"{pub['is']:.1f}", f"{is_:.2f}", is_ > raw, "improves on raw")
        rep.check(preset, "query-aware SN t2i R@1 (tau 0.01, T=10)", f"{pub['sn']:.1f}", f"{sn:.2f}", sn > is_, "SN > IS")
        rep.say(f"         DBSN Table 2 chain {pub['raw']} -> IS {pub['is']} -> SN {pub['sn']};  synthetic {raw:.2f} -> IS {is_:.2f} -> SN {sn:.2f}")
    g = geometry_stats(test.images, test.captions, test.caption_to_image)
    for key, label in (("matched_cos", "mean cosine, matched pairs"), ("unmatched_cos", "mean cosine, unmatched pairs"),
                       ("modality_gap", "modality gap, norm(mean img - mean cap)")):
        rel = abs(g[key] - real[key]) / abs(real[key])
        rep.check(preset, label, f"{real[key]:.3f}", f"{g[key]:.3f}", rel <= 0.2, f"within 20% ({100 * rel:.0f}% off)")
    return gen_s


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(REPO / "data" / "calibration_synthetic.md"))
    ap.add_argument("--skip-coco", action="store_true", help="only the (cheaper) flickr30k preset")
    args = ap.parse_args(argv)
    rep = Report()
    real, real_src = real_geometry()
    rep.say("Calibration of hubnorm.synthetic (SYNTHETIC data) against zero-shot CLIP ViT-B/32")
    rep.say(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch threads {hn.__dict__.get('torch', __import__('torch')).get_num_threads()}")
    rep.say(f"real geometry reference: {real_src}: " + ", ".join(f"{k} {v:.3f}" for k, v in real.items() if k in ("matched_cos", "unmatched_cos", "modality_gap")))
    t_all = time.perf_counter()
    presets = ["flickr30k"] + ([] if args.skip_coco else ["coco"])
    for p in presets:
        calibrate(p, args.seed, rep, real)
    if not args.skip_coco:
        rep.say("\n== generation time: COCO preset with a 100k-caption bank ==")
        t0 = time.perf_counter()
        ds = make_dataset("coco", seed=args.seed, n_train_images=20000)
        dt = time.perf_counter() - t0
        rep.check("coco", "generate (20k train img = 100k bank captions)", "< 30 s", f"{dt:.1f} s", dt < 30,
                  f"{sum(s.n_captions for s in ds.splits.values())} captions + {sum(s.n_images for s in ds.splits.values())} images in total")
        del ds
    n_fail = sum(r[-1] == "FAIL" for r in rep.rows)
    rep.say(f"\n{len(rep.rows) - n_fail}/{len(rep.rows)} targets met; total {time.perf_counter() - t_all:.0f} s")
    write_markdown(Path(args.out), rep, real_src, args.seed)
    return 1 if n_fail else 0


def write_markdown(path, rep, real_src, seed):
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["# Calibration of the synthetic presets (hubnorm.synthetic)", "",
             "Written by `scripts/calibrate_synthetic.py`. **All 'synthetic' values are computed on synthetic data**; the",
             "published values are real zero-shot CLIP ViT-B/32 numbers (NNN Table 1, DBSN Tables 2 and 5) or real-embedding",
             f"geometry ({real_src}). Seed {seed}; t2i = text-to-image. NNN: caption bank = synthetic train split, alpha and k",
             f"picked on the synthetic val split over {NNN_GRID}. IS / SN: query-aware (bank = the test captions).", "",
             "| preset | target | published / real | synthetic | rule | result |", "|---|---|---|---|---|---|"]
    lines += [f"| {' | '.join(r)} |" for r in rep.rows]
    lines += ["", "Presets (hubnorm.synthetic.PRESETS):", ""]
    for name, cfg in PRESETS.items():
        lines.append(f"- `{name}`: " + ", ".join(f"{k}={v}" for k, v in cfg.to_dict().items() if k != "name"))
    lines += ["", "Full log:", "", "```", *rep.lines, "```", ""]
    path.write_text("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
