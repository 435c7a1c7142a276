"""The offline policies of zrecord_testkit.caching: records mapped to the chunks a mirror evicts,
and Belady's rule and LRU over those chunks, against hand-computed figures and against a
brute-force optimum over every eviction a cache of whole chunks could make."""

from __future__ import annotations

import itertools
import random

import pytest

from zrecord_testkit.caching import (
    belady_chunks_fetched,
    belady_fetched,
    chunk_spans,
    lru_chunks_fetched,
    lru_fetched,
)


def test_chunk_spans_number_chunks_across_shards_and_clip_each_shards_last() -> None:
    # Shard 0 holds 10 bytes (chunks 0-2, the last 2 bytes), shard 1 holds 5 (chunks 3-4).
    shards, offsets, sizes = [0, 0, 0, 1, 1, 0], [0, 3, 8, 0, 4, 5], [3, 2, 2, 0, 1, 0]
    spans, chunk_sizes = chunk_spans(shards, offsets, sizes, [10, 5], 4)
    assert chunk_sizes == [4, 4, 2, 4, 1]
    assert [list(s) for s in spans] == [[0], [0, 1], [2], [], [4], []]


# Four records of 2 bytes in one shard of 8: records 0 and 1 in chunk 0, 2 and 3 in chunk 1.
FOUR = chunk_spans([0] * 4, [0, 2, 4, 6], [2] * 4, [8], 4)


def test_chunks_cost_what_records_do_not_where_a_chunk_holds_records_read_apart() -> None:
    # A cache of 4 bytes holds two records but one chunk: reading 0, 2, 1, 3 the record-level
    # optimum fetches each record once; over chunks, chunk 1 is fetched twice (or chunk 0).
    reads = [0, 2, 1, 3]
    spans, chunk_sizes = FOUR
    assert belady_fetched(reads, [2] * 4, 4) == [2, 2, 2, 2]
    assert belady_chunks_fetched(reads, spans, chunk_sizes, 4) == [4, 4, 0, 4]
    assert lru_fetched(reads, [2] * 4, 4) == [2, 2, 2, 2]
    assert lru_chunks_fetched(reads, spans, chunk_sizes, 4) == [4, 4, 4, 4]
    # Read in chunk order, the chunks cost no more than the records.
    assert belady_chunks_fetched([0, 1, 2, 3], spans, chunk_sizes, 4) == [4, 0, 4, 0]


def test_a_record_that_spans_two_chunks_fetches_those_not_held() -> None:
    # Records of 3 bytes from 0 in one shard of 12: record 1 lies in chunks 0 and 1.
    spans, chunk_sizes = chunk_spans([0] * 4, [0, 3, 6, 9], [3] * 4, [12], 4)
    assert belady_chunks_fetched([0, 1, 2, 3], spans, chunk_sizes, 8) == [4, 4, 4, 0]
    # With room for one chunk, reading record 1 fetches both of its chunks; then record 0
    # finds chunk 0 held if the policy kept it rather than chunk 1 (needed never again).
    assert belady_chunks_fetched([1, 0], spans, chunk_sizes, 4) == [8, 0]
    assert lru_chunks_fetched([1, 0], spans, chunk_sizes, 4) == [8, 4]


def test_the_clipped_last_chunk_costs_its_own_bytes() -> None:
    # Shard of 6 bytes: chunk 0 of 4 bytes (record 0), chunk 1 of 2 (record 1).
    spans, chunk_sizes = chunk_spans([0, 0], [0, 4], [4, 2], [6], 4)
    assert belady_chunks_fetched([1, 0, 1], spans, chunk_sizes, 4) == [2, 4, 0]
    assert lru_chunks_fetched([1, 0, 1], spans, chunk_sizes, 4) == [2, 4, 2]


def brute_force(reads: list[int], chunks: list[list[int]], chunk_bytes: int, room: int,
                together: bool) -> int:
    """The fewest bytes any cache of `room` whole chunks fetches for `reads` (record ids; each
    needs the chunks `chunks[id]`), over every choice of what it keeps. `together`: a read
    needs its record's chunks all held at once; else one after the other, as
    ``belady_chunks_fetched`` counts them (the cache may drop a chunk just fetched)."""
    steps = [chunks[rec] for rec in reads] if together else [[c] for rec in reads for c in chunks[rec]]
    best: dict[frozenset[int], int] = {frozenset(): 0}
    for need in steps:
        after: dict[frozenset[int], int] = {}
        for held, cost in best.items():
            paid = cost + chunk_bytes * len(set(need) - held)
            pool = sorted(held | set(need))
            for k in range(min(room, len(pool)) + 1):
                for kept in map(frozenset, itertools.combinations(pool, k)):
                    if len(kept | set(need)) <= room or not together:
                        after[kept] = min(after.get(kept, paid), paid)
        best = after
    return min(best.values())


@pytest.mark.parametrize("seed", range(60))
def test_belady_over_chunks_is_the_brute_force_optimum(seed: int) -> None:
    rng = random.Random(seed)
    chunk_bytes = 4
    sizes = [rng.randint(1, 6) for _ in range(rng.randint(3, 6))]
    offsets = [sum(sizes[:k]) for k in range(len(sizes))]
    shard = -(-sum(sizes) // chunk_bytes) * chunk_bytes  # chunks of one size
    spans, chunk_sizes = chunk_spans([0] * len(sizes), offsets, sizes, [shard], chunk_bytes)
    # The chunks of each record from its bytes, not from chunk_spans.
    chunks = [sorted({b // chunk_bytes for b in range(o, o + z)}) for o, z in zip(offsets, sizes)]
    widest = max(len(c) for c in chunks)
    room = rng.randint(widest, max(widest, len(chunk_sizes) - 1))
    reads = [rng.randrange(len(sizes)) for _ in range(rng.randint(6, 10))]
    belady = sum(belady_chunks_fetched(reads, spans, chunk_sizes, room * chunk_bytes))
    assert belady == brute_force(reads, chunks, chunk_bytes, room, together=False)
    # A cache that must hold a record's chunks at once can only fetch as much or more.
    assert belady <= brute_force(reads, chunks, chunk_bytes, room, together=True)
    assert sum(lru_chunks_fetched(reads, spans, chunk_sizes, room * chunk_bytes)) >= belady


def test_chunks_one_after_the_other_can_cost_less_than_chunks_together() -> None:
    # Seed 11 of the test above: records of two chunks each, room for three. A cache that may
    # drop a record's first chunk before it fetches the second keeps more of what comes next.
    spans, chunk_sizes = chunk_spans([0] * 6, [0, 5, 9, 13, 18, 23], [5, 4, 4, 5, 5, 2], [28], 4)
    chunks = [list(s) for s in spans]
    reads = [3, 5, 4, 1, 0, 3, 2, 1, 0, 4]
    assert sum(belady_chunks_fetched(reads, spans, chunk_sizes, 12)) == 44
    assert brute_force(reads, chunks, 4, 3, together=False) == 44
    assert brute_force(reads, chunks, 4, 3, together=True) == 48
