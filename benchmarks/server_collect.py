#!/usr/bin/env python3
"""Profiling a busy server for a minute: what ``wallflame collect`` costs it, and what it gets.

MariaDB (``benchmarks/servers.py``: a private ``mariadbd`` with a sysbench schema) under
``sysbench --threads 32`` on loopback, for each test (``oltp_update_index``,
``oltp_read_write``).  One sysbench run covers the whole measurement (``--report-interval=1``),
and the windows are taken from its per-second figures, alternated ``--rounds`` times:

* ``none``: ``--window`` seconds with no profiler;
* ``collect``: ``wallflame collect --pid MARIADBD --duration WINDOW`` with the defaults.

A last window with no profiler follows the last round, so that every collect has one on either
side of it. Printed per round and as medians: transactions/s without the profiler (before and
after) and during the collect's window, the loss against the mean of the two windows either
side (and against the one before alone), how far the server moved between those two windows
with no profiler (the measurement's own spread), transactions/s from the window's start until
the collect had finished (post-processing included), the post-processing time after the window,
the run directory's size, the scheduler's data rate and sampled stacks, the smallest per-thread
coverage, the budget plan and what streaming cost (``meta.json`` ``postprocess``), and how many
seconds of the window with no profiler and of the collect's lie under 85% of the median of the
former (``low_seconds``: the server also moves between levels on its own).  With ``--keep DIR``
sysbench's per-second log is kept there too (``TEST-sysbench.log``; each round's ``none_s``
and ``window_s`` are in its seconds).

InnoDB's history list length, checkpoint age and dirty pages are polled once a second through
one client kept connected (``STATUS``; ``TEST-innodb.tsv`` with ``--keep``), and each window's
means are printed.  ``--settle S``: after each collect's window, S seconds with no profiler
that no loss is set against (their transactions/s and means are printed apart, and set against
the windows around them): without it the next window with no profiler starts about 3 s after a
collect, and would hold a server rebounding from it, were it to.

Then the reference: one collect that records every switch with its DWARF call chain
(``--sched-stack-hz 0``, ``--reference-window`` seconds: it writes about 100 MB a second), and
the per-class totals of each sampled collect (off-CPU per wait class and run-queue time, summed
over the threads, as a share of their wall time) against it: the largest difference in points.

    .venv/bin/python benchmarks/server_collect.py [--tests oltp_update_index,oltp_read_write]
        [--window 60] [--rounds 3] [--threads 32] [--reference-window 10] [--keep DIR]
        [--settle 0]
    .venv/bin/python benchmarks/server_collect.py --heartbeat [--window 20] [--rounds 3] \
        [--base CHECKOUT]

``--thin RUN --every N``: the estimator alone, on a run collected with ``--sched-stack-hz 0``:
its scheduler chunks read twice, once with every switch's stack and once keeping only every
N-th stack of each thread (each standing for N switches), and the per-class totals of the two
compared (the same switches, the same load: only the sampling differs).

``--light-reference``: the reference is taken at the light collect's snapshot and owner
rates, and a copy of it without its scheduler chunks is finished as ``--off-cpu pmp``: the
light method's per-class totals against every switch over the same window and load (the
kernel's run-queue and run times from the same listings beside them, in ``summary.json``).
``--as-light RUN`` does that for a run already collected so.

``--replay LINES --window W``: the summary again, for a sitting kept with ``--keep DIR``
whose printed JSON lines were saved to ``DIR/LINES``: the rounds' lines as printed, and what is
read from ``DIR/TEST-sysbench.log`` computed again (the last window with no profiler, and
``first_second_pct``: sysbench's figure for the second each collect's window opens in, which
every window's mean leaves out, against that mean: what the collect's start costs).
``--by-second`` also prints each second around the windows against the window with no
profiler before, averaged over the rounds: a collect's start, its steady level, its chunks,
its end.

``--alt "OPTIONS"``: every other round (1, 3...) collects with these options added, and the
two kinds of round are summarised apart: a part of the collect left out, set against the whole
in one sysbench run (the server's level moves between sittings more than a part costs).

``--sham``: every other round (1, 3...) runs no collect: it waits as long as the sitting's
collects took to open their window, their window and their post-processing, and its loss is
computed as a collect's. The sham rounds are the loss figure's null distribution, in the same
sysbench run: the summary sets the collects' losses against them (the difference of the
medians, and the share of collect-sham pairs in which the collect lost more).

``--heartbeat``: instead of MariaDB, ``samples/bin/spin8 --threads 8 --heartbeat-hz 2000``
(eight CPU-bound threads and a real-time thread waking 2,000 times a second, which preempts a
worker each time).  Its work per second over the whole collect (from the command's start to
its exit: window and post-processing) against the same length of time just before it with no
profiler, alternated ``--rounds`` times; spin8 prints its work counter every 100 ms.  With
``--base CHECKOUT`` each round also runs a collect of that checkout (a worktree of an earlier
commit, its native module built), the two in turn, first one then the other: a change and the
code before it measured in the same sitting.

Needs ``mariadb-server sysbench`` (it says so when they are missing) and root (perf).  Each
test (server, load and every window) holds ``/tmp/wallflame-measure.lock`` (flock) from start
to end, so that other measurements on the same machine neither disturb it nor are disturbed.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import rows as suite_rows  # noqa: E402
from benchmarks.servers import (  # noqa: E402
    THROUGHPUT_TABLE_SIZE,
    THROUGHPUT_TABLES,
    MariaDB,
    Missing,
    _SysbenchRate,
    require,
    wallflame_env,
    warm_bytecode,
)
from wallflame.collect import budget  # noqa: E402
from wallflame.collect.packed import chunk_name  # noqa: E402
from wallflame.collect.perf import data_chunks  # noqa: E402

LOCK = "/tmp/wallflame-measure.lock"
CLASSES = ("mutex", "rwlock", "lock", "condvar", "io", "poll", "sleep", "other")


def du_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


def window_seconds(intervals: list[tuple[float, float]], a: float, b: float) -> list[float]:
    """sysbench's per-second figures whose second lies within [a, b] (seconds since sysbench
    started), the first second after ``a`` left out."""
    return [r for t, r in intervals if a + 1 <= t <= b]


def mean_tps(intervals: list[tuple[float, float]], a: float, b: float) -> float | None:
    """Mean of ``window_seconds``."""
    vals = window_seconds(intervals, a, b)
    return statistics.mean(vals) if vals else None


def first_second_pct(intervals: list[tuple[float, float]], a: float, b: float) -> float | None:
    """sysbench's figure for the second the window [a, b] opens in (the one ``window_seconds``
    leaves out), against the window's mean, in percent: what the collect's start costs."""
    first = [r for t, r in intervals if a < t < a + 1]
    mean = mean_tps(intervals, a, b)
    return 100 * (first[0] / mean - 1) if first and mean else None


def chunk_closes(run: Path) -> list[float]:
    """When perf closed each of the on-CPU recorder's chunks in ``run`` (a collect's run
    directory), in seconds after its window opened: perf names a chunk for its local time
    then, to the hundredth of a second (``perf.data.YYYYmmddHHMMSScc``).  The collect's
    folding process reads a chunk with ``perf script`` as soon as it is closed."""
    try:
        start = json.loads((run / "meta.json").read_text())["window"]["start_ns"] / 1e9
    except (OSError, ValueError, KeyError, TypeError):
        return []
    out = []
    for p in data_chunks(run / "raw", "perf"):
        stamp = chunk_name(p).rpartition(".")[2]
        if len(stamp) != 16 or not stamp.isdigit():
            continue  # not renamed by perf (it was killed): no time
        with contextlib.suppress(ValueError, OverflowError):
            t = time.mktime(time.strptime(stamp[:14], "%Y%m%d%H%M%S")) + int(stamp[14:]) / 100
            out.append(round(t - start, 2))
    return out


def chunk_second_pct(intervals: list[tuple[float, float]], a: float, b: float,
                     closes: list[float]) -> list[float]:
    """For each chunk closed inside the window [a, b] (``closes``: seconds after ``a``; not in
    its first or last second), sysbench's figure for the second it is read in, against the
    window's mean, in percent: what reading a chunk in the window costs."""
    mean = mean_tps(intervals, a, b)
    out = []
    for c in closes:
        t = a + c + 0.05  # perf script starts as the chunk closes and runs about 0.1 s
        if not mean or not a + 1 <= t <= b - 1:
            continue
        fig = [r for s, r in intervals if s - 1 < t <= s]
        if fig:
            out.append(100 * (fig[0] / mean - 1))
    return out


