"""Turn the JSON results of bench_dense.py, bench_ragged.py and bench.py into tables and plots.

Reads docs/benchmarks/{bench_dense,bench_ragged,bench}.json (whichever exist) and writes
docs/benchmarks/results.md (every table, with the machine, date and versions) and
docs/benchmarks/gather.png (logical gather throughput per workload and backend). Also reads
matrix.json (bench_matrix.py) and loaders.json (bench_loaders.py) when present: their tables go
into results.md and their plot into docs/benchmarks/matrix.png. bench_cold.json (bench_cold.py):
the cold-read tables, and docs/benchmarks/cold.png (each backend's cold gather as a percent of
the device's QD-32 random-read ceiling). bench_decode.json (bench_decode.py): decoding photos on
loaderx threads vs PyTorch worker processes, and docs/benchmarks/decode.png (images/s and peak
PSS by N).

Usage: python benchmarks/report.py [--dir docs/benchmarks]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from common.cold_report import loader_table, ltr_table
from common.cold_report import table as cold_table
from common.data import ROOT
from common.tables import convert_table, decode_table, matrix_table, sweep_table


def paired_ratio(r: dict[str, Any], peer: dict[str, Any], key: str, peer_key: str | None = None,
                 percent: bool = False) -> str:
    """r[key] over peer[peer_key or key]: the median of the per-round ratios (each round
    measured both in turn), with their range when there were several rounds; else the ratio
    of the values; empty when either is missing."""
    peer_key = peer_key or key
    if key not in r or peer_key not in peer:
        return ""
    ours, theirs = r.get("rounds", {}).get(key, []), peer.get("rounds", {}).get(peer_key, [])
    if len(ours) < 2 or len(ours) != len(theirs):
        v = r[key] / peer[peer_key]
        return f"{v:.0%}" if percent else f"{v:.2f}x"
    ratios = sorted(a / b for a, b in zip(ours, theirs, strict=True))
    mid = ratios[len(ratios) // 2] if len(ratios) % 2 else (ratios[len(ratios) // 2 - 1] + ratios[len(ratios) // 2]) / 2
    if percent:
        return f"{mid:.0%} ({ratios[0]:.0%}-{ratios[-1]:.0%})"
    return f"{mid:.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f})"


def device_line(result: dict[str, Any]) -> str:
    """Where the stores were written, and the device's write ceiling at the start."""
    dev = result.get("device", {})
    if not dev:
        return ""
    if dev.get("page_cache_only") or "seq_write" not in dev:
        return (f" Stores on {dev.get('fs')} ({dev.get('folder')}): page cache only, so the "
                "durable figures are not disk figures.")
    seq = dev["seq_write"]
    return (f" Stores on {dev.get('fs')} ({dev.get('folder')}); the device's sequential write "
            f"ceiling ({seq['tool']}, O_DIRECT) was {seq['mib_s']:,.0f} MiB/s at the start and "
            "is measured again before every round: \"vs device\" is each durable write over "
            "the ceiling of its own round.")


