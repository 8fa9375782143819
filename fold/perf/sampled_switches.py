"""Scheduler capture with sampled call chains -> exact off-CPU and run-queue time per thread.

The capture is ``perf record -e sched:sched_switch -F HZ --switch-events --call-graph dwarf
-p PID`` (``wallflame.collect.perf``), read as ``perf script --ns --show-switch-events -F
comm,pid,tid,time,period,event,trace,ip,sym,dso``, chunk after chunk, by one ``SampledSched``.

* Every switch of every thread is a ``PERF_RECORD_SWITCH`` pair (``OUT`` when the thread leaves
  a CPU, ``IN`` when it gets one back; about 40 bytes each, no stack).  ``OUT preempt`` means
  the thread was still runnable: that interval is run-queue time.  Any other ``OUT`` starts a
  blocked interval.  So blocked and runnable time per thread are exact, whatever the sampling.
* Only a sample of the switches carries a call chain: the ``sched:sched_switch`` event in the
  kernel's frequency mode (``-F``: at most about HZ samples per second per thread; a thread
  that switches less often gets every switch).  A sample comes just before its ``OUT`` and
  carries the stack, the kernel state (S, D, R) and its period: how many switches of that
  thread it stands for.
* A thread's exact blocked time is split over the stacks of its sampled blocked intervals in
  proportion to ``period x duration`` of each (a ratio estimator: the sampled intervals stand
  for the others in their part of the run, and the split sums exactly to the measured total).
  With ``-c 1`` (every switch sampled) every period is 1 and the split is the exact one.
  With sampled stacks, an unsampled interval that a snapshot's ptrace stop ended, or that
  restarted the wait after it, takes the snapshot's stack (``sched_stops``), and only the rest
  is split over the samples: the long waits, few and each a large part of its thread's time,
  are those the snapshots interrupt.  The rest is split stratum by stratum of the intervals'
  durations (``sched_split``), over the sampled and the known intervals of each stratum:
  sampling one switch in N can fall on the same phase of a periodic program again and again,
  and a wait's kind goes with its length.
* A thread whose first record is an ``IN`` was off-CPU since before the capture: that leading
  span counts as blocked (from the capture's first record) and is split like the rest.  A
  blocked thread with no sampled stack at all gets the pseudo-frame ``[unsampled]``.
* Intervals still open at the end are closed at the capture's last record.
* **Waiting for a CPU is a state** (class ``runnable``): a preemption (``OUT preempt``) is
  runnable until the thread's next ``IN``, and so is the time from the wake-up of a blocked
  thread (``sched:sched_wakeup``, recorded on every CPU by a perf of its own and read with
  ``feed_wakes``) to its ``IN``: the blocked interval ends at its last wake-up.  The kernel
  counts both as run-queue delay (``/proc/PID/task/TID/schedstat``, second field), which the
  live tests check against.  Runnable time keeps the stack at which the thread was preempted
  or had blocked.  A thread the window's first ``/proc`` listing did not have was created
  during the window and has no leading span.
* **On-CPU time is exact too**: each ``IN`` to the next ``OUT``, clipped to the window
  (``meta.extra["sched_threads"]``: per thread on-CPU, runnable and blocked ns), which the run
  uses as each thread's on-CPU total (``wallflame.window``).  perf's ``IN`` record comes a
  few microseconds after the switch: every ``IN`` is moved earlier by the lag the kernel's run
  time shows over the run (``sched_passes.switch_in_lag``).
* Blocked time is also kept per wait class in bins of ``BIN_NS`` of the perf clock
  (``class_bins``): ``wallflame check`` measures how much each class moves within a run from
  it (``wallflame.fold.slices``), since the scheduler's text is not kept.  A thread's
  sampled ``period x duration`` in each bin is scaled to its exact blocked time in that class.

* **Attached, on every CPU** (``collect.perf.PerfOptions.switch_filter``): the switches are
  ``PERF_RECORD_SWITCH_CPU_WIDE`` pairs of every task on the machine (perf cannot filter
  them), read as above for the target's threads and counted apart for the others
  (``other_tasks_records``); the target's processes are those of the threads listed when the
  window opened, and those they fork (``perf script --show-task-events``).  The stack samples
  are filtered in the kernel on the switches out of the target's threads and come one in
  ``-c N`` per CPU (their period): a thread's share of them follows its share of the
  switches.

Memory holds per-thread totals and the distinct (stack, state) pairs, never the records.
The modules: ``sched_reader`` (the records read), ``sched_thread`` (one thread's state),
``sched_passes`` (the wake-ups' and the switch-in lag's passes over the log), ``sched_clip``
(the totals clipped to the window), ``sched_stops`` (the waits a snapshot's stop showed),
``sched_split`` (the split over stacks and the class bins); this one ``finish``es.
"""

