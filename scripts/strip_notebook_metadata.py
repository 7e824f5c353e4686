#!/usr/bin/env python
"""Copy an executed notebook, dropping what must not be committed: volatile papermill / execution metadata
(timings, paths, versions), progress-bar and warning debris on stderr, and machine-specific paths.

    python scripts/strip_notebook_metadata.py executed.ipynb notebooks/01_main_results.ipynb
    python scripts/strip_notebook_metadata.py --progress-only results/notebooks/01_main_results.ipynb

``--progress-only`` (run_all.sh, on its executed copies) removes only progress-bar lines from stderr outputs (a
library's own tqdm bar; hubnorm's bars go to run_all's side file, ``HUBNORM_PROGRESS_FILE``) and keeps everything
else, warnings included.
"""

import re
import sys

import nbformat

#: A tqdm-style progress line: "desc:  40%|####      | 4/10 [00:02<00:03, 1.9it/s]" (or its carriage returns).
_PROGRESS = re.compile(r"\d+%\|.*\||\d+/\d+ \[\d+:\d+")

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


def drop_progress(nb):
    """Remove progress-bar lines from the stderr outputs of every code cell (and the outputs left empty)."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        kept = []
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and out.get("name") == "stderr":
                text = out["text"] if isinstance(out["text"], str) else "".join(out["text"])
                lines = [ln for ln in re.split(r"\r\n|\r|\n", text) if ln.strip() and not _PROGRESS.search(ln)]
                if not lines:
                    continue
                out["text"] = "\n".join(lines) + "\n"
            kept.append(out)
        cell["outputs"] = kept
    return nb


if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0] == "--progress-only":
        for path in args[1:]:
            nbformat.write(drop_progress(nbformat.read(path, as_version=4)), path)
        sys.exit(0)
    src, dst = args[0], args[1] if len(args) > 1 else args[0]
    nb = nbformat.read(src, as_version=4)
    nbformat.write(strip(nb), dst)
