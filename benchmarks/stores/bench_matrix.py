"""The store matrix: zrecord against other record and array stores, on real data, in one run.

Workloads (built by benchmarks/prepare_data.py; see benchmarks/README.md), those of [F2]:
  vision_dense   vision_dense.npy                (N, 3, 224, 224) uint8, 147 KiB per record
  vision_ragged  vision_ragged_payload/index     native-resolution CHW uint8, every axis varies
  token_blocks   token_blocks.npy                (M, 512) int32, 2 KiB per record
  tokens         tokens.npy + offsets.npy        variable-length int32 GPT-2 token records

Backends (each one writes the complete source in one go into its own folder, twice: into the
page cache, and durably, the figure that counts ([P1]): zrecord with its default close(), which
flushes, every other store followed by flushing every file and folder it wrote
(common.timing.sync_tree), beside the device's sequential write ceiling measured in the same
folder just before each workload; each is then checked for exact dtype, shape, order and values
on a full sweep and on independent random batches, and only then timed on fresh uniform IID
batches; the methodology of benchmarks/common/):
  zrecord-raw / -zstd / -zstd_dict   our Dense / Ragged stores through the public API
  npy-mmap                           np.save, then fancy indexing on the read-only memory map
                                     (Ragged: one flat payload plus offsets and shapes)
  lmdb                               one key per record (8-byte big-endian index), one
                                     write transaction, sync off (durable: flushed after close,
                                     as every other store); Ragged values carry their shape
  arrow-ipc-raw / -zstd              Arrow IPC file, 256-record batches: Dense as a
                                     fixed_size_list column, Ragged as a large_list column plus
                                     one int64 column per axis; gathers read the touched batches
                                     of the memory-mapped file (raw: all of them, zero-copy, at
                                     open), then Dense rows are `take`n and Ragged records are
                                     copied out of each batch's values
  parquet-zstd                       row groups of 256; payload as large_binary plus shape
                                     columns; gathers read the touched row groups, as above
  hdf5-raw / -gzip                   Dense: an (N, ...) dataset chunked one record per chunk;
                                     Ragged: one flat payload dataset (contiguous when raw,
                                     chunks of about one mean record when gzip) with offsets
                                     and shapes; records are read with read_direct / slicing
  arrayrecord-raw / -zstd            ArrayRecord with group_size 1 (one record per chunk),
                                     read with readahead off; Ragged values carry their shape
A backend whose package is missing is listed in the output with the import error, never
silently dropped. A backend whose first timed batch takes longer than --slow-batch-s is timed
on --slow-batches batches only and marked so (group-level read amplification can make one
gather cost seconds).

Usage: python benchmarks/stores/bench_matrix.py [--data DIR] [--workload vision_dense,...]
       [--backends zrecord-raw,lmdb,...] [--seconds 2] [--records N | --records
       vision_ragged=400,tokens=50000] [--tmp DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import shutil
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, which holds `common`
from common.data import WORKLOADS, Workload, default_data, verify
from common.device import device_ceilings, device_write_ceiling, work_folder
from common.reports import fs_label, header
from common.store import Dense, Ragged, create_kwargs
from common.tables import matrix_table
from common.timing import disk_bytes, summarize, sync_tree, timed_batches, timed_write

GROUP = 256  # records per Arrow IPC batch and per Parquet row group


def record_bytes(w: Workload, i: int) -> bytes:
    return np.ascontiguousarray(w.record(i)).tobytes()


def shape_prefix(w: Workload, i: int) -> bytes:
    """Ragged values in key/value stores start with their shape, ndim little-endian int64s."""
    return struct.pack(f"<{w.ndim}q", *w.shape(i)) if w.kind == "ragged" else b""


def decode_values(w: Workload, values: list[Any]) -> Any:
    """Dense: one stacked array; Ragged: a list of arrays (shape prefix, then payload)."""
    if w.kind == "dense":
        out = np.empty((len(values), *w.item_shape), w.dtype)
        flat = out.reshape(len(values), -1)
        for k, v in enumerate(values):
            flat[k] = np.frombuffer(v, w.dtype)
        return out
    head = 8 * w.ndim
    recs = []
    for v in values:
        shape = struct.unpack_from(f"<{w.ndim}q", v)
        recs.append(np.frombuffer(v, w.dtype, offset=head).reshape(shape).copy())
    return recs


# -- backends: write(w, folder) stores the source; open(w, folder) -> (gather, close) ---------

Gather = Callable[[np.ndarray], Any]


class Backend:
    """One store configuration. `module` is what must import for it to run."""

    module = "numpy"

    def __init__(self, name: str, codec: str = "raw") -> None:
        self.name, self.codec = name, codec

    def version(self) -> str:
        return importlib.metadata.version(self.module)

    def write(self, w: Workload, folder: str) -> None:
        raise NotImplementedError

    def durable_write(self, w: Workload, folder: str) -> None:
        """`write`, then flush everything it wrote to stable storage."""
        self.write(w, folder)
        sync_tree(folder)

    def open(self, w: Workload, folder: str) -> tuple[Gather, Callable[[], None]]:
        raise NotImplementedError


class ZrecordBackend(Backend):
    module = "zrecord"
    extra: dict[str, object] = {}  # noqa: RUF012 - replaced per workload by prepare()

    def write(self, w: Workload, folder: str, sync: bool = False) -> None:
        path = os.path.join(folder, "store")
        if w.dense is not None:
            with Dense.create(path, w.dtype, w.item_shape, codec=self.codec, sync=sync,
                              **self.extra) as out:
                out.append(w.dense)
        else:
            with Ragged.create(path, w.dtype, w.ndim, codec=self.codec, sync=sync,
                               **self.extra) as out:
                out.append(iter(w.ragged))  # type: ignore[arg-type]

    def durable_write(self, w: Workload, folder: str) -> None:
        """close() flushes the store, its folder and the folder holding it."""
        self.write(w, folder, sync=True)

    def prepare(self, w: Workload) -> None:
        """Trains the dictionary (zstd_dict) before the write timer starts."""
        sample = w.dense if w.dense is not None else w.ragged.dict_sample()  # type: ignore[union-attr]
        self.extra = create_kwargs(self.codec, sample)

    def open(self, w: Workload, folder: str) -> tuple[Gather, Callable[[], None]]:
        store = (Dense if w.kind == "dense" else Ragged).open(os.path.join(folder, "store"))
        return (lambda idx: store[idx]), store.close


class NpyBackend(Backend):
    def write(self, w: Workload, folder: str) -> None:
        if w.dense is not None:
            np.save(os.path.join(folder, "records.npy"), w.dense)
            return
        src = w.ragged
        assert src is not None
        np.save(os.path.join(folder, "payload.npy"), src.payload)
        np.save(os.path.join(folder, "offsets.npy"), np.asarray(src.offsets, np.int64))
        np.save(os.path.join(folder, "shapes.npy"), np.asarray(src.shapes, np.int64))

    def open(self, w: Workload, folder: str) -> tuple[Gather, Callable[[], None]]:
        if w.dense is not None:
            arr = np.load(os.path.join(folder, "records.npy"), mmap_mode="r")
            return (lambda idx: arr[idx]), (lambda: None)
        payload = np.load(os.path.join(folder, "payload.npy"), mmap_mode="r")
        offsets = np.load(os.path.join(folder, "offsets.npy"))
        shapes = np.load(os.path.join(folder, "shapes.npy"))

        def gather(idx: np.ndarray) -> list[np.ndarray]:
            return [np.array(payload[offsets[i]:offsets[i + 1]]).reshape(shapes[i]) for i in idx]

        return gather, (lambda: None)


class LmdbBackend(Backend):
    module = "lmdb"

    def version(self) -> str:
        import lmdb

        return f"{lmdb.__version__} (LMDB {'.'.join(map(str, lmdb.version()))})"

    def write(self, w: Workload, folder: str) -> None:
        import lmdb

        size = int(w.nbytes * 1.5) + w.n * 64 + (64 << 20)
        env = lmdb.open(folder, map_size=size, sync=False, metasync=False, lock=False,
                        readahead=False, max_dbs=0)
        with env.begin(write=True) as txn:
            for i in range(w.n):
                txn.put(struct.pack(">Q", i), shape_prefix(w, i) + record_bytes(w, i),
                        append=True)
        env.close()

    def open(self, w: Workload, folder: str) -> tuple[Gather, Callable[[], None]]:
        import lmdb

        env = lmdb.open(folder, readonly=True, lock=False, readahead=False)
        keys = [struct.pack(">Q", i) for i in range(w.n)]

        def gather(idx: np.ndarray) -> Any:
            with env.begin(buffers=True) as txn:
                return decode_values(w, [txn.get(keys[i]) for i in idx])

        return gather, env.close


def arrow_table(w: Workload, start: int, stop: int, binary: bool) -> Any:
    """Records start..stop as an Arrow table: column `values`, plus s0.. for Ragged shapes."""
    import pyarrow as pa

    if w.dense is not None:
        chunk = np.ascontiguousarray(w.dense[start:stop])
        per = int(np.prod(w.item_shape))
        flat = chunk.reshape(-1)
        if binary:
            offsets = np.arange(0, (stop - start + 1) * per * w.dtype.itemsize,
                                per * w.dtype.itemsize, dtype=np.int64)
            col = pa.LargeBinaryArray.from_buffers(pa.large_binary(), stop - start,
                                                   [None, pa.py_buffer(offsets),
                                                    pa.py_buffer(flat.view(np.uint8))])
        else:
            col = pa.FixedSizeListArray.from_arrays(pa.array(flat), per)
        return pa.table({"values": col})
    src = w.ragged
    assert src is not None
    lo, hi = int(src.offsets[start]), int(src.offsets[stop])
    flat = np.ascontiguousarray(src.payload[lo:hi])
    offsets = np.asarray(src.offsets[start:stop + 1], np.int64) - lo
    if binary:
        col = pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), stop - start,
            [None, pa.py_buffer(offsets * w.dtype.itemsize), pa.py_buffer(flat.view(np.uint8))])
    else:
        col = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(flat))
    cols = {"values": col}
    for axis in range(w.ndim):
        cols[f"s{axis}"] = pa.array(np.asarray(src.shapes[start:stop, axis], np.int64))
    return pa.table(cols)


def arrow_records(w: Workload, table: Any, binary: bool) -> Any:
    """Dense: the inverse of arrow_table for a table of gathered rows, in row order."""
    col = table.column("values").combine_chunks()
    n = len(col)
    per = int(np.prod(w.item_shape))
    if binary:
        _, offs, data = col.buffers()
        start = int(np.frombuffer(offs, np.int64, 1, col.offset * 8)[0]) // w.dtype.itemsize
        flat = np.frombuffer(data, w.dtype)
    else:
        start, flat = 0, col.flatten().to_numpy()
    # The gathered rows are fresh memory, so the batch is returned as a view of it.
    return flat[start:start + n * per].reshape(n, *w.item_shape)


def dense_take(w: Workload, idx: np.ndarray, read_group: Callable[[int], Any],
               binary: bool) -> np.ndarray:
    """Read each touched group of GROUP records once, then `take` the rows in request order."""
    import pyarrow as pa

    groups, inverse = np.unique(idx // GROUP, return_inverse=True)
    tables = [read_group(int(g)) for g in groups]
    starts = np.cumsum([0] + [t.num_rows for t in tables[:-1]])
    positions = starts[inverse] + idx % GROUP
    return arrow_records(w, pa.concat_tables(tables).take(pa.array(positions)), binary)  # type: ignore[no-any-return]


def ragged_slices(w: Workload, idx: np.ndarray, read_group: Callable[[int], Any],
                  binary: bool) -> list[np.ndarray]:
    """Read each touched group once, then copy each record out of its group's value buffer.

    Not `take`: Arrow's take on a list column builds one index per child element (one per
    byte of an image), which made a 256-image batch cost 9 s in a trial run, so this is the
    way a user would read records out of list or binary columns.
    """
    groups = {}
    out = []
    for i in idx:
        g, row = divmod(int(i), GROUP)
        if g not in groups:
            table = read_group(g)
            col = table.column("values").chunk(0)
            if binary:
                _, offs, data = col.buffers()
                offsets = np.frombuffer(offs, np.int64, len(col) + 1, col.offset * 8)
                flat = np.frombuffer(data, w.dtype)
                offsets = offsets // w.dtype.itemsize
            else:
                offsets, flat = col.offsets.to_numpy(), col.values.to_numpy()
            shapes = np.stack([table.column(f"s{a}").chunk(0).to_numpy()
                               for a in range(w.ndim)], axis=1)
            groups[g] = (flat, offsets, shapes)
        flat, offsets, shapes = groups[g]
        out.append(np.array(flat[offsets[row]:offsets[row + 1]]).reshape(shapes[row]))
    return out


class ArrowIpcBackend(Backend):
    module = "pyarrow"

    def write(self, w: Workload, folder: str) -> None:
        import pyarrow as pa

        options = pa.ipc.IpcWriteOptions(compression=None if self.codec == "raw" else "zstd")
        path = os.path.join(folder, "records.arrow")
        with pa.OSFile(path, "wb") as sink:
            writer = None
            for start in range(0, w.n, GROUP):
                table = arrow_table(w, start, min(start + GROUP, w.n), binary=False)
                if writer is None:
                    writer = pa.ipc.new_file(sink, table.schema, options=options)
                writer.write_table(table, max_chunksize=GROUP)
            assert writer is not None
            writer.close()

    def open(self, w: Workload, folder: str) -> tuple[Gather, Callable[[], None]]:
        import pyarrow as pa

        mm = pa.memory_map(os.path.join(folder, "records.arrow"))
        reader = pa.ipc.open_file(mm)
        if self.codec == "raw":
            # Uncompressed batches are zero-copy views of the map, so they are looked up once
            # here (no bytes are read) and the whole file is one table to `take` from.
            groups = [pa.Table.from_batches([reader.get_batch(g)])
                      for g in range(reader.num_record_batches)]
            whole = pa.concat_tables(groups)

            def read_group(g: int) -> Any:
                return groups[g]
        else:
            def read_group(g: int) -> Any:
                return pa.Table.from_batches([reader.get_batch(g)])

        def gather(idx: np.ndarray) -> Any:
            if w.dense is None:
                return ragged_slices(w, idx, read_group, False)
            if self.codec == "raw":
                return arrow_records(w, whole.take(pa.array(idx)), False)
            return dense_take(w, idx, read_group, False)

        return gather, mm.close


class ParquetBackend(Backend):
    module = "pyarrow"

    def write(self, w: Workload, folder: str) -> None:
        import pyarrow.parquet as pq

        path = os.path.join(folder, "records.parquet")
        writer = None
        for start in range(0, w.n, GROUP):
            table = arrow_table(w, start, min(start + GROUP, w.n), binary=True)
            if writer is None:
                writer = pq.ParquetWriter(path, table.schema, compression="zstd",
                                          use_dictionary=False)
            writer.write_table(table, row_group_size=GROUP)
        assert writer is not None
        writer.close()

    def open(self, w: Workload, folder: str) -> tuple[Gather, Callable[[], None]]:
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(os.path.join(folder, "records.parquet"), memory_map=True)

        def gather(idx: np.ndarray) -> Any:
            fn = dense_take if w.dense is not None else ragged_slices
            return fn(w, idx, pf.read_row_group, True)

        return gather, pf.close


class Hdf5Backend(Backend):
    module = "h5py"

    def version(self) -> str:
        import h5py

        return f"{h5py.__version__} (HDF5 {h5py.version.hdf5_version})"

    def write(self, w: Workload, folder: str) -> None:
        import h5py

        gzip = {"compression": "gzip"} if self.codec == "gzip" else {}
        with h5py.File(os.path.join(folder, "records.h5"), "w") as f:
            if w.dense is not None:
                f.create_dataset("records", data=w.dense, chunks=(1, *w.item_shape), **gzip)
                return
            src = w.ragged
            assert src is not None
            if gzip:
                chunk = max(1, min(len(src.payload), int(src.offsets[-1]) // w.n))
                f.create_dataset("payload", data=src.payload, chunks=(chunk,), **gzip)
            else:
                f.create_dataset("payload", data=src.payload)
            f.create_dataset("offsets", data=np.asarray(src.offsets, np.int64))
            f.create_dataset("shapes", data=np.asarray(src.shapes, np.int64))

    def open(self, w: Workload, folder: str) -> tuple[Gather, Callable[[], None]]:
        import h5py

        f = h5py.File(os.path.join(folder, "records.h5"), "r")
        if w.dense is not None:
            ds = f["records"]

            def gather_dense(idx: np.ndarray) -> np.ndarray:
                # Plain per-record indexing: 7x faster than read_direct per record and than
                # one sorted fancy selection, in a trial on token_blocks.
                out = np.empty((len(idx), *w.item_shape), w.dtype)
                for k, i in enumerate(idx):
                    out[k] = ds[int(i)]
                return out

            return gather_dense, f.close
        payload, offsets, shapes = f["payload"], f["offsets"][:], f["shapes"][:]

        def gather(idx: np.ndarray) -> list[np.ndarray]:
            return [payload[offsets[i]:offsets[i + 1]].reshape(shapes[i]) for i in idx]

        return gather, f.close


class ArrayRecordBackend(Backend):
    module = "array_record"

    def write(self, w: Workload, folder: str) -> None:
        from array_record.python.array_record_module import ArrayRecordWriter

        codec = "uncompressed" if self.codec == "raw" else "zstd:3"
        writer = ArrayRecordWriter(os.path.join(folder, "records.array_record"),
                                   f"group_size:1,{codec}")
        for i in range(w.n):
            writer.write(shape_prefix(w, i) + record_bytes(w, i))
        writer.close()

    def open(self, w: Workload, folder: str) -> tuple[Gather, Callable[[], None]]:
        from array_record.python.array_record_module import ArrayRecordReader

        reader = ArrayRecordReader(os.path.join(folder, "records.array_record"),
                                   "readahead_buffer_size:0")

        def gather(idx: np.ndarray) -> Any:
            return decode_values(w, reader.read([int(i) for i in idx]))

        return gather, reader.close


BACKENDS: dict[str, Backend] = {b.name: b for b in [
    ZrecordBackend("zrecord-raw", "raw"), ZrecordBackend("zrecord-zstd", "zstd"),
    ZrecordBackend("zrecord-zstd_dict", "zstd_dict"), NpyBackend("npy-mmap"),
    LmdbBackend("lmdb"), ArrowIpcBackend("arrow-ipc-raw", "raw"),
    ArrowIpcBackend("arrow-ipc-zstd", "zstd"), ParquetBackend("parquet-zstd", "zstd"),
    Hdf5Backend("hdf5-raw", "raw"), Hdf5Backend("hdf5-gzip", "gzip"),
    ArrayRecordBackend("arrayrecord-raw", "raw"), ArrayRecordBackend("arrayrecord-zstd", "zstd"),
]}
ALL_BACKENDS = ",".join(BACKENDS)


def availability(names: list[str]) -> dict[str, str | None]:
    """None when the backend's package imports, else the reason it cannot run here."""
    out: dict[str, str | None] = {}
    for name in names:
        backend = BACKENDS[name]
        try:
            importlib.import_module(backend.module)
            out[name] = None
        except ImportError as e:
            out[name] = f"not installed: {type(e).__name__}: {e}"
    return out