def by_second(intervals: list[tuple[float, float]], rows: list[dict[str, Any]],
              before: int = 10, after: int = 10) -> dict[int, float]:
    """sysbench's figure for each second around the rounds' windows, as a share of the median
    of that round's window with no profiler, averaged over the rounds: keyed by the second
    after the window opened (0: the second it opens in; negative: before it, when the
    collect starts up; past the window's length: its end and the post-processing)."""
    acc: dict[int, list[float]] = {}
    for r in rows:
        base = window_seconds(intervals, *r["none_s"])
        if not base:
            continue
        med = statistics.median(base)
        w0, w1 = r["window_s"]
        first = int(w0) + 1  # the stamp of the second the window opens in
        for t, fig in intervals:
            k = int(t) - first
            if -before <= k <= int(w1 - w0) + after:
                acc.setdefault(k, []).append(fig / med)
    return {k: statistics.mean(v) for k, v in sorted(acc.items())}


def low_seconds(intervals: list[tuple[float, float]], none: tuple[float, float],
                window: tuple[float, float], under: float = 0.85) -> dict[str, int]:
    """How many of sysbench's per-second figures lie under ``under`` times the median of the
    window with no profiler before the collect: in that window and in the collect's.  The
    server moves between throughput levels for tens of seconds on its own; a collect whose
    every second is low and a window with no profiler that drops halfway read differently
    from the same mean."""
    base = window_seconds(intervals, *none)
    if not base:
        return {}
    mark = under * statistics.median(base)
    return {"none": sum(1 for r in base if r < mark),
            "collect": sum(1 for r in window_seconds(intervals, *window) if r < mark)}


#: InnoDB's state, polled once a second beside sysbench (``--keep``: ``TEST-innodb.tsv``): the
#: undo history not yet purged (each update's old row versions, which reads of hot rows walk),
#: the redo log not yet checkpointed, and the dirty pages.  A window's mean of each is printed
#: beside its transactions/s.
STATUS = ("Innodb_history_list_length", "Innodb_checkpoint_age", "Innodb_buffer_pool_pages_dirty")


def state_mean(rows: list[tuple[float, dict[str, float]]], a: float, b: float,
               name: str) -> float | None:
    """The mean of one polled status variable over the polls at ``a`` to ``b`` (seconds in
    the rows' own clock)."""
    vals = [r[name] for t, r in rows if a <= t <= b and name in r]
    return sum(vals) / len(vals) if vals else None


