#!/usr/bin/env bash
# Creates .venv (once) and installs msoverflow with MindSpore, msprobe, Dask (analyze --scheduler) and the test
# tools.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.msoverflow-installed
want=$(cat setup.cfg pyproject.toml | sha1sum | cut -c1-16)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip 2>/dev/null || true
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[mindspore,msprobe,test,dask,agent]'
  echo "$want" > "$stamp"
fi
