"""The ``hubnorm`` command: from embeddings (or score matrices) to a retrieval system.

    hubnorm diagnose <source>                 hubness of the raw scores, the hubs and what they win, verdicts
    hubnorm choose   <source>                 the method and parameters, and the R@1 gain to expect (with a CI)
    hubnorm export   <source> --method nnn    fitted offsets, [t, h] vectors for an inner-product index, manifest
    hubnorm check    <export dir> [--source]  verify an export (checksums; with the source: bank and offsets)

``<source>`` is any source the loaders accept: ``synthetic:<preset>``, ``cache:...``, ``local:<folder>``,
``real:<release>`` (embeddings; the ``test`` split is scored, the ``train`` split is the reference bank) or
``sims:<folder>`` (score matrices, :mod:`hubnorm.data.sims`). Every direction of the source is run unless
``--direction`` names one. Embeddings are read as float64 unit rows.

One path for both kinds: each direction becomes a :class:`hubnorm.RetrievalTask` of score matrices (embeddings
through :class:`hubnorm.matrices.ProductScores`, computed block by block, never a whole bank x gallery matrix),
fitted and
evaluated by the library's own engine. The offsets of an offset method ``h`` make the normalised score
``S + h``; ``<[q, 1], [t, h]> = q . t + h`` (NNN paper, Sec. 3.1) lets any inner-product index serve it.

Exit codes: 0 done; 1 ``diagnose`` reached the verdict of ``--fail-on``; 2 bad input (a sentence on stderr names
the argument and the fix); 3 ``check`` found a mismatch.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

EXIT_OK, EXIT_VERDICT, EXIT_BAD_INPUT, EXIT_MISMATCH = 0, 1, 2, 3
#: the format of an export folder's manifest.json (bumped when its keys change meaning)
EXPORT_FORMAT = "hubnorm-export/1"
#: the methods ``choose`` compares by default: offset methods (an index can serve them) that read scores only
DEFAULT_METHODS = ("nnn", "is", "sn", "dbsn")
#: the geometry of the test split (hubnorm.geometry.embedding_statistics) needs more test items and texts than this
GEOMETRY_MIN_ITEMS = 10

#: Verdict thresholds of ``diagnose``, ``(warn from, fail from)``, on the *excess* of each statistic of the raw test
#: scores' N_k (:func:`hubnorm.hubness_stats`) over its value under random retrieval of the same sizes (every query's
#: top k a uniform draw: N_k ~ Binomial(queries, k / targets), :func:`null_statistics`), so that a small mean N_k
#: (five captions per image in i2t: a mean N_10 of 2) is not read as hubness. Conventions set before any data set
#: was run through the command, not fitted to one: a skewness of N_k 1 above chance is a clearly right-tailed
#: occurrence distribution (hubs), 3 above it a few targets taking most of the top-k slots; hubs = targets with
#: N_k >= 2x its mean; anti-hubs = targets in no query's top k.
THRESHOLDS = {
    "skewness": (1.0, 3.0, "skewness of N_k"),
    "hub_share": (0.05, 0.15, "share of targets with N_k >= 2x the mean (hubs)"),
    "antihub_share": (0.10, 0.30, "share of targets in no query's top k (anti-hubs)"),
}
_LEVELS = ("ok", "warn", "fail")

#: What the label-free choice has done before (``benchmarks/reports/label_free.md``, its real sets: COCO-500 CLIP
#: ViT-B/16, Flickr8k-100x5 CLIP ViT-B/32, AudioCaps LAION-CLAP; both directions, NNN / IS / SN, 5 seeded splits
#: each: 90 choices). tests/test_cli.py checks these numbers against that report's CSV.
LABEL_FREE_TRACK_RECORD = {"choices": 90, "predictor_right": 78, "raised_r1": 66,
                           "mean_minus_labelled": 0.96, "min_minus_labelled": -1.18, "max_minus_labelled": 2.56}


# ============================================================================================== the data
@dataclass
class Direction:
    """One retrieval direction of a source, as score matrices (``task``), with its embeddings when the source has
    them (``queries``, ``targets``, ``query_bank``, ``target_bank``; None for a ``sims:`` folder)."""

    name: str
    task: object   # hubnorm.RetrievalTask (of score matrices)
    queries: Optional[np.ndarray] = None
    targets: Optional[np.ndarray] = None
    query_bank: Optional[np.ndarray] = None
    target_bank: Optional[np.ndarray] = None
    target_ids: Optional[List[str]] = None
    bank: Dict[str, object] = field(default_factory=dict)   # provenance of the reference banks


@dataclass
class Source:
    source: str
    kind: str            # "embeddings" or "scores"
    synthetic: bool
    label: str
    directions: Dict[str, Direction]
    flags: List[str] = field(default_factory=list)
    data: object = None  # the hubnorm.media.MediaData the tasks were built from (None: score matrices)


def json_schema() -> dict:
    """The JSON schema of every ``--json`` output and of an export's manifest.json (``hubnorm/schemas``)."""
    from importlib.resources import files

    return json.loads(files("hubnorm").joinpath("schemas/cli.schema.json").read_text())


