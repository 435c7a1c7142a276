"""The index of large stores: open time, resident index bytes, PSS of several DataLoader
processes and random gathers, against a NumPy memory map of int64 offsets over the same payload.

For each size (--sizes, records) and kind it writes, once, a store of small records with one
raw shard (so the shard file is the payload itself) and, for Ragged, an int64 offsets file
beside it: Ragged int32 records of 1..8 items (about 18 bytes), and Dense int32 records of 4
items (16 bytes; at 10^9 records of 1 item, 4 bytes, to fit the disk). Then, per size:

- open: the first open of a host (index.zri validated, the compact index built: `validate=
  "full"`), and a later one (the compact index mapped from the index cache folder), each in a
  fresh process with the page cache warm, medians of --rounds; NumPy: np.load of the memory
  maps.
- resident index bytes per record: the compact index (index_info) and the verified-record
  bitmap (1 bit), against 8 for NumPy's offsets (Dense needs none: offsets are implicit).
- PSS of 1, 4 and 8 processes (--procs), each running a loaderx DataLoader (IID, batch 256)
  for --steps steps over the store, all alive when /proc/PID/smaps_rollup is read; NumPy:
  the same processes gathering the same batches from the memory maps.
- warm and cold random gathers, records/s: warm, batches drawn from a pool of records read
  once before timing; cold, the store's files (or NumPy's) evicted from the page cache
  (posix_fadvise DONTNEED) and the reader (or the maps) made anew before every batch, fresh
  records every batch: a first epoch's reads (the compact index, with the low half of each
  record's checksum, stays in memory, like NumPy's offsets; index.zri is evicted too, which
  readers before zrecord's file version 2 of the compact index read a checksum from).

Usage: python benchmarks/index/bench_index.py --tmp DIR [--sizes 1e6,1e7,1e8,1e9]
       [--kinds ragged,dense] [--rounds 3] [--procs 1,4,8] [--steps 40]
       [--json docs/benchmarks/bench_index.json] [--plot docs/benchmarks/index.png]
--tmp must be a real disk (cold reads), with room for about 30 GB at 10^9 records.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, which holds `common`
from common.device import work_folder
from common.probes import evict

HERE = Path(__file__).resolve().parent
BATCH = 256
CHUNK = 1 << 20


def build(kind: str, n: int, folder: Path) -> dict[str, Any]:
    """The store of `kind` and `n` records under `folder`, written the first time."""
    from zrecord import Dense, Ragged

    path = folder / f"{kind}-{n}"
    meta = folder / f"{kind}-{n}.json"
    if meta.is_file() and (path / "header.zrh").is_file():
        return dict(json.loads(meta.read_text()))
    rng = np.random.default_rng(n)
    t0 = time.perf_counter()
    if kind == "dense":
        width = 1 if n >= 10**9 else 4
        with Dense.create(path, np.int32, (width,), codec="raw", data_shards=1) as w:
            for start in range(0, n, 8 * CHUNK):
                m = min(8 * CHUNK, n - start)
                w.append(rng.integers(0, 50_000, (m, width), dtype=np.int32))
        offsets = None
    else:
        offsets = np.lib.format.open_memmap(folder / f"{kind}-{n}-offsets.npy", "w+", np.int64, (n + 1,))
        offsets[0] = 0
        with Ragged.create(path, np.int32, 1, codec="raw", data_shards=1) as w:
            for start in range(0, n, CHUNK):
                m = min(CHUNK, n - start)
                lens = rng.integers(1, 9, m)
                flat = rng.integers(0, 50_000, int(lens.sum()), dtype=np.int32)
                ends = np.cumsum(lens)
                offsets[start + 1:start + m + 1] = offsets[start] + ends * 4
                w.append(np.split(flat, ends[:-1]))
        offsets.flush()
        del offsets
    info = {"kind": kind, "records": n, "write_s": time.perf_counter() - t0,
            "payload_bytes": os.path.getsize(path / "data-000.zrd"),
            "index_bytes": os.path.getsize(path / "index.zri")}
    meta.write_text(json.dumps(info))
    return info


OPEN = r"""
import sys, time, json
import numpy as np
kind, path, mode, cache = sys.argv[1:5]
from zrecord import open_store
t0 = time.perf_counter()
if mode == "numpy":
    offs = np.load(path + "-offsets.npy", mmap_mode="r") if kind == "ragged" else None
    payload = np.memmap(path + "/data-000.zrd", np.uint8, "r")
    print(json.dumps({"open_s": time.perf_counter() - t0, "resident_bytes": 0}))
