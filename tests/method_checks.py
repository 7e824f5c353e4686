"""The generic checks every registered method goes through (scikit-learn's ``parametrize_with_checks`` style).

:func:`checks_for` yields ``(check name, function)`` for one normalizer class; :func:`registered_checks` yields them
for every class in :data:`hubnorm.NORMALIZERS`, so registering a method (``hubnorm.registry.register``) is all it
takes to put it through the suite. ``tests/test_method_checks.py`` parametrizes over :func:`registered_checks`;
``tests/test_new_method.py`` runs the suite on a normalizer defined in the test file alone.

Each check reads what it needs off the class (its declared ``inputs``, ``parameters``, ``example_params``,
``sweep_params``) and uses small problems (tens of rows), so the whole suite stays a few seconds per method:

* parameters: the declarations match the constructor, valid settings pass, every declared parameter refuses its
  bad values with an error naming it (before any data), limits by input sizes are enforced;
* inputs: bad embeddings and missing banks are refused naming the argument; unfitted use is an error;
* plain equals blocked: the fit equals the method's dense ``plain`` form (float64), and equals the fit on a plain
  engine (every reduction by its ``partial`` / ``merge`` / ``finalize`` block loop, never a fast kernel) at tiny
  ``block_bytes``; in float32, the fit through every top-k kernel of the seam (torch, faiss) equals the plain engine;
* score matrices equal embeddings: the fit from the matrices the embeddings give equals the fit from them (a method
  that reads embeddings is refused from matrices, naming them), and so does the fit from a task holding embeddings
  of some inputs beside matrices of others (query-aware too);
* invariants: rankings do not depend on block sizes, a per-row shift changes no rank, scores / top-k / offsets agree;
* dtype and device: float32 stays float32, float64 stays float64, results on the requested device;
* sweep equals reference: a small grid over the method's ``sweep_params`` gives the reference engine's table;
* Dask equals in-process: the bank as a chunked Dask array (local threads), targets in several chunks.
"""

from __future__ import annotations

import inspect


import numpy as np
import pytest
import torch

import hubnorm as hn
from hubnorm.blocks import Embeddings, Scores
from hubnorm.engine import LocalEngine


def unit_rows(rng, n, d, dtype=np.float64):
    x = rng.standard_normal((n, d)).astype(dtype)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def problem(seed=0, m=40, n=30, b=50, c=35, d=12, dtype=np.float64):
    """Test queries, targets, query bank, target bank: random unit rows."""
    rng = np.random.default_rng(seed)
    return tuple(unit_rows(rng, x, d, dtype) for x in (m, n, b, c))


def make(cls, **overrides):
    return cls(**{**cls.example_params, "device": "cpu", **overrides})


def fit(cls, t, qb, tb, **overrides):
    return make(cls, **overrides).fit(t, query_bank=qb, target_bank=tb)


def _fitted_tensors(norm):
    return {k: v for k, v in vars(norm).items() if k.endswith("_") and isinstance(v, torch.Tensor)
            and k != "targets_"}


def _close(a, b, atol, what):
    a, b = _fitted_tensors(a) if not isinstance(a, dict) else a, _fitted_tensors(b) if not isinstance(b, dict) else b
    assert set(a) <= set(b) or set(b) <= set(a), f"{what}: fitted attributes differ: {sorted(a)} vs {sorted(b)}"
    for k in set(a) & set(b):
        x, y = a[k], b[k]
        if x.dtype == torch.bool:
            assert torch.equal(x.cpu(), y.cpu()), f"{what}: {k} differs"
        else:
            np.testing.assert_allclose(x.double().cpu().numpy(), y.double().cpu().numpy(), rtol=0, atol=atol,
                                       err_msg=f"{what}: {k}")


def _queries(cls, q, qb):
    """The queries a check scores: the query bank itself for a transductive method (OTN, L2N, HN: it scores only
    the rows it was fitted on, ``hubnorm.normalizers.plans``), else the test queries."""
    return qb if getattr(cls, "transductive", False) else q


