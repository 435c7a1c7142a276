"""Cold-read benchmark: random gathers and DataLoaders with the data evicted from the page
cache, beside the storage device's own random-read ceiling, measured in the same run.

Workloads (common.data.WORKLOADS, built by benchmarks/prepare_data.py):
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
disk), by fio or common.device's probe (the table names which). Every row gives
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
(common.probes.PeakPss) and the device bytes it read per batch (read_bytes of the process tree,
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

The code: this file is the command line and the driver; cold_gather.py, cold_loaders.py and
cold_ltr.py beside it are the three workloads (cold gathers, cold DataLoaders, larger than
RAM); common.probes probes the page cache, device reads, memory and memory cgroups;
common.cold_report writes the tables, which benchmarks/report.py reuses.

Usage: python benchmarks/cold/bench_cold.py [--workload tokens,vision_dense,...] [--rounds 3]
       [--batches 10 | --seconds S] [--peer /path/to/venv/bin/python] [--tmp DIR] [--json OUT]
       [--parts gather,loaders] [--evict-index] [--larger-than-ram]
       [--cold-method auto|cgroup|evict] [--cold-loader-bytes 4G] [--cold-loader-limit 1.5G]
       [--ltr-seconds 60] [--ltr-memory-limit 4G] [--ltr-cache auto|bypass|both]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, which holds `common`
from cold_gather import (
    DEPTHS,
    add_ceiling_shares,
    ensure_npy,
    mean_record_bytes,
    median_ceiling,
    npy_row,
    run_stores,
)
from cold_loaders import (
    LOADER_WORKLOADS,
    LOADERS,
    child_evictor,
    child_loader,
    choose_method,
    cold_data_need,
    loader_part,
)
from cold_ltr import HEADROOM_BYTES, child_ltr, larger_than_ram
from common import device
from common.cold_report import loader_table, report, table
from common.data import WORKLOADS, Workload
from common.peers import add_arguments, builds, measure_rounds
from common.probes import CgroupUnavailable
from common.reports import header

# -- the driver -------------------------------------------------------------------------------


BYTE_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


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


if __name__ == "__main__":
    sys.exit(main())
