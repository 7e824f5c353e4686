"""How long the real column adds to the default run: `run_all.sh` with and without it, the same run's conditions.

    .venv/bin/python benchmarks/bench_real_column.py [--rounds 1]

Each round runs the default profile twice through run_all.sh's runner, into temporary results folders: once as
it is (the real releases cached on this machine beside the synthetic run), once with ``--param real_sources=[]``
(no real column), the order alternating between rounds. The report gives every notebook's seconds (the runner's
own per-notebook line) in both runs, the difference, and the totals; `reports/real_column.md` / `.csv`. The real
releases must be cached first (``python -m hubnorm.data fetch-real``): otherwise both runs are the same run and the
script says so and stops. A benchmark, never a test: the times depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import HERE, write_report  # noqa: E402

REPO = HERE.parent

LINE = re.compile(r"^(\d\d_\w+)\s+(\d+)s\s+(ok|FAILED)")


def run_all(results: Path, extra) -> dict:
    """Per-notebook seconds of one default run (the runner's summary lines), and its total wall time."""
    env = {**os.environ, "HUBNORM_PROGRESS": "0", "HF_HUB_OFFLINE": "1", "PYTHONHASHSEED": "0"}
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-m", "hubnorm_tools.runner", "--root", str(REPO), "--results",
                           str(results), "--quiet", "--keep-going", *extra], cwd=REPO, env=env, capture_output=True,
                          text=True)
    wall = time.time() - t0
    seconds = {m.group(1): int(m.group(2)) for m in map(LINE.match, proc.stdout.splitlines()) if m}
    failed = [name for name, m in ((ln, LINE.match(ln)) for ln in proc.stdout.splitlines()) if m and
              m.group(3) == "FAILED"]
    if proc.returncode != 0 or failed:
        raise SystemExit(f"run_all failed ({failed or proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return {"seconds": seconds, "wall": wall}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=1, help="pairs of runs (order alternating)")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    from hubnorm.data.real import RELEASES, real_status

    missing = [n for n in RELEASES if real_status(n) != "cached"]
    if missing:
        print(f"the real releases {missing} are not cached: both runs would be the same run. Fetch them first "
              "(python -m hubnorm.data fetch-real)", file=sys.stderr)
        return 2
    runs = {"with": [], "without": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = ["with", "without"] if r % 2 == 0 else ["without", "with"]
            for kind in order:
                extra = [] if kind == "with" else ["--param", "real_sources=[]"]
                print(f"round {r + 1}: default run {kind} the real column", flush=True)
                runs[kind].append(run_all(Path(tmp) / f"{kind}{r}", extra))
    names = sorted(runs["with"][0]["seconds"])
    rows = []
    for name in names:
        w = sum(run["seconds"][name] for run in runs["with"]) / args.rounds
        wo = sum(run["seconds"][name] for run in runs["without"]) / args.rounds
        rows.append({"notebook": name, "with real column (s)": w, "without (s)": wo, "added (s)": w - wo})
    tw = sum(run["wall"] for run in runs["with"]) / args.rounds
    two = sum(run["wall"] for run in runs["without"]) / args.rounds
    rows.append({"notebook": "whole run (wall, set-up included)", "with real column (s)": round(tw),
                 "without (s)": round(two), "added (s)": round(tw - two)})
    write_report("real_column", "What the real column adds to the default run",
                 "`run_all.sh`'s default profile with the real releases beside the synthetic run, and with "
                 "`--param real_sources=[]`, in the same session, the order alternating between rounds "
                 f"({args.rounds} round{'s' if args.rounds > 1 else ''}); per notebook the runner's own seconds. "
                 "`python benchmarks/bench_real_column.py` reproduces it.", rows,
                 notes=["Times of one machine under its load; a difference of a few seconds per notebook is "
                        "within the run-to-run noise of this 2-core machine."])
    return 0


if __name__ == "__main__":
    sys.exit(main())
