"""What a perf capture tells about itself: per-event counts, unit, window, stack quality."""

from __future__ import annotations

from wallflame.fold.perf.lines import TIME_EVENTS, base_event
from wallflame.fold.perf.state import PerfState
from wallflame.names import is_unknown
from wallflame.profile import UNIT_NS, UNIT_SAMPLES


def unit_of(events: dict[str, bool]) -> str:
    """``ns`` when every folded event weighs nanoseconds, else ``samples``.

    ``events`` maps each folded event to whether all its samples carried a period."""
    ok = all(had_period and base_event(e) in TIME_EVENTS for e, had_period in events.items())
    return UNIT_NS if ok else UNIT_SAMPLES


def record_meta(st: PerfState) -> None:
    """Stacks into the profile, and what the reader should know about them into its meta."""
    meta = st.profile.meta
    per_event = st.add_stacks()
    had_period = {event: event not in st.no_period for event in per_event}
    for event, n in sorted(per_event.items()):
        meta.count(f"perf:{event or '(no event name)'}", n)
    on_events = sorted(e for e in per_event if st.kind(e) == "on")
    folded_on = sum(per_event[e] for e in on_events)
    if folded_on:
        meta.count("perf", folded_on)
    for name, n in sorted(st.skipped_by_name.items()):
        meta.count(f"perf:{name}", n)
        if st.kind(name) == "trace":
            meta.warn(f"{n} samples of event {name} were not folded (fold them with "
                      f"--event {name})")
    chosen = st.options.event
    if chosen is not None and not per_event and not st.tracker.switch_outs:
        present = ", ".join(sorted(st.skipped_by_name)) or "none"
        meta.warn(f"no samples of event {chosen} (events in this input: {present})")
    if len(on_events) > 1:
        counts = ", ".join(f"{e}: {per_event[e]}" for e in on_events)
        meta.warn(f"several on-CPU events were merged ({counts} samples); pick one with "
                  "--event")
    if per_event:
        meta.unit = unit_of(had_period)
        if meta.unit != UNIT_NS:
            names = ", ".join(sorted(e or "(no event name)" for e in had_period))
            meta.warn(f"weights are sample counts or event periods ({names}), not time")
            if st.tracker.switch_outs:
                meta.warn("scheduler off-CPU time is in ns but on-CPU weights are not")
    if st.first_time is not None and st.last_time is not None:
        meta.window_ns = max(meta.window_ns, st.last_time - st.first_time)
    meta.threads.update(st.threads)
    if st.records:
        meta.extra.setdefault("perf_records", dict(sorted(st.records.items())))
    _quality(st, folded_on)


#: perf's default ``kernel.perf_event_max_stack``: a stack this deep was probably cut.
MAX_STACK = 127


def _quality(st: PerfState, folded_on: int) -> None:
    """How trustworthy the on-CPU stacks are: shallow (frame pointers missing), unresolved
    frames, and stacks cut at perf's depth limit; warned when they are a large share."""
    if not folded_on:
        return
    shallow = unknown = deep = 0  # samples with <= 2 frames, half unresolved, at the limit
    time_weight = time_samples = 0
    mostly_unknown: dict[int, bool] = {}  # per stack
    for key, n in st.sem_n.items():
        event, fid = key[3], key[4]
        if st.kind(event) != "on":
            continue
        frames = st.stacks[fid]
        if len(frames) <= 2:
            shallow += n
        bad = mostly_unknown.get(fid)
        if bad is None:
            unresolved = sum(1 for f in frames if is_unknown(f))
            bad = mostly_unknown[fid] = bool(frames) and unresolved * 2 >= len(frames)
        if bad:
            unknown += n
        if len(frames) >= MAX_STACK:
            deep += n
        if event not in st.no_period and base_event(event) in TIME_EVENTS:
            time_weight += st.sem_w[key]
            time_samples += n
    meta = st.profile.meta
    meta.extra.setdefault("perf_quality", {
        "samples": folded_on, "shallow_samples": shallow, "mostly_unknown_samples": unknown,
        "max_depth_samples": deep})
    if time_samples and time_weight:
        meta.rates.setdefault("perf_hz", round(1e9 * time_samples / time_weight, 1))
    if shallow * 10 >= folded_on * 3:
        meta.warn(f"{100 * shallow // folded_on}% of perf samples have at most 2 frames "
                  "(no frame pointers?): record with --call-graph dwarf")
    if unknown * 10 >= folded_on * 3:
        meta.warn(f"{100 * unknown // folded_on}% of perf samples have mostly unresolved frames "
                  "(stripped binaries or missing debug symbols)")
    if deep:
        meta.warn(f"{deep} perf samples reached the {MAX_STACK}-frame limit and may be cut "
                  "(raise kernel.perf_event_max_stack)")
