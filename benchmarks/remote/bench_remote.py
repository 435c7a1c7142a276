"""Reading stores over a simulated network link: zrecord by byte range against the link's own
ceiling, with a local-disk run as the upper bound.

Set-up, all on loopback: a Range HTTP server serves the stores' files (``--server http``:
zrecord_testkit.servers' RangeHTTPServer, in a process of its own; ``nginx``: nginx from the
Debian packages, one worker, Range, ETag and If-Match its own, the fast server; ``s3rver`` or
``moto``: S3 servers, for S3 semantics and for the peers); between it and the client runs the delaying,
rate-limiting TCP proxy zrecord_testkit.netlink (a process of its own), with a link profile:
"same-region-s3" (25 ms round trip, 640 Mbit/s per connection and direction) or "fast-lan"
(1 ms, 2 Gbit/s). The server and proxy share this machine's cores with the client, so their
own costs bound what any client can get: that is why the ceiling is measured through the same
proxy and server, in the same run, beside every figure.

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
- ``remote_deep``: the same, with the next ``--prefetch-batches`` batches always prefetched
  (``store.prefetch``) while one is gathered: the "deep prefetch" of [O3]'s target.
- loaderx's DataLoader (4 worker threads) over a fresh remote reader whose mirror is bounded to
  ``--cache-share`` of the dataset (``cache_bytes``, at least 4 MiB), one whole random pass over
  the first ``--loader-records`` records: time to the first batch, records/s, amplification
  (every byte fetched was delivered) and the mirror's peak size. Its window (batches in flight
  plus steps read ahead: 7 + 2 at most) is cut to what the budget holds, since records fetched
  and not read yet are not evicted; and the same with ``readahead=0`` (the read-ahead steps'
  prefetch starts their ranged GETs early; without it only the batches in flight fetch).
- the same DataLoader with its defaults (``prefetch=4, readahead=2``, whatever the budget
  holds), the mirror's bytes on disk sampled every 2 ms by a thread of its own during the pass
  ([O3] point 4: the budget must hold at its peak, not only after each trim); ``--budget-only``
  runs this row alone.
- ``blocks``: the DataLoader with its defaults in loaderx's locality-aware BLOCKS order
  (blocks of ``--block-bytes``, windows of ``--window-blocks``) over a fresh reader told the
  link (the cost model's gap and requests in flight), its mirror bounded to
  ``--blocks-budget-windows`` windows (two), one
  whole epoch: MiB/s against the link's bandwidth (a), and its GETs (the reader's count, and
  nginx's access log) against the floor stored bytes / 8 MiB + blocks. The stores are written
  with the writer's default 4 data files (``--data-shards`` sets another number: with 1, no
  block is split across two files). With ``--timeline``,
  the JSON gets the reader's GETs under way, bytes fetched and mirror size every 10 ms; with
  ``--blocks-epochs E``, the same loader reads E epochs and the later ones are reported apart
  (what the mirror kept at the end of one epoch serves the start of the next).
- ``peer_epochs`` (with ``--peers``, an S3 server): MosaicML Streaming (``py1e``, its shuffle
  block one window) and LitData (its default shuffle) read one epoch of the same records, in
  shards of one block, through caches bounded to the same two windows: GETs (their boto3 and
  obstore calls, counted in their process), bytes through the link, records/s after the
  first record (as the loader's own after its first batch) and with the open included.
- the same gathers from the local store (the page cache warm): the upper bound.
- with ``--peers PYTHON`` (and ``--server s3rver``): MosaicML Streaming and LitData
  (benchmarks/remote/remote_peers.py, in that Python) write the same records in their formats, upload
  them, and read them by index in a random order through their own caches bounded to
  ``--cache-share`` of the dataset: time to the first batch, records/s, bytes through the link
  per byte delivered, and the peak size of the cache folder.

Read amplification comes two ways: payload (record bytes fetched over bytes delivered, the
reader's own count) and wire (everything the proxy carried down, open's header and index and
every response's HTTP headers included, over bytes delivered).

Targets (issue O1): large records >= 80% of (a); small records >= 70% of (b) at the same
requests in flight; time to first batch <= 1/10 of the peers'; DataLoader >= 2x the better
peer at the same cache budget, read amplification <= 1.2.

Usage: python benchmarks/remote/bench_remote.py [--data DIR] [--workloads vision_dense,tokens]
       [--link same-region-s3|fast-lan|loopback] [--server http|nginx|moto|s3rver --s3rver PATH]
       [--parts ceiling,remote,remote_deep,blocks,...] [--block-bytes 8388608] [--window-blocks 8]
       [--blocks-budget-windows 2] [--blocks-epochs 1] [--timeline] [--prefetch-batches 2]
       [--peers PYTHON] [--cache-share 0.1] [--rounds 3] [--seconds 5] [--batch 256]
       [--in-flight 64] [--loader-records 8192] [--budget-only] [--tmp DIR] [--json OUT]
(The server and the proxy come from the development test kit, which is never released:
`pip install -e packages/zrecord-testkit` beside zrecord[remote] and loaderx. s3rver:
`npm install s3rver@3.7.1`; the peers' Python: a virtualenv with
`pip install mosaicml-streaming==0.13.0 litdata==0.2.76 boto3 torch`.)
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

import zrecord
from zrecord import Dense, Ragged

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, which holds `common`
from common.data import Workload, default_data
from common.store import ensure_store

try:
    from zrecord_testkit import netlink, servers
except ImportError as exc:
    raise SystemExit(f"bench_remote.py runs its server and link proxy from the development test kit, "
                     f"which is not installed ({exc}): pip install -e packages/zrecord-testkit") from exc

HERE = Path(__file__).resolve().parent
CHUNK = 8 << 20
# zrecord's default request_bytes_max: the size of the requests the blocks' floor counts.
REQUEST_BYTES = 8 << 20
# The cost model's link for each proxy profile (the proxy's figures, not a cloud's).
LINK_OF_PROFILE = {
    "same-region-s3": zrecord.LINKS["s3-standard"],  # its 25 ms and 80 MB/s are the proxy profile's
    "fast-lan": zrecord.Link(latency_s=0.001, connection_bytes_per_s=250e6, price=zrecord.PRICES["s3-standard"],
                             source="the fast-lan proxy profile (1 ms, 2 Gbit/s)"),
    "loopback": zrecord.Link(latency_s=0.0001, connection_bytes_per_s=1e9, price=zrecord.PRICES["s3-standard"],
                             source="loopback, no delay"),
}


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


class Server:
    """The object server, as a process: the Range HTTP server over the stores' folder, or
    s3rver (npm s3rver 3.7.1, `--s3rver PATH` to its executable) with a bucket "bench" the
    stores are published to (zrecord.publish, straight to the server, not through the link)."""

    def __init__(self, kind: str, root: Path, s3rver: str | None, nginx: str | None = None) -> None:
        self.kind, self.port, self.root = kind, free_port(), root
        if kind == "http":
            code = (f"import sys, time; from {servers.__name__} import RangeHTTPServer; "
                    "s = RangeHTTPServer(sys.argv[1], port=int(sys.argv[2]), record_requests=False); "
                    "time.sleep(1e9)")
            self.proc = subprocess.Popen([sys.executable, "-c", code, str(root), str(self.port)])
        elif kind == "nginx":
            self.proc = subprocess.Popen([nginx or "nginx", "-c", str(nginx_conf(root, self.port)),
                                          "-p", str(root / "nginx")])
        elif kind == "moto":
            self._moto = servers.S3Server(port=self.port)
            self._moto.create_bucket("bench")
            return
        else:
            if not s3rver:
                raise SystemExit("--server s3rver needs --s3rver PATH (npm install s3rver@3.7.1)")
            data = root / "s3rver-data"
            data.mkdir()
            self.proc = subprocess.Popen([s3rver, "-d", str(data), "-a", "127.0.0.1", "-p", str(self.port),
                                          "--silent", "--allow-mismatched-signatures",
                                          "--configure-bucket", "bench"], stdout=subprocess.DEVNULL)
        wait_port(self.port, self.proc, f"the {kind} server")

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def publish(self, local: str, name: str) -> None:
        if self.kind in ("s3rver", "moto"):
            zrecord.publish(local, f"s3://bench/{name}", storage_options=S3_KEYS | {"endpoint_url": self.endpoint},
                            verify=False)

    def store(self, port: int, name: str) -> tuple[str, dict[str, Any]]:
        """The URL of store `name` through the link at `port`, and its storage options."""
        if self.kind in ("http", "nginx"):
            return f"http://127.0.0.1:{port}/{name}", {}
        return f"s3://bench/{name}", S3_KEYS | {"endpoint_url": f"http://127.0.0.1:{port}"}

    def requests(self) -> int | None:
        """The requests the server answered so far: nginx's access log lines (None for the
        other servers, which keep no count here)."""
        if self.kind != "nginx":
            return None
        log = self.root / "nginx" / "access.log"
        with open(log, "rb") as f:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))

    def close(self) -> None:
        if self.kind == "moto":
            self._moto.close()
            return
        self.proc.terminate()
        self.proc.wait(10)


def nginx_conf(root: Path, port: int) -> Path:
    """A configuration for nginx serving `root`'s files on 127.0.0.1:`port` as static files
    (Range, ETag and If-Match are nginx's own), in the foreground, every path of its own under
    `root`/nginx. One worker process: the machine's other core runs the proxy and the client.
    Requests are counted in its access log (one line each)."""
    home = root / "nginx"
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    conf = home / "nginx.conf"
    # Started by root, nginx's workers would run as nobody, who may not read a private temp
    # folder: they stay root's (nginx ignores `user` for anyone else).
    user = "user root;\n" if os.geteuid() == 0 else ""
    conf.write_text(f"""daemon off;
{user}worker_processes 1;
pid {home}/nginx.pid;
error_log {home}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log {home}/access.log;
  client_body_temp_path {home}/tmp;
  proxy_temp_path {home}/tmp;
  fastcgi_temp_path {home}/tmp;
  uwsgi_temp_path {home}/tmp;
  scgi_temp_path {home}/tmp;
  sendfile on;
  keepalive_requests 1000000;
  keepalive_timeout 300s;
  default_type application/octet-stream;
  server {{
    listen 127.0.0.1:{port};
    root {root};
    location / {{ }}
  }}
}}
""")
    return conf


S3_KEYS = {"aws_access_key_id": "S3RVER", "aws_secret_access_key": "S3RVER", "region": "us-east-1"}


class Proxy:
    """A fresh link proxy (zrecord_testkit.netlink, a process) in front of the server for one
    measurement; after it: the bytes it carried down (`bytes_down`), which read amplification is
    made of."""

    def __init__(self, server: Server, profile: str) -> None:
        self.server, self.profile, self.port = server, profile, free_port()
        self.bytes_down = 0

    def __enter__(self) -> Proxy:
        self.proc = subprocess.Popen([sys.executable, "-m", netlink.__name__, "--target",
                                      f"127.0.0.1:{self.server.port}", "--profile", self.profile,
                                      "--listen-port", str(self.port)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        wait_port(self.port, self.proc, "the link proxy")
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            err = self.proc.communicate(timeout=30)[1]
        except subprocess.TimeoutExpired:
            # Its count is printed before it closes its connections, which may take long with
            # hundreds open: what it printed is kept.
            self.proc.kill()
            err = self.proc.communicate()[1]
        found = re.search(r"(\d+) bytes down", err)
        self.bytes_down = int(found.group(1)) if found else 0


def client(server: Server, port: int, name: str) -> Any:
    """An obstore client of store `name`'s objects through the link at `port`."""
    from obstore.store import HTTPStore, S3Store

    if server.kind in ("http", "nginx"):
        return HTTPStore.from_url(f"http://127.0.0.1:{port}/{name}", client_options={"allow_http": True})
    return S3Store("bench", prefix=name, config={"endpoint": f"http://127.0.0.1:{port}",
                                                   "access_key_id": "S3RVER", "secret_access_key": "S3RVER",
                                                   "region": "us-east-1", "virtual_hosted_style_request": False},
                   client_options={"allow_http": True})


