"""``wallflame doctor``: can this machine (and this target) be profiled, and what to fix."""

from __future__ import annotations

import itertools
import os
import subprocess

import click

from wallflame.collect.run import tool_versions
from wallflame.collect.target import open_target, status_field
from wallflame.errors import EXIT_PERMISSION, EXIT_TARGET, EXIT_TOOL, WallflameError
from wallflame.systools import find_program, package_of


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return None


def _run(cmd: list[str], limit: int = 8 << 20) -> str:
    """A tool's output (at most ``limit`` bytes), or "" if it cannot run."""
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                stdin=subprocess.DEVNULL, env={**os.environ, "LC_ALL": "C"})
    except OSError:
        return ""
    assert proc.stdout is not None
    data = proc.stdout.read(limit)
    proc.kill()
    proc.wait()
    return data.decode("utf-8", "replace")


#: Start-up code from crt*.o, never built with the program's flags.
_CRT = {"_start", "_init", "_fini", "deregister_tm_clones", "register_tm_clones",
        "__do_global_dtors_aux", "frame_dummy", "__libc_csu_init", "__libc_csu_fini"}


def frame_pointer_share(exe: str) -> float | None:
    """Share of the program's own non-leaf ``.text`` functions that set up a frame pointer
    (``mov %rsp,%rbp`` in the prologue; first 8 MiB of the disassembly), or ``None``."""
    if find_program("objdump") is None:
        return None
    funcs = with_fp = 0
    lines = _run(["objdump", "-d", "--no-show-raw-insn", "-j", ".text", exe]).splitlines()
    starts = [i for i, line in enumerate(lines) if line.endswith(">:")] + [len(lines)]
    for a, b in itertools.pairwise(starts):
        name = lines[a][lines[a].find("<") + 1:-2]
        body = lines[a + 1:b]
        # Leaf functions need no frame (GCC omits it there by default) and crt code is not
        # the program's: only functions that call something are counted.
        if name in _CRT or "@" in name or not any("\tcall " in ln for ln in body):
            continue
        funcs += 1
        if any("mov    %rsp,%rbp" in ln for ln in body[:10]):
            with_fp += 1
    return with_fp / funcs if funcs else None


def checks(pid: int | None) -> list[tuple[str, str, str]]:
    """``(status, finding, fix)`` rows; status is ok, warn or FAIL."""
    rows: list[tuple[str, str, str]] = []
    root = os.geteuid() == 0
    versions = tool_versions()
    for tool, need in (("perf", True), ("eu-stack", True), ("gdb", True), ("pt-pmp", False)):
        found = find_program(tool)
        v = versions.get(tool, "") if found else ""
        if found:
            rows.append(("ok", f"{tool}: {v or found}", ""))
        else:
            rows.append(("FAIL" if need else "warn", f"{tool}: not installed",
                         f"apt-get install {package_of(tool)}"))
    lib = versions.get("libdw", "")
    rows.append(("ok", f"{lib} (the default snapshot backend)", "") if lib else
                ("FAIL", "libdw.so.1: cannot be loaded (the default snapshot backend)",
                 "apt-get install libdw1, or use --pmp-backend eu-stack"))
    from wallflame.speedups import native

    rows.append(("ok", f"native module: {native.__file__}", ""))
    paranoid = _read("/proc/sys/kernel/perf_event_paranoid")
    if paranoid is not None:
        ok = root or int(paranoid) <= 1
        rows.append(("ok" if ok else "FAIL", f"kernel.perf_event_paranoid = {paranoid}"
                     + (" (root: not limited)" if root else ""),
                     "" if ok else "sysctl -w kernel.perf_event_paranoid=1 (or setcap "
                     "cap_perfmon,cap_sys_ptrace+ep $(command -v perf))"))
    scope = _read("/proc/sys/kernel/yama/ptrace_scope")
    if scope is None:
        rows.append(("ok", "ptrace_scope: no Yama (ptrace limited only by user and "
                     "CAP_SYS_PTRACE)", ""))
    else:
        ok = scope == "0" or (root and scope in ("1", "2"))
        rows.append(("ok" if ok else "FAIL", f"kernel.yama.ptrace_scope = {scope}",
                     "" if ok else "sysctl -w kernel.yama.ptrace_scope=0, or run as root "
                     "(scope 3 needs a reboot)"))
    kptr = _read("/proc/sys/kernel/kptr_restrict")
    if kptr is not None:
        ok = kptr == "0" or (root and kptr == "1")
        rows.append(("ok" if ok else "warn", f"kernel.kptr_restrict = {kptr}",
                     "" if ok else "sysctl -w kernel.kptr_restrict=0 (kernel frames are "
                     "[unknown] otherwise)"))
    who = "root" if root else f"uid {os.geteuid()}"
    rows.append(("ok" if root else "warn", f"running as {who}",
                 "" if root else "profile processes of your own user, or use sudo"))
    if pid is not None:
        rows.extend(target_checks(pid))
    return rows


def target_checks(pid: int) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    try:
        t = open_target(pid)
    except WallflameError as e:
        return [("FAIL", f"PID {pid}: {e.message}", e.fix)]
    rows.append(("ok", f"PID {pid}: {t.comm} ({t.exe or '?'})", ""))
    threads = status_field(pid, "Threads") or "?"
    rows.append(("ok", f"threads: {threads}", ""))
    if t.stopped_at_start:
        rows.append(("warn", "the target is stopped (state T): it will stay stopped", ""))
    exe = f"/proc/{pid}/exe"
    sections = _run(["readelf", "-S", "-W", exe]) if find_program("readelf") else ""
    if sections:
        debug = ".debug_info" in sections
        symtab = ".symtab" in sections
        rows.append(("ok" if debug else "warn", "debug info: " + ("yes" if debug else "no"),
                     "" if debug else "build with -g or install the -dbgsym package"))
        rows.append(("ok" if symtab else "warn", "symbol table: " +
                     ("yes" if symtab else "no (stripped)"),
                     "" if symtab else "keep symbols (do not strip) for readable stacks"))
    share = frame_pointer_share(exe)
    if share is None and find_program("objdump"):
        rows.append(("warn", "frame pointers: cannot tell (no function symbols)",
                     "collect with --call-graph dwarf if on-CPU stacks look shallow"))
    if share is not None:
        ok = share >= 0.5
        rows.append(("ok" if ok else "warn", f"frame pointers: {share:.0%} of functions",
                     "" if ok else "build with -fno-omit-frame-pointer, or collect with "
                     "--call-graph dwarf"))
    return rows


@click.command("doctor")
@click.option("-p", "--pid", type=int, default=None, help="Also check this target process.")
def command(pid: int | None) -> None:
    """Check tools, kernel settings and (with --pid) the target; print what to fix.

    Exits 0 when collection can work, 4 for a target problem, 5 for a permission setting,
    6 for a missing tool."""
    rows = checks(pid)
    for status, finding, fix in rows:
        click.echo(f"{status:>4}  {finding}" + (f"\n      fix: {fix}" if fix else ""))
    failed = [r[1] for r in rows if r[0] == "FAIL"]
    if any(f.startswith("PID ") for f in failed):
        raise click.exceptions.Exit(EXIT_TARGET)
    if any("paranoid" in f or "ptrace" in f for f in failed):
        raise click.exceptions.Exit(EXIT_PERMISSION)
    if failed:
        raise click.exceptions.Exit(EXIT_TOOL)
