"""Issue 23's regression tests: own data of any shape, published rows never guessed, integrity of on-disk inputs,
run_all.sh parameters and results folders."""

import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import hubnorm as hn
from conftest import REPO, shared_path
from hubnorm_companion import protocol as pr
from local_folders import KINDS, make_folder


# ---------------------------------------------------------------------------------------------- layouts
@pytest.mark.parametrize("kind", list(KINDS))
def test_every_layout_loads_with_the_right_grouping(kind, tmp_path):
    spec = KINDS[kind]
    ds = pr.prepare_dataset(f"local:{make_folder(tmp_path, kind)}")
    n = sum(ds.split(s).n_images for s in ("test", "train", "val"))
    assert n == spec["n"]
    for s in ds.splits.values():
        assert s.n_captions == spec["per"] * s.n_images
        assert (np.bincount(s.caption_to_image, minlength=s.n_images) == spec["per"]).all()
        assert (s.caption_texts is not None) == spec["texts"]
    # the README's API tour works on every source kind: tasks on val and test with a training bank
    for split in ("val", "test"):
        task = ds.tasks(split=split, bank="train")["t2i"]
        assert hn.evaluate(task.fit(hn.make_normalizer("nnn", k=4)), task)["R@1"] > 0


def test_shuffled_per_caption_rows_without_metadata_are_an_error(tmp_path):
    folder = make_folder(tmp_path, "shuffled5-meta")
    (folder / "metadata.csv").unlink()
    with pytest.raises(ValueError, match="not grouped by image.*ambiguous.*metadata.csv with an image_id"):
        hn.load_embeddings(f"local:{folder}")


