"""The sims folder's consistency checks (issue 44, scope 1): every mistake of the catalogue (tests/sims_mistakes.py)
is refused with a message naming it, right folders of several shapes load without a word, ``consistency=False``
turns a finding into a warning carried by the results, and a file changed during the read is refused."""
import json
import warnings
from pathlib import Path

import numpy as np
import pytest

import hubnorm as hn
from hubnorm.data import sims as sims_mod
from hubnorm.data.sims import SimsError, SimsWarning, load_sims
from hubnorm.scores import sims_tasks

from conftest import shared_path
from sims_mistakes import MISTAKES, right_spec, write_spec


@pytest.mark.parametrize("mistake, message", MISTAKES, ids=[m.__name__ for m, _ in MISTAKES])
def test_every_mistake_is_refused_naming_it(tmp_path, mistake, message):
    write_spec(tmp_path, mistake(right_spec()))
    with pytest.raises(SimsError, match=message):
        load_sims(tmp_path)


@pytest.mark.parametrize("seed, per_item, n_items, n_bank", [(0, 2, 200, 400), (1, 1, 200, 400), (2, 5, 100, 300),
                                                             (3, 1, 30, 60), (4, 3, 500, 1000), (5, 1, 20, 10)])
def test_right_folders_load_without_a_word(tmp_path, seed, per_item, n_items, n_bank):
    write_spec(tmp_path, right_spec(seed=seed, per_item=per_item, n_items=n_items, n_bank=n_bank))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        folder = load_sims(tmp_path)
    assert folder.flags == []


def test_the_right_folder_of_the_catalogue_loads(tmp_path):
    """The catalogue's mistakes start from a folder that is right (so each refusal is the mistake's)."""
    write_spec(tmp_path, right_spec())
    tasks = sims_tasks(load_sims(tmp_path))
    assert hn.evaluate(None, tasks["t2v"])["R@1"] > 20 and tasks["t2v"].meta["flags"] == []


def test_consistency_false_warns_and_the_results_carry_the_flag(tmp_path):
    from sims_mistakes import bank_rows_columns_permuted
    write_spec(tmp_path, bank_rows_columns_permuted(right_spec()))
    with pytest.warns(SimsWarning, match="does not describe the test items"):
        folder = load_sims(tmp_path, consistency=False)
    assert len(folder.flags) == 1
    tasks = sims_tasks(folder)
    assert tasks["t2v"].meta["flags"] == folder.flags


def test_a_file_changed_during_the_read_is_refused(tmp_path, monkeypatch):
    write_spec(tmp_path, right_spec(n_items=40, n_bank=80))
    real_scan = sims_mod.scan_npy

    def scan_then_rewrite(path, arr, what, **kw):
        out = real_scan(path, arr, what, **kw)
        if what == "matrix 'test'":   # another writer replaces the positives after the test matrix was read
            labels = tmp_path / "positives_labels.npy"
            np.save(tmp_path / "new.npy", np.roll(np.load(labels), 1))
            (tmp_path / "new.npy").replace(labels)
        return out

    monkeypatch.setattr(sims_mod, "scan_npy", scan_then_rewrite)
    with pytest.raises(SimsError) as e:
        load_sims(tmp_path, verify=False)
    assert str(e.value) == (f"{tmp_path / 'positives_labels.npy'} changed while the folder was read: its matrices and "
                            "positives may come from two versions; load it again once the writer has finished")


def test_positives_are_read_once_and_the_bytes_hashed_are_the_bytes_parsed(tmp_path, monkeypatch):
    write_spec(tmp_path, right_spec(n_items=40, n_bank=80))
    opened = []
    real = Path.read_bytes

    def spy(self):
        opened.append(self.name)
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", spy)
    load_sims(tmp_path)
    assert opened.count("positives_labels.npy") == 1


@pytest.mark.parametrize("release", ["coco500-clip-b16", "flickr8k-100x5-clip-b32", "audiocaps-clap"])
def test_real_releases_written_as_folders_pass_and_their_mistakes_do_not(tmp_path, release, monkeypatch):
    """A right folder from real embeddings loads; the same folder with its bank columns permuted, its positives
    shifted and its bank replaced by the test queries is refused (seeded half split of the release)."""
    monkeypatch.setenv("HUBNORM_REAL_MIRROR", str(shared_path("embeddings")))   # skips, saying why, without it
    from hubnorm.data.real import release_arrays
    items, caps, c2i = release_arrays(release, cache_dir=tmp_path / "cache")
    unit = lambda x: np.asarray(x, np.float64) / np.linalg.norm(x, axis=1, keepdims=True)   # noqa: E731
    items, caps = unit(items), unit(caps)
    perm = np.random.default_rng(0).permutation(len(items))
    te, tr = np.sort(perm[: len(items) // 2]), np.sort(perm[len(items) // 2:])
    rows = np.isin(c2i, te)
    labels = np.searchsorted(te, c2i[rows])
    bank_caps = caps[np.isin(c2i, tr)]
    right = {"test": caps[rows] @ items[te].T, "bank_rows": bank_caps @ items[te].T,
             "bank_cols": items[tr] @ caps[rows].T, "bank_rows_x_bank_cols": bank_caps @ items[tr].T}
    modalities = ("text", "audio" if release.startswith("audio") else "image")
    cases = {"right": right,
             "bank columns permuted": dict(right, bank_rows=right["bank_rows"][:, perm[: len(te)] % len(te)][:, ::-1]),
             "bank is the test queries": dict(right, bank_rows=right["test"])}
    for name, mats in cases.items():
        folder = tmp_path / name.replace(" ", "_")
        hn.data.sims.write_sims(folder, mats, modalities=modalities, labels=labels, dataset=release)
        if name == "right":
            assert load_sims(folder).flags == []
        else:
            with pytest.raises(SimsError):
                load_sims(folder)
    folder = tmp_path / "shifted"
    hn.data.sims.write_sims(folder, right, modalities=modalities, labels=np.roll(labels, 1), dataset=release)
    with pytest.raises(SimsError, match="shifted|chance"):
        load_sims(folder)


def test_manifest_fields_are_typed(tmp_path):
    write_spec(tmp_path, right_spec(n_items=40, n_bank=80))
    man = json.loads((tmp_path / "manifest.json").read_text())
    for key, value, match in (("synthetic", "true", "'synthetic' must be true or false"),
                              ("model", "", "'model' must be a non-empty string")):
        (tmp_path / "manifest.json").write_text(json.dumps(dict(man, **{key: value})))
        with pytest.raises(SimsError, match=match):
            load_sims(tmp_path)
