"""Method names -> normalizer classes, for notebooks and configuration files.

>>> from hubnorm import make_normalizer
>>> make_normalizer("nnn", alpha=0.75, k=16)
NearestNeighborNormalization(alpha=0.75, k=16, ...)
"""

from __future__ import annotations

from typing import Dict, Type

from .normalizers import (
    CrossDomainSimilarityLocalScaling, DistributionNormalization, DualBankSinkhornNormalization,
    DualDynamicInvertedSoftmax, DualInvertedSoftmax, DynamicInvertedSoftmax, Identity, InvertedSoftmax,
    NearestNeighborNormalization, Normalizer, SinkhornNormalization,
)

NORMALIZERS: Dict[str, Type[Normalizer]] = {
    cls.name: cls
    for cls in (
        Identity, NearestNeighborNormalization, DistributionNormalization, InvertedSoftmax, DynamicInvertedSoftmax,
        CrossDomainSimilarityLocalScaling, DualInvertedSoftmax, DualDynamicInvertedSoftmax, SinkhornNormalization,
        DualBankSinkhornNormalization,
    )
}

#: Display names used in tables and figures.
DISPLAY_NAMES = {
    "raw": "Original", "nnn": "NNN", "dn": "DN", "is": "IS", "dis": "DIS", "csls": "CSLS", "dualis": "DualIS",
    "dualdis": "DualDIS", "sn": "SN", "dbsn": "DBSN",
}


def make_normalizer(name: str, **params) -> Normalizer:
    """A new normalizer by registry name (``"raw"``, ``"nnn"``, ``"dn"``, ``"is"``, ``"dis"``, ``"csls"``,
    ``"dualis"``, ``"dualdis"``, ``"sn"``, ``"dbsn"``)."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a string; got {type(name).__name__}")
    key = name.lower()
    if key not in NORMALIZERS:
        raise ValueError(f"unknown normalizer {name!r}; available: {sorted(NORMALIZERS)}")
    return NORMALIZERS[key](**params)