def _order(s):
    s = s.detach().cpu().numpy() if isinstance(s, torch.Tensor) else s
    return np.argsort(-s, axis=1, kind="stable")


# ---------------------------------------------------------------------------------------------------- parameters
def check_declarations(cls):
    """Registry name, display name, inputs and parameters are declared, and consistent with the constructor."""
    assert isinstance(cls.name, str) and cls.name == cls.name.lower() and cls.name != "base"
    assert isinstance(cls.inputs, hn.blocks.Inputs)
    ctor = set(inspect.signature(cls.__init__).parameters) - {"self"}
    assert set(cls.parameters) <= ctor, f"declared but not constructor arguments: {set(cls.parameters) - ctor}"
    assert set(cls.example_params) <= ctor
    assert cls.uses_query_bank == cls.inputs.usage("query_bank")
    assert cls.uses_target_bank == cls.inputs.usage("target_bank")
    for x in cls.inputs.fit + cls.inputs.score:
        assert isinstance(x, (Scores, Embeddings))
        assert set(x.names()) <= {"targets", "query_bank", "target_bank", "queries"}, x
    assert cls.sweep_params <= set(cls.parameters)
    norm = make(cls)
    assert norm.check_params() is norm
    assert repr(norm).startswith(cls.__name__ + "(")
    clone = norm.clone()
    assert clone is not norm and clone.get_params() == norm.get_params()
    with pytest.raises(ValueError, match="has no parameter"):
        norm.set_params(not_a_parameter_of_any_method=1)


def check_constructor_stores_arguments(cls):
    """The constructor stores every argument as given, under its own name (scikit-learn's rule): no check, no
    conversion, no default put in its place; ``get_params`` / ``clone`` hand them back unchanged."""
    names = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    sentinels = {p: object() for p in names}
    norm = cls(**sentinels)
    params = norm.get_params()
    assert set(params) == set(names)
    for p in names:
        assert getattr(norm, p) is sentinels[p], f"{cls.__name__}({p}=...) does not store {p} as given"
        assert params[p] is sentinels[p]


def check_invalid_parameters(cls):
    """Every declared parameter refuses its bad values, naming itself, before any data is seen."""
    for name, spec in cls.parameters.items():
        for value, error, match in spec.invalid_values():
            norm = make(cls, **{name: value})
            with pytest.raises(error, match=match) as info:
                norm.check_params()
            assert name in str(info.value), f"{cls.__name__}: the error for {name}={value!r} does not name it"
    for bad in ("1MB", 0):
        if "block_bytes" in inspect.signature(cls.__init__).parameters:
            with pytest.raises((TypeError, ValueError), match="block_bytes"):
                make(cls, block_bytes=bad).check_params()
    with pytest.raises((TypeError, ValueError), match="device"):
        make(cls, device="gpu").check_params()


def check_limits(cls):
    """A parameter limited by input sizes is refused one above the limit and accepted at it."""
    q, t, qb, tb = problem(1, n=9, b=11, c=7)
    sizes = {"targets": len(t), "query_bank": len(qb), "target_bank": len(tb)}.get
    for name, spec in cls.parameters.items():
        if not spec.limited_by:
            continue
        limit = cls.limit(name, sizes)
        assert limit == min(sizes(i) for i in spec.limited_by)
        with pytest.raises(ValueError, match=f"{name}={limit + 1} is larger than"):
            fit(cls, t, qb, tb, **{name: limit + 1})
        fit(cls, t, qb, tb, **{name: limit})


