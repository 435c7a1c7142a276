"""`zrecord verify` detects one flipped bit at every byte of every file of a published store.

For each kind (Dense, Ragged) and codec (raw, zstd, zstd_dict), a small store is written and
then, one position at a time, one bit of one byte of header.zrh, index.zri, index.zrs or a data
file is flipped, `zrecord verify --json` is run, and the bit is flipped back. Every position must make
verify exit non-zero and name the damaged file, and for a data file the record whose stored
bytes hold that byte. This holds because every byte of a store is covered by a checksum: the
header by header_checksum ([ZR-HDR-004]), the index by index_checksum ([ZR-HDR-011]), a shard
by its records' checksums ([ZR-SUM-001]), since a shard holds nothing but record bytes
([ZR-DAT-001]) and its size is checked against the header ([ZR-HDR-010]); with index parts (the
default, format 1.2), index.zrs by the header's group sums ([ZR-PRT-004]) and index.zri's blocks
by its block sums ([ZR-PRT-005]). A store with index parts opens by part ([ZR-PRT-009]): open
judges only the header and the index files' sizes, so damage inside the index is reported by
verify itself (its JSON result names the file, and no record), not by open.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

from zrecord import Dense, Ragged, train_dict
from zrecord.cli import main

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz"))

import storemodel as sm  # noqa: E402

pytestmark = pytest.mark.slow  # many processes; run once, in the zrecord session


@pytest.fixture(scope="module")
def dictionary() -> bytes:
    rng = np.random.default_rng(9)
    samples = [rng.integers(0, 40, size=int(rng.integers(8, 64))).astype(np.int16)
               for _ in range(600)]
    return train_dict(samples, dict_size=256)


def write_store(path: str, kind: str, codec: str, dictionary: bytes, parts: bool) -> None:
    extra: dict = {"dict_bytes": dictionary} if codec == "zstd_dict" else {}
    extra["index_parts"] = parts
    if kind == "dense":
        data = (np.arange(9 * 5, dtype=np.int16) % 13).reshape(9, 5)
        with Dense.create(path, np.int16, (5,), codec=codec, data_shards=2, **extra) as w:
            w.append(data)
    else:
        recs = [np.arange(n, dtype=np.int16) % 7 for n in (3, 0, 8, 1, 5, 0, 6)]
        with Ragged.create(path, np.int16, 1, codec=codec, data_shards=2, **extra) as w:
            w.append(recs)


def owners(path: str) -> dict[str, list[int]]:
    """For each data file, the record that holds each of its bytes (from the index)."""
    files = sm.read_store(path)
    h = files["header.zrh"]
    es = sm.entry_size(h[16], h[18])
    index = files["index.zri"]
    out = {name: [-1] * len(blob) for name, blob in files.items() if name.startswith("data-")}
    for rec in range(len(index) // es):
        off, size, shard = (sm.get(index, rec * es, 8), sm.get(index, rec * es + 8, 4),
                            index[rec * es + 12])
        for pos in range(off, off + size):
            out[sm.shard_name(shard)][pos] = rec
    return out


def flip(path: str, pos: int, bit: int) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([b ^ (1 << bit)]))


@pytest.mark.parametrize(("kind", "codec", "parts"), [
    *[(kind, codec, True) for kind in ("dense", "ragged") for codec in ("raw", "zstd", "zstd_dict")],
    # The 1.1 path (no index.zrs, the whole index judged at open), once per kind.
    ("dense", "zstd", False), ("ragged", "raw", False)])
def test_verify_detects_a_flipped_bit_at_every_position(tmp_path, capsys, dictionary, kind,
                                                         codec, parts):
    """[ZR-HDR-004] [ZR-HDR-011] [ZR-SUM-001] [ZR-DAT-001] [ZR-SUM-003] [ZR-PRT-004]
    [ZR-PRT-005] [ZR-PRT-009]"""
    path = str(tmp_path / "s")
    write_store(path, kind, codec, dictionary, parts)
    assert main(["verify", path, "--json"]) == 0
    capsys.readouterr()
    by_byte = owners(path)
    names = sorted(os.listdir(path))
    assert {"header.zrh", "index.zri"} <= set(names)
    assert ("index.zrs" in names) == parts
    missed: list[str] = []
    checked = 0
    for name in names:
        full = os.path.join(path, name)
        for pos in range(os.path.getsize(full)):
            bit = (pos * 5 + len(name)) % 8
            flip(full, pos, bit)
            try:
                rc = main(["verify", path, "--json"])
            finally:
                flip(full, pos, bit)
            out, err = capsys.readouterr()
            checked += 1
            where = f"{name}@{pos}.{bit}"
            if rc == 0:
                missed.append(f"{where}: not detected")
                continue
            if name.startswith("data-"):
                # Opening succeeds (sizes are intact); verify names the record and its shard.
                result = json.loads(out)
                assert rc == 1 and not result["ok"], where
                want = by_byte[name][pos]
                if result["record"] != want or name not in result["error"]:
                    missed.append(f"{where}: named record {result['record']} "
                                  f"({result['error']}), expected record {want}")
            elif parts and name != "header.zrh" and out:
                # Opened by part: verify judged the index and names the damaged file.
                result = json.loads(out)
                if rc != 1 or result["ok"] or result["record"] is not None or name not in result["error"]:
                    missed.append(f"{where}: exit {rc}, {result}, not naming {name}")
            elif name not in err:
                missed.append(f"{where}: exit {rc} without naming {name}: {err.strip()}")
    assert checked > 300
    assert missed == []
    # Every byte of every data file belongs to a record (nothing uncovered to flip).
    assert all(-1 not in recs for recs in by_byte.values())
    assert main(["verify", path, "--json"]) == 0
