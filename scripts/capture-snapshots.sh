#!/usr/bin/env bash
# Re-capture the snapshot fixtures (gdb, eu-stack, pt-pmp) from samples/bin/mix on this machine.
#
#   bash scripts/capture-snapshots.sh            # writes tests/fixtures/{gdb,eustack,pmp}/mix-*
#
# Needs root (or ptrace permission), gdb, eu-stack (elfutils) and pt-pmp (percona-toolkit).
# Each capture runs against a fresh `mix` process that is stopped with SIGINT afterwards.
# After re-capturing, review the diff and re-bless the golden results:
#   .venv/bin/python -m pytest tests/unit/fold/test_fold_gdb.py tests/unit/fold/test_fold_eustack.py \
#     tests/unit/fold/test_fold_ptpmp.py --bless
set -euo pipefail
cd "$(dirname "$0")/.."
make -s -C samples
MIX="$PWD/samples/bin/mix"
FIX="$PWD/tests/fixtures"
mkdir -p "$FIX/gdb" "$FIX/eustack" "$FIX/pmp"
export DEBUGINFOD_URLS=
GDB=(gdb -nx -batch -iex 'set auto-load off' -iex 'set debuginfod enabled off')
MIXPID=

start_mix() {  # start_mix BINARY: a 4-worker mix with contention on shared_lock
  "$1" --threads 4 --duration 30 --spin-ms 4 --hold-ms 3 --sleep-ms 4 >/dev/null &
  MIXPID=$!
  sleep 1
}

stop_mix() {
  kill -INT "$MIXPID" 2>/dev/null || true
  wait "$MIXPID" 2>/dev/null || true
}
trap stop_mix EXIT

# wallflame-style snapshot log (the contract of `wallflame collect`'s snapshot log):
# proc lines read before each dump, then the dump, a pause line and a pt-pmp TS line.
snapshot_log() {  # snapshot_log BACKEND COUNT OUT
  python3 - "$1" "$2" "$3" "$MIXPID" "$MIX" <<'EOF'
import json, os, re, subprocess, sys, time
backend, count, out, pid, binary = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
gdb = ["gdb", "-nx", "-batch", "-iex", "set auto-load off", "-iex", "set debuginfod enabled off",
       "-ex", "thread apply all bt", "-p", str(pid)]
eu = ["eu-stack", "-p", str(pid)]
syms = {}
for line in subprocess.run(["nm", binary], capture_output=True, text=True).stdout.splitlines():
    parts = line.split()
    if len(parts) == 3 and parts[1] in "bBdD":
        syms[int(parts[0], 16)] = parts[2]
base = 0
for line in open(f"/proc/{pid}/maps"):
    if line.rstrip().endswith(binary):
        base = int(line.split("-")[0], 16)
        break

def read_u32(addr):
    try:
        with open(f"/proc/{pid}/mem", "rb") as m:
            m.seek(addr)
            return int.from_bytes(m.read(4), "little")
    except OSError:
        return 0

def proc_lines(tids):
    lines = []
    for tid in tids:
        d = f"/proc/{pid}/task/{tid}"
        try:
            stat = open(f"{d}/stat").read()
            comm = open(f"{d}/comm").read().rstrip("\n")
            wchan = open(f"{d}/wchan").read()
            sc = open(f"{d}/syscall").read().split()
        except OSError:
            continue
        state = stat[stat.rindex(")") + 2]
        rec = {"tid": tid, "comm": comm, "state": state, "wchan": wchan}
        if sc and sc[0].isdigit():
            rec["syscall"] = int(sc[0])
            rec["arg0"] = sc[1]
            addr = int(sc[1], 16)
            sym = syms.get(addr - base) if base else None
            if rec["syscall"] == 202 and sym == "shared_lock":
                owner = read_u32(addr + 8)
                if owner in tids:
                    rec["owner"] = owner
                rec["lock"] = f"{sc[1]} <{sym}>"
        lines.append("# wallflame-proc " + json.dumps(rec))
    return lines

with open(out, "w") as f:
    f.write("# wallflame-snapshots 1 " + json.dumps(
        {"backend": backend, "pid": pid, "rate_hz": 5.0}) + "\n")
    for _ in range(count):
        tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
        procs = proc_lines(tids)
        t0 = time.monotonic()
        r = subprocess.run(gdb if backend == "gdb" else eu, capture_output=True, text=True)
        pause_ms = (time.monotonic() - t0) * 1000
        now = time.time_ns()
        f.write(r.stdout)
        for p in procs:
            f.write(p + "\n")
        f.write("# wallflame-snapshot " + json.dumps(
            {"t_ns": now, "pause_ms": round(pause_ms, 2), "consistent": True}) + "\n")
        sec, ns = divmod(now, 10**9)
        f.write(f"TS {ns:09d}.{sec} " + time.strftime("%F %T", time.localtime(sec)) + "\n")
        time.sleep(0.2)
EOF
}

