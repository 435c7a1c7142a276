"""What makes a command-line tool built on zrecord behave like a Unix tool: the ``zrecord``
command uses it, and so does ``loaderx-convert`` (it is public for such tools).

Invariants of this module:
- Every run ends with one of the exit statuses below, and each status means one thing.
- Ctrl-C prints one line on stderr, then one for each note the interrupted work left on the
  interrupt (``restate``: what it kept, where), and nothing else. Run as the program, the process then ends
  by SIGINT itself (the shell reports status 130): a shell running a loop of commands stops
  at the interrupt only when its child was killed by the signal, not when it exited 130.
  SIGTERM is undone and ended the same way ("terminated", then the process ends by SIGTERM).
- A reader of the output that goes away (``zrecord head S | head -1``) ends the command
  quietly, with status 141 as for a tool killed by SIGPIPE: stdout is flushed inside the
  command, never first at the interpreter's shutdown, where a closed pipe would print
  "Exception ignored" and exit 120.
- Progress (``progress_bar``) is redrawn in place only on a terminal (or in a notebook);
  anywhere else (a pipe, a file, a CI log) it is a few plain lines, each ended by a newline,
  and work ended by an exception adds no line of its own.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import textwrap
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

EXIT_OK = 0
EXIT_USAGE = 2  # argparse's own status for a usage error
EXIT_RUNTIME = 3  # I/O, permissions, memory: the environment failed, not the input
EXIT_INTERRUPTED = 128 + signal.SIGINT
EXIT_TERMINATED = 128 + signal.SIGTERM
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE

# Seconds between two progress lines where stderr is not a terminal: there a bar redrawn in
# place would pile up as one endless line of carriage-return-joined redraws.
PROGRESS_LINES_INTERVAL_S = 15.0

# The last two lines of every tool's exit-status table.
STATUSES_COMMON = [
    (EXIT_INTERRUPTED, "interrupted (Ctrl-C, SIGINT)"),
    (EXIT_TERMINATED, "terminated (SIGTERM), undone as for Ctrl-C"),
    (EXIT_BROKEN_PIPE, "the reader of the output went away (as for cat; no message)"),
]


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Descriptions and epilogs as written (tables stay tables), and "(default: X)" after
    every option whose default says something: not after a flag (False) or an unset option
    (None)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def paragraph(text: str) -> str:
    """`text` wrapped for a ``--help`` description (the formatter keeps text as written)."""
    return textwrap.fill(text, width=79)


def epilog(statuses: list[tuple[int, str]], examples: list[tuple[str, str]]) -> str:
    """The end of a ``--help``: the exit statuses (a tool's own, then `STATUSES_COMMON`) and a
    few examples, as aligned plain text. Examples longer than a line put their comment below."""
    lines = ["exit status:"]
    # A meaning may run over lines; they continue under its first word.
    lines += [f"  {code:<4} " + meaning.replace("\n", "\n       ")
              for code, meaning in statuses + STATUSES_COMMON]
    lines += ["", "examples:"]
    width = max(len(command) for command, _ in examples)
    if width <= 40:
        lines += [f"  {command:<{width}}  # {what}" for command, what in examples]
    else:
        lines += [f"  {command}\n      {what}" for command, what in examples]
    return "\n".join(lines)


def say(line: str) -> None:
    """One line on stderr; nothing when stderr itself is gone."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


@contextmanager
def progress_bar(enabled: bool, total: int | None, desc: str,
                 unit: str = "records") -> Iterator[Callable[[int], object]]:
    """Show the progress of work on stderr; yield ``update(n)``, which counts `n` more units
    of the `total` (None: not known) done.

    On a terminal, and in a Jupyter notebook, progress is a tqdm bar redrawn in place (tqdm
    is imported only then). Elsewhere (a pipe, a file, a CI log), and where tqdm is not
    installed, it is plain lines: one every ``PROGRESS_LINES_INTERVAL_S`` seconds while the
    work goes on and one when it is done, such as ``train: write: 60,000/60,000 rows (100%)
    done in 12.3 s, 4,878 rows/s``. Work ended by an exception writes no last line. With
    `enabled` false nothing is shown.
    """
    if not enabled:
        yield lambda n: None
        return
    bar = _tqdm_bar(total, desc, unit)
    if bar is not None:
        try:
            yield bar.update
        finally:
            bar.close()
        return
    lines = _ProgressLines(total, desc, unit)
    yield lines.update
    lines.done()


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, OSError, ValueError):
        return False  # replaced by an object without isatty, or closed


def _tqdm_bar(total: int | None, desc: str, unit: str) -> Any:
    """A tqdm bar on stderr where one can be drawn, else None."""
    terminal = _is_terminal(sys.stderr)
    # A Jupyter kernel's stderr is no terminal, but tqdm.auto draws a widget there.
    if not terminal and "ipykernel" not in sys.modules:
        return None
    try:
        from tqdm.auto import tqdm
        from tqdm.std import tqdm as text_bar
    except ImportError:
        return None
    if not terminal and tqdm is text_bar:
        return None  # a kernel without notebook widgets: lines, not redraws
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, dynamic_ncols=True)


