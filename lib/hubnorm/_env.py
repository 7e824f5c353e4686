"""On/off switches read from environment variables, one rule for all (no torch: imported by light modules).

``1``, ``true``, ``yes``, ``on`` switch on; ``0``, ``false``, ``no``, ``off`` switch off (any case, surrounding
spaces ignored); unset or empty is the default. Anything else is a ``ValueError`` that names the variable, so that
``HUBNORM_FORBID_SYNTHETIC=ture`` never quietly leaves a guard off.
"""

from __future__ import annotations

import os

ON = ("1", "true", "yes", "on")
OFF = ("0", "false", "no", "off")


def env_switch(name: str, default: bool = False) -> bool:
    """Whether the environment variable ``name`` switches on (module docstring); ``default`` when unset or empty."""
    raw = os.environ.get(name)
    value = "" if raw is None else raw.strip().lower()
    if not value:
        return default
    if value in ON:
        return True
    if value in OFF:
        return False
    raise ValueError(f"environment variable {name}={raw!r} is not an on/off switch: set it to 1 (or true, yes, on) "
                     f"or 0 (or false, no, off), or unset it")


def forbid_synthetic(what: str) -> None:
    """RuntimeError when ``HUBNORM_FORBID_SYNTHETIC`` is on: synthetic data (``what``) was requested in a run that
    must use real data only (the real runs of ``run_all.sh --source`` set it)."""
    if env_switch("HUBNORM_FORBID_SYNTHETIC"):
        raise RuntimeError(f"synthetic data ({what}) requested while HUBNORM_FORBID_SYNTHETIC is set: this run must use "
                           "real data only (check the source parameters, e.g. cross_source)")
