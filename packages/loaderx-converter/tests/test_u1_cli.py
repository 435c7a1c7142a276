"""Issue [U1]: `loaderx-convert` behaves like a Unix tool: --version, distinct and documented
exit statuses, one line for Ctrl-C, quiet on a closed pipe, plain-text help. Every test runs
the real console script."""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from datasets import Dataset, Features, Sequence, Value

import zrecord
from loaderx_converter import __version__

CONVERT_SCRIPT = Path(sys.executable).parent / "loaderx-convert"


def _cli(*argv: str, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CONVERT_SCRIPT), *argv], capture_output=True, text=True,
                          timeout=300, **kwargs)


def _temporaries(folder: Path) -> list[str]:
    return [name for name in os.listdir(folder) if ".zr-tmp-" in name]


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    """A save_to_disk folder of a few rows (a source that makes datasets print nothing)."""
    path = tmp_path_factory.mktemp("small") / "saved"
    Dataset.from_dict({"x": np.arange(5, dtype=np.int64)}).save_to_disk(str(path))
    return path


@pytest.fixture(scope="module")
def large(tmp_path_factory) -> Path:
    """A save_to_disk folder that takes seconds to convert."""
    path = tmp_path_factory.mktemp("large") / "saved"
    n = 400_000
    Dataset.from_dict({"x": np.arange(n, dtype=np.int64),
                       "v": [[i % 7] * (i % 11) for i in range(n)]},
                      features=Features({"x": Value("int64"), "v": Sequence(Value("int32"))})
                      ).save_to_disk(str(path))
    return path


def test_u1_01_version():
    """[U1] item 1: --version names this package's version and the zrecord and datasets
    versions it runs with, and exits 0."""
    proc = _cli("--version")
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout == (f"loaderx-convert (loaderx-converter) {__version__}, zrecord "
                           f"{zrecord.__version__}, datasets {importlib.metadata.version('datasets')}\n")
    module = subprocess.run([sys.executable, "-m", "loaderx_converter.cli", "--version"],
                            capture_output=True, text=True, timeout=120)
    assert (module.returncode, module.stdout) == (0, proc.stdout)


