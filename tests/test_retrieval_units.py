"""Unit checks of hubnorm.retrieval aimed at what its mutation run (benchmarks/reports/mutation/retrieval.md) found
unchecked by tests/test_retrieval.py: the direction names and their guard; every guard of ``Positives`` (indptr,
indices, n_targets, empty queries, float and torch indices) by its own message and at its boundary (0 queries, the
last valid target, ``n_targets`` 1); the CSR layout of ``from_labels`` / ``from_groups`` / ``from_lists`` /
``subset`` against hand-written lists (``from_groups`` keeps every query's targets in ascending order); the guards
of ``RetrievalTask`` and ``build_tasks`` by their messages (which input, which count); ``has``, ``fit`` (which bank
goes where), ``with_banks`` and ``with_distractors`` (dtype, positives, meta); torch inputs and banks.

Mutation run (``--tests tests/test_retrieval.py`` [+ this file]): 280 -> 475 of 508 killed (55% -> 94%). The 33
survivors change nothing a caller can observe on a CPU:

* ``device="cpu"`` -> ``None`` / dropped in ``as_embeddings`` (``RetrievalTask.__post_init__`` 5/8/16/20/52/56,
  ``with_distractors`` 4/8, ``build_tasks`` 7/10/17/21/35/39): the default device is the CPU here (observable
  only on an accelerator);
* ``from_groups_16`` (``kind="STABLE"``): numpy reads the sort kind case-insensitively;
* ``from_lists_10/13`` (``reshape(None)`` / ``reshape(-2)``): the same 1-D array for the lists it accepts;
* ``with_distractors_15/18/19/20``: the empty-distractors branch is unreachable (``as_embeddings`` refuses 0 rows
  and 0 columns first); ``_25/27/29`` (``astype`` copy flag): the same values;
* ``build_tasks_86`` (direction left at its default "t2i"), ``_89/_91`` (``from_labels`` without ``n_targets``):
  every image has a caption (checked above), so ``max + 1`` is the number of images.

Tasks of score matrices (issue 43: one task for both kinds; a 3-in-10 sample with tests/test_scores_units.py and
tests/test_evaluation.py: 243 of 742 tested, 232 killed, 95%): the survivors are those above plus
``blocks_86`` (``normalize_scores(s, None)`` -> ``normalize_scores(s)``: None is the default).

The helper that wrote this file found ``Positives.from_lists([])`` (and ``subset([])``) failing on a float64
``np.cumsum([])``; mended, and pinned by ``test_no_queries``.
"""

import re

import numpy as np
import pytest
import torch

import hubnorm as hn
from hubnorm import retrieval
from hubnorm.blocks import Scores
from hubnorm.retrieval import DIRECTION_NAMES, DIRECTIONS, MODALITY_LETTERS, Positives, RetrievalTask, build_tasks


