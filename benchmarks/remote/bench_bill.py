"""The bill of one epoch from a bucket, three ways of reading ([O3] point 5): record by record
(a uniform shuffle: loaderx's CYCLIC and IID), by blocks of consecutive records (loaderx's
BLOCKS, one ranged GET per block), and whole shards as MosaicML Streaming reads them (MDS
writes shards of at most 64 MiB by default, ``size_limit``, and downloads each whole, one GET
per shard, once per epoch when its cache holds them; re-downloads when it does not are not
counted here).

The store figures come from zrecord's own count (``zrecord.epoch_cost``: every record located
in the index, requests joined as the mirror joins them, at most ``request_bytes_max`` = 8 MiB a
request); the whole-shard figures from the same stored bytes cut into 64 MiB shards. Prices
are the list prices of ``zrecord.PRICES`` (dated there). "Per 10^9 records" scales the epoch
linearly to a billion records of the same mean size, which is where the difference is billed.

No network is needed: the stores are written locally (raw, as bench_remote.py writes them).

Usage: python benchmarks/remote/bench_bill.py [--data DIR] [--workloads vision_dense,tokens]
       [--block-bytes 8388608] [--shard-bytes 67108864] [--tmp DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import zrecord

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, which holds `common`
from common.data import Workload, default_data  # noqa: E402
from common.reports import emit  # noqa: E402
from common.store import ensure_store, open_store  # noqa: E402

PRICE_NAMES = ("s3-standard", "s3-express", "gcs-standard")


def bills(store: Any, block_bytes: int, shard_bytes: int) -> list[dict[str, Any]]:
    per_record, blocks = zrecord.epoch_cost(store, block_bytes=block_bytes)
    stored = int(store.stored_bytes)
    ways = [("record by record (CYCLIC, IID)", per_record.requests, per_record.bytes),
            (f"blocks of {block_bytes >> 20} MiB (BLOCKS; {blocks.block_records:,} records)",
             blocks.requests, blocks.bytes),
            (f"whole shards of {shard_bytes >> 20} MiB (MDS)", -(-stored // shard_bytes), stored)]
    rows = []
    for how, requests, nbytes in ways:
        usd = {name: zrecord.PRICES[name].usd(requests, nbytes) for name in PRICE_NAMES}
        scale = 1e9 / len(store)
        rows.append({"how": how, "requests": requests, "bytes": nbytes, "usd": usd,
                     "requests_per_1e9": requests * scale,
                     "usd_per_1e9": {k: v * scale for k, v in usd.items()}})
    return rows


def table(results: dict[str, Any]) -> str:
    out = ["| workload | read | GETs per epoch | bytes per epoch | $ per epoch (S3 Standard / "
           "S3 Express / GCS) | GETs per 10^9 records | $ per 10^9 records (S3 Standard / S3 Express) |",
           "|---|---|---|---|---|---|---|"]
    for name, w in results["workloads"].items():
        for r in w["rows"]:
            usd = " / ".join(f"${r['usd'][k]:.4f}" for k in PRICE_NAMES)
            big = " / ".join(f"${r['usd_per_1e9'][k]:,.2f}" for k in PRICE_NAMES[:2])
            out.append(f"| {name} ({w['records']:,} records, {w['stored_bytes'] / 2**20:,.1f} MiB) | "
                       f"{r['how']} | {r['requests']:,} | {r['bytes'] / 2**20:,.1f} MiB | {usd} | "
                       f"{r['requests_per_1e9']:,.3g} | {big} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=default_data())
    ap.add_argument("--workloads", default="vision_dense,tokens")
    ap.add_argument("--block-bytes", type=int, default=8 << 20)
    ap.add_argument("--shard-bytes", type=int, default=64 << 20)
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M"), "zrecord": zrecord.__version__,
                               "prices": {k: zrecord.PRICES[k].source for k in PRICE_NAMES},
                               "workloads": {}}
    with tempfile.TemporaryDirectory(dir=args.tmp, prefix="bench-bill-") as root:
        for name in args.workloads.split(","):
            w = Workload(name, args.data, None)
            path = ensure_store(w, "raw", root, 64)
            with open_store(w, path) as store:
                results["workloads"][name] = {"records": len(store), "stored_bytes": int(store.stored_bytes),
                                              "rows": bills(store, args.block_bytes, args.shard_bytes)}
    emit(args, results, table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
