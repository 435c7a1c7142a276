"""What bench_dense.py and bench_ragged.py share: the store under test, timing, tables, peers.

Methodology (the seed's "Benchmarks" section): every backend gets the same prepared real
records and is verified for exact dtype, shape, order and values before timing; writes take the
complete source in one append and exclude dictionary training. Each write is measured twice:
into the page cache (ours with `sync=False`; the peer as it is, since it never syncs) and
durable, the figure that counts ([P1]): ours as append + close (which flushes to stable
storage), the peer as append + close followed by flushing every file and folder it wrote
(`sync_tree`; `--peer-durable sync` uses `os.sync()` instead, which on a shared machine also
waits for every other process's dirty pages and so understates the peer). Before each timed
write the page cache's dirty pages are flushed, so that no write pays for another's. Durable
figures are only meaningful on a real disk: the device's sequential write ceiling is measured
in the store folder before every round (benchmarks/device.py), each durable figure is also
given as a fraction of the ceiling of its own round, and a store folder on tmpfs is labelled
as such in every table. Gathers use fresh uniform IID batches until at least `seconds` of
timed calls accumulate; throughput is logical (decoded payload) bytes per second; disk is
allocated blocks. Every backend is measured once per round, `--rounds` times in turn, and the
tables show per-backend medians.

The store under test is ours (`zrecord`) when it is importable, else the published loaderx
(2.5.9, say) through `loaderx.zrecord`: the same script then runs as a black-box peer in that
package's own virtualenv (`--peer PYTHON`), in a subprocess, in the same run. Our stores are
measured in a subprocess of the same script too, so both start from a fresh interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from device import work_folder

try:  # our packages
    import zrecord
    from zrecord import Dense, Ragged, train_dict

    # `--builds` runs other builds of zrecord (say, the one before a change) through the same
    # script with this variable set, so that their rows and stores are told apart.
    STORE_LABEL = os.environ.get("ZR_BENCH_LABEL", "zrecord")
    OURS = True
    # Keyword arguments of create() for a page-cache write and for a durable one.
    WRITE_KWARGS: dict[str, dict[str, object]] = {"page_cache": {"sync": False}, "durable": {}}
except ImportError:  # the published loaderx, run as a black-box peer in its own venv
    import importlib.metadata

    from loaderx.utils import train_dict  # type: ignore[no-redef]
    from loaderx.zrecord import Dense, Ragged  # type: ignore[no-redef]

    STORE_LABEL = "loaderx-" + importlib.metadata.version("loaderx")
    OURS = False
    WRITE_KWARGS = {"page_cache": {}, "durable": {}}  # durable: flushed after close

ROOT = Path(__file__).resolve().parent.parent
__all__ = ["OURS", "Dense", "Ragged", "train_dict", "zrecord"]


def add_arguments(ap: argparse.ArgumentParser, workloads: str) -> None:
    ap.add_argument("--data", default=os.environ.get("LOADERX_BENCH_DATA", str(ROOT.parent / "data")),
                    help="output folder of benchmarks/prepare_data.py")
    ap.add_argument("--workload", default=workloads)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--codecs", default="raw,zstd,zstd_dict")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--tmp", default=None, type=work_folder,
                    help="folder for the stores, made if missing (default: a temp dir)")
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--peer", default=None,
                    help="python of a separate venv holding the published loaderx: its stores "
                         "are measured in the same run, in a subprocess")
    ap.add_argument("--builds", default="",
                    help="NAME=PYTHON,...: other builds of zrecord (a python whose `zrecord` is, "
                         "say, the build before a change), measured like ours in every round, "
                         "each in a subprocess, as rows zrecord@NAME-<codec>")
    ap.add_argument("--rounds", type=int, default=3,
                    help="repeat every measurement (ours, the peer, the baselines) this many "
                         "times in turn and report per-backend medians (default 3)")
    ap.add_argument("--peer-durable", choices=("fsync", "sync"), default="fsync",
                    help="how a store of the published loaderx, which never flushes, is made "
                         "durable after close: fsync of every file and folder it wrote "
                         "(default), or os.sync(), which also waits for every other process's "
                         "dirty pages")
    ap.add_argument("--zstd-build", default=None, metavar="PYTHON",
                    help="python of a venv whose zrecord runs another zstd (a release wheel with "
                         "zstd built in, beside this source build on the platform's libzstd): "
                         "its stores are measured in the same run, and the rows of both builds "
                         "are labelled zrecord-zstd<version>")
    ap.add_argument("--stores-only", action="store_true", help=argparse.SUPPRESS)


def create_kwargs(codec: str, sample: Any) -> dict[str, object]:
    """Keyword arguments for create(); dictionaries are trained here, outside the timing."""
    extra: dict[str, object] = {}
    if codec == "zstd_dict":
        extra["dict_bytes"] = train_dict(sample)
    return extra


def sync_tree(path: str) -> None:
    """Make what another library wrote at `path` durable, as a careful user would: fsync every
    file below it (on up to 16 threads, as our close() flushes its files), then every folder
    bottom-up, then the folder holding it. A single file is flushed with its folder."""
    from concurrent.futures import ThreadPoolExecutor

    def fsync(p: str) -> None:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    if os.path.isdir(path):
        walk = list(os.walk(path))
        files = [os.path.join(d, f) for d, _, fs in walk for f in fs]
        folders = [d for d, _, _ in reversed(walk)]
    else:
        files, folders = [path], []
    with ThreadPoolExecutor(max(1, min(16, len(files)))) as pool:
        list(pool.map(fsync, files))
    for folder in [*folders, os.path.dirname(os.path.abspath(path))]:
        fsync(folder)


def timed_write(path: str, write: Callable[[str], None], nbytes: int,
                flush: Callable[[str], None] | None = None) -> float:
    """MiB/s of `write(path)` (then `flush(path)`, when given) on a clean page cache.

    Whatever is at `path` is removed and every dirty page of the machine is flushed first, so
    that the figure pays neither for earlier writes' writeback nor for the removal."""
    import shutil

    shutil.rmtree(path, ignore_errors=True)
    if os.path.isfile(path):
        os.unlink(path)
    os.sync()
    t = time.perf_counter()
    write(path)
    if flush is not None:
        flush(path)
    return nbytes / (time.perf_counter() - t) / 2**20


