"""Unit checks of hubnorm.listwise.relevance aimed at what its mutation run left unchecked by tests/test_listwise.py:
RSC against an explicit float64 loop written here (unnormalised embeddings, uneven blocks, subsets), every guard of
``RSC`` / ``RSC.__call__`` / ``content_relevance`` / ``relevance_for_split`` by its own message, the clip to [0, 1]
where rounding would leave it, the contiguous transposes, what ``rsc_relevance`` / ``rsc_from_texts`` forward, the
labels and directions of ``relevance_for_split``, and the default encoder of the split helpers (monkeypatched:
no model is loaded here), and the label of the training captions' progress bar.

Mutation run (``--tests tests/test_listwise.py`` [+ this file]): 261 -> 348 of 360 killed (72% -> 97%). The
survivors change nothing a caller can observe:

* ``RSC.__init___4``, ``content_relevance_8``, ``batch_relevance_fn_6`` (``unit_rows(..., None)``) and
  ``RSC.__call___42/44`` (``np.empty`` without ``dtype``): numpy's default dtype is float64, the one asked for;
* ``RSC.__call___3``, ``rsc_relevance_3`` (default ``block_images`` 257): the block size changes no value (checked
  for 1, 2, 3, 5, 7 and 256 above);
* ``RSC.__call___71`` (``np.maximum.reduceat`` without ``axis=0``): 0 is its default;
* ``relevance_for_split_10/28``, ``batch_relevance_fn_20/52`` (``"i2t"`` dropped): "i2t" is the callee's default.
"""

from types import SimpleNamespace

import numpy as np
import pytest

from hubnorm.listwise import relevance


@pytest.fixture(autouse=True)
def _own_cache_root(tmp_path, monkeypatch):
    """Text embeddings may be cached: every test here writes to its own cache root, never to the checkout's."""
    monkeypatch.setenv("HUBNORM_CACHE", str(tmp_path / "cache"))


def _ref_rsc(g, c2i, n_images=None):
    """RSC by its definition: max over the image's captions of (1 + cos) / 2, 1 for ground truth; float64."""
    g = np.asarray(g, dtype=np.float64)
    n_images = int(max(c2i)) + 1 if n_images is None else n_images
    out = np.zeros((n_images, len(g)))
    for i in range(n_images):
        own = [c for c in range(len(g)) if c2i[c] == i]
        for j in range(len(g)):
            cos = [g[c] @ g[j] / np.sqrt((g[c] @ g[c]) * (g[j] @ g[j])) for c in own]
            out[i, j] = 1.0 if c2i[j] == i else max((1.0 + x) / 2.0 for x in cos)
    return out


def _ref_content(z, c2i):
    z = np.asarray(z, dtype=np.float64)
    out = np.zeros((len(z), len(c2i)))
    for i in range(len(z)):
        for j, owner in enumerate(c2i):
            cos = z[i] @ z[owner] / np.sqrt((z[i] @ z[i]) * (z[owner] @ z[owner]))
            out[i, j] = 1.0 if owner == i else max(0.0, cos)
    return out


def _problem(seed=0):
    rng = np.random.default_rng(seed)
    c2i = np.array([2, 0, 1, 0, 3, 2, 2, 4, 1, 5, 6, 3])          # uneven, unsorted
    g = rng.standard_normal((len(c2i), 5)) * rng.uniform(0.5, 3.0, (len(c2i), 1))   # not unit rows
    return g, c2i


