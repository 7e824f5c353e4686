"""Measure what README's set-up sentence states, as a stranger meets it: a fresh clone of this checkout's HEAD, then
README's two commands (``bash run_all.sh``, ``bash run_tests.sh``), timed; the set-up of ``.venv`` (its first part)
timed on its own, and the size of ``.venv``.

    python scripts/measure_setup.py                 # clone, set up, run every notebook, run the tests (~40 min here)
    python scripts/measure_setup.py --skip-tests    # without the test suite

Writes ``benchmarks/reports/setup.json`` and ``setup.md``; ``python site/hubsite.py sync`` puts the numbers into
README's set-up sentence (the ``<!-- hubsite:setup -->`` block), so README states what was measured, when, on what
machine, and never a typed estimate. The pip download cache of this user (``~/.cache/pip``) is used as pip uses
it; the report says whether that folder was there (pip may also read a configured index or wheel folder)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "benchmarks" / "reports" / "setup.json"


def _timed(cmd, cwd: Path, log: Path) -> tuple[int, float]:
    t0 = time.perf_counter()
    with open(log, "wb") as fh:
        rc = subprocess.run(cmd, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT).returncode
    return rc, time.perf_counter() - t0


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def measure(skip_tests: bool, keep: bool) -> dict:
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="hubnorm-setup-"))
    clone = work / "hubnorm"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    env_note = {k: os.environ[k] for k in ("HUBNORM_RESULTS", "HUBNORM_REAL_MIRROR") if k in os.environ}
    if env_note:
        raise SystemExit(f"unset {sorted(env_note)} first: a stranger's shell does not have them")
    pip_cache = Path.home() / ".cache" / "pip"
    record = {"commit": head, "date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
              "load_before": list(os.getloadavg()), "pip_cache_warm": pip_cache.is_dir() and any(pip_cache.iterdir())}
    try:
        rc, secs = _timed(["bash", "scripts/bootstrap.sh"], clone, work / "bootstrap.log")
        record.update(bootstrap_rc=rc, bootstrap_s=round(secs, 1), venv_bytes=_size(clone / ".venv"))
        rc, secs = _timed(["bash", "run_all.sh"], clone, work / "run_all.log")
        record.update(run_all_rc=rc, run_all_s=round(secs, 1))
        if not skip_tests:
            rc, secs = _timed(["bash", "run_tests.sh"], clone, work / "run_tests.log")
            record.update(run_tests_rc=rc, run_tests_s=round(secs, 1))
        record["load_after"] = list(os.getloadavg())
    finally:
        if keep:
            print(f"kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return record


def markdown(r: dict) -> str:
    gb = r["venv_bytes"] / 1e9
    lines = ["# Set-up, measured (scripts/measure_setup.py)", "",
             f"A fresh clone of {r['commit'][:10]} on {r['date']} ({r['machine']}; pip cache ~/.cache/pip "
             f"{'present' if r['pip_cache_warm'] else 'absent'}; load average before "
             f"{', '.join(f'{x:.1f}' for x in r['load_before'])}), README's two commands:", "",
             "| step | seconds | exit status |", "|---|---|---|",
             f"| `.venv` set-up (`scripts/bootstrap.sh`, the first part of either command) | {r['bootstrap_s']:.0f} | "
             f"{r['bootstrap_rc']} |",
             f"| `bash run_all.sh` after it (every notebook on the embedded data) | {r['run_all_s']:.0f} | "
             f"{r['run_all_rc']} |"]
    if "run_tests_s" in r:
        lines.append(f"| `bash run_tests.sh` after it | {r['run_tests_s']:.0f} | {r['run_tests_rc']} |")
    lines += ["", f"`.venv`: {gb:.1f} GB.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--skip-tests", action="store_true", help="do not run bash run_tests.sh")
    ap.add_argument("--keep", action="store_true", help="keep the clone and the logs (their folder is printed)")
    args = ap.parse_args(argv)
    r = measure(args.skip_tests, args.keep)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(r, indent=1) + "\n")
    OUT.with_suffix(".md").write_text(markdown(r))
    print(markdown(r))
    failed = [k for k in ("bootstrap_rc", "run_all_rc", "run_tests_rc") if r.get(k, 0) != 0]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
