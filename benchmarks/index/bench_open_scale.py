"""Opening large stores ([O2] point 4): the index read by part against the whole index, locally
and by URL through a simulated link, at 10^6, 10^8 and 10^9 records.

One store per size (--sizes), written once under --tmp: Dense int8 records of one item (1 byte
each, the smallest record, so the index is nearly all of the store: 24 bytes a record), raw, in
--shards shards, with index parts (format 1.2, the writer's defaults: blocks of 256 entries,
sum groups of 1,024 blocks). Both paths read the same files in the same run:

- **by part** (the default open of such a store): open checks the header and the index files'
  sizes; a read judges (and by URL first fetches) the index blocks of its records.
- **whole** (``validate="full"``: what every open did before [O2] point 2, and what a store
  without index parts still gets): open judges the whole index (by URL: HEADs every object,
  downloads index.zri and index.zrs whole, then judges them).

Locally, each round in a fresh process (no index cache; the page cache as the previous round
left it: the whole path reads the index from disk when it does not fit) opens the store by
part, then whole, each timed to its open and to its first batch of --batch random records
(open included); then both readers gather side by side: steady random gathers (ns per record)
over a pool of --pool records read once before timing, in passes alternating between the two
readers in a balanced order (a pass warms the CPU caches with the shard pages for the next,
whichever reader makes it), and cold gathers (ns per record) of records whose index blocks the
reader holds, read once each after the page cache was dropped (root only; not measured
otherwise). Each figure is the median of --rounds (one round for the whole path from 10^8 by
URL, where one round takes most of a minute).

By URL (a Range HTTP server and the link proxy of zrecord_testkit, profile --link, both in
processes of their own, as in bench_remote.py): time to open, requests and bytes at open, time
and bytes to the first batch of --batch random records (open included), then fresh random
records for --seconds: records/s, and per record the index bytes and requests fetched beside
the record's own; then the same where the index is already held (fresh records of --held-blocks
index blocks, one record of each read first): records/s and index requests per record. The whole path by URL is run up to --remote-whole-max records (it downloads
24 bytes a record at open).

Usage: python benchmarks/index/bench_open_scale.py --tmp DIR [--sizes 1e6,1e8,1e9]
       [--shards 8] [--rounds 3] [--batch 256] [--pool 65536] [--seconds 5]
       [--link same-region-s3] [--remote-whole-max 1e8] [--json OUT]
It prints the two tables of docs/benchmarks.md; --json keeps every figure.
--tmp needs about 25 GB free at 10^9 records (the store is written once and kept).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, which holds `common`
from remote.bench_remote import Proxy, Server  # noqa: E402

from zrecord import Dense  # noqa: E402

WRITE_CHUNK = 8 << 20
# A local round's steady gathers: passes of this many batches, alternating between the paths,
# and the records read cold per path.
STEADY_BATCHES = 400
STEADY_PASSES = 8
COLD_RECORDS = 16 << 10


def build(n: int, shards: int, root: Path) -> Path:
    """The store of `n` records under `root`, written the first time."""
    path = root / f"open-scale-{n}-{shards}"
    if (path / "header.zrh").is_file():
        return path
    t0 = time.perf_counter()
    with Dense.create(path, np.int8, (1,), codec="raw", data_shards=shards, index_cache=None,
                      index_parts=True) as w:
        for start in range(0, n, WRITE_CHUNK):
            m = min(WRITE_CHUNK, n - start)
            w.append((np.arange(start, start + m, dtype=np.int64) % 251).astype(np.int8).reshape(m, 1))
    print(f"  wrote {n:,} records in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return path


def local_round(path: Path, n: int, paths: list[bool], args: argparse.Namespace,
                seed: int) -> dict[str, dict[str, float | None]]:
    """One local round in this process, for each path of `paths` (True: whole): open and
    the first batch, in that order (the first path opens in a fresh process); then steady and
    cold gathers of the paths' readers side by side, passes alternating in a balanced order
    (ABBA...), since a pass warms the CPU caches with the shard pages for the pass after it,
    whichever reader makes it."""
    rng = np.random.default_rng(seed)
    first = rng.integers(0, n, args.batch).astype(np.uint64)
    pool = rng.integers(0, n, args.pool).astype(np.uint64)
    batches = [pool[rng.integers(0, args.pool, args.batch)] for _ in range(STEADY_BATCHES)]
    out: dict[str, dict[str, float | None]] = {}
    readers = {}
    try:
        for whole in paths:
            name = "whole" if whole else "by_part"
            t = time.perf_counter()
            ds = Dense.open(path, index_cache=None, validate="full" if whole else "cached")
            readers[name] = ds
            opened = time.perf_counter() - t
            ds[first]
            out[name] = {"open_s": opened, "first_batch_s": time.perf_counter() - t}
        for ds in readers.values():
            ds[pool]  # every block of the pool judged (by part) and its records read once
            # An untimed pass: a pool read cold goes through pread, and the first mapped
            # read of each page afterwards takes a page fault (about 0.6 us at 10^9 records).
            for b in batches:
                ds[b]
        names = list(readers)
        steady: dict[str, list[float]] = {k: [] for k in names}
        for r in range(STEADY_PASSES):
            for k in (names if r % 4 in (0, 3) else names[::-1]):
                t = time.perf_counter()
                for b in batches:
                    readers[k][b]
                steady[k].append((time.perf_counter() - t) / (len(batches) * args.batch) * 1e9)
        # Cold: records of the same index blocks (neighbours of the pool's records, whose index
        # the readers hold), read once each after the page cache was dropped; each path reads
        # its own neighbours, which alternate between rounds.
        cold: dict[str, float | None] = {k: None for k in names}
        for j, k in enumerate(names):
            flip = np.uint64(1 << ((j + seed) % 2))
            neighbours = np.minimum(pool ^ flip, np.uint64(n - 1))[:COLD_RECORDS]
            if not drop_page_cache():
                break
            t = time.perf_counter()
            for i in range(0, len(neighbours), args.batch):
                readers[k][neighbours[i:i + args.batch]]
            cold[k] = (time.perf_counter() - t) / len(neighbours) * 1e9
        for k in names:
            out[k] |= {"steady_ns": statistics.mean(steady[k]), "cold_ns": cold[k]}
    finally:
        for ds in readers.values():
            ds.close()
    return out


def drop_page_cache() -> bool:
    """Empty the page cache (root only: /proc/sys/vm/drop_caches); whether it was done."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("1")
    except OSError:
        return False
    return True


