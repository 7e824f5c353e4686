"""Does float32 change a reported digit? Run notebooks twice, ``-p dtype float64`` and ``-p dtype float32``, with
the same other parameters, and compare every table they save (``<results>/tables/*.csv``) at the precision the
notebooks print (2 decimals).

    python benchmarks/bench_float32.py                       # notebooks 04 and 05, default (synthetic) data
    python benchmarks/bench_float32.py --notebooks 04 --params "{dbsn_seeds: [0]}"

Writes ``reports/float32.md`` and ``.csv``: per table, the numeric cells compared, how many differ once rounded to
2 decimals, and the largest absolute difference before rounding. The run times of both dtypes are in the report
too (measured in the same run).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from _common import HERE, Timer, write_report

ROOT = HERE.parent


def run_notebook(nb: Path, params: str, dtype: str, results: Path) -> float:
    """Execute ``nb`` with papermill into a scratch copy; returns seconds."""
    import json
    import os

    import yaml

    p = yaml.safe_load(params) if params else {}
    p["dtype"] = dtype
    env = dict(os.environ, HUBNORM_RESULTS=str(results), HUBNORM_PROGRESS="0", PYTHONHASHSEED="0")
    with Timer() as t:
        subprocess.run([sys.executable, "-m", "papermill", "-k", "python3", "--cwd", str(nb.parent), "-y",
                        json.dumps(p), str(nb), str(results / nb.name), "--log-level", "WARNING"],
                       check=True, env=env)
    return t.seconds


def compare_tables(a: Path, b: Path, decimals: int = 2):
    rows = []
    for fa in sorted(a.glob("*.csv")):
        fb = b / fa.name
        if not fb.exists():
            continue
        da, db = pd.read_csv(fa), pd.read_csv(fb)
        if da.shape != db.shape:
            rows.append({"table": fa.stem, "cells": 0, "differ at 2 decimals": "shape differs", "max |diff|": ""})
            continue
        num = [c for c in da.columns if pd.api.types.is_numeric_dtype(da[c]) and pd.api.types.is_numeric_dtype(db[c])
               and c != "fit_s"]
        x, y = da[num].to_numpy(float), db[num].to_numpy(float)
        both = np.isfinite(x) & np.isfinite(y)
        differ = int((np.round(x[both], decimals) != np.round(y[both], decimals)).sum())
        rows.append({"table": fa.stem, "cells": int(both.sum()), "differ at 2 decimals": differ,
                     "max |diff|": f"{np.abs(x[both] - y[both]).max():.2e}" if both.any() else "0"})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--notebooks", nargs="+", default=["04", "05"], help="notebook number prefixes")
    ap.add_argument("--params", default="", help="extra papermill parameters (YAML mapping) for both runs")
    ap.add_argument("--name", default="float32", help="report name under benchmarks/reports")
    args = ap.parse_args(argv)
    rows, times = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for prefix in args.notebooks:
            nbs = sorted((ROOT / "notebooks").glob(f"{prefix}*.ipynb"))
            if len(nbs) != 1:
                raise SystemExit(f"--notebooks {prefix}: expected one notebook, found {[n.name for n in nbs]}")
            nb = nbs[0]
            secs = {}
            for dtype in ("float64", "float32"):
                out = Path(tmp) / dtype / nb.stem
                out.mkdir(parents=True)
                secs[dtype] = run_notebook(nb, args.params, dtype, out)
            times.append(f"{nb.stem}: float64 {secs['float64']:.0f} s, float32 {secs['float32']:.0f} s")
            for r in compare_tables(Path(tmp) / "float64" / nb.stem / "tables",
                                    Path(tmp) / "float32" / nb.stem / "tables"):
                rows.append({"notebook": nb.stem, **r})
    intro = (f"Each notebook ran twice with the same parameters ({args.params or 'defaults'}), once with "
             "`dtype: float64` and once with `dtype: float32`; every saved table compared cell by cell (numeric "
             "columns, timing columns excluded) after rounding to the 2 decimals the notebooks print.")
    write_report(args.name, "float32 against float64: reported digits", intro, rows, notes=times)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
