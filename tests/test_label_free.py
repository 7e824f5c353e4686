"""Label-free selection (hubnorm.label_free): it runs on a task with the labels removed, reads no label (same
choice whatever the positives), its criteria equal dense float64 computations by hand (the mutual agreement, the
Robin Hood index), the benefit predictor says "does not help" where nothing helps, and bad input is refused."""

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
    assert a.criterion == "mutual"   # the task's query embeddings are read, never its positives
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


def _mutual_by_hand(scores, raw):
    """Dense float64 oracle of the mutual agreement: top-1 of each row of ``scores``; each column's c best rows of
    ``raw`` by a stable sort (ties: lowest row first)."""
    m, n = raw.shape
    c = max(1, int(round(m / n)))
    top1 = np.array([np.argsort(-row, kind="stable")[0] for row in scores])
    best = [set(np.argsort(-raw[:, t], kind="stable")[:c]) for t in range(n)]
    return float(np.mean([q in best[top1[q]] for q in range(m)]))


@pytest.mark.parametrize("method, params", [("is", {"tau": 0.02}), ("nnn", {"alpha": 0.75, "k": 8}),
                                            ("sn", {"tau": 0.05})])
def test_mutual_criterion_by_hand(task, method, params):
    res = lf.label_free_select_task(method, task, grid={p: [v] for p, v in params.items()})
    norm = hn.make_normalizer(method, **params).fit(task.targets, query_bank=task.query_bank,
                                                    target_bank=task.target_bank)
    q, t = np.asarray(task.queries, np.float64), np.asarray(task.targets, np.float64)
    raw = q @ t.T
    assert res.criterion == "mutual" and task.n_queries // task.n_targets == 5   # c = 5 captions per image
    assert res.best_value == pytest.approx(_mutual_by_hand(norm.score(task.queries).numpy(), raw), abs=1e-12)
    assert res.raw_value == pytest.approx(_mutual_by_hand(raw, raw), abs=1e-12)
    # the other direction: one image query per caption target (c = 1)
    i2t = hn.RetrievalTask(task.targets, task.queries, hn.Positives.from_labels(np.zeros(task.n_targets, int),
                                                                                 task.n_queries),
                           task.target_bank, task.query_bank)
    r2 = lf.label_free_select_task("is", i2t, grid={"tau": [0.02]})
    n2 = hn.InvertedSoftmax(tau=0.02).fit(i2t.targets, query_bank=i2t.query_bank)
    assert r2.best_value == pytest.approx(_mutual_by_hand(n2.score(i2t.queries).numpy(), raw.T), abs=1e-12)


def _planted(n=60, d=24, hub=True, seed=0):
    """Queries = near copies of their targets (a perfect raw match when ``hub`` is False); with ``hub``, every
    query and bank row shares a direction ``u`` and target 0 lies along it (a planted hub that raw retrieval returns
    for many queries; the bank sees it)."""
    rng = np.random.default_rng(seed)
    unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)
    t = unit(rng.standard_normal((n, d)))
    u = unit(rng.standard_normal(d))
    a = 0.9 if hub else 0.0
    q = unit(t + 0.08 * rng.standard_normal((n, d)) + a * u)
    bank = unit(unit(rng.standard_normal((300, d))) + a * u)
    if hub:
        t[0] = unit(u + 0.3 * t[0])
    return hn.RetrievalTask(q, t, hn.Positives.from_labels(np.arange(n), n), bank)


def test_predictor_says_does_not_help_when_nothing_helps_and_helps_against_a_planted_hub():
    grid = {"tau": [0.01, 0.02, 0.05, 0.1]}
    clean = _planted(hub=False)
    raw_r1 = hn.evaluate(hn.Identity().fit(clean.targets), clean, ks=(1,))["R@1"]
    res = lf.label_free_select_task("is", clean, grid=grid)
    assert raw_r1 == 100.0 and res.raw_value == 1.0 and res.gain <= 0 and not lf.predict_benefit(res)
    hubbed = _planted(hub=True)
    res = lf.label_free_select_task("is", hubbed, grid=grid)
    before = hn.evaluate(hn.Identity().fit(hubbed.targets), hubbed, ks=(1,))["R@1"]
    after = hn.evaluate(hubbed.fit(hn.InvertedSoftmax(**res.best_params)), hubbed, ks=(1,))["R@1"]
    assert res.gain > 0 and lf.predict_benefit(res) and after > before


def test_mutual_prefers_the_interior_of_a_wide_grid(task):
    """Regression check (this seed, read after a run): on a temperature grid spanning 100x, the mutual criterion's
    best is not at either end, where the Robin Hood index of the bank-only criterion picks the weakest end."""
    grid = {"tau": [0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2]}
    res = lf.label_free_select_task("is", task, grid=grid)
    assert res.best_params["tau"] not in (0.002, 0.2)


