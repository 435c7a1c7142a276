"""bench_cold.py's cold gathers: the stores and the NumPy copies, and one timed gather per
fresh open with the files evicted before it (bench_cold.py's docstring says how).

The rows come from a --stores-only child of bench_cold.py (run_stores) for this library's
stores (written and checked by common.store.ensure_store), and from the driver itself for the
NumPy copy (npy_row); the device ceiling beside them is common.device's.
"""

from __future__ import annotations

import argparse
import inspect
import os
import shutil
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from common import device
from common.data import Workload
from common.probes import evict, read_bytes, resident_bytes
from common.store import OURS, STORE_LABEL, Dense, ensure_store, open_store
from common.timing import disk_bytes, summarize, sync_tree

# -- the stores and the NumPy copies ----------------------------------------------------------


DEPTHS = (1, 8, 32, 128)
TOKEN_WORKLOADS = ("token_blocks", "tokens")  # the only ones zstd_dict is measured on


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
    sync_tree(part)
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


# -- cold gathers -----------------------------------------------------------------------------


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
