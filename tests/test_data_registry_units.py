"""Unit checks of hubnorm.data.registry's functions (the data sets and resources the real-data pipeline knows), aimed
at what its mutation run found unchecked: ``dataset_info``'s entry and its error naming the known data sets,
``cross_dataset``'s pairs (COCO <-> Flickr30k, none for Flickr8k or an unknown name), ``check_split``'s accepted
names and its whole message with and without a data set, and ``list_datasets``.

Mutation run (``--tests tests/test_data_fetch_units.py tests/test_protocol.py tests/test_registry_units.py`` [+ this
file]; ``tests/test_data_fetch.py`` left out: its real tqdm bars can hang mutmut's forked runs): 15 of 22 killed
(68%) -> 22 of 22; no survivor was judged equivalent.
"""

from __future__ import annotations

import pytest

from hubnorm.data.registry import DATASETS, SPLITS, check_split, cross_dataset, dataset_info, list_datasets

SPLIT_HINT = "valid splits: ['train', 'val', 'test'] (Karpathy 'restval' is part of 'train'; Flickr8k 'dev' is 'val')"


def test_dataset_info_returns_the_registry_entry():
    for name in ("coco", "flickr30k", "flickr8k"):
        assert dataset_info(name) is DATASETS[name]
    assert dataset_info("coco")["splits"]["test"] == (5000, 25010)


@pytest.mark.parametrize("name", ["imagenet", "COCO", ""])
def test_dataset_info_names_the_known_datasets(name):
    with pytest.raises(ValueError) as err:
        dataset_info(name)
    assert str(err.value) == f"unknown dataset {name!r}; known datasets: ['coco', 'flickr30k', 'flickr8k']"


def test_cross_dataset_pairs():
    assert cross_dataset("coco") == "flickr30k"
    assert cross_dataset("flickr30k") == "coco"
    assert cross_dataset("flickr8k") is None
    assert cross_dataset("imagenet") is None


def test_check_split_returns_a_valid_split():
    assert SPLITS == ("train", "val", "test")
    for split in SPLITS:
        assert check_split(split) == split
        assert check_split(split, "coco") == split


def test_check_split_error_without_a_dataset():
    with pytest.raises(ValueError) as err:
        check_split("restval")
    assert str(err.value) == f"unknown split 'restval'; {SPLIT_HINT}"


def test_check_split_error_names_the_dataset():
    with pytest.raises(ValueError) as err:
        check_split("dev", "flickr8k")
    assert str(err.value) == f"unknown split 'dev' of 'flickr8k'; {SPLIT_HINT}"
    with pytest.raises(ValueError, match=r"^unknown split 'Test'; valid"):
        check_split("Test", "")


def test_list_datasets_is_sorted():
    assert list_datasets() == ["coco", "flickr30k", "flickr8k"]
    assert list_datasets() is not list_datasets()   # a new list each call