def class_shares(run: Path) -> tuple[dict[str, float], float, list[float]]:
    """Per wait class (and ``runqueue``) the share of the threads' wall time, the smallest
    coverage, and every thread's coverage."""
    s = json.loads((run / "summary.json").read_text())
    window = json.loads((run / "meta.json").read_text())["window"]["window_ns"] / 1e9
    threads = [t for t in s["threads"] if t.get("tid")]
    wall = window * len(threads)
    out = {c: sum(float(t["wait"].get(c, 0)) for t in threads) / wall for c in CLASSES}
    out["runqueue"] = sum(float(t.get("runqueue_s", 0)) for t in threads) / wall
    out["on_cpu"] = sum(float(t.get("on_cpu_s", 0)) for t in threads) / wall
    cov = [float(t["coverage"]) for t in threads if t.get("coverage") is not None]
    return out, min(cov) if cov else 0.0, cov


def collect(pid: int, out: Path, window: float, extra: list[str],
            root: Path = ROOT) -> dict[str, Any]:
    """One ``wallflame collect`` of the checkout at ``root``."""
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "wallflame", "collect", "--pid", str(pid),
                        "--duration", str(window), "-o", str(out), *extra],
                       capture_output=True, text=True, cwd=str(root), check=False,
                       env=wallflame_env())
    t1 = time.monotonic()
    if r.returncode != 0:
        raise RuntimeError(f"collect failed ({r.returncode}): {r.stderr[-2000:]}")
    meta = json.loads((out / "meta.json").read_text())
    w = meta["window"]
    # The window in this process's monotonic clock (collect reports wall-clock ns).
    offset = time.time() - time.monotonic()
    start = w["start_ns"] / 1e9 - offset
    end = w["end_ns"] / 1e9 - offset
    return {"t0": t0, "t1": t1, "start": start, "end": end, "meta": meta}


def run_test(db: MariaDB, test: str, a: argparse.Namespace, keep: Path) -> dict[str, Any]:
    per_round = a.window * 2 + 60
    total = int(a.rounds * per_round + a.window + a.reference_window + 120)
    total += int(a.rounds * a.settle)
    job = db.sysbench_start(test, a.threads, total)
    t_job = job.started
    poll = db.status_poll(STATUS)
    poll.start()
    time.sleep(5)  # warm-up
    rounds: list[dict[str, Any]] = []

    def state(lo: float, hi: float) -> dict[str, float | None]:
        rows = [(t - t_job, r) for t, r in poll.rows]
        return {n.lower(): state_mean(rows, lo, hi, n.lower()) for n in STATUS}

    try:
        for i in range(a.rounds):
            n0 = time.monotonic() - t_job
            time.sleep(a.window)
            n1 = time.monotonic() - t_job
            run = keep / f"{test}-{i}"
            # with --alt, every other round's collect takes those options as well; with
            # --sham, every other round has no collect at all, timed as one
            variant = ("alt" if a.alt is not None else "sham" if a.sham else "collect") \
                if i % 2 else "collect"
            if variant == "sham":
                c = sham(rounds, a.window)
            else:
                c = collect(db.pid, run, a.window,
                            [*a.collect_args, *(a.alt.split() if variant == "alt" else [])])
            time.sleep(2)
            c_end = c["end"] - t_job
            if a.settle > 0:
                # no profiler, and in no window the loss is set against: the server's own
                # figures right after a collect (were it to rebound from it) are kept apart
                # from the next round's window with no profiler
                time.sleep(max(0.0, c_end + a.settle - (time.monotonic() - t_job)))
            settle = (c_end, time.monotonic() - t_job)
            iv = job.intervals()
            base = mean_tps(iv, n0, n1)
            low = low_seconds(iv, (n0, n1), (c["start"] - t_job, c["end"] - t_job))
            during = mean_tps(iv, c["start"] - t_job, c["end"] - t_job)
            whole = mean_tps(iv, c["t0"] - t_job, c["t1"] - t_job)
            meta = c["meta"]
            shares: dict[str, float] = {}
            cov: list[float] = []
            min_cov: float | None = None
            sched_mb = 0.0
            if meta is None:  # a sham round: nothing was collected
                meta = {}
            else:
                shares, min_cov, cov = class_shares(run)
                sched_mb = sum(p.stat().st_size for p in (run / "raw").glob("sched.data*")) / 1e6
            sched = (meta.get("profile") or {}).get("extra", {}).get("sched") or {}
            pp = meta.get("postprocess") or {}
            row = {
                "round": i, "variant": variant, "tps_none": base, "tps_collect": during,
                "tps_whole": whole,
                # the windows in seconds since sysbench started: its per-second figures are
                # kept beside the run directories (``TEST-sysbench.log``)
                "none_s": [round(n0, 2), round(n1, 2)],
                "window_s": [round(c["start"] - t_job, 2), round(c["end"] - t_job, 2)],
                "low_seconds": low,
                "first_second_pct": first_second_pct(iv, c["start"] - t_job, c["end"] - t_job),
                "chunks_s": (closes := chunk_closes(run) if variant != "sham" else []),
                "chunk_second_pct": chunk_second_pct(iv, c["start"] - t_job, c["end"] - t_job,
                                                     closes),
                # after the collect's window, until the next window with no profiler
                "settle_s": [round(settle[0], 2), round(settle[1], 2)],
                "tps_settle": mean_tps(iv, *settle),
                "innodb": {"none": state(n0, n1),
                           "collect": state(c["start"] - t_job, c["end"] - t_job),
                           "settle": state(*settle)},
                "loss_pct": 100 * (1 - during / base) if base and during else None,
                "loss_whole_pct": 100 * (1 - whole / base) if base and whole else None,
                "start_s": round(c["start"] - c["t0"], 2), "post_s": round(c["t1"] - c["end"], 2),
                "run_mb": round(du_mb(run), 1) if variant != "sham" else 0.0,
                "sched_mb_per_s": round(sched_mb / a.window, 2),
                "switches": sched.get("switch_outs"), "stack_samples": sched.get("stack_samples"),
                "threads": len(cov), "min_coverage": min_cov,
                "below_95": sum(1 for x in cov if x < 0.95),
                "budget": pp.get("budget"), "stream": pp.get("cost"), "finish": pp.get("finish"),
                "shares": shares, "losses": meta.get("losses"),
            }
            rounds.append(row)
            print(json.dumps({"test": test, **row}, default=_round), flush=True)
        # one more window with no profiler: each collect is then set against the windows on
        # either side of it, which takes out a steady drift of the server's own rate
        n0 = time.monotonic() - t_job
        time.sleep(a.window)
        after = mean_tps(job.intervals(), n0, time.monotonic() - t_job)
        bracket_rounds(rounds, after)
        ref = None
        if a.reference_window > 0:
            run = keep / f"{test}-reference"
            light_rates = ["--pmp-rate", str(budget.LIGHT_PMP_HZ), "--owner-rate",
                           str(budget.LIGHT_OWNER_HZ)] if a.light_reference else []
            c = collect(db.pid, run, a.reference_window,
                        [*a.collect_args, "--off-cpu", "both", "--sched-stack-hz", "0",
                         *light_rates])
            shares, min_cov, cov = class_shares(run)
            if a.light_reference:
                as_light(run, keep)
            meta = c["meta"]
            ref = {"shares": shares, "min_coverage": min_cov, "run_mb": round(du_mb(run), 1),
                   "post_s": round(c["t1"] - c["end"], 2),
                   "losses": meta.get("losses"),
                   "switches": (meta["profile"]["extra"].get("sched") or {}).get("switch_outs")}
            print(json.dumps({"test": test, "reference": ref}, default=_round), flush=True)
    finally:
        poll.stop()
        job.stop()  # sysbench can take minutes to stop on SIGINT: killed after 60 s
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            job.result(60)
        with contextlib.suppress(OSError):
            shutil.copyfile(job.log, keep / f"{test}-sysbench.log")
            names = [n.lower() for n in STATUS]
            (keep / f"{test}-innodb.tsv").write_text(
                "\t".join(["seconds", *names]) + "\n"
                + "".join("\t".join([f"{t - t_job:.2f}", *(f"{r.get(n, '')}" for n in names)])
                          + "\n" for t, r in poll.rows))
    return {"rounds": rounds, "reference": ref}