@pytest.mark.shared_data
def test_real_flickr8k_rows_shuffled_error_without_metadata_and_regroup_with_it(tmp_path):
    f8k = shared_path("embeddings", "flickr8k-100x5-clip-vitb32")
    perm = np.random.default_rng(0).permutation(500)
    for name in ("image_embeddings.npy", "text_embeddings.npy"):
        np.save(tmp_path / name, np.load(f8k / name)[perm])
    with pytest.raises(ValueError, match="not grouped by image"):        # was: 247 test "images", no warning
        hn.load_embeddings(f"local:{tmp_path}")
    with open(f8k / "metadata.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    with open(tmp_path / "metadata.csv", "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows([rows[0]] + [rows[1 + j] for j in perm])
    ds = hn.load_embeddings(f"local:{tmp_path}")
    assert ds.split("test").n_images == 50 and ds.split("test").n_captions == 250
    task = ds.tasks("test", bank=None)["t2i"]
    assert hn.evaluate(task.fit(hn.make_normalizer("raw")), task)["R@1"] > 70   # was 33.3


# ---------------------------------------------------------------------------------------------- published rows
def test_dataset_is_declared_never_guessed_from_a_folder_name(tmp_path, capsys):
    folder = tmp_path / "flickr8k-100x5-clip-vitb32"    # a name that says "flickr": not a declaration
    shutil.copytree(make_folder(tmp_path, "percap5-texts-clip"), folder)
    ds = pr.prepare_dataset(f"local:{folder}")
    assert pr.dataset_key(f"local:{folder}", ds) == "unknown"
    assert pr.published_dataset(f"local:{folder}", ds) == "unknown"
    assert "no published rows are compared with this run: the source declares no data set" in capsys.readouterr().out
    (folder / "model_info.json").write_text(json.dumps({"model_name": "ViT-B-32", "dataset": "coco"}))
    ds = pr.prepare_dataset(f"local:{folder}")
    assert pr.published_dataset(f"local:{folder}", ds) == "coco"
    assert pr.dataset_key("synthetic:flickr30k-isotropic") == "flickr30k"
    assert pr.dataset_key("cache:coco:ViT-B-32-quickgelu:openai") == "coco"
    with pytest.raises(ValueError, match=r"dataset='imagenet'.*known: \['coco', 'flickr30k'\]"):
        pr.published_dataset("synthetic:flickr30k", None, "imagenet")


def test_unknown_published_model_names_are_errors_listing_the_known_ones():
    ds = hn.load_embeddings("synthetic:flickr30k", n_train_images=20, n_test_images=10, dim=128)
    with pytest.raises(ValueError, match=r"model='NoSuchModel'.*known: .*'CLIP'"):
        pr.published_model(ds, "NoSuchModel")
    with pytest.raises(ValueError, match=r"model='clip'"):
        pr.published_model(ds, "clip")
    with pytest.raises(ValueError, match=r"model='bogus'.*'zs CLIP'"):
        pr.published_model(ds, "bogus", paper="dbsn")
    assert pr.published_model(ds, "CLIP") == "CLIP"


def test_no_published_rows_is_a_note_not_an_empty_column_that_claims_otherwise(capsys):
    import pandas as pd

    from hubnorm_companion import compare

    assert pr.published_label("nnn", None, "flickr30k").startswith("none (")
    assert pr.published_label("nnn", "CLIP", "unknown").startswith("none (")
    assert pr.published_label("nnn", "CLIP", "flickr30k") == "NNN paper, CLIP on flickr30k"
    ours = pd.DataFrame({"direction": ["t2i"], "method": ["nnn"], "metric": ["R@1"], "value": [50.0]})
    empty = compare.published("nnn-chowdhury2024", "A6", model="no-such", dataset="flickr30k")
    out = compare.side_by_side(ours, empty, ["direction", "method", "metric"], label="x", source_note="NNN A6")
    assert out["published source"].iloc[0].startswith("none (")
    assert "NOTE: no published rows match this table" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------- integrity
def test_a_shard_rewritten_after_open_bank_is_refused(tmp_path):
    from hubnorm import distributed as hd

    rng = np.random.default_rng(0)
    hd.save_bank_shards([rng.standard_normal((40, 8)), rng.standard_normal((40, 8))], tmp_path)
    bank = hd.open_bank(tmp_path, chunk_rows=30)
    assert bank.compute(scheduler="synchronous").shape == (80, 8)
    shard = sorted(tmp_path.glob("*.npy"))[1]
    st = os.stat(shard)
    np.save(shard, rng.standard_normal((40, 8)))                  # same shape, new rows
    with pytest.raises(RuntimeError, match="changed after it was opened"):
        bank.compute(scheduler="synchronous")
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))          # even with the old mtime: the checksum differs
    with pytest.raises(RuntimeError, match="checksum"):
        bank.compute(scheduler="synchronous")
    fresh = hd.open_bank(tmp_path, chunk_rows=30)                 # opened again: read
    np.testing.assert_array_equal(fresh.compute(scheduler="synchronous")[40:], np.load(shard))
    shard.unlink()
    with pytest.raises(RuntimeError, match="can no longer be read"):
        fresh.compute(scheduler="synchronous")


# ---------------------------------------------------------------------------------------------- run_all.sh
def _run_all(*args, env=None, timeout=300):
    e = {**os.environ, **(env or {})}
    return subprocess.run(["bash", str(REPO / "run_all.sh"), *args], capture_output=True, text=True, env=e,
                          timeout=timeout, cwd=REPO)


def test_run_all_merges_param_and_params_file(tmp_path):
    pfile = tmp_path / "p.yaml"
    pfile.write_text("bank_fraction: 1.0\nmodel: CLIP\n")
    script = REPO / "scripts" / "notebook_params.py"
    out = subprocess.run([sys.executable, str(script), "--merge", "{source: 'x', fast: true}", "--params", str(pfile),
                          "--param", "model=SigLIP", "--param", "directions=[t2i]"],
                         capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"source": "x", "fast": True, "bank_fraction": 1.0, "model": "SigLIP",
                                      "directions": ["t2i"]}
    bad = subprocess.run([sys.executable, str(script), "--merge", "{}", "--param", "bank_fracton=1.0"],
                         capture_output=True, text=True, cwd=REPO, timeout=120)
    assert bad.returncode != 0 and "no notebook has the parameter(s) ['bank_fracton']" in bad.stderr
    bad = subprocess.run([sys.executable, str(script), "--merge", "{}", "--param", "bank_fraction"],
                         capture_output=True, text=True, cwd=REPO, timeout=120)
    assert bad.returncode != 0 and "expects NAME=VALUE" in bad.stderr


