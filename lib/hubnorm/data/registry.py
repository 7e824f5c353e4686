"""Registry of the datasets and downloadable resources the real-data pipeline knows.

Checksums were collected from public code that pins them (sources recorded in ``hash_source``). Where sources
disagree, every published value is accepted (``known_hash`` None plus ``accepted_hashes``): the file is then
checked after the download instead of by pooch.
"""

from __future__ import annotations

from typing import Dict, List, Optional

# ------------------------------------------------------------------------------------------ resources
RESOURCES: Dict[str, dict] = {
    "karpathy_captions": {
        "url": "https://cs.stanford.edu/people/karpathy/deepimagesent/caption_datasets.zip",
        "fname": "caption_datasets.zip",
        "known_hash": "md5:4fa8c08369d22fe16e41dc124bd1adc2",
        "hash_source": "mlverse/torchvision (R), flickr30k_caption_dataset resources",
        "size": "a few tens of MB",
        "kind": "annotations",
        # extracted into <data root>/annotations/
        "members": ["dataset_coco.json", "dataset_flickr30k.json", "dataset_flickr8k.json"],
        "description": "Karpathy splits (dataset_coco.json, dataset_flickr30k.json, dataset_flickr8k.json)",
    },
    "coco_val2014": {
        "url": "http://images.cocodataset.org/zips/val2014.zip",
        "fname": "val2014.zip",
        "known_hash": "md5:a3d79f5ed8d289b7a7554ce06a5782b3",
        "hash_source": "salesforce/LAVIS coco builders; mlverse/torchvision (R); chainer-era COCO loaders",
        "size": "about 6.2 GB (40,504 images)",
        "kind": "images",
        "description": "COCO 2014 val images: Karpathy test, val and restval",
    },
    "coco_train2014": {
        "url": "http://images.cocodataset.org/zips/train2014.zip",
        "fname": "train2014.zip",
        # two values are published: LAVIS et al. vs mlverse/torchvision (R); accept either
        "known_hash": None,
        "accepted_hashes": ["md5:0da8c0bd3d6becc4dcb32757491aca88", "md5:0da8cfa0e090c266b78f30e2d2874f1a"],
        "hash_source": "salesforce/LAVIS (0da8c0bd...); mlverse/torchvision R package (0da8cfa0...)",
        "size": "about 13 GB (82,783 images)",
        "kind": "images",
        "description": "COCO 2014 train images: Karpathy train",
    },
    "coco_val2017": {
        "url": "http://images.cocodataset.org/zips/val2017.zip",
        "fname": "val2017.zip",
        "known_hash": "md5:442b8da7639aecaf257c1dceb8ba8c80",
        "hash_source": "several COCO download scripts (e.g. mlverse/torchvision, detection tool-kits)",
        "size": "about 778 MB (5,000 images)",
        "kind": "images",
        "description": "COCO 2017 val images (not used by the Karpathy split)",
    },
    "coco_train2017": {
        "url": "http://images.cocodataset.org/zips/train2017.zip",
        "fname": "train2017.zip",
        "known_hash": "md5:cced6f7f71b7629ddf16f17bbcfab6b2",
        "hash_source": "several COCO download scripts (e.g. mlverse/torchvision, detection tool-kits)",
        "size": "about 18 GB (118,287 images)",
        "kind": "images",
        "description": "COCO 2017 train images (not used by the Karpathy split)",
    },
    "coco_annotations_trainval2017": {
        "url": "http://images.cocodataset.org/annotations/annotations_trainval2017.zip",
        "fname": "annotations_trainval2017.zip",
        "known_hash": "md5:f4bbac642086de4f52a3fdda2de5fa2c",
        "hash_source": "several COCO download scripts",
        "size": "about 241 MB",
        "kind": "annotations",
        "description": "COCO 2017 instances/captions annotations (not needed for the Karpathy split)",
    },
    # CLIP_benchmark's test annotations (github.com/mehdidc/retrieval_annotations, release 1.0.0): no published
    # checksum, so pooch prints the hash it sees (unverified).
    "clip_benchmark_coco_test": {
        "url": "https://github.com/mehdidc/retrieval_annotations/releases/download/1.0.0/coco_test_karpathy.json",
        "fname": "coco_test_karpathy.json",
        "known_hash": None,
        "hash_source": "none published (unverified)",
        "size": "a few MB",
        "kind": "annotations",
        "description": "CLIP_benchmark COCO Karpathy test captions (COCO captions format)",
    },
    "clip_benchmark_flickr30k_test": {
        "url": "https://github.com/mehdidc/retrieval_annotations/releases/download/1.0.0/flickr30k_test_karpathy.txt",
        "fname": "flickr30k_test_karpathy.txt",
        "known_hash": None,
        "hash_source": "none published (unverified)",
        "size": "about 0.4 MB",
        "kind": "annotations",
        "description": "CLIP_benchmark Flickr30k Karpathy test captions (image,caption lines)",
    },
}

