#!/usr/bin/env bash
# Creates .venv (once) and installs msoverflow with MindSpore, msprobe, Dask (analyze --scheduler) and the test
# tools. PYTHON=python3.11 picks the interpreter (MindSpore 2.10 wheels: CPython 3.10 or 3.11).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
say() { echo "bootstrap: $*" >&2; }
if [ ! -x .venv/bin/python ]; then
  if ! command -v "$PY" >/dev/null 2>&1; then
    say "no '$PY' on PATH; install Python 3.10 or 3.11, or set PYTHON=/path/to/python3.11"
    exit 2
  fi
  version=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  case "$version" in
    3.10|3.11) ;;
    *) say "$PY is Python $version; MindSpore 2.10 needs Python 3.10 or 3.11 (set PYTHON=/path/to/python3.11)"
       exit 2 ;;
  esac
  say "creating .venv with $PY (Python $version)"
  "$PY" -m venv .venv
fi
stamp=.venv/.msoverflow-installed
want=$(cat setup.cfg pyproject.toml | sha1sum | cut -c1-16)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  say "installing msoverflow with MindSpore 2.10, mindstudio-probe, Dask, the MCP SDK and the test tools into .venv"
  say "(about 3.7 GB, 2.5 GB of it MindSpore; a few minutes on a fresh machine, pip's own output follows)"
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip 2>/dev/null || true
  .venv/bin/python -m pip install --progress-bar on --disable-pip-version-check \
    -e '.[mindspore,msprobe,test,dask,agent]' 2>&1 | grep --line-buffered -E '^(Collecting|Installing|Successfully|ERROR)' >&2 \
    || true
  if ! .venv/bin/python -c 'import msoverflow, mindspore' >/dev/null 2>&1; then
    say "the install failed (msoverflow or mindspore does not import in .venv); rerun to see pip's messages:"
    say "  .venv/bin/python -m pip install -e '.[mindspore,msprobe,test,dask,agent]'"
    exit 1
  fi
  echo "$want" > "$stamp"
  say "done: .venv/bin/msoverflow is the tool (or: source .venv/bin/activate)"
fi
