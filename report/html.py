"""The self-contained HTML report: one file, no network, scripts allowed only by hash.

Everything the target controls is hostile here.  Autoescape is on; the data reaches the page
once, through ``|tojson`` inside ``<script type="application/json">`` (whose encoder also
breaks up ``://`` so no URL appears in the file); the page's own JS and CSS are inlined and
allowed by the sha256 of their exact text in a Content-Security-Policy ``<meta>``; static
markup passes every target string through ``vis`` (control and bidi characters made visible,
length capped) so the page informs with JavaScript blocked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from contextlib import suppress
from functools import lru_cache
from typing import IO, TYPE_CHECKING, Any

import wallflame
from wallflame import cachedir
from wallflame.amounts import SECONDS, percent, readable
from wallflame.classify import wait_label as sub_label
from wallflame.output import write_bytes
from wallflame.profile import OFF, RUNNABLE, UNIT_NS, WAIT_CLASSES, Profile, StackKey
from wallflame.report.findings import idle_tids, summarize
from wallflame.report.page_assets import page_assets, templates_dir
from wallflame.report.pageruntime import Markup, escape
from wallflame.report.palette import swatch_css
from wallflame.report.topstacks import kernel_item, stack_runs, top_rows
from wallflame.report.tree import CLASSES, MAX_NODES, build_tree, visible
from wallflame.threadgroups import display_name, display_names, merge_rows, name_pattern
from wallflame.waitclasses import BY_NAME, FALLBACK, page_table

if TYPE_CHECKING:  # Jinja2 is imported when a template is compiled (see report/pagecache.py)
    from jinja2 import Environment, FileSystemBytecodeCache

#: Scripts and styles inlined into every page, in order.
SCRIPTS = ("flamegraph.js", "timeline.js", "report.js")
STYLES = ("report.css",)
TOP_STACKS = 20
COVERAGE_OK = (0.9, 1.1)
#: Each class's label (``waitclasses``), for the legend, the tables' heads and the top stacks.
LABELS = {name: c.label for name, c in BY_NAME.items()}


def _html_safe(json_text: str) -> str:
    """JSON text that may sit inside ``<script>``: as Jinja2's ``tojson`` escapes it, and with
    ``://`` broken up so that no URL appears in the file."""
    return (json_text.replace("://", ":\\/\\/").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("&", "\\u0026").replace("'", "\\u0027"))


def tojson(value: Any) -> Markup:
    """The page's ``tojson`` filter: Jinja2's (HTML-safe JSON), with sorted keys, compact
    separators and no URL."""
    return Markup(_html_safe(json.dumps(value, sort_keys=True, separators=(",", ":"))))


def _vis(value: Any, cap: int = 240) -> Markup:
    text = str(escape(visible(str(value), cap)))
    return Markup(text.replace("://", ":&#47;&#47;"))


@lru_cache(maxsize=1)
def _cache_class() -> type[FileSystemBytecodeCache]:
    from hashlib import sha1

    from jinja2 import FileSystemBytecodeCache
    from jinja2.bccache import Bucket

    class _Cache(FileSystemBytecodeCache):
        """Compiled templates kept between runs (compiling them costs more than rendering
        a 20,000-stack report).  Entries are keyed by template name and checked against a
        checksum of the template's source, of what compiling it depends on besides
        (``fingerprint``: the environment's options, and how each filter and test is
        called) and of Jinja2's bytecode version, so an edited template, another wallflame
        or another Python is simply compiled again.  A cache that cannot be written is no
        error."""

        fingerprint = ""

        def get_source_checksum(self, source: str) -> str:
            return sha1(f"{self.fingerprint}\0{source}".encode()).hexdigest()

        def dump_bytecode(self, bucket: Bucket) -> None:
            with suppress(OSError):
                super().dump_bytecode(bucket)

    return _Cache


def _fingerprint(env: Environment) -> str:
    """What a compiled template depends on besides its source."""
    calls = {f"{kind}:{name}": str(getattr(f, "jinja_pass_arg", ""))
             for kind, table in (("filter", env.filters), ("test", env.tests))
             for name, f in table.items()}
    return repr((wallflame.__version__, env.autoescape, env.trim_blocks, env.lstrip_blocks,
                 env.keep_trailing_newline, env.undefined.__name__, sorted(calls.items())))