# ---------------------------------------------------------------------------------------------------- inputs
def check_bad_inputs(cls):
    """Bad embeddings and missing banks are refused naming the argument; unfitted use raises NotFittedError."""
    q, t, qb, tb = problem(2)
    norm = make(cls)
    with pytest.raises(hn.NotFittedError, match="not fitted"):
        norm.score(q)
    with pytest.raises(hn.NotFittedError, match="not fitted"):
        norm.topk(q, 3)
    bad = t.copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match="targets.*NaN or Inf"):
        make(cls).fit(bad, query_bank=qb, target_bank=tb)
    with pytest.raises(ValueError, match="targets rows are not L2-normalised"):
        make(cls).fit(t * 2, query_bank=qb, target_bank=tb)
    with pytest.raises(ValueError, match="targets must be 2-D"):
        make(cls).fit(t[0], query_bank=qb, target_bank=tb)
    for name, usage, other in (("query_bank", cls.uses_query_bank, {"target_bank": tb}),
                               ("target_bank", cls.uses_target_bank, {"query_bank": qb})):
        if usage == "required":
            with pytest.raises(ValueError, match=f"needs {name}"):
                make(cls).fit(t, **other)
        if usage != "unused":
            banks = {"query_bank": qb, "target_bank": tb}
            with pytest.raises(ValueError, match=f"{name} has dimension 5"):
                make(cls).fit(t, **{**banks, name: unit_rows(np.random.default_rng(0), 6, 5)})
            with pytest.raises(ValueError, match=f"{name} rows are not L2-normalised"):
                make(cls).fit(t, **{**banks, name: banks[name] * 3})
    fitted = fit(cls, t, qb, tb)
    with pytest.raises(ValueError, match="queries has dimension 5"):
        fitted.score(unit_rows(np.random.default_rng(0), 3, 5))
    with pytest.raises(ValueError, match=f"k={len(t) + 1} is larger than the number of targets"):
        fitted.topk(q, len(t) + 1)
    make(cls, check_normalized=False).fit(t * 2, query_bank=qb * 2, target_bank=tb * 2)  # the escape hatch


# ---------------------------------------------------------------------------------------------------- plain = blocked
def _choice_settings(cls):
    """The example parameters, and once more with each other value of every ``"choice"`` parameter (MP's two
    forms, NNN's two implementations): each choice is a computation of its own, checked like the default."""
    yield {}
    for name, spec in cls.parameters.items():
        if spec.kind == "choice":
            default = cls.example_params.get(name, inspect.signature(cls.__init__).parameters[name].default)
            yield from ({name: c} for c in spec.choices if c != default)


def check_plain_equals_blocked(cls):
    """The fit equals the method's dense plain form, and the fit on a plain engine (block loops, never a fast
    kernel) at tiny blocks: the fast kernels and the blocked statement compute the same offsets; for every value
    of a choice parameter."""
    q, t, qb, tb = problem(3)
    for setting in _choice_settings(cls):
        what = f"{cls.name}{setting or ''}"
        ref = fit(cls, t, qb, tb, **setting)
        try:
            plain = ref.plain(*(torch.from_numpy(x) for x in (t, qb, tb)))
        except NotImplementedError:
            plain = None
        if plain is not None:
            _close(ref, plain, 1e-10, f"{what}: fit vs plain")
        norm = make(cls, **setting)
        engine = norm.local_engine(t, qb, tb)
        for block_bytes in (None, 8 * 13, 8 * 40 * 7):
            blocked = LocalEngine(engine.inputs, block_bytes=block_bytes, plain=True)
            _close(ref, norm.fit_blocks(blocked), 1e-10, f"{what}: fit vs plain engine (block_bytes={block_bytes})")


def check_fast_kernels_equal_plain(cls):
    """float32 inputs on the CPU: the fit through every exact top-k kernel of the seam
    (:data:`hubnorm.kernels.TOPK_BACKENDS` available here: ``torch``, ``faiss`` when installed; the engine's default is
    :func:`hubnorm.kernels.topk_backend`) equals the fit on the plain engine (block loops, no fast kernel) to float32
    rounding. (Exact equality of the top-k values themselves, on inputs whose products are exact, is
    ``tests/test_fast_paths.py::test_topk_backends_exact_values``.)"""
    from hubnorm.kernels import _faiss, topk_backend

    q, t, qb, tb = problem(9, d=24, dtype=np.float32)
    norm = make(cls)
    engine = norm.local_engine(t, qb, tb)
    assert engine.backend == topk_backend(torch.float32, "cpu")
    def tensors(fitted):
        return {k: v for k, v in fitted.items() if isinstance(v, torch.Tensor)}

    plain = tensors(norm.fit_blocks(LocalEngine(engine.inputs, plain=True)))
    assert plain, f"{cls.name}: fit_blocks returned no tensor"
    for backend in ("torch", "faiss") if _faiss() is not None else ("torch",):
        for block_bytes in (None, 4 * 30 * 7):
            fast = tensors(norm.fit_blocks(LocalEngine(engine.inputs, block_bytes=block_bytes, backend=backend)))
            _close(plain, fast, 2e-5, f"{cls.name}: fit with backend={backend!r} vs plain engine "
                                      f"(block_bytes={block_bytes})")


