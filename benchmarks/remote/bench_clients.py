"""The client library for reads by URL, chosen by measurement: CPU time and wall time per small
ranged GET for obstore (sync, and async with many in flight) and boto3, against one S3 server
on loopback (s3rver, `--s3rver PATH`; else moto_server, started by the development test kit:
`pip install -e 'packages/zrecord-testkit[s3]'`), no link proxy.

What it measures: `--requests` GETs of `--bytes` bytes at random offsets of a 32 MiB object,
(1) one at a time (latency, CPU per request), (2) `--in-flight` at once (throughput; obstore
async on one event loop; boto3 in a thread pool of that size, as boto3 is synchronous). CPU
is this process's (user + system) time: the client's own cost, which on a 2-core machine
competes with everything else the loader does.

Usage: python benchmarks/remote/bench_clients.py [--s3rver PATH] [--requests 2000] [--bytes 256]
       [--in-flight 64] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

KEYS = {"key": "S3RVER", "secret": "S3RVER", "region": "us-east-1"}
OBJECT_BYTES = 32 << 20


def start_server(args: argparse.Namespace, folder: str) -> tuple[Any, str, dict[str, str]]:
    """(handle, endpoint, credentials) of s3rver or moto_server, with bucket "bench" holding
    "obj"."""
    if args.s3rver:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        proc = subprocess.Popen([args.s3rver, "-d", folder, "-a", "127.0.0.1", "-p", str(port), "--silent",
                                 "--allow-mismatched-signatures", "--configure-bucket", "bench"],
                                stdout=subprocess.DEVNULL)
        endpoint = f"http://127.0.0.1:{port}"
        for _ in range(200):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        creds = {"key": "S3RVER", "secret": "S3RVER", "region": "us-east-1"}
        name = "s3rver 3.7.1"
    else:
        from zrecord_testkit.servers import S3Server

        proc = S3Server()
        proc.__enter__()
        proc.create_bucket("bench")
        endpoint = proc.endpoint_url
        c = proc.credentials
        creds = {"key": c.access_key_id, "secret": c.secret_access_key, "region": c.region}
        name = "moto_server"
    import boto3

    b3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=creds["key"],
                      aws_secret_access_key=creds["secret"], region_name=creds["region"])
    b3.put_object(Bucket="bench", Key="obj", Body=os.urandom(OBJECT_BYTES))
    return (proc, name), endpoint, creds


def cpu() -> float:
    t = os.times()
    return t.user + t.system


def measure(fn: Any, n: int) -> dict[str, float]:
    c0, t0 = cpu(), time.perf_counter()
    fn()
    return {"wall_ms_per_request": (time.perf_counter() - t0) / n * 1e3,
            "cpu_ms_per_request": (cpu() - c0) / n * 1e3,
            "requests_per_s": n / (time.perf_counter() - t0)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--s3rver", default=None)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--bytes", type=int, default=256)
    ap.add_argument("--in-flight", type=int, default=64)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    import boto3
    import botocore.config
    import obstore
    from obstore.store import S3Store

    rng = np.random.default_rng(0)
    starts = [int(a) for a in rng.integers(0, OBJECT_BYTES - args.bytes, args.requests)]
    results: dict[str, Any] = {"requests": args.requests, "bytes": args.bytes, "in_flight": args.in_flight,
                               "obstore": obstore.__version__, "boto3": boto3.__version__, "rows": {}}
    with tempfile.TemporaryDirectory() as folder:
        (handle, server), endpoint, creds = start_server(args, folder)
        results["server"] = server
        try:
            store = S3Store("bench", config={"endpoint": endpoint, "access_key_id": creds["key"],
                                             "secret_access_key": creds["secret"], "region": creds["region"],
                                             "virtual_hosted_style_request": False},
                            client_options={"allow_http": True})
            b3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=creds["key"],
                              aws_secret_access_key=creds["secret"], region_name=creds["region"],
                              config=botocore.config.Config(max_pool_connections=args.in_flight))

            def ob_one(a: int) -> int:
                return len(obstore.get_range(store, "obj", start=a, end=a + args.bytes))

            def b3_one(a: int) -> int:
                return len(b3.get_object(Bucket="bench", Key="obj",
                                         Range=f"bytes={a}-{a + args.bytes - 1}")["Body"].read())

            async def ob_async() -> None:
                slots = asyncio.Semaphore(args.in_flight)

                async def one(a: int) -> None:
                    async with slots:
                        await obstore.get_range_async(store, "obj", start=a, end=a + args.bytes)
                await asyncio.gather(*(one(a) for a in starts))

            ob_one(0)
            b3_one(0)
            rows = results["rows"]
            rows["obstore, one at a time"] = measure(lambda: [ob_one(a) for a in starts], args.requests)
            rows["boto3, one at a time"] = measure(lambda: [b3_one(a) for a in starts], args.requests)
            rows[f"obstore async, {args.in_flight} in flight"] = measure(lambda: asyncio.run(ob_async()),
                                                                         args.requests)
            with concurrent.futures.ThreadPoolExecutor(args.in_flight) as pool:
                rows[f"boto3, {args.in_flight} threads"] = measure(lambda: list(pool.map(b3_one, starts)),
                                                                   args.requests)
        finally:
            if server == "moto_server":
                handle.__exit__(None, None, None)
            else:
                handle.terminate()
                handle.wait(10)
    print(f"### Client cost per ranged GET of {args.bytes} B ({args.requests:,} requests, {server}, loopback)\n")
    print("| client | wall ms/request | CPU ms/request | requests/s |\n|---|---:|---:|---:|")
    for name, r in results["rows"].items():
        print(f"| {name} | {r['wall_ms_per_request']:.2f} | {r['cpu_ms_per_request']:.3f} | "
              f"{r['requests_per_s']:,.0f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
