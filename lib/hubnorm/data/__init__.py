"""Real-data pipeline: Karpathy-split captions, checksummed downloads, encoding (open_clip: CLIP, SigLIP;
transformers: BLIP ITC), verified caches, and synthetic rehearsal caches with the real split sizes.

Data flow::

    python -m hubnorm.data fetch coco --what annotations        # Karpathy captions (pooch, md5-checked)
    python -m hubnorm.data fetch coco --what images --split test # COCO val2014 images
    python -m hubnorm.data encode coco --model ViT-B-32-quickgelu --pretrained openai --split test
    >>> hubnorm.load_embeddings("cache:coco:ViT-B-32-quickgelu:openai", splits=("test",))
    python -m hubnorm.data rehearse --profile paper-coco           # SYNTHETIC, exact split sizes
    >>> hubnorm.load_embeddings("cache:coco:synthetic-rehearsal:seed0")

Modules: :mod:`.annotations` (caption loaders), :mod:`.registry` (datasets, URLs, checksums), :mod:`.fetch`
(downloads), :mod:`.encoders` (one interface, :func:`get_encoder`; families open_clip, BLIP ITC and the sentence
encoder of RSC relevance), :mod:`.cache` (npy + JSON manifests: named split entries and content-addressed
encodings), :mod:`.pipeline` (encode-or-load), :mod:`.rehearse` (synthetic rehearsal caches), :mod:`.models`
(:func:`published_model_name`), :mod:`.local` (precomputed embedding folders), :mod:`.blip_offline` (BLIP processor
and config built without downloads). Heavy dependencies (open_clip, pooch) load only when used. Layering: this package imports only
leaf modules of hubnorm (``_version``, ``_validation``, ``progress``) and the containers (``embeddings``,
``retrieval``, ``synthetic``), never a module above it (``tests/test_import_graph.py``).
"""

from .annotations import (
    CaptionSplit, candidate_annotation_files, load_captions, read_albef_json, read_annotations,
    read_clip_benchmark_txt, read_coco_captions_json, read_flickr8k_token, read_karpathy_json,
    read_karpathy_test_val,
)
from .cache import CacheError, entry_dir, library_versions, make_key, read_entry, write_entry
from .fetch import DownloadError, ManualDownloadRequired, fetch, retrieve
from .local import load_local_embeddings
from .models import PUBLISHED_MODELS, published_model_name
from .paths import annotations_dir, cache_root, data_root, images_dir
from .pipeline import (
    CacheWarning, encode_command, encode_dataset, encode_split, load_cached_embeddings, parse_cache_spec,
    verify_split,
)
from .registry import DATASETS, RESOURCES, SPLITS, check_split, dataset_info, list_datasets


def __getattr__(name):  # the encoders import torch-heavy open_clip / transformers lazily
    if name in ("Encoder", "OpenClipEncoder", "BlipItcEncoder", "SentenceEncoder", "get_encoder", "infer_family",
                "ENCODER_FAMILIES"):
        from . import encoders
        return getattr(encoders, name)
    if name in ("rehearse", "PROFILES"):
        from . import rehearse as _rehearse
        return getattr(_rehearse, name)
    raise AttributeError(name)


__all__ = [
    "CaptionSplit", "load_captions", "read_annotations", "read_karpathy_json", "read_karpathy_test_val",
    "read_clip_benchmark_txt", "read_coco_captions_json", "read_albef_json", "read_flickr8k_token",
    "candidate_annotation_files", "CacheError", "CacheWarning", "entry_dir", "library_versions", "make_key",
    "read_entry", "write_entry", "DownloadError", "ManualDownloadRequired", "fetch", "retrieve",
    "load_local_embeddings", "load_cached_embeddings", "encode_split", "encode_dataset", "verify_split",
    "encode_command", "parse_cache_spec", "annotations_dir", "cache_root", "data_root", "images_dir", "DATASETS",
    "RESOURCES", "SPLITS", "check_split", "dataset_info", "list_datasets", "Encoder", "OpenClipEncoder",
    "BlipItcEncoder", "SentenceEncoder",
    "get_encoder", "infer_family", "ENCODER_FAMILIES", "published_model_name", "PUBLISHED_MODELS", "rehearse",
    "PROFILES",
]