else:
    s = open_store(path, index_cache=cache, validate=mode)
    dt = time.perf_counter() - t0
    info = s.index_info()
    print(json.dumps({"open_s": dt, "source": info["source"], "resident_bytes": info["resident_bytes"]}))
"""


def open_times(kind: str, path: Path, cache: Path, rounds: int) -> dict[str, Any]:
    """Median open times in fresh processes: full validation, cached, NumPy."""
    out: dict[str, Any] = {}
    for mode in ("full", "cached", "numpy"):
        runs = []
        for _ in range(rounds):
            proc = subprocess.run([sys.executable, "-c", OPEN, kind, str(path), mode, str(cache)],
                                  check=True, capture_output=True, text=True)
            runs.append(json.loads(proc.stdout))
        if mode == "cached":
            assert all(r["source"] == "cached" for r in runs), runs
        out[mode] = {"open_s": statistics.median(r["open_s"] for r in runs),
                     "open_s_all": [r["open_s"] for r in runs],
                     "resident_bytes": runs[0]["resident_bytes"]}
    return out


WORKER = r"""
import sys, json
import numpy as np
kind, path, mode, cache, steps, seed = sys.argv[1:7]
steps, seed = int(steps), int(seed)
if mode == "zrecord":
    from zrecord import open_store
    from loaderx import DataLoader, Sampler
    store = open_store(path, index_cache=cache)
    loader = DataLoader({"x": store}, Sampler(len(store), 256, "iid", seed=seed), prefetch=2)
    for _ in range(steps):
        next(loader)
else:
    payload = np.memmap(path + "/data-000.zrd", np.uint8, "r")
    rng = np.random.default_rng(seed)
    if kind == "ragged":
        offs = np.load(path + "-offsets.npy", mmap_mode="r")
        n = len(offs) - 1
        for _ in range(steps):
            idx = rng.integers(0, n, 256)
            [payload[offs[i]:offs[i + 1]].view(np.int32).copy() for i in idx]
    else:
        recs = payload.view(np.int32).reshape(-1, int(sys.argv[7]))
        for _ in range(steps):
            recs[rng.integers(0, len(recs), 256)]
with open("/proc/self/smaps_rollup") as f:
    mem = {k: int(v.split()[0]) * 1024 for k, v in (line.split(":", 1) for line in f if ":" in line)}
print(json.dumps({"ready": True}), flush=True)
sys.stdin.readline()
"""


def pss(kind: str, path: Path, cache: Path, mode: str, procs: int, steps: int, width: int) -> dict[str, float]:
    """Total and per-process PSS (MiB) of `procs` processes alive together, each after
    `steps` batches of `mode` (zrecord DataLoader or NumPy memory maps)."""
    children = [subprocess.Popen([sys.executable, "-c", WORKER, kind, str(path), mode, str(cache),
                                  str(steps), str(k), str(width)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                for k in range(procs)]
    try:
        for c in children:
            line = c.stdout.readline() if c.stdout else ""
            if not line.startswith("{"):
                raise RuntimeError(f"a {mode} process failed (exit {c.wait()})")
        totals: dict[str, float] = {"Pss": 0.0, "Pss_Anon": 0.0, "Pss_File": 0.0, "index": 0.0}
        for c in children:
            with open(f"/proc/{c.pid}/smaps_rollup") as f:
                for line in f:
                    key = line.split(":", 1)[0]
                    if key in totals:
                        totals[key] += int(line.split()[1]) / 1024
            totals["index"] += index_pss(c.pid) / 1024
    finally:
        for c in children:
            if c.stdin:
                c.stdin.write("\n")
                c.stdin.close()
            c.wait()
    return {"pss_mib": totals["Pss"], "pss_anon_mib": totals["Pss_Anon"],
            "pss_file_mib": totals["Pss_File"], "index_pss_mib": totals["index"],
            "per_process_mib": totals["Pss"] / procs}


def index_pss(pid: int) -> int:
    """KiB of PSS of the process's mappings of an index: a compact index file (.zrx, or the
    anonymous memory file of one) or NumPy's offsets (-offsets.npy)."""
    total, counting = 0, False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5 and ":" not in head[0]:
                name = head[5] if len(head) > 5 else ""
                counting = name.endswith(".zrx") or "zrecord-index" in name or name.endswith("-offsets.npy")
            elif counting and line.startswith("Pss:"):
                total += int(line.split()[1])
    return total