def check_matrices_equal_embeddings(cls):
    """Fitted from the score matrices its embeddings give (:func:`hubnorm.scores.matrices_from_embeddings`: a
    released ``sims:`` folder's kind of input), the method equals its fit from the embeddings (float64, 1e-12): the
    fitted tensors, the normalised test scores and the ranks. A method whose fit reads embeddings (an
    ``Embeddings`` input, e.g. DN) is refused from matrices with a ValueError naming them."""
    from hubnorm.scores import matrices_from_embeddings

    q, t, qb, tb = problem(6)
    q = _queries(cls, q, qb)
    pos = hn.Positives.from_labels(np.arange(len(q)) % len(t), len(t))
    task = hn.RetrievalTask(scores=matrices_from_embeddings(q, t, qb, tb), positives=pos, check=False,
                            block_bytes=8 * 30 * 7)
    if any(isinstance(x, Embeddings) for x in cls.inputs.fit):
        with pytest.raises(ValueError, match="reads the embeddings of"):
            task.fit(make(cls))
        return
    ref = fit(cls, t, qb, tb)
    got = task.fit(make(cls))
    _close(ref, got, 1e-12, f"{cls.name}: fit from score matrices vs from embeddings")
    np.testing.assert_allclose(task.score(got).numpy(), ref.score(q).numpy(), rtol=0, atol=1e-12,
                               err_msg=f"{cls.name}: normalised test scores")
    np.testing.assert_array_equal(hn.positive_ranks(task.blocks(got), pos), hn.positive_ranks(ref, pos, q))


#: Tasks holding embeddings of some inputs beside stored matrices of some pairs: (embeddings held, matrices stored).
MIXED_LAYOUTS = {
    "test matrix, bank embeddings": (("targets", "query_bank", "target_bank"), (("queries", "targets"),)),
    "query embeddings, bank matrices": (("queries", "targets"), (("query_bank", "targets"),
                                                                 ("query_bank", "target_bank"),
                                                                 ("target_bank", "targets"))),
    "the bank's scores half embedded, half stored": (("queries", "targets", "query_bank"),
                                                     (("query_bank", "target_bank"), ("target_bank", "targets"))),
    "everything both ways": (("queries", "targets", "query_bank", "target_bank"),
                             (("queries", "targets"), ("query_bank", "targets"), ("query_bank", "target_bank"),
                              ("target_bank", "targets"))),
}


