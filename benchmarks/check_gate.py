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

Usage (each round holds ``/tmp/wallflame-measure.lock`` while it collects)::

    make -C samples bin/handlers
    python3 benchmarks/check_gate.py --rounds 30 --out /tmp/gate-runs    # collect, then judge
    python3 benchmarks/check_gate.py --out /tmp/gate-runs --judge-only   # judge again

Runs already in ``--out`` are kept (a second call adds the missing rounds only).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HANDLERS = ROOT / "samples" / "bin" / "handlers"
LOCK = "/tmp/wallflame-measure.lock"
KINDS = ("base-a", "base-b", "slow")


def collect(run: Path, slow: bool, seconds: float) -> None:
    cmd = [sys.executable, "-m", "wallflame", "collect", "-o", str(run), "--duration",
           str(seconds), "--", str(HANDLERS), "--duration", str(seconds + 3)]
    if slow:
        cmd.append("--slow-auth")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False,
                       cwd=ROOT)
    if r.returncode != 0:
        sys.exit(f"check_gate: {' '.join(cmd)} failed (exit {r.returncode}): "
                 f"{r.stderr.strip().splitlines()[-1:]}")


def collect_rounds(out: Path, rounds: int, seconds: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for r in range(rounds):
        todo = [k for k in KINDS if not (out / f"{k}-{r:02d}" / "meta.json").exists()]
        if not todo:
            continue
        order = [KINDS[(r + i) % 3] for i in range(3)]  # rotate: no kind always first
        with open(LOCK, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            for kind in order:
                if kind in todo:
                    run = out / f"{kind}-{r:02d}"
                    if run.exists():
                        subprocess.run(["rm", "-rf", str(run)], check=True)
                    collect(run, kind == "slow", seconds)
        print(f"round {r + 1}/{rounds} collected ({', '.join(order)})", flush=True)


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
           "--json", str(summary)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False,
                       cwd=ROOT)
    if r.returncode not in (0, 1, 7):
        sys.exit(f"check_gate: {' '.join(cmd)} failed (exit {r.returncode}): {r.stderr}")
    data = json.loads(summary.read_text())
    return r.returncode, r.stdout, data


def names_auth(data: dict[str, object]) -> bool:
    results = data.get("results")
    assert isinstance(results, list)
    return any(r["status"] == "regression" and any(c["name"] == "h_auth" for c in r["changes"])
               for r in results)


def top_frame(data: dict[str, object], name: str) -> str:
    """A quantity's change, its 95% interval and the change it could have seen."""
    for c in data.get("quantities", []):  # type: ignore[attr-defined]
        if c["name"] == name:
            return (f"{name} {c['delta_text']} [{c['low_text']}, {c['high_text']}], "
                    f"unseen under {c['detectable_text']}, p={c['p']:.2g}")
    return f"{name}: not judged"


def judge(out: Path) -> int:
    runs = {k: sorted(out.glob(f"{k}-[0-9][0-9]")) for k in KINDS}
    n = min(len(v) for v in runs.values())
    tmp = out / "_check"
    tmp.mkdir(exist_ok=True)
    print(f"{n} complete rounds in {out}")
    tally: dict[str, list[int]] = {}

    def record(what: str, code: int, extra: bool = True) -> None:
        t = tally.setdefault(what, [0, 0, 0, 0])  # pass, regression, inconclusive, named
        t[{0: 0, 1: 1, 7: 2}[code]] += 1
        t[3] += int(code == 1 and extra)

    for r in range(n):
        a, b, s = runs["base-a"][r], runs["base-b"][r], runs["slow"][r]
        for x, y in ((a, b), (b, a)):  # either may be the older baseline
            code, _, data = check([x], [y], tmp)
            record("unchanged single-run pairs (both directions)", code)
            print(f"  unchanged {x.name} vs {y.name}: exit {code}; {top_frame(data, 'h_auth')}")
        code, _, data = check([a], [s], tmp)
        named = names_auth(data)
        record("slower h_auth, single-run pairs", code, named)
        print(f"  slower    {a.name} vs {s.name}: exit {code}"
              f"{' (h_auth named)' if named else ''}; {top_frame(data, 'h_auth')}; "
              f"{top_frame(data, 'cpu per work')}")
    for g in range(n // 3):
        sl = slice(3 * g, 3 * g + 3)
        code, _, data = check(runs["base-a"][sl], runs["base-b"][sl], tmp)
        record("unchanged 3-run series", code)
        print(f"  unchanged series {g}: exit {code}; {top_frame(data, 'h_auth')}")
        code, _, data = check(runs["base-a"][sl], runs["slow"][sl], tmp)
        named = names_auth(data)
        record("slower h_auth, 3-run series", code, named)
        print(f"  slower series {g}: exit {code}{' (h_auth named)' if named else ''}; "
              f"{top_frame(data, 'h_auth')}")
    print()
    for what, (ok, reg, inc, named) in tally.items():
        total = ok + reg + inc
        line = f"{what}: {total} checks, {reg} judged a regression, {ok} pass, {inc} inconclusive"
        if "slower" in what:
            line += f"; caught and h_auth named {named}/{total}"
        print(line)
    return 0


def judge_all_pairs(out: Path) -> None:
    """Every ordered pair of distinct unchanged runs, and every (unchanged, slower) pair, judged
    in this process with the code ``wallflame check`` runs (each run loaded once).  Pairs
    share runs, so the counts are not independent trials; the rates are still unbiased."""
    sys.path.insert(0, str(ROOT))
    from wallflame.report.check import FAIL, INCONCLUSIVE, Thresholds, ignored, judge
    from wallflame.report.diff.compare import compare
    from wallflame.report.series import load_side

    t = Thresholds()
    cut = ignored(t)
    base = [p for k in ("base-a", "base-b") for p in sorted(out.glob(f"{k}-[0-9][0-9]"))]
    slow = sorted(out.glob("slow-[0-9][0-9]"))
    loaded = {p: load_side(str(p), p.name, cut) for p in (*base, *slow)}

    def verdict(a: Path, b: Path) -> tuple[str, bool, float]:
        (ra, pa), (rb, pb) = loaded[a], loaded[b]
        v = judge(ra, rb, compare(pa, pb, (a.name, b.name)), t)
        auth = next((j for j in v.judged if j.name == "h_auth"), None)
        named = v.status == FAIL and bool(auth and auth.regression)
        return v.status, named, auth.delta if auth else float("nan")

    for what, pairs in (("unchanged, all ordered pairs", [(a, b) for a in base for b in base
                                                         if a != b]),
                        ("slower h_auth, all (unchanged, slower) pairs",
                         [(a, b) for a in base for b in slow])):
        counts = {FAIL: 0, INCONCLUSIVE: 0, "pass": 0}
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
        if what.startswith("slower"):
            line += f"; caught and h_auth named {named}/{len(pairs)}"
        print(line + (f" ({', '.join(alarms)})" if alarms else ""), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/wallflame-gate-runs"))
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--seconds", type=float, default=20.0, help="collection window per run")
    ap.add_argument("--judge-only", action="store_true")
    ap.add_argument("--all-pairs", action="store_true",
                    help="also judge every pair of runs across rounds (in this process)")
    args = ap.parse_args()
    if not HANDLERS.exists():
        sys.exit(f"check_gate: {HANDLERS} missing: make -C samples bin/handlers")
    if not args.judge_only:
        collect_rounds(args.out, args.rounds, args.seconds)
    os.environ.setdefault("WALLFLAME_NO_CACHE", "1")
    code = judge(args.out)
    if args.all_pairs:
        judge_all_pairs(args.out)
    return code


if __name__ == "__main__":
    sys.exit(main())