@pytest.mark.slow
def test_run_all_source_writes_under_hubnorm_results_into_a_cleared_folder_named_after_it(tmp_path):
    """One quick notebook (03) on a tiny folder: outputs under $HUBNORM_RESULTS/own-local-<folder>+<changed
    parameters>, --param reaches the notebook and is validated there; a run without parameters writes to
    own-local-<folder>, whose earlier files it removes."""
    folder = make_folder(tmp_path, "tiny60")
    root = tmp_path / "res"
    stale = root / "own-local-tiny60" / "tables" / "stale.csv"
    stale.parent.mkdir(parents=True)
    stale.write_text("old")
    r = _run_all("--source", f"local:{folder}", "--only", "03", "--quiet", "--param", "bank_fraction=1.0",
                 "--param", "ks=[1, 4, 16]", env={"HUBNORM_RESULTS": str(root)})
    assert r.returncode == 0, r.stdout + r.stderr
    out = root / "own-local-tiny60+bank_fraction-1.0_ks-1-4-16"   # the source, then the changed parameters
    assert (out / "MANIFEST.json").is_file() and (out / "tables" / "03_nnn_tables_A3_A4_k.csv").exists()
    assert stale.exists()   # another configuration's folder: never touched
    r = _run_all("--source", f"local:{folder}", "--only", "03", "--quiet", env={"HUBNORM_RESULTS": str(root)})
    assert r.returncode == 0, r.stdout + r.stderr
    assert not stale.exists()   # this source's own folder: cleared before its run
    executed = (out / "notebooks" / "03_k_ablation.ipynb").read_text()
    assert "reference bank: 20 images / 100 captions" in executed   # bank_fraction=1.0: the whole 20-image train
    r = _run_all("--source", f"local:{folder}", "--only", "03", "--quiet", "--param", "flat_tol=-1",
                 env={"HUBNORM_RESULTS": str(root)})
    assert r.returncode == 2   # refused before any notebook runs, nothing written for it
    assert "run_all.sh: bad parameters (nothing was run):\nnotebook 03 parameter flat_tol must be >= 0" in r.stderr
    assert not (root / "own-local-tiny60+flat_tol--1").exists()