def check_mixed_tasks_equal_embeddings(cls):
    """A task holding embeddings of some inputs and stored matrices of some pairs (:data:`MIXED_LAYOUTS`) fits and
    scores as the task of embeddings does (float64, 1e-12), agnostic and query-aware; a method that reads embeddings
    the task does not hold is refused naming them."""
    from hubnorm.scores import matrices_from_embeddings

    q, t, qb, tb = problem(7)
    q = _queries(cls, q, qb)
    vectors = {"queries": q, "targets": t, "query_bank": qb, "target_bank": tb}
    mats = matrices_from_embeddings(q, t, qb, tb)
    pos = hn.Positives.from_labels(np.arange(len(q)) % len(t), len(t))
    reads = {x.name for x in tuple(cls.inputs.fit) + tuple(cls.inputs.score) if isinstance(x, Embeddings)}
    for layout, (held, stored) in MIXED_LAYOUTS.items():
        task = hn.RetrievalTask(**{n: vectors[n] for n in held}, positives=pos, check=False,
                                scores={pair: mats[pair] for pair in stored})
        for aware in (False, True):
            has, pairs = set(held), {frozenset(p) for p in stored}
            if aware:   # the test queries are the query bank (RetrievalTask.test_as_bank)
                has = has - {"query_bank"} | ({"query_bank"} if "queries" in held else set())
                pairs = {p for p in pairs if "query_bank" not in p} | {frozenset(("query_bank", "targets"))}
            lacking = [(x.rows, c) for x in cls.inputs.fit if isinstance(x, Scores) and x.required
                       for c in x.col_names if not {x.rows, c} <= has and frozenset((x.rows, c)) not in pairs]
            what = f"{cls.name} on a task of {layout}{' (query-aware)' if aware else ''}"
            if reads - has or lacking:
                with pytest.raises(ValueError, match="reads the embeddings of" if reads - has else "which is missing"):
                    task.fit(make(cls), query_aware=aware)
                continue
            ref = fit(cls, t, q if aware else qb, tb)
            got = task.fit(make(cls), query_aware=aware)
            _close(ref, got, 1e-12, what)
            np.testing.assert_allclose(task.score(got).numpy(), ref.score(q).numpy(), rtol=0, atol=1e-12,
                                       err_msg=f"{what}: normalised test scores")


# ---------------------------------------------------------------------------------------------------- invariants
def check_block_sizes_and_row_shifts(cls):
    """Offsets and ranks do not depend on block or chunk sizes; a per-row shift of the scores changes no rank."""
    q, t, qb, tb = problem(4, m=23, n=19)
    q = _queries(cls, q, qb)
    pos = hn.Positives.from_labels(np.arange(len(q)) % 19, 19)
    ref = fit(cls, t, qb, tb)
    ranks = hn.positive_ranks(ref, pos, q)
    takes_blocks = "block_bytes" in inspect.signature(cls.__init__).parameters
    for bb, chunk in ((8, 1), (200, 3), (None, 7)):
        norm = fit(cls, t, qb, tb, chunk_size=chunk, **({"block_bytes": bb} if takes_blocks else {}))
        _close(ref, norm, 1e-12, f"{cls.name}: block_bytes={bb}, chunk_size={chunk}")
        np.testing.assert_array_equal(hn.positive_ranks(norm, pos, q), ranks)
    scores = ref.score(q).numpy()
    shifted = scores + 7.5 * np.random.default_rng(0).standard_normal((len(q), 1))
    np.testing.assert_array_equal(hn.positive_ranks(shifted, pos), ranks)


def check_scores_topk_offsets_agree(cls):
    """``score`` = the blocks of ``iter_scores``; ``topk`` = a stable sort of ``score``; an offset method's score is
    ``S + offsets`` up to per-row terms (same per-row order)."""
    q, t, qb, tb = problem(5)
    q = _queries(cls, q, qb)
    norm = fit(cls, t, qb, tb)
    s = norm.score(q)
    blocks = torch.cat([b for _, b in norm.iter_scores(q, chunk_size=7)])
    torch.testing.assert_close(blocks, s, rtol=0, atol=1e-12)
    v, i = norm.topk(q, 5)
    ref = torch.sort(s, dim=1, descending=True, stable=True)
    assert torch.equal(i, ref.indices[:, :5])
    if cls.is_offset:
        raw = torch.from_numpy(q @ t.T)
        np.testing.assert_array_equal(_order(s), _order(raw + norm.offsets_))
        assert norm.offsets.shape == (len(t),)
    else:
        with pytest.raises(AttributeError, match="not an offset method"):
            norm.offsets