def measure(backend: Backend, w: Workload, args: argparse.Namespace, tmp: str,
            ceiling: float | None) -> dict[str, Any]:
    folder = os.path.join(tmp, f"{w.name}-{backend.name}")
    try:
        if isinstance(backend, ZrecordBackend):
            backend.prepare(w)  # dictionary training stays outside the write timing

        def fresh(write: Callable[[Workload, str], None]) -> Callable[[str], None]:
            def run(path: str) -> None:
                os.makedirs(path)
                write(w, path)
            return run

        # Into the page cache, then durably; the durable store stays for the gathers.
        write_mib_s = timed_write(folder, fresh(backend.write), w.nbytes)
        durable_mib_s = timed_write(folder, fresh(backend.durable_write), w.nbytes)
        gather, close = backend.open(w, folder)
        try:
            verify(backend.name, w, gather, args.batch)
            rng = np.random.default_rng(7)
            t = time.perf_counter()
            gather(rng.integers(0, w.n, args.batch))
            probe_s = time.perf_counter() - t
            note = ""
            if probe_s > args.slow_batch_s:
                times = []
                for _ in range(args.slow_batches):
                    idx = rng.integers(0, w.n, args.batch)
                    t = time.perf_counter()
                    gather(idx)
                    times.append(time.perf_counter() - t)
                note = (f"slow ({probe_s:.2f} s for a probe batch): timed on "
                        f"{args.slow_batches} batches only")
            else:
                times = timed_batches(gather, w.n, args.batch, args.seconds, 1)
        finally:
            close()
        row = summarize(backend.name, times, args.batch, w.nbytes / w.n)
        row["write_mib_s"] = write_mib_s
        row["durable_mib_s"] = durable_mib_s
        if ceiling is not None:
            row["device_write_mib_s"] = ceiling
        row["disk_mib"] = disk_bytes(folder) / 2**20
        if note:
            row["note"] = note
        return row
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def parse_records(spec: str | None, names: list[str]) -> dict[str, int | None]:
    """`N` caps every workload; `name=N,...` caps the named ones; empty means all records."""
    caps: dict[str, int | None] = dict.fromkeys(names)
    for part in (spec or "").split(","):
        if not part:
            continue
        if "=" in part:
            key, value = part.split("=", 1)
            caps[key] = int(value)
        else:
            caps = dict.fromkeys(names, int(part))
    return caps


