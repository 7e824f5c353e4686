"""Peak memory of NNN's bias computation on a 200,000 x 5,000 bank-by-target problem (d = 512).

The dense bank x target score matrix would take 200,000 x 5,000 x 4 B = 4.0 GB in float32; NNN only needs each
target's top-k bank similarities, which ``hubnorm.kernels.topk_similarity`` streams block by block. This script
measures, for a few configurations, the wall time of ``NearestNeighborNormalization.fit`` and the peak *extra*
resident memory it needs on top of its inputs (the 410 MB bank and the 10 MB targets).

Each configuration runs in a fresh subprocess so that baselines are clean:
1. the bank and targets are generated in chunks of 10,000 random unit rows written into preallocated tensors
   (so generation itself never holds more than one chunk of temporaries);
2. the baseline is the process RSS after generation;
3. ``fit`` runs while a thread samples the RSS every 5 ms (psutil); the peak extra memory is
   max(sampled RSS, ru_maxrss) - baseline (ru_maxrss also catches spikes between samples);
4. 64 of the offsets are checked against a dense top-k of those targets' rows.

Usage: python benchmarks/bench_nnn_memory.py [--quick]   (writes benchmarks/reports/nnn_memory.{md,csv})
Target: peak extra memory under 1 GB. Not a timed test: times depend on the (shared) machine.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPORTS = HERE / "reports"
N_BANK, N_TARGETS, DIM = 200_000, 5_000, 512
CONFIGS = [  # (label, k, block_bytes)
    ("k=16, default blocks (128 MiB)", 16, None),
    ("k=128, default blocks (128 MiB)", 128, None),
    ("k=512, default blocks (128 MiB)", 512, None),
    ("k=16, 32 MiB blocks", 16, 32 * 2**20),
]
GB = 1e9


def _child(k: int, block_bytes, n_bank: int, n_targets: int) -> dict:
    """Run one configuration in this (fresh) process and return its measurements."""
    import resource
    import threading

    import numpy as np
    import psutil
    import torch

    sys.path.insert(0, str(HERE.parent / "lib"))
    import hubnorm as hn

    proc = psutil.Process()

    def unit_rows(n, seed):
        out = torch.empty((n, DIM), dtype=torch.float32)
        gen = torch.Generator().manual_seed(seed)
        for s in range(0, n, 10_000):
            e = min(n, s + 10_000)
            x = torch.randn((e - s, DIM), generator=gen)
            out[s:e] = x / torch.linalg.vector_norm(x, dim=1, keepdim=True)
        return out

    rss_start = proc.memory_info().rss
    bank = unit_rows(n_bank, 1)
    targets = unit_rows(n_targets, 2)
    baseline = proc.memory_info().rss
    maxrss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB

    peak = [baseline]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            time.sleep(0.005)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    t0 = time.perf_counter()
    nnn = hn.NearestNeighborNormalization(alpha=0.75, k=k, device="cpu", block_bytes=block_bytes)
    nnn.fit(targets, query_bank=bank)
    elapsed = time.perf_counter() - t0
    stop.set()
    th.join()
    maxrss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    peak_rss = max(peak[0], maxrss_after)

    # correctness spot check: 64 targets against a dense top-k of their rows
    idx = torch.arange(0, n_targets, max(1, n_targets // 64))[:64]
    dense = (targets[idx] @ bank.T).topk(k, dim=1).values.mean(dim=1)
    err = float((nnn.bias_[idx] / 0.75 - dense).abs().max())
    return {
        "k": k, "block_bytes": block_bytes, "n_bank": n_bank, "n_targets": n_targets, "dim": DIM,
        "time_s": elapsed, "input_bytes": baseline - rss_start, "peak_extra_bytes": peak_rss - baseline,
        "peak_extra_sampled_bytes": peak[0] - baseline, "maxrss_before_fit": maxrss_before,
        "max_abs_err_vs_dense": err, "torch_threads": torch.get_num_threads(),
    }


def _machine() -> dict:
    import torch

    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import psutil
        mem = f"{psutil.virtual_memory().total / 2**30:.1f} GiB"
    except ImportError:
        mem = "unknown"
    return {
        "cpu": cpu, "cores": os.cpu_count(), "memory": mem, "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(), "python": platform.python_version(),
        "platform": platform.platform(), "load_avg_1m": f"{os.getloadavg()[0]:.2f}",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a 20,000 x 1,000 smoke run (does not write the report)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        cfg = json.loads(args.child)
        print(json.dumps(_child(**cfg)))
        return

    n_bank, n_targets = (20_000, 1_000) if args.quick else (N_BANK, N_TARGETS)
    rows = []
    for label, k, block_bytes in CONFIGS:
        cfg = json.dumps({"k": k, "block_bytes": block_bytes, "n_bank": n_bank, "n_targets": n_targets})
        out = subprocess.run([sys.executable, __file__, "--child", cfg], check=True, capture_output=True, text=True)
        res = json.loads(out.stdout.strip().splitlines()[-1])
        res["config"] = label
        rows.append(res)
        print(f"{label:34s} time {res['time_s']:7.1f} s  peak extra {res['peak_extra_bytes'] / GB:.3f} GB  "
              f"(inputs {res['input_bytes'] / GB:.3f} GB)  max |err| vs dense {res['max_abs_err_vs_dense']:.1e}",
              flush=True)
    if args.quick:
        return

    machine = _machine()
    REPORTS.mkdir(exist_ok=True)
    fields = ["config", "k", "block_bytes", "n_bank", "n_targets", "dim", "time_s", "input_bytes", "peak_extra_bytes",
              "peak_extra_sampled_bytes", "max_abs_err_vs_dense", "torch_threads"]
    with open(REPORTS / "nnn_memory.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    ok = all(r["peak_extra_bytes"] < GB for r in rows)
    lines = [
        "# NNN bias computation: time and peak memory (200,000 x 5,000, d = 512)",
        "",
        f"Generated by `python benchmarks/bench_nnn_memory.py` on {time.strftime('%Y-%m-%d')}.",
        "",
        "Problem: NNN offsets (alpha = 0.75) for 5,000 targets against a 200,000-item query bank of random unit",
        "vectors, float32, CPU. The dense bank x target matrix would need 4.0 GB; the inputs themselves take",
        f"{rows[0]['input_bytes'] / GB:.2f} GB (bank 0.41 GB + targets 0.01 GB). Peak extra memory = peak RSS during `fit`",
        "minus the RSS after the inputs were generated (psutil sampling every 5 ms and ru_maxrss; one fresh",
        "subprocess per configuration). Target: under 1 GB.",
        "",
        "Machine: " + ", ".join(f"{k} {v}" for k, v in machine.items()) + ".",
        "The machine is shared with other jobs, so times are indicative only; memory does not depend on load.",
        "",
        "| configuration | time (s) | peak extra memory (GB) | inputs (GB) | max abs error vs dense top-k |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['config']} | {r['time_s']:.1f} | {r['peak_extra_bytes'] / GB:.3f} | "
                     f"{r['input_bytes'] / GB:.3f} | {r['max_abs_err_vs_dense']:.1e} |")
    lines += ["", f"Result: every configuration {'stays under' if ok else 'does NOT stay under'} 1 GB of extra memory.", "",
              "Note: before input validation checked finiteness in row blocks (`hubnorm._validation.as_embeddings`),",
              "every configuration peaked at 0.68-0.72 GB extra whatever the block size: `torch.isfinite` on the",
              "whole 0.41 GB bank allocated ~1.75x its size. The top-k kernel itself needs about one block.", ""]
    (REPORTS / "nnn_memory.md").write_text("\n".join(lines))
    print(f"wrote {REPORTS / 'nnn_memory.md'}")


if __name__ == "__main__":
    main()
