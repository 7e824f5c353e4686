"""sims: manifests in YAML as well as JSON (manifest.yaml / manifest.yml, read with yaml.safe_load only): the same
folder loads the same from either format, errors name the file, and a folder with two manifests is refused."""

from __future__ import annotations

import json

import pytest
import yaml

import hubnorm as hn
from hubnorm.data.sims import SimsError, load_sims
from hubnorm.scores import sims_tasks

from test_sims import write_example


def _to_yaml(folder, name="manifest.yaml"):
    man = json.loads((folder / "manifest.json").read_text())
    (folder / name).write_text(yaml.safe_dump(man, sort_keys=False))
    (folder / "manifest.json").unlink()
    return man


@pytest.mark.parametrize("name", ["manifest.yaml", "manifest.yml"])
def test_yaml_manifest_equals_json(tmp_path, name):
    js, ym = tmp_path / "json", tmp_path / "yaml"
    write_example(js)
    write_example(ym)
    man = _to_yaml(ym, name)
    a, b = load_sims(js), load_sims(ym)
    assert a.manifest == b.manifest == man
    for d in ("t2v", "v2t"):
        tb, ta = sims_tasks(b)[d], sims_tasks(a)[d]
        got = hn.evaluate(tb.fit(hn.make_normalizer("dbsn", tau=0.05)), tb)
        want = hn.evaluate(ta.fit(hn.make_normalizer("dbsn", tau=0.05)), ta)
        assert got == want


def test_yaml_errors_name_the_file(tmp_path):
    write_example(tmp_path)
    man = _to_yaml(tmp_path)
    path = tmp_path / "manifest.yaml"
    path.write_text("format: hubnorm-sims\nmatrices: [unclosed\n")
    with pytest.raises(SimsError, match=r"manifest.yaml: not valid YAML"):
        load_sims(tmp_path)
    path.write_text("- a list\n- not a mapping\n")
    with pytest.raises(SimsError, match=r"manifest.yaml: the manifest must be a mapping"):
        load_sims(tmp_path)
    # safe_load only: a Python object tag is refused, never constructed
    path.write_text("!!python/object/apply:os.system ['echo unsafe']\n")
    with pytest.raises(SimsError, match=r"manifest.yaml: not valid YAML"):
        load_sims(tmp_path)
    path.write_text(yaml.safe_dump({**man, "version": 7}))
    with pytest.raises(SimsError, match=r"manifest.yaml: 'version' must be 1"):
        load_sims(tmp_path)
    path.write_text(yaml.safe_dump({**man, "matrices": {**man["matrices"], "bank_rows": "nope.npy"}}))
    with pytest.raises(SimsError, match=r"nope.npy \(matrix 'bank_rows'\) is missing"):
        load_sims(tmp_path)


def test_json_errors_name_the_file(tmp_path):
    write_example(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(SimsError, match=r"manifest.json: not valid JSON"):
        load_sims(tmp_path)


def test_a_folder_with_two_manifests_is_refused(tmp_path):
    write_example(tmp_path)
    man = json.loads((tmp_path / "manifest.json").read_text())
    (tmp_path / "manifest.yml").write_text(yaml.safe_dump(man))
    with pytest.raises(SimsError, match=r"holds 2 manifests \(manifest.json, manifest.yml\): keep one"):
        load_sims(tmp_path)
    (tmp_path / "manifest.json").unlink()
    assert load_sims(tmp_path).manifest == man
