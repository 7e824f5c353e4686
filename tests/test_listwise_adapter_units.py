"""Unit checks of hubnorm.listwise.adapter aimed at what its mutation run left unchecked by tests/test_listwise.py:
``train_adapter`` against a slow reference loop written here (the same seeded batch draws, the loss weights, Adam,
the logged columns and steps), every guard by its own message, the dtype and thread settings, the adapter's maps and
``transform``; ``adapter_study``'s configurations, names, forwarded arguments and frames; the thread pinning.

Mutation run (``--tests tests/test_listwise.py`` [+ this file]): baseline 304 of 430 killed (71%). The run with this
file was stopped at the deadline on a loaded machine: of the 326 mutants mutmut had scored, 288 killed, 2 survived
(``adapter_study_32/99``, below), 36 "timeouts" not yet rechecked (>= 88% of those 326 even if every timeout
survives); 104 untested. Expected survivors (equivalent):

* ``LinearAdapter.images_4/6``, ``texts_4/6`` (``normalize`` with ``dim`` dropped or ``+1``): torch's default
  ``dim=1`` is the last dimension of the 2-D batches;
* ``train_adapter_131`` (``range(steps + 2)``): the loop breaks at ``step == steps``;
* ``train_adapter_157/159`` (the relevance read with numpy's default dtype): ``check_relevance`` casts it to the
  scores' dtype next;
* ``adapter_study_32/99`` (``make_normalizer("RAW")``): the registry reads method names case-insensitively.
"""

import numpy as np
import pandas as pd
import pytest
import torch

import hubnorm as hn
from hubnorm.listwise import adapter as ad
from hubnorm.listwise.losses import smooth_ndcg, smooth_ndcg_loss, triplet_loss


def _unit(x):
    x = np.asarray(x, dtype=np.float64)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _pairs(seed=0, n_img=12, d=5, per=(1, 2, 3)):
    rng = np.random.default_rng(seed)
    imgs = rng.standard_normal((n_img, d)) * 2.0                  # not unit rows: normalised by train_adapter
    c2i = np.concatenate([[i] * per[i % len(per)] for i in range(n_img)])
    rng.shuffle(c2i)                                               # captions not grouped by image
    caps = imgs[c2i] + 0.7 * rng.standard_normal((len(c2i), d))
    return imgs, caps, c2i


def _rel_fn(imgs, c2i):
    z = _unit(imgs)

    def fn(a, b):
        out = np.clip(z[a] @ z[c2i[b]].T, 0, 1)
        out[c2i[b][None, :] == np.asarray(a)[:, None]] = 1.0
        return out
    return fn


