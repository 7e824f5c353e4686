"""The companion as a website: stage the executed notebooks, README, docs and published tables, then build them
with Sphinx + MyST-NB (never executing a notebook).

    python site/hubsite.py build [--notebooks DIR] [--out DIR]    # bash scripts/build_site.sh calls this
    python site/hubsite.py sync [--check]                         # rewrite (or check) the generated files

``build`` writes a Sphinx source tree to ``site/_build/src`` (copies, never the originals): ``index.md`` (the
README), ``docs/*.md``, ``data/README.md``, ``notebooks/README.md``, ``notebooks/NN_*.ipynb`` (the executed
notebooks, discovered by glob, each with a header that says whether its numbers are synthetic or real, its
launch links and its source, plus an invisible anchor before every figure), ``gallery.md`` (every inline figure),
``published/*.md`` (published beside this run, and the papers' reference numbers from
``lib/hubnorm/published/*.csv``) and ``cite.md`` (from ``CITATION.cff``); then runs ``sphinx-build`` with
``site/conf.py``. MathJax is copied from the pinned ``sphinx-mathjax-offline`` wheel: nothing is fetched at
build or view time.

The repository's address is written once, in ``pyproject.toml`` (``[project.urls] Repository``). ``sync``
regenerates everything derived from it: the README's badges and launch table, the hosted-install line of
``docs/install.md``, ``repository-code`` in ``CITATION.cff`` and the Colab copies of the notebooks
(``site/colab/``: the notebook's cells, no outputs, with the light-install cell first). ``tests/test_site.py``
fails when one of them is stale.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Optional
from urllib.parse import urlparse

REPO = Path(__file__).resolve().parents[1]
SITE = REPO / "site"
BUILD = SITE / "_build"
DEFAULT_OUT = BUILD / "html"
COLAB_DIR = SITE / "colab"
NB_GLOB = "[0-9][0-9]_*.ipynb"
BRANCH = "main"

# Markdown files that become pages, at the same relative path as in the repository (so their links keep working).
# docs/*.md are discovered by glob; these are the others.
EXTRA_PAGES = ("notebooks/README.md", "data/README.md")
# Order of the reference pages in the navigation (other docs/*.md follow alphabetically).
DOC_ORDER = ("docs/methods.md", "docs/teaching.md", "docs/install.md", "data/README.md", "docs/distributed.md")

PAPER_TITLES = {  # paper id of lib/hubnorm/published/*.csv -> page title (an unknown id gets its own id)
    "nnn-chowdhury2024": "NNN: Chowdhury et al. 2024, Nearest Neighbor Normalization Improves Multimodal Retrieval",
    "dbsn-pan2025": "DBSN: Pan et al. 2025, Hubness Reduction with Dual Bank Sinkhorn Normalization",
    "rerank-geigle2021": "Geigle et al., Retrieve Fast, Rerank Smart (arXiv 2021, TACL 2022)",
    "listwise-li2023": "Li et al., Integrating Listwise Ranking into Pairwise-based Image-Text Retrieval",
}


# --------------------------------------------------------------------------------------------------------------
# The repository's address (one place: pyproject.toml [project.urls] Repository)
# --------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Repo:
    url: str
    branch: str = BRANCH

    def __post_init__(self):
        u = urlparse(self.url)
        parts = [p for p in u.path.split("/") if p]
        if u.scheme != "https" or u.netloc != "github.com" or len(parts) != 2:
            raise ValueError(f"[project.urls] Repository in pyproject.toml must be https://github.com/<owner>/<name> "
                             f"(Binder and Colab open GitHub repositories); got {self.url!r}")

    @property
    def slug(self) -> str:
        return urlparse(self.url).path.strip("/")

    def blob(self, path: str) -> str:
        return f"{self.url}/blob/{self.branch}/{path}"

    def tree(self, path: str) -> str:
        return f"{self.url}/tree/{self.branch}/{path}".rstrip("/")

    def raw(self, path: str) -> str:
        return f"https://raw.githubusercontent.com/{self.slug}/{self.branch}/{path}"

    def binder(self, path: Optional[str] = None) -> str:
        base = f"https://mybinder.org/v2/gh/{self.slug}/{self.branch}"
        return base + (f"?urlpath=lab/tree/{path}" if path else "")

    def colab(self, path: str) -> str:
        return f"https://colab.research.google.com/github/{self.slug}/blob/{self.branch}/{path}"

    @property
    def pip(self) -> str:
        return f"git+{self.url}"


def repository(pyproject: Path = REPO / "pyproject.toml") -> Repo:
    data = tomllib.loads(pyproject.read_text())
    try:
        url = data["project"]["urls"]["Repository"]
    except KeyError:
        raise ValueError("pyproject.toml needs [project.urls] Repository = \"https://github.com/<owner>/<name>\"") from None
    return Repo(url.rstrip("/"))


# --------------------------------------------------------------------------------------------------------------
# Notebooks: discovery, titles, run labels, figures
# --------------------------------------------------------------------------------------------------------------
def discover_notebooks(folder: Path) -> list[Path]:
    return sorted(folder.glob(NB_GLOB))


def _source(cell) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def notebook_title(nb: dict, fallback: str) -> str:
    for cell in nb.get("cells", [])[:3]:
        if cell.get("cell_type") == "markdown":
            for line in _source(cell).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return fallback


def _output_texts(nb: dict):
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []) or []:
            if out.get("output_type") == "stream":
                yield _source({"source": out.get("text", "")})
            for mime in ("text/plain", "text/html", "text/markdown"):
                data = (out.get("data") or {}).get(mime)
                if data:
                    yield _source({"source": data})


_THIS_RUN = re.compile(r"^this run:\s*(.+?)\s*$", re.M)
_LABEL = re.compile(r"(synthetic rehearsal[^\n<|]*|synthetic analog \([^)\n<]*\)|real data \([^)\n<]*\))")


def run_label(nb: dict) -> tuple[str, str]:
    """(kind, label) of the data behind a notebook's numbers: kind is "synthetic", "real" or "unknown". The label
    is what the notebook printed (``this run: <hubnorm_companion.protocol.run_label>``), else the first run label in any
    output, else the ``source`` parameter the notebook ran with."""
    label = None
    texts = list(_output_texts(nb))
    for t in texts:
        m = _THIS_RUN.search(t)
        if m and _LABEL.search(m.group(1)):
            label = m.group(1)
            break
    if label is None:
        for t in texts:
            m = _LABEL.search(t)
            if m:
                label = m.group(1).strip()
                break
    if label is None:
        src = (nb.get("metadata", {}).get("papermill", {}).get("parameters", {}) or {}).get("source")
        if src is None:
            for cell in nb.get("cells", []):
                if "parameters" in cell.get("metadata", {}).get("tags", []):
                    m = re.search(r"^source\s*(?::[^=]+)?=\s*['\"]([^'\"]+)['\"]", _source(cell), re.M)
                    src = m.group(1) if m else None
        if src is None:
            return "unknown", "this notebook printed no run label"
        label = f"source {src}"
        if src.startswith("synthetic:") or "synthetic" in src:
            return "synthetic", label
        return "real", label
    return ("synthetic" if label.startswith("synthetic") else "real"), label


_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_SAVE_FIGURE = re.compile(r"\.save_figure\(\s*[^,()]+,\s*[rf]?[\"']([^\"']+)[\"']")


def _headings(md: str):
    fence = None
    for line in md.splitlines():
        s = line.lstrip()
        if fence is None and (s.startswith("```") or s.startswith("~~~")):
            fence = s[:3]
            continue
        if fence is not None:
            if s.startswith(fence):
                fence = None
            continue
        m = _HEADING.match(line)
        if m:
            yield len(m.group(1)), m.group(2)


def _plain(md: str) -> str:
    """Heading text without Markdown emphasis, code ticks or math dollars (for captions and link texts)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", md)
    return re.sub(r"[*_`$\\]", "", text).strip()


