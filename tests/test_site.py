"""The companion as a website (site/hubsite.py, docs/site.md) and quiet notebook runs.

Fast checks: the files generated from the repository address are current and the address is written once;
CITATION.cff is valid CFF 1.2.0; the notebook scanner finds figures, captions, comparison tables and run labels;
Markdown links are rewritten correctly; the Colab install cell is a no-op where hubnorm is installed;
``run_all.sh`` drops the kernel's TCP warning and nothing else.

The site (``slow``; built once per session from the committed notebooks, inside a network namespace without a
network when ``unshare -n`` is allowed, so the build is proven offline): every notebook has a page with its run
label, the gallery holds every inline figure, nothing on any page is loaded from another host, every internal
link resolves. Then headless Chromium (Debian's ``chromium`` + ``chromium-driver``, driven by Selenium; skipped
with the reason when absent) opens the home page, every notebook page (found through the site's navigation),
the gallery, the methods and teaching pages, the published-numbers page and the citation page, and checks that
MathJax typeset every equation without an error and left no raw ``$...$`` / ``\\(``, that every image loaded,
that search finds "hubness", and that no request left localhost (any other host is blocked, and every request
the browser attempted is read back from its performance log). Screenshots of five views (home, notebook 00 twice, gallery, methods) are saved to
``$HUBNORM_SITE_SCREENSHOTS`` (default ``results/site-screenshots/``) and their paths printed.

Measured on the 2-core machine: the whole file about 40 s (site build 17 s, browser checks 9 s, run_all probe 7 s).
"""

from __future__ import annotations

import base64
import functools
import http.server
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

import pytest

from conftest import REPO

from hubnorm_companion import figures

spec = importlib.util.spec_from_file_location("hubsite", REPO / "site" / "hubsite.py")
hubsite = importlib.util.module_from_spec(spec)
sys.modules["hubsite"] = hubsite
spec.loader.exec_module(hubsite)

NOTEBOOKS = hubsite.discover_notebooks(REPO / "notebooks")
TCP_WARNING = "Kernel is running over TCP without encryption"


