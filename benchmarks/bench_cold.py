"""Cold-read benchmark: random gathers and DataLoaders with the data evicted from the page
cache, beside the storage device's own random-read ceiling, measured in the same run.

Workloads (bench_matrix.WORKLOADS, built by benchmarks/prepare_data.py):
  vision_dense   (N, 3, 224, 224) uint8, 147 KiB per record
  vision_ragged  native-resolution CHW uint8 images, every axis varies (~1.2 MiB mean)
  token_blocks   (M, 512) int32, 2 KiB per record
  tokens         variable-length int32 GPT-2 token records (~230 B mean)

Cold gathers. Every backend's files are written durably into one folder on a real disk
(--tmp, default the system's temporary folder; a tmpfs is refused, or with --allow-tmpfs every
table says its figures are page-cache figures) and checked against the source (full sweep and
random batches). Then, for every timed batch:
  untimed  open the store fresh; evict its payload files from the page cache with
           posix_fadvise(POSIX_FADV_DONTNEED) (--evict-index: its index/meta files too, and
           before the open as well); measure what stayed resident (mincore)
  timed    gather one fresh uniform IID batch (--batch, default 256)
  untimed  check the batch against the source (exact dtype, shape, order, values); close.
The store is reopened for every batch because DONTNEED cannot drop a page that a process has
mapped: a store kept open would keep every page it once touched through a mapping, and later
batches would read them warm. Backends, each measured on the same batches in a round:
  zrecord-<codec>        our stores (raw, zstd, and zstd_dict for the token workloads), in a
                         fresh subprocess of this script
  loaderx-2.5.9-<codec>  the published loaderx in its own venv (--peer PYTHON), the same
                         script as a subprocess
  npy-mmap               a copy of the source .npy in the same folder: np.load(mmap_mode='r')
                         per batch, then fancy indexing (Dense) or one slice copied per record
                         (Ragged, offsets and shapes in memory)
and the device's ceiling: random O_DIRECT reads of the mean record size rounded up to 4 KiB, at
queue depth 1, 8, 32 and 128, over the npy copy (a file of the workload's size on the same
disk), by fio or benchmarks/device.py's probe (the table names which). Every row gives
records/s, logical MiB/s, its percent of the QD-32 and QD-1 ceilings (records/s against IOPS
for records up to 4 KiB, logical MiB/s against bandwidth for larger ones), the device bytes
read per batch (/proc/self/io read_bytes: what the process made the kernel fetch, readahead
included) and the payload bytes still resident after eviction. Medians over --rounds rounds of
--batches timed batches each (or --seconds of timed gathers).

Cold DataLoaders (vision_dense and tokens): our DataLoader (--loader-workers threads, IID
Sampler) over our raw store against torch.utils.data.DataLoader (fork, the same number of
worker processes, a per-sample Dataset over NumPy memory maps, IID sampling with replacement;
on request, --loaders torch-fork-random, the same with its maps advised MADV_RANDOM), each in
its own process: batches/s, records/s, MiB/s, the peak PSS of the process tree
(bench.PeakPss) and the device bytes it read per batch (read_bytes of the process tree,
readahead included). Two ways to keep them cold (--cold-method; auto, the default: cgroup
where this process can make a memory cgroup, else evict, saying why):
  cgroup  each loader's process tree runs in a memory cgroup of its own (cgroup v1
          memory.limit_in_bytes or v2 memory.max = --cold-loader-limit, default 1.5 GiB; made
          below this process's own memory cgroup, the process entering it before it execs the
          loader, and removed afterwards, also on errors) over a larger dataset: the
          workload's real records repeated to --cold-loader-bytes (default 4 GiB), as our raw
          store and as the NumPy files PyTorch maps, built once into
          --tmp/bench-cold-loader-data outside any timing and checked against the source.
          Before each loader every file of the dataset is dropped from the page cache
          (posix_fadvise DONTNEED; nothing has them mapped then). The page cache a process
          tree brings in is charged to its group, and at the limit the kernel reclaims the
          group's own pages, mapped ones included, so with the data several times the limit
          most IID reads are cold for every loader however it reads; no evictor runs. The
          loaders' libraries are imported once outside the groups first, so that their code
          is not charged to the limit. The table gives each dataset's size against the limit,
          the group's peak charge, and the share of the loader's files cached at the end.
  evict   each loader reads the workload's own files while a separate process evicts them
          every --evict-interval-ms (30) and records what stays resident right after each
          eviction. Pages that a process has mapped (PyTorch's memory maps; zrecord's mappings
          of small-record shards) cannot be evicted, so such a loader reads part of its data
          warm, while pages hinted but not yet read are evicted; the table says how much
          stayed.

--larger-than-ram (opt-in, never in CI): writes a raw Dense store of repeated real vision
records of at least 1.25x RAM (refused, before anything is written, if the folder lacks the
room), then runs our DataLoader IID and CYCLIC over it for --ltr-seconds (>= 60) each, every
run in a process of its own started with the store dropped from the page cache. RAM is
MemTotal, or with --ltr-memory-limit SIZE the memory limit of a cgroup: each run then has a
fresh memory cgroup of that limit (made and removed as in the cgroup method above), its page
cache charged to it, so a store that fits a small disk is still 1.25x the memory the loader
can use. --ltr-cache auto|bypass|both (default both) runs each sampler over the store as
opened by default and/or with cache="bypass" (records of 32 KiB and more read with O_DIRECT,
which does not fill the page cache). Reported per run: batches/s over the whole run and its
first and last quarter, the process's RSS and PSS every second (page cache excluded: only
what the process holds; JSON: samples, with the cgroup's charge), the device MiB per batch,
the cgroup's peak charge against the limit, its limit hits and OOM kills, and the ratio of
batches/s to two references: the evicted-cache figure (the same loader over the small store
while a separate process evicts its files every --evict-interval-ms; that evictor also drops
pages the loader has hinted but not read yet, so the figure can understate cold reads) and
the cold-pass figure (the same loader over the large store in CYCLIC's first cycle, where no
record is read twice, started cold, with room for all of it: with --ltr-memory-limit in a
cgroup of the store's size plus 2 GiB).

Usage: python benchmarks/bench_cold.py [--workload tokens,vision_dense,...] [--rounds 3]
       [--batches 10 | --seconds S] [--peer /path/to/venv/bin/python] [--tmp DIR] [--json OUT]
       [--parts gather,loaders] [--evict-index] [--larger-than-ram]
       [--cold-method auto|cgroup|evict] [--cold-loader-bytes 4G] [--cold-loader-limit 1.5G]
       [--ltr-seconds 60] [--ltr-memory-limit 4G] [--ltr-cache auto|bypass|both]
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import importlib.util
import inspect
import json
import math
import mmap
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import device
import numpy as np
from bench import PeakPss, tree_pids
from bench_matrix import WORKLOADS, Workload, verify
from benchcommon import (
    OURS,
    STORE_LABEL,
    Dense,
    Ragged,
    add_arguments,
    builds,
    create_kwargs,
    disk_bytes,
    header,
    measure_rounds,
    median_rows,
    summarize,
)

PAGE = mmap.PAGESIZE
DEPTHS = (1, 8, 32, 128)
TOKEN_WORKLOADS = ("token_blocks", "tokens")  # the only ones zstd_dict is measured on
LOADER_WORKLOADS = ("vision_dense", "tokens")
LOADERS = ("loaderx", "torch-fork", "torch-fork-random")  # the last one only on request
# Room a run needs beyond its stores, and what --larger-than-ram leaves free on the disk.
HEADROOM_BYTES = 2 << 30
# Loader figures beyond benchcommon.METRICS that the round medians cover too.
LOADER_EXTRA = ("cgroup_peak_mib", "resident_start_pct", "resident_pct_max", "limit_hits", "oom_kills")
CGROUP_ROOT = "/sys/fs/cgroup"
BYTE_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
MAPPED_NOTE = ("posix_fadvise(DONTNEED) cannot evict pages that a process has mapped: a "
               "loader that reads through memory maps keeps what it touched warm")


# -- the page cache ----------------------------------------------------------------------------


def evict(paths: list[str]) -> None:
    """Drop the clean, unmapped page-cache pages of every file in `paths`."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


@functools.cache
def _libc() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long)
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte))
    return libc