def _foreground() -> None:
    """Run in a child before exec: SIGINT as a terminal's foreground job has it. A job started
    in the background by a shell without job control (CI runners, `cmd &` in a script) inherits
    SIGINT ignored, and a program started so rightly keeps ignoring it (nohup relies on that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_u1_02_ctrl_c_prints_one_line_and_publishes_nothing(large, tmp_path):
    """[U1] item 2: Ctrl-C while stores are written prints one line, no traceback, removes the
    temporary folder, and ends the process by SIGINT (a shell's status 130)."""
    root = tmp_path / "out"
    proc = subprocess.Popen([str(CONVERT_SCRIPT), str(large), str(root), "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_foreground)
    deadline = time.monotonic() + 120
    while not _temporaries(tmp_path) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    assert _temporaries(tmp_path), "the conversion never started writing"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert (proc.returncode, out, err) == (-signal.SIGINT, "", "loaderx-convert: interrupted\n")
    assert not root.exists() and _temporaries(tmp_path) == []


def test_u1_02_in_process_interrupt_returns_130(monkeypatch, capsys, small, tmp_path):
    """[U1] item 2: as a function, main([...]) returns 130 and leaves signal handlers alone."""
    import loaderx_converter.cli as cli

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "convert", interrupted)
    before = signal.getsignal(signal.SIGINT)
    assert cli.main([str(small), str(tmp_path / "out"), "--quiet"]) == 130
    assert capsys.readouterr().err == "loaderx-convert: interrupted\n"
    assert signal.getsignal(signal.SIGINT) is before


def test_u1_02_a_closed_pipe_ends_quietly(small, tmp_path):
    """[U1] item 2: output into a pipe whose reader is gone ends quietly (141, as cat's
    SIGPIPE; argparse's --help and --version ignore the failed write: 0), never with
    "Exception ignored ... BrokenPipeError" from the interpreter's final flush. The
    conversion itself was published before its summary was printed."""
    for argv in ([str(small), str(tmp_path / "out"), "--quiet"], ["--help"], ["--version"]):
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            proc = subprocess.run([str(CONVERT_SCRIPT), *argv], stdout=write_end,
                                  stderr=subprocess.PIPE, text=True, timeout=300)
        finally:
            os.close(write_end)
        assert proc.returncode in ((141,) if len(argv) == 3 else (0, 141)), argv
        assert proc.stderr == "", argv
    assert zrecord.Dense.open(tmp_path / "out" / "train" / "x")[:].tolist() == [0, 1, 2, 3, 4]


def _one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    # (datasets' own "Generating train split" progress lines may precede it.)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("loaderx-convert")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_u1_03_exit_statuses(small, tmp_path):
    """[U1] item 3: 0 published; 1 the dataset cannot be converted as asked; 2 usage; 3 the
    system failed (the Hub unreachable, a write refused). Runtime failures exited 1, like a
    dataset that cannot be converted."""
    assert _cli(str(small), str(tmp_path / "ok"), "--quiet").returncode == 0
    # 1: a string column; ROOT exists; a --data-shards value zrecord refuses.
    strings = tmp_path / "strings"
    Dataset.from_dict({"s": ["a", "b"]}).save_to_disk(str(strings))
    for argv, says in (([str(strings), str(tmp_path / "s")], "'s'"),
                       ([str(small), str(tmp_path / "ok")], "must not exist"),
                       ([str(small), str(tmp_path / "d"), "--data-shards", "0"], "--data-shards")):
        proc = _cli(*argv, "--quiet")
        assert proc.returncode == 1, (argv, proc.stderr)
        assert _one_error_line(proc).startswith("loaderx-convert: error:") and says in proc.stderr
    # 2: argparse's usage errors, an unreadable --dict file among them.
    for argv in ([], [str(small)], [str(small), str(tmp_path / "u"), "--codec", "lz4"],
                 [str(small), str(tmp_path / "u"), "--dict", str(tmp_path / "missing")],
                 [str(small), str(tmp_path / "u"), "--data-shards", "many"]):
        proc = _cli(*argv)
        assert proc.returncode == 2 and proc.stderr.startswith("usage: loaderx-convert"), argv
    assert "--dict: cannot read" in _cli(str(small), "u", "--dict", str(tmp_path / "missing")).stderr
    # 3: the Hub cannot provide the dataset (offline, nothing cached) ...
    offline = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = _cli("nobody/nothing", str(tmp_path / "h"), "--cache-dir", str(tmp_path / "cache"),
                "--quiet", env=offline)
    assert proc.returncode == 3 and "HF_HUB_OFFLINE" in _one_error_line(proc)

    # ... and the system refuses a write (files may not grow beyond 1 KiB).
    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of the signal

    wide = tmp_path / "wide"
    Dataset.from_dict({"x": np.arange(10_000, dtype=np.int64)}).save_to_disk(str(wide))
    proc = _cli(str(wide), str(tmp_path / "f"), "--codec", "raw", "--quiet",
                preexec_fn=small_files)
    assert proc.returncode == 3, proc.stderr
    assert "too large" in _one_error_line(proc).lower()
    assert not (tmp_path / "f").exists()


def test_u1_04_help_is_plain_text_with_defaults_statuses_and_examples():
    """[U1] item 4: --help is plain text, every argument has help, defaults are shown, and the
    epilog gives the exit statuses and examples."""
    from loaderx_converter.cli import _parser

    for action in _parser()._actions:
        assert action.help and action.help is not argparse.SUPPRESS, action.dest
    proc = _cli("--help")
    text = proc.stdout
    assert proc.returncode == 0 and proc.stderr == ""
    assert "``" not in text and not re.search(r":[a-z]+:`", text)
    words = " ".join(text.split())  # help lines wrap anywhere
    for shown in ("(default: zstd)", "(default: main)", "(default: 4)"):
        assert shown in words
    assert "exit status:" in text and "examples:" in text
    for status in ("0 ", "1 ", "2 ", "3 ", "130 "):
        assert f"\n  {status}" in text, status
    assert "\n  loaderx-convert ylecun/mnist data/mnist\n" in text


def test_u2_07_progress_into_a_pipe_is_a_few_plain_lines(small, tmp_path):
    """[U2] item 7: with stderr not a terminal (a CI log, `2> log`), progress bars were tqdm's
    redraws joined by carriage returns into one very long line. Progress there is now plain
    lines, one per pass (check, write) of each split when the work is short."""
    proc = _cli(str(small), str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert "\r" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert [line.split(" done in ")[0] for line in lines] == [
        "train: check: 5/5 rows (100%)", "train: write: 5/5 rows (100%)"], proc.stderr
