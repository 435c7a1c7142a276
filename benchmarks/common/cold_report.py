"""bench_cold.py's tables and its report: Markdown from the results it writes as JSON.

benchmarks/report.py renders docs/benchmarks/bench_cold.json with the same functions, so this
module lives in common and needs nothing but the standard library: it also reads results of
older runs (their missing keys are said where they matter).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

# -- larger than RAM --------------------------------------------------------------------------


def window_rate(samples: list[dict[str, float]], t0: float, t1: float) -> float:
    """Batches/s between the samples nearest to `t0` and to `t1` (taken about a second
    apart, each a little late)."""
    a = min(samples, key=lambda s: abs(s["t_s"] - t0))
    b = min(samples, key=lambda s: abs(s["t_s"] - t1))
    if b["t_s"] <= a["t_s"]:
        return float("nan")
    return (b["batches"] - a["batches"]) / (b["t_s"] - a["t_s"])


def ltr_ratios(r: dict[str, Any], refs: dict[str, float | None]) -> str:
    """A run's batches/s over each reference's ("-" where one is missing)."""
    out = []
    for key, ref in refs.items():
        ratio = r.get(f"vs_{key}") or (r["batches_per_s"] / ref if ref else None)
        out.append(f"{ratio:.2f}x" if ratio else "-")
    return " / ".join(out)


def ltr_row(r: dict[str, Any], refs: dict[str, float | None], limit: float | None) -> str:
    """One run's table row (results written before --ltr-cache and --ltr-memory-limit have
    neither the cache nor the cgroup figures)."""
    head = f"| {r['mode']} | {r.get('cache', 'auto')} |"
    if "batches_per_s" not in r:
        return head + f" {r.get('status', '')} |" + " |" * 7
    first, last = r["samples"][0], r["samples"][-1]
    group = ""
    if "cgroup_peak_mib" in r:
        group = f"{r['cgroup_peak_mib']:,.0f}" + (f" ({r['cgroup_peak_mib'] * 2**20 / limit:.0%})"
                                                   if limit else "")
    hits = f"{r.get('limit_hits', '')} / {r.get('oom_kills', '')}" if "limit_hits" in r else ""
    quarter, t = r["seconds"] / 4, r["seconds"]
    rates = (r.get("rate_first_quarter", window_rate(r["samples"], 0, quarter)),
             r.get("rate_last_quarter", window_rate(r["samples"], t - quarter, t)))
    return (head + f" {t:.0f} | {r['batches_per_s']:.1f} / {rates[0]:.1f} / {rates[1]:.1f} | "
            f"{ltr_ratios(r, refs)} | "
            f"{first['rss']:,.0f} / {last['rss']:,.0f} / {r['peak_rss_mib']:,.0f} | "
            f"{first['pss']:,.0f} / {last['pss']:,.0f} / {r['peak_pss_mib']:,.0f} | {group} | "
            f"{hits} | {r.get('read_mib_batch', float('nan')):,.1f} |")


def ltr_references(out: dict[str, Any]) -> str:
    """The note that says what the ratios compare with."""
    ref, cold = out["evicted_cache"], out["evicted_cache"].get("batches_per_s")
    text = (f"Evicted-cache figure: the same loader (cache \"auto\") over the {ref['workload']} "
            f"store of the real records, its files evicted every {out['evict_interval_ms']:g} ms "
            "by a separate process, no memory limit: "
            + (f"{cold:.1f} batches/s, {ref.get('read_mib_batch', float('nan')):.1f} device "
               f"MiB/batch ({ref.get('resident_pct', float('nan')):.0f}% resident after each "
               "eviction; the evictor also drops pages the loader has hinted but not read yet, "
               "so this figure can understate cold reads)" if cold else ref.get("status", "")) + ".")
    cp = out.get("cold_pass")
    if cp:
        room = (f"in a cgroup of {cp['limit_bytes'] / 2**30:.2f} GiB (room for all of it)"
                if cp.get("limit_bytes") else "with no cgroup")
        text += (" Cold-pass figure: the same loader (cache \"auto\") over this store in the "
                 "first cycle of CYCLIC (a permutation: no record read twice), started with it "
                 f"dropped from the page cache, {room}, {cp.get('batches', 0)} of the cycle's "
                 f"{cp['cycle_batches']} batches: "
                 + (f"{cp['batches_per_s']:.1f} batches/s, {cp.get('read_mib_batch', float('nan')):.1f} "
                    "device MiB/batch." if "batches_per_s" in cp else cp.get("status", "") + "."))
    return text


def ltr_table(out: dict[str, Any]) -> str:
    """The larger-than-RAM table: what RAM meant (MemTotal or the cgroup limit), the store
    against it, and each run against the evicted-cache figure (and the cold-pass figure)."""
    refs = {k: out.get(k, {}).get("batches_per_s") for k in ("evicted_cache", "cold_pass")}
    ram = out.get("ram_bytes", out["mem_total_bytes"])
    limit = out.get("memory_limit_bytes")
    where = (f"the {limit / 2**30:,.2f} GiB memory limit of the cgroup ({out['cgroup']['version']}) "
             f"each run had to itself (MemTotal {out['mem_total_bytes'] / 2**30:,.1f} GiB)"
             if limit else f"MemTotal {ram / 2**30:,.1f} GiB")
    lines = [f"### Larger than RAM: {out['store_bytes'] / 2**30:,.2f} GiB raw Dense store = "
             f"{out['store_bytes'] / ram:.2f}x {where}; our DataLoader, batch {out['batch']}, "
             f"{out['workers']} workers", "",
             "| sampler | cache | seconds | batches/s (whole / first / last quarter) | vs "
             "evicted-cache / cold-pass figure | RSS MiB first / last / peak | PSS MiB first / "
             "last / peak | cgroup peak MiB (of limit) | limit hits / OOM kills | device "
             "MiB/batch |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [ltr_row(r, refs, limit) for r in out["runs"]]
    lines.append("\n" + ltr_references(out) + " Every run starts with the store dropped from "
                 "the page cache. RSS and PSS are the loader process's, sampled every second "
                 "(JSON: samples); page-cache pages it has not mapped are in neither."
                 + (" Each run had a fresh memory cgroup of its own, whose charge covers its "
                    "memory and the page cache it brought in (JSON: samples' cgroup_mib); limit "
                    "hits: charges that met the limit (v1 failcnt, v2 events max)." if limit else ""))
    return "\n".join(lines)


# -- tables -----------------------------------------------------------------------------------


MAPPED_NOTE = ("posix_fadvise(DONTNEED) cannot evict pages that a process has mapped: a "
               "loader that reads through memory maps keeps what it touched warm")


def ceiling_line(c: dict[str, Any]) -> str:
    def depth(d: str, v: dict[str, float]) -> str:
        spread = [r["depths"][d]["mib_s"] for r in c.get("rounds", [])]
        between = (f" (rounds {min(spread):,.0f}-{max(spread):,.0f} MiB/s)"
                   if len(spread) > 1 else "")
        return f"QD{d} {v['iops']:,.0f} IOPS = {v['mib_s']:,.0f} MiB/s{between}"

    depths = "; ".join(depth(d, v) for d, v in c["depths"].items())
    rounds = len(c.get("rounds", []))
    where = (f"the median of {rounds} rounds, each measured beside that round's gathers"
             if rounds > 1 else "measured in the same run")
    return (f"Device ceiling ({c['tool']}, random O_DIRECT reads of {c['block_bytes'] / 1024:,.0f} "
            f"KiB over a {c['file_bytes'] / 2**20:,.0f} MiB file in the same folder, {where}): "
            f"{depths}.")


def table(w: dict[str, Any]) -> str:
    """One workload's cold-gather rows, with its device ceiling below."""
    basis = "records/s vs IOPS" if w["ceiling_basis"] == "iops" else "MiB/s vs bandwidth"
    label = " (TMPFS: page-cache reads, NOT cold)" if w.get("tmpfs") else ""
    lines = [f"### Cold gather{label}: {w['name']}, {w['describe']}, mean record "
             f"{w['record_bytes_mean']:,.0f} B, batch {w['batch']}", "",
             f"| backend | records/s | MiB/s | % of QD32 ceiling ({basis}) | % of QD1 | p95 ms | "
             "open ms | device MiB/batch | read amp. | resident after evict | disk MiB |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    logical = w["batch"] * w["record_bytes_mean"] / 2**20
    for r in w["rows"]:
        read = r.get("read_mib_batch")
        lines.append(
            f"| {r['backend']} | {r['krecords_s'] * 1e3:,.0f} | {r['mib_s']:,.1f} | "
            f"{r.get('pct_qd32', float('nan')):.1f}% | {r.get('pct_qd1', float('nan')):.0f}% | "
            f"{r['p95_ms']:,.1f} | {r['open_ms']:.1f} | "
            + (f"{read:,.1f} | {read / logical:.2f}x" if read is not None else " | ")
            + f" | {r['resident_pct']:.1f}% | {r['disk_mib']:,.1f} |")
    lines += ["", ceiling_line(w["ceiling"])]
    return "\n".join(lines)


def coldness(r: dict[str, Any]) -> str:
    """What a loader row measured, from what its files kept resident right after eviction."""
    share = r.get("resident_pct", float("nan"))
    if share != share:  # no eviction fell inside the timed batches
        return "unknown"
    if share < 10:
        return "cold"
    if share < 50:
        return f"partly warm ({share:.0f}% stayed mapped)"
    return "WARM: its mappings kept the data resident"


def loader_table(result: dict[str, Any]) -> str:
    """The cold DataLoader table of either method (results before the cgroup method have
    no "method": theirs is the evictor)."""
    lo = result["loaders"]
    return cgroup_loader_table(lo) if lo.get("method") == "cgroup" else evict_loader_table(lo)


def cgroup_loader_table(lo: dict[str, Any]) -> str:
    lines = [f"### Cold DataLoaders in memory cgroups: IID, batch {lo['batch']}, {lo['workers']} "
             "workers (loaderx: threads; PyTorch: fork processes), at least "
             f"{lo['batches']} batches and {lo['seconds']:g} s after {lo['warmup']} warm-up, each "
             f"loader's process tree in a memory cgroup ({lo['cgroup']['version']}) of its own",
             "", "| loader | workload | batches/s | records/s | MiB/s | peak PSS MiB | cgroup "
             "peak MiB | device MiB/batch | read amp. | resident at end |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in lo["rows"]:
        if "batches_per_s" not in r:
            lines.append(f"| {r['loader']} | {r['workload']} | {r.get('status', '')} | | | | | | | |")
            continue
        read = r.get("read_mib_batch")
        lines.append(f"| {r['loader']} | {r['workload']} | {r['batches_per_s']:,.1f} | "
                     f"{r['krecords_s'] * 1e3:,.0f} | {r['mib_s']:,.1f} | {r['peak_pss_mib']:,.0f} | "
                     f"{r.get('cgroup_peak_mib', float('nan')):,.0f} | "
                     + (f"{read:,.2f} | {read / r['batch_mib']:.2f}x" if read is not None else " | ")
                     + f" | {r.get('resident_pct', float('nan')):.1f}% |")
    lines.append("")
    for name, d in lo["datasets"].items():
        limit = lo["limits"][name]
        ratio = d["logical_bytes"] / limit
        lines.append(f"- {name}: {d['records']:,} records ({d['copies']:.1f} copies of the "
                     f"{d['source_records']:,} real ones), {d['logical_bytes'] / 2**30:,.2f} GiB; "
                     f"our raw store {d['store_bytes'] / 2**30:,.2f} GiB, the NumPy files "
                     f"{d['npy_bytes'] / 2**30:,.2f} GiB; cgroup limit {limit / 2**30:,.2f} GiB: "
                     f"the data is {ratio:.1f}x the limit"
                     + (" (UNDER 2x: many reads hit the page cache)" if ratio < 2 else ""))
    lines += ["", "Each loader ran in its own process tree in a memory cgroup whose limit covers "
              "its processes' memory and the page cache they bring in, mapped pages included "
              "(the kernel reclaims those at the limit, which posix_fadvise cannot), after every "
              "file of the dataset was dropped from the page cache (nothing had them mapped). No "
              "evictor runs: with the data N times the limit, at most about 1/N of uniform IID "
              "reads can find their record cached. Device MiB/batch: read_bytes of the process "
              "tree (/proc/PID/io; readahead included); read amp.: that over a batch's logical "
              "MiB; cgroup peak: the most the group was charged; resident at end: the loader's "
              "files in the page cache when it had finished (mincore)."]
    return "\n".join(lines)


def evict_loader_table(lo: dict[str, Any]) -> str:
    lines = [f"### Cold DataLoaders: IID, batch {lo['batch']}, {lo['workers']} workers (loaderx: "
             f"threads; PyTorch: fork processes), at least {lo['batches']} batches and "
             f"{lo['seconds']:g} s after {lo['warmup']} warm-up, files evicted every {lo['evict_interval_ms']:g} ms by a separate process"
             + (f" (no memory cgroup: {lo['fallback']})" if lo.get("fallback") else ""),
             "", "| loader | workload | batches/s | records/s | MiB/s | peak PSS MiB | device "
             "MiB/batch | resident after evict (mean / max) | reads were |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in lo["rows"]:
        if "batches_per_s" not in r:
            lines.append(f"| {r['loader']} | {r['workload']} | {r.get('status', '')} | | | | | | |")
            continue
        read = r.get("read_mib_batch")
        lines.append(f"| {r['loader']} | {r['workload']} | {r['batches_per_s']:,.1f} | "
                     f"{r['krecords_s'] * 1e3:,.0f} | {r['mib_s']:,.1f} | {r['peak_pss_mib']:,.0f} | "
                     + (f"{read:,.1f}" if read is not None else "")
                     + f" | {r.get('resident_pct', float('nan')):.0f}% / "
                     f"{r.get('resident_pct_max', float('nan')):.0f}% | {coldness(r)} |")
    lines += ["", f"Note: {MAPPED_NOTE}; the last column is what stayed in the page cache right "
              "after each eviction during the timed batches."]
    return "\n".join(lines)


# -- the run ----------------------------------------------------------------------------------


def report(results: dict[str, Any], tables: list[str], args: argparse.Namespace) -> None:
    """Print the run's header line and `tables`; write the JSON (--json)."""
    dev, q = results["device"], results["device"]["queue"]
    print(f"{results['date']}  {results['machine']}  python {results['python']}  numpy "
          f"{results['numpy']}  {results['store']} {results['store_version']}")
    print(f"stores on {dev['fs']} ({dev['folder']})"
          + (f", device {q.get('device')}, read_ahead_kb {q.get('read_ahead_kb')}" if q else "")
          + ("; TMPFS: page-cache figures, not cold reads" if dev["tmpfs"] else "")
          + f"; {args.rounds} round(s), medians"
          + (f"; {MAPPED_NOTE}.\n" if results["workloads"] or results.get("loaders", {}).get(
              "method") == "evict" else ".\n"))
    print("\n\n".join(tables))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
