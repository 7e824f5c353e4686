"""Notebook 08 runs with only its source changed: on a small generated sims: folder (released score matrices) and on
a small local: folder of embeddings (synthetic data forbidden in the run). Each run takes about 20-30 s."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from conftest import REPO
from method_checks import unit_rows
from test_sims import write_example

NB = REPO / "notebooks" / "08_video_audio_retrieval.ipynb"


def _run(tmp_path, parameters, forbid_synthetic=False):
    papermill = pytest.importorskip("papermill")
    env_before = dict(os.environ)
    os.environ.update({"HUBNORM_RESULTS": str(tmp_path / "results"), "HUBNORM_PROGRESS": "0"})
    if forbid_synthetic:
        os.environ["HUBNORM_FORBID_SYNTHETIC"] = "1"
    try:
        out = tmp_path / NB.name
        papermill.execute_notebook(str(NB), str(out), parameters=parameters, cwd=str(NB.parent),
                                   kernel_name="python3", progress_bar=False, execution_timeout=300)
    finally:
        os.environ.clear()
        os.environ.update(env_before)
    cells = json.loads(out.read_text())["cells"]
    return "\n".join("".join(o.get("text", "")) + json.dumps(o.get("data", {}).get("text/plain", ""))
                     for c in cells if c["cell_type"] == "code" for o in c.get("outputs", []))


@pytest.mark.slow
def test_notebook_08_on_a_sims_folder(tmp_path):
    folder = tmp_path / "sims"
    write_example(folder)
    text = _run(tmp_path, {"source": f"sims:{folder}", "audio_sources": []})
    assert "synthetic analog (sims folder example)" in text
    assert "t2v" in text and "v2t" in text and "t2i" not in text
    assert "NOTE: no audio source" in text
    assert (tmp_path / "results" / "tables" / "08_dbsn_table4_query_banks.csv").exists()


@pytest.mark.slow
def test_notebook_08_on_local_embeddings(tmp_path):
    rng = np.random.default_rng(5)
    videos = unit_rows(rng, 60, 32, np.float32)
    caps = videos.repeat(2, axis=0) + 0.8 * unit_rows(rng, 120, 32, np.float32)
    caps /= np.linalg.norm(caps, axis=1, keepdims=True)
    folder = tmp_path / "local"
    folder.mkdir()
    np.save(folder / "image_embeddings.npy", videos.repeat(2, axis=0))   # per-caption rows
    np.save(folder / "text_embeddings.npy", caps)
    text = _run(tmp_path, {"source": f"local:{folder}", "item_modality": "video"}, forbid_synthetic=True)
    assert "synthetic analog" not in text and "real data" in text
    assert "t2v" in text and "v2t" in text
