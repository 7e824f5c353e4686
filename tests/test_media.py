"""The synthetic video / audio presets (hubnorm.media): sizes, labels, and the sources notebook 08 reads."""

from __future__ import annotations

import numpy as np
import pytest

from hubnorm import media


def test_presets_have_the_datasets_sizes():
    p = media.MEDIA_PRESETS
    assert (p["msrvtt"].n_train, p["msrvtt"].train_captions, p["msrvtt"].n_test, p["msrvtt"].test_captions) == (9000, 20, 1000, 1)
    assert (p["audiocaps"].test_captions, p["clotho"].test_captions, p["clotho"].train_captions) == (5, 5, 5)
    assert p["msrvtt"].directions == ("t2v", "v2t") and p["clotho"].directions == ("t2a", "a2t")


def test_make_media_and_tasks():
    d = media.make_media("msrvtt", n_train=12, n_test=30)
    assert d.items.shape[0] == 30 and d.captions.shape[0] == 30 and d.bank_captions.shape[0] == 12 * 20
    assert d.bank_items.shape[0] == 12 and list(d.caption_to_item) == list(range(30))
    a = media.make_media("clotho", n_train=0, n_test=20)
    assert a.captions.shape[0] == 100 and a.bank_items is None and np.all(a.caption_to_item == np.arange(20).repeat(5))
    src = media.load_media("synthetic:msrvtt", n_train=12, bank_queries=50, target_bank=10)
    assert src.directions == ("t2v", "v2t") and src.label.startswith("synthetic analog (synthetic-msrvtt")
    t = src.tasks["t2v"]
    assert (t.size("query_bank"), t.size("target_bank")) == (50, 10)
    assert src.tasks["v2t"].size("query_bank") == 12 and src.tasks["v2t"].size("target_bank") == 10
    assert (src.dataset, src.model) == ("msr-vtt", "CLIP4Clip")


def test_synthetic_is_refused_when_forbidden(monkeypatch):
    monkeypatch.setenv("HUBNORM_FORBID_SYNTHETIC", "1")
    with pytest.raises(RuntimeError, match="HUBNORM_FORBID_SYNTHETIC"):
        media.make_media("msrvtt", n_train=0, n_test=10)


def test_bad_sources_are_named():
    with pytest.raises(ValueError, match="source must be"):
        media.load_media("msrvtt")
    with pytest.raises(ValueError, match="unknown video/audio preset"):
        media.make_media("youtube")
    assert media.published_dataset("MSR-VTT 1k-A") == "msr-vtt" and media.published_dataset("mine") is None


def test_a_local_folder_declares_its_data_set_never_its_name(tmp_path):
    """Notebook 08's published rows follow what a local: folder declares (model_info.json "dataset"), never words
    in the folder's name (a folder called flickr8k-... once gave the Flickr30k rows)."""
    import json
    import shutil

    from local_folders import make_folder

    folder = tmp_path / "flickr8k-msrvtt-100x5"          # names two data sets: neither is a declaration
    shutil.copytree(make_folder(tmp_path, "percap5-texts-clip"), folder)
    assert media.load_media(f"local:{folder}").dataset is None
    info = json.loads((folder / "model_info.json").read_text())
    (folder / "model_info.json").write_text(json.dumps({**info, "dataset": "MSR-VTT 1k-A"}))
    assert media.load_media(f"local:{folder}").dataset == "msr-vtt"
    assert media.load_media(f"local:{folder}", dataset="didemo").dataset == "didemo"


def test_a_sims_folder_declares_its_data_set_never_its_name(tmp_path):
    """Issue 44: a sims folder without a declared dataset got the published rows its folder's name suggested (a
    folder msrvtt_mine got CLIP4Clip's MSR-VTT numbers beside it)."""
    import json

    from test_sims import write_example

    folder = tmp_path / "msrvtt_mine"
    write_example(folder)
    man = json.loads((folder / "manifest.json").read_text())
    del man["dataset"]
    (folder / "manifest.json").write_text(json.dumps(man))
    assert media.load_media(f"sims:{folder}").dataset is None
    (folder / "manifest.json").write_text(json.dumps({**man, "dataset": "MSR-VTT 1k-A"}))
    assert media.load_media(f"sims:{folder}").dataset == "msr-vtt"


def test_local_embeddings_are_normalised_and_checked_as_in_every_notebook(tmp_path):
    """Issue 44: notebook 08 took local: embeddings as they were (changing vector lengths dropped IS R@1 from 100
    to 66.7; a zero vector was accepted); now the rule of prepare_dataset: unit rows, a zero row an error."""
    import shutil

    import numpy as np

    from local_folders import make_folder

    folder = tmp_path / "mine"
    shutil.copytree(make_folder(tmp_path, "percap5-texts-clip"), folder)
    ref = media.load_media(f"local:{folder}")
    caps = np.load(folder / "text_embeddings.npy")
    scale = np.random.default_rng(0).uniform(0.2, 5.0, size=(len(caps), 1)).astype(caps.dtype)
    np.save(folder / "text_embeddings.npy", caps * scale)     # another exporter's vector lengths
    scaled = media.load_media(f"local:{folder}")
    for d in ref.tasks:
        assert scaled.tasks[d].evaluate(None) == pytest.approx(ref.tasks[d].evaluate(None), abs=1e-9)
    caps[3] = 0
    np.save(folder / "text_embeddings.npy", caps)
    with pytest.raises(ValueError, match="all-zero row"):
        media.load_media(f"local:{folder}")