def parallel_gets(store: Any, name: str, ranges: list[tuple[int, int]], in_flight: int,
                  seconds: float) -> tuple[float, int, int]:
    """GET `ranges` (cycled) with `in_flight` at once for about `seconds`: (elapsed, requests,
    bytes)."""
    import obstore

    done = [0, 0]
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def worker(k: int) -> None:
        i = k
        while time.monotonic() < stop:
            a, b = ranges[i % len(ranges)]
            data = obstore.get_range(store, name, start=a, end=b)
            with lock:
                done[0] += 1
                done[1] += len(data)
            i += in_flight

    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(in_flight) as pool:
        list(pool.map(worker, range(in_flight)))
    return time.monotonic() - start, done[0], done[1]


def ceiling(server: Server, name: str, record_bytes: int, args: argparse.Namespace) -> dict[str, Any]:
    """The link's bandwidth and small-request rate through a proxy and the server."""
    import obstore

    folder = Path(args.root) / name
    shard = max(folder.glob("data-*.zrd"), key=lambda p: p.stat().st_size)
    size = shard.stat().st_size
    with Proxy(server, args.link) as px:
        store = client(server, px.port, name)
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
            "request_rate": reqs / el2, "probe_record_bytes": record_bytes}


def remote_run(server: Server, name: str, kind: str, n: int, args: argparse.Namespace,
               seed: int, depth: int = 0) -> dict[str, Any]:
    """A fresh remote reader: time to first batch, then a random permutation in batches, each
    gather after ``prefetch`` of the batch `depth` batches ahead (none with 0)."""
    cls = Dense if kind == "dense" else Ragged
    order = np.random.default_rng(seed).permutation(n).astype(np.uint64)
    with Proxy(server, args.link) as px:
        url, options = server.store(px.port, name)
        t = time.monotonic()
        store = cls.open(url, storage_options=options | {"max_in_flight": args.in_flight})
        opened = time.monotonic() - t
        try:
            first_got = store[order[:args.batch]]
            first = time.monotonic() - t
            delivered_all = _nbytes(first_got)
            before = store.remote_stats()
            records, delivered, el = timed_batches(store, order, args.batch, args, depth)
            after = store.remote_stats()
        finally:
            store.close()
    reqs = after["requests"] - before["requests"]
    return {"open_s": opened, "first_batch_s": first, "records_s": records / el,
            "mib_s": delivered / el / 2**20, "requests_s": reqs / el,
            "requests_per_record": reqs / max(1, records),
            "payload_amplification": (after["bytes"] - before["bytes"]) / max(1, delivered),
            "read_amplification": px.bytes_down / max(1, delivered + delivered_all), "records": records}


