"""Releasing the pages of read-only memory maps that a writer has consumed.

Invariants of this module:
- Only pages of shared, read-only NumPy memory maps are released (MADV_DONTNEED); the data
  stays in the file and the page cache, and is mapped again if it is read. Private
  (copy-on-write) maps are never touched, since the advice would discard their changes.
- The cost is one address lookup and one madvise per mapping and call, never per record.
"""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np


def addr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]  # type: ignore[no-any-return]


def _bounds(a: np.ndarray) -> tuple[int, int]:
    """The lowest address `a` touches and one past its highest: for a strided or reversed
    view (``src[:, ::2]``, a transpose) more than ``addr(a) + a.nbytes``, which released only
    part of what a copy of it had read."""
    if a.flags.c_contiguous:
        start = addr(a)
        return start, start + a.nbytes
    lo = hi = addr(a)
    if a.size:
        for extent, stride in zip(a.shape, a.strides):
            step = (extent - 1) * stride
            lo, hi = (lo + step, hi) if step < 0 else (lo, hi + step)
        hi += a.itemsize
    return lo, hi


def release_mapped_pages(*chunks: np.ndarray) -> None:
    """Drop the pages of read-only shared memory maps that a writer has consumed.

    Appending an 8 GiB ``np.load(..., mmap_mode='r')`` array would otherwise leave all of it
    resident in the writer's address space (RSS). For a shared mapping MADV_DONTNEED only
    unmaps pages; the data stays in the file and the page cache. Private (copy-on-write)
    mappings are left alone, since the advice would discard their modifications. The chunks
    of one call are coalesced into one span per mapping (one madvise, not one per record),
    from the first to the last chunk of that mapping: sources are consumed in order, and
    dropping pages between or around them is harmless, as they are only mapped again when
    read. Only those two chunks' addresses are computed, since asking NumPy for an address
    costs microseconds and a Ragged append can hand over hundreds of thousands of records.
    """
    ends: dict[int, list[Any]] = {}
    for chunk in chunks:
        mm = getattr(chunk, "_mmap", None)
        if not isinstance(mm, mmap.mmap) or getattr(chunk, "mode", None) not in ("r", "r+", "readonly", "readwrite"):
            continue
        span = ends.get(id(mm))
        if span is None:
            ends[id(mm)] = [mm, chunk, chunk]
        else:
            span[2] = chunk
    spans: dict[int, list[Any]] = {}
    for key, (mm, first, last) in ends.items():
        (a0, a1), (b0, b1) = _bounds(first), _bounds(last)
        spans[key] = [mm, min(a0, b0), max(a1, b1)]
    for mm, lo, hi in spans.values():
        try:
            base = addr(np.frombuffer(mm, dtype=np.uint8))
        except (TypeError, ValueError):
            continue
        start = lo - base
        end = hi - base
        page = mmap.PAGESIZE
        start -= start % page
        end = min(len(mm), end)
        if end > start:
            try:
                mm.madvise(mmap.MADV_DONTNEED, start, end - start)
            except (OSError, ValueError):
                pass
