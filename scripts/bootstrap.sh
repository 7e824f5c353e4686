#!/usr/bin/env bash
# Create (or reuse) the project's virtual environment in .venv and install hubnorm, the notebooks' companion package
# (companion/) and the checkout's tooling (tools/) into it.
# Idempotent: reinstalls only when requirements.txt or a pyproject.toml changed since the last run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${HUBNORM_VENV:-.venv}
stamp="$VENV/.hubnorm-installed"
want=$(cat requirements.txt pyproject.toml companion/pyproject.toml tools/pyproject.toml | sha256sum | cut -c1-64)
# the .venv's kernel names the hubnorm-ipc provisioner (tools/hubnorm_tools/jupyter_ipc.py): no TCP, no warning
kernelspec_ok() { grep -q '"hubnorm-ipc"' "$VENV/share/jupyter/kernels/python3/kernel.json" 2>/dev/null; }
install_kernelspec() { "$VENV/bin/python" -m hubnorm_tools.jupyter_ipc install-kernelspec --prefix "$VENV" >/dev/null; }
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  kernelspec_ok || install_kernelspec
  exit 0
fi
# the environment takes about 7 GB (benchmarks/reports/setup.md: torch's CUDA build and its libraries): refuse
# before a long install that would end in "No space left on device" halfway through
need_gb=8
where=$(dirname "$VENV")
[ -d "$VENV" ] && where=$VENV   # an existing folder, or a link to a folder on another disk
if [ ! -x "$VENV/bin/python" ] && [ -d "$where" ]; then
  free_kb=$(df -Pk "$where/" 2>/dev/null | awk 'NR==2 {print $4}')
  if [ -n "$free_kb" ] && [ "$free_kb" -eq "$free_kb" ] 2>/dev/null && [ "$free_kb" -lt $((need_gb * 1024 * 1024)) ]; then
    echo "[bootstrap] error: the environment needs about $need_gb GB; $((free_kb / 1024 / 1024)) GB are free where" \
      "$VENV goes ($(cd "$where" && pwd -P)). Free some space (pip's cache may hold gigabytes: pip cache purge)," \
      "or link $VENV to an empty folder on a disk with room (mkdir /big/disk/hubnorm-venv &&" \
      "ln -s /big/disk/hubnorm-venv $VENV) and run again." >&2
    exit 1
  fi
fi
echo "[bootstrap] creating $VENV and installing pinned requirements (minutes; time and size measured: benchmarks/reports/setup.md)..." >&2
# pip prints one harmless warning per package on machines whose pip.conf lists absent local indexes: hide those
pip_q() { "$VENV/bin/python" -m pip "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
pip_q install -q --upgrade pip
pip_q install -q --no-compile -r requirements.txt
pip_q install -q --no-deps -e . -e companion -e tools   # hubnorm, the notebooks' companion, run_all.sh's runner
# byte-compile the installed packages on every core (pip compiles one file at a time; measured once on this
# project's 2-core machine, 2026-11-28: 224 s against 110 s + 70 s); imports then read the .pyc files even where
# PYTHONDONTWRITEBYTECODE is set. A file that is not Python (a template named .py) fails to compile, as it does
# under pip, and is only not precompiled; the editable lib/hubnorm compiles on first import as usual
"$VENV/bin/python" -c "import compileall, sysconfig
for lib in sorted({sysconfig.get_path('purelib'), sysconfig.get_path('platlib')}):
    compileall.compile_dir(lib, quiet=2, workers=0)" \
  || echo "[bootstrap] warning: byte-compiling site-packages failed; imports compile what they load instead" >&2
install_kernelspec
echo "$want" > "$stamp"
echo "[bootstrap] done: $VENV" >&2