class _ProgressLines:
    """Progress as plain lines on stderr, at most one per ``PROGRESS_LINES_INTERVAL_S``."""

    def __init__(self, total: int | None, desc: str, unit: str) -> None:
        self._total, self._desc, self._unit = total, desc, unit
        self._count = 0
        self._started = self._written = time.monotonic()

    def update(self, n: int) -> None:
        self._count += n
        now = time.monotonic()
        if now - self._written >= PROGRESS_LINES_INTERVAL_S:
            self._written = now
            self._write(now, "after")

    def done(self) -> None:
        self._write(time.monotonic(), "done in")

    def _write(self, now: float, state: str) -> None:
        elapsed = now - self._started
        count = f"{self._count:,}" + (f"/{self._total:,}" if self._total is not None else "")
        share = f" ({self._count / self._total:.0%})" if self._total else ""
        rate = f", {self._count / elapsed:,.0f} {self._unit}/s" if elapsed > 0 else ""
        say(f"{self._desc}: {count} {self._unit}{share} {state} {elapsed:,.1f} s{rate}")


class Terminated(BaseException):
    """SIGTERM reached a tool (``run_tool``, run as the program): raised on the main thread as
    Ctrl-C's KeyboardInterrupt is, so that what the work would undo on an interrupt (a
    temporary folder, a staged store) is undone; a BaseException for the same reason."""


def _terminate(signum: int, frame: Any) -> None:
    raise Terminated()


def run_tool(prog: str, body: Callable[[], int], *, as_program: bool) -> int:
    """Run `body` (which parses the arguments and runs a command) and return its exit status,
    or end it the way a Unix tool ends on Ctrl-C, on SIGTERM (which `kill`, `timeout`, Slurm
    and `docker stop` send: the work is undone as for Ctrl-C, then the process ends by the
    signal) or on a closed output pipe.

    `as_program` is true when this process is the command (its console script): only then are
    the process's file descriptors and signal dispositions touched.
    """
    if as_program:
        signal.signal(signal.SIGTERM, _terminate)
    try:
        try:
            status = body()
        except SystemExit:
            # argparse ends --help, --version and usage errors this way; their output meets a
            # closed pipe here as well, not at the interpreter's final flush.
            sys.stdout.flush()
            raise
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        if as_program:
            _silence_output()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt as exc:
        return _interrupted(prog, as_program, getattr(exc, "__notes__", ()))
    except Terminated as exc:
        return _terminated(prog, getattr(exc, "__notes__", ()))


def message_of(exc: BaseException) -> str:
    """What a command line prints of `exc`: its message, without the ``[Errno N] `` that
    Python puts before an ``OSError``'s (the number means nothing to a reader of the line; a
    zrecord message names the errno's meaning where it matters)."""
    if isinstance(exc, OSError) and exc.errno is not None and exc.strerror is not None:
        return exc.strerror + (f": {exc.filename!r}" if exc.filename is not None else "")
    return str(exc)


def restate(exc: BaseException, more: str) -> None:
    """Add `more` to what `exc` says, which goes on being raised as it is (its type and
    attributes kept, for callers that tell errors apart): to its message, or for an interrupt
    (whose one line stays as it is) as a note, which ``run_tool`` prints after that line. An
    ``OSError`` that has an errno shows its ``strerror`` and ignores ``args``, so that is where
    `more` goes for one."""
    if not isinstance(exc, Exception):
        notes = getattr(exc, "__notes__", None)
        exc.__notes__ = [*(notes or ()), more]  # add_note, which Python 3.10 lacks
    elif isinstance(exc, OSError) and exc.strerror is not None:
        exc.strerror = f"{exc.strerror}; {more}"
    else:
        exc.args = (f"{exc}; {more}",)


def _silence_output() -> None:
    """Point stdout and stderr at /dev/null (the recipe of Python's signal documentation), so
    the interpreter's final flush of what is still buffered cannot fail and complain."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for stream in (sys.stdout, sys.stderr):
            try:
                os.dup2(devnull, stream.fileno())
            except (OSError, ValueError):
                pass  # not a real file (replaced by the caller): nothing to protect
    finally:
        os.close(devnull)


def _terminated(prog: str, notes: Sequence[str]) -> int:
    """SIGTERM, once the work is undone: its line and the work's notes, then the process ends
    by the signal itself (the caller sees a child killed by SIGTERM, 143 in a shell)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    say(f"{prog}: terminated")
    for note in notes:
        say(f"{prog}: {note}")
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    os.kill(os.getpid(), signal.SIGTERM)
    return EXIT_TERMINATED  # where the signal does not end the process at once


def _interrupted(prog: str, as_program: bool, notes: Sequence[str] = ()) -> int:
    """The one line of an interrupt, then what the work interrupted left and how to go on
    (the notes a library added to the interrupt: a staged copy kept, where)."""
    if as_program:
        # From here a second Ctrl-C ends the process at once (say, while a stalled reader
        # blocks the flush below).
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    say(f"{prog}: interrupted")
    for note in notes:
        say(f"{prog}: {note}")
    if as_program:
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            pass
        # End by the signal itself, as Python does for an uncaught KeyboardInterrupt, so that
        # the calling shell sees a child killed by SIGINT (status 130) and stops its script.
        os.kill(os.getpid(), signal.SIGINT)
    return EXIT_INTERRUPTED