def _ref_train(imgs, caps, c2i, rel_fn, loss, tau, margin, w, steps, bs, lr, seed, log_every):
    """train_adapter's documented procedure, written out in float64: per step ``bs`` distinct images
    (randperm), one caption each (``floor(u * count)``-th of the image's captions in index order), scores of the
    adapted unit rows, weighted losses, Adam; the log before the update."""
    img, cap = torch.tensor(_unit(imgs)), torch.tensor(_unit(caps))
    own = [np.flatnonzero(c2i == i) for i in range(len(imgs))]
    gen = torch.Generator().manual_seed(seed)
    d = img.shape[1]
    a_map = torch.zeros(d, d, dtype=torch.float64, requires_grad=True)
    t_map = torch.zeros(d, d, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([a_map, t_map], lr=lr)
    w_t, w_s = {"triplet": (1.0, 0.0), "sndcg": (0.0, 1.0), "triplet+sndcg": (1.0, 1.0)}[loss]
    rows = []
    for step in range(steps + 1):
        b_img = torch.randperm(len(imgs), generator=gen)[:bs].numpy()
        u = torch.rand(bs, generator=gen, dtype=torch.float64).numpy()
        b_cap = np.array([own[i][int(np.floor(x * len(own[i])))] for i, x in zip(b_img, u)])
        x = torch.nn.functional.normalize(img[b_img] + img[b_img] @ a_map, dim=1)
        y = torch.nn.functional.normalize(cap[b_cap] + cap[b_cap] @ t_map, dim=1)
        s = x @ y.T
        rel = None if rel_fn is None else torch.tensor(np.asarray(rel_fn(b_img, b_cap), dtype=np.float64))
        l_t = triplet_loss(s, margin)
        l_s = smooth_ndcg_loss(s, rel, tau) if rel is not None else None
        total = w_t * l_t + (w_s * w * l_s if w_s else 0.0)
        if step % log_every == 0 or step == steps:
            row = {"step": step, "loss": float(total.detach()), "triplet": float(l_t.detach())}
            if rel is not None:
                sd = s.detach()
                sm = 0.5 * (float(smooth_ndcg(sd, rel, tau).mean()) + float(smooth_ndcg(sd.T, rel.T, tau).mean()))
                tr = 0.5 * (float(hn.ndcg_at_k(sd.numpy(), rel.numpy(), bs).mean())
                            + float(hn.ndcg_at_k(sd.T.numpy(), rel.T.numpy(), bs).mean()))
                row.update(sndcg=float(l_s.detach()), smooth_ndcg=sm, true_ndcg=tr, approx_error=abs(sm - tr))
            rows.append(row)
        if step == steps:
            break
        opt.zero_grad()
        total.backward()
        opt.step()
    return pd.DataFrame(rows), a_map.detach(), t_map.detach()


# ---------------------------------------------------------------------------------------------- train_adapter
@pytest.mark.parametrize("loss,w,margin", [("triplet+sndcg", 0.7, 0.1), ("sndcg", 2.0, 0.2), ("triplet", 1.0, 0.3)])
def test_train_adapter_matches_the_reference_loop(loss, w, margin):
    imgs, caps, c2i = _pairs(1)
    fn = _rel_fn(imgs, c2i)
    kw = dict(loss=loss, tau=0.05, margin=margin, sndcg_weight=w, steps=7, batch_size=5, lr=0.02, seed=4,
              log_every=3)
    run = ad.train_adapter(imgs, caps, c2i, relevance_fn=fn, **kw)
    hist, a_map, t_map = _ref_train(imgs, caps, c2i, fn, loss, 0.05, margin, w, 7, 5, 0.02, 4, 3)
    assert list(run.history.columns) == ["step", "loss", "triplet", "sndcg", "smooth_ndcg", "true_ndcg",
                                         "approx_error"]
    assert list(run.history["step"]) == [0, 3, 6, 7]
    pd.testing.assert_frame_equal(run.history, hist, check_exact=False, rtol=0, atol=1e-10)
    torch.testing.assert_close(run.adapter.image_map.detach(), a_map, rtol=0, atol=1e-10)
    torch.testing.assert_close(run.adapter.text_map.detach(), t_map, rtol=0, atol=1e-10)
    assert float(run.adapter.image_map.detach().abs().max()) > 1e-3         # the maps moved
    assert run.adapter.training is False
    assert run.config == {"loss": loss, "tau": 0.05, "margin": margin, "sndcg_weight": w, "steps": 7,
                          "batch_size": 5, "lr": 0.02, "seed": 4, "dtype": "float64"}


def test_train_adapter_triplet_without_relevance_logs_the_triplet_only():
    imgs, caps, c2i = _pairs(2)
    run = ad.train_adapter(imgs, caps, c2i, loss="triplet", margin=0.25, steps=4, batch_size=6, lr=0.05, seed=1,
                           log_every=2)
    hist, a_map, _ = _ref_train(imgs, caps, c2i, None, "triplet", 0.01, 0.25, 1.0, 4, 6, 0.05, 1, 2)
    assert list(run.history.columns) == ["step", "loss", "triplet"]
    pd.testing.assert_frame_equal(run.history, hist, check_exact=False, rtol=0, atol=1e-10)
    torch.testing.assert_close(run.adapter.image_map.detach(), a_map, rtol=0, atol=1e-10)
    assert (run.history["loss"] == run.history["triplet"]).all()


def test_train_adapter_defaults():
    imgs, caps, c2i = _pairs(3, n_img=130, d=4)
    fn = _rel_fn(imgs, c2i)
    run = ad.train_adapter(imgs, caps, c2i, relevance_fn=fn, steps=1)
    assert run.config == {"loss": "triplet+sndcg", "tau": 0.01, "margin": 0.2, "sndcg_weight": 1.0, "steps": 1,
                          "batch_size": 128, "lr": 1e-4, "seed": 0, "dtype": "float64"}
    hist, a_map, _ = _ref_train(imgs, caps, c2i, fn, "triplet+sndcg", 0.01, 0.2, 1.0, 1, 128, 1e-4, 0, 10)
    assert list(run.history["step"]) == [0, 1]
    pd.testing.assert_frame_equal(run.history, hist, check_exact=False, rtol=0, atol=1e-10)
    torch.testing.assert_close(run.adapter.image_map.detach(), a_map, rtol=0, atol=1e-12)


def test_train_adapter_float32():
    imgs, caps, c2i = _pairs(4)
    fn = _rel_fn(imgs, c2i)
    kw = dict(relevance_fn=fn, steps=3, batch_size=4, lr=0.01, seed=2, log_every=1)
    r32 = ad.train_adapter(imgs, caps, c2i, dtype="float32", **kw)
    r64 = ad.train_adapter(imgs, caps, c2i, **kw)
    assert r32.adapter.image_map.dtype == torch.float32 and r32.config["dtype"] == "float32"
    assert r64.adapter.image_map.dtype == torch.float64
    np.testing.assert_allclose(r32.history.to_numpy(), r64.history.to_numpy(), rtol=0, atol=1e-5)


def test_train_adapter_pins_and_restores_the_thread_count(monkeypatch):
    imgs, caps, c2i = _pairs(5)
    seen = []
    real = ad.triplet_loss
    monkeypatch.setattr(ad, "triplet_loss", lambda s, m: (seen.append(torch.get_num_threads()), real(s, m))[1])
    before = torch.get_num_threads()
    ad.train_adapter(imgs, caps, c2i, loss="triplet", steps=1, batch_size=3, num_threads=3)
    assert set(seen) == {3} and torch.get_num_threads() == before
    seen.clear()
    ad.train_adapter(imgs, caps, c2i, loss="triplet", steps=1, batch_size=3)          # default: 1 thread
    assert set(seen) == {1} and torch.get_num_threads() == before
    seen.clear()
    ad.train_adapter(imgs, caps, c2i, loss="triplet", steps=1, batch_size=3, num_threads=None)
    assert set(seen) == {before}


def test_torch_threads_context():
    before = torch.get_num_threads()
    with ad._torch_threads(2):
        assert torch.get_num_threads() == 2
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError, match="inside"):
        with ad._torch_threads(2):
            raise RuntimeError("inside")
    assert torch.get_num_threads() == before
    with ad._torch_threads(None):
        assert torch.get_num_threads() == before