def digest(arr) -> str:
    """sha256 of an array's shape, dtype and values (row blocks, so a memory map is never read whole)."""
    a = np.asarray(arr)
    h = hashlib.sha256(f"{a.shape}|{a.dtype.str}|".encode())
    rows = max(1, (1 << 24) // max(1, a[0].nbytes if a.ndim and len(a) else 1))
    for r0 in range(0, len(a) if a.ndim else 1, rows):
        h.update(np.ascontiguousarray(a[r0:r0 + rows] if a.ndim else a).tobytes())
    return h.hexdigest()


def _parse_options(options: Sequence[str], flag: str = "--source-option",
                   example: str = "n_test_images=200") -> Dict[str, object]:
    """``KEY=VALUE`` items of ``flag`` (``--source-option n_test_images=200``, ``--param k=16``): numbers,
    true/false, or text; a key given twice is an error."""
    out = {}
    for item in options or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{flag} {item!r} must be KEY=VALUE, e.g. {flag} {example}")
        if key.strip() in out:
            raise ValueError(f"{flag} {key.strip()} is given twice: give each key once")
        v: object = value
        if value.lower() in ("true", "false"):
            v = value.lower() == "true"
        else:
            for cast in (int, float):
                try:
                    v = cast(value)
                    break
                except ValueError:
                    pass
        out[key.strip()] = v
    return out


def open_source(source: str, *, directions: Optional[Sequence[str]] = None,
                options: Optional[Dict[str, object]] = None, seed: int = 0) -> Source:
    """Load ``source`` (:func:`hubnorm.media.load_media`, the loader of every source kind: image, video and audio
    embeddings, synthetic presets, ``sims:`` folders) and keep one :class:`Direction` per retrieval direction (all
    of them, or ``directions``), with the embeddings and the banks' provenance."""
    from .data.sources import source_kind
    from .media import is_preset, load_media

    kind, _ = source_kind(source)   # one message for every malformed source (hubnorm.data.sources)
    kwargs = dict(options or {})
    if "seed" in kwargs:   # the split's seed: named as the user gave it, not as the loader calls it
        from ._validation import check_seed

        kwargs["seed"] = check_seed(kwargs["seed"], "--source-option seed")
    if kind.splits:
        kwargs.setdefault("seed", seed)   # the seed of the test / train split of a folder or release
        kwargs.setdefault("val", False)   # the whole training split is the reference bank
    if kind.holds == "scores" and kwargs:
        raise ValueError(f"--source-option {sorted(kwargs)}: a sims: folder takes no loader options")
    n_train = kwargs.pop("n_train", None) if is_preset(source) else None   # a video / audio preset's bank size
    if is_preset(source) and kwargs:
        raise ValueError(f"--source-option {sorted(kwargs)[0]}: the video / audio preset {source} takes only n_train "
                         "(its training items; the test size is the data set's)")
    src = load_media(source, seed=seed, n_train=n_train, source_kwargs=kwargs or None)
    wanted = _check_directions(directions, src.directions, source)
    data, out = src.data, {}
    for d in wanted:
        task = src.tasks[d]
        if data is None:   # score matrices: the bank matrices, by file and content hash
            out[d] = Direction(d, task, bank=_matrix_bank(task))
            continue
        forward = d == src.directions[0]   # text -> item; the other direction: item -> text
        queries, targets = (data.captions, data.items) if forward else (data.items, data.captions)
        qbank, tbank = (data.bank_captions, data.bank_items) if forward else (data.bank_items, data.bank_captions)
        ids = data.item_ids if forward else (None if data.caption_texts is None else
                                             [t if len(t) <= 40 else t[:39] + "…" for t in data.caption_texts])
        bank = {"kind": "embeddings", "split": "train" if qbank is not None else None}
        for name, b in (("query_bank", qbank), ("target_bank", tbank)):
            bank[name] = None if b is None else {"rows": int(len(b)), "sha256": digest(b)}
        out[d] = Direction(d, task, queries, targets, qbank, tbank, ids, bank)
    kind = "scores" if data is None else "embeddings"
    flags = list(src.tasks[wanted[0]].meta.get("flags", [])) if data is None else []
    return Source(source, kind, src.synthetic, src.label, out, flags, data)


def _matrix_bank(task) -> dict:
    """The provenance of a sims: task's bank matrices: each one's file and sha256 (the manifest's checksum when it
    lists one, else hashed here), and of the bank embeddings its manifest lists (rows and content hash)."""
    from .data.cache import sha256_file
    from .data.sims import read_manifest

    man, _ = read_manifest(Path(task.meta["folder"]))
    sums = man.get("checksums") or {}
    bank = {}
    for (rows, cols), m in task.scores.items():
        if (rows, cols) == ("queries", "targets"):
            continue
        path = Path(m.label)
        bank[f"{rows} x {cols}"] = {"shape": list(m.shape), "file": path.name,
                                    "sha256": sums.get(path.name) or sha256_file(path)}
    out = {"kind": "score matrices", "matrices": bank}
    embedded = {name: {"rows": int(len(x)), "sha256": digest(x)} for name in ("query_bank", "target_bank")
                if (x := getattr(task, name)) is not None}
    return {**out, "embeddings": embedded} if embedded else out


def _check_directions(directions, available, source) -> tuple:
    if not directions:
        return tuple(available)
    unknown = [d for d in directions if d not in available]
    if unknown:
        raise ValueError(f"--direction {unknown[0]!r}: {source} has the directions {list(available)}")
    return tuple(directions)


# ============================================================================================== diagnose
def _top1(task, normalizer=None) -> np.ndarray:
    """Each test query's top-1 target (ties: the lowest index, the library's rank rule)."""
    from .normalizers.base import stable_topk

    out = np.empty(task.n_queries, dtype=np.int64)
    for q0, s in task.blocks(normalizer):
        out[q0:q0 + s.shape[0]] = stable_topk(s, 1)[1][:, 0].numpy()
    return out


def verdict(stat: str, excess: float) -> str:
    """The level of ``stat``'s excess over random retrieval (:data:`THRESHOLDS`)."""
    warn, fail, _ = THRESHOLDS[stat]
    return "fail" if excess >= fail else "warn" if excess >= warn else "ok"


def null_statistics(n_queries: int, n_targets: int, k: int, hub_factor: float = 2.0) -> Dict[str, float]:
    """The statistics of :data:`THRESHOLDS` under random retrieval: each query's top ``k`` a uniform draw of the
    ``n_targets``, so ``N_k`` of a target is Binomial(``n_queries``, ``k / n_targets``) (exact for the skewness;
    shares as the binomial's probabilities)."""
    from scipy import stats

    p = k / n_targets
    mean = n_queries * p
    var = mean * (1.0 - p)
    return {"skewness": float((1.0 - 2.0 * p) / np.sqrt(var)) if var > 0 else 0.0,
            "hub_share": float(stats.binom.sf(np.ceil(hub_factor * mean) - 1, n_queries, p)),
            "antihub_share": float(stats.binom.pmf(0, n_queries, p))}


def diagnose_direction(d: Direction, *, k: int = 10, hubs: int = 10) -> dict:
    from .evaluation import positive_ranks, summarize_ranks
    from .hubness import hubness_stats, k_occurrence

    task = d.task
    if k > task.n_targets:
        raise ValueError(f"--k {k} exceeds the gallery size {task.n_targets} of {d.name}: choose a smaller k")
    n_k = k_occurrence(task.blocks(), k)
    stats = hubness_stats(n_k, k, task.n_queries)
    top1 = _top1(task)
    pos = task.positives
    correct = np.zeros(task.n_queries, dtype=bool)
    q_of = pos.query_of_entry
    correct[q_of[pos.indices == top1[q_of]]] = True
    wins = np.bincount(top1, minlength=task.n_targets)
    wrong = np.bincount(top1[~correct], minlength=task.n_targets)
    order = np.lexsort((np.arange(task.n_targets), -n_k))[:hubs]
    hub_rows = [{"target": int(t), "id": None if d.target_ids is None else str(d.target_ids[t]),
                 "n_k": int(n_k[t]), "hub": bool(n_k[t] >= 2.0 * stats["expected"]), "top1_wins": int(wins[t]),
                 "wrong_top1_wins": int(wrong[t])} for t in order]
    null = null_statistics(task.n_queries, task.n_targets, k)
    verdicts = {s: {"value": float(stats[s]), "random": null[s], "excess": float(stats[s]) - null[s],
                    "verdict": verdict(s, float(stats[s]) - null[s]), "warn_from": THRESHOLDS[s][0],
                    "fail_from": THRESHOLDS[s][1], "what": THRESHOLDS[s][2]} for s in THRESHOLDS}
    return {"direction": d.name, "n_queries": int(task.n_queries), "n_targets": int(task.n_targets), "k": int(k),
            "raw_recall": {m: float(v) for m, v in
                           summarize_ranks(positive_ranks(task.blocks(), task.positives), (1, 5, 10)).items()},
            "hubness": {s: float(v) for s, v in stats.items()}, "verdicts": verdicts,
            "verdict": max((v["verdict"] for v in verdicts.values()), key=_LEVELS.index),
            "hubs": hub_rows, "n_k_counts": np.bincount(n_k.astype(np.int64)).tolist()}


def diagnose(src: Source, *, k: int = 10, hubs: int = 10) -> dict:
    """The diagnosis of every direction of ``src`` (the JSON ``hubnorm diagnose --json`` prints)."""
    from ._version import __version__

    out = {"command": "diagnose", "hubnorm": __version__, "source": src.source, "data": src.label,
           "synthetic": src.synthetic, "kind": src.kind, "flags": list(src.flags),
           "directions": [diagnose_direction(d, k=k, hubs=hubs) for d in src.directions.values()]}
    if src.data is not None and min(len(src.data.items), len(src.data.captions)) > GEOMETRY_MIN_ITEMS:
        from .geometry import embedding_statistics   # its hubness part reads N_10: more than 10 of each

        g = embedding_statistics(src.data.items, src.data.captions, src.data.caption_to_item)
        out["geometry"] = {key: float(v) for key, v in g.items() if np.isscalar(v)}
    levels = [d["verdict"] for d in out["directions"]] + (["warn"] if src.flags else [])
    out["verdict"] = max(levels, key=_LEVELS.index)
    return out


def _diagnose_text(rep: dict) -> str:
    lines = [f"{rep['data']}" + ("  [SYNTHETIC]" if rep["synthetic"] else ""), ""]
    for flag in rep["flags"]:
        lines.append(f"WARN  input check: {flag}")
    for d in rep["directions"]:
        raw = d["raw_recall"]
        lines.append(f"{d['direction']}: {d['n_queries']:,} queries, {d['n_targets']:,} targets; raw R@1 "
                     f"{raw['R@1']:.2f}, R@5 {raw['R@5']:.2f}, R@10 {raw['R@10']:.2f}")
        for s, v in d["verdicts"].items():
            f = (lambda x, sign="": f"{round(x, 2) + 0.0:{sign}.2f}") if s == "skewness" else \
                (lambda x, sign="": f"{round(100 * x, 1) + 0.0:{sign}.1f}%")   # + 0.0: no "-0.0"
            lines.append(f"  {v['verdict'].upper():4}  {v['what']} (k={d['k']}): {f(v['value'])}; under random "
                         f"retrieval {f(v['random'])}; excess {f(v['excess'], '+')}   [warn from {f(v['warn_from'], '+')}, "
                         f"fail from {f(v['fail_from'], '+')}]")
        mean = d["hubness"]["expected"]
        lines.append(f"  the {len(d['hubs'])} largest N_{d['k']} (mean {mean:.3g}; a hub has N_k >= {2 * mean:.3g}), "
                     "the top-1 retrievals each wins, and how many of them are wrong:")
        for h in d["hubs"]:
            name = f"test item {h['target']}" + (f" ({h['id']})" if h["id"] else "")
            lines.append(f"    {name:50} N_k={h['n_k']:<5}{' hub' if h['hub'] else '    '}  top-1 wins={h['top1_wins']:<5} "
                         f"wrong={h['wrong_top1_wins']}")
    if rep["kind"] == "embeddings" and "geometry" not in rep:
        lines.append(f"geometry of the test split: skipped (it needs more than {GEOMETRY_MIN_ITEMS} test items and "
                     "texts)")
    if "geometry" in rep:
        g = rep["geometry"]
        lines.append(f"geometry of the test split (info, no verdict): modality gap ||mean item - mean text|| "
                     f"{g['gap']:.3f}, cosine of the two centres {g['centroid_cos']:.3f}, a text and its item "
                     f"{g['matched_mean']:.3f} (sd {g['matched_sd']:.3f}), unmatched pairs {g['random_mean']:.3f}, "
                     f"effective dimension {g['img_participation_ratio']:.1f} (items) / "
                     f"{g['cap_participation_ratio']:.1f} (texts)")
    lines.append(f"verdict: {rep['verdict'].upper()}")
    return "\n".join(lines)


def _check_out_file(path: Path, flag: str) -> None:
    """A file the command will write: a name in a folder that exists, not a folder itself."""
    path = Path(path)
    if not str(path).strip() or path.is_dir():
        raise ValueError(f"{flag} {str(path)!r} must name a file to write (e.g. {flag} report.html)")
    if not path.parent.is_dir():
        raise ValueError(f"{flag} {path}: the folder {path.parent} does not exist")
    if not os.access(path.parent, os.W_OK):
        raise ValueError(f"{flag} {path}: the folder {path.parent} is not writable")


def write_html(rep: dict, path: Path) -> None:
    """A small self-contained HTML report: the text of the diagnosis and one N_k histogram per direction."""
    import base64
    import html
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = []
    for d in rep["directions"]:
        counts = np.asarray(d["n_k_counts"])
        fig, ax = plt.subplots(figsize=(6, 3.2))
        ax.bar(np.arange(len(counts)), counts, width=1.0, color="#4c72b0")
        ax.set(xlabel=f"N_{d['k']} (times a target is in a query's top {d['k']})", ylabel="targets", yscale="log",
               title=f"{d['direction']}: skewness {d['hubness']['skewness']:.2f} ({d['verdict']})")
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110)
        plt.close(fig)
        figs.append(f'<img alt="N_k histogram, {d["direction"]}" src="data:image/png;base64,'
                    f'{base64.b64encode(buf.getvalue()).decode()}">')
    body = (f"<h1>hubnorm diagnose</h1><pre>{html.escape(_diagnose_text(rep))}</pre>" + "".join(figs))
    from .data.cache import atomic_write_bytes

    atomic_write_bytes(path, f"<!doctype html><html><head><meta charset='utf-8'><title>hubnorm diagnose: "
                        f"{html.escape(rep['source'])}</title></head><body>{body}</body></html>\n".encode())


