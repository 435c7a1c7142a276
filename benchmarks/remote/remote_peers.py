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
"""

from __future__ import annotations

import argparse
import json
import os
import sys
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


def open_dataset(args: argparse.Namespace):  # noqa: ANN201 - either peer's dataset
    os.environ.update({"AWS_ACCESS_KEY_ID": "S3RVER", "AWS_SECRET_ACCESS_KEY": "S3RVER",
                       "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
                       "S3_ENDPOINT_URL": args.endpoint, "AWS_ENDPOINT_URL": args.endpoint})
    if args.peer == "mds":
        _torchvision_stand_in()
        from streaming import StreamingDataset

        return StreamingDataset(remote=args.url, local=args.cache, shuffle=False, batch_size=args.batch,
                                cache_limit=args.cache_bytes), lambda rec: rec["x"]
    from litdata import StreamingDataset as LitDataset

    return LitDataset(args.url, cache_dir=args.cache, max_cache_size=args.cache_bytes), lambda rec: rec["x"]


def read(args: argparse.Namespace) -> None:
    peak = [0]
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], folder_bytes(args.cache))
            stop.wait(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
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
    stop.set()
    watcher.join()
    print(json.dumps({"first_batch_s": first, "records_s": n / el if el else 0.0,
                      "mib_s": nbytes / el / 2**20 if el else 0.0, "records": n,
                      "delivered_bytes": nbytes + delivered, "peak_cache_bytes": peak[0]}))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("write", "upload", "read"))
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
    args = ap.parse_args()
    {"write": write, "upload": upload, "read": read}[args.what](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
