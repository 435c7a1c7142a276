"""Durable writes of small-record stores with an empty and with a full index cache folder.

Issue [R2]: the index cache folder grew without bound (9,643 files, 1.6 GB after one run of the
tests and the benchmarks) and every writer's close() scanned it file by file, 68-92 ms a close
instead of 4-7 ms. This script measures what a write costs now with the folder empty and with
the folder holding `--entries` (10,000) compact index files, for two or more builds of zrecord
(`--builds before=PYTHON,after=PYTHON`: the first is the baseline of the "vs <first>" column)
and the published loaderx 2.5.9 (`--peer PYTHON`, which has no index cache: it shows the
machine's drift).

Cases (the token workloads of bench_dense.py / bench_ragged.py, raw codec by default):
  dense_blocks  one Dense store of `--dense-blocks` 2 KiB token blocks (the real blocks,
                cycled), fewer than 65,536 records: its index is never cached since [R2]
  ragged_small  one Ragged store of the first `--ragged-records` token records (< 65,536)
  many_small    `--small-stores` Ragged stores of `--small-records` token records written one
                after another, as tests and experiments do: close() dominates
  ragged_large  one Ragged store of every token record (127,633 > 65,536): its close()
                primes the cache, so it writes a file there and may prune the folder
A write is durable: append + close() for our stores (close flushes); for loaderx 2.5.9
append + close + an fsync of every file and folder it wrote (`common.timing.sync_tree`). Every
timed write starts on a clean page cache (os.sync()). MiB/s counts the records' bytes; a
close is close() (+ the fsync for loaderx 2.5.9). many_small's MiB/s is all its bytes over
the whole sequence.

Folder states (ZRECORD_INDEX_CACHE points every child at its build's folder, prepared before
each timed write, or once before a many_small sequence):
  empty        a new empty folder (no prune stamp)
  full         `--entries` real compact index files of the build's own file version, named as
               that build names them; 90% of them of stores that no longer exist (as in
               the issue), 10% of live stores; ~1.4 GB in all; no prune stamp, so the first
               write that caches an index prunes the folder (as the first one after an
               upgrade does, and one every 10 minutes)
  full-pruned  the same with the prune stamp just touched: pruning is not due (ragged_large
               only; the other cases never reach the pruning)
  full-live    `--entries` files all of live stores, no prune stamp: the pruning that recurs
               every 10 minutes over a folder that it cannot shrink (ragged_large only)
The files are copies of a few real files that each build wrote for donor stores of 1,000 to
60,000 token records (with ZRECORD_INDEX_CACHE_RECORDS_MIN=1), under distinct names.

Every (case, state, backend) runs in a fresh subprocess of this script, which makes
`--repeats` timed writes (of the store, or of many_small's sequence); the backends run in
rotating order, `--rounds` rounds; each round also measures the device's sequential write
ceiling. Rows give the median of the rounds' MiB/s (each round's: the median of its
repeats), the median and p90 of every close (and of every create + append) of every round,
and ratios as the median of per-round ratios (with their range).

Usage: python benchmarks/index/bench_index_cache_writes.py --data ../data \
         --builds before=../venv-before/bin/python,after=../venv-after/bin/python \
         --peer ../peerenv/bin/python --tmp /var/tmp/zr-index-cache [--rounds 3] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, which holds `common`
from common.data import default_data
from common.device import device_ceilings, device_write_ceiling, work_folder
from common.peers import builds
from common.reports import fmt_ratio, fs_label, paired_ratio
from common.store import OURS, STORE_LABEL, Dense, Ragged
from common.timing import sync_tree

CASES = ("dense_blocks", "ragged_small", "many_small", "ragged_large")
STATES = ("empty", "full", "full-pruned", "full-live")
# The donor stores whose compact index files fill the folder: (kind, records, share of the
# entries). Their sizes average ~140 KB, close to the 1.6 GB / 9,643 files of the issue.
DONORS = (("ragged", 1_000, 0.30), ("ragged", 10_000, 0.25), ("dense", 14_170, 0.15),
          ("ragged", 30_000, 0.20), ("ragged", 60_000, 0.10))
LIVE_SHARE = 0.10
# The cache's file names: header checksum, device major and minor, inode, and (since [R2])
# the user's id.
NAME = re.compile(r"^([0-9a-f]{16})-([0-9a-f]+)-([0-9a-f]+)-([0-9a-f]+)(-\d+)?\.zrx$")
ENV_CLEARED = ("ZRECORD_INDEX_CACHE_RECORDS_MIN", "ZRECORD_INDEX_CACHE_BYTES", "ZR_BENCH_LABEL")


# ---- the data ---------------------------------------------------------------------------------

def token_records(data: str) -> list[np.ndarray]:
    """The real token records (views of one in-memory array), as bench_ragged.py's list writes
    append them."""
    tokens = np.load(os.path.join(data, "tokens.npy"))
    offsets = np.load(os.path.join(data, "offsets.npy"))
    return [tokens[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1)]


def token_blocks(data: str, n: int) -> np.ndarray:
    """`n` 512-token blocks: the real ones, cycled when `n` exceeds them."""
    blocks = np.load(os.path.join(data, "token_blocks.npy"))
    return np.ascontiguousarray(blocks[np.arange(n) % len(blocks)])


def case_sources(case: str, args: argparse.Namespace) -> tuple[str, list[Any]]:
    """The kind of store and the sources of the stores one write of `case` makes."""
    if case == "dense_blocks":
        return "dense", [token_blocks(args.data, args.dense_blocks)]
    records = token_records(args.data)
    if case == "ragged_small":
        return "ragged", [records[:args.ragged_records]]
    if case == "ragged_large":
        return "ragged", [records]
    span = len(records) - args.small_records
    return "ragged", [records[i * args.small_records % span:][:args.small_records]
                      for i in range(args.small_stores)]


def nbytes_of(source: Any) -> int:
    return int(source.nbytes) if isinstance(source, np.ndarray) else sum(r.nbytes for r in source)


# ---- one durable write ------------------------------------------------------------------------

def create(kind: str, path: str, codec: str, **kw: Any) -> Any:
    if kind == "dense":
        return Dense.create(path, np.int32, (512,), codec=codec, **kw)
    return Ragged.create(path, np.int32, 1, codec=codec, **kw)


def durable_write(kind: str, path: str, source: Any, codec: str) -> tuple[float, float]:
    """(seconds of create + append, seconds of the close) of one store at `path`: append +
    close(), and for loaderx 2.5.9, which never flushes, + an fsync of everything it wrote."""
    t0 = time.perf_counter()
    w = create(kind, path, codec)
    w.append(source)
    t1 = time.perf_counter()
    w.close()
    if not OURS:
        sync_tree(path)
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1


def verify(kind: str, path: str, source: Any) -> None:
    """The store holds exactly `source` (dtype, shapes, order, values); read without the
    index cache, so that checking leaves the folder as the write left it."""
    kw = {"index_cache": None} if OURS else {}
    with (Dense if kind == "dense" else Ragged).open(path, **kw) as store:
        got = store[:]
    if kind == "dense":
        ok = got.dtype == source.dtype and np.array_equal(got, source)
    else:
        ok = len(got) == len(source) and all(
            a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
            for a, b in zip(got, source, strict=True))
    if not ok:
        raise AssertionError(f"{STORE_LABEL}: the store at {path} does not hold what was appended")


# ---- the cache folder ---------------------------------------------------------------------------

def make_donors(work: str, args: argparse.Namespace) -> None:
    """In a build's own interpreter: write the donor stores (one live and one gone per row of
    DONORS) under `work`, open each once so that the build writes its compact index file into
    `work`/donor-cache, keep those files under `work`/donors, remove the "gone" stores, and
    describe them in `work`/donors.json."""
    records = token_records(args.data)
    blocks = token_blocks(args.data, max(n for k, n, _ in DONORS if k == "dense"))
    cache = os.path.join(work, "donor-cache")
    os.makedirs(os.path.join(work, "donors"), exist_ok=True)
    out = []
    for kind, n, share in DONORS:
        for fate in ("live", "gone"):
            path = os.path.join(work, "stores", f"{kind}{n}-{fate}")
            with create(kind, path, "raw", index_cache=None) as w:
                w.append(blocks[:n] if kind == "dense" else records[:n])
            before = set(os.listdir(cache)) if os.path.isdir(cache) else set()
            # A store with index parts (format 1.2) is read by part and writes no file at a
            # plain open: validate="full" judges it whole and writes one (a build before
            # format 1.2 takes no validate= and writes one at a plain open).
            try:
                opened = (Dense if kind == "dense" else Ragged).open(path, index_cache=cache,
                                                                     validate="full")
            except TypeError:
                opened = (Dense if kind == "dense" else Ragged).open(path, index_cache=cache)
            opened.close()
            new = [f for f in set(os.listdir(cache)) - before if NAME.match(f)]
            if len(new) != 1:
                raise SystemExit(f"{STORE_LABEL}: opening {path} wrote {new} into {cache}; "
                                 "expected one compact index file")
            donor = os.path.join(work, "donors", f"{kind}{n}-{fate}.zrx")
            shutil.copyfile(os.path.join(cache, new[0]), donor)
            if fate == "gone":
                shutil.rmtree(path)
            out.append({"kind": kind, "records": n, "share": share, "fate": fate,
                        "file": donor, "name": new[0], "bytes": os.path.getsize(donor)})
    Path(work, "donors.json").write_text(json.dumps(out, indent=1))


def entries_for(donors: list[dict[str, Any]], count: int, live_share: float,
                seed: int = 0) -> dict[str, str]:
    """`count` distinct cache file names in the donors' own name pattern (random header
    checksums and inodes), each mapped to the donor file it is a copy of: that of a live
    store for `live_share` of them."""
    rng = np.random.default_rng(seed)
    by_size = {}
    for d in donors:
        by_size.setdefault((d["kind"], d["records"]), {})[d["fate"]] = d
    sizes = list(by_size)
    shares = np.array([by_size[s]["live"]["share"] for s in sizes])
    out: dict[str, str] = {}
    while len(out) < count:
        pair = by_size[sizes[rng.choice(len(sizes), p=shares / shares.sum())]]
        donor = pair["live" if rng.random() < live_share else "gone"]
        m = NAME.match(donor["name"])
        assert m is not None
        name = (f"{int(rng.integers(0, 2**63)):016x}-{m[2]}-{m[3]}-"
                f"{int(rng.integers(2**20, 2**40)):x}{m[5] or ''}.zrx")
        out[name] = donor["file"]
    return out


def prepare_folder(folder: str, entries: dict[str, str] | None, state: str) -> None:
    """Make `folder` the folder of `state`: empty, or exactly `entries` (copies of their donor
    files, read-only as the core makes them) with the prune stamp absent ("full") or just touched
    ("full-pruned"). Only what differs from the last state is removed or copied, so each
    state has a folder of its own (`folder_of`)."""
    if state == "empty" or entries is None:
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        return
    os.makedirs(folder, exist_ok=True)
    have = set(os.listdir(folder))
    for name in have - entries.keys():
        os.unlink(os.path.join(folder, name))
    for name in entries.keys() - have:
        path = os.path.join(folder, name)
        shutil.copyfile(entries[name], path)
        os.chmod(path, 0o400)
    if state == "full-pruned":
        stamp = os.path.join(folder, f".prune-stamp-{os.geteuid()}")
        os.close(os.open(stamp, os.O_WRONLY | os.O_CREAT, 0o600))
        os.utime(stamp)


def folder_files(folder: str) -> int:
    return sum(1 for f in os.listdir(folder) if f.endswith(".zrx")) if os.path.isdir(folder) else 0


# ---- a child: one case, one folder state, one backend --------------------------------------

def run_child(args: argparse.Namespace) -> dict[str, Any]:
    """Measure `--child` case in the `--state` folder: `--repeats` timed writes of its store,
    or of its sequence of many_small stores, the folder prepared before each."""
    kind, sources = case_sources(args.child, args)
    entries = json.loads(Path(args.entries_file).read_text()) if args.entries_file else None
    folder = os.environ["ZRECORD_INDEX_CACHE"]
    base = os.path.join(args.tmp, f"store-{os.getpid()}")
    walls, appends, closes, files = [], [], [], []
    load = os.getloadavg()[0]
    for _ in range(args.repeats):
        if OURS:
            prepare_folder(folder, entries, args.state)
        shutil.rmtree(base, ignore_errors=True)
        os.sync()
        t0 = time.perf_counter()
        for k, source in enumerate(sources):
            append_s, close_s = durable_write(kind, os.path.join(base, str(k)), source, args.codec)
            appends.append(append_s)
            closes.append(close_s)
        walls.append(time.perf_counter() - t0)
        files.append(folder_files(folder))
        for k in (0, len(sources) - 1):
            verify(kind, os.path.join(base, str(k)), sources[k])
        shutil.rmtree(base)
    nbytes = sum(nbytes_of(s) for s in sources)
    return {"backend": STORE_LABEL, "case": args.child, "state": args.state, "bytes": nbytes,
            "stores": len(sources), "records": len(sources[0]), "wall_s": walls,
            "append_s": appends, "close_s": closes, "folder_files_after": files,
            "loadavg_1min": load}


# ---- the parent: rounds and tables ---------------------------------------------------------

def child_env(label: str | None, folder: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ENV_CLEARED}
    env["ZRECORD_INDEX_CACHE"] = folder
    if label is not None:
        env["ZR_BENCH_LABEL"] = label
    return env


def run(cmd: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}")


def setup_builds(args: argparse.Namespace, work: str) -> list[dict[str, Any]]:
    """Each backend: its label, python, cache folder and (ours) the entries of a full folder,
    with that folder filled once here."""
    backends = [{"label": f"zrecord@{n}", "python": p} for n, p in builds(args)]
    if not backends and OURS:
        backends = [{"label": STORE_LABEL, "python": sys.executable}]
    for b in backends:
        home = os.path.join(work, b["label"].replace("@", "-"))
        os.makedirs(home)
        env = child_env(b["label"], os.path.join(home, "unused"))
        env["ZRECORD_INDEX_CACHE_RECORDS_MIN"] = "1"  # builds since [R2]: small indexes too
        run([b["python"], __file__, "--data", args.data, "--make-donors", home], env)
        donors = json.loads(Path(home, "donors.json").read_text())
        b.update(home=home, donors=donors, entry_bytes={})
        for state, share in (("full", LIVE_SHARE), ("full-live", 1.0)):
            if not {state, state + "-pruned"} & set(args.states):
                continue
            entries = entries_for(donors, args.entries, share)
            b["entry_bytes"][state] = sum(os.path.getsize(f) for f in entries.values())
            Path(entries_file(b, state)).write_text(json.dumps(entries))
            check_space(work, b["entry_bytes"][state])
            prepare_folder(folder_of(b, state), entries, state)
            print(f"{b['label']}: {len(entries):,} entries, {b['entry_bytes'][state] / 1e9:.2f} "
                  f"GB in {folder_of(b, state)}", flush=True)
    if args.peer:
        home = os.path.join(work, "peer")
        os.makedirs(home)
        backends.append({"label": None, "python": args.peer, "home": home})
    return backends


def folder_of(b: dict[str, Any], state: str) -> str:
    """The cache folder of backend `b` in `state`: one per set of files, so that going from
    one state to another never copies a full folder again."""
    return os.path.join(b["home"], "cache-" + {"full-pruned": "full"}.get(state, state))


def entries_file(b: dict[str, Any], state: str) -> str | None:
    """The entries (name -> donor file) of `b`'s folder in `state`; None for the peer's."""
    if "donors" not in b:
        return None
    return os.path.join(b["home"], "entries-" + {"full-pruned": "full"}.get(state, state) + ".json")


def check_space(folder: str, need: int) -> None:
    free = shutil.disk_usage(folder).free
    if free < 3 * need:
        raise SystemExit(f"{folder} has {free / 1e9:.1f} GB free; a full cache folder needs "
                         f"{need / 1e9:.1f} GB (and room to spare): use --entries with fewer")


def measure(args: argparse.Namespace, b: dict[str, Any], case: str, state: str) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json", dir=args.tmp) as out:
        cmd = [b["python"], __file__, "--data", args.data, "--tmp", args.tmp, "--codec", args.codec,
               "--child", case, "--state", state, "--repeats", str(args.repeats),
               "--dense-blocks", str(args.dense_blocks), "--ragged-records", str(args.ragged_records),
               "--small-stores", str(args.small_stores), "--small-records", str(args.small_records),
               "--json", out.name]
        if entries_file(b, state) and state != "empty":
            cmd += ["--entries-file", entries_file(b, state)]
        run(cmd, child_env(b["label"], folder_of(b, state)))
        return json.loads(Path(out.name).read_text())


def measure_all(args: argparse.Namespace, backends: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every (case, state, backend) once per round, backends in rotating order."""
    results = []
    for k in range(args.rounds):
        ceiling = device_write_ceiling(args.tmp)
        order = backends[k % len(backends):] + backends[:k % len(backends)]
        for case in args.cases:
            for state in states_of(case, args):
                for b in order:
                    r = measure(args, b, case, state)
                    r.update(round=k, device_write_mib_s=ceiling)
                    results.append(r)
                    print(f"round {k + 1} {case:12} {state:10} {r['backend']:16} "
                          f"{mib_s(r):8.1f} MiB/s  close median "
                          f"{np.median(r['close_s']) * 1e3:7.1f} ms  files "
                          f"{r['folder_files_after']}  load {r['loadavg_1min']:.1f}", flush=True)
    return results


