"""The collect's folding process: perf's chunks folded while they are recorded
(``wallflame.assemble.folding``), then the run directory written
(``wallflame.assemble.assembly``), in a process of its own.

    python -m wallflame.assemble.streaming SPEC      (started by ``collect.stream.StreamProcess``)

``SPEC`` is a JSON object: ``out`` (the run directory), ``raw`` (its raw directory),
``stems`` (the recordings, in the order their chunks are read), ``pids`` (the processes whose
on-CPU samples are kept; ``null`` for a launched command), ``inline`` (perf resolves inlined
frames) and ``wakes`` (a wake-up recording is made).

It runs at ``SCHED_IDLE``, nice 19 and the idle I/O class from its start (``lower_priority``;
its threads and the ``perf script`` it runs inherit them), until the collect gives it the
normal priority back.  Standard input carries the collect's messages, one JSON object a line,
acted on in their order:

* ``{"window": [start, end, at_start]}``: the window on perf's clock (``end`` ``null`` while
  it is open) and the threads at its start (``ChunkFolder.set_window``);
* ``{"pids": [...]}``: the target's processes now;
* ``{"final": true}``: the recorders have stopped; every chunk left is folded;
* ``{"finish": true}``: ``raw/capture.json`` is final; the run directory is assembled from the
  chunks folded here (the folding's cost added to the capture) and the warnings are printed.

Its exit status is 0 once the run directory is written, or the documented code of the error
it printed.  If its input ends without ``finish`` (the collect ended without one) it exits at
once with status 1; every chunk stays in raw/ for ``wallflame finish``.  So does a fault of its
own: it prints one line, keeps the traceback in ``raw/folding.traceback`` and exits with
status 1, and the collect folds every chunk itself once the window has closed.
"""

from __future__ import annotations

import json
import queue
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import IO, Any

from wallflame.assemble.folding import Folding
from wallflame.collect import stream
from wallflame.errors import EXIT_USAGE, WallflameError, say
from wallflame.fold.perf.chunks import ChunkFolder

#: The exit status when the input ends without ``finish``: nothing written, every chunk in raw/.
EXIT_NOT_FINISHED = 1
#: Where a fault of the folding process leaves its traceback (in the raw directory).
TRACEBACK = "folding.traceback"

#: Seconds between two looks for a finished chunk while nothing else happens.
POLL_S = 0.5


def _messages(src: IO[bytes], out: queue.Queue[dict[str, Any] | None]) -> None:
    """Each line of ``src`` as a message, then ``None`` at its end (or at a line that is not
    a JSON object: the collect writes none)."""
    try:
        for line in src:
            msg = json.loads(line)
            if not isinstance(msg, dict):
                break
            out.put(msg)
    except (OSError, ValueError):
        pass
    out.put(None)


class Streaming:
    """The folding as the messages drive it."""

    def __init__(self, spec: dict[str, Any]) -> None:
        """``spec`` as the module says; ``ValueError`` (or ``TypeError``) if it is not."""
        self.out = Path(spec["out"])
        self.raw = Path(spec["raw"])
        if not isinstance(spec["stems"], list):
            raise ValueError("stems")
        pids = spec.get("pids")
        self.pids: list[int] | None = None if pids is None else [int(p) for p in pids]
        self.folding = Folding(self.raw, ChunkFolder(), spec["stems"],
                               None if self.pids is None else self.current_pids,
                               bool(spec.get("inline", True)), bool(spec.get("wakes")))
        self.window_end: int | None = None  # CLOCK_MONOTONIC, ns, once the window has closed

    def current_pids(self) -> list[int]:
        return list(self.pids or [])

    def handle(self, msg: dict[str, Any]) -> bool:
        """Act on one message; returns whether it was ``finish``."""
        if "window" in msg:
            start, end, at_start = msg["window"]
            self.folding.folder.set_window(
                int(start), None if end is None else int(end),
                None if at_start is None else [int(t) for t in at_start])
            if end is not None:
                self.window_end = int(end)
        if "pids" in msg and self.pids is not None:
            self.pids = [int(p) for p in msg["pids"]]
        if msg.get("final") or msg.get("finish"):  # no chunk left out
            # the collect's window is on this clock (perf's ``mono``)
            self.folding.fold_rest(time.monotonic_ns() if self.window_end is None
                                   else self.window_end)
        return bool(msg.get("finish"))

    def step(self) -> bool:
        """Fold the chunks ready now; returns whether there were any."""
        return self.folding.step()

    def finish(self) -> None:
        """The run directory, from the chunks folded here."""
        from wallflame.assemble.assembly import assemble
        from wallflame.output import print_losses

        print_losses(assemble(self.out, self.folding).meta)