# ------------------------------------------------------------------------------------------------------------
# Generated files, the repository address, the citation
# ------------------------------------------------------------------------------------------------------------
def _markdown_sources():
    """(name, text) of every Markdown source the site renders: the top-level pages, docs/ and every notebook's
    Markdown cells."""
    for rel in ["README.md", "data/README.md", "notebooks/README.md"] + sorted(
            p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md")):
        yield rel, (REPO / rel).read_text()
    for path in NOTEBOOKS:
        for i, cell in enumerate(json.loads(path.read_text())["cells"]):
            if cell["cell_type"] == "markdown":
                yield f"{path.name} cell {i}", "".join(cell["source"])


def test_markdown_sources_render_as_written():
    defects = [d for name, text in _markdown_sources() for d in hubsite.markdown_defects(text, name)]
    assert not defects, "\n".join(defects)


def test_methods_sections_are_numbered_in_order_with_the_references_last():
    heads = re.findall(r"^## (\d+) (.+)$", (REPO / "docs" / "methods.md").read_text(), flags=re.M)
    assert [int(n) for n, _ in heads] == list(range(1, len(heads) + 1)), heads
    assert heads[-1][1] == "References", heads[-1]


def test_markdown_lint_catches_what_garbled_the_methods_page():
    # the two defects of docs/methods.md section 12.1 (was 13.1) (a wrapped line starting "- " inside $...$) and section 3.11
    # (a tab written where Python meant "\\t"), and notebook 00's "+ 1$" continuation line
    old = ("so $g_j = -\\tau\\log n - \\sum_i w_{ij}(s_{ij}+f_i) - \\tau H =\n"
           "- \\tau\\log n$, and $w_{ij} = n\\,\\pi_{ij}$ because\n\n"
           "| `LogMeanExp` | $\\mathrm{LSE}(\text{scale}\\cdot S)$ |\n\n"
           "* **MnR** (mean rank) $= \\mathrm{mean}(r)\n  + 1$: 1-based\n")
    found = hubsite.markdown_defects(old, "m")
    assert [d.split(":")[1] for d in found] == ["2", "4", "7"], found
    assert "list item" in found[0] and "control character" in found[1] and "list item" in found[2]
    # what is allowed: a list after a closed equation, dollars in code, $$ blocks, an escaped dollar
    ok = ("costs $x$\n- item $y$\n\n```\n$ echo\n- x\n```\n`a $ b`\n- c\n\n$$a\n- b$$\n\n"
          "price \\$5 and\n- d\n")
    assert hubsite.markdown_defects(ok, "ok") == []


def test_generated_files_are_current():
    stale = hubsite.sync(check=True)
    assert not stale, (f"files generated from pyproject.toml [project.urls] and the notebooks are stale: {stale}; "
                       "run `.venv/bin/python site/hubsite.py sync` and commit the result")


def test_readme_counts_every_check_line_of_the_committed_notebooks():
    """README's table of PASS/DIFFERS lines (generated): a line on another synthetic data set counts with the
    synthetic run, a line on a real release with the real column, and none is dropped."""
    text = ("PASS: a [x]\nPASS (real: COCO, 500 pairs): b\nDIFFERS (synthetic analog (synthetic-audiocaps, seed 0)): c "
            "[1 -> 2]\nDIFFERS (real: X): d\nnot a PASS: line\n")
    nb = {"cells": [{"outputs": [{"output_type": "stream", "text": text}]}]}
    assert hubsite.claim_counts(nb) == {"main": [1, 1], "real": [1, 1]}
    block = hubsite.readme_claims_block(NOTEBOOKS)
    for p in NOTEBOOKS:   # every notebook has a row, and the table adds up
        assert f"| {p.stem[:2]} | " in block
    total = sum(sum(map(sum, hubsite.claim_counts(json.loads(p.read_text())).values())) for p in NOTEBOOKS)
    last = re.findall(r"(\d+) PASS / (\d+) DIFFERS", block.splitlines()[-1])
    assert sum(int(a) + int(b) for a, b in last) == total


def _notebook_declaring(source: str) -> dict:
    return {"cells": [{"cell_type": "markdown", "source": "nb.setup( in prose"},
                      {"cell_type": "code", "source": source, "outputs": []}]}


def test_coverage_comes_from_the_notebooks_declarations(tmp_path):
    """README's coverage table: what each notebook declares in its nb.setup call (a literal or a name assigned in
    the same cell), checked against site/paper_items.csv; a declaration of an unknown item, or of one that needs
    more than embeddings, is an error naming the notebook."""
    decl = _notebook_declaring('R = {"nnn-chowdhury2024": ["Table 1", "Fig. 2"]}\n'
                               'run = nb.setup("00", seed=0, params=globals(), reproduces=R)\n')
    assert hubsite.declared_items(decl, "x") == {"nnn-chowdhury2024": ["Table 1", "Fig. 2"]}
    literal = _notebook_declaring('run = nb.setup("00", reproduces={"listwise-li2023": ["Table V"]})')
    assert hubsite.declared_items(literal, "x") == {"listwise-li2023": ["Table V"]}
    assert hubsite.declared_items(_notebook_declaring('run = nb.setup("00", seed=0)'), "x") == {}
    with pytest.raises(ValueError, match="literal dict"):
        hubsite.declared_items(_notebook_declaring('run = nb.setup("00", reproduces=make())'), "x")
    for items, message in ((["Table 99"], "does not list"), (["Table 9"], "needs training")):
        bad = tmp_path / f"{len(message)}_bad.ipynb"
        bad.write_text(json.dumps(_notebook_declaring(f'run = nb.setup("00", reproduces={{"rerank-geigle2021": {items}}})')))
        with pytest.raises(ValueError, match=f"{bad.name} declares rerank-geigle2021 .*{message}"):
            hubsite.coverage([bad])
    rows = hubsite.coverage(NOTEBOOKS)
    assert len({(r["paper"], r["item"]) for r in rows}) == len(rows) == 99   # every numbered item, once
    assert {r["needs"] for r in rows} <= set(hubsite.NEEDS)
    declared = {(paper, item) for p in NOTEBOOKS for paper, items in
                hubsite.declared_items(json.loads(p.read_text()), p.name).items() for item in items}
    assert {(r["paper"], r["item"]) for r in rows if r["status"] == "computed"} == declared
    # items whose numbers ship as package data but that no notebook computes (none is both)
    only = {(r["paper"], r["item"]) for r in rows if r["status"] == "published numbers only"}
    assert only and not only & declared
    # regression check (issue 45 asked for at least 50 items reproducible offline)
    assert len(declared) >= 50, f"only {len(declared)} items declared by the notebooks"


def test_every_notebook_has_a_colab_copy_and_a_launch_row():
    readme = (REPO / "README.md").read_text()
    repo = hubsite.repository()
    for nb in NOTEBOOKS:
        assert (REPO / "site" / "colab" / nb.name).is_file(), f"site/colab/{nb.name} missing: run site/hubsite.py sync"
        assert repo.colab(f"site/colab/{nb.name}") in readme and repo.binder(f"notebooks/{nb.name}") in readme


def test_repository_address_is_written_in_one_place():
    """pyproject.toml holds the address; every other occurrence is in a file that `hubsite.py sync` generates."""
    url = hubsite.repository().url
    generated = {p.relative_to(REPO).as_posix() for p in hubsite.generated_files()}
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True).stdout.split()
    if not tracked:  # not a git checkout (an unpacked archive): every file of the tree
        tracked = [p.relative_to(REPO).as_posix() for p in REPO.rglob("*") if p.is_file()
                   and not {".venv", ".git", "results", "_build"} & set(p.parts)]
    holders = []
    for rel in tracked:
        path = REPO / rel
        if path.suffix in {".png", ".pdf", ".npy"} or not path.is_file():
            continue
        text = path.read_text(errors="ignore")
        if rel in generated and rel.endswith(".md"):   # only the generated blocks of a Markdown file
            text = re.sub(r"<!-- hubsite:(\w+)\b.*?<!-- /hubsite:\1 -->", "", text, flags=re.S)
            if url in text:
                holders.append(f"{rel} (outside its generated blocks)")
            continue
        if rel == "CITATION.cff":
            text = re.sub(r"(?m)^repository-code: .*$", "", text)
        if url in text:
            holders.append(rel)
    extra = sorted(set(holders) - {p for p in generated if p.endswith(".ipynb")} - {"pyproject.toml"})
    assert "pyproject.toml" in holders or not tracked, "the address belongs in pyproject.toml [project.urls]"
    assert not extra, f"the repository address is written by hand in {extra}: generate it (site/hubsite.py)"
    assert "<where this repository is hosted>" not in (REPO / "docs" / "install.md").read_text()


def test_repository_must_be_a_github_address():
    with pytest.raises(ValueError, match="github.com/<owner>/<name>"):
        hubsite.Repo("https://gitlab.com/a/b")
    r = hubsite.Repo("https://github.com/o/n")
    assert r.binder("notebooks/x.ipynb") == "https://mybinder.org/v2/gh/o/n/main?urlpath=lab/tree/notebooks/x.ipynb"
    assert r.colab("site/colab/x.ipynb") == "https://colab.research.google.com/github/o/n/blob/main/site/colab/x.ipynb"


def test_citation_cff_is_valid_and_lists_the_papers():
    jsonschema = pytest.importorskip("jsonschema")
    yaml = pytest.importorskip("yaml")
    # The CFF 1.2.0 JSON schema (citation-file-format.github.io, CC-BY-4.0), vendored so the check runs offline.
    schema = json.loads((REPO / "tests" / "data" / "citation-file-format-1.2.0.schema.json").read_text())
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    errors = [f"{list(e.path)}: {e.message}" for e in jsonschema.Draft7Validator(
        schema, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER).iter_errors(cff)]
    assert not errors, errors
    assert cff["repository-code"] == hubsite.repository().url
    titles = {r["title"]: r for r in cff["references"]}
    assert set(titles) == {
        "Nearest Neighbor Normalization Improves Multimodal Retrieval",
        "Hubness Reduction with Dual Bank Sinkhorn Normalization for Cross-Modal Retrieval",
        "Retrieve Fast, Rerank Smart: Cooperative and Joint Approaches for Improved Cross-Modal Retrieval",
        "Integrating Listwise Ranking into Pairwise-based Image-Text Retrieval"}
    first = {t: r["authors"][0]["family-names"] for t, r in titles.items()}
    assert sorted(first.values()) == ["Chowdhury", "Geigle", "Li", "Pan"]
    assert titles["Hubness Reduction with Dual Bank Sinkhorn Normalization for Cross-Modal Retrieval"]["doi"] == \
        "10.1145/3746027.3755468"
    assert cff["version"] == hubsite.tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


