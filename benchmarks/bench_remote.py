"""Reading stores over a simulated network link: zrecord by byte range against the link's own
ceiling, with a local-disk run as the upper bound.

Set-up, all on loopback: a Range HTTP server (packages/zrecord/tests/remote_servers.py's
RangeHTTPServer, in a process of its own) serves the stores' files; between it and the client
runs the delaying, rate-limiting TCP proxy of packages/zrecord/tests/netlink.py (a process of
its own), with a link profile: "same-region-s3" (25 ms round trip, 640 Mbit/s per connection
and direction) or "fast-lan" (1 ms, 2 Gbit/s). The server and proxy share this machine's cores
with the client, so their own costs bound what any client can get: that is why the ceiling
is measured through the same proxy and server, in the same run, beside every figure.

What is measured, per workload (``--workloads``; the data of benchmarks/prepare_data.py), the
store written raw (stored bytes = delivered bytes) and each figure the median of ``--rounds``:

- the link's ceiling: (a) bandwidth, ``--in-flight`` parallel ranged GETs of 8 MiB from the
  largest shard for ``--seconds``; one connection's bandwidth, one GET of the whole shard;
  (b) the request rate, ``--in-flight`` parallel ranged GETs of one mean record each at random
  places for ``--seconds``; both with obstore, the client zrecord reads through.
- zrecord remote, a fresh reader (no records held): time to first batch (open: header, index
  and shard HEADs, then the first gather of ``--batch`` random records); then batches of a
  random permutation (each record fetched once) for ``--seconds``: records/s, MiB/s, requests
  per record, and read amplification (bytes fetched over bytes delivered).
- the same gathers from the local store (the page cache warm): the upper bound.

Targets (issue O1): large records >= 80% of (a); small records >= 70% of (b) at the same
requests in flight. The peers (MosaicML Streaming, LitData) are not in this script yet.

Usage: python benchmarks/bench_remote.py [--data DIR] [--workloads vision_dense,tokens]
       [--link same-region-s3|fast-lan|loopback] [--rounds 3] [--seconds 5] [--batch 256]
       [--in-flight 32] [--tmp DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from bench_matrix import Workload
from cold_gather import ensure_store

import zrecord
from zrecord import Dense, Ragged

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent / "packages" / "zrecord" / "tests"
CHUNK = 8 << 20


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {port}")


class Link:
    """The server and the proxy in front of it, as processes."""

    def __init__(self, root: Path, profile: str) -> None:
        self.server_port, self.port = free_port(), free_port()
        code = ("import sys, time; sys.path.insert(0, sys.argv[1]); "
                "from remote_servers import RangeHTTPServer; "
                "s = RangeHTTPServer(sys.argv[2], port=int(sys.argv[3]), record_requests=False); "
                "time.sleep(1e9)")
        self.server = subprocess.Popen([sys.executable, "-c", code, str(TESTS), str(root),
                                        str(self.server_port)])
        wait_port(self.server_port, self.server, "the HTTP server")
        self.proxy = subprocess.Popen([sys.executable, str(TESTS / "netlink.py"), "--target",
                                       f"127.0.0.1:{self.server_port}", "--profile", profile,
                                       "--listen-port", str(self.port)], stdout=subprocess.DEVNULL)
        wait_port(self.port, self.proxy, "the link proxy")

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def close(self) -> None:
        for p in (self.proxy, self.server):
            p.terminate()
            p.wait(10)


def client(url: str) -> Any:
    from obstore.store import HTTPStore

    return HTTPStore.from_url(url, client_options={"allow_http": True})


def parallel_gets(store: Any, name: str, ranges: list[tuple[int, int]], in_flight: int,
                  seconds: float) -> tuple[float, int, int]:
    """GET `ranges` (cycled) with `in_flight` at once for about `seconds`: (elapsed, requests,
    bytes)."""
    import obstore

    done = [0, 0]
    stop = time.monotonic() + seconds

    def worker(k: int) -> None:
        i = k
        while time.monotonic() < stop:
            a, b = ranges[i % len(ranges)]
            data = obstore.get_range(store, name, start=a, end=b)
            done[0] += 1
            done[1] += len(data)
            i += in_flight

    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(in_flight) as pool:
        list(pool.map(worker, range(in_flight)))
    return time.monotonic() - start, done[0], done[1]


def ceiling(link: Link, store_name: str, record_bytes: int, args: argparse.Namespace) -> dict[str, Any]:
    """The link's bandwidth and small-request rate through the proxy and server."""
    import obstore

    folder = Path(args.root) / store_name
    shard = max(folder.glob("data-*.zrd"), key=lambda p: p.stat().st_size)
    size = shard.stat().st_size
    store = client(link.url(store_name))
    t = time.monotonic()
    whole = len(obstore.get(store, shard.name).bytes())
    one = whole / (time.monotonic() - t)
    chunks = [(a, min(size, a + CHUNK)) for a in range(0, size, CHUNK)]
    el, _, nbytes = parallel_gets(store, shard.name, chunks, args.in_flight, args.seconds)
    rng = np.random.default_rng(0)
    starts = rng.integers(0, max(1, size - record_bytes), 4096)
    small = [(int(a), int(a) + record_bytes) for a in starts]
    el2, reqs, _ = parallel_gets(store, shard.name, small, args.in_flight, args.seconds)
    return {"one_connection_mib_s": one / 2**20, "bandwidth_mib_s": nbytes / el / 2**20,
            "request_rate": reqs / el, "probe_record_bytes": record_bytes}


