"""``python -m hubnorm ...``: the same command as ``hubnorm ...`` (:mod:`hubnorm.cli`)."""

from .cli import main

raise SystemExit(main())
