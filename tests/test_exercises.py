"""The notebooks' exercises and quizzes: every solution runs (and asserts its claim), every quiz answer is verified
by a computation, and every notebook names only solutions that exist.

Solutions live in ``notebooks/solutions/NN_name.py`` (one module per notebook ``notebooks/NN_name``) as functions
``exercise_1()``, ``exercise_2()``, ... whose docstring holds the written answer, and ``QUIZ`` (the answers of the
notebook's quiz, keyed by question number) with ``quiz()``, which checks each answer by a computation. Each
function recomputes its answer on small seeded synthetic data and asserts the claim it explains, so running it
here keeps the answers from rotting when the library changes. Every exercise says its kind
(``[predict-run-explain]``, ``[derive]``, ``[write a function]``, ``[change the method]``), and every notebook has
at least one that is not predict-run-explain.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import re
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
SOLUTIONS = NOTEBOOKS / "solutions"
EXERCISES_MD = SOLUTIONS / "EXERCISES.md"

#: A reference in an Exercises section: "Solution: `solutions/03_k_ablation.py`, `exercise_2()`".
REFERENCE = re.compile(r"`solutions/(?P<module>\d\d_\w+)\.py`,\s*`(?P<function>exercise_\d+)\(\)`")
#: The kinds of exercise; every notebook has at least one that is not predict-run-explain.
KINDS = ("predict-run-explain", "derive", "write a function", "change the method")
EXERCISE_LINE = re.compile(r"^(\d+)\. \[(?P<kind>[^\]]+)\]", flags=re.M)

#: Exercises slower than a few seconds on the loaded 2-core CI machine.
SLOW = {("02_hubness_histograms", "exercise_2"), ("04_query_bank_size", "exercise_2")}


def _solution_stems():
    return sorted(p.stem for p in SOLUTIONS.glob("[0-9][0-9]_*.py"))


def _load(stem: str):
    spec = importlib.util.spec_from_file_location(f"solutions_{stem}", SOLUTIONS / f"{stem}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _exercise_functions(module):
    return {name: fn for name, fn in inspect.getmembers(module, inspect.isfunction)
            if re.fullmatch(r"exercise_\d+", name) and fn.__module__ == module.__name__}


def _cases():
    for stem in _solution_stems():
        for name in sorted(_exercise_functions(_load(stem))):
            marks = [pytest.mark.slow] if (stem, name) in SLOW else []
            yield pytest.param(stem, name, id=f"{stem}.{name}", marks=marks)


def _section(text: str, heading: str) -> str:
    """The text from a '## <heading>' line to the next heading of level 1 or 2 (or the end)."""
    m = re.search(rf"^#{{1,2}} {heading}\s*$(?P<body>.*?)(?=^#{{1,2}} \S|\Z)", text, flags=re.M | re.S)
    return m.group("body") if m else ""


def _exercises_section(text: str) -> str:
    return _section(text, "Exercises")


def _notebook_markdown(stem: str):
    """The notebook's markdown text (from its py:percent source when there is one, else the .ipynb), or None."""
    py, ipynb = NOTEBOOKS / f"{stem}.py", NOTEBOOKS / f"{stem}.ipynb"
    if py.exists():
        lines = []
        for line in py.read_text().splitlines():
            lines.append(line[2:] if line.startswith("# ") else line.lstrip("#"))
        return "\n".join(lines)
    if ipynb.exists():
        nb = json.loads(ipynb.read_text())
        return "\n\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    return None


@pytest.mark.parametrize("stem, name", list(_cases()))
def test_exercise_solution_runs(stem, name, single_thread_torch):
    fn = _exercise_functions(_load(stem))[name]
    doc = inspect.getdoc(fn) or ""
    assert "Answer." in doc, f"{stem}.{name} needs the written answer in its docstring ('Answer. ...')"
    result = fn()
    assert isinstance(result, dict) and result, f"{stem}.{name} must return a non-empty dict of numbers"