def test_bad_inputs_of_the_mutual_criterion(task):
    with pytest.raises(ValueError, match="needs the unlabelled queries"):
        lf.label_free_select("is", task.targets, task.query_bank, criterion="mutual")
    with pytest.raises(ValueError, match="k belongs to the bank-only"):
        lf.label_free_select("is", task.targets, task.query_bank, queries=task.queries, k=10)
    with pytest.raises(ValueError, match="holdout belongs to the bank-only"):
        lf.label_free_select_task("is", task, holdout=0.3)
    with pytest.raises(ValueError, match="seed belongs to the bank-only"):   # it would be ignored: refused
        lf.label_free_select_task("is", task, seed=3)
    with pytest.raises(ValueError, match="reads the bank only"):
        lf.label_free_select("is", task.targets, task.query_bank, queries=task.queries, criterion="robin_hood")
    with pytest.raises(ValueError, match="queries"):
        lf.label_free_select("is", task.targets, task.query_bank, queries=task.queries[:, :7])
    rh = lf.label_free_select_task("is", task, criterion="robin_hood", grid={"tau": [0.02]})
    assert rh.criterion == "robin_hood"


# ---------------------------------------------------------------- what mutation testing found unchecked (issue 50)
def test_pseudo_query_split_defaults_bounds_and_messages():
    pseudo, fit = lf.pseudo_query_split(10)
    expected = np.sort(np.random.default_rng(0).permutation(10)[:2])    # holdout 0.2, seed 0, by hand
    assert pseudo.tolist() == expected.tolist() and sorted(pseudo.tolist() + fit.tolist()) == list(range(10))
    p1, f1 = lf.pseudo_query_split(2, 0.5)                                # one pseudo-query, one bank row: allowed
    assert len(p1) == 1 and len(f1) == 1
    for bad in (0, 0.0, 1, 1.0, 1.5, True, "0.2", None):
        with pytest.raises(ValueError, match=r"^holdout must be a share in \(0, 1\)"):
            lf.pseudo_query_split(10, bad)
    with pytest.raises(ValueError, match=r"^holdout=0.1 of 2 bank rows leaves no pseudo-query or no bank row$"):
        lf.pseudo_query_split(2, 0.1)                                     # rounds to 0 pseudo-queries
    with pytest.raises(ValueError, match=r"^holdout=0.9 of 2 bank rows leaves no pseudo-query"):
        lf.pseudo_query_split(2, 0.9)                                     # rounds to every row
    with pytest.raises(ValueError, match=r"^n_bank must be >= 1"):
        lf.pseudo_query_split(0)


def _dense_occurrences(targets, pseudo, H, k):
    """N_k of the pseudo-queries under every row of offsets H, dense float64, ties to the lower index."""
    s = np.asarray(pseudo, np.float64) @ np.asarray(targets, np.float64).T
    out = np.zeros((len(H), s.shape[1]), np.int64)
    for g, h in enumerate(np.asarray(H, np.float64)):
        top = np.argsort(-(s + h), axis=1, kind="stable")[:, :k]
        out[g] = np.bincount(top.ravel(), minlength=s.shape[1])
    return out


def test_occurrences_and_mutual_agreement_over_many_blocks_equal_their_dense_forms(task, monkeypatch):
    import torch

    rng = np.random.default_rng(4)
    t = torch.as_tensor(np.asarray(task.targets, np.float64))
    q = torch.as_tensor(np.asarray(task.queries, np.float64))
    H = torch.as_tensor(rng.normal(0, 0.05, (3, t.shape[0])))
    one_block = lf._occurrences(t, q, H, 10), lf.mutual_agreement(t, q, H)
    monkeypatch.setattr(lf, "block_rows", lambda *a, **k: 7)             # 7 rows a block: many blocks, a ragged last
    counts, agree = lf._occurrences(t, q, H, 10), lf.mutual_agreement(t, q, H)
    assert counts.shape == (3, t.shape[0]) and np.issubdtype(counts.dtype, np.integer)
    assert (counts == _dense_occurrences(t, q, H, 10)).all() and (counts == one_block[0]).all()
    assert counts.sum(axis=1).tolist() == [10 * q.shape[0]] * 3
    raw = q.numpy() @ t.numpy().T
    assert agree.shape == (3,)
    assert agree.tolist() == pytest.approx([_mutual_by_hand(raw + h, raw) for h in H.numpy()], abs=1e-12)
    assert agree.tolist() == one_block[1].tolist()


