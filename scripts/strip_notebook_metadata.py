#!/usr/bin/env python
"""Copy an executed notebook, dropping volatile papermill / execution metadata (timings, paths, versions).

    python scripts/strip_notebook_metadata.py executed.ipynb notebooks/00_main_results.ipynb
"""

import sys

import nbformat


def strip(nb):
    nb.metadata.pop("papermill", None)
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            for out in cell.get("outputs", []):
                out.get("metadata", {}).pop("execution", None)
    return nb


if __name__ == "__main__":
    src, dst = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else sys.argv[1]
    nb = nbformat.read(src, as_version=4)
    nbformat.write(strip(nb), dst)
