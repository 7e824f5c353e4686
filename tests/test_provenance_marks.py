"""The bank mark every result carries, and the saved tables that must show it.

``hubnorm.evaluate`` (on tasks of embeddings and of score matrices alike, and the sweeps) mark each result with
what its fit's banks were, read from the fit's record and not from what the caller meant: the expected marks here
follow from how each bank was built (test rows copied in by hand, near copies at a known cosine, clean banks). A
notebook's ``save_table`` refuses a table without its provenance columns, and one that shows a number only a
query-aware fit produced in a row not marked so.
"""

import math

import numpy as np
import pandas as pd
import pytest
import torch

import hubnorm as hn
from hubnorm import provenance as pv
from hubnorm_companion import compare
from hubnorm_companion.notebook import PROVENANCE_COLUMNS, with_provenance

D = 48


def _unit(x):
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    images = _unit(rng.standard_normal((80, D)))
    captions = _unit(images.repeat(2, 0) + 0.1 * rng.standard_normal((160, D)))
    return {"images": images, "captions": captions, "c2i": np.arange(160) // 2,
            "caption_bank": _unit(rng.standard_normal((100, D))), "image_bank": _unit(rng.standard_normal((60, D)))}


def _task(data, caption_bank=None):
    return hn.build_tasks(data["images"], data["captions"], data["c2i"],
                          caption_bank=data["caption_bank"] if caption_bank is None else caption_bank,
                          image_bank=data["image_bank"], directions=["t2i"])["t2i"]


@pytest.fixture(autouse=True)
def fresh_ledger():
    pv.clear_ledger()
    yield
    pv.clear_ledger()
    import sys
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


def test_evaluate_marks_what_the_banks_were_not_what_was_meant(data):
    task = _task(data)
    assert hn.evaluate(task.fit(hn.Identity()), task)["bank"] == "none"
    assert hn.evaluate(task.fit(hn.InvertedSoftmax()), task)["bank"] == "query-agnostic"
    assert hn.evaluate(task.fit(hn.InvertedSoftmax(), query_aware=True), task)["bank"] == "QUERY-AWARE"
    # the test captions handed in by hand as the bank (no query_aware flag): marked all the same
    leaky = _task(data, caption_bank=np.concatenate([data["caption_bank"], data["captions"][:5]]))
    assert hn.evaluate(leaky.fit(hn.NearestNeighborNormalization(k=4)), leaky)["bank"] == "QUERY-AWARE"
    # one near copy (cosine 0.997) among 100 clean rows is enough
    bank = data["caption_bank"].copy()
    rng = np.random.default_rng(0)
    u = rng.standard_normal(D)
    x = data["captions"][9].astype(np.float64)
    u -= (u @ x) * x
    bank[50] = (0.997 * x + math.sqrt(1 - 0.997 ** 2) * u / np.linalg.norm(u)).astype(np.float32)
    near = _task(data, caption_bank=bank)
    assert hn.evaluate(near.fit(hn.InvertedSoftmax()), near)["bank"] == "QUERY-AWARE"
    # a fit with no record of its banks says so, never "query-agnostic"
    norm = task.fit(hn.InvertedSoftmax())
    norm.provenance_ = None
    assert hn.evaluate(norm, task)["bank"] == "unrecorded"
    # the mark agrees with the certificate when one is asked for
    out = hn.evaluate(leaky.fit(hn.InvertedSoftmax()), leaky, certificate=True)
    assert out["bank"] == "QUERY-AWARE" and not out["certificate"].leak_free


def test_a_gallery_copied_into_the_target_bank_is_query_aware_too(data):
    images = data["image_bank"].copy()
    images[:4] = data["images"][10:14]
    task = hn.build_tasks(data["images"], data["captions"], data["c2i"], caption_bank=data["caption_bank"],
                          image_bank=images, directions=["t2i"])["t2i"]
    assert hn.evaluate(task.fit(hn.DualInvertedSoftmax()), task)["bank"] == "QUERY-AWARE"
    assert hn.evaluate(task.fit(hn.InvertedSoftmax()), task)["bank"] == "query-agnostic"   # uses no target bank