from __future__ import annotations

from typing import Any

from wallflame.classify import Rules, classify
from wallflame.fold.perf import sched_passes
from wallflame.fold.perf.sched_clip import clip
from wallflame.fold.perf.sched_reader import SchedReader
from wallflame.fold.perf.sched_split import (
    bin_thread,
    blocked_split,
    split_runnable,
)
from wallflame.fold.perf.sched_stops import Marks, parse_marks
from wallflame.fold.perf.sched_thread import Key, SchedThread
from wallflame.names import UNSAMPLED
from wallflame.profile import OFF, Profile, StackKey
from wallflame.timeline import LOG_BLOCKED, LOG_RUNNABLE


class SampledSched(SchedReader):
    """Reads the scheduler capture chunk after chunk (``feed``, ``feed_wakes``:
    ``SchedReader``), then ``finish`` once."""

    def __init__(self, rules: Rules, kernel: bool = True) -> None:
        super().__init__(rules, kernel)
        #: ``set_marks``: tid -> (stop instants, their (frames, kernel state)), sorted
        self.marks: Marks = {}
        # the log's rows a stop showed, and their stacks (``_clip``, then ``_log_known``)
        self.known_rows: list[tuple[int, Key]] = []
        self.woken = 0
        self._classes: dict[Key, str] = {}
        #: blocked ns per wait class and bin (``sched_split.BIN_NS``), set by ``finish``
        self.class_bins: dict[str, dict[int, int]] = {}

    def set_marks(self, marks: list[Any]) -> None:
        """The snapshots' blocked threads at the instant each was stopped
        (``wallflame.stops.STOP_MARKS``: ``[tid, mono_ns, frames, kernel state]``), on this
        capture's clock (``sched_stops``)."""
        self.marks = parse_marks(marks)

    def _class_of(self, key: Key) -> str:
        wait = self._classes.get(key)
        if wait is None:
            wait = self._classes[key] = classify(key[0], key[1], self.rules)
        return wait

    def _existed(self, tid: int) -> bool:
        """Whether ``tid`` existed when the window opened (unknown: assume it did)."""
        return self.at_start is None or tid in self.at_start

    def _alive(self, th: SchedThread, window: tuple[int, int] | None) -> int | None:
        """How much of the window a thread that began or ended within it lived: from its
        first switch-in (a thread not listed when the window opened) to its exit; None for
        one that lived through the window (or without a window to measure it in)."""
        if window is None:
            return None
        start, end = window
        born = th.ins[0] if not self._existed(th.tid) and th.ins else start
        died = self.exits.get(th.tid, end)
        if not th.gone and th.tid in self.exits and th.ins and th.ins[-1] > died:
            died = end  # its TID taken again after the exit: a thread alive at the end
        if born <= start and died >= end:
            return None
        return max(0, min(died, end) - max(born, start))

    # -- finish's passes over the log -----------------------------------------------------

    def _close(self, th: SchedThread, t: int, exact: bool) -> None:
        """Close the thread's open interval at ``t`` (into the log)."""
        assert th.open is not None
        start, runnable, sample = th.open
        th.open = None
        d = t - start
        if d <= 0:
            return
        if exact:
            self.exact += 1
        else:
            self.inferred += 1
        # the totals, stacks and bins are made from the log (``_clip``)
        self.log.add(th.tid, start, d, LOG_RUNNABLE if runnable else LOG_BLOCKED, sample)

    def _apply_wakes(self) -> None:
        """End each blocked interval at the thread's last wake-up inside it
        (``sched_passes.apply_wakes``)."""
        if self.wakes:
            self.woken += sched_passes.apply_wakes(self.log, self.wakes)

    def _switch_in_lag(self, listings: dict[str, Any]) -> dict[str, Any]:
        """Move every switch-in earlier by perf's lag (``sched_passes.switch_in_lag``)."""
        return sched_passes.switch_in_lag(self.threads, self.log, listings)

    def _clip(self, profile: Profile, start: int, end: int) -> None:
        """Each thread's totals again, from the logged intervals clipped to ``[start, end)``
        (``sched_clip``); what fell outside is kept in ``meta.extra["outside_window"]``."""
        outside, runnable_bins, self.known_rows = clip(self.threads, self.log, start, end,
                                                       self.marks, self._class_of)
        out = profile.meta.extra.setdefault("outside_window", {})
        out["sched_ns"] = out.get("sched_ns", 0) + outside
        for (cls, b), ns in runnable_bins.items():
            bins = self.class_bins.setdefault(cls, {})
            bins[b] = bins.get(b, 0) + ns

    def _log_known(self) -> None:
        """Give the intervals a stop showed their stack in the log, with period 0 (it stands
        for itself alone), so that the timeline's spans carry it."""
        log = self.log
        for row, key in self.known_rows:
            log.sample[row] = log.intern(key)
            log.period[row] = 0
        self.known_rows = []

    # -- output ---------------------------------------------------------------------------

    def finish(self, profile: Profile, sampling: dict[str, object] | None = None,
               window: tuple[int, int] | None = None,
               listings: dict[str, Any] | None = None) -> None:
        """Close open intervals at the last record and add the off-CPU stacks, the run-queue
        time and the scheduler's figures to ``profile``; with ``window`` (the collect's
        bounds in the capture's clock) only the part of each interval inside it.  With
        ``listings`` (``raw/capture.json`` ``threads``, on the capture's clock) each switch-in
        is moved by perf's lag, measured against the kernel's run time
        (``sched_passes.switch_in_lag``)."""
        if window is None and self.window is not None and self.window[1] is not None:
            window = (self.window[0], self.window[1])
        end = window[1] if window is not None else self.last_time
        closed_at_end = 0
        for th in self.threads.values():
            if th.open is not None:
                closed_at_end += 1
                self._close(th, max(end, th.open[0]), exact=True)
            if th.on_since is not None and end > th.on_since:
                th.on_cpu.extend((th.on_since, end))
            th.on_since = None
        self._apply_wakes()
        lag = self._switch_in_lag(listings) if listings else None
        # the totals again from the log: clipped to the window, with the runnable stacks
        self._clip(profile, *(window or (-(1 << 62), 1 << 62)))
        self._log_known()
        totals = self._threads_out(profile, window)
        self._figures(profile, sampling, lag, closed_at_end, totals)

    def _threads_out(self, profile: Profile, window: tuple[int, int] | None
                     ) -> dict[str, int]:
        """Each thread's exact totals into ``meta.extra`` and its time over stacks into
        ``profile``; returns the sums ``_figures`` reports."""
        meta = profile.meta
        rq = meta.extra.setdefault("runqueue_ns", {})
        exact = meta.extra.setdefault("sched_threads", {})
        sums = {"unsampled_ns": 0, "leading_ns": 0, "switch_outs": 0, "stop_ns": 0,
                "stratum_ns": 0, "pooled_ns": 0}
        for tid in sorted(self.threads):
            th = self.threads[tid]
            if not th.seen:  # a stack sample alone, before the capture was known to be on
                continue     # every CPU: another task's
            sums["switch_outs"] += th.switches
            meta.threads[tid] = th.comm
            if th.runnable:
                rq[str(tid)] = rq.get(str(tid), 0) + th.runnable
            exact[str(tid)] = {"on_ns": sched_passes.clipped_sum(th.on_cpu, window),
                               "runnable_ns": th.runnable,
                               "blocked_ns": th.blocked + th.leading}
            alive = self._alive(th, window)
            if alive is not None:
                exact[str(tid)]["alive_ns"] = alive
            split_runnable(profile, th)
            sums["leading_ns"] += th.leading
            if th.blocked + th.leading:
                sums["unsampled_ns"] += self._blocked_out(profile, th)
                for name, ns in zip(("stop_ns", "stratum_ns", "pooled_ns"), th.split_by,
                                    strict=True):
                    sums[name] += ns
        return sums

    def _blocked_out(self, profile: Profile, th: SchedThread) -> int:
        """A thread's blocked time over its stacks into ``profile`` and the class bins;
        returns how much of it had no stack."""
        split, unsampled = blocked_split(th)
        per_class: dict[str, int] = {}
        for key, part in split:
            if not part:
                continue
            wait = self._class_of(key)
            per_class[wait] = per_class.get(wait, 0) + part
            profile.add(StackKey(key[0], th.tid, th.comm, th.pid, OFF, wait), part)
        bin_thread(th, per_class, self.class_bins)
        return unsampled

    def _figures(self, profile: Profile, sampling: dict[str, object] | None,
                 lag: dict[str, Any] | None, closed_at_end: int, sums: dict[str, int]
                 ) -> None:
        """The scheduler's figures into ``meta.extra["sched"]``, its losses and warnings."""
        meta = profile.meta
        # The independent evidence behind the split over stacks is the sampled switches.
        meta.count("sched_switch", self.samples)
        sched = meta.extra.setdefault("sched", {})
        sched.update({"switch_outs": sums["switch_outs"], "exact_switch_in": self.exact,
                      "inferred_switch_in": self.inferred, "closed_at_end": closed_at_end,
                      "exited_threads": sum(1 for t in self.exits if t in self.threads),
                      "exit_switch_samples": self.exit_switch_samples,
                      "stack_samples": self.samples, "sampled_switches": self.periods,
                      "leading_ns": sums["leading_ns"], "unsampled_ns": sums["unsampled_ns"],
                      "wakeups": self.wake_records if self.wakes is not None else None,
                      "woken_intervals": self.woken, "switch_in_lag": lag,
                      "every_cpu": self.every_cpu, "other_tasks_records": self.foreign,
                      **(sampling or {})})
        split_by = [sums["stop_ns"], sums["stratum_ns"], sums["pooled_ns"]]
        if any(split_by):  # sampled stacks: how the blocked time was split (``sched_split``)
            sched["split"] = {"stop_ns": split_by[0], "stratum_ns": split_by[1],
                              "pooled_ns": split_by[2]}
        if self.wakes is None and self.threads:
            meta.warn("no wake-up capture: the time from a blocked thread's wake-up to its "
                      "switch-in (waiting for a CPU) is counted as blocked, not runnable")
        if self.lost:
            meta.lose("lost perf events (PERF_RECORD_LOST)", 0, self.lost)
        if self.unparsed:
            meta.lose("unparsed scheduler record", 0, self.unparsed)
        if self.inferred:
            meta.warn(f"{self.inferred} of {self.exact + self.inferred} off-CPU intervals had "
                      "no switch-in record and were closed at the thread's next switch-out")
        unsampled_ns = sums["unsampled_ns"]
        if unsampled_ns:
            meta.warn(f"{unsampled_ns / 1e9:.3f} s of blocked time belongs to threads none of "
                      f"whose switches was sampled with a stack ({UNSAMPLED}, unless "
                      "snapshots caught those threads blocked)")