# ============================================================================================== choose
def check_grids(grids: Dict[str, Dict[str, list]], methods: Sequence[str]) -> None:
    """``--grid`` against ``--methods``: a ``METHOD.PARAM`` names a method being compared and one of its grid's
    parameters; a bare ``PARAM`` is a parameter of at least one of them (it applies to those that have it)."""
    from .registry import PAPER_GRIDS

    for method, params in grids.items():
        if method != "*" and method not in methods:
            raise ValueError(f"--grid {method}.{next(iter(params))}=...: {method} is not among --methods "
                             f"{','.join(methods)}: add it there or drop the --grid")
        for p in params:
            owners = [m for m in (methods if method == "*" else [method]) if p in PAPER_GRIDS.get(m, {})]
            if not owners:
                where = method if method != "*" else "any of " + ",".join(methods)
                raise ValueError(f"--grid {'' if method == '*' else method + '.'}{p}=...: {where} has no grid "
                                 f"parameter {p!r}; the grids: " + "; ".join(
                                     f"{m}: {', '.join(PAPER_GRIDS.get(m, {})) or 'none'}" for m in methods))


def _grid(method: str, overrides: Dict[str, Dict[str, list]], task) -> Dict[str, list]:
    """The paper grid of ``method`` with the ``--grid`` values that concern it (``overrides[method]``, and
    ``overrides["*"]`` for the parameters it has), values above the task's limits dropped."""
    from .registry import NORMALIZERS, PAPER_GRIDS

    grid = {p: list(v) for p, v in PAPER_GRIDS.get(method, {}).items()}
    given = {p: v for p, v in overrides.get("*", {}).items() if p in grid}
    given.update(overrides.get(method, {}))
    for p, values in given.items():
        if p not in grid:
            raise ValueError(f"--grid {method}.{p}=...: {method} has no grid parameter {p!r}; its grid: "
                             f"{sorted(grid) or 'none'}")
        grid[p] = values
    sizes = {name: task.size(name) for name in ("queries", "targets", "query_bank", "target_bank")}
    cls = NORMALIZERS[method]
    for p in grid:
        lim = cls.limit(p, sizes.get)
        if lim is not None:
            grid[p] = [v for v in grid[p] if int(v) <= lim]
            if not grid[p]:
                raise ValueError(f"{method}: no {p} of the grid fits this task (largest allowed: {lim})")
    return grid


