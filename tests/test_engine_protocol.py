"""The engine interface (issue 43, scope 1): ``hubnorm.blocks.Engine`` is what a method's ``fit_blocks`` may ask of an
engine. Every engine implements it, and the methods' files use nothing else — so a method written once runs on
every engine (in memory, sweeps, a faiss index, Dask, stored score matrices)."""
import ast
from pathlib import Path

import numpy as np
import pytest
import torch

import hubnorm
from hubnorm.blocks import ENGINE_MEMBERS, Embeddings, Engine, Scores
from hubnorm.engine import LocalEngine
from hubnorm.scores import matrices_from_embeddings
from hubnorm.sweeps import SweepEngine

LIB = Path(hubnorm.__file__).parent
#: Optional members, asked with hasattr (the dtype a stored matrix was written in).
OPTIONAL = {"base_dtype", "bound_in_kernel"}   # asked for with getattr: an engine may lack them


def _unit(rng, n, d=8):
    x = rng.standard_normal((n, d))
    return torch.from_numpy(x / np.linalg.norm(x, axis=1, keepdims=True))


def _engines():
    rng = np.random.default_rng(0)
    t, qb, q = _unit(rng, 20), _unit(rng, 60), _unit(rng, 10)
    local = LocalEngine({"targets": t, "query_bank": qb, "target_bank": None})
    stored = LocalEngine(matrices=matrices_from_embeddings(q.numpy(), t.numpy(), qb.numpy()))
    out = {"LocalEngine": local, "SweepEngine": SweepEngine(local), "LocalEngine over score matrices": stored}
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


@pytest.mark.parametrize("name", ["LocalEngine", "SweepEngine", "LocalEngine over score matrices", "IndexEngine",
                                  "DaskEngine"])
def test_every_engine_implements_the_protocol(name):
    engines = _engines()
    if name not in engines:
        pytest.skip(f"{name} needs an optional dependency that is not installed")
    engine = engines[name]
    missing = [m for m in ENGINE_MEMBERS if not hasattr(engine, m)]
    assert not missing, f"{name} lacks {missing}"
    assert isinstance(engine, Engine)
    assert engine.has("targets") and engine.size("targets") == 20 and engine.size("query_bank") == 60
    # the lifecycle's members answer: what is held as embeddings, what cannot be read, the banks' record
    held = engine.embeddings()
    stored = name == "LocalEngine over score matrices"
    assert set(held) == (set() if stored else {"targets"} if name == "DaskEngine" else {"targets", "query_bank"})
    why = engine.cannot_read(Embeddings("query_bank"))
    assert (why is not None and why.startswith("reads the embeddings of query_bank")) if stored else why is None
    assert engine.cannot_read(Scores("query_bank", "targets")) is None
    fps = engine.fingerprints(["query_bank"])
    assert set(fps) == {"query_bank"}
    fp = fps["query_bank"]() if callable(fps["query_bank"]) else fps["query_bank"]
    assert fp.kind == ("scores" if stored else "embeddings") and fp.rows == 60
    assert engine.fingerprints([]) == {} and engine.release() is None


def test_the_protocol_lists_its_members():
    declared = set(Engine.__annotations__) | {n for n, v in vars(Engine).items()
                                              if callable(v) and not n.startswith("_")}
    assert declared == set(ENGINE_MEMBERS)


def _engineish(node) -> bool:
    """An expression that holds an engine: a name ending in ``engine`` (``engine``, ``index_engine``) or an attribute
    ending in ``engine`` / ``engine_`` (``task.engine``, ``self.score_engine_``)."""
    if isinstance(node, ast.Name):
        return node.id.endswith("engine")
    return isinstance(node, ast.Attribute) and node.attr.rstrip("_").endswith("engine")


def _engine_uses(path: Path):
    """What a file asks of engines, with line numbers: ``<engine>.<attr>`` reads and ``getattr`` / ``hasattr`` of a
    literal name on an engine, outside the bodies of the engine classes themselves (``class ...Engine``: an engine
    reads its own members)."""
    tree = ast.parse(path.read_text())
    own = {id(n) for c in ast.walk(tree) if isinstance(c, ast.ClassDef) and c.name.endswith("Engine")
           for n in ast.walk(c)}
    for node in ast.walk(tree):
        if id(node) in own:
            continue
        if isinstance(node, ast.Attribute) and _engineish(node.value):
            yield node.attr, node.lineno
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "hasattr") \
                and len(node.args) >= 2 and _engineish(node.args[0]) and isinstance(node.args[1], ast.Constant):
            yield node.args[1].value, node.lineno


