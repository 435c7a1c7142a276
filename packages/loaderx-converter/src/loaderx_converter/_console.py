"""What makes the ``loaderx-convert`` console script behave like a Unix tool.

zrecord's command line follows the same rules with its own helper: this distribution uses
zrecord's public API only.

Invariants of this module:
- Every run ends with one of the exit statuses below, and each status means one thing.
- Ctrl-C prints one line on stderr and nothing else (the conversion removes its temporary
  folder on the way out). Run as the program, the process then ends by SIGINT itself, which
  the shell reports as status 130: a shell script stops at the interrupt only when its child
  was killed by the signal, not when it exited 130.
- A reader of the output that goes away ends the command quietly with status 141, as for a
  tool killed by SIGPIPE. stdout is flushed inside the command, never first at the
  interpreter's shutdown, where a closed pipe would print "Exception ignored" and exit 120.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import textwrap
from collections.abc import Callable

EXIT_OK = 0
EXIT_UNCONVERTIBLE = 1  # the dataset cannot be converted as asked; running again won't help
EXIT_USAGE = 2  # argparse's own status for a usage error
EXIT_RUNTIME = 3  # I/O, the Hub or the network, memory: the environment failed
EXIT_INTERRUPTED = 128 + signal.SIGINT
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE

STATUSES = [
    (EXIT_OK, "success: ROOT is published"),
    (EXIT_UNCONVERTIBLE, "the dataset cannot be converted as asked (unsupported feature, null,\n"
                         "unsafe split or column name, bad option value, ROOT exists)"),
    (EXIT_USAGE, "usage error (unknown option, missing argument, unreadable --dict file)"),
    (EXIT_RUNTIME, "the system failed (I/O error, the Hub or the network, out of memory)"),
    (EXIT_INTERRUPTED, "interrupted (Ctrl-C, SIGINT); an unfinished conversion publishes nothing"),
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


def epilog(examples: list[tuple[str, str]]) -> str:
    """The end of ``--help``: the exit statuses and a few examples, as aligned plain text."""
    lines = ["exit status:"]
    # A meaning may run over lines; they continue under its first word.
    lines += [f"  {code:<4} " + meaning.replace("\n", "\n       ") for code, meaning in STATUSES]
    lines += ["", "examples:"]
    lines += [f"  {command}\n      {what}" for command, what in examples]
    return "\n".join(lines)


def say(line: str) -> None:
    """One line on stderr; nothing when stderr itself is gone."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def run_tool(prog: str, body: Callable[[], int], *, as_program: bool) -> int:
    """Run `body` (which parses the arguments and runs the command) and return its exit
    status, or end it the way a Unix tool ends on Ctrl-C or on a closed output pipe.

    `as_program` is true when this process is the command (its console script): only then are
    the process's file descriptors and signal dispositions touched.
    """
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
    except KeyboardInterrupt:
        return _interrupted(prog, as_program)


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


def _interrupted(prog: str, as_program: bool) -> int:
    if as_program:
        # From here a second Ctrl-C ends the process at once (say, while a stalled reader
        # blocks the flush below).
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    say(f"{prog}: interrupted")
    if as_program:
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            pass
        # End by the signal itself, as Python does for an uncaught KeyboardInterrupt, so that
        # the calling shell sees a child killed by SIGINT (status 130) and stops its script.
        os.kill(os.getpid(), signal.SIGINT)
    return EXIT_INTERRUPTED
