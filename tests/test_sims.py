"""sims: folders (hubnorm.data.sims), their tasks (hubnorm.scores.sims_tasks) and the QB-Norm importer
(hubnorm.data.qbnorm): equal to the embeddings path, errors naming the file and the fix, and QB-Norm's DIS equal
to an independent float64 reference written from its paper's equation."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

import hubnorm as hn
from hubnorm.data.cli import main as data_cli
from hubnorm.data.qbnorm import import_qbnorm
from hubnorm.data.sims import SimsError, load_sims, write_sims
from hubnorm.scores import sims_tasks

from method_checks import unit_rows


def _embeddings(seed=0, n_items=24, per_item=2, d=16):
    """Test and bank embeddings drawn the same way, each modality in its own cone (as real CLIP-family embeddings
    are: every item's mean score over any caption set then agrees, which the folder's consistency check reads)."""
    rng = np.random.default_rng(seed)
    mu_item, mu_text = unit_rows(rng, 2, d)

    def draw(n):
        items = unit_rows(rng, n, d) + 0.8 * mu_item
        items /= np.linalg.norm(items, axis=1, keepdims=True)
        caps = items.repeat(per_item, axis=0) + 0.7 * unit_rows(rng, n * per_item, d) + 0.8 * mu_text
        return items, caps / np.linalg.norm(caps, axis=1, keepdims=True)

    items, caps = draw(n_items)
    bank_items, bank_caps = draw(40)
    return caps, items, np.arange(n_items).repeat(per_item), bank_caps[:60], bank_items


def write_example(folder, seed=0, modalities=("text", "video"), dtype=np.float64, embeddings=()):
    """A small sims folder with every role, from embeddings (also used by the notebook tests). With the text
    second (``("video", "text")``) the rows are the items and the positives a mask (each item has two captions);
    ``dtype``: how the matrices are stored (released ones are often float32); ``embeddings``: the keys of the
    manifest's ``embeddings`` to write beside the matrices (``hubnorm.data.sims.EMBEDDINGS``: "test_rows", ...)."""
    caps, items, c2i, bank_caps, bank_items = _embeddings(seed)
    if modalities[0] == "text":
        rows, cols, bank_r, bank_c = caps, items, bank_caps, bank_items
        positives = {"labels": c2i}
    else:
        rows, cols, bank_r, bank_c = items, caps, bank_items, bank_caps
        mask = np.zeros((len(items), len(caps)), dtype=bool)
        mask[c2i, np.arange(len(caps))] = True
        positives = {"mask": mask}
    mats = {"test": rows @ cols.T, "bank_rows": bank_r @ cols.T, "bank_cols": bank_c @ rows.T,
            "bank_rows_x_bank_cols": bank_r @ bank_c.T, "bank_cols_x_test_cols": bank_c @ cols.T,
            "bank_rows_x_test_rows": bank_r @ rows.T}
    mats = {role: m.astype(dtype) for role, m in mats.items()}
    vectors = {"test_rows": rows, "test_cols": cols, "bank_rows": bank_r, "bank_cols": bank_c}
    write_sims(folder, mats, modalities=modalities, dataset="example", synthetic=True,
               embeddings={key: vectors[key].astype(dtype) for key in embeddings}, **positives)
    return caps, items, c2i, bank_caps, bank_items


@pytest.mark.parametrize("name,params", [("raw", {}), ("is", {"tau": 0.05}), ("dis", {"tau": 0.05}),
                                         ("nnn", {"k": 4}), ("dbsn", {"tau": 0.05}), ("dualdis", {"beta_query": 20.0,
                                                                                                  "beta_target": 5.0})])
def test_sims_folder_equals_embeddings(tmp_path, name, params):
    caps, items, c2i, bank_caps, bank_items = write_example(tmp_path)
    tasks = sims_tasks(f"sims:{tmp_path}")
    assert set(tasks) == {"t2v", "v2t"}
    emb = hn.build_tasks(items, caps, c2i, image_bank=bank_items, caption_bank=bank_caps)
    for d, e in (("t2v", "t2i"), ("v2t", "i2t")):
        got = hn.evaluate(tasks[d].fit(hn.make_normalizer(name, **params)), tasks[d])
        want = hn.evaluate(emb[e].fit(hn.make_normalizer(name, **params)), emb[e])
        got_bank, want_bank = got.pop("bank"), want.pop("bank")
        assert got == pytest.approx(want, abs=1e-12), (d, got, want)
        assert want_bank == ("none" if name == "raw" else "query-agnostic")
        # A target bank given as scores is compared with nothing (no test column rows to compare it to), so the
        # score-matrix path can only say it was not recorded; the query bank is compared on both paths.
        uses_target_bank = name in ("dbsn", "dualdis")
        assert got_bank == ("unrecorded" if uses_target_bank else want_bank), (d, name, got_bank)
        assert tasks[d].meta["source"] == "synthetic"


