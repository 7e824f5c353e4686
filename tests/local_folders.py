"""Small generated ``local:`` folders of every layout a researcher may bring, and a fast notebook runner.

The embeddings come from the seeded synthetic generator (so the retrieval problem has the structure of CLIP
embeddings), written in the layouts :mod:`hubnorm.data.local` reads; each folder says in ``model_info.json``
which model it pretends to be (or nothing: an unknown model).

:func:`run_notebook_source` executes a notebook's jupytext source cell by cell in a fresh namespace with
parameters injected after its ``parameters`` cell (what papermill does), without starting a Jupyter kernel: the
whole test matrix then runs in a few minutes. ``tests/test_notebooks.py`` still runs every notebook through
papermill on a real folder.
"""

from __future__ import annotations

import csv
import json
import re
import time
from pathlib import Path
from typing import Dict, Optional

import numpy as np

#: The kinds of folder of the test matrix: name -> (layout, captions per image, images, texts?, model, dataset).
KINDS: Dict[str, dict] = {
    # per-caption rows, 5 captions per image, metadata.csv with texts, a published model
    "percap5-texts-clip": dict(layout="percap", per=5, n=90, texts=True, model="openai/clip-vit-base-patch32"),
    # image_embeddings.npy + text_embeddings.npy, one caption per image, no metadata, a model the papers never saw
    "pairs1-unknown": dict(layout="percap", per=1, n=120, texts=False, model="my-lab/own-encoder"),
    # stacked (2, n, d): one caption per image, no texts, no model_info.json
    "stacked1": dict(layout="stacked", per=1, n=120, texts=False, model=None),
    # one image row per image + per-caption text rows, grouped by metadata.csv image_id (no caption texts)
    "separate5-ids": dict(layout="separate", per=5, n=80, texts=False, model=None),
    # per-caption rows shuffled, the grouping given by metadata.csv (with texts); declared dataset
    "shuffled5-meta": dict(layout="shuffled", per=5, n=80, texts=True, model="ViT-B-32", dataset="flickr30k"),
    # a tiny set: 60 images, 5 captions each, no metadata (rows grouped)
    "tiny60": dict(layout="percap", per=5, n=60, texts=False, model=None),
}

_WORDS = ("dog", "cat", "man", "woman", "child", "bike", "beach", "street", "ball", "tree", "car", "horse")


def make_folder(root: Path, kind: str, *, seed: int = 0, d: int = 128) -> Path:
    """Write the folder ``root/kind`` (see :data:`KINDS`) and return its path."""
    from hubnorm.synthetic import make_dataset

    spec = KINDS[kind]
    n, per = spec["n"], spec["per"]
    syn = make_dataset("flickr30k", seed=seed, n_train_images=n, n_test_images=1, dim=d, captions_per_image=per)
    s = syn.split("train")
    images, caps, c2i = s.images.astype(np.float32), s.captions.astype(np.float32), s.caption_to_image
    folder = Path(root) / kind
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    texts = [f"a {_WORDS[int(i) % len(_WORDS)]} near a {_WORDS[(int(i) * 7 + j) % len(_WORDS)]} ({j})"
             for j, i in enumerate(c2i)]
    order = np.arange(len(c2i))
    if spec["layout"] == "shuffled":
        order = rng.permutation(len(c2i))
    if spec["layout"] == "stacked":
        np.save(folder / "features_clip.npy", np.stack([images, caps]))
    elif spec["layout"] == "separate":
        np.save(folder / "image_embeddings.npy", images)
        np.save(folder / "text_embeddings.npy", caps)
    else:
        np.save(folder / "image_embeddings.npy", images[c2i[order]])
        np.save(folder / "text_embeddings.npy", caps[order])
    if spec["layout"] in ("separate", "shuffled") or spec["texts"]:
        with open(folder / "metadata.csv", "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["image_id", "caption"] if spec["texts"] else ["image_id"])
            for j in order:
                w.writerow([f"img{int(c2i[j]):05d}", texts[j]] if spec["texts"] else [f"img{int(c2i[j]):05d}"])
    info = {k: v for k, v in (("model_name", spec.get("model")), ("dataset", spec.get("dataset"))) if v}
    if info:
        (folder / "model_info.json").write_text(json.dumps(info))
    return folder


#: Parameters that make each notebook take seconds on a tiny folder (sizes only; every method still runs).
FAST_PARAMS: Dict[str, dict] = {
    "00": {"dims": [2, 50], "n_points": 300},
    "01": {"n_boot": 20},
    "03": {"ks": [1, 4, 16, 64]},
    "04": {"dbsn_seeds": [0], "dbsn_fractions": [0.25, 0.0625, 0.00390625, 0.0009765625]},
    "05": {"iterations": [1, 10], "converged_max": 20, "taus": [0.005, 0.025], "plan_size": [8, 6]},
    "06": {"k_values": [10, 20]},
    "07": {"steps": 4, "log_every": 2, "taus": [0.01]},
}


def _cells(source: str):
    """(tags, code) of each code cell of a jupytext percent source."""
    parts = re.split(r"^# %%(.*)$", source, flags=re.M)
    for header, body in zip(parts[1::2], parts[2::2]):
        if "[markdown]" in header:
            continue
        yield header, body


def run_notebook_source(py_path: Path, parameters: Optional[dict] = None, *, cwd: Optional[Path] = None) -> float:
    """Execute a notebook's jupytext source (``notebooks/NN_name.py``) with ``parameters`` injected after its
    parameters cell, as papermill does; returns the seconds it took. Raises what the notebook raises."""
    import os

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = {"__name__": "__main__", "__file__": str(py_path)}   # as `python NN_name.py` (nb.setup reads its cell)
    t0 = time.perf_counter()
    old = Path.cwd()
    os.chdir(cwd or py_path.parent)
    try:
        for header, body in _cells(py_path.read_text(encoding="utf-8")):
            exec(compile(body, f"{py_path.name}:{header.strip() or 'cell'}", "exec"), ns)
            if '"parameters"' in header:
                ns.update(parameters or {})
            plt.close("all")
    finally:
        os.chdir(old)
    return time.perf_counter() - t0
