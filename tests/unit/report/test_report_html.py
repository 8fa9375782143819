"""The page's safety properties and static content, and the ``wallflame report`` command."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import stat
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from unit.report.test_report_fixtures import HOSTILE, LOCK, demo_profile, hostile_profile
from wallflame.cli import cli
from wallflame.folded import escape, write_folded
from wallflame.profile import Profile
from wallflame.report.html import render_html
from wallflame.report.tree import visible


class Page(HTMLParser):
    """Collects what a browser would: script and style bodies, tags, attributes, text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self.styles: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self._in: tuple[str, dict[str, str | None]] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag in ("script", "style"):
            self._in = (tag, dict(attrs))

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style"):
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._in and self._in[0] == "script":
            self.scripts.append((self._in[1], data))
        elif self._in and self._in[0] == "style":
            self.styles.append(data)
        else:
            self.text.append(data)


def parse(html: str) -> Page:
    p = Page()
    p.feed(html)
    p.close()
    return p


def sha(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def csp_of(page: Page) -> str:
    metas = [a for t, a in page.tags if t == "meta" and a.get("http-equiv") ==
             "Content-Security-Policy"]
    assert len(metas) == 1
    return str(metas[0]["content"])


def test_csp_allows_exactly_the_inline_scripts_and_styles() -> None:
    html = render_html(demo_profile())
    page = parse(html)
    csp = csp_of(page)
    assert csp.startswith("default-src 'none';")
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    code = [body for attrs, body in page.scripts if "type" not in attrs]
    assert len(code) == 3  # flamegraph.js, timeline.js, report.js
    for body in code:
        assert sha(body) in csp
    assert page.styles and all(sha(s) in csp for s in page.styles)
    assert not any("style" in a for _, a in page.tags), "no inline style attributes (CSP)"
    assert not any(k.startswith("on") for _, a in page.tags for k in a), "no event handlers"


def test_no_url_and_no_external_reference_anywhere() -> None:
    for profile in (demo_profile(), hostile_profile(50)):
        html = render_html(profile)
        assert not re.search(r"https?://", html, re.I)
        page = parse(html)
        for tag, attrs in page.tags:
            assert "src" not in attrs and "href" not in attrs, (tag, attrs)


def test_hostile_names_never_become_markup() -> None:
    html = render_html(hostile_profile(50))
    page = parse(html)
    # The only elements are the page's own: no img, no extra script from a name.
    assert {t for t, _ in page.tags} <= {
        "html", "head", "meta", "title", "style", "body", "header", "h1", "h2", "h3", "p", "b",
        "ul", "li", "nav", "span", "svg", "rect", "section", "div", "fieldset", "legend",
        "label", "input", "button", "output", "kbd", "noscript", "aside", "pre", "table",
        "thead", "tbody", "tfoot", "tr", "th", "td", "details", "summary", "ol",
        "code", "dl", "dt", "dd", "script", "figure", "figcaption", "polyline"}
    # the data and the threads' groups, then flamegraph.js, timeline.js, report.js
    assert len(page.scripts) == 5
    text = "".join(page.text)
    for raw in HOSTILE:
        if raw.startswith("https"):
            continue  # shown as https:&#47;&#47;... which reads the same
        assert visible(raw, 40)[:30] in text, raw
    assert "\x1b" not in html and "\u202e" not in html and "\x00" not in html


def _confirmed(p: Profile) -> Profile:
    """``p`` with every holder stack confirmed by one observation (as the owner sampler's
    evidence says after a collect)."""
    ev: dict[str, Any] = {}
    for h in p.holders:
        e = ev.setdefault(h.lock, {"observations": 0, "confirmed": 0, "holders": []})
        e["observations"] += 1
        e["confirmed"] += 1
        e["holders"].append([h.tid, h.thread, ";".join(escape(f) for f in h.frames), 1])
    p.meta.extra["lock_evidence"] = ev
    return p


def test_unconfirmed_holder_stacks_are_not_shown() -> None:
    page = parse(render_html(demo_profile()))
    text = " ".join(" ".join(page.text).split())
    assert "No holder stack was confirmed" in text and "holder (confirmed" not in text


def test_static_markup_carries_the_key_numbers() -> None:
    page = parse(render_html(_confirmed(demo_profile())))
    text = " ".join(" ".join(page.text).split())
    assert "mix-1 4243" in text  # per-thread table
    assert "910.00 ms" in text  # mix-1 on-CPU
    assert LOCK.split()[0] in text and "Waited 2.400 s" in text  # locks table
    assert "holder (confirmed" in text and "spin_work" in text
    assert "Lost: 12 × lost perf events" in text  # warnings in the header
    assert "snapshots: 40" in text and "1/40" in text  # resolution statement
    assert "glibc malloc arenas: 3" in text
    assert "Top stacks" in text and "__futex_abstimed_wait" in text


def test_folded_input_says_its_unit_is_samples(tmp_path: Path) -> None:
    src = tmp_path / "in.folded"
    src.write_text("main;work 30\nmain;idle 10\n")
    out = tmp_path / "r.html"
    r = CliRunner().invoke(cli, ["report", str(src), "-o", str(out)])
    assert r.exit_code == 0, r.output
    text = " ".join("".join(parse(out.read_text()).text).split())
    assert "Unit: samples" in text and "40 samples" in text


def test_cli_formats_from_suffix_and_mode_0600(tmp_path: Path) -> None:
    src = tmp_path / "demo.folded"
    with open(src, "w") as f:
        write_folded(demo_profile(), f, annotate=True)
    magic = {".html": b"<!DOCTYPE html>", ".svg": b"<?xml", ".json": b"{",
             ".speedscope.json": b'{"$schema"', ".pb.gz": b"\x1f\x8b", ".folded": b"mix",
             ".txt": b"wallflame:"}
    for suffix, head in magic.items():
        out = tmp_path / f"r{suffix}"
        r = CliRunner().invoke(cli, ["report", str(src), "-o", str(out)])
        assert r.exit_code == 0, r.output
        assert out.read_bytes().startswith(head), suffix
        assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    r = CliRunner().invoke(cli, ["report", str(src), "-o", str(tmp_path / "r.unknown")])
    assert r.exit_code == 3 and "--format" in r.output


def test_cli_text_to_stdout_fits_a_terminal(tmp_path: Path) -> None:
    src = tmp_path / "h.folded"
    with open(src, "w", errors="surrogateescape") as f:
        write_folded(hostile_profile(200), f, annotate=True)
    r = CliRunner().invoke(cli, ["report", str(src), "--format", "txt", "-o", "-"])
    assert r.exit_code == 0, r.output
    assert "\x1b" not in r.stdout and "\u202e" not in r.stdout
    assert max(len(line) for line in r.stdout.splitlines()) <= 110
    assert "deep" in r.stdout


def make_run_dir(d: Path) -> Path:
    """A run directory laid out as ``wallflame collect`` writes it (see wallflame.rundir)."""
    import json

    from wallflame.folded import meta_from_json
    from wallflame.rundir import MEMORY, META, OFFCPU, ONCPU

    p = demo_profile()
    del p.meta.extra["commands"], p.meta.extra["tools"]  # run-level facts, in meta.json
    d.mkdir()
    for name, part in ((ONCPU, p.on_cpu()), (OFFCPU, p.off_cpu())):
        with open(d / name, "w") as f:
            write_folded(part, f, annotate=True)
    meta = p.meta.to_json()
    memory = meta["extra"].pop("memory")
    memory["arenas_start"] = {"count": 1, "mappings": [], "total_rss_kb": 100}
    (d / MEMORY).write_text(json.dumps(memory))
    top = {"profile": meta,  # run-level facts, as wallflame collect writes them
           "target": {"comm": "mix", "pid": 4242, "cmdline": ["mix", "--threads", "4"]},
           "commands": {"perf_record": ["perf", "record", "-p", "4242", "--", "sleep", "2"],
                        "pmp": [["eu-stack", "-p", "4242"]]},
           "tools": {"perf": "perf version 6.1", "eu-stack": "eu-stack (elfutils) 0.188"},
           "ended_by": "duration"}
    (d / META).write_text(json.dumps(top))
    assert meta_from_json(meta).window_ns == p.meta.window_ns
    return d


def test_report_of_a_run_directory_lands_in_it(tmp_path: Path) -> None:
    from unit.report.test_report_data import page_data
    from wallflame.report.html import embedded_data

    run = make_run_dir(tmp_path / "run")
    r = CliRunner().invoke(cli, ["report", str(run)])
    assert r.exit_code == 0, r.output
    out = run / "report.html"
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    html = out.read_text()
    text = " ".join(" ".join(parse(html).text).split())
    assert "glibc malloc arenas: 3" in text and "at the start: 1 arenas" in text
    assert "Waited 2.400 s" in text and "910.00 ms" in text
    assert "wallflame: mix (PID 4242)" in text and "mix --threads 4" in text
    assert "perf_record: perf record -p 4242 -- sleep 2" in text
    assert "pmp: eu-stack -p 4242" in text and "eu-stack (elfutils) 0.188" in text
    # the page's tree is the demo profile's: nothing lost on the way through the run directory
    assert page_data(html)["flame"]["self"] == embedded_data(demo_profile())["flame"]["self"]


def test_several_inputs_are_merged_into_one_report(tmp_path: Path) -> None:
    a, b = tmp_path / "host-a.folded", tmp_path / "host-b.folded"
    a.write_text("svc;main;work 30\n")
    b.write_text("svc;main;work 12\nsvc;main;idle 8\n")
    out = tmp_path / "both.txt"
    r = CliRunner().invoke(cli, ["report", str(a), str(b), "-o", str(out)])
    assert r.exit_code == 0, r.output
    text = out.read_text()
    totals = [r.split()[:3] for r in text.splitlines() if r.startswith("all ")]
    assert totals == [["all", "-", "50"]]
    assert "84.0%         42  on-CPU  svc\n    main > work\n" in text  # 30 + 12 of 50 samples


def test_a_sampled_scheduler_capture_says_how_its_blocked_time_was_split() -> None:
    """With sampled scheduler stacks the resolution statement gives the shares of the blocked
    time split by a stop's stack, by waits of its own length and by the thread's other stacks
    (``sched.split``), which sum to 100%."""
    p = demo_profile()
    p.meta.count("sched_switch", 300)
    p.meta.extra["sched"] = {"stack_hz": 3.0, "stack_samples": 300, "switch_outs": 90_000,
                             "split": {"stop_ns": 600, "stratum_ns": 300, "pooled_ns": 100}}
    text = " ".join(" ".join(parse(render_html(p)).text).split())
    assert "300 of 90,000 switches sampled" in text
    assert ("60.0% had the stack a snapshot's stop showed, 30.0% was split over the stacks of "
            "waits of its own length, and 10.0% over all the thread's sampled stacks") in text
    del p.meta.extra["sched"]["split"]  # a capture finished before the split was recorded
    text = " ".join(" ".join(parse(render_html(p)).text).split())
    assert "300 of 90,000 switches sampled" in text and "stop showed" not in text
