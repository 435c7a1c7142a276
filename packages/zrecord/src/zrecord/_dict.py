"""Training zstd dictionaries for the ``zstd_dict`` codec.

A dictionary is trained once, explicitly, on settled data and then passed to ``create`` as
``dict_bytes``; the store keeps a copy in its header. Nothing trains automatically.

Samples are the records' stored-form bytes (little-endian, C order): exactly what the writer
compresses. From a sized source (an array or an open store) records are drawn uniformly at
random without replacement with a fixed seed, so training is reproducible; from any other
iterable the first records are taken. Either way the sample is bounded by
``sample_bytes_max`` and each record contributes at most ``record_sample_bytes_max``.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

import numpy as np

from zrecord import _native
from zrecord._dtypes import DICT_SIZE_BYTES_MAX
from zrecord.errors import LimitError, SchemaError

DICT_SIZE_BYTES_DEFAULT = 112_640          # 110 KiB, the zstd command line's default
DICT_SIZE_BYTES_MIN = 256                  # ZDICT_trainFromBuffer needs at least this much
SAMPLE_BYTES_MAX_DEFAULT = 64 << 20        # bytes of samples handed to the trainer
RECORD_SAMPLE_BYTES_MAX = 128 << 10        # zstd's trainer ignores longer samples


def _record_bytes(rec: Any, where: str) -> np.ndarray:
    if not isinstance(rec, np.ndarray):
        raise SchemaError(f"train_dict: {where} is a {type(rec).__name__}, not a numpy.ndarray "
                          "(convert with np.asarray(...) first)")
    if rec.dtype.fields is not None or rec.dtype.hasobject:
        raise SchemaError(f"train_dict: {where} has unsupported dtype {rec.dtype}")
    if rec.dtype.byteorder == ">":
        rec = rec.astype(rec.dtype.newbyteorder("<"))
    flat = np.ascontiguousarray(rec).reshape(-1).view(np.uint8)
    return flat[:RECORD_SAMPLE_BYTES_MAX]


def train_dict(source: np.ndarray | Iterable[np.ndarray], *, dict_size: int = DICT_SIZE_BYTES_DEFAULT,
               sample_bytes_max: int = SAMPLE_BYTES_MAX_DEFAULT, seed: int = 0) -> bytes:
    """Train a zstd dictionary from representative, settled records.

    `source` is a NumPy array (records along axis 0), an open :class:`~zrecord.Dense` or
    :class:`~zrecord.Ragged` store, or any iterable of NumPy arrays. Returns at most
    `dict_size` bytes (default 110 KiB; at most 16 MiB) for ``create(..., codec="zstd_dict",
    dict_bytes=...)``. Raises ValueError when the source is too small or too uniform to train
    from: zstd needs roughly a hundred times the dictionary size in samples.
    """
    size = operator.index(dict_size)
    if not DICT_SIZE_BYTES_MIN <= size <= DICT_SIZE_BYTES_MAX:
        raise LimitError(f"train_dict: dict_size must be in {DICT_SIZE_BYTES_MIN}.."
                         f"{DICT_SIZE_BYTES_MAX} (dict_size_bytes_max); got {size}")
    budget = operator.index(sample_bytes_max)
    if budget <= 0:
        raise ValueError(f"train_dict: sample_bytes_max must be positive; got {budget}")

    samples: list[np.ndarray] = []
    total = 0
    if isinstance(source, (bytes, bytearray, memoryview, str)):
        raise SchemaError(f"train_dict: source must be a numpy array, an open store or an "
                          f"iterable of numpy arrays; got {type(source).__name__} (wrap bytes "
                          "with np.frombuffer(...) and pass [array])")
    # A store or an array is sampled at random positions; other iterables from the start.
    indexable: Any = source
    if isinstance(source, np.ndarray) or (hasattr(source, "__len__") and hasattr(source, "__getitem__")
                                          and not isinstance(source, (list, tuple))):
        n = len(indexable)
        if isinstance(source, np.ndarray) and source.ndim == 0:
            raise SchemaError("train_dict: a 0-d array holds no records")
        order = np.random.default_rng(seed).permutation(n) if n else np.empty(0, np.int64)
        for i in order:
            rec = _record_bytes(np.asarray(indexable[int(i)]), f"record {int(i)}")
            if total + rec.nbytes > budget:
                break
            samples.append(rec)
            total += rec.nbytes
    elif isinstance(source, Iterable):
        for i, item in enumerate(source):
            rec = _record_bytes(item, f"record {i}")
            if total + rec.nbytes > budget:
                break
            samples.append(rec)
            total += rec.nbytes
    else:
        raise SchemaError(f"train_dict: source must be a numpy array, an open store or an "
                          f"iterable of numpy arrays; got {type(source).__name__}")
    if not samples or total == 0:
        raise ValueError(f"train_dict: the source gave no sample bytes ({len(samples)} records); "
                         "train on representative, non-empty records")
    blob = np.concatenate(samples) if len(samples) > 1 else samples[0].copy()
    sizes = np.fromiter((s.nbytes for s in samples), dtype=np.uint64, count=len(samples))
    return _native.train_dict(blob, sizes, len(samples), size)
