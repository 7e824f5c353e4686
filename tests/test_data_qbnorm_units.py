"""``hubnorm.data.qbnorm`` in small pieces, on hand-made pickles in ``tmp_path``: ``_unpickle`` (a missing file, every
unreadable-pickle exception by its type name, a tensor-like object detached, a non-array refused), ``import_qbnorm``'s
guards by their messages (``allow_pickle`` only ``True``, a non-empty folder, every shape / dtype / finiteness check
of both matrices, the column count, the rows per item, the query masks' size, values and coverage), and what it
writes: the kept test rows, the bank, one label per kept row (row // rows per item) and the ``source`` record (names,
sizes and sha256 of the pickles, computed here with hashlib), with ``overwrite`` clearing the folder's files.

Survivors judged equivalent (no test can tell them apart):
- ``np.arange(n_items, dtype=np.int64)`` with the dtype dropped or ``None`` (NumPy's default integer is int64 here).
- ``mask.reshape(-1)`` -> ``reshape(-2)`` (NumPy 2.4 reads any negative size as the one unknown dimension).
"""

from __future__ import annotations

import hashlib
import json
import pickle

import numpy as np
import pytest

from hubnorm.data import qbnorm
from hubnorm.data.qbnorm import WARNING, import_qbnorm
from hubnorm.data.sims import SimsError


class _Tensorish:
    """Stands for a torch tensor: ``detach().cpu().numpy()`` returns the array (pickled by reference to this module)."""

    def __init__(self, arr):
        self.arr = arr

    def detach(self):
        return self

    def cpu(self):
        return self

    def numpy(self):
        return self.arr


def _dump(path, obj):
    with open(path, "wb") as f:
        pickle.dump(obj, f)
    return path


def _mats(n_items=4, per_item=3, n_bank=5, seed=0):
    rng = np.random.default_rng(seed)
    test = rng.standard_normal((n_items * per_item, n_items))
    bank = rng.standard_normal((n_bank, n_items))
    return test, bank


def _files(tmp_path, test, bank, masks=None):
    files = {"test": _dump(tmp_path / "t.pkl", test), "bank": _dump(tmp_path / "b.pkl", bank)}
    if masks is not None:
        files["masks"] = _dump(tmp_path / "m.pkl", masks)
    return files


def _read(out):
    man = json.loads((out / "manifest.json").read_text())
    arrays = {f.stem: np.load(f, allow_pickle=False) for f in out.glob("*.npy")}
    return man, arrays


# ------------------------------------------------------------------------------------------------------ _unpickle
def test_unpickle_returns_the_array_and_detaches_a_tensor(tmp_path):
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = qbnorm._unpickle(_dump(tmp_path / "a.pkl", arr), "what")
    np.testing.assert_array_equal(got, arr)
    assert got.dtype == np.float32
    got = qbnorm._unpickle(_dump(tmp_path / "t.pkl", _Tensorish(arr)), "what")
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, arr)


def test_unpickle_refuses_a_missing_file_and_a_folder(tmp_path):
    with pytest.raises(SimsError, match=r"nope\.pkl \(the bank\) is missing: pass the path of QB-Norm's pickle"):
        qbnorm._unpickle(tmp_path / "nope.pkl", "the bank")
    (tmp_path / "dir.pkl").mkdir()
    with pytest.raises(SimsError, match=r"dir\.pkl \(x\) is missing"):
        qbnorm._unpickle(tmp_path / "dir.pkl", "x")


