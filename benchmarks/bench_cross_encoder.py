"""Latency of the BLIP ITM cross-encoder (base architecture, random weights) and of bi-encoder top-k on this machine.

Writes benchmarks/reports/cross_encoder_latency.csv (key,value,unit,note; read by hubnorm_companion.rerank_cost.load_cost_model)
and cross_encoder_latency.md. Random weights: ``BlipForImageTextRetrieval(BlipConfig())`` has exactly the
architecture of Salesforce/blip-itm-base-coco (ViT-B/16 at 384 px, BERT-base text encoder with cross-attention),
so the compute per pair is the same as with the real weights; no download is needed.

Measured (a few batches only; CPU runs are slow):
  pair_full_s    full ITM forward per pair (vision tower + text encoder with cross-attention), distinct images
  image_embed_s  vision tower per image (also the cost of embedding one gallery image for the bi-encoder)
  pair_text_s    ITM text encoder per pair given cached image features
  query_embed_s  one caption embedded by the unimodal text encoder + projection (batch 1: a live query)
  topk_<n>_s     exact top-20 over n random 256-d unit vectors (BLIP's embedding size), one query
Preprocessing (image decoding / resizing, tokenisation) is excluded: inputs are random tensors.

Usage: .venv/bin/python benchmarks/bench_cross_encoder.py [--pairs-batch 4] [--repeats 2] [--threads N]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "lib"))
sys.path.insert(1, str(REPO / "companion"))   # hubnorm_companion

from hubnorm_companion.rerank_cost import CostModel, format_seconds, measure_topk_seconds  # noqa: E402

OUT = REPO / "benchmarks" / "reports"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def timed(fn, repeats: int):
    """Median (wall seconds, process CPU seconds) of ``repeats`` calls."""
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return float(np.median(wall)), float(np.median(cpu))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs-batch", type=int, default=2, help="pairs per full forward (default 2)")
    ap.add_argument("--text-batch", type=int, default=16, help="pairs per text-only ITM forward (default 16)")
    ap.add_argument("--tokens", type=int, default=24, help="caption length in tokens incl. [CLS]/[SEP] (default 24)")
    ap.add_argument("--repeats", type=int, default=2, help="timed repeats per measurement (median; default 2)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (default 1: on a shared machine one thread gives CPU times that do not depend "
                         "on the other jobs; with more threads CPU time sums over threads)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers
    from transformers import BlipConfig, BlipForImageTextRetrieval

    t_start = time.perf_counter()
    gpu = torch.cuda.is_available()
    device = torch.device("cuda" if gpu else "cpu")
    torch.manual_seed(0)
    cfg = BlipConfig()  # defaults = blip-itm-base-coco architecture
    model = BlipForImageTextRetrieval(cfg).eval().to(device)
    n_params = sum(p.numel() for p in model.parameters())
    size = cfg.vision_config.image_size
    B, T, L = args.pairs_batch, args.text_batch, args.tokens
    g = torch.Generator().manual_seed(0)
    pix = torch.randn(B, 3, size, size, generator=g).to(device)
    ids = torch.randint(1000, 20000, (max(B, T), L), generator=g).to(device)
    ids[:, 0] = 101
    att = torch.ones_like(ids)
    sync = torch.cuda.synchronize if gpu else (lambda: None)

    with torch.inference_mode():
        def full():
            out = model(input_ids=ids[:B], pixel_values=pix, attention_mask=att[:B], use_itm_head=True)
            torch.softmax(out.itm_score, -1)[:, 1].cpu()
            sync()

        def vision():
            model.vision_model(pixel_values=pix).last_hidden_state.cpu()
            sync()

        img_feat = model.vision_model(pixel_values=pix[:1]).last_hidden_state  # one image shared by T captions
        feats = img_feat.expand(T, -1, -1)
        ones = torch.ones(feats.shape[:-1], dtype=torch.long, device=device)

        def text_itm():
            h = model.text_encoder(input_ids=ids[:T], attention_mask=att[:T], encoder_hidden_states=feats,
                                   encoder_attention_mask=ones).last_hidden_state
            model.itm_head(h[:, 0]).cpu()
            sync()

        def query():
            h = model.text_encoder(input_ids=ids[:1], attention_mask=att[:1]).last_hidden_state
            torch.nn.functional.normalize(model.text_proj(h[:, 0]), dim=-1).cpu()
            sync()

        full()  # warm-up (allocations, kernels)
        w_full, c_full = (x / B for x in timed(full, args.repeats))
        w_vision, c_vision = (x / B for x in timed(vision, args.repeats))
        text_itm()
        w_text, c_text = (x / T for x in timed(text_itm, args.repeats))
        query()
        w_query, c_query = timed(query, max(3, args.repeats))

    emb_dim = cfg.image_text_hidden_size  # BLIP's retrieval embedding (vision_proj / text_proj output), 256
    topk = {n: measure_topk_seconds(n, dim=emb_dim, k=20, repeats=5 if n <= 100_000 else 3,
                                    clock=time.process_time)
            for n in (1_000, 5_000, 50_000, 100_000, 1_000_000)}
    ns = np.array(sorted(topk), dtype=float)
    slope, base = np.polyfit(ns, np.array([topk[int(n)] for n in ns]), 1, w=1.0 / ns)  # relative errors
    base = max(0.0, float(base))
    wall = time.perf_counter() - t_start

    machine = f"{cpu_model()}, {torch.get_num_threads()} torch threads, {os.cpu_count()} logical CPUs"
    rows = [
        ("machine", machine, "", "CPU model from /proc/cpuinfo"),
        ("gpu", "not available in this run" if not gpu else torch.cuda.get_device_name(0), "", ""),
        ("device", str(device), "", ""),
        ("torch", torch.__version__, "", ""),
        ("transformers", transformers.__version__, "", ""),
        ("python", platform.python_version(), "", ""),
        ("date", dt.date.today().isoformat(), "", ""),
        ("loadavg_1min", f"{os.getloadavg()[0]:.2f}", "", "shared machine: other jobs may inflate timings"),
        ("model", "BlipForImageTextRetrieval(BlipConfig()) random init = Salesforce/blip-itm-base-coco architecture",
         "", f"{n_params / 1e6:.1f}M parameters, image {size}px, fp32"),
        ("pair_full_s", c_full, "s/pair", f"CPU time: full ITM forward, batch {B} pairs with distinct images, {L} tokens"),
        ("image_embed_s", c_vision, "s/image", f"CPU time: vision tower, batch {B}"),
        ("pair_text_s", c_text, "s/pair", f"CPU time: ITM text encoder with cached image features, batch {T}, {L} tokens"),
        ("query_embed_s", c_query, "s/query", f"CPU time: unimodal text encoder + projection, batch 1, {L} tokens"),
        ("pair_full_wall_s", w_full, "s/pair", "wall time of the same (inflated by other jobs on a shared machine)"),
        ("image_embed_wall_s", w_vision, "s/image", "wall time"),
        ("pair_text_wall_s", w_text, "s/pair", "wall time"),
        ("query_embed_wall_s", w_query, "s/query", "wall time"),
    ]
    rows += [(f"topk_{n}_s", v, "s/query", f"CPU time: exact top-20 over {n:,} x {emb_dim}-d float32, torch")
             for n, v in topk.items()]
    rows += [("topk_per_target_s", float(slope), "s/target", "least-squares slope over the topk_* rows"),
             ("topk_base_s", base, "s", "intercept (clipped at 0)"),
             ("repeats", args.repeats, "", "median of this many timed runs after one warm-up"),
             ("bench_wall_s", wall, "s", "whole benchmark")]
    df = pd.DataFrame(rows, columns=["key", "value", "unit", "note"])
    args.out.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out / "cross_encoder_latency.csv", index=False)
    if args.out.resolve() == OUT.resolve():  # the default report: refresh the copy shipped as package data too
        df.to_csv(REPO / "companion" / "hubnorm_companion" / "cross_encoder_latency.csv", index=False)

    t_full, t_vision, t_text, t_query = c_full, c_vision, c_text, c_query
    cm = CostModel(pair_s=t_full, query_embed_s=t_query, topk_per_target_s=float(slope), topk_base_s=base,
                   image_embed_s=t_vision, machine=machine)
    cm_text = CostModel(pair_s=t_text, query_embed_s=t_query, topk_per_target_s=float(slope), topk_base_s=base,
                        image_embed_s=t_vision, machine=machine)
    t3 = cm.table3()[["model", "50,000", "1,000,000"]]
    t3t = cm_text.table3()[["model", "50,000", "1,000,000"]]
    t4 = cm.table4()[["model", "1,000", "5,000", "100,000"]]
    meas = df[df["unit"] != ""].copy()
    meas["value"] = [(f"{float(v) * 1e3:.4g} ms" if float(v) >= 1e-3 else f"{float(v) * 1e6:.4g} us")
                     if u.startswith("s/") or u == "s" else str(v) for v, u in zip(meas["value"], meas["unit"])]
    md = [
        "# Cross-encoder latency (BLIP ITM base, random weights)",
        "",
        f"- Machine: {machine}",
        f"- GPU: {'not available in this run' if not gpu else torch.cuda.get_device_name(0)}",
        f"- torch {torch.__version__}, transformers {transformers.__version__}, Python {platform.python_version()}, "
        f"{dt.date.today().isoformat()}; 1-min load average at the end {os.getloadavg()[0]:.2f} (shared machine)",
        f"- Model: `BlipForImageTextRetrieval(BlipConfig())`, {n_params / 1e6:.1f}M parameters, {size}px, fp32, "
        "random init (same compute as `Salesforce/blip-itm-base-coco`). Inputs are random tensors: image decoding, "
        "resizing and tokenisation are not included.",
        f"- {torch.get_num_threads()} torch thread(s). Unit costs are process CPU seconds (median of {args.repeats} timed "
        "runs after a warm-up): on this shared machine (load average above the 2 cores) wall times are inflated "
        "by other jobs and are listed separately; with one thread, CPU seconds = wall seconds on an idle core. "
        "A few batches only: expect +-20%.",
        f"- Benchmark wall time {wall:.0f} s. Regenerate: `.venv/bin/python benchmarks/bench_cross_encoder.py`",
        "",
        "## Measured unit costs",
        "",
        meas.to_markdown(index=False),
        "",
        "## Cost model (Geigle et al. Tables 3-4), extrapolated from the unit costs",
        "",
        "Per query: EMB = query embedding + top-20 over n targets; Co = EMB + 20 cross-encoder pairs; "
        "CE = n pairs. A pair = one full ITM forward (the image tower cannot be cached for 1M images at "
        "577x768 floats each).",
        "",
        "### Table 3: latency of one query (this CPU)",
        "",
        t3.to_markdown(index=False),
        "",
        "Same with image features cached (a pair = ITM text encoder only):",
        "",
        t3t.to_markdown(index=False),
        "",
        "### Table 4: evaluating t2i on a test set of n images (5 captions each, k = 20; this CPU)",
        "",
        t4.to_markdown(index=False),
        "",
        "Published (1 V100, batch 512): Table 3 CE 2 min / 36 min per query at 50k / 1M, Co 74 ms / 94 ms, "
        "EMB 16 ms / 37 ms; CPU CE 2.4 h / 47 h. Table 4 CE 2 h (1k), 50 h (5k).",
        "",
    ]
    (args.out / "cross_encoder_latency.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
