"""Every registered method through the generic checks of ``tests/method_checks.py`` (discovered from the registry:
a method added with one registry line gets them all; no method list lives here), and every registered method's
constructor defaults against the method table of docs/methods.md."""

import ast
import inspect
import re
from pathlib import Path

import pytest

import hubnorm as hn
from method_checks import registered_checks

pytestmark = pytest.mark.usefixtures("single_thread_torch")

CASES = list(registered_checks())


@pytest.mark.parametrize("name,check,fn", CASES, ids=[f"{n}-{c}" for n, c, _ in CASES])
def test_method_check(name, check, fn):
    fn()


# ---------------------------------------------------------------------------------------------------- defaults
METHODS_DOC = Path(__file__).resolve().parents[1] / "docs" / "methods.md"
#: the keywords every method takes (docs/methods.md, above the table), with their defaults
COMMON = {"device": None, "chunk_size": None, "check_normalized": True, "block_bytes": None}


def documented_defaults():
    """``{registry name: {parameter: default}}`` from the table of docs/methods.md section 3 ("parameters
    (defaults)" column: ``alpha=0.75, k=128``; ``none``; ``as SN``; ``2 GiB`` is bytes)."""
    rows = {}
    for line in METHODS_DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not re.fullmatch(r"`\w+`", cells[0]) or not cells[1].startswith("`"):
            continue
        name, text = cells[0].strip("`"), re.sub(r"\s*\(or [^)]*\)", "", cells[2]).strip("`")
        if text == "none":
            rows[name] = {}
        elif text.startswith("as "):
            rows[name] = dict(rows[text[3:].strip().lower()])
        else:
            out = {}
            for part in text.split(", "):
                key, value = (x.strip(" `") for x in part.split("=", 1))
                gib = re.fullmatch(r"(\d+) GiB", value)
                out[key] = int(gib.group(1)) * 2 ** 30 if gib else ast.literal_eval(value)
            rows[name] = out
    return rows


@pytest.mark.parametrize("name", sorted(hn.NORMALIZERS))
def test_constructor_defaults_are_the_documented_ones(name):
    """The defaults users read in docs/methods.md are the constructors' defaults, parameter by parameter (and the
    keywords every method takes default to "no device / chunk / block choice, rows checked")."""
    docs = documented_defaults()
    assert name in docs, f"docs/methods.md's method table has no row for {name!r}"
    cls = hn.NORMALIZERS[name]
    signature = {p.name: p.default for p in inspect.signature(cls.__init__).parameters.values() if p.name != "self"}
    for key, value in {**COMMON, **docs[name]}.items():
        if key == "block_bytes" and key not in signature and name in ("raw", "dn"):
            continue
        assert key in signature, f"{cls.__name__} has no parameter {key!r} (documented)"
        assert signature[key] == value and type(signature[key]) is type(value), \
            f"{cls.__name__}({key}=...) defaults to {signature[key]!r}; docs/methods.md says {value!r}"
    undocumented = set(signature) - set(COMMON) - set(docs[name])
    assert not undocumented, f"{cls.__name__}'s parameters {sorted(undocumented)} are not in docs/methods.md's table"


def test_the_defaults_table_is_read():
    """The parser above reads the table it checks (a table it could not read would make every default pass)."""
    docs = documented_defaults()
    assert set(docs) == set(hn.NORMALIZERS)
    assert docs["nnn"] == {"alpha": 0.75, "k": 128, "implementation": "fast"}
    assert docs["sn"]["cache_bytes"] == 2 ** 31 and docs["dbsn"] == docs["sn"]
    assert docs["mp"] == {"form": "gaussian"} and docs["raw"] == {}
