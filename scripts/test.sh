#!/usr/bin/env bash
# The README's test command: sets up .venv, then runs the whole suite (real MindSpore dumps included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
