#!/usr/bin/env bash
# The README's test command: sets up .venv, installs the browser the HTML tests drive (Debian's chromium, when
# running as root with apt-get and it is missing), then runs the whole suite (real MindSpore dumps included; the
# docs site build, `mkdocs build --strict`, is one of its tests). CI runs exactly this (.ci/run).
#   ./scripts/test.sh              the static checks (ruff, mypy: see `lint`), then the whole suite
#   ./scripts/test.sh lint         the static checks only: ruff check (the repository) and mypy (msoverflow/),
#                                  configured in pyproject.toml
#   ./scripts/test.sh quick [ARGS] every test that needs no MindSpore (-m "not mindspore" over tests/: a test that
#                                  runs MindSpore or asks for a real-run fixture is a `mindspore` test)
#   ./scripts/test.sh ARGS         pytest ARGS (e.g. tests/real -k msprobe)
# Without a browser the browser tests skip with the reason; under CI (CI=true) they fail instead.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
lint() {
  echo "scripts/test.sh: ruff check" >&2
  .venv/bin/ruff check
  echo "scripts/test.sh: mypy" >&2
  .venv/bin/mypy
}
if [ "${1:-}" = lint ]; then
  lint
  exit
fi
if [ "${1:-}" = quick ]; then
  shift
  exec .venv/bin/python -m pytest -q -p no:cacheprovider -m "not mindspore" tests "$@"
fi
if [ -z "${MSOVERFLOW_CHROMIUM:-}" ] && [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "scripts/test.sh: installing chromium for the browser tests (apt-get)" >&2
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }; then
      echo "scripts/test.sh: WARNING: apt-get could not install chromium: the browser tests will be skipped" \
           "(under CI=true they fail)" >&2
    fi
  else
    echo "scripts/test.sh: no /usr/bin/chromium and not root with apt-get: the browser tests will be skipped" \
         "(install it with 'apt-get install -y chromium'; under CI=true they fail)" >&2
  fi
fi
if [ $# -eq 0 ]; then
  lint     # the whole suite (CI): a finding fails it before any test runs
fi
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
