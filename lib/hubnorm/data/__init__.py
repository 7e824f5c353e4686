"""Real-data pipeline: Karpathy-split captions, checksummed downloads, open_clip encoding, verified caches.

Data flow::

    python -m hubnorm.data fetch coco --what annotations        # Karpathy captions (pooch, md5-checked)
    python -m hubnorm.data fetch coco --what images --split test # COCO val2014 images
    python -m hubnorm.data encode coco --model ViT-B-32-quickgelu --pretrained openai --split test
    >>> hubnorm.load_embeddings("cache:coco:ViT-B-32-quickgelu:openai", splits=("test",))

Modules: :mod:`.annotations` (caption loaders), :mod:`.registry` (datasets, URLs, checksums), :mod:`.fetch`
(downloads), :mod:`.encode` (open_clip), :mod:`.cache` (npy + manifest), :mod:`.pipeline` (encode-or-load),
:mod:`.local` (precomputed embedding folders). Heavy dependencies (open_clip, pooch) load only when used.
"""

from .annotations import (
    CaptionSplit, candidate_annotation_files, load_captions, read_albef_json, read_annotations,
    read_clip_benchmark_txt, read_coco_captions_json, read_flickr8k_token, read_karpathy_json,
    read_karpathy_test_val,
)
from .cache import CacheError, entry_dir, library_versions, make_key, read_entry, write_entry
from .fetch import DownloadError, ManualDownloadRequired, fetch, retrieve
from .local import load_local_embeddings
from .paths import annotations_dir, cache_root, data_root, images_dir
from .pipeline import (
    CacheWarning, encode_command, encode_dataset, encode_split, load_cached_embeddings, parse_cache_spec,
    verify_split,
)
from .registry import DATASETS, RESOURCES, SPLITS, check_split, dataset_info, list_datasets


def __getattr__(name):  # OpenClipEncoder imports torch-heavy open_clip lazily
    if name == "OpenClipEncoder":
        from .encode import OpenClipEncoder
        return OpenClipEncoder
    raise AttributeError(name)


__all__ = [
    "CaptionSplit", "load_captions", "read_annotations", "read_karpathy_json", "read_karpathy_test_val",
    "read_clip_benchmark_txt", "read_coco_captions_json", "read_albef_json", "read_flickr8k_token",
    "candidate_annotation_files", "CacheError", "CacheWarning", "entry_dir", "library_versions", "make_key",
    "read_entry", "write_entry", "DownloadError", "ManualDownloadRequired", "fetch", "retrieve",
    "load_local_embeddings", "load_cached_embeddings", "encode_split", "encode_dataset", "verify_split",
    "encode_command", "parse_cache_spec", "annotations_dir", "cache_root", "data_root", "images_dir", "DATASETS",
    "RESOURCES", "SPLITS", "check_split", "dataset_info", "list_datasets", "OpenClipEncoder",
]