# ------------------------------------------------------------------------------------------------------------
# The notebook scanner and the link rewriter (small synthetic inputs)
# ------------------------------------------------------------------------------------------------------------
PNG_1x1 = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d4944415478da63f8cfc0f01f0005000201"
    "e2cd9f9a0000000049454e44ae426082")).decode()


def _nb(*cells):
    return {"cells": list(cells), "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def _md(src):
    return {"cell_type": "markdown", "metadata": {}, "source": src}


def _code(src, *outputs, tags=()):
    return {"cell_type": "code", "metadata": {"tags": list(tags)}, "source": src, "outputs": list(outputs),
            "execution_count": 1}


def _png():
    return {"output_type": "display_data", "data": {"image/png": PNG_1x1, "text/plain": "<Figure>"}, "metadata": {}}


def _stream(text):
    return {"output_type": "stream", "name": "stdout", "text": text}


def _html(text):
    return {"output_type": "display_data", "data": {"text/html": text, "text/plain": "table"}, "metadata": {}}


def test_scan_finds_figures_captions_tables_and_the_run_label(tmp_path):
    (tmp_path / "09_toy.txt").write_text("should not match: wrong stem\n")
    (tmp_path / "09_a_curve.txt").write_text("The saved caption.\n")
    nb = _nb(_md("# 09 · Toy\nintro"), _code("source = 'synthetic:coco'", tags=["parameters"]),
             _code("print('this run:', label)", _stream("this run: synthetic analog (synthetic-coco, seed 0)\n")),
             _md("## 1 · First part"),
             _code("fig = f()\nrun.save_figure(fig, \"a_curve\", caption=f'x {label}')\nplt.show()", _png()),
             _md("### 1.1 Sub *part*"),
             _code("plt.show()", _png(), _png()),
             _code("nb.show(t)", _html("<table><tr><th>method</th><th>published</th><th>this run</th></tr></table>"),
                   _html("<table><tr><th>method</th><th>R@1</th></tr></table>")))
    figures, tables = hubsite.scan_notebook(nb, "09_toy", captions=tmp_path)
    assert [(f.index, f.cell, f.section, f.saved_as, f.caption) for f in figures] == [
        (1, 4, "1 · First part", "09_a_curve", "The saved caption."),
        (2, 6, "1.1 Sub part", None, None), (3, 6, "1.1 Sub part", None, None)]
    assert figures[0].png.startswith(b"\x89PNG") and figures[0].anchor == "fig-09-toy-1"
    assert [(t.cell, t.section, t.anchor) for t in tables] == [(7, "1.1 Sub part", "tab-09-toy-1")]
    assert hubsite.run_label(nb) == ("synthetic", "synthetic analog (synthetic-coco, seed 0)")
    real = _nb(_md("# 09"), _code("x", _stream("this run: real data (coco, ViT-B-32-quickgelu)\n")))
    assert hubsite.run_label(real) == ("real", "real data (coco, ViT-B-32-quickgelu)")
    unlabelled = _nb(_md("# 09"), _code("source: str = \"local:/data/x\"  # where", tags=["parameters"]))
    assert hubsite.run_label(unlabelled) == ("real", "source local:/data/x")
    rehearsal = _nb(_code("x", _stream("this run: synthetic rehearsal of paper-coco (Karpathy sizes)\n")))
    assert hubsite.run_label(rehearsal)[0] == "synthetic"


def test_the_gallery_says_what_each_figure_was_drawn_from(tmp_path):
    import json

    (tmp_path / "09_a_curve.json").write_text(json.dumps({"figure": "09_a_curve", "caption": None,
                                                          "data": ["synthetic analog (seed 0)", "real: COCO"],
                                                          "bank": ["none", "QUERY-AWARE"]}))
    nb = _nb(_md("# 09 · Toy"), _code("run.save_figure(fig, \"a_curve\", data=label,\n  bank=t['bank'])", _png()),
             _code("plt.show()", _png()))
    figures, _ = hubsite.scan_notebook(nb, "09_toy", captions=tmp_path)
    assert [f.said for f in figures] == [
        "data: synthetic analog (seed 0); real: COCO · bank: none, QUERY-AWARE", None]   # unsaved: no record
    stage = hubsite.Stage(tmp_path / "src", hubsite.Repo("https://github.com/o/n"), tmp_path, tmp_path, "x")
    page = hubsite.gallery_page(figures, stage)
    assert "(`09_a_curve.png`) *data: synthetic analog (seed 0); real: COCO · bank: none, QUERY-AWARE*" in page
    (tmp_path / "09_a_curve.json").write_text(json.dumps({"data": "one label", "bank": ["none"]}))
    with pytest.raises(ValueError, match=r"09_a_curve.json: not a figure provenance record .*run the notebook again"):
        hubsite.scan_notebook(nb, "09_toy", captions=tmp_path)


def test_rewrite_links_keeps_pages_and_sends_files_to_the_repository():
    repo = hubsite.Repo("https://github.com/o/n")
    pages = {"README.md", "docs/methods.md", "notebooks/01_x.ipynb"}
    images: set = set()
    md = ("See [methods](docs/methods.md#2-the-offset-view) and [notebook](notebooks/01_x.ipynb), "
          "[lic](LICENSE), [reports](benchmarks/reports/), [web](https://example.org/a.md), [top](#real-data), "
          "`[not](a link)` and ![badge](site/badges/binder.svg).\n```\n[code](LICENSE)\n```\n[ref]: data/README.md")
    out = hubsite.rewrite_links(md, "README.md", pages, repo, images)
    assert "[methods](docs/methods.md#2-the-offset-view)" in out and "[notebook](notebooks/01_x.ipynb)" in out
    assert "[lic](https://github.com/o/n/blob/main/LICENSE)" in out
    assert "[reports](https://github.com/o/n/tree/main/benchmarks/reports)" in out
    assert "[web](https://example.org/a.md)" in out and "[top](#real-data)" in out
    assert "`[not](a link)`" in out and "\n[code](LICENSE)\n" in out
    assert "[ref]: https://github.com/o/n/blob/main/data/README.md" in out
    assert images == {"site/badges/binder.svg"}
    # relative to the linking file: a notebook pointing back at docs
    out = hubsite.rewrite_links("[m](../docs/methods.md) [s](solutions/DIFFERS.md)", "notebooks/01_x.ipynb",
                                pages, repo)
    assert out == "[m](../docs/methods.md) [s](https://github.com/o/n/blob/main/notebooks/solutions/DIFFERS.md)"


def test_colab_copy_installs_first_and_skips_where_hubnorm_and_the_companion_are_installed(tmp_path):
    repo = hubsite.Repo("https://github.com/o/n")
    nb = json.loads(NOTEBOOKS[0].read_text())
    copy = hubsite.colab_notebook(nb, repo)
    assert copy["cells"][0]["source"] == nb["cells"][0]["source"]
    cell = "".join(copy["cells"][1]["source"])
    assert "requirements-light.txt" in cell and "--no-deps" in cell and "git+{REPO}" in cell
    assert '"hubnorm-companion @ git+{REPO}#subdirectory=companion"' in cell   # the notebooks' companion too
    assert "https://raw.githubusercontent.com/o/n/main/requirements-light.txt" in cell
    assert all(c.get("outputs", []) == [] for c in copy["cells"])
    assert [c["source"] for c in copy["cells"][2:]] == [c["source"] for c in nb["cells"][1:]]
    # here hubnorm is importable: the cell must neither download nor install anything
    probe = ("import urllib.request, subprocess\n"
             "def no(*a, **k): raise SystemExit('the install cell tried to install')\n"
             "urllib.request.urlopen = no; subprocess.check_call = no\n" + cell + "\nprint('skipped')")
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "skipped" in res.stdout, res.stdout + res.stderr
    # hubnorm importable but not the companion (an older install): the cell installs
    missing = ("import importlib.util\nfind = importlib.util.find_spec\n"
               "importlib.util.find_spec = lambda n, *a: None if n == 'hubnorm_companion' else find(n, *a)\n")
    res = subprocess.run([sys.executable, "-c", missing + probe], capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 and "the install cell tried to install" in res.stderr, res.stdout + res.stderr


# ------------------------------------------------------------------------------------------------------------
# Quiet notebook runs
# ------------------------------------------------------------------------------------------------------------
def test_run_all_drops_the_kernel_tcp_warning_and_keeps_real_errors(tmp_path):
    """run_all.sh on a probe notebook (in a copy of the scripts, this checkout's .venv): the kernel's "running
    over TCP without encryption" line reaches neither the terminal nor the log, its "KeyboardInterrupt caught"
    line at shutdown only the log; a line the kernel writes to its own stderr and the failing cell's error reach
    both."""
    if not (REPO / ".venv" / "bin" / "python").exists():
        pytest.skip("no .venv: run bash scripts/bootstrap.sh")
    work = tmp_path / "repo"
    (work / "notebooks").mkdir(parents=True)
    for rel in ("run_all.sh", "requirements.txt", "pyproject.toml", "scripts"):
        src = REPO / rel
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, work / rel)
    os.symlink(REPO / ".venv", work / ".venv")
    # this checkout's environment is used as it is: the copy must never reinstall into it
    (work / "scripts" / "bootstrap.sh").write_text("exit 0\n")
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell("import os\nos.write(2, b'PROBE-KERNEL-STDERR\\n')\nprint('PROBE-OUT')\n"
                                          "os.write(2, b'[IPKernelApp] ERROR | KeyboardInterrupt caught in kernel.\\n')"),
                nbformat.v4.new_code_cell("raise RuntimeError('PROBE-CELL-ERROR')")]
    nbformat.write(nb, work / "notebooks" / "98_probe.ipynb")
    # a user's run_all.sh: kernels over TCP, the transport whose notice is dropped, and results in the checkout's
    # results/ (the test run's settings from tests/conftest.py removed)
    env = {k: v for k, v in os.environ.items() if k not in ("JUPYTER_DEFAULT_PROVISIONER_NAME", "HUBNORM_RESULTS")}
    for flags in ([], ["--quiet"]):
        res = subprocess.run(["bash", "run_all.sh", "--only", "98", *flags], cwd=work, capture_output=True,
                             text=True, timeout=300, env={**env, "HUBNORM_PROGRESS": "0"})
        terminal = res.stdout + res.stderr
        log = (work / "results" / "notebooks" / "98_probe.log").read_text()
        assert res.returncode == 1 and "98_probe" in terminal and "FAILED" in terminal, terminal
        assert TCP_WARNING not in terminal and TCP_WARNING not in log, (flags, terminal, log)
        assert "PROBE-KERNEL-STDERR" in log and "PROBE-CELL-ERROR" in log, (flags, log)
        assert "KeyboardInterrupt caught in kernel" in log and "KeyboardInterrupt" not in terminal, (flags, terminal)
        if not flags:
            assert "PROBE-KERNEL-STDERR" in terminal and "PROBE-OUT" in terminal, terminal
        assert "PROBE-CELL-ERROR" in terminal or "RuntimeError" in terminal, terminal


