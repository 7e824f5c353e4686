#!/usr/bin/env python
"""Print the YAML parameters of a run_all.sh profile that one notebook declares (papermill warns about, and
ignores, any other): ``python scripts/notebook_params.py NOTEBOOK.ipynb '{source: ..., fast: false}'``.

Unknown names are listed on stderr as a note, so a profile can set a parameter that only some notebooks have.
"""

import json
import sys

import papermill as pm
import yaml


def main(nb_path: str, params_yaml: str) -> int:
    params = yaml.safe_load(params_yaml) or {}
    if not isinstance(params, dict):
        print(f"notebook_params.py: the parameters must be a YAML mapping; got {params_yaml!r}", file=sys.stderr)
        return 2
    declared = set(pm.inspect_notebook(nb_path))
    kept = {k: v for k, v in params.items() if k in declared}
    dropped = sorted(set(params) - declared)
    if dropped:
        print(f"note: {nb_path} does not declare {dropped}: not passed to it", file=sys.stderr)
    print(json.dumps(kept))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
