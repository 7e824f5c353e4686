"""The guards of hubnorm.data.sims by their whole messages (a user reads them to fix a folder), and the verifying
pass over the files: the largest |s| it reports, the blocks of rows it hands to the consistency checks, what
``verify`` / ``scan`` turn off, the order in which the files are read."""

from __future__ import annotations

import hashlib
import json
import os
import warnings

import numpy as np
import pytest

from hubnorm.data.sims import MANIFESTS, SimsError, SimsWarning, load_sims, read_manifest, write_sims

from sims_mistakes import right_spec, write_spec


def _folder(tmp_path, scale=0.5, dtype=np.float32, n=12):
    """A small right folder (text x video, two captions per video) whose scores are scaled by ``scale``."""
    rng = np.random.default_rng(0)
    caps, items = rng.standard_normal((2 * n, 8)), rng.standard_normal((n, 8))
    caps /= np.linalg.norm(caps, axis=1, keepdims=True)
    items /= np.linalg.norm(items, axis=1, keepdims=True)
    caps = 0.6 * caps + 0.8 * items.repeat(2, axis=0)
    caps /= np.linalg.norm(caps, axis=1, keepdims=True)
    test = (scale * caps @ items.T).astype(dtype)
    write_sims(tmp_path, {"test": test}, labels=np.arange(2 * n) // 2, dataset="mine")
    return tmp_path, test


def _message(exc_info) -> str:
    return str(exc_info.value)


def _manifest_error(folder) -> str:
    with pytest.raises(SimsError) as e:
        read_manifest(folder)
    return _message(e)


# ------------------------------------------------------------------------------------------------- the manifest
def test_the_manifest_guards_name_the_file_and_the_fix(tmp_path):
    missing = tmp_path / "nowhere"
    assert _manifest_error(missing) == (f"sims folder {missing} does not exist: pass sims:<folder> with a folder of .npy score "
                           "matrices and a manifest.json (or manifest.yaml)")
    assert _manifest_error(tmp_path) == (f"{tmp_path} has no manifest (manifest.json / manifest.yaml / manifest.yml): write one that "
                           "says what each .npy file is (see hubnorm.data.sims), or convert QB-Norm pickles with "
                           "`python -m hubnorm.data import-qbnorm`")
    assert MANIFESTS == ("manifest.json", "manifest.yaml", "manifest.yml")
    (tmp_path / "manifest.json").write_text("[1, 2]")
    assert _manifest_error(tmp_path) == f"{tmp_path / 'manifest.json'}: the manifest must be a mapping (see hubnorm.data.sims); got list"
    (tmp_path / "manifest.json").write_text("{not json")
    m = _manifest_error(tmp_path)
    assert m.startswith(f"{tmp_path / 'manifest.json'}: not valid JSON (")
    assert m.endswith("); fix the manifest (see hubnorm.data.sims for its fields)")
    (tmp_path / "manifest.json").write_bytes(b'{"dataset": "caf\xe9"}')      # Latin-1, not UTF-8
    m = _manifest_error(tmp_path)
    assert m.startswith(f"{tmp_path / 'manifest.json'}: not UTF-8 text (") and m.endswith("); save the manifest as UTF-8")
    (tmp_path / "manifest.yml").write_text("a: 1\n")
    assert _manifest_error(tmp_path) == (f"{tmp_path} holds 2 manifests (manifest.json, manifest.yml): keep one, so that no reader "
                           "has to guess which one says what the files are")


def test_a_yaml_manifest_error_is_one_line(tmp_path):
    (tmp_path / "manifest.yaml").write_text("matrices:\n  test: [unclosed\n  other: 1\n")
    m = _manifest_error(tmp_path)
    assert m.startswith(f"{tmp_path / 'manifest.yaml'}: not valid YAML (")
    assert m.endswith("); fix the manifest (see hubnorm.data.sims for its fields)")
    assert "\n" not in m and "  " not in m.split("(", 1)[1]    # the parser's lines joined by single spaces
    (tmp_path / "manifest.yaml").write_text("- a\n- b\n")
    with pytest.raises(SimsError) as e:
        read_manifest(tmp_path)
    assert _message(e).endswith("the manifest must be a mapping (see hubnorm.data.sims); got list")


# ------------------------------------------------------------------------------------------------- the files
def _with_test_file(tmp_path, arr, **manifest):
    folder, _ = _folder(tmp_path)
    man = json.loads((folder / "manifest.json").read_text())
    np.save(folder / "test.npy", arr, allow_pickle=True)
    man.update(checksums={}, **manifest)
    (folder / "manifest.json").write_text(json.dumps(man))
    return folder, man


@pytest.mark.parametrize("arr, shape, dtype", [
    (np.zeros(24, np.float32), "(24,)", "float32"),                  # 1-D floats
    (np.zeros((24, 12), np.int64), "(24, 12)", "int64"),           # integers
    (np.zeros((0, 12), np.float32), "(0, 12)", "float32"),         # empty
])
def test_a_matrix_must_be_a_non_empty_2d_float_array(tmp_path, arr, shape, dtype):
    folder, man = _with_test_file(tmp_path, arr)
    with pytest.raises(SimsError) as e:
        load_sims(folder)
    assert _message(e) == (f"{folder / man['matrices']['test']} (matrix 'test') must be a non-empty 2-D float array; "
                           f"got shape {shape}, dtype {dtype}")


def test_a_missing_pickled_or_truncated_file_is_named(tmp_path):
    folder, _ = _folder(tmp_path)
    path = folder / json.loads((folder / "manifest.json").read_text())["matrices"]["test"]
    path.unlink()
    with pytest.raises(SimsError) as e:
        load_sims(folder)
    assert _message(e) == f"{path} (matrix 'test') is missing: put the file there or fix its name in the manifest"
    np.save(path, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(SimsError) as e:
        load_sims(folder)
    assert _message(e) == (f"{path} (matrix 'test') holds pickled objects, which a sims folder never loads: save a "
                           "plain numeric array with np.save")
    np.save(path, np.zeros((24, 12), np.float32))
    path.write_bytes(path.read_bytes()[:200])                       # cut short
    with pytest.raises(SimsError) as e:
        load_sims(folder)
    m = _message(e)
    assert m.startswith(f"{path} (matrix 'test') is not a readable .npy file (")
    assert m.endswith("): it may be truncated; copy it again or re-save it with np.save")


def test_matrices_must_share_their_items(tmp_path):
    folder, test = _folder(tmp_path)
    np.save(folder / "bank_rows.npy", np.zeros((5, 11), np.float32))   # 11 columns, the test matrix has 12
    man = json.loads((folder / "manifest.json").read_text())
    man["matrices"]["bank_rows"] = "bank_rows.npy"
    (folder / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(SimsError) as e:
        load_sims(folder, verify=False)
    first = man["matrices"]["test"]
    assert _message(e) == (f"{folder / 'bank_rows.npy'} (matrix 'bank_rows') has 11 test C items but {first} has 12: "
                           "the matrices must share their rows and columns (same items, same order); fix the file or "
                           "the manifest")


def test_a_bank_of_one_item_is_a_matrix(tmp_path):
    spec = right_spec(n_items=30, n_bank=60)
    write_spec(tmp_path, spec)
    man = json.loads((tmp_path / "manifest.json").read_text())
    for role in list(man["matrices"]):
        if role != "test":
            del man["matrices"][role]
    rows = np.load(tmp_path / man["matrices"]["test"])[:1]       # one bank query: a 1 x n matrix
    np.save(tmp_path / "one.npy", rows)
    man["matrices"]["bank_rows"] = "one.npy"
    man["checksums"] = {}
    (tmp_path / "manifest.json").write_text(json.dumps(man))
    folder = load_sims(tmp_path, consistency=False)
    assert folder.matrices["bank_rows"].shape == (1, rows.shape[1])


# ------------------------------------------------------------------------------------------------- the verifying pass
def test_the_bound_is_the_largest_absolute_score_of_each_file(tmp_path):
    folder, test = _folder(tmp_path, scale=0.5)
    got = load_sims(folder)
    assert got.bounds == {"test": float(np.abs(test).max())} and got.bounds["test"] < 0.5
    off = load_sims(folder, scan=False)
    assert off.bounds == {} and off.flags == []


def test_a_checksum_is_checked_with_or_without_the_scan_and_only_when_asked(tmp_path):
    folder, test = _folder(tmp_path)
    man = json.loads((folder / "manifest.json").read_text())
    name = man["matrices"]["test"]
    man["checksums"][name] = hashlib.sha256(b"something else").hexdigest()
    (folder / "manifest.json").write_text(json.dumps(man))
    want = (f"{folder / name} (matrix 'test') does not match the sha256 checksum in manifest.json: the file changed or "
            "is truncated; copy it again (or remove its checksum if you changed it on purpose)")
    for scan in (True, False):
        with pytest.raises(SimsError) as e:
            load_sims(folder, scan=scan)
        assert _message(e) == want
    assert load_sims(folder, verify=False).bounds["test"] == float(np.abs(test).max())


def test_the_test_matrix_is_read_first(tmp_path):
    """Two broken files: the error names the test matrix (read first), whatever the roles' alphabetical order."""
    spec = right_spec(n_items=30, n_bank=60)
    write_spec(tmp_path, spec)
    man = json.loads((tmp_path / "manifest.json").read_text())
    for role in ("test", "bank_rows"):
        arr = np.load(tmp_path / man["matrices"][role])
        arr[0, 0] = np.nan
        np.save(tmp_path / man["matrices"][role], arr)
    with pytest.raises(SimsError, match=r"\(matrix 'test'\) holds a non-finite score at row 0, column 0"):
        load_sims(tmp_path, verify=False)


def test_a_finding_is_an_error_or_a_warning_from_the_callers_line(tmp_path):
    from sims_mistakes import bank_rows_columns_permuted

    write_spec(tmp_path, bank_rows_columns_permuted(right_spec()))
    with pytest.raises(SimsError) as e:
        load_sims(tmp_path)
    m = _message(e)
    assert m.startswith(f"{tmp_path}: ") and m.endswith(". If the folder is right, load it with consistency=False "
                                                        "(the results then carry this as a flag)")
    finding = m[len(f"{tmp_path}: "):-len(". If the folder is right, load it with consistency=False (the results then "
                                           "carry this as a flag)")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        folder = load_sims(tmp_path, consistency=False)
    assert [w.category for w in caught] == [SimsWarning]
    assert str(caught[0].message) == f"{tmp_path}: {finding}"
    if "MUTANT_UNDER_TEST" not in os.environ:   # mutmut calls every function through one more frame of its own
        assert caught[0].filename == __file__
    assert folder.flags == [finding]


# ------------------------------------------------------------------------------------------------- positives
class _Planted:
    """Unpickling it creates a folder: what a pickle in a downloaded file could do."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_a_pickled_positives_file_is_never_unpickled(tmp_path):
    folder, _ = _folder(tmp_path / "f")
    marker = tmp_path / "ran"
    path = folder / "positives_labels.npy"
    np.save(path, np.array([_Planted(str(marker))], dtype=object), allow_pickle=True)
    man = json.loads((folder / "manifest.json").read_text())
    man["checksums"] = {}
    (folder / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(SimsError) as e:
        load_sims(folder)
    m = _message(e)
    assert m.startswith(f"{path} (positives) is not a plain .npy array (")
    assert m.endswith("): save it with np.save (pickled objects are never loaded)")
    assert not marker.exists()


def test_the_positives_guards_name_the_file_and_the_fix(tmp_path):
    folder, test = _folder(tmp_path)
    man = json.loads((folder / "manifest.json").read_text())
    man["checksums"] = {}
    labels = folder / "positives_labels.npy"

    def refused(arr=None, raw=None):
        if raw is not None:
            labels.write_bytes(raw)
        elif arr is not None:
            np.save(labels, arr)
        (folder / "manifest.json").write_text(json.dumps(man))
        with pytest.raises(SimsError) as e:
            load_sims(folder)
        return _message(e)

    m = refused(raw=b"")                                               # an empty file
    assert m.startswith(f"{labels} (positives) is not a readable .npy file (") and m.endswith("): copy it again")
    labels.unlink()
    assert refused() == (f"{labels} (positives) is missing (or not a regular file): put the file there or fix its "
                         "name in the manifest")
    mask = np.zeros((24, 12), bool)
    mask[np.arange(23), np.arange(23) // 2] = True                  # row 23 has no positive
    np.save(folder / "mask.npy", mask)
    man["positives"] = {"mask": "mask.npy"}
    assert refused() == (f"{folder / 'mask.npy'}: test row 23 (and 0 more) has no positive; every test item needs "
                         "one: drop it from the matrices or fix the positives")
    np.save(folder / "mask.npy", mask.astype(np.int8))
    assert refused() == (f"{folder / 'mask.npy'} (positives mask) must be a boolean 24 x 12 array (the test matrix's "
                         "shape); got shape (24, 12), dtype int8")


def test_write_sims_writes_a_readable_manifest_and_refuses_what_it_cannot_write(tmp_path):
    mask = np.zeros((4, 2), bool)
    mask[[0, 1], 0] = mask[[2, 3], 1] = True
    path = write_sims(tmp_path / "a" / "b", {"test": np.ones((4, 2))}, mask=mask, model="m")   # parents created
    text = path.read_text()
    assert text.startswith('{\n  "format": "hubnorm-sims",\n  "version": 1,')
    man = json.loads(text)
    assert man["model"] == "m" and man["synthetic"] is False and man["positives"] == {"mask": "positives_mask.npy"}
    assert np.array_equal(np.load(path.parent / "positives_mask.npy"), mask)
    with pytest.raises(ValueError) as e:
        write_sims(tmp_path / "c", {"test": np.ones((4, 2))}, labels=[0, 0, 1, 1], mask=mask)
    assert str(e.value) == ("pass exactly one of labels= (one column index per test row) or mask= (boolean rows x "
                            "columns)")
    with pytest.raises(ValueError) as e:
        write_sims(tmp_path / "c", {"train": np.ones((4, 2))}, labels=[0, 0, 1, 1])
    assert str(e.value) == ("unknown role 'train'; the roles are ['bank_cols', 'bank_cols_x_test_cols', 'bank_rows', "
                            "'bank_rows_x_bank_cols', 'bank_rows_x_test_rows', 'test']")