def states_of(case: str, args: argparse.Namespace) -> list[str]:
    return [s for s in (STATES if case == "ragged_large" else STATES[:2]) if s in args.states]


def mib_s(r: dict[str, Any]) -> float:
    """A child's durable MiB/s: the median over its repeats."""
    return float(np.median([r["bytes"] / w for w in r["wall_s"]])) / 2**20


def rows_of(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (case, state, backend): medians of the rounds, closes of every round."""
    keys: list[tuple[str, str, str]] = []
    for r in results:
        if (r["case"], r["state"], r["backend"]) not in keys:
            keys.append((r["case"], r["state"], r["backend"]))
    rows = []
    for case, state, backend in keys:
        seen = [r for r in results if (r["case"], r["state"], r["backend"]) == (case, state, backend)]
        seen.sort(key=lambda r: r["round"])
        closes = np.array([c for r in seen for c in r["close_s"]]) * 1e3
        appends = np.array([c for r in seen for c in r["append_s"]]) * 1e3
        per_round = {"durable_mib_s": [mib_s(r) for r in seen],
                     "close_ms": [float(np.median(r["close_s"])) * 1e3 for r in seen],
                     "device_write_mib_s": [r["device_write_mib_s"] for r in seen]}
        rows.append({"case": case, "state": state, "backend": backend,
                     "bytes": seen[0]["bytes"], "stores": seen[0]["stores"],
                     "records": seen[0]["records"],
                     "durable_mib_s": float(np.median(per_round["durable_mib_s"])),
                     "close_ms": float(np.median(per_round["close_ms"])),
                     "device_write_mib_s": float(np.median(per_round["device_write_mib_s"])),
                     "close_ms_median": float(np.median(closes)),
                     "close_ms_p90": float(np.percentile(closes, 90)), "closes": len(closes),
                     "append_ms_median": float(np.median(appends)),
                     "folder_files_after": [f for r in seen for f in r["folder_files_after"]],
                     "rounds": per_round})
    return rows


LABELS = {"empty": "empty", "full": "{n:,} files (90% of stores gone), prune due",
          "full-pruned": "{n:,} files (90% gone), pruned < 10 min ago",
          "full-live": "{n:,} files of live stores, prune due"}
TITLES = {
    "dense_blocks": "Dense token blocks: one store of {records:,} x 2 KiB ({mib:,.0f} MiB)",
    "ragged_small": "Ragged token records: one store of {records:,} ({mib:,.1f} MiB)",
    "many_small": "{stores} Ragged stores of {records:,} token records, one after another "
                  "({mib:,.1f} MiB in all)",
    "ragged_large": "Ragged token records: one store of {records:,} (> 65,536: its close primes "
                    "the cache; {mib:,.1f} MiB)",
}


def compact(r: dict[str, Any]) -> dict[str, Any]:
    """A child's result for the JSON file: many_small's thousands of per-store times as their
    median, p90 and maximum (the rows were computed from all of them), times in ms."""
    out = {k: v for k, v in r.items() if k not in ("append_s", "close_s")}
    for key in ("append_s", "close_s"):
        ms = np.array(r[key]) * 1e3
        name = key[:-2] + "_ms"
        if len(ms) > 20:
            out[name] = {"n": len(ms), "median": round(float(np.median(ms)), 3),
                         "p90": round(float(np.percentile(ms, 90)), 3),
                         "max": round(float(ms.max()), 3)}
        else:
            out[name] = [round(float(x), 3) for x in ms]
    return out


def case_table(case: str, rows: list[dict[str, Any]], args: argparse.Namespace,
               base: str | None) -> str:
    """One case: every (folder state, backend) row, with MiB/s against the device, loaderx
    2.5.9 and the baseline build (same folder), and against the same build's empty folder."""
    mine = [r for r in rows if r["case"] == case]
    find = {(r["state"], r["backend"]): r for r in mine}
    peer = next((r["backend"] for r in mine if r["backend"].startswith("loaderx-")), None)
    title = TITLES[case].format(records=mine[0]["records"], stores=mine[0]["stores"],
                                mib=mine[0]["bytes"] / 2**20)
    lines = [f"#### {title}", "",
             f"| backend | cache folder | durable MiB/s | vs device | vs {peer or 'peer'} | "
             f"vs {base or 'baseline'} | vs empty folder | create + append ms median | close ms median | "
             "close ms p90 | closes | .zrx files after |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(mine, key=lambda r: (r["backend"], STATES.index(r["state"]))):
        ref_peer = find.get((r["state"], peer)) if r["backend"] != peer else None
        ours = r["backend"].startswith("zrecord")
        ref_base = find.get((r["state"], base)) if ours and r["backend"] != base else None
        ref_empty = find.get(("empty", r["backend"])) if r["state"] != "empty" else None
        ratio = {name: fmt_ratio(paired_ratio(r, ref, "durable_mib_s")) if ref else ""
                 for name, ref in (("peer", ref_peer), ("base", ref_base), ("empty", ref_empty))}
        vs_dev = fmt_ratio(paired_ratio(r, r, "durable_mib_s", "device_write_mib_s"), percent=True)
        files = r["folder_files_after"]
        lines.append(f"| {r['backend']} | {LABELS[r['state']].format(n=args.entries)} | "
                     f"{r['durable_mib_s']:,.0f} | {vs_dev} | {ratio['peer']} | {ratio['base']} | "
                     f"{ratio['empty']} | {r['append_ms_median']:.1f} | {r['close_ms_median']:.1f} | "
                     f"{r['close_ms_p90']:.1f} | "
                     f"{r['closes']} | {min(files):,}-{max(files):,} |")
    return "\n".join(lines)


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=default_data(),
                    help="output folder of benchmarks/prepare_data.py (the text part)")
    ap.add_argument("--tmp", default=None, type=work_folder,
                    help="folder for the stores and the cache folders, on the disk to measure "
                         "(default: the system's temporary folder)")
    ap.add_argument("--builds", default="",
                    help="NAME=PYTHON,...: builds of zrecord (the first is the baseline)")
    ap.add_argument("--peer", default=None, help="python of a venv holding loaderx 2.5.9")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--states", default=",".join(STATES))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3,
                    help="timed writes (of a store, or of many_small's sequence) per child")
    ap.add_argument("--entries", type=int, default=10_000, help="files of a full cache folder")
    ap.add_argument("--codec", default="raw", choices=("raw", "zstd"))
    ap.add_argument("--dense-blocks", type=int, default=60_000)
    ap.add_argument("--ragged-records", type=int, default=65_000)
    ap.add_argument("--small-stores", type=int, default=200)
    ap.add_argument("--small-records", type=int, default=1_000)
    ap.add_argument("--json", default=None, help="write the results here")
    for hidden in ("--child", "--state", "--entries-file", "--make-donors"):
        ap.add_argument(hidden, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.tmp = args.tmp or tempfile.gettempdir()
    args.cases = [c for c in args.cases.split(",") if c]
    args.states = [s for s in args.states.split(",") if s]
    for name, given, known in (("--cases", args.cases, CASES), ("--states", args.states, STATES)):
        unknown = sorted(set(given) - set(known))
        if unknown:
            ap.error(f"{name} takes {', '.join(known)}; got {', '.join(unknown)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.make_donors:
        make_donors(args.make_donors, args)
        return 0
    if args.child:
        Path(args.json).write_text(json.dumps(run_child(args)))
        return 0
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "python": sys.version.split()[0], "argv": sys.argv[1:],
        "device": device_ceilings(args.tmp), "settings": {
            k: getattr(args, k) for k in ("rounds", "repeats", "entries", "codec", "dense_blocks",
                                          "ragged_records", "small_stores", "small_records")}}
    with tempfile.TemporaryDirectory(prefix="bench-index-cache-", dir=args.tmp) as work:
        backends = setup_builds(args, work)
        results["builds"] = [{k: b.get(k) for k in ("label", "python", "entry_bytes", "donors")}
                             for b in backends]
        raw = measure_all(args, backends)
    rows = rows_of(raw)
    results.update(rows=rows, raw=[compact(r) for r in raw])
    base = backends[0]["label"] if backends and backends[0]["label"] else None
    print(f"\n{results['date']}  {results['machine']}  {fs_label(results)}\n")
    print("\n\n".join(case_table(c, rows, args, base) for c in args.cases))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