def remote_run(url: str, kind: str, n: int, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """A fresh remote reader: time to first batch, then a random permutation in batches."""
    cls = Dense if kind == "dense" else Ragged
    order = np.random.default_rng(seed).permutation(n).astype(np.uint64)
    t = time.monotonic()
    store = cls.open(url, storage_options={"max_in_flight": args.in_flight})
    opened = time.monotonic() - t
    try:
        store[order[:args.batch]]
        first = time.monotonic() - t
        before = store.remote_stats()
        delivered, records, k = 0, 0, args.batch
        start = time.monotonic()
        while time.monotonic() - start < args.seconds and k < n:
            idx = order[k:k + args.batch]
            got = store[idx]
            delivered += _nbytes(got)
            records += len(idx)
            k += args.batch
        el = time.monotonic() - start
        after = store.remote_stats()
    finally:
        store.close()
    reqs, fetched = after["requests"] - before["requests"], after["bytes"] - before["bytes"]
    return {"open_s": opened, "first_batch_s": first, "records_s": records / el,
            "mib_s": delivered / el / 2**20, "requests_s": reqs / el,
            "requests_per_record": reqs / max(1, records),
            "read_amplification": fetched / max(1, delivered), "records": records}


def local_run(path: str, kind: str, n: int, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    cls = Dense if kind == "dense" else Ragged
    order = np.random.default_rng(seed).permutation(n).astype(np.uint64)
    with cls.open(path) as store:
        store[order]  # the page cache warm: the upper bound
        delivered, records, k = 0, 0, 0
        start = time.monotonic()
        while time.monotonic() - start < args.seconds and k < n:
            got = store[order[k:k + args.batch]]
            delivered += _nbytes(got)
            records += len(got)
            k += args.batch
        el = time.monotonic() - start
    return {"records_s": records / el, "mib_s": delivered / el / 2**20}


def _nbytes(batch: Any) -> int:
    return int(batch.nbytes) if isinstance(batch, np.ndarray) else sum(int(r.nbytes) for r in batch)


def med(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]} | {"rounds": rows}


def table(results: dict[str, Any]) -> str:
    lines = [f"### Remote reads over {results['link']}, batch {results['batch']}, "
             f"{results['in_flight']} requests in flight",
             "", "| workload | record | link MiB/s (1 conn.) | link small req/s | zrecord records/s | "
             "MiB/s | % of link | req/s (% of link rate) | req/record | read amp. | first batch s | "
             "local records/s |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, w in results["workloads"].items():
        c, r, lo = w["ceiling"], w["remote"], w["local"]
        lines.append(
            f"| {name} | {w['record_bytes']:,.0f} B | {c['bandwidth_mib_s']:,.0f} ({c['one_connection_mib_s']:,.0f}) | "
            f"{c['request_rate']:,.0f} | {r['records_s']:,.0f} | {r['mib_s']:,.1f} | "
            f"{100 * r['mib_s'] / c['bandwidth_mib_s']:.0f}% | {r['requests_s']:,.0f} "
            f"({100 * r['requests_s'] / c['request_rate']:.0f}%) | {r['requests_per_record']:.2f} | "
            f"{r['read_amplification']:.2f} | {r['first_batch_s']:.2f} | {lo['records_s']:,.0f} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(HERE.parent.parent / "data"))
    ap.add_argument("--workloads", default="vision_dense,tokens")
    ap.add_argument("--link", default="same-region-s3", choices=("same-region-s3", "fast-lan", "loopback"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--in-flight", type=int, default=32)
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": platform.platform(),
                               "cpus": os.cpu_count(), "zrecord": zrecord.__version__, "link": args.link,
                               "batch": args.batch, "in_flight": args.in_flight, "rounds": args.rounds,
                               "seconds": args.seconds, "workloads": {}}
    with tempfile.TemporaryDirectory(dir=args.tmp, prefix="bench-remote-") as root:
        args.root = root
        stores = {}
        for name in args.workloads.split(","):
            w = Workload(name, args.data, None)
            path = ensure_store(w, "raw", root, args.batch)
            stores[name] = (w, os.path.basename(path))
        link = Link(Path(root), args.link)
        try:
            for name, (w, base) in stores.items():
                record = w.nbytes / w.n
                print(f"{name}: {w.n:,} records of {record:,.0f} B ...", file=sys.stderr, flush=True)
                rounds: dict[str, list[dict[str, Any]]] = {"ceiling": [], "remote": [], "local": []}
                for k in range(args.rounds):
                    rounds["ceiling"].append(ceiling(link, base, max(1, round(record)), args))
                    rounds["remote"].append(remote_run(link.url(base), w.kind, w.n, args, k))
                    rounds["local"].append(local_run(os.path.join(root, base), w.kind, w.n, args, k))
                results["workloads"][name] = {"records": w.n, "record_bytes": record,
                                              **{part: med(rows) for part, rows in rounds.items()}}
        finally:
            link.close()
    text = table(results)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
