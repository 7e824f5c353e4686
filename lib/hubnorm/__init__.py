"""hubnorm: test-time hubness reduction for cross-modal (image-text) retrieval.

Data flow: load -> encode/cache -> scores -> normalize -> evaluate -> plot.

>>> import hubnorm as hn
>>> tasks = hn.build_tasks(images, captions, caption_to_image, image_bank=train_imgs, caption_bank=train_caps)
>>> nnn = tasks["t2i"].fit(hn.NearestNeighborNormalization(alpha=0.75, k=16))
>>> hn.evaluate(nnn, tasks["t2i"])            # {'R@1': ..., 'R@5': ..., 'R@10': ..., 'MdR': ..., 'MnR': ...}
>>> hn.hubness(nnn, k=10, queries=tasks["t2i"].queries)
>>> hn.grid_search("nnn", val_task)       # NNN App. B selection: the one public way to choose parameters
"""

from ._validation import as_embeddings, l2_normalize
from ._version import __version__
from .evaluation import (
    bootstrap_ci, evaluate, mean_rank, median_rank, ndcg_at_k, positive_ranks, recall_at_k, summarize_ranks,
)
from .hubness import hubness, hubness_stats, k_occurrence
from .normalizers import *  # noqa: F401,F403
from .normalizers import __all__ as _normalizer_names
from .registry import DISPLAY_NAMES, NORMALIZERS, make_normalizer
from .retrieval import DIRECTIONS, Positives, RetrievalTask, build_tasks
from .scores import ScoreTask, matrices_from_embeddings
from .selection import PAPER_GRIDS, SelectionResult, grid_search, holdout_split

__all__ = list(_normalizer_names) + [
    "as_embeddings", "l2_normalize", "bootstrap_ci", "evaluate", "mean_rank", "median_rank", "ndcg_at_k",
    "positive_ranks", "recall_at_k", "summarize_ranks", "hubness", "hubness_stats", "k_occurrence",
    "DISPLAY_NAMES", "NORMALIZERS", "make_normalizer", "DIRECTIONS", "Positives", "RetrievalTask", "build_tasks",
    "PAPER_GRIDS", "SelectionResult", "grid_search", "holdout_split", "ScoreTask", "matrices_from_embeddings",
]

from .datasets import load_embeddings  # noqa: E402
from .embeddings import EmbeddingDataset, EmbeddingSplit  # noqa: E402

__all__ += ["EmbeddingDataset", "EmbeddingSplit", "load_embeddings"]
# Modules imported by name:
#   hubnorm.geometry, hubnorm.sweeps, hubnorm.label_free, hubnorm.forensics, hubnorm.adversarial, hubnorm.media;
#   hubnorm.synthetic: the seeded generator; optional dependencies: hubnorm.index (faiss), hubnorm.data (open_clip,
#   pooch), hubnorm.rerank (transformers), hubnorm.listwise (sentence-transformers).
# The experiments layer, hubnorm.experiments (the papers' protocols, studies, published comparisons, notebook
# set-up), imports this core; nothing here imports it (tests/test_layering.py).
