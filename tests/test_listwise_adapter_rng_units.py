"""Unit check of hubnorm.listwise.adapter left open by tests/test_listwise_adapter_units.py: ``train_adapter`` draws
its batches from its own seeded ``torch.Generator``, so a ``relevance_fn`` (or anything else called during training)
that draws from torch's global generator does not change which images and captions are drawn.

Mutation run (all 430 mutants, ``--tests tests/test_listwise_adapter_defaults_units.py
tests/test_listwise_adapter_units.py``): 420 killed, 10 survived; of those, ``train_adapter_115`` (``gen = None``:
the batches drawn from the global generator, which ``torch.manual_seed(seed)`` has just seeded with the same seed, so
the draws agree until something else draws from it) is killed here: with this file 421 of 430 killed (98%). The
other 9 survivors are the equivalents listed in tests/test_listwise_adapter_units.py.
"""

import numpy as np
import torch

from hubnorm.listwise import adapter as ad

torch.set_num_threads(1)


def _data(seed=0, n_img=8, d=4):
    rng = np.random.default_rng(seed)
    imgs = rng.standard_normal((n_img, d))
    c2i = np.repeat(np.arange(n_img), 2)
    caps = imgs[c2i] + 0.5 * rng.standard_normal((len(c2i), d))
    return imgs, caps, c2i


def test_batches_come_from_the_seeded_generator_not_the_global_one():
    imgs, caps, c2i = _data()
    drawn = {"plain": [], "noisy": []}

    def relevance(kind):
        def fn(a, b):
            drawn[kind].append((np.asarray(a).tolist(), np.asarray(b).tolist()))
            if kind == "noisy":
                torch.rand(5)                                   # a callback that uses torch's global generator
            return (c2i[np.asarray(b)][None, :] == np.asarray(a)[:, None]).astype(np.float64)
        return fn

    kw = dict(steps=4, batch_size=3, lr=0.05, seed=3, log_every=1)
    plain = ad.train_adapter(imgs, caps, c2i, relevance_fn=relevance("plain"), **kw)
    noisy = ad.train_adapter(imgs, caps, c2i, relevance_fn=relevance("noisy"), **kw)
    assert len(drawn["plain"]) == 5 and drawn["noisy"] == drawn["plain"]
    assert len({tuple(a) for a, _ in drawn["plain"]}) > 1             # the batches do change from step to step
    np.testing.assert_array_equal(noisy.history.to_numpy(), plain.history.to_numpy())
    assert torch.equal(noisy.adapter.image_map, plain.adapter.image_map)
    # the first batch is the generator's first draw: randperm of the images, cut to batch_size
    gen = torch.Generator().manual_seed(3)
    assert drawn["plain"][0][0] == torch.randperm(8, generator=gen)[:3].tolist()
