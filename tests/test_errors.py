"""Every public entry point rejects bad input with an error that names the argument."""

import numpy as np
import pytest
import torch

import hubnorm as hn
from conftest import unit_rows

pytestmark = pytest.mark.usefixtures("single_thread_torch")

RNG = np.random.default_rng(0)
Q, T, QB, TB = (unit_rows(RNG, n, 8) for n in (12, 10, 15, 9))
# method lists from the registry (a newly registered method is checked too): what each class declares
ALL = sorted(hn.NORMALIZERS)
BANK_METHODS = [n for n in ALL if hn.NORMALIZERS[n].uses_query_bank != "unused"]
K_METHODS = [n for n in ALL if "k" in hn.NORMALIZERS[n].parameters]
TARGET_BANK_METHODS = [n for n in ALL if hn.NORMALIZERS[n].uses_target_bank == "required"]
QUERY_BANK_K = [n for n in K_METHODS if "query_bank" in hn.NORMALIZERS[n].parameters["k"].limited_by]
POSITIVE = [(n, p) for n in ALL for p, spec in hn.NORMALIZERS[n].parameters.items() if spec.kind == "positive"]
NUMERIC = [(n, p) for n in ALL for p, spec in hn.NORMALIZERS[n].parameters.items() if spec.kind in ("real", "positive")]


def _make(name, **kw):
    cls = hn.NORMALIZERS[name]
    for p, spec in cls.parameters.items():  # limited parameters (NNN's default k = 128) at small-problem values
        if spec.limited_by and p in cls.example_params:
            kw.setdefault(p, cls.example_params[p])
    return hn.make_normalizer(name, device="cpu", **kw)


def _fit(name, **kw):
    return _make(name, **kw).fit(T, query_bank=QB, target_bank=TB)


# ------------------------------------------------------------------------------------ embeddings
@pytest.mark.parametrize("name", ALL)
def test_fit_rejects_bad_targets(name):
    with pytest.raises(ValueError, match="targets.*NaN or Inf"):
        bad = T.copy()
        bad[3, 2] = np.nan
        _make(name).fit(bad, query_bank=QB, target_bank=TB)
    with pytest.raises(ValueError, match="targets.*NaN or Inf"):
        bad = T.copy()
        bad[0, 0] = np.inf
        _make(name).fit(bad, query_bank=QB, target_bank=TB)
    with pytest.raises(ValueError, match="targets rows are not L2-normalised"):
        _make(name).fit(T * 2, query_bank=QB, target_bank=TB)
    with pytest.raises(ValueError, match="targets is empty"):
        _make(name).fit(T[:0], query_bank=QB, target_bank=TB)
    with pytest.raises(ValueError, match="targets must be 2-D"):
        _make(name).fit(T[0], query_bank=QB, target_bank=TB)
    with pytest.raises(TypeError, match="targets must be a numpy array or a torch tensor"):
        _make(name).fit(T.tolist(), query_bank=QB, target_bank=TB)
    with pytest.raises(TypeError, match="targets must hold floating-point"):
        _make(name).fit(T.astype(np.int64), query_bank=QB, target_bank=TB)
    with pytest.raises(TypeError, match="targets must hold floating-point"):
        _make(name).fit(torch.ones(3, 8, dtype=torch.int32), query_bank=QB, target_bank=TB)
    # the escape hatch works
    _make(name, check_normalized=False).fit(T * 2, query_bank=QB * 2, target_bank=TB * 2)


@pytest.mark.parametrize("name", BANK_METHODS)
def test_fit_rejects_bad_query_bank(name):
    with pytest.raises(ValueError, match="needs query_bank"):
        _make(name).fit(T, target_bank=TB)
    with pytest.raises(ValueError, match="query_bank has dimension 7"):
        _make(name).fit(T, query_bank=unit_rows(RNG, 5, 7), target_bank=TB)
    with pytest.raises(ValueError, match="query_bank is empty"):
        _make(name).fit(T, query_bank=QB[:0], target_bank=TB)
    with pytest.raises(ValueError, match="query_bank.*NaN"):
        bad = QB.copy()
        bad[1] = np.nan
        _make(name).fit(T, query_bank=bad, target_bank=TB)
    with pytest.raises(ValueError, match="query_bank rows are not L2-normalised"):
        _make(name).fit(T, query_bank=QB * 0.5, target_bank=TB)


