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
worker processes, a per-sample Dataset over NumPy memory maps of the npy copy, IID sampling
with replacement), each in its own process: batches/s and the peak PSS of the process tree
(bench.PeakPss). While a loader runs, a separate process evicts its files every
--evict-interval-ms (30) and records what stays resident right after each eviction: pages a
process has mapped (PyTorch's memory maps; zrecord's mappings of small-record shards) cannot be
evicted, so such a loader reads part of its data warm; the tables say how much stayed.

--larger-than-ram (opt-in, never in CI): writes a raw Dense store of repeated real vision
records of at least 1.25x MemTotal (refused, before anything is written, if the folder lacks
the room), then runs our DataLoader IID and CYCLIC over it for --ltr-seconds (>= 60) each:
batches/s beside the evicted-cache figure of the small store, and the process's RSS and PSS
every second (page cache excluded: only what the process holds) into the JSON.

Usage: python benchmarks/bench_cold.py [--workload tokens,vision_dense,...] [--rounds 3]
       [--batches 10 | --seconds S] [--peer /path/to/venv/bin/python] [--tmp DIR] [--json OUT]
       [--parts gather,loaders] [--evict-index] [--larger-than-ram]
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import importlib.util
import json
import math
import mmap
import os
import shutil
import signal
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
    STORE_LABEL,
    Dense,
    Ragged,
    add_arguments,
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
LOADERS = ("loaderx", "torch-fork")
# Room a run needs beyond its stores, and what --larger-than-ram leaves free on the disk.
HEADROOM_BYTES = 2 << 30
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
    if STORE_LABEL != "zrecord":  # the published loaderx never flushes: make it durable
        fsync_tree(path)
    store = open_store(w, path)
    try:
        verify(STORE_LABEL, w, lambda idx: store[idx], batch)
    finally:
        store.close()
    return path


def open_store(w: Workload, path: str) -> Any:
    return (Dense if w.kind == "dense" else Ragged).open(path)


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


def run_stores(w: Workload, args: argparse.Namespace) -> list[dict[str, Any]]:
    """In a --stores-only child: this library's stores of `w`, one row per codec."""
    rows = []
    for codec in codecs_for(w.name, args.codecs):
        path = ensure_store(w, codec, args.store_root, args.batch)
        payload, index = store_files(path)

        def opener(path: str = path) -> tuple[Callable[[np.ndarray], Any], Callable[[], None]]:
            store = open_store(w, path)
            return (lambda idx: store[idx]), store.close

        row = cold_gathers(f"{STORE_LABEL}-{codec}", w, opener, payload, index, args)
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

    def __init__(self, payload: str, offsets: str) -> None:
        self.path = payload
        self.offsets = np.load(offsets)
        self.payload: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        if self.payload is None:
            self.payload = np.load(self.path, mmap_mode="r")
        return np.array(self.payload[self.offsets[i]:self.offsets[i + 1]])


def collate_list(samples: list[Any]) -> list[Any]:
    """Variable-length records cannot be stacked: a batch is the list, as ours returns."""
    return samples


def child_loader(args: argparse.Namespace) -> dict[str, Any]:
    """One loader over one workload's cold files, in this process (and its workers)."""
    kind = WORKLOADS[args.workload][0]
    npy = os.path.join(args.store_root, f"npy-{args.workload}")
    if args.loader == "loaderx":
        from loaderx.dataloader import DataLoader
        from loaderx.sampler import Sampler

        store = (Dense if kind == "dense" else Ragged).open(
            store_path(args.store_root, STORE_LABEL, args.workload, "raw"))
        sampler = Sampler(len(store), args.batch, Sampler.Mode.IID, seed=args.seed)
        loader: Any = DataLoader({"x": store}, sampler, workers=args.loader_workers, prefetch=4)
        batches: Any = loader
        closers = [loader.close, store.close]
    else:
        import torch
        from bench import MmapDataset

        if kind == "dense":
            ds: Any = MmapDataset(os.path.join(npy, "records.npy"))
            collate = None
        else:
            ds = RaggedMmapDataset(os.path.join(npy, "payload.npy"), os.path.join(npy, "offsets.npy"))
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
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return {"status": f"failed (exit {out.returncode}): {tail}"}, {}
    result = json.loads(out.stdout.strip().splitlines()[-1])
    start, end = result.pop("window")
    shares = [pct for t, pct in samples if start <= t <= end]
    return result, {"evictions": len(shares),
                    "resident_pct_mean": float(np.mean(shares)) if shares else float("nan"),
                    "resident_pct_max": float(np.max(shares)) if shares else float("nan")}


