"""One name per function across collectors (perf, gdb, eu-stack): ``normalize`` on names as
each tool prints them (``tests/live/test_names_live.py`` checks the same on one live process)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wallflame.collect.locks.targetmemory import parse_maps
from wallflame.names import (
    ALIASES,
    UNKNOWN,
    alias_groups,
    canonical_name,
    normalize,
    read_aliases,
    strip_params,
    unknown_in,
)


@pytest.mark.parametrize(("raw", "name"), [
    # perf
    ("Queue::pop(int) const+0x1a", "Queue::pop"),
    ("clock_gettime@@GLIBC_2.17+0x4", "clock_gettime"),
    ("finish_task_switch.isra.0", "finish_task_switch"),
    ("std::vector<int, std::allocator<int> >::_M_realloc_insert<int const&>(__gnu_cxx::"
     "__normal_iterator<int*, std::vector<int, std::allocator<int> > >, int const&) "
     "[clone .isra.0]",
     "std::vector<int, std::allocator<int> >::_M_realloc_insert<int const&>"),
    ("core::ptr::drop_in_place<alloc::vec::Vec<u8>>::h0123456789abcdef",
     "core::ptr::drop_in_place<alloc::vec::Vec<u8>>"),
    # gdb (arguments already cut by the gdb folder)
    ("__GI___clock_nanosleep", "clock_nanosleep"),
    ("___pthread_cond_wait", "pthread_cond_wait"),
    ("(anonymous namespace)::Worker::run", "(anonymous namespace)::Worker::run"),
    ("main::{lambda()#1}::operator()", "main::{lambda()#1}::operator()"),
    ("__vdso_clock_gettime", "clock_gettime"),
    ("__GI___vdso_time", "time"),
    ("__vdso_", UNKNOWN),
    ("__libc_malloc+0x2d", "malloc"),
    # eu-stack
    ("pthread_cond_wait@@GLIBC_2.3.2", "pthread_cond_wait"),
    ("clock_nanosleep@GLIBC_2.2.5", "clock_nanosleep"),
    ("__libc_start_main@@GLIBC_2.34", "__libc_start_main"),
    ("__libc_start_main_impl", "__libc_start_main"),
    ("__clone3", "clone3"),
    # kept whole
    ("operator()", "operator()"),
    ("operator new(unsigned long)", "operator new"),
    ("std::function<void (int)>::operator()(int) const", "std::function<void (int)>::operator()"),
    ("std::vector<int>::size() const noexcept", "std::vector<int>::size"),
    ("func (file.py:12)", "func"),
    ("weird(unbalanced", "weird(unbalanced"),
    ("a;b", "a;b"),
    ("", UNKNOWN),
    ("   ", UNKNOWN),
])
def test_normalize(raw: str, name: str) -> None:
    assert normalize(raw) == name


# The names one code address has, as the collectors print them, and the one name they all get.
ALIAS_SETS = [
    # the vDSO: perf prints __vdso_clock_gettime, gdb clock_gettime
    ({"clock_gettime", "__vdso_clock_gettime", "clock_gettime@@LINUX_2.6"}, "clock_gettime"),
    ({"gettimeofday", "__vdso_gettimeofday"}, "gettimeofday"),
    ({"time", "__vdso_time"}, "time"),
    # glibc's allocator and its internal names
    ({"malloc", "__libc_malloc", "__GI___libc_malloc"}, "malloc"),
    ({"free", "__libc_free", "cfree@GLIBC_2.2.5"}, "free"),
    # __GI_ and __pthread_ variants
    ({"clock_nanosleep", "__clock_nanosleep", "__GI___clock_nanosleep",
      "clock_nanosleep@GLIBC_2.2.5"}, "clock_nanosleep"),
    ({"pthread_cond_wait", "__pthread_cond_wait", "___pthread_cond_wait",
      "pthread_cond_wait@@GLIBC_2.3.2"}, "pthread_cond_wait"),
    ({"pthread_mutex_lock", "__pthread_mutex_lock", "___pthread_mutex_lock"},
     "pthread_mutex_lock"),
    ({"pthread_getspecific", "__pthread_getspecific"}, "pthread_getspecific"),
    # two public names of one code
    ({"mmap", "mmap64", "__mmap"}, "mmap"),
    ({"pwrite", "pwrite64", "__pwrite64", "__libc_pwrite"}, "pwrite"),
    ({"fflush", "_IO_fflush"}, "fflush"),
    ({"__libc_start_main", "__libc_start_main_impl"}, "__libc_start_main"),
]


@pytest.mark.parametrize(("names", "name"), ALIAS_SETS)
def test_one_name_per_code_address(names: set[str], name: str) -> None:
    assert {normalize(n) for n in names} == {name}


@pytest.mark.parametrize(("names", "name"), [
    (["__vdso_clock_gettime", "clock_gettime"], "clock_gettime"),  # fewest leading underscores
    (["___pthread_cond_wait", "__pthread_cond_wait"], "__pthread_cond_wait"),
    (["mmap64", "mmap"], "mmap"),  # then the shortest
    (["ntohs", "htons"], "htons"),  # then alphabetical order
    (["only"], "only"),
])
def test_canonical_name(names: list[str], name: str) -> None:
    assert canonical_name(names) == name
    assert canonical_name(reversed(names)) == name


def test_alias_groups_from_nm() -> None:
    nm = """\
