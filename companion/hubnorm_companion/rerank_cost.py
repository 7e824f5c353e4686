"""Latency / cost model of retrieve-and-rerank (Geigle et al., "Retrieve Fast, Rerank Smart", Tables 3-4).

Per query, with ``n`` targets and ``k`` reranked candidates:

* bi-encoder retrieval (EMB): one query embedding + a top-k over ``n`` target embeddings,
  ``t_query + t_topk(n)``;
* retrieve and rerank (Co): EMB + ``k`` cross-encoder pairs, ``t_query + t_topk(n) + k * t_pair``;
* full cross-encoder (CE): ``n`` pairs, ``n * t_pair``.

Evaluation of a whole test set (Table 4, text-to-image, ``n`` images and ``captions_per_image * n`` caption
queries) adds the offline embedding of the ``n`` gallery images (``n * t_image``) to EMB and Co.

The unit costs come from ``benchmarks/bench_cross_encoder.py`` (BLIP ITM base architecture, measured on the
machine named in the report); :func:`load_cost_model` reads that CSV in a checkout and otherwise (an installed
package) the copy shipped as package data, ``hubnorm_companion/cross_encoder_latency.csv`` (read with
:mod:`importlib.resources`; the benchmark refreshes both, tests/test_packaging.py checks they agree).
"""

from __future__ import annotations

import io
import math
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Dict, Sequence, Union

import numpy as np
import pandas as pd
import torch

__all__ = ["CostModel", "load_cost_model", "measure_topk_seconds", "format_seconds", "LATENCY_REPORT",
           "PACKAGED_LATENCY", "FALLBACK_COSTS"]

#: The benchmark's report in a source checkout (absent in an installed package).
LATENCY_REPORT = Path(__file__).resolve().parents[2] / "benchmarks" / "reports" / "cross_encoder_latency.csv"
#: The copy of that report shipped as package data (importlib.resources Traversable).
PACKAGED_LATENCY = resources.files("hubnorm_companion") / "cross_encoder_latency.csv"

#: Unit costs (seconds) of the committed benchmark report, used when the CSV cannot be read. Filled in from
#: benchmarks/reports/cross_encoder_latency.csv (see that report for the machine and the settings).
FALLBACK_COSTS: Dict[str, object] = {
    "pair_full_s": None, "pair_text_s": None, "image_embed_s": None, "query_embed_s": None,
    "topk_per_target_s": None, "topk_base_s": None, "machine": "unknown", "source": "fallback constants",
}


def format_seconds(s: float) -> str:
    """Human units like the paper's tables: 16ms, 6s, 2min, 2.4h, 47h, 19d, 2.3a (years; days from 3 days on)."""
    if not math.isfinite(s):
        return "n/a"
    for unit, size, start in (("a", 365.25 * 86400, 365.25 * 86400), ("d", 86400, 3 * 86400), ("h", 3600, 3600),
                              ("min", 60, 60), ("s", 1, 1), ("ms", 1e-3, 1e-3)):
        if s >= start:
            v = s / size
            return f"{v:.2g}{unit}" if v < 10 else f"{v:.0f}{unit}"
    return f"{s * 1e6:.0f}us"


@dataclass
class CostModel:
    """Unit costs in seconds (see module docstring); ``topk`` cost = ``topk_base_s + topk_per_target_s * n``."""

    pair_s: float
    query_embed_s: float
    topk_per_target_s: float
    topk_base_s: float = 0.0
    image_embed_s: float = 0.0
    machine: str = "unknown"
    source: str = ""
    extra: Dict[str, object] = field(default_factory=dict)

    def topk_s(self, n: float) -> float:
        return self.topk_base_s + self.topk_per_target_s * n

    def per_query(self, n: float, k: int = 20) -> Dict[str, float]:
        """Seconds per query for EMB, Co (rerank ``k``) and CE with ``n`` targets (Table 3)."""
        emb = self.query_embed_s + self.topk_s(n)
        return {"EMB": emb, "Co": emb + min(k, n) * self.pair_s, "CE": n * self.pair_s}

    def evaluation(self, n_images: int, captions_per_image: int = 5, k: int = 20) -> Dict[str, float]:
        """Seconds to evaluate t2i on a test set of ``n_images`` images (Table 4)."""
        m = captions_per_image * n_images
        emb = n_images * self.image_embed_s + m * (self.query_embed_s + self.topk_s(n_images))
        return {"EMB": emb, "Co": emb + m * min(k, n_images) * self.pair_s, "CE": m * n_images * self.pair_s}

    def table3(self, ns: Sequence[int] = (50_000, 1_000_000), k: int = 20) -> pd.DataFrame:
        rows = []
        for model in ("EMB", "Co", "CE"):
            row = {"model": model}
            for n in ns:
                s = self.per_query(n, k)[model]
                row[f"{n:,} (s)"] = s
                row[f"{n:,}"] = format_seconds(s)
            rows.append(row)
        return pd.DataFrame(rows)

    def table4(self, ns: Sequence[int] = (1_000, 5_000, 100_000), k: int = 20, captions_per_image: int = 5) -> pd.DataFrame:
        rows = []
        for model in ("EMB", "Co", "CE"):
            row = {"model": model}
            for n in ns:
                s = self.evaluation(n, captions_per_image, k)[model]
                row[f"{n:,} (s)"] = s
                row[f"{n:,}"] = format_seconds(s)
            rows.append(row)
        return pd.DataFrame(rows)


