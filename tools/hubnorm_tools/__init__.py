"""Tooling of the hubnorm checkout, not of the hubnorm package: what runs the notebooks and the test suite.

- :mod:`.runner`: the runner behind ``bash run_all.sh`` (papermill, run profiles, the run's summary);
- :mod:`.profiles`: ``run_all.sh``'s run profiles as data (``profiles.yaml`` beside it), checked;
- :mod:`.jupyter_ipc`: a Jupyter kernel provisioner putting kernels on Unix domain sockets instead of TCP ports
  (the test suite selects it: parallel workers' kernels never collide on a port).

``scripts/bootstrap.sh`` installs it into ``.venv`` beside hubnorm (``pip install -e tools``); ``pip install hubnorm``
does not ship it. It imports hubnorm and the notebooks' companion (``hubnorm_companion.reporting``); neither imports
it (``tests/test_layering.py``).
"""
