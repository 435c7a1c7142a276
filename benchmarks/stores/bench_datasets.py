"""Datasets of many stores: writing one in parallel, and reading one against a single store.

Import (each configuration in a fresh interpreter; wall time and the peak PSS of its process
tree, sampled every 100 ms; medians of `--rounds` rounds, run in turn):
  photos-decoded  the real photographs (vision_dense.npy) written once as JPEG files (quality
                  90), cycled to `--records` inputs; each input is decoded (Pillow) to a
                  (3, 224, 224) uint8 record: the Python-side work of an import
  photos-encoded  the same files, each stored as its bytes (a Ragged uint8 record)
  tokens          the token corpus (tokens.npy, offsets.npy), inputs of 1,000 records each,
                  Ragged int32 records
ceiling: the same decoding (or reading) by 1 or 2 forked processes, nothing written: what
the machine gives that work. ours: `zrecord.write_dataset(..., workers=N)` with its defaults (spawned workers, parts flushed
to stable storage), codec raw; with `--peers PYTHON` (a venv with litdata and
mosaicml-streaming): LitData's `optimize(fn, inputs, num_workers=N)` and MosaicML Streaming's
`MDSWriter` run by N processes on contiguous slices of the inputs (then `merge_index`), both
with shards of 64 MB and no compression, as their defaults.

Read (one process; the same records as one store and as a dataset of `--parts` parts, written
by write_dataset): open time (median of 20 opens), warm random gathers of `--batch` records
(records/s, alternating batch by batch for `--seconds` per round, every record read once
first), loaderx's DataLoader (CYCLIC, warm, batches/s; the store's and the dataset's
loaders timed in turns of 50 batches for `--seconds`), and cold gathers (readers opened for
them, the files each reads evicted from the page cache before every batch: its folder's, and
for a store its compact index in the index cache folder, which a dataset's small parts do not
use: they judge their index.zri by part), for photos (Dense) and tokens (Ragged). A control reads the same gathers beside them: one store whose records lie in
as many data files as the dataset has parts (`data_shards`), which tells the cost of many
files' mappings from the cost of the dataset's own work.

    python benchmarks/stores/bench_datasets.py --data ../data --tmp /var/tmp/bench \\
        [--peers ../peerenv/bin/python] [--records 20000] [--rounds 2]
Writes docs/benchmarks/bench_datasets.json and prints the tables.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, which holds `common`
from common.data import default_data
from common.probes import evict, folder_files, tree_pss_bytes

ROOT = Path(__file__).resolve().parents[2]
OUT_JSON = ROOT / "docs" / "benchmarks" / "bench_datasets.json"

# The children: argv = [workload, workers, out, inputs.json, data]. Each prints one JSON line.
_INPUTS = """
import json, sys, time
import numpy as np
WORKLOAD, WORKERS, OUT, INPUTS, DATA = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]

def decoded(path):
    from PIL import Image
    with Image.open(path) as im:
        return np.ascontiguousarray(np.asarray(im.convert("RGB")).transpose(2, 0, 1))

def encoded(path):
    with open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8)

_TOKENS = None
def token_records(span):
    global _TOKENS
    if _TOKENS is None:
        _TOKENS = (np.load(DATA + "/tokens.npy", mmap_mode="r"), np.load(DATA + "/offsets.npy"))
    tokens, offsets = _TOKENS
    return [np.array(tokens[offsets[i]:offsets[i + 1]]) for i in range(span[0], span[1])]
"""

OURS = _INPUTS + """
import zrecord

def photo_decoded(path):
    return decoded(path)[None]

def photo_encoded(path):
    return [encoded(path)]

if __name__ == "__main__":
    inputs = [tuple(x) if isinstance(x, list) else x for x in json.load(open(INPUTS))]
    kw = {"photos-decoded": dict(fn=photo_decoded, dtype=np.uint8, item_shape=(3, 224, 224)),
          "photos-encoded": dict(fn=photo_encoded, dtype=np.uint8, ndim=1),
          "tokens": dict(fn=token_records, dtype=np.int32, ndim=1)}[WORKLOAD]
    fn = kw.pop("fn")
    t = time.perf_counter()
    sync = len(sys.argv) < 7 or sys.argv[6] != "nosync"
    zrecord.write_dataset(OUT, fn, inputs, codec="raw", workers=WORKERS, progress=False, sync=sync,
                          **kw)
    seconds = time.perf_counter() - t
    with zrecord.open_dataset(OUT) as ds:
        print(json.dumps({"seconds": seconds, "records": len(ds)}))
