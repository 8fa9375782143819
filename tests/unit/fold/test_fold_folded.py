"""Folded files from other tools -> Profile: plain, bcc offcputime/offwaketime, py-spy raw,
two-column differential.  bcc and py-spy cannot be installed here, so their fixtures are
small hand-written files in the exact shape those tools print."""

from __future__ import annotations

import io
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from wallflame.errors import InputError
from wallflame.fold import foreign_folded as folded
from wallflame.fold import gdb, ptpmp
from wallflame.fold.options import FoldOptions
from wallflame.folded import ThreadRoot, write_folded
from wallflame.profile import OFF, ON, UNIT_NS, UNIT_SAMPLES, Profile

FIX = FIXTURES / "folded"
FILES = ["bcc-offcputime.folded", "bcc-offwaketime.folded", "pyspy-raw.txt", "diff.folded",
         "hostile.folded", "plain-tid.folded"]


def fold(path: Path | str, options: FoldOptions | None = None) -> Profile:
    p = Profile()
    folded.fold(str(path), options or FoldOptions(), p)
    return p


def text(p: Profile, root: ThreadRoot = ThreadRoot.COMM, annotate: bool = False) -> str:
    out = io.StringIO()
    write_folded(p, out, root, annotate)
    return out.getvalue()


@pytest.mark.parametrize("name", FILES)
def test_golden(name: str, golden: Callable[[Path, str], None]) -> None:
    golden(FIX / "golden" / f"{name}.folded", text(fold(FIX / name), annotate=True))


@pytest.mark.parametrize("name", [f for f in FILES if f != "hostile.folded"])
def test_detected_as_folded(name: str) -> None:
    head = (FIX / name).read_text()
    assert folded.detect(head)
    assert not ptpmp.detect(head) and not gdb.detect(head)


def test_plain_round_trip_with_tid_roots() -> None:
    src = FIX / "plain-tid.folded"
    p = fold(src)
    assert p.meta.unit == UNIT_SAMPLES
    assert {(k.thread, k.pid, k.tid) for k in p.stacks} == {("mix", 10881, 10884),
                                                           ("mix-ticker", 10881, 10883)}
    expected = [ln for ln in src.read_text().splitlines() if not ln.startswith("#")]
    assert text(p, ThreadRoot.TID).splitlines() == sorted(expected)


def test_plain_round_trip_with_comm_roots(tmp_path: Path) -> None:
    lines = ["app;main;a\\x3bb;leaf 5", "app;main;other 7", "worker;run 1", "solo 2"]
    path = tmp_path / "p.folded"
    path.write_text("\n".join(lines) + "\n")
    p = fold(path)
    assert any("a;b" in k.frames for k in p.stacks)  # the escape is undone on reading
    assert text(p).splitlines() == sorted(lines)


def test_units(tmp_path: Path) -> None:
    path = tmp_path / "u.folded"
    path.write_text("a;b 3\n")
    assert fold(path).total() == 3
    us = fold(path, FoldOptions(folded_unit="us"))
    assert us.total() == 3000 and us.meta.unit == UNIT_NS
    assert fold(path, FoldOptions(folded_unit="ns")).meta.unit == UNIT_NS


def test_fractional_counts_truncate_with_a_counted_warning(tmp_path: Path) -> None:
    path = tmp_path / "f.folded"
    path.write_text("a;b 3.75\na;c 2.0\na;d 1.5\n")
    p = fold(path)
    assert sorted(p.stacks.values()) == [1, 2, 3]
    loss = p.meta.losses["fractional count truncated"]
    assert (loss.count, loss.first_line) == (2, 1)


def test_bcc_offcputime() -> None:
    p = fold(FIX / "bcc-offcputime.folded")
    assert p.meta.unit == UNIT_NS
    assert all(k.state == OFF and k.thread == "mix" for k in p.stacks)
    by_leaf_user = {}
    for k, w in p.stacks.items():
        user = k.frames[: k.frames.index("-")]
        by_leaf_user[user[-1]] = (k.wait, w)
    assert by_leaf_user["syscall"] == ("mutex", 1_873_402_000)  # us -> ns
    assert by_leaf_user["__futex_abstimed_wait_common"][0] == "condvar"
    assert by_leaf_user["__GI___clock_nanosleep"][0] == "sleep"
    assert by_leaf_user["spin_work"][0] == "other"  # preempted: no wait rule
    assert by_leaf_user["[Missed User Stack]"][0] == "other"


def test_bcc_kernel_annotation_on_request() -> None:
    p = fold(FIX / "bcc-offcputime.folded", FoldOptions(kernel=True))
    for k in p.stacks:
        cut = k.frames.index("-")
        assert all(f.endswith("_[k]") for f in k.frames[cut + 1 :])
        assert not any(f.endswith("_[k]") for f in k.frames[:cut])


