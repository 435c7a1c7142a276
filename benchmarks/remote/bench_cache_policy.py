"""The second epoch of a cyclic run from a bucket with a cache of half the dataset: bytes fetched
by the mirror's eviction when the DataLoader tells it the sampler's future (Belady's rule,
"next use"), by LRU (the same store read through a stream that cannot be told the future), and
by the optimal offline policy computed from the same sequence of reads ([O3] point 4).

Set-up, all on loopback: zrecord_testkit's RangeHTTPServer serves the stores (written raw:
stored bytes = delivered bytes; no link proxy: what is counted is bytes, not time). For each
workload (the data of benchmarks/prepare_data.py, capped by ``--records``) and each round (a
seed), a fresh mirror with ``cache_bytes`` = ``--cache-share`` of the records' stored bytes,
a loaderx DataLoader (2 threads) over a CYCLIC Sampler (a fresh permutation each epoch) reads
two epochs; the figure is what the mirror fetched during the second (``remote_stats()["bytes"]``,
GET payloads). Two loader settings: the defaults (``prefetch=4, readahead=2``: up to 5 steps
fetched ahead, and those records occupy the cache before they are read) and ``prefetch=1,
readahead=0`` (nothing fetched ahead: the setting of the offline model).

The offline figures, from the sampler's own sequence of reads (zrecord_testkit.caching), at the
record level with each record's stored size: Belady's rule (the optimum for records of one
size; the usual yardstick otherwise) and LRU, with the same capacity; and Belady with the
capacity less the loader's read-ahead window (what a cache that also holds 5 steps fetched
ahead can hold for later: the optimum for the default loader, approximately). The mirror evicts
chunks (4 KiB in stores up to 16 GiB), not records: with records much smaller than a chunk
(tokens) a chunk holds records of many steps, which the record-level optimum does not pay for.
So the same reads are also mapped to the chunks (``chunk_bytes_for`` the shards' bytes) that
each record's stored bytes span in its shard file, and Belady's rule and LRU run over whole
chunks with the same capacity ("over chunks": each chunk fetched costs its bytes, the last of a
shard clipped to the file's end): the optimum of a cache that fetches and evicts whole chunks.
The mirror fetches records' bytes (and the gaps its GETs join through), not whole chunks: where
the records of a chunk are read together (photographs, the BLOCKS order) the figures compare;
where they are read apart (tokens in a cyclic order) a whole chunk fetched for each record costs
many times what the mirror fetches, and the figure over chunks is no yardstick.

Target ([O3]): bytes fetched in the second epoch within 5% of the optimal policy's, with LRU's
beside it.

Usage: python benchmarks/remote/bench_cache_policy.py [--data DIR] [--workloads vision_dense,tokens]
       [--records N] [--cache-share 0.5] [--batch 0] [--rounds 3] [--tmp DIR] [--json OUT]
(needs the development test kit: `pip install -e packages/zrecord-testkit`.)
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import zrecord
from zrecord import Dense, Ragged
from zrecord._remote import shard_name

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, which holds `common`
from common.data import Workload, default_data  # noqa: E402
from common.reports import emit  # noqa: E402
from common.store import ensure_store, open_store  # noqa: E402

from loaderx import DataLoader, Sampler  # noqa: E402
from zrecord_testkit.caching import (  # noqa: E402
    belady_chunks_fetched,
    belady_fetched,
    chunk_spans,
    lru_chunks_fetched,
    lru_fetched,
)
from zrecord_testkit.servers import RangeHTTPServer  # noqa: E402

SETTINGS = {"defaults": {"prefetch": 4, "readahead": 2}, "no read-ahead": {"prefetch": 1, "readahead": 0}}


class Unforeseeing:
    """A store seen through a stream without ``foresee`` (its mirror evicts by LRU), with the
    same read-ahead hints as the store itself."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def __len__(self) -> int:
        return len(self._store)

    def __getitem__(self, indices: Any) -> Any:
        return self._store[indices]

    def prefetch(self, indices: Any) -> None:
        self._store.prefetch(indices)


