"""Unit checks of hubnorm.geometry aimed at what its mutation run (benchmarks/reports/mutation/geometry.md) found
unchecked by tests/test_geometry.py, test_calibration.py and test_protocol.py: every guard of ``nn_gap``,
``embedding_statistics`` (``_rows``) and ``bank_statistics`` by its own message and at its boundary (2 rows, the
last valid caption index, 4 images); ``nn_gap`` in several row blocks against its one-block form and a dense
float64 reference, with mixed dtypes; ``centroid_distance``'s float64 arithmetic (a float32 mean loses the 1 of
2**24 + 1); ``embedding_statistics`` on float32 inputs, with uneven caption groups (some images with one caption),
with fewer rows than ``knn``, its defaults, and against a dense float64 reference; ``bank_statistics``' split
against the same seeded split done by hand.

Mutation run (``--tests tests/test_geometry.py tests/test_protocol.py`` [+ this file]): 403 -> 494 of 509 killed
(79% -> 97%). The 15 survivors change nothing a caller can observe:

* ``nn_gap_1`` (block 4097), ``embedding_statistics_2`` (block 2049): other row blocks, same values;
* ``_knn_cos_25``: ``topk`` without ``dim`` reduces the last dimension, dim 1 of the 2-D block;
* ``embedding_statistics_84/86/88`` (``std`` with Bessel's correction): every caption's sd is scaled by the same
  sqrt(n / (n - 1)), which cancels in ``cap_spread_cv`` = sd / mean, the only reader;
* ``embedding_statistics_90`` (``col_sum -=``): negates the image means; their sd and the squared mean in
  ``img_sd`` are unchanged;
* ``embedding_statistics_272`` (``float("NAN")``): the same NaN; ``_289`` (``check_normalized=True``): the rows are
  already unit (float64), so the check passes;
* ``bank_statistics_4/6`` (index not cast to int64): ``int(max) + 1`` and numpy integer indexing give the same split
  for every integer dtype; ``_39/_41`` (gallery not cast to float64): ``nn_gap`` widens it to the float64 bank;

The helper that wrote this file found ``same_image_cap_cos`` NaN whenever there were no more captions than images,
even with an image of several captions (some other image having none); mended, and pinned by
``test_embedding_statistics_same_image_cosine_with_as_many_captions_as_images``.
"""

import warnings

import numpy as np
import pytest
import torch

from hubnorm import geometry
from hubnorm.geometry import bank_statistics, centroid_distance, embedding_statistics, nn_gap
from test_geometry import _dense_reference

pytestmark = [pytest.mark.usefixtures("single_thread_torch"),
              pytest.mark.filterwarnings("ignore:An input array is constant")]  # rho_N10 when every N_10 is equal


