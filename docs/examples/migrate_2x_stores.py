"""Move stores written by the published loaderx 2.x (PyPI) into zrecord stores.

The two share the name ``loaderx`` and cannot be installed in one environment, and their
on-disk formats differ (a 2.x store holds meta.zr and data_N.zr files; a zrecord store holds
header.zrh, index.zri and data-NNN.zrd). So the move takes two steps through plain NumPy
files, each run by the Python of its own environment:

    OLD/bin/python migrate_2x_stores.py export SRC WORK   # SRC: a 2.x store or a folder of them
    NEW/bin/python migrate_2x_stores.py import WORK DST   # DST: written at once, must not exist

``export`` walks SRC, writes every 2.x store it finds as NumPy files under WORK (Dense:
records.npy; Ragged: payload.bin with shapes.npy) with its schema in meta.json, and copies the
other files (a converted dataset's provenance.json, ...). ``import`` writes each as a zrecord
store of the same kind, dtype, shape and codec under DST, and publishes the whole tree at once:
DST appears only when everything is written. A ``zstd_dict`` store gets a dictionary trained
afresh from its records (2.x has no way to read a store's dictionary back). Records are copied
in chunks of about 64 MiB, so memory stays bounded whatever the store's size; WORK needs about
the stores' uncompressed size on disk. Records keep their positions, so record i of a store
is record i after the move.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np

CHUNK_BYTES = 64 << 20


def _is_2x_store(folder: Path) -> bool:
    return (folder / "meta.zr").is_file()


def export(src: Path, work: Path) -> None:
    """Run with loaderx 2.x installed: every 2.x store below `src` into NumPy files."""
    from loaderx.zrecord import Dense, Ragged

    work.mkdir(parents=True)
    for folder, dirs, files in os.walk(src):
        here = Path(folder)
        rel = here.relative_to(src)
        if not _is_2x_store(here):
            for name in files:
                (work / "files" / rel).mkdir(parents=True, exist_ok=True)
                shutil.copy2(here / name, work / "files" / rel / name)
            continue
        dirs.clear()  # a store's own files are not walked
        out = work / "stores" / rel
        out.mkdir(parents=True)
        try:
            store, kind = Dense.open(here), "dense"
        except Exception:  # noqa: BLE001 - 2.x says "wrong kind" with a generic error
            store, kind = Ragged.open(here), "ragged"
        with store:
            meta = {"kind": kind, "dtype": store.dtype.str, "codec": store.codec,
                    "records": len(store)}
            if kind == "dense":
                meta["item_shape"] = list(store.item_shape)
                _export_dense(store, out)
            else:
                meta["ndim"] = store.ndim
                _export_ragged(store, out)
        (out / "meta.json").write_text(json.dumps(meta))
        print(f"exported {rel or '.'}: {kind} {meta['dtype']} x {meta['records']}")


def _export_dense(store, out: Path) -> None:
    n = len(store)
    records = np.lib.format.open_memmap(out / "records.npy", mode="w+", dtype=store.dtype,
                                        shape=(n, *store.item_shape))
    per_chunk = max(1, CHUNK_BYTES // max(1, records[:1].nbytes))
    for start in range(0, n, per_chunk):
        records[start:start + per_chunk] = store[start:min(n, start + per_chunk)]
    records.flush()


def _export_ragged(store, out: Path) -> None:
    n = len(store)
    shapes = np.zeros((n, store.ndim), dtype=np.int64)
    with open(out / "payload.bin", "wb") as payload:
        start, per_chunk = 0, 16
        while start < n:
            stop = min(n, start + per_chunk)
            chunk = store[start:stop]
            for i, record in enumerate(chunk, start):
                shapes[i] = record.shape
                payload.write(np.ascontiguousarray(record).tobytes())
            mean = max(1, sum(r.nbytes for r in chunk) // len(chunk))
            per_chunk = max(1, CHUNK_BYTES // mean)  # about CHUNK_BYTES per read
            start = stop
    np.save(out / "shapes.npy", shapes)


def import_(work: Path, dst: Path) -> None:
    """Run with this loaderx (zrecord) installed: the exported files into zrecord stores."""
    from zrecord import Dense, Ragged, staged_directory, train_dict

    with staged_directory(dst) as stage:
        for meta_file in sorted((work / "stores").rglob("meta.json")):
            folder = meta_file.parent
            rel = folder.relative_to(work / "stores")
            meta = json.loads(meta_file.read_text())
            dtype = np.dtype(meta["dtype"])
            target = Path(stage) / rel
            if meta["kind"] == "dense":
                records = np.load(folder / "records.npy", mmap_mode="r")
                d = train_dict(records) if meta["codec"] == "zstd_dict" else None
                with Dense.create(target, dtype, tuple(meta["item_shape"]), codec=meta["codec"],
                                  dict_bytes=d) as w:
                    w.append(records)
            else:
                shapes = np.load(folder / "shapes.npy")
                payload = np.memmap(folder / "payload.bin", dtype=dtype, mode="r") \
                    if (folder / "payload.bin").stat().st_size else np.zeros(0, dtype)
                sizes = np.prod(shapes, axis=1, dtype=np.int64)
                ends = np.cumsum(sizes)

                def records(shapes=shapes, payload=payload, ends=ends, sizes=sizes):
                    for shape, end, size in zip(shapes, ends, sizes):
                        yield payload[end - size:end].reshape(tuple(shape))

                d = train_dict(records()) if meta["codec"] == "zstd_dict" else None
                with Ragged.create(target, dtype, meta["ndim"], codec=meta["codec"],
                                   dict_bytes=d) as w:
                    w.append(records())
            print(f"imported {rel}: {meta['kind']} {dtype} x {meta['records']}")
        files = work / "files"
        if files.is_dir():
            for path in files.rglob("*"):
                if path.is_file():
                    target = Path(stage) / path.relative_to(files)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, target)
    print(f"published {dst}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    e = sub.add_parser("export", help="with loaderx 2.x installed: 2.x stores -> NumPy files")
    e.add_argument("src", type=Path)
    e.add_argument("work", type=Path, help="a new folder for the NumPy files")
    i = sub.add_parser("import", help="with this loaderx installed: NumPy files -> zrecord")
    i.add_argument("work", type=Path)
    i.add_argument("dst", type=Path, help="where the zrecord stores are published")
    args = parser.parse_args()
    if args.step == "export":
        export(args.src, args.work)
    else:
        import_(args.work, args.dst)
    return 0


if __name__ == "__main__":
    sys.exit(main())
