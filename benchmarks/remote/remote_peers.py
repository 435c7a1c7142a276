"""bench_remote.py's peers: MosaicML Streaming (MDS) and LitData, each writing the same records in
its own format, uploading them to the benchmark's S3 server, and reading them back in a random
order through its own cache, bounded to a byte budget.

Run by bench_remote.py with the peers' own Python (``--peers PYTHON``: a virtualenv with
``mosaicml-streaming``, ``litdata``, ``boto3`` and ``numpy``; zrecord is not needed there):

    python remote_peers.py write --peer mds --data DIR --workload tokens --out LOCAL --shard-bytes N
    python remote_peers.py upload --src LOCAL --bucket B --prefix P --endpoint URL
    python remote_peers.py read --peer mds --url s3://B/P --endpoint URL --cache DIR
           --cache-bytes N --records N --batch 256 --seconds 5 --seed 0

`read` prints one JSON line: time to the first batch (the dataset made and its first batch
returned), records/s over the batches that follow (each a slice of one random permutation of
every record, records read one by one by index, as a map-style dataset is), and the peak size
of its cache folder. The records are the workload's own (benchmarks/prepare_data.py's files),
as raw bytes; each read is checked against its length.

    python remote_peers.py epoch --peer mds --url s3://B/P --endpoint URL --cache DIR
           --cache-bytes N --window-records N --batch 256 --seed 0

`epoch` iterates one whole epoch in the peer's default shuffle (MDS: ``py1e`` with a shuffle
block of ``--window-records``; LitData: its default), as their users read, and prints the GETs
its boto3 clients made (every GetObject, ranged or whole), the bytes delivered, the time to
the first record, records/s and the cache folder's peak.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np


def _torchvision_stand_in() -> None:
    """mosaicml-streaming imports torchvision at import time, for its vision dataset classes
    (CIFAR-10 and friends), which this benchmark does not use. Where no torchvision loads (the
    PyPI wheel needs CUDA torch; this machine has the CPU one), give it empty stand-ins of
    the three names it imports, so that the rest of the package runs unchanged."""
    try:
        import torchvision  # noqa: F401
        return
    except (ImportError, RuntimeError, OSError):
        pass
    import importlib.machinery
    import types

    root, datasets, transforms, functional = (types.ModuleType(n) for n in (
        "torchvision", "torchvision.datasets", "torchvision.transforms",
        "torchvision.transforms.functional"))
    datasets.VisionDataset = type("VisionDataset", (), {})
    datasets.CIFAR10 = type("CIFAR10", (), {})
    functional.to_tensor = lambda *a, **k: None
    root.datasets, root.transforms, transforms.functional = datasets, transforms, functional
    for m in (root, datasets, transforms, functional):
        m.__spec__ = importlib.machinery.ModuleSpec(m.__name__, None)
        sys.modules[m.__name__] = m


def records(data: str, workload: str) -> tuple[list[bytes] | np.ndarray, str]:
    """The workload's records as the peers store them: bytes each (what bench_remote's zrecord
    stores hold too, raw)."""
    if workload == "tokens":
        offsets = np.load(os.path.join(data, "offsets.npy"))
        payload = np.load(os.path.join(data, "tokens.npy"), mmap_mode="r")
        return [payload[offsets[i]:offsets[i + 1]].tobytes() for i in range(len(offsets) - 1)], "ragged"
    arr = np.load(os.path.join(data, f"{workload}.npy"), mmap_mode="r")
    return [arr[i].tobytes() for i in range(len(arr))], "dense"


def write(args: argparse.Namespace) -> None:
    recs, _ = records(args.data, args.workload)
    out = Path(args.out)
    if args.peer == "mds":
        _torchvision_stand_in()
        from streaming import MDSWriter

        with MDSWriter(out=str(out), columns={"x": "bytes"}, compression=None,
                       size_limit=args.shard_bytes) as w:
            for r in recs:
                w.write({"x": r})
    else:
        from litdata.streaming.writer import BinaryWriter

        w = BinaryWriter(str(out), chunk_bytes=args.shard_bytes)
        for i, r in enumerate(recs):
            w.add_item(i, {"x": r})
        w.done()
        w.merge()
    print(json.dumps({"records": len(recs), "bytes": sum(p.stat().st_size for p in out.rglob("*") if p.is_file())}))


def upload(args: argparse.Namespace) -> None:
    import boto3

    s3 = boto3.client("s3", endpoint_url=args.endpoint, aws_access_key_id="S3RVER",
                      aws_secret_access_key="S3RVER", region_name="us-east-1")
    src = Path(args.src)
    for p in sorted(src.rglob("*")):
        if p.is_file():
            s3.upload_file(str(p), args.bucket, f"{args.prefix}/{p.relative_to(src).as_posix()}")


def folder_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


class FolderPeak:
    """The largest size of folder `path` (its files' bytes), sampled every 50 ms by a thread
    of its own from now until `stop()`: `bytes`."""

    def __init__(self, path: str) -> None:
        self.path, self.bytes = path, 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.is_set():
            self.bytes = max(self.bytes, folder_bytes(self.path))
            self._done.wait(0.05)

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def open_dataset(args: argparse.Namespace, shuffle: bool = False):  # noqa: ANN201 - either peer's dataset
    """The peer's dataset of `args.url`; with `shuffle`, in its default shuffle (MDS: py1e,
    its shuffle block `args.window_records`; LitData: its default), seeded by `args.seed`."""
    os.environ.update({"AWS_ACCESS_KEY_ID": "S3RVER", "AWS_SECRET_ACCESS_KEY": "S3RVER",
                       "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
                       "S3_ENDPOINT_URL": args.endpoint, "AWS_ENDPOINT_URL": args.endpoint})
    if args.peer == "mds":
        _torchvision_stand_in()
        # MDS keeps its processes' file locks (`000000_barrier_filelock`, ...) in the temporary
        # folder: the run's own, beside its cache, not /tmp, where they outlived the run.
        tempfile.tempdir = os.path.dirname(os.path.abspath(args.cache))
        from streaming import StreamingDataset

        order = {"shuffle_algo": "py1e", "shuffle_block_size": args.window_records,
                 "shuffle_seed": args.seed} if shuffle else {}
        return StreamingDataset(remote=args.url, local=args.cache, shuffle=shuffle, batch_size=args.batch,
                                cache_limit=args.cache_bytes, **order), lambda rec: rec["x"]
    from litdata import StreamingDataset as LitDataset
    from litdata.streaming import downloader

    # LitData fetches chunks with obstore, whose client refuses the benchmark's http:// endpoint
    # (real buckets are https://) unless told.
    downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = True

    return LitDataset(args.url, cache_dir=args.cache, max_cache_size=args.cache_bytes, shuffle=shuffle,
                      seed=args.seed), lambda rec: rec["x"]


def count_gets() -> list[int]:
    """A counter of the GETs (each billed) that this process makes from now on: every
    GetObject call of a boto3 client (MDS; LitData's index), and every range of obstore's
    `get` and `get_ranges` (LitData's chunks)."""
    import botocore.client
    import obstore

    count = [0]
    lock = threading.Lock()
    make = botocore.client.BaseClient._make_api_call

    def add(k: int) -> None:
        with lock:
            count[0] += k

    def counted(self, operation_name, api_params):  # noqa: ANN001, ANN202 - botocore's own signature
        if operation_name == "GetObject":
            add(1)
        return make(self, operation_name, api_params)

    get, get_ranges = obstore.get, obstore.get_ranges

    def counted_get(*a, **k):  # noqa: ANN002, ANN003, ANN202 - obstore's own signature
        add(1)
        return get(*a, **k)

    def counted_get_ranges(*a, **k):  # noqa: ANN002, ANN003, ANN202 - obstore's own signature
        add(len(k.get("starts", a[2] if len(a) > 2 else ())))
        return get_ranges(*a, **k)

    botocore.client.BaseClient._make_api_call = counted
    obstore.get, obstore.get_ranges = counted_get, counted_get_ranges
    return count


def epoch(args: argparse.Namespace) -> None:
    """One epoch in the peer's default shuffle, iterated as its users do: records, GETs,
    delivered bytes, time to the first record (from before the open), records/s after the
    first record (``records_s``, as bench_remote times its own loader after the first batch)
    and over the whole epoch with the open (``records_s_whole``), the cache folder's peak."""
    peak = FolderPeak(args.cache)
    gets = count_gets()
    t = time.monotonic()
    ds, field = open_dataset(args, shuffle=True)
    n = nbytes = 0
    first = 0.0
    for rec in ds:
        nbytes += len(field(rec))
        n += 1
        if n == 1:
            first = time.monotonic() - t
    el = time.monotonic() - t
    peak.stop()
    after = el - first
    print(json.dumps({"records": n, "gets": gets[0], "delivered_bytes": nbytes, "first_record_s": first,
                      "records_s": (n - 1) / after if after > 0 else 0.0,
                      "records_s_whole": n / el if el else 0.0,
                      "mib_s": nbytes / el / 2**20 if el else 0.0,
                      "peak_cache_bytes": peak.bytes}))


def read(args: argparse.Namespace) -> None:
    peak = FolderPeak(args.cache)
    order = np.random.default_rng(args.seed).permutation(args.records)
    t = time.monotonic()
    ds, field = open_dataset(args)
    got = [field(ds[int(i)]) for i in order[:args.batch]]
    first = time.monotonic() - t
    delivered = sum(len(x) for x in got)
    n, k, nbytes = 0, args.batch, 0
    start = time.monotonic()
    while time.monotonic() - start < args.seconds and k < args.records:
        batch = [field(ds[int(i)]) for i in order[k:k + args.batch]]
        nbytes += sum(len(x) for x in batch)
        n += len(batch)
        k += args.batch
    el = time.monotonic() - start
    peak.stop()
    print(json.dumps({"first_batch_s": first, "records_s": n / el if el else 0.0,
                      "mib_s": nbytes / el / 2**20 if el else 0.0, "records": n,
                      "delivered_bytes": nbytes + delivered, "peak_cache_bytes": peak.bytes}))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("write", "upload", "read", "epoch"))
    ap.add_argument("--peer", choices=("mds", "litdata"))
    ap.add_argument("--data")
    ap.add_argument("--workload")
    ap.add_argument("--out")
    ap.add_argument("--src")
    ap.add_argument("--bucket")
    ap.add_argument("--prefix")
    ap.add_argument("--endpoint")
    ap.add_argument("--url")
    ap.add_argument("--cache")
    ap.add_argument("--cache-bytes", type=int)
    ap.add_argument("--shard-bytes", type=int, default=64 << 20, help="both tools' shard size")
    ap.add_argument("--records", type=int)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--window-records", type=int, default=1 << 18, help="MDS py1e's shuffle block (epoch)")
    args = ap.parse_args()
    {"write": write, "upload": upload, "read": read, "epoch": epoch}[args.what](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
