"""Recycled batch outputs: a small per-store pool of already-faulted blocks.

Invariants of this module:
- Batch outputs of at least ``POOL_BATCH_BYTES_MIN`` come from the pool: copying into memory
  that is already faulted in runs about 2.8x faster than into a fresh allocation (decision
  record 0001, section 2).
- A block goes back to the pool only when the batch and every view of it are gone (the batch's
  ``.base`` is the block's owner), so a returned batch is never shared with another batch.
- The pool never blocks: a busy lock means a fresh allocation or a dropped block, never a
  wait. It is bounded (``POOL_BLOCKS_MAX`` idle blocks, ``POOL_BYTES_MAX`` idle bytes) and
  emptied by ``close()``.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

import numpy as np

from zrecord._pages import addr

# Batch outputs: copying into memory that is already faulted in runs about 2.8x faster than
# into a fresh allocation, which the kernel must zero and fault page by page (decision record
# 0001). Outputs of at least this size are therefore recycled through a per-store pool.
POOL_BATCH_BYTES_MIN = 1 << 20
# Idle blocks a store's pool keeps, by count and by bytes; blocks in use are the caller's.
POOL_BLOCKS_MAX = 4
POOL_BYTES_MAX = 512 << 20



def _block_bytes(nbytes: int) -> int:
    """Size class of a pooled block: `nbytes` rounded up to 1/8 of its power of two, so that
    Ragged batches of similar size can reuse each other's blocks (at most 12.5% slack)."""
    step = max(4096, 1 << max(0, nbytes.bit_length() - 4))
    return -(-nbytes // step) * step


class PooledBlock:
    """Owns one pooled block for as long as a batch array (or any view of it) is alive.

    The batch is built from this object's ``__array_interface__``, so the batch's ``.base`` is
    this object and every view keeps it alive; when the last one goes, ``__del__`` hands the
    block back to its pool.
    """

    __slots__ = ("__array_interface__", "_block", "_pool")

    def __init__(self, block: np.ndarray, pool: BlockPool, shape: tuple[int, ...],
                 dtype: np.dtype[Any]) -> None:
        self._block = block
        self._pool = pool
        self.__array_interface__ = {"data": (addr(block), False), "shape": shape,
                                    "typestr": dtype.str, "version": 3}

    def __del__(self) -> None:
        try:
            self._pool._give(self._block)
        except Exception:  # noqa: BLE001 - a finalizer must not raise (interpreter shutdown)
            pass


class BlockPool:
    """A bounded, thread-safe pool of idle, already-faulted output blocks for one store."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: list[np.ndarray] = []
        self._bytes = 0
        self._closed = False
        _POOLS.add(self)

    def _after_fork_in_child(self) -> None:
        # Another thread of the parent may have held the lock when this process was forked;
        # it does not exist here, so `close` would wait for it forever.
        self._lock = threading.Lock()

    def empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
        """An uninitialised C-contiguous, writeable array, like ``np.empty(shape, dtype)``."""
        nbytes = dtype.itemsize
        for dim in shape:
            nbytes *= dim
        if nbytes < POOL_BATCH_BYTES_MIN or self._closed:
            return np.empty(shape, dtype)
        block = None
        # Never wait: a busy lock (another thread, or a lock inherited locked across fork)
        # only costs a fresh allocation.
        if self._lock.acquire(blocking=False):
            try:
                best = -1
                for i, b in enumerate(self._free):
                    if nbytes <= b.nbytes <= 2 * nbytes and (best < 0 or b.nbytes < self._free[best].nbytes):
                        best = i
                if best >= 0:
                    block = self._free.pop(best)
                    self._bytes -= block.nbytes
            finally:
                self._lock.release()
        if block is None:
            block = np.empty(_block_bytes(nbytes), np.uint8)
        return np.asarray(PooledBlock(block, self, shape, dtype))

    def _give(self, block: np.ndarray) -> None:
        # Called from __del__, on any thread and possibly while this thread holds the lock
        # (a collection triggered inside `empty`): never wait, drop the block instead.
        if not self._lock.acquire(blocking=False):
            return
        try:
            if self._closed or block.nbytes > POOL_BYTES_MAX:
                return
            self._free.append(block)
            self._bytes += block.nbytes
            while len(self._free) > POOL_BLOCKS_MAX or self._bytes > POOL_BYTES_MAX:
                self._bytes -= self._free.pop(0).nbytes
        finally:
            self._lock.release()

    def close(self) -> None:
        """Drop every idle block; blocks returned later are dropped too."""
        with self._lock:
            self._closed = True
            self._free.clear()
            self._bytes = 0

    def idle(self) -> tuple[int, int]:
        """(idle blocks, idle bytes), for tests."""
        with self._lock:
            return len(self._free), self._bytes


# Every live pool, so that a forked child can replace locks its parent's threads held.
_POOLS: weakref.WeakSet[BlockPool] = weakref.WeakSet()


def _reset_pools_after_fork() -> None:
    for pool in list(_POOLS):
        pool._after_fork_in_child()


os.register_at_fork(after_in_child=_reset_pools_after_fork)
