"""The example outputs of docs/cli.md: the ``hubnorm`` commands run on a real release, written between the page's
``<!-- cli:NAME -->`` ... ``<!-- /cli:NAME -->`` markers (never typed by hand).

    .venv/bin/python scripts/cli_examples.py            # run the commands, rewrite the blocks of docs/cli.md
    .venv/bin/python scripts/cli_examples.py --check    # exit 1 when a block differs from what the commands print now

The release comes through the project's downloader (pinned commit, sha256): from the cache, a mirror
(``HUBNORM_REAL_MIRROR``) or the network. tests/test_cli.py runs ``--check`` offline on the developers' mirror.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "cli.md"
SOURCE = "real:flickr8k-100x5-clip-b32"
EXAMPLES = {
    "diagnose": ["diagnose", SOURCE, "--direction", "t2i", "--hubs", "5"],
    "choose": ["choose", SOURCE, "--methods", "nnn,is,sn", "--no-progress"],
    "choose-label-free": ["choose", SOURCE, "--methods", "nnn,is,sn", "--label-free"],
    "export": ["export", SOURCE, "--method", "nnn", "--param", "k=16", "--param", "alpha=0.75", "--out", "export",
               "--faiss"],
    "check": ["check", "export", "--source", SOURCE],
    "check-other-split": ["check", "export", "--source", SOURCE, "--seed", "1"],
}


def outputs() -> dict:
    """``{name: (command line, exit code, stdout)}``, run in order in one temporary folder (export, then check)."""
    from hubnorm import cli

    out = {}
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            for name, argv in EXAMPLES.items():
                buf = io.StringIO()
                with contextlib.redirect_stdout(buf):
                    code = cli.main(list(argv))
                out[name] = ("hubnorm " + " ".join(argv), code, buf.getvalue().rstrip())
        finally:
            os.chdir(here)
    return out


def block(cmd: str, code: int, text: str) -> str:
    return f"```console\n$ {cmd}\n{text}\n" + (f"(exit code {code})\n" if code else "") + "```"


def render(page: str, results: dict) -> str:
    for name, (cmd, code, text) in results.items():
        pattern = re.compile(rf"(<!-- cli:{re.escape(name)} -->\n)(?:.*?\n)?(<!-- /cli:{re.escape(name)} -->)", re.S)
        if not pattern.search(page):
            raise ValueError(f"{PAGE} has no <!-- cli:{name} --> ... <!-- /cli:{name} --> block")
        page = pattern.sub(lambda m: m.group(1) + block(cmd, code, text) + "\n" + m.group(2), page)
    return page


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="compare, do not write")
    args = p.parse_args(argv)
    page = PAGE.read_text()
    new = render(page, outputs())
    if args.check:
        if new != page:
            print(f"{PAGE.relative_to(REPO)} is stale: run .venv/bin/python scripts/cli_examples.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(new)
    print(f"wrote {PAGE.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
