"""Units of ``hubnorm._lazy`` (the lazy namespaces of ``hubnorm`` and ``hubnorm.data``) on a throw-away package.

The package ``lazypkg_<n>`` is written to a temporary folder: ``alpha.py`` defines ``value`` and a function named like
its module (``alpha``), ``beta.py`` imports a module that does not exist.
"""

import importlib
import itertools
import sys
import types

import pytest

from hubnorm import _lazy

_COUNTER = itertools.count()


@pytest.fixture
def pkg(tmp_path, monkeypatch):
    name = f"lazypkg_{next(_COUNTER)}"
    root = tmp_path / name
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "alpha.py").write_text("value = 42\n\ndef alpha():\n    return 'the function'\n")
    (root / "beta.py").write_text("import lazypkg_no_such_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module(name)
    yield name, module
    for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
        del sys.modules[key]


def test_an_exported_name_is_read_from_its_submodule_once(pkg):
    name, module = pkg
    get = _lazy.export_getattr(name, {"value": "alpha"})
    assert f"{name}.alpha" not in sys.modules
    assert get("value") == 42
    assert f"{name}.alpha" in sys.modules and module.value == 42   # stored in the package: no second lookup
    sys.modules[f"{name}.alpha"].value = 7
    assert module.value == 42


@pytest.mark.parametrize("submodules", [False, True])
def test_unknown_and_dunder_names_raise_attribute_error_naming_the_package(pkg, submodules):
    name, _ = pkg
    get = _lazy.export_getattr(name, {"value": "alpha"}, submodules=submodules)
    for missing in ("nothing_here", "__wrapped__"):
        with pytest.raises(AttributeError, match=rf"^module '{name}' has no attribute '{missing}'$"):
            get(missing)


def test_a_dunder_name_is_never_looked_up_even_when_exported(pkg):
    name, _ = pkg
    get = _lazy.export_getattr(name, {"__version__": "alpha"}, submodules=True)
    with pytest.raises(AttributeError, match=rf"^module '{name}' has no attribute '__version__'$"):
        get("__version__")   # (not alpha's "module '<name>.alpha' has no attribute": alpha was never asked)
    assert f"{name}.alpha" not in sys.modules


def test_submodules_are_imported_by_name_only_when_allowed(pkg):
    name, module = pkg
    with pytest.raises(AttributeError, match="has no attribute 'alpha'"):
        _lazy.export_getattr(name, {})("alpha")
    sub = _lazy.export_getattr(name, {}, submodules=True)("alpha")
    assert isinstance(sub, types.ModuleType) and sub.value == 42 and module.alpha is sub


def test_a_submodule_whose_own_import_fails_reports_that_failure(pkg):
    name, _ = pkg
    with pytest.raises(ModuleNotFoundError, match="lazypkg_no_such_dependency"):
        _lazy.export_getattr(name, {}, submodules=True)("beta")


def test_export_dir_lists_loaded_and_public_names_sorted(pkg):
    name, module = pkg
    module.loaded = 1
    names = _lazy.export_dir(name, ["zeta", "value"])()
    assert names == sorted(names) and {"zeta", "value", "loaded", "__name__"} <= set(names)
    assert len(names) == len(set(names))


def test_keep_functions_keeps_the_function_bound_over_its_submodule(pkg):
    name, module = pkg
    module.alpha = importlib.import_module(f"{name}.alpha").alpha   # what `from .alpha import alpha` binds
    _lazy.keep_functions(name, ["alpha"])
    importlib.import_module(f"{name}.alpha")
    module.alpha = sys.modules[f"{name}.alpha"]                    # the import system's binding is dropped
    assert callable(module.alpha) and module.alpha() == "the function"
    module.other = sys.modules[f"{name}.alpha"]                    # any other name binds as usual
    assert isinstance(module.other, types.ModuleType)
    module.alpha = len                                             # a non-module value replaces it
    assert module.alpha is len


def test_the_real_packages_use_it():
    import hubnorm as hn
    import hubnorm.data as hd

    assert callable(hn.hubness) and callable(hd.fetch)       # functions named like their submodules
    assert "make_normalizer" in dir(hn)
    with pytest.raises(AttributeError, match="module 'hubnorm' has no attribute 'no_such_name'"):
        hn.no_such_name