#: A sham round's timing where no collect has run yet: the seconds from a collect's start to
#: its window (the light choice's rate measure, perf's start, the snapshot backend's warm
#: snapshot: 1.6-2.4 s on MariaDB under sysbench) and from its window's end to its exit.
SHAM_START_S, SHAM_POST_S = 1.8, 1.5


def sham(rounds: list[dict[str, Any]], window: float) -> dict[str, Any]:
    """A round with no collect, timed as the collects of the sitting so far are (the median
    of their start and of their post-processing): the windows with no profiler on either side
    are then as far from its window as from a collect's.  What the loss of a sham round
    measures is the server's own movement (the null distribution of the loss figure, in the
    same sysbench run as the collects)."""
    done = [r for r in rounds if r.get("variant") != "sham"]
    start_s = statistics.median([r["start_s"] for r in done]) if done else SHAM_START_S
    post_s = statistics.median([r["post_s"] for r in done]) if done else SHAM_POST_S
    t0 = time.monotonic()
    time.sleep(start_s)
    start = time.monotonic()
    time.sleep(window)
    end = time.monotonic()
    time.sleep(post_s)
    return {"t0": t0, "t1": time.monotonic(), "start": start, "end": end, "meta": None}


def bracket(r: dict[str, Any], after: float | None) -> None:
    """A round's loss against the mean of the windows with no profiler before and after its
    collect (``loss_pct``; ``loss_before_pct`` against the one before alone), and how far the
    server moved from one of those windows to the next with no profiler at all
    (``none_change_pct``: the measurement's own spread)."""
    before, during, whole = r["tps_none"], r["tps_collect"], r["tps_whole"]
    r["tps_none_after"] = after
    r["loss_before_pct"] = r["loss_pct"]
    if before and after:
        base = (before + after) / 2
        r["loss_pct"] = 100 * (1 - during / base) if during else None
        r["loss_whole_pct"] = 100 * (1 - whole / base) if whole else None
        r["none_change_pct"] = 100 * (after / before - 1)


def bracket_rounds(rows: list[dict[str, Any]], after: float | None) -> None:
    """``bracket`` every round: the window with no profiler after a collect is the next
    round's, and ``after`` (the last window with no profiler) for the last round."""
    for row, nxt in zip(rows, [*(r["tps_none"] for r in rows[1:]), after], strict=True):
        bracket(row, nxt)


def _round(x: Any) -> Any:
    return round(x, 4) if isinstance(x, float) else str(x)


#: How the summary names each kind of round.
VARIANTS = {"collect": "rounds with the options given", "alt": "rounds with --alt's options",
            "sham": "sham rounds (no collect, timed as one)"}