@pytest.mark.parametrize("payload, exc", [
    (b"", "EOFError"),                                              # an empty file
    (b"garbage", "UnpicklingError"),                                # not a pickle
    (b"\x80\x09.", "ValueError"),                                   # a protocol from the future
    (b"cbuiltins\nno_such_name_here\n.", "AttributeError"),         # a name the module lacks
    (b"cno_such_module_xyz\nthing\n.", "ImportError"),              # a module that is not there (ModuleNotFoundError)
])
def test_unpickle_reports_every_unreadable_pickle_by_its_error(tmp_path, payload, exc):
    path = tmp_path / "bad.pkl"
    path.write_bytes(payload)
    with pytest.raises(SimsError, match=r"bad\.pkl \(the test\) is not a readable pickle \((\w+)Error: .*\): it may "
                                        r"be truncated; download it again") as info:
        qbnorm._unpickle(path, "the test")
    name = str(info.value).split("(")[2].split(":")[0]
    assert name == exc or (exc == "ImportError" and name == "ModuleNotFoundError")
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_unpickle_refuses_what_is_not_an_array(tmp_path):
    with pytest.raises(SimsError, match=r"l\.pkl \(masks\) holds a list, not a numpy array: QB-Norm's files are "
                                        r"pickled numpy arrays; convert it to one"):
        qbnorm._unpickle(_dump(tmp_path / "l.pkl", [[1.0, 2.0]]), "masks")
    with pytest.raises(SimsError, match="holds a float, not a numpy array"):
        qbnorm._unpickle(_dump(tmp_path / "f.pkl", 1.5), "masks")


# ------------------------------------------------------------------------------------------------ import_qbnorm
@pytest.mark.parametrize("allow", [False, 1, "yes", None])
def test_import_refuses_unless_allow_pickle_is_true(tmp_path, allow):
    test, bank = _mats()
    f = _files(tmp_path, test, bank)
    with pytest.raises(PermissionError, match=r"import_qbnorm unpickles its inputs, and a pickle runs code when "
                                              r"loaded: pass allow_pickle=True \(CLI: --allow-pickle\)"):
        import_qbnorm(f["test"], f["bank"], tmp_path / "out", allow_pickle=allow)
    assert not (tmp_path / "out").exists()
    assert "unpickles the files you name" in WARNING


