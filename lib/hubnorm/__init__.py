"""hubnorm: test-time hubness reduction for cross-modal (image-text) retrieval.

Data flow: load -> encode/cache -> scores -> normalize -> evaluate -> plot.

>>> import hubnorm as hn
>>> tasks = hn.build_tasks(images, captions, caption_to_image, image_bank=train_imgs, caption_bank=train_caps)
>>> nnn = tasks["t2i"].fit(hn.NearestNeighborNormalization(alpha=0.75, k=16))
>>> hn.evaluate(nnn, tasks["t2i"])            # {'R@1': ..., 'R@5': ..., 'R@10': ..., 'MdR': ..., 'MnR': ...}
>>> hn.hubness(tasks["t2i"].blocks(nnn), k=10)   # any measure reads the task's (normalised) score blocks
>>> video = hn.RetrievalTask(scores={("queries", "targets"): S_test, ("query_bank", "targets"): S_bank},
...                          positives=hn.positives_from_pairs(rows, cols, *S_test.shape), direction="t2v")
>>> hn.evaluate(video.fit(hn.InvertedSoftmax(tau=0.05)), video)   # the same path from score matrices
>>> hn.grid_search("nnn", val_task)       # NNN App. B selection: the one public way to choose parameters
"""

from . import _lazy
from ._version import __version__

#: Every public name of ``import hubnorm`` and the module that defines it, loaded on first use (PEP 562):
#: ``import hubnorm`` itself is cheap, so the command-line tools (run_all.sh's runner, ``python -m hubnorm.data``)
#: start without torch; ``hn.<name>`` and ``from hubnorm import <name>`` work as they always did, and so does
#: ``hn.<module>`` (``hn.geometry``, ``hn.sweeps``: the module, imported on first use).
_EXPORTS = {
    **dict.fromkeys(["as_embeddings", "l2_normalize"], "_validation"),
    **dict.fromkeys(["bootstrap_ci", "evaluate", "mean_rank", "median_rank", "ndcg_at_k", "positive_ranks",
                     "recall_at_k", "summarize_ranks"], "evaluation"),
    **dict.fromkeys(["hubness", "hubness_stats", "k_occurrence"], "hubness"),
    **dict.fromkeys(["Normalizer", "NotFittedError", "Identity", "NearestNeighborNormalization",
                     "DistributionNormalization", "InvertedSoftmax", "DynamicInvertedSoftmax",
                     "CrossDomainSimilarityLocalScaling", "DualInvertedSoftmax", "DualDynamicInvertedSoftmax",
                     "LocalScaling", "MutualProximity", "DisSimLocal", "SinkhornNormalization", "DualBankSinkhornNormalization", "sinkhorn_potentials",
                     "OptimalTransportNormalization", "L2TransportNormalization", "HungarianNormalization"],
                    "normalizers"),   # hubnorm.normalizers.__all__ (tests/test_packaging.py keeps them equal)
    **dict.fromkeys(["DISPLAY_NAMES", "NORMALIZERS", "make_normalizer"], "registry"),
    **dict.fromkeys(["DIRECTIONS", "DIRECTION_NAMES", "Positives", "RetrievalTask", "build_tasks"], "retrieval"),
    **dict.fromkeys(["matrices_from_embeddings", "positives_from_pairs", "sims_tasks"], "scores"),
    **dict.fromkeys(["PAPER_GRIDS", "SelectionResult", "clamp_grid", "grid_search", "holdout_split"], "selection"),
    **dict.fromkeys(["EmbeddingDataset", "EmbeddingSplit"], "embeddings"),
    "load_embeddings": "datasets",
}
__all__ = list(_EXPORTS)


__getattr__ = _lazy.export_getattr(__name__, _EXPORTS, submodules=True)
__dir__ = _lazy.export_dir(__name__, __all__)
_lazy.keep_functions(__name__, ["hubness"])

# Modules imported by name:
#   hubnorm.geometry, hubnorm.sweeps, hubnorm.label_free, hubnorm.forensics, hubnorm.adversarial, hubnorm.media;
#   hubnorm.synthetic: the seeded generator; optional dependencies: hubnorm.index (faiss), hubnorm.data (open_clip,
#   pooch), hubnorm.rerank (transformers), hubnorm.listwise (sentence-transformers).
# The notebooks' companion package, hubnorm_companion (companion/: the papers' protocols, studies, published
# comparisons, notebook set-up), imports this library; nothing here imports it (tests/test_layering.py).
