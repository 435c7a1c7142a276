"""Ragged random-gather benchmark on real data, side by side in one run.

Workloads (built by benchmarks/prepare_data.py; see benchmarks/README.md):
  vision  vision_ragged_payload.npy + vision_ragged_index.npz: native-resolution CHW uint8
          images, every axis varying
  tokens  tokens.npy + offsets.npy: variable-length int32 GPT-2 token records (16..512)

Every backend must return an ordered list of arrays with exact dtype, shape and values:
  zrecord-<codec>        our store through the public Python API
  loaderx-2.5.9-<codec>  the published loaderx, in its own venv (--peer PYTHON)
  npy-mmap               per-record slices of the flat memory map, copied into new arrays

Usage: python benchmarks/stores/bench_ragged.py [--data DIR] [--workload vision,tokens] [--batch 256]
       [--codecs raw,zstd,zstd_dict] [--seconds 2] [--peer /path/to/venv/bin/python] [--json F]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, which holds `common`
from common.data import Source, load_ragged
from common.device import device_ceilings
from common.peers import add_arguments, measure_rounds
from common.reports import finish, fmt_ratio, fs_label, header, paired_ratio, table
from common.store import STORE_LABEL, Ragged, create_kwargs, timed_writes
from common.timing import disk_bytes, summarize, timed_batches


def verify(store: Ragged, src: Source, batch: int) -> None:
    assert store.dtype == src.dtype and store.ndim == src.ndim and len(store) == len(src)
    for start in range(0, len(src), 256):
        got = store[start:min(start + 256, len(src))]
        for k, rec in enumerate(got):
            want = src[start + k]
            if rec.dtype != want.dtype or rec.shape != want.shape or not np.array_equal(rec, want):
                raise AssertionError(f"{STORE_LABEL}: record {start + k} differs")
    rng = np.random.default_rng(99)
    for _ in range(5):
        idx = rng.integers(0, len(src), batch)
        for rec, i in zip(store[idx], idx, strict=True):
            if rec.shape != src[int(i)].shape or not np.array_equal(rec, src[int(i)]):
                raise AssertionError(f"{STORE_LABEL}: random batch differs at record {i}")


def run_stores(name: str, src: Source, args: argparse.Namespace, tmp: str) -> list[dict]:
    rows = []
    mean = src.nbytes / len(src)
    for codec in args.codecs:
        path = os.path.join(tmp, f"{name}-{codec}")
        extra = create_kwargs(codec, src.dict_sample())

        def write(p: str, kw: dict[str, object], extra: dict[str, object] = extra,
                  codec: str = codec) -> None:
            with Ragged.create(p, src.dtype, src.ndim, codec=codec, **extra, **kw) as w:
                w.append(iter(src))

        writes = timed_writes(path, write, src.nbytes, args)
        if name in args.list_workloads:
            writes.update(list_writes(src, codec, extra, path + "-list", args))
        with Ragged.open(path) as store:
            verify(store, src, args.batch)
            times = timed_batches(lambda idx, s=store: s[idx], len(src), args.batch,
                                  args.seconds, 1)
        row = summarize(f"{STORE_LABEL}-{codec}", times, args.batch, mean)
        row.update(writes)
        row["disk_mib"] = disk_bytes(path) / 2**20
        rows.append(row)
        shutil.rmtree(path)
    return rows


def list_writes(src: Source, codec: str, extra: dict[str, object], path: str,
                args: argparse.Namespace) -> dict[str, float]:
    """The write from a Python list of in-memory arrays, the common way records reach
    `append`: page-cache and durable MiB/s (`list_write_mib_s`, `list_durable_mib_s`). The
    list is built before the timer starts; the store is checked and removed."""
    records = [np.array(src[i]) for i in range(len(src))]

    def write(p: str, kw: dict[str, object]) -> None:
        with Ragged.create(p, src.dtype, src.ndim, codec=codec, **extra, **kw) as w:
            w.append(records)

    out = timed_writes(path, write, src.nbytes, args, prefix="list_")
    with Ragged.open(path) as store:
        got = store[:]
        if len(got) != len(records) or not all(
                a.shape == b.shape and np.array_equal(a, b) for a, b in zip(got, records)):
            raise AssertionError(f"{STORE_LABEL}: the store written from a list differs")
    shutil.rmtree(path)
    return out


def list_table(name: str, rows: list[dict]) -> str:
    """Durable and page-cache writes from a list of in-memory arrays, ours against the peer."""
    peers = {r["backend"].rsplit("-", 1)[1]: r for r in rows if r["backend"].startswith("loaderx-")}
    lines = [f"### Ragged {name}: append from a list of in-memory arrays", "",
             "| backend | durable write MiB/s | vs loaderx 2.5.9 | page-cache write MiB/s | "
             "vs loaderx 2.5.9 |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        if "list_durable_mib_s" not in r:
            continue
        peer = peers.get(r["backend"].rsplit("-", 1)[1]) if r["backend"].startswith("zrecord-") else None
        lines.append(f"| {r['backend']} | {r['list_durable_mib_s']:,.0f} | "
                     f"{fmt_ratio(paired_ratio(r, peer, 'list_durable_mib_s')) if peer else ''} | "
                     f"{r['list_write_mib_s']:,.0f} | "
                     f"{fmt_ratio(paired_ratio(r, peer, 'list_write_mib_s')) if peer else ''} |")
    return "\n".join(lines)


def npy_row(src: Source, args: argparse.Namespace) -> dict:
    """The baseline: NumPy slices of the memory-mapped payload, one per record."""
    times = timed_batches(src.gather, len(src), args.batch, args.seconds, 1)
    row = summarize("npy-mmap", times, args.batch, src.nbytes / len(src))
    row["disk_mib"] = sum(disk_bytes(f) for f in src.files) / 2**20
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap, "vision,tokens")
    ap.add_argument("--list-workloads", default="tokens",
                    help="workloads also written from a list of in-memory arrays (default tokens)")
    args = ap.parse_args(argv)
    args.codecs = [c for c in args.codecs.split(",") if c]
    args.list_workloads = [w for w in args.list_workloads.split(",") if w]
    results = header(args)
    if not args.stores_only:
        results["device"] = device_ceilings(args.tmp or tempfile.gettempdir())
    tables = []
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        for name in [w for w in args.workload.split(",") if w]:
            src = load_ragged(args.data, name)
            if src is None:
                continue
            src.payload[:: 4096 // src.dtype.itemsize].sum()  # warm the page cache
            rows = measure_rounds(args, __file__, name,
                                  lambda n=name, s=src: run_stores(n, s, args, tmp),
                                  lambda s=src: [npy_row(s, args)],
                                  lambda _k: ["--list-workloads", ",".join(args.list_workloads)])
            if not args.stores_only:
                tables.append(table(f"Ragged {name}: {len(src)} records, {src.nbytes / 2**20:,.1f} "
                                    f"MiB {src.dtype}, batch {args.batch}; {fs_label(results)}",
                                    rows, "npy-mmap"))
                if name in args.list_workloads:
                    tables.append(list_table(name, rows))
            results["workloads"][name] = {"records": len(src), "logical_bytes": src.nbytes,
                                          "dtype": str(src.dtype), "rows": rows}
    finish(args, results, tables)
    return 0


if __name__ == "__main__":
    sys.exit(main())
