"""Real-data pipeline: Karpathy-split captions, checksummed downloads, encoding (open_clip: CLIP, SigLIP;
transformers: BLIP ITC), verified caches, and synthetic rehearsal caches with the real split sizes.

Data flow::

    python -m hubnorm.data fetch coco --what annotations        # Karpathy captions (pooch, md5-checked)
    python -m hubnorm.data fetch coco --what images --split test # COCO val2014 images
    python -m hubnorm.data encode coco --model ViT-B-32-quickgelu --pretrained openai --split test
    >>> hubnorm.load_embeddings("cache:coco:ViT-B-32-quickgelu:openai", splits=("test",))
    python -m hubnorm.data rehearse --dataset coco                 # SYNTHETIC, exact split sizes
    >>> hubnorm.load_embeddings("cache:coco:synthetic-rehearsal:seed0")
    python -m hubnorm.data fetch-real                               # real releases (pinned commit + sha256)
    >>> hubnorm.load_embeddings("real:coco500-clip-b16")

Modules: :mod:`.annotations` (caption loaders), :mod:`.registry` (datasets, URLs, checksums), :mod:`.fetch`
(downloads), :mod:`.encoders` (one interface, :func:`get_encoder`; families open_clip, BLIP ITC and the sentence
encoder of RSC relevance), :mod:`.cache` (npy + JSON manifests: named split entries and content-addressed
encodings), :mod:`.pipeline` (encode-or-load), :mod:`.rehearse` (synthetic rehearsal caches), :mod:`.models`
(:func:`published_model_name`), :mod:`.local` (precomputed embedding folders), :mod:`.real` (small public releases of
real embeddings, fetched by pinned commit and sha256), :mod:`.blip_offline` (BLIP processor and config built
without downloads), :mod:`.sources` (the one table of source kinds, ``<kind>:<rest>``, and their loaders). Heavy
dependencies (open_clip, pooch) load only when used. Layering: this package imports only
leaf modules of hubnorm (``_version``, ``_validation``, ``progress``) and the containers (``embeddings``,
``retrieval``, ``synthetic``), never a module above it (``tests/test_import_graph.py``).
"""

from .._lazy import export_dir as _export_dir
from .._lazy import export_getattr as _export_getattr
from .._lazy import keep_functions as _keep_functions

#: Every public name and the module that defines it, loaded on first use (PEP 562): ``import hubnorm.data`` (and
#: run_all.sh's runner, which reads the rehearsal sizes through it) starts without torch, and the encoders' open_clip
#: / transformers load only when an encoder is asked for.
_EXPORTS = {
    **dict.fromkeys(["CaptionSplit", "candidate_annotation_files", "load_captions", "read_albef_json",
                     "read_annotations", "read_clip_benchmark_txt", "read_coco_captions_json", "read_flickr8k_token",
                     "read_karpathy_json", "read_karpathy_test_val"], "annotations"),
    **dict.fromkeys(["CacheError", "entry_dir", "library_versions", "make_key", "read_entry", "write_entry"], "cache"),
    **dict.fromkeys(["DownloadError", "ManualDownloadRequired", "fetch", "retrieve"], "fetch"),
    "load_local_embeddings": "local",
    **dict.fromkeys(["PUBLISHED_MODELS", "published_model_name"], "models"),
    **dict.fromkeys(["annotations_dir", "cache_root", "data_root", "images_dir"], "paths"),
    **dict.fromkeys(["CacheWarning", "encode_command", "encode_dataset", "encode_split", "load_cached_embeddings",
                     "parse_cache_spec", "verify_split"], "pipeline"),
    **dict.fromkeys(["DATASETS", "RESOURCES", "SPLITS", "check_split", "dataset_info", "list_datasets"], "registry"),
    **dict.fromkeys(["Encoder", "OpenClipEncoder", "BlipItcEncoder", "SentenceEncoder", "get_encoder", "infer_family",
                     "ENCODER_FAMILIES"], "encoders"),
    **dict.fromkeys(["rehearse", "SIZES"], "rehearse"),
    **dict.fromkeys(["RELEASES", "RealDataUnavailable", "fetch_real", "load_real", "real_galleries", "real_status",
                     "release_arrays", "clip_index"], "real"),
}


__getattr__ = _export_getattr(__name__, _EXPORTS)
_keep_functions(__name__, ["fetch", "rehearse"])


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
    "SIZES", "RELEASES", "RealDataUnavailable", "fetch_real", "load_real", "real_galleries", "real_status",
    "clip_index",
    "release_arrays",
]
__dir__ = _export_dir(__name__, __all__)
