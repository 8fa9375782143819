"""The text report's top stacks: the user's frames root first, the kernel's folded into the
wait, within the width."""

from __future__ import annotations

from wallflame.report.text import NAME_WIDTH, STACK_LINES, WIDTH, stack_lines

KERNEL = ("entry_SYSCALL_64_after_hwframe", "do_syscall_64", "__x64_sys_futex", "do_futex",
          "futex_wait", "schedule", "__schedule")


def test_kernel_frames_fold_into_the_wait() -> None:
    frames = ("clone3", "start_thread", "worker", "pthread_mutex_lock", "__lll_lock_wait", *KERNEL)
    assert stack_lines(frames, "mutex") == [
        "worker > pthread_mutex_lock > __lll_lock_wait > [kernel 7: mutex]"]  # no runtime root
    # frames marked as the kernel's by their suffix count too
    assert stack_lines(("main", "read", "vfs_read_[k]", "schedule_[k]"), "io") == \
        ["main > read > [kernel 2: io]"]
    # on-CPU: no wait, the kernel frames still folded
    assert stack_lines(("main", "write", "entry_SYSCALL_64", "ksys_write"), "") == \
        ["main > write > [kernel 2]"]


def test_long_stacks_keep_the_root_and_the_wait_end() -> None:
    frames = ("_start", "main", *(f"layer_{i:03d}" for i in range(200)), "pthread_cond_wait",
              *KERNEL)
    lines = stack_lines(frames, "condvar")
    assert len(lines) == STACK_LINES
    assert all(len(line) <= WIDTH - 4 for line in lines)
    assert lines[0].startswith("main > layer_000 > … ")  # _start: the runtime's, left out
    assert lines[-1].endswith("layer_199 > pthread_cond_wait > [kernel 7: condvar]")
    elided = int(lines[0].split("… ")[1].split(" ")[0])
    parts = [p for line in lines for p in line.removesuffix(" >").split(" > ")]
    shown = len(parts) - 2  # the elision marker and the kernel's item are not frames
    # every user frame accounted for, but the runtime's at the root
    assert elided + shown == len(frames) - len(KERNEL) - 1


def test_names_are_cut_and_made_visible() -> None:
    long = "ns::Template<" + "x" * 300 + ">::run"
    lines = stack_lines(("main", long, "evil\x1b[31mname"), "")
    text = "\n".join(lines)
    assert "\x1b" not in text and "⟨U+001B⟩" in text
    assert max(len(part) for line in lines for part in line.split(" > ")) <= NAME_WIDTH + 2


def test_short_stacks_and_no_frames() -> None:
    assert stack_lines((), "other") == ["[other]"]
    assert stack_lines(("main",), "") == ["main"]


def test_a_run_of_one_frame_is_written_once() -> None:
    frames = ("main", "[postgres]", "[postgres]", "[postgres]", "PortalRun", "epoll_wait")
    assert stack_lines(frames, "poll") == ["main > [postgres] ×3 > PortalRun > epoll_wait > [poll]"]
    # the elision counts frames, not runs
    deep = ("_start", "main", *(["[unknown]"] * 300), *(f"f{i}" for i in range(300)), "read")
    lines = stack_lines(deep, "io")
    assert lines[0].startswith("main > [unknown] ×300 > … ")
    elided = int(lines[0].split("… ")[1].split(" ")[0])
    parts = [p for line in lines for p in line.removesuffix(" >").split(" > ")]
    assert elided + 300 + len(parts) - 3 == len(deep) - 1  # _start left out


def test_every_lock_line_fits_100_columns() -> None:
    """Long call sites, lock names and counts: each line of the locks section is cut to the
    width (a waited-at line of a 50-character call site was 101 columns)."""
    import io

    from wallflame.report.text import _locks

    long = "std::__condvar::wait_until<std::chrono::steady_clock, long long>"
    lock = {"lock": "0x" + "f" * 12 + " <" + long + ">", "wait_s": 123456.789,
            "waiters": [{"tid": i} for i in range(1000)],
            "held_confirmed": {"count": 99999, "of": 999999, "share": 0.1, "low": 0.0,
                               "high": 0.2}, "held_confirmed_s": 12345.6,
            "holders": [{"stack": "a;" + long, "name": "x" * 40, "tid": 4194303, "count": 9,
                         "of": 99999, "share": 0.5, "threads": []}],
            "released_from": {"sites": [{"frame": long * 2, "count": 5, "of": 999999}]}}
    s = {"unit": "seconds", "locks": [lock],
         "unidentified_lock_waits": [{"call_site": long, "s": 1234.5,
                                      "waiters": [{}] * 1000}]}
    out = io.StringIO()
    _locks(s, out)
    lines = out.getvalue().splitlines()
    assert len(lines) == 5 and all(len(line) <= 100 for line in lines), lines
    assert lines[-1].startswith("lock not identified, waited at std::__condvar::wait_until")
