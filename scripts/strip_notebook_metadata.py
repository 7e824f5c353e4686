#!/usr/bin/env python
"""Copy an executed notebook, dropping what must not be committed: volatile papermill / execution metadata
(timings, paths, versions), progress-bar and warning debris on stderr, and machine-specific paths.

    python scripts/strip_notebook_metadata.py executed.ipynb notebooks/01_main_results.ipynb
"""

import re
import sys

import nbformat

_PATH = re.compile(r"(/(?:home|Users|root|tmp|work|private|var|opt|mnt|data|srv|scratch)/[\w.+-]+)+/?")


def strip(nb):
    nb.metadata.pop("papermill", None)
    nb.metadata.pop("widgets", None)
    nb.metadata.get("kernelspec", {})["display_name"] = "Python 3"
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i:03d}"  # stable ids: a refresh with unchanged cells changes no id
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)
        if cell.cell_type != "code":
            continue
        kept = []
        for out in cell.get("outputs", []):
            out.get("metadata", {}).pop("execution", None)
            if out.get("output_type") == "stream" and out.get("name") == "stderr":
                continue  # progress bars and library chatter: the reader sees them live, not in the file
            if out.get("output_type") == "stream":
                out["text"] = _PATH.sub("<path>/", out["text"])
            for mime in ("text/plain", "text/html", "text/markdown"):
                if mime in out.get("data", {}):
                    data = out["data"][mime]
                    out["data"][mime] = _PATH.sub("<path>/", data if isinstance(data, str) else "".join(data))
            kept.append(out)
        cell["outputs"] = kept
    return nb


if __name__ == "__main__":
    src, dst = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else sys.argv[1]
    nb = nbformat.read(src, as_version=4)
    nbformat.write(strip(nb), dst)
