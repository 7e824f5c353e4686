"""Two-stage retrieval: retrieve the top-k with a (normalised) bi-encoder, rerank them with a cross-encoder
(Geigle et al., "Retrieve Fast, Rerank Smart"; docs/methods.md, "Reranking").

>>> from hubnorm.rerank import rerank, SimulatedCrossEncoder
>>> ds = hn.load_embeddings("synthetic:flickr30k"); task = ds.tasks()["t2i"]
>>> ce = SimulatedCrossEncoder.from_split(ds.split("test"), "t2i")          # labelled "simulated"
>>> res = rerank(task.fit(hn.make_normalizer("nnn")), task, ce, k=20)
>>> hn.summarize_ranks(res.ranks), res.ceiling, res.pairs_per_query

Modules: :mod:`.base` (``CrossEncoder``, on-disk ``PairScoreCache``), :mod:`.blip` (``BlipITMCrossEncoder``:
BLIP image-text matching via transformers, imported lazily), :mod:`.simulated` (``SimulatedCrossEncoder``),
:mod:`.pipeline` (``rerank``, ``RerankResult``). The paper's study and cost model (notebook 06) are in the
notebooks' companion package: :mod:`hubnorm_companion.rerank_cost` (``CostModel``: Tables 3-4 of the paper) and
:mod:`hubnorm_companion.rerank_study` (``make_cross_encoder``, ``full_gallery_recall``, ``nnn_on_cross_encoder``).
"""

from .base import CacheCorruptError, CrossEncoder, PairScoreCache, check_pair_ids
from .pipeline import RerankResult, combine_scores, first_stage_topk, nnn_bias_from_pairs, rerank
from .simulated import SimulatedCrossEncoder, pair_noise

__all__ = [
    "CacheCorruptError", "CrossEncoder", "PairScoreCache", "check_pair_ids", "RerankResult", "combine_scores",
    "first_stage_topk", "nnn_bias_from_pairs", "rerank", "SimulatedCrossEncoder", "pair_noise", "BlipITMCrossEncoder",
    "offline_processor", "small_blip_config",
]


def __getattr__(name):  # transformers is heavy: import the BLIP backend only when asked for
    if name in ("BlipITMCrossEncoder", "offline_processor", "small_blip_config", "image_key", "text_key",
                "DEFAULT_BLIP_MODEL"):
        from . import blip
        return getattr(blip, name)
    raise AttributeError(f"module 'hubnorm.rerank' has no attribute {name!r}")
