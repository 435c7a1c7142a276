"""Conversion throughput, disk and peak memory on real datasets, beside the published converter.

Workloads (benchmarks/prepare_data.py, part hf):
  fmnist          the Fashion-MNIST DatasetDict (`hf/fashion_mnist`, a save_to_disk folder:
                  70,000 PNG images + ClassLabel), every codec of --codecs
  fmnist-before   the same with every column stored zstd (named for each column, so nothing is
                  measured or changed): the sizes before small columns kept raw ([V1] item 3)
  photos-decode   the 1,493 photographs of `hf/photos` (JPEG/PNG/WebP, modes RGB/RGBA/P/L),
                  columns image + source, cast to Image(mode="RGB") and decoded to pixels
  photos-encoded  the same photos kept as their files (images="encoded")

Each conversion runs in a fresh interpreter, so that its peak RSS (its own getrusage, threads
included; one process, no workers here) is its own: reading the Arrow files, decoding, writing the
stores. The published loaderx (--peer PYTHON, a venv with loaderx 2.5.9, datasets and Pillow)
converts fmnist and photos-decode the same way (it has no encoded mode and one codec for every
column). `--rounds` rounds run every fmnist configuration in turn; rows/s are medians and
ratios the median of the per-round ratios, with their range. The photo workloads run
`--photo-rounds` times (decoding 3.8 GiB of pixels takes minutes here). Disk is the blocks
allocated under the converted root. Every converted root is checked against its source (every
label, a sample of images, every encoded file for a sample) after the timed run.

Target (issue V1 item 6): fmnist rows/s >= 1.0x the published converter, peak RSS < 1 GiB.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, which holds `common`
from common.convert import run_one
from common.data import default_data
from common.device import work_folder
from common.tables import convert_rows, convert_table


def peer_label(python: str) -> str:
    """"loaderx-VERSION" of the published package in the peer's virtualenv."""
    out = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('loaderx'))"],
                         capture_output=True, text=True, check=True)
    return "loaderx-" + out.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=default_data())
    ap.add_argument("--codecs", default="raw,zstd")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--photo-rounds", type=int, default=1)
    ap.add_argument("--workloads", default="fmnist,fmnist-before,photos-decode,photos-encoded")
    ap.add_argument("--json", default=None)
    ap.add_argument("--tmp", default=None, type=work_folder,
                    help="folder for the stores, made if missing (default: a temp dir)")
    ap.add_argument("--peer", default=None,
                    help="python of a separate venv holding the published loaderx (with datasets "
                         "and Pillow): its converter runs on the same data in the same run")
    args = ap.parse_args(argv)
    hf = os.path.join(args.data, "hf")
    sources = {"fmnist": os.path.join(hf, "fashion_mnist"),
               "fmnist-before": os.path.join(hf, "fashion_mnist"),
               "photos-decode": os.path.join(hf, "photos"),
               "photos-encoded": os.path.join(hf, "photos")}
    workloads = args.workloads.split(",")
    for w in workloads:
        if not os.path.isdir(sources[w]):
            print(f"no data at {sources[w]}; run benchmarks/prepare_data.py with part hf",
                  file=sys.stderr)
            return 1
    import datasets

    import loaderx_converter

    counts = {w: sum(ds.num_rows for ds in datasets.load_from_disk(sources[w]).values())
              if w.startswith("fmnist") else datasets.load_from_disk(sources[w]).num_rows
              for w in workloads}
    peer = (peer_label(args.peer), args.peer) if args.peer else None
    plan: list[tuple[int, str, str, str, str]] = []  # (round, workload, codec, label, python)
    for k in range(args.rounds):
        for w in workloads:
            photos = w.startswith("photos")
            if photos and k >= args.photo_rounds:
                continue
            for codec in (["zstd"] if photos or w == "fmnist-before" else args.codecs.split(",")):
                plan.append((k, w, codec, "loaderx-converter", sys.executable))
                if peer and w in ("fmnist", "photos-decode"):
                    plan.append((k, w, codec, *peer))
    tmp = tempfile.mkdtemp(dir=args.tmp)
    runs = []
    try:
        for k, w, codec, label, python in plan:
            print(f"round {k + 1}: {w} {codec} {label} ...", file=sys.stderr, flush=True)
            dest = os.path.join(tmp, f"{w}-{codec}")
            r = run_one(python, w, sources[w], dest, codec)
            r.update(round=k, workload=w, converter=label, codec=codec, rows=counts[w],
                     rows_s=counts[w] / r["convert_s"])
            runs.append(r)
            shutil.rmtree(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result = {"date": time.strftime("%Y-%m-%d %H:%M"),
              "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
              "python": sys.version.split()[0], "datasets": datasets.__version__,
              "loaderx_converter": loaderx_converter.__version__, "rounds": args.rounds,
              "photo_rounds": args.photo_rounds, "runs": runs, "rows": convert_rows(runs)}
    print(f"{result['date']}  {result['machine']}  datasets {result['datasets']}  "
          f"loaderx-converter {result['loaderx_converter']}\n")
    print(convert_table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