#: What the terminal of run_all.sh must never show (issue 46): a logged error or warning, the text form of a figure,
#: TeX source (inline math, a backslash command)
TERMINAL_NOISE = re.compile(r"ERROR|Warning|WARNING|<Figure|\$[^$\s][^$]*\$|\\(?:[a-zA-Z]{2,}|[,;!])(?![a-zA-Z])")


def test_terminal_noise_pattern_catches_each_kind():
    for line in ("[IPKernelApp] ERROR | x", "UserWarning: y", "<Figure size 640x480 with 1 Axes>",
                 "In this run: $N_1$ falls", "alpha \\tau"):
        assert TERMINAL_NOISE.search(line), line
    for line in ("03_k_ablation   23s  ok", "PASS: NNN raises R@1 [64.72 -> 71.94]", "τ = 0.01, N_10 = 5",
                 "cost 5$ total", "a - b"):
        assert not TERMINAL_NOISE.search(line), line


def test_the_terminal_shows_inline_math_as_plain_text():
    from hubnorm_tools.runner import plain_tex

    line = (r"the best cell is $\alpha$ = 1, $k$ = 256: $N_{10}$ and $\mathrm{R@1}$ over $m\times n$, "
            r"$\tau\,\log n$; cost 5$")
    assert plain_tex(line) == "the best cell is α = 1, k = 256: N_10 and R@1 over m× n, τ log n; cost 5$"
    assert not TERMINAL_NOISE.search(plain_tex(line))
    assert plain_tex("no math here") == "no math here"


