"""``hubnorm_companion.rerank_cost`` in small pieces: ``format_seconds`` at every unit's threshold and just below it
(each unit's size checked at a value that sits on a rounding edge, so that a size off by one shows), the
``CostModel`` formulas (Tables 3-4 of Geigle et al.) against values worked out by hand (``k`` capped at the gallery,
every default), ``table3`` / ``table4`` written out cell by cell, ``load_cost_model`` on CSV files written here (which
file a missing ``path`` reads, the fallback constants, every refusal by its message, a NaN or absent value, the
``extra`` entries) and ``measure_topk_seconds`` with a fake clock (the median of the repeats) and with a recorder of
its torch calls (``torch.overrides.TorchFunctionMode``): the blocks it scans and the running top-k it merges, against
an exact float64 top-k over the same targets.

Bug fixed (and tested here): ``measure_topk_seconds`` with ``chunk < k`` and more than one block raised torch's
"selected index k out of range" (the merge asked for ``k`` of fewer than ``k`` candidates); it now keeps
``min(k, candidates)``.

Mutation run (``--tests tests/test_rerank_pipeline.py`` [+ this file]): 84 killed, 129 survived, 121 reached by no
test (25%) -> 329 of 339 killed (97%); every survivor left is one of these, judged equivalent (no test can tell them
apart):
- ``format_seconds``: ``v < 10`` -> ``v <= 10`` or ``v < 11`` (below 11, two significant digits of ``v`` are the
  rounded integer that ``:.0f`` writes).
- ``load_cost_model``: ``read_text(encoding="UTF-8")`` or ``encoding=None`` (codec names ignore case; the tests run
  in a UTF-8 locale, where the default encoding is UTF-8 as well).
- ``measure_topk_seconds``: ``normalize(..., dim=1)`` with ``dim`` dropped (1 is its default) for the targets and for
  the query, or ``dim=None`` for the query (one row: its norm over all elements is its row norm); ``topk(..., dim=1)``
  with ``dim`` dropped, in the block and in the merge (the default, the last dimension, is 1 for these 2-D scores);
  ``i - start`` for the first block (there ``start`` is 0).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from torch.overrides import TorchFunctionMode

from hubnorm_companion import rerank_cost
from hubnorm_companion.rerank_cost import CostModel, format_seconds, load_cost_model, measure_topk_seconds

torch.set_num_threads(1)

YEAR = 365.25 * 86400
NEED = ["pair_full_s", "pair_text_s", "query_embed_s", "topk_per_target_s", "topk_base_s", "image_embed_s"]


# ------------------------------------------------------------------------------------------------ format_seconds
@pytest.mark.parametrize("s, text", [
    (math.inf, "n/a"), (-math.inf, "n/a"), (math.nan, "n/a"),
    # each unit from its threshold on, and the unit below just under it
    (YEAR, "1a"), (YEAR - 1, "365d"), (25 * YEAR, "25a"), (1.05001 * YEAR, "1.1a"),
    (3 * 86400, "3d"), (3 * 86400 - 1, "72h"), (4.45001 * 86400, "4.5d"), (19 * 86400, "19d"),
    (3600, "1h"), (3599, "60min"), (1.05001 * 3600, "1.1h"), (47 * 3600, "47h"),
    (60, "1min"), (59.9, "60s"), (1476, "25min"), (150, "2.5min"),
    (1, "1s"), (0.9999, "1000ms"), (5, "5s"), (6.04, "6s"),
    (1e-3, "1ms"), (0.5, "500ms"), (0.005, "5ms"), (0.016, "16ms"), (9.5e-3, "9.5ms"),
    (0.000999, "999us"), (5e-4, "500us"), (0.0, "0us"),
    (123.4999e-6, "123us"),   # 0.0001 below a rounding edge: a factor of 1e6 + 1 would write 124us
])
def test_format_seconds_units_and_thresholds(s, text):
    assert format_seconds(s) == text


# ------------------------------------------------------------------------------------------------ CostModel
def _model(**kw):
    args = dict(pair_s=2.0, query_embed_s=0.5, topk_per_target_s=1e-6, topk_base_s=0.25, image_embed_s=4.0)
    args.update(kw)
    return CostModel(**args)


def test_cost_model_defaults():
    cm = CostModel(pair_s=1.0, query_embed_s=2.0, topk_per_target_s=3.0)
    assert (cm.topk_base_s, cm.image_embed_s, cm.machine, cm.source, cm.extra) == (0.0, 0.0, "unknown", "", {})
    assert cm.topk_s(10) == 30.0
    assert CostModel(1.0, 2.0, 3.0).extra is not cm.extra   # a dict of its own per model


def test_topk_cost_is_base_plus_slope_times_targets():
    cm = _model()
    assert cm.topk_s(0) == 0.25
    assert cm.topk_s(1_000_000) == pytest.approx(0.25 + 1.0)
    assert cm.topk_s(4_000_000) == pytest.approx(4.25)


def test_per_query_by_hand_and_k_capped_at_the_gallery():
    cm = _model()
    q = cm.per_query(50_000, k=7)
    assert q == pytest.approx({"EMB": 0.5 + 0.25 + 0.05, "Co": 0.8 + 7 * 2.0, "CE": 100_000.0})
    assert cm.per_query(50_000) == pytest.approx({"EMB": 0.8, "Co": 0.8 + 20 * 2.0, "CE": 100_000.0})   # k=20
    small = cm.per_query(5, k=20)   # only 5 candidates to rerank
    assert small == pytest.approx({"EMB": 0.5 + 0.25 + 5e-6, "Co": 0.750005 + 5 * 2.0, "CE": 10.0})
    assert list(small) == ["EMB", "Co", "CE"]


def test_evaluation_by_hand_and_defaults():
    cm = _model()
    ev = cm.evaluation(1000, 3, k=7)
    m = 3 * 1000
    emb = 1000 * 4.0 + m * (0.5 + 0.25 + 1e-3)
    assert ev == pytest.approx({"EMB": emb, "Co": emb + m * 7 * 2.0, "CE": m * 1000 * 2.0})
    m = 5 * 1000   # captions_per_image=5, k=20
    emb = 1000 * 4.0 + m * 0.751
    assert cm.evaluation(1000) == pytest.approx({"EMB": emb, "Co": emb + m * 20 * 2.0, "CE": m * 1000 * 2.0})
    few = cm.evaluation(4, 2, k=20)   # k capped at the 4 images
    emb = 4 * 4.0 + 8 * (0.75 + 4e-6)
    assert few == pytest.approx({"EMB": emb, "Co": emb + 8 * 4 * 2.0, "CE": 8 * 4 * 2.0})


def test_table3_cell_by_cell():
    t = _model().table3()
    assert list(t.columns) == ["model", "50,000 (s)", "50,000", "1,000,000 (s)", "1,000,000"]
    assert list(t["model"]) == ["EMB", "Co", "CE"]
    np.testing.assert_allclose(t["50,000 (s)"], [0.8, 40.8, 100_000.0], rtol=1e-12)
    np.testing.assert_allclose(t["1,000,000 (s)"], [1.75, 41.75, 2_000_000.0], rtol=1e-12)
    assert list(t["50,000"]) == ["800ms", "41s", "28h"]
    assert list(t["1,000,000"]) == ["1.8s", "42s", "23d"]
    t = _model().table3(ns=(10,), k=3)
    assert list(t.columns) == ["model", "10 (s)", "10"]
    np.testing.assert_allclose(t["10 (s)"], [0.75001, 6.75001, 20.0], rtol=1e-12)


def test_table4_cell_by_cell():
    t = _model().table4()
    assert list(t.columns) == ["model", "1,000 (s)", "1,000", "5,000 (s)", "5,000", "100,000 (s)", "100,000"]
    assert list(t["model"]) == ["EMB", "Co", "CE"]
    for n in (1000, 5000, 100_000):
        m = 5 * n
        emb = n * 4.0 + m * (0.75 + 1e-6 * n)
        np.testing.assert_allclose(t[f"{n:,} (s)"], [emb, emb + m * 20 * 2.0, m * n * 2.0], rtol=1e-12)
        assert list(t[f"{n:,}"]) == [format_seconds(v) for v in (emb, emb + m * 40.0, m * n * 2.0)]
    assert list(t["1,000"]) == ["2.2h", "58h", "116d"]
    t = _model().table4(ns=(10,), k=3, captions_per_image=2)
    assert list(t.columns) == ["model", "10 (s)", "10"]
    emb = 10 * 4.0 + 20 * (0.75 + 1e-5)
    np.testing.assert_allclose(t["10 (s)"], [emb, emb + 20 * 3 * 2.0, 20 * 10 * 2.0], rtol=1e-12)


# ------------------------------------------------------------------------------------------------ load_cost_model
def _csv(path, rows, header="key,value,unit,note"):
    path.write_text(header + "\n" + "".join(r + "\n" for r in rows), encoding="utf-8")
    return path


COSTS = ["pair_full_s,1.5,s/pair,", "pair_text_s,0.25,s/pair,", "query_embed_s,0.0625,s/query,",
         "topk_per_target_s,1e-07,s/target,", "topk_base_s,0.001,s,", "image_embed_s,1.25,s/image,"]


def test_load_cost_model_from_a_csv_full_and_text(tmp_path):
    path = _csv(tmp_path / "lat.csv",
                ['machine,"Caf\u00e9 CPU, 2 threads",,'] + COSTS + ["repeats,2,,", "date,2026-01-02,,"])
    cm = load_cost_model(path)
    assert (cm.pair_s, cm.query_embed_s, cm.topk_per_target_s, cm.topk_base_s, cm.image_embed_s) == (
        1.5, 0.0625, 1e-07, 0.001, 1.25)
    assert all(type(getattr(cm, f)) is float for f in ("pair_s", "query_embed_s", "topk_per_target_s"))
    assert cm.machine == "Caf\u00e9 CPU, 2 threads" and cm.source == "lat.csv"
    assert cm.extra == {"machine": "Caf\u00e9 CPU, 2 threads", "repeats": "2", "date": "2026-01-02"}
    text = load_cost_model(str(path), pair="text")
    assert text.pair_s == 0.25 and text.query_embed_s == 0.0625 and text.source == "lat.csv"


def test_load_cost_model_numeric_csv_without_machine(tmp_path):
    """Only the two needed columns, every value a number (a float64 column): machine falls back to "unknown"."""
    path = _csv(tmp_path / "only.csv", [r[:-len(r.split(",", 2)[2]) - 1] for r in COSTS] + ["bench_wall_s,9.5"],
                header="key,value")
    cm = load_cost_model(path)
    assert cm.machine == "unknown" and cm.pair_s == 1.5 and cm.image_embed_s == 1.25
    assert cm.extra == {"bench_wall_s": 9.5}


@pytest.mark.parametrize("numeric", [True, False])
def test_load_cost_model_refuses_a_nan_value(tmp_path, numeric):
    rows = [r.replace("0.001", "") if r.startswith("topk_base_s") else r for r in COSTS]
    if not numeric:
        rows.append("machine,some cpu,,")
    with pytest.raises(ValueError, match=r"cost values \['topk_base_s'\] missing in nan\.csv: run "
                                         r"benchmarks/bench_cross_encoder\.py"):
        load_cost_model(_csv(tmp_path / "nan.csv", rows))


def test_load_cost_model_refuses_absent_keys_and_columns(tmp_path):
    rows = [r for r in COSTS if not r.startswith(("pair_text_s", "image_embed_s"))]
    with pytest.raises(ValueError, match=r"cost values \['pair_text_s', 'image_embed_s'\] missing in few\.csv"):
        load_cost_model(_csv(tmp_path / "few.csv", rows))
    with pytest.raises(ValueError, match=r"cols\.csv lacks the columns key,value"):
        load_cost_model(_csv(tmp_path / "cols.csv", ["pair_full_s,1.5"], header="key,val"))
    with pytest.raises(ValueError, match=r"lacks the columns key,value"):
        load_cost_model(_csv(tmp_path / "cols2.csv", ["1.5,pair_full_s"], header="value,name"))


def test_load_cost_model_refuses_an_unknown_pair(tmp_path):
    path = _csv(tmp_path / "lat.csv", COSTS)
    for bad in ("half", "FULL", None):
        with pytest.raises(ValueError, match=rf"pair must be 'full' or 'text'; got {bad!r}"):
            load_cost_model(path, pair=bad)


def test_load_cost_model_without_a_file_uses_the_fallback_constants(tmp_path, monkeypatch):
    missing = tmp_path / "absent.csv"
    names = ", ".join(repr(k) for k in NEED)
    with pytest.raises(ValueError, match=rf"cost values \[{names}\] missing in FALLBACK_COSTS \(report CSV absent\): "
                                         r"run benchmarks/bench_cross_encoder\.py"):
        load_cost_model(missing)
    filled = {"pair_full_s": 3.0, "pair_text_s": 0.5, "image_embed_s": 2.0, "query_embed_s": 0.125,
              "topk_per_target_s": 2e-7, "topk_base_s": 0.0, "machine": "m1", "source": "fallback constants"}
    monkeypatch.setattr(rerank_cost, "FALLBACK_COSTS", filled)
    cm = load_cost_model(missing, pair="text")
    assert (cm.pair_s, cm.query_embed_s, cm.topk_per_target_s, cm.topk_base_s, cm.image_embed_s) == (
        0.5, 0.125, 2e-7, 0.0, 2.0)
    assert cm.machine == "m1" and cm.source == "FALLBACK_COSTS (report CSV absent)"
    assert cm.extra == {"machine": "m1", "source": "fallback constants"}
    assert filled["pair_full_s"] == 3.0 and len(filled) == 8   # the constants are read, not changed


def test_load_cost_model_default_path_prefers_the_checkout_report(tmp_path, monkeypatch):
    report = _csv(tmp_path / "report.csv", COSTS)
    packaged = _csv(tmp_path / "packaged.csv", [r.replace("1.5", "7.5") for r in COSTS])
    monkeypatch.setattr(rerank_cost, "LATENCY_REPORT", report)
    monkeypatch.setattr(rerank_cost, "PACKAGED_LATENCY", packaged)
    cm = load_cost_model()
    assert cm.pair_s == 1.5 and cm.source == "report.csv"
    monkeypatch.setattr(rerank_cost, "LATENCY_REPORT", tmp_path / "no-report.csv")   # an installed package
    cm = load_cost_model()
    assert cm.pair_s == 7.5 and cm.source == "packaged.csv"


def test_load_cost_model_reads_the_committed_report():
    """The committed benchmark report, read here with pandas directly: the model carries its numbers."""
    df = pd.read_csv(rerank_cost.PACKAGED_LATENCY)
    vals = dict(zip(df["key"], df["value"]))
    cm = load_cost_model()
    assert cm.pair_s == float(vals["pair_full_s"]) and cm.image_embed_s == float(vals["image_embed_s"])
    assert cm.topk_per_target_s == float(vals["topk_per_target_s"]) and cm.machine == vals["machine"]
    assert cm.source == "cross_encoder_latency.csv"
    assert load_cost_model(pair="text").pair_s == float(vals["pair_text_s"])


# ------------------------------------------------------------------------------------------------ measure_topk_seconds
class FakeClock:
    """Returns the given readings in turn (and counts the calls)."""

    def __init__(self, readings):
        self.readings, self.calls = list(readings), 0

    def __call__(self):
        self.calls += 1
        return self.readings.pop(0)


def test_measure_topk_seconds_is_the_median_of_the_repeats():
    clock = FakeClock([0.0, 1.0, 10.0, 13.0, 20.0, 25.0])
    assert measure_topk_seconds(30, dim=4, clock=clock) == 3.0   # repeats=3: durations 1, 3, 5
    assert clock.calls == 6
    clock = FakeClock([0.0, 1.0, 10.0, 13.0, 20.0, 25.0, 30.0, 130.0])
    assert measure_topk_seconds(30, dim=4, repeats=4, clock=clock) == 4.0   # 1, 3, 5, 100
    assert measure_topk_seconds(30, dim=4, repeats=1, clock=FakeClock([2.0, 2.5])) == 0.5


class TorchRecorder(TorchFunctionMode):
    """Records the torch calls of a block of code: the random draws, the score matrices and every top-k."""

    def __init__(self):
        super().__init__()
        self.randn, self.scores, self.topk_in, self.topk_out, self.gather = [], [], [], [], []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = getattr(func, "__name__", "")
        if name == "randn":
            self.randn.append(out)
        elif name == "matmul":
            self.scores.append(out)
        elif name == "topk":
            self.topk_in.append((args[0].shape[1], args[1]))
            self.topk_out.append(out)
        elif name == "gather":
            self.gather.append(out)
        return out


def _reference_topk(n, dim, chunk, k, seed):
    """Exact top-k (float64) over the targets the function scans: its ``min(n, chunk)`` random unit rows repeated."""
    g = torch.Generator().manual_seed(seed)
    block = torch.randn(min(n, chunk), dim, generator=g).double()
    q = torch.randn(1, dim, generator=g).double()
    block = block / block.norm(dim=1, keepdim=True)
    q = q / q.norm()
    scores = (block @ q[0]).numpy()[np.arange(n) % block.shape[0]]
    return scores, np.sort(scores)[::-1][:k]


@pytest.mark.parametrize("n, chunk, k", [(25, 10, 3), (30, 10, 3), (7, 10, 3), (3, 10, 5), (12, 2, 5), (9, 4, 20)])
def test_measure_topk_seconds_scans_every_target_and_keeps_the_exact_topk(n, chunk, k):
    """Blocks of ``chunk`` rows (the last one shorter), each scored once per repeat, merged into the exact top-k of
    all ``n`` targets: values (float64 reference) and distinct target indices that carry them. ``chunk < k`` with
    several blocks raised before the fix."""
    dim, seed = 4, 7
    with TorchRecorder() as rec:
        measure_topk_seconds(n, dim=dim, k=k, chunk=chunk, repeats=2, seed=seed)
    scores, want = _reference_topk(n, dim, chunk, k, seed)
    widths = [min(chunk, n - s) for s in range(0, n, chunk)]
    assert [s.shape for s in rec.scores] == [(1, w) for w in widths] * 2
    blocks = len(widths)
    per_repeat = len(rec.topk_out) // 2
    assert per_repeat == 2 * blocks - 1   # one top-k per block, one merge per block after the first
    assert rec.topk_in[:per_repeat] == rec.topk_in[per_repeat:]
    first = rec.topk_in[0]
    assert first == (widths[0], min(k, widths[0]))
    best_v = rec.topk_out[-1].values.numpy()[0]
    if blocks == 1:
        best_i = rec.topk_out[-1].indices.numpy()[0]
    else:
        assert len(rec.gather) == 2 * (blocks - 1)
        best_i = rec.gather[-1].numpy()[0]
        for cols, kk in rec.topk_in[2:per_repeat:2]:   # the merges: all candidates so far, at most k kept
            assert kk == min(k, cols)
    np.testing.assert_allclose(best_v, want, rtol=0, atol=1e-6)
    assert len(set(best_i.tolist())) == best_i.size == min(k, n)
    assert best_i.min() >= 0 and best_i.max() < n
    np.testing.assert_allclose(scores[best_i], best_v, rtol=0, atol=1e-6)


def test_measure_topk_seconds_defaults():
    """dim 256, k 20, seed 0, three repeats, and blocks of 100,000 rows."""
    with TorchRecorder() as rec:
        measure_topk_seconds(40)
    assert [tuple(r.shape) for r in rec.randn] == [(40, 256), (1, 256)]
    g = torch.Generator().manual_seed(0)
    np.testing.assert_array_equal(rec.randn[0].numpy(), torch.randn(40, 256, generator=g).numpy())
    assert rec.topk_in == [(40, 20)] * 3
    scores, want = _reference_topk(40, 256, 100_000, 20, 0)
    np.testing.assert_allclose(rec.topk_out[-1].values.numpy()[0], want, rtol=0, atol=1e-6)
    with TorchRecorder() as rec:
        measure_topk_seconds(100_001, dim=1, repeats=1)
    assert tuple(rec.randn[0].shape) == (100_000, 1)
    assert [s.shape for s in rec.scores] == [(1, 100_000), (1, 1)]