def test_every_solution_module_has_exercises():
    stems = _solution_stems()
    # one solution module per notebook (the numbers need not be consecutive: notebooks land from parallel issues)
    assert stems == sorted(p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.py")), stems
    for stem in stems:
        fns = sorted(_exercise_functions(_load(stem)))
        assert 2 <= len(fns) <= 4, (stem, fns)
        assert fns == [f"exercise_{i}" for i in range(1, len(fns) + 1)], (stem, fns)


@pytest.mark.parametrize("stem", _solution_stems())
def test_quiz_answers_are_verified_by_computation(stem, single_thread_torch):
    """The notebook's quiz has 5-8 questions; the solution module keys an answer to each, and ``quiz()`` checks every
    answer by a computation (it raises if one is wrong) and returns them."""
    module = _load(stem)
    assert hasattr(module, "QUIZ") and callable(getattr(module, "quiz", None)), f"{stem}: needs QUIZ and quiz()"
    keys = sorted(module.QUIZ)
    assert 5 <= len(keys) <= 8 and keys == list(range(1, len(keys) + 1)), (stem, keys)
    assert module.quiz() == module.QUIZ
    text = _notebook_markdown(stem)
    if text is None:
        pytest.skip(f"notebooks/{stem} is not in this checkout")
    section = _section(text, "Quiz")
    assert section, f"notebooks/{stem} has no '## Quiz' section"
    questions = re.findall(r"^(\d+)\. ", section, flags=re.M)
    assert [int(q) for q in questions] == keys, f"{stem}: quiz questions {questions}, answers keyed {keys}"
    assert f"`solutions/{stem}.py`" in section and "QUIZ" in section, f"{stem}: the quiz must say where its answers are"


@pytest.mark.parametrize("stem", _solution_stems())
def test_every_exercise_says_its_kind_and_not_all_are_predict_run_explain(stem):
    text = _notebook_markdown(stem)
    if text is None:
        pytest.skip(f"notebooks/{stem} is not in this checkout")
    section = _exercises_section(text)
    numbered = re.findall(r"^(\d+)\. ", section, flags=re.M)
    kinds = [m["kind"] for m in EXERCISE_LINE.finditer(section)]
    assert len(kinds) == len(numbered), f"{stem}: every exercise starts with its kind in brackets, one of {KINDS}"
    assert set(kinds) <= set(KINDS), (stem, kinds)
    assert any(k != "predict-run-explain" for k in kinds), \
        f"{stem}: at least one exercise must derive, write a function or change the method"


def _check_references(stem: str, section: str, where: str):
    refs = [(m["module"], m["function"]) for m in REFERENCE.finditer(section)]
    assert refs, f"{where}: the Exercises section names no solution (`solutions/{stem}.py`, `exercise_N()`)"
    functions = _exercise_functions(_load(stem))
    for module, function in refs:
        assert module == stem, f"{where} names solutions/{module}.py; its solutions are solutions/{stem}.py"
        assert function in functions, f"{where} names {function}() but solutions/{stem}.py has {sorted(functions)}"
    missing = sorted(set(functions) - {f for _, f in refs})
    assert not missing, f"{where} does not name {missing} of solutions/{stem}.py"
    numbered = re.findall(r"^(\d+)\. ", section, flags=re.M)
    assert len(numbered) == len(functions), f"{where}: {len(numbered)} numbered exercises, {len(functions)} solutions"


@pytest.mark.parametrize("stem", _solution_stems())
def test_notebook_exercises_name_existing_solutions(stem):
    text = _notebook_markdown(stem)
    if text is None:
        pytest.skip(f"notebooks/{stem} is not in this checkout yet (renumbering of 00-06 -> 01-07)")
    section = _exercises_section(text)
    assert section, f"notebooks/{stem} has no '## Exercises' section (paste it from solutions/EXERCISES.md)"
    _check_references(stem, section, f"notebooks/{stem}")


def test_exercises_md_names_existing_solutions():
    """The lecturers' index lists every notebook's exercises (kind, solution) and quiz, matching the notebooks."""
    text = EXERCISES_MD.read_text()
    sections = dict(re.findall(r"^## (\d\d_\w+)\s*$(.*?)(?=^## |\Z)", text, flags=re.M | re.S))
    assert sorted(sections) == _solution_stems(), sorted(sections)
    for stem, body in sections.items():
        _check_references(stem, body, f"EXERCISES.md ## {stem}")
        nb_text = _notebook_markdown(stem)
        if nb_text is not None:
            nb_kinds = [m["kind"] for m in EXERCISE_LINE.finditer(_exercises_section(nb_text))]
            md_kinds = [m["kind"] for m in EXERCISE_LINE.finditer(body)]
            assert md_kinds == nb_kinds, f"EXERCISES.md ## {stem}: kinds {md_kinds}, the notebook has {nb_kinds}"
        assert f"quiz: {len(_load(stem).QUIZ)} questions" in body, f"EXERCISES.md ## {stem}: name the quiz size"


def test_no_solution_in_notebooks():
    """Solutions stay out of the notebooks: no notebook calls or imports an exercise function."""
    for path in list(NOTEBOOKS.glob("[0-9][0-9]_*.py")) + list(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        text = path.read_text()
        assert not re.search(r"^\s*(import|from) \S*solutions", text, flags=re.M), path


def test_solution_printouts_are_rounded():
    from hubnorm_companion.notebook import readable

    assert readable({"R@1": 77.60000000000001, 0.30000000000000004: (5.120000000000003, 3), "n": 5, "ok": True,
                     "tiny": 1.3877787807814457e-16, "name": "raw", "xs": [84.39999999999999]}) == \
        {"R@1": 77.6, 0.3: (5.12, 3), "n": 5, "ok": True, "tiny": 1.388e-16, "name": "raw", "xs": [84.4]}
    assert readable(np.float64(79.73333333333333)) == 79.73 and readable(0.123456, digits=2) == 0.12
    with pytest.raises(ValueError, match="digits must be a positive integer"):
        readable(1.0, digits=0)
    for stem in _solution_stems():   # every solution script prints through it
        text = (SOLUTIONS / f"{stem}.py").read_text()
        main = text[text.index('if __name__ == "__main__":'):]
        assert "readable(fn())" in main and "readable(quiz())" in main, stem
