"""bench_cold.py --larger-than-ram: our DataLoader over a raw Dense store of 1.25x RAM (or of
a cgroup's memory limit), IID and CYCLIC, each run a `--child ltr` process of bench_cold.py,
beside the evicted-cache and cold-pass references (bench_cold.py's docstring says how).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cold_gather import can_bypass, ensure_npy
from cold_loaders import child_command, child_result, loader_rows, warm_libraries
from common.cold_report import ltr_table, window_rate
from common.data import Workload
from common.probes import (
    CgroupUnavailable,
    MemoryCgroup,
    cgroup_base,
    evict,
    folder_files,
    mem_total_bytes,
    process_memory,
    read_bytes,
    read_text,
)
from common.store import STORE_LABEL, Dense, store_path
from common.timing import disk_bytes, sync_tree

# -- larger than RAM --------------------------------------------------------------------------


# Room a run needs beyond its stores, and what --larger-than-ram leaves free on the disk.
HEADROOM_BYTES = 2 << 30


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
    sync_tree(path)
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