#: Engines a module builds and owns, whose own members it may read (the protocol is what code asks of an engine it
#: is *given*): a task of score matrices reads its stored matrices through the LocalEngine it built over them;
#: FaissNNN reads the search results of the IndexEngine it built (``IndexEngine``'s documented attributes).
OWNED = {"retrieval.py": {"matrix", "matrices", "has_matrix", "gallery"},
         "index/nnn.py": {"index", "scan", "nprobe", "tuning", "incomplete"}}


def test_the_library_uses_only_the_protocol():
    """Every module — the methods, the fit lifecycle, provenance, sweeps, FaissNNN, the engines' own helper
    functions — asks an engine it is given only what :class:`hubnorm.blocks.Engine` declares."""
    files = sorted(LIB.rglob("*.py"))
    stray = [f"{p.relative_to(LIB)}:{line}: engine.{attr}" for p in files for attr, line in _engine_uses(p)
             if attr not in ENGINE_MEMBERS and attr not in OPTIONAL
             and attr not in OWNED.get(p.relative_to(LIB).as_posix(), ())]
    assert not stray, "a module reads an engine member outside hubnorm.blocks.Engine:\n" + "\n".join(stray)
    used = {attr for p in files for attr, _ in _engine_uses(p)}
    # the scan sees the methods' engine calls, the lifecycle's checks, provenance's and FaissNNN's reads
    assert {"reduce", "iterate", "size", "dtype", "cannot_read", "fingerprints", "embeddings", "release"} <= used


def test_nothing_outside_the_engines_asks_what_engine_an_engine_is():
    """No module branches on an engine's class (``isinstance(<engine>, ...)``) outside the engine classes."""
    stray = []
    for p in sorted(LIB.rglob("*.py")):
        tree = ast.parse(p.read_text())
        own = {id(n) for c in ast.walk(tree) if isinstance(c, ast.ClassDef) and c.name.endswith("Engine")
               for n in ast.walk(c)}
        for node in ast.walk(tree):
            if id(node) not in own and isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance" \
                    and node.args and _engineish(node.args[0]):
                stray.append(f"{p.relative_to(LIB)}:{node.lineno}")
    assert not stray, "isinstance on an engine outside the engine classes:\n" + "\n".join(stray)


def test_a_stray_member_is_found(tmp_path):
    """The scan finds a member outside the protocol read directly, through a task or a fitted normalizer, or by
    ``getattr`` (the branch the old provenance code took), and skips an engine class's own body."""
    f = tmp_path / "m.py"
    f.write_text("def fit_blocks(self, engine):\n    return engine.inputs['targets']\n"
                 "def mark(task):\n    return task.engine.matrices\n"
                 "def of(engine):\n    return getattr(engine, 'banks', None)\n"
                 "def score(self):\n    return self.score_engine_.plain\n"
                 "class DaskEngine:\n    def tensor(self, engine):\n        return engine.local\n")
    assert sorted(_engine_uses(f), key=lambda u: u[1]) == [("inputs", 2), ("matrices", 4), ("banks", 6),
                                                           ("plain", 8)]


# ------------------------------------------------------------------ LocalEngine, member by member (mutation survivors)
from hubnorm.blocks import Chunk, Embeddings, Iteration, Reduction, Scores  # noqa: E402


def _raw(rng, n, d=4, scale=1.0):
    return torch.from_numpy(rng.standard_normal((n, d)) * scale)


