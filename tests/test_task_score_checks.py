"""A task built by hand from score matrices (``RetrievalTask(scores=...)``) gets the consistency checks a ``sims:``
folder gets as it is read (:mod:`hubnorm.score_checks`): the catalogue of realistic mistakes of
``tests/sims_mistakes.py``, applied to the matrices as a user would hand them to the task, in both directions, is
refused with a message naming it; right matrices (the catalogue's right spec, a synthetic preset, the real COCO-500
release) are not; ``check=False`` lets the matrices through, and the tasks the library derives are not read again."""

from __future__ import annotations

import numpy as np
import pytest

import hubnorm as hn
from conftest import shared_path
from hubnorm import score_checks
import sims_mistakes as sm


def text_query_task(spec, **kw):
    """Captions query items: the folder's test matrix, its bank_rows (bank captions x items) and its bank x bank
    matrix (bank captions x bank items), as a user passes them."""
    m = spec["mats"]
    scores = {("queries", "targets"): m["test"]}
    if "bank_rows" in m:
        scores[("query_bank", "targets")] = m["bank_rows"]
    if "bank_rows_x_bank_cols" in m:
        scores[("query_bank", "target_bank")] = m["bank_rows_x_bank_cols"]
    pos = hn.Positives.from_labels(spec["labels"], m["test"].shape[1])
    return hn.RetrievalTask(scores=scores, positives=pos, direction="t2v", **kw)


def item_query_task(spec, **kw):
    """Items query captions: the test matrix transposed, bank_cols (bank items x captions) as the query bank's."""
    m = spec["mats"]
    scores = {("targets", "queries"): m["test"]}          # given (captions, items): read transposed
    if "bank_cols" in m:
        scores[("query_bank", "targets")] = m["bank_cols"]
    if "bank_rows_x_bank_cols" in m:
        scores[("target_bank", "query_bank")] = m["bank_rows_x_bank_cols"]
    pos = hn.Positives.from_groups(spec["labels"], m["test"].shape[1])
    return hn.RetrievalTask(scores=scores, positives=pos, direction="v2t", **kw)


#: (mistake, what the refusal must say) for the text-query task
TEXT_QUERY_MISTAKES = [
    (sm.transposed_square, "looks transposed"),
    (sm.transposed_square_with_banks_transposed_too, "looks transposed|does not describe"),
    (sm.shift(1), "look shifted"),
    (sm.shift(-1), "look shifted"),
    (sm.shift(2), "look shifted"),
    (sm.shift(7), "at chance level"),
    (sm.positives_shuffled, "at chance level"),
    (sm.positives_of_another_split, "at chance level"),
    (sm.labels_off_by_one_in_value, "look shifted|at chance level"),
    (sm.labels_one_based, "must lie in"),
    (sm.test_rows_shuffled, "at chance level"),
    (sm.test_columns_shuffled, "at chance level|does not describe"),
    (sm.distances_instead_of_similarities, "at chance level"),
    (sm.test_distances_banks_similarities, "at chance level"),
    (sm.bank_rows_of_another_split, "does not describe the test items"),
    (sm.bank_rows_columns_permuted, "does not describe the test items"),
    (sm.bank_rows_columns_reversed, "does not describe the test items"),
    (sm.bank_rows_from_another_model, "does not describe the test items"),
    (sm.bank_rows_are_the_test_queries, "holds the test queries"),
    (sm.bank_rows_are_the_test_queries_shuffled, "holds the test queries"),
    (sm.importer_test_and_bank_swapped, "at chance level"),
    (sm.nan_in_a_bank, r"the query_bank x targets score matrix holds a non-finite score .* at row 3, column 4"),
]

#: the same for the item-query task (several positives per query: no shift statistic)
ITEM_QUERY_MISTAKES = [
    (sm.transposed_square, "looks transposed"),
    (sm.positives_shuffled, "at chance level"),
    (sm.test_rows_shuffled, "at chance level"),
    (sm.distances_instead_of_similarities, "at chance level"),
    (sm.bank_cols_columns_permuted, "does not describe the test items"),
    (sm.bank_cols_are_the_test_items, "holds the test queries"),
]


@pytest.mark.parametrize("build", [text_query_task, item_query_task])
def test_right_matrices_are_taken(build):
    task = build(sm.right_spec())
    assert task.kind == "scores" and task.n_queries == task.positives.n_queries


@pytest.mark.parametrize("mistake, message", TEXT_QUERY_MISTAKES, ids=[m.__name__ for m, _ in TEXT_QUERY_MISTAKES])
def test_a_text_query_task_refuses_each_mistake_naming_it(mistake, message):
    spec = mistake(sm.right_spec())
    with pytest.raises(ValueError, match=message):
        text_query_task(spec)