def test_score_matrices_with_the_test_captions_as_their_bank_are_marked(data):
    caps, images = data["captions"], data["images"]
    pos = hn.Positives.from_labels(data["c2i"], 80)
    clean = hn.RetrievalTask(scores=hn.matrices_from_embeddings(caps, images, data["caption_bank"]), positives=pos,
                             direction="t2i", check=False)
    assert hn.evaluate(None, clean)["bank"] == "none"
    assert hn.evaluate(clean.fit(hn.InvertedSoftmax()), clean)["bank"] == "query-agnostic"
    assert hn.evaluate(clean.fit(hn.InvertedSoftmax(), query_aware=True), clean)["bank"] == "QUERY-AWARE"
    handed_in = hn.RetrievalTask(scores=hn.matrices_from_embeddings(caps, images, caps.copy()), positives=pos,
                                 direction="t2i", check=False)
    assert hn.evaluate(handed_in.fit(hn.SinkhornNormalization()), handed_in)["bank"] == "QUERY-AWARE"


def test_score_task_refuses_a_bad_certificate_before_fitting(data):
    pos = hn.Positives.from_labels(data["c2i"], 80)
    task = hn.RetrievalTask(scores=hn.matrices_from_embeddings(data["captions"], data["images"], data["caption_bank"]),
                            positives=pos, direction="t2i", check=False)
    norm = hn.InvertedSoftmax()
    # the fit is the caller's step now: evaluate checks the certificate before it reads the normalizer at all
    with pytest.raises(TypeError, match=r"certificate must be True or False; got 'yes'"):
        hn.evaluate(norm, task, certificate="yes")
    assert not hasattr(norm, "offsets_")   # nothing was fitted
    with pytest.raises(TypeError, match=r"certificate must be True or False; got 'yes'"):
        hn.evaluate(task.fit(norm), task, certificate="yes")


def test_sweeps_mark_their_rows(data):
    from hubnorm.sweeps import iteration_table, sweep_table

    task = _task(data)
    points = [{"tau": 0.05}, {"tau": 0.1}]
    agnostic = sweep_table(task, "is", points)
    aware = sweep_table(task, "is", points, query_aware=True)
    assert agnostic["bank"].tolist() == ["query-agnostic"] * 2 and aware["bank"].tolist() == ["QUERY-AWARE"] * 2
    assert iteration_table(task, "sn", [2], query_aware=True)["bank"].tolist() == ["QUERY-AWARE"]
    assert iteration_table(task, "sn", [2])["bank"].tolist() == ["query-agnostic"]


def test_save_table_needs_both_provenance_columns():
    assert PROVENANCE_COLUMNS == ("data", "bank")
    df = pd.DataFrame({"method": ["raw"], "R@1": [50.0]})
    with pytest.raises(ValueError, match=r"table 't' has no 'data' column: .* data=label"):
        with_provenance(df, "t", bank="none")
    with pytest.raises(ValueError, match=r"table 't' has no 'bank' column: .* bank='none' for a table with no "):
        with_provenance(df, "t", data="synthetic")
    out = with_provenance(df, "t", data="synthetic", bank="none")
    assert out[["data", "bank"]].values.tolist() == [["synthetic", "none"]] and "data" not in df.columns
    # a compare table's run column is its data column
    assert with_provenance(df.assign(run="real: x"), "t", bank="none")["run"].tolist() == ["real: x"]
    with pytest.raises(ValueError, match=r"has a 'bank' column and bank='none' was also given"):
        with_provenance(df.assign(bank="none"), "t", data="x", bank="none")
    with pytest.raises(ValueError, match=r"data= must be a non-empty label .* got ' '"):
        with_provenance(df, "t", data=" ", bank="none")
    with pytest.raises(TypeError, match=r"table 't' must be a pandas DataFrame; got list"):
        with_provenance([1], "t", data="x", bank="none")


