"""The engine interface (issue 43, scope 1): ``hubnorm.blocks.Engine`` is what a method's ``fit_blocks`` may ask of an
engine. Every engine implements it, and the methods' files use nothing else — so a method written once runs on
every engine (in memory, sweeps, a faiss index, Dask, stored score matrices)."""
import ast
from pathlib import Path

import numpy as np
import pytest
import torch

import hubnorm
from hubnorm.blocks import ENGINE_MEMBERS, Engine
from hubnorm.engine import LocalEngine
from hubnorm.scores import ScoreEngine, matrices_from_embeddings
from hubnorm.sweeps import SweepEngine

LIB = Path(hubnorm.__file__).parent
#: Optional members, asked with hasattr (the dtype a stored matrix was written in).
OPTIONAL = {"base_dtype"}


def _unit(rng, n, d=8):
    x = rng.standard_normal((n, d))
    return torch.from_numpy(x / np.linalg.norm(x, axis=1, keepdims=True))


def _engines():
    rng = np.random.default_rng(0)
    t, qb, q = _unit(rng, 20), _unit(rng, 60), _unit(rng, 10)
    local = LocalEngine({"targets": t, "query_bank": qb, "target_bank": None})
    out = {"LocalEngine": local, "SweepEngine": SweepEngine(local),
           "ScoreEngine": ScoreEngine(matrices_from_embeddings(q.numpy(), t.numpy(), qb.numpy()))}
    try:
        from hubnorm.index import IndexEngine
        out["IndexEngine"] = IndexEngine({"targets": t, "query_bank": qb})
    except ImportError:  # pragma: no cover - faiss is optional
        pass
    try:
        from hubnorm.distributed import DaskEngine
        out["DaskEngine"] = DaskEngine(t, {"query_bank": qb.numpy(), "target_bank": None}, check=True)
    except ImportError:  # pragma: no cover - dask is optional
        pass
    return out


@pytest.mark.parametrize("name", ["LocalEngine", "SweepEngine", "ScoreEngine", "IndexEngine", "DaskEngine"])
def test_every_engine_implements_the_protocol(name):
    engines = _engines()
    if name not in engines:
        pytest.skip(f"{name} needs an optional dependency that is not installed")
    engine = engines[name]
    missing = [m for m in ENGINE_MEMBERS if not hasattr(engine, m)]
    assert not missing, f"{name} lacks {missing}"
    assert isinstance(engine, Engine)
    assert engine.has("targets") and engine.size("targets") == 20 and engine.size("query_bank") == 60


def test_the_protocol_lists_its_members():
    declared = set(Engine.__annotations__) | {n for n, v in vars(Engine).items()
                                              if callable(v) and not n.startswith("_")}
    assert declared == set(ENGINE_MEMBERS)


def _engine_uses(path: Path):
    """``engine.<attr>`` reads in a file (the names its methods ask an engine for), with line numbers."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "engine":
            yield node.attr, node.lineno


def test_methods_use_only_the_protocol():
    files = sorted((LIB / "normalizers").glob("*.py")) + [LIB / "blocks.py"]
    stray = [f"{p.relative_to(LIB)}:{line}: engine.{attr}" for p in files for attr, line in _engine_uses(p)
             if attr not in ENGINE_MEMBERS and attr not in OPTIONAL]
    assert not stray, "a method reads an engine member outside hubnorm.blocks.Engine:\n" + "\n".join(stray)
    used = {attr for p in files for attr, _ in _engine_uses(p)}
    assert {"reduce", "iterate", "size", "dtype"} <= used   # the scan sees the methods' engine calls


def test_a_stray_member_is_found(tmp_path):
    """The scan of the test above does find a member outside the protocol."""
    f = tmp_path / "m.py"
    f.write_text("def fit_blocks(self, engine):\n    return engine.inputs['targets']\n")
    assert list(_engine_uses(f)) == [("inputs", 2)]
