#!/usr/bin/env bash
# The README's demo command: sets up .venv, then trains the tiny fp16 Baichuan2-like model with dump on,
# analyses the dump, patches the precision and verifies the fix by re-running.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/msoverflow demo "$@"