@pytest.mark.parametrize("name", TARGET_BANK_METHODS)
def test_fit_rejects_bad_target_bank(name):
    with pytest.raises(ValueError, match="needs target_bank"):
        _make(name).fit(T, query_bank=QB)
    with pytest.raises(ValueError, match="target_bank has dimension 9"):
        _make(name).fit(T, query_bank=QB, target_bank=unit_rows(RNG, 4, 9))
    with pytest.raises(ValueError, match="target_bank is empty"):
        _make(name).fit(T, query_bank=QB, target_bank=TB[:0])
    with pytest.raises(ValueError, match="target_bank rows are not L2-normalised"):
        _make(name).fit(T, query_bank=QB, target_bank=TB * 3)


@pytest.mark.parametrize("name", ALL)
def test_scoring_rejects_bad_queries_and_unfitted(name):
    norm = _make(name)
    with pytest.raises(hn.NotFittedError, match="not fitted"):
        norm.score(Q)
    with pytest.raises(hn.NotFittedError, match="not fitted"):
        norm.topk(Q, 3)
    with pytest.raises(hn.NotFittedError, match="not fitted"):
        list(norm.iter_scores(Q))
    with pytest.raises(hn.NotFittedError, match="not fitted"):
        hn.positive_ranks(norm, hn.Positives.from_labels(np.arange(12) % 10, 10), Q)
    if norm.is_offset:
        with pytest.raises(hn.NotFittedError, match="not fitted"):
            norm.offsets
        with pytest.raises(hn.NotFittedError, match="not fitted"):
            norm.augment_targets()
    norm = _fit(name)
    with pytest.raises(ValueError, match="queries has dimension 5"):
        norm.score(unit_rows(RNG, 3, 5))
    with pytest.raises(ValueError, match="queries.*NaN or Inf"):
        norm.score(np.full((2, 8), np.nan, dtype=np.float32))
    with pytest.raises(ValueError, match="queries rows are not L2-normalised"):
        norm.score(Q * 1.5)
    with pytest.raises(ValueError, match="queries is empty"):
        norm.score(Q[:0])
    with pytest.raises(ValueError, match="k=11 is larger than the number of targets"):
        norm.topk(Q, 11)
    with pytest.raises(ValueError, match="k must be >= 1"):
        norm.topk(Q, 0)
    with pytest.raises(TypeError, match="k must be an integer"):
        norm.topk(Q, 2.0)
    with pytest.raises(ValueError, match="chunk_size must be >= 1"):
        norm.score(Q, chunk_size=0)
    with pytest.raises(TypeError, match="chunk_size must be an integer"):
        norm.score(Q, chunk_size="4")


def test_not_fitted_error_is_exported():
    assert issubclass(hn.NotFittedError, RuntimeError)
    with pytest.raises(AttributeError, match="not an offset method"):
        _fit("dis").offsets


# ------------------------------------------------------------------------------------ parameters
@pytest.mark.parametrize("name,param", POSITIVE)  # is/dis/sn/dbsn tau, sn/dbsn tol, ...
@pytest.mark.parametrize("value", [0, -0.01, float("nan"), float("inf")])
def test_temperature_must_be_positive(name, param, value):
    with pytest.raises(ValueError, match=f"{param} must be a finite number > 0"):
        _fit(name, **{param: value})


@pytest.mark.parametrize("name,param", NUMERIC)  # tau, alpha, lam, beta_query, beta_target, ...
def test_numeric_params_reject_wrong_types(name, param):
    with pytest.raises(TypeError, match=f"{param} must be a number"):
        _fit(name, **{param: "0.5"})
    with pytest.raises(TypeError, match=f"{param} must be a number"):
        _fit(name, **{param: True})


@pytest.mark.parametrize("name", K_METHODS)
def test_k_param_checked(name):
    with pytest.raises(ValueError, match="k must be >= 1"):
        _fit(name, k=0)
    with pytest.raises(TypeError, match="k must be an integer"):
        _fit(name, k=2.5)


@pytest.mark.parametrize("name", QUERY_BANK_K)  # nnn, csls
def test_k_larger_than_the_bank(name):
    with pytest.raises(ValueError, match="k=16 is larger than the query bank size"):
        _fit(name, k=16)
    _fit(name, k=10)  # k = 10 fits a 15-row bank and 10 targets


