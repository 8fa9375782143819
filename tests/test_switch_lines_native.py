"""The native reader of the scheduler capture's switch records (``_speedups.switch_lines``)
against the Python reader it stands in for (``SampledSched._header``): the same text, read
both ways, leaves every thread, interval and counter the same, whatever the comms hold
(digits, slashes, colons, record names, tabs, non-ASCII) and however the numbers run."""

from __future__ import annotations

import io
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wallflame.fold.options import FoldOptions
from wallflame.fold.perf import sampled_switches
from wallflame.fold.perf.sampled_switches import SampledSched
from wallflame.profile import Profile

pytestmark = pytest.mark.skipif(sampled_switches.SWITCH_LINES is None,
                                reason="the native module is not built")

COMMS = ["mariadbd", "w", "", "a b", "1/2 3.000000004:", "x 7/7 1.000000000: PERF_RECORD_SWITCH",
         "sixteen-chars-ab", "seventeen-chars-x", "t\tab", "é", "-1", "  pad  ", "::", "9/9",
         "PERF_RECORD_SWITCH OUT"]
RECORDS = ["PERF_RECORD_SWITCH_CPU_WIDE OUT          next pid/tid:  {p}/{n} ",
           "PERF_RECORD_SWITCH_CPU_WIDE IN           prev pid/tid:  {p}/{n} ",
           "PERF_RECORD_SWITCH_CPU_WIDE OUT preempt  next pid/tid:  {p}/{n} ",
           "PERF_RECORD_SWITCH OUT", "PERF_RECORD_SWITCH IN", "PERF_RECORD_SWITCH OUT preempt",
           "PERF_RECORD_SWITCH OUT preemptx", "PERF_RECORD_SWITCH INX", "PERF_RECORD_SWITCHX IN",
           "PERF_RECORD_SWITCH_CPU_WIDEX OUT", "PERF_RECORD_SWITCH_CPU_WIDE", "PERF_RECORD_SWITCH",
           "PERF_RECORD_SWITCH  OUT   preempt", "PERF_RECORD_SWITCH\tOUT", "PERF_RECORD_LOST 3",
           "PERF_RECORD_FORK({p}:{n}):(100:100)", "PERF_RECORD_COMM: w:{p}/{n}",
           "PERF_RECORD_SWITCH_CPU_WIDE OUT\x1c", "PERF_RECORD_SWITCH OUT préempt"]


@st.composite
def lines(draw: st.DrawFn) -> str:
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return ""
    if kind == 1:
        return "\t" + draw(st.sampled_from(["ffffffff821f8b58 __schedule ([kernel.kallsyms])",
                                            "1000 f (/bin/w)", "x"]))
    if kind == 2:
        return draw(st.text(max_size=60))
    comm = draw(st.sampled_from(COMMS) | st.text(max_size=20))
    pid = draw(st.sampled_from([100, 200, 0, -1, 10**19, 101]))
    tid = draw(st.sampled_from([100, 101, 102, 200, 201, 0, -1, 10**20]))
    # seconds within a capture's span (the bins of the blocked time cover it), and beyond
    # what the 64-bit columns hold
    sec = draw(st.sampled_from([81269, 81270, 10**10]))
    ns = draw(st.integers(0, 999_999_999))
    pad = draw(st.sampled_from([" ", "  ", "      "]))
    frac = draw(st.sampled_from([f"{ns:09d}", f"{ns:09d}"[:8], f"{ns:09d}0"]))
    rec = draw(st.sampled_from(RECORDS)).format(p=pid, n=tid)
    if kind == 3:  # a stack sample's header
        rec = (f"{draw(st.integers(1, 5)):10d} sched:sched_switch: prev_comm=w prev_pid={tid} "
               "prev_prio=120 prev_state=S ==> next_comm=x next_pid=0 next_prio=120")
    return f"{comm}{pad}{pid}/{tid}{pad}{sec}.{frac}:{pad}{rec}"


def state(s: SampledSched) -> dict[str, Any]:
    """Everything a reader leaves behind, but the rules and caches."""
    out = {k: v for k, v in vars(s).items()
           if k not in ("rules", "_frame_cache", "_classes", "log", "threads")}
    out["threads"] = {tid: vars(th) for tid, th in s.threads.items()}
    out["log"] = {k: v for k, v in vars(s.log).items() if k != "_index"}
    return out


def read(text: bytes, native: bool, at_start: list[int] | None) -> SampledSched:
    s = SampledSched(FoldOptions().get_rules())
    if at_start is not None:
        s.set_window(0, None, at_start)
    s.feed(io.BytesIO(text), native_lines=native)
    return s


@settings(max_examples=400, deadline=None)
@given(st.lists(lines(), max_size=40), st.sampled_from([None, [100, 101], [201]]),
       st.binary(max_size=3))
def test_native_reads_as_python_reads(body: list[str], at_start: list[int] | None,
                                      junk: bytes) -> None:
    text = "\n".join(body).encode("utf-8", "surrogateescape") + junk
    a, b = read(text, True, at_start), read(text, False, at_start)
    assert state(a) == state(b)
    pa, pb = Profile(), Profile()
    a.finish(pa, {"stack_period": 1})
    b.finish(pb, {"stack_period": 1})
    assert pa.stacks == pb.stacks


def test_lines_split_as_bytes_split() -> None:
    split = sampled_switches.SWITCH_LINES
    assert split is not None
    for block in (b"", b"a", b"\n", b"a\n\nb\n", b"\xff\xfe\n\t\xe9"):
        got = [x if isinstance(x, str) else "tuple" for x in split(block)]
        assert got == block.decode("utf-8", "replace").split("\n")
    rec = split(b"mariadbd  6103/6174  81269.809876047: PERF_RECORD_SWITCH_CPU_WIDE OUT "
                b"preempt  next pid/tid:  6103/6169 ")
    assert rec == [(7, 6103, 6174, 81269_809876047, "mariadbd")]
    # a comm that looks like a header: the shortest comm wins, as the expression reads it
    rec = split(b"1/2 3.000000004: 5/6 7.000000008: PERF_RECORD_SWITCH IN")
    assert rec == ["1/2 3.000000004: 5/6 7.000000008: PERF_RECORD_SWITCH IN"]
    rec = split(b"a 5/6 7.000000008: PERF_RECORD_SWITCH IN")
    assert rec == [(0, 5, 6, 7_000000008, "a")]
