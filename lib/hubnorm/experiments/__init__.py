"""The experiments layer: the papers' protocols, studies, published comparisons and notebook set-up.

The core of hubnorm (embeddings and tasks, normalizers and engines, evaluation and hubness measures, encoders and
caches, data loading: everything else under ``hubnorm``) is what a user calls on their own data; this subpackage is
what the notebooks use to reproduce the papers' tables and figures. The dependency is one-way: the experiments
layer imports the core, the core never imports ``hubnorm.experiments`` (``tests/test_layering.py``), and
``import hubnorm`` loads none of it.

Modules (imported by name, e.g. ``from hubnorm.experiments import notebook as nb, protocol as pr``):

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
checkout, not of this package (``tools/hubnorm_tools``).
"""

__all__ = ["calibration", "compare", "notebook", "parameters", "protocol", "reporting", "rerank_cost", "rerank_study",
           "studies"]