def loader_run(server: Server, name: str, kind: str, n: int, args: argparse.Namespace,
               seed: int, dataset_bytes: int, readahead: int = 2, defaults: bool = False) -> dict[str, Any]:
    """loaderx's DataLoader over a fresh remote reader, for one whole CYCLIC pass over the first
    `--loader-records` records (each read once, in random order): time to the first batch, then
    records/s while the loader prefetches ahead. A whole pass, so that every byte fetched was
    delivered (what the loader prefetches past the pass is held already: the next pass reads the
    same records). With `defaults`, the DataLoader's own prefetch and readahead, whatever the
    budget holds, and the mirror's size is sampled every 2 ms by a thread of its own (the
    budget must hold at its peak, not only after each trim)."""
    from loaderx.dataloader import DataLoader
    from loaderx.sampler import Sampler

    cls = Dense if kind == "dense" else Ragged
    length = min(n, args.loader_records)
    steps = length // args.batch
    with Proxy(server, args.link) as px:
        url, options = server.store(px.port, name)
        budget = max(4 << 20, int(args.cache_share * dataset_bytes))
        # Batches the budget holds; the window (prefetch - 1 in flight, plus readahead) fits it.
        fits = max(1, budget // max(1, args.batch * dataset_bytes // n))
        prefetch = min(args.loader_workers * 2, fits + 1)
        readahead = min(readahead, max(0, fits - (prefetch - 1)))
        if defaults:
            prefetch, readahead = 4, 2
        t = time.monotonic()
        store = cls.open(url, storage_options=options | {"max_in_flight": args.in_flight,
                                                         "cache_bytes": budget})
        sampled = [0]
        done = threading.Event()

        def sample() -> None:
            budget_of = store._remote._budget
            while not done.wait(0.002):
                sampled[0] = max(sampled[0], budget_of.used())

        sampler_thread = threading.Thread(target=sample, daemon=True)
        sampler_thread.start()
        try:
            with DataLoader({"x": store}, Sampler(length, args.batch, Sampler.Mode.CYCLIC, seed=seed),
                            workers=args.loader_workers, prefetch=prefetch, subset=length < n,
                            readahead=readahead) as loader:
                delivered, first, el, peak = one_pass(loader, steps, store, t)
            fetched = store.remote_stats()["bytes"]
        finally:
            done.set()
            sampler_thread.join()
            store.close()
    return {"first_batch_s": first, "records_s": (steps - 1) * args.batch / el,
            "records_s_whole": steps * args.batch / (first + el), "records": steps * args.batch,
            "payload_amplification": fetched / max(1, delivered),
            "read_amplification": px.bytes_down / max(1, delivered),
            "cache_budget_bytes": budget, "peak_cache_bytes": peak, "sampled_peak_cache_bytes": sampled[0],
            "prefetch": prefetch,
            "readahead": readahead}


def one_pass(loader: Any, steps: int, store: Any, t: float) -> tuple[int, float, float, int]:
    """`steps` batches of `loader` (stream "x" of `store`, opened at `t`): bytes delivered,
    seconds to the first batch since `t`, seconds of the others, and the mirror's largest size
    after a batch."""
    delivered = _nbytes(next(loader)["x"])
    first = time.monotonic() - t
    start = time.monotonic()
    peak = 0
    for _ in range(steps - 1):
        delivered += _nbytes(next(loader)["x"])
        peak = max(peak, store.remote_stats()["cache_bytes"])
    return delivered, first, time.monotonic() - start, peak


class Timeline:
    """With ``--timeline``: every 10 ms of a pass, the reader's GETs under way (holding one of
    its ``max_in_flight`` slots), its bytes fetched so far and its mirror's bytes on disk, as
    rows ``[seconds, gets, bytes_fetched, cache_bytes]`` (what the link is given over time)."""

    def __init__(self, store: Any, on: bool) -> None:
        self.rows: list[list[float]] = []
        self._store, self._stop = store, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True) if on else None
        if self._thread is not None:
            self._thread.start()

    def _run(self) -> None:
        mirror, t0 = self._store._remote, time.monotonic()
        while not self._stop.wait(0.01):
            slots = getattr(mirror, "_slots", None)
            gets = mirror.in_flight - slots._value if slots is not None else 0
            self.rows.append([round(time.monotonic() - t0, 3), gets, mirror.bytes_fetched,
                              self._store.remote_stats()["cache_bytes"]])

    def stop(self) -> list[list[float]]:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        return self.rows


