"""Dense random-gather benchmark on real data, side by side in one run.

Workloads (from the recipe in ../shared/data, see benchmarks/README.md):
  vision  vision_dense.npy   (N, 3, 224, 224) uint8, 147 KiB per record
  tokens  token_blocks.npy   (M, 512) int32, 2 KiB per record

Backends, each fed the same source and verified (exact dtype, shape, order and values on a
full sweep and on independent random batches) before timing:
  zrecord-<codec>  our store through the public Python API (output allocated per batch)
  npy-mmap         NumPy fancy indexing on the read-only memory map (output allocated per batch)
and two ceilings for a copy of the same batch size, measured in the same run:
  memcpy-fresh-1t / -2t   copy into freshly allocated memory on one / two threads
  memcpy-reuse-1t / -2t   copy into an already-faulted buffer on one / two threads

Gathers use fresh uniform IID index batches and accumulate at least --seconds of timed calls;
the table reports logical MiB/s (decoded payload bytes per second), krecords/s and p95 batch
latency. Writes report logical MiB/s of one append of the complete source (sync excluded).

Usage: python benchmarks/bench_dense.py [--data DIR] [--workload vision,tokens] [--batch 256]
       [--codecs raw] [--seconds 2] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

try:  # our packages
    import zrecord
    from zrecord import Dense, train_dict

    STORE_LABEL = "zrecord"
    STORE_VERSION = zrecord.__version__
    WRITE_KWARGS: dict[str, object] = {"sync": False}  # methodology: writes exclude sync
except ImportError:  # the published loaderx 2.5.9, run as a black-box peer in its own venv
    import importlib.metadata

    from loaderx.utils import train_dict  # type: ignore[no-redef]
    from loaderx.zrecord import Dense  # type: ignore[no-redef]

    STORE_LABEL = "loaderx-" + importlib.metadata.version("loaderx")
    STORE_VERSION = importlib.metadata.version("loaderx")
    WRITE_KWARGS = {}

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = {"vision": "vision_dense.npy", "tokens": "token_blocks.npy"}


def timed_batches(fn: Callable[[np.ndarray], object], n: int, batch: int, seconds: float,
                  seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    times: list[float] = []
    total = 0.0
    while total < seconds or len(times) < 20:
        idx = rng.integers(0, n, batch)
        t = time.perf_counter()
        fn(idx)
        dt = time.perf_counter() - t
        times.append(dt)
        total += dt
    return times


def summarize(name: str, times: list[float], batch: int, record_bytes: int) -> dict[str, float | str]:
    total = sum(times)
    records = batch * len(times)
    return {
        "backend": name,
        "batches": len(times),
        "mib_s": records * record_bytes / total / 2**20,
        "krecords_s": records / total / 1e3,
        "p95_ms": float(np.percentile(times, 95)) * 1e3,
    }


def copy_ceiling(src: np.ndarray, batch: int, threads: int, fresh: bool, seconds: float) -> list[float]:
    """Time copying `batch` records' worth of contiguous bytes from `src` (page-cache resident)."""
    record = src[0].nbytes
    nbytes = batch * record
    flat = src.reshape(-1).view(np.uint8)[: nbytes] if src.nbytes >= nbytes else None
    if flat is None:
        flat = np.resize(src.reshape(-1).view(np.uint8), nbytes)
    reuse = np.empty(nbytes, np.uint8)
    reuse[:] = 1
    parts = np.array_split(np.arange(nbytes), threads)
    bounds = [(int(p[0]), int(p[-1]) + 1) for p in parts if len(p)]

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
    assert store.dtype == src.dtype and store.item_shape == src.shape[1:] and len(store) == len(src)
    step = 256
    for start in range(0, len(src), step):
        got = store[start:start + step]
        if not np.array_equal(got, src[start:start + step]):
            raise AssertionError(f"mismatch in records {start}..{start + step}")
    rng = np.random.default_rng(99)
    for _ in range(5):
        idx = rng.integers(0, len(src), batch)
        if not np.array_equal(store[idx], src[idx]):
            raise AssertionError("mismatch in a random batch")


def disk_bytes(path: str) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            total += os.stat(os.path.join(dirpath, f)).st_blocks * 512
    return total