def _unit(rng, n, d, dtype=np.float32):
    x = rng.standard_normal((n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(dtype)


def _csr(p):
    return [p.of(i).tolist() for i in range(p.n_queries)]


# ------------------------------------------------------------------------------------------------- directions

def test_direction_names_by_hand():
    assert DIRECTIONS == ("t2i", "i2t")
    assert MODALITY_LETTERS == {"text": "t", "image": "i", "video": "v", "audio": "a"}
    assert DIRECTION_NAMES == ("t2i", "i2t", "t2v", "v2t", "t2a", "a2t", "i2v", "i2a", "v2i", "v2a", "a2i", "a2v")


@pytest.mark.parametrize("name", DIRECTION_NAMES)
def test_check_direction_returns_the_name(name):
    assert retrieval.check_direction(name) == name


@pytest.mark.parametrize("bad", ["t2t", "T2I", "", "i2i", 5, None, ("t2i",)])
def test_check_direction_rejects(bad):
    msg = ("direction must be one of t2i, i2t, t2v, v2t, t2a, a2t, i2v, i2a, v2i, v2a, a2i, a2v (query modality "
           "first: t2v is text-to-video; letters {'text': 't', 'image': 'i', 'video': 'v', 'audio': 'a'}); got "
           + repr(bad))
    with pytest.raises(ValueError, match="^" + re.escape(msg) + "$"):
        retrieval.check_direction(bad)


# -------------------------------------------------------------------------------------------------- Positives

def test_positives_layout_and_types():
    p = Positives(np.array([0, 2, 3], np.int32), np.array([4, 1, 0], np.int16), np.int64(5))
    assert p.indptr.dtype == np.int64 and p.indices.dtype == np.int64
    assert type(p.n_targets) is int and p.n_targets == 5
    assert p.n_queries == 2 and len(p) == 2
    assert _csr(p) == [[4, 1], [0]]
    np.testing.assert_array_equal(p.query_of_entry, [0, 0, 1])


def test_positives_torch_indices_and_boundaries():
    p = Positives(torch.tensor([0, 1, 3]), torch.tensor([0, 2, 1]), 3)   # index n_targets - 1 is valid
    assert _csr(p) == [[0], [2, 1]] and p.indices.dtype == np.int64
    one = Positives([0, 1], [0], 1)                                         # a single target is enough
    assert one.n_targets == 1 and _csr(one) == [[0]]
    none = Positives([0], np.zeros(0), 3)          # no query at all; an empty float array holds no float index
    assert none.n_queries == 0 and none.indices.dtype == np.int64 and none.query_of_entry.size == 0


@pytest.mark.parametrize("n_targets", [0, -1, True, 2.0, "3", None])
def test_positives_n_targets_guard(n_targets):
    with pytest.raises(TypeError, match=r"^Positives\.n_targets must be a positive integer; got "
                                        + re.escape(repr(n_targets)) + "$"):
        Positives([0, 1], [0], n_targets)


@pytest.mark.parametrize("indptr,indices", [([], []), ([1, 2], [0]), ([0, 2, 1], [0, 1]), ([0, 1], [0, 1]),
                                            ([0, 2], [0]), ([[0, 1]], [0]), ([0, 2, 1], [0])])
def test_positives_indptr_guard(indptr, indices):
    with pytest.raises(ValueError, match=r"^Positives\.indptr must start at 0, never decrease, and end at "
                                         r"len\(indices\)$"):
        Positives(np.array(indptr, np.int64), np.array(indices, np.int64), 3)


@pytest.mark.parametrize("indptr,first", [([0, 1, 1, 2], 1), ([0, 0, 1], 0), ([0, 1, 2, 2, 2], 2)])
def test_positives_empty_query(indptr, first):
    with pytest.raises(ValueError, match=rf"^query {first} has no positive target: every query needs at least one$"):
        Positives(indptr, list(range(indptr[-1])), 3)


@pytest.mark.parametrize("indices,lo,hi", [([0, 3], 0, 3), ([-1, 2], -1, 2), ([5, 1], 1, 5)])
def test_positives_target_range(indices, lo, hi):
    with pytest.raises(ValueError, match=rf"^positive target indices must lie in \[0, 3\); got range \[{lo}, {hi}\]$"):
        Positives([0, 1, 2], indices, 3)


@pytest.mark.parametrize("which", ["indptr", "indices"])
def test_positives_float_indices_refused(which):
    args = {"indptr": np.array([0, 1]), "indices": np.array([0])}
    args[which] = args[which].astype(np.float64)
    with pytest.raises(TypeError, match=rf"^Positives\.{which} must hold integers; got dtype float64\. Float indices "
                                        r"are never truncated: convert exact integral values with "
                                        r"\.astype\(np\.int64\) after checking them$"):
        Positives(args["indptr"], args["indices"], 2)


def test_float_tensors_that_require_grad_are_refused_as_indices():
    # read through .detach() like every tensor: the dtype is what is refused, not the autograd graph
    grad = torch.tensor([0.0], requires_grad=True)
    with pytest.raises(TypeError, match=r"^Positives\.indices must hold integers; got dtype float32\."):
        Positives([0, 1], grad, 2)
    with pytest.raises(TypeError, match=r"^labels must hold integers; got dtype float32$"):
        Positives.from_labels(grad)


def test_from_labels():
    p = Positives.from_labels([2, 0, 2])
    assert p.n_targets == 3 and _csr(p) == [[2], [0], [2]]
    np.testing.assert_array_equal(p.indptr, [0, 1, 2, 3])
    wide = Positives.from_labels(torch.tensor([1, 0]), np.int64(6))
    assert wide.n_targets == 6 and type(wide.n_targets) is int and _csr(wide) == [[1], [0]]


@pytest.mark.parametrize("bad,err,msg", [
    ([], ValueError, r"^labels must be a non-empty 1-D array of integer indices; got shape \(0,\)$"),
    ([[0, 1]], ValueError, r"^labels must be a non-empty 1-D array of integer indices; got shape \(1, 2\)$"),
    ([0.0, 1.0], TypeError, r"^labels must hold integers; got dtype float64$"),
    ([0, -2, 1], ValueError, r"^labels must be >= 0; got -2$"),
])
def test_from_labels_guards(bad, err, msg):
    with pytest.raises(err, match=msg):
        Positives.from_labels(np.array(bad))


def test_from_groups_keeps_each_querys_targets_ascending():
    rng = np.random.default_rng(4)
    owner = rng.integers(0, 3, 300)
    p = Positives.from_groups(owner, 3)
    assert p.n_targets == 300 and p.n_queries == 3
    assert _csr(p) == [np.flatnonzero(owner == q).tolist() for q in range(3)]
    small = Positives.from_groups(torch.tensor([1, 0, 1, 2, 0]), 3)
    assert _csr(small) == [[1, 4], [0, 2], [3]]
    np.testing.assert_array_equal(small.indptr, [0, 2, 4, 5])


def test_from_groups_guards():
    with pytest.raises(ValueError, match=r"^owner index 3 is out of range for 3 queries$"):
        Positives.from_groups([0, 1, 3, 2], 3)
    with pytest.raises(ValueError, match=r"^query 2 has no positive target"):   # the last query owns nothing
        Positives.from_groups([0, 1, 1], 3)
    with pytest.raises(ValueError, match=r"^owner must be >= 0; got -1$"):
        Positives.from_groups([0, -1], 2)
    with pytest.raises(TypeError, match=r"^owner must hold integers; got dtype float64$"):
        Positives.from_groups(np.array([0.0, 1.0]), 2)


def test_from_lists():
    p = Positives.from_lists([[4, 1], np.array([0]), (2, 3, 0)], 5)
    assert _csr(p) == [[4, 1], [0], [2, 3, 0]] and p.n_targets == 5
    np.testing.assert_array_equal(p.indptr, [0, 2, 3, 6])
    with pytest.raises(TypeError, match=r"^lists must hold integers; got dtype float64"):
        Positives.from_lists([[1], [0.5]], 2)


def test_subset():
    p = Positives.from_lists([[4, 1], [0], [2, 3]], 5)
    sub = p.subset(np.array([2, 0, 2]))
    assert _csr(sub) == [[2, 3], [4, 1], [2, 3]] and sub.n_targets == 5
    assert _csr(p.subset(torch.tensor([1]))) == [[0]]
    for bad, lo, hi in (([0, 3], 0, 3), ([-1], -1, -1)):
        with pytest.raises(ValueError, match=rf"^queries must lie in \[0, 3\); got range \[{lo}, {hi}\]$"):
            p.subset(bad)
    with pytest.raises(TypeError, match=r"^queries must hold integers"):
        p.subset(np.array([0.0]))


def test_no_queries():
    empty = Positives.from_lists([], 5)
    assert empty.n_queries == 0 and empty.n_targets == 5 and empty.indptr.dtype == np.int64
    np.testing.assert_array_equal(empty.indptr, [0])
    sub = Positives.from_lists([[4, 1], [0]], 5).subset([])
    assert sub.n_queries == 0 and sub.n_targets == 5 and _csr(sub) == []


# ---------------------------------------------------------------------------------------------- RetrievalTask

def _task_inputs(seed=0, nq=4, nt=3, d=5, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return _unit(rng, nq, d, dtype), _unit(rng, nt, d, dtype), Positives.from_labels([0, 1, 2, 1], nt)


def test_task_guards():
    q, t, pos = _task_inputs()
    with pytest.raises(ValueError, match="^direction must be one of"):
        RetrievalTask(q, t, pos, direction="x2y")
    with pytest.raises(TypeError, match=r"^positives must be a hubnorm\.Positives \(use Positives\.from_labels / "
                                        r"from_groups / hubnorm\.positives_from_pairs\); got list$"):
        RetrievalTask(q, t, [0, 1, 2, 1])
    with pytest.raises(ValueError, match=r"^positives are 3 queries x 3 targets but the embeddings are 4 queries x 3 "
                                         r"targets: pass the positives of these queries and targets$"):
        RetrievalTask(q, t, Positives.from_labels([0, 1, 2], 3))
    with pytest.raises(ValueError, match=r"^positives are 4 queries x 4 targets but the embeddings are 4 queries x 3 "
                                         r"targets"):
        RetrievalTask(q, t, Positives.from_labels([0, 1, 2, 1], 4))
    with pytest.raises(ValueError, match=r"^a task needs the test queries and targets as embeddings \(queries=, "
                                         r"targets=\) or the test score matrix"):
        RetrievalTask(q, None, pos)
    with pytest.raises(ValueError, match=r"^targets has dimension 4 but the other embeddings have 5"):
        RetrievalTask(q, t[:, :4] / np.linalg.norm(t[:, :4], axis=1, keepdims=True), pos)
    with pytest.raises(TypeError, match=r"^queries must be a numpy array or a torch tensor"):
        RetrievalTask(q.tolist(), t, pos)
    rng = np.random.default_rng(1)
    for name in ("query_bank", "target_bank"):
        with pytest.raises(ValueError, match=rf"^{name} has dimension 6 but the other embeddings have 5"):
            RetrievalTask(q, t, pos, **{name: _unit(rng, 2, 6)})
        with pytest.raises(ValueError, match=rf"^{name}"):
            RetrievalTask(q, t, pos, **{name: 2 * _unit(rng, 2, 5)})   # rows not L2-normalised


def test_task_accessors_fit_and_banks():
    q, t, pos = _task_inputs()
    rng = np.random.default_rng(2)
    qb, tb = _unit(rng, 6, 5), _unit(rng, 7, 5)
    task = RetrievalTask(q, t, pos, query_bank=qb, direction="v2a")
    assert task.n_queries == 4 and task.n_targets == 3 and task.meta == {} and task.direction == "v2a"
    assert task.has("queries") and task.has("targets") and task.has("query_bank") and not task.has("target_bank")
    with pytest.raises(ValueError, match=r"^a task holds the inputs queries, targets, query_bank, target_bank; "
                                         r"got 'bank'$"):
        task.has("bank")
    assert RetrievalTask(q, t, pos).direction == "t2i"

    class Recorder:
        def fit(self, targets, *, query_bank=None, target_bank=None):
            self.args = (targets, query_bank, target_bank)
            return self

    with_tb = task.with_banks(target_bank=tb)
    assert with_tb.query_bank is None and with_tb.target_bank is tb and task.query_bank is qb
    assert with_tb.queries is q and with_tb.positives is pos and with_tb.direction == "v2a"
    both = task.with_banks(qb, tb)
    rec = both.fit(Recorder())
    assert rec.args[0] is t and rec.args[1] is qb and rec.args[2] is tb
    rec = both.fit(Recorder(), query_aware=True)
    assert rec.args[0] is t and rec.args[1] is q and rec.args[2] is tb
    assert task.with_banks().query_bank is None


def test_with_distractors():
    q, t, pos = _task_inputs()
    rng = np.random.default_rng(3)
    extra = _unit(rng, 2, 5, np.float64)
    task = RetrievalTask(q, t, pos, meta={"dataset": "x"})
    more = task.with_distractors(extra)
    assert more.targets.dtype == np.float32 and more.targets.shape == (5, 5)
    np.testing.assert_array_equal(more.targets[:3], t)
    np.testing.assert_array_equal(more.targets[3:], extra.astype(np.float32))
    assert more.positives.n_targets == 5 and _csr(more.positives) == _csr(pos)
    assert more.meta == {"dataset": "x", "distractors": 2} and task.meta == {"dataset": "x"}
    assert more.queries is q and more.n_targets == 5
    one = task.with_distractors(torch.as_tensor(extra[:1]))
    assert one.n_targets == 4 and one.meta["distractors"] == 1 and one.positives.n_targets == 4
    with pytest.raises(ValueError, match=r"^distractors has dimension 4 but the other embeddings have 5"):
        task.with_distractors(np.ones((2, 4), np.float32) / 2)
    with pytest.raises(ValueError, match=r"^distractors is empty"):
        task.with_distractors(np.zeros((0, 5), np.float32))


# ------------------------------------------------------------------------------------------------ build_tasks

def _pair(seed=0, n=3, m=5, d=4):
    rng = np.random.default_rng(seed)
    return _unit(rng, n, d), _unit(rng, m, d)


def test_build_tasks_layout_and_meta():
    imgs, caps = _pair()
    c2i = np.array([2, 0, 1, 1, 2])
    meta = {"dataset": "toy"}
    tasks = build_tasks(imgs, caps, c2i, meta=meta)
    assert list(tasks) == ["t2i", "i2t"]
    t2i, i2t = tasks["t2i"], tasks["i2t"]
    assert t2i.direction == "t2i" and i2t.direction == "i2t"
    assert _csr(t2i.positives) == [[2], [0], [1], [1], [2]] and t2i.positives.n_targets == 3
    assert _csr(i2t.positives) == [[1], [2, 3], [0, 4]] and i2t.positives.n_targets == 5
    assert t2i.query_bank is None and t2i.target_bank is None and i2t.query_bank is None
    assert t2i.meta == {"dataset": "toy"} and t2i.meta is not meta
    assert build_tasks(imgs, caps, c2i)["t2i"].meta == {}
    only = build_tasks(imgs, caps, c2i, directions=["i2t"])
    assert list(only) == ["i2t"]


def test_build_tasks_torch_inputs_and_banks():
    imgs, caps = _pair(1)
    rng = np.random.default_rng(5)
    ib, cb = _unit(rng, 6, 4), _unit(rng, 7, 4)
    tasks = build_tasks(torch.from_numpy(imgs), torch.from_numpy(caps), torch.tensor([0, 1, 2, 0, 1]),
                        image_bank=torch.from_numpy(ib), caption_bank=torch.from_numpy(cb))
    t2i, i2t = tasks["t2i"], tasks["i2t"]
    assert isinstance(t2i.queries, np.ndarray) and isinstance(t2i.target_bank, np.ndarray)
    np.testing.assert_array_equal(t2i.queries, caps)
    np.testing.assert_array_equal(t2i.targets, imgs)
    np.testing.assert_array_equal(t2i.query_bank, cb)
    np.testing.assert_array_equal(t2i.target_bank, ib)
    np.testing.assert_array_equal(i2t.query_bank, ib)
    np.testing.assert_array_equal(i2t.target_bank, cb)


def test_build_tasks_guards():
    imgs, caps = _pair(2)
    c2i = np.array([0, 1, 2, 0, 1])
    with pytest.raises(TypeError, match=r"^embeddings must be numpy arrays or torch tensors; got list$"):
        build_tasks(imgs.tolist(), caps, c2i)
    with pytest.raises(TypeError, match=r"^embeddings must be numpy arrays or torch tensors; got list$"):
        build_tasks(imgs, caps, c2i, image_bank=imgs.tolist())
    with pytest.raises(ValueError, match=r"^images must be 2-D"):
        build_tasks(imgs[0], caps, c2i)
    with pytest.raises(ValueError, match=r"^captions has dimension 3 but the other embeddings have 4"):
        build_tasks(imgs, caps[:, :3] / np.linalg.norm(caps[:, :3], axis=1, keepdims=True), c2i)
    for name in ("image_bank", "caption_bank"):
        with pytest.raises(ValueError, match=rf"^{name} has dimension 3 but the other embeddings have 4"):
            build_tasks(imgs, caps, c2i, **{name: np.full((2, 3), 3 ** -0.5, np.float32)})
    with pytest.raises(ValueError, match=r"^caption_to_image has 4 entries but there are 5 captions: pass one image "
                                         r"index per caption$"):
        build_tasks(imgs, caps, c2i[:4])
    with pytest.raises(ValueError, match=r"^caption_to_image refers to image 3 but there are only 3 images$"):
        build_tasks(imgs, caps, np.array([0, 1, 2, 3, 1]))
    with pytest.raises(ValueError, match=r"^2 image\(s\) have no caption \(first: 1\): drop them or add captions$"):
        build_tasks(imgs, caps, np.array([0, 0, 0, 0, 0]))
    with pytest.raises(ValueError, match=r"^caption_to_image must be >= 0"):
        build_tasks(imgs, caps, np.array([0, 1, 2, -1, 1]))
    with pytest.raises(ValueError, match=r"^unknown direction 't2v': use 't2i' or 'i2t'$"):
        build_tasks(imgs, caps, c2i, directions=("t2i", "t2v"))


def test_build_tasks_feeds_the_methods():
    imgs, caps = _pair(3, n=4, m=8, d=6)
    c2i = np.arange(8) % 4
    task = hn.build_tasks(imgs, caps, c2i)["t2i"]
    S = caps.astype(np.float64) @ imgs.astype(np.float64).T
    ranks = hn.positive_ranks(task.fit(hn.Identity(device="cpu")), task.positives, caps)
    ref = [int(np.sum(S[i] > S[i, c2i[i]])) for i in range(8)]
    np.testing.assert_array_equal(ranks, ref)


# ---------------------------------------------------------------------------------------------- a task of scores
# One RetrievalTask holds embeddings or score matrices; every check below compares the two kinds on the same data
# (the matrices are the float64 products of the embeddings) or pins a guard of the scores kind by its message.

def _both_kinds(seed=0, nq=9, nt=7, nb=11, d=6):
    rng = np.random.default_rng(seed)
    q, t, qb = _unit(rng, nq, d, np.float64), _unit(rng, nt, d, np.float64), _unit(rng, nb, d, np.float64)
    pos = Positives.from_labels(np.arange(nq) % nt, nt)
    emb = RetrievalTask(q, t, pos, query_bank=qb, direction="t2v")
    mats = {("queries", "targets"): q @ t.T, ("query_bank", "targets"): qb @ t.T}
    return emb, RetrievalTask(scores=mats, positives=pos, direction="t2v"), mats


def test_scores_task_accessors():
    emb, sc, mats = _both_kinds()
    assert (emb.kind, sc.kind) == ("embeddings", "scores") and emb.engine is None
    for name, n in (("queries", 9), ("targets", 7), ("query_bank", 11), ("target_bank", None)):
        assert emb.size(name) == sc.size(name) == n and emb.has(name) == sc.has(name) == (n is not None)
    assert (sc.n_queries, sc.n_targets) == (9, 7)
    np.testing.assert_array_equal(sc.matrix("targets", "queries").block(0, 7, 0, 9, torch.float64).numpy(),
                                  mats[("queries", "targets")].T)
    np.testing.assert_allclose(emb.matrix("targets", "queries").block(0, 7, 0, 9, torch.float64).numpy(),
                               mats[("queries", "targets")].T, rtol=0, atol=1e-12)   # the product of the embeddings
    with pytest.raises(ValueError, match=r"^this task has no 'target_bank' embeddings"):
        emb.matrix("queries", "target_bank")
    with pytest.raises(ValueError, match=r"^a task holds the inputs queries, targets, query_bank, target_bank; "
                                         r"got 'bank'$"):
        sc.has("bank")
    # the test matrix given transposed serves as well
    flipped = RetrievalTask(scores={("targets", "queries"): mats[("queries", "targets")].T}, positives=sc.positives)
    assert (flipped.n_queries, flipped.n_targets) == (9, 7)


def test_scores_task_guards():
    emb, sc, mats = _both_kinds()
    pos = sc.positives
    with pytest.raises(ValueError, match=r"^a task given as scores needs the test score matrix \(queries x targets\)"):
        RetrievalTask(scores={("query_bank", "targets"): mats[("query_bank", "targets")]}, positives=pos)
    with pytest.raises(TypeError, match=r"^scores must be a dict \{\(rows, cols\): matrix\}; got list$"):
        RetrievalTask(scores=[mats[("queries", "targets")]], positives=pos)
    with pytest.raises(ValueError, match=r"^positives are 9 queries x 8 targets but the queries x targets score matrix "
                                         r"is 9 queries x 7 targets"):
        RetrievalTask(scores=mats, positives=Positives.from_labels(np.arange(9) % 7, 8))
    with pytest.raises(TypeError, match=r"^positives must be a hubnorm\.Positives"):
        RetrievalTask(scores=mats)
    for name, call in (("with_banks", lambda: sc.with_banks()),
                       ("with_distractors", lambda: sc.with_distractors(emb.targets))):
        with pytest.raises(ValueError, match=rf"^{name} changes embeddings beside stored score matrices, which "
                                             r"would no longer match them: build a task with the embeddings and "
                                             r"matrices you need instead$"):
            call()
    with pytest.raises(TypeError, match=r"^query_aware must be True or False; got 'yes'$"):
        sc.fit(hn.InvertedSoftmax(tau=0.1), query_aware="yes")


@pytest.mark.parametrize("query_aware", [False, True])
def test_both_kinds_fit_score_and_evaluate_alike(query_aware):
    emb, sc, _ = _both_kinds()
    for method in (hn.InvertedSoftmax(tau=0.1), hn.NearestNeighborNormalization(alpha=0.5, k=3),
                   hn.SinkhornNormalization(tau=0.1)):
        a, b = emb.fit(method.clone(), query_aware=query_aware), sc.fit(method.clone(), query_aware=query_aware)
        np.testing.assert_allclose(b.offsets_.numpy(), a.offsets_.numpy(), rtol=0, atol=1e-12)
        np.testing.assert_allclose(sc.score(b).numpy(), emb.score(a).numpy(), rtol=0, atol=1e-12)
        assert hn.evaluate(a, emb) == hn.evaluate(b, sc)
        np.testing.assert_array_equal(hn.k_occurrence(emb.blocks(a), 3), hn.k_occurrence(sc.blocks(b), 3))
    # the raw scores: no fit (fit(None) is None), the same blocks of both kinds, at any block size
    assert emb.fit(None) is None and sc.fit(None, query_aware=query_aware) is None
    raw = emb.queries @ emb.targets.T
    for task in (emb, sc):
        np.testing.assert_allclose(torch.cat([s for _, s in task.blocks(None, chunk_size=4)]).numpy(), raw,
                                   rtol=0, atol=1e-15)
        assert [q0 for q0, _ in task.blocks(chunk_size=4)] == [0, 4, 8]
        assert hn.evaluate(None, task)["bank"] == "none"
    np.testing.assert_array_equal(hn.positive_ranks(raw, emb.positives),
                                  hn.positive_ranks(sc.blocks(), sc.positives))


def test_blocks_refuse_a_normalizer_fitted_on_another_gallery():
    emb, sc, _ = _both_kinds()
    other, other_sc, _ = _both_kinds(seed=1, nt=5)
    for task, fitted in ((emb, other.fit(hn.InvertedSoftmax(tau=0.1))), (sc, other_sc.fit(hn.InvertedSoftmax(tau=0.1)))):
        with pytest.raises(ValueError, match=r"^InvertedSoftmax was fitted on a gallery of 5 targets but this task "
                                             r"has 7: fit it on this task"):
            next(task.blocks(fitted))
    with pytest.raises(hn.NotFittedError):
        next(emb.blocks(hn.InvertedSoftmax(tau=0.1)))


def test_score_methods_refuse_what_a_scores_task_lacks():
    emb, sc, mats = _both_kinds()
    with pytest.raises(ValueError, match=r"^DistributionNormalization reads the embeddings of query_bank"):
        sc.fit(hn.DistributionNormalization())
    no_bank = RetrievalTask(scores={("queries", "targets"): mats[("queries", "targets")]}, positives=sc.positives,
                            hints={("query_bank", "targets"): "add the bank rows"})
    with pytest.raises(ValueError, match=r"^InvertedSoftmax needs the query bank x gallery \(targets\) score matrix "
                                         r"\(query_bank x targets\), which is missing\..*add the bank rows"):
        no_bank.fit(hn.InvertedSoftmax(tau=0.1))
    # query-aware: the test score matrix serves as the bank's, so the same fit as the embeddings' query-aware one
    a = emb.fit(hn.InvertedSoftmax(tau=0.1), query_aware=True)
    b = no_bank.fit(hn.InvertedSoftmax(tau=0.1), query_aware=True)
    np.testing.assert_allclose(b.offsets_.numpy(), a.offsets_.numpy(), rtol=0, atol=1e-12)
    assert hn.evaluate(b, no_bank)["bank"] == "QUERY-AWARE"


def test_blocks_refuse_a_fit_of_the_other_kind_that_would_misread_the_scores():
    """A normalizer fitted from score matrices reads raw test scores: given a task of embeddings whose dimension
    equals the number of targets it would read the embeddings as scores; one that scores with query embeddings (DN)
    cannot score a task of matrices. Both are refused by name (found by the migration's helper)."""
    rng = np.random.default_rng(0)
    pos = Positives.from_labels(np.arange(6) % 4, 4)
    st = RetrievalTask(scores={("queries", "targets"): rng.standard_normal((6, 4)),
                               ("query_bank", "targets"): rng.standard_normal((10, 4))}, positives=pos)
    from_scores = st.fit(hn.InvertedSoftmax(tau=0.1))
    assert from_scores.fitted_from_scores()
    x = _unit(rng, 15, 4, np.float64)
    et = RetrievalTask(x[:6], x[6:10], pos, query_bank=x[10:])   # d = 4 = the number of targets
    with pytest.raises(ValueError, match=r"^InvertedSoftmax was fitted from score matrices; this task holds "
                                         r"embeddings: fit it on this task \(task\.fit\(normalizer\)\) or score a "
                                         r"task of the matrices it was fitted from$"):
        hn.evaluate(from_scores, et)
    assert not et.fit(hn.InvertedSoftmax(tau=0.1)).fitted_from_scores()
    dn = et.fit(hn.make_normalizer("dn"))
    with pytest.raises(ValueError, match=r"^DistributionNormalization scores with the embeddings of queries; this "
                                         r"task holds score matrices without them: pass them too \(RetrievalTask\(\.\.\., queries=\.\.\.\)\)"):
        hn.evaluate(dn, st)



def test_blocks_follow_the_chunk_size_and_the_task_budget():
    """Row blocks of both kinds: ``chunk_size`` reaches a normalizer's scoring, and without it the task's
    ``block_bytes`` sizes the raw blocks by the number of targets (3 targets x 8 bytes x 2 rows), not by the
    embedding dimension (12)."""
    rng = np.random.default_rng(4)
    q, t, qb = _unit(rng, 5, 12, np.float64), _unit(rng, 3, 12, np.float64), _unit(rng, 6, 12, np.float64)
    pos = Positives.from_labels(np.arange(5) % 3, 3)
    emb = RetrievalTask(q, t, pos, query_bank=qb, block_bytes=3 * 8 * 2)
    sc = RetrievalTask(scores={("queries", "targets"): q @ t.T, ("query_bank", "targets"): qb @ t.T}, positives=pos,
                       block_bytes=3 * 8 * 2)
    for task in (emb, sc):
        assert [q0 for q0, _ in task.blocks()] == [0, 2, 4]
        fitted = task.fit(hn.InvertedSoftmax(tau=0.1))
        assert [q0 for q0, _ in task.blocks(fitted, chunk_size=4)] == [0, 4]


class _OptionalFirst(hn.InvertedSoftmax):
    """InvertedSoftmax reading, first, an optional target-bank matrix it does without (a method of a user's)."""

    inputs = hn.InvertedSoftmax.inputs.__class__(
        fit=(Scores("target_bank", "targets", required=False),) + tuple(hn.InvertedSoftmax.inputs.fit))


def test_the_matrix_checks_skip_optional_inputs_and_go_on_to_the_required_ones():
    emb, sc, mats = _both_kinds()
    fitted = sc.fit(_OptionalFirst(tau=0.1))           # no target-bank matrix: optional, fitted all the same
    np.testing.assert_allclose(fitted.offsets_.numpy(), sc.fit(hn.InvertedSoftmax(tau=0.1)).offsets_.numpy())
    no_bank = RetrievalTask(scores={("queries", "targets"): mats[("queries", "targets")]}, positives=sc.positives)
    with pytest.raises(ValueError, match=r"^_OptionalFirst needs the query bank x gallery \(targets\) score matrix"):
        no_bank.fit(_OptionalFirst(tau=0.1))          # the required bank matrix after the optional one is checked


def test_test_as_bank_is_the_query_aware_fit_of_a_task_of_matrices():
    """One mechanism for 'the test queries are the bank' on score matrices: task.fit(query_aware=True) fits on
    task.test_as_bank(), whose query bank is the test score matrix and which drops the old bank's matrices."""
    emb, sc, _ = _both_kinds()
    qa = sc.test_as_bank()
    assert qa.size("query_bank") == sc.n_queries and qa.meta == sc.meta and qa.meta is not sc.meta
    np.testing.assert_allclose(qa.fit(hn.InvertedSoftmax(tau=0.1)).offsets_.numpy(),
                               sc.fit(hn.InvertedSoftmax(tau=0.1), query_aware=True).offsets_.numpy(), rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"^test_as_bank builds a task of score matrices; a task of embeddings takes "
                                         r"fit\(\.\.\., query_aware=True\)$"):
        emb.test_as_bank()


# ------------------------------------------------------------------------------------------------ shares of rows
def test_share_rows_is_a_sorted_seeded_draw_without_replacement():
    got = retrieval.share_rows(10, 0.3, seed=4)
    want = np.sort(np.random.default_rng(4).choice(10, 3, replace=False))
    np.testing.assert_array_equal(got, want)
    assert retrieval.share_rows(10, 0.01).tolist() == retrieval.share_rows(10, 0.01, seed=0).tolist()   # seed 0
    assert retrieval.share_rows(10, 0.01).size == 1 and retrieval.share_rows(7, 0.5).size == 4   # at least 1; round
    np.testing.assert_array_equal(retrieval.share_rows(5, 1.0), np.arange(5))
    rng = np.random.default_rng(9)                                 # a running generator goes on drawing
    first, second = retrieval.share_rows(20, 0.5, rng), retrieval.share_rows(20, 0.5, rng)
    ref = np.random.default_rng(9)
    np.testing.assert_array_equal(first, np.sort(ref.choice(20, 10, replace=False)))
    np.testing.assert_array_equal(second, np.sort(ref.choice(20, 10, replace=False)))
    untouched = np.random.default_rng(9)
    retrieval.share_rows(20, 1, untouched)                         # a fraction of 1 draws nothing
    assert untouched.integers(1 << 30) == np.random.default_rng(9).integers(1 << 30)
    for bad, error in ((0, ValueError), (1.5, ValueError), (True, TypeError), ("0.5", TypeError)):
        with pytest.raises(error, match=re.escape(f"fraction must be a number in (0, 1]; got {bad!r}")):
            retrieval.share_rows(10, bad)


def test_query_bank_share_draws_in_the_order_of_the_tasks_and_keeps_what_it_is_told():
    rng = np.random.default_rng(0)
    unit = lambda n: hn.l2_normalize(rng.standard_normal((n, 4)))   # noqa: E731
    tasks = build_tasks(unit(6), unit(6), np.arange(6), image_bank=unit(10), caption_bank=unit(20))
    cut = retrieval.query_bank_share(tasks, 0.5, seed=3)
    draw = np.random.default_rng(3)
    rows = {"t2i": np.sort(draw.choice(20, 10, replace=False)), "i2t": np.sort(draw.choice(10, 5, replace=False))}
    for d in ("t2i", "i2t"):
        np.testing.assert_array_equal(np.asarray(cut[d].query_bank), np.asarray(tasks[d].query_bank)[rows[d]])
    kept = retrieval.query_bank_share(tasks, 0.5, seed=3, keep=("t2i",))
    assert kept["t2i"] is tasks["t2i"]
    np.testing.assert_array_equal(np.asarray(kept["i2t"].query_bank),                # t2i drew nothing
                                  np.asarray(tasks["i2t"].query_bank)[np.sort(np.random.default_rng(3).choice(
                                      10, 5, replace=False))])
    assert all(retrieval.query_bank_share(tasks, 1.0)[d] is tasks[d] for d in tasks)
