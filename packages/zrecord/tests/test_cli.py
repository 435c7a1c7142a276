"""The zrecord command line: info, verify, head, stats; people and scripts (--json)."""

from __future__ import annotations

import argparse
import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from zrecord import Dense, Ragged
from zrecord.cli import main


@pytest.fixture
def stores(tmp_path):
    with Dense.create(tmp_path / "d", np.int16, (2, 3), codec="zstd", data_shards=2) as w:
        w.append(np.arange(60, dtype=np.int16).reshape(10, 2, 3) % 4)
    with Ragged.create(tmp_path / "r", np.float32, 2, codec="raw") as w:
        w.append([np.ones((k, 3 - k % 3), np.float32) for k in range(7)])
    return str(tmp_path / "d"), str(tmp_path / "r")


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_info(stores, capsys):
    code, out, _ = run(capsys, "info", stores[0])
    assert code == 0 and "Dense store" in out and "records       10" in out and "zstd" in out
    code, out, _ = run(capsys, "info", stores[0], "--json")
    info = json.loads(out)
    assert info["records"] == 10 and info["item_shape"] == [2, 3] and info["data_shards"] == 2
    assert info["compression_ratio"] == info["logical_bytes"] / info["stored_bytes"]


def test_verify_ok_and_corrupt(stores, capsys):
    code, out, _ = run(capsys, "verify", stores[1])
    assert code == 0 and out.startswith("OK: 7 records")
    shards = [os.path.join(stores[1], f"data-{k:03d}.zrd") for k in range(4)]
    biggest = max(shards, key=os.path.getsize)
    with open(biggest, "r+b") as f:
        f.seek(3)
        b = f.read(1)
        f.seek(3)
        f.write(bytes([b[0] ^ 4]))
    code, out, _ = run(capsys, "verify", stores[1], "--json")
    result = json.loads(out)
    assert code == 1 and result["ok"] is False and result["record"] is not None
    assert os.path.basename(biggest) in result["error"]
    code, out, _ = run(capsys, "verify", stores[1])
    assert code == 1 and out.startswith("CORRUPT:")


def test_head(stores, capsys):
    code, out, _ = run(capsys, "head", stores[1], "-n", "3", "--json")
    recs = json.loads(out)
    assert [r["shape"] for r in recs] == [[0, 3], [1, 2], [2, 1]]
    code, out, _ = run(capsys, "head", stores[0], "-n", "2")
    assert code == 0 and out.count("shape (2, 3)") == 2


def test_stats(stores, capsys):
    code, out, _ = run(capsys, "stats", stores[1], "--json")
    stats = json.loads(out)
    assert stats["records"] == 7 and stats["empty_records"] == 1
    assert stats["axes"][0]["max"] == 6
    code, out, _ = run(capsys, "stats", stores[0])
    assert "record size   12 B (fixed)" in out


def test_errors_exit_1_when_there_is_no_store(tmp_path, capsys):
    code, _, err = run(capsys, "info", str(tmp_path / "missing"))
    assert code == 1 and "zrecord info:" in err


def test_head_refuses_negative_counts(stores, capsys):
    """[R1] item 16: `zrecord head -n -3` printed all but the last three records (a negative
    slice bound). A negative count is a usage error: exit 2, argparse style, nothing printed."""
    for argv, given in ((["-n", "-3"], "-3"), (["-n=-1"], "-1")):
        with pytest.raises(SystemExit) as info:
            main(["head", stores[0], *argv])
        out = capsys.readouterr()
        assert info.value.code == 2 and out.out == ""
        assert out.err.startswith("usage: zrecord head")
        assert f"argument -n: invalid count {given!r}" in out.err
    code, out, _ = run(capsys, "head", stores[0], "-n", "0", "--json")
    assert code == 0 and json.loads(out) == []


def _strict_json(text: str):
    """Parse `text` as RFC 8259 JSON: NaN, Infinity and -Infinity are not JSON."""
    def refuse(constant):
        raise ValueError(f"not JSON (RFC 8259): {constant}")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "complex64", "complex128"])
def test_head_json_is_strict_json(tmp_path, capsys, dtype):
    """[R1] item 18: `zrecord head --json` wrote NaN and Infinity, which JSON (RFC 8259) does
    not have, so strict parsers refused the whole output. Non-finite values are now the
    strings "NaN", "Infinity" and "-Infinity" (complex values: [real, imag] pairs of those)."""
    special = np.array([np.nan, np.inf, -np.inf, 1.5, -0.0], dtype=np.float64)
    record = np.empty(5, dtype)
    if record.dtype.kind == "c":
        record.real, record.imag = special, special[::-1]
        want = [["NaN", -0.0], ["Infinity", 1.5], ["-Infinity", "-Infinity"], [1.5, "Infinity"],
                [-0.0, "NaN"]]
    else:
        record[:] = special
        want = ["NaN", "Infinity", "-Infinity", 1.5, -0.0]
    path = str(tmp_path / "s")
    with Dense.create(path, dtype, (5,), codec="zstd") as w:
        w.append(record[None])
    code, out, _ = run(capsys, "head", path, "--json")
    assert code == 0
    shown = _strict_json(out)[0]["values"]
    assert shown == want
    # Negative zero stays negative (JSON has it): "-0.0", not "0.0".
    assert "-0.0" in out
    for command in ("info", "stats", "verify"):
        code, out, _ = run(capsys, command, path, "--json")
        assert code == 0 and _strict_json(out)