# ---------------------------------------------------------------------------------------------- RSC
def test_rsc_matches_the_loop_for_unnormalised_embeddings_and_uneven_blocks():
    g, c2i = _problem(0)
    want = _ref_rsc(g, c2i)
    rsc = relevance.RSC(g.astype(np.float32), c2i)
    assert rsc.g.dtype == np.float64 and rsc.n_images == 7
    np.testing.assert_allclose(np.linalg.norm(rsc.g, axis=1), 1.0, atol=1e-12)
    np.testing.assert_array_equal(rsc.caption_to_image, c2i)
    want32 = _ref_rsc(g.astype(np.float32), c2i)
    for block in (1, 3, 5, 7, 256):
        got = rsc(block_images=block)
        assert got.dtype == np.float64 and got.shape == (7, 12)
        np.testing.assert_allclose(got, want32, rtol=0, atol=1e-12)
    np.testing.assert_allclose(want32, want, atol=1e-6)
    np.testing.assert_allclose(rsc(block_images=np.int64(2)), rsc(), rtol=0, atol=1e-15)
    imgs, caps = [6, 0, 3], [11, 0, 4, 9]
    np.testing.assert_allclose(rsc(imgs, caps, block_images=2), want32[np.ix_(imgs, caps)], rtol=0, atol=1e-12)
    t2i = rsc(imgs, caps, "t2i", block_images=2)
    assert t2i.flags.c_contiguous
    np.testing.assert_array_equal(t2i, rsc(imgs, caps, block_images=2).T)


def test_rsc_clips_rounding_above_one_and_below_zero():
    # identical and opposite captions of different images: (1 + cos) / 2 is 1 or 0 up to rounding; clipped exactly
    rng = np.random.default_rng(11)
    v = rng.standard_normal((40, 7))
    g = np.concatenate([v, v, -v])                                # caption j, j + 40 (same), j + 80 (opposite)
    c2i = np.arange(120)
    rel = relevance.RSC(g, c2i)(np.arange(40), np.r_[40:120])
    assert rel.max() <= 1.0 and rel.min() >= 0.0
    np.testing.assert_allclose(np.diag(rel[:, :40]), 1.0, atol=1e-15)
    np.testing.assert_allclose(np.diag(rel[:, 40:]), 0.0, atol=1e-15)
    g1 = relevance.RSC(g, c2i).g
    assert (np.einsum("ij,ij->i", g1[:40], g1[40:80]) > 1.0).any()     # rounding does push cos above 1 here
    assert (np.einsum("ij,ij->i", g1[:40], g1[80:]) < -1.0).any()


def test_rsc_guards_of_the_constructor():
    g, c2i = _problem(1)
    with pytest.raises(ValueError, match=r"^text_embeddings contain NaN or Inf$"):
        relevance.RSC(np.full((2, 2), np.nan), [0, 1])
    with pytest.raises(ValueError, match=r"^caption_to_image must be a non-empty 1-D array of integer indices"):
        relevance.RSC(g, c2i.astype(float))
    for bad in (0, -2, True, 7.0, "7"):
        with pytest.raises(ValueError, match=r"^n_images must be a positive integer; got " + repr(bad) + "$"):
            relevance.RSC(g, c2i, n_images=bad)
    with pytest.raises(ValueError, match=r"^caption_to_image has 11 entries but there are 12 text embeddings$"):
        relevance.RSC(g, c2i[:-1])
    with pytest.raises(ValueError, match=r"^caption_to_image refers to image 6 but n_images is 6$"):
        relevance.RSC(g, c2i, n_images=6)
    with pytest.raises(ValueError, match=r"^image 7 has no caption: RSC needs at least one caption per image$"):
        relevance.RSC(g, c2i, n_images=9)
    with pytest.raises(ValueError, match=r"^image 1 has no caption"):
        relevance.RSC(g[:3], np.array([0, 2, 3]))
    rsc = relevance.RSC(g, c2i, n_images=np.int64(7))
    assert rsc.n_images == 7 and type(rsc.n_images) is int
    assert [rsc.groups.of(i).tolist() for i in range(7)] == [[1, 3], [2, 8], [0, 5, 6], [4, 11], [7], [9], [10]]
    relevance.RSC(g[:1], [0], n_images=1)                          # the smallest valid input