def _expect(tmp_path, match, fix):
    with pytest.raises(SimsError, match=match):
        load_sims(tmp_path)
    fix()


def test_sims_errors_name_the_file(tmp_path):
    with pytest.raises(SimsError, match="has no manifest"):
        load_sims(tmp_path)
    write_example(tmp_path)
    man_path = tmp_path / "manifest.json"
    good = json.loads(man_path.read_text())
    load_sims(tmp_path)

    def manifest(**changes):
        man_path.write_text(json.dumps({**good, **changes}))

    manifest(checksums={})
    # a truncated file
    data = (tmp_path / "bank_rows.npy").read_bytes()
    (tmp_path / "bank_rows.npy").write_bytes(data[: len(data) // 2])
    with pytest.raises(SimsError, match=r"bank_rows.npy \(matrix 'bank_rows'\) is not a readable .npy file.*truncated"):
        load_sims(tmp_path)
    caps, items, c2i, bank_caps, _ = _embeddings()
    # NaN
    bad = bank_caps @ items.T
    bad[5, 2] = np.nan
    np.save(tmp_path / "bank_rows.npy", bad)
    with pytest.raises(SimsError, match=r"bank_rows.npy \(matrix 'bank_rows'\) holds a non-finite score at row 5, column 2"):
        load_sims(tmp_path)
    # a bad shape (columns that are not the test items)
    np.save(tmp_path / "bank_rows.npy", (bank_caps @ items.T)[:, :-1])
    with pytest.raises(SimsError, match=r"bank_rows.npy \(matrix 'bank_rows'\) has 23 test C items but test.npy has 24"):
        load_sims(tmp_path)
    np.save(tmp_path / "bank_rows.npy", bank_caps @ items.T)
    # a pickled array
    np.save(tmp_path / "bank_rows.npy", np.array([object()], dtype=object), allow_pickle=True)
    with pytest.raises(SimsError, match="holds pickled objects"):
        load_sims(tmp_path)
    np.save(tmp_path / "bank_rows.npy", bank_caps @ items.T)
    # mismatched positives
    np.save(tmp_path / "positives_labels.npy", c2i[:-1])
    with pytest.raises(SimsError, match=r"positives_labels.npy \(positive labels\) must be 48 integers"):
        load_sims(tmp_path)
    np.save(tmp_path / "positives_labels.npy", np.minimum(c2i, 22))
    with pytest.raises(SimsError, match="test column 23 .* has no positive"):
        load_sims(tmp_path)
    np.save(tmp_path / "positives_labels.npy", c2i)
    np.save(tmp_path / "mask.npy", np.ones((48, 23), dtype=bool))
    manifest(checksums={}, positives={"mask": "mask.npy"})
    with pytest.raises(SimsError, match=r"mask.npy \(positives mask\) must be a boolean 48 x 24 array"):
        load_sims(tmp_path)
    # a checksum that no longer matches
    manifest(checksums={"test.npy": "0" * 64})
    with pytest.raises(SimsError, match="does not match the sha256 checksum"):
        load_sims(tmp_path)
    manifest(modalities=["text", "smell"])
    with pytest.raises(SimsError, match="'modalities' must name"):
        load_sims(tmp_path)
    manifest(checksums={})
    load_sims(tmp_path)


def test_positives_mask_with_several_items_per_caption(tmp_path):
    caps, items, c2i, bank_caps, _ = _embeddings()
    mask = np.zeros((len(caps), len(items)), dtype=bool)
    mask[np.arange(len(caps)), c2i] = True
    mask[0, 5] = True  # caption 0 also describes item 5
    write_sims(tmp_path, {"test": caps @ items.T, "bank_rows": bank_caps @ items.T}, mask=mask)
    tasks = sims_tasks(tmp_path)
    assert list(tasks["t2v"].positives.of(0)) == [0, 5]
    assert 0 in tasks["v2t"].positives.of(5)
    with pytest.raises(ValueError, match="role 'bank_cols'"):
        tasks["v2t"].fit(hn.make_normalizer("is"))


# ---------------------------------------------------------------------------------------------- QB-Norm importer
def _qbnorm_pickles(tmp_path, seed=1, n_videos=20, per_video=3, n_train=8, d=12):
    """QB-Norm's layout: caption rows grouped per video, a training-captions x test-videos bank, query masks."""
    caps, videos, _, bank_caps, _ = _embeddings(seed, n_videos, per_video, d)
    bank_caps = unit_rows(np.random.default_rng(seed + 1), n_train, d)
    masks = np.ones(n_videos * per_video, dtype=np.float32)
    masks[[2, 7]] = 0  # two padded caption rows (as MSR-VTT's 19-caption videos)
    files = {}
    for name, obj in (("test.pkl", caps @ videos.T), ("train_test.pkl", bank_caps @ videos.T), ("masks.pkl", masks)):
        files[name] = tmp_path / name
        with open(files[name], "wb") as f:
            pickle.dump(obj, f)
    return files, caps @ videos.T, bank_caps @ videos.T, masks.astype(bool), per_video


def qbnorm_reference(train_test, test, beta, k=1):
    """QB-Norm's dynamic inverted softmax from the paper's equation (Bogolin et al. 2022, Sec. 3), float64, dense:
    the activation set A holds the top-k gallery items of every bank query; a test query whose raw top-1 item is in A
    gets exp(beta s_ij) / sum_{b in bank} exp(beta s_bj), any other keeps its raw row."""
    activation = set(np.argsort(-train_test, axis=1, kind="stable")[:, :k].reshape(-1).tolist())
    out = test.astype(np.float64).copy()
    denom = np.exp(beta * train_test.astype(np.float64)).sum(axis=0)
    active = np.array([int(np.argmax(row)) in activation for row in test])
    out[active] = np.exp(beta * test[active]) / denom
    return out, active


def test_qbnorm_import_refuses_without_explicit_request(tmp_path, capsys):
    files, *_ = _qbnorm_pickles(tmp_path)
    out = tmp_path / "sims"
    with pytest.raises(PermissionError, match="pickle runs code"):
        import_qbnorm(files["test.pkl"], files["train_test.pkl"], out)
    rc = data_cli(["import-qbnorm", "--sims-test", str(files["test.pkl"]), "--sims-train-test",
                   str(files["train_test.pkl"]), "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "pickle runs code" in err and "--allow-pickle" in err
    assert not out.exists()


def test_qbnorm_import_and_dis_equal_the_paper_equation(tmp_path, capsys):
    files, test, bank, keep, per_video = _qbnorm_pickles(tmp_path)
    out = tmp_path / "sims"
    rc = data_cli(["import-qbnorm", "--sims-test", str(files["test.pkl"]), "--sims-train-test",
                   str(files["train_test.pkl"]), "--query-masks", str(files["masks.pkl"]), "--out", str(out),
                   "--allow-pickle", "--dataset", "toy"])
    assert rc == 0, capsys.readouterr()
    man = json.loads((out / "manifest.json").read_text())
    assert man["source"]["rows_masked"] == 2 and man["source"]["captions_per_item"] == per_video
    for key in ("sims_test", "sims_train_test", "query_masks"):
        assert len(man["source"]["inputs"][key]["sha256"]) == 64
    assert set(man["checksums"]) == {"test.npy", "bank_rows.npy", "positives_labels.npy"}
    # no file of the folder is a pickle: every .npy loads with allow_pickle=False
    for f in out.glob("*.npy"):
        np.load(f, allow_pickle=False)
    task = sims_tasks(out)["t2v"]
    assert task.n_queries == keep.sum() and task.n_targets == test.shape[1]
    beta = 20.0
    dis = task.fit(hn.make_normalizer("dis", tau=1.0 / beta, k=1))
    got = task.score(dis).numpy()
    ref, active = qbnorm_reference(bank, test[keep], beta)
    assert 0 < active.sum() < len(active)  # the gate matters in this example
    # rows normalised by the inverted softmax: beta * (s + offset) = log(ref) + log|B| (the centring constant)
    np.testing.assert_allclose(got[active], (np.log(ref[active]) + np.log(bank.shape[0])) / beta, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(got[~active], test[keep][~active])
    # the same ranks as the reference (positives: caption row // per_video, masked rows dropped)
    labels = (np.arange(test.shape[0]) // per_video)[keep]
    ref_ranks = hn.positive_ranks(ref, hn.Positives.from_labels(labels, test.shape[1]))
    np.testing.assert_array_equal(hn.positive_ranks(task.blocks(dis), task.positives), ref_ranks)


def test_qbnorm_import_errors(tmp_path):
    files, test, bank, keep, _ = _qbnorm_pickles(tmp_path)
    with open(tmp_path / "short_masks.pkl", "wb") as f:
        pickle.dump(np.ones(5), f)
    with pytest.raises(SimsError, match="short_masks.pkl has 5 entries"):
        import_qbnorm(files["test.pkl"], files["train_test.pkl"], tmp_path / "a", query_masks=tmp_path / "short_masks.pkl",
                      allow_pickle=True)
    with open(tmp_path / "bank_bad.pkl", "wb") as f:
        pickle.dump(bank[:, :-1], f)
    with pytest.raises(SimsError, match="bank_bad.pkl has 19 columns"):
        import_qbnorm(files["test.pkl"], tmp_path / "bank_bad.pkl", tmp_path / "b", allow_pickle=True)
    (tmp_path / "trunc.pkl").write_bytes(files["test.pkl"].read_bytes()[:50])
    with pytest.raises(SimsError, match="trunc.pkl .* not a readable pickle"):
        import_qbnorm(tmp_path / "trunc.pkl", files["train_test.pkl"], tmp_path / "c", allow_pickle=True)


# ---------------------------------------------------------------- what mutation testing found unchecked (issue 50)
@pytest.mark.parametrize("dtype, read_bytes, starts", [(np.float64, 3 * 8 * 8, [0, 3, 6, 9]),     # 3 rows a read
                                                      (np.float32, 8, list(range(11)))])       # under a row
@pytest.mark.parametrize("order", ["C", "F"])
def test_the_scan_in_many_reads_equals_the_whole_array(tmp_path, monkeypatch, order, dtype, read_bytes, starts):
    """scan_npy over many reads (C order: whole rows per read, at least one; Fortran order: values, the rows from
    the memory map after the pass): the bound is the largest |score| of the whole file, every row reaches the
    statistics once, in order and in float64, and a NaN is reported at its own row / column."""
    from hubnorm.data import sims as sims_mod

    rng = np.random.default_rng(3)
    arr = rng.standard_normal((11, 8)).astype(dtype)
    arr[9, 5] = 7.5                                                          # the largest |score|, in a late read
    arr = np.asfortranarray(arr) if order == "F" else arr
    path = tmp_path / "m.npy"
    np.save(path, arr)
    monkeypatch.setattr(sims_mod, "_SCAN_BYTES", read_bytes)
    seen = []
    mm = np.load(path, mmap_mode="r")
    assert mm.flags.f_contiguous == (order == "F")
    bound = sims_mod.scan_npy(path, mm, "test", on_rows=lambda r0, block: seen.append((r0, block.copy())))
    assert bound == 7.5
    assert [r0 for r0, _ in seen] == starts and all(b.dtype == np.float64 for _, b in seen)
    assert np.array_equal(np.concatenate([b for _, b in seen]), arr.astype(np.float64))
    assert sims_mod.scan_npy(path, mm, "test", scan=False) is None
    arr[8, 6] = np.nan
    arr[10, 1] = np.inf
    np.save(path, arr)
    r, c = (8, 6) if order == "C" else (10, 1)                          # the first in the file's byte order
    with pytest.raises(SimsError) as e:
        sims_mod.scan_npy(path, np.load(path, mmap_mode="r"), "matrix 'test'")
    assert str(e.value) == (f"{path} (matrix 'test') holds a non-finite score at row {r}, column {c}: a score matrix "
                            "must be finite; recompute it (or drop that row and its positives)")


def test_a_positive_label_must_name_a_column(tmp_path):
    S = np.random.default_rng(0).standard_normal((4, 3))
    write_sims(tmp_path / "ok", {"test": S}, labels=np.array([0, 1, 2, 2]))
    assert load_sims(tmp_path / "ok", consistency=False).positive_pairs[1].tolist() == [0, 1, 2, 2]
    write_sims(tmp_path / "bad", {"test": S}, labels=np.array([0, 1, 2, 3]))   # 3 = the number of columns
    with pytest.raises(SimsError, match=r"\(positive labels\) must lie in \[0, 3\)"):
        load_sims(tmp_path / "bad", consistency=False)


def test_every_manifest_field_is_checked_by_its_type_with_its_whole_message(tmp_path):
    write_example(tmp_path)
    man_path = tmp_path / "manifest.json"
    good = json.loads(man_path.read_text())
    mp = str(man_path).replace(".", r"\.")

    def refused(match, **changes):
        man_path.write_text(json.dumps({**good, **changes}))
        with pytest.raises(SimsError, match=rf"^{mp}: {match}"):
            load_sims(tmp_path)

    refused(r"'format' must be 'hubnorm-sims'; got 'other'$", format="other")
    refused(rf"'version' must be {good['version']}; got 99$", version=99)
    refused(r"'matrices' must map roles to \.npy files and include 'test' \(test rows x test columns\)$",
            matrices={"bank_rows": "bank_rows.npy"})
    refused(r"'matrices' must map roles to \.npy files and include 'test'", matrices=["test.npy"])
    refused(r"unknown matrix role\(s\) \['extra'\]; the roles are \[", matrices={**good["matrices"], "extra": "x.npy"})
    refused(r"'matrices' must map each role to a file name \(a string\); got \{'test': ''\}$",
            matrices={**good["matrices"], "test": ""})
    refused(r"'matrices' must map each role to a file name \(a string\); got \{'test': 3\}$",
            matrices={**good["matrices"], "test": 3})
    refused(r"'synthetic' must be true or false \(a boolean, not str 'yes'\): it decides whether every number is "
            r"labelled synthetic$", synthetic="yes")
    for key in ("dataset", "model"):
        refused(rf"'{key}' must be a non-empty string \(or absent\); got ' '$", **{key: " "})
        refused(rf"'{key}' must be a non-empty string \(or absent\); got 5$", **{key: 5})
    refused(r"'checksums' must map file names to sha256 hex strings; got \['x'\]$", checksums=["x"])
    refused(r"'checksums' must map file names to sha256 hex strings; got \{'test\.npy': 5\}$", checksums={"test.npy": 5})
    man_path.write_text(json.dumps({k: v for k, v in good.items() if k not in ("synthetic", "dataset", "model")}))
    folder = load_sims(tmp_path)                          # synthetic, dataset and model may be absent
    assert folder.synthetic is False
    man_path.write_text(json.dumps(good))
    assert load_sims(tmp_path).synthetic is True and load_sims(tmp_path).manifest["dataset"] == "example"


def test_the_positives_file_is_checked_whole(tmp_path):
    S = np.random.default_rng(0).standard_normal((4, 3))
    write_sims(tmp_path, {"test": S}, labels=np.array([0, 1, 2, 2]))
    man_path = tmp_path / "manifest.json"
    good = json.loads(man_path.read_text())
    mp = str(man_path).replace(".", r"\.")
    man_path.write_text(json.dumps({**good, "positives": {"labels": "positives_labels.npy", "mask": "m.npy"}}))
    with pytest.raises(SimsError, match=rf"^{mp}: 'positives' must be \{{\"labels\": file\}} \(one column index per "
                                        r"test row\) or \{\"mask\": file\} \(a boolean test rows x test columns mask\); "
                                        r"got "):
        load_sims(tmp_path, consistency=False)
    man_path.write_text(json.dumps({**good, "checksums": {**good["checksums"], "positives_labels.npy": "0" * 64}}))
    with pytest.raises(SimsError, match=r"positives_labels\.npy \(positives\) does not match the sha256 checksum in "
                                        r"manifest\.json: copy it again$"):
        load_sims(tmp_path, consistency=False)
    man_path.write_text(json.dumps(good))
    for labels, match in (([-1, 1, 2, 2], r"must lie in \[0, 3\) \(the test matrix's columns\); got \[-1, 2\]$"),
                          ([0, 0, 0, 0], r"test column 1 \(and 1 more\) has no positive; every test item needs one: drop "
                                           r"it from the matrices or fix the positives$"),
                          ([0.0, 1.0, 2.0, 2.0], r"must be 4 integers, one column index per row of the test matrix; got shape "
                                                  r"\(4,\), dtype float64$")):
        np.save(tmp_path / "positives_labels.npy", np.array(labels))
        with pytest.raises(SimsError, match=match):
            load_sims(tmp_path, consistency=False, verify=False)