# ---------------------------------------------------------------------------------------------------- dtype, device
def check_dtypes_and_device(cls):
    """float32 inputs give float32 results, float64 float64; results live on the requested device (and on CUDA,
    when there is one, rank like the CPU)."""
    q, t, qb, tb = problem(6, d=32, n=12)
    q = _queries(cls, q, qb)
    for dtype in (np.float32, np.float64):
        norm = fit(cls, *(x.astype(dtype) for x in (t, qb, tb)))
        assert norm.targets_.dtype == torch.from_numpy(np.zeros(1, dtype)).dtype
        assert norm.score(q.astype(dtype)).dtype == norm.targets_.dtype
        for k, v in _fitted_tensors(norm).items():
            if torch.is_floating_point(v):
                assert v.dtype == norm.targets_.dtype, f"{cls.name}: {k} is {v.dtype}"
            assert v.device.type == "cpu"
    if torch.cuda.is_available():  # pragma: no cover - needs a GPU
        cpu, dev = fit(cls, t, qb, tb), fit(cls, t, qb, tb, device="cuda")
        assert dev.device_.type == "cuda"
        assert torch.equal(cpu.topk(q, 5)[1], dev.topk(q, 5)[1].cpu())


# ---------------------------------------------------------------------------------------------------- engines
def _small_grid(cls):
    grid = {}
    for name in sorted(cls.sweep_params):
        v = cls.example_params.get(name, getattr(make(cls), name))
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            grid[name] = sorted({max(1, int(v) // 2), int(v)})
        else:
            grid[name] = [float(v), 2.0 * float(v) + 0.01]
    return grid


def check_sweep_equals_reference(cls):
    """A small grid over the method's ``sweep_params``: the sweep engine gives the reference engine's table."""
    if not cls.sweep_params:
        return
    q, t, qb, tb = problem(7, m=60, n=30, b=80, c=40, dtype=np.float32)
    task = hn.RetrievalTask(q, t, hn.Positives.from_labels(np.arange(60) % 30, 30), query_bank=qb, target_bank=tb)
    grid = _small_grid(cls)
    fixed = {k: v for k, v in cls.example_params.items() if k not in grid}
    ref = hn.grid_search(cls.name, task, grid, fixed=fixed, engine="reference")
    fast = hn.grid_search(cls.name, task, grid, fixed=fixed, engine="sweep")
    cols = list(grid) + ["R@1", "R@5", "R@10", "MdR"]
    np.testing.assert_array_equal(ref.table[cols].to_numpy(), fast.table[cols].to_numpy())
    assert fast.best_params == ref.best_params


def check_dask_equals_in_process(cls):
    """The banks as chunked Dask arrays (Dask's local threads) and the targets in several chunks: the same fitted
    attributes as the in-process fit."""
    da = pytest.importorskip("dask.array")
    from hubnorm import distributed as hd

    q, t, qb, tb = problem(8, n=30, b=90, c=40)
    q = _queries(cls, q, qb)
    ref = fit(cls, t, qb, tb)
    for target_chunk_rows in (None, 11):
        got = hd.fit_offsets(make(cls), t, da.from_array(qb, chunks=(25, -1)), da.from_array(tb, chunks=(15, -1)),
                             target_chunk_rows=target_chunk_rows, split_every=2)
        _close(ref, got, 1e-9, f"{cls.name} on Dask (target_chunk_rows={target_chunk_rows})")
        assert torch.equal(got.topk(q, 5)[1], ref.topk(q, 5)[1])


CHECKS = (check_declarations, check_constructor_stores_arguments, check_invalid_parameters, check_limits,
          check_bad_inputs, check_plain_equals_blocked, check_fast_kernels_equal_plain, check_matrices_equal_embeddings,
          check_mixed_tasks_equal_embeddings, check_block_sizes_and_row_shifts, check_scores_topk_offsets_agree, check_dtypes_and_device,
          check_sweep_equals_reference, check_dask_equals_in_process)


def checks_for(cls):
    """``(check name, function of no argument)`` for every generic check of ``cls``."""
    for check in CHECKS:
        yield check.__name__, (lambda check=check: check(cls))


def registered_checks():
    """``(registry name, check name, function)`` for every registered method and every check."""
    for name, cls in sorted(hn.NORMALIZERS.items()):
        for check_name, fn in checks_for(cls):
            yield name, check_name, fn


__all__ = ["checks_for", "registered_checks", "CHECKS", "problem", "make", "fit", "unit_rows"]

