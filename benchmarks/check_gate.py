"""The CI gate's error rates, measured live: false alarms on unchanged code, detection of a
small CPU regression, for single runs and for series of runs.

The target is ``samples/bin/handlers`` (a CPU-bound service with eight handlers; ``--slow-auth``
makes ``h_auth``, 12% of the work, 25% slower: about 3% more CPU per request).  Each round
collects three runs in a rotating order: two of the unchanged program (``base-a``, ``base-b``)
and one of the slower one (``slow``), so that drifts of the machine's load hit all three
alike.  Then, with ``wallflame check``'s default settings:

* unchanged single-run pairs: ``base-a[r]`` against ``base-b[r]`` and the reverse;
* changed single-run pairs: ``base-a[r]`` against ``slow[r]``; caught means exit 1 with
  ``h_auth`` named among the frames that grew (CPU per request alone does not name it);
* series: rounds in groups of three, ``base-a`` x3 against ``slow`` x3 (and against
  ``base-b`` x3 for false alarms of series).

``--busy K`` collects every other round (rounds 1, 3, 5, ...) beside K processes that spin
(not the target's, not the collect's): the rest of the machine busy for those rounds, quiet
for the others, as a shared CI machine is at one time and not at another.  Each run records
the machine's load (``machine`` in meta.json); ``--noise`` then shows how much more runs
differ across rounds than within them, and the pairs across rounds how the gate treats runs
collected under different load.

``--noise`` prints how much the unchanged runs differ from one another (``between_runs``):
CPU per unit of work and each wait class on the log scale the check uses (their run-to-run
coefficient of variation, which one run per side must assume: ``run_cv``, ``wait_run_cv``),
within rounds (runs that shared the machine's load) and over every round, and how much more
the frames' shares differ between runs than each run's slices predict.  ``-t KEY=VALUE`` is
passed to every check (``-t run_cv=0.02``: the false-alarm rate with a measured value).
``--sample mix`` runs ``samples/bin/mix`` instead (no work reported; its mutex, sleep and
condvar waits; the changed run has ``--extra-ms 1``, named when ``extra_work`` is).

Usage (each round holds ``/tmp/wallflame-measure.lock`` while it collects)::

    make -C samples bin/handlers
    .venv/bin/python benchmarks/check_gate.py --rounds 30 --out /tmp/gate-runs  # collect, judge
    .venv/bin/python benchmarks/check_gate.py --out /tmp/gate-runs --judge-only   # judge again
    .venv/bin/python benchmarks/check_gate.py --out /tmp/gate-runs --judge-only --noise

Runs already in ``--out`` are kept (a second call adds the missing rounds only).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.rows import Row, row, write_rows  # noqa: E402

HANDLERS = ROOT / "samples" / "bin" / "handlers"
LOCK = "/tmp/wallflame-measure.lock"
KINDS = ("base-a", "base-b", "slow")
#: Between rounds the lock is left free this long: flock is not fair, and a loop that takes
#: it again at once would keep every other measurement waiting until the last round.
ROUND_PAUSE_S = 20.0
#: sample -> (program, the changed run's arguments, the frame a caught change must name)
SAMPLES = {"handlers": (HANDLERS, ["--slow-auth"], "h_auth"),
           "mix": (ROOT / "samples" / "bin" / "mix", ["--extra-ms", "1"], "extra_work")}
SAMPLE = "handlers"
#: ``-t KEY=VALUE`` given to every check
THRESHOLDS: list[str] = []


def collect(run: Path, slow: bool, seconds: float) -> None:
    program, changed, _ = SAMPLES[SAMPLE]
    cmd = [sys.executable, "-m", "wallflame", "collect", "-o", str(run), "--duration",
           str(seconds), "--", str(program), "--duration", str(seconds + 3)]
    if slow:
        cmd += changed
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False,
                       cwd=ROOT)
    if r.returncode != 0:
        sys.exit(f"check_gate: {' '.join(cmd)} failed (exit {r.returncode}): "
                 f"{r.stderr.strip().splitlines()[-1:]}")


def spinners(count: int) -> list[int]:
    """``count`` processes spinning for ten minutes at most, started through a shell that
    exits at once (so not descendants of this process); their PIDs."""
    code = "import time\nend = time.monotonic() + 600\nwhile time.monotonic() < end: pass\n"
    pids = []
    for _ in range(count):
        r = subprocess.run(["sh", "-c", '"$0" -c "$1" >/dev/null 2>&1 & echo $!',
                            sys.executable, code], capture_output=True, text=True, check=True)
        pids.append(int(r.stdout.split()[0]))
    return pids


def collect_rounds(out: Path, rounds: int, seconds: float, busy: int = 0,
                   pause_s: float = ROUND_PAUSE_S) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for r in range(rounds):
        todo = [k for k in KINDS if not (out / f"{k}-{r:02d}" / "meta.json").exists()]
        if not todo:
            continue
        order = [KINDS[(r + i) % 3] for i in range(3)]  # rotate: no kind always first
        with open(LOCK, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            spinning = spinners(busy) if busy and r % 2 == 1 else []
            try:
                for kind in order:
                    if kind in todo:
                        run = out / f"{kind}-{r:02d}"
                        if run.exists():
                            subprocess.run(["rm", "-rf", str(run)], check=True)
                        collect(run, kind == "slow", seconds)
            finally:
                for pid in spinning:
                    os.kill(pid, signal.SIGKILL)
        print(f"round {r + 1}/{rounds} collected ({', '.join(order)})"
              + (f", beside {busy} spinning processes" if spinning else ""), flush=True)
        time.sleep(pause_s)  # let other measurements waiting for the lock take it


def check(base: list[Path], current: list[Path], tmp: Path) -> tuple[int, str, dict[str, object]]:
    """Run ``wallflame check`` (a series is a directory of run directories: here, symlinks)."""
    sides = []
    for name, runs in (("baseline", base), ("current", current)):
        if len(runs) == 1:
            sides.append(str(runs[0]))
            continue
        d = tmp / f"{name}-{'+'.join(r.name for r in runs)}"
        d.mkdir(parents=True, exist_ok=True)
        for run in runs:
            link = d / run.name
            if link.is_symlink():
                link.unlink()
            link.symlink_to(run.resolve())
        sides.append(str(d))
    summary = tmp / "check.json"
    cmd = [sys.executable, "-m", "wallflame", "check", *sides, "--html", "",
           "--json", str(summary), *(x for kv in THRESHOLDS for x in ("-t", kv))]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False,
                       cwd=ROOT)
    if r.returncode not in (0, 1, 7):
        sys.exit(f"check_gate: {' '.join(cmd)} failed (exit {r.returncode}): {r.stderr}")
    data = json.loads(summary.read_text())
    return r.returncode, r.stdout, data


def names_auth(data: dict[str, object]) -> bool:
    """Whether the check failed naming the changed frame (``h_auth`` for handlers)."""
    frame = SAMPLES[SAMPLE][2]
    results = data.get("results")
    assert isinstance(results, list)
    return any(r["status"] == "regression" and any(c["name"] == frame for c in r["changes"])
               for r in results)


def top_frame(data: dict[str, object], name: str) -> str:
    """A quantity's change, its 95% interval and the change it could have seen."""
    for c in data.get("quantities", []):  # type: ignore[attr-defined]
        if c["name"] == name:
            return (f"{name} {c['delta_text']} [{c['low_text']}, {c['high_text']}], "
                    f"unseen under {c['detectable_text']}, p={c['p']:.2g}")
    return f"{name}: not judged"


