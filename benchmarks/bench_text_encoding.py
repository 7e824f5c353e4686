"""Notebook 07's one-time caption encoding (all-MiniLM-L6-v2 on the CPU): texts per second by batch size and precision.

    .venv/bin/python benchmarks/bench_text_encoding.py [--texts 2000] [--rounds 2]

Each configuration encodes the same texts through ``SentenceEncoder.text_features`` (sentence-transformers sorts a
call's texts by length before batching); every round runs every configuration once, the order reversed every other
round, in one process. ``max |1 - cos|``: the largest difference, over the texts, from the float32 embeddings at
the default batch size (what the cache holds today). The texts: the Flickr8k captions of the shared annotations when
``HUBNORM_SHARED_DATA`` points at them (real caption lengths), else seeded caption-like sentences. Writes
``reports/text_encoding.{md,csv}``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from pathlib import Path

import numpy as np

from _common import settle, write_report

def caption_texts(n: int):
    root = os.environ.get("HUBNORM_SHARED_DATA")
    path = Path(root or "/nonexistent") / "annotations" / "flickr8k" / "Flickr8k.token.clean.txt"
    if path.is_file():
        lines = [ln.split("\t", 1)[1] for ln in path.read_text().splitlines() if "\t" in ln]
        return lines[:n], f"the first {min(n, len(lines))} Flickr8k captions (Flickr8k.token.clean.txt)"
    rng = np.random.default_rng(0)
    words = ("a man woman dog child two people on the in with of red blue standing sitting street grass water "
             "running playing holding ball near building shirt white black young group").split()
    texts = [" ".join(rng.choice(words, size=int(rng.integers(6, 20)))) for _ in range(n)]
    return texts, f"{n} seeded caption-like sentences (6-19 words)"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--texts", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batches", type=int, nargs="+", default=[32, 64, 128, 256, 512])
    args = ap.parse_args(argv)
    if args.texts < 1 or args.rounds < 1 or min(args.batches) < 1:
        raise SystemExit("error: --texts, --rounds and every --batches value must be positive integers")

    import torch
    from hubnorm.data.encoders.sentence import load_text_encoder

    texts, texts_note = caption_texts(args.texts)
    enc = load_text_encoder()
    default = enc.batch_size          # the library's default batch size: the reference configuration

    def encode(batch: int, bf16: bool):
        enc.batch_size = batch        # the encoder's own call (sentence-transformers' encode, unit rows)
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
        with ctx, torch.inference_mode():
            return np.asarray(enc.text_features(texts), np.float32)

    ref = encode(default, False)                  # also warms the model up (untimed)
    batches = sorted(set(args.batches) | {default})
    configs = [(b, False) for b in batches] + [(b, True) for b in batches if b >= default]
    times = {c: [] for c in configs}
    dev = {}
    for r in range(args.rounds):
        for c in (configs if r % 2 == 0 else configs[::-1]):
            settle()
            t0 = time.perf_counter()
            x = encode(*c)
            times[c].append(time.perf_counter() - t0)
            dev[c] = float(np.max(np.abs(1.0 - np.sum(x * ref, axis=1))))
            print(f"round {r} batch {c[0]} {'bf16' if c[1] else 'fp32'}: {times[c][-1]:.2f} s", flush=True)
    base = float(np.median(times[(default, False)]))
    rows = []
    for c in configs:
        med = float(np.median(times[c]))
        rows.append({"batch size": c[0], "precision": "bfloat16 autocast" if c[1] else "float32",
                     "seconds (median)": med, "seconds (all rounds)": ", ".join(f"{t:.2f}" for t in times[c]),
                     "texts / s": len(texts) / med, "x default": med / base,
                     "max abs(1 - cos) vs float32": f"{dev[c]:.1e}"})
    write_report("text_encoding", "Caption encoding for notebook 07 (all-MiniLM-L6-v2, CPU): batch size and precision",
                 f"Texts: {texts_note}. `python benchmarks/bench_text_encoding.py --texts {args.texts} --rounds "
                 f"{args.rounds}`: every configuration once per round, the order reversed every other round, one "
                 f"process. x default = median seconds / median seconds at batch size {default} in float32 (the "
                 "encoder's default).", rows)

if __name__ == "__main__":
    main()
