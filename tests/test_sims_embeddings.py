"""A sims folder that carries embeddings beside its score matrices (the manifest's optional ``embeddings``, issue 43:
a source that builds tasks holding embeddings *and* matrices): which input each file becomes in both directions,
the methods that read embeddings (DN, DSL) running on the folder and equal to the task of embeddings, seeded bank
subsets cutting embeddings and matrices alike, and every mistake in the files refused naming the file."""

import json

import numpy as np
import pytest
import torch

import hubnorm as hn
from hubnorm.data.sims import EMBEDDINGS, SimsError, load_sims
from hubnorm.scores import sims_tasks

from test_sims import write_example

ALL = tuple(EMBEDDINGS)


def _by_direction(caps, items, bank_caps, bank_items, modalities):
    """The embeddings each input of the sims tasks must hold, per direction name, and the tasks of embeddings
    they must equal (t2i / i2t of hubnorm.build_tasks)."""
    text_q = {"queries": caps, "targets": items, "query_bank": bank_caps[:60], "target_bank": bank_items}
    item_q = {"queries": items, "targets": caps, "query_bank": bank_items, "target_bank": bank_caps[:60]}
    fwd, bwd = ("t2v", "v2t") if modalities[0] == "text" else ("v2t", "t2v")
    return {fwd: text_q if modalities[0] == "text" else item_q, bwd: item_q if modalities[0] == "text" else text_q}


@pytest.mark.parametrize("modalities", [("text", "video"), ("video", "text")])
def test_each_file_is_the_input_it_names_in_both_directions(tmp_path, modalities):
    caps, items, c2i, bank_caps, bank_items = write_example(tmp_path, modalities=modalities, embeddings=ALL)
    tasks = sims_tasks(tmp_path)
    want = _by_direction(caps, items, bank_caps, bank_items, modalities)
    for d, task in tasks.items():
        assert task.kind == "scores"   # stored matrices beside the embeddings
        for name, x in want[d].items():
            np.testing.assert_array_equal(np.asarray(getattr(task, name)), x, err_msg=f"{d} {name}")


@pytest.mark.parametrize("name,params", [("dn", {"lam": 0.5}), ("dsl", {"k": 5}), ("nnn", {"k": 4}),
                                         ("dbsn", {"tau": 0.05}), ("dualis", {"beta_query": 20.0,
                                                                              "beta_target": 5.0})])
def test_methods_on_a_folder_with_embeddings_equal_the_task_of_embeddings(tmp_path, name, params):
    """DN and DSL read embeddings: refused on the folder of matrices alone, run once the manifest lists them."""
    caps, items, c2i, bank_caps, bank_items = write_example(tmp_path / "scores")
    write_example(tmp_path / "both", embeddings=ALL)
    emb = hn.build_tasks(items, caps, c2i, image_bank=bank_items, caption_bank=bank_caps[:60])
    plain, both = sims_tasks(tmp_path / "scores"), sims_tasks(tmp_path / "both")
    for d, e in (("t2v", "t2i"), ("v2t", "i2t")):
        want = hn.evaluate(emb[e].fit(hn.make_normalizer(name, **params)), emb[e])
        got = hn.evaluate(both[d].fit(hn.make_normalizer(name, **params)), both[d])
        assert {k: v for k, v in got.items() if k != "bank"} == pytest.approx(
            {k: v for k, v in want.items() if k != "bank"}, abs=1e-12), (d, got, want)
        if name in ("dn", "dsl"):
            with pytest.raises(ValueError, match="under 'embeddings'"):
                plain[d].fit(hn.make_normalizer(name, **params))


def test_a_matrix_with_embeddings_on_one_side_only_is_refused(tmp_path):
    """Such a matrix cannot be compared with any product: a shuffled embeddings file beside it went unnoticed and
    misplaced every offset (review: SN's R@1 87.5 -> 45.8 on the folder below with its videos shuffled)."""
    from hubnorm.data.sims import write_sims

    caps, items, c2i, bank_caps, bank_items = write_example(tmp_path / "src")
    write_sims(tmp_path / "a", {"test": caps @ items.T}, labels=c2i,
               embeddings={"test_cols": items[::-1], "bank_rows": bank_caps})   # the videos reversed
    with pytest.raises(SimsError, match=r"manifest.json: 'embeddings' lists 'test_cols' but not 'test_rows', so the "
                                        r"matrix 'test' \(test.npy\) cannot be compared with the product .* list "
                                        r"'test_rows' too, or leave 'test_cols' out"):
        load_sims(tmp_path / "a")
    write_sims(tmp_path / "b", {"test": caps @ items.T, "bank_rows_x_bank_cols": bank_caps @ bank_items.T}, labels=c2i,
               embeddings={"test_rows": caps, "test_cols": items, "bank_rows": bank_caps})   # DBSN's bank, half listed
    with pytest.raises(SimsError, match=r"lists 'bank_rows' but not 'bank_cols', so the matrix 'bank_rows_x_bank_cols'"):
        load_sims(tmp_path / "b")