def run_workload(name: str, src: np.ndarray, args: argparse.Namespace, tmp: str) -> list[dict]:
    record = src[0].nbytes
    n = len(src)
    rows: list[dict] = []
    src.reshape(-1)[:: 4096 // src.itemsize].sum()  # warm the page cache
    for codec in args.codecs:
        path = os.path.join(tmp, f"{name}-{codec}")
        extra: dict[str, object] = dict(WRITE_KWARGS)
        if codec == "zstd_dict":  # training is outside the timed write (methodology)
            extra["dict_bytes"] = train_dict(src)
        t = time.perf_counter()
        with Dense.create(path, src.dtype, src.shape[1:], codec=codec, **extra) as w:
            w.append(src)
        write_s = time.perf_counter() - t
        with Dense.open(path) as store:
            verify(store, src, args.batch)
            times = timed_batches(lambda idx, s=store: s[idx], n, args.batch, args.seconds, 1)
        row = summarize(f"{STORE_LABEL}-{codec}", times, args.batch, record)
        row["write_mib_s"] = src.nbytes / write_s / 2**20
        row["disk_mib"] = disk_bytes(path) / 2**20
        rows.append(row)
        shutil.rmtree(path)
    if args.stores_only:
        return rows
    times = timed_batches(lambda idx: src[idx], n, args.batch, args.seconds, 1)
    row = summarize("npy-mmap", times, args.batch, record)
    row["disk_mib"] = os.stat(os.path.join(args.data, WORKLOADS[name])).st_blocks * 512 / 2**20
    rows.append(row)
    for threads in (1, 2):
        for fresh in (True, False):
            label = f"memcpy-{'fresh' if fresh else 'reuse'}-{threads}t"
            rows.append(summarize(label, copy_ceiling(src, args.batch, threads, fresh, args.seconds),
                                  args.batch, record))
    return rows


def peer_rows(args: argparse.Namespace, workload: str) -> list[dict]:
    """Run this script under the peer's interpreter for the same workload and codecs."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [args.peer, __file__, "--data", args.data, "--workload", workload, "--batch",
               str(args.batch), "--codecs", ",".join(args.codecs), "--seconds", str(args.seconds),
               "--stores-only", "--json", out.name]
        if args.tmp:
            cmd += ["--tmp", args.tmp]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        result = json.loads(Path(out.name).read_text())
    return result["workloads"][workload]["rows"]


def table(name: str, rows: list[dict], base: str) -> str:
    ref = next(r for r in rows if r["backend"] == base)["mib_s"]
    lines = [f"### {name}", "",
             "| backend | gather MiB/s | vs npy-mmap | krecords/s | p95 ms | write MiB/s | disk MiB |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        write = f"{r['write_mib_s']:,.0f}" if "write_mib_s" in r else ""
        disk = f"{r['disk_mib']:,.1f}" if "disk_mib" in r else ""
        lines.append(f"| {r['backend']} | {r['mib_s']:,.0f} | {r['mib_s'] / ref:.2f}x | "
                     f"{r['krecords_s']:,.1f} | {r['p95_ms']:.2f} | {write} | {disk} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.environ.get("LOADERX_BENCH_DATA", str(ROOT.parent / "data")))
    ap.add_argument("--workload", default="vision,tokens")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--codecs", default="raw")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--tmp", default=None, help="folder for the stores (default: a temp dir)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--peer", default=None,
                    help="python of a separate venv holding the published loaderx (e.g. 2.5.9): "
                         "its stores are measured in the same run, in a subprocess")
    ap.add_argument("--stores-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.codecs = [c for c in args.codecs.split(",") if c]
    results: dict[str, object] = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "python": sys.version.split()[0], "numpy": np.__version__, "store": STORE_LABEL,
        "batch": args.batch, "seconds": args.seconds, "workloads": {},
    }
    out = []
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        for name in [w for w in args.workload.split(",") if w]:
            path = os.path.join(args.data, WORKLOADS[name])
            if not os.path.exists(path):
                print(f"skipping {name}: {path} is missing (run ../shared/data/prepare_data.py)",
                      file=sys.stderr)
                continue
            src = np.load(path, mmap_mode="r")
            rows = run_workload(name, src, args, tmp)
            if args.peer:
                rows[len(args.codecs):len(args.codecs)] = peer_rows(args, name)
            results["workloads"][name] = {"shape": list(src.shape), "dtype": str(src.dtype),
                                          "rows": rows}  # type: ignore[index]
            if not args.stores_only:
                out.append(table(f"{name}: {src.shape} {src.dtype}, batch {args.batch}", rows,
                                 "npy-mmap"))
    print(f"{results['date']}  {results['machine']}  python {results['python']}  "
          f"numpy {results['numpy']}  {results['store']}\n")
    print("\n\n".join(out))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