def loader_rows(w: Workload, args: argparse.Namespace, npy: dict[str, str],
                round_: int) -> list[dict[str, Any]]:
    """One round of every loader over `w`, each in its own process beside an evictor."""
    rows = []
    ours = ensure_store(w, "raw", args.store_root, args.batch)
    for name in args.loaders:
        # "backend" keys the round medians, so it names the workload too.
        row: dict[str, Any] = {"backend": f"{name}/{w.name}", "loader": name, "workload": w.name}
        if name.startswith("torch") and importlib.util.find_spec("torch") is None:
            row["status"] = "torch is not installed (pip install torch)"
            rows.append(row)
            continue
        files = store_files(ours)[0] if name == "loaderx" else \
            [npy["records" if w.kind == "dense" else "payload"]]
        cmd = child_command(args, "loader", "--loader", name, "--workload", w.name,
                            "--loader-workers", str(args.loader_workers), "--loader-batches",
                            str(args.loader_batches), "--loader-seconds", str(args.loader_seconds),
                            "--loader-warmup", str(args.loader_warmup),
                            "--seed", str(round_))
        result, stats = run_with_evictor(args, files, cmd)
        row.update(result)
        if stats:  # evictions during the timed batches, and what each left resident
            row["evictions"] = stats["evictions"]
            row["resident_pct"] = stats["resident_pct_mean"]
            row["resident_pct_max"] = stats["resident_pct_max"]
        if "batches_per_s" in row:
            row["krecords_s"] = row["batches_per_s"] * args.batch / 1e3
            row["mib_s"] = row["batches_per_s"] * args.batch * mean_record_bytes(w) / 2**20
        rows.append(row)
    return rows


