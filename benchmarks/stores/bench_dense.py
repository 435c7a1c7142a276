"""Dense random-gather benchmark on real data, side by side in one run.

Workloads (built by benchmarks/prepare_data.py; see benchmarks/README.md):
  vision  vision_dense.npy   (N, 3, 224, 224) uint8, 147 KiB per record
  tokens  token_blocks.npy   (M, 512) int32, 2 KiB per record

Backends, each fed the same source and verified (exact dtype, shape, order and values on a
full sweep and on independent random batches) before timing:
  zrecord-<codec>        our store through the public Python API (output allocated per batch)
  loaderx-2.5.9-<codec>  the published loaderx, in its own venv (--peer PYTHON)
  npy-mmap               NumPy fancy indexing on the read-only memory map
and the ceilings for copying the same batch size, measured in the same run:
  memcpy-fresh-1t / -2t  copy into freshly allocated memory on one / two threads
  memcpy-reuse-1t / -2t  copy into an already-faulted buffer on one / two threads

Usage: python benchmarks/stores/bench_dense.py [--data DIR] [--workload vision,tokens] [--batch 256]
       [--codecs raw,zstd,zstd_dict] [--seconds 2] [--peer /path/to/venv/bin/python] [--json F]
       [--zstd-build /path/to/venv/bin/python]   (rows per zstd: this build's and that venv's
       zrecord, e.g. a release wheel with zstd built in; docs/decisions/0004-zstd-in-wheels.md)
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, which holds `common`
from common.device import device_ceilings
from common.peers import add_arguments, measure_rounds
from common.reports import finish, fs_label, header, table
from common.store import STORE_LABEL, Dense, create_kwargs, timed_writes
from common.timing import disk_bytes, summarize, timed_batches

WORKLOADS = {"vision": "vision_dense.npy", "tokens": "token_blocks.npy"}


def copy_ceiling(src: np.ndarray, batch: int, threads: int, fresh: bool,
                 seconds: float) -> list[float]:
    """Time copying `batch` records' worth of page-cache-resident bytes."""
    nbytes = batch * src[0].nbytes
    flat = np.resize(src.reshape(-1).view(np.uint8), nbytes) if src.nbytes < nbytes else \
        src.reshape(-1).view(np.uint8)[:nbytes]
    reuse = np.ones(nbytes, np.uint8)
    bounds = [(int(p[0]), int(p[-1]) + 1) for p in np.array_split(np.arange(nbytes), threads)]

    def one(_idx: np.ndarray) -> None:
        out = np.empty(nbytes, np.uint8) if fresh else reuse
        if threads == 1:
            np.copyto(out, flat)
            return
        ts = [threading.Thread(target=np.copyto, args=(out[a:b], flat[a:b])) for a, b in bounds]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    return timed_batches(one, 1, batch, seconds, 0)


def verify(store: Dense, src: np.ndarray, batch: int) -> None:
    """Exact dtype, shape, order and values: a full sweep and independent random batches."""
    assert store.dtype == src.dtype and tuple(store.item_shape) == src.shape[1:]
    assert len(store) == len(src)
    for start in range(0, len(src), 256):
        if not np.array_equal(store[start:start + 256], src[start:start + 256]):
            raise AssertionError(f"{STORE_LABEL}: mismatch in records {start}..{start + 256}")
    rng = np.random.default_rng(99)
    for _ in range(5):
        idx = rng.integers(0, len(src), batch)
        got = store[idx]
        if got.dtype != src.dtype or not np.array_equal(got, src[idx]):
            raise AssertionError(f"{STORE_LABEL}: mismatch in a random batch")


def run_stores(name: str, src: np.ndarray, args: argparse.Namespace, tmp: str) -> list[dict]:
    rows = []
    for codec in args.codecs:
        path = os.path.join(tmp, f"{name}-{codec}")
        extra = create_kwargs(codec, src)

        def write(p: str, kw: dict[str, object], extra: dict[str, object] = extra,
                  codec: str = codec) -> None:
            with Dense.create(p, src.dtype, src.shape[1:], codec=codec, **extra, **kw) as w:
                w.append(src)

        writes = timed_writes(path, write, src.nbytes, args)
        with Dense.open(path) as store:
            verify(store, src, args.batch)
            times = timed_batches(lambda idx, s=store: s[idx], len(src), args.batch,
                                  args.seconds, 1)
        row = summarize(f"{STORE_LABEL}-{codec}", times, args.batch, src[0].nbytes)
        row.update(writes)
        row["disk_mib"] = disk_bytes(path) / 2**20
        rows.append(row)
        shutil.rmtree(path)
    return rows


def baseline_rows(src: np.ndarray, path: str, args: argparse.Namespace) -> list[dict]:
    """One round of the baselines: NumPy fancy indexing and the copy ceilings."""
    rows = []
    times = timed_batches(lambda idx, s=src: s[idx], len(src), args.batch, args.seconds, 1)
    row = summarize("npy-mmap", times, args.batch, src[0].nbytes)
    row["disk_mib"] = disk_bytes(path) / 2**20
    rows.append(row)
    for threads in (1, 2):
        for fresh in (True, False):
            label = f"memcpy-{'fresh' if fresh else 'reuse'}-{threads}t"
            rows.append(summarize(label, copy_ceiling(src, args.batch, threads, fresh, args.seconds),
                                  args.batch, src[0].nbytes))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap, "vision,tokens")
    args = ap.parse_args(argv)
    args.codecs = [c for c in args.codecs.split(",") if c]
    results = header(args)
    if not args.stores_only:
        results["device"] = device_ceilings(args.tmp or tempfile.gettempdir())
    tables = []
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        for name in [w for w in args.workload.split(",") if w]:
            path = os.path.join(args.data, WORKLOADS[name])
            if not os.path.exists(path):
                print(f"skipping {name}: {path} is missing (run benchmarks/prepare_data.py)",
                      file=sys.stderr)
                continue
            src = np.load(path, mmap_mode="r")
            src.reshape(-1)[:: 4096 // src.itemsize].sum()  # warm the page cache
            rows = measure_rounds(args, __file__, name,
                                  lambda n=name, s=src: run_stores(n, s, args, tmp),
                                  lambda s=src, p=path: baseline_rows(s, p, args))
            if not args.stores_only:
                tables.append(table(f"Dense {name}: {src.shape} {src.dtype}, batch {args.batch}; "
                                    f"{fs_label(results)}", rows, "npy-mmap"))
            results["workloads"][name] = {"shape": list(src.shape), "dtype": str(src.dtype),
                                          "rows": rows}
    finish(args, results, tables)
    return 0


if __name__ == "__main__":
    sys.exit(main())