def test_local_engine_defaults_and_what_it_reads_its_dtype_from():
    rng = np.random.default_rng(0)
    bank = _raw(rng, 5)
    e = LocalEngine({"query_bank": bank})                      # no targets: dtype and device of the first input
    assert (e.dtype, e.device, e.plain, e.block_bytes, e.sweep_bytes) == (torch.float64, torch.device("cpu"), False,
                                                                           None, None)
    t32 = _raw(rng, 3).float()
    e = LocalEngine({"query_bank": bank, "targets": t32}, block_bytes=123, sweep_bytes=456, backend="torch")
    assert (e.dtype, e.block_bytes, e.sweep_bytes, e.backend) == (torch.float32, 123, 456, "torch")
    empty = LocalEngine({"targets": None})
    assert (empty.dtype, empty.device, empty.inputs) == (torch.float32, torch.device("cpu"), {})
    with pytest.raises(ValueError, match=r"backend must be one of \[.*\] or None; got 'gpu'"):
        LocalEngine({"targets": t32}, backend="gpu")


def test_local_engine_answers_sizes_norms_bounds_and_rows():
    rng = np.random.default_rng(1)
    t, qb = _raw(rng, 6, scale=2.0), _raw(rng, 4, scale=0.5)
    e = LocalEngine({"targets": t, "query_bank": qb, "target_bank": None})
    assert (e.size("targets"), e.size("query_bank"), e.size("target_bank")) == (6, 4, None)
    assert e.max_norm("targets") == pytest.approx(float(np.linalg.norm(t.numpy(), axis=1).max()), rel=1e-15)
    bound = e.score_bound(Scores("query_bank", ("targets", "query_bank")))
    want = np.linalg.norm(qb.numpy(), axis=1).max() * max(np.linalg.norm(t.numpy(), axis=1).max(),
                                                          np.linalg.norm(qb.numpy(), axis=1).max())
    assert bound == pytest.approx(float(want), rel=1e-15)
    assert torch.equal(e.take_rows("targets", torch.tensor([4, 1])), t[[4, 1]])
    assert e.spans("targets") is True and e.to_tensor(t) is t
    assert torch.equal(e.tensor(("targets", "query_bank")), torch.cat([t, qb]))
    with pytest.raises(ValueError, match=r"^this fit has no target_bank embeddings \(needed as target_bank\)$"):
        e.tensor("target_bank")
    with pytest.raises(ValueError, match=r"^this fit has no target_bank embeddings \(needed as targets ; target_bank\)$"):
        e.tensor(("targets", "target_bank"))


def test_local_engine_shares_score_blocks_only_within_its_sweep_budget():
    t = torch.zeros(2, 3)
    assert LocalEngine({"targets": t}).shared("k", 10) is None                  # not a sweep
    assert LocalEngine({"targets": t}).shared("k", 10, budget=100) is None      # not a sweep, whatever the budget
    e = LocalEngine({"targets": t}, sweep_bytes=100)
    first = e.shared("k", 100)
    assert first == {} and e.shared("k", 50) is first and e.shared("other", 1) is not first
    assert e.shared("k", 101) is None                                            # larger than the budget
    assert e.shared("k", 150, budget=200) is first and e.shared("k", 150, budget=120) is None
    assert e.shared("k", 150, budget=None) is None


class _Probe(Reduction):
    """A reduction that records the chunk it is handed (row and column terms, cache)."""

    def __init__(self, source, axis=0, row_terms=None, col_terms=None, cache=None):
        self.source, self.axis, self.row_terms, self.col_terms = source, axis, row_terms, col_terms
        if cache is not None:
            self.cache = cache

    def partial(self, s, chunk):
        return s.sum(dim=self.axis)

    def merge(self, a, b):
        return a + b

    def finalize(self, p, n):
        return p


def test_local_engine_hands_reductions_the_whole_inputs_with_their_terms():
    rng = np.random.default_rng(2)
    t, qb = _raw(rng, 5), _raw(rng, 7)
    e = LocalEngine({"targets": t, "query_bank": qb}, block_bytes=999, backend="torch")
    rt, ct, cache = torch.arange(7.0), torch.arange(5.0), {}
    chunk, n = e.chunk(_Probe(Scores("query_bank", "targets"), axis=0, row_terms=rt, col_terms=ct, cache=cache))
    assert n == 7 and chunk.rows is qb and chunk.cols is t
    assert chunk.row_terms is rt and chunk.col_terms is ct and chunk.cache is cache
    assert (chunk.block_bytes, chunk.backend, chunk.row_start, chunk.col_start) == (999, "torch", 0, 0)
    chunk, n = e.chunk(_Probe(Scores("query_bank", "targets"), axis=1))
    assert n == 5 and chunk.row_terms is None and chunk.col_terms is None and chunk.cache is None
    chunk, n = e.chunk(_Probe(Embeddings("query_bank")))
    assert n == 7 and chunk.rows is qb and chunk.cols is None and (chunk.block_bytes, chunk.backend) == (999, "torch")


