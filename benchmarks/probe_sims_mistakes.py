"""Probe of the sims path with realistic mistakes (issue 44): every mistake of tests/sims_mistakes.py, on three
seeded right folders each, loaded through ``load_sims`` + ``sims_tasks`` as a user would; the outcome is counted
as a clear error (a SimsError naming the mistake), warned (loads, with a warning), or silent (loads, no word,
a number comes out). Also the share of right folders that load silently (false alarms). Writes
benchmarks/reports/sims_mistakes.md and .csv.

    python benchmarks/probe_sims_mistakes.py
"""
from __future__ import annotations

import re
import sys
import tempfile
import warnings
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import hubnorm as hn  # noqa: E402
from hubnorm.data.sims import SimsError, load_sims  # noqa: E402
from hubnorm.scores import sims_tasks  # noqa: E402
from sims_mistakes import MISTAKES, right_spec, write_spec  # noqa: E402

SEEDS = (0, 1, 2)
SHAPES = [dict(per_item=2, n_items=200, n_bank=400), dict(per_item=1, n_items=300, n_bank=600),
          dict(per_item=5, n_items=100, n_bank=500)]


def outcome(folder: Path, expected: str | None = None):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            tasks = sims_tasks(load_sims(folder))
            r1 = hn.evaluate(None, next(iter(tasks.values())))["R@1"]
        except SimsError as exc:
            named = expected is None or re.search(expected, str(exc)) is not None
            return ("clear error" if named else "error (other reason)"), str(exc).split(": ", 1)[-1][:110]
    if caught:
        return "warned", str(caught[0].message)[:110]
    return "silent", f"R@1 {r1:.1f}"


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for mistake, expected in MISTAKES:
            for seed in SEEDS:
                folder = tmp / f"{mistake.__name__}_{seed}"
                write_spec(folder, mistake(right_spec(seed=seed)))
                kind, detail = outcome(folder, expected)
                rows.append({"case": mistake.__name__, "seed": seed, "kind": "mistake", "outcome": kind,
                             "detail": detail})
        for i, shape in enumerate(SHAPES):
            for seed in SEEDS:
                folder = tmp / f"right_{i}_{seed}"
                write_spec(folder, right_spec(seed=seed, **shape))
                kind, detail = outcome(folder)
                rows.append({"case": f"right folder ({shape['per_item']} per item, {shape['n_items']} items, "
                                     f"bank {shape['n_bank']})", "seed": seed, "kind": "right", "outcome": kind,
                             "detail": detail})
    df = pd.DataFrame(rows)
    out = ROOT / "benchmarks" / "reports"
    df.to_csv(out / "sims_mistakes.csv", index=False)
    mistakes, right = df[df.kind == "mistake"], df[df.kind == "right"]
    counts = mistakes.outcome.value_counts().to_dict()
    per_case = (mistakes.groupby("case").outcome.agg(lambda s: ", ".join(f"{k} x{v}" for k, v in s.value_counts().items()))
                .reset_index())
    first = mistakes.drop_duplicates("case").set_index("case")["detail"]
    per_case["message (seed 0)"] = per_case["case"].map(first)
    lines = ["# Sims folders: realistic mistakes, probed (`benchmarks/probe_sims_mistakes.py`)", "",
             f"{len(MISTAKES)} mistakes (tests/sims_mistakes.py) x {len(SEEDS)} seeded right folders (200 items x 2 "
             "captions, bank of 400), loaded through `load_sims` and `sims_tasks` as a user would.", "",
             "| outcome | cases |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in sorted(counts.items())]
    lines += ["", f"Right folders ({len(SHAPES)} shapes x {len(SEEDS)} seeds): "
              + ", ".join(f"{k} x{v}" for k, v in right.outcome.value_counts().items())
              + " (silent is what a right folder should be).", "", "| mistake | outcome | message (seed 0) |",
              "|---|---|---|"]
    lines += [f"| {r['case']} | {r['outcome']} | {r['message (seed 0)']} |" for _, r in per_case.iterrows()]
    (out / "sims_mistakes.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:12]))


if __name__ == "__main__":
    main()
