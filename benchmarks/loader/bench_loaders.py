"""Loader sweep: loaderx vs PyTorch DataLoader (fork, spawn) vs Grain, plus a CPU-heavy transform.

All on the real `vision_dense.npy` ((N, 3, 224, 224) uint8 photographs from benchmarks/prepare_data.py),
batch 256 (36.8 MiB), every configuration in its own subprocess so that the peak memory is its
own: batches/s over `--batches` timed batches after `--warmup`, and the peak PSS of the
process tree (common.probes.PeakPss: /proc/PID/smaps_rollup of the process and its descendants,
sampled every 20 ms; shared and copy-on-write pages are split between the processes that map
them, so the sum counts each physical page once).

Plain loading (identity transform), `--workers` counts (default 0,1,2,4):
  loaderx-raw / loaderx-zstd   our DataLoader (threads) over zrecord Dense stores written once
                               by the driver: image + label streams, CYCLIC sampler, prefetch 4
                               (workers = threads; 0 is not a loaderx setting, so it starts at 1)
  torch-fork / torch-spawn     torch.utils.data.DataLoader over a read-only np.load memory map
                               (common.data's per-sample MmapDataset, default collate, shuffle,
                               persistent workers, prefetch_factor 2); workers 0 = in process
  grain                        grain.DataLoader over an ArrayRecord file (group_size 1, index +
                               image bytes per record), IndexSampler with shuffle, Batch(256);
                               worker_count 0 and 2 (its own worker processes)
CPU-heavy transform, the same Numba-compiled function in both loaders (a 3x3 box blur plus
per-channel normalisation to float32, about 10 floating-point operations per pixel):
  loaderx-raw+numba-nogil      compiled with @njit(nogil=True): loaderx's threads run it in
                               parallel
  loaderx-raw+numba-gil        the control: the same function holding the GIL
  torch-fork+numba             the same function in the collate_fn of PyTorch fork workers
Every configuration checks its first batch for exact values (image == source[label]; the
transform cases against the function applied to the source) before the timer starts.

Usage: python benchmarks/loader/bench_loaders.py [--data DIR] [--workers 0,1,2,4] [--batches 40]
       [--transform-batches 12] [--records N] [--only name,...] [--tmp DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, which holds `common`
from common.data import MmapDataset, default_data
from common.device import work_folder
from common.probes import PeakPss
from common.tables import sweep_table
from common.timing import timed

MEAN = np.array([0.485, 0.456, 0.406], np.float32) * 255
STD = np.array([0.229, 0.224, 0.225], np.float32) * 255


def blur_normalize_py(x: np.ndarray) -> np.ndarray:
    """(B, C, H, W) uint8 -> float32: 3x3 box blur (edges clamped), then (v - mean) / std."""
    b, c, h, w = x.shape
    out = np.empty((b, c, h, w), np.float32)
    for n in range(b):
        for ch in range(c):
            m, s = MEAN[ch], 1.0 / STD[ch]
            for i in range(h):
                for j in range(w):
                    acc = 0.0
                    for di in range(-1, 2):
                        ii = min(max(i + di, 0), h - 1)
                        for dj in range(-1, 2):
                            jj = min(max(j + dj, 0), w - 1)
                            acc += x[n, ch, ii, jj]
                    out[n, ch, i, j] = (acc / 9.0 - m) * s
    return out


def compiled(nogil: bool) -> Any:
    """The transform compiled by Numba and warmed up (compilation is outside every timer)."""
    import numba

    fn = numba.njit(nogil=nogil)(blur_normalize_py)
    fn(np.zeros((1, 3, 4, 4), np.uint8))
    return fn


class TransformCollate:
    """PyTorch collate_fn that runs in the worker: default collate, then the batch transform."""

    def __init__(self) -> None:
        self.fn = compiled(nogil=True)  # built before the workers fork, so they inherit it

    def __call__(self, samples: list[Any]) -> Any:
        import torch
        from torch.utils.data import default_collate

        images, labels = default_collate(samples)
        return torch.from_numpy(self.fn(images.numpy())), labels


# -- children ---------------------------------------------------------------------------------


def check(images: Any, labels: Any, src: np.ndarray, transform: Any, name: str) -> None:
    want = src[np.asarray(labels, np.int64)]
    if transform is not None:
        want = transform(want)
    got = np.asarray(images)
    if got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want):
        raise AssertionError(f"{name}: the first batch does not match the source")


def child_loaderx(args: argparse.Namespace, codec: str, transform_kind: str | None) -> dict:
    from loaderx.dataloader import DataLoader
    from loaderx.sampler import Sampler
    from zrecord import Dense

    src = np.load(os.path.join(args.data, "vision_dense.npy"), mmap_mode="r")[:args.records]
    fn = None if transform_kind is None else compiled(nogil=transform_kind == "nogil")
    streams = {"image": Dense.open(os.path.join(args.stores, f"image-{codec}")),
               "label": Dense.open(os.path.join(args.stores, "label"))}
    sampler = Sampler(len(streams["label"]), args.batch, Sampler.Mode.CYCLIC, seed=42)
    if fn is None:
        transform = None
    else:
        def transform(b: dict[str, Any]) -> dict[str, Any]:
            return {"image": fn(b["image"]), "label": b["label"]}
    peak = PeakPss()
    loader = DataLoader(streams, sampler, transform=transform, workers=args.workers, prefetch=4)
    it = iter(loader)
    first = next(it)
    check(first["image"], first["label"], src, fn, "loaderx")
    del first
    rate = timed(it, args.warmup, args.batches)
    pss = peak.stop()
    loader.close()
    for s in streams.values():
        s.close()
    return {"batches_per_s": rate, "peak_pss_mib": pss / 2**20}


def child_torch(args: argparse.Namespace, context: str, transform: bool) -> dict:
    import torch

    torch.manual_seed(42)
    path = os.path.join(args.data, "vision_dense.npy")
    src = np.load(path, mmap_mode="r")[:args.records]
    ds = MmapDataset(path)
    ds.n = len(src)
    collate = TransformCollate() if transform else None
    kwargs: dict[str, Any] = {}
    if args.workers > 0:
        kwargs = {"num_workers": args.workers, "multiprocessing_context": context,
                  "persistent_workers": True, "prefetch_factor": 2}
    peak = PeakPss()
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch, shuffle=True, drop_last=True,
                                         collate_fn=collate, **kwargs)

    def endless() -> Any:
        while True:
            yield from loader

    it = endless()
    images, labels = next(it)
    check(images.numpy(), labels.numpy(), src, collate.fn if collate else None, "torch")
    del images, labels
    rate = timed(it, args.warmup, args.batches)
    pss = peak.stop()
    return {"batches_per_s": rate, "peak_pss_mib": pss / 2**20}


if os.environ.get("BENCH_LOADERS_GRAIN"):  # only Grain's processes pay for importing it
    import grain

    class GrainDecode(grain.transforms.Map):  # type: ignore[misc]
        """ArrayRecord value (8-byte little-endian index, then the image) -> numpy arrays.

        At module level so that Grain's worker processes can unpickle it."""

        def __init__(self, shape: tuple[int, ...]) -> None:
            self.shape = shape

        def map(self, value: bytes) -> dict[str, Any]:
            label = np.frombuffer(value, np.int64, 1)[0]
            return {"image": np.frombuffer(value, np.uint8, offset=8).reshape(self.shape),
                    "label": label}