@pytest.mark.slow
def test_run_all_terminal_shows_progress_and_results_only(tmp_path):
    """A real notebook through run_all.sh (not quiet; notebook 03, the quickest): every terminal line is progress,
    a result or a PASS/DIFFERS line: no ERROR, Warning, figure repr or raw TeX (the log keeps everything)."""
    if not (REPO / ".venv" / "bin" / "python").exists():
        pytest.skip("no .venv: run bash scripts/bootstrap.sh")
    env = {k: v for k, v in os.environ.items() if k not in ("JUPYTER_DEFAULT_PROVISIONER_NAME",)}
    res = subprocess.run(["bash", "run_all.sh", "--only", "03"], cwd=REPO, capture_output=True, text=True,
                         timeout=900, env={**env, "HUBNORM_RESULTS": str(tmp_path / "results")})
    terminal = res.stdout + res.stderr
    assert res.returncode == 0, terminal[-3000:]
    assert "03_k_ablation" in terminal and "PASS" in terminal, terminal[-3000:]
    noise = [line for line in terminal.splitlines() if TERMINAL_NOISE.search(line)]
    assert not noise, "\n".join(noise[:20])


# ------------------------------------------------------------------------------------------------------------
# The built site
# ------------------------------------------------------------------------------------------------------------
def _offline_prefix() -> list[str]:
    """``unshare -n`` (a network namespace with no network) when this user may create one, else nothing."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-n", "true"], capture_output=True).returncode == 0:
        return [unshare, "-n"]
    return []


@pytest.fixture(scope="session")
def built_site(tmp_path_factory):
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_nb")
    work = tmp_path_factory.mktemp("site")
    prefix = _offline_prefix()
    t0 = time.perf_counter()
    res = subprocess.run(prefix + [sys.executable, str(REPO / "site" / "hubsite.py"), "build",
                                   "--out", str(work / "html"), "--work", str(work / "build")],
                         cwd=REPO, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    warnings = [line for line in res.stderr.splitlines() if "WARNING" in line or "ERROR" in line]
    return {"html": work / "html", "src": work / "build" / "src", "warnings": warnings, "offline": bool(prefix),
            "seconds": time.perf_counter() - t0, "log": res.stdout + res.stderr}


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.links, self.loads = set(), [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("id", "name"):
            if a.get(key):
                self.ids.add(a[key])
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
        for key in ("src", "data-src"):
            if a.get(key):
                self.loads.append((tag, a[key]))
        if tag == "link" and a.get("href") and (a.get("rel") or "") not in ("canonical",):
            self.loads.append((tag, a["href"]))


@functools.lru_cache(maxsize=None)
def _parse(path: Path) -> _Page:
    p = _Page()
    p.feed(path.read_text(errors="ignore"))
    return p


@pytest.mark.slow
def test_site_builds_offline_with_a_page_per_notebook(built_site):
    html = built_site["html"]
    print(f"site built in {built_site['seconds']:.0f} s"
          + (" inside `unshare -n` (no network)" if built_site["offline"] else " (network not cut: no unshare)"))
    assert not built_site["warnings"], "sphinx-build warnings:\n" + "\n".join(built_site["warnings"][:20])
    for nb in NOTEBOOKS:
        page = html / "notebooks" / f"{nb.stem}.html"
        assert page.is_file(), f"no page for {nb.name}"
        text = page.read_text()
        words = _words(text)
        kind, label = hubsite.run_label(json.loads(nb.read_text()))
        assert "hubsite-run" in text and label in words, f"{nb.name}: run label {label!r} not shown"
        assert ("Synthetic data" if kind == "synthetic" else "Real data") in words
        assert f"site/colab/{nb.name}" in text and f"urlpath=lab/tree/notebooks/{nb.name}" in text
        assert f"notebooks/{nb.stem}.py" in text and f".venv/bin/jupyter lab notebooks/{nb.name}" in words
    n_png = sum(1 for nb in NOTEBOOKS for c in json.loads(nb.read_text())["cells"]
                for o in c.get("outputs", []) if "image/png" in o.get("data", {}))
    gallery = (html / "gallery.html").read_text()
    assert gallery.count('class="hubsite-gallery') == len(NOTEBOOKS)
    assert len(re.findall(r'<figure[^>]*>', gallery)) == n_png, "the gallery must show every inline figure"
    assert len(re.findall(r'href="notebooks/[^"#]+\.html#fig-', gallery)) >= n_png
    for page in ("docs/methods.html", "docs/teaching.html", "docs/install.html", "cite.html", "published/index.html",
                 "search.html", "genindex.html"):
        assert (html / page).is_file(), page
    assert "Glossary" in (html / "docs" / "teaching.html").read_text()
    assert (html / "_static" / "mathjax" / "tex-chtml.js").is_file()


def _words(page_html: str) -> str:
    """The text of a page: tags removed, entities decoded, white space collapsed."""
    import html as _h

    return re.sub(r"\s+", " ", _h.unescape(re.sub(r"<[^>]+>", "", page_html)))


@pytest.mark.slow
def test_nothing_is_loaded_from_another_host_and_internal_links_resolve(built_site):
    html = built_site["html"]
    pages = sorted(html.rglob("*.html"))
    external_loads, broken = [], []
    for page in pages:
        parsed = _parse(page)
        for tag, url in parsed.loads:
            if urlparse(url).scheme in ("http", "https") or url.startswith("//"):
                external_loads.append(f"{page.relative_to(html)}: <{tag}> {url}")
        for href in parsed.links:
            u = urlparse(href)
            if u.scheme or href.startswith("//") or href.startswith("mailto:"):
                continue
            target = (page.parent / unquote(u.path)).resolve() if u.path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                broken.append(f"{page.relative_to(html)} -> {href} (no such file)")
            elif u.fragment and target.suffix == ".html" and unquote(u.fragment) not in _parse(target).ids:
                broken.append(f"{page.relative_to(html)} -> {href} (no such anchor)")
    assert not external_loads, "loaded from another host:\n" + "\n".join(external_loads[:20])
    assert not broken, f"{len(broken)} broken internal links:\n" + "\n".join(broken[:30])


# ------------------------------------------------------------------------------------------------------------
# In a real browser
# ------------------------------------------------------------------------------------------------------------
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server(built_site):
    handler = functools.partial(_Quiet, directory=str(built_site["html"]))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not CHROMIUM or not CHROMEDRIVER:
        pytest.skip("headless Chromium is not installed (Debian: apt-get install chromium chromium-driver; "
                    ".ci/run installs it when run as root)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (requirements.txt)")
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")   # Selenium Manager must not look for drivers online
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    profile = tmp_path_factory.mktemp("chromium-profile")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-default-apps", "--disable-extensions", "--disable-dev-shm-usage",
                "--window-size=1280,900", f"--user-data-dir={profile}",
                # any host but this machine: refused by a proxy that is not there, and not resolvable
                "--proxy-server=http://127.0.0.1:9",
                "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE localhost , EXCLUDE 127.0.0.1"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(60)
    # Chromium's own start-up (its new-tab page tries a Google-hosted frame; the proxy above refuses it) happens
    # before any page of the site: leave that tab, then start the request log from a clean slate.
    driver.get("about:blank")
    time.sleep(0.5)
    driver.get_log("performance")
    yield driver
    driver.quit()


def _search(browser, server, query):
    """(result links in rank order, snippet texts) of the site's own search for ``query``."""
    browser.get(urljoin(server, f"search.html?q={query}"))
    deadline, summary = time.time() + 30, ""
    while time.time() < deadline and "finished" not in summary.lower():
        summary = browser.execute_script(
            "const s = document.querySelector('#search-results .search-summary'); return s ? s.textContent : ''")
        time.sleep(0.2)
    time.sleep(1.0)   # snippets arrive after the list (each page is fetched)
    return browser.execute_script(
        "const li = Array.from(document.querySelectorAll('#search-results li'));"
        "return [li.map(l => l.querySelector('a').getAttribute('href')),"
        "        li.map(l => l.querySelector('p.context')).filter(p => p).map(p => p.textContent)];")


