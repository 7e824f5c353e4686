#!/usr/bin/env python
"""Guard the jupytext pairs ``notebooks/NN_name.py`` (the source) / ``NN_name.ipynb`` (the executed copy) against
losing an edit when ``scripts/refresh_notebooks.sh`` rebuilds the .ipynb from the .py.

    python scripts/notebook_pair.py check notebooks/03_k_ablation.py notebooks/03_k_ablation.ipynb
    python scripts/notebook_pair.py stamp notebooks/03_k_ablation.ipynb

``stamp`` records in the .ipynb's metadata (``hubnorm.cells_sha256``) a fingerprint of its cells (type, source,
tags) as ``refresh_notebooks.sh`` wrote them. ``check`` exits 0 when rebuilding the .ipynb from the .py loses
nothing: the two hold the same cells, or the .ipynb's cells are still exactly the stamped ones (only the .py was
edited since), or, for an .ipynb without a stamp, the file is unchanged since the last git commit. Otherwise,
when the .ipynb holds cell changes its .py does not (edited in Jupyter without the jupytext pairing, or both
edited), it names the file and the first differing cell and exits 1.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import jupytext
import nbformat

KEY = "hubnorm"


def cells(nb) -> list:
    """What a pair must agree on: cell type, source (stripped) and sorted tags of every cell."""
    return [(c.cell_type, c.source.strip(), sorted(c.metadata.get("tags", []))) for c in nb.cells]


def fingerprint(nb) -> str:
    return hashlib.sha256(json.dumps(cells(nb), ensure_ascii=False).encode("utf-8")).hexdigest()


def first_difference(a: list, b: list) -> str:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            line = next((s for s in y[1].splitlines() if s.strip()), "")[:70]
            return f"cell {i} ({y[0]}: {line!r})"
    return f"the number of cells ({len(a)} in the .py, {len(b)} in the .ipynb)"


def unchanged_since_commit(path: Path) -> bool:
    """True when ``path`` is tracked by git and identical to its version in HEAD (False without git)."""
    where = dict(cwd=path.resolve().parent, capture_output=True)
    try:
        tracked = subprocess.run(["git", "ls-files", "--error-unmatch", path.name], **where).returncode == 0
        return tracked and subprocess.run(["git", "diff", "--quiet", "HEAD", "--", path.name], **where).returncode == 0
    except OSError:
        return False


def check(py: Path, ipynb: Path) -> int:
    if not ipynb.exists():
        return 0
    src, nb = jupytext.read(py), nbformat.read(ipynb, as_version=4)
    a, b = cells(src), cells(nb)
    if a == b:
        return 0
    stamped = nb.metadata.get(KEY, {}).get("cells_sha256")
    if stamped is not None and stamped == fingerprint(nb):
        return 0  # the .ipynb is as the last refresh wrote it: the edits are in the .py
    if stamped is None and unchanged_since_commit(ipynb):
        return 0  # no stamp yet (written before stamps existed), but untouched since the last commit
    why = ("it was edited after the last refresh" if stamped is not None
           else "it has no refresh stamp and differs from its last commit (or is not in git)")
    print(f"refresh_notebooks.sh: {ipynb} holds cell changes that {py} does not ({why}; first difference: "
          f"{first_difference(a, b)}). Refusing to overwrite it. To keep the edit, write the .ipynb's cells into the "
          f".py: `.venv/bin/jupytext --to py:percent {ipynb}` (it overwrites {py.name}: merge by hand if the .py has "
          f"edits of its own); to drop it: `git checkout -- {ipynb}`. Then run refresh_notebooks.sh again.",
          file=sys.stderr)
    return 1


def stamp(ipynb: Path) -> int:
    nb = nbformat.read(ipynb, as_version=4)
    nb.metadata.setdefault(KEY, {})["cells_sha256"] = fingerprint(nb)
    nbformat.write(nb, ipynb)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "check":
        sys.exit(check(Path(sys.argv[2]), Path(sys.argv[3])))
    if len(sys.argv) == 3 and sys.argv[1] == "stamp":
        sys.exit(stamp(Path(sys.argv[2])))
    print(__doc__, file=sys.stderr)
    sys.exit(2)