def test_train_adapter_guards():
    imgs, caps, c2i = _pairs(6, n_img=6)
    fn = _rel_fn(imgs, c2i)
    ok = dict(loss="triplet", steps=1, batch_size=3)

    def raises(msg, *args, **kw):
        with pytest.raises(ValueError, match=msg):
            ad.train_adapter(*(args or (imgs, caps, c2i)), **{**ok, **kw})

    raises(r"^dtype must be 'float32' or 'float64'; got 'float16'$", dtype="float16")
    raises(r"^loss must be one of \['sndcg', 'triplet', 'triplet\+sndcg'\]; got 'listnet'$", loss="listnet")
    raises(r"^tau must be a finite number > 0; got 0$", tau=0)
    raises(r"^loss 'sndcg' needs relevance_fn\(image_idx, caption_idx\) -> in-batch relevance$", loss="sndcg")
    for name in ("steps", "batch_size", "log_every"):
        for bad in (0, True, 2.0):
            raises(rf"^{name} must be a positive integer; got {bad!r}$", **{name: bad})
    raises(r"^batch_size must be at least 2 \(in-batch negatives\)$", batch_size=1)
    for bad in (0.0, -1e-3, float("nan"), float("inf")):
        raises(rf"^lr must be a finite number > 0; got {bad!r}$", lr=bad)
    raises(r"^images contain NaN or Inf$", np.full_like(imgs, np.nan), caps, c2i)
    raises(r"^captions contain NaN or Inf$", imgs, np.full_like(caps, np.nan), c2i)
    raises(r"^images have dimension 5 but captions 4$", imgs, caps[:, :4], c2i)
    raises(r"^caption_to_image must lie in \[0, 6\); got range \[0, 6\]$", imgs, caps, np.where(c2i == 1, 6, c2i))
    raises(r"^caption_to_image has 11 entries but there are 12 captions$", imgs, caps, c2i[:-1])
    raises(r"^batch_size 7 exceeds the number of training images 6$", batch_size=7)
    # the boundaries that are allowed
    ad.train_adapter(imgs, caps, c2i, relevance_fn=fn, loss="sndcg", steps=1, batch_size=6, log_every=1, lr=1e-3)
    ad.train_adapter(imgs, caps, c2i, loss="triplet", steps=np.int64(1), batch_size=2, log_every=np.int64(5))