def cache_folder() -> str | None:
    """The template cache, ``$XDG_CACHE_HOME/wallflame/templates``
    (``~/.cache/wallflame/templates``), or none when ``WALLFLAME_NO_CACHE`` is set or no
    private directory can be had (``wallflame.cachedir``)."""
    return cachedir.cache_folder("templates")


def bytecode_cache() -> FileSystemBytecodeCache | None:
    """Jinja2's bytecode cache in ``cache_folder()``, if any."""
    folder = cache_folder()
    return None if folder is None else _cache_class()(folder, "%s.jinja")


def _filters() -> dict[str, Any]:
    return {"tojson": tojson, "vis": _vis, "amount": readable}


def _globals() -> dict[str, Any]:
    return {"pct": percent, "labels": LABELS, "classes": CLASSES}


@lru_cache(maxsize=1)
def environment() -> Environment:
    """The one Jinja2 environment (autoescape on, strict undefined, URL-free JSON)."""
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    folder = templates_dir()
    cache = bytecode_cache()
    env = Environment(loader=FileSystemLoader(folder), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                      bytecode_cache=cache)
    env.filters.update(_filters())
    env.globals.update(_globals())
    if cache is not None:
        cache.fingerprint = _fingerprint(env)  # type: ignore[attr-defined]
    return env


def _render_page(context: dict[str, Any]) -> str:
    """``report.html`` rendered: from the compiled code kept in the cache when it is there
    (without importing Jinja2's compiler: see ``pagecache``), else by Jinja2, which then
    keeps that code for the next run."""
    from wallflame.report import pagecache

    folder = cache_folder()
    key = pagecache.cache_key(templates_dir(), _filters()) if folder is not None else None
    if folder is not None and key is not None:
        page = pagecache.render("report.html", context, _filters(), _globals(), folder, key)
        if page is not None:
            return page
    env = environment()
    page = env.get_template("report.html").render(**context)
    if folder is not None and key is not None:
        pagecache.store(env, folder, key)
    return page


def assets() -> dict[str, Any]:
    """The report page's inline scripts and styles (the legend's swatches made from the wait
    classes' table) and the CSP that allows exactly them."""
    return page_assets(SCRIPTS, STYLES, (swatch_css(),))


def embedded_data(profile: Profile, max_nodes: int = MAX_NODES) -> dict[str, Any]:
    """What the page's scripts read (golden-tested): the flame tree, the units and the
    classes' labels and colours (the table's: the script keeps no copy), and for a run
    directory the timeline (``report.timeline_page``)."""
    tree = build_tree(profile, max_nodes)
    data = {"flame": tree.to_json(), "unit": profile.meta.unit,
            "window_ns": profile.meta.window_ns, "classes": page_table(),
            "class_fallback": FALLBACK}
    if isinstance(profile.meta.extra.get("run_dir"), str):
        # only a run directory has a timeline (the modules reading one are imported for it)
        from wallflame.report.timeline_page import page_timeline

        timeline = page_timeline(profile, tree)
        if timeline is not None:
            data["timeline"] = timeline
        if "range" not in profile.meta.extra:
            from wallflame.report import blame

            stacks = blame.of_run(str(profile.meta.extra["run_dir"]))
            if stacks:
                data["blame"] = build_tree(blame.profile_of(stacks), max_nodes).to_json()
    return data


def _bars(rows: list[dict[str, Any]], window: float) -> list[dict[str, Any]]:
    """Per-thread segments as percentages of the window (or of the thread's total)."""
    out = []
    for r in rows:
        parts = [("on", r["on_cpu_s"]), (RUNNABLE, r["wait"][RUNNABLE])] + \
            [(c, r["wait"][c]) for c in WAIT_CLASSES if c != RUNNABLE]
        whole = window or sum(v for _, v in parts)
        x, segs = 0.0, []
        for cls, v in parts:
            if v > 0 and whole:
                w = 100 * v / whole
                segs.append({"cls": cls, "x": round(x, 3), "w": round(w, 3), "s": v})
                x += w
        cov = r.get("coverage")
        out.append({**r, "segs": segs, "cov": cov,
                    "cov_bad": cov is not None and not COVERAGE_OK[0] <= cov <= COVERAGE_OK[1]})
    return out