def child_grain(args: argparse.Namespace) -> dict:
    from absl import flags

    # Grain's worker processes read absl flags, which a script without absl.app leaves unparsed.
    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
    src = np.load(os.path.join(args.data, "vision_dense.npy"), mmap_mode="r")[:args.records]
    decode = GrainDecode(tuple(src.shape[1:]))
    source = grain.sources.ArrayRecordDataSource([os.path.join(args.stores, "images.array_record")])
    sampler = grain.samplers.IndexSampler(len(source), shuffle=True, seed=42, num_epochs=None)
    peak = PeakPss()
    loader = grain.DataLoader(data_source=source, sampler=sampler, worker_count=args.workers,
                              operations=[decode, grain.transforms.Batch(args.batch,
                                                                         drop_remainder=True)])
    it = iter(loader)
    first = next(it)
    check(first["image"], first["label"], src, None, "grain")
    del first
    rate = timed(it, args.warmup, args.batches)
    pss = peak.stop()
    return {"batches_per_s": rate, "peak_pss_mib": pss / 2**20}


# -- the driver -------------------------------------------------------------------------------


def write_stores(args: argparse.Namespace, folder: str, grain_wanted: bool) -> None:
    from zrecord import Dense

    src = np.load(os.path.join(args.data, "vision_dense.npy"), mmap_mode="r")[:args.records]
    for codec in ("raw", "zstd"):
        with Dense.create(os.path.join(folder, f"image-{codec}"), src.dtype, src.shape[1:],
                          codec=codec, sync=False) as w:
            w.append(src)
    with Dense.create(os.path.join(folder, "label"), np.int64, (), codec="raw", sync=False) as w:
        w.append(np.arange(len(src), dtype=np.int64))
    if grain_wanted:
        from array_record.python.array_record_module import ArrayRecordWriter

        writer = ArrayRecordWriter(os.path.join(folder, "images.array_record"),
                                   "group_size:1,uncompressed")
        for i in range(len(src)):
            writer.write(np.int64(i).tobytes() + src[i].tobytes())
        writer.close()