class _Count(Iteration):
    """Three steps adding one; ``fused`` answers at once with a marker."""

    def __init__(self):
        self.fused_calls = 0

    def fused(self, engine):
        self.fused_calls += 1
        return "fused"

    def start(self, engine):
        return 0

    def step(self, engine, state):
        return state + 1, state + 1 >= 3


def test_local_engine_runs_the_fused_form_unless_plain():
    t = torch.zeros(2, 3)
    it = _Count()
    assert LocalEngine({"targets": t}).iterate(it) == "fused" and it.fused_calls == 1
    it = _Count()
    assert LocalEngine({"targets": t}, plain=True).iterate(it) == 3 and it.fused_calls == 0


def test_one_engine_reads_blocks_from_embeddings_or_from_stored_matrices():
    """The one in-process engine: a reduction whose inputs are all embeddings is computed from them (a stored
    matrix given beside them is not read), one over an input given only as a matrix is read from the matrix; sizes
    of matrices and embeddings must agree; a stored-only engine names what needs embeddings."""
    from hubnorm.blocks import Scores, TopK

    rng = np.random.default_rng(3)
    t, qb = _unit(rng, 12), _unit(rng, 30)
    scores = (qb @ t.T).numpy()
    red = TopK(Scores("query_bank", ("targets",)), k=4, axis=0)
    from_embeddings = LocalEngine({"targets": t, "query_bank": qb}).reduce(red)
    stored = LocalEngine(matrices={("query_bank", "targets"): scores})
    assert torch.allclose(stored.reduce(red).values, from_embeddings.values, atol=1e-12, rtol=0)
    assert stored.blocks_read > 0 and stored.has("query_bank") and stored.size("query_bank") == 30
    both = LocalEngine({"targets": t, "query_bank": qb}, matrices={("query_bank", "targets"): np.zeros_like(scores)})
    assert torch.equal(both.reduce(red).values, from_embeddings.values) and both.blocks_read == 0
    with pytest.raises(ValueError, match=r"has 30 query bank items but the query_bank embeddings have 29 rows"):
        LocalEngine({"targets": t, "query_bank": qb[:29]}, matrices={("query_bank", "targets"): scores})
    with pytest.raises(ValueError, match=r"^this step needs the embeddings of query_bank, but a score task holds only"):
        stored.tensor("query_bank")
    with pytest.raises(ValueError, match=r"^this fit has no query_bank"):
        LocalEngine({"targets": t}).tensor("query_bank")
    assert stored.dtype == torch.float64 and LocalEngine({"targets": t.float()}).dtype == torch.float32
    with pytest.raises(TypeError, match=r"^dtype must be torch.float32 or torch.float64"):
        LocalEngine(matrices={("query_bank", "targets"): scores}, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"^dtype torch.float32 differs from the embeddings' torch.float64: dtype "
                                         r"sets how stored matrices are read; cast the embeddings instead \(or leave "
                                         r"dtype None\)$"):
        LocalEngine({"targets": t}, dtype=torch.float32)
    from hubnorm.kernels import topk_backend
    for x in (t, t.float()):   # the top-k kernel follows the embeddings' dtype
        assert LocalEngine({"targets": x}).backend == topk_backend(x.dtype, x.device)
    assert LocalEngine({"targets": t}, dtype=torch.float64).dtype == torch.float64
    mixed = LocalEngine({"targets": t}, matrices={("query_bank", "targets"): scores})
    with pytest.raises(ValueError, match=r"^this fit has no query_bank"):   # it holds embeddings: not "only scores"
        mixed.tensor("query_bank")
    with pytest.raises(ValueError, match=r"^a sweep's engine runs over embeddings"):
        SweepEngine(stored)
