"""Lazy package namespaces (PEP 562), shared by ``hubnorm`` and ``hubnorm.data``: a package lists its public names
and the submodule defining each (its ``_EXPORTS``), and a name's module is imported on its first use, so that
importing the package itself loads no heavy dependency (torch, open_clip)."""

import importlib
import sys
import types


def export_getattr(package: str, exports: dict, submodules: bool = False):
    """The module ``__getattr__`` of ``package``: a name of ``exports`` is read from its submodule; with
    ``submodules``, any other name is tried as a submodule (``hn.geometry``), an unknown one raising the usual
    ``AttributeError``. The value is stored in the package, so the lookup runs once per name."""

    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if name in exports:
            value = getattr(importlib.import_module(f".{exports[name]}", package), name)
        elif submodules:
            try:
                value = importlib.import_module(f".{name}", package)
            except ModuleNotFoundError as err:
                if err.name != f"{package}.{name}":
                    raise
                raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__


def export_dir(package: str, public):
    """The module ``__dir__`` of ``package``: its loaded names and every public one."""

    def __dir__():
        return sorted(set(vars(sys.modules[package])) | set(public))

    return __dir__


def keep_functions(package: str, names) -> None:
    """Keep each public function of ``names``, named like its own submodule (``hubnorm.hubness``,
    ``hubnorm.data.fetch``), bound to the function, as an eager ``from .x import x`` did: importing the submodule
    makes the import system bind it to the package, and that binding is dropped."""
    names = frozenset(names)

    class _Package(types.ModuleType):
        def __setattr__(self, name, value):
            if name in names and isinstance(value, types.ModuleType):
                return
            super().__setattr__(name, value)

    sys.modules[package].__class__ = _Package