FLICKR30K_MANUAL = """\
Flickr30k images cannot be downloaded automatically (the owners hand them out after a request form).
Get flickr30k-images (31,783 JPEGs, about 4.4 GB) from the form at
https://shannon.cs.illinois.edu/DenotationGraph/ (or a mirror you are licensed to use, e.g. the Kaggle
"flickr30k" datasets), then put the JPEG files directly (no sub-folder) in:
    {images_dir}
so that e.g. {images_dir}/1007129816.jpg exists. Then run:
    python -m hubnorm.data fetch flickr30k --what annotations
    python -m hubnorm.data encode flickr30k --model ViT-B-32-quickgelu --pretrained openai --split test"""

FLICKR8K_MANUAL = """\
Flickr8k images cannot be downloaded automatically (request form / licence). Get Flickr8k_Dataset
(8,091 JPEGs) from https://forms.illinois.edu/sec/1713398 (or a mirror you are licensed to use) and put the
JPEG files directly (no sub-folder) in:
    {images_dir}
so that e.g. {images_dir}/1000268201_693b08cb0e.jpg exists. Captions: `python -m hubnorm.data fetch flickr8k
--what annotations` (Karpathy dataset_flickr8k.json) or the official Flickr8k.token.txt + Flickr_8k.*Images.txt
files placed in <data root>/annotations/."""

# ------------------------------------------------------------------------------------------- datasets
#: The data sets the loaders know: ``description``; ``splits`` {split: (images, captions)} of the Karpathy split;
#: ``annotations`` / ``images`` (resource names, or "manual" with the ``manual`` text); ``images_layout``; and
#: optionally ``cross_dataset``: the data set whose training split the papers use as the "other" reference bank
#: (NNN Table 2: Flickr30k evaluated with a COCO bank and the reverse), read by
#: ``hubnorm_companion.protocol.cross_dataset_source``.
DATASETS: Dict[str, dict] = {
    "coco": {
        "description": "MS-COCO 2014, Karpathy split (restval counted as train)",
        "splits": {"train": (113287, None), "val": (5000, 25010), "test": (5000, 25010)},
        "annotations": ["karpathy_captions"],
        "images": {"test": ["coco_val2014"], "val": ["coco_val2014"], "train": ["coco_train2014", "coco_val2014"]},
        "images_layout": "<data root>/coco/images/val2014/COCO_val2014_*.jpg and .../train2014/COCO_train2014_*.jpg",
        "manual": None,
        "cross_dataset": "flickr30k",
    },
    "flickr30k": {
        "description": "Flickr30k, Karpathy split (29,000 train / 1,014 val / 1,000 test images, 5 captions each)",
        "splits": {"train": (29000, 145000), "val": (1014, 5070), "test": (1000, 5000)},
        "annotations": ["karpathy_captions"],
        "images": "manual",
        "images_layout": "<data root>/flickr30k/images/<image id>.jpg (flat)",
        "manual": FLICKR30K_MANUAL,
        "cross_dataset": "coco",
    },
    "flickr8k": {
        "description": "Flickr8k, official/Karpathy split (6,000 train / 1,000 val / 1,000 test images, 5 captions each)",
        "splits": {"train": (6000, 30000), "val": (1000, 5000), "test": (1000, 5000)},
        "annotations": ["karpathy_captions"],
        "images": "manual",
        "images_layout": "<data root>/flickr8k/images/<name>.jpg (flat)",
        "manual": FLICKR8K_MANUAL,
    },
}

SPLITS = ("train", "val", "test")


def dataset_info(name: str) -> dict:
    """The registry entry of a dataset; ValueError naming the known datasets otherwise."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; known datasets: {sorted(DATASETS)}")
    return DATASETS[name]


def cross_dataset(name: str) -> Optional[str]:
    """The data set whose bank the papers pair with ``name`` in their cross-dataset rows, or None (none
    declared, or ``name`` unknown)."""
    return DATASETS.get(name, {}).get("cross_dataset")


def check_split(split: str, dataset: str = "") -> str:
    """Validate a split name (``restval`` is folded into ``train`` by the loaders; ``dev`` means ``val``)."""
    if split not in SPLITS:
        where = f" of {dataset!r}" if dataset else ""
        raise ValueError(f"unknown split {split!r}{where}; valid splits: {list(SPLITS)} "
                         "(Karpathy 'restval' is part of 'train'; Flickr8k 'dev' is 'val')")
    return split


def list_datasets() -> List[str]:
    return sorted(DATASETS)