def test_a_query_aware_number_without_its_mark_is_refused(data):
    rng = np.random.default_rng(8)
    hard = dict(data, captions=_unit(data["images"].repeat(2, 0) + 0.9 * rng.standard_normal((160, D))))
    task = _task(hard)
    qa = hn.evaluate(task.fit(hn.InvertedSoftmax(), query_aware=True), task)
    ag = hn.evaluate(task.fit(hn.InvertedSoftmax()), task)
    assert qa["R@1"] != ag["R@1"]
    good = pd.DataFrame([{"method": "is", **qa}, {"method": "is", **ag}])
    with_provenance(good, "t", data="synthetic")                          # marked rows pass
    forged = good.assign(bank="query-agnostic")                            # the mark lost on the way
    with pytest.raises(ValueError, match=r"table 't' shows numbers only a query-aware fit produced.*row 0, column "
                                         r"'R@1'"):
        with_provenance(forged, "t", data="synthetic")
    assert pv.unmarked_query_aware(forged)[0].startswith("row 0, column 'R@1'")
    assert all(line.startswith("row 0") for line in pv.unmarked_query_aware(forged))   # row 1 is not query-aware
    # in a compare table's value columns too
    joined = pd.DataFrame({"method": ["is"], "this run": [qa["R@1"]], "run": ["x"], "bank": ["none"]})
    assert pv.unmarked_query_aware(joined) == [f"row 0, column 'this run': {qa['R@1']!r} (bank 'none')"]
    # a value that a query-agnostic computation also produced cannot be told apart: not refused
    hn.recall_at_k(np.array([0] * int(round(qa["R@1"] * 160 / 100)) + [5] * (160 - int(round(qa["R@1"] * 160 / 100)))), 1)
    assert pv.unmarked_query_aware(forged.iloc[:1][["method", "R@1", "bank"]]) == []
    pv.clear_ledger()
    assert pv.unmarked_query_aware(forged) == []
    with pytest.raises(ValueError, match=r"the table has no 'bank' column"):
        pv.unmarked_query_aware(pd.DataFrame({"R@1": [1.0]}))


def test_joined_and_gain_tables_carry_each_rows_mark(data):
    task = _task(data)
    rows = []
    for name, qa in (("raw", False), ("is", False), ("sn", True)):
        norm = task.fit(hn.make_normalizer(name), query_aware=qa)
        rows.append({"direction": "t2i", "method": name, "setting": "none" if name == "raw" else "x",
                     **hn.evaluate(norm, task)})
    res = pd.DataFrame(rows)
    joined = compare.beside_published(res, "nnn-chowdhury2024", "-", label="synthetic", on=("direction", "method",
                                                                                            "setting"))
    assert dict(zip(joined["method"], joined["bank"])) == {"raw": "none", "is": "query-agnostic", "sn": "QUERY-AWARE"}
    gains = compare.gains(joined.assign(published=1.0))
    assert dict(zip(gains["method"], gains["bank"])) == {"is": "query-agnostic", "sn": "QUERY-AWARE"}
    assert set(compare.gains(joined.drop(columns="bank").assign(published=1.0))["bank"]) == {"unrecorded"}
    delta = compare.beside_published(res.assign(setting="x"), "nnn-chowdhury2024", "-", label="synthetic",
                                     delta=("sn", "raw"))
    assert delta["bank"].tolist() == ["QUERY-AWARE"]


@pytest.fixture
def no_faiss(monkeypatch):
    """``import faiss`` fails, as on a machine without it (faiss is optional)."""
    import builtins

    real_import = builtins.__import__

    def refuse(name, *args, **kwargs):
        if name == "faiss":
            raise ImportError("no faiss here")
        return real_import(name, *args, **kwargs)

    return lambda: monkeypatch.setattr(builtins, "__import__", refuse)


