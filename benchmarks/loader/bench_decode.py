"""Decoding real photos while training: loaderx threads vs PyTorch worker processes.

The 1,493 photographs of `hf/photos` (benchmarks/prepare_data.py: JPEG, PNG and WebP files
as they were shipped, modes RGB/RGBA/P/L, median 400 x 512, up to 2048 on the long side) are
converted once with `loaderx-convert --images encoded` into a Ragged uint8 store, and their
bytes are also written as one flat NumPy array plus offsets (the same bytes). Then, each in a
fresh process so that its memory is its own, at N = 1, 2, 4:

  loaderx   DataLoader over the Ragged store, transform=DecodeImages(size=(224, 224)),
            workers=N threads, prefetch 2N + 1 (2N batches in flight besides the one the
            consumer holds, as many as PyTorch's default prefetch_factor 2 keeps)
  torch     torch.utils.data.DataLoader over a per-sample Dataset reading the flat NumPy
            memory map, num_workers=N (fork), prefetch_factor 2, persistent workers; each
            sample decoded by the same function (DecodeImages.decode_one), default collate

Both read the same images in the same batches (one fixed permutation, batch 32): 2N warm-up
batches (worker start-up included, and as many batches as PyTorch keeps in flight, so that the
timed window starts with both pipelines full and measures their steady state) and then
`--batches` timed ones. Reported per run:
images/s, the peak PSS of the process tree (proportional set size, sampled every 20 ms from
/proc/PID/smaps_rollup: pages shared between the processes are counted once, split between
them), and for loaderx the DataLoader's own split of the time (gather vs transform vs the
consumer's wait). `--rounds` rounds, each running every configuration once in turn; the
tables give medians and, for ratios, the median of the per-round ratios with their range.

Where the time goes: one thread decodes every timed image again, step by step (reading the
record from the store, Pillow's open and decode, mode conversion, resampling, copying into the
batch), so the share of decoding in an image's cost is measured, not guessed; also per file
format. Whether a decoder lets other threads run is measured too: a pure-Python thread counts
while one format's files are decoded beside it, and its count is compared with the count it
reaches alone in the same time (1.0: the decoder never holds the GIL; 0.5: half the time).
A process that only imports torch gives the PSS torch itself costs.

Usage: python benchmarks/loader/bench_decode.py [--data DIR] [--rounds 3] [--workers 1,2,4]
       [--json OUT] [--tmp DIR]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, which holds `common`
from common.data import default_data
from common.device import work_folder
from common.probes import PeakPss, tree_pss_bytes
from common.tables import decode_table

SIZE = (224, 224)


# -- the children ----------------------------------------------------------------------------


def _order(n: int, batch: int, batches: int) -> np.ndarray:
    """The images every configuration reads, in batches: one fixed permutation, repeated."""
    perm = np.random.default_rng(0).permutation(n)
    reps = -(-batch * batches // n)
    return np.tile(perm, reps)[:batch * batches].reshape(batches, batch)


class FixedOrder:
    """A sampler for the loaderx DataLoader that draws the fixed batches in turn."""

    def __init__(self, batches: np.ndarray) -> None:
        self.batches = batches
        self.length = int(batches.max()) + 1
        self.step = 0

    def next(self) -> np.ndarray:
        out = self.batches[self.step % len(self.batches)]
        self.step += 1
        return out


def child_loaderx(args: argparse.Namespace) -> dict[str, Any]:
    import zrecord
    from loaderx.dataloader import DataLoader
    from loaderx.transforms import DecodeImages

    warnings.simplefilter("ignore")  # Pillow's note about palette transparency, per image
    store = zrecord.Ragged.open(os.path.join(args.work, "photos", "train", "image"))
    order = _order(len(store), args.batch, args.warmup + args.batches)
    loader = DataLoader({"image": store}, FixedOrder(order), DecodeImages("image", size=SIZE),
                        workers=args.workers, prefetch=2 * args.workers + 1)
    peak = PeakPss()
    for _ in range(args.warmup):
        next(loader)
    before = loader.stats()
    t = time.perf_counter()
    for _ in range(args.batches):
        batch = next(loader)
        assert batch["image"].shape == (args.batch, *SIZE, 3)
    elapsed = time.perf_counter() - t
    after = loader.stats()
    pss = peak.stop()
    loader.close()
    store.close()
    return {"images_per_s": args.batch * args.batches / elapsed, "peak_pss_mib": pss / 2**20,
            "gather_s": after["gather_s"] - before["gather_s"],
            "transform_s": after["transform_s"] - before["transform_s"],
            "wait_s": after["consumer_wait_s"] - before["consumer_wait_s"], "elapsed_s": elapsed}


class EncodedPhotos:
    """The ordinary PyTorch recipe: a per-sample Dataset over memory-mapped bytes, decoding in
    __getitem__ with the same function as the loaderx transform."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.offsets = np.load(os.path.join(folder, "offsets.npy"))
        self.payload: np.ndarray | None = None
        self.decode: Any = None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> Any:
        import torch

        if self.payload is None:  # opened lazily, in each worker
            from loaderx.transforms import DecodeImages

            warnings.simplefilter("ignore")
            self.payload = np.load(os.path.join(self.folder, "payload.npy"), mmap_mode="r")
            self.decode = DecodeImages("image", size=SIZE)
        data = self.payload[int(self.offsets[i]):int(self.offsets[i + 1])]
        return torch.from_numpy(self.decode.decode_one(data))


