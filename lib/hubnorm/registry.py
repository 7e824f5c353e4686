"""Method names -> normalizer classes, for notebooks and configuration files.

>>> from hubnorm import make_normalizer
>>> make_normalizer("nnn", alpha=0.75, k=16)
NearestNeighborNormalization(alpha=0.75, k=16, ...)

A method is one file in ``hubnorm/normalizers/`` and one line below. Everything else about it (its display name,
the papers' grid, its inputs, parameter limits, block reductions, one-pass sweep) is read off its class, so
:data:`NORMALIZERS`, :data:`DISPLAY_NAMES` and :data:`PAPER_GRIDS` follow the registry; :func:`register` adds a
method from outside the package (a test, a notebook, a third-party module) to all three.
"""

from __future__ import annotations

import itertools
from typing import Dict, List, Mapping, Optional, Sequence, Type

from .normalizers import (
    CrossDomainSimilarityLocalScaling, DistributionNormalization, DualBankSinkhornNormalization,
    DualDynamicInvertedSoftmax, DualInvertedSoftmax, DynamicInvertedSoftmax, Identity, InvertedSoftmax,
    DisSimLocal, HungarianNormalization, L2TransportNormalization, LocalScaling, MutualProximity,
    NearestNeighborNormalization, Normalizer, OptimalTransportNormalization, SinkhornNormalization,
)

#: registry name -> class
NORMALIZERS: Dict[str, Type[Normalizer]] = {}

#: Display names used in tables and figures.
DISPLAY_NAMES: Dict[str, str] = {}

#: The papers' grids (NNN App. B1; DBSN Fig. 6 ranges; ours where the papers give none): ``{method: {param: [...]}}``.
PAPER_GRIDS: Dict[str, Dict[str, Sequence]] = {}


def register(cls: Type[Normalizer], *, replace: bool = False) -> Type[Normalizer]:
    """Add a normalizer class under ``cls.name`` (its ``display_name`` and ``paper_grid`` too); returns ``cls``."""
    if not (isinstance(cls, type) and issubclass(cls, Normalizer)):
        raise TypeError(f"register takes a Normalizer subclass; got {cls!r}")
    key = cls.name
    if not isinstance(key, str) or not key or key != key.lower() or key == Normalizer.name:
        raise ValueError(f"{cls.__name__}.name must be a lower-case registry name; got {key!r}")
    if key in NORMALIZERS and NORMALIZERS[key] is not cls and not replace:
        raise ValueError(f"the name {key!r} is taken by {NORMALIZERS[key].__name__}: choose another name "
                         "(or pass replace=True)")
    NORMALIZERS[key] = cls
    DISPLAY_NAMES[key] = cls.display_name or key
    if cls.paper_grid:
        PAPER_GRIDS[key] = {p: list(v) for p, v in cls.paper_grid.items()}
    else:
        PAPER_GRIDS.pop(key, None)
    return cls


def unregister(name: str) -> None:
    """Remove a method added by :func:`register` (tests)."""
    NORMALIZERS.pop(name, None)
    DISPLAY_NAMES.pop(name, None)
    PAPER_GRIDS.pop(name, None)


# one line per method
register(Identity)
register(NearestNeighborNormalization)
register(DistributionNormalization)
register(InvertedSoftmax)
register(DynamicInvertedSoftmax)
register(CrossDomainSimilarityLocalScaling)
register(LocalScaling)
register(MutualProximity)
register(DisSimLocal)
register(DualInvertedSoftmax)
register(DualDynamicInvertedSoftmax)
register(SinkhornNormalization)
register(DualBankSinkhornNormalization)
register(OptimalTransportNormalization)
register(L2TransportNormalization)
register(HungarianNormalization)


def make_normalizer(name: str, **params) -> Normalizer:
    """A new normalizer by registry name (``"raw"``, ``"nnn"``, ``"dn"``, ``"is"``, ``"dis"``, ``"csls"``, ``"ls"``,
    ``"mp"``, ``"dsl"``, ``"dualis"``, ``"dualdis"``, ``"sn"``, ``"dbsn"``, and any name added with :func:`register`)."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a string; got {type(name).__name__}")
    key = name.lower()
    if key not in NORMALIZERS:
        raise ValueError(f"unknown normalizer {name!r}; available: {sorted(NORMALIZERS)}")
    return NORMALIZERS[key](**params)


def check_grid(method: str, grid: Optional[Mapping[str, Sequence]]) -> Dict[str, list]:
    """``grid`` (``{parameter: [values, ...]}``; None: the paper's grid of ``method``) checked, as lists."""
    if grid is None:
        if method not in PAPER_GRIDS:
            raise ValueError(f"no default grid for method {method!r}: pass grid={{'param': [values, ...]}}")
        grid = PAPER_GRIDS[method]
    if not isinstance(grid, Mapping):
        raise TypeError(f"grid must be a dict {{parameter: [values, ...]}}; got {type(grid).__name__}")
    out = {}
    for name, values in grid.items():
        if not isinstance(name, str):
            raise TypeError(f"grid keys must be parameter names (str); got {name!r}")
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) and not hasattr(values, "__iter__"):
            raise TypeError(f"grid[{name!r}] must be a list of values; got {values!r}")
        values = list(values)
        if not values:
            raise ValueError(f"grid[{name!r}] is empty: give at least one value")
        out[name] = values
    return out


def grid_points(method: str, grid: Optional[Mapping[str, Sequence]]) -> List[Dict[str, object]]:
    """Every point of ``grid`` (:func:`check_grid`) as a dict of parameters, the last parameter varying fastest (an
    empty grid: one point, ``{}``)."""
    grid = check_grid(method, grid)
    return [dict(zip(grid, values)) for values in itertools.product(*grid.values())]