def test_rsc_guards_of_a_read():
    g, c2i = _problem(2)
    rsc = relevance.RSC(g, c2i)
    with pytest.raises(ValueError, match=r"^direction must be one of \('t2i', 'i2t'\); got 'x2y'$"):
        rsc(direction="x2y")
    for bad in (0, -1, 1.0, True, None):
        with pytest.raises(ValueError, match=r"^block_images must be a positive integer; got " + repr(bad) + "$"):
            rsc(block_images=bad)
    with pytest.raises(ValueError, match=r"^images must lie in \[0, 7\); got range \[0, 7\]$"):
        rsc(images=[0, 7])
    with pytest.raises(ValueError, match=r"^captions must lie in \[0, 12\); got range \[3, 12\]$"):
        rsc(captions=[3, 12])
    np.testing.assert_array_equal(rsc(images=[6], captions=[11]), rsc()[6:7, 11:12])


def test_rsc_relevance_forwards_every_argument():
    g, c2i = _problem(3)
    full = relevance.RSC(g, c2i)()
    np.testing.assert_array_equal(relevance.rsc_relevance(g, c2i), full)
    got = relevance.rsc_relevance(g, c2i, "t2i", images=[1, 4], captions=[0, 7, 2])
    np.testing.assert_array_equal(got, full[np.ix_([1, 4], [0, 7, 2])].T)
    with pytest.raises(ValueError, match=r"^image 7 has no caption"):
        relevance.rsc_relevance(g, c2i, n_images=8)
    with pytest.raises(ValueError, match=r"^block_images must be a positive integer; got 0$"):
        relevance.rsc_relevance(g, c2i, block_images=0)


def test_rsc_from_texts_encodes_with_the_given_encoder_and_forwards():
    g, c2i = _problem(4)
    texts = [f"caption {i}" for i in range(len(c2i))]
    seen = []

    def enc(batch):                                               # a plug-in encoder without a cache identity
        seen.append(list(batch))
        return g[[texts.index(t) for t in batch]]

    got = relevance.rsc_from_texts(texts, c2i, "t2i", encoder=enc, images=[0, 6], captions=[5, 1])
    np.testing.assert_allclose(got, _ref_rsc(g, c2i)[np.ix_([0, 6], [5, 1])].T, rtol=0, atol=1e-6)
    assert sum(seen, []) == texts
    # default direction: i2t
    np.testing.assert_allclose(relevance.rsc_from_texts(texts, c2i, encoder=enc), _ref_rsc(g, c2i), rtol=0, atol=1e-6)


# ---------------------------------------------------------------------------------------------- content relevance
def test_content_relevance_matches_the_loop():
    rng = np.random.default_rng(5)
    z = rng.standard_normal((6, 4)) * 3.0                          # not unit rows; many negative cosines
    c2i = np.array([3, 0, 0, 5, 1, 2, 4, 4, 1])
    want = _ref_content(z, c2i)
    got = relevance.content_relevance(z.astype(np.float32), c2i)
    assert got.dtype == np.float64 and got.shape == (6, 9)
    np.testing.assert_allclose(got, _ref_content(z.astype(np.float32), c2i), rtol=0, atol=1e-12)
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert (got == 0).any()
    t2i = relevance.content_relevance(z, c2i, "t2i", images=[5, 0], captions=[8, 3, 1])
    assert t2i.flags.c_contiguous and t2i.shape == (3, 2)
    np.testing.assert_allclose(t2i, want[np.ix_([5, 0], [8, 3, 1])].T, rtol=0, atol=1e-12)


def test_content_relevance_clips_rounding():
    rng = np.random.default_rng(12)
    v = rng.standard_normal((60, 5))
    z = np.concatenate([v, v])                                     # image i and i + 60 share content
    c2i = np.r_[60:120]
    got = relevance.content_relevance(z, c2i, images=np.arange(60))
    assert got.max() <= 1.0
    np.testing.assert_allclose(np.diag(got), 1.0, atol=1e-15)
    zz = relevance.unit_rows(z, "z", np.float64)
    assert (np.einsum("ij,ij->i", zz[:60], zz[60:]) > 1.0).any()    # rounding does push cos above 1 here


