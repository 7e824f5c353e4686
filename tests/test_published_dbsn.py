"""The published rows of DBSN Tables 1, 3, 4, 5, 6, A9 and A10 (lib/hubnorm/published/dbsn_pan2025.csv) equal the paper text.

The paper text (the developers' copy, beside the repository; skipped when absent) is parsed table by table: each
table's lines are found after its caption, their numbers read in column order ("-" = not reported, no row), and
every number becomes the row ``(table, model, dataset, direction, setting, method, metric)`` it states. The package
data must hold exactly those rows for these tables, with the same values.
"""

from __future__ import annotations

import re

import pandas as pd
import pytest

from hubnorm_companion.reporting import PUBLISHED_COLUMNS, PUBLISHED_DIR

from conftest import SHARED_DATA

QA = "query-aware (bank = test queries)"
LIT = "literature (cited paper)"
UNITS = {"R@1": "percent", "R@5": "percent", "R@10": "percent", "MdR": "median rank (1-based)",
         "MnR": "mean rank (1-based)", "skewness": "skewness of N_10 over the test gallery",
         "sparsity": "share of zero entries of the normalised score matrix"}
METHODS = {"-": "raw", "+ IS": "is", "+ DIS": "dis", "+ SN": "sn", "+ DualIS": "dualis", "+ DBSN": "dbsn"}
BANKS = {"test & -": QA, "val & -": "Bq=val", "val & val": "Bq=val, Bt=val", "train & -": "Bq=train",
         "train & train": "Bq=train, Bt=train", "jsfusion & -": "Bq=jsfusion"}
NUM = r"(?:-|\d+(?:\.\d+)?)"


def paper_text():
    folder = SHARED_DATA.parent / "seeds"
    found = sorted(folder.glob("002_*.txt")) if folder.is_dir() else []
    if not found:
        pytest.skip(f"the DBSN paper text is absent ({folder}/002_*.txt): the published-row check needs it")
    return found[0].read_text(encoding="utf-8").splitlines()


#: Where a table of the paper text ends: the first line after its caption that is empty or starts another block.
TABLE_END = ("Table ", "Figure ", "Refer to caption")


def _block(lines, caption):
    """Every line of the table under ``caption``, up to where it ends (:data:`TABLE_END`), whitespace folded: never
    a fixed number of lines (a fixed window once stopped one line short of Table 1's last row)."""
    i = next(k for k, line in enumerate(lines) if line.startswith(caption))
    out = []
    for line in lines[i + 1:]:
        if not line.strip() or line.startswith(TABLE_END):
            break
        out.append(" ".join(line.replace("\xa0", " ").split()))
    return out


def count_numbers(lines):
    """The numbers a table's lines print, counted independently of the row extraction: the whitespace-separated
    tokens that are plain numbers, in every line that is not a column header (no "R@"), after dropping citations
    ``(Author et al., 2022)``. What the published rows of the table must add up to."""
    n = 0
    for line in lines:
        if "R@" in line:
            continue
        n += sum(bool(re.fullmatch(r"\d+(?:\.\d+)?", tok)) for tok in re.sub(r"\([^)]*\)", " ", line).split())
    return n


def _numbers(line, count):
    vals = re.findall(NUM, line.split(")")[-1] if ")" in line else line)
    vals = vals[-count:]
    assert len(vals) == count, (line, vals)
    return vals


def _row(table, model, dataset, direction, setting, method, metric, value, note):
    return {"paper": "dbsn-pan2025", "table": table, "model": model, "dataset": dataset, "direction": direction,
            "setting": setting, "method": method, "metric": metric, "value": float(value), "note": note}


