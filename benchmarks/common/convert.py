"""One conversion by loaderx-converter (or the published loaderx's converter, in its own
virtualenv) in a fresh interpreter, timed and checked against its source: bench_convert.py
and bench_convert_workers.py.

The child converts a workload of the prepared data (part hf) and prints its own time and
its own peak RSS (getrusage of itself: threads included, worker processes not); the parent
takes the process's wall time, and from wait4's rusage the largest peak RSS among the child
and the worker processes it waited for (Linux reports the larger of the two, not a sum), then
checks the converted root in another child (every label, a sample of images, every encoded
file for a sample).
"""

from __future__ import annotations

import os
import subprocess
import time
from typing import Any

from common.timing import disk_bytes

# argv: workload source dest codec [workers]
CHILD = """
import sys, time, warnings
import datasets
warnings.simplefilter("ignore")
workload, source, dest, codec = sys.argv[1:5]
workers = int(sys.argv[5]) if len(sys.argv) > 5 else 1
dataset = datasets.load_from_disk(source)
try:
    from loaderx_converter import convert
    ours = True
except ImportError:  # the published loaderx, in its own virtualenv
    from loaderx.converter import convert
    ours = False
kwargs = {"progress": False} if ours else {}
if workers > 1:
    kwargs["workers"] = workers
if workload.startswith("photos"):
    dataset = datasets.DatasetDict({"train": dataset.select_columns(["image", "source"])})
    if workload == "photos-encoded":
        kwargs["images"] = "encoded"
    else:
        dataset = dataset.cast_column("image", datasets.Image(mode="RGB"))
if workload == "fmnist-before":
    codec = {"image": codec, "label": codec}
start = time.perf_counter()
convert(dataset, dest, codec=codec, **kwargs)
print(time.perf_counter() - start)
import resource
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""

CHECK = """
import sys, warnings
import datasets
import numpy as np
warnings.simplefilter("ignore")
try:
    from zrecord import Dense, Ragged
except ImportError:
    from loaderx.zrecord import Dense, Ragged
workload, source, dest = sys.argv[1:4]
dataset = datasets.load_from_disk(source)
if workload.startswith("photos"):
    dataset = {"train": dataset}
for split, ds in dataset.items():
    labels = Dense.open(f"{dest}/{split}/" + ("source" if workload.startswith("photos") else "label"))
    assert np.array_equal(labels[:], np.asarray(ds["source" if workload.startswith("photos") else "label"]))
    images = (Dense if workload.startswith("fmnist") else Ragged).open(f"{dest}/{split}/image")
    step = 97 if workload.startswith("photos") else 997
    for i in range(0, ds.num_rows, step):
        if workload == "photos-encoded":
            want = np.frombuffer(ds.with_format("arrow")[i:i + 1].column("image")[0]["bytes"].as_py(), np.uint8)
        elif workload == "photos-decode":
            want = np.asarray(ds[i]["image"].convert("RGB"))
        else:
            want = np.asarray(ds[i]["image"])
        assert np.array_equal(images[i], want), (split, i)
"""


def column_bytes(dest: str) -> dict[str, int]:
    """Allocated bytes per converted column (summed over splits)."""
    out: dict[str, int] = {}
    for split in sorted(os.listdir(dest)):
        if os.path.isdir(os.path.join(dest, split)):
            for column in sorted(os.listdir(os.path.join(dest, split))):
                out[column] = out.get(column, 0) + disk_bytes(os.path.join(dest, split, column))
    return out


def run_one(python: str, workload: str, source: str, dest: str, codec: str,
            workers: int = 1) -> dict[str, Any]:
    start = time.perf_counter()
    proc = subprocess.Popen([python, "-c", CHILD, workload, source, dest, codec, str(workers)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"conversion {workload} with codec {codec} by {python} failed")
    wall = time.perf_counter() - start
    subprocess.run([python, "-c", CHECK, workload, source, dest], check=True)
    seconds, own_kib = out.strip().splitlines()[-2:]
    return {"convert_s": float(seconds), "process_s": wall,
            "peak_rss_mib": int(own_kib) / 1024,
            "peak_rss_largest_mib": usage.ru_maxrss / 1024, "disk_mib": disk_bytes(dest) / 2**20,
            "columns_mib": {k: v / 2**20 for k, v in column_bytes(dest).items()}}