start_mix "$MIX"
"${GDB[@]}" -ex 'thread apply all bt' -p "$MIXPID" >"$FIX/gdb/mix-bt.txt" 2>/dev/null
snapshot_log gdb 6 "$FIX/gdb/mix-wallflame.log"
pt-pmp --save-samples "$FIX/gdb/mix-ptpmp-raw.txt" --iterations 3 --interval 1 --pid "$MIXPID" \
  >"$FIX/pmp/mix-aggregated.txt"
eu-stack -p "$MIXPID" >"$FIX/eustack/mix-plain.txt" 2>/dev/null || true
eu-stack -i -m -p "$MIXPID" >"$FIX/eustack/mix-im.txt" 2>/dev/null || true
eu-stack -i -m -s -p "$MIXPID" >"$FIX/eustack/mix-ims.txt" 2>/dev/null || true
snapshot_log eu-stack 8 "$FIX/eustack/mix-wallflame.log"
# Logs written by wallflame's own collector (pmp only), when it is installed.
WALLFLAME=(.venv/bin/python -m wallflame)   # the project's environment (scripts/setup.sh)
if "${WALLFLAME[@]}" collect --help >/dev/null 2>&1; then
  RUN=$(mktemp -d)
  "${WALLFLAME[@]}" collect --pid "$MIXPID" -d 3 --off-cpu pmp --pmp-backend gdb -o "$RUN/gdb"
  cp "$RUN/gdb/raw/snapshots.log" "$FIX/gdb/mix-collect-gdb.log"
  "${WALLFLAME[@]}" collect --pid "$MIXPID" -d 2 --off-cpu pmp --pmp-backend eu-stack \
    -o "$RUN/eu"
  cp "$RUN/eu/raw/snapshots.log" "$FIX/eustack/mix-collect-eustack.log"
  rm -rf "$RUN"
fi
stop_mix

# A stripped copy: gdb prints `?? ()` frames, eu-stack bare addresses.
STRIPPED=$(mktemp -d)/mix-stripped
strip -o "$STRIPPED" "$MIX"
start_mix "$STRIPPED"
"${GDB[@]}" -ex 'thread apply all bt' -p "$MIXPID" >"$FIX/gdb/mix-stripped-bt.txt" 2>/dev/null
eu-stack -m -p "$MIXPID" >"$FIX/eustack/mix-stripped.txt" 2>/dev/null || true
stop_mix
rm -rf "$(dirname "$STRIPPED")"

# A pt-pmp raw log cut in the middle of its last dump (a killed capture).
size=$(wc -c <"$FIX/gdb/mix-ptpmp-raw.txt")
head -c $((size - size / 8)) "$FIX/gdb/mix-ptpmp-raw.txt" >"$FIX/gdb/mix-ptpmp-truncated.txt"
echo "captured into $FIX" >&2