def expected_rows(lines):
    """Every number of Tables 1, 3, 4, 5, 6 as a published row (module docstring)."""
    out = []
    # ---------------------------------------------------------------- Table 1 (video-text, 16 columns per line)
    cols = [(ds, d, m) for ds in ("msr-vtt", "didemo") for d in ("t2v", "v2t") for m in ("R@1", "R@5", "R@10", "MnR")]
    model = None
    for line in _block(lines, "Table 1.")[3:]:
        line = line.strip()
        if line.startswith("+ "):
            method, setting, note = METHODS[line.split(" ")[0] + " " + line.split(" ")[1]], QA, "reproduced by the authors; "
        elif "{\\ddagger}" in line:
            model = line.split(" (")[0]
            method, setting, note = "raw", "none", "reproduced by the authors; "
        else:
            method, setting, note = "raw", LIT, "reported by the cited work; "
        name = model if (line.startswith("+ ") or "{\\ddagger}" in line) else line.split(" (")[0]
        for (ds, d, m), v in zip(cols, _numbers(line, 16)):
            if v != "-":
                out.append(_row("1", name, ds, d, setting, method, m, v, note + UNITS[m]))
    # ---------------------------------------------------------------- Table 3 (text-audio)
    dataset = None
    for line in _block(lines, "Table 3.")[1:]:
        line = line.strip()
        if "Text\\rightarrowAudio" in line:
            dataset = line.split()[0].lower()
            continue
        if line.startswith("+ "):
            name, method, setting, note = "zs CLAP", METHODS[" ".join(line.split()[:2])], QA, ""
        elif line.startswith("zs CLAP"):
            name, method, setting, note = "zs CLAP", "raw", "none", ""
        else:
            name, method, setting, note = line.split(" (")[0], "raw", LIT, "reported by the cited work; "
        for m, v in zip(("R@1", "R@5", "R@10", "MdR", "MnR"), _numbers(line, 5)):
            if v != "-":
                out.append(_row("3", name, dataset, "t2a", setting, method, m, v, note + UNITS[m]))
    # ---------------------------------------------------------------- Tables 4, A9, A10 (query banks)
    for table in ("4", "A9", "A10"):
        bank = None
        for line in _block(lines, f"Table {table}.")[1:]:
            line = line.strip()
            if _model_header(line):
                name, dataset, direction = _model_header(line)
                continue
            for prefix, setting in BANKS.items():
                if line.startswith(prefix):
                    bank, line = setting, line[len(prefix):].strip()
            method = METHODS[" ".join(line.split()[:2])] if line.startswith("+ ") else METHODS[line.split()[0]]
            setting = "none" if method == "raw" else bank
            for m, v in zip(("R@1", "R@5", "R@10", "MdR", "MnR"), _numbers(line, 5)):
                out.append(_row(table, name, dataset, direction, setting, method, m, v, UNITS[m]))
    # ---------------------------------------------------------------- Table 5 (skewness)
    values = _numbers(_block(lines, "Table 5.")[2], 12)
    for i, (name, dataset, direction) in enumerate((("zs CLIP", "flickr30k", "t2i"), ("ft CLIP", "coco", "t2i"),
                                                    ("CLIP4Clip", "msr-vtt", "t2v"), ("X-Pool", "didemo", "t2v"))):
        for j, method in enumerate(("raw", "is", "sn")):
            out.append(_row("5", name, dataset, direction, "none" if method == "raw" else QA, method, "skewness",
                            values[3 * i + j], UNITS["skewness"] + " (k = 10 assumed: the table does not print k; IS/SN "
                            "assumed query-aware as in Tables 1-3)"))
    # ---------------------------------------------------------------- Table 6 (normalisation variants)
    for line in _block(lines, "Table 6.")[1:]:
        line = line.strip()
        if _model_header(line):
            name, dataset, direction = _model_header(line)
            continue
        method = line.split()[0].lower()
        for m, v in zip(("R@1", "R@5", "R@10", "MdR", "MnR", "sparsity"), _numbers(line, 6)):
            out.append(_row("6", name, dataset, direction, QA, method, m, v, UNITS[m]))
    return out


def _model_header(line):
    """(model, dataset, direction) of a section header line of Tables 4 and 6, else None."""
    if line.startswith("zero-shot CLIP"):
        return "zs CLIP", "flickr30k", "t2i"
    for model in ("CLIP4Clip", "X-Pool"):
        if line.startswith(f"{model} on MSR-VTT"):
            return model, "msr-vtt", "t2v"
        if line.startswith(f"{model} on Didemo"):
            return model, "didemo", "t2v"
    return None


def _published():
    with (PUBLISHED_DIR / "dbsn_pan2025.csv").open("r", encoding="utf-8") as fh:
        return pd.read_csv(fh, dtype={"table": str})


KEY = ["table", "model", "dataset", "direction", "setting", "method", "metric"]


def test_tables_1_3_4_5_6_a9_a10_equal_the_paper_text():
    want = pd.DataFrame(expected_rows(paper_text()))
    assert len(want) > 400  # the parser found the tables (Table 1 alone has 309 numbers)
    pub = _published()
    assert list(pub.columns) == PUBLISHED_COLUMNS
    got = pub[pub["table"].isin(["1", "3", "4", "5", "6", "A9", "A10"])]
    merged = want.merge(got, on=KEY, how="outer", suffixes=("_paper", "_csv"), indicator=True)
    missing = merged[merged["_merge"] != "both"]
    assert missing.empty, f"rows that differ between the paper text and the CSV:\n{missing[KEY + ['_merge']]}"
    bad = merged[(merged["value_paper"] - merged["value_csv"]).abs() > 1e-9]
    assert bad.empty, f"values that differ from the paper text:\n{bad[KEY + ['value_paper', 'value_csv']]}"


def test_video_and_audio_rows_are_labelled():
    pub = _published()
    assert set(pub[pub["table"] == "1"]["direction"]) == {"t2v", "v2t"}
    assert set(pub[pub["table"] == "3"]["direction"]) == {"t2a"}
    assert set(pub[pub["table"] == "3"]["dataset"]) == {"audiocaps", "clotho"}
    zs = pub[(pub["table"] == "1") & (pub["model"] == "CLIP4Clip") & (pub["method"] == "raw") & (pub["setting"] == "none")
             & (pub["dataset"] == "msr-vtt") & (pub["metric"] == "R@1")].set_index("direction")["value"]
    assert zs.to_dict() == {"t2v": 43.9, "v2t": 44.7}


@pytest.mark.parametrize("table, first_data_line", [("1", 3), ("3", 1), ("4", 1), ("5", 2), ("6", 1), ("A9", 1),
                                                   ("A10", 1)])
def test_every_number_of_each_table_is_a_published_row(table, first_data_line):
    """Counted independently of the extraction (:func:`count_numbers`): the package data hold as many rows of each
    table as the paper text prints numbers (a table cut short, or a row read twice, cannot agree)."""
    lines = _block(paper_text(), f"Table {table}.")[first_data_line:]
    pub = _published()
    assert count_numbers(lines) == int((pub["table"] == table).sum()), table


def test_the_independent_count_sees_a_missing_line():
    """The count is not vacuous: Table 1 without its last line (X-Pool + SN) is 16 numbers short."""
    lines = _block(paper_text(), "Table 1.")[3:]
    assert lines[-1].startswith("+ SN 52.7") and count_numbers(lines) - count_numbers(lines[:-1]) == 16
    assert count_numbers(lines) == 309
