"""Score matrices without waste (review of issue 22): embeddings sources are scored block by block, never as a
dense bank x gallery matrix; the second direction reads the first's matrices transposed; bank subsets follow one
rule for embeddings and sims: folders; a sims folder is verified in one pass (checksum and NaN scan), written
atomically; a matrix read transposed is read along its contiguous axis."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

import hubnorm as hn
from hubnorm import media
from hubnorm.data.sims import SimsError, load_sims, scan_npy, write_sims
from hubnorm.matrices import ProductScores, ScoreMatrix
from hubnorm.scores import matrices_from_embeddings

from test_sims import write_example


def _media(seed=0):
    rng = np.random.default_rng(seed)
    items = rng.standard_normal((20, 8))
    caps = items.repeat(2, axis=0) + 0.8 * rng.standard_normal((40, 8))
    return media.MediaData("toy", ("text", "video"), items, caps, np.arange(20).repeat(2),
                           bank_items=rng.standard_normal((30, 8)), bank_captions=rng.standard_normal((70, 8)),
                           synthetic=True)


def test_media_tasks_are_lazy_and_share_the_transpose():
    tasks = media.media_tasks(_media(), bank_queries=50, target_bank=25)
    for t in tasks.values():
        assert all(isinstance(m, ProductScores) for m in t.engine.matrices.values())
    f, b = tasks["t2v"].matrix("queries", "targets"), tasks["v2t"].matrix("queries", "targets")
    assert f.a is b.b and f.b is b.a           # v2t's test matrix is t2v's read transposed: nothing recomputed
    assert tasks["t2v"].size("query_bank") == 50 and tasks["v2t"].size("target_bank") == 25


@pytest.mark.parametrize("name,params", [("is", {"tau": 0.05}), ("nnn", {"k": 3}), ("dis", {"tau": 0.05}),
                                         ("sn", {"tau": 0.05}), ("dbsn", {"tau": 0.05}),
                                         ("dualis", {"beta_query": 20.0, "beta_target": 5.0})])
def test_media_tasks_equal_dense_matrices(name, params):
    """The lazy product matrices give the numbers of the dense float64 matrices (1e-12), both directions."""
    d = _media()
    tasks = media.media_tasks(d)
    for direction, q, t, qb, tb in (("t2v", d.captions, d.items, d.bank_captions, d.bank_items),
                                    ("v2t", d.items, d.captions, d.bank_items, d.bank_captions)):
        dense = hn.RetrievalTask(scores=matrices_from_embeddings(q, t, qb, tb), positives=tasks[direction].positives,
                                 direction=direction, check=False)
        got = hn.evaluate(tasks[direction].fit(hn.make_normalizer(name, **params)), tasks[direction])
        want = hn.evaluate(dense.fit(hn.make_normalizer(name, **params)), dense)
        assert got == pytest.approx(want, abs=1e-12), (direction, got, want)


def test_sims_bank_subsets_equal_the_embeddings_subsets(tmp_path):
    """bank_queries / target_bank are honoured for a sims: folder, with the same seeded subsets as embeddings."""
    caps, items, c2i, bank_caps, bank_items = write_example(tmp_path)
    data = media.MediaData("example", ("text", "video"), items, caps, c2i, bank_items=bank_items,
                           bank_captions=bank_caps)
    emb = media.media_tasks(data, bank_queries=25, target_bank=15, seed=3)
    src = media.load_media(f"sims:{tmp_path}", bank_queries=25, target_bank=15, seed=3)
    for d in ("t2v", "v2t"):
        assert src.tasks[d].size("query_bank") == 25 and src.tasks[d].size("target_bank") == 15
        for name, params in (("is", {"tau": 0.05}), ("dbsn", {"tau": 0.05}),
                             ("dualis", {"beta_query": 20.0, "beta_target": 5.0})):
            got = hn.evaluate(src.tasks[d].fit(hn.make_normalizer(name, **params)), src.tasks[d])
            want = hn.evaluate(emb[d].fit(hn.make_normalizer(name, **params)), emb[d])
            assert got == pytest.approx(want, abs=1e-12), (d, name)


def test_load_media_refuses_arguments_a_source_cannot_honour(tmp_path):
    write_example(tmp_path)
    with pytest.raises(ValueError, match="n_train sets the training items of a synthetic"):
        media.load_media(f"sims:{tmp_path}", n_train=100)
    with pytest.raises(ValueError, match="item_modality='audio' contradicts"):
        media.load_media(f"sims:{tmp_path}", item_modality="audio")
    assert media.is_preset("synthetic:msrvtt") and not media.is_preset(f"sims:{tmp_path}")


def test_letters_defined_once():
    from hubnorm.data import sims

    assert media.LETTERS is sims.LETTERS


def test_write_sims_is_atomic_and_checksums_are_the_files(tmp_path):
    write_example(tmp_path)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    s = load_sims(tmp_path)
    for name, digest in s.manifest["checksums"].items():
        assert hashlib.sha256((tmp_path / name).read_bytes()).hexdigest() == digest
    # the verifying pass also gives each matrix's largest |s|, so no engine pass is spent on it
    for role, arr in s.matrices.items():
        assert s.bounds[role] == float(np.abs(np.asarray(arr)).max())
    task = hn.scores.sims_tasks(s)["t2v"]
    assert task.engine.score_bound(hn.blocks.Scores("query_bank", "targets")) == s.bounds["bank_rows"]
    assert task.engine.blocks_read == 0


@pytest.mark.parametrize("order", ["C", "F"])
def test_one_pass_scan_names_the_cell(tmp_path, order):
    x = np.arange(35, dtype=np.float32).reshape(5, 7) / 10
    x[3, 5] = np.nan
    path = tmp_path / "m.npy"
    np.save(path, np.asfortranarray(x) if order == "F" else x)
    arr = np.load(path, mmap_mode="r")
    with pytest.raises(SimsError, match=r"row 3, column 5"):
        scan_npy(path, arr, "matrix 'test'")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(SimsError, match="does not match the sha256"):   # a changed file is named before its NaN
        scan_npy(path, arr, "matrix 'test'", checksum="0" * 64)
    x[3, 5] = -9.0
    np.save(path, x)
    digest_now = hashlib.sha256(path.read_bytes()).hexdigest()
    assert scan_npy(path, np.load(path, mmap_mode="r"), "m", checksum=digest_now) == 9.0
    assert digest != hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("plain", [True, False])
def test_transposed_matrix_is_read_along_its_contiguous_axis(tmp_path, monkeypatch, plain):
    """A C-order file read transposed (the second direction) is read by strips of whole stored rows (by the plain
    block loop through the stored matrix, and by the fast path's view of the memory map: its checking pass and
    the kernels, which never go through ScoreMatrix's block reads)."""
    rng = np.random.default_rng(0)
    path = tmp_path / "bank.npy"
    np.save(path, rng.standard_normal((6, 400)))                  # stored: targets x bank; read: bank x targets
    m = ScoreMatrix(np.load(path, mmap_mode="r"), "bank.npy").T
    assert not m.rows_contiguous
    calls = []
    orig = ScoreMatrix._stored

    def spy(self, a0, a1, b0, b1):     # stored coordinates: rows a0:a1, columns b0:b1 of the file
        if self.label == "bank.npy":
            calls.append((a0, a1, b0, b1))
        return orig(self, a0, a1, b0, b1)

    monkeypatch.setattr(ScoreMatrix, "_stored", spy)
    test = np.asarray(rng.standard_normal((5, 6)))
    task = hn.RetrievalTask(scores={("queries", "targets"): test, ("query_bank", "targets"): m},
                            positives=hn.Positives.from_labels(np.arange(5) % 6, 6), block_bytes=400 * 8 * 2,
                            plain=plain, direction="t2v", check=False)
    was_plain = plain
    plain = task.fit(hn.make_normalizer("is", tau=0.1)).offsets_
    if was_plain:
        assert len(calls) >= 3 and all(c[2:] == (0, 400) and c[1] - c[0] <= 2 for c in calls)  # whole stored rows
    else:
        assert calls == [] and task.engine.blocks_read >= 3 and task.engine.largest_block == 2 * 400
    ref = torch_lme(np.load(path).T, 10.0)
    assert np.allclose(plain.numpy(), -0.1 * ref, atol=1e-12)


def torch_lme(s, scale):
    import torch

    s = torch.as_tensor(s, dtype=torch.float64)
    return (torch.logsumexp(scale * s, dim=0) - np.log(s.shape[0])).numpy()
