"""What a run reports: its header, ratios of paired rounds, the store tables of
bench_dense.py and bench_ragged.py, and the printed run with its JSON.

Ratios are the median of the per-round ratios, with their range (`paired_ratio`, `fmt_ratio`):
this VM's speed drifts by 1.5-2x within minutes, and each round measures both sides in turn.
A store folder on tmpfs is labelled as such in every table (`fs_label`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from common.store import OURS, STORE_LABEL, zrecord


def header(args: argparse.Namespace) -> dict[str, Any]:
    """The head of a run's results: date, machine, versions, the store under test and the
    settings; its "workloads" are filled in by the script."""
    return {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "python": sys.version.split()[0], "numpy": np.__version__, "store": STORE_LABEL,
        "store_version": getattr(zrecord, "__version__", None) if OURS else STORE_LABEL,
        "zstd": getattr(zrecord, "__zstd_version__", None) if OURS else None,
        "batch": args.batch, "seconds": args.seconds, "rounds": args.rounds, "workloads": {},
    }


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
    """A `paired_ratio` as `1.23x (1.10-1.40)`, or with `percent` as `95% (90%-99%)`; the range
    only where the rounds differ; empty for None."""
    if v is None:
        return ""
    mid, lo, hi = v
    if percent:
        return f"{mid:.0%}" + (f" ({lo:.0%}-{hi:.0%})" if hi > lo else "")
    return f"{mid:.2f}x" + (f" ({lo:.2f}-{hi:.2f})" if hi > lo else "")


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
    """Print the run (not in a --stores-only child) and write its JSON (--json)."""
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


def emit(args: argparse.Namespace, results: dict[str, Any], text: str) -> None:
    """Print a run's table `text` and write its JSON (--json), for the scripts that need no
    more than that."""
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
