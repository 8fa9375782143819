"""Profiles the report tests render: a small, fully described run (every wait class, a lock
with holders, memory, pauses, losses) and one made of hostile names.  Other report tests import
the builders from here; the tests in this file check the builders say what they claim."""

from __future__ import annotations

from wallflame.profile import OFF, HolderKey, Profile, StackKey

MS = 1_000_000
LOCK = "0x55d0c0a04040 <shared_lock>"

#: Names a target may choose: each must reach the page as text, never as markup or code.
HOSTILE = [
    "<script>alert(1)</script>",
    "</script><script>alert(2)</script>",
    'quote"double',
    "quote'single",
    "amp&amp;lt;",
    "semi;colon::fn",
    "bad\udcffutf8",  # what an undecodable byte becomes when decoding with surrogateescape
    "bad\ufffdreplaced",  # what textio makes of invalid UTF-8
    "esc\x1b[31mred",
    "bidi\u202etxt.exe",
    "nul\x00byte",
    "<img src=x onerror=alert(3)>",
    "https://example.invalid/x",
    "{{ 7*7 }}",
]


def demo_profile() -> Profile:
    """Four workers of ``mix`` and a ticker over a 2 s window, in nanoseconds."""
    p = Profile()
    m = p.meta
    m.window_ns = 2000 * MS
    m.rates = {"perf_hz": 997.0, "pmp_hz": 20.0}
    m.samples = {"perf": 3600, "snapshots": 40}
    m.lose("lost perf events", 0, 12)
    m.warn("perf: frame pointers missing in libc: callers of __lll_lock_wait may be lost")
    m.extra["pause"] = {"snapshots": 40, "median_ms": 1.8, "max_ms": 4.2, "total_ms": 80.5}
    m.extra["commands"] = ["perf record -e cpu-clock -F 997 -g -p 4242 -- sleep 2"]
    m.extra["tools"] = {"perf": "6.1.0", "eu-stack": "0.188"}
    m.extra["memory"] = {
        "samples": [{"t_s": t / 10, "rss_kb": 4000 + 300 * t, "threads": 6 if t else 1}
                    for t in range(21)],
        "arenas": {"count": 3, "total_rss_kb": 2400, "mappings": [
            {"start": "0x7f0000000000", "size_kb": 65536, "rss_kb": 1200},
            {"start": "0x7f0004000000", "size_kb": 65536, "rss_kb": 800},
            {"start": "0x7f0008000000", "size_kb": 65536, "rss_kb": 400}]}}
    root = ("_start", "__libc_start_main", "main")
    thread = ("clone3", "start_thread", "worker_main")
    for i in range(1, 5):
        tid, name = 4242 + i, f"mix-{i}"
        m.threads[tid] = name
        p.add(StackKey((*thread, "spin_work", "mix_hash"), tid, name, 4242), (700 + 10 * i) * MS)
        p.add(StackKey((*thread, "critical_section", "spin_work"), tid, name, 4242), 200 * MS)
        p.add(StackKey((*thread, "pthread_mutex_lock", "__lll_lock_wait", "futex_wait_k"),
                       tid, name, 4242, OFF, "mutex", LOCK, 4242 + (i % 4) + 1), 600 * MS)
        p.add(StackKey((*thread, "nap", "clock_nanosleep"), tid, name, 4242, OFF, "sleep"),
              300 * MS)
        p.add(StackKey((*thread, "wait_for_tick", "pthread_cond_wait"), tid, name, 4242, OFF,
                       "condvar"), 150 * MS)
        p.add_holder(HolderKey(LOCK, 4242 + (i % 4) + 1, f"mix-{(i % 4) + 1}",
                               (*thread, "critical_section", "spin_work")), 500 * MS)
        p.add_holder(HolderKey(LOCK, 4242 + (i % 4) + 1, f"mix-{(i % 4) + 1}",
                               (*thread, "critical_section", "spin_work", "now_ns")), 100 * MS)
    m.threads[4242] = "mix"
    p.add(StackKey((*root, "pthread_join", "__futex_abstimed_wait"), 4242, "mix", 4242, OFF,
                   "other"), 1900 * MS)
    p.add(StackKey((*root, "epoll_wait"), 4242, "mix", 4242, OFF, "poll"), 100 * MS)
    p.add(StackKey((*thread, "read", "vfs_read_[k]"), 4247, "mix-ticker", 4242, OFF, "io"),
          150 * MS)
    m.threads[4247] = "mix-ticker"
    p.add(StackKey((*thread, "nap", "clock_nanosleep"), 4247, "mix-ticker", 4242, OFF, "sleep"),
          1800 * MS)
    m.sources.append({"path": "run-demo", "format": "wallflame"})
    return p


def hostile_profile(depth: int = 10_000) -> Profile:
    """Every hostile name as a frame and a thread name, plus one ``depth``-frame stack."""
    p = Profile()
    p.meta.window_ns = 1000 * MS
    for i, name in enumerate(HOSTILE):
        tid = 100 + i
        p.meta.threads[tid] = name
        p.add(StackKey(("main", name, f"leaf-{i}"), tid, name, 99), (i + 1) * 10 * MS)
        p.add(StackKey(("main", name), tid, name, 99, OFF, "mutex", f"0x{i:x} <{name}>", 7),
              5 * MS)
        p.add_holder(HolderKey(f"0x{i:x} <{name}>", 7, name, ("main", name)), 5 * MS)
    deep = tuple(f"recurse_{i % 7}" for i in range(depth))
    p.add(StackKey(("main", *deep, "bottom"), 90, "deep", 99), 100 * MS)
    p.meta.threads[90] = "deep"
    p.meta.warn("thread name <img src=x onerror=alert(4)> contained markup")
    return p


def test_demo_profile_adds_up() -> None:
    p = demo_profile()
    rows = {t.name: t for t in p.per_thread()}
    assert rows["mix-1"].total == 1960 * MS
    assert rows["mix"].total == p.meta.window_ns
    assert p.per_lock() == {LOCK: 2400 * MS}


def test_hostile_profile_has_every_name_and_the_deep_stack() -> None:
    p = hostile_profile(50)
    frames = {f for k in p.stacks for f in k.frames}
    assert set(HOSTILE) <= frames
    assert max(len(k.frames) for k in p.stacks) == 52
