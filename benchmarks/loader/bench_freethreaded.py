"""Free-threaded CPython (3.13t) against CPython with a GIL: a CPU-heavy Python transform
through the DataLoader's threads, beside PyTorch's fork workers and Numba `nogil`, and the raw
gather and loader rows (the free-threaded build's own overheads).

Data: the real token records of benchmarks/prepare_data.py (`tokens.npy`, `offsets.npy`: GPT-2
ids of documentation paragraphs, 16..512 tokens), written once by the driver into a Ragged
zstd store. Every row runs in a fresh process of the interpreter it names, alternating the
interpreters within each round; the figure is the median of `--rounds` rounds, with the peak
PSS of the process tree (common.probes.PeakPss).

The transform is what a text pipeline does in Python: for each record, hashed bigram counts
into 1,024 buckets and a running position-weighted sum, one Python-level step per token. On a
CPython with a GIL it holds the GIL throughout, so loaderx's threads take turns; on 3.13t they
run at once. Two spellings of it: `features_py` in plain Python over the record's `tolist()`
(what the target rows use), and `features` over NumPy arrays element by element (NumPy
scalars), which Numba also compiles with `nogil=True`, the other answer to the GIL (3.11
only: Numba has no 3.13t build here).

Rows (batch `--batch` records; `threads` = the DataLoader's workers):
  transform-python   loaderx DataLoader, CYCLIC sampler, `features_py` in the transform,
                     1 and 2 threads, on each interpreter
  transform-python-source  the same, its functions taken from this file imported as a module
                     compiled from its source (as with PYTHONDONTWRITEBYTECODE, or a source
                     newer than its .pyc): on 3.13t its number constants are not immortal
  transform-numpy    the same with `features` (NumPy scalars), 1 and 2 threads, each
  torch-fork         PyTorch DataLoader over the same records (a map-style dataset of the
                     token arrays, shuffle), `features_py` in the collate_fn of 2 fork workers
                     (the GIL interpreter: no torch for 3.13t here)
  transform-numba    loaderx, 2 threads, `features` compiled with @njit(nogil=True)
  gather             Ragged store, batches of `--batch` random records: records/s, 1 thread
  loader-raw         loaderx, no transform, 2 threads: batches/s

Usage: python benchmarks/loader/bench_freethreaded.py --python-ft PATH [--python-gil PATH]
       [--data DIR] [--batch 256] [--seconds 4] [--rounds 3] [--json OUT]
Both interpreters need zrecord and loaderx installed; the GIL one also torch and numba for
their rows (a row whose import fails is reported as not run, with the reason).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, which holds `common`
from common.data import default_data
from common.probes import PeakPss

BUCKETS = 1024


def features(tokens: np.ndarray, out: np.ndarray) -> None:
    """Hashed bigram counts of `tokens` into out[:-1], a position-weighted sum into out[-1]:
    one Python-level step per token (Numba compiles the same code).

    The bucket count is read from `out` into a local, not from the module's BUCKETS in the
    loop: on 3.13t every thread reading one shared object (an int above 256 is not immortal)
    updates its reference count atomically (docs/howto/tuning.md)."""
    buckets = out.shape[0] - 1
    prev = 0
    weighted = 0.0
    for i in range(tokens.shape[0]):
        t = int(tokens[i])
        h = (prev * 1000003 + t) % buckets
        out[h] += 1.0
        weighted += t / (i + 1.0)
        prev = t
    out[buckets] = weighted


def features_py(tokens: list[int]) -> list[float]:
    """`features` in plain Python: the same figures, from a list of ints into a list."""
    buckets = 1024
    counts = [0.0] * (buckets + 1)
    prev = 0
    weighted = 0.0
    for i, t in enumerate(tokens):
        counts[(prev * 1000003 + t) % buckets] += 1.0
        weighted += t / (i + 1.0)
        prev = t
    counts[buckets] = weighted
    return counts


def batch_features_py(records: Any) -> np.ndarray:
    return np.asarray([features_py(rec.tolist()) for rec in records], np.float32)


def rate(it: Any, warmup: int, seconds: float) -> float:
    """Batches/s of next(it) over at least `seconds` (and 10 batches), after `warmup` batches:
    long enough that the batches prefetched before the timer are a small part of it."""
    for _ in range(warmup):
        next(it)
    n, t = 0, time.perf_counter()
    while n < 10 or time.perf_counter() - t < seconds:
        next(it)
        n += 1
    return n / (time.perf_counter() - t)


def batch_features(records: Any, fn: Any) -> np.ndarray:
    out = np.zeros((len(records), BUCKETS + 1), np.float32)
    for k, rec in enumerate(records):
        fn(rec, out[k])
    return out


# -- children ---------------------------------------------------------------------------------


def _open(args: argparse.Namespace) -> Any:
    from zrecord import Ragged

    return Ragged.open(os.path.join(args.stores, "tokens"))


def _check(got: np.ndarray, records: list[np.ndarray], name: str) -> None:
    want = batch_features(records, features)
    if not np.allclose(got, want, rtol=1e-5):
        raise AssertionError(f"{name}: the first batch's features differ from the reference")


def child_loaderx(args: argparse.Namespace, batch_fn: Any | None, threads: int) -> dict[str, Any]:
    """loaderx's DataLoader with `batch_fn(records)` as the transform (None: no transform)."""
    from loaderx.dataloader import DataLoader
    from loaderx.sampler import Sampler

    store = _open(args)
    sampler = Sampler(len(store), args.batch, "cyclic", seed=42)
    reference = Sampler(len(store), args.batch, "cyclic", seed=42)
    transform = None if batch_fn is None else (lambda b: {"x": batch_fn(b["tokens"])})
    peak = PeakPss()
    loader = DataLoader({"tokens": store}, sampler, transform, workers=threads, prefetch=4)
    first = next(loader)
    if batch_fn is not None:
        _check(first["x"], list(store[reference.batch(0)]), "loaderx")
    del first
    got = rate(loader, args.warmup, args.seconds)
    pss = peak.stop()
    loader.close()
    store.close()
    return {"batches_per_s": got, "peak_pss_mib": pss / 2**20}


