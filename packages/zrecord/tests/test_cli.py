"""The zrecord command line: info, verify, head, stats; people and scripts (--json)."""

from __future__ import annotations

import json
import os

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


def test_errors_exit_2(tmp_path, capsys):
    code, _, err = run(capsys, "info", str(tmp_path / "missing"))
    assert code == 2 and "zrecord info:" in err


def test_r1_16_head_refuses_negative_counts(stores, capsys):
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
def test_r1_18_head_json_is_strict_json(tmp_path, capsys, dtype):
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


# ---- [R1] item 7: memory bounded independently of record size -------------------------------

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


def test_r1_07_head_of_huge_records_runs_in_bounded_memory(huge_stores):
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

    # Asking for a record that cannot fit is one line, not a traceback.
    proc = _zrecord("head", ragged, "--max-record-bytes", "2GiB")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and "out of memory" in proc.stderr


def test_r1_07_stats_info_verify_of_huge_records_run_in_bounded_memory(huge_stores):
    """[R1] item 7: `verify` decodes each compressed record whole (in native code), so under
    the limit it reported the out-of-memory failure as CORRUPT (exit 1). Records above
    --max-record-bytes are now skipped and reported, exit 2 (nothing was found corrupt, but
    not everything was checked); stats and info never read records."""
    ragged, dense = huge_stores
    for path in huge_stores:
        for command in ("info", "stats"):
            proc = _zrecord(command, path, "--json")
            assert proc.returncode == 0 and _strict_json(proc.stdout), proc.stderr
    proc = _zrecord("verify", ragged, "--json")
    assert proc.returncode == 2, proc.stderr
    result = _strict_json(proc.stdout)
    assert result["ok"] is None and result["records_checked"] == 2
    assert result["records_skipped"] == 1 and result["first_skipped"] == 1
    proc = _zrecord("verify", dense)
    assert proc.returncode == 2 and proc.stdout.startswith("INCOMPLETE: 0 of 2 records")
    assert "--max-record-bytes" in proc.stdout and "Traceback" not in proc.stderr
    # With room for it, the record is checked.
    proc = _zrecord("verify", dense, "--max-record-bytes", "512M", "--json", limit=False)
    assert proc.returncode == 0 and _strict_json(proc.stdout)["ok"] is True, proc.stdout


def test_r1_07_head_summarises_long_records(tmp_path, capsys):
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