def test_other_parameter_errors():
    with pytest.raises(ValueError, match="k=11 is larger than the number of targets"):
        _fit("dis", k=11)
    with pytest.raises(ValueError, match="k=11 is larger than the number of targets"):
        _fit("csls", k=11)  # csls also needs k <= n targets for r_T(q)
    with pytest.raises(ValueError, match="n_iter must be >= 1"):
        _fit("sn", n_iter=0)
    with pytest.raises(ValueError, match="beta_query must be >= 0"):
        _fit("dualis", beta_query=-1.0)
    with pytest.raises(ValueError, match="beta_query \\+ beta_target must be > 0"):
        _fit("dualis", beta_query=0.0, beta_target=0.0)
    with pytest.raises(ValueError, match="n_samples must be >= 1"):
        _fit("dn", n_samples=0)
    with pytest.raises(ValueError, match="alpha must be finite"):
        _fit("nnn", alpha=float("nan"))
    with pytest.raises(ValueError, match="chunk_size must be >= 1"):
        _fit("nnn", chunk_size=0)
    with pytest.raises(ValueError, match="has no parameter 'alfa'"):
        _make("nnn").set_params(alfa=1.0)
    with pytest.raises(TypeError, match="device must be"):
        hn.make_normalizer("nnn", device=3).fit(T, query_bank=QB)


def test_registry_errors():
    with pytest.raises(ValueError, match="unknown normalizer 'bogus'"):
        hn.make_normalizer("bogus")
    with pytest.raises(TypeError, match="name must be a string"):
        hn.make_normalizer(3)
    with pytest.raises(TypeError, match="alfa"):
        hn.make_normalizer("nnn", alfa=1.0)


# ------------------------------------------------------------------------------------ retrieval model
def test_positives_errors():
    with pytest.raises(ValueError, match="indptr must start at 0"):
        hn.Positives(np.array([1, 2]), np.array([0]), 3)
    with pytest.raises(ValueError, match="indptr must start at 0"):
        hn.Positives(np.array([0, 2, 1]), np.array([0]), 3)
    with pytest.raises(ValueError, match="query 1 has no positive target"):
        hn.Positives(np.array([0, 1, 1, 2]), np.array([0, 2]), 3)
    with pytest.raises(ValueError, match="positive target indices must lie in \\[0, 3\\)"):
        hn.Positives.from_labels(np.array([0, 3]), 3)
    with pytest.raises(ValueError, match="labels must be >= 0"):
        hn.Positives.from_labels(np.array([0, -1]), 3)
    with pytest.raises(TypeError, match="labels must hold integers"):
        hn.Positives.from_labels(np.array([0.0, 1.0]), 3)
    with pytest.raises(ValueError, match="labels must be a non-empty 1-D"):
        hn.Positives.from_labels(np.zeros((2, 2), dtype=int), 3)
    with pytest.raises(ValueError, match="owner index 5 is out of range for 3 queries"):
        hn.Positives.from_groups(np.array([0, 1, 5]), 3)
    with pytest.raises(ValueError, match="query 2 has no positive target"):
        hn.Positives.from_groups(np.array([0, 1, 1]), 3)


def test_build_tasks_errors():
    imgs, caps = unit_rows(RNG, 4, 8), unit_rows(RNG, 8, 8)
    c2i = np.repeat(np.arange(4), 2)
    with pytest.raises(ValueError, match="caption_to_image has 7 entries but there are 8 captions"):
        hn.build_tasks(imgs, caps, c2i[:7])
    with pytest.raises(ValueError, match="caption_to_image refers to image 4"):
        hn.build_tasks(imgs, caps, np.r_[c2i[:7], 4])
    with pytest.raises(ValueError, match="image\\(s\\) have no caption"):
        hn.build_tasks(imgs, caps, np.zeros(8, dtype=int))
    with pytest.raises(TypeError, match="caption_to_image must hold integers"):
        hn.build_tasks(imgs, caps, c2i.astype(float))
    with pytest.raises(ValueError, match="unknown direction 'x2y'"):
        hn.build_tasks(imgs, caps, c2i, directions=("x2y",))
    with pytest.raises(ValueError, match="captions has dimension 8 but the other embeddings have 6"):
        hn.build_tasks(unit_rows(RNG, 4, 6), caps, c2i)
    with pytest.raises(ValueError, match="image_bank has dimension 5"):
        hn.build_tasks(imgs, caps, c2i, image_bank=unit_rows(RNG, 3, 5))
    with pytest.raises(ValueError, match="images.*NaN"):
        hn.build_tasks(np.full((4, 8), np.nan, np.float32), caps, c2i)
    with pytest.raises(ValueError, match="caption_bank has dimension 5"):
        hn.build_tasks(imgs, caps, c2i, caption_bank=unit_rows(RNG, 3, 5))
    with pytest.raises(TypeError, match="embeddings must be numpy arrays or torch tensors"):
        hn.build_tasks(imgs.tolist(), caps, c2i)
    with pytest.raises(ValueError, match="captions rows are not L2-normalised"):
        hn.build_tasks(imgs, caps * 2, c2i)
    with pytest.raises(ValueError, match="images is empty"):
        hn.build_tasks(imgs[:0], caps, c2i)


