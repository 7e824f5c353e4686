"""Listwise relevance for image-text retrieval (Li et al., "Integrating Listwise Ranking into Pairwise-based
Image-Text Retrieval", 2023), split by concern:

- :mod:`.relevance`: graded relevance, RSC with a sentence encoder (Eq. 7-8; default all-MiniLM-L6-v2, loaded
  offline), or :func:`content_relevance` from per-image content vectors the caller passes;
- :mod:`.metrics`: NDCG@K (Eq. 4-6) next to R@K for raw scores and any normalizer;
- :mod:`.losses`: the Smooth-NDCG loss (Eq. 16-21, with the official code's sign) and the VSE++ triplet loss;
- :mod:`.adapter`: a residual linear adapter on frozen embeddings, its training loop and the loss ablation
  (an analog of Tables V-VII, not a reproduction of the paper's models);
- :mod:`.validation`: input checks shared by the modules.

>>> from hubnorm import listwise as lw
>>> rel, label = lw.relevance_for_split(split)                 # RSC from split.caption_texts
>>> df = lw.evaluate_listwise(tasks, rel, {"NNN": hn.make_normalizer("nnn")})
>>> lw.metric_table(df)                                         # R@1 R@5 R@10 NDCG@5 NDCG@10 NDCG@20
"""

from .adapter import LOSSES, AdapterRun, LinearAdapter, adapter_study, drawn_images, train_adapter
from .losses import hard_rank, smooth_ndcg, smooth_ndcg_loss, smooth_rank, triplet_loss
from .metrics import evaluate_listwise, listwise_metrics, metric_table, ndcg_at_ks, top_candidates
from .relevance import (DEFAULT_TEXT_ENCODER, RSC, SentenceEncoder, batch_relevance_fn, content_relevance,
                        encode_texts, load_text_encoder, relevance_for_split, rsc_from_texts, rsc_relevance)

__all__ = [
    "DEFAULT_TEXT_ENCODER", "SentenceEncoder", "load_text_encoder", "encode_texts", "RSC", "rsc_relevance",
    "rsc_from_texts", "content_relevance", "relevance_for_split", "batch_relevance_fn", "listwise_metrics",
    "ndcg_at_ks",
    "top_candidates", "evaluate_listwise", "metric_table", "smooth_rank", "hard_rank", "smooth_ndcg",
    "smooth_ndcg_loss", "triplet_loss", "LinearAdapter", "AdapterRun", "train_adapter", "drawn_images", "adapter_study", "LOSSES",
]