def against_sham(rows: list[dict[str, Any]]) -> str:
    """The collects' losses set against the sham rounds' (the server's own movement, measured
    the same way in the same sysbench run): the difference of the medians, and how often a
    collect round lost more than a sham round, over every pair of the two (0.5: the collects
    cannot be told from no collect; 1.0: every collect lost more than every sham)."""
    col = [r["loss_pct"] for r in rows if r.get("variant") == "collect"
           and r.get("loss_pct") is not None]
    nul = [r["loss_pct"] for r in rows if r.get("variant") == "sham"
           and r.get("loss_pct") is not None]
    if not col or not nul:
        return "no collect or no sham round with a loss figure: nothing to set against"
    wins = sum(1.0 if c > n else 0.5 if c == n else 0.0 for c in col for n in nul)
    return (f"collects against sham rounds: median loss {statistics.median(col):.1f}% against "
            f"{statistics.median(nul):.1f}% (difference "
            f"{statistics.median(col) - statistics.median(nul):+.1f} points); a collect lost "
            f"more than a sham in {wins / (len(col) * len(nul)):.2f} of the "
            f"{len(col) * len(nul)} pairs")


def headline(results: dict[str, dict[str, Any]]) -> list[suite_rows.Row]:
    """Per test, the medians over the collect rounds of the server's throughput loss, the
    scheduler's data rate and the post-processing after the window (no peer tool)."""
    out = []
    for test, res in results.items():
        rounds = [r for r in res["rounds"] if r.get("variant", "collect") == "collect"]

        def med(key: str, rounds: list[dict[str, Any]] = rounds) -> float | None:
            vals = [r[key] for r in rounds if r.get(key) is not None]
            return statistics.median(vals) if vals else None

        out += [suite_rows.row(f"{test}: throughput loss", med("loss_pct"), unit="%"),
                suite_rows.row(f"{test}: scheduler data", med("sched_mb_per_s"), unit="MB/s"),
                suite_rows.row(f"{test}: post-processing", med("post_s"), unit="s")]
    return out


def summarize(test: str, res: dict[str, Any]) -> None:
    variants = sorted({r.get("variant", "collect") for r in res["rounds"]})
    if len(variants) > 1:
        for v in variants:
            summarize(f"{test}, {VARIANTS[v]}",
                      {**res, "rounds": [r for r in res["rounds"]
                                         if r.get("variant", "collect") == v]})
        if "sham" in variants:
            print(against_sham(res["rounds"]))
        return
    rows = res["rounds"]

    def med(key: str) -> float:
        vals = [r[key] for r in rows if r.get(key) is not None]
        return statistics.median(vals) if vals else float("nan")

    print(f"\n== {test}: {len(rows)} rounds")
    print("round  tps none  tps collect  tps none after  loss%  loss% vs before  "
          "loss% incl. post  none-to-none%  post s  run MB  sched MB/s  min coverage  "
          "threads<95%")
    for r in rows:
        print(f"{r['round']:5d}  {r['tps_none'] or 0:8.0f}  {r['tps_collect'] or 0:11.0f}  "
              f"{r.get('tps_none_after') or 0:14.0f}  {r['loss_pct'] or 0:5.1f}  "
              f"{r.get('loss_before_pct') or 0:15.1f}  {r['loss_whole_pct'] or 0:16.1f}  "
              f"{r.get('none_change_pct') or 0:13.1f}  {r['post_s']:6.1f}  "
              f"{r['run_mb']:6.1f}  {r['sched_mb_per_s']:10.2f}  "
              + (f"{r['min_coverage']:12.3f}" if r["min_coverage"] is not None else f"{'-':>12}")
              + f"  {r['below_95']:11d}")
    spread = [abs(r["none_change_pct"]) for r in rows if r.get("none_change_pct") is not None]
    print(f"median loss {med('loss_pct'):.1f}% against the windows either side "
          f"({med('loss_before_pct'):.1f}% against the one before; incl. post-processing "
          f"{med('loss_whole_pct'):.1f}%), "
          f"post-processing {med('post_s'):.1f} s, run directory {med('run_mb'):.0f} MB; "
          "the server itself moved by a median "
          f"{statistics.median(spread) if spread else float('nan'):.1f}% from one window "
          "with no profiler to the next")
    low = [(r["low_seconds"]["none"], r["low_seconds"]["collect"]) for r in rows
           if r.get("low_seconds")]
    if low:
        print("seconds under 85% of the median of the window before, per round (none / "
              "collect): " + ", ".join(f"{a} / {b}" for a, b in low))
    first = [r["first_second_pct"] for r in rows if r.get("first_second_pct") is not None]
    if first:
        print("the second each collect's window opens in (left out of its mean) against that "
              "mean: " + ", ".join(f"{x:+.1f}" for x in first) + "%")
    chunked = [r for r in rows if r.get("chunk_second_pct") is not None]
    if chunked:
        each = [x for r in chunked for x in r["chunk_second_pct"]]
        print("on-CPU chunks closed inside each window: "
              + ", ".join(str(len(r["chunk_second_pct"])) for r in chunked)
              + ("; the second each is read in against its window's mean: median "
                 f"{statistics.median(each):+.1f}% ({min(each):+.1f} to {max(each):+.1f}%)"
                 if each else ""))
    hist = "innodb_history_list_length"
    inno = [(r, r.get("innodb") or {}) for r in rows]
    if any(x for _, x in inno):
        print("per round: InnoDB's history list length, mean over the window with no profiler / "
              "the collect's / the seconds after it; transactions/s in those seconds")
        for r, x in inno:
            h = [(x.get(k) or {}).get(hist) for k in ("none", "collect", "settle")]
            print(f"round {r['round']}: " + " / ".join("-" if v is None else f"{v:.0f}" for v in h)
                  + f"; {r.get('tps_settle') or 0:.0f} tps after the collect")
    settled = [r for r in rows if r.get("tps_settle") and r.get("tps_none") and r["tps_collect"]
               and r["settle_s"][1] - r["settle_s"][0] >= 10]
    if settled:
        # with --settle: whether a server just left by a collect is where it was before it
        after = [100 * (r["tps_settle"] / r["tps_none"] - 1) for r in settled]
        under = [100 * (1 - r["tps_collect"] / r["tps_settle"]) for r in settled]
        print("the seconds after each collect against the window with no profiler before it: "
              + ", ".join(f"{x:+.1f}" for x in after)
              + f"% (median {statistics.median(after):+.1f}%); the collect's window under "
              "those seconds: " + ", ".join(f"{x:.1f}" for x in under)
              + f"% (median {statistics.median(under):.1f}%)")
    ref = res.get("reference")
    if ref:
        keys = [*CLASSES, "runqueue"]
        print("per-class share of thread wall time, points: "
              + "  ".join(f"{k}" for k in keys))
        print("reference (every switch with its stack): "
              + "  ".join(f"{100 * ref['shares'][k]:.1f}" for k in keys))
        worst = 0.0
        for r in rows:
            diffs = [100 * (r["shares"][k] - ref["shares"][k]) for k in keys]
            worst = max(worst, max(abs(d) for d in diffs))
            print(f"round {r['round']}: " + "  ".join(f"{100 * r['shares'][k]:.1f}" for k in keys)
                  + f"   largest difference {max(abs(d) for d in diffs):.2f} points")
        print(f"largest per-class difference from the reference: {worst:.2f} points "
              f"(reference: {ref['run_mb']} MB for its window, {ref['post_s']} s after it, "
              f"losses {ref['losses']})")