def test_skewness_criterion_is_the_absolute_skewness_of_the_pseudo_queries_n_k(task):
    from scipy import stats

    res = lf.label_free_select("is", task.targets, task.query_bank, grid={"tau": [0.02, 0.1]}, criterion="skewness",
                               holdout=0.25, seed=3)
    pseudo, fit = lf.pseudo_query_split(len(task.query_bank), 0.25, seed=3)
    values = []
    for tau in (0.02, 0.1):
        norm = hn.InvertedSoftmax(tau=tau).fit(task.targets, query_bank=task.query_bank[fit])
        values.append(abs(stats.skew(hn.k_occurrence(norm, 10, queries=task.query_bank[pseudo]), bias=True)))
    assert res.criterion == "skewness" and res.table["skewness"].tolist() == pytest.approx(values, abs=1e-12)
    assert res.best_value == pytest.approx(min(values), abs=1e-12)
    assert res.best_params == {"tau": (0.02, 0.1)[int(np.argmin(values))]}
    raw = hn.k_occurrence(hn.Identity().fit(task.targets), 10, queries=task.query_bank[pseudo])
    assert res.raw_value == pytest.approx(abs(stats.skew(raw, bias=True)), abs=1e-12)
    assert res.gain == pytest.approx((res.raw_value - res.best_value) / res.raw_value)


@pytest.mark.parametrize("criterion", ["mutual", "robin_hood"])
def test_the_best_of_the_candidate_banks_wins_under_either_direction_of_the_criterion(task, criterion):
    rng = np.random.default_rng(1)
    noise = rng.standard_normal(np.shape(task.query_bank))
    banks = {"bank": task.query_bank, "noise": noise / np.linalg.norm(noise, axis=1, keepdims=True),
             "half": task.query_bank[::2]}
    kw = {"queries": task.queries} if criterion == "mutual" else {}
    res = lf.label_free_select("is", task.targets, task.query_bank, grid={"tau": [0.01, 0.05]}, criterion=criterion,
                               candidate_banks=banks, **kw)
    per_bank = res.table.groupby("bank", sort=False)[criterion]
    best = per_bank.max() if criterion == "mutual" else per_bank.min()
    winner = best.idxmax() if criterion == "mutual" else best.idxmin()
    assert best.nunique() == 3                                             # a real choice, no tie
    assert res.bank == winner and res.best_value == best[winner]
    assert res.method == "is" and list(res.table.index) == list(range(6))   # one table, one row per (bank, point)
    assert list(res.table["bank"]) == ["bank"] * 2 + ["noise"] * 2 + ["half"] * 2


def test_fixed_parameters_reach_the_normalizer_and_grid_points_beyond_a_bank_are_dropped(task):
    a = lf.label_free_select("nnn", task.targets, task.query_bank, queries=task.queries, grid={"alpha": [0.5, 1.0]},
                             fixed={"k": 4})
    b = lf.label_free_select("nnn", task.targets, task.query_bank, queries=task.queries,
                             grid={"alpha": [0.5, 1.0], "k": [4]})
    assert a.table["mutual"].tolist() == b.table["mutual"].tolist() and a.best_params == {"alpha": b.best_params["alpha"]}
    c = lf.label_free_select("nnn", task.targets, task.query_bank, queries=task.queries, grid={"alpha": [0.5], "k": [1]})
    assert a.table["mutual"].tolist() != c.table["mutual"].tolist()[:1] * 2   # k = 4 was used, not the default
    small = {"ten rows": task.query_bank[:10]}
    d = lf.label_free_select("nnn", task.targets, task.query_bank, queries=task.queries,
                             grid={"alpha": [0.75], "k": [4, 10, 11, 64]}, candidate_banks=small)
    assert d.table["k"].tolist() == [4, 10]                               # k <= the bank's 10 rows
    with pytest.raises(ValueError, match=r"^no grid point fits bank 'ten rows' \(10 rows\)$"):
        lf.label_free_select("nnn", task.targets, task.query_bank, queries=task.queries,
                             grid={"alpha": [0.75], "k": [11]}, candidate_banks=small)