def test_some_embeddings_serve_the_methods_that_read_them(tmp_path):
    """The test items and the text bank embedded, no bank matrix: DN and the score methods run from the text-query
    side and equal the task of embeddings."""
    from hubnorm.data.sims import write_sims

    caps, items, c2i, bank_caps, bank_items = write_example(tmp_path / "src")
    write_sims(tmp_path / "f", {"test": caps @ items.T}, labels=c2i,
               embeddings={"test_rows": caps, "test_cols": items, "bank_rows": bank_caps})
    tasks = sims_tasks(tmp_path / "f")
    assert tasks["t2v"].query_bank is not None and tasks["t2v"].target_bank is None
    assert not tasks["v2t"].has("query_bank") and tasks["v2t"].target_bank is not None   # the text bank: a target bank
    emb = hn.build_tasks(items, caps, c2i, caption_bank=bank_caps)["t2i"]
    want = hn.evaluate(emb.fit(hn.make_normalizer("dn")), emb)
    got = hn.evaluate(tasks["t2v"].fit(hn.make_normalizer("dn")), tasks["t2v"])
    assert got["R@1"] == pytest.approx(want["R@1"], abs=1e-12) and got["MnR"] == pytest.approx(want["MnR"], abs=1e-12)
    s = tasks["t2v"].fit(hn.make_normalizer("is", tau=0.05))   # score methods read the bank's product
    assert hn.evaluate(s, tasks["t2v"])["R@1"] == hn.evaluate(emb.fit(hn.make_normalizer("is", tau=0.05)), emb)["R@1"]


def test_bank_subsets_cut_the_embeddings_with_the_matrices(tmp_path):
    write_example(tmp_path / "scores")
    write_example(tmp_path / "both", embeddings=ALL)
    caps, items, c2i, bank_caps, bank_items = write_example(tmp_path / "scores")
    cut = dict(bank_queries=17, target_bank=11, seed=5)
    plain, both = sims_tasks(tmp_path / "scores", **cut), sims_tasks(tmp_path / "both", **cut)
    for d in ("t2v", "v2t"):
        assert both[d].size("query_bank") == 17 and both[d].size("target_bank") == 11
        for key in ("query_bank", "target_bank"):   # the rows of the embeddings are the rows of the bank matrices
            rows = np.asarray(getattr(both[d], key))
            side = (bank_caps[:60] if (key == "query_bank") == (d == "t2v") else bank_items)
            picked = [int(np.flatnonzero((side == r).all(axis=1))[0]) for r in rows]
            assert picked == sorted(picked) and len(set(picked)) == len(picked)
        for name, params in (("dbsn", {"tau": 0.05}), ("nnn", {"k": 4})):
            want = hn.evaluate(plain[d].fit(hn.make_normalizer(name, **params)), plain[d])
            got = hn.evaluate(both[d].fit(hn.make_normalizer(name, **params)), both[d])
            assert got["R@1"] == pytest.approx(want["R@1"], abs=1e-12) and got["MnR"] == pytest.approx(want["MnR"])


def test_a_bank_given_only_as_embeddings_is_subsampled_like_a_stored_one(tmp_path):
    """The text bank has no matrix (its scores are the product of its embeddings): bank_queries still cuts it, with
    the same seeded rows as a stored bank of that size."""
    from hubnorm.data.sims import write_sims

    caps, items, c2i, bank_caps, bank_items = write_example(tmp_path / "stored")
    write_sims(tmp_path / "embedded", {"test": caps @ items.T}, labels=c2i,
               embeddings={"test_rows": caps, "test_cols": items, "bank_rows": bank_caps})
    stored = sims_tasks(tmp_path / "stored", bank_queries=10, seed=3)["t2v"]
    embedded = sims_tasks(tmp_path / "embedded", bank_queries=10, seed=3)["t2v"]
    assert embedded.size("query_bank") == 10 == stored.size("query_bank")
    got, want = (t.matrix("query_bank", "targets").block(0, 10, 0, 24, torch.float64).numpy() for t in (embedded, stored))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)   # the same ten bank texts, in the same order


def _edit(folder, key, array):
    """Replace one embeddings file (and drop the checksums, as a user who edits a folder by hand would)."""
    np.save(folder / f"embeddings_{key}.npy", array)
    man = json.loads((folder / "manifest.json").read_text())
    man["checksums"] = {}
    (folder / "manifest.json").write_text(json.dumps(man))


