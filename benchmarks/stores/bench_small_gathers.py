"""Warm random gathers of small raw records: two or more builds of the core, interleaved.

Compares builds of zrecord's native extension (folders holding a `zrecord` package with its
compiled `_native.abi3.so`, e.g. copies of packages/zrecord/src taken before and after a
change) in one process: each build's extension is loaded under its own module name, opens the
same stores, and the builds take turns batch by batch (in rotating order, each with batches of
its own), so that whatever else runs on a shared machine slows all of them alike. Each round
opens every build's reader afresh, in rotated order. Only the native gather call is timed,
into an output reused across calls: the Python layer around it is the same for every build.

Workloads (synthetic, shaped like the token data of benchmarks/README.md):

  dense-2k     Dense int32 (512,) records (2 KiB token blocks), raw, 65,536 records
  ragged-230   Ragged int32 records of 16..100 tokens (~230 B on average), raw, 127,633 records

With --data (the output folder of benchmarks/prepare_data.py), the real workloads of
bench_dense.py and bench_ragged.py can be named too, as WORKLOAD/CODEC with CODEC raw, zstd or
zstd_dict: vision-dense, tokens-dense (token blocks), vision-ragged, tokens-ragged. This is how
a change's effect on every warm row of those scripts is measured in one process, batch by batch
(those scripts time each backend for seconds in turn, and on a shared machine their rounds
differ by 2x). Large-record workloads (vision-*) time --large-batches per build per round.

"Warm": every record is verified and the stores are in the page cache before timing, as in a
training run after its first epoch. Each round times --batches fresh uniform random batches
per build; a round reports each build's median batch as records per second and, for each
build, the ratio of its median to the first build's. The table gives the median over rounds.

Usage: python benchmarks/stores/bench_small_gathers.py --builds old=DIR,new=DIR [--rounds 15]
       [--batches 2000] [--batch 256] [--tmp /dev/shm] [--workload dense-2k,ragged-230]
       [--data DIR --workload vision-dense/zstd_dict,tokens-ragged/raw,... --large-batches 12]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, which holds `common`
from common.device import work_folder

WORKLOADS = ("dense-2k", "ragged-230")
REAL = ("vision-dense", "tokens-dense", "vision-ragged", "tokens-ragged")
CODECS = ("raw", "zstd", "zstd_dict")


def make_real_store(workload: str, data: str, folder: str) -> str:
    """The store of a real WORKLOAD/CODEC under `folder`, written the first time it is asked
    for with the zrecord this script imports (the same files serve every build)."""
    from common.data import Workload
    from common.store import create_kwargs

    from zrecord import Dense, Ragged

    name, codec = workload.split("/")
    path = os.path.join(folder, f"{name}-{codec}")
    if os.path.exists(path):
        return path
    if name == "vision-dense":
        src = np.load(os.path.join(data, "vision_dense.npy"), mmap_mode="r")
    elif name == "tokens-dense":
        src = np.load(os.path.join(data, "token_blocks.npy"), mmap_mode="r")
    else:
        w = Workload("vision_ragged" if name == "vision-ragged" else "tokens", data, None)
        with Ragged.create(path, w.dtype, w.ndim, codec=codec,
                           **create_kwargs(codec, w.ragged.dict_sample())) as wr:  # type: ignore[union-attr]
            wr.append(iter(w.ragged))  # type: ignore[arg-type]
        return path
    with Dense.create(path, src.dtype, src.shape[1:], codec=codec,
                      **create_kwargs(codec, src)) as wd:
        wd.append(src)
    return path


def make_stores(folder: str) -> dict[str, str]:
    from zrecord import Dense, Ragged

    rng = np.random.default_rng(0)
    paths = {"dense-2k": os.path.join(folder, "dense-2k"),
             "ragged-230": os.path.join(folder, "ragged-230")}
    with Dense.create(paths["dense-2k"], np.int32, (512,), codec="raw", data_shards=4) as w:
        for _ in range(16):
            w.append(rng.integers(0, 50_000, size=(4096, 512), dtype=np.int32))
    lengths = rng.integers(16, 101, size=127_633)
    tokens = rng.integers(0, 50_000, size=int(lengths.sum()), dtype=np.int32)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    with Ragged.create(paths["ragged-230"], np.int32, 1, codec="raw", data_shards=4) as w:
        w.append(tokens[starts[i]:starts[i + 1]] for i in range(len(lengths)))
    return paths


def load_native(name: str, folder: str) -> Any:
    """The `_native` extension of the build in `folder`, as its own module."""
    path = os.path.join(folder, "zrecord", "_native.abi3.so")
    spec = importlib.util.spec_from_file_location(f"zr_build_{name}._native", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Handle:
    """A build's reader through whichever binding it has: the `Reader` class, or the module
    functions of builds before it."""

    def __init__(self, native: Any, path: str) -> None:
        self.native = native
        if hasattr(native, "Reader"):
            self.h = native.Reader(os.fsencode(path))
        else:
            self.h = native.reader_open(os.fsencode(path))

    def call(self, name: str, *args: Any) -> Any:
        if hasattr(self.native, "Reader"):
            return getattr(self.h, name)(*args)
        return getattr(self.native, f"reader_{name}")(self.h, *args)

    def free(self) -> None:
        if hasattr(self.native, "Reader"):
            self.h.close()
        else:
            self.native.reader_free(self.h)


def prepare(native: Any, path: str, batches: list[np.ndarray]) -> tuple[_Handle, Any]:
    """Open `path` with `native`, verify every record, and return the handle and a function
    that gathers batch k."""
    handle = _Handle(native, path)
    info = handle.call("info")
    handle.call("verify", 0, info["record_count"])
    batch = len(batches[0])
    if info["kind"] == 1:
        out = np.empty(batch * info["record_size"], np.uint8)
        gather_dense = (handle.h.gather_dense if hasattr(native, "Reader")
                        else lambda *a: native.reader_gather_dense(handle.h, *a))

        def gather(k: int) -> None:
            gather_dense(batches[k], batch, out)
    else:
        offsets = []
        total = 0
        for idx in batches:
            shapes = np.empty((batch, info["ndim"]), np.uint64)
            sizes = np.empty(batch, np.uint64)
            handle.call("shapes", idx, batch, info["ndim"], shapes, sizes)
            offsets.append(np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.uint64))
            total = max(total, int(sizes.sum()))
        out = np.empty(max(total, 1), np.uint8)
        gather_ragged = (handle.h.gather_ragged if hasattr(native, "Reader")
                         else lambda *a: native.reader_gather_ragged(handle.h, *a))

        def gather(k: int) -> None:
            gather_ragged(batches[k], batch, out, offsets[k])
    for k in range(min(64, len(batches))):
        gather(k)
    return handle, gather


def measure_workload(args: argparse.Namespace, workload: str, path: str, natives: dict,
                     names: list[str]) -> None:
    """Every build's gathers of one store, `args.rounds` rounds, printed as one row per build."""
    with open(os.path.join(path, "header.zrh"), "rb") as f:
        count = int.from_bytes(f.read()[24:32], "little")
    rates: dict[str, list[float]] = {name: [] for name in names}
    ratios: dict[str, list[float]] = {name: [] for name in names}
    nbatches = args.large_batches if workload.startswith("vision") else args.batches
    for r in range(args.rounds):
        # Every round opens the builds' readers afresh, in rotated order, and gives each
        # its own batches (with shared ones, whichever build ran a batch second would
        # find its records in the CPU caches). Identical builds differ by up to ~10%
        # within one round, by where their index copies and mappings happen to lie;
        # rotating and re-drawing spreads that over all builds.
        order = names[r % len(names):] + names[:r % len(names)]
        gathers = {}
        handles = {}
        for b, name in enumerate(order):
            rng = np.random.default_rng(1000 * r + b)
            batches = [rng.integers(0, count, size=args.batch, dtype=np.uint64)
                       for _ in range(nbatches)]
            handles[name], gathers[name] = prepare(natives[name], path, batches)
        times: dict[str, list[int]] = {name: [] for name in names}
        for k in range(nbatches):
            shift = k % len(names)
            for name in order[shift:] + order[:shift]:
                t0 = time.perf_counter_ns()
                gathers[name](k)
                times[name].append(time.perf_counter_ns() - t0)
        medians = {name: statistics.median(t) for name, t in times.items()}
        for name in names:
            rates[name].append(args.batch / (medians[name] * 1e-9))
            ratios[name].append(medians[names[0]] / medians[name])
        for name in names:
            handles[name].free()
    for name in names:
        v, q = rates[name], ratios[name]
        print(f"  {workload:23s} {name:8s} {statistics.median(v):>12,.0f} "
              f"({min(v):,.0f}..{max(v):,.0f})  {statistics.median(q):.3f}x "
              f"({min(q):.3f}..{max(q):.3f})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--builds", required=True, help="NAME=DIR,NAME=DIR,... (the first is the base)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--batches", type=int, default=2000, help="batches per build per round")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--tmp", default=None, type=work_folder,
                    help="folder for the stores, made if missing (default: a temp dir)")
    ap.add_argument("--workload", default=",".join(WORKLOADS),
                    help=f"comma-separated, of {', '.join(WORKLOADS)} (default both), and with "
                         f"--data of {', '.join(REAL)} as NAME/CODEC")
    ap.add_argument("--data", default=None, help="output folder of prepare_data.py")
    ap.add_argument("--large-batches", type=int, default=12,
                    help="batches per build per round for vision-* workloads (default 12)")
    args = ap.parse_args()
    workloads = [w for w in args.workload.split(",") if w]
    real = [f"{n}/{c}" for n in REAL for c in CODECS] if args.data else []
    if any(w not in WORKLOADS and w not in real for w in workloads):
        ap.error(f"unknown workload in {workloads}; known: {', '.join(WORKLOADS)}"
                 + (f", {', '.join(real)}" if real else " (and the real ones, with --data)"))
    builds = dict(item.split("=", 1) for item in args.builds.split(","))
    names = list(builds)
    import zrecord  # noqa: F401 - the extensions import zrecord.errors when they load
    natives = {name: load_native(name, folder) for name, folder in builds.items()}
    folder = tempfile.mkdtemp(prefix="zr-bench-small-", dir=args.tmp)
    try:
        paths = make_stores(folder) if any(w in WORKLOADS for w in workloads) else {}
        for w in workloads:
            if w not in WORKLOADS:
                paths[w] = make_real_store(w, args.data, folder)
        print(f"records/s of the median batch (batch {args.batch}, {args.batches} batches per "
              f"build per round, {args.rounds} rounds): median over rounds (min..max); ratio to "
              f"{names[0]}: median of the rounds' ratios (min..max)")
        for workload in workloads:
            measure_workload(args, workload, paths[workload], natives, names)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
