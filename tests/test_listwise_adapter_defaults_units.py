"""Unit check of hubnorm.listwise.adapter's schedule defaults, which tests/test_listwise_adapter_units.py leaves
open (its defaults test passes ``steps=1``): ``train_adapter`` runs ``steps=300`` Adam steps and logs every
``log_every=10`` steps and the last one.

Mutation run (``--sample 3``, stopped at the deadline; see benchmarks/reports/mutation/listwise.adapter.md): of 44
sampled mutants scored with tests/test_listwise_adapter_units.py alone, ``train_adapter_6`` (``steps: int = 301``)
survived; this file kills it (checked by hand on the mutated source). ``adapter_study_32``
(``make_normalizer("RAW")``) is equivalent: the registry reads method names case-insensitively.
"""

import numpy as np

from hubnorm.listwise import adapter as ad


def test_train_adapter_default_schedule_is_300_steps_logged_every_10():
    rng = np.random.default_rng(0)
    imgs = rng.standard_normal((3, 2))
    c2i = np.array([0, 1, 2])
    caps = imgs + 0.5 * rng.standard_normal((3, 2))
    run = ad.train_adapter(imgs, caps, c2i, loss="triplet", batch_size=2)
    assert run.config["steps"] == 300
    assert run.history["step"].tolist() == list(range(0, 301, 10))