def complete_rounds(out: Path) -> dict[str, list[Path]]:
    """Each kind's runs of the rounds whose three runs are all finished (a round being
    collected, or one whose collect failed, is left out)."""
    done = [r for r in range(100) if all((out / f"{k}-{r:02d}" / "meta.json").exists()
                                          for k in KINDS)]
    return {k: [out / f"{k}-{r:02d}" for r in done] for k in KINDS}


def judge(out: Path, tally: dict[str, list[int]] | None = None) -> int:
    """Judge the complete rounds; ``tally`` (filled when given): per kind of check, its
    counts of pass, regression, inconclusive and regressions naming the changed frame."""
    runs = complete_rounds(out)
    n = len(runs["slow"])
    tmp = out / "_check"
    tmp.mkdir(exist_ok=True)
    print(f"{n} complete rounds in {out}")
    tally = {} if tally is None else tally
    frame = SAMPLES[SAMPLE][2]

    def record(what: str, code: int, extra: bool = True) -> None:
        t = tally.setdefault(what, [0, 0, 0, 0])  # pass, regression, inconclusive, named
        t[{0: 0, 1: 1, 7: 2}[code]] += 1
        t[3] += int(code == 1 and extra)

    for r in range(n):
        a, b, s = runs["base-a"][r], runs["base-b"][r], runs["slow"][r]
        for x, y in ((a, b), (b, a)):  # either may be the older baseline
            code, _, data = check([x], [y], tmp)
            record("unchanged single-run pairs (both directions)", code)
            print(f"  unchanged {x.name} vs {y.name}: exit {code}; {top_frame(data, frame)}"
                  f"{'; ' + alarm_frames(data) if code == 1 else ''}")
        code, _, data = check([a], [s], tmp)
        named = names_auth(data)
        record("slower, single-run pairs", code, named)
        print(f"  slower    {a.name} vs {s.name}: exit {code}"
              f"{f' ({frame} named)' if named else ''}; {top_frame(data, frame)}; "
              f"{top_frame(data, 'cpu per work')}")
    for g in range(n // 3):
        sl = slice(3 * g, 3 * g + 3)
        code, _, data = check(runs["base-a"][sl], runs["base-b"][sl], tmp)
        record("unchanged 3-run series", code)
        print(f"  unchanged series {g}: exit {code}; {top_frame(data, frame)}")
        code, _, data = check(runs["base-a"][sl], runs["slow"][sl], tmp)
        named = names_auth(data)
        record("slower, 3-run series", code, named)
        print(f"  slower series {g}: exit {code}{f' ({frame} named)' if named else ''}; "
              f"{top_frame(data, frame)}")
    print()
    for what, (ok, reg, inc, named) in tally.items():
        total = ok + reg + inc
        line = f"{what}: {total} checks, {reg} judged a regression, {ok} pass, {inc} inconclusive"
        if "slower" in what:
            line += f"; caught and {frame} named {named}/{total}"
        if not what.startswith("slower"):
            line += f"; false-alarm rate {interval(reg, total)}"
        print(line)
    return 0


def interval(k: int, n: int) -> str:
    """``k`` of ``n`` as a rate with its exact (Clopper-Pearson) 95% interval: with 0 of 30
    the rate is below 11.6%; the gate's stated rate is 1%."""
    from wallflame.report.gate.stats import _betainc

    def quantile(q: float, a: float, b: float) -> float:
        lo, hi = 0.0, 1.0
        for _ in range(100):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if _betainc(a, b, mid) < q else (lo, mid)
        return (lo + hi) / 2

    low = 0.0 if k == 0 else quantile(0.025, k, n - k + 1)
    high = 1.0 if k == n else quantile(0.975, k + 1, n - k)
    return f"{100 * k / n:.1f}% (95% CI {100 * low:.1f}% to {100 * high:.1f}%)"


def headline(tally: dict[str, list[int]]) -> list[Row]:
    """The gate's error rates as the suite's rows (no peer tool): the false-alarm rate of
    unchanged runs and the share of slower ones caught naming the changed frame."""
    rows = []
    for what, (ok, reg, inc, named) in tally.items():
        total = ok + reg + inc
        if not total:
            continue
        label = what.removesuffix(" (both directions)")
        if what.startswith("slower"):
            rows.append(row(f"{label}: caught, frame named ({named} of {total}, {inc} "
                            "inconclusive)", 100 * named / total, unit="%", better="higher"))
        else:
            rows.append(row(f"{label}: false alarms ({reg} of {total}, {inc} inconclusive)",
                            100 * reg / total, unit="%"))
    return rows


def alarm_frames(data: dict[str, object]) -> str:
    """What a false alarm judged a regression, with its interval."""
    return "; ".join(f"{c['name']} {c['delta_text']} [{c['low_text']}, {c['high_text']}]"
                     for c in data.get("quantities", [])  # type: ignore[attr-defined]
                     if c["regression"])


def judge_all_pairs(out: Path) -> None:
    """Every ordered pair of distinct unchanged runs, and every (unchanged, slower) pair, judged
    in this process with the code ``wallflame check`` runs (each run loaded once).  Pairs
    share runs, so the counts are not independent trials; the rates are still unbiased."""
    sys.path.insert(0, str(ROOT))
    from wallflame.report.diff.compare import compare
    from wallflame.report.gate.check import FAIL, INCONCLUSIVE, ignored, judge
    from wallflame.report.gate.series import load_side
    from wallflame.report.gate.thresholds import Thresholds

    t = Thresholds()
    for kv in THRESHOLDS:
        key, _, value = kv.partition("=")
        t.set(key, value, "-t")
    cut = ignored(t)
    frame = SAMPLES[SAMPLE][2]
    rounds = complete_rounds(out)
    base = [*rounds["base-a"], *rounds["base-b"]]
    slow = rounds["slow"]
    loaded = {p: load_side(str(p), p.name, cut) for p in (*base, *slow)}

    load_differed = {"n": 0}

    def verdict(a: Path, b: Path) -> tuple[str, bool, float]:
        (ra, pa), (rb, pb) = loaded[a], loaded[b]
        v = judge(ra, rb, compare(pa, pb, (a.name, b.name)), t)
        auth = next((j for j in v.judged if j.name == frame), None)
        named = v.status == FAIL and bool(auth and auth.regression)
        load_differed["n"] += any(r.name == "same_load" and r.status == INCONCLUSIVE
                                  for r in v.results)
        return v.status, named, auth.delta if auth else float("nan")

    for what, pairs in (("unchanged, all ordered pairs", [(a, b) for a in base for b in base
                                                         if a != b]),
                        ("slower, all (unchanged, slower) pairs",
                         [(a, b) for a in base for b in slow])):
        counts = {FAIL: 0, INCONCLUSIVE: 0, "pass": 0}
        load_differed["n"] = 0
        named = 0
        alarms = []
        for a, b in pairs:
            status, hit, _ = verdict(a, b)
            counts[status] += 1
            named += hit
            if status == FAIL and what.startswith("unchanged"):
                alarms.append(f"{a.name} vs {b.name}")
        line = (f"{what}: {len(pairs)} checks, {counts[FAIL]} judged a regression, "
                f"{counts['pass']} pass, {counts[INCONCLUSIVE]} inconclusive")
        if load_differed["n"]:
            line += f" ({load_differed['n']} of them collected under different load)"
        if what.startswith("slower"):
            line += f"; caught and {frame} named {named}/{len(pairs)}"
        print(line + (f" ({', '.join(alarms)})" if alarms else ""), flush=True)


def between_runs(runs: list[Path]) -> None:
    """How much unchanged runs differ from one another, on the scales the check compares
    them (see the module docstring): printed, with the pairs of runs of one round (``-a``,
    ``-b``, collected back to back) and over all of them."""
    sys.path.insert(0, str(ROOT))
    from wallflame.profile import WAIT_CLASSES
    from wallflame.report.gate.check import WAIT_EPS, ignored
    from wallflame.report.gate.quantities import (
        SHARE,
        cpu_per_work,
        frame_estimates,
        wait_estimates,
    )
    from wallflame.report.gate.series import load_side
    from wallflame.report.gate.stats import pooled_excess
    from wallflame.report.gate.thresholds import Thresholds

    cut = ignored(Thresholds())
    loaded = {p: load_side(str(p), p.name, cut)[0][0] for p in runs}
    logs: dict[str, dict[Path, float]] = {}
    within: dict[str, list[float]] = {}  # each run's own (slices') variance, log scale
    for p, r in loaded.items():
        cpw = cpu_per_work(r)
        ests = {"cpu per unit of work": (cpw, 0.0)} if cpw is not None else {}
        ests.update({k: (e, WAIT_EPS) for k, e in wait_estimates(r, WAIT_CLASSES, []).items()})
        for key, (e, eps) in ests.items():
            logs.setdefault(key, {})[p] = math.log(e.value + eps)
            within.setdefault(key, []).append(e.var / (e.value + eps) ** 2)
    pairs = [(a, a.with_name(a.name.replace("base-a", "base-b"))) for a in runs
             if a.name.startswith("base-a")]
    print(f"between-run noise of {len(runs)} unchanged runs ({len(pairs)} rounds):")
    for name, v in sorted(logs.items()):
        if len(v) < 3:
            continue
        mean = statistics.fmean(v.values())
        level = math.exp(mean) - (0.0 if name.startswith("cpu") else WAIT_EPS)
        if level < 1e-3:
            continue  # a class these runs (nearly) never wait in
        every = statistics.variance(v.values())
        diffs = [v[a] - v[b] for a, b in pairs if a in v and b in v]
        # a pair's difference has twice a run's variance
        in_rounds = sum(d * d for d in diffs) / (2 * len(diffs)) if diffs else 0.0
        own = statistics.fmean(within[name])
        print(f"  {name}: typical {level:.4g}; run-to-run CV {100 * math.sqrt(every):.1f}% "
              f"over every run ({len(v) - 1} df), {100 * math.sqrt(in_rounds):.1f}% within "
              f"rounds ({len(diffs)} df); beyond the slices' own "
              f"{100 * math.sqrt(own):.1f}%: {100 * math.sqrt(max(0.0, every - own)):.1f}% "
              f"and {100 * math.sqrt(max(0.0, in_rounds - own)):.1f}%")
    names = sorted({n for r in loaded.values() for n, w in r.functions.items()
                    if r.on and w >= 0.005 * r.on})
    per_run = [frame_estimates(r, names, SHARE) for r in loaded.values()]
    series = [[d[n] for d in per_run] for n in names if all(n in d for d in per_run)]
    excess, dof = pooled_excess(series)
    within_pairs = [[frame_estimates(loaded[x], names, SHARE) for x in (a, b)]
                    for a, b in pairs if a in loaded and b in loaded]
    pair_series = [[d[n] for d in pr] for pr in within_pairs for n in names
                   if all(n in d for d in pr)]
    excess_in, dof_in = pooled_excess(pair_series)
    print(f"  frames' shares: runs differ {excess:.2f}x as much (in variance) as their slices "
          f"predict over every run ({dof:g} df), {excess_in:.2f}x within rounds "
          f"({dof_in:g} df)")


def main() -> int:
    global SAMPLE
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/wallflame-gate-runs"))
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--seconds", type=float, default=20.0, help="collection window per run")
    ap.add_argument("--judge-only", action="store_true")
    ap.add_argument("--all-pairs", action="store_true",
                    help="also judge every pair of runs across rounds (in this process)")
    ap.add_argument("--sample", choices=sorted(SAMPLES), default="handlers")
    ap.add_argument("--busy", type=int, default=0, metavar="K",
                    help="collect every other round beside K spinning processes")
    ap.add_argument("--noise", action="store_true",
                    help="also print how much the unchanged runs differ from one another")
    ap.add_argument("-t", dest="thresholds", action="append", default=[],
                    metavar="KEY=VALUE", help="a threshold given to every check")
    ap.add_argument("--round-pause", type=float, default=ROUND_PAUSE_S, metavar="S",
                    help="seconds the measurement lock is left free between rounds")
    ap.add_argument("--json", type=Path, help="also write the headline rows here (run.py)")
    args = ap.parse_args()
    SAMPLE = args.sample
    THRESHOLDS.extend(args.thresholds)
    program = SAMPLES[SAMPLE][0]
    subprocess.run(["make", "-s", "-C", str(ROOT / "samples"), f"bin/{program.name}"],
                   capture_output=True, check=False)
    if not program.exists():
        sys.exit(f"check_gate: {program} missing: make -C samples bin/{program.name}")
    if not args.judge_only:
        collect_rounds(args.out, args.rounds, args.seconds, args.busy, args.round_pause)
    os.environ.setdefault("WALLFLAME_NO_CACHE", "1")
    tally: dict[str, list[int]] = {}
    code = judge(args.out, tally)
    if args.json:
        write_rows(args.json, headline(tally))
    if args.all_pairs:
        judge_all_pairs(args.out)
    if args.noise:
        rounds = complete_rounds(args.out)
        between_runs(sorted([*rounds["base-a"], *rounds["base-b"]]))
    return code


if __name__ == "__main__":
    sys.exit(main())
