"""Units of the ``hubnorm.rerank`` package namespace: the BLIP names are read from ``hubnorm.rerank.blip`` when first
asked (transformers is heavy), every other unknown name is an AttributeError naming the package."""

import pytest

import hubnorm.rerank as rerank

LAZY = ("BlipITMCrossEncoder", "offline_processor", "small_blip_config", "image_key", "text_key", "DEFAULT_BLIP_MODEL")


@pytest.mark.parametrize("name", LAZY)
def test_each_blip_name_is_the_blip_modules_own(name):
    from hubnorm.rerank import blip

    assert getattr(rerank, name) is getattr(blip, name)


@pytest.mark.parametrize("name", ["no_such_name", "blip_helper", "Blip"])
def test_an_unknown_name_is_an_attribute_error_naming_the_package(name):
    with pytest.raises(AttributeError, match=rf"^module 'hubnorm.rerank' has no attribute '{name}'$"):
        getattr(rerank, name)


def test_every_public_name_resolves():
    assert all(getattr(rerank, name) is not None for name in rerank.__all__)
    assert set(LAZY[:3]) <= set(rerank.__all__)