"""

LITDATA = _INPUTS + """
from litdata import optimize

def photo_decoded(path):
    return decoded(path)

def photo_encoded(path):
    return encoded(path).tobytes()

def tokens(span):
    yield from token_records(span)

if __name__ == "__main__":
    inputs = [tuple(x) if isinstance(x, list) else x for x in json.load(open(INPUTS))]
    fn = {"photos-decoded": photo_decoded, "photos-encoded": photo_encoded, "tokens": tokens}[WORKLOAD]
    t = time.perf_counter()
    optimize(fn=fn, inputs=inputs, output_dir=OUT, num_workers=WORKERS, chunk_bytes="64MB")
    seconds = time.perf_counter() - t
    from litdata import StreamingDataset
    print(json.dumps({"seconds": seconds, "records": len(StreamingDataset(OUT))}))
"""

MDS = _INPUTS + """
import multiprocessing
from streaming import MDSWriter
from streaming.base.util import merge_index

COLUMNS = {"photos-decoded": {"x": "ndarray:uint8:3,224,224"}, "photos-encoded": {"x": "bytes"},
           "tokens": {"x": "ndarray:int32"}}

def write(args):
    k, part = args
    n = 0
    with MDSWriter(out=f"{OUT}/{k}", columns=COLUMNS[WORKLOAD], size_limit="64mb") as w:
        for item in part:
            if WORKLOAD == "tokens":
                for rec in token_records(item):
                    w.write({"x": rec}); n += 1
            elif WORKLOAD == "photos-decoded":
                w.write({"x": decoded(item)}); n += 1
            else:
                w.write({"x": encoded(item).tobytes()}); n += 1
    return n

if __name__ == "__main__":
    inputs = [tuple(x) if isinstance(x, list) else x for x in json.load(open(INPUTS))]
    cuts = np.linspace(0, len(inputs), WORKERS + 1).astype(int)
    parts = [(k, inputs[a:b]) for k, (a, b) in enumerate(zip(cuts, cuts[1:]))]
    t = time.perf_counter()
    if WORKERS == 1:
        n = write(parts[0])
    else:
        with multiprocessing.Pool(WORKERS) as pool:
            n = sum(pool.map(write, parts))
    merge_index(OUT, keep_local=True)
    print(json.dumps({"seconds": time.perf_counter() - t, "records": n}))
"""

# The machine's own ceiling for the same Python-side work: each input decoded (or read) and
# dropped, by 1 or 2 processes on contiguous slices, nothing written.
CEILING = _INPUTS + """
import multiprocessing

def work(part):
    n = 0
    for item in part:
        if WORKLOAD == "tokens":
            n += len(token_records(item))
        else:
            (decoded if WORKLOAD == "photos-decoded" else encoded)(item)
            n += 1
    return n

if __name__ == "__main__":
    inputs = [tuple(x) if isinstance(x, list) else x for x in json.load(open(INPUTS))]
    cuts = np.linspace(0, len(inputs), WORKERS + 1).astype(int)
    parts = [inputs[a:b] for a, b in zip(cuts, cuts[1:])]
    t = time.perf_counter()
    if WORKERS == 1:
        n = work(parts[0])
    else:
        with multiprocessing.get_context("fork").Pool(WORKERS) as pool:
            n = sum(pool.map(work, parts))
    print(json.dumps({"seconds": time.perf_counter() - t, "records": n}))