@pytest.mark.parametrize("mistake, message", ITEM_QUERY_MISTAKES, ids=[m.__name__ for m, _ in ITEM_QUERY_MISTAKES])
def test_an_item_query_task_refuses_each_mistake_naming_it(mistake, message):
    spec = mistake(sm.right_spec())
    with pytest.raises(ValueError, match=message):
        item_query_task(spec)


def test_the_refusal_names_the_matrix_the_fix_and_the_way_out():
    with pytest.raises(ValueError) as e:
        text_query_task(sm.transposed_square(sm.right_spec()))
    msg = str(e.value)   # named by its bank: the bank's items are the test matrix's rows
    assert msg.startswith("the score matrices of this t2v task look wrong: scores[('queries', 'targets')] looks "
                          "transposed: scores[('query_bank', 'targets')] describes the test matrix's rows")
    assert msg.endswith("; give it the other way round (S.T under its key, or S under the swapped key): the test "
                        "matrix's rows must be the queries and its columns the targets. If they are right, build the "
                        "task with check=False")
    with pytest.raises(ValueError, match=r"^the score matrices of this t2v task look wrong: scores\[\('query_bank', "
                                         r"'targets'\)\] does not describe the test items: .* \(right matrices: above "
                                         r"0.5\)\. .*: fix the order or score the bank again\. If they are right"):
        text_query_task(sm.bank_rows_columns_permuted(sm.right_spec()))
    with pytest.raises(ValueError, match=r"^the score matrices of this v2t task look wrong: scores\[\('targets', "
                                         r"'queries'\)\] \(read transposed\) looks transposed"):
        item_query_task(sm.transposed_square(sm.right_spec()))   # named by the key it was given under


def test_a_task_of_the_dualis_matrices_without_a_bank_x_bank_matrix_is_checked_and_taken():
    spec = sm.right_spec()
    m = spec["mats"]
    pos = hn.Positives.from_labels(spec["labels"], m["test"].shape[1])
    e = spec["emb"]
    intra = e["bank_items"] @ e["items"].T                 # target bank x targets (DualIS's intra-modal factor)
    for extra in ({("query_bank", "targets"): m["bank_rows"], ("target_bank", "targets"): intra},
                  {("query_bank", "target_bank"): m["bank_rows_x_bank_cols"], ("target_bank", "targets"): intra}):
        task = hn.RetrievalTask(scores={("queries", "targets"): m["test"], **extra}, positives=pos, direction="t2v")
        assert task.kind == "scores"
    bad = {("query_bank", "targets"): sm.bank_rows_columns_permuted(sm.right_spec())["mats"]["bank_rows"],
           ("target_bank", "targets"): intra}
    with pytest.raises(ValueError, match="does not describe the test items"):
        hn.RetrievalTask(scores={("queries", "targets"): m["test"], **bad}, positives=pos, direction="t2v")