@dataclass
class Figure:
    notebook: str          # stem, e.g. "01_main_results"
    title: str             # the notebook's title
    index: int             # 1-based, per notebook
    cell: int              # index of the code cell in the original notebook
    section: str           # the heading above the cell
    png: bytes
    saved_as: Optional[str] = None   # results/figures/<stem>.png when the cell saves it (run.save_figure)
    caption: Optional[str] = None    # results/figures/<stem>.txt when present
    said: Optional[str] = None       # what it was drawn from: results/figures/<stem>.json's data and bank

    @property
    def anchor(self) -> str:
        return "fig-" + re.sub(r"[^a-z0-9]+", "-", f"{self.notebook}-{self.index}".lower()).strip("-")


@dataclass
class ComparisonTable:
    notebook: str
    title: str
    index: int
    cell: int
    section: str
    html: str

    @property
    def anchor(self) -> str:
        return "tab-" + re.sub(r"[^a-z0-9]+", "-", f"{self.notebook}-{self.index}".lower()).strip("-")


def _is_comparison(table_html: str) -> bool:
    heads = {h.strip().lower() for h in re.findall(r"<th[^>]*>(.*?)</th>", table_html, flags=re.S)}
    return "published" in heads and "this run" in heads


def _figure_provenance(path: Path) -> Optional[str]:
    """"data: ...; bank: ..." from a figure's provenance record (``Run.save_figure`` writes it), or None when the
    build has none. A record that is not what save_figure writes is an error naming the file."""
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
        data, bank = record["data"], record["bank"]
        if not (isinstance(data, list) and isinstance(bank, list) and data and bank
                and all(isinstance(v, str) for v in data + bank)):
            raise ValueError("data and bank must be non-empty lists of labels")
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a figure provenance record written by Run.save_figure ({e}); run the "
                         f"notebook again to rewrite it") from None
    return f"data: {'; '.join(data)} · bank: {', '.join(bank)}"


def scan_notebook(nb: dict, stem: str, captions: Optional[Path] = None) -> tuple[list[Figure], list[ComparisonTable]]:
    """Every inline PNG figure and every published-beside-this-run table of an executed notebook, with the
    section heading above it. ``captions``: a results/figures folder whose ``<prefix>_<name>.txt`` captions
    (written by ``Run.save_figure(caption=...)``) are attached to the figures their cells saved."""
    title = notebook_title(nb, stem)
    prefix = stem[:2]
    section = title
    figures: list[Figure] = []
    tables: list[ComparisonTable] = []
    for i, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") == "markdown":
            for level, text in _headings(_source(cell)):
                if level >= 2:
                    section = _plain(text)
            continue
        if cell.get("cell_type") != "code":
            continue
        saved = _SAVE_FIGURE.findall(_source(cell))
        pngs = [o["data"]["image/png"] for o in cell.get("outputs", []) or []
                if "image/png" in (o.get("data") or {})]
        for j, png in enumerate(pngs):
            name = saved[j] if len(saved) == len(pngs) else None
            fig = Figure(stem, title, len(figures) + 1, i, section,
                         base64.b64decode(_source({"source": png})), saved_as=f"{prefix}_{name}" if name else None)
            if name and captions is not None:
                txt = captions / f"{prefix}_{name}.txt"
                if txt.is_file():
                    fig.caption = txt.read_text().strip()
                fig.said = _figure_provenance(captions / f"{prefix}_{name}.json")
            figures.append(fig)
        for out in cell.get("outputs", []) or []:
            h = (out.get("data") or {}).get("text/html")
            if h and _is_comparison(_source({"source": h})):
                tables.append(ComparisonTable(stem, title, len(tables) + 1, i, section, _source({"source": h})))
    return figures, tables


# --------------------------------------------------------------------------------------------------------------
# Markdown links: keep links between pages of the site, send the rest to the repository
# --------------------------------------------------------------------------------------------------------------
_LINK_TARGET = re.compile(r"\]\(\s*(<[^>]*>|[^)\s]+)(\s+\"[^\"]*\")?\s*\)")
_REF_DEF = re.compile(r"^(\s{0,3}\[[^\]]+\]:\s*)(\S+)(.*)$")
IMAGE_SUFFIXES = {".png", ".svg", ".jpg", ".jpeg", ".gif", ".webp"}


def _resolve(target: str, doc: str, pages: set[str], repo: Repo, images: set[str]) -> str:
    if not target or target.startswith(("#", "mailto:")) or re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
        return target
    path, _, frag = target.partition("#")
    if not path:
        return target
    rel = os.path.normpath(os.path.join(os.path.dirname(doc), path)).replace(os.sep, "/")
    if rel.startswith(".."):
        return target
    if rel == "README.md":   # the README is the site's page "overview" (the home page is a short landing page)
        return os.path.relpath("overview.md", os.path.dirname(doc) or ".").replace(os.sep, "/") + (f"#{frag}" if frag else "")
    if rel in pages:
        return target
    full = REPO / rel
    if full.suffix.lower() in IMAGE_SUFFIXES and full.is_file():
        images.add(rel)
        return target
    url = repo.tree(rel) if (full.is_dir() or path.endswith("/")) else repo.blob(rel)
    return url + (f"#{frag}" if frag else "")


def rewrite_links(md: str, doc: str, pages: set[str], repo: Repo, images: Optional[set[str]] = None) -> str:
    """Rewrite the relative link targets of Markdown ``md`` (the file ``doc``, a repository-relative path): a link
    to another page of the site stays as it is, an image is kept (and recorded in ``images`` to be copied), any
    other file or folder of the repository becomes its address on the repository host. Fenced code and inline
    code are left alone."""
    images = images if images is not None else set()
    out, fence = [], None
    for line in md.split("\n"):
        s = line.lstrip()
        if fence is None and (s.startswith("```") or s.startswith("~~~")):
            fence = s[:3]
            out.append(line)
            continue
        if fence is not None:
            if s.startswith(fence):
                fence = None
            out.append(line)
            continue
        m = _REF_DEF.match(line)
        if m:
            out.append(m.group(1) + _resolve(m.group(2), doc, pages, repo, images) + m.group(3))
            continue
        parts = re.split(r"(`+[^`]*`+)", line)
        for k in range(0, len(parts), 2):
            def sub(mm):
                t = mm.group(1)
                inner = t[1:-1] if t.startswith("<") else t
                new = _resolve(inner, doc, pages, repo, images)
                return "](" + new + (mm.group(2) or "") + ")"
            parts[k] = _LINK_TARGET.sub(sub, parts[k])
        out.append("".join(parts))
    return "\n".join(out)