def test_the_torch_hamming_search_equals_faiss():
    """The seam behind near-duplicate detection: faiss's exact binary search where faiss is installed, a +-1 matrix
    product in torch otherwise (and on a GPU). Both against a brute-force count of differing bits, ties included,
    the torch one also in many small blocks (a tie across blocks: the earlier block keeps it)."""
    rng = np.random.default_rng(4)
    bank = rng.integers(0, 256, size=(5000, 64), dtype=np.uint8)
    bank[4200] = bank[17]                                   # a tie: the first row wins
    test = rng.integers(0, 256, size=(300, 64), dtype=np.uint8)
    test[:3] = bank[[17, 4999, 4096]]                        # exact copies, across the bank's blocks
    test[3] = bank[10]
    test[3, 5] ^= np.uint8(0b101)                            # two bits flipped
    test[4] = bank[33]
    test[4, 0] ^= np.uint8(1)                               # one bit from row 33 ...
    bank[34] = bank[33]
    bank[34, 1] ^= np.uint8(1)                              # ... and one bit from row 34: a tie at distance 1
    bits = np.unpackbits(bank, axis=1).astype(np.int16)
    brute = np.array([np.abs(bits - b).sum(1) for b in np.unpackbits(test, axis=1).astype(np.int16)])
    want_d, want_i = brute.min(1), brute.argmin(1)          # argmin: the first row on a tie
    assert want_i[4] == 33 and want_d[4] == 1
    for kw in ({}, {"block_bytes": 4 * 217}):                # one block; parts of 3 test rows x blocks of 72 bank rows
        d, i = pv.nearest_hamming(bank, test, backend="torch", device="cpu", **kw)
        assert d.dtype == i.dtype == np.int64 and d.shape == i.shape == (300, 1)
        assert d[:, 0].tolist() == want_d.tolist() and i[:, 0].tolist() == want_i.tolist()
    assert d[:5, 0].tolist() == [0, 0, 0, 2, 1] and i[:5, 0].tolist() == [17, 4999, 4096, 10, 33]
    d0, i0 = pv.nearest_hamming(bank, test[:0], backend="torch")
    assert d0.shape == i0.shape == (0, 1)
    pytest.importorskip("faiss")
    fd, fi = pv.nearest_hamming(bank, test, backend="faiss")
    assert fd[:, 0].tolist() == want_d.tolist() and fi[:, 0].tolist() == want_i.tolist()
    ad, ai = pv.nearest_hamming(bank, test)                  # the default: faiss on a CPU-only machine
    assert ad[:, 0].tolist() == want_d.tolist() and ai[:, 0].tolist() == want_i.tolist()


def test_the_hamming_search_picks_its_backend_and_returns_int64_columns(monkeypatch, no_faiss):
    """Which backend runs (both give the same answer, so only a spy tells): faiss by default on a CPU where it is
    installed, torch when asked or when faiss cannot be imported; one int64 column each, for any integer input."""
    faiss = pytest.importorskip("faiss")
    rng = np.random.default_rng(6)
    bank = rng.integers(0, 256, size=(50, 64), dtype=np.uint8)
    test = rng.integers(0, 256, size=(7, 64), dtype=np.uint8)
    want_d, want_i = pv.nearest_hamming(bank, test, backend="torch", device="cpu")
    calls, real = [], faiss.IndexBinaryFlat
    monkeypatch.setattr(faiss, "IndexBinaryFlat", lambda d: calls.append(d) or real(d))
    for kw, used in (({}, not torch.cuda.is_available()), ({"backend": "faiss"}, True), ({"backend": "torch"}, False),
                     ({"device": "cpu"}, True), ({"backend": "torch", "device": "cpu"}, False)):
        calls.clear()
        d, i = pv.nearest_hamming(bank.astype(np.int64), test.astype(np.int64), **kw)   # byte values as int64
        assert calls == ([512] if used else []), kw
        assert d.shape == i.shape == (7, 1) and d.dtype == i.dtype == np.int64, kw
        assert np.array_equal(d, want_d) and np.array_equal(i, want_i), kw
    d0, i0 = pv.nearest_hamming(bank, test[:0])
    assert d0.shape == i0.shape == (0, 1) and d0.dtype == i0.dtype == np.int64
    no_faiss()
    calls.clear()
    d, i = pv.nearest_hamming(bank, test)
    assert calls == [] and np.array_equal(d, want_d) and np.array_equal(i, want_i)