def test_mistakes_in_the_embeddings_are_refused_naming_the_file(tmp_path):
    caps, items, c2i, bank_caps, bank_items = write_example(tmp_path, embeddings=ALL)
    sims_tasks(tmp_path)
    man = json.loads((tmp_path / "manifest.json").read_text())
    # a changed file against its checksum
    np.save(tmp_path / "embeddings_bank_rows.npy", bank_caps[:60][::-1])
    with pytest.raises(SimsError, match=r"embeddings_bank_rows.npy \(embeddings 'bank_rows'\) does not match the sha256 "
                                        r"checksum in manifest.json"):
        load_sims(tmp_path)
    assert load_sims(tmp_path, verify=False).embeddings["bank_rows"].shape == (60, 16)   # verify=False: not compared
    # shuffled bank rows: the stored bank matrix is no longer their product (both directions read it)
    _edit(tmp_path, "bank_rows", bank_caps[:60][::-1])
    with pytest.raises(SimsError, match=r"bank_rows.npy \(matrix 'bank_rows'\) differs from the product of the "
                                        r"embeddings in embeddings_bank_rows.npy and embeddings_test_cols.npy by up to "
                                        r".*: the three files must hold the same items in the same order from the same "
                                        r"model .*; fix the file that differs, or leave one of the two embeddings out "
                                        r"of the manifest$"):
        sims_tasks(tmp_path)
    # another model's test videos (another space): the test matrix disagrees
    rng = np.random.default_rng(9)
    other = rng.standard_normal(items.shape)
    _edit(tmp_path, "bank_rows", bank_caps[:60])
    _edit(tmp_path, "test_cols", other / np.linalg.norm(other, axis=1, keepdims=True))
    with pytest.raises(SimsError, match=r"test.npy \(matrix 'test'\) differs from the product of the embeddings in "
                                        r"embeddings_test_rows.npy and embeddings_test_cols.npy"):
        sims_tasks(tmp_path)
    # one row too few, another dimension, NaN, pickled objects, a 1-D file
    _edit(tmp_path, "test_cols", items[:-1])
    with pytest.raises(SimsError, match=r"embeddings_test_cols.npy \(embeddings 'test_cols'\) has 23 rows but test.npy "
                                        r"has 24 test C items: one embedding per item, in the matrices' order"):
        load_sims(tmp_path)
    _edit(tmp_path, "test_cols", np.hstack([items, np.zeros((len(items), 2))]))
    with pytest.raises(SimsError, match=r"embeddings_test_cols.npy \(embeddings 'test_cols'\) has dimension 18 but "
                                        r"embeddings_test_rows.npy has 16"):
        load_sims(tmp_path)
    bad = items.copy()
    bad[3, 1] = np.nan
    _edit(tmp_path, "test_cols", bad)
    with pytest.raises(SimsError, match=r"embeddings_test_cols.npy \(embeddings 'test_cols'\) holds a non-finite score "
                                        r"at row 3, column 1"):
        load_sims(tmp_path)
    np.save(tmp_path / "embeddings_test_cols.npy", np.array([object()], dtype=object), allow_pickle=True)
    with pytest.raises(SimsError, match=r"embeddings_test_cols.npy \(embeddings 'test_cols'\) holds pickled objects"):
        load_sims(tmp_path)
    for bad in (items[:, 0], (items > 0).astype(np.int64), items[:0]):   # 1-D, integers, no rows
        _edit(tmp_path, "test_cols", bad)
        with pytest.raises(SimsError, match=r"\(embeddings 'test_cols'\) must be a non-empty 2-D float array"):
            load_sims(tmp_path)
    _edit(tmp_path, "test_cols", items * 2.0)   # not normalised: the product is not the cosine the matrix holds
    with pytest.raises(SimsError, match=r"embeddings_test_cols.npy \(embeddings 'test_cols'\) has rows that are not "
                                        r"L2-normalised \(largest \|norm - 1\| = 1\): save each row divided by its norm "
                                        r"\(hubnorm.l2_normalize\), the embeddings whose products the matrices hold$"):
        load_sims(tmp_path)
    _edit(tmp_path, "test_cols", items)
    sims_tasks(tmp_path)
    # the manifest's section itself
    for section in ({"test_row": "embeddings_test_rows.npy"}, ["embeddings_test_rows.npy"], {"test_rows": 3}):
        (tmp_path / "manifest.json").write_text(json.dumps({**man, "checksums": {}, "embeddings": section}))
        with pytest.raises(SimsError, match=r"'embeddings' must map some of \['test_rows', 'test_cols', 'bank_rows', "
                                            r"'bank_cols'\]"):
            load_sims(tmp_path)