# --------------------------------------------------------------------------------------------------------------
# Launch links, the README block, the Colab copies
# --------------------------------------------------------------------------------------------------------------
def local_command(nb_rel: str) -> str:
    return f"bash scripts/bootstrap.sh && .venv/bin/jupyter lab {nb_rel}"


def badge_links(repo: Repo, nb_rel: str, badge_dir: str) -> str:
    name = PurePosixPath(nb_rel).name
    return (f"[![Launch on Binder]({badge_dir}/binder.svg)]({repo.binder(nb_rel)}) "
            f"[![Open in Colab]({badge_dir}/colab.svg)]({repo.colab(f'site/colab/{name}')})")


def readme_launch_block(repo: Repo, notebooks: list[Path]) -> str:
    rows = ["| notebook | launch | run locally (after the set-up above) |", "|---|---|---|"]
    for p in notebooks:
        nb = json.loads(p.read_text())
        rel = f"notebooks/{p.name}"
        rows.append(f"| [{notebook_title(nb, p.stem)}]({rel}) | {badge_links(repo, rel, 'site/badges')} "
                    f"| `.venv/bin/jupyter lab {rel}` |")
    return "\n".join(rows)


def readme_badges_block(repo: Repo) -> str:
    return (f"[![Launch on Binder](site/badges/binder.svg)]({repo.binder('notebooks')}) "
            f"[![Read as a website](site/badges/website.svg)](docs/site.md) "
            f"[![Cite](site/badges/cite.svg)](CITATION.cff)")


def install_block(repo: Repo) -> str:
    """hubnorm with what the notebooks import, and the notebooks' companion package (companion/ in the repository)."""
    return (f'```python\n%pip install "hubnorm[teach] @ {repo.pip}" '
            f'"hubnorm-companion @ {repo.pip}#subdirectory=companion"\n```')


COLAB_CELL = '''\
# Colab (and other hosted notebooks): install hubnorm once per session. This is the light install of
# docs/install.md: requirements-light.txt (the CI pins) without the Jupyter packages the host provides, then the
# package and the notebooks' companion package (companion/) with --no-deps. Skipped where both are already importable
# (a local checkout, Binder).
# It takes a few minutes (torch); if Colab then asks to restart the session, restart and run all cells again.
import importlib.util, subprocess, sys, urllib.request
if importlib.util.find_spec("hubnorm") is None or importlib.util.find_spec("hubnorm_companion") is None:
    REPO = "{url}"
    pins = urllib.request.urlopen("{raw}").read().decode().splitlines()
    pins = [p for p in (l.split("#")[0].strip() for l in pins) if p and p.split("==")[0] not in {{"jupyterlab", "ipykernel", "ipython"}}]
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", *pins])
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "--no-deps", f"git+{{REPO}}",
                           f"hubnorm-companion @ git+{{REPO}}#subdirectory=companion"])
    if {{"numpy", "torch", "pandas"}} & set(sys.modules):
        print("hubnorm installed. Restart the session (Runtime > Restart session), then run all cells again.")
'''


def colab_notebook(nb: dict, repo: Repo) -> dict:
    """The Colab copy of an executed notebook: the same cells without outputs, the install cell after the title."""
    cells = []
    for cell in nb["cells"]:
        c = {k: v for k, v in cell.items() if k not in ("outputs", "execution_count")}
        if cell.get("cell_type") == "code":
            c["outputs"], c["execution_count"] = [], None
        cells.append(c)
    install = {"cell_type": "code", "execution_count": None, "id": "hubnorm-colab-install",
               "metadata": {"tags": ["colab-install"]}, "outputs": [],
               "source": COLAB_CELL.format(url=repo.url, raw=repo.raw("requirements-light.txt")).splitlines(True)}
    meta = {k: v for k, v in nb.get("metadata", {}).items() if k in ("kernelspec", "language_info")}
    meta["colab"] = {"provenance": []}
    return {"cells": cells[:1] + [install] + cells[1:], "metadata": meta,
            "nbformat": nb.get("nbformat", 4), "nbformat_minor": nb.get("nbformat_minor", 5)}


def _replace_block(text: str, name: str, body: str, path: str) -> str:
    pat = re.compile(rf"(<!-- hubsite:{name}\b[^>]*-->\n)(.*?)(<!-- /hubsite:{name} -->)", re.S)
    if not pat.search(text):
        raise ValueError(f"{path}: the generated block <!-- hubsite:{name} --> ... <!-- /hubsite:{name} --> is missing")
    return pat.sub(lambda m: m.group(1) + body.rstrip("\n") + "\n" + m.group(3), text, count=1)


_CHECK_LINE = re.compile(r"^(PASS|DIFFERS)(?: \(([^\n]*?)\))?: ", re.M)


def claim_counts(nb: dict) -> dict[str, list[int]]:
    """PASS / DIFFERS counts of an executed notebook's check lines (``hubnorm_companion.notebook.check``), split
    into the notebook's synthetic run (``"main"``, also lines naming another synthetic data set) and the real column
    (``"real"``: lines ``PASS (real: ...): ...``)."""
    counts = {"main": [0, 0], "real": [0, 0]}
    for text in _output_texts(nb):
        for m in _CHECK_LINE.finditer(text):
            real = bool(m.group(2)) and m.group(2).startswith("real:")   # a line on other synthetic data: main
            counts["real" if real else "main"][0 if m.group(1) == "PASS" else 1] += 1
    return counts


def readme_claims_block(notebooks: list[Path]) -> str:
    """README's table of the committed notebooks' PASS/DIFFERS lines, per notebook and in all: the default run's
    numbers as the notebooks themselves printed them (a run writes the same lines, each with its data, into
    ``results/SUMMARY.md``)."""
    rows, total = [], {"main": [0, 0], "real": [0, 0]}
    for p in notebooks:
        c = claim_counts(json.loads(p.read_text()))
        for k in total:
            total[k] = [a + b for a, b in zip(total[k], c[k])]
        real = f"{c['real'][0]} PASS / {c['real'][1]} DIFFERS" if sum(c["real"]) else "-"
        rows.append(f"| {p.stem[:2]} | {c['main'][0]} PASS / {c['main'][1]} DIFFERS | {real} |")
    return "\n".join(["| notebook | the synthetic run | the real column |", "|---|---|---|", *rows,
                      f"| all | {total['main'][0]} PASS / {total['main'][1]} DIFFERS | {total['real'][0]} PASS / "
                      f"{total['real'][1]} DIFFERS |"])