def gathers(kind: str, path: Path, cache: Path, seconds: float) -> dict[str, float]:
    """Warm and cold random gathers, records/s, of the store and of NumPy's memory maps."""
    from zrecord import open_store

    def zr() -> Any:
        store = open_store(path, index_cache=cache)
        return store.__getitem__, store.close

    def np_maps() -> Any:
        payload = np.memmap(path / "data-000.zrd", np.uint8, "r")
        if kind == "ragged":
            offs = np.load(f"{path}-offsets.npy", mmap_mode="r")

            def ragged(idx: np.ndarray) -> Any:
                # Copied, as a reader's records are: a view would read nothing.
                return [payload[offs[i]:offs[i + 1]].view(np.int32).copy() for i in idx]
            return ragged, lambda: None
        recs = payload.view(np.int32).reshape(len(payload) // 4 // width, width)
        return recs.__getitem__, lambda: None

    with open(path / "index.zri", "rb") as f:
        n = (os.fstat(f.fileno()).st_size) // (24 if kind == "dense" else 32)
    width = 1 if kind == "dense" and n >= 10**9 else 4
    rng = np.random.default_rng(7)
    pool = rng.integers(0, n, 1 << 18)
    out = {}
    for name, make, files in (("zrecord", zr, ["data-000.zrd", "index.zri"]),
                              ("numpy", np_maps, ["data-000.zrd"])):
        out[f"{name}_warm"], out[f"{name}_cold"] = _warm_cold(
            make, [str(path / f) for f in files], n, pool, rng, seconds)
    return out


def _warm_cold(make: Any, files: list[str], n: int, pool: np.ndarray, rng: np.random.Generator,
               seconds: float) -> tuple[float, float]:
    """Warm then cold records/s of the gather function that `make()` returns with its close."""
    fn, close = make()
    fn(np.sort(pool))
    warm = _rate(lambda: fn(rng.choice(pool, BATCH)), seconds)
    close()
    fn = None  # NumPy's maps go with their last reference
    gc.collect()
    # Cold: the reader (or the maps) made anew after the files' pages are dropped, since
    # pages that a mapping holds cannot be; the first read of each record, as an epoch's.
    state: dict[str, Any] = {}

    def fresh() -> None:
        if "close" in state:
            state.pop("close")()
            # NumPy's maps go with the last reference to them: pages a mapping holds
            # would stay in the page cache.
            state.pop("fn")
            gc.collect()
        evict(files)
        state["fn"], state["close"] = make()

    cold = _rate(lambda: state["fn"](rng.integers(0, n, BATCH)), seconds, before=fresh)
    state["close"]()
    return warm, cold


def _rate(batch: Any, seconds: float, before: Any = None) -> float:
    """Records/s of `batch()` calls (each BATCH records) for about `seconds`, `before()` untimed."""
    spent, done = 0.0, 0
    while spent < seconds:
        if before:
            before()
        t0 = time.perf_counter()
        batch()
        spent += time.perf_counter() - t0
        done += 1
    return done * BATCH / spent


PARTS = ("open", "pss", "gathers")


def run(args: argparse.Namespace) -> dict[str, Any]:
    folder = Path(args.tmp)
    cache = folder / "index-cache"
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M"), "machine": platform.platform(),
        "python": platform.python_version(), "numpy": np.__version__, "rows": []}
    earlier: dict[tuple[str, int], dict[str, Any]] = {}
    if args.update:
        old = json.loads(Path(args.update).read_text())
        earlier = {(r["kind"], r["records"]): r for r in old["rows"]}
    for size in args.sizes:
        for kind in ("ragged", "dense"):
            if kind == "ragged" and size >= 10**9:
                continue  # 32 GB of index and 18 GB of payload: Dense shows 10^9 (see --help)
            if kind not in args.kinds:
                if (kind, size) in earlier:
                    results["rows"].append(earlier[(kind, size)])
                continue
            print(f"{kind} {size:,}: writing or reusing the store", file=sys.stderr, flush=True)
            row = earlier.get((kind, size)) or build(kind, size, folder)
            path = folder / f"{kind}-{size}"
            width = 1 if kind == "dense" and size >= 10**9 else 4
            if "open" in args.parts:
                print(f"{kind} {size:,}: open", file=sys.stderr, flush=True)
                row["open"] = open_times(kind, path, cache, args.rounds)
                row["resident_bytes_per_record"] = row["open"]["cached"]["resident_bytes"] / size + 1 / 8
                row["numpy_index_bytes_per_record"] = 8.0 if kind == "ragged" else 0.0
            if "pss" in args.parts:
                row["pss"] = {}
                for procs in args.procs:
                    print(f"{kind} {size:,}: PSS of {procs} processes", file=sys.stderr, flush=True)
                    row["pss"][str(procs)] = {m: pss(kind, path, cache, m, procs, args.steps, width)
                                              for m in ("zrecord", "numpy")}
            if "gathers" in args.parts:
                print(f"{kind} {size:,}: gathers", file=sys.stderr, flush=True)
                row["gathers"] = gathers(kind, path, cache, args.seconds)
            # When each part of the row was measured (an --update keeps the others' dates).
            row.setdefault("measured", {}).update({p: results["date"] for p in args.parts})
            results["rows"].append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    return results


