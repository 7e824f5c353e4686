"""Test-time normalizers: a method is one module (its equation, parameters and limits, plain form, offsets as
reductions over score blocks, optional one-pass grid), sharing :class:`~hubnorm.normalizers.base.Normalizer` and
registered by one line in :mod:`hubnorm.registry` (docs/methods.md, "Where a new method goes")."""

from .base import Identity, Normalizer, NotFittedError
from .csls import CrossDomainSimilarityLocalScaling
from .dissimlocal import DisSimLocal
from .distribution_normalization import DistributionNormalization
from .dual_inverted_softmax import DualDynamicInvertedSoftmax, DualInvertedSoftmax
from .dynamic_inverted_softmax import DynamicInvertedSoftmax
from .hungarian import HungarianNormalization
from .inverted_softmax import InvertedSoftmax
from .l2_transport import L2TransportNormalization
from .local_scaling import LocalScaling
from .mutual_proximity import MutualProximity
from .nnn import NearestNeighborNormalization
from .optimal_transport import OptimalTransportNormalization
from .sinkhorn import DualBankSinkhornNormalization, SinkhornNormalization, sinkhorn_potentials

__all__ = [
    "Normalizer", "NotFittedError", "Identity", "NearestNeighborNormalization", "DistributionNormalization",
    "InvertedSoftmax", "DynamicInvertedSoftmax", "CrossDomainSimilarityLocalScaling", "DualInvertedSoftmax",
    "DualDynamicInvertedSoftmax", "LocalScaling", "MutualProximity", "DisSimLocal", "SinkhornNormalization", "DualBankSinkhornNormalization", "sinkhorn_potentials",
    "OptimalTransportNormalization", "L2TransportNormalization", "HungarianNormalization",
]