_WAIT_JS = """
const done = arguments[arguments.length - 1];
const imgs = Array.from(document.images);
imgs.forEach(i => { i.loading = 'eager'; });
const loaded = Promise.all(imgs.map(i => i.complete ? null : new Promise(r => { i.onload = i.onerror = r; })));
const math = (window.MathJax && MathJax.startup && MathJax.startup.promise) ? MathJax.startup.promise : null;
Promise.all([loaded, math]).then(() => done(true), e => done('error: ' + e));
"""

_CHECK_JS = r"""
const skip = 'pre, code, script, style, mjx-container, textarea, kbd, .highlight, .linenos';
const walker = document.createTreeWalker(document.querySelector('main') || document.body, NodeFilter.SHOW_TEXT);
const raw = [];
while (walker.nextNode()) {
  const n = walker.currentNode;
  if (n.parentElement && n.parentElement.closest(skip)) continue;
  const t = n.textContent;
  const m = t.match(/\$\$|\$[^$\s][^$]*[^$\s\\]\$|\$[^$\s]\$|\\\(|\\\)|\\\[|\\\]/);
  if (m) raw.push(t.slice(Math.max(0, m.index - 40), m.index + 60));
}
const mathEls = Array.from(document.querySelectorAll('.math'));
// what MathJax typeset: TeX with a control character (a Python "\t" turned \times into a tab and "imes"), and
// prose set as math italics (words of three or more letters outside \text{}/\mathrm{}/commands; an inline equation
// that starts with punctuation: the text between two stray dollars, "$, and $")
const doc = (window.MathJax && MathJax.startup && MathJax.startup.document) ? MathJax.startup.document : null;
const items = doc && doc.math ? Array.from(doc.math) : [];
const italic = [];
for (const m of items) {
  const tex = String(m.math);
  const bare = tex.replace(/\\(text|textrm|textit|mathrm|mathit|mathbf|mathsf|mathtt|mathcal|mathbb|operatorname|mbox|begin|end)\s*\{[^{}]*\}/g, ' ')
                  .replace(/\\[A-Za-z]+/g, ' ');
  if (/[\x00-\x09\x0b\x0c\x0e-\x1f]/.test(tex) || /(^|[^A-Za-z])[A-Za-z]{3,}([^A-Za-z]|$)/.test(bare)
      || (!m.display && (/^\s*[,.;:)]/.test(tex) || /[,;:(]\s*$/.test(tex))))
    italic.push(JSON.stringify(tex.slice(0, 80)));
}
return {
  raw: raw.slice(0, 10),
  italic: italic.slice(0, 10),
  math: mathEls.length,
  untypeset: mathEls.filter(e => !e.querySelector('mjx-container')).map(e => e.textContent.slice(0, 80)).slice(0, 10),
  merror: Array.from(document.querySelectorAll('mjx-merror')).map(e => e.textContent.slice(0, 80)),
  mjx: document.querySelectorAll('mjx-container').length,
  images: document.images.length,
  broken: Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.currentSrc || i.src),
  title: document.title,
};
"""


def _open(driver, url):
    driver.get(url)
    status = driver.execute_async_script(_WAIT_JS)
    assert status is True, f"{url}: {status}"
    return driver.execute_script(_CHECK_JS)