def table(results: dict[str, Any], procs: list[int]) -> str:
    head = ("| store | records | open, first (validated) | open, cached | NumPy open | index B/record "
            "(NumPy) | " + " | ".join(f"PSS of {p}: all / index, MiB (NumPy)" for p in procs)
            + " | warm rec/s (NumPy) | cold rec/s (NumPy) |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results["rows"]:
        o, g = r["open"], r["gathers"]
        cells = [r["kind"], f"{r['records']:,}", f"{o['full']['open_s']:.3f} s",
                 f"{o['cached']['open_s']:.3f} s", f"{o['numpy']['open_s']:.3f} s",
                 f"{r['resident_bytes_per_record']:.2f} ({r['numpy_index_bytes_per_record']:.0f})"]
        for p in procs:
            pz = r["pss"][str(p)]
            z, q = pz["zrecord"], pz["numpy"]
            cells.append(f"{z['pss_mib']:,.0f} / {z['index_pss_mib']:,.0f} "
                         f"({q['pss_mib']:,.0f} / {q['index_pss_mib']:,.0f})")
        cells.append(f"{g['zrecord_warm']:,.0f} ({g['numpy_warm']:,.0f})")
        cells.append(f"{g['zrecord_cold']:,.0f} ({g['numpy_cold']:,.0f})")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(results: dict[str, Any], out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for kind in sorted({r["kind"] for r in results["rows"]}):
        rows = [r for r in results["rows"] if r["kind"] == kind]
        x = [r["records"] for r in rows]
        a.plot(x, [r["open"]["full"]["open_s"] for r in rows], "o-", label=f"{kind}: first open")
        a.plot(x, [r["open"]["cached"]["open_s"] for r in rows], "s--", label=f"{kind}: cached open")
        b.plot(x, [r["resident_bytes_per_record"] for r in rows], "o-", label=f"{kind}: zrecord")
        b.plot(x, [r["numpy_index_bytes_per_record"] for r in rows], "s--", label=f"{kind}: NumPy offsets")
    for ax, title in ((a, "open time (s)"), (b, "index bytes per record")):
        ax.set_xscale("log")
        ax.set_xlabel("records")
        ax.set_title(title)
        ax.legend(fontsize=7)
    a.set_yscale("log")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tmp", required=True, type=work_folder, help="folder for the stores (a real disk)")
    ap.add_argument("--sizes", default="1e6,1e7,1e8,1e9",
                    type=lambda s: [int(float(x)) for x in s.split(",")])
    ap.add_argument("--kinds", default="ragged,dense", type=lambda s: s.split(","))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--procs", default="1,4,8", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--seconds", type=float, default=3.0, help="time per gather measurement")
    ap.add_argument("--parts", default=",".join(PARTS), type=lambda s: s.split(","),
                    help="what to measure: open, pss, gathers (default all)")
    ap.add_argument("--update", metavar="JSON",
                    help="an earlier --json: its figures are kept for the parts and kinds not "
                         "measured now (each row's `measured` says when each part was)")
    ap.add_argument("--json")
    ap.add_argument("--plot")
    args = ap.parse_args(argv)
    results = run(args)
    results["args"] = {k: v for k, v in vars(args).items() if k not in ("json", "plot")}
    print(table(results, args.procs))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if args.plot:
        plot(results, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
