"""``collect.locks.targetmemory.Symbols``: the cached lookups give what the uncached ones give.

The owner sampler scans 128 stack words per futex waiter, round after round; the lookups are
kept per word and per mapped file until the process's maps are read again.  These tests hold
the kept answers to a fresh lookup, on this test's own process (its libc and Python's code)."""

from __future__ import annotations

import ctypes
import itertools
import os
import random
import struct
from pathlib import Path
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wallflame.collect.locks import targetmemory
from wallflame.collect.locks.targetmemory import MemReader, Symbols


class _Stack:
    """A ``MemReader`` stand-in: ``read`` returns the given words."""

    def __init__(self, words: list[int]) -> None:
        self.data = b"".join(struct.pack("<Q", w) for w in words)

    def read(self, addr: int, size: int) -> bytes | None:
        return self.data[:size]


def _stack(words: list[int]) -> MemReader:
    return cast(MemReader, _Stack(words))


def _code_addresses() -> list[int]:
    libc = ctypes.CDLL(None)
    names = ("malloc", "free", "write", "pthread_mutex_lock", "pthread_cond_wait", "memcpy",
             "getpid", "nanosleep")
    base = [ctypes.cast(getattr(libc, n), ctypes.c_void_p).value or 0 for n in names]
    # and every 64th byte of the 8 KiB around ``write``: neighbouring functions, so that a
    # word kept under the wrong key would name its neighbour
    near = [base[2] - 4096 + off for off in range(0, 8192, 64)]
    return [a + off for a in base for off in (0, 1, 7, 40)] + near


def _uncached(sym: Symbols, words: list[int], limit: int = 8) -> list[str]:
    out: list[str] = []
    for w in words:
        if w < 4096:
            continue
        name = Symbols.function(sym, w)
        if name and name not in out:
            out.append(name)
            if len(out) >= limit:
                break
    return out


CODE = _code_addresses()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(CODE), st.integers(0, 2**64 - 1),
                          st.integers(0, 8192)), min_size=1, max_size=128),
       st.randoms(use_true_random=False))
def test_return_sites_kept_answers_match_fresh_lookups(words: list[int],
                                                        rnd: random.Random) -> None:
    sym = _SYMS
    fresh = Symbols(os.getpid())
    expected = _uncached(fresh, words)
    assert sym.return_sites(_stack(words), 1, len(words)) == expected  # kept or not
    assert sym.return_sites(_stack(words), 1, len(words)) == expected  # kept now
    if rnd.random() < 0.2:
        sym.refresh()  # the maps read again: nothing kept survives it
        assert sym.return_sites(_stack(words), 1, len(words)) == expected


_SYMS = Symbols(os.getpid())