def test_the_hamming_search_refuses_bad_input():
    rng = np.random.default_rng(5)
    bank = rng.integers(0, 256, size=(10, 64), dtype=np.uint8)
    with pytest.raises(ValueError, match="backend must be None, 'faiss' or 'torch'"):
        pv.nearest_hamming(bank, bank, backend="numpy")
    with pytest.raises(ValueError, match="same multiple of 64 bits"):
        pv.nearest_hamming(bank, bank[:, :32])
    with pytest.raises(ValueError, match="same multiple of 64 bits"):
        pv.nearest_hamming(bank[:, :4], bank[:, :4])
    for one_d in ((bank, bank[0]), (bank[0], bank)):
        with pytest.raises(ValueError, match="same multiple of 64 bits"):
            pv.nearest_hamming(*one_d)
    with pytest.raises(ValueError, match="bank non-empty"):
        pv.nearest_hamming(bank[:0], bank)
    with pytest.raises(ValueError, match="device="):
        pv.nearest_hamming(bank, bank, device="gpu0")


def test_marks_need_no_faiss(data, no_faiss):
    no_faiss()
    pv._COMPARED.clear()
    task = _task(data)
    assert hn.evaluate(task.fit(hn.InvertedSoftmax(), query_aware=True), task)["bank"] == "QUERY-AWARE"
    assert hn.evaluate(task.fit(hn.InvertedSoftmax()), task)["bank"] == "query-agnostic"


def test_score_rows_are_compared_only_over_the_gallery_they_were_fitted_on(data):
    caps, images = data["captions"], data["images"]
    pos = hn.Positives.from_labels(data["c2i"], 80)
    task = hn.RetrievalTask(scores=hn.matrices_from_embeddings(caps, images, data["caption_bank"]), positives=pos,
                            direction="t2i", check=False)
    shuffled = images[np.random.default_rng(1).permutation(80)]            # the same width, another column order
    other = hn.RetrievalTask(scores=hn.matrices_from_embeddings(caps, shuffled, data["caption_bank"]), positives=pos,
                             direction="t2i", check=False)
    norm = task.fit(hn.InvertedSoftmax(), query_aware=True)
    assert pv.certify(norm, task).findings[0]["exact"] == 160
    with pytest.raises(ValueError, match=r"fitted on score rows over another gallery .* certify it on the task it "
                                         r"was fitted from"):
        pv.certify(norm, other)
    assert pv.bank_mark(norm, other) == "unrecorded" and pv.bank_mark(norm, task) == "QUERY-AWARE"
    # a bank subset of the same task keeps its gallery
    sub = task.bank_subset(np.arange(40))
    assert hn.evaluate(sub.fit(hn.InvertedSoftmax()), sub)["bank"] == "query-agnostic"


