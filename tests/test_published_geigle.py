"""The published rows of Geigle et al. Table 5 (lib/hubnorm/published/rerank_geigle2021.csv) equal the paper text.

The paper text (the developers' copy, beside the repository; skipped when absent) is read independently of how the
rows were written: the Markdown table that ends at the caption "Table 5:" is parsed row by row (a row whose first
cell is empty and whose second names the gallery opens a block; every other row is a model and its six numbers:
image retrieval R@1/5/10, then text retrieval R@1/5/10), and the numbers are also counted token by token. The
package data must hold exactly those rows for Table 5, with the same values.
"""

from __future__ import annotations

import re

import pandas as pd
import pytest

from hubnorm_companion.reporting import PUBLISHED_DIR

from conftest import SHARED_DATA

#: the gallery of each block, as the paper writes it (underlined: the task whose queries and labels are used)
#: -> (our data-set name, our setting)
BLOCKS = {"Flickr30k 1k+ CC 14k + MSCOCO 5k": ("flickr30k", "gallery=flickr30k-1k+cc-14k+coco-5k"),
          "MSCOCO 5k+ CC 14k + Flickr 1k": ("coco-5k", "gallery=coco-5k+cc-14k+flickr30k-1k")}
COLUMNS = [(d, m) for d in ("t2i", "i2t") for m in ("R@1", "R@5", "R@10")]   # image retrieval = text -> image


def table_lines():
    folder = SHARED_DATA.parent / "seeds"
    found = sorted(folder.glob("004_*.txt")) if folder.is_dir() else []
    if not found:
        pytest.skip(f"the Geigle et al. paper text is absent ({folder}/004_*.txt): the published-row check needs it")
    lines = found[0].read_text(encoding="utf-8").splitlines()
    end = next(i for i, line in enumerate(lines) if line.startswith("Table 5:"))
    start = end
    while start > 0 and not lines[start - 1].startswith("| Model"):
        start -= 1
    return [line for line in lines[start - 1:end] if line.startswith("|")]


def _plain(cell: str) -> str:
    return re.sub(r"<[^>]+>", " ", cell).replace("  ", " ").strip()


def expected_rows(lines):
    out, block = [], None
    for line in lines[2:]:                       # the two header lines and the separator line
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not cells[0] and "<u>" in cells[1]:
            block = BLOCKS[re.sub(r"<[^>]+>", "", cells[1]).strip()]
            continue
        if not cells[0] or set(cells[0]) <= {"-"}:
            continue
        name = _plain(cells[0]).split()
        model = f"{name[0]}-{name[1]}"           # "EMB OSCAR" -> "EMB-OSCAR"
        values = [float(_plain(c)) for c in cells[1:7]]
        for (direction, metric), v in zip(COLUMNS, values):
            out.append({"model": model, "dataset": block[0], "direction": direction, "setting": block[1],
                        "method": "EMB" if model.startswith("EMB") else "Co", "metric": metric, "value": v})
    return out


def test_table5_rows_equal_the_paper_text():
    lines = table_lines()
    want = pd.DataFrame(expected_rows(lines))
    count = sum(bool(re.fullmatch(r"\d+(?:\.\d+)?", _plain(tok)))
                for line in lines if "R@" not in line for tok in line.split("|"))
    assert len(want) == count == 36      # 2 galleries x 3 systems x 6 numbers, counted two ways
    got = pd.read_csv(PUBLISHED_DIR / "rerank_geigle2021.csv", dtype={"table": str})
    got = got[got["table"] == "5"]
    key = ["model", "dataset", "direction", "setting", "method", "metric"]
    merged = want.merge(got[key + ["value"]], on=key, how="outer", suffixes=("_paper", "_csv"), indicator=True)
    assert (merged["_merge"] == "both").all(), merged[merged["_merge"] != "both"]
    assert (merged["value_paper"] == merged["value_csv"]).all(), merged[merged["value_paper"] != merged["value_csv"]]