def test_code_addresses_are_named_and_the_cache_starts_over_when_full(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sym = Symbols(os.getpid())
    named = sym.return_sites(_stack(CODE), 1, len(CODE), limit=100)
    assert {"getpid", "write", "nanosleep"} <= {n.split("@")[0] for n in named}, named
    monkeypatch.setattr(targetmemory, "WORDS_KEPT", 4)
    sym = Symbols(os.getpid())
    assert sym.return_sites(_stack(CODE), 1, len(CODE), limit=100) == named
    assert len(sym._words) <= 4


def test_name_of_data_is_the_same_with_the_bias_kept() -> None:
    sym = Symbols(os.getpid())
    libc = ctypes.CDLL(None)
    addr = ctypes.addressof(ctypes.c_int.in_dll(libc, "errno")) if hasattr(libc, "errno") \
        else ctypes.cast(libc.environ, ctypes.c_void_p).value or 0
    first = [sym.name(a) for a in (addr, *CODE[:8])]
    again = [sym.name(a) for a in (addr, *CODE[:8])]
    assert first == again == [Symbols(os.getpid()).name(a) for a in (addr, *CODE[:8])]


def test_nm_runs_once_per_file_for_every_symbols(monkeypatch: pytest.MonkeyPatch) -> None:
    """The owner sampler's and the snapshots' ``Symbols`` share each file's ``nm`` reading
    (code and data alike), and what they read is what a fresh ``nm`` gives."""
    monkeypatch.setattr(targetmemory, "_NM_ROWS", {})
    monkeypatch.setenv("WALLFLAME_NO_CACHE", "1")  # nothing kept by another collect
    runs: list[tuple[str, tuple[str, ...]]] = []
    real = targetmemory._nm_rows

    def counted(nm: str, path: str, extra: list[str]) -> list[tuple[int, int, str, str]] | None:
        runs.append((path, tuple(extra)))
        return real(nm, path, extra)

    monkeypatch.setattr(targetmemory, "_nm_rows", counted)
    a, b = Symbols(os.getpid()), Symbols(os.getpid())
    first = [a.function(w) for w in CODE]
    assert any(first)  # libc's functions were named
    assert [b.function(w) for w in CODE] == first
    assert len(runs) == len(set(runs)) and runs
    # data symbols of the same files: no new run for a file already read with the same options
    code_runs = set(runs)
    libc_data = ctypes.cast(ctypes.CDLL(None).stdout, ctypes.c_void_p).value or 0
    a.name(libc_data)
    assert len(runs) == len(set(runs))
    assert all(r in code_runs for r in runs[:len(code_runs)])
    # what is shared is what nm says, split by type as before
    for path, extra in set(runs):
        rows = real("nm", path, list(extra)) or []
        assert targetmemory._nm("nm", path, list(extra), "Tt") == \
            [(v, s, n) for v, s, k, n in rows if k in "Tt"]


def _libc_code() -> tuple[int, str]:
    """``getpid``'s address and the path of the library that holds it."""
    addr = ctypes.cast(ctypes.CDLL(None).getpid, ctypes.c_void_p).value or 0
    sym = Symbols(os.getpid())
    return addr, sym.maps[sym._find(addr)].path


@pytest.mark.parametrize("early", ["mapped whole, read-only", "not mapped yet"])
def test_maps_read_while_the_loader_mapped_a_library_are_read_again(
        monkeypatch: pytest.MonkeyPatch, early: str) -> None:
    """The owner sampler read the maps of a just-started target while the dynamic loader was
    mapping libc (its first step maps the whole file read-only, then the code over it): every
    return address into libc then stayed unnamed for the whole collect, and a lock taken
    from there unidentified."""
    addr, path = _libc_code()
    real = targetmemory.parse_maps
    reads: list[int] = []

    def parse(text: str) -> list[targetmemory.Mapping]:
        maps = real(text)
        reads.append(len(maps))
        if len(reads) > 1:
            return maps
        lib = [m for m in maps if m.path == path]
        rest = [m for m in maps if m.path != path]
        if early == "not mapped yet":
            return rest
        whole = targetmemory.Mapping(min(m.start for m in lib), max(m.end for m in lib), "r--p", 0,
                              lib[0].inode, path)
        return sorted([*rest, whole], key=lambda m: m.start)

    monkeypatch.setattr(targetmemory, "parse_maps", parse)
    clock = [1000.0]
    monkeypatch.setattr(targetmemory.time, "monotonic", lambda: clock[0])
    sym = Symbols(os.getpid())
    assert sym.function(addr) == ""  # read again only once the shortest wait has passed
    clock[0] += targetmemory.REREAD_FIRST_S + 0.001
    assert sym.function(addr).split("@")[0] == "getpid"
    assert len(reads) == 2


def test_words_that_are_no_address_read_the_maps_ever_less_often(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(targetmemory.time, "monotonic", lambda: clock[0])
    sym = Symbols(os.getpid())
    reads = []
    real = sym.refresh
    monkeypatch.setattr(sym, "refresh", lambda: (reads.append(clock[0]), real())[1])
    step = 0.01
    for n in range(int(120 / step)):
        clock[0] += step
        assert sym.function(8 << 40 | n) == ""  # unmapped: no address of this process
    gaps = [b - a for a, b in itertools.pairwise(reads)]
    assert all(b >= min(a * 1.9, targetmemory.REREAD_LAST_S - step)
               for a, b in itertools.pairwise(gaps)), gaps
    assert targetmemory.REREAD_LAST_S - step <= gaps[-1] <= targetmemory.REREAD_LAST_S + step, gaps
    assert len(reads) <= 14, reads


def test_a_scan_that_reads_the_maps_again_keeps_the_names_it_had() -> None:
    """A word that falls outside the maps reads them again, which empties the kept names:
    the words of the same stack named before must still be named in its answer."""
    sym = Symbols(os.getpid())
    words = CODE[:40]
    named = sym.return_sites(_stack(words), 1, len(words))
    assert named
    sym._read_at = 0.0  # the maps are old: the next word outside them reads them again
    reads = []
    real = sym.refresh

    def refresh() -> None:
        reads.append(1)
        real()

    sym.refresh = refresh  # type: ignore[method-assign]
    stack = [8 << 40, *words]  # no address, then the same code words
    assert sym.return_sites(_stack(stack), 1, len(stack)) == named
    assert reads == [1]


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every run of ``nm`` from now on, by path; nothing read in this process kept."""
    monkeypatch.setattr(targetmemory, "_NM_ROWS", {})
    runs: list[str] = []
    real = targetmemory._nm_rows

    def counted(nm: str, path: str, extra: list[str]) -> list[tuple[int, int, str, str]] | None:
        runs.append(path)
        return real(nm, path, extra)

    monkeypatch.setattr(targetmemory, "_nm_rows", counted)
    return runs


def test_a_file_read_by_an_earlier_collect_is_not_read_again(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A collect keeps each file's ``nm`` reading in the cache folder; the next one (a new
    process: nothing in ``_NM_ROWS``) reads the same rows from there, without ``nm``.  A file
    changed since, a kept table that cannot be read or is another file's, and
    ``WALLFLAME_NO_CACHE`` each mean ``nm`` again."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("WALLFLAME_NO_CACHE", raising=False)
    lib = tmp_path / "libc-copy.so"
    lib.write_bytes(Path(_libc_code()[1]).read_bytes())
    path = str(lib)
    rows = targetmemory._nm_rows("nm", path, ["-D"]) or []
    data = [(v, s, n) for v, s, k, n in rows if k in "Dd"]
    runs = _counting(monkeypatch)
    fresh = targetmemory._nm("nm", path, ["-D"], "Tt")
    assert fresh and runs == [path]
    kept = list((tmp_path / "cache" / "wallflame" / "symbols").iterdir())
    assert len(kept) == 1 and kept[0].stat().st_mode & 0o077 == 0

    runs = _counting(monkeypatch)  # the next collect
    assert targetmemory._nm("nm", path, ["-D"], "Tt") == fresh and runs == []
    assert data and targetmemory._nm("nm", path, ["-D"], "Dd") == data
    assert runs == []

    # the kept table spoiled: nm again, and the table written anew
    kept[0].write_text('{"key": ')
    runs = _counting(monkeypatch)
    assert targetmemory._nm("nm", path, ["-D"], "Tt") == fresh and runs == [path]
    # another file's table under this name is not read as this one's
    kept[0].write_text('{"key": "other", "rows": [[1, 2, "T", "planted"]]}')
    runs = _counting(monkeypatch)
    assert targetmemory._nm("nm", path, ["-D"], "Tt") == fresh and runs == [path]

    # the file changed (another size and change time): another key, nm again
    with open(lib, "ab") as f:
        f.write(b"\0" * 4096)
    runs = _counting(monkeypatch)
    assert targetmemory._nm("nm", path, ["-D"], "Tt") == fresh and runs == [path]

    monkeypatch.setenv("WALLFLAME_NO_CACHE", "1")
    runs = _counting(monkeypatch)
    assert targetmemory._nm("nm", path, ["-D"], "Tt") == fresh and runs == [path]
    runs = _counting(monkeypatch)
    assert targetmemory._nm("nm", path, ["-D"], "Tt") == fresh and runs == [path]


def test_a_failed_nm_is_not_kept(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("WALLFLAME_NO_CACHE", raising=False)
    monkeypatch.setattr(targetmemory, "_NM_ROWS", {})
    junk = tmp_path / "not-elf"
    junk.write_bytes(b"not an ELF file")
    # nm exits 1: "file format not recognized"
    assert targetmemory._nm_rows("nm", str(junk), []) is None
    assert targetmemory._nm("nm", str(junk), [], "Tt") == []
    assert not list((tmp_path / "cache" / "wallflame" / "symbols").glob("*.json"))


def test_a_symbols_folder_others_may_write_is_not_used(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    # rows planted there would name what a report shows: such a folder is neither read nor
    # written
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("WALLFLAME_NO_CACHE", raising=False)
    folder = tmp_path / "cache" / "wallflame" / "symbols"
    folder.mkdir(parents=True)
    os.chmod(folder, 0o770)
    path = _libc_code()[1]
    runs = _counting(monkeypatch)
    first = targetmemory._nm("nm", path, ["-D"], "Tt")
    runs = _counting(monkeypatch)
    assert targetmemory._nm("nm", path, ["-D"], "Tt") == first and runs == [path]
    assert not list(folder.iterdir())