def test_review_findings_marks_never_claim_more_than_was_compared(data):
    caps, images = data["captions"], data["images"]
    pos = hn.Positives.from_labels(data["c2i"], 80)
    # a score-matrix fit's target bank is not compared: its mark cannot say query-agnostic (here it holds the gallery)
    st = hn.RetrievalTask(scores=hn.matrices_from_embeddings(caps, images, data["caption_bank"], images.copy()),
                          positives=pos, direction="t2i", check=False)
    assert hn.evaluate(st.fit(hn.DualInvertedSoftmax()), st)["bank"] == "unrecorded"
    assert hn.evaluate(st.fit(hn.DualInvertedSoftmax()), st, certificate=True)["bank"] == "unrecorded"
    assert hn.evaluate(st.fit(hn.InvertedSoftmax()), st)["bank"] == "query-agnostic"   # its only bank was compared
    # a fit on embeddings evaluated on score matrices: evaluated as before, marked unrecorded (no error)
    task = _task(data)
    emb = task.fit(hn.InvertedSoftmax())
    plain = hn.RetrievalTask(scores=hn.matrices_from_embeddings(caps, images, data["caption_bank"]), positives=pos,
                             direction="t2i", check=False)
    assert hn.evaluate(emb, plain)["bank"] == "unrecorded"
    # the raw scores: the same mark with or without a certificate
    assert hn.evaluate(task.fit(hn.Identity()), task, certificate=True)["bank"] == "none"
    # a score matrix computed elsewhere (here normalized with the test captions as the bank): its banks are
    # unknown, so it is never marked "none" (raw) nor query-agnostic
    leaked = task.fit(hn.InvertedSoftmax(), query_aware=True).score(task.queries)
    for scores in (leaked, np.asarray(leaked)):
        assert hn.evaluate(scores, task)["bank"] == "unrecorded"


# ------------------------------------------------------------------------------------------------- saved figures
def _figure(values=(1.0, 2.0), title=""):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4, 3))
    ax.bar(["a", "b"], list(values))
    ax.set_title(title)
    return fig


def test_save_figure_needs_data_and_bank_and_writes_them_beside_the_figure(tmp_path, monkeypatch):
    import json

    from PIL import Image

    from hubnorm_companion.notebook import Run

    monkeypatch.setenv("HUBNORM_RESULTS", str(tmp_path))
    run = Run(prefix="99")
    with pytest.raises(ValueError, match=r"figure 'f': data= is required.*data=label"):
        run.save_figure(_figure(), "f", bank="none")
    with pytest.raises(ValueError, match=r"figure 'f': bank= is required.*bank='none'"):
        run.save_figure(_figure(), "f", data="real: a set")
    with pytest.raises(ValueError, match=r"every bank label must be a non-empty string; got ''"):
        run.save_figure(_figure(), "f", data="real: a set", bank=["none", ""])
    with pytest.raises(ValueError, match=r"bank= has no label"):
        run.save_figure(_figure(), "f", data="real: a set", bank=[])
    assert not (tmp_path / "figures" / "99_f.png").exists()   # nothing written before the checks pass
    run.save_figure(_figure(), "f", data="real: a set", caption="A caption.",
                    bank=pd.Series(["none", "query-agnostic", "none"]))   # a table's column: its distinct labels
    record = json.loads((tmp_path / "figures" / "99_f.json").read_text())
    assert record == {"figure": "99_f", "data": ["real: a set"], "bank": ["none", "query-agnostic"],
                      "caption": "A caption."}
    said = "data: real: a set. bank: none, query-agnostic"
    assert Image.open(tmp_path / "figures" / "99_f.png").text["Description"] == said
    assert b"none, query-agnostic" in (tmp_path / "figures" / "99_f.pdf").read_bytes()
    assert (tmp_path / "figures" / "99_f.txt").read_text() == "A caption.\n"
    run.save_figure(_figure(), "f", data="real: a set", bank="none")     # saved again without a caption:
    assert not (tmp_path / "figures" / "99_f.txt").exists()              # the old caption goes with it
    assert json.loads((tmp_path / "figures" / "99_f.json").read_text())["caption"] is None