def store_tables(result: dict[str, Any], kind: str) -> list[str]:
    out = [f"## {kind} stores", "",
           f"{result['date']}, {result['machine']}, Python {result['python']}, NumPy "
           f"{result['numpy']}, {result['store']} {result.get('store_version') or ''}; batch "
           f"{result['batch']}, at least {result['seconds']} s of timed gathers per backend; "
           f"{result.get('rounds', 1)} round(s), medians; ratios are medians of the per-round "
           "ratios, with their range in brackets. Durable writes: ours append + close (which "
           "flushes), loaderx 2.5.9 append + close + a flush of every file and folder it wrote."
           + device_line(result), ""]
    for name, workload in result["workloads"].items():
        rows = workload["rows"]
        ref = next((r for r in rows if r["backend"] == "npy-mmap"), rows[0])
        peers = {r["backend"].rsplit("-", 1)[1]: r for r in rows
                 if r["backend"].startswith("loaderx-")}
        out += [f"### {kind} {name}", "",
                "| backend | durable write MiB/s | vs device | durable vs 2.5.9 | page-cache write "
                "MiB/s | vs 2.5.9 | gather MiB/s | vs npy-mmap | vs loaderx 2.5.9 | krecords/s | "
                "p95 ms | disk MiB | disk vs 2.5.9 |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            codec = r["backend"].rsplit("-", 1)[1]
            peer = peers.get(codec) if r["backend"].startswith("zrecord-") else None

            def ratio(key: str, r: dict[str, Any] = r, peer: dict[str, Any] | None = peer) -> str:
                return paired_ratio(r, peer, key) if peer else ""

            def mib(key: str, r: dict[str, Any] = r) -> str:
                return f"{r[key]:,.0f}" if key in r else ""

            out.append(
                f"| {r['backend']} | {mib('durable_mib_s')} | "
                f"{paired_ratio(r, r, 'durable_mib_s', 'device_write_mib_s', percent=True)} | "
                f"{ratio('durable_mib_s')} | {mib('write_mib_s')} | {ratio('write_mib_s')} | "
                f"{r['mib_s']:,.0f} | {paired_ratio(r, ref, 'mib_s')} | "
                f"{ratio('mib_s')} | {r['krecords_s']:,.1f} | {r['p95_ms']:.2f} | "
                f"{r.get('disk_mib', 0):,.1f} | {ratio('disk_mib')} |")
        out.append("")
        if any("list_durable_mib_s" in r for r in rows):
            out += [f"### {kind} {name}: append from a list of in-memory arrays", "",
                    "| backend | durable write MiB/s | durable vs 2.5.9 | page-cache write MiB/s | "
                    "vs 2.5.9 |", "|---|---:|---:|---:|---:|"]
            for r in rows:
                if "list_durable_mib_s" not in r:
                    continue
                codec = r["backend"].rsplit("-", 1)[1]
                peer = peers.get(codec) if r["backend"].startswith("zrecord-") else None
                out.append(f"| {r['backend']} | {r['list_durable_mib_s']:,.0f} | "
                           f"{paired_ratio(r, peer, 'list_durable_mib_s') if peer else ''} | "
                           f"{r['list_write_mib_s']:,.0f} | "
                           f"{paired_ratio(r, peer, 'list_write_mib_s') if peer else ''} |")
            out.append("")
    return out


def loader_tables(result: dict[str, Any]) -> list[str]:
    rows = {r["loader"]: r for r in result["loaders"]}
    out = ["## Loaders", "",
           f"{result['date']}, {result['machine']}, Python {result['python']}; vision_dense, "
           f"batch {result['batch']}, {result['workers']} workers, {result['batches']} timed "
           "batches.", "",
           "| loader | batches/s | vs torch-fork | vs loaderx 2.5.9 | peak PSS MiB | PSS vs 2.5.9 |",
           "|---|---:|---:|---:|---:|---:|"]
    fork = rows.get("torch-fork")

    def times(a: float, b: float | None) -> str:
        return f"{a / b:.2f}x" if b else ""

    for name, r in rows.items():
        ours = name.startswith("loaderx-") and not name.startswith("loaderx-2.5.9")
        peer = rows.get("loaderx-2.5.9-" + name.rsplit("-", 1)[1]) if ours else None
        cells = [name, f"{r['batches_per_s']:.1f}",
                 times(r["batches_per_s"], fork["batches_per_s"] if fork else None),
                 times(r["batches_per_s"], peer["batches_per_s"] if peer else None),
                 f"{r['peak_pss_mib']:.0f}",
                 times(r["peak_pss_mib"], peer["peak_pss_mib"] if peer else None)]
        out.append("| " + " | ".join(cells) + " |")
    samplers = result["sampler_ns"]
    keys = list(samplers["ours"])
    out += ["", "### Sampler, ns per next() (index space 1M, best of 5)", "",
            "| sampler | " + " | ".join(keys) + " |", "|---|" + "---:|" * len(keys)]
    for name, row in samplers.items():
        out.append(f"| {name} | " + " | ".join(f"{row[k]:.0f}" for k in keys) + " |")
    if "loaderx-2.5.9" in samplers:
        peer = samplers["loaderx-2.5.9"]
        out.append("| ours vs 2.5.9 (speed-up) | " +
                   " | ".join(f"{peer[k] / samplers['ours'][k]:.2f}x" for k in keys) + " |")
    ours = samplers["ours"]
    out.append("")
    out.append("CYCLIC vs IID (ours): " + ", ".join(
        f"batch {b}: {ours[f'CYCLIC-{b}'] / ours[f'IID-{b}']:.2f}x" for b in (64, 256, 1024)))
    out.append("")
    return out


def plot(results: dict[str, dict[str, Any]], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot", file=sys.stderr)
        return False
    panels = [(kind, name, w) for kind, r in results.items() if kind in ("Dense", "Ragged")
              for name, w in r["workloads"].items()]
    if not panels:
        return False
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4.2), squeeze=False)
    for ax, (kind, name, w) in zip(axes[0], panels):
        rows = [r for r in w["rows"] if not r["backend"].startswith("memcpy")]
        names = [r["backend"] for r in rows]
        colors = ["tab:blue" if n.startswith("zrecord") else "tab:orange"
                  if n.startswith("loaderx") else "tab:gray" for n in names]
        ax.barh(names, [r["mib_s"] for r in rows], color=colors)
        ax.invert_yaxis()
        ax.set_title(f"{kind} {name}")
        ax.set_xlabel("logical gather MiB/s")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def matrix_tables(result: dict[str, Any]) -> list[str]:
    """bench_matrix.py's store matrix: one table per workload, ratios against zrecord-raw."""
    caps = {k: v for k, v in result.get("records_cap", {}).items() if v}
    out = ["## Store matrix (`bench_matrix.py`)", "",
           f"{result['date']}, {result['machine']}, Python {result['python']}, NumPy "
           f"{result['numpy']}; batch {result['batch']}, at least {result['seconds']} s of timed "
           "gathers per backend (fewer where marked slow)"
           + (f"; records capped: {caps}" if caps else "") + ".", "",
           "Versions: " + "; ".join(f"{k} {v}" for k, v in result["versions"].items()) + ".", ""]
    for workload in result["workloads"].values():
        out += [matrix_table(workload).replace("### ", "### Matrix: ", 1), ""]
    return out