def test_a_float32_folder_with_embeddings_passes_its_agreement_check(tmp_path):
    """Released files are often float32: their rounding stays inside the agreement tolerance, and DN's offsets (from
    the float32 embeddings) stay within float32 rounding of the float64 folder's."""
    write_example(tmp_path / "f32", dtype=np.float32, embeddings=ALL)
    write_example(tmp_path / "f64", embeddings=ALL)
    f32, f64 = sims_tasks(tmp_path / "f32")["t2v"], sims_tasks(tmp_path / "f64")["t2v"]
    a, b = (t.score(t.fit(hn.make_normalizer("dn", lam=0.5))).numpy() for t in (f32, f64))
    assert np.abs(a - b).max() < 1e-5


def test_an_export_records_and_checks_bank_embeddings_the_folder_holds_without_a_matrix(capsys, tmp_path):
    """The text bank given only as embeddings (no bank_rows matrix: its scores are their product): DN exports from the
    folder, and ``hubnorm check`` sees a changed bank embeddings file, as it sees a changed bank matrix."""
    from hubnorm import cli
    from hubnorm.data.sims import write_sims

    caps, items, c2i, bank_caps, bank_items = write_example(tmp_path / "src")
    folder = tmp_path / "folder"
    write_sims(folder, {"test": caps @ items.T}, labels=c2i, dataset="example", synthetic=True,
               embeddings={"test_rows": caps, "test_cols": items, "bank_rows": bank_caps[:60]})
    out = tmp_path / "export"
    assert cli.main(["export", f"sims:{folder}", "--method", "dn", "--direction", "t2v", "--out", str(out)]) == 0
    man = json.loads((out / "manifest.json").read_text())
    bank = man["directions"]["t2v"]["bank"]
    assert bank["matrices"] == {} and bank["embeddings"]["query_bank"]["rows"] == 60
    emb = hn.build_tasks(items, caps, c2i, caption_bank=bank_caps[:60])["t2i"]
    np.testing.assert_allclose(cli.load_export(out)["arrays"]["t2v"]["offsets"],
                               emb.fit(hn.make_normalizer("dn")).offsets, rtol=0, atol=1e-12)
    assert cli.main(["check", str(out), "--source", f"sims:{folder}"]) == 0
    _edit(folder, "bank_rows", np.roll(bank_caps, 1, axis=0))   # the same texts in another order
    capsys.readouterr()
    assert cli.main(["check", str(out), "--source", f"sims:{folder}"]) == 3
    text = capsys.readouterr().out
    then, now = text.split("then: ")[1].split(")")[0].split("; now: ")
    assert "t2v: the reference bank changed" in text and then.startswith("query_bank 60 rows sha256 ")
    assert now.startswith("query_bank 60 rows sha256 ") and now != then


def test_write_sims_refuses_an_unknown_embeddings_key(tmp_path):
    from hubnorm.data.sims import write_sims

    with pytest.raises(ValueError, match=r"unknown embeddings key 'rows'; the keys are \['test_rows', 'test_cols', "):
        write_sims(tmp_path, {"test": np.eye(3)}, labels=np.arange(3), embeddings={"rows": np.eye(3)})


def test_the_notebooks_keep_a_bank_given_only_as_embeddings(tmp_path):
    """open_data used to see no bank x gallery matrix and replace the folder's bank with the test queries
    (query-aware) where the bank's embeddings give it (review)."""
    from hubnorm.data.sims import write_sims
    from hubnorm_companion.protocol import open_data

    caps, items, c2i, bank_caps, bank_items = write_example(tmp_path / "src")
    write_sims(tmp_path / "f", {"test": caps @ items.T}, labels=c2i, synthetic=True,
               embeddings={"test_rows": caps, "test_cols": items, "bank_rows": bank_caps})
    run = open_data(f"sims:{tmp_path / 'f'}", directions=["t2i", "i2t"])
    assert run.test_as_bank == ("i2t",) and run.all_tasks["t2i"].size("query_bank") == 60
    assert run.needs_embeddings("DN", "queries", "targets", "query_bank")   # i2t: its test queries serve, embedded
    assert not run.needs_embeddings("DN", "target_bank")   # no video bank: a NOTE


def test_an_iteration_table_on_score_matrices_releases_what_it_read(tmp_path):
    """The one run reads a stored bank matrix into memory as a fit does, and lets it go as a fit does (review: the
    task's engine kept it for the task's lifetime)."""
    from hubnorm.sweeps import iteration_table

    write_example(tmp_path)
    task = sims_tasks(tmp_path)["t2v"]
    table = iteration_table(task, "sn", [1, 3], tau=0.05)
    assert table["iterations run"].tolist() == [1, 3] and task.engine._res == {} and not task.engine._checked