def local_round_fresh(path: Path, n: int, paths: list[bool], args: argparse.Namespace,
                      seed: int) -> dict[str, dict[str, float | None]]:
    """`local_round` in a fresh process: no reader, mapping or allocation of an earlier round
    (the whole path's compact index of 10^9 records is gigabytes) shares its address space."""
    which = "".join("1" if whole else "0" for whole in paths)
    argv = [sys.executable, __file__, "--tmp", args.tmp, "--local-child", f"{path},{n},{which},{seed}",
            "--batch", str(args.batch), "--pool", str(args.pool)]
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def remote_round(server: Server, name: str, n: int, whole: bool, args: argparse.Namespace,
                 seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    order = rng.permutation(n)[:args.batch * 4096] if n <= 10**8 else rng.integers(0, n, args.batch * 4096)
    order = order.astype(np.uint64)
    with Proxy(server, args.link) as px:
        url, options = server.store(px.port, name)
        t = time.perf_counter()
        with Dense.open(url, storage_options=options, validate="full" if whole else "cached") as ds:
            opened = time.perf_counter() - t
            at_open = ds.remote_stats()
            ds[order[:args.batch]]
            first_s = time.perf_counter() - t
            at_first = ds.remote_stats()
            records, elapsed = timed_batches(ds, order[args.batch:], args)
            end = ds.remote_stats()
            # Where the index is held: one record of each of --held-blocks index blocks read
            # first, then fresh records of those blocks only (by part, no index fetch left).
            blocks = rng.choice((n + 255) // 256, min(args.held_blocks, (n + 255) // 256), replace=False)
            ds[np.minimum(blocks * 256, n - 1).astype(np.uint64)]
            held = np.minimum(blocks[rng.integers(0, blocks.shape[0], args.batch * 4096)] * 256
                              + rng.integers(1, 256, args.batch * 4096), n - 1).astype(np.uint64)
            before_held = ds.remote_stats()
            held_records, held_elapsed = timed_batches(ds, held, args)
            after_held = ds.remote_stats()
    fetched = ("requests", "bytes", "index_requests", "index_bytes")
    first_bytes = sum(at_first[f] for f in ("bytes", "index_bytes")) + at_open["open_bytes"]
    first_requests = sum(at_first[f] for f in ("requests", "index_requests")) + at_open["open_requests"]
    steady = {f: (end[f] - at_first[f]) / max(1, records) for f in fetched}
    return {"open_s": opened, "open_requests": at_open["open_requests"], "open_bytes": at_open["open_bytes"],
            "first_batch_s": first_s, "first_batch_bytes": first_bytes, "first_batch_requests": first_requests,
            "records_s": records / elapsed, "index_bytes_per_record": steady["index_bytes"],
            "index_requests_per_record": steady["index_requests"],
            "record_requests_per_record": steady["requests"],
            "held_records_s": held_records / held_elapsed,
            "held_index_requests_per_record": (after_held["index_requests"] - before_held["index_requests"])
            / max(1, held_records)}


def timed_batches(ds: Any, order: np.ndarray, args: argparse.Namespace) -> tuple[int, float]:
    """Batches of --batch records of `order`, in order, for --seconds or to its end: (records
    read, seconds)."""
    k, records = 0, 0
    t = time.perf_counter()
    while time.perf_counter() - t < args.seconds and k < order.shape[0]:
        records += len(ds[order[k:k + args.batch]])
        k += args.batch
    return records, time.perf_counter() - t


def median(rows: list[dict[str, float | None]]) -> dict[str, float | None]:
    """The median of each figure over rounds; None for a figure no round measured."""
    out: dict[str, float | None] = {}
    for k in rows[0]:
        values = [r[k] for r in rows if r[k] is not None]
        out[k] = statistics.median(values) if values else None
    return out


def _num(value: Any, spec: str, unit: str = "") -> str:
    return "" if value is None else f"{value:{spec}}{unit}"


def tables(results: dict[str, Any]) -> str:
    """The results as the two Markdown tables of docs/benchmarks.md ("Opening by part")."""
    out = ["Local:", "", "| records | open, by part s | open, whole s | first batch, by part / whole s "
           "| steady ns/record, by part / whole | cold ns/record, by part / whole |",
           "|---|---:|---:|---|---|---|"]
    for n, rows in results["sizes"].items():
        part, whole = rows.get("local_by_part", {}), rows.get("local_whole", {})
        out.append(f"| {int(n):,} | {_num(part.get('open_s'), '.4f')} | {_num(whole.get('open_s'), '.3f')} "
                   f"| {_num(part.get('first_batch_s'), '.3f')} / {_num(whole.get('first_batch_s'), '.3f')} "
                   f"| {_num(part.get('steady_ns'), '.1f')} / {_num(whole.get('steady_ns'), '.1f')} "
                   f"| {_num(part.get('cold_ns'), '.0f')} / {_num(whole.get('cold_ns'), '.0f')} |")
    out += ["", "By URL:", "", "| records | path | rounds | open s | requests / bytes at open | first batch: s / "
            "requests / bytes | fresh records/s | index bytes / requests per fresh record | held-index records/s |",
            "|---|---|---:|---:|---|---|---:|---|---:|"]
    for n, rows in results["sizes"].items():
        for path in ("by_part", "whole"):
            row = rows.get(f"remote_{path}")
            if row is None:
                continue
            out.append(
                f"| {int(n):,} | {path.replace('_', ' ')} | {row['rounds']} | {_num(row['open_s'], '.3f')} "
                f"| {row['open_requests']} / {_num(row['open_bytes'], ',.0f', ' B')} "
                f"| {_num(row['first_batch_s'], '.2f')} / {_num(row['first_batch_requests'], '.0f')} / "
                f"{_num(row['first_batch_bytes'], ',.0f', ' B')} | {_num(row['records_s'], ',.0f')} "
                f"| {_num(row['index_bytes_per_record'], ',.0f', ' B')} / {_num(row['index_requests_per_record'], '.2f')} "
                f"| {_num(row['held_records_s'], ',.0f')} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--sizes", default="1e6,1e8,1e9", type=lambda s: [int(float(x)) for x in s.split(",")])
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--pool", type=int, default=1 << 16)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--held-blocks", type=int, default=2048,
                    help="index blocks made held before the held-index gathers by URL")
    ap.add_argument("--link", default="same-region-s3", choices=("same-region-s3", "fast-lan", "loopback"))
    ap.add_argument("--remote-whole-max", type=lambda s: int(float(s)), default=10**8)
    ap.add_argument("--local-whole-max", type=lambda s: int(float(s)), default=10**9)
    ap.add_argument("--json", default=None)
    ap.add_argument("--local-child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--local-only", action="store_true",
                    help="run the local rounds only, replacing those of an existing --json file")
    args = ap.parse_args()
    if args.local_child:
        path, n, which, seed = args.local_child.split(",")
        print(json.dumps(local_round(Path(path), int(n), [c == "1" for c in which], args, int(seed))))
        return 0
    root = Path(args.tmp)
    root.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
                               "args": {k: v for k, v in vars(args).items() if k != "json"}, "sizes": {}}
    paths = {n: build(n, args.shards, root) for n in args.sizes}
    server = Server("http", root, None)
    try:
        for n in args.sizes:
            # The two paths alternate round by round (the page cache and the machine's load
            # then weigh on both alike); by URL the whole path runs once from 10^8 records,
            # where one round downloads gigabytes.
            runs: dict[str, list[dict[str, float]]] = {}
            for r in range(args.rounds):
                # Locally both paths in one process a round (by part opens first, fresh).
                local = [False] + ([True] if n <= args.local_whole_max else [])
                for name, row in local_round_fresh(paths[n], n, local, args, r).items():
                    runs.setdefault(f"local_{name}", []).append(row)
                    print(f"{n:.0e} local {name}: {row}", file=sys.stderr, flush=True)
                for whole in (False, True):
                    name = "whole" if whole else "by_part"
                    if not args.local_only and (not whole or (n <= args.remote_whole_max and (r == 0 or n < 10**8))):
                        runs.setdefault(f"remote_{name}", []).append(
                            remote_round(server, paths[n].name, n, whole, args, r))
                        print(f"{n:.0e} remote {name}: {runs[f'remote_{name}'][-1]}", file=sys.stderr, flush=True)
            results["sizes"][str(n)] = {k: median(v) | {"rounds": len(v)} for k, v in runs.items()}
            if args.local_only and args.json and Path(args.json).is_file():
                earlier = json.loads(Path(args.json).read_text())["sizes"].get(str(n), {})
                results["sizes"][str(n)] = {k: v for k, v in earlier.items() if k.startswith("remote_")} \
                    | results["sizes"][str(n)]
    finally:
        server.close()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    print(tables(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