def run_heartbeat(a: argparse.Namespace, keep: Path) -> list[dict[str, Any]]:
    spin8 = ROOT / "samples" / "bin" / "spin8"
    subprocess.run(["make", "-s", "-C", str(ROOT / "samples"), "bin/spin8"], check=False)
    total = a.rounds * (a.window * 6 + 120) + 30  # a collect runs on for up to about its window
    log = keep / "spin8.out"
    with open(log, "w") as f:
        proc = subprocess.Popen([str(spin8), "--threads", "8", "--duration", str(total),
                                 "--report-ms", "100", "--heartbeat-hz", "2000"], stdout=f)
    rows = []

    def work_at(t_ns: int) -> float:
        pts = [json.loads(x) for x in log.read_text().splitlines() if x.startswith('{"t_ns"')]
        for p0, p1 in itertools.pairwise(pts):
            if p0["t_ns"] <= t_ns <= p1["t_ns"]:
                return float(p0["work"] + (p1["work"] - p0["work"]) * (t_ns - p0["t_ns"])
                             / (p1["t_ns"] - p0["t_ns"]))
        raise RuntimeError("time outside spin8's reports")

    checkouts = [("now", ROOT)] + ([("base", a.base)] if a.base else [])
    try:
        time.sleep(3)
        for i, (label, root) in ((i, checkouts[(i + j) % len(checkouts)])
                                 for i in range(a.rounds) for j in range(len(checkouts))):
            run = keep / f"heartbeat-{label}-{i}"
            b0 = time.time_ns()
            time.sleep(a.window)
            b1 = time.time_ns()
            c0 = time.time_ns()
            c = collect(proc.pid, run, a.window, a.collect_args, root)
            c1 = time.time_ns()
            # the same length without the profiler again, after it
            time.sleep((c1 - c0) / 1e9)
            a1 = time.time_ns()
            time.sleep(0.5)  # spin8's next report, to interpolate at a1
            base = ((work_at(b1) - work_at(b0)) / (b1 - b0)
                    + (work_at(a1) - work_at(c1)) / (a1 - c1)) / 2
            whole = (work_at(c1) - work_at(c0)) / (c1 - c0)
            w = c["meta"]["window"]
            during = (work_at(w["end_ns"]) - work_at(w["start_ns"])) / w["window_ns"]
            sched = c["meta"]["profile"]["extra"].get("sched") or {}
            row = {"round": i, "checkout": label, "work_per_s_none": base * 1e9, "loss_whole_pct":
                   100 * (1 - whole / base), "loss_window_pct": 100 * (1 - during / base),
                   "collect_s": round((c1 - c0) / 1e9, 2), "post_s": round(c["t1"] - c["end"], 2),
                   "switches_per_s": round((sched.get("switch_outs") or 0) / a.window),
                   "stack_samples": sched.get("stack_samples"), "run_mb": round(du_mb(run), 1)}
            rows.append(row)
            print(json.dumps({"test": "heartbeat", **row}, default=_round), flush=True)
    finally:
        proc.terminate()
        proc.wait(30)
    for label, root in checkouts:
        losses = [r["loss_whole_pct"] for r in rows if r["checkout"] == label]
        print(f"\n== spin8 + 2 kHz heartbeat, {label} ({root}): loss over the whole collect "
              f"(window + post-processing): {', '.join(f'{x:.1f}%' for x in losses)}; median "
              f"{statistics.median(losses):.1f}%")
    return rows


