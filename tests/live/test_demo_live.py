"""The demo's headline, live: the consumers' mutex wait that ``wallflame demo`` prints for the
mutex-bound queue agrees with what the queue sample clocks itself (CLOCK_MONOTONIC around its
contended lock call), over the same stretch of time.

The window of a launched command opens after the command starts (perf and the tracers start
first) and may close before it ends, so the program's figure over its whole run is not the
window's: under load the two drifted 4 points apart.  The queue prints its running totals every
250 ms (``consumer_lock_wait_ns``, on the clock of perf's timestamps), so the test takes the
first and last progress lines inside the window, the program's share between them, and
``wallflame report --from --to`` over the same range.

Collected as the demo collects it (``wallflame collect --duration 8 --wakers -- queue
--queue=mutex --duration 8``).  The program's clock runs around its whole lock call, so the
headline counts what wallflame sees inside it: blocked on the mutex, woken from it and waiting
for a CPU (``runnable_after``), and on a CPU in the lock's wait, entering and leaving the
futex (``on_cpu_in``, about 1 point: frame-pointer stacks show it as ``__lll_lock_wait`` on-CPU).
Measured over 20 runs on the 2-vCPU machine (2026-11-25, the test prints ``HEADLINE`` lines):
wallflame's figure minus the program's was between -1.5 and +0.3 points; without
``on_cpu_in`` (10 runs) -2.6 to -0.7.  The rest is mostly the time the collect's own snapshots
held a consumer stopped inside the lock call (about 0.3 points), which the program counts and
wallflame shows as stopped.  Earlier, with a database test running beside it and before
runnable time was a state of its own, the difference spread from -1.7 to +3.3; ``MARGIN`` is
outside that spread too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from wallflame.commands.demo import DEMO_OPTIONS, consumer_mutex_share, program_clock

pytestmark = [pytest.mark.live, pytest.mark.usefixtures("live")]


#: Points the headline may differ from the program's own figure (spread: module docstring).
MARGIN = 5.0


def test_the_headline_agrees_with_the_programs_own_clock(tmp_path: Path, live: None,
                                                         sample_bin: Path) -> None:
    out = tmp_path / "before"
    r = subprocess.run(
        [sys.executable, "-m", "wallflame", "collect", "-o", str(out), "--duration", "8",
         *DEMO_OPTIONS, "--", str(sample_bin / "queue"), "--queue=mutex", "--duration", "8"],
        capture_output=True, text=True, timeout=180, check=False)
    assert r.returncode == 0, r.stderr
    clock = program_clock(out)
    assert clock is not None, "no progress lines of the sample's inside the window"
    share, first, last = clock
    own = 100 * share
    t0 = int(json.loads((out / "raw" / "capture.json").read_text())["window"]["mono_start_ns"])
    span = last - first
    assert span >= 2e9, f"progress lines span only {span / 1e9:.2f} s of the window"
    rng = tmp_path / "range.json"
    rep = subprocess.run(
        [sys.executable, "-m", "wallflame", "report", str(out), "--format", "json",
         "--from", f"{(first - t0) / 1e9:.9f}", "--to", f"{(last - t0) / 1e9:.9f}",
         "-o", str(rng)], capture_output=True, text=True, timeout=180, check=False)
    assert rep.returncode == 0, rep.stderr
    ours = 100 * consumer_mutex_share(json.loads(rng.read_text()))
    print(f"HEADLINE ours={ours:.2f} own={own:.2f} span_s={span / 1e9:.2f}")
    # a queue with no contention would make agreement trivial
    assert own >= 20, f"the queue sample's consumers waited only {own:.1f}% on its mutex"
    assert abs(ours - own) <= MARGIN, f"headline {ours:.1f}% against the program's {own:.1f}%"


def test_the_reports_first_findings_name_the_queue_lock(tmp_path: Path, live: None,
                                                         sample_bin: Path) -> None:
    """The text report of the mutex-bound queue, read as the demo's reader reads it: within
    its first 40 lines, the findings and the thread table, consumers as one row; a lock
    finding naming the queue's mutex, the call site that takes it and the code that holds it;
    the critical path of the consumers' wait naming that code.
    Only CPU saturation may rank above it (8 consumers on this 2-CPU machine wait for a CPU
    about as long as they wait for the lock); the lock-free queue has no lock finding."""
    texts = {}
    for variant in ("mutex", "lockfree"):
        out = tmp_path / variant
        r = subprocess.run(
            [sys.executable, "-m", "wallflame", "collect", "-o", str(out), "--duration", "6",
             *DEMO_OPTIONS, "--", str(sample_bin / "queue"), f"--queue={variant}", "--duration",
             "6"],
            capture_output=True, text=True, timeout=180, check=False)
        assert r.returncode == 0, r.stderr
        rep = subprocess.run([sys.executable, "-m", "wallflame", "report", str(out), "--format",
                              "txt", "-o", "-"], capture_output=True, text=True, timeout=120,
                             check=False)
        assert rep.returncode == 0, rep.stderr
        texts[variant] = rep.stdout
        found = json.loads((out / "summary.json").read_text())["findings"]
        kinds = [f["kind"] for f in found]
        print(f"FINDINGS {variant} {kinds}")
        if variant == "mutex":
            lock = next(f for f in found if f["kind"] == "lock" and "g_mutex_queue" in f["text"])
            assert "taken in MutexQueue::pop; held in MutexQueue::pop → " in lock["text"], lock
            # the code held under the lock: QueueStats::record among the functions its confirmed
            # holders were caught in (in each of 18 runs)
            queue = next(lk for lk in json.loads((out / "summary.json").read_text())["locks"]
                         if "g_mutex_queue" in lk["lock"])
            held = [h["frame"] for h in queue["held_functions"]]
            assert "QueueStats::record" in held, (held, lock["text"])
            assert set(kinds[:kinds.index("lock")]) <= {"cpu"}, kinds
            # the critical path of the consumers' wait: nearly all of it has a known waker,
            # and the code its holders ran is among what they waited for
            path = next(p for p in json.loads((out / "summary.json").read_text())
                        ["critical_path"] if p["waiters"] == "consumer-*"
                        and "g_mutex_queue" in p["wait"])
            whats = [c["what"] for c in path["causes"]]
            print(f"CRITICAL explained={path['explained']:.3f} causes={whats}")
            assert path["explained"] >= 0.9, path
            assert any("QueueStats::record" in w for w in whats), whats
        else:
            assert not any(f["kind"] == "lock" and "g_mutex_queue" in f["text"] for f in found)
    head = texts["mutex"].splitlines()[:40]
    assert head[2] == "findings:"
    assert any(line.startswith("consumer-* ×8 ") for line in head), "\n".join(head)
    assert any("Lock contention" in line for line in head)
    assert all(len(line) <= 100 for line in head)
