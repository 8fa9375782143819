"""The CI gate: CURRENT against BASELINE, each one run or a series of runs, judged by a stated
statistical test at a stated false-alarm rate, never on data that cannot be compared.

Verdicts and exit codes (``wallflame.errors``): ``pass`` 0, ``regression`` 1, ``inconclusive``
7.  A regression is an increase of a judged quantity (``report.gate.quantities``) that Welch's
one-sided t-test finds significant after Holm's correction over every quantity judged in the
check (family-wise false-alarm rate ``alpha``) *and* that is larger than the minimum effect.
Inconclusive: evidence that cannot be compared (different collectors or rates, truncated or
unreadable data, more than ``max_loss_share`` of it lost), or a pass that could not have seen
a ``sensitivity`` (relative) increase of the main quantities.  Smaller losses and short
captures only widen the intervals.  An inconclusive check wins over a regression: a regression
seen on data that cannot be compared is reported but not trusted.

Settings: ``report.gate.thresholds``.  The method and its reasons: docs/check.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from wallflame.profile import Profile, merge_all
from wallflame.report.diff.compare import Diff
from wallflame.report.gate.comparable import (
    complete_data,
    same_collectors,
    same_load,
    same_machine,
)
from wallflame.report.gate.quantities import (
    PER_WORK,
    SHARE,
    WAITS_TOGETHER,
    Run,
    add_run_noise,
    between_excess,
    cpu_per_work,
    frame_estimates,
    frame_measure,
    interleaved,
    label_growth,
    make_run,
    side_estimates,
    wait_estimates,
    work_rate,
)
from wallflame.report.gate.results import (
    EXIT_CODES,
    FAIL,
    INCONCLUSIVE,
    PASS,
    SKIPPED,
    WAIT_EPS,
    Judged,
    Result,
)
from wallflame.report.gate.stats import Estimate, compare, holm
from wallflame.report.gate.thresholds import Thresholds


@dataclass
class Verdict:
    status: str
    results: list[Result]
    diff: Diff
    thresholds: Thresholds
    judged: list[Judged] = field(default_factory=list)
    method: str = ""
    runs: tuple[int, int] = (1, 1)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]

    def top_frames(self) -> list[Judged]:
        """The frames the summary shows: regressions first, then the heaviest."""
        frames = [j for j in self.judged if j.key.startswith("frame:") and j.tested]
        frames.sort(key=lambda j: (not j.regression, -max(j.a, j.b), j.name))
        return frames[:self.thresholds.top]

    def rows(self) -> list[Judged]:
        """What every output shows with its interval: the top frames, CPU per unit of work,
        the wait classes (and the judged ones together), and the locks of a wait class
        judged a regression."""
        grew = {j.key[5:] for j in self.judged if j.regression and j.key.startswith("wait:")}
        rest = [j for j in self.judged if not j.key.startswith("frame:")
                and (j.tested or j.key == WAITS_TOGETHER
                     or (j.key.startswith("lock:") and j.group in grew and j.delta > 0))]
        return [*self.top_frames(), *rest]


def judge(before: list[Run], after: list[Run], diff: Diff, t: Thresholds) -> Verdict:
    """The verdict on two sides, each a list of runs (see the module docstring)."""
    quality = [complete_data(before, after, t), same_collectors(before, after, t),
               same_machine(before, after, t), same_load(before, after, t)]
    judged, method = _judge_quantities(before, after, t)
    results = [*quality, *_results(judged, t, before, after), sensitivity(judged, t)]
    if any(r.status == INCONCLUSIVE for r in quality):
        status = INCONCLUSIVE
    elif any(r.status == FAIL for r in results):
        status = FAIL
    elif results[-1].status == INCONCLUSIVE:
        status = INCONCLUSIVE
    else:
        status = PASS
    return Verdict(status, results, diff, t, judged, method, (len(before), len(after)))


def ignored(t: Thresholds) -> re.Pattern[str] | None:
    """The frames ``t.ignore_frames`` leaves out (see ``make_run``'s ``cut``)."""
    return re.compile("|".join(f"(?:{p})" for p in t.ignore_frames)) if t.ignore_frames \
        else None


def judge_profiles(before: Profile | list[Profile], after: Profile | list[Profile],
                   t: Thresholds | None = None) -> Verdict:
    """``judge`` on loaded profiles (one or a series per side; no per-slice figures: the
    noise is sampling error alone)."""
    from wallflame.report.diff.compare import _meta_digest
    from wallflame.report.diff.compare import compare as diff_of

    t = t or Thresholds()
    sides = []
    for label, side in (("baseline", before), ("current", after)):
        profiles = side if isinstance(side, list) else [side]
        sides.append([make_run(label if len(profiles) == 1 else f"{label}/{i + 1}", p,
                               _meta_digest(p), cut=ignored(t))
                      for i, p in enumerate(profiles)])
    merged = [p if isinstance(p, Profile) else merge_all(p) for p in (before, after)]
    return judge(sides[0], sides[1], diff_of(merged[0], merged[1]), t)


def _estimates(runs: list[Run], names: list[str], measure: str, work: bool,
               lock_names: list[str], t: Thresholds, rate_ref: float | None = None
               ) -> list[dict[str, Estimate]]:
    """Every quantity of every run of a side (``wallflame.report.gate.quantities``); ``rate_ref``:
    waits per unit of work, at that rate of work (``wait_estimates``)."""
    per_run = []
    for r in runs:
        q = {f"frame:{k}": v for k, v in frame_estimates(r, names, measure).items()}
        cpw = cpu_per_work(r) if work else None
        if cpw is not None:
            q["cpu_per_work"] = cpw
        q.update(wait_estimates(r, t.wait_classes, lock_names, rate_ref))
        per_run.append(q)
    return per_run


def _sides(before: list[Run], after: list[Run], names: list[str], measure: str, work: bool,
           lock_names: list[str], t: Thresholds
           ) -> tuple[list[dict[str, Estimate]], float, float, float,
                      dict[str, tuple[float, float]]]:
    """Each side's estimates, with the between-run noise: the frames' excess used, the one
    measured in the series (and its degrees of freedom: 0 with one run per side) and the
    other quantities' run-to-run variation.  Sides collected at different times (not
    ``interleaved``) differ by what moves between collection times, which the spread within a side
    does not show: the priors are then floors, never lowered by a series."""
    # per unit of work, waits too: at the baseline's rate of work, in seconds per second
    rate_ref = work_rate(before) if measure == PER_WORK else None
    per_side = [_estimates(runs, names, measure, work, lock_names, t, rate_ref)
                for runs in (before, after)]
    if any("cpu_per_work" not in d for side in per_side for d in side):
        # a run without per-slice work (progress lines not spanning its window) would count
        # as zero CPU per unit of work in its series' mean: not judged at all instead
        for side in per_side:
            for d in side:
                d.pop("cpu_per_work", None)
    measured, dof = between_excess(per_side)
    apart = not interleaved(before, after)
    if not dof:  # one run per side: the prior
        excess = max(1.0, t.frame_run_excess)
    elif apart:  # the series' figure, but never below the prior
        excess = max(1.0, t.frame_run_excess, measured)
    else:
        excess = measured
    cv, per_side = add_run_noise(
        per_side, lambda k: t.run_cv if k == "cpu_per_work" else t.wait_run_cv,
        lambda k: 0.0 if k == "cpu_per_work" else WAIT_EPS, at_least_prior=apart)
    if measure == PER_WORK:
        # per unit of work, a frame moves between runs as CPU per unit of work does
        c = cv.get("cpu_per_work", (t.run_cv, 0.0))[0]
        for side in per_side:
            for d in side:
                for k, e in d.items():
                    if k.startswith("frame:"):
                        d[k] = Estimate(e.value, e.var + (c * e.value) ** 2, e.df)
    sides = [side_estimates(runs, per_run, excess)
             for runs, per_run in zip((before, after), per_side, strict=True)]
    return sides, excess, measured, dof, cv


def _judge_quantities(before: list[Run], after: list[Run], t: Thresholds
                      ) -> tuple[list[Judged], str]:
    """Every quantity of the two sides compared and tested, and the method said in words."""
    work = frame_measure(before, after) == PER_WORK
    ignore = ignored(t)
    names = sorted({n for r in (*before, *after) for n, w in r.functions.items()
                    if r.on and w >= t.min_frame_share * r.on
                    and not (ignore and ignore.search(n))})
    lock_names = sorted({n for r in (*before, *after) for n in r.locks
                         if r.lock_class.get(n) in t.wait_classes})
    measure = SHARE
    sides, excess, measured, dof, cv = _sides(before, after, names, measure, work,
                                              lock_names, t)
    judged_as = "share of on-CPU time"
    if "cpu_per_work" in sides[0] and "cpu_per_work" in sides[1]:
        fell = compare(sides[1]["cpu_per_work"], sides[0]["cpu_per_work"], t.alpha)
        if fell.p <= t.alpha and fell.delta > 0:
            # The same work with significantly less CPU: every other frame's share grows
            # although none got slower, so frames are judged per unit of work instead.
            measure = PER_WORK
            sides, excess, measured, dof, cv = _sides(before, after, names, measure, work,
                                                      lock_names, t)
            judged_as = ("on-CPU time per unit of work (CPU per unit of work fell "
                         f"significantly, p={fell.p:.2g}: shares grow when anything else "
                         "shrinks), and waits per unit of work too (as seconds per second "
                         "at the baseline's rate of work: a server that does more work "
                         "waits more per second without waiting more per request)")
    judged = _compared(sides, measure, before, after, t)
    tested = _tested(judged, t)
    noise = _noise_said(excess, measured, dof, cv, before, after, t)
    method = (f"Welch's t-test, one-sided (an increase), on {tested} quantities; Holm's "
              f"correction holds the chance of a false alarm at {t.alpha:g} for the whole "
              f"check; noise from the spread over each run's slices, never below sampling "
              f"error; {noise}; frames judged as {judged_as}")
    return judged, method


def _compared(sides: list[dict[str, Estimate]], measure: str, before: list[Run],
              after: list[Run], t: Thresholds) -> list[Judged]:
    """Each quantity both sides have, compared, with its minimum effect and its group."""
    keys = sorted(sides[0].keys() & sides[1].keys())
    unit = before[0].work_unit or "unit"
    judged = []
    for key in keys:
        kind = measure if key.startswith("frame:") else (
            "cpu_per_work" if key == "cpu_per_work" else "s_per_s")
        a, b = sides[0][key], sides[1][key]
        floor = t.min_effect_relative * abs(a.value)
        if kind == SHARE:
            floor = max(floor, t.min_effect_pp / 100)
        elif kind == "s_per_s":
            floor = max(floor, t.min_effect_s_per_s)
        group = next((r.lock_class[key[5:]] for r in (*before, *after)
                      if key.startswith("lock:") and key[5:] in r.lock_class), "")
        log_eps = None if kind in (SHARE, PER_WORK) else (
            0.0 if kind == "cpu_per_work" else WAIT_EPS)
        judged.append(Judged(key, kind, unit, compare(a, b, t.alpha, 0.95, t.power), floor,
                             group=group, log_eps=log_eps))
    return judged


def _tested(judged: list[Judged], t: Thresholds) -> int:
    """Test the quantities that can be tested, Holm's correction over all of them (marks each
    ``tested`` and ``regression``); how many were tested."""
    # Tested: every quantity but the locks (shown, not judged: which lock a wait belongs to
    # is sampled by the owner records, so a lock can go unnamed in one run and look "new" in
    # the next; the wait class holds every lock's exact wait), quantities that are zero on
    # both sides (nothing to see) and frames that cannot grow by the minimum effect (the
    # trunk, at nearly 100%).
    tested = [j for j in judged if not j.key.startswith("lock:") and j.key != WAITS_TOGETHER
              and (j.a or j.b) and not (j.kind == SHARE and j.a + j.min_effect >= 1)]
    alpha_each = t.alpha / max(1, len(tested))  # Holm's first (strictest) step
    for j in tested:
        j.tested = True
    for j in judged:
        j.cmp = compare(j.cmp.a, j.cmp.b, alpha_each, 0.95, t.power)
    for j, rej in zip(tested, holm([j.cmp.p for j in tested], t.alpha), strict=True):
        j.regression = rej and j.delta > j.min_effect
    return len(tested)


def _noise_said(excess: float, measured: float, dof: float,
                cv: dict[str, tuple[float, float]], before: list[Run], after: list[Run],
                t: Thresholds) -> str:
    """The between-run noise and the run-to-run spread used, in words."""
    prior = ("what the slices of each run show" if t.frame_run_excess <= 1 else
             f"{t.frame_run_excess:g}x what the slices of each run show")
    if not dof:
        between = f"one run per side: between-run noise not measured (taken to be {prior}: " \
                  "frame_run_excess)"
    else:
        between = (f"between-run noise measured over {dof:g} degrees of freedom: runs differ "
                   f"{measured:.2f}x as much as their slices predict")
        if excess > measured:
            between += (f"; the sides were not collected in turns, so what moves between "
                        f"collection times is not in that figure: taken to be {prior} "
                        "(frame_run_excess)")
    spread = [f"{k.split(':')[-1].replace('_', ' ')} {100 * c:.1f}% ({d:g} df)"
              for k, (c, d) in sorted(cv.items()) if d and c > 0 and not k.startswith("lock:")]
    priors = (f"{100 * t.run_cv:g}% for CPU per unit of work (run_cv) and "
              f"{100 * t.wait_run_cv:g}% for waits (wait_run_cv)")
    if not dof:
        run_noise = f"run-to-run spread not measurable with one run per side: taken as {priors}"
    elif not interleaved(before, after):
        run_noise = ("run-to-run spread measured in the series: " + (", ".join(spread) or
                                                                     "none above the priors")
                     + f"; sides not collected in turns: never below {priors}")
    else:
        run_noise = "run-to-run spread measured in the series: " + (", ".join(spread) or
                                                                    "none")
    return f"{between}; {run_noise}"


def _results(judged: list[Judged], t: Thresholds, before: list[Run] | None = None,
             after: list[Run] | None = None) -> list[Result]:
    out = []
    frames = [j for j in judged if j.key.startswith("frame:")]
    grew = sorted((j for j in frames if j.regression), key=lambda j: (-j.delta, j.name))
    if not frames:
        out.append(Result("frames", SKIPPED, "no on-CPU data"))
    elif grew:
        top = grew[0]
        out.append(Result("frames", FAIL,
                          f"{len(grew)} frame(s) grew beyond the noise; most: {top.name} "
                          f"{top.fmt(top.a)} -> {top.fmt(top.b)}, {top.interval()}", grew))
    else:
        out.append(Result("frames", PASS, f"no frame grew beyond the noise ({len(frames)} "
                          "judged)"))
    cpw = next((j for j in judged if j.key == "cpu_per_work"), None)
    if cpw is None:
        out.append(Result("cpu_per_work", SKIPPED, "work done not reported by every run in "
                          "the same unit with progress lines (docs/check.md)"))
    else:
        text = (f"on-CPU time per unit of work ({cpw.unit}): {cpw.fmt(cpw.a)} -> {cpw.fmt(cpw.b)}, "
                f"{cpw.interval()}")
        out.append(Result("cpu_per_work", FAIL if cpw.regression else PASS, text, [cpw]))
    for cls in t.wait_classes:
        j = next((x for x in judged if x.key == f"wait:{cls}"), None)
        if j is None:
            out.append(Result(f"wait_{cls}", SKIPPED, "no off-CPU data or window unknown"))
            continue
        locks = sorted((x for x in judged if x.key.startswith("lock:") and x.group == cls
                        and x.delta > 0), key=lambda x: (-x.delta, x.name))
        text = f"{cls} wait {j.fmt(j.a)} -> {j.fmt(j.b)}, {j.interval()}"
        moved = _moved_from(j, judged, t) if j.regression else ""
        if moved:
            out.append(Result(f"wait_{cls}", PASS, text + moved, [j]))
        elif j.regression:
            tail = f"; most grown lock: {locks[0].name} ({locks[0].interval()})" if locks else ""
            grown = label_growth(before or [], after or [], cls)
            if grown:
                label, x, y = grown[0]
                tail += f"; most grown wait: {cls}: {label} ({x:.3f} -> {y:.3f} s/s)"
            out.append(Result(f"wait_{cls}", FAIL, text + tail, [j, *locks[:3]]))
        else:
            out.append(Result(f"wait_{cls}", PASS, text, [j]))
    return out


def _moved_from(j: Judged, judged: list[Judged], t: Thresholds) -> str:
    """Why a wait class that grew is not a regression, or "": the judged classes together
    fell significantly (a one-sided test at ``alpha``), so the class took its time from the
    others (no more waiting for the disk, more for a latch) instead of adding to it."""
    together = next((x for x in judged if x.key == WAITS_TOGETHER), None)
    if together is None:
        return ""
    fell = compare(together.cmp.b, together.cmp.a, t.alpha)
    if fell.p > t.alpha or together.delta >= 0:
        return ""
    shrank = sorted((x for x in judged if x.key.startswith("wait:") and x.delta < 0),
                    key=lambda x: (x.delta, x.name))
    source = f", most of it {shrank[0].name} ({shrank[0].fmt(shrank[0].delta, True)})" \
        if shrank else ""
    return (f"; grew while the judged waits together fell, {together.fmt(together.a)} -> "
            f"{together.fmt(together.b)} (p={fell.p:.2g}{source}): time moved into this "
            "class from the others, not added, so not a regression")


def sensitivity(judged: list[Judged], t: Thresholds) -> Result:
    """Whether the comparison could have seen the program use ``t.sensitivity`` more CPU:
    in CPU per unit of work (when reported), or concentrated in any one of its three
    heaviest frames under half of the on-CPU time (the frames above are the program's trunk:
    their share saturates, and a change in them shows in the frames they call)."""
    cpw = next((j for j in judged if j.key == "cpu_per_work"), None)
    if cpw is not None and cpw.detectable <= t.sensitivity * cpw.a:
        return Result("sensitivity", PASS,
                      f"could have seen {100 * t.sensitivity:g}% more CPU per unit of work: "
                      f"changes from {cpw.fmt(cpw.detectable, True)} "
                      f"({cpw.relative(cpw.detectable)}) are seen")
    total = cpw.a if cpw is not None else 1.0
    frames = sorted((j for j in judged if j.key.startswith("frame:")
                     and j.a <= 0.5 * (total if j.kind == PER_WORK else 1.0)),
                    key=lambda j: (-j.a, j.name))
    if not frames:
        return Result("sensitivity", INCONCLUSIVE, "nothing to judge: no on-CPU data on "
                      "one side")
    gaps = [(j, _needed(j, t.sensitivity, total)) for j in frames[:3]]
    blind = [(j, need) for j, need in gaps if not j.detectable <= need]
    if blind:
        j, need = max(blind, key=lambda x: x[0].detectable / x[1])
        what = f"{j.name}'s share" if j.kind == SHARE else f"{j.name}'s CPU per unit of work"
        return Result("sensitivity", INCONCLUSIVE,
                      f"with these runs a change under {j.fmt(j.detectable, True)} of "
                      f"{what} would go unseen: {100 * t.sensitivity:g}% more CPU in it is "
                      f"{j.fmt(need, True)}; collect longer or add runs")
    j, need = max(gaps, key=lambda x: x[0].detectable / x[1])
    return Result("sensitivity", PASS,
                  f"could have seen {100 * t.sensitivity:g}% more CPU in any top frame: "
                  f"the least sensitive, {j.name}, shows changes from "
                  f"{j.fmt(j.detectable, True)} ({100 * t.sensitivity:g}% more CPU in it: "
                  f"{j.fmt(need, True)})")


def _needed(j: Judged, extra: float, total: float) -> float:
    """How much a frame's value grows when the program spends ``extra`` (a fraction) more
    CPU, all of it in that frame: ``extra (1 - s) / (1 + extra)`` of the on-CPU share, or
    ``extra`` of the CPU per unit of work."""
    if j.kind == SHARE:
        return extra * (1 - j.a) / (1 + extra)
    return extra * total


__all__ = ["FAIL", "INCONCLUSIVE", "PASS", "SKIPPED", "Estimate", "Judged", "Result", "Verdict",
           "judge", "judge_profiles"]
