"""The gate's outputs: a Markdown summary (for ``$GITHUB_STEP_SUMMARY``) and JUnit XML.

Frame, thread and lock names come from the profiled program or from a baseline file: both are
hostile.  Markdown escapes every character GitHub's renderer treats as syntax or HTML; the XML
is built with ElementTree (escaped) after removing characters XML 1.0 cannot carry.
"""

from __future__ import annotations

import dataclasses
import re
import xml.etree.ElementTree as ET
from typing import Any

from wallflame.report.diff.headline import headline
from wallflame.report.diff.text import describe_side, visible
from wallflame.report.gate.check import FAIL, INCONCLUSIVE, PASS, SKIPPED, Verdict

TITLES = {PASS: "pass: no regression", FAIL: "REGRESSION",
          INCONCLUSIVE: "INCONCLUSIVE: these runs cannot settle it"}
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


def _runs(n: int) -> str:
    return f"{n} runs, " if n > 1 else ""


def verdict_sentence(v: Verdict) -> str:
    """The verdict in one sentence, as the reader of a pull request wants it first: what
    regressed and by how much, or why the runs could not tell, or that nothing did."""
    if v.status == FAIL:
        worse = [j for j in v.judged if j.regression]
        return "Regression: " + "; ".join(f"{j.name} {j.interval()}" for j in worse[:3]) + \
            (f"; and {len(worse) - 3} more" if len(worse) > 3 else "") + "."
    if v.status == INCONCLUSIVE:
        why = next((r for r in v.results if r.status == INCONCLUSIVE), None)
        return "Inconclusive: " + (why.message if why else "these runs cannot tell") + "."
    return "No regression beyond what these runs could see."


def markdown(v: Verdict, html_name: str | None = None) -> str:
    d = v.diff
    changed = headline(d)
    lines = [f"## wallflame check: {TITLES[v.status]}", "", md(verdict_sentence(v), 2000), ""]
    if changed:
        lines += ["The diff's largest changes (beyond its sampling noise floor; the check's own "
                  "judgement, with each run's spread, is the sentence above):", "",
                  *(f"{i}. {md(c, 400)}" for i, c in enumerate(changed, 1)), ""]
    lines += [f"- baseline: {md(_runs(v.runs[0]) + describe_side(d.before), 1000)}",
              f"- current: {md(_runs(v.runs[1]) + describe_side(d.after), 1000)}",
              f"- method: {md(v.method, 1000)}", "",
              "| test | result | detail |", "| --- | --- | --- |"]
    for r in v.results:
        lines.append(f"| {md(r.name)} | {ICONS[r.status]} | {md(r.message, 1000)} |")
    rows = v.rows()
    if rows:
        lines += ["", "### What changed, and what these runs could have seen", "",
                  "| quantity | baseline | current | change (95% CI) | unseen under | p | "
                  "verdict |", "| --- | --- | --- | --- | --- | --- | --- |"]
        for j in rows:
            lines.append(
                f"| {md(j.name)} | {md(j.fmt(j.a))} | {md(j.fmt(j.b))} | "
                f"{md(j.interval())} | {md(j.fmt(j.detectable, True))} | "
                f"{j.cmp.p:.2g} | {'**regression**' if j.regression else 'ok'} |")
        lines += ["", "\"unseen under\": the smallest increase these runs would catch "
                  f"with probability {v.thresholds.power:g}; smaller ones would go unseen "
                  "(collect longer or add runs)."]
    if html_name:
        lines += ["", f"Differential report: `{_code(html_name)}` "
                  "(written next to this summary; in CI, among the job's artifacts)."]
    return "\n".join(lines) + "\n"


def to_json(v: Verdict) -> dict[str, Any]:
    """The verdict for machines: every test and every quantity judged, with its interval."""
    return {"status": v.status, "exit_code": v.exit_code, "method": v.method,
            "runs": {"baseline": v.runs[0], "current": v.runs[1]},
            "thresholds": dataclasses.asdict(v.thresholds),
            "results": [{"name": r.name, "status": r.status, "message": r.message,
                         "changes": [j.to_json() for j in r.changes]} for r in v.results],
            "quantities": [j.to_json() for j in v.judged]}


def _code(text: str) -> str:
    return visible(text).replace("`", "'")


def _xml(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def junit(v: Verdict) -> str:
    """One test case per test; regression = failure, inconclusive = error; every case
    carries its quantities with their intervals."""
    cases = v.results
    suite = ET.Element("testsuite", {
        "name": "wallflame.check", "tests": str(len(cases)),
        "failures": str(sum(r.status == FAIL for r in cases)),
        "errors": str(sum(r.status == INCONCLUSIVE for r in cases)),
        "skipped": str(sum(r.status == SKIPPED for r in cases)),
    })
    props = ET.SubElement(suite, "properties")  # the verdict in words, as the summary opens
    ET.SubElement(props, "property", {"name": "verdict",
                                      "value": _xml(visible(verdict_sentence(v), 2000))})
    for r in cases:
        case = ET.SubElement(suite, "testcase", {"classname": "wallflame.check",
                                                 "name": _xml(r.name)})
        message = _xml(visible(r.message, 2000))
        detail = "\n".join(_xml(visible(f"{c.name}: {c.fmt(c.a)} -> {c.fmt(c.b)}, "
                                         f"{c.interval()}, unseen under "
                                         f"{c.fmt(c.detectable, True)}", 2000))
                           for c in r.changes)
        if r.status == FAIL:
            ET.SubElement(case, "failure", {"message": message, "type": "regression"}).text = \
                detail
        elif r.status == INCONCLUSIVE:
            ET.SubElement(case, "error", {"message": message, "type": "inconclusive"})
        elif r.status == SKIPPED:
            ET.SubElement(case, "skipped", {"message": message})
        else:
            ET.SubElement(case, "system-out").text = message + ("\n" + detail if detail else "")
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, "unicode") + "\n"