def sampler_for(mode: str, n: int, batch: int, seed: int, block: int) -> Sampler:
    if mode == "blocks":
        return Sampler(n, batch, "blocks", seed=seed, block_records=block)
    return Sampler(n, batch, "cyclic", seed=seed)


def two_epochs(url: str, kind: str, sampler: Sampler, cache: int, policy: str,
               setting: dict[str, int], folder: str) -> dict[str, float]:
    cls = Dense if kind == "dense" else Ragged
    opts = {"cache_dir": folder, "cache_bytes": cache}
    with cls.open(url, storage_options=opts) as store:
        stream = store if policy == "next-use" else Unforeseeing(store)
        steps = sampler.steps_per_cycle
        with DataLoader({"x": stream}, sampler, workers=2, **setting) as loader:
            t = time.perf_counter()
            for _ in range(steps):
                next(loader)
            first = store.remote_stats()
            for _ in range(steps):
                next(loader)
            second = store.remote_stats()
            seconds = time.perf_counter() - t
    return {"epoch1_bytes": first["bytes"], "epoch2_bytes": second["bytes"] - first["bytes"],
            "epoch2_requests": second["requests"] - first["requests"], "seconds": seconds,
            "cache_bytes_end": second["cache_bytes"]}


def offline(sampler: Sampler, sizes: list[int], chunks: tuple[list[range], list[int]], cache: int,
            window: int) -> dict[str, int]:
    """The second epoch's bytes by the offline policies: over records of `sizes`, and over the
    chunks they span (`chunks`: ``chunk_spans``)."""
    steps = sampler.steps_per_cycle
    reads = [int(r) for step in range(2 * steps) for r in sampler.batch(step)]
    half = steps * sampler.batch_size
    return {"belady": sum(belady_fetched(reads, sizes, cache)[half:]),
            "belady_less_window": sum(belady_fetched(reads, sizes, max(0, cache - window))[half:]),
            "lru": sum(lru_fetched(reads, sizes, cache)[half:]),
            "belady_chunks": sum(belady_chunks_fetched(reads, *chunks, cache)[half:]),
            "lru_chunks": sum(lru_chunks_fetched(reads, *chunks, cache)[half:])}


def chunks_of(store_path: str, shards: np.ndarray, offsets: np.ndarray,
              sizes: np.ndarray) -> tuple[tuple[list[range], list[int]], int]:
    """The chunks the records lie in, as the mirror's budget numbers them (``chunk_spans``),
    from their shards, offsets and stored sizes and the shard files' sizes; with the chunk's
    bytes."""
    count = int(shards.max()) + 1 if shards.shape[0] else 0
    files = [os.path.join(store_path, shard_name(k)) for k in range(count)]
    shard_bytes = [os.path.getsize(f) if os.path.exists(f) else 0 for f in files]
    chunk = zrecord._mirror_cache.chunk_bytes_for(sum(shard_bytes))
    return chunk_spans(shards.tolist(), offsets.tolist(), sizes.tolist(), shard_bytes, chunk), chunk


def med(rows: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in rows))