def _parse_grid(items: Sequence[str]) -> Dict[str, Dict[str, list]]:
    """``--grid nnn.k=8,16,32`` or ``--grid k=8,16`` (every method with that parameter) -> {method|'*': {p: [..]}}."""
    out: Dict[str, Dict[str, list]] = {}
    for item in items or ():
        key, sep, values = item.partition("=")
        method, _, param = key.rpartition(".")
        if not sep or not param or not values:
            raise ValueError(f"--grid {item!r} must be [METHOD.]PARAM=V1,V2,..., e.g. --grid nnn.k=8,16,32")
        try:
            vals = [int(v) if v.strip().lstrip("-").isdigit() else float(v) for v in values.split(",")]
        except ValueError:
            raise ValueError(f"--grid {item!r}: the values must be numbers separated by commas") from None
        slot = out.setdefault(method or "*", {})
        if param in slot:
            raise ValueError(f"--grid {key} is given twice: give each parameter's values once")
        slot[param] = vals
    return out


def query_groups(positives) -> np.ndarray:
    """A group per test query: its first positive target (the captions of one image form one group in t2i; in i2t
    every image query is its own), so that queries that describe the same item stay together when split or
    resampled. A query without a positive is a group of its own."""
    first = np.full(positives.n_queries, -1, dtype=np.int64)
    has = np.diff(positives.indptr) > 0
    first[has] = positives.indices[positives.indptr[:-1][has]]
    lone = np.flatnonzero(~has)
    first[lone] = positives.n_targets + np.arange(lone.size)
    return np.unique(first, return_inverse=True)[1]