def thin_check(run: Path, every: list[int]) -> None:
    from wallflame.collect import packed, perf
    from wallflame.fold import FoldOptions
    from wallflame.fold.perf.sampled_switches import SampledSched
    from wallflame.profile import OFF, Profile
    from wallflame.textio import line_blocks

    class Thinned(SampledSched):
        """Keeps every n-th stack sample of each thread, each standing for n switches."""

        def __init__(self, n: int) -> None:
            super().__init__(FoldOptions().get_rules())
            self.n = n
            self.seen: dict[int, int] = {}

        def _end_sample(self) -> None:
            cur = self._cur
            if cur is not None:
                tid = cur[1]
                k = self.seen.get(tid, 0)
                self.seen[tid] = k + 1
                if k % self.n:
                    self._cur, self._frames = None, []
                    return
                self._cur = (*cur[:5], self.n)
            super()._end_sample()

    chunks = perf.data_chunks(run / "raw", "sched")
    readers = {n: Thinned(n) for n in [1, *every]}
    for c in chunks:
        with packed.unpacked(c) as readable:
            p = subprocess.Popen(perf.script_command(readable, True), stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL)
            assert p.stdout is not None
            for block in line_blocks(p.stdout):  # type: ignore[arg-type]
                lines = block.decode("utf-8", "replace").split("\n")
                for r in readers.values():
                    r.feed_lines(lines)
            for r in readers.values():
                r._end_sample()
            p.wait()
    from wallflame.fold import fold_file
    from wallflame.fold.perf.chunks import from_snapshots

    log = run / "raw" / "snapshots.log"
    pmp = fold_file(str(log), FoldOptions(), "eu-stack") if log.exists() else None
    shares = {}
    for n, r in readers.items():
        prof = Profile()
        r.finish(prof)
        if pmp is not None:  # as finish does: unsampled blocked time to the snapshot stacks
            from_snapshots(prof, pmp, prof)
        per: dict[str, int] = {}
        for k, w in prof.stacks.items():
            if k.state == OFF:
                per[k.wait] = per.get(k.wait, 0) + w
        per["runqueue"] = sum(int(v) for v in prof.meta.extra.get("runqueue_ns", {}).values())
        shares[n] = (per, r.samples)
    total = sum(shares[1][0].values())
    keys = sorted(set().union(*(s[0] for s in shares.values())))
    print(f"\n== estimator on {run.name}: {len(chunks)} chunks, per-class share of the "
          "threads' off-CPU + run-queue time, points")
    print("every  stacks  " + "  ".join(f"{k:>8}" for k in keys) + "  largest difference")
    for n, (per, samples) in shares.items():
        diff = max(abs(100 * (per.get(k, 0) - shares[1][0].get(k, 0)) / total) for k in keys)
        print(f"{n:5d}  {samples:6d}  " + "  ".join(f"{100 * per.get(k, 0) / total:8.2f}"
                                                   for k in keys) + f"  {diff:.2f}")


def as_light(run: Path, keep: Path) -> tuple[dict[str, float], dict[str, float], float]:
    """The light collect's method against every switch over the same window and load: a copy
    of ``run`` (collected with ``--sched-stack-hz 0`` and the light collect's snapshot and
    owner rates) without its scheduler and wake-up chunks, finished as ``--off-cpu pmp``, so
    that its per-class totals come from the kernel's counters and the snapshots alone.  Prints
    both and returns (every switch, light, the largest difference in points)."""
    copy = keep / f"{run.name}-as-light"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(run / "raw", copy / "raw",
                    ignore=shutil.ignore_patterns("sched.*", "wake.*", "sched-record*",
                                                  "wake-record*"))
    cap_path = copy / "raw" / "capture.json"
    cap = json.loads(cap_path.read_text())
    cap["options"]["off_cpu"] = "pmp"
    cap_path.write_text(json.dumps(cap))
    r = subprocess.run([sys.executable, "-m", "wallflame", "finish", str(copy)],
                       capture_output=True, text=True, cwd=str(ROOT), check=False,
                       env=wallflame_env())
    if r.returncode != 0:
        raise RuntimeError(f"finish failed ({r.returncode}): {r.stderr[-2000:]}")
    every, _, _ = class_shares(run)
    light, min_cov, _ = class_shares(copy)
    keys = [*CLASSES, "runqueue", "on_cpu"]
    diff = max(abs(100 * (light[k] - every[k])) for k in keys)
    print(f"\n== {run.name}: the light method against every switch, same window, per-class "
          "share of the threads' wall time, points")
    print("               " + "  ".join(f"{k:>8}" for k in keys))
    for name, sh in (("every switch", every), ("light", light)):
        print(f"{name:>13}  " + "  ".join(f"{100 * sh[k]:8.2f}" for k in keys))
    print(f"largest difference {diff:.2f} points; light's smallest coverage {min_cov:.3f}")
    return every, light, diff