def _requests(driver) -> tuple[list[str], list[str]]:
    """(every URL the browser requested, the ones that failed or answered >= 400), from the performance log."""
    urls, failed, by_id = [], [], {}
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        params = msg.get("params", {})
        if msg["method"] == "Network.requestWillBeSent":
            url = params["request"]["url"]
            by_id[params["requestId"]] = url
            urls.append(url)
        elif msg["method"] == "Network.responseReceived" and params["response"]["status"] >= 400:
            failed.append(f"{params['response']['status']} {params['response']['url']}")
        elif msg["method"] == "Network.loadingFailed" and not params.get("canceled"):
            failed.append(f"{params.get('errorText')} {by_id.get(params['requestId'], '?')}")
    return urls, failed


def _screenshot(driver, name: str, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


@pytest.mark.slow
def test_site_in_a_real_browser(built_site, server, browser):
    t0 = time.perf_counter()
    shots = Path(os.environ.get("HUBNORM_SITE_SCREENSHOTS", REPO / "results" / "site-screenshots"))
    home = _open(browser, server)
    assert "hubnorm" in home["title"] and not home["broken"], home
    # the notebook pages, found through the site's own navigation
    hrefs = browser.execute_script(
        "return Array.from(document.querySelectorAll('nav a[href]')).map(a => a.href)")
    nb_urls = sorted({h.split("#")[0] for h in hrefs if re.search(r"/notebooks/\d\d_[^/]*\.html", h)})
    assert [u.rsplit("/", 1)[1][:-5] for u in nb_urls] == [p.stem for p in NOTEBOOKS], \
        "the navigation must list every notebook, in course order"
    _screenshot(browser, "1_home", shots)
    problems, math_pages, links = [], 0, set()
    others = ["gallery.html", "docs/methods.html", "docs/teaching.html", "published/index.html", "cite.html"]
    for url in nb_urls + [urljoin(server, p) for p in others]:
        r = _open(browser, url)
        name = url[len(server):]
        links.update(browser.execute_script(
            "return Array.from(document.querySelectorAll('a[href]')).map(a => a.href)"
            ".filter(h => h.startsWith(location.origin))"))
        for key in ("raw", "italic", "untypeset", "merror", "broken"):
            if r[key]:
                problems.append(f"{name}: {key}: {r[key]}")
        if r["math"]:
            math_pages += 1
            if not r["mjx"]:
                problems.append(f"{name}: {r['math']} equations, none typeset by MathJax")
        if name.endswith("00_hubness_from_scratch.html"):
            assert r["math"] > 0 and r["images"] >= 5, r
            # code folded by default, one toggle per cell, and the page's button opens and folds them all
            fold = ("const d = Array.from(document.querySelectorAll('details.hide.above-input'));"
                    "const b = document.querySelector('.hubsite-code-toggle');"
                    "return [d.length, d.filter(x => x.open).length, b ? b.textContent : null];")
            n_cells, n_open, text = browser.execute_script(fold)
            assert n_cells >= 20 and n_open == 0 and text == "Show all code", (n_cells, n_open, text)
            browser.execute_script("document.querySelector('.hubsite-code-toggle').click()")
            assert browser.execute_script(fold)[1:] == [n_cells, "Fold all code"]
            browser.execute_script("document.querySelector('.hubsite-code-toggle').click()")
            assert browser.execute_script(fold)[1:] == [0, "Show all code"]
            _screenshot(browser, "2_notebook_00_top", shots)
            browser.execute_script("const f = document.querySelector('[id^=fig-]');"
                                   "if (f) window.scrollTo(0, f.getBoundingClientRect().top + window.scrollY - 300)")
            _screenshot(browser, "3_notebook_00_figure", shots)
        if name == "gallery.html":
            _screenshot(browser, "4_gallery", shots)
        if name == "docs/methods.html":
            assert r["mjx"] > 50, r  # the methods page is mostly equations
            browser.execute_script("const s = document.getElementById('nnn');"
                                   "if (s) window.scrollTo(0, s.getBoundingClientRect().top + window.scrollY - 60)")
            _screenshot(browser, "5_methods_equations", shots)
    assert not problems, "\n".join(problems)
    assert math_pages >= 3
    # the width at which the figure check judges text (figures.READING_WIDTH_PX) is the width this site shows a
    # wide figure at on a laptop screen (1366 pixels): measured here, so a change of the site's column fails
    browser.set_window_size(1366, 800)
    try:
        _open(browser, [u for u in nb_urls if "/04_" in u][0])
        shown = browser.execute_script("return Math.max(...Array.from(document.querySelectorAll('.cell_output img'))"
                                       ".map(i => i.parentElement.clientWidth))")   # what an image may fill
    finally:
        browser.set_window_size(1280, 900)
    assert abs(shown - figures.READING_WIDTH_PX) <= 0.05 * figures.READING_WIDTH_PX, \
        (shown, figures.READING_WIDTH_PX)
    # every link on these pages, as the browser resolved it, answers 200 and its anchor exists
    for link in sorted(links):
        u = urlparse(link)
        with urllib.request.urlopen(link.split("#")[0], timeout=10) as resp:
            assert resp.status == 200, link
            body = resp.read()
        if u.fragment and u.path.endswith((".html", "/")):
            page = _Page()
            page.feed(body.decode(errors="ignore"))
            if unquote(u.fragment) not in page.ids:
                problems.append(f"{link}: no such anchor")
    assert not problems, "\n".join(problems)
    # search (Sphinx's client-side index): wait for "Search finished, found N pages ..."
    browser.get(urljoin(server, "search.html?q=hubness"))
    deadline, summary = time.time() + 30, ""
    while time.time() < deadline and "finished" not in summary.lower():
        summary = browser.execute_script(
            "const s = document.querySelector('#search-results .search-summary'); return s ? s.textContent : ''")
        time.sleep(0.2)
    hits = browser.execute_script("return Array.from(document.querySelectorAll('#search-results li a'))"
                                  ".map(a => a.getAttribute('href'))")
    assert hits, f"search for 'hubness' found nothing ({summary!r})"
    assert any("notebooks/00_hubness_from_scratch" in h for h in hits), hits
    # a method's name finds the pages that explain it first (pages that only list others rank below:
    # site/_static/search_scorer.js), and every snippet is text of the page, not of the theme around it
    ranked, snippets = _search(browser, server, "sinkhorn")
    top = [h.split("#")[0] for h in ranked[:5]]
    assert "docs/methods.html" in top and "notebooks/05_sinkhorn_vs_inverted_softmax.html" in top, ranked
    assert not {"gallery.html", "index.html", "published/index.html"} & set(top), ranked
    theme = [t for t in snippets if re.search(r"System Settings|Light\s+Dark|Back to top|Skip to main", t)]
    assert snippets and not theme, theme[:3]
    urls, failed = _requests(browser)
    host = urlparse(server).netloc
    elsewhere = sorted({u for u in urls if urlparse(u).scheme in ("http", "https", "ws", "wss")
                        and urlparse(u).netloc != host})
    assert not elsewhere, f"requests that left this machine (blocked): {elsewhere}"
    assert not failed, f"failed requests: {failed[:20]}"
    # the checks above can fail: a page with raw TeX, an untypeset equation and a broken image is caught
    browser.get("data:text/html,<main><p>cost $x_1$ and \\(y\\)</p><span class='math'>z</span>"
                "<img src='data:image/png;base64,AAAA'></main>")
    probe = browser.execute_script(_CHECK_JS)
    assert probe["raw"] and probe["untypeset"] and probe["broken"], probe
    # ... and so are the two ways a Markdown source garbled the methods page (both typeset by the site's own
    # MathJax): the text between two stray dollars set as math ("$, and $"), and a tab where "\t" was meant
    methods = (built_site["html"] / "docs" / "methods.html").read_text()
    bad = ('<p>A <span class="math notranslate nohighlight">\\(, and \\)</span> B '
           '<span class="math notranslate nohighlight">\\(\\mathrm{LSE}(\text{scale})\\)</span> C '
           '<span class="math notranslate nohighlight">\\(\\tau\\log n\\)</span></p>')
    probe_page = built_site["html"] / "docs" / "_probe_math.html"
    probe_page.write_text(re.sub(r"(<main[^>]*>)", lambda m: m.group(1) + bad, methods, count=1))
    try:
        probe = _open(browser, urljoin(server, "docs/_probe_math.html"))
    finally:
        probe_page.unlink()
    assert any(", and" in t for t in probe["italic"]) and any("(\\text{scale}" in t for t in probe["italic"]), probe["italic"]
    assert not any("log n" in t for t in probe["italic"]), probe["italic"]
    print(f"browser checks: {len(nb_urls)} notebook pages + {len(others) + 1} others, {len(links)} internal links, "
          f"{len(hits)} search hits, "
          f"{len(urls)} requests, all to {host}; {time.perf_counter() - t0:.0f} s; screenshots in {shots}")


def test_readme_setup_sentence_comes_from_the_measured_report(tmp_path):
    assert "not measured yet" in hubsite.readme_setup_block(tmp_path / "none.json")
    report = tmp_path / "setup.json"
    report.write_text(json.dumps({"bootstrap_s": 336.0, "venv_bytes": 6.8e9, "run_all_s": 486.0, "run_tests_s": 1110.0,
                                  "date": "2026-12-02", "machine": "x86_64, 2 cores, Python 3.11.2",
                                  "pip_cache_warm": True}))
    text = hubsite.readme_setup_block(report)
    assert text.startswith("Measured: the `.venv` set-up took 5.6 min and 6.8 GB of pinned packages, then "
                           "`run_all.sh` 8.1 min and `run_tests.sh` 18 min"), text
    assert "2026-12-02, x86_64, 2 cores" in text and "pip cache ~/.cache/pip present" in text


def test_the_exercises_index_is_read_from_the_notebooks(tmp_path):
    """EXERCISES.md keeps its introduction and lists each notebook's exercises (kind, title, solution function) and
    quiz size as the notebook states them: an exercise added to a notebook appears in the index, a notebook without
    a solutions module has no section."""
    index = tmp_path / "solutions" / "EXERCISES.md"
    index.parent.mkdir()
    index.write_text("# Index\n\nIntro text.\n\n## 99_old\n\nstale\n")
    (index.parent / "98_new.py").write_text("QUIZ = {}\n")
    cells = [{"cell_type": "markdown", "source": ["## Exercises\n", "1. [derive] **First.** Text.\n",
                                                 "2. [write a function] **Second one.** More.\n"]},
             {"cell_type": "markdown", "source": ["## Quiz\n", "1. a?\n", "2. b?\n", "3. c?\n"]},
             {"cell_type": "markdown", "source": ["## Appendix\n", "1. not a question\n"]}]
    for stem in ("98_new", "97_plain"):
        (tmp_path / f"{stem}.ipynb").write_text(json.dumps({"cells": cells}))
    text = hubsite.exercises_index([tmp_path / "97_plain.ipynb", tmp_path / "98_new.ipynb"], index)
    assert text == ("# Index\n\nIntro text.\n\n## 98_new\n\n"
                    "1. [derive] **First.** Solution: `solutions/98_new.py`, `exercise_1()`.\n"
                    "2. [write a function] **Second one.** Solution: `solutions/98_new.py`, `exercise_2()`.\n\n"
                    "Self-check quiz: 3 questions (`QUIZ` and `quiz()` in `solutions/98_new.py`).\n")


def test_the_syllabus_has_a_row_for_every_notebook():
    """docs/teaching.md's syllabus is written by hand (prerequisites, goals, study time): a notebook added without
    its row is caught here, and a row of a notebook that no longer exists too."""
    names = {p.stem for p in hubsite.discover_notebooks(REPO / "notebooks")}
    rows = set(re.findall(r"^\| \d\d \| `(\d\d_\w+)` \|", (REPO / "docs" / "teaching.md").read_text(), flags=re.M))
    assert names and rows == names, f"syllabus rows {sorted(rows)} != notebooks {sorted(names)}"


def test_the_notebooks_readme_has_a_row_for_every_notebook():
    """notebooks/README.md's table (paper figure / table, what it shows) is written by hand: a notebook added without
    its row is caught here, and a row of a notebook that no longer exists too."""
    names = {p.stem for p in hubsite.discover_notebooks(REPO / "notebooks")}
    rows = set(re.findall(r"^\| `(\d\d_\w+)` \|", (REPO / "notebooks" / "README.md").read_text(), flags=re.M))
    assert names and rows == names, f"notebooks/README.md rows {sorted(rows)} != notebooks {sorted(names)}"