# ---------------------------------------------------------------------------------------------- LinearAdapter
def test_linear_adapter_maps_and_transform():
    la = ad.LinearAdapter(np.int64(3), dtype=torch.float64)
    assert la.dim == 3 and type(la.dim) is int
    assert la.image_map.shape == la.text_map.shape == (3, 3) and la.image_map.dtype == torch.float64
    assert [p is q for p, q in zip(la.parameters(), (la.image_map, la.text_map))] == [True, True]
    assert float(la.image_map.detach().abs().sum() + la.text_map.detach().abs().sum()) == 0.0
    with torch.no_grad():
        la.image_map.copy_(torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]))   # doubles x_0
        la.text_map.copy_(torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, -1.0]]))  # drops y_2
    x, y = la.transform([[3.0, 4.0, 0.0], [1.0, 1.0, 1.0]], np.array([[0.0, 3.0, 4.0], [2.0, 0.0, 5.0]]))
    assert x.dtype == y.dtype == np.float64
    np.testing.assert_allclose(x, [[6 / 52 ** 0.5, 4 / 52 ** 0.5, 0.0],                  # (3, 4, 0) -> (6, 4, 0)
                                   [2 / 6 ** 0.5, 1 / 6 ** 0.5, 1 / 6 ** 0.5]], rtol=0, atol=1e-15)
    np.testing.assert_allclose(y, [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]], rtol=0, atol=1e-15)
    assert la.image_map.grad is None                              # transform records no graph
    x32, _ = ad.LinearAdapter(3).transform(np.ones((1, 3)), np.ones((1, 3)))
    assert x32.dtype == np.float32
    np.testing.assert_allclose(x32, [[3 ** -0.5] * 3], atol=1e-7)


def test_linear_adapter_of_dimension_one():
    la = ad.LinearAdapter(1)
    assert la.dim == 1 and la.image_map.shape == (1, 1)
    x, y = la.transform([[-2.0], [0.5]], [[3.0]])
    np.testing.assert_array_equal(x, [[-1.0], [1.0]])
    np.testing.assert_array_equal(y, [[1.0]])


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "3"])
def test_linear_adapter_dim_guard(bad):
    with pytest.raises(ValueError, match=r"^dim must be a positive integer; got " + repr(bad).replace(".", r"\.")):
        ad.LinearAdapter(bad)


def test_losses_table():
    assert ad.LOSSES == {"triplet": (1.0, 0.0), "sndcg": (0.0, 1.0), "triplet+sndcg": (1.0, 1.0)}


# ---------------------------------------------------------------------------------------------- adapter_study
def _study_inputs(seed, *, n_img, d, n_train):
    """A train / test split of ``_pairs``, the test split's content relevance and the train split's batch relevance."""
    imgs, caps, c2i = _pairs(seed, n_img=n_img, d=d)
    split = hn.EmbeddingSplit(images=hn.l2_normalize(imgs.astype(np.float32)),
                              caption_to_image=c2i, captions=hn.l2_normalize(caps.astype(np.float32)))
    train, test = split.subset_images(np.arange(n_train)), split.subset_images(np.arange(n_train, n_img))
    rel = {d: hn.listwise.content_relevance(test.images, test.caption_to_image, d) for d in ("t2i", "i2t")}
    return train, test, rel, hn.listwise.batch_relevance_fn(train, content=train.images)


