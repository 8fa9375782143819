#!/usr/bin/env bash
# The whole test suite: lint, strict types, unit, property, conformance, browser and live tests.
# Installs what the tests need when it is missing, so it works on a fresh machine by itself.
# Everything Python runs from the project's virtual environment, .venv/ (see scripts/setup.sh).
#
#   ./scripts/test.sh [PYTEST ARGS]           # everything (what .ci/run runs)
#   ./scripts/test.sh --fast [PYTEST ARGS]    # lint, types, layering and tests/unit only: no
#                                             # servers, chromium, inferno or pprof installed
set -euo pipefail
cd "$(dirname "$0")/.."
fast=
if [ "${1:-}" = "--fast" ]; then fast=1; shift; fi

# Servers and administration tools (mariadbd, runuser) live in the sbin directories, which
# the PATH of su without -, cron and many CI images leave out.
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
bash scripts/setup.sh dev,test
PY=$PWD/.venv/bin/python

if [ -z "$fast" ]; then
  # Test-only tools: Debian's chromium for the browser tests, inferno (the reference folder for
  # the conformance tests), Google's pprof (validates pprof exports).
  export PATH="$HOME/.cargo/bin:$HOME/go/bin:/usr/local/go/bin:$PATH"
  need_apt=()
  command -v chromium >/dev/null || need_apt+=(chromium)
  command -v cargo >/dev/null || need_apt+=(cargo)
  # Servers the live tests start on private ports and data directories (never the system's).
  command -v mariadbd >/dev/null || need_apt+=(mariadb-server)
  command -v sysbench >/dev/null || need_apt+=(sysbench)
  command -v redis-server >/dev/null || need_apt+=(redis-server)
  command -v redis-benchmark >/dev/null || need_apt+=(redis-tools)
  compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null || need_apt+=(postgresql)
  if [ "${#need_apt[@]}" -gt 0 ]; then
    echo "test: installing ${need_apt[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    # The packages' own services are not started: the tests run their own servers.
    made_policy=
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d
      made_policy=1
    fi
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
    if [ -n "$made_policy" ]; then rm -f /usr/sbin/policy-rc.d; fi
  fi
  # A tool that cannot be built here (Debian's own cargo may be older than inferno needs) does not
  # stop the run: the tests that need it fail and say which tool is missing.
  if ! command -v inferno-collapse-perf >/dev/null; then
    echo "test: installing inferno (cargo)" >&2
    cargo install -q --locked inferno >/dev/null 2>&1 || cargo install -q inferno ||
      echo "test: could not build inferno; the conformance tests will fail (install a newer" \
           "Rust with rustup, then run this again)" >&2
  fi
  if ! command -v pprof >/dev/null && command -v go >/dev/null; then
    echo "test: installing pprof (go)" >&2
    go install github.com/google/pprof@latest ||
      echo "test: could not build pprof; the pprof export test will be skipped" >&2
  fi
fi

make -s -C samples

"$PY" -m ruff check .
"$PY" -m mypy
bash scripts/lint-imports.sh --no-cache  # the layering contracts in pyproject.toml
if [ -n "$fast" ]; then
  # The unit tests (tests/unit: no perf, gdb, server or browser), one worker a CPU; a tool
  # they use that is not installed (inferno, pprof) skips its test.
  "$PY" -m pytest -q -p no:cacheprovider -n auto tests/unit benchmarks/tests "$@"
else
  # Every tier, and a live test or a tool the machine lacks fails instead of skipping.
  WALLFLAME_REQUIRE_LIVE=1 "$PY" -m pytest -q -p no:cacheprovider "$@"
fi
