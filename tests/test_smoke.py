import numpy as np

import hubnorm as hn


def test_every_registered_method_runs_both_directions():
    rng = np.random.default_rng(0)
    imgs = hn.l2_normalize(rng.standard_normal((20, 8)).astype(np.float32))
    c2i = np.repeat(np.arange(20), 5)
    caps = hn.l2_normalize(imgs[c2i] + 0.5 * rng.standard_normal((100, 8)).astype(np.float32))
    tasks = hn.build_tasks(imgs, caps, c2i, image_bank=imgs, caption_bank=caps)
    for name in hn.NORMALIZERS:
        for task in tasks.values():
            params = {"k": 8} if name in ("nnn", "csls") else {}
            res = hn.evaluate(task.fit(hn.make_normalizer(name, **params)), task)
            assert 0 <= res["R@1"] <= res["R@5"] <= res["R@10"] <= 100
