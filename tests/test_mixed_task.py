"""A task holding embeddings of some inputs beside stored score matrices of some pairs (issue 43: "embeddings
and/or matrices"): what it holds and how each pair is scored, the check that a stored matrix agrees with the product
of embeddings the task also holds (refusing a shuffled, transposed or other-model matrix), bank cuts, one evaluate,
and the banks' provenance marks. Every method's fit and scores on such tasks are checked against the task of
embeddings in ``tests/method_checks.py`` (``check_mixed_tasks_equal_embeddings``)."""

import numpy as np
import pytest

import hubnorm as hn
from hubnorm.matrices import ProductScores
from hubnorm.retrieval import AGREEMENT, RetrievalTask
from hubnorm.scores import matrices_from_embeddings


def _unit(rng, n, d=8):
    x = rng.standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture
def parts():
    rng = np.random.default_rng(3)
    q, t, qb, tb = (_unit(rng, n) for n in (20, 15, 30, 25))
    pos = hn.Positives.from_labels(np.arange(20) % 15, 15)
    return {"queries": q, "targets": t, "query_bank": qb, "target_bank": tb}, \
        matrices_from_embeddings(q, t, qb, tb), pos


def _task(vectors, mats, pos, held, stored, **kw):
    return RetrievalTask(**{n: vectors[n] for n in held}, positives=pos, meta={"dataset": "unit"},
                         scores={p: mats[p] for p in stored}, **kw)


TEST_MATRIX = (("targets", "query_bank"), (("queries", "targets"),))
BANK_MATRICES = (("queries", "targets"), (("query_bank", "targets"),))


def test_what_a_mixed_task_holds(parts):
    vectors, mats, pos = parts
    a = _task(vectors, mats, pos, *TEST_MATRIX)
    assert a.kind == "scores"
    assert [a.has(n) for n in ("queries", "targets", "query_bank", "target_bank")] == [True, True, True, False]
    assert (a.n_queries, a.n_targets, a.size("query_bank")) == (20, 15, 30)
    assert isinstance(a.matrix("query_bank", "targets"), ProductScores)         # both held as embeddings
    assert not isinstance(a.matrix("queries", "targets"), ProductScores)        # the stored test matrix
    np.testing.assert_allclose(a.score().numpy(), vectors["queries"] @ vectors["targets"].T, rtol=0, atol=1e-12)
    b = _task(vectors, mats, pos, *BANK_MATRICES)
    assert isinstance(b.matrix("queries", "targets"), ProductScores)
    assert not isinstance(b.matrix("query_bank", "targets"), ProductScores)
    with pytest.raises(ValueError, match=r"no query bank x target bank score matrix"):
        b.matrix("query_bank", "target_bank")
    with pytest.raises(ValueError, match=r"^a task given as scores needs the test score matrix \(queries x targets\), "
                                         r"or the queries and targets as embeddings"):
        _task(vectors, mats, pos, ("targets",), (("query_bank", "targets"),))
    with pytest.raises(ValueError, match=r"^this task has no 'query_bank' embeddings; it holds \['queries', "
                                         r"'targets'\]$"):
        RetrievalTask(vectors["queries"], vectors["targets"], pos).matrix("query_bank", "targets")
    with pytest.raises(ValueError, match=r"^with_banks changes embeddings beside stored score matrices"):
        b.with_banks(query_bank=vectors["query_bank"])
    with pytest.raises(ValueError, match=r"^query_bank must have 8 columns|query_bank.*dimension|columns"):
        RetrievalTask(targets=vectors["targets"], query_bank=vectors["query_bank"][:, :4], positives=pos,
                      scores={("queries", "targets"): mats[("queries", "targets")]})