#: Every numbered table and figure of the four papers (paper, item, kind, topic, what reproducing it needs).
PAPER_ITEMS = SITE / "paper_items.csv"
#: What an item needs, as the coverage table says it (the ``needs`` column of :data:`PAPER_ITEMS`).
NEEDS = {"embeddings": "embeddings or score matrices (offline)", "training": "training a model",
         "media": "images, videos or audio (an encoder on them)", "unavailable": "data not public or not at hand",
         "illustration": "nothing to compute (a diagram or example images)"}


#: The same, in the few words of README's table.
SHORT_NEEDS = {"embeddings": "open (possible offline)", "training": "need training",
               "media": "need images, video or audio", "unavailable": "need data not at hand",
               "illustration": "illustrations only"}


def declared_items(nb: dict, path: str) -> dict[str, list[str]]:
    """A notebook's own declaration of the paper items it reproduces: the literal ``reproduces=`` of its
    ``nb.setup(...)`` call (``{}`` when it declares none)."""
    import ast

    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code" or "nb.setup(" not in _source(cell):
            continue
        tree = ast.parse(_source(cell))
        names = {t.id: node.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
                 for t in node.targets if isinstance(t, ast.Name)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "setup":
                for kw in node.keywords:
                    if kw.arg == "reproduces":
                        value = names.get(kw.value.id) if isinstance(kw.value, ast.Name) else kw.value
                        try:
                            return ast.literal_eval(value)
                        except (ValueError, TypeError):
                            raise ValueError(f"{path}: reproduces= of nb.setup must be a literal dict (or a name "
                                             "assigned one in the same cell)") from None
                return {}
    return {}


def coverage(notebooks: list[Path]) -> list[dict]:
    """One row per item of :data:`PAPER_ITEMS`: the notebooks that declare it, and its status: "computed" (some
    notebook declares it), "published numbers only" (package data has its numbers, no notebook computes it) or
    "not reproduced". An item a notebook declares must exist and need nothing but embeddings (ValueError)."""
    import csv

    items = list(csv.DictReader(PAPER_ITEMS.open(encoding="utf-8")))
    known = {(r["paper"], r["item"]): r for r in items}
    by_item: dict[tuple[str, str], list[str]] = {}
    for p in notebooks:
        for paper, names in declared_items(json.loads(p.read_text()), p.name).items():
            for name in names:
                if (paper, name) not in known:
                    raise ValueError(f"{p.name} declares {paper} {name!r}, which {PAPER_ITEMS.name} does not list "
                                     f"(items are written as 'Table 1', 'Table A7', 'Fig. 2', 'Table VI')")
                if known[(paper, name)]["needs"] != "embeddings":
                    raise ValueError(f"{p.name} declares {paper} {name}, which {PAPER_ITEMS.name} says needs "
                                     f"{NEEDS[known[(paper, name)]['needs']]}")
                by_item.setdefault((paper, name), []).append(p.stem[:2])
    shipped = set()
    pub = REPO / "lib" / "hubnorm" / "published"
    for f in sorted(pub.glob("*.csv")):
        for r in csv.DictReader(f.open(encoding="utf-8")):
            t = r["table"].replace("Fig.", "Fig. ").replace("  ", " ").split(" (")[0]
            shipped.add((r["paper"], t if t.startswith(("Fig.", "Alg.")) else f"Table {t}"))
    out = []
    for r in items:
        key = (r["paper"], r["item"])
        status = ("computed" if key in by_item else "published numbers only" if key in shipped else "not reproduced")
        out.append({**r, "notebooks": by_item.get(key, []), "status": status})
    return out


def _item_order(item: str):
    kind, _, num = item.partition(" ")
    roman = {"I": 1, "II": 2, "III": 3, "IV": 4, "V": 5, "VI": 6, "VII": 7, "VIII": 8, "IX": 9, "X": 10}
    appendix = num.startswith("A")
    digits = num[1:] if appendix else num
    n = int(digits) if digits.isdigit() else roman.get(digits, 99)
    return (kind != "Table", appendix, n)


def readme_coverage_block(notebooks: list[Path]) -> str:
    """README's coverage table: per paper, the numbered tables and figures a notebook computes (from the notebooks'
    own ``reproduces=`` declarations), and the rest by what they need (docs/coverage.md lists every item)."""
    rows = coverage(notebooks)
    papers = list(dict.fromkeys(r["paper"] for r in rows))
    lines = ["| paper | numbered tables and figures | computed by a notebook | published numbers only | "
             "not reproduced (what they need) |", "|---|---|---|---|---|"]
    total = [0, 0, 0, 0]
    for paper in papers:
        mine = [r for r in rows if r["paper"] == paper]
        done = sorted((r for r in mine if r["status"] == "computed"), key=lambda r: _item_order(r["item"]))
        only = [r["item"] for r in mine if r["status"] == "published numbers only"]
        rest = [r for r in mine if r["status"] == "not reproduced"]
        needs = {}
        for r in rest:
            needs[r["needs"]] = needs.get(r["needs"], 0) + 1
        done_text = ", ".join(f"{r['item']} ({'/'.join(r['notebooks'])})" for r in done)
        why = "; ".join(f"{n} {SHORT_NEEDS[k]}" for k, n in sorted(needs.items(), key=lambda kv: (-kv[1], kv[0])))
        lines.append(f"| {paper} | {len(mine)} | {len(done)}: {done_text} | {len(only)}"
                     f"{': ' + ', '.join(only) if only else ''} | {len(rest)}{': ' + why if rest else ''} |")
        for i, n in enumerate((len(mine), len(done), len(only), len(rest))):
            total[i] += n
    lines.append(f"| all | {total[0]} | {total[1]} | {total[2]} | {total[3]} |")
    return "\n".join(lines)


def coverage_page(notebooks: list[Path]) -> str:
    """docs/coverage.md: every numbered table and figure of the four papers, which notebook computes it, or what it
    would need."""
    rows = coverage(notebooks)
    done = sum(r["status"] == "computed" for r in rows)
    lines = ["# What the notebooks reproduce", "",
             "<!-- generated by `python site/hubsite.py sync` from site/paper_items.csv and the notebooks' "
             "`nb.setup(..., reproduces=...)` declarations: do not edit -->", "",
             f"Every numbered table and figure of the four papers ({len(rows)} items): {done} are computed by a "
             "notebook (on the synthetic default data, and on real embeddings where a notebook's real column "
             "reaches them), the others are listed with what reproducing them needs. An item counts as computed when "
             "a notebook declares it in its `nb.setup(..., reproduces=...)` call; the declaration is checked against "
             "this list (`tests/test_site.py`). \"Published numbers only\": the package data holds the paper's "
             "numbers but no notebook computes them.", ""]
    for paper in dict.fromkeys(r["paper"] for r in rows):
        lines += [f"## {paper}", "", "| item | topic | status | notebook | needs |", "|---|---|---|---|---|"]
        for r in sorted((r for r in rows if r["paper"] == paper), key=lambda r: _item_order(r["item"])):
            nbs = ", ".join(r["notebooks"]) or "-"
            lines.append(f"| {r['item']} | {r['topic']} | {r['status']} | {nbs} | {NEEDS[r['needs']]} |")
        lines.append("")
    return "\n".join(lines)


SETUP_REPORT = REPO / "benchmarks" / "reports" / "setup.json"


def readme_setup_block(report: Path = SETUP_REPORT) -> str:
    """README's set-up sentence from ``scripts/measure_setup.py``'s report (what was measured, when, where)."""
    if not report.is_file():
        return "Set-up time and size: not measured yet (`python scripts/measure_setup.py`)."
    r = json.loads(report.read_text())
    return (f"Measured: the `.venv` set-up took {r['bootstrap_s'] / 60:.1f} min and {r['venv_bytes'] / 1e9:.1f} GB of pinned "
            f"packages, then `run_all.sh` {r['run_all_s'] / 60:.1f} min"
            + (f" and `run_tests.sh` {r['run_tests_s'] / 60:.0f} min" if "run_tests_s" in r else "")
            + f" (measured on a fresh clone by `python scripts/measure_setup.py`, {r['date']}, {r['machine']}, pip "
            f"cache ~/.cache/pip {'present' if r['pip_cache_warm'] else 'absent'}: "
            "[benchmarks/reports/setup.md](benchmarks/reports/setup.md)).")


EXERCISES_INDEX = REPO / "notebooks" / "solutions" / "EXERCISES.md"
_EXERCISE = re.compile(r"^(\d+)\. \[(?P<kind>[a-z -]+)\] \*\*(?P<title>.+?)\*\*", re.M)


def _markdown_section(nb: dict, heading: str) -> str:
    """The markdown cells of ``nb`` from the cell whose ``## `` heading starts with ``heading`` to the next ``## ``."""
    text = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    m = re.search(rf"^## {re.escape(heading)}[^\n]*\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    return m.group(1) if m else ""


def exercises_index(notebooks: list[Path], index: Path = EXERCISES_INDEX) -> str:
    """notebooks/solutions/EXERCISES.md: its own introduction (the text before the first notebook's section), then
    per notebook the exercises of its ``## Exercises`` section (number, kind, title, the solution function) and the
    size of its ``## Quiz`` (``tests/test_exercises.py`` checks the solutions and quizzes behind them)."""
    intro = index.read_text().split("\n## ", 1)[0].rstrip() + "\n"
    parts = [intro]
    for p in notebooks:
        stem = p.stem
        if not (index.parent / f"{stem}.py").is_file():   # a notebook without exercises
            continue
        nb = json.loads(p.read_text())
        lines = [f"## {stem}", ""]
        for m in _EXERCISE.finditer(_markdown_section(nb, "Exercises")):
            lines.append(f"{m[1]}. [{m['kind']}] **{m['title']}** Solution: `solutions/{stem}.py`, "
                         f"`exercise_{m[1]}()`.")
        quiz = re.findall(r"^(\d+)\. ", _markdown_section(nb, "Quiz"), flags=re.M)
        lines += ["", f"Self-check quiz: {len(quiz)} questions (`QUIZ` and `quiz()` in `solutions/{stem}.py`)."]
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


def generated_files(repo: Optional[Repo] = None) -> dict[Path, str]:
    """{path: content} of every file derived from the repository address and the notebooks' cells (README's
    generated blocks, docs/coverage.md, docs/parameters.md, docs/install.md's block, CITATION.cff, the Colab
    copies, notebooks/solutions/EXERCISES.md's index)."""
    repo = repo or repository()
    notebooks = discover_notebooks(REPO / "notebooks")
    out: dict[Path, str] = {}
    readme = (REPO / "README.md").read_text()
    readme = _replace_block(readme, "badges", readme_badges_block(repo), "README.md")
    readme = _replace_block(readme, "launch", readme_launch_block(repo, notebooks), "README.md")
    readme = _replace_block(readme, "claims", readme_claims_block(notebooks), "README.md")
    readme = _replace_block(readme, "coverage", readme_coverage_block(notebooks), "README.md")
    readme = _replace_block(readme, "setup", readme_setup_block(), "README.md")
    out[REPO / "README.md"] = readme
    out[REPO / "docs" / "coverage.md"] = coverage_page(notebooks) + "\n"
    from hubnorm_companion.parameters import markdown as parameters_page   # the notebooks' parameters cells

    out[REPO / "docs" / "parameters.md"] = parameters_page(REPO / "notebooks")
    out[EXERCISES_INDEX] = exercises_index(notebooks)
    install = (REPO / "docs" / "install.md").read_text()
    out[REPO / "docs" / "install.md"] = _replace_block(install, "install", install_block(repo), "docs/install.md")
    cff = (REPO / "CITATION.cff").read_text()
    out[REPO / "CITATION.cff"] = re.sub(r"(?m)^repository-code: .*$", f'repository-code: "{repo.url}"', cff)
    for p in notebooks:
        nb = json.loads(p.read_text())
        out[COLAB_DIR / p.name] = json.dumps(colab_notebook(nb, repo), indent=1, ensure_ascii=False) + "\n"
    return out


def stale_colab_copies() -> list[Path]:
    names = {p.name for p in discover_notebooks(REPO / "notebooks")}
    return [p for p in sorted(COLAB_DIR.glob("*.ipynb")) if p.name not in names]


def sync(check: bool = False) -> list[str]:
    """Write the generated files (or, with ``check``, list the ones that differ)."""
    changed = []
    for path, text in generated_files().items():
        if not path.exists() or path.read_text() != text:
            changed.append(str(path.relative_to(REPO)))
            if not check:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
    for p in stale_colab_copies():
        changed.append(f"{p.relative_to(REPO)} (no such notebook any more)")
        if not check:
            p.unlink()
    return changed


# --------------------------------------------------------------------------------------------------------------
# Staging the Sphinx source tree
# --------------------------------------------------------------------------------------------------------------
@dataclass
class Stage:
    src: Path
    repo: Repo
    notebooks_dir: Path
    captions: Optional[Path]
    origin: str
    written: set = field(default_factory=set)

    def write(self, rel: str, data) -> None:
        """Write ``rel`` under the source tree unless it already holds exactly this (keeps Sphinx incremental)."""
        path = self.src / rel
        raw = data.encode() if isinstance(data, str) else data
        self.written.add(rel)
        if path.is_file() and path.read_bytes() == raw:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(raw)

    def prune(self) -> None:
        for path in sorted(self.src.rglob("*"), reverse=True):
            rel = path.relative_to(self.src).as_posix()
            if path.is_file() and rel not in self.written:
                path.unlink()
            elif path.is_dir() and not any(path.iterdir()):
                path.rmdir()


def _header(stage: Stage, stem: str, kind: str, label: str) -> str:
    repo = stage.repo
    rel = f"notebooks/{stem}.ipynb"
    if kind == "synthetic":
        run = (f":::{{admonition}} Synthetic data: {label}\n:class: hubsite-run hubsite-synthetic\n"
               "Every number on this page comes from hubnorm's seeded synthetic generator: it illustrates the method "
               "and tests the paper's qualitative claims; it is **not a reproduction** of the paper's values. "
               "Run the notebook with a real `source` for that ([Rerun with your own data](../notebooks/README.md)).\n:::")
    elif kind == "real":
        run = (f":::{{admonition}} Real data: {label}\n:class: hubsite-run hubsite-real\n"
               "The numbers on this page were computed from real embeddings.\n:::")
    else:
        run = (f":::{{admonition}} Data: unknown\n:class: hubsite-run\n{label}.\n:::")
    launch = (f":::{{admonition}} Run it\n:class: hubsite-launch\n"
              f"{badge_links(repo, rel, '/_static/badges')}\n\n"
              f"Locally: `{local_command(rel)}`. "
              f"Source: [`notebooks/{stem}.py`]({repo.blob(f'notebooks/{stem}.py')}) (jupytext, the file to edit) "
              f"and [`{stem}.ipynb`]({repo.blob(rel)}). Outputs shown: {stage.origin}.\n:::")
    return run + "\n\n" + launch


def stage_notebook(stage: Stage, path: Path, pages: set[str],
                   images: Optional[set[str]] = None) -> tuple[str, str, list[Figure], list[ComparisonTable]]:
    nb = json.loads(path.read_text())
    stem = path.stem
    figures, tables = scan_notebook(nb, stem, stage.captions)
    kind, label = run_label(nb)
    doc = f"notebooks/{stem}.ipynb"
    anchors: dict[int, list[str]] = {}
    for f in figures:
        anchors.setdefault(f.cell, []).append(f.anchor)
    for t in tables:
        anchors.setdefault(t.cell, []).append(t.anchor)
    cells = []
    for i, cell in enumerate(nb["cells"]):
        if cell.get("cell_type") == "markdown":
            cell = dict(cell)
            src = rewrite_links(_source(cell), doc, pages, stage.repo, images)
            if i == 0:
                lines = src.split("\n")
                k = next((n for n, line in enumerate(lines) if line.startswith("# ")), 0)
                src = "\n".join(lines[:k + 1] + ["", _header(stage, stem, kind, label), ""] + lines[k + 1:])
            cell["source"] = src
        elif cell.get("cell_type") == "code":   # code folded by default (myst-nb's "hide-input": a toggle per cell)
            cell = dict(cell, metadata={**cell.get("metadata", {}),
                                        "tags": sorted(set(cell.get("metadata", {}).get("tags", [])) | {"hide-input"})})
        if i in anchors:
            cells.append({"cell_type": "markdown", "id": f"hubsite-anchor-{i}", "metadata": {},
                          "source": "\n".join(f"({a})=" for a in anchors[i])})
        cells.append(cell)
    nb = dict(nb)
    nb["cells"] = cells
    stage.write(doc, json.dumps(nb, ensure_ascii=False))
    return kind, label, figures, tables


def gallery_page(figures: list[Figure], stage: Stage) -> str:
    lines = ["# Figure gallery", "",
             "Every figure the notebooks draw, in course order. Each one links to the cell that draws it; the caption "
             "is the one saved with the figure (`results/figures/*.txt`) when this build found it, else the section "
             "heading above the cell; in italics, the data it was drawn from and the marks of its normalizers' banks "
             "(QUERY-AWARE: a test query or test target in a bank; `results/figures/*.json`). "
             f"Outputs shown: {stage.origin}.", ""]
    current = None
    for f in figures:
        if f.notebook != current:
            if current is not None:
                lines += ["::::", ""]
            current = f.notebook
            lines += [f"## {_plain(f.title)}", "", "::::{container} hubsite-gallery", ""]
        img = f"gallery/{f.notebook}-{f.index}.png"
        stage.write(img, f.png)
        where = f"{{ref}}`{f.notebook[:2]} › {_plain(f.section)} <{f.anchor}>`"
        saved = " ".join(f.caption.split()) if f.caption else ""
        lines += [f":::{{figure}} {img}", f":alt: {saved or _plain(f.section)} ({_plain(f.title)})",
                  f":target: notebooks/{f.notebook}.html#{f.anchor}", "",
                  where + (f": {_md_literal(saved)}" if saved else "")
                  + (f" (`{f.saved_as}.png`)" if f.saved_as else "")
                  + (f" *{_md_literal(f.said)}*" if f.said else ""),
                  ":::", ""]
    if current is not None:
        lines += ["::::", ""]
    if not figures:
        lines.append("No figures: the notebooks of this build have no inline image outputs.")
    return "\n".join(lines)


def comparison_page(tables: list[ComparisonTable], csvs: list[Path], stage: Stage,
                    labels: dict[str, tuple[str, str]]) -> str:
    lines = ["# Published beside this run", "",
             "The papers' published numbers next to the numbers of this build's notebooks, table by table, each "
             "linked to the cell that computes it, under the run label of its notebook (synthetic numbers are "
             f"analogs, not reproductions). Outputs shown: {stage.origin}.", ""]
    current = None
    for t in tables:
        if t.notebook != current:
            current = t.notebook
            kind, label = labels.get(t.notebook, ("unknown", "no run label"))
            lines += [f"## {_plain(t.title)}", "", f"*This run: {label}.*", ""]
        lines += [f"**{_plain(t.section)}** ({{ref}}`in the notebook <{t.anchor}>`)", "",
                  "```{raw} html",
                  f'<div class="cell_output docutils container hubsite-table"><div class="output text_html">{t.html}'
                  '</div></div>', "```", ""]
    if not tables:
        lines.append("The notebooks of this build show no published-beside-this-run tables.")
    lines += ["", "## The papers' reference numbers", "",
              "Every published number the notebooks compare with ships with the library as package data "
              "(`lib/hubnorm/published/*.csv`, read by `hubnorm_companion.reporting.load_published`), one row per number:", "",
              "```{toctree}", ":maxdepth: 1", ""] + [f"{p.stem}" for p in csvs] + ["```", ""]
    return "\n".join(lines)


def _md_literal(text: str) -> str:
    """``text`` as literal Markdown (no table separators, math, emphasis, links or HTML)."""
    return re.sub(r"([\\`*_\[\]|$<])", r"\\\1", str(text))


def published_csv_page(path: Path) -> str:
    import pandas as pd

    df = pd.read_csv(path, dtype=str).fillna("")
    paper = df["paper"].iloc[0] if len(df) else path.stem
    title = PAPER_TITLES.get(paper, paper)
    lines = [f"# {title}", "",
             f"{len(df)} published numbers from `lib/hubnorm/published/{path.name}` "
             f"({{download}}`download the CSV <{path.name}>`), grouped by the paper's table.", ""]
    cols = [c for c in df.columns if c not in ("paper", "table")]
    for table, part in df.groupby("table", sort=False):
        cells = part[cols].map(_md_literal)
        lines += [f"## Table {_md_literal(table)}", "", cells.to_markdown(index=False), ""]
    return "\n".join(lines)


def _bib_escape(s: str) -> str:
    return s.replace("&", r"\&")


def cite_page(cff: dict) -> str:
    def authors(entry):
        names = []
        for a in entry.get("authors", []):
            if "name" in a:
                names.append("{" + a["name"] + "}")
            else:
                names.append(f"{a.get('family-names', '')}, {a.get('given-names', '')}".strip(", "))
        return " and ".join(names)

    def bibtex(entry, key, kind):
        fields = [("title", "{" + _bib_escape(entry["title"]) + "}"), ("author", "{" + authors(entry) + "}")]
        if entry.get("year") or entry.get("date-released"):
            fields.append(("year", str(entry.get("year") or str(entry["date-released"])[:4])))
        for cff_key, bib_key in (("journal", "journal"), ("volume", "volume"), ("doi", "doi"), ("url", "url"),
                                 ("version", "version"), ("repository-code", "url"), ("publisher", "publisher")):
            val = entry.get(cff_key)
            if isinstance(val, dict):
                val = val.get("name")
            if val and bib_key not in dict(fields):
                fields.append((bib_key, "{" + _bib_escape(str(val)) + "}"))
        if entry.get("conference"):
            fields.append(("booktitle", "{" + _bib_escape(entry["conference"]["name"]) + "}"))
        body = ",\n".join(f"  {k} = {v}" for k, v in fields)
        return f"@{kind}{{{key},\n{body}\n}}"

    def key(entry):
        a = entry.get("authors", [{}])[0]
        fam = re.sub(r"[^a-z]", "", (a.get("family-names") or a.get("name") or "anon").lower())
        word = re.sub(r"[^a-z]", "", entry["title"].split()[0].lower())
        return f"{fam}{entry.get('year', '')}{word}"

    kinds = {"software": "software", "article": "article", "conference-paper": "inproceedings"}
    blocks = [bibtex(cff, "hubnorm", "software")]
    for ref in cff.get("references", []):
        blocks.append(bibtex(ref, key(ref), kinds.get(ref.get("type"), "misc")))
    return "\n".join([
        "# Cite this", "",
        "The repository carries a machine-readable citation, `CITATION.cff` (Citation File Format 1.2.0; GitHub "
        "shows a *Cite this repository* button for it, and `cffconvert` turns it into BibTeX, APA or RIS). It cites "
        "the companion and lists the four papers it reproduces. Please cite the papers for the methods and the "
        "companion for the code and the notebooks.", "",
        "## BibTeX", "", "```bibtex", "\n\n".join(blocks), "```", "",
        "## CITATION.cff", "", "```yaml", (REPO / "CITATION.cff").read_text().rstrip(), "```", ""])


def landing_page(readme: str, titles: dict[str, str], figures: list[Figure]) -> str:
    """The site's home page, short: what this is (README's title and its paragraph on the four papers), then read
    (the notebooks in course order), run (README's two commands), teach, cite, and a strip of figures (the first of
    each notebook, linking to the gallery). The whole README is the page "Overview"."""
    title = next((line for line in readme.splitlines() if line.startswith("# ")), "# hubnorm")
    what = re.search(r"^This is the companion to four papers[^\n]*(?:\n[^\n]+)*", readme, re.M)
    lines = [title, "",
             (what.group(0).split("\n\n")[0].rstrip(":") + "." if what else "")
             + " Every number of the default run comes from a seeded synthetic generator calibrated to real "
             "embeddings and is labelled as such; real embedding releases stand beside it where they are on the "
             "machine. The whole README is the [overview](overview.md).", "",
             "## Read", "", "The notebooks, in course order (each page opens with its code folded):", ""]
    lines += [f"- [{_plain(t)}](notebooks/{stem}.ipynb)" for stem, t in titles.items()]
    lines += ["", "Then the [methods](docs/methods.md) (every equation and its code), the "
              "[published numbers beside ours](published/index.md) and the [figure gallery](gallery.md).", "",
              "## Run", "", "```bash", "bash run_all.sh      # set up .venv, run every notebook -> results/",
              "bash run_tests.sh    # the test suite and nbval on the committed notebooks", "```", "",
              "Your own embeddings, score matrices or a GPU: [install and run](docs/install.md), "
              "[data](data/README.md).", "",
              "## Teach", "", "A course in ten notebooks with exercises, quizzes and tested solutions: "
              "[teaching guide](docs/teaching.md).", "",
              "## Cite", "", "The companion and the four papers: [citation](cite.md).", "", "## Figures", "",
              "::::{container} hubsite-gallery", ""]
    first = {}
    for f in figures:
        first.setdefault(f.notebook, f)
    for f in first.values():
        lines += [f":::{{figure}} gallery/{f.notebook}-{f.index}.png", f":alt: {_plain(f.section)} ({_plain(f.title)})",
                  ":target: gallery.html", "", f"{f.notebook[:2]} › {_plain(f.section)}", ":::", ""]
    lines += ["::::", ""]
    return "\n".join(lines)


def _index_page(readme: str, nb_docs: list[str], doc_pages: list[str], csv_pages: list[str]) -> str:
    toc = ["", "```{toctree}", ":hidden:", ":caption: Notebooks, in course order", "",
           "notebooks/README"] + [d for d in nb_docs] + ["```", "",
           "```{toctree}", ":hidden:", ":caption: Figures and numbers", "", "gallery", "published/index", "```", "",
           "```{toctree}", ":hidden:", ":caption: Reference", "", "overview"] + doc_pages + ["cite", "```", ""]
    return readme.rstrip() + "\n" + "\n".join(toc)


def _mathjax_source() -> Path:
    from importlib import metadata

    dist = metadata.distribution("sphinx-mathjax-offline")
    path = Path(dist.locate_file("sphinx-mathjax-offline/static/mathjax"))
    if not (path / "tex-chtml.js").is_file():
        raise FileNotFoundError(f"MathJax not found in the sphinx-mathjax-offline package ({path}): "
                                "bash scripts/bootstrap.sh installs it (requirements.txt)")
    return path


_LIST_START = re.compile(r"^\s*(?:[-+*]|\d+[.)])\s")
_INLINE_CODE = re.compile(r"(`+).*?\1")


def markdown_defects(text: str, name: str) -> list[str]:
    """Source defects that garble a rendered page: control characters (a ``"\\t"`` written by Python into a
    Markdown file turns ``\\times`` into a tab and "imes"), and a line that starts a list item (``- ``, ``+ ``,
    ``1. ``) while an inline ``$...$`` of its paragraph is still open: Markdown makes that line a list item, the
    two halves of the equation become raw TeX, and the text between two stray dollars is set as math italics.
    ``$$`` blocks, code fences and inline code are skipped. Returns one message per defect (``name:line: ...``)."""
    out, fence, display, open_at = [], None, False, None
    for no, line in enumerate(text.splitlines(), 1):
        bad = [c for c in line if ord(c) < 32]
        if bad:
            out.append(f"{name}:{no}: control character {bad[0]!r} (write TeX in a raw string: r'$\\times$')")
        s = line.strip()
        if fence is None and s.startswith(("```", "~~~")):
            fence, open_at = s[:3], None
            continue
        if fence is not None:
            if s.startswith(fence):
                fence = None
            continue
        if not s:   # a blank line ends the paragraph (and any inline math in it)
            open_at = None
            continue
        if open_at is not None and _LIST_START.match(line):
            out.append(f"{name}:{no}: this line starts a list item inside the $...$ opened on line {open_at}; "
                       "rewrap the paragraph so that no line inside an equation starts with '-', '+', '*' or '1.'")
        body = _INLINE_CODE.sub("", line.replace("\\$", ""))
        for part in re.split(r"(\$\$)", body):
            if part == "$$":
                display = not display
            elif not display:
                for _ in range(part.count("$")):
                    open_at = no if open_at is None else None
    return out


MATHJAX_SKIP = re.compile(r"^(mml-|tex-svg|tex-mml-|tex-chtml-full|node-main)|^output/svg")


def copy_mathjax(dest: Path) -> None:
    """The MathJax 3 files the site loads (tex-chtml.js, its fonts and lazily loaded extensions), from the
    pinned ``sphinx-mathjax-offline`` wheel; the unused combined bundles are left out."""
    src = _mathjax_source()
    stamp = dest / ".source"
    if stamp.is_file() and stamp.read_text() == str(src):
        return
    if dest.exists():
        shutil.rmtree(dest)
    for f in src.rglob("*"):
        rel = f.relative_to(src).as_posix()
        if f.is_file() and not MATHJAX_SKIP.match(rel):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, dest / rel)
    stamp.write_text(str(src))


def resolve_notebooks(arg: Optional[str]) -> tuple[Path, Optional[Path], str]:
    """(folder of executed notebooks, folder of saved figure captions or None, what to call them)."""
    if arg is None:
        return REPO / "notebooks", REPO / "results" / "figures", "the committed notebooks (notebooks/*.ipynb, the default run)"
    p = Path(arg).expanduser()
    p = p if p.is_absolute() else Path.cwd() / p
    if (p / "notebooks").is_dir() and not discover_notebooks(p):
        p = p / "notebooks"
    if not p.is_dir() or not discover_notebooks(p):
        raise SystemExit(f"--notebooks {arg}: no executed notebooks ({NB_GLOB}) in {p}; give a run's results folder "
                         "(e.g. results or results/paper-coco) or its notebooks/ folder")
    try:
        shown = p.relative_to(REPO).as_posix()
    except ValueError:
        shown = str(p)
    return p, p.parent / "figures", f"the run in {shown}"


def stage(notebooks_arg: Optional[str] = None, src: Path = BUILD / "src") -> Stage:
    import yaml

    repo = repository()
    nb_dir, captions, origin = resolve_notebooks(notebooks_arg)
    st = Stage(src, repo, nb_dir, captions if captions and captions.is_dir() else None, origin)
    src.mkdir(parents=True, exist_ok=True)
    notebooks = discover_notebooks(nb_dir)
    if not notebooks:
        raise SystemExit(f"no notebooks ({NB_GLOB}) in {nb_dir}")
    nb_docs = [f"notebooks/{p.stem}" for p in notebooks]
    docs = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md"))
    doc_pages = [d for d in DOC_ORDER if d in docs or d in EXTRA_PAGES]
    doc_pages += [d for d in docs if d not in doc_pages]
    md_pages = ["README.md"] + docs + list(EXTRA_PAGES)
    pages = set(md_pages) | {f"{d}.ipynb" for d in nb_docs} | {f"notebooks/{p.name}" for p in notebooks}
    images: set[str] = set()

    figures, tables, labels = [], [], {}
    for p in notebooks:
        kind, label, f, t = stage_notebook(st, p, pages, images)
        figures += f
        tables += t
        labels[p.stem] = (kind, label)
    for rel in md_pages:
        text = rewrite_links((REPO / rel).read_text(), rel, pages, repo, images)
        if rel == "README.md":
            st.write("overview.md", re.sub(r"^# .*$", "# Overview (the README)", text, count=1, flags=re.M))
            titles = {p.stem: notebook_title(json.loads(p.read_text()), p.stem) for p in notebooks}
            st.write("index.md", _index_page(landing_page(text, titles, figures), nb_docs,
                                             [d[:-3] for d in doc_pages], []))
        else:
            st.write(rel, text)
    for rel in sorted(images):
        st.write(rel, (REPO / rel).read_bytes())
    for badge in sorted((SITE / "badges").glob("*.svg")):
        st.write(f"_static/badges/{badge.name}", badge.read_bytes())
    st.write("gallery.md", gallery_page(figures, st))
    csvs = sorted((REPO / "lib" / "hubnorm" / "published").glob("*.csv"))
    st.write("published/index.md", comparison_page(tables, csvs, st, labels))
    for c in csvs:
        st.write(f"published/{c.stem}.md", published_csv_page(c))
        st.write(f"published/{c.name}", c.read_bytes())
    st.write("cite.md", cite_page(yaml.safe_load((REPO / "CITATION.cff").read_text())))
    st.write("_hubsite.json", json.dumps({"origin": origin, "labels": labels, "repository": repo.url,
                                           "figures": len(figures), "comparison_tables": len(tables)}, indent=1))
    st.prune()
    return st


def build(notebooks_arg: Optional[str] = None, out: Path = DEFAULT_OUT, work: Path = BUILD) -> Path:
    """Stage the sources under ``work``/src and build the HTML into ``out`` (Sphinx's cache: ``work``/doctrees)."""
    t0 = time.perf_counter()
    work = Path(work).resolve()
    st = stage(notebooks_arg, work / "src")
    copy_mathjax(work / "mathjax" / "mathjax")
    out = Path(out).resolve()
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-c", str(SITE), "-d", str(work / "doctrees"),
           "-j", "auto", "-q", str(work / "src"), str(out)]
    env = {**os.environ, "HUBSITE_SRC": str(work / "src"), "HUBSITE_MATHJAX": str(work / "mathjax")}
    res = subprocess.run(cmd, env=env, cwd=REPO)
    if res.returncode != 0:
        raise SystemExit(f"sphinx-build failed (exit {res.returncode}): {' '.join(cmd)}")
    meta = json.loads((work / "src" / "_hubsite.json").read_text())
    print(f"site: {out / 'index.html'}  ({len(meta['labels'])} notebooks from {st.origin}, {meta['figures']} figures; "
          f"built in {time.perf_counter() - t0:.0f} s)")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python site/hubsite.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build the website (never executes a notebook)")
    b.add_argument("--notebooks", help="executed notebooks to show: a run's results folder (e.g. results, "
                                       "results/paper-coco) or its notebooks/ folder; default: the committed notebooks")
    b.add_argument("--out", default=str(DEFAULT_OUT), help=f"output folder (default {DEFAULT_OUT.relative_to(REPO)})")
    b.add_argument("--work", default=str(BUILD), help="staged sources and Sphinx's cache (default site/_build)")
    s = sub.add_parser("sync", help="rewrite the files generated from the repository address and the notebooks")
    s.add_argument("--check", action="store_true", help="only list the files that are not current; exit 1 if any")
    args = ap.parse_args(argv)
    if args.cmd == "build":
        build(args.notebooks, Path(args.out), Path(args.work))
        return 0
    changed = sync(check=args.check)
    for c in changed:
        print(("stale: " if args.check else "wrote: ") + c)
    if args.check and changed:
        print("run: .venv/bin/python site/hubsite.py sync", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