def test_import_writes_the_test_rows_bank_labels_and_source(tmp_path):
    test, bank = _mats(n_items=4, per_item=3, n_bank=5)
    f = _files(tmp_path, test, bank)
    out = tmp_path / "out"
    path = import_qbnorm(f["test"], f["bank"], out, allow_pickle=True)
    assert path == out / "manifest.json"
    man, arrays = _read(out)
    np.testing.assert_array_equal(arrays["test"], test)
    np.testing.assert_array_equal(arrays["bank_rows"], bank)
    np.testing.assert_array_equal(arrays["positives_labels"], [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3])
    assert arrays["positives_labels"].dtype == np.int64
    assert man["modalities"] == ["text", "video"] and man["dataset"] is None and man["model"] is None
    src = man["source"]
    assert src["importer"] == "hubnorm.data.qbnorm" and src["layout"] == "QB-Norm pickles"
    assert src["captions_per_item"] == 3 and src["rows_kept"] == 12 and src["rows_masked"] == 0
    assert type(src["captions_per_item"]) is int                # an integer count, not 3.0
    assert set(src["inputs"]) == {"sims_test", "sims_train_test"}
    for key, p in (("sims_test", f["test"]), ("sims_train_test", f["bank"])):
        assert src["inputs"][key] == {"name": p.name, "bytes": p.stat().st_size,
                                      "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}


def test_import_applies_the_masks_and_passes_modalities_dataset_model(tmp_path):
    test, bank = _mats(n_items=3, per_item=2, n_bank=4, seed=1)
    masks = np.array([1, 0, 1, 1, 0, 1], dtype=np.float32)     # rows 1 and 4 are padding
    f = _files(tmp_path, test.astype(np.float32), bank.astype(np.float32), masks)
    out = tmp_path / "out"
    out.mkdir()                                                  # an empty folder is fine
    import_qbnorm(str(f["test"]), str(f["bank"]), str(out), query_masks=str(f["masks"]), allow_pickle=True,
                  modalities=["text", "audio"], dataset="toy", model="m1")
    man, arrays = _read(out)
    np.testing.assert_array_equal(arrays["test"], test.astype(np.float32)[[0, 2, 3, 5]])
    assert arrays["test"].dtype == np.float32 and arrays["test"].flags.c_contiguous
    np.testing.assert_array_equal(arrays["bank_rows"], bank.astype(np.float32))
    np.testing.assert_array_equal(arrays["positives_labels"], [0, 1, 1, 2])
    assert man["modalities"] == ["text", "audio"] and man["dataset"] == "toy" and man["model"] == "m1"
    src = man["source"]
    assert src["rows_kept"] == 4 and src["rows_masked"] == 2 and src["captions_per_item"] == 2
    assert src["inputs"]["query_masks"]["name"] == "m.pkl"
    assert src["inputs"]["query_masks"]["sha256"] == hashlib.sha256(f["masks"].read_bytes()).hexdigest()


def test_import_takes_boolean_and_two_dimensional_masks(tmp_path):
    test, bank = _mats(n_items=2, per_item=2)
    f = _files(tmp_path, test, bank, np.array([[True, False], [True, True]]))
    import_qbnorm(f["test"], f["bank"], tmp_path / "out", query_masks=f["masks"], allow_pickle=True)
    _, arrays = _read(tmp_path / "out")
    np.testing.assert_array_equal(arrays["test"], test[[0, 2, 3]])
    np.testing.assert_array_equal(arrays["positives_labels"], [0, 1, 1])


def test_import_refuses_a_non_empty_folder_unless_overwrite(tmp_path):
    test, bank = _mats()
    f = _files(tmp_path, test, bank)
    out = tmp_path / "out"
    out.mkdir()
    (out / "stale.npy").write_bytes(b"old")
    (out / "keep").mkdir()
    (out / "keep" / "inner.txt").write_text("x")
    with pytest.raises(SimsError, match=r"out exists and is not empty: choose a new folder \(or pass overwrite=True "
                                        r"/ --overwrite\)"):
        import_qbnorm(f["test"], f["bank"], out, allow_pickle=True)
    assert (out / "stale.npy").read_bytes() == b"old" and not (out / "manifest.json").exists()
    import_qbnorm(f["test"], f["bank"], out, allow_pickle=True, overwrite=True)
    assert not (out / "stale.npy").exists()                       # the folder's files are cleared first
    assert (out / "keep" / "inner.txt").read_text() == "x"       # sub-folders are left alone
    assert sorted(p.name for p in out.iterdir()) == ["bank_rows.npy", "keep", "manifest.json",
                                                     "positives_labels.npy", "test.npy"]
    # overwrite=True into a folder that does not exist yet creates it
    import_qbnorm(f["test"], f["bank"], tmp_path / "new" / "sims", allow_pickle=True, overwrite=True)
    assert (tmp_path / "new" / "sims" / "manifest.json").is_file()


@pytest.mark.parametrize("which", ["test", "bank"])
@pytest.mark.parametrize("bad, shown", [
    (np.zeros(12), r"shape \(12,\), dtype float64"),                                  # 1-D
    (np.zeros((2, 12, 1)), r"shape \(2, 12, 1\), dtype float64"),                     # 3-D
    (np.zeros((12, 4), dtype=np.int64), r"shape \(12, 4\), dtype int64"),             # integers
    (np.zeros((12, 4), dtype=bool), r"shape \(12, 4\), dtype bool"),                  # booleans
    (np.zeros((0, 4)), r"shape \(0, 4\), dtype float64"),                             # no rows
    (np.zeros((12, 0)), r"shape \(12, 0\), dtype float64"),                           # no columns
])
def test_import_refuses_a_matrix_that_is_not_a_non_empty_2d_float(tmp_path, which, bad, shown):
    test, bank = _mats()
    f = _files(tmp_path, bad if which == "test" else test, bad if which == "bank" else bank)
    name = "t.pkl" if which == "test" else "b.pkl"
    with pytest.raises(SimsError, match=rf"{name} must hold a non-empty 2-D float matrix; got {shown}"):
        import_qbnorm(f["test"], f["bank"], tmp_path / "out", allow_pickle=True)


@pytest.mark.parametrize("which", ["test", "bank"])
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_import_reports_the_first_non_finite_score(tmp_path, which, value):
    test, bank = _mats()
    arr = test if which == "test" else bank
    arr[3, 2] = value
    arr[4, 0] = value                                            # a later one is not the one reported
    f = _files(tmp_path, test, bank)
    name = "t.pkl" if which == "test" else "b.pkl"
    with pytest.raises(SimsError, match=rf"{name} holds a non-finite score at row 3, column 2: recompute the matrix"):
        import_qbnorm(f["test"], f["bank"], tmp_path / "out", allow_pickle=True)


def test_import_refuses_mismatched_columns_and_uneven_rows(tmp_path):
    test, bank = _mats(n_items=4, per_item=3)
    f = _files(tmp_path, test, bank[:, :3])
    with pytest.raises(SimsError, match=r"b\.pkl has 3 columns but .*t\.pkl has 4 test items: both must have the "
                                        r"test items as columns, in the same order"):
        import_qbnorm(f["test"], f["bank"], tmp_path / "o1", allow_pickle=True)
    f = _files(tmp_path, test[:11], bank)
    with pytest.raises(SimsError, match=r"t\.pkl has 11 rows for 4 items: QB-Norm's layout groups the same number of "
                                        r"caption rows per item \(pad with query masks\); this matrix does not"):
        import_qbnorm(f["test"], f["bank"], tmp_path / "o2", allow_pickle=True)
    # one row per item is a layout too, and a bank of one row is a bank
    f = _files(tmp_path, test[:4], bank[:1])
    import_qbnorm(f["test"], f["bank"], tmp_path / "o3", allow_pickle=True)
    _, arrays = _read(tmp_path / "o3")
    np.testing.assert_array_equal(arrays["positives_labels"], [0, 1, 2, 3])
    np.testing.assert_array_equal(arrays["bank_rows"], bank[:1])
    # one test item (a single column) with all its rows
    f = _files(tmp_path, test[:3, :1], bank[:, :1])
    import_qbnorm(f["test"], f["bank"], tmp_path / "o4", allow_pickle=True)
    man, arrays = _read(tmp_path / "o4")
    np.testing.assert_array_equal(arrays["positives_labels"], [0, 0, 0])
    assert man["source"]["captions_per_item"] == 3


def test_import_checks_the_masks(tmp_path):
    test, bank = _mats(n_items=2, per_item=2)
    f = _files(tmp_path, test, bank, np.ones(5))
    with pytest.raises(SimsError, match=r"m\.pkl has 5 entries but .*t\.pkl has 4 caption rows: the query mask needs "
                                        r"one entry per test caption row"):
        import_qbnorm(f["test"], f["bank"], tmp_path / "o1", query_masks=f["masks"], allow_pickle=True)
    for bad in (np.array([1.0, 2.0, 1.0, 1.0]), np.array([1, 0, -1, 1]), np.array([0.5, 1, 1, 1])):
        f = _files(tmp_path, test, bank, bad)
        with pytest.raises(SimsError, match=r"m\.pkl must be 0/1 \(or boolean\) per caption row"):
            import_qbnorm(f["test"], f["bank"], tmp_path / "o2", query_masks=f["masks"], allow_pickle=True)
    f = _files(tmp_path, test, bank, np.array([1, 1, 0, 0]))
    with pytest.raises(SimsError, match=r"m\.pkl: item 1 has no valid caption row after masking; the mask does not "
                                        r"match the matrices"):
        import_qbnorm(f["test"], f["bank"], tmp_path / "o3", query_masks=f["masks"], allow_pickle=True)
    f = _files(tmp_path, test, bank, np.array([0, 0, 0, 1]))
    with pytest.raises(SimsError, match="item 0 has no valid caption row"):
        import_qbnorm(f["test"], f["bank"], tmp_path / "o4", query_masks=f["masks"], allow_pickle=True)
    assert not any((tmp_path / o).exists() for o in ("o1", "o2", "o3", "o4"))


def test_import_names_which_input_is_wrong(tmp_path):
    test, bank = _mats(n_items=2, per_item=2)
    f = _files(tmp_path, test, bank, [1, 1, 1, 1])
    (tmp_path / "short.pkl").write_bytes(f["test"].read_bytes()[:20])
    with pytest.raises(SimsError, match=r"short\.pkl \(test captions x test videos\) is not a readable pickle"):
        import_qbnorm(tmp_path / "short.pkl", f["bank"], tmp_path / "o1", allow_pickle=True)
    with pytest.raises(SimsError, match=r"gone\.pkl \(training captions x test videos\) is missing"):
        import_qbnorm(f["test"], tmp_path / "gone.pkl", tmp_path / "o2", allow_pickle=True)
    with pytest.raises(SimsError, match=r"m\.pkl \(test query masks\) holds a list, not a numpy array"):
        import_qbnorm(f["test"], f["bank"], tmp_path / "o3", query_masks=f["masks"], allow_pickle=True)