def test_every_guard_says_what_is_wrong(task):
    def refused(match, **kw):
        args = dict(method="is", targets=task.targets, query_bank=task.query_bank)
        args.update(kw)
        with pytest.raises((ValueError, TypeError), match=match):
            lf.label_free_select(args.pop("method"), args.pop("targets"), args.pop("query_bank"), **args)

    refused(r"^label-free selection needs an unlabelled query_bank", query_bank=None)
    refused(r"^criterion='mutual' needs the unlabelled queries \(queries=\.\.\., e\.g\. the test queries' "
            r"embeddings; no label is read\), or choose criterion='robin_hood' for a bank-only choice$",
            criterion="mutual")
    refused(r"^criterion='robin_hood' reads the bank only; queries are read by criterion='mutual': drop queries or "
            r"choose criterion='mutual'$", criterion="robin_hood", queries=task.queries)
    refused(r"^k must be >= 1", k=0)
    refused(r"^k=61 exceeds the gallery size 60$", k=61)
    refused(r"^candidate_banks is empty: give at least one bank$", candidate_banks={})
    refused(r"^no default grid for method 'hungarian': pass grid=\{'param': \[values, \.\.\.\]\}$",
            method="hungarian")
    refused(r"^label-free selection runs on offset methods; 'ls' normalises each query's row", method="ls")
    assert len(lf.label_free_select("is", task.targets, task.query_bank, grid={"tau": [0.02]}, k=60).table) == 1
    res = lf.label_free_select("is", task.targets, task.query_bank, grid={"tau": [0.02]})
    with pytest.raises(ValueError, match=r"^threshold must be"):
        lf.predict_benefit(res, float("nan"))


def test_the_task_form_passes_the_queries_only_to_the_mutual_criterion(task):
    explicit = lf.label_free_select_task("is", task, criterion="mutual", grid={"tau": [0.02, 0.05]})
    direct = lf.label_free_select("is", task.targets, task.query_bank, queries=task.queries,
                                  target_bank=task.target_bank, grid={"tau": [0.02, 0.05]})
    assert explicit.criterion == "mutual" and explicit.table.equals(direct.table)
    bank_only = lf.label_free_select_task("is", task, criterion="skewness", grid={"tau": [0.02]})
    assert bank_only.criterion == "skewness"


def test_small_dimension_many_blocks_defaults_and_names(task, monkeypatch):
    import torch

    rng = np.random.default_rng(2)
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)
    t, q = torch.as_tensor(unit(rng.standard_normal((9, 4)))), torch.as_tensor(unit(rng.standard_normal((40, 4))))
    H = torch.as_tensor(rng.normal(0, 0.1, (2, 9)))
    monkeypatch.setattr(lf, "block_rows", lambda *a, **k: 6)   # more queries (40) than dimensions (4), many blocks
    assert (lf._occurrences(t, q, H, 3) == _dense_occurrences(t, q, H, 3)).all()
    monkeypatch.undo()
    # the bank-only split's seed defaults to 0; the banks are named after what they hold
    default = lf.label_free_select("is", task.targets, task.query_bank, grid={"tau": [0.02, 0.05]})
    seeded = lf.label_free_select("is", task.targets, task.query_bank, grid={"tau": [0.02, 0.05]}, seed=0)
    other = lf.label_free_select("is", task.targets, task.query_bank, grid={"tau": [0.02, 0.05]}, seed=1)
    assert default.table.equals(seeded.table) and not default.table.equals(other.table)
    assert default.bank == "query bank (rest)"
    assert lf.label_free_select_task("is", task, grid={"tau": [0.02]}).bank == "query bank"
    # float64 queries against float32 targets: the queries follow the targets' dtype
    mixed = lf.label_free_select("is", np.asarray(task.targets, np.float32), np.asarray(task.query_bank, np.float32),
                                 queries=np.asarray(task.queries, np.float64), grid={"tau": [0.02]})
    assert mixed.best_value == pytest.approx(lf.label_free_select_task("is", task, grid={"tau": [0.02]}).best_value,
                                             abs=0.01)
    with pytest.raises(ValueError, match=r"^queries must be 2-D"):
        lf.label_free_select("is", task.targets, task.query_bank, queries=np.asarray(task.queries)[0], grid={"tau": [0.02]})


def test_equal_banks_keep_the_first_given_and_k_limits_come_from_every_input(task):
    for criterion, kw in (("mutual", {"queries": task.queries}), ("robin_hood", {})):
        for order in (("b", "a"), ("a", "b")):
            banks = {name: task.query_bank for name in order}
            res = lf.label_free_select("is", task.targets, task.query_bank, grid={"tau": [0.02]}, criterion=criterion,
                                       candidate_banks=banks, **kw)
            assert res.bank == order[0]
    # CSLS's k runs over the query bank and the targets (60 here): k = 61 is dropped, 60 kept
    res = lf.label_free_select("csls", task.targets, task.query_bank, queries=task.queries, grid={"k": [4, 60, 61]})
    assert res.table["k"].tolist() == [4, 60]


def test_the_task_form_passes_the_target_bank(task):
    a = lf.label_free_select_task("dbsn", task, grid={"tau": [0.02]})
    b = lf.label_free_select("dbsn", task.targets, task.query_bank, queries=task.queries, target_bank=task.target_bank,
                             grid={"tau": [0.02]})
    assert a.table.equals(b.table)