def _unit(x):
    x = np.asarray(x, np.float64)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _dense_nn_gap(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return 1.0 - np.mean([max(float(x @ y) for y in b) for x in a])


# --------------------------------------------------------------------------------------------------- nn_gap

def test_nn_gap_hand_computed():
    a = np.array([[1.0, 0.0], [0.0, 1.0]])
    b = np.array([[0.6, 0.8], [1.0, 0.0], [-1.0, 0.0]])
    # row 0: best of (0.6, 1, -1) = 1; row 1: best of (0.8, 0, 0) = 0.8 -> 1 - 0.9
    assert nn_gap(a, b) == pytest.approx(0.1, abs=1e-15)
    assert nn_gap(a, b, block=1) == pytest.approx(0.1, abs=1e-15)
    # not symmetric: b's rows to a: 0.8, 1, 0 -> 1 - 0.6
    assert nn_gap(b, a) == pytest.approx(0.4, abs=1e-15)


@pytest.mark.parametrize("block", [1, 2, 3, 7, 11, 4096])
def test_nn_gap_blocks_equal_one_block_and_dense(block):
    rng = np.random.default_rng(5)
    a, b = _unit(rng.standard_normal((11, 6))), _unit(rng.standard_normal((9, 6)))
    ref = _dense_nn_gap(a, b)
    assert nn_gap(a, b, block=block) == pytest.approx(ref, rel=1e-12, abs=1e-12)
    assert nn_gap(a, b, block=block) == pytest.approx(nn_gap(a, b, block=len(a)), rel=1e-12, abs=1e-12)


def test_nn_gap_default_block_covers_every_row():
    rng = np.random.default_rng(6)
    a, b = _unit(rng.standard_normal((4100, 3))), _unit(rng.standard_normal((5, 3)))
    a[-1] = -b[0]                       # the last row, beyond the default block of 4096, is far from b
    ref = 1.0 - (np.asarray(a) @ np.asarray(b).T).max(1).mean()
    assert nn_gap(a, b) == pytest.approx(ref, rel=1e-12, abs=1e-12)


def test_nn_gap_mixed_dtypes_use_a_dtype():
    rng = np.random.default_rng(7)
    a64, b64 = _unit(rng.standard_normal((6, 4))), _unit(rng.standard_normal((5, 4)))
    ref = _dense_nn_gap(a64, b64)
    assert nn_gap(a64, b64.astype(np.float32)) == pytest.approx(_dense_nn_gap(a64, b64.astype(np.float32)),
                                                                  rel=1e-12, abs=1e-12)
    got32 = nn_gap(a64.astype(np.float32), b64)
    assert got32 == pytest.approx(ref, abs=1e-5)


@pytest.mark.parametrize("a_shape,b_shape", [((3,), (2, 3)), ((2, 3), (3,)), ((2, 3), (2, 4)), ((0, 3), (2, 3)),
                                             ((2, 3), (0, 3)), ((1, 2, 3), (2, 3))])
def test_nn_gap_rejects_bad_shapes(a_shape, b_shape):
    a, b = np.ones(a_shape), np.ones(b_shape)
    msg = r"a and b must be non-empty 2-D arrays of the same width; got \(.*\) and \(.*\)"
    with pytest.raises(ValueError, match=msg):
        nn_gap(a, b)


def test_nn_gap_message_names_both_shapes():
    with pytest.raises(ValueError, match=r"^a and b must be non-empty 2-D arrays of the same width; "
                                         r"got \(2, 3\) and \(4, 5\)$"):
        nn_gap(np.ones((2, 3)), np.ones((4, 5)))


# ---------------------------------------------------------------------------------------- centroid_distance

def test_centroid_distance_hand_computed():
    a = np.array([[0.0, 0.0, 2.0], [2.0, 0.0, 0.0]])            # mean (1, 0, 1)
    b = np.array([[1.0, 3.0, 1.0], [1.0, 1.0, 1.0], [1.0, 2.0, 1.0]])   # mean (1, 2, 1)
    assert centroid_distance(a, b) == 2.0


def test_centroid_distance_in_float64():
    a = np.array([[2.0 ** 24], [1.0]], np.float32)   # float64 mean 8388608.5; a float32 sum drops the 1
    b = np.zeros((3, 1), np.float32)
    assert centroid_distance(a, b) == 8388608.5


# ------------------------------------------------------------------------------------- _rows / _spectrum / _knn

def test_rows_guard_and_boundary():
    two = geometry._rows([[3.0, 4.0], [0.0, 2.0]], "x")
    assert two.dtype == torch.float64
    np.testing.assert_allclose(two.numpy(), [[0.6, 0.8], [0.0, 1.0]], rtol=0, atol=1e-15)
    for bad in ([[1.0, 2.0]], [1.0, 2.0, 3.0], [[1.0, np.nan], [1.0, 2.0]], [[1.0, np.inf], [1.0, 2.0]],
                np.ones((2, 2, 2))):
        with pytest.raises(ValueError, match=r"^things must be a finite 2-D array with at least 2 rows; got shape \("):
            geometry._rows(bad, "things")


def test_rows_in_float64():
    x = np.array([[1.0, 1e-4], [1.0, 0.0]], np.float32)
    ref = _unit(x)
    np.testing.assert_array_equal(geometry._rows(x, "x").numpy(), ref)


def test_spectrum_hand_computed():
    # centred rows (+-3, 0), (0, +-1): variances 9/2 and 1/2 -> shares 0.9, 0.1
    x = torch.tensor([[4.0, 1.0], [-2.0, 1.0], [1.0, 2.0], [1.0, 0.0]], dtype=torch.float64)
    np.testing.assert_allclose(geometry._spectrum(x), [0.9, 0.1], rtol=1e-12)


@pytest.mark.parametrize("block", [1, 2, 3, 5, 100])
def test_knn_cos_blocks_against_dense(block):
    rng = np.random.default_rng(8)
    x = _unit(rng.standard_normal((7, 4)))
    g = x @ x.T
    for k in (1, 2, 6):
        ref = np.array([np.sort(np.delete(g[i], i))[-k] for i in range(len(x))])
        got = geometry._knn_cos(torch.as_tensor(x), k, block)
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-13)