0000000000098750 T __libc_malloc@@GLIBC_2.2.5
0000000000098750 T malloc@@GLIBC_2.2.5
00000000000a1000 W pthread_getspecific@@GLIBC_2.34
00000000000a1000 W pthread_getspecific@GLIBC_2.2.5
00000000000a1000 T __pthread_getspecific@GLIBC_2.2.5
00000000000b0000 T pthread_cond_wait@GLIBC_2.2.5
00000000000b0000 T __pthread_cond_wait_2_0@GLIBC_2.2.5
00000000000c0000 T alone@@GLIBC_2.2.5
00000000000d0000 D environ@@GLIBC_2.2.5
00000000000d0000 D __environ@@GLIBC_2.2.5
0000000000000000 A GLIBC_2.2.5
"""
    # an address only old versions name (a compatibility implementation) is no group; data
    # symbols are not code
    assert alias_groups(nm) == [["__libc_malloc", "malloc"],
                                ["__pthread_getspecific", "pthread_getspecific"]]


def test_read_aliases_joins_groups_that_share_a_name() -> None:
    text = "# comment\n__read read\n__libc_read read  # debug info\nmmap mmap64\n"
    assert read_aliases(text) == {"__read": "read", "__libc_read": "read", "mmap64": "mmap"}


def test_aliases_are_canonical() -> None:
    for alias, public in ALIASES.items():
        assert normalize(alias) == public
        assert normalize("__GI_" + alias) == public
        assert normalize(public) == public, "a public name must be a fixed point"


def test_aliases_classify_as_their_name() -> None:
    """A wait rule that names one alias of a code address names them all."""
    from wallflame.classify import default_rules

    rules = default_rules()
    assert [a for a, public in ALIASES.items()
            if rules.frame_class(a) != rules.frame_class(public)] == []


def nm_groups(path: Path) -> list[list[str]]:
    nm = shutil.which("nm")
    assert nm, "nm (binutils) is missing: bash scripts/setup.sh"
    out = subprocess.run([nm, "-D", "--defined-only", str(path)], capture_output=True,
                         text=True, check=True, timeout=60).stdout
    return alias_groups(out)


def vdso_image(dest: Path) -> Path:
    """This process's vDSO, copied out of its memory into a file ``nm`` can read."""
    for m in parse_maps(Path("/proc/self/maps").read_text()):
        if m.path == "[vdso]":
            with open("/proc/self/mem", "rb") as mem:
                mem.seek(m.start)
                dest.write_bytes(mem.read(m.end - m.start))
            return dest
    pytest.fail("this process has no [vdso] mapping")


def test_every_code_address_of_this_machines_libraries_has_one_name(tmp_path: Path) -> None:
    """Every group of names at one code address in this machine's glibc, libm, libgcc and
    vDSO, as ``nm`` lists them, gets one name: the rule holds on the libraries the collectors
    read, whatever the samples happen to hit."""
    libs = [Path(p) for p in ("/lib/x86_64-linux-gnu/libc.so.6",
                              "/lib/x86_64-linux-gnu/libm.so.6",
                              "/lib/x86_64-linux-gnu/libgcc_s.so.1") if Path(p).exists()]
    assert libs, "no glibc found where Debian installs it"
    split = []
    groups = 0
    for lib in [*libs, vdso_image(tmp_path / "vdso.so")]:
        for group in nm_groups(lib):
            groups += 1
            if len({normalize(n) for n in group}) > 1:
                split.append(f"{lib.name}: {group} -> {sorted({normalize(n) for n in group})}")
    assert not split, "\n".join(split)
    assert groups > 100


def test_unknown_in() -> None:
    assert unknown_in("/usr/lib/x86_64-linux-gnu/libc.so.6") == "[libc.so.6]"
    assert unknown_in("") == UNKNOWN and unknown_in("[unknown]") == UNKNOWN


@given(st.text(max_size=60))
def test_normalize_is_idempotent_and_total(raw: str) -> None:
    once = normalize(raw)
    assert once
    assert normalize(once) == once or once.endswith(")")  # "f(a)(b)" loses one list per pass
    assert strip_params(raw) is not None
