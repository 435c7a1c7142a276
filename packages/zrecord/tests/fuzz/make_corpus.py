"""Write the fuzzer's seed corpus: small, valid zrecord stores of every kind and codec.

Each seed is a published store written by zrecord itself, kept small (a few KiB) so that a
mutated copy is cheap to write and to open. Together they cover Dense and Ragged, the codecs
raw, zstd and zstd_dict, one and several shards (with an empty shard), rank 0 and rank 2,
zero-size records, an empty store, and records large enough for the reader's pread and
multi-threaded paths.

    python make_corpus.py OUT_DIR

OUT_DIR must not exist yet, or be empty; one subdirectory per seed store is written in it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

import numpy as np

from zrecord import Dense, Ragged, train_dict


def _ragged_records(rng: np.random.Generator, dtype: str, ndim: int, n: int) -> list[np.ndarray]:
    records = []
    for i in range(n):
        # Every fifth record is empty along one axis; the others are short and compressible.
        shape = tuple(int(rng.integers(1, 6)) for _ in range(ndim))
        if i % 5 == 2:
            shape = (0,) + shape[1:]
        records.append((np.arange(int(np.prod(shape)), dtype=np.int64) % 7).astype(dtype)
                       .reshape(shape))
    return records


def _dictionary(samples: list[np.ndarray]) -> bytes:
    # Repeated, slightly varied samples: zstd's trainer needs many of them.
    pool = [np.concatenate([s.reshape(-1).view(np.uint8), np.frombuffer(bytes([k % 251]) * 16,
                                                                         dtype=np.uint8)])
            for k in range(40) for s in samples]
    return train_dict(pool, dict_size=1024)


def write_corpus(out: str) -> list[str]:
    """Write every seed store under `out` and return their paths."""
    rng = np.random.default_rng(20261201)
    os.makedirs(out, exist_ok=True)
    paths: list[str] = []

    def path(name: str) -> str:
        p = os.path.join(out, name)
        paths.append(p)
        return p

    # The seeds draw from one generator in this order, so the corpus stays the same.
    _dense_seeds(path)
    _large_record_seeds(path, rng)
    _ragged_seeds(path, rng)
    _parametric_dtype_seeds(path)
    return paths


def _dense_seeds(path: Callable[[str], str]) -> None:
    """Small Dense stores: every codec, rank 0, an empty shard, zero-size records and no
    records. `path(name)` is where the seed `name` goes."""
    dense = (np.arange(12 * 6, dtype=np.int64) % 11).astype(np.int16).reshape(12, 2, 3)
    dense_dict = _dictionary([dense[i] for i in range(len(dense))])
    for codec in ("raw", "zstd", "zstd_dict"):
        extra = {"dict_bytes": dense_dict} if codec == "zstd_dict" else {}
        with Dense.create(path(f"dense-{codec}"), np.int16, (2, 3), codec=codec, data_shards=2,
                          **extra) as w:
            w.append(dense)
    # Rank 0, a single shard, float64.
    with Dense.create(path("dense-scalar-raw"), np.float64, (), codec="raw", data_shards=1) as w:
        w.append(np.linspace(-1.0, 1.0, 5))
    # More shards than records: one shard file is empty.
    with Dense.create(path("dense-emptyshard-zstd"), np.uint8, (7,), codec="zstd",
                      data_shards=3) as w:
        w.append(np.full((2, 7), 9, np.uint8))
    # Zero-size records and an empty store.
    with Dense.create(path("dense-zerosize-raw"), np.int32, (0, 4), codec="raw",
                      data_shards=2) as w:
        w.append(np.zeros((3, 0, 4), np.int32))
    with Dense.create(path("dense-empty-zstd"), np.float32, (3,), codec="zstd", data_shards=2):
        pass


def _large_record_seeds(path: Callable[[str], str], rng: np.random.Generator) -> None:
    """Records of at least 32 KiB are read with pread instead of the mapping, and batches of
    at least 512 KiB of compressed output are decoded by several threads: one seed each."""
    with Dense.create(path("dense-pread-raw"), np.uint8, (40000,), codec="raw",
                      data_shards=2) as w:
        w.append(rng.integers(0, 256, size=(3, 40000), dtype=np.uint8))
    with Dense.create(path("dense-parallel-zstd"), np.uint8, (256 << 10,), codec="zstd",
                      data_shards=2) as w:
        w.append(np.zeros((4, 256 << 10), np.uint8))
    with Ragged.create(path("ragged-pread-zstd"), np.int8, 1, codec="zstd", data_shards=1) as w:
        w.append([rng.integers(-128, 128, size=n, dtype=np.int8) for n in (0, 50000, 100, 40000)])


def _ragged_seeds(path: Callable[[str], str], rng: np.random.Generator) -> None:
    """Ragged stores of rank 1 (every codec), rank 2 and rank 3 (no records)."""
    ragged1 = _ragged_records(rng, "int32", 1, 10)
    ragged2 = _ragged_records(rng, "uint16", 2, 8)
    ragged_dict = _dictionary(ragged1)
    for codec in ("raw", "zstd", "zstd_dict"):
        extra = {"dict_bytes": ragged_dict} if codec == "zstd_dict" else {}
        with Ragged.create(path(f"ragged1-{codec}"), np.int32, 1, codec=codec, data_shards=2,
                           **extra) as w:
            w.append(ragged1)
    for codec in ("raw", "zstd"):
        with Ragged.create(path(f"ragged2-{codec}"), np.uint16, 2, codec=codec,
                           data_shards=3) as w:
            w.append(ragged2)
    with Ragged.create(path("ragged-empty-raw"), np.int8, 3, codec="raw", data_shards=1):
        pass


def _parametric_dtype_seeds(path: Callable[[str], str]) -> None:
    """The parametric dtypes of format 1.1: a unit and a count, or a length, in the header."""
    stamps = (np.arange(12, dtype=np.int64) * 1_000_000_007).view("M8[ns]").reshape(4, 3)
    stamps[0, 0] = np.datetime64("NaT")
    with Dense.create(path("dense-datetime-raw"), stamps.dtype, (3,), codec="raw",
                      data_shards=2) as w:
        w.append(stamps)
    texts = np.array([["a", "bc"], ["", "xyz"]], dtype="<U3")
    with Dense.create(path("dense-str-zstd"), texts.dtype, (2,), codec="zstd", data_shards=1) as w:
        w.append(texts)
    blobs = [np.frombuffer(bytes(range(n * 3)), dtype="S3") for n in (0, 2, 5)]
    with Ragged.create(path("ragged-bytes-raw"), np.dtype("S3"), 1, codec="raw",
                       data_shards=2) as w:
        w.append(blobs)
    spans = [(np.arange(n, dtype=np.int64) * 5).view("m8[5s]") for n in (3, 0, 1)]
    with Ragged.create(path("ragged-timedelta-zstd"), np.dtype("m8[5s]"), 1, codec="zstd",
                       data_shards=1) as w:
        w.append(spans)
    voids = np.frombuffer(bytes(range(24)), dtype="V4").reshape(3, 2)
    with Dense.create(path("dense-void-raw"), voids.dtype, (2,), codec="raw", data_shards=1) as w:
        w.append(voids)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="directory to write the seed stores into")
    args = ap.parse_args(argv)
    if os.path.isdir(args.out) and os.listdir(args.out):
        print(f"make_corpus: {args.out!r} is not empty", file=sys.stderr)
        return 2
    for p in write_corpus(args.out):
        size = sum(os.path.getsize(os.path.join(p, f)) for f in os.listdir(p))
        print(f"{p}: {size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
