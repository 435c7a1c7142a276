"""What the native core executes per record of a warm gather, counted by callgrind: a figure
that, unlike a time, does not move with the machine's load, so that two builds of zrecord can
be compared on a busy two-core machine to within a fraction of a percent.

For each workload (Dense int32 records of 4 items, 16 bytes, 1,000,000 of them; Ragged
uint16 token records of 50-199 items, 200,000 of them; both raw, without index parts) and
each index source (built at open in the reader's memory, or mapped from the index cache
folder), a child process opens the store, gathers --batches random batches of --batch
records --reps times (the same batches each time: warm, every record's first check made
in the first pass), and closes it. The figure is the instructions counted in the extension's
own code (`_native.abi3.so`) less those of the same child with no gather (the open), per
record gathered. Python's hash seed is fixed, so the rest of the child's work repeats too.

To compare two builds, run this once with each on sys.path (--pkg DIR: a folder that holds
the `zrecord` package to measure, e.g. a copy of packages/zrecord/src with the extension
built at another commit); the stores are written once per --tmp.

Usage: python benchmarks/index/bench_read_instructions.py --tmp DIR [--pkg DIR]
       [--batch 256] [--batches 100] [--reps 3]
Needs valgrind (Debian: apt-get install valgrind).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import os, sys
pkg, data, kind, source, batch, batches, reps = sys.argv[1:8]
if pkg:
    sys.path.insert(0, pkg)
import numpy as np
from zrecord import Dense, Ragged
cls = Dense if kind == "dense" else Ragged
cache = {"index_cache": None} if source == "built" else {"index_cache": os.path.join(data, "cache")}
rng = np.random.default_rng(1)
with cls.open(os.path.join(data, kind), **cache) as s:
    if source == "cached":
        assert s.index_info()["source"] == "cached", s.index_info()
    idx = [np.sort(rng.integers(0, len(s), int(batch))).astype(np.uint64) for _ in range(int(batches))]
    for _ in range(int(reps)):
        for i in idx:
            s[i]
"""


def write_stores(data: Path, pkg: str) -> None:
    """The two stores, once per folder (each run writes the cache files it needs: `prime`)."""
    if (data / "ragged").exists():
        return
    code = r"""
import os, sys
pkg, data = sys.argv[1:3]
if pkg:
    sys.path.insert(0, pkg)
import numpy as np
from zrecord import Dense, Ragged
with Dense.create(os.path.join(data, "dense"), np.int32, (4,), codec="raw", index_parts=False) as w:
    w.append(np.arange(4_000_000, dtype=np.int32).reshape(-1, 4))
rng = np.random.default_rng(0)
with Ragged.create(os.path.join(data, "ragged"), np.uint16, 1, codec="raw", index_parts=False) as w:
    for _ in range(20):
        w.append([rng.integers(0, 60000, rng.integers(50, 200), dtype=np.uint16) for _ in range(10_000)])
"""
    data.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-c", code, pkg, str(data)], check=True)


def prime(args: argparse.Namespace, data: Path, kind: str) -> None:
    """Opens the store through the cache folder once, so that the next open maps its file."""
    env = {**os.environ, "ZRECORD_INDEX_CACHE_RECORDS_MIN": "1"}
    subprocess.run([sys.executable, "-c", CHILD, args.pkg, str(data), kind, "prime", "1", "1", "0"], check=True,
                   env=env)


def native_instructions(args: argparse.Namespace, data: Path, kind: str, source: str, reps: int) -> int:
    """Instructions counted in `_native.abi3.so` by one child under callgrind."""
    out = data / f"callgrind.{kind}.{source}.{reps}"
    env = {**os.environ, "PYTHONHASHSEED": "0", "ZRECORD_INDEX_CACHE_RECORDS_MIN": "1"}
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-c", CHILD,
                    args.pkg, str(data), kind, source, str(args.batch), str(args.batches), str(reps)],
                   check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    text = subprocess.run(["callgrind_annotate", "--inclusive=no", str(out)], check=True, capture_output=True,
                          text=True).stdout
    out.unlink()
    total = 0
    for line in text.splitlines():
        if "_native" in line:
            m = re.match(r"\s*([\d,]+)", line)
            if m:
                total += int(m.group(1).replace(",", ""))
    return total


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tmp", required=True, help="a folder for the stores (about 100 MB)")
    p.add_argument("--pkg", default="", help="a folder holding the zrecord package to measure")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--batches", type=int, default=100)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--json", help="write the figures here too")
    args = p.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (Debian: apt-get install valgrind)")
    data = Path(args.tmp).resolve()
    write_stores(data, args.pkg)
    records = args.batch * args.batches * args.reps
    rows = {}
    print(f"| workload | index | native instructions per record ({records:,} records gathered) |")
    print("|---|---|---:|")
    for kind in ("dense", "ragged"):
        for source in ("built", "cached"):
            if source == "cached":  # an open that writes the cache file (of this build's version)
                prime(args, data, kind)
            opened = native_instructions(args, data, kind, source, 0)
            gathered = native_instructions(args, data, kind, source, args.reps)
            per = (gathered - opened) / records
            rows[f"{kind}/{source}"] = round(per, 1)
            print(f"| {kind} | {source} | {per:,.1f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"batch": args.batch, "records": records, "per_record": rows}, indent=1))


if __name__ == "__main__":
    main()
