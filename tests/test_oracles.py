"""Oracle tests: every normalizer against an independent implementation.

- NNN against the reference package ``nnn-retrieval`` 1.0.1 (``nnn.NNNRetriever`` + ``nnn.NNNRanker``).
- SN / DBSN offsets against POT's ``ot.sinkhorn`` (float64, run to convergence) and against a dense float64
  transcription of DBSN Algorithm A1 (multiplicative updates) for a fixed number of iterations.
- IS against a dense float64 logsumexp; DualIS against the dense product of NNN App. A1 Eq. (3)-(5).
- The equivalences of METHODS.md: DN = NNN(k = all, alpha = lam); DIS query-aware k=1 = IS;
  CSLS ranks like NNN(alpha = 0.5, same k); DBSN = SN on [targets; target_bank] truncated.
"""

import contextlib
import io

import numpy as np
import pytest
import torch
from scipy.special import logsumexp

import hubnorm as hn
from conftest import unit_rows

pytestmark = pytest.mark.usefixtures("single_thread_torch")

nnn_pkg = pytest.importorskip("nnn")
ot = pytest.importorskip("ot")


def _centre(x):
    x = np.asarray(x, dtype=np.float64)
    return x - x.mean()


def _row_order(scores):
    """Per-row ranking (stable argsort of decreasing scores)."""
    s = scores.detach().cpu().numpy() if isinstance(scores, torch.Tensor) else np.asarray(scores)
    return np.argsort(-s, axis=1, kind="stable")


