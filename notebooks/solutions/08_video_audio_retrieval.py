"""Solutions to the exercises of notebook 08 · Beyond images: video-text and text-audio retrieval.

Each ``exercise_N()`` recomputes its answer with hubnorm on small seeded synthetic data (seconds), asserts the
claim of the answer where it is robust, and returns the numbers; its docstring is the written answer.
``tests/test_exercises.py`` runs every function. ``QUIZ`` holds the answers of the notebook's quiz and ``quiz()``
verifies each by a computation. Run this file to print the answers:

    python notebooks/solutions/08_video_audio_retrieval.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

import hubnorm as hn
from hubnorm import media
from hubnorm.scores import matrices_from_embeddings


def _data(n_train: int = 60, n_test: int = 150, seed: int = 0) -> media.MediaData:
    """A small synthetic MSR-VTT-like set (float64): test videos with one caption, training videos x 20 captions."""
    d = media.make_media("msrvtt", seed=seed, n_train=n_train, n_test=n_test)
    for name in ("items", "captions", "bank_items", "bank_captions"):
        setattr(d, name, np.asarray(getattr(d, name), dtype=np.float64))
    return d


def qb_norm(train_test: np.ndarray, test_test: np.ndarray, beta: float = 20.0, k: int = 1) -> np.ndarray:
    """QB-Norm with the dynamic inverted softmax, written from its equation (Bogolin et al. 2022, Sec. 3)."""
    active_targets = np.unique(np.argsort(-train_test, axis=1, kind="stable")[:, :k])
    out = test_test.astype(np.float64).copy()
    denom = np.exp(beta * train_test).sum(axis=0)
    rows = np.isin(test_test.argmax(axis=1), active_targets)
    out[rows] = np.exp(beta * test_test[rows]) / denom
    return out


def exercise_1(beta: float = 20.0, k: int = 1) -> dict:
    """QB-Norm from its equation, on plain score matrices.

    Answer. The activation set A is the union of the top-k test videos of every training caption; a test caption
    whose raw top-1 video is in A gets exp(beta s_ij) / sum_b exp(beta s_bj), any other keeps its raw row. Taking
    logs and multiplying by 1/beta (monotone, so no ranking changes) gives s_ij - (1/beta) log sum_b exp(beta s_bj):
    the inverted-softmax offset of hubnorm.InvertedSoftmax with tau = 1/beta, applied only to the gated rows: that
    is hubnorm.DynamicInvertedSoftmax(tau=1/beta, k=k). The function below ranks every query exactly as DIS fitted
    from the same two matrices (checked: identical ranks of every query's positive).
    """
    d = _data()
    test, bank = d.captions @ d.items.T, d.bank_captions @ d.items.T
    ref = qb_norm(bank, test, beta, k)
    pos = hn.Positives.from_labels(d.caption_to_item, len(d.items))
    task = hn.RetrievalTask(scores={("queries", "targets"): test, ("query_bank", "targets"): bank}, positives=pos,
                            direction="t2v")
    dis = task.fit(hn.DynamicInvertedSoftmax(tau=1.0 / beta, k=k))
    ours, theirs = hn.positive_ranks(task.blocks(dis), pos), hn.positive_ranks(ref, pos)
    assert np.array_equal(ours, theirs)
    gated = np.isin(test.argmax(axis=1), np.unique(np.argsort(-bank, axis=1)[:, :k]))
    return {"queries": len(ours), "gated queries": int(gated.sum()), "R@1 QB-Norm": hn.recall_at_k(theirs, 1),
            "R@1 DIS": hn.recall_at_k(ours, 1), "R@1 raw": hn.recall_at_k(hn.positive_ranks(test, pos), 1)}


def exercise_2(tau: float = 0.02) -> dict:
    """When DIS is IS.

    Answer. With the test queries as the bank, every test query q is itself a bank query, and its top-1 target is
    in the activation set by construction (A holds the top-k targets of every bank query, k >= 1). So the gate opens
    for every query and DIS applies the inverted-softmax offset to every row: DIS equals IS. With a training bank
    the gate closes for queries whose top-1 target no bank query ranks first: DIS's offsets are IS's on the gated
    rows and zero on the others. Its R@1 then usually lies between the raw scores' and IS's, but need not: a row
    left raw can be right where IS was wrong (notebook 08's training-bank table has DIS a query above IS).
    """
    d = _data()
    pos = hn.Positives.from_labels(d.caption_to_item, len(d.items))
    task = hn.RetrievalTask(scores=matrices_from_embeddings(d.captions, d.items, d.bank_captions), positives=pos,
                            direction="t2v")
    s_is = task.score(task.fit(hn.InvertedSoftmax(tau=tau), query_aware=True)).numpy()
    s_dis = task.score(task.fit(hn.DynamicInvertedSoftmax(tau=tau, k=1), query_aware=True)).numpy()
    assert np.array_equal(s_is, s_dis)
    dis_bank = task.fit(hn.DynamicInvertedSoftmax(tau=tau, k=1))
    gate = dis_bank.activation_[task.score().argmax(dim=1)].numpy()
    return {"max |IS - DIS| (query-aware)": float(np.abs(s_is - s_dis).max()),
            "share of queries gated with the training bank": float(gate.mean())}


def exercise_3() -> dict:
    """Scores or embeddings?

    Answer. The same. IS, SN and DBSN are functions of score matrices only (IS: a log-mean-exp of each target's
    column of bank scores; SN: the Sinkhorn potentials of the bank x target scores; DBSN: the same with the target
    bank's columns appended), so fitting them from the matrices that the embeddings produce gives the same offsets
    up to rounding (checked to 1e-12 in float64) and the same R@1. DN is different: its offset needs the *mean
    embedding* of the banks, and q . mu_T for every query: a mean of scores cannot give a mean embedding (scores
    are dot products with particular targets, not coordinates), so hubnorm refuses DN on a score task with an error
    naming the embeddings it needs.
    """
    d = _data()
    tasks = hn.build_tasks(d.items, d.captions, d.caption_to_item, image_bank=d.bank_items, caption_bank=d.bank_captions)
    emb = tasks["t2i"]
    sc = hn.RetrievalTask(scores=matrices_from_embeddings(emb.queries, emb.targets, emb.query_bank, emb.target_bank),
                          positives=emb.positives, direction="t2v")
    out = {}
    for name, params in (("is", {"tau": 0.02}), ("sn", {"tau": 0.01}), ("dbsn", {"tau": 0.01})):
        a = hn.evaluate(emb.fit(hn.make_normalizer(name, **params)), emb)["R@1"]
        b = hn.evaluate(sc.fit(hn.make_normalizer(name, **params)), sc)["R@1"]
        assert a == b, (name, a, b)
        out[f"R@1 {name} (embeddings = scores)"] = a
    try:
        sc.fit(hn.make_normalizer("dn"))
    except ValueError as exc:
        out["DN from scores"] = str(exc).split(":")[0]
    else:  # pragma: no cover - the claim of the answer
        raise AssertionError("DN ran from scores")
    return out


QUIZ = {1: "b", 2: "a", 3: "b", 4: 10.0, 5: "b"}


def quiz() -> dict:
    """Verify every answer of ``QUIZ`` by a computation; returns the answers."""
    d = _data(n_train=20, n_test=50)
    pos = hn.Positives.from_labels(d.caption_to_item, len(d.items))
    test, bank = d.captions @ d.items.T, d.bank_captions @ d.items.T
    # 1: the training captions x test videos matrix is what IS reduces: ("query_bank", "targets")
    task = hn.RetrievalTask(scores={("queries", "targets"): test, ("query_bank", "targets"): bank}, positives=pos,
                            direction="t2v")
    ref = hn.InvertedSoftmax(tau=0.05).fit(d.items, query_bank=d.bank_captions).offsets
    assert np.allclose(task.fit(hn.InvertedSoftmax(tau=0.05)).offsets_.numpy(), ref, atol=1e-12) and QUIZ[1] == "b"
    # 2: DBSN needs the bank-query x target-bank scores; SN runs without them
    task.fit(hn.SinkhornNormalization(tau=0.05))
    try:
        task.fit(hn.DualBankSinkhornNormalization(tau=0.05))
    except ValueError as exc:
        assert "query bank x target bank" in str(exc) and QUIZ[2] == "a"
    else:
        raise AssertionError("DBSN ran without the bank x target-bank scores")
    # 3: DN reads embeddings
    try:
        task.fit(hn.DistributionNormalization())
    except ValueError as exc:
        assert "embeddings" in str(exc) and QUIZ[3] == "b"
    else:
        raise AssertionError("DN ran from scores")
    # 4: one caption per video, 1,000 test videos: video->text has 1,000 queries, one point is 10 of them
    assert media.MEDIA_PRESETS["msrvtt"].n_test / 100 == QUIZ[4]
    # 5: a pickled .npy in a sims folder is refused naming the file
    from hubnorm.data.sims import SimsError, load_sims, write_sims

    with tempfile.TemporaryDirectory() as tmp:
        write_sims(tmp, {"test": test}, labels=d.caption_to_item)
        np.save(Path(tmp) / "test.npy", np.array([object()], dtype=object), allow_pickle=True)
        try:
            load_sims(tmp, verify=False)
        except SimsError as exc:
            assert "test.npy" in str(exc) and "pickled" in str(exc) and QUIZ[5] == "b"
        else:
            raise AssertionError("a pickled .npy was loaded")
    return dict(QUIZ)


if __name__ == "__main__":  # pragma: no cover
    from hubnorm_companion.notebook import readable

    for fn in (exercise_1, exercise_2, exercise_3):
        print(fn.__name__, readable(fn()))
    print("quiz", readable(quiz()))