class TokenDataset:
    """torch map-style dataset: record i of the store's source arrays."""

    def __init__(self, tokens: np.ndarray, offsets: np.ndarray) -> None:
        self.tokens, self.offsets = tokens, offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i]:self.offsets[i + 1]]


def child_torch(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    torch.manual_seed(42)
    tokens = np.load(os.path.join(args.data, "tokens.npy"), mmap_mode="r")
    offsets = np.load(os.path.join(args.data, "offsets.npy"))
    ds = TokenDataset(tokens, offsets)
    peak = PeakPss()
    loader = torch.utils.data.DataLoader(
        ds, batch_size=args.batch, shuffle=True, drop_last=True, num_workers=2,
        multiprocessing_context="fork", persistent_workers=True, prefetch_factor=2,
        collate_fn=lambda recs: (torch.from_numpy(batch_features_py(recs)), recs[0]))

    def endless() -> Any:
        while True:
            yield from loader

    it = endless()
    x, rec0 = next(it)
    want = np.zeros(BUCKETS + 1, np.float32)
    features(np.asarray(rec0), want)
    if not np.allclose(x.numpy()[0], want, rtol=1e-5):
        raise AssertionError("torch: the first batch's features differ from the reference")
    got = rate(it, args.warmup, args.seconds)
    return {"batches_per_s": got, "peak_pss_mib": peak.stop() / 2**20}


def child_gather(args: argparse.Namespace) -> dict[str, Any]:
    store = _open(args)
    rng = np.random.default_rng(0)
    n = len(store)
    for _ in range(20):
        store[rng.integers(0, n, args.batch)]
    peak = PeakPss()
    calls = 0
    t = time.perf_counter()
    while time.perf_counter() - t < args.seconds:
        store[rng.integers(0, n, args.batch)]
        calls += 1
    elapsed = time.perf_counter() - t
    pss = peak.stop()
    store.close()
    return {"records_per_s": calls * args.batch / elapsed, "peak_pss_mib": pss / 2**20}


def _compiled_from_source() -> Any:
    """This file run again as a module of its own, its code compiled from the source by
    `compile()` in this process, as a module's is when it is imported without a .pyc
    (PYTHONDONTWRITEBYTECODE set, a source newer than its .pyc) or made by exec. On 3.13t the
    number constants of such code are not immortal (the main script's and a .pyc's are), so
    threads running it share their reference counts (loaderx/_constants.py warns about it)."""
    import types

    module = types.ModuleType("bench_freethreaded_source")
    module.__file__ = __file__
    exec(compile(Path(__file__).read_text(), __file__, "exec"), module.__dict__)
    sys.modules[module.__name__] = module
    return module


def run_as_child(args: argparse.Namespace) -> dict[str, Any]:
    name, threads = args.child, int(args.threads)
    if name == "transform-python":
        return child_loaderx(args, batch_features_py, threads)
    if name == "transform-python-source":
        return child_loaderx(args, _compiled_from_source().batch_features_py, threads)
    if name == "transform-numpy":
        return child_loaderx(args, lambda recs: batch_features(recs, features), threads)
    if name == "transform-numba":
        import numba

        fn = numba.njit(nogil=True)(features)
        fn(np.zeros(3, np.int32), np.zeros(BUCKETS + 1, np.float32))  # compiled outside the timer
        return child_loaderx(args, lambda recs: batch_features(recs, fn), threads)
    if name == "loader-raw":
        return child_loaderx(args, None, threads)
    if name == "torch-fork":
        return child_torch(args)
    return child_gather(args)


# -- the driver -------------------------------------------------------------------------------

# (row, threads, interpreters it runs on)
PLAN = [("transform-python", 1, ("gil", "ft")), ("transform-python", 2, ("gil", "ft")),
        ("transform-python-source", 1, ("gil", "ft")), ("transform-python-source", 2, ("gil", "ft")),
        ("transform-numpy", 1, ("gil", "ft")), ("transform-numpy", 2, ("gil", "ft")),
        ("torch-fork", 2, ("gil",)), ("transform-numba", 2, ("gil",)),
        ("gather", 1, ("gil", "ft")), ("loader-raw", 2, ("gil", "ft"))]


def interpreter_info(python: str) -> dict[str, Any]:
    code = ("import json, sys, sysconfig; print(json.dumps({'version': sys.version.split()[0], "
            "'free_threaded': bool(sysconfig.get_config_var('Py_GIL_DISABLED')), "
            "'gil': getattr(sys, '_is_gil_enabled', lambda: True)()}))")
    return json.loads(subprocess.run([python, "-c", code], capture_output=True, text=True,
                                     check=True).stdout)


def run_row(args: argparse.Namespace, python: str, name: str, threads: int) -> dict[str, Any]:
    cmd = [python, __file__, "--child", name, "--threads", str(threads), "--data", args.data,
           "--stores", args.stores, "--batch", str(args.batch), "--seconds", str(args.seconds),
           "--warmup", str(args.warmup)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        lines = out.stderr.strip().splitlines() or ["?"]
        return {"status": "not run: " + next((x for x in reversed(lines) if "Error" in x), lines[-1])}
    got = json.loads(out.stdout.strip().splitlines()[-1])
    # A child whose interpreter turned the GIL back on would measure the wrong thing.
    gil_after = subprocess.run([python, "-c", "import sys, zrecord, loaderx, loaderx.sampler, "
                                "zrecord._native; print(getattr(sys, '_is_gil_enabled', "
                                "lambda: True)())"], capture_output=True, text=True).stdout.strip()
    return {**got, "gil_after_imports": gil_after == "True"}


def table(result: dict[str, Any]) -> str:
    names = {"gil": f"CPython {result['interpreters']['gil']['version']}",
             "ft": f"CPython {result['interpreters']['ft']['version']}t (GIL off)"}
    lines = ["| row | threads | interpreter | rate (median) | rounds | peak PSS MiB |",
             "|---|---:|---|---:|---|---:|"]
    for row in result["rows"]:
        if "status" in row:
            lines.append(f"| {row['row']} | {row['threads']} | {names[row['interp']]} | "
                         f"{row['status']} | | |")
            continue
        unit = "records/s" if row["row"] == "gather" else "batches/s"
        lines.append(f"| {row['row']} | {row['threads']} | {names[row['interp']]} | "
                     f"{row['median']:,.1f} {unit} | "
                     f"{', '.join(f'{r:,.1f}' for r in row['rounds'])} | {row['peak_pss_mib']:.0f} |")
    return "\n".join(lines)


def write_store(data: str, folder: str) -> int:
    from zrecord import Ragged

    tokens = np.load(os.path.join(data, "tokens.npy"), mmap_mode="r")
    offsets = np.load(os.path.join(data, "offsets.npy"))
    with Ragged.create(os.path.join(folder, "tokens"), np.int32, 1, codec="zstd", sync=False) as w:
        step = 8192
        for a in range(0, len(offsets) - 1, step):
            b = min(a + step, len(offsets) - 1)
            w.append([tokens[offsets[i]:offsets[i + 1]] for i in range(a, b)])
    return len(offsets) - 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python-ft", help="a free-threaded CPython with zrecord and loaderx")
    ap.add_argument("--python-gil", default=sys.executable)
    ap.add_argument("--data", default=default_data())
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=4.0, help="timed seconds per row")
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--threads", default="1", help=argparse.SUPPRESS)
    ap.add_argument("--stores", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(run_as_child(args)))
        return 0
    if not args.python_ft:
        ap.error("--python-ft is required (docs/development.md says how to build a 3.13t)")
    pythons = {"gil": args.python_gil, "ft": args.python_ft}
    info = {k: interpreter_info(p) for k, p in pythons.items()}
    if not info["ft"]["free_threaded"] or info["gil"]["free_threaded"]:
        ap.error(f"--python-ft must be a free-threaded build and --python-gil not: {info}")
    samples: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as stores:
        args.stores = stores
        records = write_store(args.data, stores)
        for r in range(args.rounds):
            for name, threads, interps in PLAN:
                order = interps if r % 2 == 0 else tuple(reversed(interps))
                for interp in order:
                    print(f"round {r + 1}: {name} threads={threads} {interp} ...", file=sys.stderr,
                          flush=True)
                    samples.setdefault((name, threads, interp), []).append(
                        run_row(args, pythons[interp], name, threads))
    rows = []
    for (name, threads, interp), got in samples.items():
        failed = [g for g in got if "status" in g]
        if failed:
            rows.append({"row": name, "threads": threads, "interp": interp, **failed[0]})
            continue
        key = "records_per_s" if name == "gather" else "batches_per_s"
        rates = [g[key] for g in got]
        rows.append({"row": name, "threads": threads, "interp": interp, "rounds": rates,
                     "median": statistics.median(rates),
                     "peak_pss_mib": max(g["peak_pss_mib"] for g in got),
                     "gil_after_imports": any(g["gil_after_imports"] for g in got)})
    result = {"date": time.strftime("%Y-%m-%d %H:%M"),
              "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
              "interpreters": info, "records": records, "batch": args.batch,
              "seconds": args.seconds, "rounds": args.rounds, "rows": rows}
    print(table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
