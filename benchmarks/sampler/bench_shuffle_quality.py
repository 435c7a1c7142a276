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
are left out. LitData's default order (``FullShuffle`` of litdata 0.2.76, one node, one worker:
chunks of one block in a permuted order, each chunk's items shuffled within it in its default
item window of 256) comes from litdata's own shuffle modules run in --litdata-python (``pip
install --no-deps litdata==0.2.76 numpy``; the torch names they import are stubbed); it is one
row per block size, its window being one chunk.

Usage: python benchmarks/sampler/bench_shuffle_quality.py [--mds-python PY] [--litdata-python PY] [--json OUT]
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

# Run in the LitData Python: litdata's own shuffle modules (streaming/shuffle.py,
# utilities/shuffle.py) without the package's __init__ or torch, which they import only for
# names they do not use here (stubbed). Its default order for one node and one worker:
# FullShuffle, the chunks permuted per epoch, each chunk's items in its default item window.
# argv: chunk records, chunks, seed, output .npy.
_LITDATA = """
import sys, types, importlib, importlib.util, pathlib, collections, numpy as np
root = pathlib.Path(importlib.util.find_spec("litdata").submodule_search_locations[0])
for name, path in (("litdata", root), ("litdata.streaming", root / "streaming"),
                   ("litdata.utilities", root / "utilities")):
    m = types.ModuleType(name); m.__path__ = [str(path)]; sys.modules[name] = m
sys.modules["litdata.streaming"].Cache = object
loader = types.ModuleType("litdata.streaming.item_loader")
loader.Interval = collections.namedtuple("Interval", "chunk_start roi_start_idx roi_end_idx chunk_end")
sys.modules["litdata.streaming.item_loader"] = loader
torch = types.ModuleType("torch"); torch.utils = types.ModuleType("torch.utils")
torch.utils.data = types.ModuleType("torch.utils.data"); torch.utils.data.get_worker_info = lambda: None
sys.modules.update({"torch": torch, "torch.utils": torch.utils, "torch.utils.data": torch.utils.data})
env = importlib.import_module("litdata.utilities.env")
shuffle = importlib.import_module("litdata.streaming.shuffle")
per, chunks, seed, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
class Reader: _config = None; _max_cache_size = 0
class Cache:
    _reader = Reader()
    def get_chunk_intervals(self):
        return [loader.Interval(a, a, min(a + per, 60000), min(a + per, 60000)) for a in range(0, 60000, per)]
full = shuffle.FullShuffle(Cache(), seed, False)
epoch = 1
workers_chunks, workers_intervals = full.get_chunks_and_intervals_per_workers(env._DistributedEnv(1, 0, 1), 1, 256, epoch)
order = [full(np.arange(i[1], i[2]), chunks, epoch, int(c)) for c, i in zip(workers_chunks[0], workers_intervals[0])]
np.save(out, np.concatenate([np.asarray(o, np.int64) for o in order]))
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


def litdata_order(python: str, chunk_records: int, seed: int) -> np.ndarray:
    chunks = -(-RECORDS // chunk_records)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "order.npy"
        subprocess.run([python, "-c", _LITDATA, str(chunk_records), str(chunks), str(seed), str(out)], check=True)
        return np.load(out).astype(np.int64)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mds-python", default=None)
    ap.add_argument("--litdata-python", default=None)
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
        if args.litdata_python:
            measure("LitData FullShuffle", block_bytes, 1,
                    [litdata_order(args.litdata_python, r, s) for s in seeds])
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
