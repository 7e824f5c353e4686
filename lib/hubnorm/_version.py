"""The package version: a leaf module (it imports nothing), so any layer may read it without importing the package
root (``hubnorm/__init__`` imports everything). Keep it equal to ``version`` in pyproject.toml (a test checks)."""

__version__ = "0.1.0"