def test_spearman_nan_without_an_order():
    a = np.array([1.0, 2.0, 3.0, 4.0])
    assert geometry._spearman(a, a[::-1]) == pytest.approx(-1.0)
    assert geometry._spearman(a[:3], a[:3]) == pytest.approx(1.0)              # 3 values: the smallest with an order
    for x, y in ((a[:2], a[:2]), (np.ones(4), a), (a, np.full(4, 2.0))):
        assert np.isnan(geometry._spearman(x, y))


def test_match_rho_nan_with_fewer_than_three_images_with_captions():
    # 12 captions, all of images 0 and 1 of 10: the caption statistic has 12 items, the image one only 2
    c2i = np.array([0] * 6 + [1] * 6)
    img, cap = _problem(31, 10, 6, c2i)
    got = embedding_statistics(img, cap, c2i)
    assert np.isnan(got["img_match_rho"]) and np.isfinite(got["cap_match_rho"])


# ---------------------------------------------------------------------------------------- embedding_statistics

def _reference(img, cap, c2i, knn=5):
    """The statistics that the tests here pin: test_geometry's dense float64 reference (full matrices and loops)
    without its hubness keys, plus the mean cosine of two captions of one image over the images with several."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")        # its skewness / Spearman on these tiny sets: not pinned here
        out = {k: v for k, v in _dense_reference(img, cap, c2i, knn).items() if not k.startswith(("skew_", "rho_"))}
    cap, c2i = _unit(np.asarray(cap, np.float64)), np.asarray(c2i)
    groups = [cap[c2i == j] for j in range(len(img))]
    same = [(g @ g.T)[np.triu_indices(len(g), 1)].mean() for g in groups if len(g) > 1]
    out["same_image_cap_cos"] = np.mean(same) if same else np.nan
    return out


def _problem(seed, n, d, c2i, noise=0.9):
    rng = np.random.default_rng(seed)
    img = rng.standard_normal((n, d)) + 1.2 * np.eye(d)[0]
    cap = img[c2i] + noise * rng.standard_normal((len(c2i), d)) + 0.7 * np.eye(d)[1]
    return img, cap


def _check(got, ref, rel=1e-9, abs_=1e-9):
    for key, value in ref.items():
        if np.isnan(value):
            assert np.isnan(got[key]), key
        else:
            assert got[key] == pytest.approx(value, rel=rel, abs=abs_), key


@pytest.mark.parametrize("block", [1, 4, 2048])
def test_embedding_statistics_uneven_groups(block):
    # images 0, 3, 6-9 have one caption, the others 2, 3 and 4: groups of one are left out of same_image_cap_cos
    c2i = np.array([0, 1, 1, 2, 2, 2, 3, 4, 4, 4, 4, 5, 5, 6, 7, 8, 9])
    img, cap = _problem(11, 10, 5, c2i)
    got = embedding_statistics(img, cap, c2i, block=block)
    ref = _reference(img, cap, c2i)
    _check(got, ref)
    assert 0 < ref["R1_t2i"] < 100 and 0 < ref["R1_i2t"] < 100


def test_embedding_statistics_same_image_cosine_with_as_many_captions_as_images():
    # 12 captions over 12 images, image 0 with two and image 11 with none: the one group of two is the statistic
    c2i = np.array([0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    img, cap = _problem(21, 12, 6, c2i)
    got = embedding_statistics(img, cap, c2i)
    u = _unit(cap[:2])
    assert got["same_image_cap_cos"] == pytest.approx(float(u[0] @ u[1]), rel=1e-12)
    _check(got, _reference(img, cap, c2i))


def test_embedding_statistics_defaults():
    c2i = np.repeat(np.arange(12), 2)
    img, cap = _problem(12, 12, 6, c2i)
    got = embedding_statistics(img, cap, c2i)
    _check(got, _reference(img, cap, c2i, knn=5))
    assert got == embedding_statistics(img, cap, c2i, knn=5, block=2048)


def test_embedding_statistics_knn_beyond_the_rows():
    # 10 images, 12 captions, knn 20: k = min(20, n - 1) = 9 for the images, 11 for the captions
    c2i = np.array([0, 1, 2, 2, 3, 4, 5, 6, 7, 8, 9, 9])
    img, cap = _problem(13, 10, 4, c2i)
    _check(embedding_statistics(img, cap, c2i, knn=20), _reference(img, cap, c2i, knn=20))
    _check(embedding_statistics(img, cap, c2i, knn=2, block=3), _reference(img, cap, c2i, knn=2))


def test_embedding_statistics_float32_inputs_in_float64():
    c2i = np.arange(20) // 2
    img, cap = _problem(14, 10, 5, c2i)
    img32, cap32 = img.astype(np.float32), cap.astype(np.float32)
    ref = _reference(img32, cap32, c2i)            # the float32 values, widened exactly, then float64 arithmetic
    _check(embedding_statistics(img32, cap32, c2i), ref, rel=1e-12, abs_=1e-12)


def test_embedding_statistics_hand_computed_on_antipodal_pairs():
    # 10 unit vectors +-e_1..+-e_5, captions copies of their images: every cosine is 1 (itself), -1 (its opposite)
    # or 0. Unmatched cosines: per caption one -1 and eight 0 -> mean -1/9, sd sqrt(1/9 - 1/81) = sqrt(8)/9
    img = np.concatenate([np.eye(5), -np.eye(5)])
    c2i = np.arange(10)
    got = embedding_statistics(img, img.copy(), c2i, knn=1)
    assert got["random_mean"] == pytest.approx(-1 / 9, abs=1e-15)
    assert got["random_sd"] == pytest.approx(np.sqrt(8) / 9, abs=1e-15)
    assert got["best_nonmatch_mean"] == pytest.approx(0.0, abs=1e-15)
    assert got["matched_mean"] == pytest.approx(1.0, abs=1e-15) and got["matched_sd"] == pytest.approx(0.0, abs=1e-15)
    assert got["img_img_cos"] == pytest.approx(-1 / 9, abs=1e-15)   # 5 pairs of -1 among 45
    assert got["img_knn_cv"] == pytest.approx(0.0, abs=1e-15)       # every nearest other row has cosine 0
    assert got["R1_t2i"] == 100.0 and got["R1_i2t"] == 100.0
    assert np.isnan(got["same_image_cap_cos"])
    assert got["img_pc1_share"] == pytest.approx(0.2, abs=1e-12) and got["img_participation_ratio"] == pytest.approx(5.0)


def test_embedding_statistics_hubness_keys_against_dense():
    from scipy import stats

    c2i = np.arange(30) % 15
    img, cap = _problem(15, 15, 6, c2i, noise=1.5)
    got = embedding_statistics(img, cap, c2i, block=4)
    ui, uc = _unit(img), _unit(cap)
    for d, (q, t) in {"t2i": (uc, ui), "i2t": (ui, uc)}.items():
        sc = q @ t.T
        for k in (1, 10):
            nk = np.zeros(len(t))
            for row in sc:
                nk[np.argsort(-row, kind="stable")[:k]] += 1
            assert got[f"skew_N{k}_{d}"] == pytest.approx(stats.skew(nk), rel=1e-9, abs=1e-9), (d, k)
            if k == 10:
                rho = stats.spearmanr(nk, t @ q.mean(0))[0]
                assert got[f"rho_N10_{d}"] == pytest.approx(rho, rel=1e-9, abs=1e-9), d
    both = np.concatenate([ui, uc])
    ev = np.linalg.eigvalsh(np.cov(both.T, bias=True))[::-1]
    ev = ev / ev.sum()
    assert got["joint_pc1_share"] == pytest.approx(ev[0], rel=1e-9)
    assert got["joint_pc2_share"] == pytest.approx(ev[1], rel=1e-9)


@pytest.mark.parametrize("c2i", [[0, 1, 3], [0, -1, 1], [0, 1], [0, 1, 2, 0], [[0], [1], [2]]])
def test_embedding_statistics_rejects_a_bad_index(c2i):
    img = cap = np.eye(3)
    with pytest.raises(ValueError, match=r"^images \(n x d\), captions \(m x d\) and caption_to_image \(m values in "
                                         r"\[0, n\)\) do not fit together$"):
        embedding_statistics(img, cap, np.array(c2i))


def test_embedding_statistics_rejects_other_widths_and_accepts_the_last_image():
    with pytest.raises(ValueError, match="do not fit together"):
        embedding_statistics(np.eye(3), np.eye(4)[:3], np.arange(3))
    img = np.concatenate([np.eye(5), -np.eye(5)])
    order = np.arange(10)[::-1].copy()
    got = embedding_statistics(img, img[order], order, knn=1)  # index n - 1 is valid
    assert got["R1_t2i"] == 100.0


@pytest.mark.parametrize("which", ["images", "captions"])
def test_embedding_statistics_names_the_bad_input(which):
    good, bad = np.eye(3), np.eye(3)[:1]
    args = (bad, good) if which == "images" else (good, bad)
    with pytest.raises(ValueError, match=rf"^{which} must be a finite 2-D array with at least 2 rows"):
        embedding_statistics(*args, np.arange(3))


# ----------------------------------------------------------------------------------------------- bank_statistics

def _bank_reference(img, cap, c2i, seed):
    n = len(img)
    bank = np.random.default_rng(seed).permutation(n)[: n // 2]
    in_bank = np.isin(c2i, bank)
    gallery = np.asarray(img, np.float64)[~np.isin(np.arange(n), bank)]
    bank_caps, test_caps = np.asarray(cap, np.float64)[in_bank], np.asarray(cap, np.float64)[~in_bank]
    return _dense_nn_gap(bank_caps, gallery), _dense_nn_gap(test_caps, bank_caps)


@pytest.mark.parametrize("n,seed", [(4, 0), (5, 0), (9, 3)])
def test_bank_statistics_against_the_seeded_split(n, seed):
    rng = np.random.default_rng(20 + n)
    img = _unit(rng.standard_normal((n, 5)))
    c2i = np.repeat(np.arange(n), 2)[::-1].copy()
    cap = _unit(img[c2i] + 0.5 * rng.standard_normal((len(c2i), 5)))
    got = bank_statistics(img, cap, c2i, seed=seed) if seed else bank_statistics(img, cap, c2i)
    bg, qb = _bank_reference(img, cap, c2i, seed)
    assert got == {"bank_gallery_gap": pytest.approx(bg, rel=1e-12, abs=1e-12),
                   "query_bank_gap": pytest.approx(qb, rel=1e-12, abs=1e-12)}


def test_bank_statistics_float32_inputs_in_float64():
    rng = np.random.default_rng(31)
    img = _unit(rng.standard_normal((6, 4))).astype(np.float32)
    c2i = np.arange(12) % 6
    cap = (_unit(rng.standard_normal((12, 4)))).astype(np.float32)
    bg, qb = _bank_reference(img, cap, c2i, 0)
    got = bank_statistics(img, cap, c2i)
    assert got["bank_gallery_gap"] == pytest.approx(bg, rel=1e-13, abs=1e-13)
    assert got["query_bank_gap"] == pytest.approx(qb, rel=1e-13, abs=1e-13)


@pytest.mark.parametrize("n_img,c2i", [(3, [0, 1, 2]), (5, [0, 1, 2, 3]), (4, [0, 1, 2, 3, 4])])
def test_bank_statistics_guard(n_img, c2i):
    with pytest.raises(ValueError, match=r"^bank_statistics needs at least 4 images and caption_to_image indexing "
                                         r"all of them$"):
        bank_statistics(np.eye(5)[:n_img], np.eye(5)[: len(c2i)], c2i)


def test_centroid_distance_in_float64_on_both_sides():
    a = np.zeros((3, 1), np.float32)
    b = np.array([[2.0 ** 24], [1.0]], np.float32)
    assert centroid_distance(a, b) == 8388608.5


def test_embedding_statistics_uint8_caption_index():
    # torch reads a uint8 index tensor as a boolean mask: the index must be widened to int64 first
    c2i = np.arange(24) % 12
    img, cap = _problem(16, 12, 5, c2i)
    ref = embedding_statistics(img, cap, c2i)
    got = embedding_statistics(img, cap, c2i.astype(np.uint8))
    assert got.keys() == ref.keys()
    for key, value in ref.items():
        assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-12, nan_ok=True), key


def test_embedding_statistics_one_caption_per_image_warns_nothing():
    # same_image_cap_cos is NaN by choice here, not the NaN (and RuntimeWarning) of a mean over no groups
    img, cap = _problem(17, 12, 5, np.arange(12))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        got = embedding_statistics(img, cap, np.arange(12))
    assert np.isnan(got["same_image_cap_cos"])


def test_embedding_statistics_needs_ten_of_each():
    c2i = np.arange(9)
    img, cap = _problem(23, 9, 4, c2i)
    with pytest.raises(ValueError, match=r"^embedding_statistics needs at least 10 images and 10 captions .*got 9 "
                                         r"images and 9 captions$"):
        embedding_statistics(img, cap, c2i)
    c2i = np.arange(10)
    img, cap = _problem(23, 10, 4, c2i)
    assert np.isfinite(embedding_statistics(img, cap, c2i)["skew_N10_t2i"])