def test_a_stored_matrix_must_be_the_product_of_the_embeddings_beside_it(parts):
    vectors, mats, pos = parts
    both = (("queries", "targets", "query_bank"), (("queries", "targets"), ("query_bank", "targets")))
    _task(vectors, mats, pos, *both)                                              # agrees: accepted
    f16 = {**mats, ("query_bank", "targets"): mats[("query_bank", "targets")].astype(np.float16)}
    _task(vectors, f16, pos, *both)                                               # float16 rounding is within
    assert np.abs(f16[("query_bank", "targets")] - mats[("query_bank", "targets")]).max() < AGREEMENT / 2
    bank = mats[("query_bank", "targets")]
    swapped = bank.copy()
    swapped[[0, 1]] = swapped[[1, 0]]                 # two bank rows in another order: row 0 is one of the rows read
    other = matrices_from_embeddings(*(_unit(np.random.default_rng(9), n) for n in (20, 15, 30)))
    for wrong, why in ((swapped, "two rows swapped"), (bank[:, ::-1], "columns reversed"),
                       (other[("query_bank", "targets")], "another model")):
        with pytest.raises(ValueError, match=r"^scores\[\('query_bank', 'targets'\)\] differs from the product of the "
                                             r"query_bank and targets embeddings the task also holds, by up to "
                                             r"[0-9.e-]+: both must score the same items in the same order with the "
                                             r"same model \(a transposed, shuffled or unnormalised matrix\?\); pass "
                                             r"one of the two \(the product is what the task reads\), or "
                                             r"check=False if the difference is meant$"):
            _task(vectors, {**mats, ("query_bank", "targets"): wrong}, pos, *both)
    # rows swapped outside the 64 compared whole rows: their means differ (every row's and column's mean is compared)
    rng = np.random.default_rng(4)
    big = {n: _unit(rng, k) for n, k in (("queries", 20), ("targets", 15), ("query_bank", 300))}
    stored = big["query_bank"] @ big["targets"].T
    pick = np.unique(np.linspace(0, 299, 64).round().astype(int))
    i = next(r for r in range(300) if r not in pick and r + 1 not in pick)
    stored[[i, i + 1]] = stored[[i + 1, i]]
    right = big["query_bank"] @ big["targets"].T                    # 300 rows, read in blocks of 2: accepted
    _task(big, {("query_bank", "targets"): right.astype(np.float32)}, pos, ("queries", "targets", "query_bank"),
          (("query_bank", "targets"),), block_bytes=2 * 15 * 8)
    first = {("target_bank", "targets"): _unit(rng, 25) @ big["targets"].T}   # not embedded here: not compared
    with pytest.raises(ValueError, match=r"differs from the product of the query_bank and targets embeddings"):
        _task(big, {**first, ("query_bank", "targets"): stored}, pos, ("queries", "targets", "query_bank"),
              (("target_bank", "targets"), ("query_bank", "targets")))
    # the test matrix of the wrong orientation is read transposed and checked the same way
    with pytest.raises(ValueError, match=r"differs from the product of the targets and queries embeddings"):
        _task(vectors, {("targets", "queries"): mats[("queries", "targets")][::-1].T.copy()}, pos,
              ("queries", "targets"), (("targets", "queries"),))
    # check=False skips the check, and the product is what the task reads
    task = _task(vectors, {**mats, ("query_bank", "targets"): swapped}, pos, *both, check=False)
    ref = RetrievalTask(vectors["queries"], vectors["targets"], pos, query_bank=vectors["query_bank"])
    np.testing.assert_allclose(task.score(task.fit(hn.InvertedSoftmax(tau=0.1))).numpy(),
                               ref.score(ref.fit(hn.InvertedSoftmax(tau=0.1))).numpy(), rtol=0, atol=1e-12)


