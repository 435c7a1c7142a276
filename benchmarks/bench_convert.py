"""Conversion throughput and peak memory: the real Fashion-MNIST DatasetDict into zrecord stores.

Each codec is converted in a fresh interpreter, so that its peak RSS (from wait4's rusage) is
the conversion's own: reading the Arrow files, decoding 70,000 PNG images, writing the stores.
The data are `hf/fashion_mnist` from benchmarks/prepare_data.py (a `save_to_disk` folder).
Target (issue F5): peak RSS under 1 GiB. The converted stores are checked against the source
(every label, a sample of images) after the timed run.
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

ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import sys, time
import datasets
dataset = datasets.load_from_disk(sys.argv[1])
try:
    from loaderx_converter import convert
    kwargs = {"progress": False}
except ImportError:  # the published loaderx, in its own virtualenv
    from loaderx.converter import convert
    kwargs = {}
start = time.perf_counter()
convert(dataset, sys.argv[2], codec=sys.argv[3], **kwargs)
print(time.perf_counter() - start)
"""

CHECK = """
import sys
import datasets
import numpy as np
try:
    from zrecord import Dense
except ImportError:
    from loaderx.zrecord import Dense
dataset = datasets.load_from_disk(sys.argv[1])
for split, ds in dataset.items():
    labels = Dense.open(f"{sys.argv[2]}/{split}/label")
    assert np.array_equal(labels[:], np.asarray(ds["label"]))
    images = Dense.open(f"{sys.argv[2]}/{split}/image")
    for i in range(0, ds.num_rows, 997):
        assert np.array_equal(images[i], np.asarray(ds[i]["image"]))
"""


def run_one(python: str, source: str, dest: str, codec: str) -> dict[str, float]:
    start = time.perf_counter()
    proc = subprocess.Popen([python, "-c", CHILD, source, dest, codec],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"conversion with codec {codec} failed ({proc.returncode})")
    wall = time.perf_counter() - start
    subprocess.run([python, "-c", CHECK, source, dest], check=True)
    return {"convert_s": float(out.strip().splitlines()[-1]), "process_s": wall,
            "peak_rss_mib": usage.ru_maxrss / 1024}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.environ.get("LOADERX_BENCH_DATA", str(ROOT.parent / "data")))
    ap.add_argument("--codecs", default="raw,zstd")
    ap.add_argument("--json", default=None)
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--peer", default=None,
                    help="python of a separate venv holding the published loaderx (and datasets): "
                         "its converter runs on the same data in the same run")
    args = ap.parse_args(argv)
    source = os.path.join(args.data, "hf", "fashion_mnist")
    if not os.path.isdir(source):
        print(f"no Fashion-MNIST at {source}; run benchmarks/prepare_data.py with part hf",
              file=sys.stderr)
        return 1
    import datasets

    import loaderx_converter

    rows_total = sum(ds.num_rows for ds in datasets.load_from_disk(source).values())
    result = {"date": time.strftime("%Y-%m-%d %H:%M"),
              "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
              "python": sys.version.split()[0], "datasets": datasets.__version__,
              "loaderx_converter": loaderx_converter.__version__, "rows": rows_total, "runs": []}
    tmp = tempfile.mkdtemp(dir=args.tmp)
    try:
        for codec in args.codecs.split(","):
            pythons = [("loaderx-converter", sys.executable)]
            if args.peer:
                pythons.append((peer_label(args.peer), args.peer))
            for label, python in pythons:
                dest = os.path.join(tmp, f"fmnist-{codec}")
                r = run_one(python, source, dest, codec)
                r.update(converter=label, codec=codec, rows_s=rows_total / r["convert_s"])
                result["runs"].append(r)
                shutil.rmtree(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{result['date']}  {result['machine']}  datasets {result['datasets']}  "
          f"loaderx-converter {result['loaderx_converter']}\n")
    print(table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


def peer_label(python: str) -> str:
    """"loaderx-VERSION" of the published package in the peer's virtualenv."""
    out = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('loaderx'))"],
                         capture_output=True, text=True, check=True)
    return "loaderx-" + out.stdout.strip()


def table(result: dict) -> str:
    """The Markdown table of one run (also used by report.py)."""
    lines = [f"### Conversion: Fashion-MNIST DatasetDict ({result['rows']:,} rows: image + label)",
             "", "| converter | codec | rows/s | convert s | peak RSS MiB | RSS < 1024 MiB |",
             "|---|---|---:|---:|---:|---|"]
    for r in result["runs"]:
        ok = "met" if r["peak_rss_mib"] < 1024 else "**missed**"
        lines.append(f"| {r.get('converter', 'loaderx-converter')} | {r['codec']} | {r['rows_s']:,.0f} | {r['convert_s']:.1f} | "
                     f"{r['peak_rss_mib']:,.0f} | {ok} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
