"""Debug information found where gdb and perf find it (``collect.elfinfo``), and the choice of
inlined frames it drives: an executable with ``.debug_info``, the same stripped (none), its
debug part found again by debug link and by build ID; hostile files never raise."""

from __future__ import annotations

import io
import os
import shutil
import struct
import subprocess
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wallflame.collect.elfinfo import has_debug_info, read_elf
from wallflame.collect.perf import script_command
from wallflame.collect.plan import Request, plan
from wallflame.collect.run import observe
from wallflame.collect.target import Target, open_target


def _objcopy(*args: str | Path) -> None:
    if shutil.which("objcopy") is None:
        pytest.skip("objcopy (binutils) not installed")
    subprocess.run(["objcopy", *map(str, args)], check=True, capture_output=True)


def test_debug_info_in_the_file_and_gone_when_stripped(sample_bin: Path, tmp_path: Path
                                                       ) -> None:
    mix = sample_bin / "mix"
    info = read_elf(mix.open("rb"))
    assert info is not None and info.debug_info and len(info.build_id) == 40
    assert has_debug_info(str(mix), root=str(tmp_path / "none"))
    stripped = tmp_path / "mix"
    _objcopy("--strip-debug", mix, stripped)
    assert not has_debug_info(str(stripped), root=str(tmp_path / "none"))


def test_separate_debug_file_by_debuglink_and_by_build_id(sample_bin: Path, tmp_path: Path
                                                          ) -> None:
    mix = sample_bin / "mix"
    build_id = read_elf(mix.open("rb")).build_id  # type: ignore[union-attr]
    bindir, root = tmp_path / "bin", tmp_path / "debug"
    bindir.mkdir()
    debug = tmp_path / "mix.debug"
    _objcopy("--only-keep-debug", mix, debug)
    # by debug link, in the executable's .debug/ directory
    exe = bindir / "mix"
    _objcopy("--strip-debug", f"--add-gnu-debuglink={debug}", mix, exe)
    assert read_elf(exe.open("rb")).debuglink == "mix.debug"  # type: ignore[union-attr]
    assert not has_debug_info(str(exe), root=str(root))
    (bindir / ".debug").mkdir()
    shutil.copy(debug, bindir / ".debug" / "mix.debug")
    assert has_debug_info(str(exe), root=str(root))
    # by build ID under the debug root, without a link
    plain = tmp_path / "plain"
    _objcopy("--strip-debug", mix, plain)
    assert not has_debug_info(str(plain), root=str(root))
    where = root / ".build-id" / build_id[:2]
    where.mkdir(parents=True)
    shutil.copy(debug, where / f"{build_id[2:]}.debug")
    assert has_debug_info(str(plain), root=str(root))
    # a debug file that has no debug information itself does not count
    (where / f"{build_id[2:]}.debug").write_bytes(plain.read_bytes())
    assert not has_debug_info(str(plain), root=str(root))


def test_not_elf_or_cut_short(sample_bin: Path, tmp_path: Path) -> None:
    data = (sample_bin / "mix").read_bytes()
    for n in (0, 3, 16, 63, 64, 1000, len(data) // 2, len(data) - 1):
        assert read_elf(io.BytesIO(data[:n])) is None or n > 64
        path = tmp_path / f"cut{n}"
        path.write_bytes(data[:n])
        assert has_debug_info(str(path)) in (False, True)  # never raises
    assert read_elf(io.BytesIO(b"#!/bin/sh\necho hi\n" * 10)) is None
    # a header claiming 65,534 section headers of 65,535 bytes (4 GB) is not believed
    huge = bytearray(data[:64])
    struct.pack_into("<QHHH", huge, 0x28, 64, 0, 0, 0)
    struct.pack_into("<HHH", huge, 0x3A, 0xFFFF, 0xFFFE, 1)
    assert read_elf(io.BytesIO(bytes(huge) + bytes(1 << 16))) is None
    assert not has_debug_info(str(tmp_path / "missing"))


def test_a_fifo_or_device_named_as_the_debug_file_is_not_waited_on(sample_bin: Path,
                                                                  tmp_path: Path) -> None:
    """The executable's directory may belong to the target's owner: a FIFO there under the
    debug link's name would block an ``open`` for ever, and a device would be read without
    end.  Both are passed over, and the real debug file further down the list still found."""
    bindir, root = tmp_path / "bin", tmp_path / "debug"
    bindir.mkdir()
    debug = tmp_path / "mix.debug"
    _objcopy("--only-keep-debug", sample_bin / "mix", debug)
    exe = bindir / "mix"
    _objcopy("--strip-debug", f"--add-gnu-debuglink={debug}", sample_bin / "mix", exe)
    os.mkfifo(bindir / "mix.debug")  # beside the file: the first place looked
    (bindir / ".debug").mkdir()
    os.symlink("/dev/zero", bindir / ".debug" / "mix.debug")  # the second
    found: list[bool] = []
    reader = threading.Thread(target=lambda: found.append(has_debug_info(str(exe),
                                                                         root=str(root))),
                              daemon=True)
    reader.start()
    reader.join(20)
    assert found == [False], "a FIFO or a device was waited on"
    third = root / str(bindir).lstrip("/")
    third.mkdir(parents=True)
    shutil.copy(debug, third / "mix.debug")
    assert has_debug_info(str(exe), root=str(root))
    assert not has_debug_info(str(bindir / "mix.debug")) and not has_debug_info("/dev/zero")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.integers(0, 2), st.integers(0, 2))
def test_hostile_headers_never_raise(tail: bytes, cls: int, order: int) -> None:
    head = b"\x7fELF" + bytes([cls, order]) + tail
    result = read_elf(io.BytesIO(head))
    assert result is None or isinstance(result.debug_info, bool)


def test_script_command_without_inlines(tmp_path: Path) -> None:
    chunk = tmp_path / "sched.data.1"
    assert "--no-inline" not in script_command(chunk, True)
    assert "--no-inline" in script_command(chunk, True, inline=False)
    assert "--no-inline" in script_command(tmp_path / "perf.data.1", False, 7, inline=False)


def test_inline_frames_chosen_from_the_targets_executables(sample_bin: Path, tmp_path: Path
                                                           ) -> None:
    stripped = tmp_path / "mix"
    _objcopy("--strip-debug", sample_bin / "mix", stripped)
    procs = [subprocess.Popen([str(p), "--threads", "1", "--duration", "20"],
                              stdout=subprocess.DEVNULL) for p in (stripped, sample_bin / "mix")]
    try:
        time.sleep(0.2)
        bare, full = (open_target(p.pid, allow_own_child=True) for p in procs)
        def inline(targets: list[Target], attached: bool) -> bool | None:
            request = Request(attached=attached)
            return plan(request, *observe(request, targets)).settings.inline_frames

        assert inline([bare], attached=True) is False
        assert inline([bare, full], attached=True) is True
        assert inline([bare], attached=False) is True  # a launched command keeps them
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=20)