def peer_flush(args: argparse.Namespace | None) -> Callable[[str], None] | None:
    """How a durable write of this library's store ends: nothing for ours (close() flushes);
    `sync_tree` or os.sync() for the published loaderx (--peer-durable)."""
    if STORE_LABEL == "zrecord":
        return None
    if args is not None and getattr(args, "peer_durable", "fsync") == "sync":
        return lambda _path: os.sync()
    return sync_tree


def timed_writes(path: str, write: Callable[[str, dict[str, object]], None],
                 nbytes: int, args: argparse.Namespace | None = None,
                 prefix: str = "") -> dict[str, float]:
    """Write the store at `path` twice, into the page cache and durably; MiB/s of each.

    `write(path, kwargs)` creates the store with `kwargs` added to create() and appends the
    whole source. The durable store is left at `path`. The keys are `write_mib_s` (page
    cache) and `durable_mib_s`, each after `prefix`.
    """
    return {
        prefix + "write_mib_s": timed_write(path, lambda p: write(p, WRITE_KWARGS["page_cache"]),
                                            nbytes),
        prefix + "durable_mib_s": timed_write(path, lambda p: write(p, WRITE_KWARGS["durable"]),
                                              nbytes, peer_flush(args)),
    }


def timed_batches(fn: Callable[[np.ndarray], object], n: int, batch: int, seconds: float,
                  seed: int) -> list[float]:
    """Per-call seconds of fn(fresh IID batch) until `seconds` accumulate (at least 20 calls)."""
    rng = np.random.default_rng(seed)
    times: list[float] = []
    total = 0.0
    while total < seconds or len(times) < 20:
        idx = rng.integers(0, n, batch)
        t = time.perf_counter()
        fn(idx)
        dt = time.perf_counter() - t
        times.append(dt)
        total += dt
    return times


def summarize(name: str, times: list[float], batch: int, mean_record_bytes: float) -> dict[str, Any]:
    total = sum(times)
    records = batch * len(times)
    return {
        "backend": name,
        "batches": len(times),
        "mib_s": records * mean_record_bytes / total / 2**20,
        "krecords_s": records / total / 1e3,
        "p95_ms": float(np.percentile(times, 95)) * 1e3,
    }


METRICS = ("mib_s", "krecords_s", "p95_ms", "write_mib_s", "durable_mib_s", "disk_mib",
           # the device's sequential write ceiling of the row's round; bench_ragged.py's
           # append from a list of in-memory arrays
           "device_write_mib_s", "list_write_mib_s", "list_durable_mib_s",
           # bench_cold.py: cold-read and cold-loader figures
           "open_ms", "read_mib_batch", "resident_pct", "batches_per_s", "peak_pss_mib")