def test_a_figure_must_say_what_a_reader_needs_to_know(tmp_path, monkeypatch):
    from hubnorm_companion.notebook import Run

    monkeypatch.setenv("HUBNORM_RESULTS", str(tmp_path))
    monkeypatch.setenv("HUBNORM_FIGURE_CHECK", "error")   # the test suite's setting: the notebooks' figures must say it
    run = Run(prefix="99")
    with pytest.raises(ValueError, match=r"figure 'q' shows query-aware results but says so nowhere .*"
                                         r"HUBNORM_FIGURE_CHECK=error.*put 'query-aware'"):
        run.save_figure(_figure(), "q", data="real: a set", bank=["none", "QUERY-AWARE"])
    run.save_figure(_figure(title="IS (query-aware)"), "q", data="real: a set", bank=["none", "QUERY-AWARE"])
    run.save_figure(_figure(), "q", data="real: a set", bank="test queries (query-aware)",
                    caption="IS with the test queries as the bank (query-aware).")
    with pytest.raises(ValueError, match=r"figure 's' shows synthetic data but says so nowhere .*the data label"):
        run.save_figure(_figure(), "s", data=["real: a set", "synthetic analog (seed 0)"], bank="none")
    run.save_figure(_figure(), "s", data="synthetic analog (seed 0)", bank="none", caption="x; synthetic analog.")


def test_outside_the_test_suite_a_figure_gets_the_marks_it_lacks(tmp_path, monkeypatch, capsys):
    """Users' data can turn out query-aware (a near copy of a test caption in their bank): the notebook does not
    stop; the caption gets the marks and the data label, and a NOTE under the figure says so."""
    import json

    from hubnorm_companion.notebook import Run, marks_note

    monkeypatch.setenv("HUBNORM_RESULTS", str(tmp_path))
    monkeypatch.setenv("HUBNORM_FIGURE_CHECK", "note")
    run = Run(prefix="99")
    run.save_figure(_figure(), "q", caption="R@1 per method.", data="synthetic analog (seed 0)",
                    bank=["none", "QUERY-AWARE"])
    record = json.loads((tmp_path / "figures" / "99_q.json").read_text())
    assert record["caption"] == ("R@1 per method. " + marks_note(["none", "QUERY-AWARE"])
                                 + " Data: synthetic analog (seed 0).")
    assert (tmp_path / "figures" / "99_q.txt").read_text().strip() == record["caption"]
    assert capsys.readouterr().out.startswith("NOTE: figure q: Bank marks: none, QUERY-AWARE (QUERY-AWARE: a test")
    monkeypatch.setenv("HUBNORM_FIGURE_CHECK", "off")
    run.save_figure(_figure(), "q2", data="real: a set", bank="test queries (query-aware)")
    assert capsys.readouterr().out == ""
    assert "Bank marks: test queries (query-aware)" in (tmp_path / "figures" / "99_q2.txt").read_text()
    # said already (in a figure legend's title, here): nothing added
    fig = _figure()
    fig.legend(["x"], title="query-aware fits")
    run.save_figure(fig, "q3", data="real: a set", bank="QUERY-AWARE")
    assert json.loads((tmp_path / "figures" / "99_q3.json").read_text())["caption"] is None
    assert marks_note(["none", "query-agnostic"]) == ""
    with pytest.raises(TypeError, match=r"bank= must be a label or a sequence of labels .*got a DataFrame"):
        run.save_figure(_figure(), "t", data="real: a set", bank=pd.DataFrame({"bank": ["none"]}))
    with pytest.raises(TypeError, match=r"data= must be .*got a dict"):
        run.save_figure(_figure(), "t", data={"a": 1}, bank="none")


