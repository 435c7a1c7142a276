"""Shuffle quality against reads ([O3] point 2, first part): how random an epoch's order is, and
how many block reads it costs, for loaderx's CYCLIC (a uniform shuffle) and BLOCKS (the
locality-aware shuffle) and for MosaicML Streaming's py1e and py1br shuffles at the same block
size, computed the same way for all.

The dataset is what makes order matter: 60,000 records of 784 bytes (Fashion-MNIST's training
set) stored sorted by class, 10 classes of 6,000. A block is --block-bytes of records (a
loaderx block, an MDS shard); an order's epoch is read through a cache of --cache-blocks
blocks (least recently used out), so a block read is one GET.

Per order, the mean over --seeds seeds of:
- **batch skew**: the total variation distance between a batch's class histogram (batches of
  --batch) and the dataset's (uniform, 1/10 each), averaged over the epoch's batches. A
  uniform shuffle's is the sampling noise of 256 draws (about 0.07); a sorted order's is 0.9.
- **block reads** per epoch through the cache, and their ratio to the number of blocks (1.0:
  each block read once).

The MDS orders come from ``streaming.base.shuffle.get_shuffle`` run in --mds-python (a Python
with ``pip install --no-deps mosaicml-streaming==0.13.0 numpy``: the shuffle is NumPy only),
with shards of one block each, one canonical node, and the shuffle block (``block_size``, in
samples) set to the window of the BLOCKS row it stands beside; without --mds-python those rows
are left out.

Usage: python benchmarks/sampler/bench_shuffle_quality.py [--mds-python PY] [--json OUT]
       [--block-bytes 262144,1048576] [--windows 1,4,16] [--cache-blocks 16] [--seeds 3]
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from loaderx.sampler import Sampler

RECORDS = 60_000
CLASSES = 10
RECORD_BYTES = 784

# Run in the MDS Python: its shuffle module without the package's __init__ (which imports
# torch); argv: shard records, shards, block_size (samples), seed, output .npy.
_MDS = """
import sys, types, importlib, pathlib, numpy as np
import importlib.util
root = pathlib.Path(importlib.util.find_spec("streaming").submodule_search_locations[0])
for name, path in (("streaming", root), ("streaming.base", root / "base")):
    m = types.ModuleType(name); m.__path__ = [str(path)]; sys.modules[name] = m
shuffle = importlib.import_module("streaming.base.shuffle")
algo, per, shards, block, seed, out = sys.argv[1:7]
sizes = np.full(int(shards), int(per), np.int64)
sizes[-1] = 60000 - int(per) * (int(shards) - 1)
np.save(out, shuffle.get_shuffle(algo, sizes, 1, int(seed), 0, int(block)))
"""


def label_skew(order: np.ndarray, batch: int) -> float:
    """Mean total variation distance of each full batch's class histogram from uniform."""
    labels = order[: len(order) // batch * batch] // (RECORDS // CLASSES)
    counts = np.stack([np.bincount(b, minlength=CLASSES) for b in labels.reshape(-1, batch)])
    return float(np.abs(counts / batch - 1 / CLASSES).sum(axis=1).mean() / 2)


def block_reads(order: np.ndarray, block_records: int, cache_blocks: int) -> int:
    """Blocks read through an LRU cache of `cache_blocks` blocks while reading `order`."""
    cache: collections.OrderedDict[int, None] = collections.OrderedDict()
    reads = 0
    for b in (order // block_records).tolist():
        if b in cache:
            cache.move_to_end(b)
            continue
        reads += 1
        cache[b] = None
        if len(cache) > cache_blocks:
            cache.popitem(last=False)
    return reads


def loaderx_order(mode: str, seed: int, **blocks: int) -> np.ndarray:
    s = Sampler(RECORDS, 1000, mode, seed, passes=1, **blocks)
    return np.concatenate([b.copy() for b in s]).astype(np.int64)


def mds_order(python: str, algo: str, block_records: int, block_size: int, seed: int) -> np.ndarray:
    shards = -(-RECORDS // block_records)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "order.npy"
        subprocess.run([python, "-W", "ignore::UserWarning", "-c", _MDS, algo, str(block_records), str(shards), str(block_size),
                        str(seed), str(out)], check=True)
        return np.load(out).astype(np.int64)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mds-python", default=None)
    ap.add_argument("--block-bytes", default="262144,1048576",
                    type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--windows", default="1,4,16", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--cache-blocks", type=int, default=16)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []

    def measure(name: str, block_bytes: int, window: int | None, orders: list[np.ndarray]) -> None:
        r = max(1, block_bytes // RECORD_BYTES)
        for o in orders:
            assert sorted(o.tolist()) == list(range(RECORDS)), name  # an epoch: every record once
        skew = float(np.mean([label_skew(o, args.batch) for o in orders]))
        reads = float(np.mean([block_reads(o, r, args.cache_blocks) for o in orders]))
        blocks = -(-RECORDS // r)
        rows.append({"order": name, "block_bytes": block_bytes, "block_records": r, "window_blocks": window,
                     "batch_skew": skew, "block_reads": reads, "reads_per_block": reads / blocks})
        print(f"{name:<24} block {block_bytes >> 10:>5} KiB  window {window or '-':>3}  skew {skew:.3f}  "
              f"reads {reads:>9,.0f} ({reads / blocks:.2f} per block)", file=sys.stderr, flush=True)

    seeds = range(args.seeds)
    for block_bytes in args.block_bytes:
        r = max(1, block_bytes // RECORD_BYTES)
        measure("sorted (no shuffle)", block_bytes, None, [np.arange(RECORDS)])
        measure("loaderx CYCLIC", block_bytes, None, [loaderx_order("cyclic", s) for s in seeds])
        for w in args.windows:
            measure("loaderx BLOCKS", block_bytes, w,
                    [loaderx_order("blocks", s, block_records=r, window_blocks=w) for s in seeds])
            if args.mds_python:
                for algo in ("py1e", "py1br"):
                    measure(f"MDS {algo}", block_bytes, w,
                            [mds_order(args.mds_python, algo, r, w * r, s) for s in seeds])
    result = {"args": vars(args), "records": RECORDS, "classes": CLASSES, "record_bytes": RECORD_BYTES,
              "rows": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
