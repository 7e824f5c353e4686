#!/usr/bin/env python
"""Parameters for run_all.sh.

``python scripts/notebook_params.py NOTEBOOK.ipynb PARAMS``: print (JSON) the parameters of ``PARAMS`` (a YAML
mapping) that this notebook declares (papermill warns about, and ignores, any other); the others are listed on
stderr as a note, so a profile can set a parameter that only some notebooks have.

``python scripts/notebook_params.py --merge BASE [--params FILE] [--param NAME=VALUE ...]``: print (JSON) the
YAML mapping ``BASE`` updated with the mapping in ``FILE`` (YAML or JSON) and then each ``NAME=VALUE`` (``VALUE``
read as YAML with YAML 1.2's numbers and booleans: ``1.0``, ``1e-3``, ``010`` (ten), ``[t2i]``, ``CLIP``, ``null``). A name that no notebook (``notebooks/[0-9][0-9]_*.ipynb``)
declares is an error naming the declared ones; values are checked by each notebook itself, against the rules of
its parameters cell (hubnorm_companion.parameters).
"""

import glob
import json
import os
import re
import sys

import papermill as pm
import yaml


class _Yaml12(yaml.SafeLoader):
    """YAML with the numbers and booleans of YAML 1.2 (JSON's): ``010`` is ten, not octal eight; ``1e-3`` is a
    number, not a string; ``1:30`` stays text, not ninety; only true/false are booleans (``yes``/``on`` stay
    text, which a bool parameter's rule then names)."""


_Yaml12.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers
            if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:bool")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Yaml12.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                              list("tTfF"))
_Yaml12.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^[-+]?[0-9]+$"), list("-+0123456789"))
_Yaml12.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+0123456789."))
_Yaml12.add_constructor("tag:yaml.org,2002:int", lambda loader, node: int(loader.construct_scalar(node)))
_Yaml12.add_constructor("tag:yaml.org,2002:float", lambda loader, node: float(
    loader.construct_scalar(node).lower().replace(".inf", "inf").replace(".nan", "nan")))


def _mapping(text: str, what: str) -> dict:
    try:
        value = yaml.load(text, Loader=_Yaml12) if text.strip() else {}
    except yaml.YAMLError as exc:
        raise SystemExit(f"notebook_params.py: {what} is not valid YAML/JSON ({exc})")
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SystemExit(f"notebook_params.py: {what} must be a mapping of parameter names to values; got {text!r}")
    return value


def declared_params(nb_path: str, params: dict) -> dict:
    """The parameters of ``params`` that the notebook ``nb_path`` declares; the others are listed on stderr as a
    note."""
    declared = set(pm.inspect_notebook(nb_path))
    kept = {k: v for k, v in params.items() if k in declared}
    dropped = sorted(set(params) - declared)
    if dropped:
        print(f"note: {nb_path} does not declare {dropped}: not passed to it", file=sys.stderr)
    return kept


def main(nb_path: str, params_yaml: str) -> int:
    print(json.dumps(declared_params(nb_path, _mapping(params_yaml, "the parameters"))))
    return 0


def merge(argv) -> int:
    print(json.dumps(merged_params(_mapping(argv[0], "the profile's parameters"), argv[1:])))
    return 0


def merged_params(params: dict, rest, root: str = ".") -> dict:
    """``params`` updated with run_all.sh's ``--params FILE`` / ``--param NAME=VALUE`` flags (``rest``); a name no
    notebook under ``root`` declares is an error (SystemExit with the message)."""
    params = dict(params)
    user = {}
    i = 0
    while i < len(rest):
        flag = rest[i]
        if flag == "--params" and i + 1 < len(rest):
            path = rest[i + 1]
            if not os.path.isfile(path):
                raise SystemExit(f"run_all.sh: --params {path}: no such file")
            with open(path, encoding="utf-8") as fh:
                user.update(_mapping(fh.read(), f"--params {path}"))
            i += 2
        elif flag == "--param" and i + 1 < len(rest):
            name, sep, value = rest[i + 1].partition("=")
            if not sep or not name.strip():
                raise SystemExit(f"run_all.sh: --param expects NAME=VALUE (e.g. --param bank_fraction=1.0); "
                                 f"got {rest[i + 1]!r}")
            user[name.strip()] = _mapping(f"v: {value}" if value.strip() else "v: ''", f"--param {name}")["v"]
            i += 2
        else:
            raise SystemExit(f"notebook_params.py --merge: unexpected argument {flag!r}")
    if user:
        declared = set()
        for nb in sorted(glob.glob(os.path.join(root, "notebooks", "[0-9][0-9]_*.ipynb"))):
            declared |= set(pm.inspect_notebook(nb))
        unknown = sorted(set(user) - declared)
        if unknown:
            raise SystemExit(f"run_all.sh: no notebook has the parameter(s) {unknown}; the notebooks' parameters: "
                             f"{sorted(declared)} (see docs/parameters.md)")
    params.update(user)
    return params


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--merge":
        sys.exit(merge(sys.argv[2:]))
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
