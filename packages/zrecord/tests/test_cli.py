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
