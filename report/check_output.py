"""The gate's outputs: a Markdown summary (for ``$GITHUB_STEP_SUMMARY``) and JUnit XML.

Frame, thread and lock names come from the profiled program or from a baseline file: both are
hostile.  Markdown escapes every character GitHub's renderer treats as syntax or HTML; the XML
is built with ElementTree (escaped) after removing characters XML 1.0 cannot carry.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from wallflame.report.check import FAIL, INCONCLUSIVE, PASS, SKIPPED, Verdict
from wallflame.report.diff_render import (
    describe_side,
    fmt_relative,
    noise_text,
    norm_text,
    visible,
)

TITLES = {PASS: "pass: no regression", FAIL: "REGRESSION",
          INCONCLUSIVE: "INCONCLUSIVE: not enough or partial data to judge"}
ICONS = {PASS: "pass", FAIL: "**FAIL**", INCONCLUSIVE: "**inconclusive**", SKIPPED: "skipped"}
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")
_MD_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
MAX_NAME = 160


def md(text: str, limit: int = MAX_NAME) -> str:
    """Escape ``text`` for a Markdown table cell or list item: no emphasis, code, link or
    image (``[`` and ``]`` escaped), no HTML (entities), no cell break, and no bare URL that
    a renderer would turn into a link (a zero-width space after ``:/`` and ``www``)."""
    text = _MD_SPECIAL.sub(r"\\\1", visible(text, limit))
    text = "".join(_MD_ENTITIES.get(ch, ch) for ch in text)
    return text.replace("://", ":/&#8203;/").replace("www.", "www&#8203;.")


def markdown(v: Verdict, html_name: str | None = None) -> str:
    d = v.diff
    lines = [f"## wallflame check: {TITLES[v.status]}", "",
             f"- baseline: {md(describe_side(d.before), 1000)}",
             f"- current: {md(describe_side(d.after), 1000)}",
             f"- {md(norm_text(d), 1000)}", f"- {md(noise_text(d), 1000)}", "",
             "| threshold | result | detail |", "| --- | --- | --- |"]
    for r in v.results:
        lines.append(f"| {md(r.name)} | {ICONS[r.status]} | {md(r.message, 1000)} |")
    failed = [r for r in v.results if r.status == FAIL and r.changes]
    for r in failed:
        lines += ["", f"### {md(r.name)}: what grew", "",
                  "| name | before | after | change | relative |",
                  "| --- | --- | --- | --- | --- |"]
        for c in r.changes:
            lines.append(f"| {md(c.name)} | {_num(r.name, c.a)} | {_num(r.name, c.b)} | "
                         f"{_delta(r.name, c.delta)} | {md(fmt_relative(c))} |")
    if html_name:
        lines += ["", f"Differential report: `{_code(html_name)}` "
                  "(written next to this summary; in CI, among the job's artifacts)."]
    return "\n".join(lines) + "\n"


def _code(text: str) -> str:
    return visible(text).replace("`", "'")


def _num(test: str, x: float) -> str:
    return f"{x:.3f} s/s" if test.startswith("wait_") else f"{100 * x:.2f}%"


def _delta(test: str, x: float) -> str:
    return f"{x:+.3f} s/s" if test.startswith("wait_") else f"{100 * x:+.2f} points"


def _xml(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def junit(v: Verdict) -> str:
    """One test case per threshold; regression = failure, inconclusive = error."""
    cases = v.results
    suite = ET.Element("testsuite", {
        "name": "wallflame.check", "tests": str(len(cases)),
        "failures": str(sum(r.status == FAIL for r in cases)),
        "errors": str(sum(r.status == INCONCLUSIVE for r in cases)),
        "skipped": str(sum(r.status == SKIPPED for r in cases)),
    })
    for r in cases:
        case = ET.SubElement(suite, "testcase", {"classname": "wallflame.check",
                                                 "name": _xml(r.name)})
        message = _xml(visible(r.message, 2000))
        if r.status == FAIL:
            ET.SubElement(case, "failure", {"message": message, "type": "regression"}).text = \
                "\n".join(_xml(visible(f"{c.name}: {c.a:.6g} -> {c.b:.6g}")) for c in r.changes)
        elif r.status == INCONCLUSIVE:
            ET.SubElement(case, "error", {"message": message, "type": "inconclusive"})
        elif r.status == SKIPPED:
            ET.SubElement(case, "skipped", {"message": message})
        else:
            ET.SubElement(case, "system-out").text = message
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, "unicode") + "\n"