def resident_bytes(paths: list[str]) -> int:
    """Bytes of `paths` in the page cache, by mincore(2) over a fresh mapping of each file.

    Mapping a file faults nothing in, and unmapping it leaves the cache as it was, so the
    probe changes nothing it measures.
    """
    libc, total = _libc(), 0
    for p in paths:
        size = os.path.getsize(p)
        if size == 0:
            continue
        fd = os.open(p, os.O_RDONLY)
        try:
            addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            if addr in (None, ctypes.c_void_p(-1).value):
                raise OSError(ctypes.get_errno(), f"mmap of {p} failed")
            try:
                vec = (ctypes.c_ubyte * ((size + PAGE - 1) // PAGE))()
                if libc.mincore(addr, size, vec) != 0:
                    raise OSError(ctypes.get_errno(), f"mincore of {p} failed")
                total += int((np.frombuffer(vec, np.uint8) & 1).sum()) * PAGE
            finally:
                libc.munmap(addr, size)
        finally:
            os.close(fd)
    return total


def read_bytes(pid: int | str = "self") -> int | None:
    """Bytes the process made the kernel fetch from storage (/proc/PID/io read_bytes:
    readahead included, page-cache hits excluded); None where the kernel does not say."""
    try:
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def tree_read_bytes(pid: int) -> int | None:
    values = [read_bytes(p) for p in tree_pids(pid)]
    return sum(v for v in values if v is not None) if any(v is not None for v in values) else None


def fsync_tree(path: str) -> None:
    """fsync every file below `path`, the folders, and the folder holding `path`."""
    for dirpath, _, files in os.walk(path):
        for name in [*files, "."]:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- the stores and the NumPy copies -----------------------------------------------------------


def store_path(root: str, label: str, workload: str, codec: str) -> str:
    return os.path.join(root, f"{label}-{workload}-{codec}")


def store_files(path: str) -> tuple[list[str], list[str]]:
    """(payload files, index files) of a store folder: ours are data-NNN.zrd beside index.zri
    and header.zrh, the published loaderx's data_*.zr beside meta.zr."""
    payload, index = [], []
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if os.path.isfile(full):
            (payload if name.startswith("data") else index).append(full)
    return payload, index


def codecs_for(name: str, codecs: list[str]) -> list[str]:
    return [c for c in codecs if c != "zstd_dict" or name in TOKEN_WORKLOADS]


def ensure_store(w: Workload, codec: str, root: str, batch: int) -> str:
    """This library's store of `w` with `codec` under `root`, written durably and checked the
    first time it is asked for (later rounds reuse it)."""
    path = store_path(root, STORE_LABEL, w.name, codec)
    if os.path.exists(path):
        return path
    sample = w.dense if w.dense is not None else w.ragged.dict_sample()  # type: ignore[union-attr]
    extra = create_kwargs(codec, sample)
    if w.dense is not None:
        with Dense.create(path, w.dtype, w.item_shape, codec=codec, **extra) as writer:
            writer.append(w.dense)
    else:
        with Ragged.create(path, w.dtype, w.ndim, codec=codec, **extra) as writer:
            writer.append(iter(w.ragged))  # type: ignore[arg-type]
    if not OURS:  # the published loaderx never flushes: make it durable
        fsync_tree(path)
    store = open_store(w, path)
    try:
        verify(STORE_LABEL, w, lambda idx: store[idx], batch)
    finally:
        store.close()
    return path


def open_store(w: Workload, path: str, cache: str = "auto") -> Any:
    cls = Dense if w.kind == "dense" else Ragged
    return cls.open(path, cache=cache) if cache != "auto" else cls.open(path)


def ensure_npy(w: Workload, root: str) -> dict[str, str]:
    """Durable copies of the workload's NumPy files under `root`: Dense `records`; Ragged a
    flat `payload` plus `offsets` and `shapes`. The copies, not the prepared files, are
    measured: anyone may hold the shared data folder's files mapped, and mapped pages cannot
    be evicted."""
    folder = os.path.join(root, f"npy-{w.name}")
    names = ("records",) if w.kind == "dense" else ("payload", "offsets", "shapes")
    paths = {n: os.path.join(folder, f"{n}.npy") for n in names}
    if os.path.exists(folder):
        return paths
    part = folder + ".partial"
    shutil.rmtree(part, ignore_errors=True)
    os.makedirs(part)
    if w.dense is not None:
        shutil.copyfile(w.dense.filename, os.path.join(part, "records.npy"))  # type: ignore[attr-defined]
    else:
        src = w.ragged
        assert src is not None
        shutil.copyfile(src.files[0], os.path.join(part, "payload.npy"))
        np.save(os.path.join(part, "offsets.npy"), np.asarray(src.offsets, np.int64))
        np.save(os.path.join(part, "shapes.npy"), np.asarray(src.shapes, np.int64))
    fsync_tree(part)
    os.rename(part, folder)
    return paths


def npy_opener(w: Workload, paths: dict[str, str]) -> Callable[[], tuple[Callable[[np.ndarray], Any],
                                                                        Callable[[], None]]]:
    """Opens the npy copy afresh: (gather, close). Dense gathers fancy-index the memory map;
    Ragged gathers copy one slice of the flat payload per record, as bench_ragged.py does."""
    if w.kind == "dense":
        def open_dense() -> tuple[Callable[[np.ndarray], Any], Callable[[], None]]:
            arr: Any = np.load(paths["records"], mmap_mode="r")

            def close() -> None:
                nonlocal arr
                arr = None  # the last reference: the mapping goes with it
            return (lambda idx: arr[idx]), close
        return open_dense
    offsets = np.load(paths["offsets"])
    shapes = np.load(paths["shapes"])

    def open_ragged() -> tuple[Callable[[np.ndarray], Any], Callable[[], None]]:
        payload: Any = np.load(paths["payload"], mmap_mode="r")

        def gather(idx: np.ndarray) -> list[np.ndarray]:
            return [np.array(payload[offsets[i]:offsets[i + 1]]).reshape(shapes[i]) for i in idx]

        def close() -> None:
            nonlocal payload
            payload = None
        return gather, close
    return open_ragged


# -- cold gathers ------------------------------------------------------------------------------


def cold_gathers(label: str, w: Workload, opener: Callable[[], tuple[Callable[[np.ndarray], Any],
                                                                     Callable[[], None]]],
                 payload: list[str], index: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """Time one gather per fresh open, each after evicting the files: a row of figures."""
    rng = np.random.default_rng(args.seed)
    payload_bytes = sum(os.path.getsize(p) for p in payload)
    times: list[float] = []
    opens, reads, resident = [], [], []
    while (len(times) < args.batches) if args.seconds <= 0 else (sum(times) < args.seconds or len(times) < 2):
        idx = rng.integers(0, w.n, args.batch)
        victims = payload + (index if args.evict_index else [])
        if args.evict_index:
            evict(victims)
        t = time.perf_counter()
        gather, close = opener()
        opens.append(time.perf_counter() - t)
        try:
            evict(victims)
            resident.append(resident_bytes(payload))
            before = read_bytes()
            t = time.perf_counter()
            got = gather(idx)
            times.append(time.perf_counter() - t)
            after = read_bytes()
            if before is not None and after is not None:
                reads.append(after - before)
            w.check(label, idx, got)
            del got
        finally:
            close()
    row = summarize(label, times, args.batch, w.nbytes / w.n)
    row["open_ms"] = float(np.median(opens)) * 1e3
    row["resident_pct"] = 100.0 * max(resident) / max(1, payload_bytes)
    if reads:
        row["read_mib_batch"] = float(np.median(reads)) / 2**20
    return row


def can_bypass() -> bool:
    """Whether this library's stores open with cache="bypass" (zrecord 0.2 and later)."""
    return OURS and "cache" in inspect.signature(Dense.open).parameters


def run_stores(w: Workload, args: argparse.Namespace) -> list[dict[str, Any]]:
    """In a --stores-only child: this library's stores of `w`, one row per codec (and with
    --bypass, one more per codec opened with cache="bypass")."""
    rows = []
    caches = ["auto", "bypass"] if args.bypass and can_bypass() else ["auto"]
    for codec in codecs_for(w.name, args.codecs):
        path = ensure_store(w, codec, args.store_root, args.batch)
        payload, index = store_files(path)
        for cache in caches:
            def opener(path: str = path, cache: str = cache) -> tuple[Callable[[np.ndarray], Any],
                                                                       Callable[[], None]]:
                store = open_store(w, path, cache)
                return (lambda idx: store[idx]), store.close

            label = f"{STORE_LABEL}-{codec}" + ("-bypass" if cache == "bypass" else "")
            row = cold_gathers(label, w, opener, payload, index, args)
            row["disk_mib"] = disk_bytes(path) / 2**20
            rows.append(row)
    return rows


def npy_row(w: Workload, paths: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    data = [paths["records" if w.kind == "dense" else "payload"]]
    index = [p for k, p in paths.items() if k in ("offsets", "shapes")]
    row = cold_gathers("npy-mmap", w, npy_opener(w, paths), data, index, args)
    row["disk_mib"] = sum(disk_bytes(p) for p in paths.values()) / 2**20
    return row


def mean_record_bytes(w: Workload) -> float:
    return w.nbytes / w.n


def median_ceiling(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The device ceilings of every round in one: per queue depth, the median IOPS and MiB/s
    over the rounds; the rounds themselves under "rounds"."""
    first = rounds[0]
    depths = {d: {key: statistics.median(r["depths"][d][key] for r in rounds)
                  for key in ("iops", "mib_s")} for d in first["depths"]}
    return {**first, "depths": depths, "rounds": rounds}


def add_ceiling_shares(rows: list[dict[str, Any]], ceiling: dict[str, Any], record: float) -> str:
    """Each row's percent of the QD-32 and QD-1 ceilings; returns the basis ("iops" for
    records up to 4 KiB, where every record costs at least one read, else "bandwidth")."""
    basis = "iops" if record <= device.ALIGN else "bandwidth"
    for r in rows:
        if "mib_s" not in r:
            continue
        for depth in ("32", "1"):
            cap = ceiling["depths"][depth]
            share = (r["krecords_s"] * 1e3 / cap["iops"] if basis == "iops"
                     else r["mib_s"] / cap["mib_s"])
            r[f"pct_qd{depth}"] = 100.0 * share
    return basis


# -- cold DataLoaders --------------------------------------------------------------------------


class RaggedMmapDataset:
    """PyTorch's ordinary recipe for variable-length records: a per-sample Dataset over a
    memory-mapped flat payload, its offsets in memory, opened lazily in each worker.

    Records are returned as NumPy arrays, not tensors: a worker hands each tensor of a batch to
    the main process through its own shared-memory segment, which made the 256 tensors of a
    token batch cost ~0.2 s (4.9 batches/s here), while NumPy arrays travel pickled in one
    message. The stronger baseline is the fairer one.
    """

    def __init__(self, payload: str, offsets: str, random: bool = False) -> None:
        self.path = payload
        self.offsets = np.load(offsets)
        self.payload: np.ndarray | None = None
        self.random = random

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        if self.payload is None:
            self.payload = np.load(self.path, mmap_mode="r")
            if self.random:
                advise_random(self.payload)
        return np.array(self.payload[self.offsets[i]:self.offsets[i + 1]])


def advise_random(arr: Any) -> None:
    """madvise(MADV_RANDOM) on a NumPy memory map: a page fault then reads its page alone,
    not the kernel's read-around window (read_ahead_kb, centred on the page)."""
    arr._mmap.madvise(mmap.MADV_RANDOM)


class RandomMmapDataset:
    """bench.MmapDataset (a per-sample Dataset over a read-only memory map) whose map, opened
    lazily in each worker, is advised MADV_RANDOM: the loader "torch-fork-random"."""

    def __init__(self, path: str) -> None:
        from bench import MmapDataset

        self.inner = MmapDataset(path)

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i: int) -> Any:
        if self.inner.images is None:
            self.inner.images = np.load(self.inner.path, mmap_mode="r")
            advise_random(self.inner.images)
        return self.inner[i]


def collate_list(samples: list[Any]) -> list[Any]:
    """Variable-length records cannot be stacked: a batch is the list, as ours returns."""
    return samples


def child_loader(args: argparse.Namespace) -> dict[str, Any]:
    """One loader over one workload's cold files, in this process (and its workers)."""
    kind = WORKLOADS[args.workload][0]
    npy = args.loader_npy or os.path.join(args.store_root, f"npy-{args.workload}")
    if args.loader == "loaderx":
        from loaderx.dataloader import DataLoader
        from loaderx.sampler import Sampler

        store = (Dense if kind == "dense" else Ragged).open(
            args.loader_store or store_path(args.store_root, STORE_LABEL, args.workload, "raw"))
        sampler = Sampler(len(store), args.batch, Sampler.Mode.IID, seed=args.seed)
        loader: Any = DataLoader({"x": store}, sampler, workers=args.loader_workers, prefetch=4)
        batches: Any = loader
        closers = [loader.close, store.close]
    else:
        import torch
        from bench import MmapDataset

        random = args.loader.endswith("-random")
        if kind == "dense":
            path = os.path.join(npy, "records.npy")
            ds: Any = RandomMmapDataset(path) if random else MmapDataset(path)
            collate = None
        else:
            ds = RaggedMmapDataset(os.path.join(npy, "payload.npy"),
                                   os.path.join(npy, "offsets.npy"), random)
            collate = collate_list
        sampler = torch.utils.data.RandomSampler(
            ds, replacement=True, num_samples=1 << 40,
            generator=torch.Generator().manual_seed(args.seed))
        loader = torch.utils.data.DataLoader(
            ds, batch_size=args.batch, sampler=sampler, drop_last=True, collate_fn=collate,
            num_workers=args.loader_workers, multiprocessing_context="fork",
            persistent_workers=True, prefetch_factor=2)
        batches = iter(loader)
        closers = []
    for _ in range(args.loader_warmup):
        next(batches)
    peak = PeakPss()
    before = tree_read_bytes(os.getpid())
    start = time.monotonic()  # CLOCK_MONOTONIC: the evictor's clock too
    done = 0
    while done < args.loader_batches or time.monotonic() - start < args.loader_seconds:
        next(batches)
        done += 1
    end = time.monotonic()
    after = tree_read_bytes(os.getpid())
    pss = peak.stop()
    for close in closers:
        close()
    out = {"batches_per_s": done / (end - start), "timed_batches": done, "peak_pss_mib": pss / 2**20,
           "window": [start, end]}
    if before is not None and after is not None:
        out["read_mib_batch"] = (after - before) / done / 2**20
    return out


def child_evictor(args: argparse.Namespace) -> dict[str, Any]:
    """Evict `--files` every --evict-interval-ms until SIGTERM. Each eviction is followed by
    a residency probe: what stays is what a process has mapped (or read again within
    microseconds). Returns [CLOCK_MONOTONIC time, resident percent] per eviction."""
    files = args.files.split(os.pathsep)
    total = max(1, sum(os.path.getsize(p) for p in files))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    samples = []
    while not stop.is_set():
        evict(files)
        samples.append((time.monotonic(), 100.0 * resident_bytes(files) / total))
        stop.wait(args.evict_interval_ms / 1e3)
    return {"samples": samples}


def child_command(args: argparse.Namespace, what: str, *extra: str) -> list[str]:
    return [sys.executable, __file__, "--child", what, "--data", args.data,
            "--store-root", args.store_root, "--batch", str(args.batch), *extra]


def child_result(out: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The JSON line a loader child printed last, or {"status": why it failed}."""
    if out.returncode < 0:  # killed: its last words are whatever it printed before
        return {"status": f"failed: killed by {signal.Signals(-out.returncode).name}"}
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return {"status": f"failed (exit {out.returncode}): {tail}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def loader_command(args: argparse.Namespace, name: str, workload: str, round_: int,
                   *extra: str) -> list[str]:
    return child_command(args, "loader", "--loader", name, "--workload", workload,
                         "--loader-workers", str(args.loader_workers), "--loader-batches",
                         str(args.loader_batches), "--loader-seconds", str(args.loader_seconds),
                         "--loader-warmup", str(args.loader_warmup), "--seed", str(round_), *extra)


def finish_row(row: dict[str, Any], args: argparse.Namespace, record_bytes: float) -> None:
    """Records/s, logical MiB/s and the logical MiB of one batch, from batches/s."""
    row["batch_mib"] = args.batch * record_bytes / 2**20
    if "batches_per_s" in row:
        row["krecords_s"] = row["batches_per_s"] * args.batch / 1e3
        row["mib_s"] = row["batches_per_s"] * row["batch_mib"]


def run_with_evictor(args: argparse.Namespace, files: list[str],
                     cmd: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run `cmd` (a child printing one JSON line last) while a separate process evicts
    `files`; returns (the child's result, the evictor's)."""
    evictor = subprocess.Popen(
        [sys.executable, __file__, "--child", "evictor", "--files", os.pathsep.join(files),
         "--evict-interval-ms", str(args.evict_interval_ms)], stdout=subprocess.PIPE, text=True)
    try:
        out = subprocess.run(cmd, capture_output=True, text=True)
    finally:
        evictor.send_signal(signal.SIGTERM)
        lines = evictor.communicate(timeout=60)[0].strip().splitlines()
    # An evictor stopped before it could install its handler printed nothing.
    samples = json.loads(lines[-1])["samples"] if lines else []
    result = child_result(out)
    if "status" in result:
        return result, {}
    start, end = result.pop("window")
    shares = [pct for t, pct in samples if start <= t <= end]
    return result, {"evictions": len(shares),
                    "resident_pct_mean": float(np.mean(shares)) if shares else float("nan"),
                    "resident_pct_max": float(np.max(shares)) if shares else float("nan")}


def loader_row(name: str, w: Workload) -> dict[str, Any]:
    """A loader's row, with a status if it cannot run here. "backend" keys the round medians,
    so it names the workload too."""
    row: dict[str, Any] = {"backend": f"{name}/{w.name}", "loader": name, "workload": w.name}
    if name.startswith("torch") and importlib.util.find_spec("torch") is None:
        row["status"] = "torch is not installed (pip install torch)"
    return row


def loader_rows(w: Workload, args: argparse.Namespace, npy: dict[str, str],
                round_: int) -> list[dict[str, Any]]:
    """One round of every loader over `w`, each in its own process beside an evictor."""
    rows = []
    ours = ensure_store(w, "raw", args.store_root, args.batch)
    for name in args.loaders:
        row = loader_row(name, w)
        if "status" in row:
            rows.append(row)
            continue
        files = store_files(ours)[0] if name == "loaderx" else \
            [npy["records" if w.kind == "dense" else "payload"]]
        result, stats = run_with_evictor(args, files, loader_command(args, name, w.name, round_))
        row.update(result)
        if stats:  # evictions during the timed batches, and what each left resident
            row["evictions"] = stats["evictions"]
            row["resident_pct"] = stats["resident_pct_mean"]
            row["resident_pct_max"] = stats["resident_pct_max"]
        finish_row(row, args, mean_record_bytes(w))
        rows.append(row)
    return rows


def median_loader_rows(rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per-loader medians over the rounds that ran (median_rows), the cgroup figures too."""
    ok = [[r for r in rows if "batches_per_s" in r] for rows in rounds]
    if not ok[0]:
        return rounds[0]
    medians = {r["backend"]: r for r in median_rows(ok)}
    for name, row in medians.items():
        seen = [r for rows in ok for r in rows if r["backend"] == name]
        for key in LOADER_EXTRA:
            values = [r[key] for r in seen if key in r]
            if values:
                row["rounds"][key] = values
                row[key] = float(np.median(values))
    return [medians.get(r["backend"], r) for r in rounds[0]]


# -- cold DataLoaders in a memory cgroup -------------------------------------------------------


def parse_bytes(text: str) -> int:
    """A byte count: 300000000, 512M, 1.5G or 4GiB (binary units)."""
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = t[-1] if t and t[-1] in BYTE_UNITS else ""
    return int(float(t[:len(t) - len(unit)]) * BYTE_UNITS[unit])


def per_workload(text: str, names: tuple[str, ...]) -> dict[str, int]:
    """`4G` for every workload in `names`, or `vision_dense=4G,tokens=2G`: a bare value sets
    every workload, NAME=value one of them (later items win). Raises ValueError."""
    out: dict[str, int] = {}
    for item in (x for x in text.split(",") if x):
        name, _, value = item.rpartition("=")
        if name and name not in names:
            raise ValueError(f"{name!r} is not one of {list(names)}")
        out.update({n: parse_bytes(value) for n in ([name] if name else names)})
    if missing := [n for n in names if n not in out]:
        raise ValueError(f"no value for {missing} in {text!r}")
    return out


def read_text(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


class CgroupUnavailable(RuntimeError):
    """Why this process cannot bound a child's memory with a cgroup of its own."""


def own_cgroup(version: str) -> str:
    """This process's memory cgroup as /proc/self/cgroup names it ("/": the root)."""
    for line in read_text("/proc/self/cgroup").splitlines():
        hier, ctrls, path = line.split(":", 2)
        if (version == "v1" and "memory" in ctrls.split(",")) or (version == "v2" and hier == "0"):
            return path
    return "/"


def cgroup_base() -> tuple[str, str]:
    """(version, folder): where a loader's memory cgroup can be made, checked by making and
    removing one. The folder is this process's own memory cgroup (on a host's shell, the
    root; in a container or a session's cgroup, that one), so that a loader stays inside
    whatever limits and accounting its parent has. Raises CgroupUnavailable with the reason."""
    if os.path.isfile(os.path.join(CGROUP_ROOT, "memory", "memory.limit_in_bytes")):
        version, mount = "v1", os.path.join(CGROUP_ROOT, "memory")
    elif "memory" in read_text(os.path.join(CGROUP_ROOT, "cgroup.controllers")).split():
        version, mount = "v2", CGROUP_ROOT
    else:
        raise CgroupUnavailable(f"no memory controller at {CGROUP_ROOT}/memory (cgroup v1) nor "
                                f"in {CGROUP_ROOT}/cgroup.controllers (v2)")
    base = os.path.join(mount, own_cgroup(version).lstrip("/"))
    if not os.path.isdir(base):  # a path of another cgroup namespace: the mount's root
        base = mount
    if version == "v2" and "memory" not in read_text(
            os.path.join(base, "cgroup.subtree_control")).split():
        raise CgroupUnavailable(f"the v2 cgroup {base} does not enable the memory controller "
                                "for its children (cgroup.subtree_control)")
    try:
        MemoryCgroup(version, base, "probe", 1 << 30).remove()
    except OSError as exc:
        raise CgroupUnavailable(f"cannot make a memory cgroup in {base}: {exc}") from exc
    return version, base


class MemoryCgroup:
    """A memory cgroup of one loader's process tree, with a limit on what its processes may
    hold, page cache included. At the limit the kernel reclaims the group's own pages, file
    pages that a process has mapped as well (which posix_fadvise(DONTNEED) never evicts), so
    the page cache a loader can keep is bounded whatever way it reads.

    `command` wraps a command line so that its process enters the group before it execs the
    command: all that it and its children then allocate or bring into the page cache is
    charged to the group. `remove` (also on leaving a with block) kills what is left in the
    group (only this benchmark's processes) and removes it.
    """

    def __init__(self, version: str, base: str, name: str, limit: int) -> None:
        self.version = version
        self.path = os.path.join(base, f"zr-bench-{os.getpid()}-{name}")
        os.mkdir(self.path)
        try:
            limit_file = "memory.limit_in_bytes" if version == "v1" else "memory.max"
            with open(os.path.join(self.path, limit_file), "w") as f:
                f.write(str(limit))
        except OSError:
            self.remove()
            raise

    def __enter__(self) -> MemoryCgroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def command(self, cmd: list[str]) -> list[str]:
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"',
                os.path.join(self.path, "cgroup.procs"), *cmd]

    def usage_file(self) -> str:
        """The file that says what the group is charged now."""
        return os.path.join(self.path, "memory.usage_in_bytes" if self.version == "v1"
                            else "memory.current")

    def stats(self) -> dict[str, int]:
        """peak (bytes charged at most; absent where a v2 kernel lacks memory.peak), limit_hits
        (v1: charges that met the limit; v2: memory.events max) and oom_kills."""
        def fields(name: str) -> dict[str, int]:
            pairs = (line.split() for line in read_text(os.path.join(self.path, name)).splitlines())
            return {p[0]: int(p[1]) for p in pairs if len(p) == 2 and p[1].isdigit()}

        def number(name: str) -> int | None:
            text = read_text(os.path.join(self.path, name)).strip()
            return int(text) if text.isdigit() else None

        if self.version == "v1":
            out = {"peak": number("memory.max_usage_in_bytes"),
                   "limit_hits": number("memory.failcnt"),
                   "oom_kills": fields("memory.oom_control").get("oom_kill")}
        else:
            events = fields("memory.events")
            out = {"peak": number("memory.peak"), "limit_hits": events.get("max"),
                   "oom_kills": events.get("oom_kill")}
        return {k: v for k, v in out.items() if v is not None}

    def remove(self) -> None:
        """Kill the processes left in the group, then remove it (rmdir waits for the kernel
        to let go of them)."""
        deadline = time.monotonic() + 10
        while True:
            pids = [int(p) for p in read_text(os.path.join(self.path, "cgroup.procs")).split()]
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:  # EBUSY while a process is still on its way out
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


def choose_method(args: argparse.Namespace) -> tuple[str, tuple[str, str] | None, str]:
    """("cgroup", (version, folder), "") or ("evict", None, why not a cgroup)."""
    if args.cold_method == "evict":
        return "evict", None, "--cold-method evict"
    try:
        return "cgroup", cgroup_base(), ""
    except CgroupUnavailable as exc:
        if args.cold_method == "cgroup":
            raise
        print(f"bench_cold: no memory cgroup for the DataLoaders ({exc}); falling back to "
              f"evicting their files every {args.evict_interval_ms:g} ms, where pages that a "
              "loader has mapped stay warm (the table says how many)", file=sys.stderr)
        return "evict", None, str(exc)


# -- the larger dataset of the cgroup measurement ----------------------------------------------


def repeat_spans(n: int, records: int, step: int) -> Any:
    """(first, stop) spans of source indices whose concatenation is records 0..records-1 of
    the source repeated (record i is source record i mod n), at most `step` at a time."""
    done = 0
    while done < records:
        first = done % n
        stop = min(n, first + step, first + records - done)
        yield first, stop
        done += stop - first


def npy_header(f: Any, dtype: np.dtype[Any], shape: tuple[int, ...]) -> None:
    np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(dtype),
                                             "fortran_order": False, "shape": shape})


def write_dense_copies(w: Workload, folder: str, records: int) -> None:
    """`records` repeated records of Dense `w`: our raw store `store` and `npy/records.npy`."""
    src = w.dense
    assert src is not None
    step = max(1, (64 << 20) // src[0].nbytes)
    with Dense.create(os.path.join(folder, "store"), w.dtype, w.item_shape, codec="raw") as out, \
            open(os.path.join(folder, "npy", "records.npy"), "wb") as npy:
        npy_header(npy, w.dtype, (records, *w.item_shape))
        for first, stop in repeat_spans(w.n, records, step):
            chunk = np.ascontiguousarray(src[first:stop])
            out.append(chunk)
            npy.write(memoryview(chunk).cast("B"))


def write_ragged_copies(w: Workload, folder: str, records: int) -> None:
    """`records` repeated records of Ragged `w`: our raw store `store`, and for PyTorch's
    Dataset `npy/payload.npy` (flat) with `npy/offsets.npy` (int64, records + 1)."""
    src = w.ragged
    assert src is not None
    offsets = np.asarray(src.offsets, np.int64) - int(src.offsets[0])
    flat = src.payload[int(src.offsets[0]):]
    views = list(src)  # every source record once: a whole repetition is one append
    total = records // w.n * int(offsets[-1]) + int(offsets[records % w.n])
    npy = os.path.join(folder, "npy")
    with Ragged.create(os.path.join(folder, "store"), w.dtype, w.ndim, codec="raw") as out, \
            open(os.path.join(npy, "payload.npy"), "wb") as payload, \
            open(os.path.join(npy, "offsets.npy"), "wb") as index:
        npy_header(payload, w.dtype, (total,))
        npy_header(index, np.dtype(np.int64), (records + 1,))
        base = 0
        for first, stop in repeat_spans(w.n, records, w.n):
            out.append(views[first:stop])
            payload.write(memoryview(np.ascontiguousarray(
                flat[offsets[first]:offsets[stop]])).cast("B"))
            index.write((offsets[first:stop] - offsets[first] + base).tobytes())
            base += int(offsets[stop] - offsets[first])
        index.write(np.int64(base).tobytes())


def check_cold_data(w: Workload, folder: str, records: int, batch: int) -> None:
    """Random records (and the first and last) of the store and of the NumPy files against
    the source records they repeat: exact dtype, shape, order and values."""
    idx = np.concatenate([np.random.default_rng(1).integers(0, records, batch), [0, records - 1]])
    want = idx % w.n
    store = open_store(w, os.path.join(folder, "store"))
    try:
        if len(store) != records:
            raise AssertionError(f"cold {w.name} store: {len(store)} records, not {records}")
        w.check(f"cold {w.name} store", want, store[idx])
    finally:
        store.close()
    npy = os.path.join(folder, "npy")
    if w.kind == "dense":
        arr: Any = np.load(os.path.join(npy, "records.npy"), mmap_mode="r")
        got: Any = arr[idx] if len(arr) == records else None
        del arr
    else:
        ds = RaggedMmapDataset(os.path.join(npy, "payload.npy"), os.path.join(npy, "offsets.npy"))
        got = [ds[int(i)] for i in idx] if len(ds) == records else None
        del ds
    if got is None:
        raise AssertionError(f"cold {w.name} NumPy files: not {records} records")
    w.check(f"cold {w.name} npy", want, got)


def cold_data_plan(w: Workload, cache: str, target: int) -> dict[str, Any]:
    """Where the larger dataset of `w` for `target` logical bytes lives, and what identifies
    it: the record count, the source files (name, size, mtime) and this zrecord."""
    records = max(w.n, math.ceil(target / mean_record_bytes(w)))
    files = [w.dense.filename] if w.dense is not None else w.ragged.files  # type: ignore[union-attr]
    key = {"workload": w.name, "records": records, "store": f"{STORE_LABEL} {zrecord_version()}",
           "source": [[os.path.basename(p), os.path.getsize(p), int(os.path.getmtime(p))]
                      for p in files]}
    return {"folder": os.path.join(cache, f"{w.name}-{records}"), "records": records, "key": key}


def zrecord_version() -> str:
    from benchcommon import zrecord

    return str(getattr(zrecord, "__version__", "")) if OURS else STORE_LABEL


def cold_data_ready(plan: dict[str, Any]) -> bool:
    info = read_text(os.path.join(plan["folder"], "manifest.json"))
    return bool(info) and json.loads(info).get("key") == plan["key"]


def ensure_cold_data(w: Workload, cache: str, target: int, batch: int) -> dict[str, Any]:
    """The larger dataset of `w` for the cgroup measurement: its records repeated in order to
    at least `target` logical bytes, as our raw store (`store`) and as the NumPy files that
    PyTorch's Dataset maps (`npy`). Built once, outside any timing, into `cache` (a folder
    that outlives the run), written durably and checked; reused while its manifest matches."""
    plan = cold_data_plan(w, cache, target)
    folder, records = plan["folder"], plan["records"]
    if not cold_data_ready(plan):
        shutil.rmtree(folder, ignore_errors=True)
        part = folder + ".partial"
        shutil.rmtree(part, ignore_errors=True)
        os.makedirs(os.path.join(part, "npy"))
        print(f"  building the {w.name} dataset of {records:,} records "
              f"({records * mean_record_bytes(w) / 2**30:,.2f} GiB) in {folder} ...",
              file=sys.stderr, flush=True)
        t = time.perf_counter()
        (write_dense_copies if w.kind == "dense" else write_ragged_copies)(w, part, records)
        fsync_tree(part)
        check_cold_data(w, part, records, batch)
        Path(part, "manifest.json").write_text(json.dumps(
            {"key": plan["key"], "build_s": time.perf_counter() - t}))
        fsync_tree(part)
        os.rename(part, folder)
        print(f"  built in {time.perf_counter() - t:,.0f} s", file=sys.stderr, flush=True)
    store, npy = os.path.join(folder, "store"), os.path.join(folder, "npy")
    return {"store": store, "npy": npy, "records": records, "copies": records / w.n,
            "logical_bytes": records * mean_record_bytes(w), "store_bytes": disk_bytes(store),
            "npy_bytes": disk_bytes(npy),
            "build_s": json.loads(read_text(os.path.join(folder, "manifest.json")))["build_s"]}


def cold_data_need(workloads: list[Workload], args: argparse.Namespace, cache: str) -> int:
    """Bytes the datasets still to be built will take: two copies (our store, the NumPy
    files) of each, plus our Ragged index (32 B a record) and the offsets (8 B a record)."""
    need = 0
    for w in workloads:
        plan = cold_data_plan(w, cache, args.cold_loader_bytes[w.name])
        if not cold_data_ready(plan):
            need += math.ceil(2 * plan["records"] * mean_record_bytes(w))
            need += 40 * plan["records"] if w.kind == "ragged" else 0
    return need


def warm_libraries(args: argparse.Namespace) -> None:
    """Import the loaders' libraries once in a process outside any loader's cgroup: a file
    page is charged to the group that first reads it, so their code then stays out of the
    limit, which bounds each loader's own memory and the data it reads (PyTorch's shared
    libraries alone are about a GiB, much of it touched at import)."""
    mods = ["numpy", "zrecord", "loaderx.dataloader"]
    if any(x.startswith("torch") for x in args.loaders) and importlib.util.find_spec("torch"):
        mods.append("torch")
    subprocess.run([sys.executable, "-c", f"import {', '.join(mods)}"], check=False)


def percent_resident(paths: list[str]) -> float:
    return 100.0 * resident_bytes(paths) / max(1, sum(os.path.getsize(p) for p in paths))


def folder_files(path: str) -> list[str]:
    return [os.path.join(d, f) for d, _, files in os.walk(path) for f in sorted(files)]


def cgroup_loader_rows(w: Workload, args: argparse.Namespace, data: dict[str, Any],
                       group: tuple[str, str], round_: int) -> list[dict[str, Any]]:
    """One round of every loader over the larger dataset of `w`, each in its own process
    tree inside its own memory cgroup (--cold-loader-limit), started with every file of the
    dataset dropped from the page cache (nothing has them mapped then). No evictor runs: the
    limit keeps the page cache small beside the data, so IID reads are mostly cold."""
    rows = []
    files = {"loaderx": folder_files(data["store"]), "torch": folder_files(data["npy"])}
    limit = args.cold_loader_limit[w.name]
    for name in args.loaders:
        row = loader_row(name, w)
        if "status" in row:
            rows.append(row)
            continue
        mine = files["loaderx" if name == "loaderx" else "torch"]
        evict(files["loaderx"] + files["torch"])
        row["resident_start_pct"] = percent_resident(mine)
        cmd = loader_command(args, name, w.name, round_, "--loader-store", data["store"],
                             "--loader-npy", data["npy"])
        with MemoryCgroup(*group, f"{name}-{w.name}", limit) as cg:
            out = subprocess.run(cg.command(cmd), capture_output=True, text=True)
            stats = cg.stats()
            row["resident_pct"] = percent_resident(mine)  # what the group kept cached, at the end
        row.update(child_result(out))
        row.update({k: v for k, v in stats.items() if k != "peak"})
        if "peak" in stats:
            row["cgroup_peak_mib"] = stats["peak"] / 2**20
        if "status" in row and stats.get("oom_kills"):
            row["status"] += (f" ({stats['oom_kills']} OOM kill(s) at the {limit / 2**30:.2f} GiB "
                              "limit: raise --cold-loader-limit)")
        finish_row(row, args, data["logical_bytes"] / data["records"])
        rows.append(row)
    return rows


def loader_part(workloads: list[Workload], args: argparse.Namespace, root: str, cache: str,
                method: tuple[str, tuple[str, str] | None, str]) -> dict[str, Any] | None:
    """The cold DataLoaders of every loader workload, --rounds rounds each, by `method`
    (choose_method): in memory cgroups over larger datasets built in `cache`, or beside an
    evictor over the workload's own files. The "loaders" entry of the results."""
    ws = [w for w in workloads if w.name in LOADER_WORKLOADS]
    if not ws:
        return None
    kind, group, why = method
    entry: dict[str, Any] = {"method": kind, "batch": args.batch, "workers": args.loader_workers,
                             "batches": args.loader_batches, "seconds": args.loader_seconds,
                             "warmup": args.loader_warmup}
    if kind == "cgroup":
        assert group is not None
        entry.update(cgroup={"version": group[0], "parent": group[1]}, datasets={},
                     limits={w.name: args.cold_loader_limit[w.name] for w in ws})
        warm_libraries(args)
    else:
        entry.update(evict_interval_ms=args.evict_interval_ms, note=MAPPED_NOTE, fallback=why)
    rounds: list[list[dict[str, Any]]] = [[] for _ in range(max(1, args.rounds))]
    for w in ws:
        print(f"{w.name}: cold DataLoaders ({kind}) ...", file=sys.stderr, flush=True)
        if kind == "cgroup":
            data = ensure_cold_data(w, cache, args.cold_loader_bytes[w.name], args.batch)
            entry["datasets"][w.name] = {k: v for k, v in data.items() if k not in ("store", "npy")}
            entry["datasets"][w.name]["source_records"] = w.n
        else:
            npy = ensure_npy(w, root)
        for k in range(max(1, args.rounds)):
            rounds[k] += (cgroup_loader_rows(w, args, data, group, k) if group is not None
                          else loader_rows(w, args, npy, k))
    entry["rows"] = median_loader_rows(rounds)
    return entry


# -- larger than RAM ---------------------------------------------------------------------------


def mem_total_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/meminfo has no MemTotal")


def process_memory() -> dict[str, float]:
    """This process's RSS (anonymous and file-mapped parts) and PSS, in MiB; page-cache pages
    it has not mapped are in none of them."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key = line.split(":", 1)[0]
            if key in ("VmRSS", "RssAnon", "RssFile"):
                out[key.lower().replace("vm", "")] = int(line.split()[1]) / 1024
    with open("/proc/self/smaps_rollup") as f:
        out["pss"] = next(int(x.split()[1]) for x in f if x.startswith("Pss:")) / 1024
    return out


def ltr_sample(start: float, done: int, usage: str | None) -> dict[str, float]:
    """One per-second sample of a larger-than-RAM run: seconds since the start, batches so
    far, this process's RSS and PSS and, inside a cgroup, what the group is charged now (its
    processes' memory and the page cache they brought in)."""
    out = {"t_s": time.perf_counter() - start, "batches": done, **process_memory()}
    if usage:
        text = read_text(usage).strip()
        if text.isdigit():
            out["cgroup_mib"] = int(text) / 2**20
    return out


def window_rate(samples: list[dict[str, float]], t0: float, t1: float) -> float:
    """Batches/s between the samples nearest to `t0` and to `t1` (taken about a second
    apart, each a little late)."""
    a = min(samples, key=lambda s: abs(s["t_s"] - t0))
    b = min(samples, key=lambda s: abs(s["t_s"] - t1))
    if b["t_s"] <= a["t_s"]:
        return float("nan")
    return (b["batches"] - a["batches"]) / (b["t_s"] - a["t_s"])


def child_ltr(args: argparse.Namespace) -> dict[str, Any]:
    """Our DataLoader over the larger-than-RAM store in `--ltr-mode`, the store opened with
    `--ltr-cache`, for --ltr-seconds (or --ltr-batches timed batches, if fewer), with this
    process's memory (and with --ltr-usage its cgroup's charge) sampled every second.
    Batches/s of the first and last quarter show whether the rate holds once the page cache
    (or the cgroup's share of it) is full."""
    from loaderx.dataloader import DataLoader
    from loaderx.sampler import Sampler

    store = Dense.open(args.ltr_store, cache=args.ltr_cache) if args.ltr_cache != "auto" \
        else Dense.open(args.ltr_store)
    sampler = Sampler(len(store), args.batch, getattr(Sampler.Mode, args.ltr_mode), seed=42)
    loader = DataLoader({"x": store}, sampler, workers=args.loader_workers, prefetch=4)
    for _ in range(2):
        next(loader)
    samples: list[dict[str, float]] = []
    done, stop = 0, args.ltr_batches or math.inf
    start = time.perf_counter()
    before = read_bytes()
    next_sample = start
    while True:
        now = time.perf_counter()
        end = now - start >= args.ltr_seconds or done >= stop
        if now >= next_sample or end:
            samples.append(ltr_sample(start, done, args.ltr_usage))
            next_sample += 1.0
        if end:
            break
        next(loader)
        done += 1
    elapsed = time.perf_counter() - start
    after = read_bytes()
    loader.close()
    store.close()
    quarter = elapsed / 4
    out: dict[str, Any] = {"mode": args.ltr_mode, "cache": args.ltr_cache, "seconds": elapsed,
                           "batches": done, "batches_per_s": done / elapsed,
                           "rate_first_quarter": window_rate(samples, 0, quarter),
                           "rate_last_quarter": window_rate(samples, elapsed - quarter, elapsed),
                           "samples": samples, "peak_rss_mib": max(s["rss"] for s in samples),
                           "peak_pss_mib": max(s["pss"] for s in samples)}
    if before is not None and after is not None:
        out["read_mib_batch"] = (after - before) / max(1, done) / 2**20
    return out


def ltr_target(args: argparse.Namespace) -> tuple[int, str, int]:
    """(RAM, what RAM means, store bytes). RAM is MemTotal, or with --ltr-memory-limit the
    limit of the cgroup each run is confined to: on a machine whose disk cannot hold 1.25x
    its MemTotal, a limited cgroup makes a store that fits the disk larger than the memory
    the loader can use (its page cache is charged to the group)."""
    if args.ltr_memory_limit:
        ram, basis = args.ltr_memory_limit, "cgroup memory limit"
    else:
        ram, basis = mem_total_bytes(), "MemTotal"
    return ram, basis, args.ltr_bytes or math.ceil(1.25 * ram)


def ltr_caches(args: argparse.Namespace) -> list[str]:
    """The cache modes to run: "auto" (the page cache), "bypass" (records of 32 KiB and more
    read with O_DIRECT, so the runs do not fill the page cache), or both where this zrecord
    has cache="bypass" (with a note when it has not)."""
    want = ["auto", "bypass"] if args.ltr_cache == "both" else [args.ltr_cache]
    if "bypass" in want and not can_bypass():
        print(f"bench_cold --larger-than-ram: {STORE_LABEL} has no cache=\"bypass\"; running "
              "cache=\"auto\" only", file=sys.stderr)
        want = ["auto"]
    return want


def ltr_refusal(args: argparse.Namespace, tmp: str, ram: int, basis: str, target: int) -> str:
    """Why the run cannot start (checked before anything is written), or ""."""
    if args.ltr_seconds < args.ltr_min_seconds and not args.ltr_bytes:
        return (f"--ltr-seconds {args.ltr_seconds:g} is under {args.ltr_min_seconds:g} s; the "
                "run must outlast the page cache's warm-up")
    free = args.assume_free_bytes if args.assume_free_bytes is not None else shutil.disk_usage(tmp).free
    need = target + HEADROOM_BYTES + (512 << 20)  # + the small store of the evicted-cache figure
    if free < need:
        return (f"refusing: the store needs {target / 2**30:.1f} GiB (1.25 x the {basis} "
                f"{ram / 2**30:.2f} GiB), plus {(need - target) / 2**30:.1f} GiB of headroom, "
                f"but {tmp} has {free / 2**30:.1f} GiB free; give --tmp a folder with more room"
                + ("" if args.ltr_memory_limit else " or run in a cgroup (--ltr-memory-limit)"))
    return ""


def write_ltr_store(w: Workload, path: str, target: int) -> dict[str, Any]:
    """The raw Dense store of `w`'s real records repeated to at least `target` bytes, made
    durable (so that no dirty page keeps part of it cached)."""
    assert w.dense is not None
    records = -(-target // w.dense[0].nbytes)
    t = time.perf_counter()
    with Dense.create(path, w.dtype, w.item_shape, codec="raw") as writer:
        left = records
        while left:
            chunk = w.dense[:min(left, w.n)]
            writer.append(chunk)
            left -= len(chunk)
            print(f"  wrote {(records - left) * w.dense[0].nbytes / 2**30:,.1f} of "
                  f"{target / 2**30:,.1f} GiB", file=sys.stderr, flush=True)
    fsync_tree(path)
    return {"records": records, "store_bytes": disk_bytes(path), "write_s": time.perf_counter() - t}


def run_in_cgroup(cmd: list[str], group: tuple[str, str] | None, name: str, limit: int,
                  usage: bool = False) -> dict[str, Any]:
    """Run a child (one JSON line last) in a fresh memory cgroup of `limit` (without `group`,
    as a plain process): its result, with the group's peak charge (cgroup_peak_mib), limit
    hits and OOM kills. `usage` passes the group's charge file to the child to sample."""
    if group is None:
        return child_result(subprocess.run(cmd, capture_output=True, text=True))
    with MemoryCgroup(*group, name, limit) as cg:
        out = subprocess.run(cg.command([*cmd, "--ltr-usage", cg.usage_file()] if usage else cmd),
                             capture_output=True, text=True)
        stats = cg.stats()
    row = child_result(out)
    row.update({k: v for k, v in stats.items() if k != "peak"})
    if "peak" in stats:
        row["cgroup_peak_mib"] = stats["peak"] / 2**20
    if "status" in row and stats.get("oom_kills"):
        row["status"] += f" ({stats['oom_kills']} OOM kill(s) at {limit / 2**30:.2f} GiB)"
    return row


def ltr_run(args: argparse.Namespace, path: str, mode: str, cache: str,
            group: tuple[str, str] | None) -> dict[str, Any]:
    """One larger-than-RAM run in its own process, started with the store dropped from the
    page cache; with `group`, inside a fresh memory cgroup of --ltr-memory-limit, whose peak
    charge, limit hits and OOM kills join the row."""
    evict(folder_files(path))
    cmd = child_command(args, "ltr", "--ltr-mode", mode, "--ltr-cache", cache, "--ltr-store", path,
                        "--ltr-seconds", str(args.ltr_seconds),
                        "--loader-workers", str(args.loader_workers))
    print(f"  {mode}, cache={cache}, for {args.ltr_seconds:g} s"
          + (f" in a cgroup of {args.ltr_memory_limit / 2**30:.2f} GiB" if group else "") + " ...",
          file=sys.stderr, flush=True)
    row: dict[str, Any] = {"mode": mode, "cache": cache}
    row.update(run_in_cgroup(cmd, group, f"ltr-{cache}-{mode}", args.ltr_memory_limit or 0,
                             usage=True))
    if "status" in row and row.get("oom_kills"):
        row["status"] += ": raise --ltr-memory-limit"
    return row


def ltr_reference(w: Workload, args: argparse.Namespace) -> dict[str, Any]:
    """The figure the mode has always compared with: the same DataLoader (cache "auto") over
    the small store of `w`'s own records while a separate process evicts its files every
    --evict-interval-ms (loader_rows). The evictor also drops pages the loader has hinted
    but not read yet, so this figure can read each record twice and understate cold reads."""
    npy = ensure_npy(w, args.store_root)
    one = argparse.Namespace(**{**vars(args), "loaders": ["loaderx"]})
    return loader_rows(w, one, npy, 0)[0]


def ltr_cold_pass(args: argparse.Namespace, path: str, records: int, store_bytes: int,
                  group: tuple[str, str] | None) -> dict[str, Any]:
    """A second, evictor-free reference: the same DataLoader (cache "auto") over the large
    store itself in CYCLIC's first cycle, a permutation, so that no record is read twice:
    started with the store dropped from the page cache, in a cgroup with room for all of it
    (nothing is reclaimed), and stopped 10 batches before the cycle ends (the warm-up and the
    batches in flight stay inside it). Every read is cold, whichever sampler it is then
    compared with: both read whole random records."""
    cycle = records // args.batch  # the full batches of a cycle
    limit = store_bytes + HEADROOM_BYTES
    evict(folder_files(path))
    cmd = child_command(args, "ltr", "--ltr-mode", "CYCLIC", "--ltr-cache", "auto",
                        "--ltr-store", path, "--ltr-seconds", "600", "--ltr-batches",
                        str(max(1, cycle - 10)), "--loader-workers", str(args.loader_workers))
    print(f"  cold pass: CYCLIC's first cycle, {max(1, cycle - 10)} batches ...", file=sys.stderr,
          flush=True)
    row = run_in_cgroup(cmd, group, "ltr-cold-pass", limit, usage=True)
    row.update(cycle_batches=cycle, limit_bytes=limit if group else None)
    return row


def larger_than_ram(args: argparse.Namespace, tmp: str, results: dict[str, Any]) -> int:
    """--larger-than-ram: the store of 1.25x RAM (MemTotal, or the cgroup limit), the
    evicted-cache and cold-pass references, then IID and CYCLIC for every cache mode, each in
    a process of its own (with --ltr-memory-limit, each in a fresh memory cgroup of that
    limit). Everything that could refuse the run is checked before anything is written."""
    ram, basis, target = ltr_target(args)
    why = ltr_refusal(args, tmp, ram, basis, target)
    group = None
    if not why and args.ltr_memory_limit:
        try:
            group = cgroup_base()
        except CgroupUnavailable as exc:
            why = f"refusing: --ltr-memory-limit needs a memory cgroup, but {exc}"
    if why:
        print(f"bench_cold --larger-than-ram: {why}", file=sys.stderr)
        return 2
    caches = ltr_caches(args)
    w = Workload("vision_dense", args.data, None)
    out: dict[str, Any] = {"mem_total_bytes": mem_total_bytes(), "ram_bytes": ram, "ram_basis": basis,
                           "memory_limit_bytes": args.ltr_memory_limit, "target_bytes": target,
                           "batch": args.batch, "workers": args.loader_workers, "caches": caches,
                           "evict_interval_ms": args.evict_interval_ms, "runs": []}
    if group is not None:
        out["cgroup"] = {"version": group[0], "parent": group[1]}
    with tempfile.TemporaryDirectory(dir=tmp, prefix="bench-cold-ltr-") as root:
        args.store_root = root
        path = store_path(root, STORE_LABEL, "larger-than-ram", "raw")
        out.update(write_ltr_store(w, path, target))
        out["store_over_ram"] = out["store_bytes"] / ram
        out["evicted_cache"] = ltr_reference(w, args)
        if group is not None:
            warm_libraries(argparse.Namespace(loaders=["loaderx"]))
        out["cold_pass"] = ltr_cold_pass(args, path, out["records"], out["store_bytes"], group)
        refs = {k: out[k].get("batches_per_s") for k in ("evicted_cache", "cold_pass")}
        for cache in caches:
            for mode in ("IID", "CYCLIC"):
                run = ltr_run(args, path, mode, cache, group)
                for key, ref in refs.items():
                    if ref and "batches_per_s" in run:
                        run[f"vs_{key}"] = run["batches_per_s"] / ref
                out["runs"].append(run)
    results["larger_than_ram"] = out
    print(ltr_table(out))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


def ltr_ratios(r: dict[str, Any], refs: dict[str, float | None]) -> str:
    """A run's batches/s over each reference's ("-" where one is missing)."""
    out = []
    for key, ref in refs.items():
        ratio = r.get(f"vs_{key}") or (r["batches_per_s"] / ref if ref else None)
        out.append(f"{ratio:.2f}x" if ratio else "-")
    return " / ".join(out)


def ltr_row(r: dict[str, Any], refs: dict[str, float | None], limit: float | None) -> str:
    """One run's table row (results written before --ltr-cache and --ltr-memory-limit have
    neither the cache nor the cgroup figures)."""
    head = f"| {r['mode']} | {r.get('cache', 'auto')} |"
    if "batches_per_s" not in r:
        return head + f" {r.get('status', '')} |" + " |" * 7
    first, last = r["samples"][0], r["samples"][-1]
    group = ""
    if "cgroup_peak_mib" in r:
        group = f"{r['cgroup_peak_mib']:,.0f}" + (f" ({r['cgroup_peak_mib'] * 2**20 / limit:.0%})"
                                                   if limit else "")
    hits = f"{r.get('limit_hits', '')} / {r.get('oom_kills', '')}" if "limit_hits" in r else ""
    quarter, t = r["seconds"] / 4, r["seconds"]
    rates = (r.get("rate_first_quarter", window_rate(r["samples"], 0, quarter)),
             r.get("rate_last_quarter", window_rate(r["samples"], t - quarter, t)))
    return (head + f" {t:.0f} | {r['batches_per_s']:.1f} / {rates[0]:.1f} / {rates[1]:.1f} | "
            f"{ltr_ratios(r, refs)} | "
            f"{first['rss']:,.0f} / {last['rss']:,.0f} / {r['peak_rss_mib']:,.0f} | "
            f"{first['pss']:,.0f} / {last['pss']:,.0f} / {r['peak_pss_mib']:,.0f} | {group} | "
            f"{hits} | {r.get('read_mib_batch', float('nan')):,.1f} |")


def ltr_references(out: dict[str, Any]) -> str:
    """The note that says what the ratios compare with."""
    ref, cold = out["evicted_cache"], out["evicted_cache"].get("batches_per_s")
    text = (f"Evicted-cache figure: the same loader (cache \"auto\") over the {ref['workload']} "
            f"store of the real records, its files evicted every {out['evict_interval_ms']:g} ms "
            "by a separate process, no memory limit: "
            + (f"{cold:.1f} batches/s, {ref.get('read_mib_batch', float('nan')):.1f} device "
               f"MiB/batch ({ref.get('resident_pct', float('nan')):.0f}% resident after each "
               "eviction; the evictor also drops pages the loader has hinted but not read yet, "
               "so this figure can understate cold reads)" if cold else ref.get("status", "")) + ".")
    cp = out.get("cold_pass")
    if cp:
        room = (f"in a cgroup of {cp['limit_bytes'] / 2**30:.2f} GiB (room for all of it)"
                if cp.get("limit_bytes") else "with no cgroup")
        text += (" Cold-pass figure: the same loader (cache \"auto\") over this store in the "
                 "first cycle of CYCLIC (a permutation: no record read twice), started with it "
                 f"dropped from the page cache, {room}, {cp.get('batches', 0)} of the cycle's "
                 f"{cp['cycle_batches']} batches: "
                 + (f"{cp['batches_per_s']:.1f} batches/s, {cp.get('read_mib_batch', float('nan')):.1f} "
                    "device MiB/batch." if "batches_per_s" in cp else cp.get("status", "") + "."))
    return text


def ltr_table(out: dict[str, Any]) -> str:
    """The larger-than-RAM table: what RAM meant (MemTotal or the cgroup limit), the store
    against it, and each run against the evicted-cache figure (and the cold-pass figure)."""
    refs = {k: out.get(k, {}).get("batches_per_s") for k in ("evicted_cache", "cold_pass")}
    ram = out.get("ram_bytes", out["mem_total_bytes"])
    limit = out.get("memory_limit_bytes")
    where = (f"the {limit / 2**30:,.2f} GiB memory limit of the cgroup ({out['cgroup']['version']}) "
             f"each run had to itself (MemTotal {out['mem_total_bytes'] / 2**30:,.1f} GiB)"
             if limit else f"MemTotal {ram / 2**30:,.1f} GiB")
    lines = [f"### Larger than RAM: {out['store_bytes'] / 2**30:,.2f} GiB raw Dense store = "
             f"{out['store_bytes'] / ram:.2f}x {where}; our DataLoader, batch {out['batch']}, "
             f"{out['workers']} workers", "",
             "| sampler | cache | seconds | batches/s (whole / first / last quarter) | vs "
             "evicted-cache / cold-pass figure | RSS MiB first / last / peak | PSS MiB first / "
             "last / peak | cgroup peak MiB (of limit) | limit hits / OOM kills | device "
             "MiB/batch |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [ltr_row(r, refs, limit) for r in out["runs"]]
    lines.append("\n" + ltr_references(out) + " Every run starts with the store dropped from "
                 "the page cache. RSS and PSS are the loader process's, sampled every second "
                 "(JSON: samples); page-cache pages it has not mapped are in neither."
                 + (" Each run had a fresh memory cgroup of its own, whose charge covers its "
                    "memory and the page cache it brought in (JSON: samples' cgroup_mib); limit "
                    "hits: charges that met the limit (v1 failcnt, v2 events max)." if limit else ""))
    return "\n".join(lines)


# -- tables ------------------------------------------------------------------------------------


def ceiling_line(c: dict[str, Any]) -> str:
    def depth(d: str, v: dict[str, float]) -> str:
        spread = [r["depths"][d]["mib_s"] for r in c.get("rounds", [])]
        between = (f" (rounds {min(spread):,.0f}-{max(spread):,.0f} MiB/s)"
                   if len(spread) > 1 else "")
        return f"QD{d} {v['iops']:,.0f} IOPS = {v['mib_s']:,.0f} MiB/s{between}"

    depths = "; ".join(depth(d, v) for d, v in c["depths"].items())
    rounds = len(c.get("rounds", []))
    where = (f"the median of {rounds} rounds, each measured beside that round's gathers"
             if rounds > 1 else "measured in the same run")
    return (f"Device ceiling ({c['tool']}, random O_DIRECT reads of {c['block_bytes'] / 1024:,.0f} "
            f"KiB over a {c['file_bytes'] / 2**20:,.0f} MiB file in the same folder, {where}): "
            f"{depths}.")


def table(w: dict[str, Any]) -> str:
    """One workload's cold-gather rows, with its device ceiling below."""
    basis = "records/s vs IOPS" if w["ceiling_basis"] == "iops" else "MiB/s vs bandwidth"
    label = " (TMPFS: page-cache reads, NOT cold)" if w.get("tmpfs") else ""
    lines = [f"### Cold gather{label}: {w['name']}, {w['describe']}, mean record "
             f"{w['record_bytes_mean']:,.0f} B, batch {w['batch']}", "",
             f"| backend | records/s | MiB/s | % of QD32 ceiling ({basis}) | % of QD1 | p95 ms | "
             "open ms | device MiB/batch | read amp. | resident after evict | disk MiB |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    logical = w["batch"] * w["record_bytes_mean"] / 2**20
    for r in w["rows"]:
        read = r.get("read_mib_batch")
        lines.append(
            f"| {r['backend']} | {r['krecords_s'] * 1e3:,.0f} | {r['mib_s']:,.1f} | "
            f"{r.get('pct_qd32', float('nan')):.1f}% | {r.get('pct_qd1', float('nan')):.0f}% | "
            f"{r['p95_ms']:,.1f} | {r['open_ms']:.1f} | "
            + (f"{read:,.1f} | {read / logical:.2f}x" if read is not None else " | ")
            + f" | {r['resident_pct']:.1f}% | {r['disk_mib']:,.1f} |")
    lines += ["", ceiling_line(w["ceiling"])]
    return "\n".join(lines)


def coldness(r: dict[str, Any]) -> str:
    """What a loader row measured, from what its files kept resident right after eviction."""
    share = r.get("resident_pct", float("nan"))
    if share != share:  # no eviction fell inside the timed batches
        return "unknown"
    if share < 10:
        return "cold"
    if share < 50:
        return f"partly warm ({share:.0f}% stayed mapped)"
    return "WARM: its mappings kept the data resident"


def loader_table(result: dict[str, Any]) -> str:
    """The cold DataLoader table of either method (results before the cgroup method have
    no "method": theirs is the evictor)."""
    lo = result["loaders"]
    return cgroup_loader_table(lo) if lo.get("method") == "cgroup" else evict_loader_table(lo)


def cgroup_loader_table(lo: dict[str, Any]) -> str:
    lines = [f"### Cold DataLoaders in memory cgroups: IID, batch {lo['batch']}, {lo['workers']} "
             "workers (loaderx: threads; PyTorch: fork processes), at least "
             f"{lo['batches']} batches and {lo['seconds']:g} s after {lo['warmup']} warm-up, each "
             f"loader's process tree in a memory cgroup ({lo['cgroup']['version']}) of its own",
             "", "| loader | workload | batches/s | records/s | MiB/s | peak PSS MiB | cgroup "
             "peak MiB | device MiB/batch | read amp. | resident at end |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in lo["rows"]:
        if "batches_per_s" not in r:
            lines.append(f"| {r['loader']} | {r['workload']} | {r.get('status', '')} | | | | | | | |")
            continue
        read = r.get("read_mib_batch")
        lines.append(f"| {r['loader']} | {r['workload']} | {r['batches_per_s']:,.1f} | "
                     f"{r['krecords_s'] * 1e3:,.0f} | {r['mib_s']:,.1f} | {r['peak_pss_mib']:,.0f} | "
                     f"{r.get('cgroup_peak_mib', float('nan')):,.0f} | "
                     + (f"{read:,.2f} | {read / r['batch_mib']:.2f}x" if read is not None else " | ")
                     + f" | {r.get('resident_pct', float('nan')):.1f}% |")
    lines.append("")
    for name, d in lo["datasets"].items():
        limit = lo["limits"][name]
        ratio = d["logical_bytes"] / limit
        lines.append(f"- {name}: {d['records']:,} records ({d['copies']:.1f} copies of the "
                     f"{d['source_records']:,} real ones), {d['logical_bytes'] / 2**30:,.2f} GiB; "
                     f"our raw store {d['store_bytes'] / 2**30:,.2f} GiB, the NumPy files "
                     f"{d['npy_bytes'] / 2**30:,.2f} GiB; cgroup limit {limit / 2**30:,.2f} GiB: "
                     f"the data is {ratio:.1f}x the limit"
                     + (" (UNDER 2x: many reads hit the page cache)" if ratio < 2 else ""))
    lines += ["", "Each loader ran in its own process tree in a memory cgroup whose limit covers "
              "its processes' memory and the page cache they bring in, mapped pages included "
              "(the kernel reclaims those at the limit, which posix_fadvise cannot), after every "
              "file of the dataset was dropped from the page cache (nothing had them mapped). No "
              "evictor runs: with the data N times the limit, at most about 1/N of uniform IID "
              "reads can find their record cached. Device MiB/batch: read_bytes of the process "
              "tree (/proc/PID/io; readahead included); read amp.: that over a batch's logical "
              "MiB; cgroup peak: the most the group was charged; resident at end: the loader's "
              "files in the page cache when it had finished (mincore)."]
    return "\n".join(lines)


def evict_loader_table(lo: dict[str, Any]) -> str:
    lines = [f"### Cold DataLoaders: IID, batch {lo['batch']}, {lo['workers']} workers (loaderx: "
             f"threads; PyTorch: fork processes), at least {lo['batches']} batches and "
             f"{lo['seconds']:g} s after {lo['warmup']} warm-up, files evicted every {lo['evict_interval_ms']:g} ms by a separate process"
             + (f" (no memory cgroup: {lo['fallback']})" if lo.get("fallback") else ""),
             "", "| loader | workload | batches/s | records/s | MiB/s | peak PSS MiB | device "
             "MiB/batch | resident after evict (mean / max) | reads were |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in lo["rows"]:
        if "batches_per_s" not in r:
            lines.append(f"| {r['loader']} | {r['workload']} | {r.get('status', '')} | | | | | | |")
            continue
        read = r.get("read_mib_batch")
        lines.append(f"| {r['loader']} | {r['workload']} | {r['batches_per_s']:,.1f} | "
                     f"{r['krecords_s'] * 1e3:,.0f} | {r['mib_s']:,.1f} | {r['peak_pss_mib']:,.0f} | "
                     + (f"{read:,.1f}" if read is not None else "")
                     + f" | {r.get('resident_pct', float('nan')):.0f}% / "
                     f"{r.get('resident_pct_max', float('nan')):.0f}% | {coldness(r)} |")
    lines += ["", f"Note: {MAPPED_NOTE}; the last column is what stayed in the page cache right "
              "after each eviction during the timed batches."]
    return "\n".join(lines)


# -- the driver --------------------------------------------------------------------------------


def add_loader_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of the cold DataLoader part (--parts loaders)."""
    ap.add_argument("--loaders", default="loaderx,torch-fork",
                    help="loaderx, torch-fork (PyTorch's DataLoader over NumPy memory maps), "
                         "torch-fork-random (the same, its maps advised MADV_RANDOM); default "
                         "the first two")
    ap.add_argument("--loader-workers", type=int, default=4)
    ap.add_argument("--loader-batches", type=int, default=40,
                    help="at least this many timed batches per loader (default 40) ...")
    # 10 s, not 3: a cold tokens loader's batch rate on this project's virtual disk moved
    # 0.8-3.7x against PyTorch's between runs of 3 s windows, and held 4.7-5.9x in every
    # round of 10 s windows (docs/benchmarks.md, "Cold reads").
    ap.add_argument("--loader-seconds", type=float, default=10.0,
                    help="... and at least this many seconds of them (default 10)")
    ap.add_argument("--loader-warmup", type=int, default=3)
    ap.add_argument("--cold-method", choices=("auto", "cgroup", "evict"), default="auto",
                    help="how the DataLoaders are kept cold: cgroup (each loader in a memory "
                         "cgroup over a dataset several times its limit), evict (a process "
                         "evicts their files every --evict-interval-ms; mapped pages stay "
                         "warm), auto (default: cgroup where this process can make one)")
    ap.add_argument("--cold-loader-bytes", default="4G",
                    help="cgroup method: logical bytes of each larger dataset, the real records "
                         "repeated (default 4G; or per workload: vision_dense=4G,tokens=2G); "
                         "built once and kept in --tmp/bench-cold-loader-data")
    ap.add_argument("--cold-loader-limit", default="1.5G",
                    help="cgroup method: memory limit of each loader's process tree, page cache "
                         "included (default 1.5G; or per workload, as above); it must exceed the "
                         "loader's own peak and be well under the dataset")
    ap.add_argument("--evict-interval-ms", type=float, default=30.0,
                    help="evict method: how often the DataLoader runs evict their files (default 30)")


def add_ltr_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of --larger-than-ram, and its hidden knobs: --ltr-bytes (a store of that
    size, whatever RAM is) and --ltr-min-seconds (60; smaller for smoke tests only) for tests,
    --ltr-batches for the cold-pass child."""
    ap.add_argument("--larger-than-ram", action="store_true",
                    help="opt-in: a store of 1.25x RAM (MemTotal, or --ltr-memory-limit), "
                         "DataLoader IID and CYCLIC over it for --ltr-seconds each (writes tens "
                         "of GiB without --ltr-memory-limit; not for CI)")
    ap.add_argument("--ltr-seconds", type=float, default=60.0,
                    help="seconds of each larger-than-RAM run (default 60, the minimum)")
    ap.add_argument("--ltr-memory-limit", type=parse_bytes, default=None, metavar="SIZE",
                    help="RAM is this memory limit (e.g. 4G): the store is 1.25x it, and each "
                         "run is confined to a fresh memory cgroup of this limit, page cache "
                         "included (default: RAM is MemTotal, no cgroup)")
    ap.add_argument("--ltr-cache", choices=("auto", "bypass", "both"), default="both",
                    help="how the runs open the store: auto (the page cache), bypass "
                         "(cache=\"bypass\": records of 32 KiB and more read with O_DIRECT), "
                         "both (default: each sampler with each)")
    ap.add_argument("--ltr-bytes", type=parse_bytes, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--ltr-min-seconds", type=float, default=60.0, help=argparse.SUPPRESS)
    ap.add_argument("--ltr-batches", type=int, default=0, help=argparse.SUPPRESS)


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap, ",".join(WORKLOADS))
    ap.set_defaults(seconds=0.0)
    ap.add_argument("--batches", type=int, default=10,
                    help="timed batches per backend and round (default 10); --seconds S "
                         "times batches until S seconds of gathers accumulate instead")
    ap.add_argument("--parts", default="gather,loaders",
                    help="gather (cold gathers beside the device ceiling), loaders (cold "
                         "DataLoaders); default both")
    ap.add_argument("--bypass", action="store_true",
                    help="also measure our stores opened with cache=\"bypass\" (O_DIRECT reads "
                         "of large records), as rows zrecord-<codec>-bypass")
    ap.add_argument("--evict-index", action="store_true",
                    help="evict the index/meta files too (before and after the open)")
    ap.add_argument("--allow-tmpfs", action="store_true",
                    help="run even when --tmp is a tmpfs; every table then says its figures "
                         "are page-cache figures")
    ap.add_argument("--ceiling-seconds", type=float, default=2.0,
                    help="seconds of each queue depth's device measurement (default 2)")
    add_loader_arguments(ap)
    add_ltr_arguments(ap)
    # Internal: child processes, and a fake free-space figure to test the refusal.
    for name in ("--child", "--store-root", "--loader", "--files", "--ltr-mode", "--ltr-store",
                 "--loader-store", "--loader-npy", "--ltr-usage"):
        ap.add_argument(name, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--assume-free-bytes", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.codecs = [c for c in args.codecs.split(",") if c]
    args.loaders = [x for x in args.loaders.split(",") if x]
    args.parts = [x for x in args.parts.split(",") if x]
    names = [n for n in args.workload.split(",") if n]
    unknown = ([n for n in names if n not in WORKLOADS] + [x for x in args.loaders if x not in LOADERS]
               + [x for x in args.parts if x not in ("gather", "loaders")])
    if unknown:
        ap.error(f"unknown {unknown}: workloads are {list(WORKLOADS)}, loaders {list(LOADERS)}, "
                 "parts gather, loaders")
    args.workloads = names
    try:
        args.cold_loader_bytes = per_workload(args.cold_loader_bytes, LOADER_WORKLOADS)
        args.cold_loader_limit = per_workload(args.cold_loader_limit, LOADER_WORKLOADS)
    except ValueError as exc:
        ap.error(f"--cold-loader-bytes / --cold-loader-limit: {exc}")
    return args


def gather_entry(w: Workload, args: argparse.Namespace, root: str, tmpfs: bool) -> dict[str, Any]:
    """The cold gathers of `w` (every backend, --rounds rounds) beside its device ceiling."""
    npy = ensure_npy(w, root)
    extra = (["--store-root", root, "--batches", str(args.batches)]
             + (["--evict-index"] if args.evict_index else [])
             + (["--bypass"] if args.bypass else []))
    record = mean_record_bytes(w)
    ceilings: list[dict[str, Any]] = []

    def baselines() -> list[dict[str, Any]]:
        # The device's ceiling in every round, beside that round's gathers: this virtual
        # disk's random-read rate moved by 30% and more between minutes (2026-12-02: the
        # 148 KiB QD 32 figure was 1,210 MiB/s in one run and 827 in the next).
        ceilings.append(device.rand_read_depths(npy["records" if w.kind == "dense" else "payload"],
                                                math.ceil(record), DEPTHS, args.ceiling_seconds))
        return [npy_row(w, npy, args)]

    rows = measure_rounds(args, __file__, w.name, list, baselines,
                          lambda k: [*extra, "--seed", str(k)])
    ceiling = median_ceiling(ceilings)
    return {"name": w.name, "describe": w.describe(), "records": w.n,
            "record_bytes_mean": record, "logical_mib": w.nbytes / 2**20,
            "batch": args.batch, "tmpfs": tmpfs, "ceiling": ceiling,
            "ceiling_basis": add_ceiling_shares(rows, ceiling, record), "rows": rows}


def stores_only(args: argparse.Namespace, results: dict[str, Any]) -> int:
    """A child of measure_rounds: this library's stores of every workload, measured once."""
    for name in args.workloads:
        w = Workload(name, args.data, None)
        rows = measure_rounds(args, __file__, name, lambda w=w: run_stores(w, args), list)
        results["workloads"][name] = {"rows": rows}
    Path(args.json).write_text(json.dumps(results))
    return 0


def load_workloads(args: argparse.Namespace) -> list[Workload]:
    workloads = []
    for name in args.workloads:
        try:
            workloads.append(Workload(name, args.data, None))
        except FileNotFoundError as exc:
            print(f"skipping {name}: {exc}", file=sys.stderr)
    return workloads


def disk_need(workloads: list[Workload], loads: list[Workload], args: argparse.Namespace,
              method: str, cache: str) -> int:
    """Bytes a run needs free in --tmp: HEADROOM_BYTES, the gather part's stores (every codec,
    the peer's and other builds' too, and the npy copy), the evict method's raw store and npy
    copy, and the cgroup method's larger datasets that are not built yet."""
    need = HEADROOM_BYTES
    if "gather" in args.parts:
        copies = 1 + len(args.codecs) * (1 + bool(args.peer) + len(builds(args)))
        need += sum(w.nbytes for w in workloads) * copies
    elif method == "evict":
        need += sum(2 * w.nbytes for w in loads)
    if method == "cgroup":
        need += cold_data_need(loads, args, cache)
    return need


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.child:
        run = {"loader": child_loader, "evictor": child_evictor, "ltr": child_ltr}[args.child]
        print(json.dumps(run(args)))
        return 0
    results = header(args)
    if args.stores_only:  # a child of measure_rounds: this library's stores, once
        return stores_only(args, results)

    tmp = args.tmp or tempfile.gettempdir()
    tmpfs = device.is_page_cache_only(tmp)
    if tmpfs and not args.allow_tmpfs:
        print(f"bench_cold: refusing: {tmp} is a {device.fs_type(tmp)}, where every read is a "
              "page-cache read and no figure would be cold; give --tmp a folder on a real disk "
              "(or --allow-tmpfs to run anyway, labelled)", file=sys.stderr)
        return 2
    results["device"] = {"folder": tmp, "fs": device.fs_type(tmp), "tmpfs": tmpfs,
                         "queue": device.queue_settings(tmp)}
    if args.larger_than_ram:
        return larger_than_ram(args, tmp, results)

    workloads = load_workloads(args)
    if not workloads:
        print(f"bench_cold: no workload found in {args.data} (--data)", file=sys.stderr)
        return 1
    loads = [w for w in workloads if w.name in LOADER_WORKLOADS] if "loaders" in args.parts else []
    try:
        method = choose_method(args) if loads else ("evict", None, "")
    except CgroupUnavailable as exc:
        print(f"bench_cold: refusing: --cold-method cgroup, but {exc}", file=sys.stderr)
        return 2
    cache = os.path.join(tmp, "bench-cold-loader-data")
    need = disk_need(workloads, loads, args, method[0], cache)
    free = args.assume_free_bytes if args.assume_free_bytes is not None else shutil.disk_usage(tmp).free
    if free < need:
        print(f"bench_cold: refusing: the stores need about {need / 2**30:.1f} GiB in {tmp}, "
              f"which has {free / 2**30:.1f} GiB free"
              + (" (a smaller --cold-loader-bytes needs less)" if method[0] == "cgroup" else ""),
              file=sys.stderr)
        return 2

    tables = []
    results.update(codecs=args.codecs, evict_index=args.evict_index, batches=args.batches)
    with tempfile.TemporaryDirectory(dir=tmp, prefix="bench-cold-") as root:
        args.store_root = root
        for w in workloads if "gather" in args.parts else []:
            print(f"{w.name} ...", file=sys.stderr, flush=True)
            entry = gather_entry(w, args, root, tmpfs)
            results["workloads"][w.name] = entry
            tables.append(table(entry))
        loaders = loader_part(loads, args, root, cache, method)
        if loaders is not None:
            results["loaders"] = loaders
            tables.append(loader_table(results))
    report(results, tables, args)
    return 0


def report(results: dict[str, Any], tables: list[str], args: argparse.Namespace) -> None:
    """Print the run's header line and `tables`; write the JSON (--json)."""
    dev, q = results["device"], results["device"]["queue"]
    print(f"{results['date']}  {results['machine']}  python {results['python']}  numpy "
          f"{results['numpy']}  {results['store']} {results['store_version']}")
    print(f"stores on {dev['fs']} ({dev['folder']})"
          + (f", device {q.get('device')}, read_ahead_kb {q.get('read_ahead_kb')}" if q else "")
          + ("; TMPFS: page-cache figures, not cold reads" if dev["tmpfs"] else "")
          + f"; {args.rounds} round(s), medians"
          + (f"; {MAPPED_NOTE}.\n" if results["workloads"] or results.get("loaders", {}).get(
              "method") == "evict" else ".\n"))
    print("\n\n".join(tables))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    sys.exit(main())