def test_a_figure_that_draws_a_query_aware_number_without_its_mark_is_refused(data, tmp_path, monkeypatch):
    from hubnorm_companion.notebook import Run

    monkeypatch.setenv("HUBNORM_RESULTS", str(tmp_path))
    monkeypatch.setenv("HUBNORM_FIGURE_CHECK", "note")   # refused in every mode
    run = Run(prefix="99")
    rng = np.random.default_rng(8)
    task = _task(dict(data, captions=_unit(data["images"].repeat(2, 0) + 0.9 * rng.standard_normal((160, D)))))
    qa = hn.evaluate(task.fit(hn.InvertedSoftmax(), query_aware=True), task)
    ag = hn.evaluate(task.fit(hn.InvertedSoftmax()), task)
    assert qa["bank"] == "QUERY-AWARE" and qa["R@1"] != ag["R@1"]
    run.save_figure(_figure([ag["R@1"], 50.0]), "ok", data="real: a set", bank=ag["bank"])
    with pytest.raises(ValueError, match=r"figure 'forged' draws R@K values only a query-aware fit .*"
                                         + f"{qa['R@1']:.4g}"):
        run.save_figure(_figure([ag["R@1"], qa["R@1"]]), "forged", data="real: a set", bank=["none", ag["bank"]])
    run.save_figure(_figure([ag["R@1"], qa["R@1"]], title="IS, query-aware and not"), "marked", data="real: a set",
                    bank=[ag["bank"], qa["bank"]])
    # a whole number is never taken for an R@K (bin counts, positions): a query-aware R@1 of exactly 25.0 in the
    # ledger does not refuse a histogram with a bin of 25
    pv.note_recalls([25.0])
    pv.note_result({"R@1": 25.0}, "QUERY-AWARE")
    assert pv.only_query_aware(25.0)
    run.save_figure(_figure([25.0, 3.0]), "counts", data="real: a set", bank="none")


def test_plotted_values_reads_what_each_kind_of_plot_draws():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    from hubnorm_companion.figures import plotted_values

    fig, axes = plt.subplots(1, 5, figsize=(12, 3))
    axes[0].plot([1.5, 2.5], [11.25, 12.75])                                  # a line: x and y
    axes[1].barh(["a", "b"], [21.5, 22.5])                                    # horizontal bars: their widths
    axes[2].scatter([31.5], [32.25])                                          # a scatter point: its offsets
    axes[3].errorbar([0.0], [41.0], yerr=[[0.5], [1.25]], fmt="none")        # an error bar: its ends
    sns.heatmap(np.array([[51.5, 52.5]]), ax=axes[4], cbar=False)             # a heat map: its cells
    got = set(np.round(plotted_values(fig), 6))
    assert {1.5, 2.5, 11.25, 12.75, 21.5, 22.5, 31.5, 32.25, 40.5, 42.25, 51.5, 52.5} <= got
    assert plotted_values(plt.figure()).size == 0
    plt.close("all")


def test_comparisons_are_remembered_apart_for_other_sketches_and_kinds(monkeypatch):
    rng = np.random.default_rng(5)
    bank, test = _unit(rng.standard_normal((30, D))), _unit(rng.standard_normal((20, D)))
    calls = []
    monkeypatch.setattr(pv, "compare", lambda b, t, near_cosine: calls.append((b.bits, t.bits)) or {"n": len(calls)})
    monkeypatch.setattr(pv, "_COMPARED", type(pv._COMPARED)())
    fp = lambda x, name, **kw: pv.fingerprint(x, name, **kw)  # noqa: E731
    first = pv._compare_once(fp(bank, "query_bank"), fp(test, "queries"), 0.99)
    assert pv._compare_once(fp(bank, "query_bank"), fp(test, "queries"), 0.99) == first and len(calls) == 1
    pv._compare_once(fp(bank, "query_bank", seed=1), fp(test, "queries", seed=1), 0.99)   # other directions
    pv._compare_once(fp(bank, "query_bank"), fp(test, "queries", bits=128), 0.99)         # a shorter test sketch
    pv._compare_once(fp(bank, "query_bank"), fp(test, "queries"), 0.98)                   # another threshold
    assert len(calls) == 4 and calls[2] == (pv.BITS, 128)
