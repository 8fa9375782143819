"""SVG, speedscope and pprof exports, checked with real readers: an XML parser, speedscope's
schema and the ``pprof`` tool itself."""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
from conftest import FIXTURES

from unit.report.test_report_fixtures import HOSTILE, MS, demo_profile, hostile_profile
from wallflame.report.pprof import pprof_bytes
from wallflame.report.speedscope import speedscope
from wallflame.report.svg import write_svg
from wallflame.report.tree import visible

SCHEMA = FIXTURES / "report" / "speedscope-schema.json"
SVG = "{http://www.w3.org/2000/svg}"


def svg_text(profile_name: str) -> str:
    out = io.StringIO()
    write_svg(demo_profile() if profile_name == "demo" else hostile_profile(2000), out)
    return out.getvalue()


def test_svg_with_hostile_names_is_well_formed_xml() -> None:
    text = svg_text("hostile")
    root = ET.fromstring(text.encode("utf-8"))  # raises on any ill-formed byte
    titles = [t.text or "" for t in root.iter(f"{SVG}title")]
    for raw in HOSTILE:
        assert any(t.startswith(visible(raw) + " (") for t in titles), raw
    assert "<script" not in text and "\x1b" not in text
    # the deep stack is drawn to its leaf: 2,000 frames + thread + main + bottom + all
    rects = list(root.iter(f"{SVG}rect"))
    assert len(rects) > 2000


def test_svg_follows_flamegraph_pl_conventions() -> None:
    text = svg_text("demo")
    root = ET.fromstring(text.encode())
    assert root.get("width") == "1200"
    frames = root.find(f"{SVG}g[@id='frames']")
    assert frames is not None
    groups = list(frames)
    first_title = groups[0].find(f"{SVG}title")
    assert first_title is not None and re.fullmatch(r"all \(11\.850 s, 100\.00%\)",
                                                    first_title.text or "")
    heights = {r.get("height") for r in frames.iter(f"{SVG}rect")}
    assert heights == {"15"}
    # mutex waits carry the one highlight colour family (red and blue high, green low)
    for g in groups:
        title = g.find(f"{SVG}title")
        rect = g.find(f"{SVG}rect")
        assert title is not None and rect is not None
        if (title.text or "").startswith("[mutex"):
            r, gr, b = map(int, re.findall(r"\d+", rect.get("fill", "")))
            assert r > 200 and gr < 60 and b > 180


def test_speedscope_output_matches_the_schema_and_the_profile() -> None:
    schema = json.loads(SCHEMA.read_text())
    for profile in (demo_profile(), hostile_profile(500)):
        doc = json.loads(json.dumps(speedscope(profile)))
        jsonschema.validate(doc, schema)
        assert all(p["unit"] == "nanoseconds" for p in doc["profiles"])
        assert sum(sum(p["weights"]) for p in doc["profiles"]) == profile.total()
        assert len(doc["profiles"]) == len(profile.per_thread())
        n = len(doc["shared"]["frames"])
        assert all(0 <= i < n for p in doc["profiles"] for s in p["samples"] for i in s)


def pprof_tool() -> str:
    tool = shutil.which("pprof") or os.path.expanduser("~/go/bin/pprof")
    if not os.path.exists(tool):
        pytest.skip("pprof not installed (go install github.com/google/pprof@latest)")
    return tool


def run_pprof(tool: str, path: Path, *args: str) -> str:
    r = subprocess.run([tool, *args, str(path)], capture_output=True, text=True, timeout=60,
                       check=False)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_pprof_is_read_by_the_real_pprof_tool(tmp_path: Path) -> None:
    tool = pprof_tool()
    p = demo_profile()
    path = tmp_path / "demo.pb.gz"
    path.write_bytes(pprof_bytes(p))
    on = run_pprof(tool, path, "-top", "-sample_index=on_cpu", "-unit=ms")
    off = run_pprof(tool, path, "-top", "-sample_index=off_cpu", "-unit=ms")
    totals = p.per_class()
    assert f"of {totals['on'] // MS}ms total" in on
    assert f"of {(p.total() - totals['on']) // MS}ms total" in off
    assert re.search(r"\bmix_hash\b", on) and "[sleep]" in off
    raw = run_pprof(tool, path, "-raw")
    assert "on_cpu/nanoseconds[dflt] off_cpu/nanoseconds" in raw
    assert "thread:[mix-1]" in raw and "tid:[4243]" in raw and "wait:[mutex]" in raw
    assert "Duration: 2s" in raw


def test_pprof_with_hostile_names_reads_back(tmp_path: Path) -> None:
    tool = pprof_tool()
    p = hostile_profile(300)
    path = tmp_path / "h.pb.gz"
    data = pprof_bytes(p)
    assert gzip.decompress(data)  # a valid gzip stream
    path.write_bytes(data)
    top = run_pprof(tool, path, "-top", "-nodecount=1000", "-sample_index=on_cpu")
    assert "recurse_3" in top and "leaf-13" in top
    assert pprof_bytes(p) == data  # deterministic