def median_rows(rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per backend (in the first round's order): each metric's median over the rounds.

    This VM's speed drifts by 1.5-2x within minutes, so one pass of ours-then-peer can land on
    either side of a target; each round measures every backend once, in the same order, and
    every round's figures are kept under "rounds" so that paired per-round ratios can be shown.
    """
    by_round = [{r["backend"]: r for r in rows} for rows in rounds]
    out = []
    for first in rounds[0]:
        name = first["backend"]
        seen = [rows[name] for rows in by_round if name in rows]
        row = dict(first)
        row["rounds"] = {k: [r[k] for r in seen] for k in METRICS if k in first}
        for k, values in row["rounds"].items():
            row[k] = float(np.median(values))
        out.append(row)
    return out


def disk_bytes(path: str) -> int:
    """Allocated blocks of a file or of every file below a folder."""
    if os.path.isfile(path):
        return os.stat(path).st_blocks * 512
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            total += os.stat(os.path.join(dirpath, f)).st_blocks * 512
    return total


def store_rows(args: argparse.Namespace, script: str, workload: str,
               python: str, extra: Sequence[str] = (), label: str | None = None,
               label_zstd: bool = False) -> list[dict[str, Any]]:
    """Run `script --stores-only` under `python` for one workload and the chosen codecs;
    `extra` are further command-line arguments of the script's own. With `label_zstd` (two
    builds of zrecord, --zstd-build), the rows are told apart by their zstd version.

    `label` names another build of ours (`--builds`). Our stores and the peer's are both
    measured this way, each in a fresh interpreter: a
    Ragged append from a Python source measured ~25% slower in the long-lived benchmark process
    (300,000 live objects made the same append 0.8 s instead of 0.6 s, with the garbage
    collector on or off), which would favour whichever library ran in a subprocess.
    """
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [python, script, "--data", args.data, "--workload", workload, "--batch",
               str(args.batch), "--codecs", ",".join(args.codecs), "--seconds", str(args.seconds),
               "--rounds", "1", "--stores-only", "--json", out.name, "--peer-durable",
               args.peer_durable]
        if args.tmp:
            cmd += ["--tmp", args.tmp]
        env = None if label is None else {**os.environ, "ZR_BENCH_LABEL": label}
        subprocess.run([*cmd, *extra], check=True, stdout=subprocess.DEVNULL, env=env)
        result = json.loads(Path(out.name).read_text())
    rows: list[dict[str, Any]] = result["workloads"][workload]["rows"]
    if label_zstd:  # --zstd-build: two builds of zrecord, told apart by their zstd
        for row in rows:
            row["backend"] = row["backend"].replace("zrecord", f"zrecord-zstd{result['zstd']}", 1)
    return rows


def builds(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(NAME, PYTHON) of each `--builds` entry."""
    out = []
    for item in (x for x in getattr(args, "builds", "").split(",") if x):
        name, sep, python = item.partition("=")
        if not sep or not name or not python:
            raise SystemExit(f"--builds takes NAME=PYTHON,...; got {item!r}")
        out.append((name, python))
    return out


def measure_rounds(args: argparse.Namespace, script: str, workload: str,
                   run_local: Callable[[], list[dict[str, Any]]],
                   baselines: Callable[[], list[dict[str, Any]]],
                   child_args: Callable[[int], Sequence[str]] | None = None,
                   ) -> list[dict[str, Any]]:
    """Every backend of one workload, `--rounds` times in turn; per-backend medians.

    In a `--stores-only` child, `run_local()` measures this library's stores once. Otherwise
    each round measures the device's sequential write ceiling in the store folder (unless it
    is a tmpfs), runs our stores (and --zstd-build's), then the peer's, in fresh subprocesses of `script`
    (`store_rows`, given `child_args(round)` as further arguments), then `baselines()` in
    this process. Every store row of a round carries that round's ceiling
    (`device_write_mib_s`), so that durable figures can be judged against it round by round.
    """
    if args.stores_only:
        return median_rows([run_local()])
    folder = args.tmp or tempfile.gettempdir()
    rounds = []
    for k in range(max(1, args.rounds)):
        extra = child_args(k) if child_args else ()
        ceiling = device_write_ceiling(folder)
        zstd_build = getattr(args, "zstd_build", None)
        rows = store_rows(args, script, workload, sys.executable, extra,
                          label_zstd=bool(zstd_build))
        if zstd_build:
            rows += store_rows(args, script, workload, zstd_build, extra, label_zstd=True)
        for name, python in builds(args):
            rows += store_rows(args, script, workload, python, extra, f"zrecord@{name}")
        if args.peer:
            rows += store_rows(args, script, workload, args.peer, extra)
        if ceiling is not None:
            for r in rows:
                r["device_write_mib_s"] = ceiling
        rounds.append(rows + baselines())
    return median_rows(rounds)


def device_write_ceiling(folder: str) -> float | None:
    """The device's sequential write bandwidth under `folder` now (MiB/s); None on tmpfs."""
    import device

    if device.is_page_cache_only(folder):
        return None
    os.sync()
    return float(device.seq_write(folder)["mib_s"])


def device_ceilings(folder: str) -> dict[str, Any]:
    """The file system of the store folder and its device's sequential write bandwidth, once
    at the start of the run (each round measures it again: `measure_rounds`)."""
    import device

    kind = device.fs_type(folder)
    out: dict[str, Any] = {"folder": folder, "fs": kind,
                           "page_cache_only": device.is_page_cache_only(folder)}
    if not out["page_cache_only"]:
        out["seq_write"] = device.seq_write(folder)
    return out


def fs_label(results: dict[str, Any]) -> str:
    """How table titles name the store folder: its file system, and on tmpfs a warning."""
    dev = results.get("device", {})
    if dev.get("page_cache_only"):
        return f"stores on {dev.get('fs')}: page cache only, durable figures are not disk figures"
    return f"stores on {dev.get('fs', '?')} ({dev.get('folder', '?')})"


def paired_ratio(r: dict[str, Any], ref: dict[str, Any], key: str, ref_key: str | None = None,
                 ) -> tuple[float, float, float] | None:
    """r[key] over ref[ref_key or key]: the median of the per-round ratios with their range;
    None when either figure is missing."""
    ref_key = ref_key or key
    if key not in r or ref_key not in ref:
        return None
    ours, theirs = r.get("rounds", {}).get(key, []), ref.get("rounds", {}).get(ref_key, [])
    if len(ours) < 2 or len(ours) != len(theirs):
        v = r[key] / ref[ref_key]
        return v, v, v
    ratios = sorted(a / b for a, b in zip(ours, theirs, strict=True))
    return float(np.median(ratios)), ratios[0], ratios[-1]


def fmt_ratio(v: tuple[float, float, float] | None, percent: bool = False) -> str:
    if v is None:
        return ""
    mid, lo, hi = v
    if percent:
        return f"{mid:.0%}" + (f" ({lo:.0%}-{hi:.0%})" if hi > lo else "")
    return f"{mid:.2f}x" + (f" ({lo:.2f}-{hi:.2f})" if hi > lo else "")


def header(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "python": sys.version.split()[0], "numpy": np.__version__, "store": STORE_LABEL,
        "store_version": getattr(zrecord, "__version__", None) if OURS else STORE_LABEL,
        "zstd": getattr(zrecord, "__zstd_version__", None) if OURS else None,
        "batch": args.batch, "seconds": args.seconds, "rounds": args.rounds, "workloads": {},
    }


def table(title: str, rows: list[dict[str, Any]], base: str) -> str:
    """Markdown table, durable writes first; gather ratios against the row named `base`,
    durable ratios against the device ceiling of the same round and against the peer's row
    of the same codec."""
    ref = next(r for r in rows if r["backend"] == base)
    peers = {r["backend"].rsplit("-", 1)[1]: r for r in rows if r["backend"].startswith("loaderx-")}
    lines = [f"### {title}", "",
             "| backend | durable write MiB/s | vs device | vs loaderx 2.5.9 | page-cache write "
             f"MiB/s | gather MiB/s | gather vs {base} | krecords/s | p95 ms | disk MiB |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        durable = f"{r['durable_mib_s']:,.0f}" if "durable_mib_s" in r else ""
        peer = peers.get(r["backend"].rsplit("-", 1)[-1]) if r["backend"].startswith("zrecord-") else None
        vs_dev = fmt_ratio(paired_ratio(r, r, "durable_mib_s", "device_write_mib_s"), percent=True)
        vs_peer = fmt_ratio(paired_ratio(r, peer, "durable_mib_s")) if peer else ""
        write = f"{r['write_mib_s']:,.0f}" if "write_mib_s" in r else ""
        disk = f"{r['disk_mib']:,.1f}" if "disk_mib" in r else ""
        lines.append(f"| {r['backend']} | {durable} | {vs_dev} | {vs_peer} | {write} | "
                     f"{r['mib_s']:,.0f} | {r['mib_s'] / ref['mib_s']:.2f}x | "
                     f"{r['krecords_s']:,.1f} | {r['p95_ms']:.2f} | {disk} |")
    return "\n".join(lines)


def finish(args: argparse.Namespace, results: dict[str, Any], tables: list[str]) -> None:
    if not args.stores_only:
        print(f"{results['date']}  {results['machine']}  python {results['python']}  "
              f"numpy {results['numpy']}  {results['store']} {results['store_version']}")
        dev = results.get("device", {})
        seq = dev.get("seq_write")
        print(fs_label(results) + (
            f"; device sequential write {seq['mib_s']:,.0f} MiB/s at the start ({seq['tool']}), "
            "measured again before every round" if seq else "") + "\n")
        print("\n\n".join(tables))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