def _problem(seed, m=40, n=30, b=60, d=16, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return unit_rows(rng, m, d, dtype), unit_rows(rng, n, d, dtype), unit_rows(rng, b, d, dtype)


# ------------------------------------------------------------------------------------------------ NNN
@pytest.mark.parametrize("seed,alpha,k", [(0, 0.75, 4), (1, 0.5, 1), (2, 1.25, 16), (3, 0.25, 60)])
def test_nnn_matches_nnn_retrieval(seed, alpha, k):
    queries, targets, bank = _problem(seed, m=50, n=80, b=60, d=24, dtype=np.float32)
    with contextlib.redirect_stderr(io.StringIO()):  # the reference prints tqdm bars
        retriever = nnn_pkg.NNNRetriever(targets.shape[1])
        ranker = nnn_pkg.NNNRanker(retriever, targets, bank, alternate_ks=k, batch_size=16, alternate_weight=alpha)
        ref_scores, ref_idx = ranker.search(queries, 10)
    ours = hn.NearestNeighborNormalization(alpha=alpha, k=k, device="cpu").fit(targets, query_bank=bank)
    np.testing.assert_allclose(ours.bias_.numpy() / alpha, ranker.alignment_means.numpy().ravel(), atol=1e-5)
    vals, idx = ours.topk(queries, 10)
    np.testing.assert_allclose(vals.numpy(), ref_scores, atol=1e-5)
    np.testing.assert_array_equal(idx.numpy(), ref_idx)


# ------------------------------------------------------------------------------------------- Sinkhorn
def _pot_column_potentials(bank, targets, tau):
    S = bank @ targets.T
    m, n = S.shape
    _, log = ot.sinkhorn(np.full(m, 1.0 / m), np.full(n, 1.0 / n), -S, tau, method="sinkhorn",
                         numItermax=200_000, stopThr=1e-15, log=True, warn=False)
    return tau * np.log(log["v"])


@pytest.mark.parametrize("tau", [0.05, 0.02, 0.01])
def test_sn_offsets_match_pot(tau):
    _, targets, bank = _problem(10, m=1, n=30, b=40)
    ref = _pot_column_potentials(bank, targets, tau)
    sn = hn.SinkhornNormalization(tau=tau, n_iter=20_000, tol=1e-14, device="cpu").fit(targets, query_bank=bank)
    assert sn.offsets_.dtype == torch.float64
    np.testing.assert_allclose(_centre(sn.offsets), _centre(ref), atol=1e-6)
    # the test would notice a wrong answer: the offsets are far from constant
    assert np.ptp(ref) > 1e-3


@pytest.mark.parametrize("tau", [0.05, 0.01])
def test_dbsn_offsets_match_pot_on_extended_targets(tau):
    _, targets, bank = _problem(11, m=1, n=25, b=40)
    target_bank = unit_rows(np.random.default_rng(12), 35, 16, np.float64)
    ref = _pot_column_potentials(bank, np.concatenate([targets, target_bank]), tau)
    dbsn = hn.DualBankSinkhornNormalization(tau=tau, n_iter=20_000, tol=1e-14, device="cpu").fit(
        targets, query_bank=bank, target_bank=target_bank)
    full = np.concatenate([dbsn.offsets, dbsn.bank_offsets_.numpy()])
    shift = full.mean()
    np.testing.assert_allclose(full - shift, ref - ref.mean(), atol=1e-6)
    np.testing.assert_allclose(dbsn.offsets - shift, ref[:25] - ref.mean(), atol=1e-6)


def _algorithm_a1(S, tau, T):
    """DBSN Algorithm A1 verbatim: xi = exp(S / tau), beta^(0) = 1, T multiplicative updates; returns tau log beta."""
    m, n = S.shape
    xi = np.exp(S / tau)
    a, b = np.full(m, 1.0 / m), np.full(n, 1.0 / n)
    beta = np.ones(n)
    for _ in range(T):
        alpha = a / (xi @ beta)
        beta = b / (xi.T @ alpha)
    return tau * np.log(beta)


@pytest.mark.parametrize("tau,T", [(0.05, 10), (0.01, 10), (0.02, 1), (0.02, 3)])
def test_sn_matches_dense_algorithm_a1_fixed_iterations(tau, T):
    _, targets, bank = _problem(20, m=1, n=35, b=45)
    ref = _algorithm_a1(bank @ targets.T, tau, T)
    sn = hn.SinkhornNormalization(tau=tau, n_iter=T, device="cpu").fit(targets, query_bank=bank)
    assert sn.n_iter_ == T
    np.testing.assert_allclose(_centre(sn.offsets), _centre(ref), atol=1e-6)
    # same start (beta = 1) and same updates: equal even without centring
    np.testing.assert_allclose(sn.offsets, ref, atol=1e-6)


def test_sinkhorn_potentials_satisfy_marginals():
    _, targets, bank = _problem(21, m=1, n=20, b=30)
    tau = 0.03
    f, g, it = hn.sinkhorn_potentials(torch.from_numpy(bank), torch.from_numpy(targets), tau, n_iter=5000, tol=1e-13)
    plan = np.exp((bank @ targets.T + f.numpy()[:, None] + g.numpy()[None, :]) / tau)
    np.testing.assert_allclose(plan.sum(axis=1), 1 / 30, rtol=1e-6)
    np.testing.assert_allclose(plan.sum(axis=0), 1 / 20, rtol=1e-6)
    assert it < 5000


def test_sn_float32_stable_at_small_tau():
    """tau = 0.01 overflows exp(S / tau) in float32; the log-domain updates must stay finite and match float64."""
    _, targets, bank = _problem(22, m=1, n=40, b=50)
    f64 = hn.SinkhornNormalization(tau=0.01, n_iter=10, device="cpu").fit(targets, query_bank=bank).offsets
    f32 = hn.SinkhornNormalization(tau=0.01, n_iter=10, device="cpu").fit(
        targets.astype(np.float32), query_bank=bank.astype(np.float32)).offsets
    assert np.all(np.isfinite(f32))
    np.testing.assert_allclose(_centre(f32), _centre(f64), atol=1e-4)


def test_dbsn_equals_sn_on_extended_targets_truncated():
    _, targets, bank = _problem(23, m=1, n=30, b=50)
    target_bank = unit_rows(np.random.default_rng(24), 40, 16, np.float64)
    for n_iter in (1, 10, 50):
        dbsn = hn.DualBankSinkhornNormalization(tau=0.02, n_iter=n_iter, device="cpu").fit(
            targets, query_bank=bank, target_bank=target_bank)
        sn = hn.SinkhornNormalization(tau=0.02, n_iter=n_iter, device="cpu").fit(
            np.concatenate([targets, target_bank]), query_bank=bank)
        np.testing.assert_allclose(dbsn.offsets, sn.offsets[:30], atol=1e-12)
        np.testing.assert_allclose(dbsn.bank_offsets_.numpy(), sn.offsets[30:], atol=1e-12)


# ------------------------------------------------------------------------------------ IS, DIS, DualIS
@pytest.mark.parametrize("tau", [0.01, 0.02, 0.05])
def test_is_offsets_match_dense_logsumexp(tau):
    _, targets, bank = _problem(30, m=1, n=30, b=70)
    ref = -tau * logsumexp((bank @ targets.T) / tau, axis=0)
    ref += tau * np.log(len(bank))  # offsets_ are centred by the constant tau log|B| (module docstring)
    ours = hn.InvertedSoftmax(tau=tau, device="cpu").fit(targets, query_bank=bank)
    np.testing.assert_allclose(ours.offsets, ref, atol=1e-9)


def test_is_scores_rank_like_the_inverted_softmax_matrix():
    queries, targets, bank = _problem(31)
    tau = 0.05
    S_bank = bank @ targets.T
    inv = np.exp((queries @ targets.T) / tau) / np.exp(S_bank / tau).sum(axis=0)
    ours = hn.InvertedSoftmax(tau=tau, device="cpu").fit(targets, query_bank=bank).score(queries)
    np.testing.assert_array_equal(_row_order(ours), _row_order(inv))
    # offsets_ are centred by tau log|B| (module docstring): exp(score / tau) = |B| * inverted softmax
    np.testing.assert_allclose(np.exp(ours.numpy() / tau), len(bank) * inv, rtol=1e-9)


def test_dis_query_aware_k1_equals_is():
    queries, targets, _ = _problem(32, m=60, n=25)
    dis = hn.DynamicInvertedSoftmax(tau=0.02, k=1, device="cpu").fit(targets, query_bank=queries)
    is_ = hn.InvertedSoftmax(tau=0.02, device="cpu").fit(targets, query_bank=queries)
    assert dis.activation_[(queries @ targets.T).argmax(axis=1)].all()
    np.testing.assert_allclose(dis.score(queries).numpy(), is_.score(queries).numpy(), atol=1e-12)


def test_dis_uses_raw_rows_outside_the_activation_set():
    queries, targets, bank = _problem(33, m=60, n=40, b=5)  # a tiny bank activates at most 5 targets
    dis = hn.DynamicInvertedSoftmax(tau=0.02, k=1, device="cpu").fit(targets, query_bank=bank)
    S = queries @ targets.T
    active = dis.activation_.numpy()[S.argmax(axis=1)]
    assert active.any() and (~active).any()
    ref = np.where(active[:, None], S + dis.offsets_.numpy()[None, :], S)
    np.testing.assert_allclose(dis.score(queries).numpy(), ref, atol=1e-12)
    # activation set = union of the bank's raw top-1 targets
    np.testing.assert_array_equal(np.flatnonzero(dis.activation_.numpy()), np.unique((bank @ targets.T).argmax(axis=1)))


@pytest.mark.parametrize("beta_query,beta_target", [(50.0, 50.0), (20.0, 1.0 / 1.99), (3.0, 0.0), (0.0, 10.0)])
def test_dualis_matches_dense_product_formula(beta_query, beta_target):
    queries, targets, qbank = _problem(34)
    tbank = unit_rows(np.random.default_rng(35), 55, 16, np.float64)
    S = queries @ targets.T
    # NNN App. A1 Eq. (3)-(5): s_hat = s_hat^R * s_hat^Q, in log form (the product itself overflows)
    log_r = beta_target * S - logsumexp(beta_target * (tbank @ targets.T), axis=0)[None, :]
    log_q = beta_query * S - logsumexp(beta_query * (qbank @ targets.T), axis=0)[None, :]
    log_product = log_r + log_q
    ours = hn.DualInvertedSoftmax(beta_query=beta_query, beta_target=beta_target, device="cpu").fit(
        targets, query_bank=qbank, target_bank=tbank).score(queries).numpy()
    np.testing.assert_array_equal(_row_order(ours), _row_order(log_product))
    # each term is centred by log|B_X| / (beta_q + beta_t) (module docstring)
    centre = np.log(len(qbank)) + np.log(len(tbank))
    np.testing.assert_allclose(ours * (beta_query + beta_target), log_product + centre, atol=1e-9)


def test_dualis_with_beta_target_zero_ranks_like_is():
    queries, targets, qbank = _problem(36)
    tbank = unit_rows(np.random.default_rng(37), 20, 16, np.float64)
    dual = hn.DualInvertedSoftmax(beta_query=25.0, beta_target=0.0, device="cpu").fit(targets, query_bank=qbank, target_bank=tbank)
    is_ = hn.InvertedSoftmax(tau=1 / 25.0, device="cpu").fit(targets, query_bank=qbank)
    np.testing.assert_allclose(_centre(dual.offsets), _centre(is_.offsets), atol=1e-9)
    np.testing.assert_array_equal(_row_order(dual.score(queries)), _row_order(is_.score(queries)))


def test_dualdis_gates_each_factor():
    queries, targets, qbank = _problem(38, m=80, n=40, b=4)
    tbank = unit_rows(np.random.default_rng(39), 6, 16, np.float64)
    dd = hn.DualDynamicInvertedSoftmax(beta_query=30.0, beta_target=5.0, k=1, device="cpu").fit(
        targets, query_bank=qbank, target_bank=tbank)
    S = queries @ targets.T
    top1 = S.argmax(axis=1)
    a_q = np.zeros(40, bool)
    a_q[(qbank @ targets.T).argmax(axis=1)] = True
    a_t = np.zeros(40, bool)
    a_t[(tbank @ targets.T).argmax(axis=1)] = True
    gq, gt = a_q[top1][:, None], a_t[top1][:, None]
    assert gq.any() and (~gq).any()
    ref = S + gq * dd.query_offsets_.numpy() + gt * dd.target_offsets_.numpy()
    np.testing.assert_allclose(dd.score(queries).numpy(), ref, atol=1e-12)


# ------------------------------------------------------------------------------------ DN, CSLS
@pytest.mark.parametrize("lam", [0.25, 0.5, 1.0])
def test_dn_ranks_like_nnn_with_all_bank_queries(lam):
    queries, targets, bank = _problem(40, m=50, n=40, b=30)
    tbank = unit_rows(np.random.default_rng(41), 25, 16, np.float64)
    dn = hn.DistributionNormalization(lam=lam, device="cpu").fit(targets, query_bank=bank, target_bank=tbank)
    nnn = hn.NearestNeighborNormalization(alpha=lam, k=len(bank), device="cpu").fit(targets, query_bank=bank)
    np.testing.assert_array_equal(_row_order(dn.score(queries)), _row_order(nnn.score(queries)))
    # DN's score equals its formula (q - lam mu_Q) . (t - lam mu_T)
    ref = (queries - lam * bank.mean(0)) @ (targets - lam * tbank.mean(0)).T
    np.testing.assert_allclose(dn.score(queries).numpy(), ref, atol=1e-12)


def test_dn_without_target_bank_centres_with_the_gallery():
    queries, targets, bank = _problem(42)
    lam = 0.5
    dn = hn.DistributionNormalization(lam=lam, device="cpu").fit(targets, query_bank=bank)
    ref = (queries - lam * bank.mean(0)) @ (targets - lam * targets.mean(0)).T
    np.testing.assert_allclose(dn.score(queries).numpy(), ref, atol=1e-12)
    # the plain form (the reference of the generic checks) centres with the gallery too
    plain = dn.plain(*(torch.from_numpy(x) for x in (targets, bank)))
    np.testing.assert_allclose(plain["target_mean_"].numpy(), targets.mean(0), atol=1e-12)
    np.testing.assert_allclose(plain["offsets_"].numpy(), dn.offsets_.numpy(), atol=1e-12)


def test_dn_plain_form_is_the_full_bank_mean_only():
    """With sampled means (``n_samples``) there is no plain form to compare with: it says so, naming the setting."""
    _, targets, bank = _problem(44)
    dn = hn.DistributionNormalization(lam=0.5, n_samples=10, device="cpu")
    with pytest.raises(NotImplementedError, match=r"^the plain form of DN uses the full-bank means \(n_samples=None\)$"):
        dn.plain(torch.from_numpy(targets), torch.from_numpy(bank))


@pytest.mark.parametrize("k", [1, 5, 20])
def test_csls_ranks_like_nnn_half(k):
    queries, targets, bank = _problem(43, m=50, n=40, b=30)
    csls = hn.CrossDomainSimilarityLocalScaling(k=k, device="cpu").fit(targets, query_bank=bank)
    nnn = hn.NearestNeighborNormalization(alpha=0.5, k=k, device="cpu").fit(targets, query_bank=bank)
    np.testing.assert_array_equal(_row_order(csls.score(queries)), _row_order(nnn.score(queries)))
    # CSLS value: 2 s - r_B(t) - r_T(q)
    S = queries @ targets.T
    r_b = np.sort(bank @ targets.T, axis=0)[::-1][:k].mean(axis=0)
    r_t = np.sort(S, axis=1)[:, ::-1][:, :k].mean(axis=1)
    np.testing.assert_allclose(csls.score(queries).numpy(), 2 * S - r_b[None, :] - r_t[:, None], atol=1e-12)


def test_nnn_bias_matches_dense_reference():
    _, targets, bank = _problem(44, m=1, n=30, b=50)
    for k in (1, 7, 50):
        ref = np.sort(bank @ targets.T, axis=0)[::-1][:k].mean(axis=0)
        nnn = hn.NearestNeighborNormalization(alpha=0.8, k=k, device="cpu").fit(targets, query_bank=bank)
        np.testing.assert_allclose(nnn.offsets, -0.8 * ref, atol=1e-12)


# ---------------------------------------------------------------- what mutation testing found unchecked (issue 50)
def test_nnn_bias_functions_by_hand():
    import torch
    from hubnorm.normalizers import nnn as nnn_mod

    rng = np.random.default_rng(6)
    t = torch.as_tensor(hn.l2_normalize(rng.standard_normal((9, 5))))
    b = torch.as_tensor(hn.l2_normalize(rng.standard_normal((30, 5))))
    dense = 0.6 * np.sort((t @ b.T).numpy(), axis=1)[:, ::-1][:, :4].mean(axis=1)
    for fn in (nnn_mod.nnn_bias_plain, nnn_mod.nnn_bias_fast):
        for block_bytes in (None, 64):                                # 64 bytes: blocks of one or two rows
            got = fn(t, b, 0.6, 4, block_bytes=block_bytes)
            assert got.dtype == torch.float64 and got.numpy() == pytest.approx(dense, abs=1e-14)
    top = torch.tensor([[0.5, 0.3, -float("inf")], [0.2, 0.1, 0.0]], dtype=torch.float64)
    assert nnn_mod.nnn_bias(top, 2.0).tolist() == pytest.approx([0.8, 0.2])     # the mean of the neighbours found
    assert nnn_mod.nnn_bias(top, 2.0, mean=torch.tensor([1.0, 3.0])).tolist() == [2.0, 6.0]
    norm = hn.NearestNeighborNormalization(alpha=0.6, k=4)
    engine = norm.local_engine(t, b, None)
    (one,) = hn.NearestNeighborNormalization.fit_grid([norm], engine)          # a grid of one point
    assert one["bias_"].numpy() == pytest.approx(dense, abs=1e-14)

    class Approximate:     # an engine whose vector index found only some neighbours (marked -inf)
        def reduce(self, red):
            return type("Top", (), {"values": torch.tensor([[0.5, 0.3, -float("inf"), -float("inf")],
                                                            [0.4, 0.2, 0.1, 0.0]], dtype=torch.float64)})()
    grid = [hn.NearestNeighborNormalization(alpha=2.0, k=4), hn.NearestNeighborNormalization(alpha=2.0, k=2)]
    four, two = hn.NearestNeighborNormalization.fit_grid(grid, Approximate())
    assert four["bias_"].tolist() == pytest.approx([0.8, 0.35])   # k = 4: the mean of the two found in row 0
    assert two["bias_"].tolist() == pytest.approx([0.8, 0.6])


def test_inverted_softmax_offsets_name_their_temperature():
    import torch
    from hubnorm.normalizers.inverted_softmax import inverted_softmax_offsets, inverted_softmax_plain

    rng = np.random.default_rng(7)
    t = torch.as_tensor(hn.l2_normalize(rng.standard_normal((5, 4))))
    b = torch.as_tensor(hn.l2_normalize(rng.standard_normal((7, 4))))
    assert inverted_softmax_offsets(t, b, 0.05).numpy() == pytest.approx(inverted_softmax_plain(t, b, 0.05).numpy(),
                                                                         abs=1e-14)
    with pytest.raises(ValueError, match=r"^tau must be a finite number > 0"):
        inverted_softmax_offsets(t, b, 0.0)
    with pytest.raises(ValueError, match=r"^tau=9\.99989e-321 is too extreme to compute precisely"):
        inverted_softmax_offsets(t, b, 1e-320)
