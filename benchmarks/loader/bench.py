"""End-to-end loader benchmark and sampler micro-benchmark, side by side in one run.

Loaders (each in its own subprocess, so that peak memory is its own), on the real
`vision_dense.npy` (uint8 (3, 224, 224) photographs) from benchmarks/prepare_data.py, batch 256 (36.8 MiB),
an identity collate, `--warmup` batches then `--batches` timed batches:
  loaderx-raw / loaderx-zstd    our DataLoader over zrecord stores (image + label streams)
  loaderx-2.5.9-raw / -zstd     the published loaderx in its own venv (--peer PYTHON)
  torch-fork / torch-spawn      torch.utils.data.DataLoader over a read-only np.load mmap,
                                per-sample Dataset, default collate, same worker count
  torch-workers0                the same in the main process
Reported: batches/s and the peak PSS of the process tree (proportional set size: shared and
copy-on-write pages are split between the processes that map them, so the sum over the tree
counts each physical page once), sampled every 20 ms from /proc/PID/smaps_rollup.

Sampler: ns per next() at batch 64, 256 and 1024 over a 1M index space, IID and CYCLIC, ours
and the peer's, and NumPy's `default_rng().integers` for scale.

Usage: python benchmarks/loader/bench.py [--data DIR] [--workers 2] [--batches 200] [--peer PYTHON]
       [--json OUT] [--only loaderx-raw,torch-fork,...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, which holds `common`
from common.data import MmapDataset, default_data
from common.device import work_folder
from common.probes import PeakPss
from common.timing import timed

# -- the children (each measurement in a process of its own) --------------------------------------


def child_loaderx(args: argparse.Namespace, codec: str) -> dict[str, Any]:
    """Our (or, in the peer's venv, the published) loaderx over zrecord stores."""
    from loaderx.dataloader import DataLoader
    from loaderx.sampler import Sampler
    from loaderx.zrecord import Dense

    src = np.load(os.path.join(args.data, "vision_dense.npy"), mmap_mode="r")
    labels = np.arange(len(src), dtype=np.int64)
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        extra = {"sync": False} if "sync" in Dense.create.__code__.co_varnames else {}
        with Dense.create(os.path.join(tmp, "image"), src.dtype, src.shape[1:], codec=codec,
                          **extra) as w:
            w.append(src)
        with Dense.create(os.path.join(tmp, "label"), np.int64, (), codec="raw", **extra) as w:
            w.append(labels)
        del src
        streams = {"image": Dense.open(os.path.join(tmp, "image")),
                   "label": Dense.open(os.path.join(tmp, "label"))}
        sampler = Sampler(len(labels), args.batch, Sampler.Mode.CYCLIC, seed=42)
        try:   # our keyword names
            loader = DataLoader(streams, sampler, transform=lambda b: b, workers=args.workers,
                                prefetch=4)
        except TypeError:   # loaderx 2.5.9's keyword names
            loader = DataLoader(streams, sampler, transform=lambda b: b,
                                transform_workers=args.workers, prefetch_size=4)
        peak = PeakPss()
        rate = timed(iter(loader), args.warmup, args.batches)
        pss = peak.stop()
        loader.close()
        for s in streams.values():
            s.close()
    return {"batches_per_s": rate, "peak_pss_mib": pss / 2**20}


def child_torch(args: argparse.Namespace, context: str | None) -> dict[str, Any]:
    import torch

    torch.manual_seed(42)
    ds = MmapDataset(os.path.join(args.data, "vision_dense.npy"))
    kwargs: dict[str, Any] = {}
    if context is not None:
        kwargs = {"num_workers": args.workers, "multiprocessing_context": context,
                  "persistent_workers": True, "prefetch_factor": 2}
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch, shuffle=True,
                                         drop_last=True, **kwargs)

    def endless() -> Any:
        while True:
            yield from loader

    peak = PeakPss()
    rate = timed(endless(), args.warmup, args.batches)
    pss = peak.stop()
    return {"batches_per_s": rate, "peak_pss_mib": pss / 2**20}


def child_sampler() -> dict[str, Any]:
    from loaderx.sampler import Sampler

    rows: dict[str, Any] = {}
    for mode in ("IID", "CYCLIC"):
        for batch in (64, 256, 1024):
            s = Sampler(1_000_000, batch, getattr(Sampler.Mode, mode), seed=42)
            n = 200_000 // max(1, batch // 64)
            best = min(timeit.repeat(s.next, number=n, repeat=5)) / n
            rows[f"{mode}-{batch}"] = best * 1e9
    rng = np.random.default_rng(0)
    for batch in (64, 256, 1024):
        n = 100_000 // max(1, batch // 64)
        best = min(timeit.repeat(lambda b=batch: rng.integers(0, 1_000_000, b), number=n,
                                 repeat=5)) / n
        rows[f"numpy-{batch}"] = best * 1e9
    return rows


