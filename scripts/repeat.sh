#!/usr/bin/env bash
# Run tests N times in a row and tally each run: a flake shows as a failure in some runs only.
#
#   ./scripts/repeat.sh [--hog] N [PYTEST ARGS...]   # default: the live tests (-m live)
#
# --hog keeps a CPU-bound process pinned to CPU 0 for the whole series (a noisy CI neighbour).
# Each run's pytest output is kept in repeat-logs/ (or $REPEAT_LOGS); the last line tallies all runs.
# Run ./scripts/test.sh once first: it installs what the tests need.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
hog=
if [ "${1:-}" = "--hog" ]; then hog=1; shift; fi
runs=${1:?usage: scripts/repeat.sh [--hog] N [PYTEST ARGS...]}
shift
[ "$#" -gt 0 ] || set -- -m live
PY=$PWD/.venv/bin/python
[ -x "$PY" ] || { echo "repeat: no .venv (fix: run ./scripts/test.sh once)" >&2; exit 6; }
make -s -C samples
logs=${REPEAT_LOGS:-$PWD/repeat-logs}
mkdir -p "$logs"
hog_pid=
if [ -n "$hog" ]; then
  taskset -c 0 "$PY" -c 'while True: pass' &
  hog_pid=$!
  trap 'kill "$hog_pid" 2>/dev/null || true' EXIT
fi
export WALLFLAME_REQUIRE_LIVE=1
passed_runs=0
for i in $(seq 1 "$runs"); do
  log=$logs/run-$i.log
  start=$(date +%s)
  if "$PY" -m pytest -q -p no:cacheprovider -rfE "$@" >"$log" 2>&1; then
    passed_runs=$((passed_runs + 1))
  fi
  tally=$(grep -E '^(=+ )?[0-9]+ (passed|failed)' "$log" | tail -1 | tr -d '=' | xargs || true)
  echo "run $i/$runs: ${tally:-no tally (see $log)} ($(( $(date +%s) - start )) s${hog:+, CPU hog on CPU 0})"
  grep -E '^(FAILED|ERROR) ' "$log" | sed 's/^/  /' || true
done
echo "repeat: $passed_runs of $runs runs passed${hog:+ with a CPU hog on CPU 0}"
[ "$passed_runs" -eq "$runs" ]