# ---- memory bounded independently of record size ([R1] item 7) -------------------------------

GiB = 1 << 30
MEMORY_LIMIT_BYTES = 1 * GiB


@pytest.fixture(scope="module")
def huge_stores(tmp_path_factory):
    """zstd stores of records far larger than the memory the CLI may use (zeros compress to a
    few KiB per GiB): a Ragged one with small records around a 1 GiB one, and a Dense one of
    two 512 MiB records."""
    folder = tmp_path_factory.mktemp("huge")
    ragged, dense = str(folder / "ragged"), str(folder / "dense")
    with Ragged.create(ragged, np.uint8, 1, codec="zstd", data_shards=1) as w:
        w.append([np.arange(10, dtype=np.uint8), np.zeros(GiB, np.uint8),
                  np.arange(200, dtype=np.uint8) % 7])
    with Dense.create(dense, np.uint8, (GiB // 2,), codec="zstd", data_shards=1) as w:
        w.append(np.zeros((2, GiB // 2), np.uint8))
    return ragged, dense


def _limit_memory():
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))


def _zrecord(*argv: str, limit: bool = True):
    """The real `zrecord` console script in a subprocess, under a 1 GiB address-space limit."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(sys.executable).parent / "zrecord"
    return subprocess.run([str(script), *argv], capture_output=True, text=True, timeout=120,
                          preexec_fn=_limit_memory if limit else None)


@pytest.mark.slow  # the kernel's memory accounting, not the interpreter's concern: run once
def test_head_of_huge_records_runs_in_bounded_memory(huge_stores):
    """[R1] item 7: `zrecord head --json` on a small store of 2 GiB zstd records was OOM-killed:
    it decoded every shown record whole (and at once) and called tolist() on it. Under a 1 GiB
    address-space limit, head (text and JSON) now answers at once: records above
    --max-record-bytes are described but not decoded, the others summarised NumPy-style."""
    ragged, dense = huge_stores
    proc = _zrecord("head", ragged, "--json")
    assert proc.returncode == 0, proc.stderr
    shown = _strict_json(proc.stdout)
    assert [r["shape"] for r in shown] == [[10], [GiB], [200]]
    small, huge, longer = shown
    assert small == {"index": 0, "shape": [10], "dtype": "uint8", "nbytes": 10, "read": True,
                     "truncated": True, "head": [0, 1, 2], "tail": [7, 8, 9]}
    assert huge == {"index": 1, "shape": [GiB], "dtype": "uint8", "nbytes": GiB, "read": False,
                    "truncated": True, "head": [], "tail": []}
    assert longer["head"] == [0, 1, 2] and longer["tail"] == [(197 + k) % 7 for k in range(3)]
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "record 1" in err[0] and "--max-record-bytes" in err[0]

    proc = _zrecord("head", ragged)
    assert proc.returncode == 0, proc.stderr
    assert "[0 1 2 ... 7 8 9]" in proc.stdout
    assert "not read" in proc.stdout and "Traceback" not in proc.stderr

    proc = _zrecord("head", dense, "--json", "--values", "4")
    assert proc.returncode == 0, proc.stderr
    assert [r["read"] for r in _strict_json(proc.stdout)] == [False, False]

    # Asking for a record that cannot fit is one line, not a traceback: a runtime error, 3
    # ([U1]: it was 2, the status of usage errors).
    proc = _zrecord("head", ragged, "--max-record-bytes", "2GiB")
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and "out of memory" in proc.stderr


@pytest.mark.slow  # the kernel's memory accounting, not the interpreter's concern: run once
def test_stats_info_verify_of_huge_records_run_in_bounded_memory(huge_stores):
    """[R1] item 7: `verify` decodes each compressed record whole (in native code), so under
    the limit it reported the out-of-memory failure as CORRUPT (exit 1). Records above
    --max-record-bytes are now skipped and reported, exit 3 (nothing was found corrupt, but
    not everything was checked; [U1]: it was 2, the status of usage errors); stats and info
    never read records."""
    ragged, dense = huge_stores
    for path in huge_stores:
        for command in ("info", "stats"):
            proc = _zrecord(command, path, "--json")
            assert proc.returncode == 0 and _strict_json(proc.stdout), proc.stderr
    proc = _zrecord("verify", ragged, "--json")
    assert proc.returncode == 3, proc.stderr
    result = _strict_json(proc.stdout)
    assert result["ok"] is None and result["records_checked"] == 2
    assert result["records_skipped"] == 1 and result["first_skipped"] == 1
    proc = _zrecord("verify", dense)
    assert proc.returncode == 3 and proc.stdout.startswith("INCOMPLETE: 0 of 2 records")
    assert "--max-record-bytes" in proc.stdout and "Traceback" not in proc.stderr
    # With room for it, the record is checked.
    proc = _zrecord("verify", dense, "--max-record-bytes", "512M", "--json", limit=False)
    assert proc.returncode == 0 and _strict_json(proc.stdout)["ok"] is True, proc.stdout


def test_head_summarises_long_records(tmp_path, capsys):
    """[R1] item 7: head shows at most --values values per record (first and last halves,
    flat in row-major order), whole records as nested lists, in a documented JSON shape."""
    path = str(tmp_path / "s")
    with Dense.create(path, np.float32, (4, 5), codec="raw") as w:
        w.append(np.arange(40, dtype=np.float32).reshape(2, 4, 5))
    code, out, _ = run(capsys, "head", path, "--json", "--values", "4")
    assert code == 0
    first = _strict_json(out)[0]
    assert first == {"index": 0, "shape": [4, 5], "dtype": "float32", "nbytes": 80, "read": True,
                     "truncated": True, "head": [0.0, 1.0], "tail": [18.0, 19.0]}
    code, out, _ = run(capsys, "head", path, "--json", "--values", "20", "-n", "1")
    assert _strict_json(out)[0]["values"] == np.arange(20.0).reshape(4, 5).tolist()
    code, out, _ = run(capsys, "head", path, "-n", "1")
    assert "[ 0.  1.  2. ... 17. 18. 19.]" in out  # NumPy's own formatting
    with pytest.raises(SystemExit) as info:
        main(["head", path, "--values", "-1"])
    assert info.value.code == 2


# ---- the command line behaves like a Unix tool ([U1]) ------------------------------------------

ZRECORD_SCRIPT = Path(sys.executable).parent / "zrecord"


def _cli(*argv: str, **kwargs) -> subprocess.CompletedProcess[str]:
    """The real `zrecord` console script in a subprocess."""
    return subprocess.run([str(ZRECORD_SCRIPT), *argv], capture_output=True, text=True,
                          timeout=120, **kwargs)


@pytest.fixture(scope="module")
def long_store(tmp_path_factory):
    """A store that `head -n 1000000` takes many seconds to print (a million records)."""
    path = str(tmp_path_factory.mktemp("long") / "s")
    with Dense.create(path, np.int8, (), codec="raw", data_shards=1) as w:
        w.append(np.arange(1_000_000, dtype=np.int64).astype(np.int8))
    return path


@pytest.fixture(scope="module")
def slow_verify_store(tmp_path_factory):
    """A zstd store that `verify` checks in one native call per record for a good while: 384
    records of 16 MiB of zeros (a few KiB on disk)."""
    path = str(tmp_path_factory.mktemp("slow") / "s")
    zeros = np.zeros((1, 16 << 20), np.uint8)
    with Dense.create(path, np.uint8, (16 << 20,), codec="zstd", data_shards=1) as w:
        for _ in range(384):
            w.append(zeros)
    return path


def test_version_prints_the_version_and_exits_0():
    """[U1] item 1: `zrecord --version` prints the version and exits 0 (it was a usage error);
    `python -m zrecord.cli` is the same program."""
    import zrecord

    proc = _cli("--version")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"zrecord {zrecord.__version__}\n", "")
    proc = subprocess.run([sys.executable, "-m", "zrecord.cli", "--version"], capture_output=True,
                          text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (0, f"zrecord {zrecord.__version__}\n")


def _wait_until_open(pid: int, folder: str, timeout: float = 60.0) -> None:
    """Wait until process `pid` holds a file below `folder` open: it is past its start-up
    (where Python itself may still print a traceback for Ctrl-C) and inside the command."""
    import time

    folder = os.path.realpath(folder)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            names = os.listdir(f"/proc/{pid}/fd")
        except FileNotFoundError:
            break
        for name in names:
            try:
                if os.readlink(f"/proc/{pid}/fd/{name}").startswith(folder + os.sep):
                    return
            except OSError:
                pass
        time.sleep(0.0005)
    pytest.fail(f"process {pid} never opened a file in {folder}")


def _foreground() -> None:
    """Run in a child before exec: SIGINT as a terminal's foreground job has it. A job started
    in the background by a shell without job control (CI runners, `cmd &` in a script) inherits
    SIGINT ignored, and a program started so rightly keeps ignoring it (nohup relies on that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow  # signals and pipes between processes: run once, in the zrecord session
def test_ctrl_c_prints_one_line_and_ends_by_sigint(long_store, slow_verify_store):
    """[U1] item 2: Ctrl-C during `head` or `verify` prints one line, no traceback, and the
    process ends by SIGINT, which a shell reports as status 130 (subprocess: -SIGINT)."""
    proc = subprocess.Popen([str(ZRECORD_SCRIPT), "head", long_store, "-n", "1000000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_foreground)
    assert proc.stdout.readline().startswith("[0] shape ()")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert (proc.returncode, err) == (-signal.SIGINT, "zrecord: interrupted\n")

    proc = subprocess.Popen([str(ZRECORD_SCRIPT), "verify", slow_verify_store],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_foreground)
    _wait_until_open(proc.pid, slow_verify_store)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out, err) == (-signal.SIGINT, "", "zrecord: interrupted\n")


@pytest.mark.slow  # signals and pipes between processes: run once, in the zrecord session
def test_ctrl_c_in_a_shell_gives_130_and_stops_its_loop(long_store):
    """[U1] item 2: what a terminal's Ctrl-C does (SIGINT to the whole foreground group): a
    shell loop over stores stops at once, because zrecord dies by the signal (had it exited
    130, bash would have gone on with the next store); a shell that only zrecord's signal
    reaches sees status 130."""
    head = f"'{ZRECORD_SCRIPT}' head '{long_store}' -n 1000000"
    loop = subprocess.Popen(["bash", "-c", f"for s in 1 2; do {head}; echo next >&2; done"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_foreground,
                            start_new_session=True)
    loop.stdout.readline()
    os.killpg(loop.pid, signal.SIGINT)
    _, err = loop.communicate(timeout=60)
    assert (loop.returncode, err) == (-signal.SIGINT, "zrecord: interrupted\n")

    shell = subprocess.Popen(["bash", "-c", f"{head}; echo status $? >&2"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=_foreground)
    shell.stdout.readline()
    (child,) = _children(shell.pid)
    os.kill(child, signal.SIGINT)
    _, err = shell.communicate(timeout=60)
    assert (shell.returncode, err) == (0, "zrecord: interrupted\nstatus 130\n")


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    # The command name (field 2) is in parentheses and may hold spaces.
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def test_in_process_interrupt_returns_130(stores, capsys, monkeypatch):
    """[U1] item 2: called as a function (`main([...])`), an interrupt returns 130 and leaves
    the caller's process and signal handlers alone."""
    import zrecord.cli as cli

    def interrupted(store, args):
        raise KeyboardInterrupt

    monkeypatch.setitem(cli.COMMANDS, "stats", interrupted)
    before = signal.getsignal(signal.SIGINT)
    assert main(["stats", stores[0]]) == 130
    assert capsys.readouterr().err == "zrecord: interrupted\n"
    assert signal.getsignal(signal.SIGINT) is before


def test_an_interrupt_prints_what_the_work_kept_after_its_one_line(stores, capsys, monkeypatch):
    """A library that keeps something when interrupted says so on the interrupt (a note, by
    `console.restate`), and the tool prints it after "interrupted": an upload stopped by Ctrl-C
    says where its staged copy is. Was: the one line only, and the copy kept in silence."""
    import zrecord.cli as cli
    from zrecord.console import restate

    def interrupted(store, args):
        stop = KeyboardInterrupt()
        restate(stop, "the store is kept at '/tmp/x'")
        raise stop

    monkeypatch.setitem(cli.COMMANDS, "stats", interrupted)
    assert main(["stats", stores[0]]) == 130
    assert capsys.readouterr().err == "zrecord: interrupted\nzrecord: the store is kept at '/tmp/x'\n"


def test_restate_adds_to_what_an_os_error_with_an_errno_says():
    """`str()` of an OSError with an errno is its strerror, whatever its args: the words added
    there were lost (a failed request's "kept at", for one)."""
    from zrecord.console import restate
    from zrecord.errors import RemoteError
    exc = RemoteError(errno.EIO, "s3://b/x: the request failed")
    restate(exc, "the store is kept at '/tmp/x'")
    assert str(exc) == "[Errno 5] s3://b/x: the request failed; the store is kept at '/tmp/x'"
    assert exc.errno == errno.EIO and isinstance(exc, RemoteError)
    plain = ValueError("bad")
    restate(plain, "more")
    assert str(plain) == "bad; more"


@pytest.mark.slow  # signals between processes: run once, in the zrecord session
def test_sigterm_ends_a_command_as_ctrl_c_does(long_store):
    """SIGTERM (kill, timeout, a job scheduler): one line, and the process ends by the signal,
    after undoing what it would undo on Ctrl-C. Was: the default disposition, no cleanup."""
    proc = subprocess.Popen([str(ZRECORD_SCRIPT), "head", long_store, "-n", "1000000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Its first record printed: the command runs (a fixed sleep sent the signal during the
    # imports on a loaded machine, before the handler existed).
    assert proc.stdout is not None and proc.stdout.readline()
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert (proc.returncode, err) == (-signal.SIGTERM, "zrecord: terminated\n")


@pytest.mark.slow  # signals between processes: run once, in the zrecord session
@pytest.mark.remote  # the object storage client (test-remote's) makes the request
def test_ctrl_c_stops_a_command_waiting_on_a_server_that_never_answers():
    """A server that accepts the connection and never answers: Ctrl-C ends `zrecord info URL`
    at once. Was: the request held the main thread, where Python handles the signal, until
    the client's timeout (28 s measured)."""
    import socket
    import time

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        silent.settimeout(60)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/store"
        # As a terminal's foreground job: started from a runner that ignores SIGINT (a
        # background job of a script), the command kept ignoring it and the test timed out.
        proc = subprocess.Popen([str(ZRECORD_SCRIPT), "info", url], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, preexec_fn=_foreground)
        # Its request has come (a fixed sleep sent the interrupt during the imports on a
        # loaded machine, before the command ran), and it waits for the answer.
        conn, _ = silent.accept()
        time.sleep(0.5)
        assert proc.poll() is None  # still waiting for the answer
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=15)
        finally:
            proc.kill()
            conn.close()
    assert (proc.returncode, err) == (-signal.SIGINT, "zrecord: interrupted\n")


def _into_closed_pipe(*argv: str) -> subprocess.CompletedProcess[str]:
    """`zrecord ARGV` writing into a pipe whose reader is already gone."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([str(ZRECORD_SCRIPT), *argv], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)


@pytest.mark.slow  # signals and pipes between processes: run once, in the zrecord session
def test_a_closed_pipe_ends_quietly(long_store, stores, tmp_path):
    """[U1] item 2: `zrecord head S | head -1` and output into a pipe nobody reads any more
    end quietly, with status 141 as cat's (SIGPIPE), never "Exception ignored ... BrokenPipeError"
    from the interpreter's final flush (status 120)."""
    # A reader that takes one line and leaves.
    head = subprocess.Popen([str(ZRECORD_SCRIPT), "head", long_store, "-n", "1000000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = subprocess.run([sys.executable, "-c", "import sys; print(sys.stdin.readline(), end='')"],
                           stdin=head.stdout, capture_output=True, text=True, timeout=60)
    head.stdout.close()
    _, err = head.communicate(timeout=60)
    assert first.stdout == "[0] shape () int8:\n"
    assert (head.returncode, err) == (141, b"")
    # The same through a shell pipeline: one line out, nothing on stderr.
    proc = subprocess.run(["sh", "-c", f"'{ZRECORD_SCRIPT}' head '{long_store}' -n 1000000 | head -1"],
                          capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "[0] shape () int8:\n", "")
    # Output into a pipe whose reader left before it was written: info and verify --json, a
    # long table of a folder, and --help (argparse ignores the failed write itself: 0).
    folder = tmp_path / "many"
    for k in range(40):
        with Dense.create(folder / f"split{k // 10}" / f"column{k}", np.int8, (), codec="raw") as w:
            w.append(np.zeros(3, np.int8))
    # A dataset too (was: exit 3 and "[Errno 32] Broken pipe": its commands caught OSError).
    import zrecord
    zrecord.publish_dataset(folder / "split0", [f"column{k}" for k in range(10)])
    for argv in (["info", stores[0], "--json"], ["verify", stores[0], "--json"],
                 ["info", str(folder)], ["info", str(folder), "--json"],
                 ["head", str(folder / "split0"), "-n", "30"],
                 ["info", str(folder / "split0")], ["verify", str(folder / "split0"), "--json"]):
        proc = _into_closed_pipe(*argv)
        assert (proc.returncode, proc.stderr) == (141, ""), argv
    for argv in (["--help"], ["head", "--help"], ["--version"]):
        proc = _into_closed_pipe(*argv)
        assert proc.returncode in (0, 141) and proc.stderr == "", argv


def test_exit_statuses_tell_invalid_input_usage_and_runtime_failures_apart(stores, tmp_path):
    """[U1] item 3: 0 success, 1 not a valid store or a corrupt record, 2 usage, 3 a runtime
    error (here: too many open files, and memory in the bounded-memory tests above); runtime errors exited 2,
    like usage errors."""
    import resource

    dense, ragged = stores
    assert _cli("info", dense).returncode == 0
    assert _cli("verify", ragged, "-q").returncode == 0
    (tmp_path / "file").write_text("x")
    (tmp_path / "empty").mkdir()
    for argv in (["info", str(tmp_path / "missing")], ["head", str(tmp_path / "file")],
                 ["stats", str(tmp_path / "empty")], ["info", str(tmp_path / "empty")]):
        proc = _cli(*argv)
        assert proc.returncode == 1 and proc.stdout == "", argv
        assert proc.stderr.startswith(f"zrecord {argv[0]}: ") and proc.stderr.count("\n") == 1
    corrupt = str(tmp_path / "corrupt")
    with Dense.create(corrupt, np.int64, (4,), codec="raw", data_shards=1) as w:
        w.append(np.arange(8).reshape(2, 4))
    with open(os.path.join(corrupt, "data-000.zrd"), "r+b") as f:
        f.write(b"\xff")
    proc = _cli("verify", corrupt)
    assert proc.returncode == 1 and proc.stdout.startswith("CORRUPT:")
    assert _cli("head", corrupt).returncode == 1
    for argv in ([], ["info"], ["frobnicate", dense], ["head", dense, "-n", "-1"],
                 ["verify", dense, "--max-record-bytes", "lots"], ["info", dense, "--nope"]):
        proc = _cli(*argv)
        assert proc.returncode == 2 and proc.stderr.startswith("usage: zrecord"), argv
    shards = str(tmp_path / "shards")
    with Dense.create(shards, np.int8, (), codec="raw", data_shards=64) as w:
        w.append(np.zeros(100, np.int8))

    def few_files():
        resource.setrlimit(resource.RLIMIT_NOFILE, (32, 32))

    proc = _cli("info", shards, preexec_fn=few_files)
    assert proc.returncode == 3 and "Too many open files" in proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_help_is_plain_text_with_defaults_statuses_and_examples():
    """[U1] item 4: every --help is plain text (no reST ``literals`` or :roles:), every
    argument has help, defaults are shown, and the epilog gives the exit statuses and an
    example."""
    import re

    from zrecord.cli import _parser

    parser = _parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in [("", parser), *sub.choices.items()]:
        for action in command._actions:
            assert action.help, f"zrecord {name}: {action.dest} has no help"
        proc = _cli(*([name] if name else []), "--help")
        text = proc.stdout
        assert proc.returncode == 0 and proc.stderr == ""
        assert "``" not in text and not re.search(r":[a-z]+:`", text), text
        assert "exit status:" in text and "examples:" in text
        for status in ("0 ", "1 ", "2 ", "3 ", "130 "):
            assert f"\n  {status}" in text, (name, status)
        assert re.search(r"\n  zrecord \w+ ", text.split("examples:")[1])
    assert "records to show, 0 or more (default: 5)" in _cli("head", "--help").stdout
    assert "(default: 256M)" in _cli("verify", "--help").stdout


def _tree_of_stores(root: Path) -> None:
    """A dataset the way loaderx-convert lays it out (ROOT/split/column and a provenance
    file), a store deeper down, and things that are not stores."""
    for split, n in (("train", 6), ("test", 2)):
        with Dense.create(root / split / "image", np.uint8, (4, 3), codec="zstd") as w:
            w.append(np.zeros((n, 4, 3), np.uint8))
        with Ragged.create(root / split / "audio", np.float32, 2, codec="raw") as w:
            w.append([np.ones((2, k), np.float32) for k in range(n)])
    (root / "provenance.json").write_text("{}")
    with Dense.create(root / "extra" / "a" / "b" / "deep", np.int64, (), codec="raw") as w:
        w.append(np.arange(3))
    (root / "notes").mkdir()
    (root / "notes" / "README").write_text("not a store")
    (root / ".cache" / "x").mkdir(parents=True)


def test_info_on_a_folder_lists_its_stores(tmp_path):
    """[U1] item 5: `zrecord info` on a folder of stores (a converted dataset) said it was "an
    unfinished or aborted write". It now lists the stores below it, recursively, as a table
    and as JSON; symbolic links are not followed (out of the tree, or to a store twice)."""
    root = tmp_path / "mnist"
    _tree_of_stores(root)
    outside = tmp_path / "outside"
    with Dense.create(outside, np.int8, (), codec="raw") as w:
        w.append(np.zeros(1, np.int8))
    (root / "link-out").symlink_to(outside)
    (root / "link-in").symlink_to(root / "train")

    proc = _cli("info", str(root))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"{root}: a folder holding 5 stores"
    assert lines[1].split() == ["path", "kind", "dtype", "shape", "records", "codec", "size"]
    rows = [line.split() for line in lines[2:7]]
    assert [r[0] for r in rows] == ["extra/a/b/deep", "test/audio", "test/image", "train/audio",
                                    "train/image"]
    assert rows[2][:6] == ["test/image", "Dense", "uint8", "(4,", "3)", "2"]
    assert rows[3][:6] == ["train/audio", "Ragged", "float32", "ndim", "2", "6"]
    assert "2 symbolic link(s) to folders not followed" in proc.stdout
    assert "outside" not in proc.stdout

    proc = _cli("info", str(root), "--json")
    assert proc.returncode == 0
    listing = _strict_json(proc.stdout)
    assert listing["kind"] == "folder" and listing["links_not_followed"] == 2
    assert listing["unfinished"] == [] and listing["problems"] == [] and not listing["truncated"]
    image = next(s for s in listing["stores"] if s["path"] == "train/image")
    assert {k: v for k, v in image.items() if k != "disk_bytes"} == {
        "path": "train/image", "kind": "Dense", "dtype": "uint8", "item_shape": [4, 3],
        "records": 6, "codec": "zstd"}
    on_disk = sum(e.stat().st_size for e in os.scandir(root / "train" / "image"))
    assert image["disk_bytes"] == on_disk
    audio = next(s for s in listing["stores"] if s["path"] == "test/audio")
    assert audio["ndim"] == 2 and "item_shape" not in audio

    # The depth is bounded, and says so.
    proc = _cli("info", str(root), "--json", "--max-depth", "2")
    shallow = _strict_json(proc.stdout)
    assert len(shallow["stores"]) == 4 and shallow["truncated"] is True
    # `zrecord info STORE` is unchanged; head and stats point to `info` for a folder (verify
    # verifies every store below it: test_verify_on_a_folder_*).
    assert _cli("info", str(root / "train" / "image")).stdout.startswith(
        f"{root / 'train' / 'image'}: Dense store")
    for command in ("head", "stats"):
        proc = _cli(command, str(root))
        assert proc.returncode == 1
        assert "is a folder, not a store; it holds 5 store(s)" in proc.stderr


def test_info_on_unfinished_writes_and_empty_folders(tmp_path):
    """[U1] item 5: a writer's temporary directory is reported as an unfinished or aborted
    write, saying whether its writer is alive (its lock is held, [ZR-PUB-006]) or gone; a
    folder holding neither stores nor temporaries says so. Both exit 1."""
    import zrecord

    target = tmp_path / "data" / "mnist"
    with zrecord.staged_directory(target) as staged:
        proc = _cli("info", staged)
        assert proc.returncode == 1 and "unfinished or aborted write" in proc.stderr
        assert "its writer is alive" in proc.stderr and repr(str(target)) in proc.stderr
        listing = _strict_json(_cli("info", staged, "--json").stdout)
        assert listing == {"path": staged, "kind": "unfinished", "writer": "alive",
                           "target": str(target)}
        # Asked for the store itself (not there yet), or for the folder holding the write.
        proc = _cli("info", str(target))
        assert proc.returncode == 1 and "no store at" in proc.stderr and "alive" in proc.stderr
        # With --json, the same object as for the temporary (was: no JSON, a line on stderr).
        proc = _cli("info", str(target), "--json")
        assert proc.returncode == 1
        assert _strict_json(proc.stdout) == {"path": staged, "kind": "unfinished",
                                             "writer": "alive", "target": str(target),
                                             "unfinished_writes": 1}
        listing = _strict_json(_cli("info", str(target.parent), "--json").stdout)
        assert listing["stores"] == [] and listing["unfinished"] == [
            {"path": os.path.basename(staged), "writer": "alive"}]
    assert not os.path.exists(staged)

    # A writer that died: the kernel released its lock, the temporary stays.
    script = ("import os, sys, zrecord\n"
              "with zrecord.staged_directory(sys.argv[1]) as d:\n"
              "    print(d, flush=True)\n"
              "    os._exit(0)\n")
    dead = subprocess.run([sys.executable, "-c", script, str(tmp_path / "data" / "other")],
                          capture_output=True, text=True, timeout=60).stdout.strip()
    assert os.path.isdir(dead)
    proc = _cli("info", dead)
    assert proc.returncode == 1 and "its writer is gone" in proc.stderr
    proc = _cli("info", str(tmp_path / "data"))
    assert proc.returncode == 1  # a folder with no store in it
    assert f"{os.path.basename(dead)}: its writer is gone" in proc.stdout
    # A temporary without its lock file: nothing can tell.
    os.unlink(dead + ".lock")
    assert "cannot be told" in _cli("info", dead).stderr

    empty = tmp_path / "empty"
    (empty / "sub").mkdir(parents=True)
    proc = _cli("info", str(empty))
    assert (proc.returncode, proc.stdout) == (1, "")
    assert "is neither a store nor a folder holding stores or unfinished writes" in proc.stderr


def test_info_walk_below_a_folder_is_bounded(tmp_path, monkeypatch):
    """[U1] item 5: the walk below a folder reads at most DIRECTORIES_MAX directories (and
    --max-depth levels) and says when a bound stopped it (`zrecord info /` ends)."""
    from zrecord import _tree

    _tree_of_stores(tmp_path)
    assert len(_tree.survey(str(tmp_path), 6).stores) == 5
    monkeypatch.setattr(_tree, "DIRECTORIES_MAX", 2)
    found = _tree.survey(str(tmp_path), 6)
    assert found.truncated and len(found.stores) < 5


# A progress line on a pipe (zrecord.console.progress_bar), e.g.
# "train/image: 6/6 records (100%) done in 0.0 s, 2,513 records/s".
_DONE_LINE = r"(?P<desc>.+): (?P<done>[0-9,]+)/(?P<total>[0-9,]+) records \(100%\) done in [0-9.,]+ s(, [0-9,]+ records/s)?"


def test_verify_on_a_folder_verifies_every_store(tmp_path):
    """[U2] item 3: `zrecord verify ROOT` on a folder of stores (a converted dataset) said it
    was a folder and exited 1, while `zrecord info ROOT` listed the stores. It now verifies
    every store below it: one result line per store, one progress line per store on stderr,
    a last line naming the stores that failed; --json gives one object."""
    import re

    root = tmp_path / "mnist"
    _tree_of_stores(root)
    names = ["extra/a/b/deep", "test/audio", "test/image", "train/audio", "train/image"]
    proc = _cli("verify", str(root))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split(": ")[0] for line in lines[:5]] == names
    assert all(line.split(": ")[1] == "OK" for line in lines[:5]), lines
    assert lines[5:] == [f"{root}: 5 of 5 stores OK"]
    # Progress to a pipe is a plain line per store, never a bar redrawn with carriage returns.
    assert "\r" not in proc.stderr
    progress = [re.fullmatch(_DONE_LINE, line) for line in proc.stderr.splitlines()]
    assert all(progress) and [m["desc"] for m in progress] == names, proc.stderr
    assert [m["done"] for m in progress] == ["3", "2", "2", "6", "6"]

    listing = _strict_json(_cli("verify", str(root), "--json").stdout)
    assert listing["kind"] == "folder" and listing["ok"] is True and listing["failed"] == []
    assert [(s["path"], s["ok"], s["records_checked"]) for s in listing["stores"]] == [
        (name, True, n) for name, n in zip(names, (3, 2, 2, 6, 6))]
    shallow = _strict_json(_cli("verify", str(root), "--json", "--max-depth", "2").stdout)
    assert len(shallow["stores"]) == 4 and shallow["truncated"] is True

    # One corrupt store: the others are still checked, and the last line names it.
    shard = max((root / "test" / "audio").glob("data-*.zrd"), key=os.path.getsize)
    data = bytearray(shard.read_bytes())
    data[0] ^= 1
    shard.write_bytes(bytes(data))
    proc = _cli("verify", str(root), "-q")
    assert (proc.returncode, proc.stderr) == (1, "")
    lines = proc.stdout.splitlines()
    assert lines[1].startswith("test/audio: CORRUPT: ") and shard.name in lines[1]
    assert lines[-1] == f"{root}: 4 of 5 stores OK; FAILED: test/audio"
    listing = _strict_json(_cli("verify", str(root), "--json").stdout)
    assert listing["ok"] is False and listing["failed"] == ["test/audio"]
    assert [s["ok"] for s in listing["stores"]] == [True, False, True, True, True]
    assert listing["stores"][1]["record"] is not None


def test_verify_on_a_folder_exit_statuses(tmp_path):
    """[U2] item 3: a folder whose stores could not all be checked exits 3 (as `verify STORE`
    does), one holding something that is not a valid store exits 1, and a folder without
    stores exits 1 and says so."""
    root = tmp_path / "data"
    with Dense.create(root / "small", np.int8, (4,), codec="zstd") as w:
        w.append(np.zeros((3, 4), np.int8))
    with Dense.create(root / "large", np.int16, (1024,), codec="zstd") as w:
        w.append(np.zeros((2, 1024), np.int16))
    proc = _cli("verify", str(root), "-q", "--max-record-bytes", "1K")
    assert proc.returncode == 3
    assert proc.stdout.splitlines()[0].startswith("large: INCOMPLETE: 0 of 2 records checked")
    assert proc.stdout.splitlines()[-1] == f"{root}: 1 of 2 stores OK; FAILED: large"
    listing = _strict_json(_cli("verify", str(root), "--json", "--max-record-bytes", "1K").stdout)
    assert listing["ok"] is None and listing["failed"] == ["large"]

    (root / "broken").mkdir()
    (root / "broken" / "index.zri").write_bytes(b"")
    proc = _cli("verify", str(root), "-q")
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[-1] == f"{root}: 2 of 2 stores OK; FAILED: broken"
    assert "broken: has index.zri but no header.zrh" in proc.stdout

    (tmp_path / "empty" / "sub").mkdir(parents=True)
    proc = _cli("verify", str(tmp_path / "empty"))
    assert (proc.returncode, proc.stdout) == (1, "")
    assert "is neither a store nor a folder holding stores" in proc.stderr
