#!/usr/bin/env bash
# Capture the perf script fixtures in tests/fixtures/perf/ from the sample programs, on this
# machine, with real perf runs. Re-runnable: the captures change from run to run, so after
# running it, inspect the differences and rewrite the golden files with `pytest --bless`.
# Needs root (or perf_event_paranoid <= 1) and perf with tracepoints; a few seconds in all.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=tests/fixtures/perf
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
make -s -C samples bin/mix
make -s -C samples/fixtures
MIX=samples/bin/mix
DEEP=samples/bin/deep
mkdir -p "$OUT"

# Keep whole records (blank-line separated) until the file reaches $2 bytes.
trim() {
  python3 - "$1" "$2" <<'EOF'
import sys
path, limit = sys.argv[1], int(sys.argv[2])
data = open(path, "rb").read()
if len(data) > limit:
    cut = data.rfind(b"\n\n", 0, limit)
    data = data[: cut + 2] if cut > 0 else data[:limit]
open(path, "wb").write(data)
EOF
}

# rec NAME PERF-RECORD-ARGS... -- PROGRAM ARGS...  (perf script options in $SCRIPT_OPTS)
rec() {
  local name=$1; shift
  perf record -q -o "$TMP/$name.data" "$@" >/dev/null 2>"$TMP/$name.err" || true
  # shellcheck disable=SC2086
  perf script -i "$TMP/$name.data" ${SCRIPT_OPTS:-} >"$OUT/$name.txt" 2>/dev/null
  trim "$OUT/$name.txt" "${LIMIT:-250000}"
}

# On-CPU, frame-pointer call chains (the default), 3 worker threads.
rec mix-fp -F 499 -g -e cpu-clock -- "$MIX" --duration 1
# On-CPU, DWARF call chains (the stack copied and unwound by perf).
rec mix-dwarf -F 199 --call-graph dwarf -e cpu-clock -- "$MIX" --duration 0.5
# Deep C++ stacks: templates with function types, (anonymous namespace), operator(), lambdas.
rec deep-fp -F 299 -g -e cpu-clock -- "$DEEP" --seconds 0.5 --depth 12
# Two on-CPU events in one file.
rec mix-two-events -F 299 -g -e cpu-clock -e task-clock -- "$MIX" --duration 0.5
# Scheduler switch-outs with call chains plus switch records (exact switch-in times).
SCRIPT_OPTS=--show-switch-events rec mix-sched -e sched:sched_switch -g --switch-events \
  -- "$MIX" --duration 0.3
# The same capture printed without the switch records: switch-ins must be inferred.
perf script -i "$TMP/mix-sched.data" >"$OUT/mix-sched-noswitch.txt" 2>/dev/null
trim "$OUT/mix-sched-noswitch.txt" 250000
# Scheduler switch-outs with DWARF call chains (user frames through libc).
SCRIPT_OPTS=--show-switch-events LIMIT=280000 rec mix-sched-dwarf -e sched:sched_switch \
  --call-graph dwarf,8192 --switch-events -- "$MIX" --duration 0.2
# Lost events: a tiny ring buffer and big DWARF samples.
SCRIPT_OPTS=--show-lost-events LIMIT=200000 rec mix-lost -F 4000 -m 2 \
  --call-graph dwarf,4096 -e cpu-clock -- "$MIX" --duration 0.4
if ! grep -q PERF_RECORD_LOST "$OUT/mix-lost.txt"; then
  echo "capture-fixtures: no PERF_RECORD_LOST in mix-lost.txt this time; run again" >&2
fi

# Derived copies: CRLF line endings, and a last record cut in the middle of a line.
sed 's/$/\r/' "$OUT/mix-fp.txt" >"$OUT/mix-fp-crlf.txt"
python3 - "$OUT/mix-fp.txt" "$OUT/mix-fp-truncated.txt" <<'EOF'
import sys
data = open(sys.argv[1], "rb").read().rstrip(b"\n")
last = data.rfind(b"\n\t")
open(sys.argv[2], "wb").write(data[: last + 12])
EOF
ls -l "$OUT"/*.txt
