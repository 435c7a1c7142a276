"""Record indices: what a store accepts as a key, normalised for the native gathers.

Invariants of this module:
- A scalar index returns one record; any collection of indices (tuple, list, integer array,
  slice) selects a batch in the requested order. Indices must lie in ``0 .. len - 1``: a
  negative index is an error, never a position counted from the end. Slices follow Python's
  rules (negative bounds and steps allowed).
- Arrays are normalised without a pass over their values: negative positions become huge
  unsigned values that the native bounds check rejects, and ``index_error`` then names the
  offending value as the caller gave it.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from zrecord.errors import StoreIndexError


def normalise(key: Any, length: int, path: str) -> np.ndarray | int:
    """Normalise `key` for a store of `length` records at `path` (named in errors): an int for
    a scalar read, else a C-contiguous uint64 index array.

    Negative positions in arrays become huge unsigned values that the native bounds check
    rejects; `index_error` then rebuilds the message with the value as given.
    """
    if isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
        i = operator.index(key)
        if not 0 <= i < length:
            raise StoreIndexError(f"index {i} is out of range for {path!r} with "
                                  f"{length} records (indices must be in 0..{length - 1})")
        return i
    if isinstance(key, np.ndarray):
        arr = key
    elif isinstance(key, slice):
        return np.arange(*key.indices(length), dtype=np.uint64)
    elif isinstance(key, (tuple, list)):
        if any(isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer))
               for k in key):
            raise TypeError(
                f"a store is a sequence of records: a tuple or list selects records by "
                f"integer position, so every element must be an int; got {key!r}")
        try:
            arr = np.array(key, dtype=np.int64) if key else np.empty(0, dtype=np.uint64)
        except OverflowError:
            pos, bad = next((p, int(k)) for p, k in enumerate(key)
                            if not -2**63 <= int(k) < 2**63)
            raise StoreIndexError(
                f"index {bad} at position {pos} is out of range for {path!r} with "
                f"{length} records (indices must be in 0..{length - 1})") from None
    else:
        raise TypeError(f"store indices must be an int, a slice, or a tuple, list or "
                        f"integer array of positions; got {type(key).__name__}")
    if arr.ndim != 1:
        raise TypeError(f"an index array must be one-dimensional; got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        if arr.size == 0:
            return np.empty(0, dtype=np.uint64)
        raise TypeError(f"an index array must have an integer dtype; got {arr.dtype}")
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    # A private copy: a read looks at the indices more than once (Ragged: the shapes, then the
    # records), and the caller's array may change meanwhile (another thread refilling a
    # buffer): a view of it made the core read past the output it had sized, and abort the
    # process. Not for an array that owns its memory and is read-only (the DataLoader's own
    # copy of a step's indices): nothing writes it, and the loader copied it already.
    if arr.dtype == np.uint64 and arr.flags.c_contiguous and arr.flags.owndata \
            and not arr.flags.writeable:
        return arr
    return arr.astype(np.uint64, order="C", copy=True)

def index_error(idx: np.ndarray, key: Any, length: int, path: str) -> StoreIndexError:
    """The error for the first out-of-range position of `idx` (normalised from `key`),
    naming the value as the caller gave it, signed or unsigned."""
    bad = int(np.flatnonzero(idx >= length)[0])
    given = idx[bad] if isinstance(key, slice) else np.asarray(key)[bad]
    return StoreIndexError(
        f"index {int(given)} at position {bad} is out of range for {path!r} "
        f"with {length} records (indices must be in 0..{length - 1})")


def distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values of the one-dimensional integer array `values`, sorted, in its dtype
    (``np.unique``'s answer). By a sort and a comparison of neighbours: NumPy 2.4's
    ``np.unique`` of integers takes a hash table first, 20 to 30 times as long (145 ms for
    600,000 keys against 4 ms), which a gather waited for in the mirror's planning."""
    return distinct_sorted(np.sort(values))


def distinct_sorted(ordered: np.ndarray) -> np.ndarray:
    """The distinct values of the sorted one-dimensional array `ordered`: each where it first
    appears."""
    if ordered.shape[0] < 2:
        return ordered
    keep = np.empty(ordered.shape[0], np.bool_)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    out: np.ndarray = ordered[keep]
    return out
