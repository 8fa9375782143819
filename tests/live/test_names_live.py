"""One name per function across collectors, live: the same ``samples/bin/mix`` process is
captured by perf, gdb and eu-stack, every frame is located by its module and offset
(``/proc/PID/maps``), and at every code address that two collectors both saw, their frame
names must be equal.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from wallflame.collect.locks.targetmemory import Mapping, parse_maps
from wallflame.fold import eustack, eustackframes, gdb
from wallflame.fold.options import FoldOptions
from wallflame.names import UNKNOWN
from wallflame.profile import Profile

pytestmark = [pytest.mark.live, pytest.mark.usefixtures("live")]


MIX_FUNCTIONS = {"main", "ticker", "worker_main", "worker_loop", "spin_work", "critical_section",
                 "nap", "wait_for_tick", "mix_hash"}


def read_maps(pid: int) -> list[Mapping]:
    """The executable mappings of a live process that have a path (or a name: ``[vdso]``)."""
    return [m for m in parse_maps(Path(f"/proc/{pid}/maps").read_text())
            if "x" in m.perms and m.path]


def locate(maps: list[Mapping], addr: int) -> tuple[str, int] | None:
    """(module file name, file offset) of a code address of the live process."""
    for m in maps:
        if m.start <= addr < m.end:
            return os.path.basename(m.path), addr - m.start + m.offset
    return None


def gdb_sites(text: str, maps: list[Mapping]) -> dict[tuple[str, int], str]:
    """Code site -> name of the function that owns it (the outermost frame of an inline chain:
    gdb prints the address on the innermost frame and none on the frames it is inlined in)."""
    sites: dict[tuple[str, int], str] = {}
    site: tuple[str, int] | None = None
    for line in text.splitlines():
        if not line.startswith("#"):
            site = None
            continue
        f = gdb.parse_frame(line)
        if f.addr is not None:
            site = locate(maps, f.addr)
        elif line.startswith("#0 "):
            site = None  # frame 0 without an address: its pc is not printed
        if site is not None and f.name != UNKNOWN:
            sites[site] = f.name
    return sites


def eustack_sites(text: str, maps: list[Mapping]) -> dict[tuple[str, int], str]:
    """Code site -> function; with ``-i`` the frames of one address are an inline chain and
    the last of them is the function that owns the code."""
    sites: dict[tuple[str, int], str] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            f = eustackframes.parse_frame(line)
            where = locate(maps, f.addr) if f.addr is not None else None
            if where is not None and not f.name.startswith("["):
                sites[where] = f.name
    return sites


def perf_sites(text: str, maps: list[Mapping]) -> dict[tuple[str, int], str]:
    from wallflame.fold.perf.state import frame_name

    sites: dict[tuple[str, int], str] = {}
    for line in text.splitlines():
        if line[:1] not in (" ", "\t") or not line.strip():
            continue
        addr_text, _, rest = line.strip().partition(" ")
        name = frame_name(line, False)
        if not name or name.startswith("["):
            continue
        addr = int(addr_text, 16)
        where = locate(maps, addr)
        if where is None and rest.endswith(")"):  # perf printed a module-relative address
            where = (os.path.basename(rest[rest.rfind("(") + 1 : -1]), addr)
        if where is not None:
            sites[where] = name
    return sites


@pytest.fixture(scope="module")
def captures(sample_bin: Path, live: None, tmp_path_factory: pytest.TempPathFactory
             ) -> dict[str, object]:
    """perf, gdb, eu-stack, eu-stack -i and the libdw backend of one mix process, plus its
    memory map."""
    from wallflame.collect.libdw import Unwinder

    tmp = tmp_path_factory.mktemp("parity")
    env = dict(os.environ, DEBUGINFOD_URLS="")
    mix = subprocess.Popen([str(sample_bin / "mix"), "--threads", "3", "--duration", "20"],
                           stdout=subprocess.DEVNULL)
    out: dict[str, list[str]] = {"gdb": [], "eu": [], "eui": [], "libdw": []}
    try:
        time.sleep(0.5)
        pid = str(mix.pid)
        maps = read_maps(mix.pid)
        perf = subprocess.Popen(["perf", "record", "-q", "-g", "-e", "cpu-clock", "-F", "499",
                                 "-p", pid, "-o", str(tmp / "perf.data"), "--", "sleep", "2"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(3):
            out["gdb"].append(subprocess.run(
                ["gdb", "-nx", "-batch", "-iex", "set auto-load off", "-iex",
                 "set debuginfod enabled off", "-ex", "thread apply all bt", "-p", pid],
                capture_output=True, text=True, env=env, timeout=120, check=False).stdout)
            out["eu"].append(subprocess.run(["eu-stack", "-p", pid], capture_output=True,
                                            text=True, timeout=60, check=False).stdout)
            out["eui"].append(subprocess.run(["eu-stack", "-i", "-m", "-p", pid],
                                             capture_output=True, text=True, timeout=60,
                                             check=False).stdout)
            unwinder = Unwinder(mix.pid)
            try:
                tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
                out["libdw"].append(unwinder.dump(tids)[0])
            finally:
                unwinder.close()
            time.sleep(0.2)
        perf.wait(timeout=60)
    finally:
        mix.send_signal(signal.SIGINT)
        mix.wait(timeout=30)
    script = subprocess.run(["perf", "script", "-i", str(tmp / "perf.data")],
                            capture_output=True, text=True, timeout=120, check=False).stdout
    for k, v in out.items():
        (tmp / f"{k}.txt").write_text("".join(v))
    (tmp / "perf.txt").write_text(script)
    return {"maps": maps, "dir": tmp, "perf": script, **{k: "".join(v) for k, v in out.items()}}


def test_same_address_same_name_across_collectors(captures: dict[str, object]) -> None:
    maps = captures["maps"]
    assert isinstance(maps, list)
    sites = {
        "gdb": gdb_sites(str(captures["gdb"]), maps),
        "eu-stack": eustack_sites(str(captures["eu"]), maps),
        "eu-stack -i": eustack_sites(str(captures["eui"]), maps),
        "libdw": eustack_sites(str(captures["libdw"]), maps),
        "perf": perf_sites(str(captures["perf"]), maps),
    }
    for tool, s in sites.items():
        assert s, f"{tool} saw no frames"
    shared = 0
    disagreements = []
    every = set().union(*sites.values())
    for site in sorted(every):
        names = {tool: s[site] for tool, s in sites.items() if site in s}
        if len(names) < 2:
            continue
        shared += 1
        if len(set(names.values())) > 1:
            disagreements.append(f"{site[0]}+{site[1]:#x}: {names}")
    assert not disagreements, "\n".join(disagreements)
    assert shared >= 10, f"only {shared} code addresses seen by two collectors"
    # perf and the snapshot tools met on the spinning code, at least
    perf_and_other = [site for site in sites["perf"]
                      if any(site in s for t, s in sites.items() if t != "perf")]
    assert {sites["perf"][s] for s in perf_and_other} & {"worker_loop", "spin_work", "mix_hash",
                                                          "worker_main", "start_thread"}


def test_folded_mix_names_agree(captures: dict[str, object]) -> None:
    """In the folded profiles of all four captures, mix's functions have exactly their
    source names (no offsets, arguments, clone suffixes), so the profiles line up."""
    from wallflame.fold import perf

    tmp = captures["dir"]
    assert isinstance(tmp, Path)
    names: dict[str, set[str]] = {}
    for tool, module, file in [("gdb", gdb, "gdb.txt"), ("eu-stack", eustack, "eu.txt"),
                               ("eu-stack -i", eustack, "eui.txt"),
                               ("libdw", eustack, "libdw.txt"), ("perf", perf, "perf.txt")]:
        p = Profile()
        module.fold(str(tmp / file), FoldOptions(), p)
        frames = {f for k in p.stacks for f in k.frames}
        spelled = {f for f in frames if any(f.startswith(m) for m in MIX_FUNCTIONS)}
        assert spelled <= MIX_FUNCTIONS, f"{tool}: {sorted(spelled - MIX_FUNCTIONS)}"
        names[tool] = spelled
    for tool in ("gdb", "eu-stack", "eu-stack -i", "libdw"):
        assert {"main", "ticker", "nap", "worker_main", "worker_loop"} <= names[tool], tool
    assert {"worker_main", "worker_loop", "spin_work", "mix_hash"} <= names["perf"]
