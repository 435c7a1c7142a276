"""What a warm batch costs one store and a dataset of the same records, counted by callgrind
with its cache simulation: instructions and level-1 data cache misses per batch, figures
that, unlike times, do not move with the machine's load (on this VM the same build's warm
batches took 110 µs in one minute and 200-270 µs in the next).

The token records of the benchmark data (127,633 Ragged int32 records, raw) are written once
to --tmp as one store and as a dataset of --parts parts (`write_dataset`). For each reader a
child process opens it, reads every record once, then gathers --warm random batches of
--batch records and then --batches more; a second child gathers the --warm batches only. The
figures are the difference of the two children's totals, per batch: the whole process (the
interpreter's work around the native calls included), as a batch through `reader[idx]` is.
Python's hash seed is fixed, so the rest of the children's work repeats too.

To compare two builds, run this once with each on sys.path (--pkg DIR: a folder that holds
the `zrecord` package to measure, e.g. a copy of packages/zrecord/src with the extension
built at another commit).

Usage: python benchmarks/stores/bench_dataset_misses.py --tmp DIR [--pkg DIR] [--data DIR]
       [--parts 64] [--batch 256] [--warm 200] [--batches 400]
Needs valgrind (Debian: apt-get install valgrind). About 2 minutes a reader.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common.data import default_data  # noqa: E402

CHILD = r"""
import sys
pkg, path, kind, batch, warm, more = sys.argv[1:7]
if pkg:
    sys.path.insert(0, pkg)
import numpy as np
import zrecord
r = zrecord.open_store(path) if kind == "store" else zrecord.open_dataset(path)
for i in range(0, len(r), 1024):
    r[i:i + 1024]
rng = np.random.default_rng(0)
idx = [rng.integers(0, len(r), int(batch)) for _ in range(int(warm) + int(more))]
for i in idx:
    r[i]
"""

WRITE = r"""
import os, sys
pkg, data, tmp, parts = sys.argv[1:5]
if pkg:
    sys.path.insert(0, pkg)
import numpy as np
import zrecord
tokens = np.load(os.path.join(data, "tokens.npy"), mmap_mode="r")
offsets = np.load(os.path.join(data, "offsets.npy"))
chunks = [[np.array(tokens[offsets[i]:offsets[i + 1]])] for i in range(len(offsets) - 1)]
with zrecord.Ragged.create(os.path.join(tmp, "store"), np.int32, 1, codec="raw") as w:
    for c in chunks:
        w.append(c)
def same(x):
    return x
zrecord.write_dataset(os.path.join(tmp, "dataset"), same, chunks, codec="raw",
                      inputs_per_part=-(-len(chunks) // int(parts)), progress=False,
                      dtype=np.int32, ndim=1)
"""


def totals(args: argparse.Namespace, tmp: Path, kind: str, more: int) -> dict[str, int]:
    """callgrind's event totals of one child."""
    out = tmp / f"callgrind.{kind}.{more}"
    subprocess.run(["valgrind", "--tool=callgrind", "--cache-sim=yes", f"--callgrind-out-file={out}",
                    sys.executable, "-c", CHILD, args.pkg, str(tmp / kind), kind, str(args.batch),
                    str(args.warm), str(more)],
                   check=True, env={**os.environ, "PYTHONHASHSEED": "0"},
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    events: list[str] = []
    values: list[int] = []
    for line in out.read_text().splitlines():
        if line.startswith("events:"):
            events = line.split()[1:]
        elif line.startswith(("summary:", "totals:")):
            values = [int(v) for v in line.split()[1:]]
    out.unlink()
    return dict(zip(events, values))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tmp", required=True, help="a folder for the store and the dataset (about 70 MB)")
    p.add_argument("--pkg", default="", help="a folder holding the zrecord package to measure")
    p.add_argument("--data", default=default_data())
    p.add_argument("--parts", type=int, default=64)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--warm", type=int, default=200)
    p.add_argument("--batches", type=int, default=400)
    args = p.parse_args()
    tmp = Path(args.tmp)
    if not (tmp / "dataset").exists():
        tmp.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-c", WRITE, args.pkg, args.data, str(tmp), str(args.parts)], check=True)
    print("| reader | instructions | D1 read misses | D1 write misses | LL read misses |")
    print("|---|---:|---:|---:|---:|")
    for kind in ("store", "dataset"):
        base, full = totals(args, tmp, kind, 0), totals(args, tmp, kind, args.batches)
        per = {e: (full[e] - base[e]) / args.batches for e in full}
        print(f"| {kind} | {per['Ir']:,.0f} | {per['D1mr']:,.0f} | {per['D1mw']:,.0f} | {per['DLmr']:,.0f} |",
              flush=True)


if __name__ == "__main__":
    main()