def test_centred_or_structureless_scores_are_not_refused():
    """Items whose mean scores carry no order (embeddings centred by the bank's mean, a standard hubness fix, or
    random ones): the bank checks cannot tell a right bank from a wrong one there, so they say nothing."""
    e = sm.right_spec()["emb"]
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)   # noqa: E731
    items, caps = unit(e["items"] - e["bank_items"].mean(0)), unit(e["caps"] - e["bank_caps"].mean(0))
    bank_items = unit(e["bank_items"] - e["bank_items"].mean(0))
    bank_caps = unit(e["bank_caps"] - e["bank_caps"].mean(0))
    pos = hn.Positives.from_labels(np.arange(len(items)).repeat(2), len(items))
    task = hn.RetrievalTask(scores=hn.matrices_from_embeddings(caps, items, bank_caps, bank_items), positives=pos,
                            direction="t2v")
    assert hn.evaluate(None, task, ks=(1,))["R@1"] > 50
    rng = np.random.default_rng(0)
    test = rng.standard_normal((400, 200))
    test[np.arange(400), np.arange(400) // 2] += 3.0      # each caption matches its item; nothing else has an order
    noise = {("queries", "targets"): test, ("query_bank", "targets"): rng.standard_normal((400, 200))}
    assert hn.RetrievalTask(scores=noise, positives=pos, direction="t2v").kind == "scores"


def test_a_tasks_messages_speak_of_matrices_not_of_files_or_a_manifest():
    with pytest.raises(ValueError) as e:
        text_query_task(sm.shift(1)(sm.right_spec()))
    assert ("; fix the positives so that entry i is the column of row i of scores[('queries', 'targets')]"
            in str(e.value))
    with pytest.raises(ValueError) as e:
        text_query_task(sm.positives_shuffled(sm.right_spec()))
    assert "(shifted or shuffled rows, another split, or test and bank matrices swapped)" in str(e.value)
    spec = sm.right_spec()
    spec["mats"]["bank_rows_x_bank_cols"] = spec["mats"]["bank_rows_x_bank_cols"][::-1].copy()
    with pytest.raises(ValueError) as e:
        text_query_task(spec)
    msg = str(e.value)
    assert ("scores[('query_bank', 'target_bank')] does not describe the bank items of scores[('query_bank', "
            "'targets')]: the correlation of each bank item's mean score in the two is ") in msg
    assert msg.endswith("(right matrices: above 0.5). Its rows must be the rows of scores[('query_bank', 'targets')], "
                        "in the same order. If they are right, build the task with check=False")
    for word in ("file", "manifest", "folder", "(bank_rows"):
        assert word not in msg


def test_check_false_takes_the_matrices_as_given_and_check_must_be_a_bool():
    spec = sm.positives_shuffled(sm.right_spec())
    task = text_query_task(spec, check=False)
    assert hn.evaluate(None, task, ks=(1,))["R@1"] < 5       # what the check would have said
    for bad in ("no", 0, None):
        with pytest.raises(TypeError, match=f"check must be True or False; got {bad!r}"):
            text_query_task(sm.right_spec(), check=bad)
        with pytest.raises(TypeError, match=f"check must be True or False; got {bad!r}"):   # embeddings too
            e = sm.right_spec()["emb"]
            hn.RetrievalTask(e["caps"], e["items"], hn.Positives.from_labels(np.arange(400) // 2, 200), check=bad)


def test_small_matrices_are_not_judged():
    """Below MIN_ITEMS rows or columns no statistic is read (too few items to tell right from wrong)."""
    rng = np.random.default_rng(0)
    n = score_checks.MIN_ITEMS - 1
    task = hn.RetrievalTask(scores={("queries", "targets"): rng.standard_normal((n, n))},
                            positives=hn.Positives.from_labels(rng.permutation(n), n), direction="t2i")
    assert task.n_queries == n


def test_the_tasks_the_library_derives_are_not_read_again(monkeypatch):
    calls = []
    real = score_checks.task_findings
    monkeypatch.setattr(score_checks, "task_findings", lambda *a, **k: calls.append(1) or real(*a, **k))
    task = text_query_task(sm.right_spec())
    assert calls == [1]
    task.bank_subset(np.arange(0, 400, 2))
    task.test_as_bank()
    task.fit(hn.InvertedSoftmax(tau=0.05), query_aware=True)
    hn.evaluate(task.fit(hn.InvertedSoftmax(tau=0.05)), task)
    assert calls == [1]


def test_synthetic_preset_matrices_are_taken():
    from hubnorm.synthetic import make_dataset

    ds = make_dataset("flickr30k", seed=0, n_train_images=300, n_test_images=200, n_val_images=0,
                         captions_per_image=1)
    test, train = ds.splits["test"], ds.splits["train"]
    for d, task in hn.build_tasks(test.images, test.captions, test.caption_to_image, image_bank=train.images,
                                  caption_bank=train.captions).items():
        mats = hn.matrices_from_embeddings(task.queries, task.targets, task.query_bank, task.target_bank)
        assert hn.RetrievalTask(scores=mats, positives=task.positives, direction=d).kind == "scores"


@pytest.mark.shared_data
def test_real_coco500_matrices_are_taken(tmp_path):
    """Real CLIP ViT-B/16 embeddings of COCO val2017 (500 pairs): half the images as the test set, the other half's
    captions and images as the banks, as score matrices in both directions."""
    from hubnorm_companion import calibration as cal

    img, cap, c2i = cal.real_arrays("coco-val2017-500-clip-vitb16", mirror=shared_path("embeddings"),
                                    cache_dir=tmp_path / "cache")
    img, cap = hn.l2_normalize(img.astype(np.float64)), hn.l2_normalize(cap.astype(np.float64))
    test, ref = np.arange(0, 500, 2), np.arange(1, 500, 2)
    for d, task in hn.build_tasks(img[test], cap[test], np.arange(250), image_bank=img[ref],
                                  caption_bank=cap[ref]).items():
        mats = hn.matrices_from_embeddings(task.queries, task.targets, task.query_bank, task.target_bank)
        assert hn.RetrievalTask(scores=mats, positives=task.positives, direction=d).kind == "scores"