def test_retrieval_task_errors():
    pos = hn.Positives.from_labels(np.arange(12) % 10, 10)
    with pytest.raises(ValueError, match="direction must be one of"):
        hn.RetrievalTask(Q, T, pos, direction="text2image")
    with pytest.raises(TypeError, match="positives must be a hubnorm.Positives"):
        hn.RetrievalTask(Q, T, np.arange(12) % 10)
    with pytest.raises(ValueError, match="positives are 11 queries x 10 targets but the embeddings are 12 queries"):
        hn.RetrievalTask(Q, T, hn.Positives.from_labels(np.arange(11) % 10, 10))
    with pytest.raises(ValueError, match="positives are 12 queries x 11 targets but the embeddings are 12 queries x 10"):
        hn.RetrievalTask(Q, T, hn.Positives.from_labels(np.arange(12) % 10, 11))


# ------------------------------------------------------------------------------------ evaluators
def test_evaluation_errors():
    S = RNG.standard_normal((12, 10))
    pos = hn.Positives.from_labels(np.arange(12) % 10, 10)
    with pytest.raises(TypeError, match="positives must be a hubnorm.Positives"):
        hn.positive_ranks(S, np.arange(12) % 10)
    with pytest.raises(ValueError, match="scores have 9 targets but positives refer to 10"):
        hn.positive_ranks(S[:, :9], pos)
    with pytest.raises(ValueError, match="scores have 11 rows but positives has 12 queries"):
        hn.positive_ranks(S[:11], pos)
    with pytest.raises(ValueError, match="more rows than positives"):
        hn.positive_ranks(np.vstack([S, S]), pos)
    with pytest.raises(ValueError, match="scores must be 2-D"):
        hn.positive_ranks(S[0], pos)
    with pytest.raises(ValueError, match="scores contain NaN"):
        hn.positive_ranks(np.where(S > 1, np.nan, S), pos)
    with pytest.raises(TypeError, match="scores must be a fitted normalizer or an \\(m, n\\) array"):
        hn.positive_ranks(S.tolist(), pos)
    with pytest.raises(ValueError, match="queries are needed"):
        hn.positive_ranks(_fit("raw"), pos)
    with pytest.raises(ValueError, match="chunk_size must be >= 1"):
        hn.positive_ranks(S, pos, chunk_size=0)
    with pytest.raises(ValueError, match="chunk_size must be >= 1"):
        hn.positive_ranks(S, pos, chunk_size=-2)
    with pytest.raises(ValueError, match="k must be >= 1"):
        hn.recall_at_k(np.array([0, 1]), 0)
    with pytest.raises(ValueError, match="ranks must be a non-empty 1-D"):
        hn.recall_at_k(np.array([], dtype=int), 1)
    with pytest.raises(ValueError, match="ranks must be non-negative integers"):
        hn.median_rank(np.array([0, -1]))
    with pytest.raises(ValueError, match="ranks must be non-negative integers"):
        hn.mean_rank(np.array([0.5, 1.0]))
    with pytest.raises(ValueError, match="level must be in \\(0, 1\\)"):
        hn.bootstrap_ci(np.array([0, 1]), level=1.5)
    with pytest.raises(ValueError, match="n_boot must be >= 1"):
        hn.bootstrap_ci(np.array([0, 1]), n_boot=0)


def test_ndcg_errors():
    s, r = RNG.standard_normal((3, 5)), RNG.uniform(size=(3, 5))
    with pytest.raises(ValueError, match="scores and relevance must be 2-D with the same shape"):
        hn.ndcg_at_k(s, r[:, :4], 3)
    with pytest.raises(ValueError, match="scores and relevance must be finite"):
        hn.ndcg_at_k(np.where(s > 0, np.inf, s), r, 3)
    with pytest.raises(ValueError, match="relevance must be non-negative"):
        hn.ndcg_at_k(s, -r, 3)
    with pytest.raises(ValueError, match="k must be >= 1"):
        hn.ndcg_at_k(s, r, 0)