def test_adapter_study_configurations_and_frames():
    train, test, rel, fn = _study_inputs(7, n_img=20, d=6, n_train=12)
    runs, df = ad.adapter_study(train, test, rel, fn, taus=(0.2, 0.03), tau=0.05, ndcg_ks=(3,), recall_ks=(2,),
                                steps=2, batch_size=4, lr=0.01, seed=5, log_every=1, margin=0.1)
    assert list(runs) == ["triplet", "sndcg (tau=0.05)", "triplet+sndcg (tau=0.2)", "triplet+sndcg (tau=0.03)"]
    assert [(r.config["loss"], r.config["tau"]) for r in runs.values()] == [
        ("triplet", 0.05), ("sndcg", 0.05), ("triplet+sndcg", 0.2), ("triplet+sndcg", 0.03)]
    assert all(r.config["steps"] == 2 and r.config["margin"] == 0.1 and r.config["seed"] == 5 for r in runs.values())
    assert "sndcg" in runs["triplet"].history.columns             # relevance_fn reaches every configuration
    assert isinstance(df.index, pd.RangeIndex) and df.index.tolist() == list(range(len(df)))
    assert list(df["method"].unique()) == ["zero-shot (no adapter)", *runs]
    assert set(zip(df["metric"], df["K"])) == {("R", 2), ("NDCG", 3)}
    # the first rows: the untouched test split; then each run's adapted test split
    raw = hn.listwise.evaluate_listwise(hn.build_tasks(test.images, test.captions, test.caption_to_image), rel,
                                        {"zero-shot (no adapter)": hn.make_normalizer("raw")}, ndcg_ks=(3,),
                                        recall_ks=(2,))
    pd.testing.assert_frame_equal(df.iloc[:len(raw)].reset_index(drop=True), raw)
    for name, run in runs.items():
        x, y = run.adapter.transform(test.images, test.captions)
        want = hn.listwise.evaluate_listwise(hn.build_tasks(x, y, test.caption_to_image), rel,
                                             {name: hn.make_normalizer("raw")}, ndcg_ks=(3,), recall_ks=(2,))
        got = df[df.method == name].reset_index(drop=True)
        pd.testing.assert_frame_equal(got, want)


def test_adapter_study_default_taus_and_metrics():
    train, test, rel, fn = _study_inputs(8, n_img=14, d=4, n_train=8)
    runs, df = ad.adapter_study(train, test, rel, fn, steps=1, batch_size=3)
    assert list(runs) == ["triplet", "sndcg (tau=0.01)", "triplet+sndcg (tau=0.1)", "triplet+sndcg (tau=0.01)",
                          "triplet+sndcg (tau=0.001)"]
    assert runs["triplet"].config["tau"] == 0.01
    assert sorted(set(zip(df["metric"], df["K"]))) == [("NDCG", 5), ("NDCG", 10), ("NDCG", 20), ("R", 1), ("R", 5),
                                                       ("R", 10)]


def test_adapter_study_type_guard():
    imgs, caps, c2i = _pairs(9)
    split = hn.EmbeddingSplit(images=hn.l2_normalize(imgs.astype(np.float32)),
                              caption_to_image=c2i, captions=hn.l2_normalize(caps.astype(np.float32)))
    with pytest.raises(TypeError, match=r"^train must be an EmbeddingSplit \(images, captions, caption_to_image\); "
                                        r"got ndarray$"):
        ad.adapter_study(imgs, split, {}, None)
    with pytest.raises(TypeError, match=r"^test must be an EmbeddingSplit \(images, captions, caption_to_image\); "
                                        r"got dict$"):
        ad.adapter_study(split, {"images": 1}, {}, None)


@pytest.mark.parametrize("steps, bs, seed", [(3, 4, 0), (5, 2, 7), (1, 12, 1)])
def test_drawn_images_are_the_images_the_training_batches_hold(steps, bs, seed):
    imgs, caps, c2i = _pairs(seed=2)
    seen = []
    rel = _rel_fn(imgs, c2i)

    def recording(a, b):
        seen.append(np.asarray(a).copy())
        assert set(c2i[np.asarray(b)]) <= set(np.asarray(a).tolist())   # a batch's captions are of its images
        return rel(a, b)
    ad.train_adapter(imgs, caps, c2i, relevance_fn=recording, loss="triplet+sndcg", steps=steps, batch_size=bs,
                     seed=seed, log_every=1)
    assert len(seen) == steps + 1
    np.testing.assert_array_equal(ad.drawn_images(c2i, steps=steps, batch_size=bs, seed=seed),
                                  np.unique(np.concatenate(seen)))
    assert hn.listwise.drawn_images is ad.drawn_images


def test_drawn_images_guards():
    c2i = np.array([0, 0, 1, 2])
    for kw in ({"steps": 0}, {"batch_size": 0}, {"steps": 1.5}, {"batch_size": True}):
        with pytest.raises(ValueError, match="must be a positive integer"):
            ad.drawn_images(c2i, **{"steps": 2, "batch_size": 2, **kw})
    with pytest.raises(ValueError, match="batch_size 4 exceeds the number of training images 3"):
        ad.drawn_images(c2i, batch_size=4)
    with pytest.raises(ValueError, match="image 1 has no caption"):
        ad.drawn_images(np.array([0, 2, 2]), batch_size=2)
    assert ad.drawn_images(c2i, steps=50, batch_size=3).tolist() == [0, 1, 2]   # every image, each once
