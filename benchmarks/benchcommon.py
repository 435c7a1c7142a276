"""What bench_dense.py and bench_ragged.py share: the store under test, timing, tables, peers.

Methodology (the seed's "Benchmarks" section): every backend gets the same prepared real
records and is verified for exact dtype, shape, order and values before timing; writes take the
complete source in one append and exclude dictionary training. Each write is measured twice:
into the page cache (ours with `sync=False`; the peer as it is, since it never syncs) and
durable, the figure that counts ([P1]): ours as append + close (which flushes to stable
storage), the peer as append + close + `os.sync()`. Durable figures are only meaningful on a
real disk, so the device's sequential write ceiling is measured in the same folder in the same
run (benchmarks/device.py), and a store folder on tmpfs is labelled as such; gathers use fresh
uniform IID batches until at least `seconds` of timed calls accumulate; throughput is logical
(decoded payload) bytes per second; disk is allocated blocks. Every backend is measured once
per round, `--rounds` times in turn, and the tables show per-backend medians.

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
    WRITE_KWARGS = {"page_cache": {}, "durable": {}}  # durable: os.sync() after close

ROOT = Path(__file__).resolve().parent.parent
__all__ = ["OURS", "Dense", "Ragged", "train_dict", "zrecord"]


def add_arguments(ap: argparse.ArgumentParser, workloads: str) -> None:
    ap.add_argument("--data", default=os.environ.get("LOADERX_BENCH_DATA", str(ROOT.parent / "data")),
                    help="output folder of benchmarks/prepare_data.py")
    ap.add_argument("--workload", default=workloads)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--codecs", default="raw,zstd,zstd_dict")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--tmp", default=None, help="folder for the stores (default: a temp dir)")
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


def timed_writes(path: str, write: Callable[[str, dict[str, object]], None],
                 nbytes: int) -> dict[str, float]:
    """Write the store at `path` twice, into the page cache and durably; MiB/s of each.

    `write(path, kwargs)` creates the store with `kwargs` added to create() and appends the
    whole source. The durable store is left at `path`. Dirty pages of earlier work are
    flushed first, so that neither figure pays for another's writeback.
    """
    import shutil

    out = {}
    for mode in ("page_cache", "durable"):
        shutil.rmtree(path, ignore_errors=True)
        os.sync()
        t = time.perf_counter()
        write(path, WRITE_KWARGS[mode])
        if mode == "durable" and not OURS:
            os.sync()
        out["write_mib_s" if mode == "page_cache" else "durable_mib_s"] = (
            nbytes / (time.perf_counter() - t) / 2**20)
    return out


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
               "--rounds", "1", "--stores-only", "--json", out.name]
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
    each round runs our stores and then the peer's in fresh subprocesses of `script`
    (`store_rows`, given `child_args(round)` as further arguments), then `baselines()` in
    this process.
    """
    if args.stores_only:
        return median_rows([run_local()])
    rounds = []
    for k in range(max(1, args.rounds)):
        extra = child_args(k) if child_args else ()
        zstd_build = getattr(args, "zstd_build", None)
        rows = store_rows(args, script, workload, sys.executable, extra,
                          label_zstd=bool(zstd_build))
        if zstd_build:
            rows += store_rows(args, script, workload, zstd_build, extra, label_zstd=True)
        for name, python in builds(args):
            rows += store_rows(args, script, workload, python, extra, f"zrecord@{name}")
        if args.peer:
            rows += store_rows(args, script, workload, args.peer, extra)
        rounds.append(rows + baselines())
    return median_rows(rounds)


def device_ceilings(folder: str) -> dict[str, Any]:
    """The file system of the store folder and its device's sequential write bandwidth."""
    import device

    kind = device.fs_type(folder)
    out: dict[str, Any] = {"folder": folder, "fs": kind}
    if not device.is_page_cache_only(folder):
        out["seq_write"] = device.seq_write(folder)
    return out


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
    """Markdown table; ratios against the row named `base`."""
    ref = next(r for r in rows if r["backend"] == base)
    lines = [f"### {title}", "",
             f"| backend | gather MiB/s | gather vs {base} | krecords/s | p95 ms | durable write "
             "MiB/s | page-cache write MiB/s | disk MiB |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        durable = f"{r['durable_mib_s']:,.0f}" if "durable_mib_s" in r else ""
        write = f"{r['write_mib_s']:,.0f}" if "write_mib_s" in r else ""
        disk = f"{r['disk_mib']:,.1f}" if "disk_mib" in r else ""
        lines.append(f"| {r['backend']} | {r['mib_s']:,.0f} | {r['mib_s'] / ref['mib_s']:.2f}x | "
                     f"{r['krecords_s']:,.1f} | {r['p95_ms']:.2f} | {durable} | {write} | {disk} |")
    return "\n".join(lines)


def finish(args: argparse.Namespace, results: dict[str, Any], tables: list[str]) -> None:
    if not args.stores_only:
        print(f"{results['date']}  {results['machine']}  python {results['python']}  "
              f"numpy {results['numpy']}  {results['store']} {results['store_version']}")
        dev = results.get("device", {})
        seq = dev.get("seq_write")
        print(f"stores on {dev.get('fs')} ({dev.get('folder')})" + (
            f"; device sequential write {seq['mib_s']:,.0f} MiB/s ({seq['tool']})" if seq else
            "; page cache only: durable figures are not disk figures") + "\n")
        print("\n\n".join(tables))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