def split_halves(groups: np.ndarray, seed: int = 0) -> tuple:
    """``(selection, estimation)`` query indices: a seeded half of the groups and the rest (no group in both)."""
    n = int(groups.max()) + 1 if groups.size else 0
    first = np.random.default_rng(seed).permutation(n)[: n // 2]
    in_sel = np.isin(groups, first)
    return np.flatnonzero(in_sel), np.flatnonzero(~in_sel)


def _paired_ci(raw: np.ndarray, new: np.ndarray, groups: np.ndarray, *, n_boot: int = 1000, seed: int = 0) -> tuple:
    """95% percentile bootstrap interval of R@1(new) - R@1(raw) over the same queries, resampling whole groups
    (:func:`query_groups`: the captions of one image are not independent draws)."""
    rng = np.random.default_rng(seed)
    diff = (new == 0).astype(np.float64) - (raw == 0).astype(np.float64)
    _, g = np.unique(groups, return_inverse=True)
    sums, counts = np.bincount(g, weights=diff), np.bincount(g).astype(np.float64)
    draws = rng.integers(0, sums.size, (n_boot, sums.size))
    boots = 100.0 * sums[draws].sum(axis=1) / counts[draws].sum(axis=1)
    lo, hi = np.quantile(boots, [0.025, 0.975])
    return float(lo), float(hi)


def choose_labelled(d: Direction, methods: Sequence[str], grids: Dict[str, Dict[str, list]], *, seed: int = 0,
                    progress: bool = True) -> dict:
    """Held-out choice: the test queries are split in two seeded halves (by :func:`query_groups`: the captions of
    one image on the same side); every grid point of every method is fitted on the reference bank and scored on all
    queries; the choice is the best R@1 on the *selection* half; the gain to expect is the chosen point's R@1 minus
    raw on the other, *estimation* half (paired bootstrap CI over groups)."""
    from .evaluation import positive_ranks
    from .progress import progress as bar
    from .registry import grid_points, make_normalizer

    task = d.task
    groups = query_groups(task.positives)
    sel, est = split_halves(groups, seed)
    if len(np.unique(groups[sel])) < 2 or len(np.unique(groups[est])) < 2:
        raise ValueError(f"{d.name}: {task.n_queries} test queries are too few to choose on one half and measure on "
                         "the other")
    raw = positive_ranks(task.blocks(), task.positives)
    points = []
    for m in methods:
        points += [(m, params) for params in grid_points(m, _grid(m, grids, task))]
    rows = []
    for m, params in bar(points, desc=f"choose {d.name}", disable=not progress):
        norm = make_normalizer(m, **params)
        task.fit(norm)
        ranks = positive_ranks(task.blocks(norm), task.positives)
        rows.append({"method": m, "params": params, "R@1 selection half": 100.0 * float(np.mean(ranks[sel] == 0)),
                     "_ranks": ranks})
    raw_sel = 100.0 * float(np.mean(raw[sel] == 0))
    best = max(rows, key=lambda r: r["R@1 selection half"])   # first of equal values: the methods' and grid's order
    keep_raw = best["R@1 selection half"] <= raw_sel
    chosen = raw if keep_raw else best["_ranks"]   # keeping the raw scores gains nothing, by definition
    gain = 100.0 * (float(np.mean(chosen[est] == 0)) - float(np.mean(raw[est] == 0)))
    lo, hi = _paired_ci(raw[est], chosen[est], groups[est], seed=seed)
    table = [{k: v for k, v in r.items() if k != "_ranks"} for r in rows]
    return {"direction": d.name, "mode": "labelled", "method": raw_name() if keep_raw else best["method"],
            "params": {} if keep_raw else best["params"], "best_method": best["method"], "best_params": best["params"],
            "raw R@1 selection half": raw_sel, "selection queries": int(len(sel)), "estimation queries": int(len(est)),
            "expected gain R@1": gain, "expected gain 95% CI": [lo, hi],
            "best point's gain on the estimation half": 100.0 * (float(np.mean(best["_ranks"][est] == 0))
                                                                 - float(np.mean(raw[est] == 0))),
            "raw R@1 estimation half": 100.0 * float(np.mean(raw[est] == 0)), "table": table}


def choose_label_free(d: Direction, methods: Sequence[str], grids: Dict[str, Dict[str, list]]) -> dict:
    """Label-free choice (:func:`hubnorm.label_free.label_free_select`, criterion "mutual": the test queries'
    embeddings, no label): per method its best grid point, then the method whose choice makes the most queries'
    retrievals mutual; the benefit predictor says whether to keep the raw scores."""
    from .label_free import label_free_select, predict_benefit

    if d.queries is None:
        raise ValueError(f"{d.name}: a label-free choice reads the embeddings (a sims: folder holds scores only); "
                         "run choose without --label-free (a held-out choice from the folder's positives)")
    if d.query_bank is None:
        raise ValueError(f"{d.name}: the source has no training split, so no reference bank to fit a method with")
    rows = []
    for m in methods:
        grid = _grid(m, grids, d.task)
        res = label_free_select(m, d.targets, d.query_bank, queries=d.queries, target_bank=d.target_bank, grid=grid)
        rows.append({"method": m, "params": dict(res.best_params), "criterion": float(res.best_value),
                     "raw criterion": float(res.raw_value), "predicted to help": bool(predict_benefit(res))})
    best = max(rows, key=lambda r: r["criterion"])
    helps = best["predicted to help"]
    return {"direction": d.name, "mode": "label-free (criterion 'mutual')", "method": best["method"] if helps else raw_name(),
            "params": best["params"] if helps else {}, "best_method": best["method"], "best_params": best["params"],
            "predicted to help": helps, "track record": dict(LABEL_FREE_TRACK_RECORD), "table": rows}


def choose(src: Source, *, methods: Sequence[str] = DEFAULT_METHODS, grids=None, label_free: bool = False,
           seed: int = 0, progress: bool = True) -> dict:
    from ._version import __version__
    from .registry import NORMALIZERS

    methods = [m.lower() for m in methods]
    for m in methods:
        if m not in NORMALIZERS or m == raw_name():
            raise ValueError(f"--methods: unknown method {m!r}; available: {sorted(set(NORMALIZERS) - {raw_name()})}")
    grids = grids or {}
    check_grids(grids, methods)
    out = []
    for d in src.directions.values():
        out.append(choose_label_free(d, methods, grids) if label_free else
                   choose_labelled(d, methods, grids, seed=seed, progress=progress))
    return {"command": "choose", "hubnorm": __version__, "source": src.source, "data": src.label,
            "synthetic": src.synthetic, "kind": src.kind, "seed": seed, "directions": out}


def raw_name() -> str:
    """The registry name of the raw scores (:class:`hubnorm.normalizers.base.Identity`): the choice "keep them"."""
    from .normalizers.base import Identity

    return Identity.name


def _fmt_params(p: dict) -> str:
    return ", ".join(f"{k}={v:g}" if isinstance(v, (int, float)) else f"{k}={v}" for k, v in p.items()) or "-"


def _choose_text(rep: dict) -> str:
    lines = [rep["data"] + ("  [SYNTHETIC]" if rep["synthetic"] else ""), ""]
    for d in rep["directions"]:
        keep = d["method"] == raw_name()
        what = "keep the raw scores" if keep else f"choose {d['method']} ({_fmt_params(d['params'])})"
        lines.append(f"{d['direction']}: {what}   [{d['mode']}]")
        if d["mode"] == "labelled":
            if keep:
                best_gain = d["best point's gain on the estimation half"]
                lines.append(f"  no grid point beat the raw scores on the {d['selection queries']:,} test queries of "
                             f"the choice (best: {d['best_method']} {_fmt_params(d['best_params'])}, "
                             f"{best_gain:+.2f} R@1 points on the other {d['estimation queries']:,})")
            else:
                lo, hi = d["expected gain 95% CI"]
                lines.append(f"  expected R@1 gain over raw {d['expected gain R@1']:+.2f} points, 95% CI [{lo:+.2f}, "
                             f"{hi:+.2f}] (chosen on {d['selection queries']:,} test queries, measured on the other "
                             f"{d['estimation queries']:,}; raw R@1 there {d['raw R@1 estimation half']:.2f})")
        else:
            tr = d["track record"]
            lines.append(f"  predicted to help: {'yes' if d['predicted to help'] else 'no: keep the raw scores'}")
            lines.append(f"  track record of this choice on real sets ({tr['choices']} choices): the predictor was "
                         f"right {tr['predictor_right']}/{tr['choices']}, the choice raised R@1 "
                         f"{tr['raised_r1']}/{tr['choices']}, its R@1 minus a labelled choice's {tr['mean_minus_labelled']:+.2f} "
                         f"on average (from {tr['min_minus_labelled']:+.2f} to {tr['max_minus_labelled']:+.2f}); no CI "
                         "without labels")
    return "\n".join(lines)


# ============================================================================================== export / check
def make_offset_normalizer(method: str, params: dict):
    """``method(**params)``, checked: a known offset method, parameters it has (``--param`` named in the error)."""
    from .registry import NORMALIZERS, make_normalizer

    method = method.lower()
    if method not in NORMALIZERS:
        raise ValueError(f"--method {method!r} is unknown; available: {sorted(NORMALIZERS)}")
    known = NORMALIZERS[method]._param_names()   # the constructor's parameters (Normalizer.get_params)
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ValueError(f"--param {unknown[0]}: {method} has no parameter {unknown[0]!r}; its parameters: "
                         f"{', '.join(known) or 'none'}")
    norm = make_normalizer(method, **params)
    if not norm.is_offset:
        raise ValueError(f"--method {method}: {type(norm).__name__} normalises each query's row, it has no per-target "
                         "offsets an index could serve; export an offset method (nnn, dn, is, csls, dualis, sn, dbsn)")
    norm.check_params()
    return norm


def fit_direction(d: Direction, method: str, params: dict):
    """``method(**params)`` fitted on the direction's reference bank (the library's fit, from score matrices); an
    error names the direction and ``--param``."""
    norm = make_offset_normalizer(method, params)
    try:
        d.task.fit(norm)
    except ValueError as exc:
        raise ValueError(f"{d.name}: {exc} (set the method's parameters with --param NAME=VALUE)") from None
    return norm


def export(src: Source, out: Path, *, method: str, params: dict, faiss_index: bool = False,
           force: bool = False) -> dict:
    """Fit ``method`` on every direction's bank, then write the offsets (and, from embeddings, the ``[t, h]`` target
    vectors and optionally a faiss index) under ``out/<direction>/`` and ``out/manifest.json`` (the method's every
    parameter, the banks' provenance, every file's sha256). Everything is fitted and checked before anything is
    written; the folder is written whole beside ``out`` and then put in its place, so a failed export leaves
    ``out`` as it was. An existing export is replaced only with ``force``."""
    from ._version import __version__
    from .data.cache import atomic_write_bytes, umask

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file: name a folder (it is created)")
    if out.is_dir() and any(out.iterdir()):
        if not (out / "manifest.json").is_file():
            raise ValueError(f"--out {out} exists and holds files that are not a hubnorm export: choose an empty or "
                             "new folder")
        if not force:
            raise ValueError(f"--out {out} holds an export already: pass --force to replace it, or choose another "
                             "folder")
    if not out.parent.is_dir():
        raise ValueError(f"--out {out}: its parent folder {out.parent} does not exist")
    if faiss_index and src.kind == "scores":
        raise ValueError("--faiss needs the target embeddings; a sims: folder holds scores only (its export is the "
                         "offsets: add them to the scores of the same targets)")
    fitted = {d.name: (d, fit_direction(d, method, params)) for d in src.directions.values()}
    norm0 = next(iter(fitted.values()))[1]
    manifest = {"format": EXPORT_FORMAT, "hubnorm": __version__, "source": src.source, "data": src.label,
                "synthetic": src.synthetic, "kind": src.kind, "method": method.lower(),
                "params": _json_params(norm0.get_params()), "directions": {}}
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    try:
        for name, (d, norm) in fitted.items():
            offsets = norm.offsets.astype(np.float64)
            files = {"offsets": _write_array(tmp, f"{name}/offsets.npy", offsets)}
            entry = {"n_targets": int(len(offsets)), "bank": d.bank, "offsets_sha256": digest(offsets), "files": files}
            if d.targets is not None:
                entry["targets_sha256"] = digest(d.targets)
                aug = np.concatenate([d.targets, offsets[:, None]], axis=1).astype(np.float32)
                files["augmented_targets"] = _write_array(tmp, f"{name}/augmented_targets.npy", aug)
                entry["query_side"] = "append a 1 to each unit-norm query: [q, 1]; inner product = q . t + h"
                if faiss_index:
                    files["faiss_index"] = _write_faiss(tmp, f"{name}/index.faiss", aug)
            manifest["directions"][name] = entry
        atomic_write_bytes(tmp / "manifest.json", (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())
        os.chmod(tmp, 0o777 & ~umask())
        if out.exists():   # the old export goes only once the new one is whole
            old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".old"))
            os.replace(out, old / out.name)
            os.replace(tmp, out)
            shutil.rmtree(old)
        else:
            os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return manifest


