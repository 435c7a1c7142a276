"""The converter with worker processes: `convert(..., workers=N)` against one process.

Workloads (benchmarks/prepare_data.py, part hf), as in bench_convert.py:
  fmnist          Fashion-MNIST, 70,000 small PNGs + ClassLabel (decoding holds the GIL:
                  Pillow's Python work per 28 x 28 image dominates)
  photos-decode   the 1,493 photographs cast to RGB and decoded (Pillow releases the GIL:
                  one process already decodes them on a thread pool)

Each conversion runs in a fresh interpreter (common.convert.run_one: wall time, peak RSS of the
converting process, the result checked against its source), codec zstd, workers 1 and each of
`--workers`, in turn within each round; the speed-up is the median of the per-round ratios.
The stores written are the same whatever the workers (tests/test_workers.py checks it byte
for byte), so only time and memory are compared. Peak RSS: the converting process's own
(its getrusage), and the largest of it and its workers (wait4's, which Linux reports as the
larger peak of the process and the children it waited for, not their sum).

Target (issue D2 point 3): `loaderx-convert --workers N` exists; no speed target of its own
(2 workers >= 1.8x is the target of the import benchmark, bench_datasets.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, which holds `common`
from common.convert import run_one
from common.data import default_data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=default_data())
    ap.add_argument("--workloads", default="fmnist,photos-decode")
    ap.add_argument("--workers", default="2", help="worker counts to compare with 1")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--photo-rounds", type=int, default=1)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    hf = os.path.join(args.data, "hf")
    sources = {"fmnist": os.path.join(hf, "fashion_mnist"), "photos-decode": os.path.join(hf, "photos")}
    counts = [1, *(int(w) for w in args.workers.split(","))]
    tmp = tempfile.mkdtemp()
    runs = []
    try:
        for k in range(args.rounds):
            for w in args.workloads.split(","):
                if w.startswith("photos") and k >= args.photo_rounds:
                    continue
                for n in counts:
                    print(f"round {k + 1}: {w} workers={n} ...", file=sys.stderr, flush=True)
                    dest = os.path.join(tmp, f"{w}-{n}")
                    r = run_one(sys.executable, w, sources[w], dest, "zstd", workers=n)
                    runs.append({"round": k, "workload": w, "workers": n, **r})
                    shutil.rmtree(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    lines = [f"{time.strftime('%Y-%m-%d %H:%M')}, {platform.machine()}, {os.cpu_count()} CPUs",
             "", "| workload | workers | convert s | speed-up over 1 | peak RSS MiB (converting "
             "process) | peak RSS MiB (largest process) |", "|---|---:|---:|---:|---:|---:|"]
    for w in args.workloads.split(","):
        for n in counts:
            mine = [r for r in runs if r["workload"] == w and r["workers"] == n]
            ones = [r for r in runs if r["workload"] == w and r["workers"] == 1]
            ratios = [a["convert_s"] / b["convert_s"] for a, b in zip(ones, mine)]
            lines.append(f"| {w} | {n} | {statistics.median(r['convert_s'] for r in mine):.2f} | "
                         f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) | "
                         f"{max(r['peak_rss_mib'] for r in mine):,.0f} | "
                         f"{max(r['peak_rss_largest_mib'] for r in mine):,.0f} |")
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs, "table": lines}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
