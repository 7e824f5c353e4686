"""Label-free selection (hubnorm.label_free): it runs on a task with the labels removed, reads no label (same
choice whatever the positives), its criterion is the Robin Hood index computed by hand, and bad input is refused."""

import types

import numpy as np
import pytest

import hubnorm as hn
from hubnorm import label_free as lf


@pytest.fixture(scope="module")
def task():
    ds = hn.load_embeddings("synthetic:coco", seed=5, n_train_images=120, n_test_images=60, n_val_images=0)
    te, tr = ds.split("test"), ds.split("train")
    f = np.float64
    return hn.build_tasks(te.images.astype(f), te.captions.astype(f), te.caption_to_image,
                          image_bank=tr.images.astype(f), caption_bank=tr.captions.astype(f), directions=("t2i",))["t2i"]


GRIDS = {"nnn": {"alpha": [0.25, 0.75, 1.5], "k": [1, 8, 32]}, "is": {"tau": [0.01, 0.02, 0.1]},
         "sn": {"tau": [0.01, 0.05]}, "dbsn": {"tau": [0.02]}}


@pytest.mark.parametrize("method", sorted(GRIDS))
def test_selection_runs_on_a_task_with_the_labels_removed(task, method):
    unlabelled = types.SimpleNamespace(targets=task.targets, query_bank=task.query_bank, target_bank=task.target_bank)
    assert not hasattr(unlabelled, "positives") and not hasattr(unlabelled, "queries")
    res = lf.label_free_select_task(method, unlabelled, grid=GRIDS[method])
    assert res.best_params in [dict(zip(GRIDS[method], v)) for v in
                               __import__("itertools").product(*GRIDS[method].values())]
    assert len(res.table) == np.prod([len(v) for v in GRIDS[method].values()])
    assert res.best_value == res.table[res.criterion].min() and res.raw_value > 0
    assert isinstance(lf.predict_benefit(res), bool)
    for bad in (float("nan"), float("inf")):   # issue 44: a NaN threshold said "does not help" without a word
        with pytest.raises(ValueError, match="threshold"):
            lf.predict_benefit(res, bad)


def test_no_label_is_read(task):
    shuffled = hn.RetrievalTask(task.queries, task.targets,
                                hn.Positives.from_labels(np.random.default_rng(0).integers(0, task.n_targets, task.n_queries),
                                                         task.n_targets), task.query_bank, task.target_bank)
    a = lf.label_free_select_task("nnn", task, grid=GRIDS["nnn"])
    b = lf.label_free_select_task("nnn", shuffled, grid=GRIDS["nnn"])
    assert a.best_params == b.best_params and a.table.equals(b.table)


def test_criterion_is_the_robin_hood_index_by_hand(task):
    res = lf.label_free_select("is", task.targets, task.query_bank, grid={"tau": [0.02]}, holdout=0.25, seed=3)
    pseudo, fit = lf.pseudo_query_split(len(task.query_bank), 0.25, seed=3)
    norm = hn.InvertedSoftmax(tau=0.02).fit(task.targets, query_bank=task.query_bank[fit])
    n_k = hn.k_occurrence(norm, 10, queries=task.query_bank[pseudo])
    expected = n_k.sum() / n_k.size
    rh = 0.5 * np.abs(n_k - expected).sum() / n_k.sum()
    assert res.best_value == pytest.approx(rh, abs=1e-12)
    raw = hn.k_occurrence(hn.Identity().fit(task.targets), 10, queries=task.query_bank[pseudo])
    assert res.raw_value == pytest.approx(0.5 * np.abs(raw - expected).sum() / raw.sum(), abs=1e-12)


def test_candidate_banks(task):
    pseudo, fit = lf.pseudo_query_split(len(task.query_bank), 0.2, seed=0)
    rest = task.query_bank[fit]
    banks = {"in-domain": rest, "images as a query bank (wrong modality)": task.target_bank}
    res = lf.label_free_select("nnn", task.targets, task.query_bank, grid={"alpha": [0.75], "k": [8]},
                               candidate_banks=banks)
    assert set(res.table["bank"]) == set(banks) and res.bank in banks
    assert res.bank == "in-domain"  # regression check on this seed: the caption bank balances the caption pseudo-queries


def test_bad_inputs(task):
    with pytest.raises(ValueError, match="unknown method"):
        lf.label_free_select("nope", task.targets, task.query_bank)
    with pytest.raises(ValueError, match="criterion"):
        lf.label_free_select("is", task.targets, task.query_bank, criterion="r@1")
    with pytest.raises(ValueError, match="query_bank"):
        lf.label_free_select("is", task.targets, None)
    with pytest.raises(ValueError, match="holdout"):
        lf.pseudo_query_split(10, 1.5)
    with pytest.raises(ValueError, match="candidate_banks is empty"):
        lf.label_free_select("is", task.targets, task.query_bank, candidate_banks={})