def _json_params(params: dict) -> dict:
    """Constructor parameters that JSON can hold (numbers, text, booleans, None), each as it was given."""
    return {k: v for k, v in params.items() if v is None or isinstance(v, (bool, int, float, str))}


def _write_array(out: Path, rel: str, arr: np.ndarray) -> dict:
    from .data.cache import atomic_write_bytes, npy_bytes

    return {"path": rel, "sha256": atomic_write_bytes(out / rel, npy_bytes(arr)), "shape": list(arr.shape),
            "dtype": arr.dtype.str}


def _write_faiss(out: Path, rel: str, aug: np.ndarray) -> dict:
    try:
        import faiss
    except ImportError:
        raise ValueError("--faiss needs faiss (pip install 'hubnorm[faiss]')") from None
    index = faiss.IndexFlatIP(aug.shape[1])   # exact inner product on [t, h]; build an IVF from the .npy at scale
    index.add(np.ascontiguousarray(aug, dtype=np.float32))
    from .data.cache import atomic_write_bytes

    return {"path": rel, "sha256": atomic_write_bytes(out / rel, faiss.serialize_index(index).tobytes()),
            "kind": "IndexFlatIP", "ntotal": int(index.ntotal)}


def _read_manifest(folder: Path) -> dict:
    man_path = folder / "manifest.json"
    if not folder.is_dir():
        raise ValueError(f"{folder} does not exist or is not a folder: name the folder hubnorm export wrote")
    if not man_path.is_file():
        raise ValueError(f"{folder} has no manifest.json: not a hubnorm export (write one with hubnorm export)")
    try:
        man = json.loads(man_path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{man_path} is not valid JSON ({exc}): export again") from None
    if not isinstance(man, dict) or man.get("format") != EXPORT_FORMAT:
        raise ValueError(f"{man_path}: format {man.get('format') if isinstance(man, dict) else None!r}; this hubnorm "
                         f"reads {EXPORT_FORMAT!r}")
    return man


def _read_files(folder: Path, man: dict) -> tuple:
    """``(arrays, problems)``: every listed file read once and checked against its sha256 (arrays from the bytes
    checked, never re-read; ``np.load`` without pickles)."""
    import io

    arrays: Dict[str, Dict[str, np.ndarray]] = {}
    problems = []
    for dname, entry in man["directions"].items():
        arrays[dname] = {}
        for name, f in entry["files"].items():
            path = folder / f["path"]
            if not path.is_file():
                problems.append(f"{path} (listed in the manifest) is missing")
                continue
            data = path.read_bytes()
            if hashlib.sha256(data).hexdigest() != f["sha256"]:
                problems.append(f"{path} does not match its sha256 in the manifest: the file changed after the export")
            elif name == "faiss_index":   # the checked bytes, for faiss.deserialize_index
                arrays[dname][name] = np.frombuffer(data, dtype=np.uint8)
            else:
                arrays[dname][name] = np.load(io.BytesIO(data), allow_pickle=False)
    return arrays, problems


def load_export(folder) -> dict:
    """Read an export folder back, verifying every file against the manifest's sha256 (``ValueError`` naming the
    file otherwise). Returns the manifest with ``arrays[direction][name]`` (numpy arrays; never unpickled)."""
    folder = Path(folder)
    man = _read_manifest(folder)
    arrays, problems = _read_files(folder, man)
    if problems:
        raise ValueError("; ".join(problems) + ": export again")
    man["arrays"] = arrays
    return man


class ExportedIndex:
    """Serve one direction of an export: the top-``k`` targets of unit-norm queries by ``<[q, 1], [t, h]>`` =
    ``q . t + h``, from the export's faiss index when it has one, else from its ``[t, h]`` rows (exact, in row
    blocks). Every file is checked against the manifest when read."""

    def __init__(self, folder, direction: str):
        man = load_export(folder)
        if direction not in man["arrays"]:
            raise ValueError(f"direction {direction!r} is not in the export {folder} (it has {sorted(man['arrays'])})")
        arrays = man["arrays"][direction]
        if "augmented_targets" not in arrays:
            raise ValueError(f"the export {folder} holds offsets only (from score matrices): add them to the scores "
                             "of the same targets instead of searching an index")
        self.manifest, self.direction = man, direction
        self.augmented = arrays["augmented_targets"]
        self.index = None
        if "faiss_index" in arrays:
            import faiss

            self.index = faiss.deserialize_index(arrays["faiss_index"])

    def search(self, queries, k: int):
        """``(scores, indices)``, (m, k) each, best first (ties: the lower target index)."""
        from ._validation import as_embeddings, check_positive_int

        q = as_embeddings(queries, "queries", device="cpu", dim=self.augmented.shape[1] - 1).numpy()
        k = check_positive_int(k, "k", maximum=len(self.augmented), max_name="the number of targets")
        q = np.concatenate([q, np.ones((len(q), 1), dtype=q.dtype)], axis=1).astype(np.float32)
        if self.index is not None:
            return self.index.search(q, k)
        import torch

        from .normalizers.base import stable_topk   # the library's rank rule: ties to the lower index

        t = torch.from_numpy(np.ascontiguousarray(self.augmented))
        tops = [stable_topk(torch.from_numpy(q[r0:r0 + 1024]) @ t.T, k) for r0 in range(0, len(q), 1024)]
        return (torch.cat([v for v, _ in tops]).numpy(), torch.cat([i for _, i in tops]).numpy())


def _short(bank: dict) -> str:
    """A bank's provenance in a line: rows and the first 12 hex digits of each hash."""
    parts = []
    for key, v in sorted(bank.items()):
        if isinstance(v, dict) and "sha256" in v:      # embeddings: {"query_bank": {"rows", "sha256"}, ...}
            parts.append(f"{key} {v.get('rows')} rows sha256 {str(v['sha256'])[:12]}")
        elif key == "matrices" and isinstance(v, dict):   # score matrices: {"matrices": {"rows x cols": {...}}}
            parts += [f"{k} {'x'.join(map(str, m.get('shape', [])))} sha256 {str(m.get('sha256'))[:12]}"
                      for k, m in sorted(v.items())]
        elif key == "embeddings" and isinstance(v, dict) and v:   # a sims folder's bank embeddings beside them
            parts.append(_short(v))
    return ", ".join(parts) or json.dumps(bank, sort_keys=True)


def check(folder, source: Optional[Source] = None) -> List[str]:
    """Problems of an export (empty: none): every file against the manifest; with ``source``, its banks and targets
    against the manifest's hashes, and the offsets refitted now against the exported ones (bit for bit)."""
    folder = Path(folder)
    man = _read_manifest(folder)
    _, problems = _read_files(folder, man)
    listed = {Path(f["path"]) for e in man["directions"].values() for f in e["files"].values()}
    for dname in man["directions"]:
        for path in sorted((folder / dname).rglob("*")) if (folder / dname).is_dir() else ():
            if path.is_file() and path.relative_to(folder) not in listed:
                problems.append(f"{path} is not listed in the manifest: not part of this export")
    if source is None:
        return problems
    for dname, entry in man["directions"].items():
        d = source.directions.get(dname)
        if d is None:
            problems.append(f"{dname}: the source has no direction {dname} (it has {sorted(source.directions)})")
            continue
        if json.loads(json.dumps(d.bank, sort_keys=True)) != entry["bank"]:
            problems.append(f"{dname}: the reference bank changed since the export (then: {_short(entry['bank'])}; "
                            f"now: {_short(d.bank)})")
        if d.targets is not None and digest(d.targets) != entry.get("targets_sha256"):
            problems.append(f"{dname}: the targets (gallery) changed since the export")
        norm = fit_direction(d, man["method"], man["params"])
        if digest(norm.offsets.astype(np.float64)) != entry["offsets_sha256"]:
            problems.append(f"{dname}: the offsets refitted now differ from the exported ones")
    return problems


# ============================================================================================== command line
EPILOG = """\
examples:
  hubnorm diagnose real:flickr8k-100x5-clip-b32
  hubnorm diagnose sims:path/to/folder --json > diagnosis.json
  hubnorm diagnose local:path/to/folder --html report.html --fail-on fail
  hubnorm choose real:coco500-clip-b16                      # held-out choice with a CI on the gain
  hubnorm choose real:coco500-clip-b16 --label-free         # no labels read
  hubnorm choose synthetic:coco --source-option n_test_images=500 --methods nnn --grid nnn.k=8,16,32
  hubnorm export real:coco500-clip-b16 --method nnn --param k=16 --param alpha=0.75 --out export/ --faiss
  hubnorm check export/ --source real:coco500-clip-b16      # exit 3 when the bank or offsets changed

exit codes: 0 done, 1 diagnose reached --fail-on, 2 bad input, 3 check found a mismatch."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hubnorm", description="Test-time hubness reduction on your embeddings or "
                                "score matrices: diagnose, choose a method, export offsets for a vector index.",
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", metavar="{diagnose,choose,export,check}")
    sub.required = True
    src = argparse.ArgumentParser(add_help=False)
    src.add_argument("source", help="synthetic:<preset>, local:<folder>, real:<release>, cache:..., sims:<folder>")
    src.add_argument("--direction", action="append", help="only this direction (repeatable; default: all)")
    src.add_argument("--source-option", action="append", default=[], metavar="KEY=VALUE",
                     help="an option of the loader (e.g. n_test_images=200 for synthetic:coco, n_train=500 for a "
                     "video / audio preset such as synthetic:msrvtt, test_fraction=0.5 for local:)")
    src.add_argument("--seed", type=int, default=0, help="seed of synthetic data and of the choice's split (default 0)")
    src.add_argument("--json", action="store_true", help="print JSON instead of text")

    d = sub.add_parser("diagnose", parents=[src], help="hubness of the raw scores, hubs, verdicts",
                       description="N_k statistics with verdicts (thresholds printed), the hubs and the top-1 wins "
                       "they take, raw recall, the modality gap (embeddings).")
    d.add_argument("--k", type=int, default=10, help="k of N_k (default 10)")
    d.add_argument("--hubs", type=int, default=10, help="how many hubs to list (default 10)")
    d.add_argument("--html", type=Path, help="also write a small HTML report with the N_k histograms here")
    d.add_argument("--fail-on", choices=("warn", "fail", "never"), default="never",
                   help="exit 1 when the overall verdict reaches this level (default never)")

    c = sub.add_parser("choose", parents=[src], help="the method and parameters, with the gain to expect",
                       description="Held-out choice (default): choose on half of the test queries, measure the "
                       "gain on the other half (95% paired bootstrap CI). --label-free: read no label.")
    c.add_argument("--methods", default=",".join(DEFAULT_METHODS), help="methods to compare (default nnn,is,sn,dbsn)")
    c.add_argument("--grid", action="append", default=[], metavar="[METHOD.]PARAM=V1,V2",
                   help="replace a paper grid (e.g. nnn.k=8,16,32)")
    c.add_argument("--label-free", action="store_true", help="choose without labels (embeddings only)")
    c.add_argument("--no-progress", action="store_true", help="no progress bar")

    e = sub.add_parser("export", parents=[src], help="fitted offsets and [t, h] vectors for an index",
                       description="Fit one offset method on the reference bank; write offsets.npy, "
                       "augmented_targets.npy ([t, h], float32) and with --faiss index.faiss per direction, and a "
                       "manifest.json with the sha256 of every file, of the bank and of the targets.")
    e.add_argument("--method", required=True, help="an offset method: nnn, dn, is, csls, dualis, sn, dbsn")
    e.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="a parameter (repeatable)")
    e.add_argument("--out", type=Path, required=True, help="the export folder")
    e.add_argument("--faiss", action="store_true", help="also write an exact faiss inner-product index")
    e.add_argument("--force", action="store_true", help="replace an export already in --out")

    k = sub.add_parser("check", help="verify an export (and, with --source, that its bank is unchanged)")
    k.add_argument("folder", type=Path, help="the export folder")
    k.add_argument("--source", help="the source it was exported from: refit and compare bank, targets, offsets")
    k.add_argument("--source-option", action="append", default=[], metavar="KEY=VALUE")
    k.add_argument("--seed", type=int, default=0)
    k.add_argument("--json", action="store_true", help="print JSON instead of text")
    return p


def _print(rep: dict, text: str, as_json: bool) -> None:
    print(json.dumps(rep, indent=2, sort_keys=True) if as_json else text)


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        options = _parse_options(args.source_option)
        if args.command == "check":
            src = None
            if args.source:
                src = open_source(args.source, options=options, seed=args.seed)
            problems = check(args.folder, src)
            rep = {"command": "check", "folder": str(args.folder), "source": args.source, "problems": problems,
                   "ok": not problems}
            _print(rep, "\n".join(problems) or f"{args.folder}: every file matches the manifest" +
                   (f"; bank, targets and offsets match {args.source}" if args.source else ""), args.json)
            return EXIT_MISMATCH if problems else EXIT_OK
        src = open_source(args.source, directions=args.direction, options=options, seed=args.seed)
        if args.command == "diagnose":
            for name, v in (("--k", args.k), ("--hubs", args.hubs)):
                if v < 1:
                    raise ValueError(f"{name} must be a positive integer; got {v}")
            if args.html is not None:
                _check_out_file(args.html, "--html")
            rep = diagnose(src, k=args.k, hubs=args.hubs)
            if args.html:
                write_html(rep, args.html)
            _print(rep, _diagnose_text(rep), args.json)
            fail_on = {"warn": 1, "fail": 2, "never": 3}[args.fail_on]
            return EXIT_VERDICT if _LEVELS.index(rep["verdict"]) >= fail_on else EXIT_OK
        if args.command == "choose":
            methods = [m.strip() for m in args.methods.split(",") if m.strip()]
            if not methods:
                raise ValueError("--methods is empty: name at least one method, e.g. --methods nnn,is")
            rep = choose(src, methods=methods, grids=_parse_grid(args.grid), label_free=args.label_free,
                         seed=args.seed, progress=not args.no_progress)
            _print(rep, _choose_text(rep), args.json)
            return EXIT_OK
        params = _parse_options(args.param, "--param", "k=16")
        man = export(src, args.out, method=args.method, params=params, faiss_index=args.faiss, force=args.force)
        _print(man, f"exported {man['method']} ({_fmt_params(params)}) of {src.label} to {args.out}: " +
               ", ".join(f"{d}: {len(e['files'])} files" for d, e in man["directions"].items()), args.json)
        return EXIT_OK
    except TypeError as exc:
        msg = str(exc)
        if "unexpected keyword argument" in msg:   # a loader given an option it does not have
            key = msg.rsplit("'", 2)[-2] if msg.count("'") >= 2 else msg
            msg = (f"--source-option {key}: not an option of this source's loader ({msg.split('(')[0].strip()}); "
                   "see docs/cli.md for each source's options")
        print(f"hubnorm {args.command}: error: {msg}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (ValueError, FileNotFoundError) as exc:
        print(f"hubnorm {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:   # the reader of the output went away (| head): nothing more to say
        sys.stderr.close()
        return EXIT_OK
    except OSError as exc:
        print(f"hubnorm {args.command}: error: {exc.filename or ''} {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
