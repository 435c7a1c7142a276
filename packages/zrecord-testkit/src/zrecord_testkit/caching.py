"""Offline cache policies over a known sequence of reads: the yardsticks of the mirror's
eviction in zrecord's and loaderx's tests and in benchmarks/remote/bench_cache_policy.py.
Standard library only."""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

_NEVER = 1 << 62
# A policy over a sequence of reads: (reads, sizes, capacity) -> bytes fetched at each read.
_Policy = Callable[[Sequence[int], Sequence[int], int], list[int]]


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


def chunk_spans(shards: Sequence[int], offsets: Sequence[int], sizes: Sequence[int],
                shard_bytes: Sequence[int], chunk_bytes: int) -> tuple[list[range], list[int]]:
    """Where records lie in chunks, as a mirror that evicts `chunk_bytes` chunks of its shard
    files sees them: for each record (at `offsets[id]` of shard `shards[id]`, `sizes[id]` stored
    bytes) the range of the chunks its bytes span (none for an empty record), and for each chunk
    its bytes (`chunk_bytes`, the last of a shard clipped to the shard's `shard_bytes`). Chunks
    are numbered across shards, shard after shard, as ``_mirror_cache.Budget`` numbers them."""
    base = [0]
    chunk_sizes: list[int] = []
    for size in shard_bytes:
        count = -(-size // chunk_bytes)
        chunk_sizes += [min(chunk_bytes, size - k * chunk_bytes) for k in range(count)]
        base.append(base[-1] + count)
    spans = [range(base[s] + o // chunk_bytes, base[s] + (o + z - 1) // chunk_bytes + 1) if z > 0
             else range(0) for s, o, z in zip(shards, offsets, sizes)]
    return spans, chunk_sizes


def _by_chunk(policy: _Policy, reads: Sequence[int], spans: Sequence[range], chunk_sizes: Sequence[int],
              capacity: int) -> list[int]:
    """Bytes fetched at each read of `reads` by `policy` (``belady_fetched`` or
    ``lru_fetched``) run over the chunks the records read span, in their order."""
    flat = [c for rec in reads for c in spans[rec]]
    per_chunk = policy(flat, chunk_sizes, capacity)
    fetched = [0] * len(reads)
    at = 0
    for i, rec in enumerate(reads):
        n = len(spans[rec])
        fetched[i] = sum(per_chunk[at:at + n])
        at += n
    return fetched


def belady_chunks_fetched(reads: Sequence[int], spans: Sequence[range], chunk_sizes: Sequence[int],
                          capacity: int) -> list[int]:
    """Bytes fetched at each read of `reads` (record ids) by the optimal offline policy over
    chunks with `capacity` bytes: a read fetches whole the chunks its record spans that are not
    held (`spans` and `chunk_sizes` from ``chunk_spans``), and Belady's rule evicts chunks (the
    one needed again farthest ahead first). With chunks of one size (all but each shard's
    last) no cache that fetches and evicts whole chunks fetches less. A mirror that evicts
    chunks cannot keep a record without the other records of its chunks, as the record-level
    optimum does; but it fetches only the records read, so this is its yardstick only where
    the records of a chunk are read close together (where they are read far apart, whole
    chunks cost many times more). A record's chunks count as read one after the other (none
    need stay while the others are fetched), which can only lower the figure."""
    return _by_chunk(belady_fetched, reads, spans, chunk_sizes, capacity)


def lru_chunks_fetched(reads: Sequence[int], spans: Sequence[range], chunk_sizes: Sequence[int],
                       capacity: int) -> list[int]:
    """Bytes fetched at each read of `reads` by a least-recently-used cache of whole chunks of
    `capacity` bytes (as ``belady_chunks_fetched``; the chunk just read is kept)."""
    return _by_chunk(lru_fetched, reads, spans, chunk_sizes, capacity)


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