def test_bank_cuts_and_evaluate_equal_the_task_of_embeddings(parts):
    vectors, mats, pos = parts
    ref = RetrievalTask(vectors["queries"], vectors["targets"], pos, query_bank=vectors["query_bank"],
                        target_bank=vectors["target_bank"])
    rows = np.array([2, 5, 7, 11, 19, 23])
    for held, stored in ((("targets", "query_bank", "target_bank"), (("queries", "targets"),)),
                         (("queries", "targets", "target_bank"), (("query_bank", "targets"), ("query_bank", "target_bank")))):
        task = _task(vectors, mats, pos, held, stored)
        for method in (hn.NearestNeighborNormalization(k=4, alpha=0.5), hn.make_normalizer("dbsn", **hn.NORMALIZERS["dbsn"].example_params)):
            for bank in ("query_bank", "target_bank"):
                got = task.bank_subset(rows, bank)
                want = ref.bank_subset(rows, bank)
                assert got.size(bank) == want.size(bank) == rows.size
                assert got.meta == task.meta and got.meta is not task.meta   # its own copy of the labels
                g, w = hn.evaluate(got.fit(method.clone()), got), hn.evaluate(want.fit(method.clone()), want)
                assert {k: v for k, v in g.items() if k != "bank"} == pytest.approx(
                    {k: v for k, v in w.items() if k != "bank"}, abs=1e-9), (held, method, bank)


def test_provenance_marks_of_a_mixed_task(parts):
    vectors, mats, pos = parts
    ist = hn.InvertedSoftmax(tau=0.1)
    for held, stored in (TEST_MATRIX, BANK_MATRICES):
        task = _task(vectors, mats, pos, held, stored)
        assert hn.evaluate(task.fit(ist.clone()), task)["bank"] == "query-agnostic", held
        assert hn.evaluate(task.fit(ist.clone(), query_aware=True), task)["bank"] == "QUERY-AWARE", held
    # a bank given as stored rows over one gallery is never compared with test rows over another of the same width
    b = _task(vectors, mats, pos, *BANK_MATRICES)
    other = _task({**vectors, "targets": vectors["targets"].copy()}, mats, pos, *BANK_MATRICES)
    fitted = b.fit(ist.clone())
    assert hn.evaluate(fitted, b)["bank"] == "query-agnostic"
    assert hn.evaluate(fitted, other)["bank"] == "unrecorded"
    # target-bank embeddings beside a stored test matrix, targets not embedded: the query-aware leak is still found
    dual = hn.DualInvertedSoftmax()
    c = _task(vectors, mats, pos, ("target_bank",), (("queries", "targets"), ("target_bank", "targets")))
    aware = c.fit(dual, query_aware=True)
    assert "target_bank" not in aware.provenance_
    assert hn.evaluate(aware, c)["bank"] == "QUERY-AWARE"
    # the rows the label-free selection reads, held as scores only, are named
    with pytest.raises(ValueError, match=r"^label-free selection reads embeddings of the gallery and the query bank; "
                                         r"this task holds its targets as score matrices only"):
        hn.label_free.label_free_select_task("nnn", _task(vectors, mats, pos, ("query_bank",),
                                                          (("queries", "targets"), ("query_bank", "targets"))))
    # embeddings of the bank, but the test queries only as scores: certify names what it cannot compare
    a = _task(vectors, mats, pos, *TEST_MATRIX)
    emb = RetrievalTask(vectors["queries"], vectors["targets"], pos, query_bank=vectors["query_bank"])
    agnostic = emb.fit(ist.clone())
    with pytest.raises(ValueError, match=r"^InvertedSoftmax was fitted on embeddings but task holds no queries "
                                         r"embeddings"):
        hn.provenance.certify(agnostic, a)
    assert hn.evaluate(agnostic, a)["bank"] == "unrecorded"


def test_a_float32_task_scores_as_its_fit_does(parts):
    """The test scores of a task whose queries and targets are embedded are computed in the task's dtype from the
    tensors its fits read: bit-equal to the fitted normalizer's own scores of those queries."""
    import torch

    vectors, mats, pos = parts
    f32 = {k: v.astype(np.float32) for k, v in vectors.items()}
    task = _task(f32, mats, pos, ("queries", "targets"), (("query_bank", "targets"),), dtype=torch.float32)
    norm = task.fit(hn.MutualProximity())
    assert torch.equal(task.score(norm), norm.score(f32["queries"]))
