"""Unit checks of hubnorm.registry (``register``, ``unregister``, ``make_normalizer``) aimed at what its mutation run
found unchecked: every guard of ``register`` by its own message and at its boundary (a class that is not a
Normalizer subclass, an instance, a name that is not a string, empty, upper-case or the base class's ``"base"``, a
name taken by another class, with and without ``replace``), what registering writes into :data:`NORMALIZERS`,
:data:`DISPLAY_NAMES` and :data:`PAPER_GRIDS` (the display name falling back to the key, the grid copied into
lists, a replacement without a grid dropping the old grid), ``unregister`` of a name that was never registered,
and ``make_normalizer``'s case-insensitive look-up, parameter hand-over and error messages.

Every test that registers a class removes it again (the ``scratch`` fixture), so the registry the other tests see
is unchanged.

Mutation run (``--tests tests/test_errors.py tests/test_new_method.py`` [+ this file]): 26 -> 52 of 52 killed
(50% -> 100%); no survivor was judged equivalent. Among the 26 survivors of the baseline were every mutant of
``unregister`` (reached only through test_new_method.py's Dask tests, which time out in mutmut's forked runs) and
every error message of ``register``.
"""

from __future__ import annotations

import pytest

from hubnorm import registry
from hubnorm.normalizers import Identity, NearestNeighborNormalization, Normalizer
from hubnorm.registry import DISPLAY_NAMES, NORMALIZERS, PAPER_GRIDS, make_normalizer, register, unregister

SCRATCH = "zz-registry-units"


def _method(name=SCRATCH, display_name=None, paper_grid=None):
    """A minimal Normalizer subclass with these class attributes (a new class on every call)."""
    return type("Scratch", (Identity,), {"name": name, "display_name": display_name, "paper_grid": paper_grid})


@pytest.fixture
def scratch():
    """Removes the scratch name from the registry after the test (whatever the test left there)."""
    yield SCRATCH
    for table in (NORMALIZERS, DISPLAY_NAMES, PAPER_GRIDS):
        table.pop(SCRATCH, None)


# ------------------------------------------------------------------------------------------------ register
def test_register_returns_the_class_and_fills_the_three_tables(scratch):
    cls = _method(display_name="Scratch method", paper_grid={"alpha": (0.5, 1.0), "k": range(2, 5)})
    assert register(cls) is cls
    assert NORMALIZERS[scratch] is cls
    assert DISPLAY_NAMES[scratch] == "Scratch method"
    assert PAPER_GRIDS[scratch] == {"alpha": [0.5, 1.0], "k": [2, 3, 4]}
    assert all(type(v) is list for v in PAPER_GRIDS[scratch].values())
    # a copy: changing the registry's grid leaves the class's grid as declared
    PAPER_GRIDS[scratch]["alpha"].append(9.0)
    assert cls.paper_grid["alpha"] == (0.5, 1.0)
    assert make_normalizer(scratch).__class__ is cls


def test_display_name_falls_back_to_the_key(scratch):
    register(_method(display_name=None))
    assert DISPLAY_NAMES[scratch] == scratch
    register(_method(display_name=""), replace=True)
    assert DISPLAY_NAMES[scratch] == scratch


def test_a_class_without_a_grid_has_no_grid_entry(scratch):
    assert scratch not in PAPER_GRIDS
    register(_method(paper_grid=None))           # not in PAPER_GRIDS before: no KeyError
    assert scratch in NORMALIZERS and scratch not in PAPER_GRIDS
    register(_method(paper_grid={}), replace=True)   # an empty grid counts as none
    assert scratch not in PAPER_GRIDS


def test_a_replacement_without_a_grid_drops_the_old_grid(scratch):
    register(_method(paper_grid={"alpha": [1.0]}))
    assert PAPER_GRIDS[scratch] == {"alpha": [1.0]}
    new = _method(display_name="New", paper_grid=None)
    assert register(new, replace=True) is new
    assert NORMALIZERS[scratch] is new and DISPLAY_NAMES[scratch] == "New"
    assert scratch not in PAPER_GRIDS


def test_registering_the_same_class_again_is_allowed(scratch):
    cls = _method(display_name="Once")
    register(cls)
    assert register(cls) is cls                  # no replace needed for the class already there
    assert NORMALIZERS[scratch] is cls and DISPLAY_NAMES[scratch] == "Once"


def test_a_taken_name_is_refused_without_replace(scratch):
    first = _method(display_name="First", paper_grid={"alpha": [1.0]})
    register(first)
    other = _method(display_name="Other", paper_grid={"alpha": [2.0]})
    with pytest.raises(ValueError, match=r"^the name 'zz-registry-units' is taken by Scratch: choose another name "
                                         r"\(or pass replace=True\)$"):
        register(other)
    # nothing changed
    assert NORMALIZERS[scratch] is first and DISPLAY_NAMES[scratch] == "First"
    assert PAPER_GRIDS[scratch] == {"alpha": [1.0]}
    assert register(other, replace=True) is other
    assert NORMALIZERS[scratch] is other and DISPLAY_NAMES[scratch] == "Other"
    assert PAPER_GRIDS[scratch] == {"alpha": [2.0]}