def test_content_relevance_guards():
    z = np.eye(3)
    with pytest.raises(ValueError, match=r"^direction must be one of \('t2i', 'i2t'\); got 'i2i'$"):
        relevance.content_relevance(z, [0, 1, 2], "i2i")
    with pytest.raises(ValueError, match=r"^content contain NaN or Inf$"):
        relevance.content_relevance(np.full((2, 2), np.inf), [0, 1])
    with pytest.raises(ValueError, match=r"^caption_to_image must lie in \[0, 3\); got range \[0, 3\]$"):
        relevance.content_relevance(z, [0, 3])
    with pytest.raises(ValueError, match=r"^images must lie in \[0, 3\); got range \[3, 3\]$"):
        relevance.content_relevance(z, [0, 1], images=[3])
    with pytest.raises(ValueError, match=r"^captions must lie in \[0, 2\); got range \[2, 2\]$"):
        relevance.content_relevance(z, [0, 1], captions=[2])


# ---------------------------------------------------------------------------------------------- split helpers
class _NamedEncoder:
    name = "toy-encoder"

    def __init__(self, g, texts):
        self.g, self.texts, self.calls = g, texts, 0

    def __call__(self, batch):
        self.calls += 1
        return self.g[[self.texts.index(t) for t in batch]]


def _split(seed=6, n_images=None):
    g, c2i = _problem(seed)
    texts = [f"caption {i}" for i in range(len(c2i))]
    split = SimpleNamespace(caption_texts=texts, caption_to_image=c2i,
                            n_images=int(c2i.max()) + 1 if n_images is None else n_images)
    return split, g, texts


def test_relevance_for_split_rsc_labels_and_directions(monkeypatch):
    split, g, texts = _split()
    want = _ref_rsc(g, split.caption_to_image)
    enc = _NamedEncoder(g, texts)
    rel, label = relevance.relevance_for_split(split, encoder=enc)
    assert label == "RSC (toy-encoder)" and list(rel) == ["t2i", "i2t"]
    np.testing.assert_allclose(rel["i2t"], want, rtol=0, atol=1e-6)     # the texts' encoding is float32
    assert rel["t2i"].flags.c_contiguous
    np.testing.assert_array_equal(rel["t2i"], rel["i2t"].T)
    only, _ = relevance.relevance_for_split(split, ("i2t",), encoder=enc)
    assert list(only) == ["i2t"]
    plain = lambda batch: g[[texts.index(t) for t in batch]]   # noqa: E731 - no name: the type's name labels it
    assert relevance.relevance_for_split(split, encoder=plain)[1] == "RSC (function)"
    # no encoder given: the default one is loaded
    monkeypatch.setattr(relevance, "load_text_encoder", lambda: enc)
    calls = enc.calls
    rel2, label2 = relevance.relevance_for_split(split)
    assert label2 == "RSC (toy-encoder)" and enc.calls > calls
    np.testing.assert_array_equal(rel2["i2t"], rel["i2t"])
    with pytest.raises(ValueError, match=r"^directions must be among \('t2i', 'i2t'\); got 'v2t'$"):
        relevance.relevance_for_split(split, ["i2t", "v2t"], encoder=enc)


def test_relevance_for_split_passes_the_split_image_count():
    split, g, texts = _split(n_images=8)                          # one image more than the captions name
    with pytest.raises(ValueError, match=r"^image 7 has no caption"):
        relevance.relevance_for_split(split, encoder=_NamedEncoder(g, texts))
    with pytest.raises(ValueError, match=r"^image 7 has no caption"):
        relevance.batch_relevance_fn(split, encoder=_NamedEncoder(g, texts))


def test_relevance_for_split_content_and_the_no_texts_error():
    split, _, _ = _split()
    z = np.random.default_rng(7).standard_normal((7, 3))
    split.caption_texts = None
    rel, label = relevance.relevance_for_split(split, ("t2i",), content=z)
    assert label == "content relevance (given per-image vectors)" and list(rel) == ["t2i"]
    np.testing.assert_allclose(rel["t2i"], _ref_content(z, split.caption_to_image).T, rtol=0, atol=1e-12)
    msg = (r"^RSC relevance needs caption texts \(split.caption_texts is None\). For a split without texts pass "
           r"content=<\(n_images, d\) content vectors>, e.g. content=split.extras\['latent'\] for a synthetic split "
           r"\(its latent truth\)$")
    with pytest.raises(ValueError, match=msg):
        relevance.relevance_for_split(split)
    with pytest.raises(ValueError, match=msg):
        relevance.batch_relevance_fn(split)