def loader_sweep_tables(result: dict[str, Any]) -> list[str]:
    """bench_loaders.py's sweep: batches/s and peak PSS per loader and worker count."""
    return ["## Loader sweep (`bench_loaders.py`)", "",
            f"{result['date']}, {result['machine']}, Python {result['python']}; transform rows "
            f"time {result['transform_batches']} batches. Versions: "
            + ", ".join(f"{k} {v}" for k, v in result["versions"].items()) + ".", "",
            sweep_table(result), ""]


def plot_matrix_loaders(matrix: dict[str, Any] | None, loaders: dict[str, Any] | None,
                        path: Path) -> bool:
    """One PNG: gather vs zrecord-raw per matrix workload, and loader batches/s by workers."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot", file=sys.stderr)
        return False
    workloads = list(matrix["workloads"].values()) if matrix else []
    panels = len(workloads) + (1 if loaders else 0)
    if not panels:
        return False
    cols = min(3, panels)
    nrows = -(-panels // cols)
    fig, grid = plt.subplots(nrows, cols, figsize=(5.2 * cols, 4.4 * nrows), squeeze=False)
    axes = list(grid.flat)
    for ax in axes[panels:]:
        ax.set_visible(False)
    for ax, w in zip(axes, workloads):
        rows = [r for r in w["rows"] if "mib_s" in r]
        ref = next((r["mib_s"] for r in rows if r["backend"] == "zrecord-raw"), None) or 1.0
        names = [r["backend"] + (" *" if "note" in r else "") for r in rows]
        colors = ["tab:blue" if n.startswith("zrecord") else "tab:gray" for n in names]
        ax.barh(names, [r["mib_s"] / ref for r in rows], color=colors)
        ax.set_xscale("log")
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.invert_yaxis()
        ax.set_title(f"{w['name']} ({w['records']} rec.)")
        ax.set_xlabel("gather vs zrecord-raw (log; * = slow, few batches)")
    if loaders:
        ax = axes[panels - 1]
        series: dict[str, list[tuple[int, float]]] = {}
        for r in loaders["rows"]:
            if "batches_per_s" in r and "+numba" not in r["loader"]:
                series.setdefault(r["loader"], []).append((r["workers"], r["batches_per_s"]))
        for name, pts in series.items():
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        ax.set_yscale("log")
        ax.set_xlabel("workers")
        ax.set_ylabel("batches/s (batch 256, vision_dense)")
        ax.set_title("loader sweep")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def cold_tables(result: dict[str, Any]) -> list[str]:
    """bench_cold.py: cold gathers per workload, the cold DataLoaders, larger-than-RAM runs."""
    dev = result.get("device", {})
    queue = dev.get("queue", {})
    out = ["## Cold reads (`bench_cold.py`)", "",
           f"{result['date']}, {result['machine']}, Python {result['python']}, NumPy "
           f"{result['numpy']}, {result['store']} {result.get('store_version') or ''}; stores on "
           f"{dev.get('fs')}" + (f" (device {queue.get('device')}, read_ahead_kb "
                                 f"{queue.get('read_ahead_kb')})" if queue else "")
           + ("; TMPFS: page-cache figures, not cold reads" if dev.get("tmpfs") else "")
           + (f"; batch {result['batch']}; {result.get('rounds', 1)} round(s) of "
              f"{result.get('batches')} timed batches per backend, medians. Every batch: the "
              "store opened fresh, its payload evicted (posix_fadvise DONTNEED)"
              + (" with its index" if result.get("evict_index") else "")
              + ", one IID gather timed. Ceilings: random O_DIRECT reads of the mean record "
              "size over a file of the workload's size in the same folder."
              if result.get("workloads") else "."), ""]
    for workload in result.get("workloads", {}).values():
        out += [cold_table(workload), ""]
    if "loaders" in result:
        out += [loader_table(result), ""]
    if "larger_than_ram" in result:
        out += [ltr_table(result["larger_than_ram"]), ""]
    return out


def plot_cold(result: dict[str, Any], path: Path) -> bool:
    """One panel per workload: each backend's cold gather as a percent of the QD-32 ceiling,
    with the QD-1 ceiling marked (records/s vs IOPS up to 4 KiB records, else MiB/s)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot", file=sys.stderr)
        return False
    workloads = [w for w in result.get("workloads", {}).values() if w.get("rows")]
    if not workloads:
        return False
    cols = min(2, len(workloads))
    nrows = -(-len(workloads) // cols)
    fig, grid = plt.subplots(nrows, cols, figsize=(5.6 * cols, 3.6 * nrows), squeeze=False)
    axes = list(grid.flat)
    for ax in axes[len(workloads):]:
        ax.set_visible(False)
    for ax, w in zip(axes, workloads):
        rows = [r for r in w["rows"] if "pct_qd32" in r]
        names = [r["backend"] for r in rows]
        colors = ["tab:blue" if n.startswith("zrecord") else "tab:orange"
                  if n.startswith("loaderx") else "tab:gray" for n in names]
        ax.barh(names, [r["pct_qd32"] for r in rows], color=colors)
        depths = w["ceiling"]["depths"]
        key = "iops" if w["ceiling_basis"] == "iops" else "mib_s"
        ax.axvline(100.0, color="black", linewidth=0.8)
        ax.axvline(100.0 * depths["1"][key] / depths["32"][key], color="black", linestyle="--",
                   linewidth=0.8, label="QD-1 ceiling")
        ax.invert_yaxis()
        ax.set_title(f"{w['name']} (mean {w['record_bytes_mean']:,.0f} B)")
        ax.set_xlabel("% of QD-32 " + ("IOPS" if key == "iops" else "bandwidth"))
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"Cold IID gathers, batch {result['batch']}, vs the device's random-read ceiling",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def plot_decode(result: dict[str, Any], path: Path) -> bool:
    """bench_decode.py: images/s and peak PSS against N, loaderx threads vs PyTorch processes,
    with the share of an image's time spent decoding."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot", file=sys.stderr)
        return False
    rows = result.get("rows") or []
    if not rows:
        return False
    n = [r["workers"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for key, label, color in (("loaderx", "loaderx, N threads", "tab:blue"),
                              ("torch", "PyTorch, N worker processes", "tab:gray")):
        left.plot(n, [r[f"{key}_images_s"] for r in rows], marker="o", label=label, color=color)
        right.plot(n, [r[f"{key}_pss_mib"] for r in rows], marker="o", label=label, color=color)
    steps = result["steps"]["ms_per_image"]
    decode = steps["open+decode"] / sum(steps.values())
    left.set_title(f"photos decoded to 224 x 224 (decoding is {decode:.0%} of an image's time)",
                   fontsize=9)
    left.set_xlabel("N")
    left.set_ylabel("images/s")
    left.set_xticks(n)
    left.set_ylim(bottom=0)
    right.set_title("peak PSS of the process tree", fontsize=9)
    right.set_xlabel("N")
    right.set_ylabel("MiB")
    right.set_xticks(n)
    right.set_ylim(bottom=0)
    for ax in (left, right):
        ax.legend(fontsize=8)
    fig.suptitle(f"{result['date']}, {result['machine'].split(',')[1].strip()}, batch "
                 f"{result['batch']}, medians of {result['rounds']} rounds", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=str(ROOT / "docs" / "benchmarks"))
    args = ap.parse_args(argv)
    folder = Path(args.dir)
    results = {}
    for kind, file in (("Dense", "bench_dense.json"), ("Ragged", "bench_ragged.json"),
                       ("Loaders", "bench.json")):
        if (folder / file).exists():
            results[kind] = json.loads((folder / file).read_text())
    extra = {key: json.loads((folder / f"{key}.json").read_text())
             for key in ("matrix", "loaders", "bench_cold", "bench_decode")
             if (folder / f"{key}.json").exists()}
    if not results and not extra:
        print(f"no results in {folder}", file=sys.stderr)
        return 1
    lines = ["# Benchmark results", "",
             "Generated by `benchmarks/report.py` from the JSON files beside this page; rerun "
             "with `python -m nox -s bench` (see benchmarks/README.md). Ratios compare rows of "
             "one run; absolute numbers on this 2-core machine are noisy.", ""]
    for kind in ("Dense", "Ragged"):
        if kind in results:
            lines += store_tables(results[kind], kind)
    if "Loaders" in results:
        lines += loader_tables(results["Loaders"])
    if (folder / "bench_convert.json").exists():
        lines += [convert_table(json.loads((folder / "bench_convert.json").read_text())), ""]
    if plot(results, folder / "gather.png"):
        lines += ["![logical gather throughput](gather.png)", ""]
    if "matrix" in extra:
        lines += matrix_tables(extra["matrix"])
    if "loaders" in extra:
        lines += loader_sweep_tables(extra["loaders"])
    if plot_matrix_loaders(extra.get("matrix"), extra.get("loaders"), folder / "matrix.png"):
        lines += ["![store matrix and loader sweep](matrix.png)", ""]
    if "bench_cold" in extra:
        lines += cold_tables(extra["bench_cold"])
        if plot_cold(extra["bench_cold"], folder / "cold.png"):
            lines += ["![cold gathers against the device ceiling](cold.png)", ""]
    if "bench_decode" in extra:
        lines += ["## Decoding photos on the loader (`bench_decode.py`)", "",
                  decode_table(extra["bench_decode"]), ""]
        if plot_decode(extra["bench_decode"], folder / "decode.png"):
            lines += ["![decoding photos: loaderx threads vs PyTorch processes](decode.png)", ""]
    (folder / "results.md").write_text("\n".join(lines))
    print(f"wrote {folder / 'results.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