def test_a_builtin_name_is_refused_without_replace():
    clash = _method(name="nnn")
    with pytest.raises(ValueError, match=r"the name 'nnn' is taken by NearestNeighborNormalization"):
        register(clash)
    assert NORMALIZERS["nnn"] is NearestNeighborNormalization


@pytest.mark.parametrize("obj", [int, object, "nnn", None, 3])
def test_register_refuses_what_is_not_a_normalizer_class(obj):
    with pytest.raises(TypeError, match=r"^register takes a Normalizer subclass; got "):
        register(obj)


def test_register_refuses_an_instance_with_its_repr():
    inst = Identity()
    with pytest.raises(TypeError, match=r"^register takes a Normalizer subclass; got Identity\("):
        register(inst)


def test_the_base_class_itself_is_refused_by_its_name():
    # Normalizer is a subclass of itself: the type check passes, its name "base" is refused
    with pytest.raises(ValueError, match=r"^Normalizer\.name must be a lower-case registry name; got 'base'$"):
        register(Normalizer)
    assert "base" not in NORMALIZERS


@pytest.mark.parametrize("name, shown", [
    ("", "''"),
    ("Scratch", "'Scratch'"),
    ("SCRATCH", "'SCRATCH'"),
    ("base", "'base'"),
    (None, "None"),
    (7, "7"),
])
def test_register_refuses_a_bad_name(name, shown, scratch):
    cls = _method(name=name)
    with pytest.raises(ValueError, match=rf"^Scratch\.name must be a lower-case registry name; got {shown}$"):
        register(cls)
    assert scratch not in NORMALIZERS and "Scratch" not in NORMALIZERS and "SCRATCH" not in NORMALIZERS
    assert "" not in NORMALIZERS and "base" not in NORMALIZERS


def test_lower_case_names_with_digits_and_dashes_are_accepted(scratch):
    cls = _method(name=SCRATCH)      # "zz-registry-units": lower-case, a dash
    register(cls)
    assert NORMALIZERS[scratch] is cls
    try:
        digits = _method(name="zz-units-2")
        register(digits)
        assert NORMALIZERS["zz-units-2"] is digits
    finally:
        unregister("zz-units-2")
    assert "zz-units-2" not in NORMALIZERS


# ------------------------------------------------------------------------------------------------ unregister
def test_unregister_removes_all_three_entries(scratch):
    register(_method(display_name="Gone", paper_grid={"k": [1]}))
    unregister(scratch)
    assert scratch not in NORMALIZERS and scratch not in DISPLAY_NAMES and scratch not in PAPER_GRIDS
    with pytest.raises(ValueError, match="unknown normalizer 'zz-registry-units'"):
        make_normalizer(scratch)


def test_unregister_of_an_unknown_name_or_a_method_without_grid_is_quiet(scratch):
    unregister("zz-never-registered")            # no KeyError
    register(_method(paper_grid=None))           # in NORMALIZERS and DISPLAY_NAMES only
    unregister(scratch)
    assert scratch not in NORMALIZERS and scratch not in DISPLAY_NAMES
    unregister(scratch)                          # twice: still quiet


# ------------------------------------------------------------------------------------------------ make_normalizer
def test_make_normalizer_is_case_insensitive_and_passes_parameters():
    norm = make_normalizer("NNN", alpha=0.25, k=3)
    assert type(norm) is NearestNeighborNormalization
    assert norm.alpha == 0.25 and norm.k == 3
    assert type(make_normalizer("Raw")) is Identity
    assert type(make_normalizer("raw")) is Identity
    assert make_normalizer("nnn") is not make_normalizer("nnn")     # a new object every call


def test_make_normalizer_unknown_name_lists_the_available_ones():
    with pytest.raises(ValueError) as err:
        make_normalizer("Bogus")
    assert str(err.value) == f"unknown normalizer 'Bogus'; available: {sorted(NORMALIZERS)}"


@pytest.mark.parametrize("name, shown", [(3, "int"), (None, "NoneType"), (b"nnn", "bytes")])
def test_make_normalizer_refuses_a_name_that_is_not_a_string(name, shown):
    with pytest.raises(TypeError, match=rf"^name must be a string; got {shown}$"):
        make_normalizer(name)


def test_the_builtin_methods_are_registered_with_their_labels():
    expected = {"raw", "nnn", "dn", "is", "dis", "csls", "ls", "mp", "dsl", "dualis", "dualdis", "sn", "dbsn"}
    assert expected <= set(NORMALIZERS)
    for key, cls in NORMALIZERS.items():
        assert cls.name == key
        assert DISPLAY_NAMES[key] == (cls.display_name or key)
        if cls.paper_grid:
            assert PAPER_GRIDS[key] == {p: list(v) for p, v in cls.paper_grid.items()}
        else:
            assert key not in PAPER_GRIDS
    assert DISPLAY_NAMES["raw"] == "Original"
    assert registry.NORMALIZERS is NORMALIZERS