def run(streaming: Streaming, src: IO[bytes]) -> int:
    """Fold as the chunks come and the messages say, until ``finish`` or the input's end.  The
    priority is lowered before any thread or child is started: they inherit it."""
    streaming.folding.folded.cost.priority = stream.lower_priority()
    inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
    threading.Thread(target=_messages, args=(src, inbox), name="wallflame-messages",
                     daemon=True).start()
    busy = False
    while True:
        try:
            msg = inbox.get(timeout=0 if busy else POLL_S)
        except queue.Empty:
            msg = {}
        if msg is None:
            return EXIT_NOT_FINISHED  # the collect ended without a finish
        if msg:
            try:
                last = streaming.handle(msg)
            except (KeyError, TypeError, ValueError):
                say(f"wallflame: error: the folding process was sent {json.dumps(msg)[:200]}, "
                    "which it cannot read (fix: wallflame finish RUN_DIR folds the run)")
                return EXIT_NOT_FINISHED
            if last:
                streaming.finish()
                return 0
            busy = True  # the messages first, then the chunks
            continue
        busy = not streaming.folding.final and streaming.step()


def run_safely(streaming: Streaming, src: IO[bytes]) -> int:
    """``run``, with a fault of its own said in one line (its traceback kept in
    ``raw/folding.traceback``) and ``EXIT_NOT_FINISHED``: nothing is lost, the collect folds
    every chunk itself."""
    try:
        return run(streaming, src)
    except WallflameError:
        raise
    except Exception as e:  # the collect folds what this process did not
        where: Path | None = streaming.raw / TRACEBACK
        try:
            streaming.raw.joinpath(TRACEBACK).write_text(traceback.format_exc(),
                                                         encoding="utf-8")
        except OSError:
            where = None
        say(f"wallflame: warning: the folding process failed ({type(e).__name__}: "
            f"{str(e)[:200]}); every chunk is folded once the window has closed"
            + (f" (its traceback: {where})" if where is not None else ""))
        return EXIT_NOT_FINISHED


def main() -> None:
    # Ctrl-C reaches the collect, which decides; this process ends when its input does.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        spec = json.loads(sys.argv[1])
        if not isinstance(spec, dict):
            raise ValueError
        streaming = Streaming(spec)
    except (IndexError, KeyError, TypeError, ValueError):
        say("wallflame: error: the folding process needs its specification (JSON) as its "
            "one argument (fix: it is started by wallflame collect)")
        sys.exit(EXIT_USAGE)
    # The messages are read from the descriptor itself, unbuffered: a thread blocked in a read
    # of sys.stdin holds its buffer's lock, and an exit meanwhile (the run directory written,
    # or an error) aborted the interpreter ("could not acquire lock for <stdin> at
    # interpreter shutdown", status -6) whenever the collect had not yet closed the pipe.
    src = open(sys.stdin.fileno(), "rb", buffering=0, closefd=False)  # noqa: SIM115
    try:
        code = run_safely(streaming, src)
    except WallflameError as e:
        e.show()
        sys.exit(e.exit_code)
    sys.exit(code)


if __name__ == "__main__":
    main()
