"""The tables of bench_matrix.py, bench_loaders.py, bench_convert.py and bench_decode.py: each
script prints its own, and report.py renders the same tables from the JSON the scripts wrote
(docs/benchmarks/results.md), so they live here. They need nothing but the standard library
and read results of older runs too.
"""

from __future__ import annotations

from typing import Any

# The store matrix's reference row: every ratio is against it.
MATRIX_BASE = "zrecord-raw"


# -- bench_matrix.py ------------------------------------------------------------------------------


def matrix_table(w: dict[str, Any]) -> str:
    """bench_matrix.py: one workload's rows, ratios against zrecord-raw."""
    rows = w["rows"]
    ref = next((r for r in rows if r["backend"] == MATRIX_BASE and "mib_s" in r), None)

    def ratio(r: dict[str, Any], key: str) -> str:
        return f"{r[key] / ref[key]:.2f}x" if ref and ref.get(key) and key in r else ""

    def vs_device(r: dict[str, Any]) -> str:
        dev = r.get("device_write_mib_s")
        return f"{r['durable_mib_s'] / dev:.0%}" if dev and "durable_mib_s" in r else ""

    lines = [f"### {w['name']}: {w['describe']}, {w['logical_mib']:,.1f} MiB, batch {w['batch']}"
             + (f"; {w['fs_label']}" if w.get("fs_label") else ""),
             "", f"| backend | durable write MiB/s | vs device | durable vs {MATRIX_BASE} | page-cache "
             f"write MiB/s | gather MiB/s | gather vs {MATRIX_BASE} | krecords/s | p95 ms | disk MiB | "
             f"disk vs {MATRIX_BASE} | note |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        if "mib_s" not in r:
            lines.append(f"| {r['backend']} | | | | | | | | | | | {r['status']} |")
            continue
        durable = f"{r['durable_mib_s']:,.0f}" if "durable_mib_s" in r else ""
        lines.append(f"| {r['backend']} | {durable} | {vs_device(r)} | "
                     f"{ratio(r, 'durable_mib_s')} | {r['write_mib_s']:,.0f} | "
                     f"{r['mib_s']:,.0f} | {ratio(r, 'mib_s')} | "
                     f"{r['krecords_s']:,.1f} | {r['p95_ms']:.2f} | "
                     f"{r['disk_mib']:,.1f} | {ratio(r, 'disk_mib')} | {r.get('note', '')} |")
    return "\n".join(lines)


# -- bench_loaders.py -----------------------------------------------------------------------------


def sweep_table(result: dict[str, Any]) -> str:
    """bench_loaders.py's sweep: plain loading vs torch-fork at the same worker count; the
    transform case."""
    rows = result["rows"]
    by = {(r["loader"], r["workers"]): r for r in rows if "batches_per_s" in r}
    lines = [f"### Loader sweep: vision_dense {result['records']} records, batch "
             f"{result['batch']}, {result['batches']} timed batches after {result['warmup']}", "",
             "| loader | workers | batches/s | vs torch-fork (same workers) | vs torch-workers0 "
             "| peak PSS MiB | PSS vs torch-fork |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "batches_per_s" not in r:
            lines.append(f"| {r['loader']} | {r['workers']} | | | | | {r['status']} |")
            continue
        transform = "+numba" in r["loader"]
        fork = by.get(("torch-fork+numba" if transform else "torch-fork", r["workers"]))
        zero = by.get(("torch-workers0+numba" if transform else "torch-workers0", 0))

        def ratio(key: str, ref: dict[str, Any] | None, r: dict[str, Any] = r) -> str:
            return f"{r[key] / ref[key]:.2f}x" if ref else ""

        lines.append(f"| {r['loader']} | {r['workers']} | {r['batches_per_s']:.1f} | "
                     f"{ratio('batches_per_s', fork)} | {ratio('batches_per_s', zero)} | "
                     f"{r['peak_pss_mib']:.0f} | {ratio('peak_pss_mib', fork)} |")
    return "\n".join(lines)


# -- bench_convert.py -----------------------------------------------------------------------------


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def convert_rows(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """bench_convert.py: one row per (workload, converter, codec): medians over rounds, with
    the rounds kept."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["workload"], r["converter"], r["codec"]), []).append(r)
    rows = []
    for (workload, converter, codec), items in groups.items():
        rows.append({"workload": workload, "converter": converter, "codec": codec,
                     "rows": items[0]["rows"],
                     "rows_s": _median([r["rows_s"] for r in items]),
                     "convert_s": _median([r["convert_s"] for r in items]),
                     "peak_rss_mib": max(r["peak_rss_mib"] for r in items),
                     "disk_mib": items[0]["disk_mib"], "columns_mib": items[0]["columns_mib"],
                     "rounds": {"rows_s": [r["rows_s"] for r in items]}})
    return rows


def _convert_ratio(ours: dict[str, Any], peer: dict[str, Any]) -> str:
    """Median of the per-round rows/s ratios, with their range."""
    pairs = sorted(a / b for a, b in zip(ours["rounds"]["rows_s"], peer["rounds"]["rows_s"]))
    if not pairs:
        return ""
    if len(pairs) == 1:
        return f"{pairs[0]:.2f}x"
    return f"{_median(pairs):.2f}x ({pairs[0]:.2f}-{pairs[-1]:.2f})"


def convert_table(result: dict[str, Any]) -> str:
    """bench_convert.py: the Markdown tables of one run."""
    rows = result.get("rows") or convert_rows(result["runs"])
    peers = {(r["workload"], r["codec"]): r for r in rows if r["converter"] != "loaderx-converter"}
    lines = ["### Conversion: real datasets into zrecord stores", "",
             f"{result['date']}, {result['machine']}, Python {result['python']}, datasets "
             f"{result['datasets']}; Fashion-MNIST: {result.get('rounds', 1)} round(s), photos: "
             f"{result.get('photo_rounds', 1)}; rows/s are medians, ratios medians of the "
             "per-round ratios (range).", "",
             "| workload | converter | codec | rows/s | vs loaderx 2.5.9 | convert s | "
             "peak RSS MiB | disk MiB |", "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        peer = peers.get((r["workload"], r["codec"])) if r["converter"] == "loaderx-converter" \
            else None
        lines.append(f"| {r['workload']} | {r['converter']} | {r['codec']} | {r['rows_s']:,.0f} | "
                     f"{_convert_ratio(r, peer) if peer else ''} | {r['convert_s']:.1f} | "
                     f"{r['peak_rss_mib']:,.0f} | {r['disk_mib']:,.1f} |")
    before = {r["codec"]: r for r in rows if r["workload"] == "fmnist-before"}
    after = {r["codec"]: r for r in rows if r["workload"] == "fmnist"
             and r["converter"] == "loaderx-converter"}
    if before:
        lines += ["", "Fashion-MNIST per column (allocated MiB, both splits): every column zstd "
                  "(before) vs the default, which keeps small columns raw when zstd would grow "
                  "them (after)", "", "| column | before: zstd | after: default | change |",
                  "|---|---:|---:|---:|"]
        b, a = before.get("zstd"), after.get("zstd")
        if b and a:
            for column, mib in b["columns_mib"].items():
                now = a["columns_mib"].get(column, 0.0)
                lines.append(f"| {column} | {mib:.2f} | {now:.2f} | {now / mib - 1:+.0%} |")
    return "\n".join(lines)


# -- bench_decode.py ------------------------------------------------------------------------------


def decode_table(result: dict[str, Any]) -> str:
    """bench_decode.py: the Markdown tables of one run."""
    prep = result["prepared"]
    lines = [f"### Decoding photos on the loader: loaderx threads vs PyTorch processes "
             f"({prep['images']:,} photos, {prep['file_mib']:.0f} MiB of files; batch "
             f"{result['batch']}, {result['batches']} timed batches after 2N warm-up ones, "
             f"{result['rounds']} rounds)",
             "", "| N | loaderx images/s | PyTorch images/s | speed (loaderx / PyTorch) | "
             "loaderx peak PSS MiB | PyTorch peak PSS MiB | PSS (loaderx / PyTorch) | "
             "loaderx time in the transform | consumer waiting |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        lines.append(
            f"| {r['workers']} | {r['loaderx_images_s']:.1f} | {r['torch_images_s']:.1f} | "
            f"{r['speed_ratio']:.2f}x ({r['speed_range'][0]:.2f}-{r['speed_range'][1]:.2f}) | "
            f"{r['loaderx_pss_mib']:.0f} | {r['torch_pss_mib']:.0f} | {r['pss_ratio']:.2f}x "
            f"({r['pss_range'][0]:.2f}-{r['pss_range'][1]:.2f}) | {r['transform_share']:.0%} | "
            f"{r['wait_share']:.0%} |")
    steps = result["steps"]["ms_per_image"]
    total = sum(steps.values())
    lines += ["", f"Where an image's time goes (one thread, the same {result['steps']['images']} "
              f"images, mean file {result['steps']['mean_file_kib']:.0f} KiB): "
              + ", ".join(f"{k} {v:.2f} ms ({v / total:.0%})" for k, v in steps.items())
              + f"; total {total:.2f} ms. `import torch` alone: "
              f"{result['torch_import']['peak_pss_mib']:.0f} MiB PSS in one process."]
    formats = result["steps"].get("formats")
    if formats:
        gil = result["steps"]["spinner_progress"]
        lines += ["", "| format | images | ms per image (one thread) | a Python thread's progress "
                  "beside its decoding (1.0 = GIL released throughout) |", "|---|---:|---:|---:|"]
        for name, f in formats.items():
            lines.append(f"| {name} | {f['images']} | {f['ms_per_image']:.1f} | "
                         f"{gil.get(name, float('nan')):.2f} |")
    return "\n".join(lines)