def test_bcc_offwaketime_waker_frames() -> None:
    p = fold(FIX / "bcc-offwaketime.folded")
    mutex = next(k for k in p.stacks if k.thread == "mix-2")
    cut = mutex.frames.index("--")
    waker = mutex.frames[cut + 1 :]
    assert waker[-1] == "mix-1_[w]" and "__GI___lll_lock_wake_[w]" in waker
    assert "-" in waker  # the waker's own user/kernel delimiter stays a separator
    # classified from the blocked part only: the waker's pthread_cond_broadcast is no wait
    assert mutex.wait == "mutex"
    cond = next(k for k in p.stacks if k.thread == "mix-3")
    assert cond.wait == "condvar"
    assert next(k for k in p.stacks if k.thread == "mix-ticker").wait == "sleep"


def test_pyspy_raw_roots() -> None:
    p = fold(FIX / "pyspy-raw.txt")
    assert p.meta.unit == UNIT_SAMPLES
    keys = sorted(p.stacks, key=lambda k: (k.thread, k.tid, k.frames))
    assert {(k.pid, k.thread, k.tid) for k in keys} == {
        (4242, "0x7F3A2C1B7740", 0), (4242, "0x7F3A2B5FF6C0", 0), (0, "0x7F3A2C1B7740", 0),
        (0, "", 4243)}
    worker = [k for k in keys if k.thread == "0x7F3A2B5FF6C0"]
    assert all(k.frames[0] == "_bootstrap (threading.py:995)" for k in worker)  # verbatim
    assert all(k.state == ON for k in keys)


def test_diff_folded_keeps_both_columns() -> None:
    p = fold(FIX / "diff.folded")
    assert p.total() == 295 + 612 + 0 + 44 + 11
    before = p.meta.extra["diff_before"]
    assert before["mix;worker_loop;pthread_mutex_lock;__lll_lock_wait"] == 180
    assert sum(before.values()) == 310 + 590 + 180 + 0 + 12
    # the stack that vanished after is not in the profile, only in the before column
    assert not any("__lll_lock_wait" in k.frames for k in p.stacks)


def test_a_lone_number_at_the_end_of_a_stack_is_not_a_diff_column(tmp_path: Path) -> None:
    path = tmp_path / "x.folded"
    path.write_text("py;thread 123 5\npy;main 7\n")
    p = fold(path)
    assert "diff_before" not in p.meta.extra
    assert sorted(k.frames for k in p.stacks) == [("main",), ("thread 123",)]


def test_hostile_file() -> None:
    p = fold(FIX / "hostile.folded")
    threads = {k.thread for k in p.stacks}
    assert "<img src=x>" in threads and "t\ufffd\ufffd" in threads  # invalid UTF-8 replaced
    evil = next(k for k in p.stacks if k.thread == "<img src=x>")
    assert evil.frames == ("evil;frame", "Queue<int, std::less<int> >::pop() const")
    assert p.meta.losses["malformed folded line"].first_line == 4
    assert p.meta.losses["fractional count truncated"].count == 1


def test_stdin_mode_is_decided_by_the_first_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    data = (FIX / "diff.folded").read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    p = fold("-")
    assert p.total() == 295 + 612 + 44 + 11 and "diff_before" in p.meta.extra


def test_nothing_usable_is_one_clean_error(tmp_path: Path) -> None:
    path = tmp_path / "x.folded"
    path.write_text("no counts here\nnor here\n")
    with pytest.raises(InputError, match="no folded"):
        fold(path)
    path.write_text("")
    assert fold(path).total() == 0  # an empty profile is a profile


def test_deep_stack(tmp_path: Path) -> None:
    path = tmp_path / "deep.folded"
    path.write_text("t;" + ";".join(f"f{i}" for i in range(10_000)) + " 1\n")
    (key,) = fold(path).stacks
    assert len(key.frames) == 10_000


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=1500))
def test_any_bytes(data: bytes) -> None:
    with tempfile.NamedTemporaryFile() as f:
        f.write(data)
        f.flush()
        try:
            p = fold(f.name)
        except InputError:
            return
    assert all(w > 0 for w in p.stacks.values())


frame = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"),
                min_size=1, max_size=12).filter(lambda s: s.strip() == s and " " not in s)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.lists(frame, min_size=2, max_size=8).map(tuple),
                       st.integers(1, 10**12), min_size=1, max_size=20))
def test_write_then_read_is_identity(stacks: dict[tuple[str, ...], int]) -> None:
    """Plain folded written by wallflame reads back to the same stacks, whatever the names
    hold (``;``, backslashes, ``<``, quotes...), with the thread as the root frame."""
    from wallflame.profile import StackKey

    p = Profile()
    for frames, w in stacks.items():
        if "-" in frames or "--" in frames:
            continue  # a bcc delimiter frame: read back as off-CPU, by design
        p.add(StackKey(frames[1:], thread=frames[0]), w)
    with tempfile.NamedTemporaryFile("w", suffix=".folded", encoding="utf-8") as f:
        f.write(text(p))
        f.flush()
        q = fold(f.name)
    norm = {}
    for k, w in p.stacks.items():
        key = (k.thread, k.frames)
        m = folded._TID_ROOT.match(k.thread)
        if m is not None:  # comm-PID/TID roots are read as thread ids: compare the text
            key = (m.group(1), k.frames)
        norm[key] = norm.get(key, 0) + w
    got = {(k.thread, k.frames): w for k, w in q.stacks.items()}
    assert got == norm