# -- the driver ------------------------------------------------------------------------------

LOADERS = ["loaderx-raw", "loaderx-zstd", "loaderx-2.5.9-raw", "loaderx-2.5.9-zstd",
           "torch-fork", "torch-spawn", "torch-workers0"]


def run_child(args: argparse.Namespace, python: str, what: str) -> dict[str, Any]:
    cmd = [python, __file__, "--child", what, "--data", args.data, "--workers", str(args.workers),
           "--batches", str(args.batches), "--warmup", str(args.warmup), "--batch",
           str(args.batch)]
    if args.tmp:
        cmd += ["--tmp", args.tmp]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=default_data())
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--peer", default=None, help="python of a venv with the published loaderx")
    ap.add_argument("--only", default=None, help="comma-separated subset of " + ",".join(LOADERS))
    ap.add_argument("--tmp", default=None, type=work_folder,
                    help="folder for the stores, made if missing (default: a temp dir)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(run_as_child(args)))
        return 0
    wanted = args.only.split(",") if args.only else LOADERS
    rows = []
    for name in wanted:
        peer = name.startswith("loaderx-2.5.9")
        if peer and not args.peer:
            print(f"skipping {name}: no --peer python given", file=sys.stderr)
            continue
        python = args.peer if peer else sys.executable
        child = "loaderx-" + name.rsplit("-", 1)[1] if name.startswith("loaderx") else name
        print(f"running {name} ...", file=sys.stderr, flush=True)
        rows.append({"loader": name, **run_child(args, python, child)})
    samplers = {"ours": run_child(args, sys.executable, "sampler")}
    if args.peer:
        samplers["loaderx-2.5.9"] = run_child(args, args.peer, "sampler")

    results = {"date": time.strftime("%Y-%m-%d %H:%M"),
               "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
               "python": sys.version.split()[0], "workers": args.workers, "batch": args.batch,
               "batches": args.batches, "loaders": rows, "sampler_ns": samplers}
    print(f"{results['date']}  {results['machine']}  python {results['python']}\n")
    print("\n".join(report(args, rows, samplers)))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


def run_as_child(args: argparse.Namespace) -> dict:
    """What the measuring child process `args.child` measures (a fresh process per loader)."""
    if args.child.startswith("loaderx-"):
        return child_loaderx(args, args.child.rsplit("-", 1)[1])
    if args.child == "sampler":
        return child_sampler()
    context = args.child.split("-", 1)[1]
    return child_torch(args, None if context == "workers0" else context)


def report(args: argparse.Namespace, rows: list[dict], samplers: dict[str, dict]) -> list[str]:
    """The results as the Markdown tables of docs/benchmarks.md."""
    base = {r["loader"]: r for r in rows}
    lines = [f"### Loaders: vision_dense, batch {args.batch}, {args.workers} workers, "
             f"{args.batches} batches after {args.warmup} warm-up", "",
             "| loader | batches/s | vs torch-fork | vs loaderx-2.5.9 (same codec) | peak PSS MiB |",
             "|---|---:|---:|---:|---:|"]
    for r in rows:
        fork = base.get("torch-fork")
        codec = r["loader"].rsplit("-", 1)[1]
        peer = base.get(f"loaderx-2.5.9-{codec}") if r["loader"].startswith("loaderx") else None
        vs_fork = f"{r['batches_per_s'] / fork['batches_per_s']:.2f}x" if fork else ""
        vs_peer = f"{r['batches_per_s'] / peer['batches_per_s']:.2f}x" if peer else ""
        lines.append(f"| {r['loader']} | {r['batches_per_s']:.1f} | {vs_fork} | {vs_peer} | "
                     f"{r['peak_pss_mib']:.0f} |")
    lines += ["", "### Sampler: ns per next(), index space 1M (best of 5)", "",
              "| sampler | " + " | ".join(samplers["ours"]) + " |",
              "|---|" + "---:|" * len(samplers["ours"])]
    for name, row in samplers.items():
        lines.append(f"| {name} | " + " | ".join(f"{v:.0f}" for v in row.values()) + " |")
    if "loaderx-2.5.9" in samplers:
        ours, peer_row = samplers["ours"], samplers["loaderx-2.5.9"]
        lines.append("| speed-up vs 2.5.9 | " + " | ".join(
            f"{peer_row[k] / v:.2f}x" if k in peer_row else "" for k, v in ours.items()) + " |")
    return lines


if __name__ == "__main__":
    sys.exit(main())