"""

CHILDREN = {"ceiling": CEILING, "ours": OURS, "ours-nosync": OURS, "litdata": LITDATA, "mds": MDS}


def _jpegs(data: str, folder: Path, count: int) -> list[str]:
    """The photographs as JPEG files (made once), cycled to `count` input paths."""
    from PIL import Image

    images = np.load(os.path.join(data, "vision_dense.npy"), mmap_mode="r")
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(len(images)):
        path = folder / f"{i:05d}.jpg"
        if not path.exists():
            Image.fromarray(np.asarray(images[i]).transpose(1, 2, 0)).save(path, quality=90)
        paths.append(str(path))
    return [paths[i % len(paths)] for i in range(count)]


def _token_spans(data: str, per_input: int = 1000) -> list[list[int]]:
    n = len(np.load(os.path.join(data, "offsets.npy"))) - 1
    return [[a, min(a + per_input, n)] for a in range(0, n, per_input)]


def _run_child(python: str, code: str, argv: list[str], scratch: Path) -> dict[str, Any]:
    """Run one import in a fresh interpreter: its JSON line, and the peak PSS of its tree."""
    script = scratch / "child.py"
    script.write_text(code)
    child = subprocess.Popen([python, str(script), *argv], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], tree_pss_bytes(child.pid))
            time.sleep(0.1)  # reading smaps of a tree costs CPU the import would use
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = child.communicate()
    stop.set()
    sampler.join()
    if child.returncode != 0:
        raise RuntimeError(f"{argv[:2]} failed ({child.returncode}):\n{err[-3000:]}")
    result = json.loads(out.strip().splitlines()[-1])
    return {**result, "peak_pss_bytes": peak[0]}


def import_rounds(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Every import configuration, `--rounds` times in turn."""
    inputs = {"photos-decoded": _jpegs(args.data, tmp / "jpegs", args.records),
              "tokens": _token_spans(args.data)}
    inputs["photos-encoded"] = inputs["photos-decoded"]
    tools = {"ceiling": sys.executable, "ours": sys.executable, "ours-nosync": sys.executable}
    if args.peers:
        tools |= {"litdata": args.peers, "mds": args.peers}
    results: dict[str, Any] = {}
    for r in range(args.rounds):
        for workload in args.workloads:
            listed = tmp / f"{workload}.json"
            listed.write_text(json.dumps(inputs[workload]))
            for tool, python in tools.items():
                for workers in (1, 2):
                    out = tmp / f"out-{tool}-{workload}-{workers}"
                    shutil.rmtree(out, ignore_errors=True)
                    argv = [workload, str(workers), str(out), str(listed), args.data]
                    got = _run_child(python, CHILDREN[tool],
                                     argv + (["nosync"] if tool == "ours-nosync" else []), tmp)
                    got["disk_bytes"] = (sum(os.path.getsize(p) for p in folder_files(str(out)))
                                         if out.exists() else 0)
                    shutil.rmtree(out, ignore_errors=True)
                    key = f"{workload}/{tool}/{workers}"
                    results.setdefault(key, []).append(got)
                    print(f"round {r}: {key}: {got['seconds']:.1f} s, {got['records']:,} records, "
                          f"peak PSS {got['peak_pss_bytes'] / 2**20:,.0f} MiB", flush=True)
    return results


# ---- reading: one store against a dataset of parts ------------------------------------------