def table(results: dict[str, Any]) -> str:
    """Ratios are to the record-level optimum, the last column's to the optimum over chunks
    (absent from runs made before it was computed)."""
    out = ["| workload | order | loader | mirror, next use (Belady) | mirror, LRU | optimal offline "
           "(Belady) | optimal, less the read-ahead window | LRU offline | optimal over chunks | "
           "LRU over chunks | next use / optimal over chunks |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for w in results["workloads"].values():
        off = w["offline"]
        best = med(off, "belady")
        chunked = "belady_chunks" in off[0]
        for setting, runs in w["runs"].items():
            window = med(off, "belady_less_window") if setting == "defaults" else best
            mirror = med(runs["next-use"], "epoch2_bytes")
            cells = [mirror, med(runs["lru"], "epoch2_bytes"), best, window, med(off, "lru")]
            if chunked:
                cells += [med(off, "belady_chunks"), med(off, "lru_chunks")]
            row = [f"{v / 2**20:,.1f} MiB ({v / best:.2f}x)" for v in cells]
            row += [f"{mirror / med(off, 'belady_chunks'):.2f}x"] if chunked else ["-"] * 3
            out.append(f"| {w['workload']} | {w['mode']} | {setting} | " + " | ".join(row) + " |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=default_data())
    ap.add_argument("--workloads", default="vision_dense,tokens")
    ap.add_argument("--records", type=int, default=0, help="at most this many records (0: all)")
    ap.add_argument("--cache-share", type=float, default=0.5)
    ap.add_argument("--batch", type=int, default=0,
                    help="records per step (0: 32 photographs, 256 token records)")
    ap.add_argument("--modes", default="cyclic,blocks",
                    help="sampler orders: cyclic (a fresh permutation each epoch) and blocks")
    ap.add_argument("--block-bytes", type=int, default=1 << 20, help="BLOCKS: stored bytes per block")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": platform.platform(),
                               "cpus": os.cpu_count(), "zrecord": zrecord.__version__,
                               "cache_share": args.cache_share, "rounds": args.rounds, "workloads": {}}
    with tempfile.TemporaryDirectory(dir=args.tmp, prefix="bench-cache-policy-") as root:
        with RangeHTTPServer(root) as server:
            for name in args.workloads.split(","):
                w = Workload(name, args.data, args.records or None)
                base = os.path.basename(ensure_store(w, "raw", root, 64))
                with open_store(w, os.path.join(root, base)) as local:
                    shards, offsets, sizes = local._locations(np.arange(w.n, dtype=np.uint64))
                sizes = sizes.astype(np.int64)
                chunks, chunk_bytes = chunks_of(os.path.join(root, base), shards, offsets, sizes)
                stored = int(sizes.sum())
                batch = args.batch or (32 if w.kind == "dense" else 256)
                cache = max(zrecord._mirror_cache.BUDGET_MIN_BYTES, int(stored * args.cache_share))
                window = 5 * batch * stored // w.n  # steps fetched ahead by the defaults: 3 + 2
                print(f"{name}: {w.n:,} records, {stored / 2**20:,.1f} MiB, batch {batch}, "
                      f"cache {cache / 2**20:,.1f} MiB", file=sys.stderr, flush=True)
                block = zrecord.block_records_for(w.n, stored, args.block_bytes)
                for mode in args.modes.split(","):
                    runs: dict[str, dict[str, list[dict[str, float]]]] = {
                        s: {"next-use": [], "lru": []} for s in SETTINGS}
                    off = []
                    for k in range(args.rounds):
                        for setting, kw in SETTINGS.items():
                            for policy in ("next-use", "lru"):
                                folder = os.path.join(root, f"mirror-{name}-{mode}-{k}-{policy}-{kw['prefetch']}")
                                r = two_epochs(server.url_for(base), w.kind,
                                               sampler_for(mode, w.n, batch, k, block), cache, policy,
                                               kw, folder)
                                runs[setting][policy].append(r)
                                print(f"  {mode} round {k} {setting} {policy}: epoch 2 fetched "
                                      f"{r['epoch2_bytes'] / 2**20:,.1f} MiB", file=sys.stderr, flush=True)
                        off.append(offline(sampler_for(mode, w.n, batch, k, block), sizes.tolist(),
                                           chunks, cache, window))
                        print(f"  {mode} round {k} offline: {off[-1]}", file=sys.stderr, flush=True)
                    results["workloads"][f"{name}/{mode}"] = {
                        "workload": name, "mode": mode, "records": w.n, "stored_bytes": stored,
                        "batch": batch, "block_records": block if mode == "blocks" else None,
                        "cache_bytes": cache, "window_bytes": window, "chunk_bytes": chunk_bytes,
                        "runs": runs, "offline": off}
    emit(args, results, table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