def measure_workload(w: Workload, backends: list[str], missing: dict[str, str | None],
                     args: argparse.Namespace, tmp: str) -> dict[str, Any]:
    """Every backend on one workload, beside the device's write ceiling measured just before
    them: the workload's entry of the results (without its fs_label)."""
    w.warm()
    ceiling = device_write_ceiling(tmp)
    rows = []
    for b in backends:
        if missing[b] is not None:
            rows.append({"backend": b, "status": missing[b]})
            continue
        print(f"{w.name}: {b} ...", file=sys.stderr, flush=True)
        rows.append(measure(BACKENDS[b], w, args, tmp, ceiling))
    return {"name": w.name, "kind": w.kind, "records": w.n, "dtype": str(w.dtype),
            "describe": w.describe(), "logical_mib": w.nbytes / 2**20,
            "batch": args.batch, "device_write_mib_s": ceiling, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=default_data())
    ap.add_argument("--workload", default=",".join(WORKLOADS))
    ap.add_argument("--backends", default=ALL_BACKENDS)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--records", default=None,
                    help="cap records per workload: N for all, or name=N,... (default: all)")
    ap.add_argument("--slow-batch-s", type=float, default=1.0)
    ap.add_argument("--slow-batches", type=int, default=3)
    ap.add_argument("--tmp", default=None, type=work_folder,
                    help="folder for the stores, made if missing (default: a temp dir)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--peer", default=None, help="accepted for the nox loop; not used here")
    args = ap.parse_args(argv)
    names = [n for n in args.workload.split(",") if n]
    backends = [b for b in args.backends.split(",") if b]
    unknown = [n for n in names if n not in WORKLOADS] + [b for b in backends if b not in BACKENDS]
    if unknown:
        ap.error(f"unknown workload or backend: {unknown}")
    caps = parse_records(args.records, names)
    missing = availability(backends)
    results = header(argparse.Namespace(batch=args.batch, seconds=args.seconds, rounds=1))
    results["versions"] = {b: (BACKENDS[b].version() if missing[b] is None else missing[b])
                           for b in backends}
    results["records_cap"] = caps
    results["device"] = device_ceilings(args.tmp or tempfile.gettempdir())
    tables = []
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        for name in names:
            try:
                w = Workload(name, args.data, caps.get(name))
            except FileNotFoundError as e:
                print(f"skipping {name}: {e}", file=sys.stderr)
                continue
            entry = measure_workload(w, backends, missing, args, tmp)
            entry["fs_label"] = fs_label(results)
            results["workloads"][name] = entry
            tables.append(matrix_table(entry))
    print(f"{results['date']}  {results['machine']}  python {results['python']}  "
          f"numpy {results['numpy']}  {results['store']} {results['store_version']}")
    print(fs_label(results))
    print("versions: " + "; ".join(f"{k} {v}" for k, v in results["versions"].items()) + "\n")
    print("\n\n".join(tables))
    if args.json:
        import json

        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