def replay(lines: Path, window: float, seconds: bool = False) -> None:
    """The summary of a sitting, again, from the JSON lines it printed (``lines``) and the
    sysbench logs ``--keep`` kept beside them (``TEST-sysbench.log``): what the rounds' lines
    hold is printed as it was, and what is read from sysbench's seconds (the window each
    collect opens in, ``first_second_pct``; the last window with no profiler) is computed
    again."""
    by_test: dict[str, list[dict[str, Any]]] = {}
    for line in lines.read_text().splitlines():
        if line.startswith("{") and '"round"' in line:
            row = json.loads(line)
            by_test.setdefault(row.pop("test"), []).append(row)
    if not by_test:
        raise ValueError("no round's JSON line in it")
    for test, rows in by_test.items():
        iv = [(float(t), float(r)) for t, r in _SysbenchRate.INTERVAL.findall(
            (lines.parent / f"{test}-sysbench.log").read_text(errors="replace"))]
        for r in rows:
            r["first_second_pct"] = first_second_pct(iv, *r["window_s"])
            if "chunks_s" not in r:  # a sitting from before chunks_s: its run directory
                r["chunks_s"] = chunk_closes(lines.parent / f"{test}-{r['round']}")
            w0, w1 = r["window_s"]
            r["chunk_second_pct"] = chunk_second_pct(iv, w0, w1, r["chunks_s"])
        # the last window with no profiler began where the last round ended: after its
        # settle, or about 2 s after its collect's window
        last = rows[-1]
        n0 = last["settle_s"][1] if "settle_s" in last else last["window_s"][1] + 2
        after = mean_tps(iv, n0, n0 + window)
        bracket_rounds(rows, after)
        summarize(test, {"rounds": rows, "reference": None})
        if seconds:
            for v in sorted({r.get("variant", "collect") for r in rows}):
                each = by_second(iv, [r for r in rows if r.get("variant", "collect") == v])
                print(f"\n{test}, {VARIANTS.get(v, v)}: each second against the window "
                      "with no profiler before (0: the second the window opens in)")
                keys = list(each)
                for i in range(0, len(keys), 10):
                    print("  ".join(f"{k:+4d} {each[k]:.2f}" for k in keys[i:i + 10]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--tests", default="oltp_update_index,oltp_read_write")
    ap.add_argument("--window", type=float, default=60)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=32)
    ap.add_argument("--tables", type=int, default=THROUGHPUT_TABLES)
    ap.add_argument("--table-size", type=int, default=THROUGHPUT_TABLE_SIZE)
    ap.add_argument("--reference-window", type=float, default=10)
    ap.add_argument("--alt", default=None,
                    help="more collect options for every other round (rounds 1, 3...): two "
                         "collects set against the same server in one sysbench run, each "
                         "summarised apart (\"--off-cpu none -F 99\")")
    ap.add_argument("--sham", action="store_true",
                    help="every other round (1, 3...) runs no collect, timed as one: the loss "
                         "figure's own spread, measured beside the collects")
    ap.add_argument("--settle", type=float, default=0,
                    help="seconds after each collect's window with no profiler, in no window "
                         "the loss is set against (its transactions/s are printed apart)")
    ap.add_argument("--keep", type=Path, default=None,
                    help="keep the run directories here (default: a temporary directory)")
    ap.add_argument("--by-second", action="store_true",
                    help="with --replay: each second around the windows, against the window "
                         "with no profiler before, averaged over the rounds")
    ap.add_argument("--replay", type=Path, default=None,
                    help="summarise again a sitting kept with --keep: the JSON lines it printed "
                         "(this file), with TEST-sysbench.log beside it; --window as in the "
                         "sitting")
    ap.add_argument("--thin", type=Path, default=None, help="estimator check on this run")
    ap.add_argument("--every", default="10,50,200", help="with --thin: sampling intervals")
    ap.add_argument("--as-light", type=Path, default=None,
                    help="the light method on this run, against its every-switch figures")
    ap.add_argument("--light-reference", action="store_true",
                    help="take the reference at the light collect's snapshot and owner rates "
                         "and compare the light method with it over the same window")
    ap.add_argument("--base", type=Path,
                    help="with --heartbeat: another checkout of wallflame, whose collects "
                         "alternate with this one's in the same spin8 run")
    ap.add_argument("--heartbeat", action="store_true",
                    help="the 8-thread CPU-bound target with a 2 kHz heartbeat, not MariaDB")
    ap.add_argument("--json", type=Path, help="also write the headline rows here (run.py)")
    ap.add_argument("collect_args", nargs="*", help="more wallflame collect options (after --)")
    a = ap.parse_args()
    if min(a.tables, a.table_size, a.rounds, a.threads) < 1 or not 0 < a.window < 1e6 \
            or not 0 <= a.settle < 1e6:
        ap.error("--tables, --table-size, --rounds and --threads must be at least 1, "
                 "--window above 0, --settle 0 or more")
    if a.thin is not None:
        thin_check(a.thin, [int(x) for x in a.every.split(",")])
        return 0
    if a.sham and a.alt is not None:
        ap.error("--sham and --alt each take every other round: give one of them")
    if a.by_second and a.replay is None:
        ap.error("--by-second reads a kept sitting: give it with --replay LINES")
    if a.replay is not None:
        try:
            replay(a.replay, a.window, a.by_second)
        except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
            # exit 2, as argparse's own errors: the file given is not a kept sitting
            print(f"server_collect.py: --replay {a.replay}: {type(e).__name__}: {e} (give "
                  "the JSON lines a sitting printed, saved in the --keep directory beside "
                  "its TEST-sysbench.log)", file=sys.stderr)
            return 2
        return 0
    if a.as_light is not None:
        as_light(a.as_light, a.keep or a.as_light.parent)
        return 0
    if a.heartbeat:
        keep = a.keep or Path(tempfile.mkdtemp(prefix="wallflame-server-collect-"))
        keep.mkdir(parents=True, exist_ok=True)
        try:
            with open(LOCK, "w") as lk:
                fcntl.flock(lk, fcntl.LOCK_EX)
                # inside the lock: the imports are a burst of CPU another sitting would see
                warm_bytecode(ROOT)
                run_heartbeat(a, keep)
        finally:
            if a.keep is None:
                shutil.rmtree(keep, ignore_errors=True)
        return 0
    try:
        require("mariadb")
    except Missing as e:
        print(f"server_collect.py: {e}", file=sys.stderr)
        return 6
    keep = a.keep or Path(tempfile.mkdtemp(prefix="wallflame-server-collect-"))
    keep.mkdir(parents=True, exist_ok=True)
    results = {}
    try:
        for test in a.tests.split(","):
            with open(LOCK, "w") as lk:
                fcntl.flock(lk, fcntl.LOCK_EX)
                warm_bytecode(ROOT)
                with MariaDB(a.tables, a.table_size) as db:
                    db.prepare()
                    results[test] = run_test(db, test, a, keep)
        for test, res in results.items():
            summarize(test, res)
        if a.json:
            suite_rows.write_rows(a.json, headline(results))
    finally:
        if a.keep is None:
            shutil.rmtree(keep, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
