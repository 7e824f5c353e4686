"""hubnorm_companion: the notebooks' companion to the hubnorm library.

hubnorm (``lib/hubnorm``: embeddings and tasks, normalizers and engines, evaluation and hubness measures, encoders
and caches, data loading) is what a user calls on their own data. This package is what the notebooks under
``notebooks/`` use to reproduce the papers' tables and figures: the papers' protocols and studies, the published
comparisons, the calibration of the synthetic presets, the notebooks' set-up, display and figures. It is a
distribution of its own (``companion/pyproject.toml``), installed beside hubnorm wherever the notebooks run. The
dependency is one-way: this package imports hubnorm, hubnorm never imports it (``tests/test_layering.py``).

Modules (imported by name, e.g. ``from hubnorm_companion import notebook as nb, protocol as pr``):

- :mod:`.notebook`: set-up, display, figure/table saving, PASS/DIFFERS lines and generated notices;
- :mod:`.parameters`: the rule language of the notebooks' parameters cells, and their validation;
- :mod:`.protocol`: data preparation, run labels, the select-and-evaluate loop of NNN App. B, trimming;
- :mod:`.studies`: the loops behind the papers' tables (bank fractions, iterations, k-occurrence tables);
- :mod:`.compare` and :mod:`.reporting`: the published numbers (package data ``hubnorm/published/*.csv``), the
  paper-table maps, and where results go;
- :mod:`.calibration`: how close the synthetic presets come to real and published statistics;
- :mod:`.rerank_study` and :mod:`.rerank_cost`: notebook 06's cross-encoder study and the rerank cost model
  (Geigle et al. Tables 3-4);

The runner behind ``run_all.sh``, its run profiles and the test suite's Jupyter kernel provisioner are tooling of the
checkout, in a third package (``tools/hubnorm_tools``).
"""

__version__ = "0.1.0"   # companion/pyproject.toml's version, in step with hubnorm's (tests/test_packaging.py)

__all__ = ["calibration", "compare", "notebook", "parameters", "protocol", "reporting", "rerank_cost", "rerank_study",
           "studies"]