def plan(workers: list[int], grain_ok: bool) -> list[tuple[str, int]]:
    """(configuration, workers) in run order."""
    out: list[tuple[str, int]] = []
    for w in workers:
        if w == 0:
            out.append(("torch-workers0", 0))
            continue
        out += [("loaderx-raw", w), ("loaderx-zstd", w), ("torch-fork", w), ("torch-spawn", w)]
    if grain_ok:
        out += [("grain", 0), ("grain", 2)]
    out += [("loaderx-raw+numba-nogil", 1), ("loaderx-raw+numba-nogil", 2),
            ("loaderx-raw+numba-gil", 2), ("torch-workers0+numba", 0), ("torch-fork+numba", 1),
            ("torch-fork+numba", 2)]
    return out


def versions() -> dict[str, str]:
    out = {}
    for dist in ("zrecord", "loaderx", "torch", "grain", "array_record", "numba", "llvmlite",
                 "numpy"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def run_as_child(args: argparse.Namespace) -> dict[str, Any]:
    """What the measuring child process `args.child` measures (a fresh process per row)."""
    args.workers = int(args.workers)
    name = args.child
    if name.startswith("loaderx-"):
        codec = name.split("-")[1].split("+")[0]
        kind = name.rsplit("-", 1)[1] if "+numba" in name else None
        return child_loaderx(args, codec, kind)
    if name.startswith("torch-"):
        context = name.split("-")[1].split("+")[0]
        return child_torch(args, "fork" if context == "workers0" else context, "+numba" in name)
    return child_grain(args)


def optional_missing() -> dict[str, str | None]:
    """Why the rows of Grain and Numba cannot run (None where they can)."""
    missing: dict[str, str | None] = {"grain": None, "numba": None}
    try:
        import grain  # noqa: F401
        from array_record.python import array_record_module  # noqa: F401
    except ImportError as e:
        missing["grain"] = f"not installed: {type(e).__name__}: {e}"
    try:
        import numba  # noqa: F401
    except ImportError as e:
        missing["numba"] = f"not installed: {type(e).__name__}: {e}"
    return missing


def run_configuration(args: argparse.Namespace, name: str, workers: int, records: int,
                      stores: str) -> dict[str, Any]:
    """One row: configuration `name` with `workers` workers, measured in a child process."""
    batches = args.transform_batches if "numba" in name else args.batches
    cmd = [sys.executable, __file__, "--child", name, "--data", args.data, "--workers",
           str(workers), "--batches", str(batches), "--warmup", str(args.warmup),
           "--batch", str(args.batch), "--records", str(records), "--stores", stores]
    print(f"running {name} workers={workers} ...", file=sys.stderr, flush=True)
    env = dict(os.environ, BENCH_LOADERS_GRAIN="1") if name == "grain" else None
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        lines = out.stderr.strip().splitlines() or ["?"]
        reason = next((x for x in reversed(lines) if "Error" in x or "Exception" in x), lines[-1])
        print(out.stderr[-3000:], file=sys.stderr)
        return {"loader": name, "workers": workers, "status": f"failed: {reason}"}
    return {"loader": name, "workers": workers, "batches": batches,
            **json.loads(out.stdout.strip().splitlines()[-1])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=default_data())
    ap.add_argument("--workers", default="0,1,2,4")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--transform-batches", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--records", type=int, default=None, help="cap the source (default: all)")
    ap.add_argument("--only", default=None, help="comma-separated configuration names")
    ap.add_argument("--tmp", default=None, type=work_folder,
                    help="folder for the stores, made if missing (default: a temp dir)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--peer", default=None, help="accepted for the nox loop; not used here")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--stores", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(run_as_child(args)))
        return 0
    wanted = plan([int(w) for w in args.workers.split(",") if w], True)
    if args.only:
        keep = set(args.only.split(","))
        wanted = [p for p in wanted if p[0] in keep]
    src_n = len(np.load(os.path.join(args.data, "vision_dense.npy"), mmap_mode="r"))
    records = min(args.records or src_n, src_n)
    missing = optional_missing()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(dir=args.tmp) as stores:
        write_stores(argparse.Namespace(data=args.data, records=records), stores,
                     missing["grain"] is None and any(n == "grain" for n, _ in wanted))
        for name, workers in wanted:
            why = missing["grain"] if name == "grain" else missing["numba"] if "numba" in name \
                else None
            if why:
                rows.append({"loader": name, "workers": workers, "status": why})
                continue
            rows.append(run_configuration(args, name, workers, records, stores))
    result = {"date": time.strftime("%Y-%m-%d %H:%M"),
              "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
              "python": sys.version.split()[0], "versions": versions(), "records": records,
              "batch": args.batch, "batches": args.batches,
              "transform_batches": args.transform_batches, "warmup": args.warmup, "rows": rows}
    print(f"{result['date']}  {result['machine']}  python {result['python']}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in result["versions"].items()) + "\n")
    print(sweep_table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
