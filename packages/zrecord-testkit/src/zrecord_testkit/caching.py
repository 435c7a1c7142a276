"""Offline cache policies over a known sequence of reads: the yardsticks of the mirror's
eviction in zrecord's and loaderx's tests and in benchmarks/remote/bench_cache_policy.py.
Standard library only."""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

_NEVER = 1 << 62


def belady_fetched(reads: Sequence[int], sizes: Sequence[int], capacity: int) -> list[int]:
    """Bytes fetched at each read of `reads` (record ids) by the optimal offline policy with
    `capacity` bytes (Belady's rule: on a miss, the record is fetched, then records whose next
    read is farthest away, the fetched one included, are evicted until the cache fits;
    records of `sizes[id]` bytes). With records of one size this is the optimum; with sizes
    that differ it is Belady's rule, the usual yardstick."""
    nxt = [_NEVER] * len(reads)
    last: dict[int, int] = {}
    for i in range(len(reads) - 1, -1, -1):
        nxt[i] = last.get(reads[i], _NEVER)
        last[reads[i]] = i
    held: dict[int, int] = {}  # record -> its next read
    heap: list[tuple[int, int]] = []  # (-next read, record), with stale entries
    used = 0
    fetched = [0] * len(reads)
    for i, rec in enumerate(reads):
        if rec not in held:
            fetched[i] = sizes[rec]
            used += sizes[rec]
        held[rec] = nxt[i]
        heapq.heappush(heap, (-nxt[i], rec))
        while used > capacity and heap:
            neg, victim = heapq.heappop(heap)
            if held.get(victim) != -neg:
                continue  # stale: read again since
            del held[victim]
            used -= sizes[victim]
    return fetched


def lru_fetched(reads: Sequence[int], sizes: Sequence[int], capacity: int) -> list[int]:
    """Bytes fetched at each read of `reads` by a least-recently-used cache of `capacity`
    bytes (the record just read is kept)."""
    held: OrderedDict[int, None] = OrderedDict()
    used = 0
    fetched = [0] * len(reads)
    for i, rec in enumerate(reads):
        if rec in held:
            held.move_to_end(rec)
            continue
        fetched[i] = sizes[rec]
        held[rec] = None
        used += sizes[rec]
        while used > capacity and len(held) > 1:
            victim, _ = held.popitem(last=False)
            used -= sizes[victim]
    return fetched


def record_peaks(monkeypatch: Any, budget_class: Any) -> list[int]:
    """Make every write of a fetch into a budgeted mirror append the bytes the mirror then holds
    on disk (``used()``) to the list returned: the mirror's size sampled at its peaks, not after
    each trim. `budget_class` is zrecord's ``_mirror_cache.Budget``; `monkeypatch` pytest's."""
    peaks: list[int] = []
    real_wrote = budget_class.wrote

    def wrote(self: Any, shard: int, start: int, end: int) -> None:
        real_wrote(self, shard, start, end)
        peaks.append(self.used())

    monkeypatch.setattr(budget_class, "wrote", wrote)
    return peaks
