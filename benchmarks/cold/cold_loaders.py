"""bench_cold.py's cold DataLoaders: our DataLoader and PyTorch's over cold files, each in a
process of its own (a `--child loader` run of bench_cold.py), kept cold by a separate evictor
or by a memory cgroup over a larger dataset built once for it (bench_cold.py's docstring says
how and why).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import mmap
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from cold_gather import ensure_npy, mean_record_bytes, store_files
from common.cold_report import MAPPED_NOTE
from common.data import WORKLOADS, MmapDataset, Workload
from common.peers import builds
from common.probes import (
    CgroupUnavailable,
    MemoryCgroup,
    PeakPss,
    cgroup_base,
    evict,
    folder_files,
    percent_resident,
    read_text,
    resident_bytes,
    tree_read_bytes,
)
from common.store import OURS, STORE_LABEL, Dense, Ragged, ensure_store, open_store, store_path, zrecord
from common.timing import disk_bytes, median_rows, sync_tree

# The children are runs of the benchmark's own script (--child ...).
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_cold.py")


# -- cold DataLoaders -------------------------------------------------------------------------


LOADER_WORKLOADS = ("vision_dense", "tokens")
LOADERS = ("loaderx", "torch-fork", "torch-fork-random")  # the last one only on request
# Loader figures beyond common.timing.METRICS that the round medians cover too.
LOADER_EXTRA = ("cgroup_peak_mib", "resident_start_pct", "resident_pct_max", "limit_hits", "oom_kills")


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
    """common.data.MmapDataset (a per-sample Dataset over a read-only memory map) whose map,
    opened lazily in each worker, is advised MADV_RANDOM: the loader "torch-fork-random"."""

    def __init__(self, path: str) -> None:
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


def child_command(args: argparse.Namespace, what: str, *extra: str,
                  python: str = sys.executable) -> list[str]:
    return [python, SCRIPT, "--child", what, "--data", args.data,
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
                   *extra: str, python: str = sys.executable) -> list[str]:
    return child_command(args, "loader", "--loader", name, "--workload", workload,
                         "--loader-workers", str(args.loader_workers), "--loader-batches",
                         str(args.loader_batches), "--loader-seconds", str(args.loader_seconds),
                         "--loader-warmup", str(args.loader_warmup), "--seed", str(round_), *extra,
                         python=python)


def loader_runs(args: argparse.Namespace) -> list[tuple[str, str, str]]:
    """(label, loader, python) of every loader a round runs: each of --loaders, and loaderx
    once more for each --builds entry ("loaderx@NAME", run by that build's python), right
    after this build's, so that the two readers meet the same disk minutes apart."""
    runs = []
    for name in args.loaders:
        runs.append((name, name, sys.executable))
        if name == "loaderx":
            runs += [(f"loaderx@{build}", name, python) for build, python in builds(args)]
    return runs


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
        [sys.executable, SCRIPT, "--child", "evictor", "--files", os.pathsep.join(files),
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
    """A loader's row (`name`: its label, loader_runs), with a status if it cannot run here.
    "backend" keys the round medians, so it names the workload too."""
    row: dict[str, Any] = {"backend": f"{name}/{w.name}", "loader": name, "workload": w.name}
    if name.startswith("torch") and importlib.util.find_spec("torch") is None:
        row["status"] = "torch is not installed (pip install torch)"
    return row


def loader_rows(w: Workload, args: argparse.Namespace, npy: dict[str, str],
                round_: int) -> list[dict[str, Any]]:
    """One round of every loader over `w`, each in its own process beside an evictor."""
    rows = []
    ours = ensure_store(w, "raw", args.store_root, args.batch)
    for label, name, python in loader_runs(args):
        row = loader_row(label, w)
        if "status" in row:
            rows.append(row)
            continue
        files = store_files(ours)[0] if name == "loaderx" else \
            [npy["records" if w.kind == "dense" else "payload"]]
        result, stats = run_with_evictor(args, files, loader_command(args, name, w.name, round_,
                                                                     python=python))
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


# -- cold DataLoaders in a memory cgroup ------------------------------------------------------


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


# -- the larger dataset of the cgroup measurement ---------------------------------------------


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
        sync_tree(part)
        check_cold_data(w, part, records, batch)
        Path(part, "manifest.json").write_text(json.dumps(
            {"key": plan["key"], "build_s": time.perf_counter() - t}))
        sync_tree(part)
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


def cgroup_loader_rows(w: Workload, args: argparse.Namespace, data: dict[str, Any],
                       group: tuple[str, str], round_: int) -> list[dict[str, Any]]:
    """One round of every loader over the larger dataset of `w`, each in its own process
    tree inside its own memory cgroup (--cold-loader-limit), started with every file of the
    dataset dropped from the page cache (nothing has them mapped then). No evictor runs: the
    limit keeps the page cache small beside the data, so IID reads are mostly cold."""
    rows = []
    files = {"loaderx": folder_files(data["store"]), "torch": folder_files(data["npy"])}
    limit = args.cold_loader_limit[w.name]
    for label, name, python in loader_runs(args):
        row = loader_row(label, w)
        if "status" in row:
            rows.append(row)
            continue
        mine = files["loaderx" if name == "loaderx" else "torch"]
        evict(files["loaderx"] + files["torch"])
        row["resident_start_pct"] = percent_resident(mine)
        cmd = loader_command(args, name, w.name, round_, "--loader-store", data["store"],
                             "--loader-npy", data["npy"], python=python)
        with MemoryCgroup(*group, f"{label.replace('@', '-')}-{w.name}", limit) as cg:
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