def median_loader_rows(rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    ok = [[r for r in rows if "batches_per_s" in r] for rows in rounds]
    if not ok[0]:
        return rounds[0]
    medians = {r["backend"]: r for r in median_rows(ok)}
    return [medians.get(r["backend"], r) for r in rounds[0]]


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


def child_ltr(args: argparse.Namespace) -> dict[str, Any]:
    """Our DataLoader over the larger-than-RAM store in `--ltr-mode` for --ltr-seconds, with
    this process's memory sampled every second."""
    from loaderx.dataloader import DataLoader
    from loaderx.sampler import Sampler

    store = Dense.open(args.ltr_store)
    sampler = Sampler(len(store), args.batch, getattr(Sampler.Mode, args.ltr_mode), seed=42)
    loader = DataLoader({"x": store}, sampler, workers=args.loader_workers, prefetch=4)
    for _ in range(2):
        next(loader)
    samples = []
    done = 0
    start = time.perf_counter()
    before = read_bytes()
    next_sample = start
    while True:
        now = time.perf_counter()
        if now >= next_sample:
            samples.append({"t_s": now - start, "batches": done, **process_memory()})
            next_sample += 1.0
        if now - start >= args.ltr_seconds:
            break
        next(loader)
        done += 1
    elapsed = time.perf_counter() - start
    after = read_bytes()
    loader.close()
    store.close()
    out: dict[str, Any] = {"mode": args.ltr_mode, "seconds": elapsed, "batches": done,
                           "batches_per_s": done / elapsed, "samples": samples,
                           "peak_rss_mib": max(s["rss"] for s in samples),
                           "peak_pss_mib": max(s["pss"] for s in samples)}
    if before is not None and after is not None:
        out["read_mib_batch"] = (after - before) / max(1, done) / 2**20
    return out


def larger_than_ram(args: argparse.Namespace, tmp: str, results: dict[str, Any]) -> int:
    mem = mem_total_bytes()
    target = args.ltr_bytes or math.ceil(1.25 * mem)
    if args.ltr_seconds < 60 and not args.ltr_bytes:
        print(f"bench_cold --larger-than-ram: --ltr-seconds {args.ltr_seconds} is under 60 s; "
              "the run must outlast the page cache's warm-up", file=sys.stderr)
        return 2
    free = args.assume_free_bytes if args.assume_free_bytes is not None else shutil.disk_usage(tmp).free
    need = target + HEADROOM_BYTES + (512 << 20)  # + the small store of the evicted-cache figure
    if free < need:
        print(f"bench_cold --larger-than-ram: refusing: the store needs {target / 2**30:.1f} GiB "
              f"(1.25 x MemTotal {mem / 2**30:.1f} GiB), plus {(need - target) / 2**30:.1f} GiB "
              f"of headroom, but {tmp} has {free / 2**30:.1f} GiB free; give --tmp a folder "
              "with more room", file=sys.stderr)
        return 2
    w = Workload("vision_dense", args.data, None)
    assert w.dense is not None
    out: dict[str, Any] = {"mem_total_bytes": mem, "target_bytes": target, "batch": args.batch,
                           "workers": args.loader_workers,
                           "evict_interval_ms": args.evict_interval_ms}
    with tempfile.TemporaryDirectory(dir=tmp, prefix="bench-cold-ltr-") as root:
        args.store_root = root
        path = store_path(root, STORE_LABEL, "larger-than-ram", "raw")
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
        out["records"] = records
        out["store_bytes"] = disk_bytes(path)
        out["write_s"] = time.perf_counter() - t
        # The evicted-cache figure: the same loader over the small store, kept cold.
        npy = ensure_npy(w, root)
        cold = loader_rows(w, argparse.Namespace(**{**vars(args), "loaders": ["loaderx"]}), npy, 0)[0]
        out["evicted_cache"] = cold
        out["runs"] = []
        for mode in ("IID", "CYCLIC"):
            cmd = child_command(args, "ltr", "--ltr-mode", mode, "--ltr-store", path,
                                "--ltr-seconds", str(args.ltr_seconds),
                                "--loader-workers", str(args.loader_workers))
            print(f"  {mode} for {args.ltr_seconds} s ...", file=sys.stderr, flush=True)
            res = subprocess.run(cmd, check=True, capture_output=True, text=True)
            out["runs"].append(json.loads(res.stdout.strip().splitlines()[-1]))
    results["larger_than_ram"] = out
    print(ltr_table(out))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


def ltr_table(out: dict[str, Any]) -> str:
    cold = out["evicted_cache"].get("batches_per_s")
    lines = [f"### Larger than RAM: {out['store_bytes'] / 2**30:,.1f} GiB raw Dense store "
             f"(MemTotal {out['mem_total_bytes'] / 2**30:,.1f} GiB), our DataLoader, batch "
             f"{out['batch']}, {out['workers']} workers", "",
             "| sampler | seconds | batches/s | vs evicted-cache figure | RSS MiB first / last / "
             "peak | PSS MiB first / last / peak | device MiB/batch |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in out["runs"]:
        ratio = f"{r['batches_per_s'] / cold:.2f}x" if cold else ""
        first, last = r["samples"][0], r["samples"][-1]
        lines.append(f"| {r['mode']} | {r['seconds']:.0f} | {r['batches_per_s']:.1f} | {ratio} | "
                     f"{first['rss']:,.0f} / {last['rss']:,.0f} / {r['peak_rss_mib']:,.0f} | "
                     f"{first['pss']:,.0f} / {last['pss']:,.0f} / {r['peak_pss_mib']:,.0f} | "
                     f"{r.get('read_mib_batch', float('nan')):,.1f} |")
    lines.append(f"\nEvicted-cache figure (the same loader over the {out['evicted_cache']['workload']} "
                 f"store, its files evicted every {out['evict_interval_ms']:g} ms): "
                 + (f"{cold:.1f} batches/s" if cold else out["evicted_cache"].get("status", ""))
                 + ". RSS and PSS are this process's, sampled every second (JSON: samples); "
                 "page-cache pages it has not mapped are in neither.")
    return "\n".join(lines)


# -- tables ------------------------------------------------------------------------------------


def ceiling_line(c: dict[str, Any]) -> str:
    depths = "; ".join(f"QD{d} {v['iops']:,.0f} IOPS = {v['mib_s']:,.0f} MiB/s"
                       for d, v in c["depths"].items())
    return (f"Device ceiling ({c['tool']}, random O_DIRECT reads of {c['block_bytes'] / 1024:,.0f} "
            f"KiB over a {c['file_bytes'] / 2**20:,.0f} MiB file in the same folder): {depths}.")


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
    lo = result["loaders"]
    lines = [f"### Cold DataLoaders: IID, batch {lo['batch']}, {lo['workers']} workers (loaderx: "
             f"threads; PyTorch: fork processes), at least {lo['batches']} batches and "
             f"{lo['seconds']:g} s after {lo['warmup']} warm-up, files evicted every {lo['evict_interval_ms']:g} ms by a separate process",
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
    ap.add_argument("--evict-index", action="store_true",
                    help="evict the index/meta files too (before and after the open)")
    ap.add_argument("--allow-tmpfs", action="store_true",
                    help="run even when --tmp is a tmpfs; every table then says its figures "
                         "are page-cache figures")
    ap.add_argument("--ceiling-seconds", type=float, default=2.0,
                    help="seconds of each queue depth's device measurement (default 2)")
    ap.add_argument("--loaders", default=",".join(LOADERS))
    ap.add_argument("--loader-workers", type=int, default=4)
    ap.add_argument("--loader-batches", type=int, default=40,
                    help="at least this many timed batches per loader (default 40) ...")
    ap.add_argument("--loader-seconds", type=float, default=3.0,
                    help="... and at least this many seconds of them (default 3)")
    ap.add_argument("--loader-warmup", type=int, default=3)
    ap.add_argument("--evict-interval-ms", type=float, default=30.0,
                    help="how often the DataLoader runs evict their files (default 30)")
    ap.add_argument("--larger-than-ram", action="store_true",
                    help="opt-in: a store of 1.25x MemTotal, DataLoader IID and CYCLIC over it "
                         "for --ltr-seconds each (writes tens of GiB; not for CI)")
    ap.add_argument("--ltr-seconds", type=float, default=60.0)
    # Internal: child processes, and a fake free-space figure to test the refusal.
    for name in ("--child", "--store-root", "--loader", "--files", "--ltr-mode", "--ltr-store"):
        ap.add_argument(name, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--assume-free-bytes", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--ltr-bytes", type=int, default=None, help=argparse.SUPPRESS)
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
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.child:
        run = {"loader": child_loader, "evictor": child_evictor, "ltr": child_ltr}[args.child]
        print(json.dumps(run(args)))
        return 0
    results = header(args)
    if args.stores_only:  # a child of measure_rounds: this library's stores, once
        for name in args.workloads:
            w = Workload(name, args.data, None)
            rows = measure_rounds(args, __file__, name, lambda w=w: run_stores(w, args), list)
            results["workloads"][name] = {"rows": rows}
        Path(args.json).write_text(json.dumps(results))
        return 0

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

    workloads = []
    for name in args.workloads:
        try:
            workloads.append(Workload(name, args.data, None))
        except FileNotFoundError as exc:
            print(f"skipping {name}: {exc}", file=sys.stderr)
    if not workloads:
        print(f"bench_cold: no workload found in {args.data} (--data)", file=sys.stderr)
        return 1
    copies = 1 + len(args.codecs) * (2 if args.peer else 1)
    need = sum(w.nbytes for w in workloads) * copies + HEADROOM_BYTES
    free = args.assume_free_bytes if args.assume_free_bytes is not None else shutil.disk_usage(tmp).free
    if free < need:
        print(f"bench_cold: refusing: the stores need about {need / 2**30:.1f} GiB in {tmp}, "
              f"which has {free / 2**30:.1f} GiB free", file=sys.stderr)
        return 2

    tables = []
    q = results["device"]["queue"]
    results.update(codecs=args.codecs, evict_index=args.evict_index, batches=args.batches)
    with tempfile.TemporaryDirectory(dir=tmp, prefix="bench-cold-") as root:
        args.store_root = root
        loader_round_rows: list[list[dict[str, Any]]] = [[] for _ in range(max(1, args.rounds))]
        for w in workloads:
            if "gather" not in args.parts and w.name not in LOADER_WORKLOADS:
                continue
            print(f"{w.name} ...", file=sys.stderr, flush=True)
            npy = ensure_npy(w, root)
            if "gather" in args.parts:
                extra = (["--store-root", root, "--batches", str(args.batches)]
                         + (["--evict-index"] if args.evict_index else []))
                rows = measure_rounds(
                    args, __file__, w.name, list,
                    lambda w=w, npy=npy: [npy_row(w, npy, args)],
                    lambda k, extra=extra: [*extra, "--seed", str(k)])
                record = mean_record_bytes(w)
                ceiling = device.rand_read_depths(npy["records" if w.kind == "dense" else "payload"],
                                                  math.ceil(record), DEPTHS, args.ceiling_seconds)
                entry = {"name": w.name, "describe": w.describe(), "records": w.n,
                         "record_bytes_mean": record, "logical_mib": w.nbytes / 2**20,
                         "batch": args.batch, "tmpfs": tmpfs, "ceiling": ceiling,
                         "ceiling_basis": add_ceiling_shares(rows, ceiling, record), "rows": rows}
                results["workloads"][w.name] = entry
                tables.append(table(entry))
            if "loaders" in args.parts and w.name in LOADER_WORKLOADS:
                for k in range(max(1, args.rounds)):
                    loader_round_rows[k] += loader_rows(w, args, npy, k)
        if loader_round_rows[0]:
            results["loaders"] = {"batch": args.batch, "workers": args.loader_workers,
                                  "batches": args.loader_batches, "seconds": args.loader_seconds,
                                  "warmup": args.loader_warmup,
                                  "evict_interval_ms": args.evict_interval_ms,
                                  "note": MAPPED_NOTE,
                                  "rows": median_loader_rows(loader_round_rows)}
            tables.append(loader_table(results))
    print(f"{results['date']}  {results['machine']}  python {results['python']}  numpy "
          f"{results['numpy']}  {results['store']} {results['store_version']}")
    print(f"stores on {results['device']['fs']} ({tmp})"
          + (f", device {q.get('device')}, read_ahead_kb {q.get('read_ahead_kb')}" if q else "")
          + ("; TMPFS: page-cache figures, not cold reads" if tmpfs else "")
          + f"; {args.rounds} round(s), medians; {MAPPED_NOTE}.\n")
    print("\n\n".join(tables))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
