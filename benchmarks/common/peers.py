"""The rounds of a store benchmark: every backend of one workload measured once per round,
`--rounds` rounds in turn, each of this library's runs in a fresh subprocess of the script.

The rows of a round come from fresh interpreters running the script with `--stores-only`: our
stores, those of another zstd build (`--zstd-build PYTHON`), of other builds of zrecord
(`--builds NAME=PYTHON,...`, rows zrecord@NAME-<codec>) and of the published loaderx in its
own virtualenv (`--peer PYTHON`, common.store's fallback), then the script's own baselines in
this process. Each round first measures the device's sequential write ceiling in the store
folder (common.device), so that durable figures can be judged against that round's. The tables
show per-backend medians (common.timing.median_rows). `add_arguments` is the command line the
store benchmarks share.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from common.data import default_data
from common.device import device_write_ceiling, work_folder
from common.timing import median_rows


def add_arguments(ap: argparse.ArgumentParser, workloads: str) -> None:
    """The command line the store benchmarks share (bench_dense.py, bench_ragged.py,
    bench_cold.py): data, workloads, codecs, the store folder, peers, builds and rounds."""
    ap.add_argument("--data", default=default_data(),
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