def test_batch_relevance_fn_rsc_and_content(monkeypatch):
    split, g, texts = _split(8)
    want = _ref_rsc(g, split.caption_to_image)
    enc = _NamedEncoder(g, texts)
    labels, real = [], relevance.encode_texts

    def spy(texts, encoder=None, **kw):                           # the progress bar's label of the one encoding
        labels.append(kw.get("desc"))
        return real(texts, encoder, **kw)
    monkeypatch.setattr(relevance, "encode_texts", spy)
    fn = relevance.batch_relevance_fn(split, encoder=enc)
    assert labels == ["encoding training captions"]
    a, b = np.array([6, 1, 2]), np.array([0, 11, 3, 3])
    np.testing.assert_allclose(fn(a, b), want[np.ix_(a, b)], rtol=0, atol=1e-6)       # float32 encoding
    monkeypatch.setattr(relevance, "load_text_encoder", lambda: enc)
    calls = enc.calls
    fn2 = relevance.batch_relevance_fn(split)
    assert enc.calls > calls
    np.testing.assert_array_equal(fn2(a, b), fn(a, b))
    z = np.random.default_rng(9).standard_normal((7, 4)) * 2.0
    fz = relevance.batch_relevance_fn(split, content=z)
    np.testing.assert_allclose(fz(a, b), _ref_content(z, split.caption_to_image)[np.ix_(a, b)], rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match=r"^content contain NaN or Inf$"):
        relevance.batch_relevance_fn(split, content=np.full((7, 4), np.nan))


def test_batch_relevance_fn_on_a_subset_of_images_equals_all_captions(monkeypatch):
    """images=: only those images' captions are encoded, and every pair among them has the relevance computed
    from all captions (RSC reads an image's own captions and the caption asked about)."""
    split, g, texts = _split(8)
    enc = _NamedEncoder(g, texts)
    full = relevance.batch_relevance_fn(split, encoder=enc)
    encoded = []
    real = relevance.encode_texts
    monkeypatch.setattr(relevance, "encode_texts",
                        lambda t, encoder=None, **kw: encoded.append((list(t), kw.get("desc"))) or real(t, encoder, **kw))
    c2i = split.caption_to_image
    keep = [5, 1, 1, 6]                                   # unsorted, repeated: the images 1, 5, 6
    sub = relevance.batch_relevance_fn(split, encoder=enc, images=keep)
    caps = np.flatnonzero(np.isin(c2i, [1, 5, 6]))
    assert encoded == [([texts[i] for i in caps], "encoding the captions of 3 training images")]
    rng = np.random.default_rng(0)
    for _ in range(5):
        a = rng.choice([1, 5, 6], size=rng.integers(1, 4))
        b = rng.choice(caps, size=rng.integers(1, 6))
        np.testing.assert_array_equal(sub(a, b), full(a, b))
    outside_image = int(np.setdiff1d(np.arange(split.n_images), [1, 5, 6])[0])
    outside_caption = int(np.flatnonzero(c2i == outside_image)[0])
    for a, b in (([outside_image], caps[:2]), ([1], [outside_caption])):
        with pytest.raises(ValueError, match=r"outside the images given to batch_relevance_fn \(images=\)"):
            sub(np.array(a), np.array(b))
    with pytest.raises(ValueError, match="images must be a non-empty"):
        relevance.batch_relevance_fn(split, encoder=enc, images=[])
    with pytest.raises(ValueError, match="images"):
        relevance.batch_relevance_fn(split, encoder=enc, images=[split.n_images])
    with pytest.raises(ValueError, match="content relevance encodes nothing"):
        relevance.batch_relevance_fn(split, content=np.ones((split.n_images, 3)), images=[1])