def test_hubness_errors():
    S = RNG.standard_normal((12, 10))
    with pytest.raises(ValueError, match="k=11 is larger than the number of targets"):
        hn.k_occurrence(S, 11)
    with pytest.raises(ValueError, match="k must be >= 1"):
        hn.k_occurrence(S, 0)
    with pytest.raises(ValueError, match="scores have no rows"):
        hn.k_occurrence(S[:0], 3)
    with pytest.raises(ValueError, match="n_k sums to 10, not k \\* n_queries = 20"):
        hn.hubness_stats(np.ones(10, dtype=int), k=2, n_queries=10)
    with pytest.raises(ValueError, match="n_k must be non-negative"):
        hn.hubness_stats(np.array([3, -1]), k=1, n_queries=2)
    with pytest.raises(ValueError, match="n_k must be a non-empty 1-D"):
        hn.hubness_stats(np.ones((2, 2), dtype=int), k=1, n_queries=4)
    with pytest.raises(ValueError, match="hub_factor must be a finite number > 0"):
        hn.hubness_stats(np.ones(4, dtype=int), k=1, n_queries=4, hub_factor=0)
    with pytest.raises(ValueError, match="n_queries must be >= 1"):
        hn.hubness_stats(np.zeros(4, dtype=int), k=1, n_queries=0)


# ------------------------------------------------------------------------------------ selection
def test_selection_errors():
    caps = unit_rows(RNG, 8, 8)
    task = hn.build_tasks(T[:4], caps, np.repeat(np.arange(4), 2), caption_bank=QB)["t2i"]
    with pytest.raises(TypeError, match="validation must be a hubnorm.RetrievalTask"):
        hn.grid_search("nnn", {"queries": caps}, {"alpha": [0.5]})
    with pytest.raises(ValueError, match="grid\\['alpha'\\] is empty"):
        hn.grid_search("nnn", task, {"alpha": [], "k": [1]})
    with pytest.raises(ValueError, match="unknown metric 'R@x'"):
        hn.grid_search("nnn", task, {"alpha": [0.5], "k": [1]}, metric="R@x")
    assert "R@3" in hn.grid_search("nnn", task, {"alpha": [0.5], "k": [1]}, metric="R@3").table  # any K works
    with pytest.raises(ValueError, match="unknown method 'bogus'"):
        hn.grid_search("bogus", task)
    with pytest.raises(ValueError, match="unknown method 'bogus'"):
        hn.grid_search("bogus", task, {"alpha": [0.5]})
    with pytest.raises(ValueError, match="size must be in \\(0, n_items=10\\)"):
        hn.holdout_split(10, 10)
    with pytest.raises(ValueError, match="size must be in \\(0, n_items=10\\)"):
        hn.holdout_split(10, 0)


def test_l2_normalize_errors_and_result():
    with pytest.raises(TypeError, match="x must be a numpy array or a torch tensor"):
        hn.l2_normalize([[1.0, 2.0]])
    x = hn.l2_normalize(np.array([[3.0, 4.0], [0.0, 0.0]]))
    np.testing.assert_allclose(x, [[0.6, 0.8], [0.0, 0.0]])


def test_non_finite_found_in_any_row_block():
    """Finiteness is checked in row blocks (8,192 rows of d = 512 each): a NaN in a later block is still found."""
    x = hn.l2_normalize(np.random.default_rng(1).standard_normal((9000, 512)).astype(np.float32))
    x[8999, 7] = np.nan
    x[100, 0] = np.inf
    with pytest.raises(ValueError, match="query_bank contains NaN or Inf in 2 row"):
        hn.as_embeddings(x, "query_bank", device="cpu")


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, "inf and -inf"])
def test_non_finite_found_past_the_sum_fast_path(bad):
    """The finiteness check first sums the whole array (a finite sum proves every entry finite); a sum that is not
    finite is decided entry by entry: a bad entry among finite ones is always reported, and finite entries whose
    sum overflows float32 are accepted, not mistaken for infinities."""
    from hubnorm._validation import _all_finite
    big = torch.full((40, 8), 3e38)                         # finite; their float32 sum overflows to inf
    assert not bool(torch.isfinite(big.sum())) and _all_finite(big)
    hn.as_embeddings(big, "query_bank", device="cpu", check_normalized=False)
    for base in (torch.zeros(40, 8), big.clone()):
        x = base.clone()
        if bad == "inf and -inf":                           # opposite infinities sum to NaN
            x[3, 1], x[30, 2] = np.inf, -np.inf
        else:
            x[17, 5] = bad
        n_bad = 2 if bad == "inf and -inf" else 1
        assert not _all_finite(x)
        with pytest.raises(ValueError, match=f"query_bank contains NaN or Inf in {n_bad} row"):
            hn.as_embeddings(x, "query_bank", device="cpu", check_normalized=False)