def load_cost_model(path: Union[None, str, Path] = None, *, pair: str = "full") -> CostModel:
    """The cost model from the benchmark CSV (``key,value,unit,note`` rows), or :data:`FALLBACK_COSTS`.

    ``pair="full"``: a pair costs one full BLIP ITM forward (vision + text, the paper's assumption);
    ``pair="text"``: image features are cached and a pair costs only the ITM text encoder.
    """
    if pair not in ("full", "text"):
        raise ValueError(f"pair must be 'full' or 'text'; got {pair!r}")
    if path is None:
        path = LATENCY_REPORT if LATENCY_REPORT.exists() else PACKAGED_LATENCY
    else:
        path = Path(path)
    vals: Dict[str, object]
    if path.is_file():
        df = pd.read_csv(io.StringIO(path.read_text(encoding="utf-8")))
        if not {"key", "value"} <= set(df.columns):
            raise ValueError(f"{path} lacks the columns key,value")
        vals = dict(zip(df["key"], df["value"]))
        source = str(path.name)
    else:
        vals = dict(FALLBACK_COSTS)
        source = "FALLBACK_COSTS (report CSV absent)"
    need = ["pair_full_s", "pair_text_s", "query_embed_s", "topk_per_target_s", "topk_base_s", "image_embed_s"]
    missing = [k for k in need if vals.get(k) is None or (isinstance(vals.get(k), float) and math.isnan(vals[k]))]
    if missing:
        raise ValueError(f"cost values {missing} missing in {source}: run benchmarks/bench_cross_encoder.py")
    f = {k: float(vals[k]) for k in need}
    return CostModel(pair_s=f[f"pair_{pair}_s"], query_embed_s=f["query_embed_s"],
                     topk_per_target_s=f["topk_per_target_s"], topk_base_s=f["topk_base_s"],
                     image_embed_s=f["image_embed_s"], machine=str(vals.get("machine", "unknown")),
                     source=source, extra={k: v for k, v in vals.items() if k not in need})


def measure_topk_seconds(n: int, *, dim: int = 256, k: int = 20, chunk: int = 100_000, repeats: int = 3,
                         seed: int = 0, clock=time.perf_counter) -> float:
    """Median seconds of one query's exact top-``k`` over ``n`` random unit targets (float32, torch, CPU).

    ``clock``: ``time.perf_counter`` (wall) or ``time.process_time`` (CPU seconds, robust on a shared machine).

    Targets are streamed in blocks of ``chunk`` rows (one block is generated and reused, so 1M targets need only
    ``chunk * dim * 4`` bytes), merging a running top-k: the same work as a flat index scan.
    """
    g = torch.Generator().manual_seed(seed)
    block = torch.nn.functional.normalize(torch.randn(min(n, chunk), dim, generator=g), dim=1)
    q = torch.nn.functional.normalize(torch.randn(1, dim, generator=g), dim=1)
    times = []
    for _ in range(repeats):
        t0 = clock()
        best_v = best_i = None
        for start in range(0, n, chunk):
            rows = min(chunk, n - start)
            s = q @ block[:rows].T
            v, i = s.topk(min(k, rows), dim=1)
            if best_v is None:
                best_v, best_i = v, i + start
            else:
                v = torch.cat([best_v, v], 1)
                i = torch.cat([best_i, i + start], 1)
                best_v, pos = v.topk(min(k, v.shape[1]), dim=1)   # fewer than k candidates when chunk < k
                best_i = i.gather(1, pos)
        times.append(clock() - t0)
    return float(np.median(times))
