"""What the notebooks read of a sims: folder (protocol.SimsRun, open_data) and the bank studies of any source:
``RetrievalTask.bank_subset`` and ``RunData.with_bank_fraction`` equal the embeddings path on the same rows (float64,
1e-12); the folder's direction names, labels and banks."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import hubnorm as hn
from hubnorm.data.sims import write_sims
from hubnorm.evaluation import summarize_ranks
from hubnorm_companion import protocol as pr
from hubnorm.retrieval import Positives, RetrievalTask, bank_share

from test_sims import write_example

TOL = 1e-12
LABEL = "synthetic analog (sims folder example)"
PARAMS = {"nnn": {"alpha": 0.75, "k": 4}, "is": {"tau": 0.05}, "sn": {"tau": 0.05, "n_iter": 10},
          "dbsn": {"tau": 0.05, "n_iter": 10}}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("sims") / "full"
    return path, write_example(path)


@pytest.fixture(scope="module")
def test_only(tmp_path_factory, folder):
    caps, items, c2i, _, _ = folder[1]
    path = tmp_path_factory.mktemp("sims_bare") / "test_only"
    write_sims(path, {"test": caps @ items.T}, modalities=("text", "video"), dataset="example", synthetic=True,
               labels=c2i)
    return path


def _side(data, direction, bank_rows=None, target_rows=None):
    """(queries, targets, query bank, target bank, positives) of one direction, from the embeddings; ``bank_rows`` /
    ``target_rows``: the rows kept of the query / target bank."""
    caps, items, c2i, bank_caps, bank_items = data
    if direction == "t2v":
        q, t, qb, tb, pos = caps, items, bank_caps, bank_items, Positives.from_labels(c2i, len(items))
    else:
        q, t, qb, tb, pos = items, caps, bank_items, bank_caps, Positives.from_groups(c2i, len(items))
    if bank_rows is not None:
        qb = qb[np.sort(bank_rows)]
    if target_rows is not None:
        tb = tb[np.sort(target_rows)]
    return q, t, qb, tb, pos


def _oracle(data, direction, name, params, bank_rows=None, target_rows=None):
    """R@1/5/10, MdR, MnR of ``name`` fitted from the embeddings (hubnorm's embeddings path, not a task)."""
    q, t, qb, tb, pos = _side(data, direction, bank_rows, target_rows)
    norm = hn.make_normalizer(name, **params).fit(t, query_bank=qb, target_bank=tb)
    return summarize_ranks(hn.positive_ranks(norm, pos, q), (1, 5, 10))


def _metrics(task, name, params):
    res = hn.evaluate(task.fit(hn.make_normalizer(name, **params)), task)
    res.pop("bank")
    return res


@pytest.mark.parametrize("direction", ["t2v", "v2t"])
@pytest.mark.parametrize("name", list(PARAMS))
def test_bank_subset_of_score_matrices_equals_the_embeddings_path(folder, direction, name):
    """The same bank rows cut from the stored matrices (the bank x gallery, and for DBSN the bank x bank matrix,
    which the v2t side reads transposed) and from the bank embeddings give the same numbers."""
    path, data = folder
    task = pr.load_sims_run(f"sims:{path}", ["t2i", "i2t"]).tasks[direction]
    rows = np.array([31, 3, 17, 0, 8, 22]) if direction == "t2v" else np.array([3, 1, 7, 20, 11])
    sub = task.bank_subset(rows)
    assert sub.size("query_bank") == len(rows) and task.size("query_bank") > len(rows)   # the task is not changed
    assert _metrics(sub, name, PARAMS[name]) == pytest.approx(_oracle(data, direction, name, PARAMS[name], rows),
                                                              abs=TOL)


def test_bank_subset_of_embeddings_equals_that_of_score_matrices(folder):
    path, data = folder
    q, t, qb, tb, pos = _side(data, "t2v")
    emb = RetrievalTask(q, t, pos, query_bank=qb, target_bank=tb, direction="t2v")
    scores = pr.load_sims_run(f"sims:{path}").tasks["t2v"]
    rows = np.array([5, 1, 40, 9])
    for name in ("nnn", "is", "sn"):
        p = dict(PARAMS[name], **({"k": 3} if name == "nnn" else {}))
        assert _metrics(emb.bank_subset(rows), name, p) == pytest.approx(_metrics(scores.bank_subset(rows), name, p),
                                                                         abs=TOL)
    assert np.array_equal(np.asarray(emb.bank_subset(torch.tensor(rows)).query_bank), qb[np.sort(rows)])


def test_bank_subset_refuses_what_is_not_a_set_of_bank_rows(folder, test_only):
    task = pr.load_sims_run(f"sims:{folder[0]}").tasks["t2v"]
    n_bank = task.size("query_bank")
    with pytest.raises(ValueError, match=re.escape(f"rows must be bank rows in [0, {n_bank}); got row {n_bank}")):
        task.bank_subset([0, n_bank])
    with pytest.raises(ValueError, match="rows must be >= 0"):
        task.bank_subset([-1, 2])
    with pytest.raises(ValueError, match="non-empty 1-D array"):
        task.bank_subset([])
    with pytest.raises(TypeError, match="rows must hold integers"):
        task.bank_subset([0.5, 1.0])
    with pytest.raises(ValueError, match=r"^rows must name each bank row once; got 2 repeated \(a sample with "
                                         r"replacement cannot be a bank: draw without replacement\)$"):
        task.bank_subset([3, 1, 3, 3])
    bare = pr.load_sims_run(f"sims:{test_only}").tasks["t2v"]
    with pytest.raises(ValueError, match="the t2v task has no query bank to cut"):
        bare.bank_subset([0])


def test_with_bank_fraction_of_embeddings_is_open_data_at_that_fraction(capsys):
    sizes = {"n_train_images": 60, "n_test_images": 40, "n_val_images": 0}
    full = pr.open_data("synthetic:flickr30k", synthetic_sizes=sizes, seed=3)
    capsys.readouterr()
    part = full.with_bank_fraction(0.25, seed=3)
    assert capsys.readouterr().out == ""   # no small-bank NOTE: the notebook names the share it takes
    want = pr.open_data("synthetic:flickr30k", synthetic_sizes=sizes, seed=3, bank_fraction=0.25)
    assert part.bank_fraction == 0.25 and part.bank_words == want.bank_words
    assert part.bank_name("t2i") == "reference bank (25% of train)"
    for d in ("t2i", "i2t"):
        for name in ("raw", "is"):
            assert hn.evaluate(part.all_tasks[d].fit(hn.make_normalizer(name)), part.all_tasks[d]) == \
                hn.evaluate(want.all_tasks[d].fit(hn.make_normalizer(name)), want.all_tasks[d])
    assert full.bank_fraction == 1.0 and full.bank.n_images > part.bank.n_images   # full is unchanged
    # a share of the training images is drawn from the whole training split again, not from the share
    again = want.with_bank_fraction(0.5, seed=3)
    assert again.bank_words == full.with_bank_fraction(0.5, seed=3).bank_words != want.bank_words


def test_with_bank_fraction_of_score_matrices_takes_a_seeded_share_of_each_banks_rows(folder, test_only):
    src = pr.open_data(f"sims:{folder[0]}")
    n = {d: t.size("query_bank") for d, t in src.all_tasks.items()}
    part = src.with_bank_fraction(0.1, seed=7)
    assert {d: t.size("query_bank") for d, t in part.all_tasks.items()} == {d: round(0.1 * v) for d, v in n.items()}
    assert part.bank_name("t2i") == "10% of the folder's bank rows" and src.bank_name("t2i") == "the folder's bank rows"
    rows = np.random.default_rng(7).choice(n["t2i"], round(0.1 * n["t2i"]), replace=False)
    assert _metrics(part.all_tasks["t2i"], "is", PARAMS["is"]) == \
        pytest.approx(_oracle(folder[1], "t2v", "is", PARAMS["is"], rows), abs=TOL)
    assert src.with_bank_fraction(1e-6).all_tasks["t2i"].size("query_bank") == 1   # at least one row
    assert src.with_bank_fraction(1.0).all_tasks["t2i"] is src.all_tasks["t2i"]
    bare = pr.open_data(f"sims:{test_only}")
    assert bare.with_bank_fraction(0.5).all_tasks["t2i"] is bare.all_tasks["t2i"]   # the test queries serve, all
    for bad, error in ((0, ValueError), (1.5, ValueError), (np.float32(-0.5), ValueError), (True, TypeError),
                       ("0.5", TypeError), (None, TypeError)):
        with pytest.raises(error, match=re.escape(f"fraction must be a number in (0, 1]; got {bad!r}")):
            src.with_bank_fraction(bad)
    assert src.with_bank_fraction(np.float32(0.5)).all_tasks["t2i"].size("query_bank") == round(0.5 * n["t2i"])
    for cut in (part, src.with_query_bank_fraction(0.5)):   # a share is taken once, of open_data's bank
        for again in (cut.with_bank_fraction, cut.with_query_bank_fraction):
            with pytest.raises(ValueError, match="this RunData's bank is already a share of the source's; call it on "
                                                 "the RunData that open_data returned"):
                again(0.5)


def test_with_bank_fraction_of_score_matrices_cuts_both_banks_with_the_same_rows_in_both_directions(folder):
    """One meaning of bank_fraction: as a share of training images with their captions cuts both banks of both
    directions, a folder's share keeps the same bank texts as t2v's query bank and v2t's target bank, and the same
    bank videos as v2t's query bank and t2v's target bank; DBSN, which reads both, equals the embeddings path on
    those rows."""
    path, data = folder
    src = pr.open_data(f"sims:{path}")
    part = src.with_bank_fraction(0.3, seed=4)
    n_text, n_video = src.all_tasks["t2i"].size("query_bank"), src.all_tasks["i2t"].size("query_bank")
    rng = np.random.default_rng(4)   # one generator: the texts' rows first (t2v's query bank), then the videos'
    text_rows = rng.choice(n_text, round(0.3 * n_text), replace=False)
    video_rows = rng.choice(n_video, round(0.3 * n_video), replace=False)
    t2v, v2t = part.all_tasks["t2i"], part.all_tasks["i2t"]
    assert (t2v.size("query_bank"), t2v.size("target_bank")) == (len(text_rows), len(video_rows))
    assert (v2t.size("query_bank"), v2t.size("target_bank")) == (len(video_rows), len(text_rows))
    assert part.bank_fraction == 0.3 and part.query_bank_fraction == 1.0
    assert part.bank_name("t2i") == "30% of the folder's bank rows"
    assert part.bank_words.startswith("30% of the folder's bank rows (t2i: ")
    for direction, task, qrows, trows in (("t2v", t2v, text_rows, video_rows), ("v2t", v2t, video_rows, text_rows)):
        for name in ("nnn", "dbsn"):
            assert _metrics(task, name, PARAMS[name]) == \
                pytest.approx(_oracle(data, direction, name, PARAMS[name], qrows, trows), abs=TOL), (direction, name)
    assert src.all_tasks["t2i"].size("target_bank") == n_video   # open_data's RunData is not changed


def test_bank_share_and_target_bank_subset(folder):
    """hubnorm.retrieval.bank_share refuses tasks whose banks of one modality differ; bank_subset cuts the target
    bank of a task of embeddings as of score matrices, and names the bank it cannot cut."""
    path, data = folder
    tasks = pr.load_sims_run(f"sims:{path}").tasks
    with pytest.raises(ValueError, match=r"^the tasks' banks of modality 't' differ in size \(\d+ and 5 rows, the "
                                         r"v2t task's target bank\)"):
        bank_share({"t2v": tasks["t2v"], "v2t": tasks["v2t"].bank_subset(np.arange(5), "target_bank")}, 0.5)
    kept = bank_share(tasks, 0.5, keep=("t2v", "v2t"))
    assert all(kept[d] is tasks[d] for d in tasks)
    q, t, qb, tb, pos = _side(data, "t2v")
    emb = RetrievalTask(q, t, pos, query_bank=qb, target_bank=tb, direction="t2v")
    rows = np.array([7, 2, 11])
    assert np.array_equal(np.asarray(emb.bank_subset(rows, "target_bank").target_bank), tb[np.sort(rows)])
    assert _metrics(emb.bank_subset(rows, "target_bank"), "dbsn", PARAMS["dbsn"]) == \
        pytest.approx(_metrics(tasks["t2v"].bank_subset(rows, "target_bank"), "dbsn", PARAMS["dbsn"]), abs=TOL)
    with pytest.raises(ValueError, match=r"^bank must be 'query_bank' or 'target_bank'; got 'targets'$"):
        emb.bank_subset(rows, "targets")
    no_target = RetrievalTask(q, t, pos, query_bank=qb, direction="t2v")
    with pytest.raises(ValueError, match=r"^the t2v task has no target bank to cut \(for score matrices: manifest "
                                         r"role 'bank_rows_x_bank_cols', 'bank_cols_x_test_cols' or "):
        no_target.bank_subset(rows, "target_bank")


# ---------------------------------------------------------------------------------------------- the folder
def test_is_sims_and_load_sims_run_refuse_other_sources(folder):
    assert pr.is_sims(f"sims:{folder[0]}") and not pr.is_sims("emb:x") and not pr.is_sims(None)
    assert not pr.is_sims(["sims:x"])
    with pytest.raises(ValueError, match=re.escape("source must be 'sims:<folder>'; got 'emb:x'")):
        pr.load_sims_run("emb:x")


def test_sims_run_names_the_text_query_direction_whatever_the_folder_order(tmp_path):
    write_example(tmp_path / "vt", modalities=("video", "text"))
    run = pr.load_sims_run(f"sims:{tmp_path / 'vt'}")
    assert run.directions == ["t2v", "v2t"] and run.alias == {"t2i": "t2v", "i2t": "v2t"}
    assert run.label == LABEL and run.synthetic is True and run.modalities == ("video", "text")
    assert run.has_bank("t2v") and run.has_bank("v2t")
    assert pr.load_sims_run(f"sims:{tmp_path / 'vt'}", ["i2t"]).directions == ["v2t"]
    one = pr.load_sims_run(f"sims:{tmp_path / 'vt'}", ["v2t", "t2i"])
    assert one.directions == ["v2t", "t2v"] and one.alias == {"t2i": "t2v"}
    with pytest.raises(ValueError, match=re.escape("directions ['x2y']: this sims folder holds ['v2t', 't2v']; pass "
                                                   "'t2i' (text queries, t2v) and/or 'i2t' (v2t)")):
        pr.load_sims_run(f"sims:{tmp_path / 'vt'}", ["x2y"])


def test_a_real_folder_is_labelled_real_and_a_bare_one_has_no_bank(tmp_path, test_only):
    caps, items, c2i, _, _ = write_example(tmp_path / "full")
    write_sims(tmp_path / "real", {"test": items @ caps.T}, modalities=("video", "text"),
               mask=np.arange(len(items))[:, None] == c2i[None, :], dataset="my-videos", synthetic=False)
    run = pr.load_sims_run(f"sims:{tmp_path / 'real'}", ["t2i", "i2t"])
    assert run.alias == {"t2i": "t2v", "i2t": "v2t"} and run.directions == ["t2v", "v2t"]
    assert run.label == "real data (my-videos, released score matrices)" and not run.synthetic
    assert not run.has_bank("t2v") and not run.has_bank("v2t")
    bare = pr.load_sims_run(f"sims:{test_only}")
    assert not bare.has_bank("t2v") and not bare.has_bank("v2t")


def test_with_query_bank_fraction_of_embeddings_draws_what_the_dataset_draws():
    """One seeded generator, t2i first (EmbeddingDataset.tasks(query_bank_fraction=)): the same bank rows, so the same
    numbers; the target banks stay whole; the bank is named with the share of its queries."""
    sizes = {"n_train_images": 60, "n_test_images": 40, "n_val_images": 0}
    src = pr.open_data("synthetic:flickr30k", synthetic_sizes=sizes, seed=2, ensure_val=False)
    part = src.with_query_bank_fraction(0.3, seed=5)
    want = src.ds.tasks("test", "train", query_bank_fraction=0.3, seed=5)
    for d in ("t2i", "i2t"):
        got = part.all_tasks[d]
        assert np.array_equal(np.asarray(got.query_bank), np.asarray(want[d].query_bank))
        assert np.array_equal(np.asarray(got.target_bank), np.asarray(src.all_tasks[d].target_bank))
        assert hn.evaluate(got.fit(hn.make_normalizer("dbsn")), got) == \
            hn.evaluate(want[d].fit(hn.make_normalizer("dbsn")), want[d])
    assert part.bank_name("i2t") == "reference bank (100% of train; 30% of its images as queries)"
    assert part.bank_words == "60 images / 300 captions (30% as queries: t2i 90 captions, i2t 18 images)"
    assert src.with_query_bank_fraction(1) is src and src.bank_name("t2i") == "reference bank (100% of train)"
    with pytest.raises(ValueError, match=re.escape("fraction must be a number in (0, 1]; got 0")):
        src.with_query_bank_fraction(0)


def test_run_data_says_whether_its_data_are_synthetic(folder, tmp_path):
    src = pr.open_data(f"sims:{folder[0]}")
    assert src.synthetic is True and src.source == f"sims:{folder[0]}" and src.label == LABEL
    caps, items, c2i, _, _ = folder[1]
    write_sims(tmp_path / "real", {"test": caps @ items.T}, modalities=("text", "video"), dataset="x", synthetic=False,
               labels=c2i)
    assert pr.open_data(f"sims:{tmp_path / 'real'}").synthetic is False
    sizes = {"n_train_images": 20, "n_test_images": 10, "n_val_images": 0}
    emb = pr.open_data("synthetic:coco", synthetic_sizes=sizes, ensure_val=False)
    assert emb.synthetic is True and emb.source == "synthetic:coco" and emb.label == pr.run_label(emb.ds)


def test_matrix_of_a_task_of_embeddings_is_their_product_and_equals_the_stored_one(folder):
    path, data = folder
    q, t, qb, tb, pos = _side(data, "t2v")
    emb = RetrievalTask(q, t, pos, query_bank=qb, target_bank=tb, direction="t2v")
    scores = pr.load_sims_run(f"sims:{path}").tasks["t2v"]
    for rows, cols in (("queries", "targets"), ("query_bank", "targets"), ("query_bank", "target_bank")):
        a, b = emb.matrix(rows, cols), scores.matrix(rows, cols)
        assert a.shape == b.shape and a.label == f"{rows} x {cols} scores"   # how a read error names it
        np.testing.assert_allclose(a.block(0, a.shape[0], 0, a.shape[1], torch.float64).numpy(),
                                   b.block(0, b.shape[0], 0, b.shape[1], torch.float64).numpy(), rtol=0, atol=TOL)
    with pytest.raises(ValueError, match=r"this task has no 'query_bank' embeddings; it holds "
                                         r"\['queries', 'targets'\]"):
        RetrievalTask(q, t, pos, direction="t2v").matrix("query_bank", "targets")
    for task in (emb, scores):
        with pytest.raises(ValueError, match=r"^a task holds the inputs queries, targets, query_bank, target_bank; "
                                             r"got 'bank'$"):
            task.matrix("bank", "targets")


def test_bank_subset_of_a_task_whose_matrices_hold_the_bank_on_their_columns(folder):
    """A task built by hand with (targets, query_bank) and (target_bank, query_bank) keys is cut on its columns."""
    path, data = folder
    stored = pr.load_sims_run(f"sims:{path}").tasks["t2v"]
    flipped = {}
    for (r, c), m in stored.engine.matrices.items():
        flipped[(c, r) if r == "query_bank" else (r, c)] = m.T if r == "query_bank" else m
    task = RetrievalTask(scores=flipped, positives=stored.positives, direction="t2v")
    rows = np.array([2, 9, 30, 14])
    for name in ("is", "dbsn"):
        assert _metrics(task.bank_subset(rows), name, PARAMS[name]) == \
            pytest.approx(_oracle(data, "t2v", name, PARAMS[name], rows), abs=TOL)


def test_shares_default_to_seed_0_name_their_call_and_name_the_t2i_bank_by_default(folder):
    """Found by mutation testing of protocol: the default seed, the refused call's name and bank_name's default."""
    src = pr.open_data(f"sims:{folder[0]}")
    n = src.all_tasks["t2i"].size("query_bank")
    rows = np.random.default_rng(0).choice(n, round(0.25 * n), replace=False)
    for part in (src.with_bank_fraction(0.25), src.with_query_bank_fraction(0.25)):
        assert _metrics(part.all_tasks["t2i"], "is", PARAMS["is"]) == \
            pytest.approx(_oracle(folder[1], "t2v", "is", PARAMS["is"], rows), abs=TOL)
        for name in ("with_bank_fraction", "with_query_bank_fraction"):
            with pytest.raises(ValueError, match=f"^{name}: this RunData's bank is already a share"):
                getattr(part, name)(0.5)
    sizes = {"n_train_images": 30, "n_test_images": 20, "n_val_images": 0}
    emb = pr.open_data("synthetic:flickr30k", synthetic_sizes=sizes, ensure_val=False).with_query_bank_fraction(0.5)
    assert emb.bank_name() == emb.bank_name("t2i") == "reference bank (100% of train; 50% of its captions as queries)"