def _write_read_pair(workload: str, args: argparse.Namespace, tmp: Path) -> tuple[str, str, str]:
    """The same records as one store, as one store of `--parts` data files (the control) and
    as a dataset of `--parts` parts."""
    import zrecord

    one, files, ds = (tmp / f"read-{workload}-store", tmp / f"read-{workload}-store-files",
                      tmp / f"read-{workload}-dataset")
    for p in (one, files, ds):
        shutil.rmtree(p, ignore_errors=True)
    if workload == "photos":
        images = np.load(os.path.join(args.data, "vision_dense.npy"), mmap_mode="r")
        n = min(args.read_records, len(images) * 8)
        chunks: list[Any] = [np.asarray(images[i % len(images)])[None] for i in range(n)]
        kind: dict[str, Any] = {"dtype": np.uint8, "item_shape": (3, 224, 224)}
        for path, shards in ((one, 1), (files, args.parts)):
            with zrecord.Dense.create(path, np.uint8, (3, 224, 224), codec="raw", data_shards=shards) as w:
                for c in chunks:
                    w.append(c)
        fn: Any = _ident_batch
    else:
        tokens = np.load(os.path.join(args.data, "tokens.npy"), mmap_mode="r")
        offsets = np.load(os.path.join(args.data, "offsets.npy"))
        chunks = [[np.array(tokens[offsets[i]:offsets[i + 1]])] for i in range(len(offsets) - 1)]
        kind = {"dtype": np.int32, "ndim": 1}
        for path, shards in ((one, 1), (files, args.parts)):
            with zrecord.Ragged.create(path, np.int32, 1, codec="raw", data_shards=shards) as w:
                for c in chunks:
                    w.append(c)
        fn = _ident_list
    zrecord.write_dataset(ds, fn, chunks, codec="raw", inputs_per_part=-(-len(chunks) // args.parts),
                          progress=False, **kind)
    return str(one), str(files), str(ds)


def _ident_batch(x: np.ndarray) -> np.ndarray:
    return x


def _ident_list(x: list[np.ndarray]) -> list[np.ndarray]:
    return x


def _index_cache_files(path: str) -> list[str]:
    """The index cache file that a reader of the store at `path` maps (none for a store read by
    part), found in this process's mappings: evicted with the store's own files, a cold
    store's index is cold too, as a dataset's parts' index.zri are."""
    import zrecord

    with zrecord.open_store(path) as reader:
        folder = reader.index_info()["folder"]
        if folder is None:
            return []
        with open("/proc/self/maps") as maps:
            mapped = {line.split(maxsplit=5)[-1].strip() for line in maps if folder in line}
    return sorted(mapped)


def _opens(open_fn: Any, path: str, n: int = 20) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        open_fn(path).close()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


COLD_START_BATCHES = 10


def _alternate(readers: dict[str, Any], batch: int, seconds: float, files: dict[str, list[str]] | None,
               rng: np.random.Generator) -> dict[str, float]:
    """Random gathers of `batch` records from each reader in turn, batch by batch, for about
    `seconds`; with `files`, each reader's files are evicted before each of its batches (cold).
    Records/s per reader, and cold (as `<name>_after`) over its batches after the first
    COLD_START_BATCHES: fresh readers of a dataset judge their parts' index blocks in their
    first cold batches, which the eviction before every batch sends to the disk again."""
    n = len(next(iter(readers.values())))
    times: dict[str, list[float]] = {name: [] for name in readers}
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or min(map(len, times.values())) < COLD_START_BATCHES + 3:
        idx = rng.integers(0, n, batch)
        for name, reader in readers.items():
            if files is not None:
                evict(files[name])
            t = time.perf_counter()
            reader[idx]
            times[name].append(time.perf_counter() - t)
    rates = {name: batch * len(ts) / sum(ts) for name, ts in times.items()}
    if files is not None:
        rates.update({f"{name}_after": batch * len(ts[COLD_START_BATCHES:]) / sum(ts[COLD_START_BATCHES:])
                      for name, ts in times.items()})
    return rates


def _loader_rates(readers: dict[str, Any], batch: int, steps: int, seconds: float) -> dict[str, float]:
    """Batches/s of loaderx's DataLoader (CYCLIC, defaults) over each reader, the loaders open
    together and timed in turns of `steps` batches, one after the other, for about `seconds`
    (at least three turns each): a loader timed once after the other met another moment of
    the machine's load (the rows of 2026-12-06 varied 0.87-0.95x round to round). Each turn
    first takes 8 batches untimed: what its loader prefetched while the other ran."""
    from loaderx import DataLoader, Sampler

    loaders = {name: DataLoader({"x": reader}, Sampler(len(reader), batch, "cyclic", seed=0))
               for name, reader in readers.items()}
    spent = dict.fromkeys(readers, 0.0)
    done = dict.fromkeys(readers, 0)
    try:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end or min(done.values()) < 3 * steps:
            for name, loader in loaders.items():
                for _ in range(8):
                    next(loader)
                t = time.perf_counter()
                for _ in range(steps):
                    next(loader)
                spent[name] += time.perf_counter() - t
                done[name] += steps
    finally:
        for loader in loaders.values():
            loader.close()
    return {name: done[name] / spent[name] for name in readers}


def read_rounds(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    import zrecord

    def open_all() -> dict[str, Any]:
        return {"store": zrecord.open_store(one), "store_files": zrecord.open_store(many),
                "dataset": zrecord.open_dataset(ds)}

    out: dict[str, Any] = {}
    for workload in ("photos", "tokens"):
        one, many, ds = _write_read_pair(workload, args, tmp)
        files = {"store": folder_files(one) + _index_cache_files(one),
                 "store_files": folder_files(many) + _index_cache_files(many),
                 "dataset": folder_files(ds)}
        rng = np.random.default_rng(0)
        rows: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            rows.setdefault("open_store_s", []).append(_opens(zrecord.open_store, one))
            rows.setdefault("open_dataset_s", []).append(_opens(zrecord.open_dataset, ds))
            # Each phase with readers of its own, closed after it: a page that a reader read
            # through its mappings stays mapped while the reader is open, and evict drops only
            # unmapped pages, so with the warm phase's readers still open the small token
            # records (read through the mappings) would read warm in the cold phase. A reader
            # that finds its batches cold reads them with pread, mapping nothing.
            for phase, drop in (("warm", None), ("cold", files)):
                readers = open_all()
                if phase == "warm":  # every record read once: the last cold phase evicted them
                    for reader in readers.values():
                        for i in range(0, len(reader), 1024):
                            reader[i:i + 1024]
                for name, rate in _alternate(readers, args.batch, args.seconds, drop, rng).items():
                    rows.setdefault(f"{phase}_{name}", []).append(rate)
                if phase == "warm":
                    pair = {name: readers[name] for name in ("store", "dataset")}
                    for name, rate in _loader_rates(pair, args.batch, 50, args.seconds).items():
                        rows.setdefault(f"loader_{name}", []).append(rate)
                    out[workload] = {"records": len(readers["store"]),
                                     "parts": len(readers["dataset"].parts), "rounds": rows}
                for r in readers.values():
                    r.close()
        print(f"read {workload}: " + ", ".join(f"{k} {np.median(v):,.4g}" for k, v in rows.items()),
              flush=True)
    return out


def tables(results: dict[str, Any]) -> str:
    lines = ["Import (medians): seconds, records/s, peak PSS; speed-up of 2 workers over 1",
             "| workload | tool | 1 worker s | 2 workers s | 2 / 1 | records/s (2) | peak PSS (2) |",
             "|---|---|---:|---:|---:|---:|---:|"]
    imports = results.get("import", {})
    for key in sorted({k.rsplit("/", 1)[0] for k in imports}):
        one, two = imports.get(f"{key}/1"), imports.get(f"{key}/2")
        if not one or not two:
            continue
        s1 = float(np.median([r["seconds"] for r in one]))
        s2 = float(np.median([r["seconds"] for r in two]))
        pss = float(np.median([r["peak_pss_bytes"] for r in two])) / 2**20
        workload, tool = key.split("/")
        lines.append(f"| {workload} | {tool} | {s1:.1f} | {s2:.1f} | {s1 / s2:.2f}x | "
                     f"{two[0]['records'] / s2:,.0f} | {pss:,.0f} MiB |")
    lines += ["", "Read: a dataset of parts against one store of the same records (medians; ratio "
              "dataset / store; the control, one store of as many data files as parts / store)",
              "| workload | records | parts | open store | open dataset | warm gathers | cold gathers | "
              f"cold, after {COLD_START_BATCHES} batches | DataLoader | control warm | control cold |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for workload, r in results.get("read", {}).items():
        m = {k: float(np.median(v)) for k, v in r["rounds"].items()}
        lines.append(f"| {workload} | {r['records']:,} | {r['parts']} | {m['open_store_s'] * 1e3:.2f} ms | "
                     f"{m['open_dataset_s'] * 1e3:.2f} ms | {m['warm_dataset'] / m['warm_store']:.3f} | "
                     f"{m['cold_dataset'] / m['cold_store']:.3f} | {_after(m)} | "
                     f"{m['loader_dataset'] / m['loader_store']:.3f} | {_ratio(m, 'warm')} | "
                     f"{_ratio(m, 'cold')} |")
    return "\n".join(lines)


def _after(medians: dict[str, float]) -> str:
    """The dataset's cold rate over the store's after the first batches ("-" for results
    written before it)."""
    dataset = medians.get("cold_dataset_after")
    return "-" if dataset is None else f"{dataset / medians['cold_store_after']:.3f}"


def _ratio(medians: dict[str, float], phase: str) -> str:
    """The control's rate over the store's in `phase` ("-" for results written before it)."""
    control = medians.get(f"{phase}_store_files")
    return "-" if control is None else f"{control / medians[f'{phase}_store']:.3f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=default_data())
    ap.add_argument("--tmp", default=tempfile.gettempdir())
    ap.add_argument("--peers", metavar="PYTHON", help="a venv's python with litdata and mosaicml-streaming")
    ap.add_argument("--records", type=int, default=20_000, help="photo inputs (cycled)")
    ap.add_argument("--read-records", type=int, default=8_000, help="photo records of the read part")
    ap.add_argument("--parts", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--workloads", default="photos-decoded,photos-encoded,tokens",
                    type=lambda s: s.split(","))
    ap.add_argument("--skip", default="", help="import or read")
    ap.add_argument("--out", default=str(OUT_JSON))
    args = ap.parse_args()
    if args.tmp:
        os.makedirs(args.tmp, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench-datasets-", dir=args.tmp))
    # A part skipped keeps what an earlier run wrote of it to --out (with its own run's facts).
    out = Path(args.out)
    results: dict[str, Any] = json.loads(out.read_text()) if out.is_file() and args.skip else {}
    run = {"date": time.strftime("%Y-%m-%d %H:%M"), "cpus": os.cpu_count(), "rounds": args.rounds}
    try:
        if "import" not in args.skip:
            results["import"] = import_rounds(args, tmp)
            results["import_run"] = {**run, "records": args.records}
        if "read" not in args.skip:
            results["read"] = read_rounds(args, tmp)
            results["read_run"] = {**run, "records": args.read_records}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(tables(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