@pytest.mark.slow
def test_run_all_source_sims_runs_a_notebook_end_to_end_and_skips_none(tmp_path):
    """run_all.sh --source sims:<folder> (issue 22): no notebook is skipped (the runner's own selection: every
    notebook's needs are offered by a sims: source), and one notebook (03) runs through the runner and papermill
    under the folder's label, with the NOTE on what needs embeddings. Every notebook on a sims folder of each
    manifest (synthetic and real) runs in tests/test_notebook_matrix.py (in this process, no kernel start each), so
    the ten kernel starts of a full run here added time and no coverage of a (notebook, input) pair."""
    from hubnorm_tools.profiles import load_profiles
    from test_sims import write_example

    profiles = load_profiles()
    folder = tmp_path / "my-sims"
    offers = set(profiles.offers("default", f"sims:{folder}"))
    notebooks = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert notebooks and all(set(profiles.notebook(nb.stem).needs) <= offers for nb in notebooks), \
        [nb.stem for nb in notebooks if not set(profiles.notebook(nb.stem).needs) <= offers]
    write_example(folder)
    root = tmp_path / "res"
    r = _run_all("--source", f"sims:{folder}", "--only", "03", "--quiet", env={"HUBNORM_RESULTS": str(root)})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "skipped:" not in r.stdout and "all notebooks ok (0 skipped)" in r.stdout
    out = root / "own-sims-my-sims"
    executed = sorted((out / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert [p.name[:2] for p in executed] == ["03"]
    cells = json.loads(executed[0].read_text())["cells"]
    text = "\n".join(json.dumps(c.get("outputs", [])) for c in cells if c["cell_type"] == "code")
    assert "synthetic analog (sims folder example)" in text
    assert "real data" not in text, "a synthetic folder's run says 'real data'"
    assert "NOTE: the alpha x k grid on the held-out split (section 2) needs embeddings" in text   # its own cells
    assert "synthetic analog (sims folder example)" in (out / "tables" / "03_gains.csv").read_text()


# ---------------------------------------------------------------------------------------------- CLI and cache
def test_cli_bad_device_is_an_error_line_not_a_traceback(capsys):
    from hubnorm.data import cli

    rc = cli.main(["encode-texts", "local:/nonexistent", "--device", "bogus"])
    err = capsys.readouterr().err
    assert rc == 2 and "--device 'bogus' is not a torch device" in err and "Traceback" not in err


@pytest.mark.parametrize("errno_name,words", [("ENOSPC", "the disk is full"), ("EROFS", "read-only"),
                                             ("EACCES", "permission denied")])
def test_cli_full_or_read_only_disk_is_an_error_line(monkeypatch, capsys, tmp_path, errno_name, words):
    import errno

    import importlib

    from hubnorm.data import cli
    rehearse = importlib.import_module("hubnorm.data.rehearse")

    def full(*args, **kwargs):
        code = getattr(errno, errno_name)
        raise OSError(code, os.strerror(code), str(tmp_path / ".images.npy.partial"))

    monkeypatch.setattr(rehearse, "rehearse", full)
    rc = cli.main(["rehearse", "--dataset", "coco", "--cache-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and words in err and ".images.npy.partial" in err and "Traceback" not in err


def test_concurrent_streaming_writers_use_their_own_temporary_files(tmp_path):
    """Two writers of one cache entry at once (concurrent `rehearse --force`): both finish, the entry is whole."""
    import threading

    from hubnorm.data.cache import MANIFEST, write_entry_streaming

    rng = np.random.default_rng(0)
    imgs, caps = rng.standard_normal((6, 4)).astype(np.float32), rng.standard_normal((12, 4)).astype(np.float32)
    started, errors = threading.Barrier(2), []

    def chunks():
        started.wait(timeout=30)          # both writers have opened their temporary files
        for i in range(3):
            time.sleep(0.05)
            yield 2 * i, imgs[2 * i:2 * i + 2], 4 * i, caps[4 * i:4 * i + 4]

    def write():
        try:
            write_entry_streaming(tmp_path, {"dataset": "x"}, 6, 12, 4, chunks(), np.repeat(np.arange(6), 2),
                                  [f"{i}.jpg" for i in range(6)], [f"c{j}" for j in range(12)])
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=write) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    np.testing.assert_array_equal(np.load(tmp_path / "images.npy"), imgs)
    assert not list(tmp_path.glob("*.partial"))
    assert json.loads((tmp_path / MANIFEST).read_text())["files"]["captions.npy"]["rows"] == 12


def test_cache_and_data_roots_are_checked_where_read(monkeypatch, tmp_path):
    from hubnorm.data.paths import cache_root, data_root

    afile = tmp_path / "f"
    afile.write_text("x")
    monkeypatch.setenv("HUBNORM_CACHE", str(afile))
    with pytest.raises(ValueError, match="HUBNORM_CACHE=.* is a file"):
        cache_root()
    monkeypatch.setenv("HUBNORM_DATA", "   ")
    with pytest.raises(ValueError, match="HUBNORM_DATA is set but blank"):
        data_root()
    monkeypatch.setenv("HUBNORM_CACHE", str(tmp_path / "new"))
    assert cache_root() == tmp_path / "new"


# ---------------------------------------------------------------------------------------------- small sets
def test_clamped_bank_shares_are_reported_and_never_run_as_distinct(capsys):
    from hubnorm_companion import studies

    kept = studies.distinct_fractions([1 / 4, 1 / 256, 1 / 512, 1 / 1024], 250, what="query-bank share",
                                      unit="caption")
    assert kept == [1 / 4, 1 / 256]                      # 1/512 and 1/1024 give the same 1-caption bank as 1/256
    out = capsys.readouterr().out
    assert out.count("NOTE: query-bank share") == 2 and "same 1-caption bank as 1/256" in out
    assert studies.fraction_size(1 / 1024, 250) == 1 and studies.fraction_size(1.0, 250) == 250


def test_grid_search_ties_are_reported_with_the_rule_that_broke_them(capsys):
    """A saturated validation split: every grid point scores 100% R@1; the first point wins and the run says so."""
    rng = np.random.default_rng(0)
    imgs = hn.l2_normalize(rng.standard_normal((8, 32)))
    caps = hn.l2_normalize(np.repeat(imgs, 2, axis=0) + 0.01 * rng.standard_normal((16, 32)))
    bank = hn.l2_normalize(rng.standard_normal((40, 32)))
    task = hn.build_tasks(imgs, caps, np.repeat(np.arange(8), 2), image_bank=bank, caption_bank=bank,
                          directions=("t2i",))["t2i"]
    sel = hn.grid_search("nnn", task, {"alpha": [0.25, 0.5], "k": [1, 2]})
    assert sel.best_score == 100.0 and sel.n_tied == 4 and sel.best_params == {"alpha": 0.25, "k": 1}
    assert "4 of 4 grid points tie at R@1 100.00" in sel.tie_note and "first tied grid point" in sel.tie_note
    res, table = pr.select_and_evaluate({"t2i": task}, {"t2i": task}, ["nnn"], {"nnn": {"alpha": [0.25, 0.5],
                                                                                       "k": [1, 2]}},
                                        show_progress=False)
    assert table["tied"].tolist() == [4]
    assert "NOTE: nnn t2i: 4 of 4 grid points tie" in capsys.readouterr().out
    unique = hn.grid_search("nnn", task, {"alpha": [0.5], "k": [1]})
    assert unique.n_tied == 1 and unique.tie_note == ""


def test_validation_split_follows_one_rule():
    from hubnorm.embeddings import validation_size

    assert validation_size(100, 50) == 50      # train >= 2 x test: the size of test (NNN App. B)
    assert validation_size(50, 50) == 16       # else a third of train
    assert validation_size(2, 50) == 1 and validation_size(1, 50) == 0


@pytest.mark.parametrize("kind", ["pairs1-unknown", "stacked1", "tiny60"])
def test_readme_api_tour_runs_on_own_folders(kind, tmp_path):
    """The README's API tour, with its source replaced by a local: folder, runs as written."""
    import re

    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if "hn.load_embeddings(" in b)
    folder = make_folder(tmp_path, kind)
    code = block.replace('hn.load_embeddings("synthetic:flickr30k", seed=0)', f'hn.load_embeddings("local:{folder}")')
    code = code.replace("n_boot=1000", "n_boot=20")
    assert f"local:{folder}" in code
    exec(compile(code, "README.md", "exec"), {})


@pytest.mark.parametrize("name", ["is", "sn", "nnn"])
def test_a_nan_row_in_a_dask_shard_is_named_as_such(name, tmp_path):
    """Distributed IS/SN with a NaN row used to say "tau is too extreme"; every method now names the NaN."""
    pytest.importorskip("dask.array")
    from hubnorm import distributed as hd

    rng = np.random.default_rng(0)
    bank = hn.l2_normalize(rng.standard_normal((60, 8)))
    bank[17] = np.nan
    hd.save_bank_shards([bank[:30], bank[30:]], tmp_path)
    targets = hn.l2_normalize(rng.standard_normal((20, 8)))
    norm = hn.make_normalizer(name, **({"k": 4} if name == "nnn" else {}))
    with pytest.raises(ValueError, match=r"(?i)nan"):
        norm.fit(targets, query_bank=hd.open_bank(tmp_path, chunk_rows=25))