def child_torch(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    ds = EncodedPhotos(args.work)
    order = _order(len(ds), args.batch, args.warmup + args.batches)
    loader = torch.utils.data.DataLoader(ds, batch_sampler=order.tolist(), num_workers=args.workers,
                                         multiprocessing_context="fork", persistent_workers=True,
                                         prefetch_factor=2)
    peak = PeakPss()
    batches = iter(loader)
    for _ in range(args.warmup):
        next(batches)
    t = time.perf_counter()
    for _ in range(args.batches):
        batch = next(batches)
        assert tuple(batch.shape) == (args.batch, *SIZE, 3)
    elapsed = time.perf_counter() - t
    pss = peak.stop()
    del batches, loader
    return {"images_per_s": args.batch * args.batches / elapsed, "peak_pss_mib": pss / 2**20,
            "elapsed_s": elapsed}


def child_torch_import(args: argparse.Namespace) -> dict[str, Any]:
    before = tree_pss_bytes(os.getpid())
    import torch  # noqa: F401

    return {"peak_pss_mib": tree_pss_bytes(os.getpid()) / 2**20,
            "import_mib": (tree_pss_bytes(os.getpid()) - before) / 2**20}


def child_steps(args: argparse.Namespace) -> dict[str, Any]:
    """Per-image cost of each step, on one thread, over the timed images."""
    import PIL.Image
    import PIL.ImageOps

    import zrecord
    from loaderx.transforms import DecodeImages

    warnings.simplefilter("ignore")
    store = zrecord.Ragged.open(os.path.join(args.work, "photos", "train", "image"))
    order = _order(len(store), args.batch, args.warmup + args.batches)[args.warmup:].reshape(-1)
    decode = DecodeImages("image", size=SIZE)
    steps = {"read": 0.0, "open+decode": 0.0, "exif+convert": 0.0, "resize": 0.0, "copy": 0.0}
    formats: dict[str, list[float]] = {}  # format -> [images, seconds]
    out = np.empty((len(order), *SIZE, 3), np.uint8)
    for k, i in enumerate(order):
        t0 = time.perf_counter()
        data = store[int(i)]
        t1 = time.perf_counter()
        image = PIL.Image.open(io.BytesIO(data.data))
        orientation = image.getexif().get(0x0112)
        width, height = image.size
        turned = orientation in (5, 6, 7, 8)
        if turned:
            width, height = height, width
        box, need = decode._region(width, height)
        if image.format == "JPEG":
            image.draft(None, (need[1], need[0]) if turned else need)
        image.load()
        t2 = time.perf_counter()
        if orientation is not None:
            image = PIL.ImageOps.exif_transpose(image)
        if image.mode != "RGB":
            image = image.convert("RGB")
        t3 = time.perf_counter()
        w, h = image.size
        if (w, h) != (width, height):
            sx, sy = w / width, h / height
            box = (box[0] * sx, box[1] * sy, box[2] * sx, box[3] * sy)
        box = (max(0.0, box[0]), max(0.0, box[1]), min(float(w), box[2]), min(float(h), box[3]))
        small = image.resize((SIZE[1], SIZE[0]), PIL.Image.Resampling.BILINEAR, box=box)
        t4 = time.perf_counter()
        out[k] = np.asarray(small)
        t5 = time.perf_counter()
        for name, dt in zip(steps, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
            steps[name] += dt
        entry = formats.setdefault(str(PIL.Image.open(io.BytesIO(data.data)).format), [0, 0.0])
        entry[0] += 1
        entry[1] += t5 - t0
    gil = {name: _gil_share(files) for name, files in _by_format(store, order).items()}
    store.close()
    n = len(order)
    return {"images": n, "ms_per_image": {k: v / n * 1e3 for k, v in steps.items()},
            "mean_file_kib": float(np.mean(_sizes(args, order))) / 1024,
            "formats": {k: {"images": int(c), "ms_per_image": t / c * 1e3}
                        for k, (c, t) in sorted(formats.items())},
            "spinner_progress": gil}


def _by_format(store: Any, order: np.ndarray) -> dict[str, list[bytes]]:
    import PIL.Image

    out: dict[str, list[bytes]] = {}
    for i in order:
        data = store[int(i)].tobytes()
        out.setdefault(str(PIL.Image.open(io.BytesIO(data)).format), []).append(data)
    return out


def _gil_share(files: list[bytes], trials: int = 5, per_trial: int = 6) -> float:
    """How far a pure-Python thread gets while `files` are decoded beside it, over how far it
    gets alone in the same time: the median of `trials`."""
    import threading

    import PIL.Image

    def spin(stop: threading.Event, out: list[int]) -> None:
        n = 0
        while not stop.is_set():
            n += 1
        out.append(n)

    ratios = []
    for k in range(trials):
        chunk = files[(k * per_trial) % len(files):][:per_trial] or files[:per_trial]
        stop, beside = threading.Event(), []
        thread = threading.Thread(target=spin, args=(stop, beside))
        start = time.perf_counter()
        thread.start()
        for data in chunk:
            PIL.Image.open(io.BytesIO(data)).load()
        wall = time.perf_counter() - start
        stop.set()
        thread.join()
        stop, alone = threading.Event(), []
        thread = threading.Thread(target=spin, args=(stop, alone))
        thread.start()
        time.sleep(wall)
        stop.set()
        thread.join()
        ratios.append(beside[0] / max(1, alone[0]))
    return float(np.median(ratios))


def _sizes(args: argparse.Namespace, order: np.ndarray) -> list[int]:
    offsets = np.load(os.path.join(args.work, "offsets.npy"))
    return [int(offsets[i + 1] - offsets[i]) for i in order]


CHILDREN = {"loaderx": child_loaderx, "torch": child_torch, "torch-import": child_torch_import,
            "steps": child_steps}


# -- the driver ------------------------------------------------------------------------------


def prepare(data: str, work: str) -> dict[str, Any]:
    """The encoded store (through the converter's command line) and the same bytes as NumPy."""
    import datasets

    source = os.path.join(data, "hf", "photos")
    t = time.perf_counter()
    subprocess.run([str(Path(sys.executable).parent / "loaderx-convert"), source,
                    os.path.join(work, "photos"), "--images", "encoded", "--columns",
                    "image, source", "--quiet"], check=True, stdout=subprocess.DEVNULL)
    convert_s = time.perf_counter() - t
    column = datasets.load_from_disk(source).with_format("arrow")[:].column("image")
    files = [row["bytes"] for row in column.to_pylist()]
    offsets = np.zeros(len(files) + 1, np.int64)
    offsets[1:] = np.cumsum([len(f) for f in files])
    np.save(os.path.join(work, "payload.npy"), np.frombuffer(b"".join(files), np.uint8))
    np.save(os.path.join(work, "offsets.npy"), offsets)
    return {"images": len(files), "file_mib": offsets[-1] / 2**20, "convert_s": convert_s}


def run_child(args: argparse.Namespace, what: str, workers: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", what, "--work", args.work, "--workers",
           str(workers), "--batch", str(args.batch), "--batches", str(args.batches),
           "--warmup", str(args.warmup)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{what} N={workers} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _median(values: list[float]) -> float:
    return float(np.median(values))


def summarize(rounds: list[dict[str, dict[str, Any]]], workers: list[int]) -> list[dict[str, Any]]:
    """One row per N: medians over rounds, and ratios as medians of per-round ratios."""
    rows = []
    for n in workers:
        ours = [r[f"loaderx-{n}"] for r in rounds]
        theirs = [r[f"torch-{n}"] for r in rounds]
        speed = sorted(a["images_per_s"] / b["images_per_s"] for a, b in zip(ours, theirs))
        pss = sorted(a["peak_pss_mib"] / b["peak_pss_mib"] for a, b in zip(ours, theirs))
        busy = [a["transform_s"] / max(1e-9, a["gather_s"] + a["transform_s"]) for a in ours]
        rows.append({
            "workers": n,
            "loaderx_images_s": _median([a["images_per_s"] for a in ours]),
            "torch_images_s": _median([b["images_per_s"] for b in theirs]),
            "speed_ratio": _median(speed), "speed_range": [speed[0], speed[-1]],
            "loaderx_pss_mib": _median([a["peak_pss_mib"] for a in ours]),
            "torch_pss_mib": _median([b["peak_pss_mib"] for b in theirs]),
            "pss_ratio": _median(pss), "pss_range": [pss[0], pss[-1]],
            "transform_share": _median(busy),
            "wait_share": _median([a["wait_s"] / a["elapsed_s"] for a in ours]),
        })
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=default_data())
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--batches", type=int, default=24)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tmp", default=None, type=work_folder,
                    help="folder for the stores, made if missing (default: a temp dir)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--peer", default=None, help=argparse.SUPPRESS)  # nox passes it to all
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--work", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        args.workers = int(args.workers)
        args.warmup = max(args.warmup, 2 * args.workers)
        print(json.dumps(CHILDREN[args.child](args)))
        return 0
    if not os.path.isdir(os.path.join(args.data, "hf", "photos")):
        print(f"no photos at {args.data}/hf/photos; run benchmarks/prepare_data.py with "
              "part hf", file=sys.stderr)
        return 1
    import datasets
    import PIL
    import torch

    workers = [int(w) for w in args.workers.split(",")]
    args.work = tempfile.mkdtemp(prefix="bench-decode-", dir=args.tmp)
    try:
        prepared = prepare(args.data, args.work)
        rounds = []
        for k in range(args.rounds):
            one: dict[str, dict[str, Any]] = {}
            for n in workers:
                for what in ("loaderx", "torch"):
                    print(f"round {k + 1}/{args.rounds}: {what} N={n} ...", file=sys.stderr,
                          flush=True)
                    one[f"{what}-{n}"] = run_child(args, what, n)
            rounds.append(one)
        steps = run_child(args, "steps", 1)
        torch_import = run_child(args, "torch-import", 1)
    finally:
        shutil.rmtree(args.work, ignore_errors=True)
    result = {"date": time.strftime("%Y-%m-%d %H:%M"),
              "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
              "python": sys.version.split()[0],
              "versions": {"torch": torch.__version__, "pillow": PIL.__version__,
                           "numpy": np.__version__, "datasets": datasets.__version__},
              "batch": args.batch, "batches": args.batches, "warmup": args.warmup,
              "rounds": args.rounds, "workers": workers, "size": list(SIZE),
              "prepared": prepared, "runs": rounds, "rows": summarize(rounds, workers),
              "steps": steps, "torch_import": torch_import}
    print(f"{result['date']}  {result['machine']}  python {result['python']}\n")
    print(decode_table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