def _thread_rows(rows: list[dict[str, Any]], window: float) -> list[dict[str, Any]]:
    """The per-thread table's rows (``_bars``), a group's (``merge_rows``: ``consumer-* ×8``,
    ``tids`` its members) followed by its members (``member``: shown one by one on a
    click); a thread alone in its group is one row."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(name_pattern(display_name(r)), []).append(r)
    out = []
    for members in by.values():
        if len(members) > 1:
            group = _bars(merge_rows(members), window)[0]
            out.append({**group, "tids": " ".join(str(m["tid"]) for m in members)})
        out += [{**b, "name": display_name(b), "member": len(members) > 1}
                for b in _bars(members, window)]
    return out


def thread_groups(rows: list[dict[str, Any]]) -> dict[str, str]:
    """Each thread's group, by tid, for the flame graph's threads grouped (its name pattern,
    or its role: ``wallflame.threadgroups``)."""
    return {str(r["tid"]): name_pattern(display_name(r)) for r in rows if r.get("tid")}


def _wait_class(key: StackKey) -> str:
    """The class a stack's time is counted under (an unknown one is ``other``, as in the
    totals)."""
    return key.wait if key.wait in WAIT_CLASSES else FALLBACK


def _top_stacks(profile: Profile, unit: str, idle: set[int], names: dict[int, str]
                ) -> list[dict[str, Any]]:
    """The heaviest stacks, threads of one group together and idle threads left out
    (``report.topstacks``), each root first: the user's frames, then the kernel's folded."""
    scale = 1e-9 if unit == SECONDS else 1.0
    total = profile.total()
    out = []
    for row in top_rows(profile, TOP_STACKS, idle, names):
        k = row.key
        label = sub_label(k.frames, k.wait) if k.state == OFF else ""
        runs, nk = stack_runs(k.frames)
        items = [f + (f" ×{n}" if n > 1 else "") for f, n in runs]
        items += kernel_item(nk, (f"{k.wait}: {label}" if label else k.wait)
                             if k.state == OFF else "")
        out.append({"thread": row.threads, "cls": _wait_class(k) if k.state == OFF else "on",
                    "label": label, "lock": k.lock, "s": row.weight * scale,
                    "share": percent(row.weight, total), "frames": items})
    return out


def _min_observations(profile: Profile) -> int:
    from wallflame.locks.lockshare import MIN_OBSERVATIONS

    return int(profile.meta.extra.get("lock_min_observations") or MIN_OBSERVATIONS)


def _locks(summary: dict[str, Any]) -> list[dict[str, Any]]:
    if not summary["locks"]:
        return []  # (without importing the lock tables' module)
    from wallflame.report.blame import for_lock
    from wallflame.report.locks import holder_frames

    out = []
    for lock in summary["locks"]:
        holders = [{**h, "frames": holder_frames(h["stack"])} for h in lock["holders"]]
        rel = lock.get("released_from") or {"count": 0, "sites": []}
        released = {**rel, "sites": [{**r, "frames": holder_frames(r["stack"])}
                                     for r in rel["sites"]]}
        out.append({**lock, "holders": holders, "released_from": released,
                    "critical": for_lock(summary, lock)})
    return out


def _memory(extra: Mapping[str, Any]) -> dict[str, Any] | None:
    mem = extra.get("memory")
    if not isinstance(mem, dict):
        return None
    # A sample with no thread was taken after the target exited: nothing was measured.
    samples = [s for s in mem.get("samples", []) if isinstance(s, dict) and s.get("threads")]
    out: dict[str, Any] = {"arenas": mem.get("arenas") or {}, "n": len(samples)}
    if samples:
        t_max = max(float(s.get("t_s", 0)) for s in samples) or 1.0
        for key in ("rss_kb", "threads"):
            vals = [float(s.get(key, 0)) for s in samples]
            hi, lo = max(vals), min(vals)
            span = (hi - lo) or 1.0
            pts = " ".join(f"{600 * float(s.get('t_s', 0)) / t_max:.1f},"
                           f"{56 - 52 * (v - lo) / span:.1f}" for s, v in zip(samples, vals,
                                                                               strict=True))
            out[key] = {"points": pts, "min": lo, "max": hi, "last": vals[-1]}
        out["t_s"] = t_max
    start = mem.get("arenas_start")
    out["arenas_start"] = start if isinstance(start, dict) else None
    out["main_heap_rss_kb"] = mem.get("main_heap_rss_kb")
    maps = out["arenas"].get("mappings", []) if isinstance(out["arenas"], dict) else []
    out["mappings"] = sorted((m for m in maps if isinstance(m, dict)),
                             key=lambda m: -float(m.get("rss_kb", 0)))[:12]
    return out


def _sched_sampled(profile: Profile) -> bool:
    sched = profile.meta.extra.get("sched")
    return isinstance(sched, dict) and bool(sched.get("stack_hz")) and \
        int(sched.get("stack_samples") or 0) < int(sched.get("switch_outs") or 0)


def _split_note(sched: dict[str, Any]) -> str:
    """How the blocked time of a sampled scheduler capture was split (``sched.split``)."""
    split = sched.get("split")
    if not isinstance(split, dict):
        return ""
    parts = [int(split.get(k) or 0) for k in ("stop_ns", "stratum_ns", "pooled_ns")]
    total = sum(parts)
    if total <= 0:
        return ""
    stop, stratum, pooled = (100 * p / total for p in parts)
    return (f" Of that blocked time, {stop:.1f}% had the stack a snapshot's stop showed, "
            f"{stratum:.1f}% was split over the stacks of waits of its own length, and "
            f"{pooled:.1f}% over all the thread's sampled stacks, or left [unsampled] (no wait "
            "of its length had a stack, or it came before the thread's first switch).")


def _resolution(profile: Profile) -> list[str]:
    """What each collector can and cannot see, from its sample count."""
    notes = []
    counts = profile.meta.samples
    for kind, n in sorted(counts.items()):
        if n <= 0 or (":" in kind and kind.split(":", 1)[0] in counts):
            continue  # 'perf:cpu-clock' repeats 'perf'
        low = kind.lower()
        if "snap" in low or "pmp" in low:
            notes.append(f"{kind}: {n:,} snapshots. A function below about {100 / n:.2g}% of a "
                         f"thread's time (1/{n:,}) is likely invisible to them; a 1% function "
                         f"is expected in about {n / 100:.1f} of them.")
        elif ("sched" in low or "switch" in low) and _sched_sampled(profile):
            sched = profile.meta.extra["sched"]
            notes.append(f"{kind}: {n:,} of {int(sched.get('switch_outs') or 0):,} switches "
                         f"sampled with their stacks (at most about {sched['stack_hz']:g} per "
                         "second per thread). Blocked and run-queue times are exact, from "
                         "every switch; each thread's blocked time is split over the stacks "
                         "sampled (or caught by a snapshot) among its waits of similar "
                         "length, so a wait below about "
                         f"{100 / n:.2g}% (1/{n:,}) of it may not appear." + _split_note(sched))
        elif "sched" in low or "switch" in low:
            notes.append(f"{kind}: {n:,} scheduler events: blocked intervals are measured "
                         "exactly, stacks are those at each switch-out.")
        else:
            notes.append(f"{kind}: {n:,} samples. A function at 1% of on-CPU time gets about "
                         f"{n / 100:,.0f} of them; below about {100 / n:.2g}% (1/{n:,}) it may "
                         f"not appear at all.")
    return notes


#: ``meta.extra`` entries shown elsewhere on the page (or too big to list).
_SHOWN = {"memory", "pause", "commands", "tools", "target", "run_dir", "work", "launched"}


def _commands(value: Any) -> list[str]:
    """Commands as shell lines: ``{"perf_record": [argv]}``, ``[argv, ...]`` or strings."""
    if not value:
        return []
    import shlex  # (only a run directory's facts hold commands)

    items = value.items() if isinstance(value, dict) else (("", v) for v in value or [])
    out = []
    for name, cmd in items:
        argvs = cmd if isinstance(cmd, list) and cmd and isinstance(cmd[0], list) else [cmd]
        for argv in argvs:
            line = shlex.join(map(str, argv)) if isinstance(argv, list) else str(argv)
            out.append(f"{name}: {line}" if name else line)
    return out


def _details(extra: Mapping[str, Any]) -> list[tuple[str, list[tuple[str, str]]]]:
    """Scalar facts each collector recorded (``extra["pmp"]["backend"]`` and the like)."""
    out = []
    for name, value in sorted(extra.items()):
        if name in _SHOWN or not isinstance(value, dict):
            continue
        items = [(str(k), str(v)) for k, v in sorted(value.items())
                 if isinstance(v, (str, int, float, bool))]
        if items:
            out.append((str(name), items[:24]))
    return out


def _context(profile: Profile, max_nodes: int, title: str | None) -> dict[str, Any]:
    groups = profile.grouped()
    summary = summarize(profile, groups)
    m = profile.meta
    unit = summary["unit"]
    rows = _thread_rows(summary["threads"], summary["window_s"])
    idle = idle_tids(summary["threads"])
    return {
        "data": embedded_data(profile, max_nodes), "summary": summary, "unit": unit,
        "threads": rows, "thread_groups": thread_groups(summary["threads"]),
        "grouped": any("tids" in r for r in rows),
        "coverage_bad": [r for r in rows if r["cov_bad"] and r["tid"]],
        "no_off": not any(g.state == OFF for g in groups),
        "no_on": not any(g.state != OFF for g in groups),
        "locks": _locks(summary), "unidentified": summary.get("unidentified_lock_waits") or [],
        "min_observations": _min_observations(profile),
        "top": _top_stacks(profile, unit, idle, display_names(summary["threads"])),
        "idle": [display_name(r) for r in summary["threads"] if r["tid"] in idle],
        "memory": _memory(m.extra), "resolution": _resolution(profile),
        "losses": sorted(m.losses.items()), "warnings": m.warnings,
        "notes": [str(n) for n in m.extra.get("notes") or []],
        "commands": _commands(m.extra.get("commands")),
        "tools": {str(k): str(v) for k, v in dict(m.extra.get("tools", {}) or {}).items()},
        "sources": list(dict.fromkeys(f"{s.get('path', '')} ({s.get('format', '?')})"
                                      for s in m.sources)),
        "target": m.extra.get("target"), "title": title or _title(profile),
        "details": _details(m.extra), "ended_by": str(m.extra.get("ended_by") or ""),
        "total_s": profile.total() / 1e9 if m.unit == UNIT_NS else float(profile.total()),
        **assets(),
    }


def _title(profile: Profile) -> str:
    target = profile.meta.extra.get("target")
    if isinstance(target, dict) and (target.get("comm") or target.get("pid")):
        pid = f" (PID {target['pid']})" if target.get("pid") else ""
        return f"wallflame: {target.get('comm') or ''}{pid}".rstrip()
    if profile.meta.sources:
        return f"wallflame: {profile.meta.sources[0].get('path', 'profile')}"
    return "wallflame report"


def render_html(profile: Profile, title: str | None = None, max_nodes: int = MAX_NODES) -> str:
    """The report page for ``profile`` as one self-contained HTML document."""
    return html_bytes(profile, title, max_nodes).decode("utf-8")


def html_bytes(profile: Profile, title: str | None = None, max_nodes: int = MAX_NODES) -> bytes:
    """``render_html`` as the UTF-8 bytes of the file."""
    page = _render_page(_context(profile, max_nodes, title))
    # A string that is not valid Unicode (an unpaired surrogate) must not abort the write.
    return page.encode("utf-8", "backslashreplace")


def write(profile: Profile, out: IO[str], title: str | None) -> None:
    """The ``html`` format's writer (``report/writers.py``)."""
    write_bytes(out, html_bytes(profile, title))