def blocks_run(server: Server, name: str, kind: str, n: int, args: argparse.Namespace,
               seed: int) -> dict[str, Any]:
    """loaderx's DataLoader (its defaults) in the locality-aware BLOCKS order over a fresh reader
    told the link (storage option ``link``: the cost model's gap and requests in flight), one
    whole epoch over every record: blocks of ``--block-bytes``, windows of ``--window-blocks``,
    the mirror bounded to ``blocks_budget`` (what the peers' caches get too). Records/s and MiB/s
    delivered, the GETs and bytes of the epoch (the reader's count, and the server's where it
    keeps one) against the blocks' own figure (stored bytes / request size + blocks)."""
    from loaderx.dataloader import DataLoader
    from loaderx.sampler import Sampler, block_records

    cls = Dense if kind == "dense" else Ragged
    link = LINK_OF_PROFILE[args.link]
    with Proxy(server, args.link) as px:
        url, options = server.store(px.port, name)
        t = time.monotonic()
        store = cls.open(url, storage_options=options | {"link": link, "cache_bytes": blocks_budget(args)})
        try:
            per_block = block_records(store, args.block_bytes)
            sampler = Sampler(n, args.batch, Sampler.Mode.BLOCKS, seed=seed, block_records=per_block,
                              window_blocks=args.window_blocks)
            steps = sampler.steps_per_cycle
            served = server.requests()
            with DataLoader({"x": store}, sampler, workers=args.loader_workers) as loader:
                timeline = Timeline(store, args.timeline)
                delivered, first, el, peak = one_pass(loader, steps, store, t)
                stats = store.remote_stats()
                # The first epoch's figures below are its own, the server's count too (the
                # link's bytes are known when the proxy closes: over all epochs read).
                after = server.requests()
                delivered_all = delivered
                later, before = [], stats
                for epoch in range(2, args.blocks_epochs + 1):
                    # The same loader goes on into the next cycle of the order: what the mirror
                    # kept for it, and what the first epoch's end gave up to keep it, show here.
                    got, _, took, top = one_pass(loader, steps, store, t)
                    delivered_all += got
                    now = store.remote_stats()
                    later.append({"epoch": epoch, "mib_s": (got - got // steps) / took / 2**20,
                                  "records_s": (steps - 1) * args.batch / took,
                                  "gets": now["requests"] - before["requests"],
                                  "payload_amplification": (now["bytes"] - before["bytes"]) / max(1, got),
                                  "peak_cache_bytes": top})
                    print(f"  epoch {epoch}: {later[-1]['mib_s']:,.1f} MiB/s, {later[-1]['gets']} GETs, "
                          f"payload {later[-1]['payload_amplification']:.3f}", file=sys.stderr, flush=True)
                    before = now
                rows = timeline.stop()
            served = None if after is None or served is None else after - served
            stored = int(store.stored_bytes)
        finally:
            store.close()
    blocks = -(-n // per_block)
    floor = -(-stored // REQUEST_BYTES) + blocks
    return {"first_batch_s": first, "records_s": (steps - 1) * args.batch / el,
            "records_s_whole": steps * args.batch / (first + el),
            "mib_s": (delivered - delivered // steps) / el / 2**20, "records": steps * args.batch,
            "block_records": per_block, "blocks": blocks, "gets": stats["requests"],
            "server_requests": served, "gets_floor": floor, "gets_over_floor": stats["requests"] / floor,
            "payload_amplification": stats["bytes"] / max(1, delivered), "bytes_down": px.bytes_down,
            "peak_cache_bytes": peak, "read_amplification": px.bytes_down / max(1, delivered_all),
            **({"timeline": rows} if args.timeline else {}), **({"later_epochs": later} if later else {})}


def blocks_budget(args: argparse.Namespace) -> int:
    """The cache budget of the BLOCKS rows: ``--blocks-budget-windows`` windows of blocks (by
    default two: the window being read and the next, read ahead)."""
    return int(args.blocks_budget_windows * args.window_blocks * args.block_bytes)


def local_run(path: str, kind: str, n: int, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    cls = Dense if kind == "dense" else Ragged
    order = np.random.default_rng(seed).permutation(n).astype(np.uint64)
    with cls.open(path) as store:
        store[order]  # the page cache warm: the upper bound
        records, delivered, el = timed_batches(store, order, 0, args)
    return {"records_s": records / el, "mib_s": delivered / el / 2**20}


def timed_batches(store: Any, order: np.ndarray, k: int, args: argparse.Namespace,
                  depth: int = 0) -> tuple[int, int, float]:
    """Batches of `order` from position `k` on, for --seconds or to its end: (records, bytes
    delivered, seconds). With `depth`, the next `depth` batches are always prefetched (their
    GETs under way while the current one is gathered)."""
    delivered, records = 0, 0
    start = time.monotonic()
    for d in range(depth):
        store.prefetch(order[k + d * args.batch:k + (d + 1) * args.batch])
    while time.monotonic() - start < args.seconds and k < order.shape[0]:
        if depth:
            store.prefetch(order[k + depth * args.batch:k + (depth + 1) * args.batch])
        got = store[order[k:k + args.batch]]
        delivered += _nbytes(got)
        records += len(got)
        k += args.batch
    return records, delivered, time.monotonic() - start


def peer_stores(args: argparse.Namespace, server: Server, name: str, dataset_bytes: int) -> dict[str, dict[str, Any]]:
    """Each peer's copy of workload `name`, written locally and uploaded to the server. Shards
    are a quarter of the cache budget: MDS refuses a cache smaller than four shards, and on the
    terabyte datasets these tools serve, their default 64 MiB shards are as small beside it."""
    out = {}
    shard = max(64 << 10, int(args.cache_share * dataset_bytes / 4))
    for peer in args.peer_names:
        local = Path(args.root) / f"{peer}-{name}"
        info = json.loads(_peer(args, "write", "--peer", peer, "--data", args.data, "--workload", name,
                                "--out", str(local), "--shard-bytes", str(shard)))
        info["shard_bytes"] = shard
        _peer(args, "upload", "--src", str(local), "--bucket", "bench", "--prefix", f"{peer}/{name}",
              "--endpoint", server.endpoint)
        out[peer] = info
    return out


def peer_run(args: argparse.Namespace, server: Server, peer: str, name: str, n: int, dataset_bytes: int,
             seed: int) -> dict[str, Any]:
    """One peer reading `name` in a random order through its own cache (--cache-share of the
    dataset), through a fresh link proxy."""
    cache = Path(args.root) / f"cache-{peer}-{name}-{seed}"
    with Proxy(server, args.link) as px:
        got = json.loads(_peer(args, "read", "--peer", peer, "--url", f"s3://bench/{peer}/{name}",
                               "--endpoint", f"http://127.0.0.1:{px.port}", "--cache", str(cache),
                               "--cache-bytes", str(max(1, int(args.cache_share * dataset_bytes))),
                               "--records", str(n), "--batch", str(args.batch),
                               "--seconds", str(args.seconds), "--seed", str(seed)))
    shutil.rmtree(cache, ignore_errors=True)
    got["read_amplification"] = px.bytes_down / max(1, got["delivered_bytes"])
    return got


def peer_epoch_stores(args: argparse.Namespace, server: Server, name: str) -> dict[str, dict[str, Any]]:
    """Each peer's copy of workload `name` for the epochs in their own shuffles: shards of one
    block (``--block-bytes``), written locally and uploaded under ``PEER-blocks/NAME``."""
    out = {}
    for peer in args.peer_names:
        local = Path(args.root) / f"{peer}-blocks-{name}"
        info = json.loads(_peer(args, "write", "--peer", peer, "--data", args.data, "--workload", name,
                                "--out", str(local), "--shard-bytes", str(args.block_bytes)))
        _peer(args, "upload", "--src", str(local), "--bucket", "bench", "--prefix", f"{peer}-blocks/{name}",
              "--endpoint", server.endpoint)
        out[peer] = info
    return out


def peer_epoch_run(args: argparse.Namespace, server: Server, peer: str, name: str, info: dict[str, Any],
                   seed: int) -> dict[str, Any]:
    """One epoch of a peer in its default shuffle (MDS py1e with a shuffle block of a BLOCKS
    window's records; LitData its default) through its cache bounded to the BLOCKS rows'
    budget, through a fresh link proxy: its GETs, bytes and time."""
    cache = Path(args.root) / f"cache-epoch-{peer}-{name}-{seed}"
    per_block = max(1, args.block_bytes * info["records"] // max(1, info["bytes"]))
    with Proxy(server, args.link) as px:
        got = json.loads(_peer(args, "epoch", "--peer", peer, "--url", f"s3://bench/{peer}-blocks/{name}",
                               "--endpoint", f"http://127.0.0.1:{px.port}", "--cache", str(cache),
                               "--cache-bytes", str(blocks_budget(args)), "--batch", str(args.batch),
                               "--window-records", str(args.window_blocks * per_block), "--seed", str(seed)))
    shutil.rmtree(cache, ignore_errors=True)
    got["bytes_down"] = px.bytes_down
    got["read_amplification"] = px.bytes_down / max(1, got["delivered_bytes"])
    return got


def _peer(args: argparse.Namespace, *argv: str) -> str:
    out = subprocess.run([args.peers, str(HERE / "remote_peers.py"), *argv], capture_output=True,
                         text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"remote_peers.py {argv[0]} failed: {out.stderr.strip()[-2000:]}")
    return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "{}"


def _nbytes(batch: Any) -> int:
    return int(batch.nbytes) if isinstance(batch, np.ndarray) else sum(int(r.nbytes) for r in batch)


def med(rows: list[dict[str, Any]]) -> dict[str, Any]:
    keys = [k for k, v in rows[0].items() if isinstance(v, (int, float))]
    return {k: statistics.median(r[k] for r in rows) for k in keys} | {"rounds": rows}


def budget_table(results: dict[str, Any]) -> str:
    if not all("loader_defaults" in w for w in results["workloads"].values()):
        return ""
    lines = [f"### The mirror's budget at its peak, DataLoader defaults (prefetch=4, readahead=2), "
             f"cache {100 * results['cache_share']:.0f}% of the dataset, over {results['link']}",
             "", "| workload | budget MiB | peak MiB (sampled every 2 ms) | peak MiB (after each batch) | "
             "payload amp. | wire amp. | records/s | first batch s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, w in results["workloads"].items():
        d = w["loader_defaults"]
        lines.append(f"| {name} | {d['cache_budget_bytes'] / 2**20:,.1f} | "
                     f"{d['sampled_peak_cache_bytes'] / 2**20:,.1f} | {d['peak_cache_bytes'] / 2**20:,.1f} | "
                     f"{d['payload_amplification']:.3f} | {d['read_amplification']:.3f} | "
                     f"{d['records_s']:,.0f} | {d['first_batch_s']:.2f} |")
    return "\n".join(lines)


def blocks_table(results: dict[str, Any]) -> str:
    """The BLOCKS rows against the link's ceiling of the same run ("" without them)."""
    rows = [(name, w) for name, w in results["workloads"].items() if "blocks" in w]
    if not rows:
        return ""
    lines = [f"### The locality-aware order (BLOCKS: blocks of {results['block_bytes'] >> 20} MiB, windows of "
             f"{results['window_blocks']}), the DataLoader's defaults, one epoch, over {results['link']} "
             f"({results['server']} server)", "",
             "| workload | blocks (records each) | link MiB/s | MiB/s | % of link | records/s | GETs (server) | "
             "floor: bytes/8 MiB + blocks | GETs / floor | payload amp. | wire amp. | first batch s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, w in rows:
        b, c = w["blocks"], w.get("ceiling")
        link = f"{c['bandwidth_mib_s']:,.0f}" if c else ""
        share = f"{100 * b['mib_s'] / c['bandwidth_mib_s']:.0f}%" if c else ""
        served = "" if b.get("server_requests") is None else f" ({b['server_requests']:,.0f})"
        lines.append(f"| {name} | {b['blocks']:,.0f} ({b['block_records']:,.0f}) | {link} | {b['mib_s']:,.1f} | "
                     f"{share} | {b['records_s']:,.0f} | {b['gets']:,.0f}{served} | {b['gets_floor']:,.0f} | "
                     f"{b['gets_over_floor']:.2f} | {b['payload_amplification']:.3f} | "
                     f"{b['read_amplification']:.3f} | {b['first_batch_s']:.2f} |")
    epochs = [(name, peer, e) for name, w in rows for peer, e in w.get("peer_epochs", {}).items()]
    if epochs:
        lines += ["", f"One epoch at the same cache budget ({results['blocks_budget_bytes'] >> 20} MiB): loaderx BLOCKS "
                  "against the peers in their default shuffles (MDS py1e, shuffle block = one window; LitData's "
                  "default), shards of one block:", "",
                  "| workload | reader | GETs | MiB through the link | per MiB delivered | records/s after "
                  "the first | records/s, open included | first record s | peak cache MiB |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        for name, w in rows:
            b = w["blocks"]
            lines.append(f"| {name} | loaderx BLOCKS | {b['gets']:,.0f} | {b['bytes_down'] / 2**20:,.1f} | "
                         f"{b['read_amplification']:.3f} | {b['records_s']:,.0f} | "
                         f"{b.get('records_s_whole', 0):,.0f} | {b['first_batch_s']:.2f} | "
                         f"{b['peak_cache_bytes'] / 2**20:,.1f} |")
            for peer, e in w.get("peer_epochs", {}).items():
                lines.append(f"| {name} | {peer} | {e['gets']:,.0f} | {e['bytes_down'] / 2**20:,.1f} | "
                             f"{e['read_amplification']:.3f} | {e['records_s']:,.0f} | "
                             f"{e.get('records_s_whole', 0):,.0f} | {e['first_record_s']:.2f} | "
                             f"{e['peak_cache_bytes'] / 2**20:,.1f} |")
    return "\n".join(lines)




def deep_table(results: dict[str, Any]) -> str:
    """Uniform random gathers with and without prefetching the next batches, against the
    server-and-proxy's request rate measured in the same run."""
    rows = [(name, w) for name, w in results["workloads"].items() if "remote_deep" in w and "ceiling" in w]
    if not rows:
        return ""
    lines = [f"### Uniform random gathers, the next {results['prefetch_batches']} batches prefetched, over "
             f"{results['link']} ({results['server']} server), {results['in_flight']} requests in flight",
             "", "| workload | link GETs/s | GETs/s, no prefetch (% of link) | GETs/s, prefetched (% of link) | "
             "MiB/s, prefetched | first batch s |", "|---|---:|---:|---:|---:|---:|"]
    for name, w in rows:
        c, d = w["ceiling"], w["remote_deep"]
        plain = (f"{w['remote']['requests_s']:,.0f} ({100 * w['remote']['requests_s'] / c['request_rate']:.0f}%)"
                 if "remote" in w else "")
        lines.append(f"| {name} | {c['request_rate']:,.0f} | {plain} | {d['requests_s']:,.0f} "
                     f"({100 * d['requests_s'] / c['request_rate']:.0f}%) | {d['mib_s']:,.1f} | "
                     f"{d['first_batch_s']:.2f} |")
    return "\n".join(lines)


def table(results: dict[str, Any]) -> str:
    """The main table, of the parts measured (a part not run leaves its cells blank); empty
    when none of them ran."""
    parts = ("ceiling", "remote", "loader", "loader_no_readahead", "local")
    if not any(part in w for w in results["workloads"].values() for part in parts):
        return ""
    lines = [f"### Remote reads over {results['link']} ({results['server']} server), batch "
             f"{results['batch']}, {results['in_flight']} requests in flight",
             "", "| workload | record | link MiB/s (1 conn.) | link small req/s | zrecord records/s | "
             "MiB/s | % of link | req/s (% of link rate) | req/record | payload amp. | wire amp. | "
             "first batch s | DataLoader records/s (no read-ahead) | local records/s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, w in results["workloads"].items():
        c, r, dl, dl0, lo = (w.get(part) for part in parts)
        cells = [name, f"{w['record_bytes']:,.0f} B"]
        cells += ([f"{c['bandwidth_mib_s']:,.0f} ({c['one_connection_mib_s']:,.0f})",
                   f"{c['request_rate']:,.0f}"] if c else ["", ""])
        if r:
            share = f"{100 * r['mib_s'] / c['bandwidth_mib_s']:.0f}%" if c else ""
            rate = f" ({100 * r['requests_s'] / c['request_rate']:.0f}%)" if c else ""
            cells += [f"{r['records_s']:,.0f}", f"{r['mib_s']:,.1f}", share,
                      f"{r['requests_s']:,.0f}{rate}", f"{r['requests_per_record']:.2f}",
                      f"{r['payload_amplification']:.2f}", f"{r['read_amplification']:.2f}",
                      f"{r['first_batch_s']:.2f}"]
        else:
            cells += [""] * 8
        cells.append((f"{dl['records_s']:,.0f}" if dl else "")
                     + (f" ({dl0['records_s']:,.0f})" if dl0 else ""))
        cells.append(f"{lo['records_s']:,.0f}" if lo else "")
        lines.append("| " + " | ".join(cells) + " |")
    peers = [(name, peer, p) for name, w in results["workloads"].items() for peer, p in w.get("peers", {}).items()]
    if peers:
        lines += ["", f"Peers, each through its own cache bounded to {100 * results['cache_share']:.0f}% "
                  "of the dataset, reading the same records in the same random order by index:", "",
                  "| workload | reader | first batch s | records/s | payload amp. | wire amp. | peak cache MiB |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        for name, w in results["workloads"].items():
            r, dl = w.get("remote"), w.get("loader")
            if r is None or dl is None:
                continue
            lines.append(f"| {name} | zrecord (gathers) | {r['first_batch_s']:.2f} | {r['records_s']:,.0f} | "
                         f"{r['payload_amplification']:.2f} | {r['read_amplification']:.2f} | "
                         "(mirror: what was read) |")
            lines.append(f"| {name} | zrecord (DataLoader) | {dl['first_batch_s']:.2f} | {dl['records_s']:,.0f} | "
                         f"{dl['payload_amplification']:.2f} | {dl['read_amplification']:.2f} | "
                         f"{dl['peak_cache_bytes'] / 2**20:,.1f} (budget {dl['cache_budget_bytes'] / 2**20:,.1f}) |")
            for peer, p in w.get("peers", {}).items():
                lines.append(f"| {name} | {peer} | {p['first_batch_s']:.2f} | {p['records_s']:,.0f} | "
                             f"| {p['read_amplification']:.2f} | {p['peak_cache_bytes'] / 2**20:,.1f} |")
    return "\n".join(lines)


def measure(server: Server, name: str, w: Workload, base: str, args: argparse.Namespace) -> dict[str, Any]:
    """Every part asked for (``--parts``, the peers with ``--peers``) of workload `name`,
    whose store `base` the server serves, over ``--rounds`` rounds: the medians, and each
    round's figures."""
    record = w.nbytes / w.n
    print(f"{name}: {w.n:,} records of {record:,.0f} B ...", file=sys.stderr, flush=True)
    parts = ["loader_defaults"] if args.budget_only else args.parts
    peers = peer_stores(args, server, name, w.nbytes) if args.peers and "peers" in parts else {}
    epoch_peers = peer_epoch_stores(args, server, name) if args.peers and "peer_epochs" in parts else {}
    runs = {
        "loader_defaults": lambda k: loader_run(server, base, w.kind, w.n, args, k, w.nbytes, defaults=True),
        "ceiling": lambda k: ceiling(server, base, max(1, round(record)), args),
        "remote": lambda k: remote_run(server, base, w.kind, w.n, args, k),
        "remote_deep": lambda k: remote_run(server, base, w.kind, w.n, args, k, args.prefetch_batches),
        "loader": lambda k: loader_run(server, base, w.kind, w.n, args, k, w.nbytes),
        "loader_no_readahead": lambda k: loader_run(server, base, w.kind, w.n, args, k, w.nbytes, readahead=0),
        "blocks": lambda k: blocks_run(server, base, w.kind, w.n, args, k),
        "local": lambda k: local_run(os.path.join(args.root, base), w.kind, w.n, args, k),
    }
    rounds: dict[str, list[dict[str, Any]]] = {part: [] for part in parts if part in runs}
    peer_rounds: dict[str, list[dict[str, Any]]] = {p: [] for p in peers}
    epoch_rounds: dict[str, list[dict[str, Any]]] = {p: [] for p in epoch_peers}
    for k in range(args.rounds):
        for part in rounds:
            rounds[part].append(runs[part](k))
        for peer in peers:
            peer_rounds[peer].append(peer_run(args, server, peer, name, w.n, w.nbytes, k))
        for peer, info in epoch_peers.items():
            epoch_rounds[peer].append(peer_epoch_run(args, server, peer, name, info, k))
    return {"records": w.n, "record_bytes": record, **{part: med(rows) for part, rows in rounds.items()},
            "peers": {p: med(rows) for p, rows in peer_rounds.items()}, "peer_stores": peers,
            "peer_epochs": {p: med(rows) for p, rows in epoch_rounds.items()}, "peer_epoch_stores": epoch_peers}


PARTS = ("loader_defaults", "ceiling", "remote", "remote_deep", "loader", "loader_no_readahead", "blocks", "local", "peers",
         "peer_epochs")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=default_data())
    ap.add_argument("--workloads", default="vision_dense,tokens")
    ap.add_argument("--link", default="same-region-s3", choices=("same-region-s3", "fast-lan", "loopback"))
    ap.add_argument("--server", default="http", choices=("http", "nginx", "s3rver", "moto"))
    ap.add_argument("--nginx", default=None, help="the nginx executable (apt-get install nginx-light)")
    ap.add_argument("--s3rver", default=None, help="the s3rver executable (npm install s3rver@3.7.1)")
    ap.add_argument("--peers", default=None, help="a python with mosaicml-streaming, litdata, boto3 (needs --server s3rver)")
    ap.add_argument("--peer-names", default="mds,litdata", type=lambda s: s.split(","))
    ap.add_argument("--cache-share", type=float, default=0.10, help="the peers' cache budget, a share of the dataset")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--in-flight", type=int, default=64)
    ap.add_argument("--loader-workers", type=int, default=4)
    ap.add_argument("--loader-records", type=int, default=8192,
                    help="the DataLoader reads one whole pass over this many records")
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--budget-only", action="store_true", help="only the DataLoader with its defaults")
    ap.add_argument("--parts", default=",".join(PARTS), type=lambda s: s.split(","),
                    help=f"what to measure, of {','.join(PARTS)}")
    ap.add_argument("--data-shards", type=int, default=None,
                    help="data files of the stores read (default: the writer's, 4); 1 lays every "
                         "block of BLOCKS back to back in one file (see the object storage guide)")
    ap.add_argument("--block-bytes", type=int, default=8 << 20, help="BLOCKS: stored bytes of a block")
    ap.add_argument("--window-blocks", type=int, default=8, help="BLOCKS: blocks of a window")
    ap.add_argument("--prefetch-batches", type=int, default=2,
                    help="remote_deep: batches prefetched ahead of the one gathered")
    ap.add_argument("--blocks-epochs", type=int, default=1,
                    help="blocks: epochs read by one loader; the later ones are reported apart (JSON: later_epochs)")
    ap.add_argument("--timeline", action="store_true",
                    help="blocks: the reader's GETs under way, bytes fetched and mirror size every 10 ms, into the JSON")
    ap.add_argument("--blocks-budget-windows", type=float, default=2.0,
                    help="BLOCKS: the cache budget (ours and the peers'), in windows")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.peers and args.server not in ("s3rver", "moto"):
        ap.error("--peers needs --server s3rver or moto (the peers read s3:// URLs)")
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": platform.platform(),
                               "cpus": os.cpu_count(), "zrecord": zrecord.__version__, "link": args.link,
                               "server": args.server, "batch": args.batch, "in_flight": args.in_flight,
                               "rounds": args.rounds, "seconds": args.seconds,
                               "cache_share": args.cache_share, "block_bytes": args.block_bytes,
                               "data_shards": args.data_shards,
                               "window_blocks": args.window_blocks, "prefetch_batches": args.prefetch_batches,
                               "blocks_budget_bytes": blocks_budget(args),
                               "workloads": {}}
    if args.tmp:
        os.makedirs(args.tmp, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.tmp, prefix="bench-remote-") as root:
        args.root = root
        stores = {}
        for name in args.workloads.split(","):
            w = Workload(name, args.data, None)
            path = ensure_store(w, "raw", root, args.batch, args.data_shards)
            stores[name] = (w, os.path.basename(path))
        server = Server(args.server, Path(root), args.s3rver, args.nginx)
        try:
            for name, (w, base) in stores.items():
                server.publish(os.path.join(root, base), base)
                results["workloads"][name] = measure(server, name, w, base, args)
        finally:
            server.close()
    text = "\n\n".join(t for t in (table(results), deep_table(results), blocks_table(results), budget_table(results)) if t)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
