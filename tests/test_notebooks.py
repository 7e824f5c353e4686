"""The notebooks as first-class sources: jupytext pairs in sync, one common structure, inline figures, clean
committed outputs, parameters papermill can parse, checked numbers that hold under other CPU-dispatch settings,
and every notebook runnable on real embeddings with only ``source`` changed.

nbval itself (``run_tests.sh``) re-executes the committed notebooks and compares the cells tagged
``nbval-check-output``; these tests check everything around it.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from conftest import REPO, shared_path

NB_DIR = REPO / "notebooks"
SOURCES = sorted(NB_DIR.glob("[0-9][0-9]_*.py"))
NOTEBOOKS = sorted(NB_DIR.glob("[0-9][0-9]_*.ipynb"))
IDS = [p.stem for p in NOTEBOOKS]

jupytext = pytest.importorskip("jupytext")


def _read(path):
    return nbformat.read(path, as_version=4)


def test_every_notebook_has_a_jupytext_source_and_back():
    assert NOTEBOOKS, "no notebooks found"
    assert [p.stem for p in SOURCES] == [p.stem for p in NOTEBOOKS], \
        "every notebooks/NN_name.ipynb needs its editable source notebooks/NN_name.py and vice versa"


@pytest.mark.parametrize("ipynb", NOTEBOOKS, ids=IDS)
def test_pair_in_sync(ipynb):
    """The .py (what authors edit) and the .ipynb (what nbval runs) hold the same cells."""
    text = jupytext.read(ipynb.with_suffix(".py"))
    nb = _read(ipynb)
    assert nb.metadata.get("jupytext", {}).get("formats") == "ipynb,py:percent", "pair it: jupytext --set-formats ipynb,py:percent"
    a = [(c.cell_type, c.source.strip(), sorted(c.metadata.get("tags", []))) for c in text.cells]
    b = [(c.cell_type, c.source.strip(), sorted(c.metadata.get("tags", []))) for c in nb.cells]
    assert len(a) == len(b), f"{ipynb.name}: {len(a)} cells in the .py, {len(b)} in the .ipynb: run jupytext --sync"
    for i, (x, y) in enumerate(zip(a, b)):
        assert x == y, f"{ipynb.name}: cell {i} differs between the .py and the .ipynb: run `jupytext --sync {ipynb.with_suffix('.py').name}`"


#: Words that state an order or a direction of change. In a fixed cell about the run's results they would be a
#: claim the run may not bear out: such words must be generated from the run's numbers (``nb.notice``) or belong to
#: a sentence attributed to a paper.
ORDER_WORDS = re.compile(
    r"\b(raise[sd]?|raising|lifts?|lifted|lowers?|lowered|lowest|rises?|rising|rose|falls?|falling|fallen|fell|"
    r"beats?|beaten|outperform\w*|longer|longest|shorter|shortest|more|less|fewer|higher|highest|larger|largest|"
    r"smaller|smallest|greater|better|worse|best|worst|improve[sd]?|improving|hurts?|shrinks?|shrinking|grows?|"
    r"growing|grew|climbs?|drops?|increase[sd]?|decrease[sd]?|widens?|narrows?|exceeds?|ahead|behind|flat|peaks?|"
    r"shortens?|lengthens?|further|most|least|almost|nearly|slightly|several|many|few)\b", re.I)
#: A number stated in prose (not part of a name such as R@1, N_10, top-10, §2, notebook 03 or Table 5).
NUMBER = re.compile(r"(?<![\w@_{^\\.§/-])[-+]?\d+(?:[.,]\d+)?%?(?![\w}])")
REFERENCE = re.compile(r"\b(notebooks?|Figs?\.|Figures?|Tables?|Eqs?\.|App\.|Sec\.|Alg\.|Prop\.)\s*[\dA-Z][\w.–-]*")
#: A sentence about a paper ("the paper reports ...", "published ...") may quote its numbers and orders.
ATTRIBUTED = re.compile(r"\b(papers?|paper's|published|reports?)\b", re.I)
#: Markdown cells that speak about the run's results.
RESULT_CELL = re.compile(r"\*\*What to notice|^## What we learned|\*\*How to read this", re.M)


def result_claims(markdown: str) -> list:
    """The sentences of a fixed Markdown cell that state a number or an order without attributing it to a paper."""
    text = re.sub(r"\$\$.*?\$\$|\$[^$]*\$", " ", markdown, flags=re.S)   # formulas name things, they state no result
    text = re.sub(r"`[^`]*`", " ", text)                                   # neither do code names
    text = REFERENCE.sub(" ", text)
    bad = []
    for sentence in re.split(r"(?<=[.!?])\s+|\n\s*\n", text):
        if ATTRIBUTED.search(sentence):
            continue
        hits = ORDER_WORDS.findall(sentence) + NUMBER.findall(sentence)
        if hits:
            bad.append((" ".join(sentence.split())[:160], sorted({h if isinstance(h, str) else h[0] for h in hits})))
    return bad


def test_result_claims_detector_catches_the_defects_it_is_for():
    """The check of the next test is not vacuous: the sentences issue 20 found are caught, guidance is not."""
    assert result_claims("**What to notice.** Every normaliser lifts R@1 above the raw scores in both directions.")
    assert result_claims("**What to notice.** Sinkhorn shortens it further.")
    assert result_claims("**What to notice.** The best cells form a ridge along alpha rather than along k.")
    assert result_claims("**What to notice.** Matched pairs score about 0.1 above unmatched ones.")
    assert not result_claims("**What to notice.** Compare the right ends of the three curves; the cell below "
                             "says what this run shows (see notebook 03, Table 5, R@1 and $N_{10} = 0$).")
    assert not result_claims("**What to notice.** The paper reports R@1 rising from 58.8 to 69.3.")


@pytest.mark.parametrize("src", SOURCES, ids=[p.stem for p in SOURCES])
def test_what_to_notice_states_only_what_the_run_computes(src):
    """Every fixed cell about the run's results ("What to notice", "What we learned", "How to read this") says what
    to look at, or what a paper reports (attributed): no number and no order word of its own. What the run shows is
    generated by the code cell right after it (``nb.notice``: numbers and order words picked from the run's values),
    so the text stays true on any data; the PASS/DIFFERS lines check the papers' claims."""
    cells = jupytext.read(src).cells
    offenders = []
    for i, c in enumerate(cells):
        if c.cell_type != "markdown" or not RESULT_CELL.search(c.source):
            continue
        for sentence, words in result_claims(c.source):
            offenders.append(f"cell {i}: {words}: {sentence!r}")
        if "**What to notice" in c.source:
            nxt = cells[i + 1] if i + 1 < len(cells) else None
            assert nxt is not None and nxt.cell_type == "code" and "nb.notice(" in nxt.source, \
                f"{src.name} cell {i}: a 'What to notice' cell must be followed by a code cell that states what the " \
                f"run shows with nb.notice(...)"
    assert not offenders, f"{src.name}: fixed text states results the run may not bear out:\n" + "\n".join(offenders)


def _sections(cells) -> list:
    """The level-2 headings of the markdown cells, in order."""
    return [m for c in cells if c.cell_type == "markdown" for m in re.findall(r"^## (.+)$", c.source, flags=re.M)]


@pytest.mark.parametrize("ipynb", NOTEBOOKS, ids=IDS)
def test_common_structure(ipynb):
    nb = _read(ipynb)
    num = ipynb.name[:2]
    cells = nb.cells
    assert cells[0].cell_type == "markdown" and cells[0].source.startswith(f"# {num} ·"), "title '# NN · ...' first"
    params = [c for c in cells if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1, "exactly one cell tagged 'parameters'"
    assert "seed" in params[0].source
    setup = [c for c in cells if c.cell_type == "code" and f'nb.setup("{num}"' in c.source]
    assert setup, f'the setup cell calls nb.setup("{num}", ...)'
    assert any("nbval-check-output" in c.metadata.get("tags", []) for c in cells), "some key numbers are checked"
    md = "\n".join(c.source for c in cells if c.cell_type == "markdown")
    for heading in ("## Try this", "## Exercises", "## Quiz"):
        assert heading in md, f"a '{heading}' section"
    assert "**What to notice.**" in md
    heads = _sections(cells)
    assert heads.index("Exercises") < heads.index("Quiz"), "the quiz follows the exercises"
    # the discussion of DIFFERS lines answers exercises: it comes after them, opened by the run's computed status
    for i, c in enumerate(cells):
        if c.cell_type == "markdown" and "Why can a DIFFERS line appear" in c.source:
            before = _sections(cells[:i + 1])
            assert "Exercises" in before and "Quiz" in before, \
                f"{ipynb.name}: the DIFFERS discussion (cell {i}) must come after the exercises and the quiz"
            assert any(d.cell_type == "code" and "nb.check_summary()" in d.source for d in cells[:i]), \
                f"{ipynb.name}: the DIFFERS discussion must follow a cell listing the lines by status (nb.check_summary())"
    for c in cells:
        assert "NBVAL_CHECK_OUTPUT" not in c.source, "mark checked cells with the tag, not a comment"
        assert 'matplotlib.use("Agg")' not in c.source and "matplotlib.use('Agg')" not in c.source


#: Notebooks whose main cells read select -> fit -> score/evaluate with the core's public calls (issue 24, scope 2):
#: the calls their main section (the code cells before "## Try this") must make. Published rows are joined to
#: ours by one ``compare.beside_published`` call per table, never by join code in the notebook.
METHOD_CALLS = {
    "01": ("pr.select_parameters(", ".fit(", "hn.evaluate(", "compare.beside_published("),
    "02": (".fit(", "hn.evaluate(", "compare.beside_published("),
    "03": ("hn.grid_search(", ".fit(", "hn.evaluate(", "compare.beside_published("),
    "04": (".fit(", "hn.evaluate(", "hn.hubness(", "compare.beside_published("),
    "05": (".fit(", "hn.evaluate(", "hn.grid_search(", "compare.beside_published("),
    "06": (".fit(", "rr.rerank(", "hn.recall_at_k(", "compare.beside_published("),
    "07": (".fit(", "lw.listwise_metrics(", "compare.beside_published("),
    "08": (".fit(", "hn.evaluate(", "compare.beside_published("),
}
#: The same rule per section, for notebooks whose sections each run a study of their own: (notebook, words of
#: the section's "## " heading) -> the calls that section's code cells must make.
SECTION_CALLS = {
    ("03", "R@1 over k"): ("hn.grid_search(", ".fit(", "hn.evaluate(", "compare.beside_published("),
    ("03", "grid on the held-out split"): ("hn.grid_search(",),
    ("04", "Part A"): (".fit(", "hn.evaluate(", "compare.beside_published("),
    ("04", "Part B"): ("studies.subsample_rows(", ".fit(", "hn.evaluate(", "hn.hubness("),
}
#: Join code and loops that hide the method calls: published keys read out of ``setting`` by hand, hand merges,
#: and the study loops of the companion package.
JOIN_PLUMBING = ("compare.side_by_side(", "compare.to_long(", ".merge(", "pr.run_methods(", ".str.extract(",
                 "studies.query_bank_sweep(", "studies.bank_fraction_sweep(")


def _main_code(ipynb) -> str:
    """The code of the main section: the code cells before '## Try this'."""
    code = []
    for c in _read(ipynb).cells:
        if c.cell_type == "markdown" and "## Try this" in c.source:
            break
        if c.cell_type == "code":
            code.append(c.source)
    return "\n".join(code)


def _section_code(ipynb, words: str) -> str:
    """The code cells of the level-2 section whose heading holds ``words`` (up to the next level-2 heading)."""
    code, inside, found = [], False, False
    for c in _read(ipynb).cells:
        if c.cell_type == "markdown" and re.search(r"^## ", c.source, flags=re.M):
            inside = bool(re.search(rf"^## .*{re.escape(words)}", c.source, flags=re.M))
            found = found or inside
        elif inside and c.cell_type == "code":
            code.append(c.source)
    assert found, f"{ipynb.name}: no '## ' section heading holds {words!r}"
    return "\n".join(code)


@pytest.mark.parametrize("num", sorted(METHOD_CALLS))
def test_main_section_shows_the_method_calls_and_one_published_join(num):
    [ipynb] = [p for p in NOTEBOOKS if p.name.startswith(num)]
    code = _main_code(ipynb)
    missing = [call for call in METHOD_CALLS[num] if call not in code]
    assert not missing, f"{ipynb.name}: the main section must show {missing} (select -> fit -> evaluate, one join)"
    plumbing = [call for call in JOIN_PLUMBING if call in code]
    assert not plumbing, (f"{ipynb.name}: the main section uses {plumbing}: join published rows with one "
                          "compare.beside_published call per table, and write fit -> evaluate out")
    hidden = [call for call in ("select_and_evaluate(", "lw.evaluate_listwise(") if call in code]   # fit inside
    assert not hidden, f"{ipynb.name}: the main section uses {hidden}: write selection, fit and evaluation out"


@pytest.mark.parametrize("num, words", sorted(SECTION_CALLS), ids=[f"{n}-{w}" for n, w in sorted(SECTION_CALLS)])
def test_each_study_section_shows_its_method_calls(num, words):
    [ipynb] = [p for p in NOTEBOOKS if p.name.startswith(num)]
    code = _section_code(ipynb, words)
    missing = [call for call in SECTION_CALLS[(num, words)] if call not in code]
    assert not missing, f"{ipynb.name}, section {words!r}: its code cells must show {missing}"


@pytest.mark.parametrize("ipynb", NOTEBOOKS, ids=IDS)
def test_committed_outputs_are_clean_and_have_inline_figures(ipynb):
    nb = _read(ipynb)
    pngs = 0
    for c in nb.cells:
        if c.cell_type != "code":
            continue
        assert c.get("execution_count") is not None, f"{ipynb.name}: not executed (bash scripts/refresh_notebooks.sh)"
        for out in c.outputs:
            assert out.get("output_type") != "error", f"{ipynb.name}: an error output is committed"
            assert not (out.get("output_type") == "stream" and out.get("name") == "stderr"), \
                f"{ipynb.name}: stderr (progress bars, warnings) in a committed output"
            text = json.dumps(out)
            assert not re.search(r"/(home|Users|root|work|tmp)/\w", text), f"{ipynb.name}: a machine path in an output"
            assert "../shared" not in text
            pngs += "image/png" in out.get("data", {})
    assert pngs >= 1, f"{ipynb.name}: no inline figure in the committed outputs"


@pytest.mark.parametrize("ipynb", NOTEBOOKS, ids=IDS)
def test_parameters_parse_cleanly(ipynb, caplog):
    papermill = pytest.importorskip("papermill")
    params = papermill.inspect_notebook(str(ipynb))
    assert {"source", "seed"} <= set(params)
    assert not [r for r in caplog.records if "Unable to parse" in r.getMessage()]
    for name, p in params.items():
        assert p["default"] not in (None, ""), f"{name}: no parseable default"


def test_nothing_refers_to_the_developers_shared_folder():
    """Users never have ../shared: only tests may read it (and skip when it is absent)."""
    offenders = []
    for path in REPO.rglob("*"):
        if (not path.is_file() or ".git" in path.parts or ".venv" in path.parts or "tests" in path.parts
                or path.suffix not in {".py", ".md", ".sh", ".ipynb", ".cfg", ".toml", ".yml", ".txt"}
                or "results" in path.parts or "cache" in path.parts):
            continue
        text = path.read_text(errors="ignore")
        if "../shared" in text or "METHODS.md" in text:
            offenders.append(str(path.relative_to(REPO)))
    assert not offenders, f"these files point users at the developers' shared folder: {offenders}"


@pytest.mark.slow
def test_checked_numbers_hold_under_other_cpu_dispatch():
    """Regression check of the checked outputs' robustness: one notebook re-run by nbval with torch's generic
    kernels, MKL's reproducible-results mode and one thread (the other variants are in the developers' notes)."""
    env = {**os.environ, "MKL_CBWR": "COMPATIBLE", "ATEN_CPU_CAPABILITY": "default", "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "HUBNORM_PROGRESS": "0"}
    nb = NB_DIR / "03_k_ablation.ipynb"
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax",
                          "--nbval-sanitize-with", str(NB_DIR / "nbval_sanitize.cfg"), str(nb)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.shared_data
@pytest.mark.parametrize("ipynb", NOTEBOOKS, ids=IDS)
def test_notebook_runs_on_real_embeddings_with_only_source_changed(ipynb, tmp_path):
    """Own data with one parameter: the real CLIP embeddings (a local: folder), nothing else changed; synthetic
    data is forbidden in the run (HUBNORM_FORBID_SYNTHETIC=1 makes any synthetic load an error)."""
    papermill = pytest.importorskip("papermill")
    folder = shared_path("embeddings", "flickr8k-100x5-clip-vitb32")
    env_before = dict(os.environ)
    os.environ.update({"HUBNORM_FORBID_SYNTHETIC": "1", "HUBNORM_RESULTS": str(tmp_path / "results"),
                       "HUBNORM_PROGRESS": "0"})
    try:
        out = tmp_path / ipynb.name
        papermill.execute_notebook(str(ipynb), str(out), parameters={"source": f"local:{folder}"},
                                   cwd=str(NB_DIR), kernel_name="python3", progress_bar=False)
    finally:
        os.environ.clear()
        os.environ.update(env_before)
    text = "\n".join(o.get("text", "") + json.dumps(o.get("data", {}).get("text/plain", ""))
                     for c in _read(out).cells if c.cell_type == "code" for o in c.outputs)
    assert "synthetic analog" not in text, "a synthetic label appeared in a run on real data"
    # the own-data matrix's checks (tests/test_notebook_matrix.py runs its other folders; this one runs here only):
    # nothing claims a comparison that is not there, and the folder declares no data set, so the run says so
    assert "Traceback" not in text
    assert "published rows shown beside it: NNN paper, None" not in text
    if ipynb.name[:2] in ("01", "02", "04"):
        assert "NOTE: no published rows are compared with this run" in text, "a run with no data set says so"


@pytest.mark.parametrize("src", SOURCES, ids=[p.stem for p in SOURCES])
def test_a_notebook_naming_table_a1_sets_its_k(src):
    """Issue 45: notebooks 06 and 07 said they used NNN Table A1's CLIP/Flickr30k setting (alpha 0.75, k 128) and set
    k = 16. A notebook that names Table A1's setting either sets k = 128 or says which k it uses instead."""
    text = src.read_text(encoding="utf-8")
    m = re.search(r"^nnn_k(?:: int)? = (\d+)", text, flags=re.M)
    if m is None or "Table A1" not in text:
        pytest.skip("no nnn_k parameter or no mention of NNN Table A1")
    claims_setting = re.search(r"Table A1's\s+(?:#\s*)?CLIP/Flickr30k\s+(?:#\s*)?setting", text)
    assert int(m.group(1)) == 128 or not claims_setting, \
        f"{src.name} says it uses Table A1's CLIP/Flickr30k setting (k = 128) but sets nnn_k = {m.group(1)}"
    if int(m.group(1)) != 128:
        assert re.search(rf"k\s*=\s*{m.group(1)}", text), f"{src.name}: say which k replaces Table A1's k = 128"


def _real_data_in_checked_cells(nb) -> list:
    """``(cell index, release name)`` for every nbval-checked cell whose committed output names a real release.

    A fresh clone has no real release cached, so its notebooks print no real row: a checked cell that shows one
    fails nbval there (the real rows belong in unchecked cells)."""
    from hubnorm.data.real import RELEASES

    marks = {name: (name, rel.label, f"real:{name}") for name, rel in RELEASES.items()}
    found = []
    for i, c in enumerate(nb.cells):
        if c.cell_type != "code" or "nbval-check-output" not in c.metadata.get("tags", []):
            continue
        text = json.dumps(c.get("outputs", []))
        found += [(i, name) for name, words in marks.items() if any(w in text for w in words)]
    return found


@pytest.mark.parametrize("ipynb", NOTEBOOKS, ids=IDS)
def test_checked_cells_never_show_real_release_rows(ipynb):
    found = _real_data_in_checked_cells(_read(ipynb))
    assert not found, (f"{ipynb.name}: nbval-checked cells show real-release rows {found}; a clone without the "
                       "releases cached prints none, so nbval fails there: show them in an unchecked cell")


def test_real_row_detector_catches_a_checked_real_row():
    from hubnorm.data.real import RELEASES

    name, rel = next(iter(RELEASES.items()))
    nb = nbformat.v4.new_notebook()
    checked = nbformat.v4.new_code_cell("t", metadata={"tags": ["nbval-check-output"]})
    checked.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"| {rel.label} | 51.2 |\n")]
    unchecked = nbformat.v4.new_code_cell("u")
    unchecked.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"| {rel.label} | 51.2 |\n")]
    nb.cells = [unchecked, checked]
    assert _real_data_in_checked_cells(nb) == [(1, name)]
    checked.outputs = [nbformat.v4.new_output("stream", name="stdout", text="| synthetic analog | 51.2 |\n")]
    assert _real_data_in_checked_cells(nb) == []
