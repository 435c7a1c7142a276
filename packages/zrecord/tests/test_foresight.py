"""[O3] point 4: a mirror whose reader tells its future (``Reader.foresee``) evicts, under its
``cache_bytes`` budget, what is needed farthest ahead (Belady's rule), across the readers that
share it; without a future it stays LRU."""

from __future__ import annotations

import time

import numpy as np
import pytest

from zrecord import Dense, _mirror_cache

pytestmark = pytest.mark.remote

N, REC, BATCH = 192, 128 << 10, 8  # 24 MiB of records, 24 steps per epoch
STEPS = N // BATCH


def _store(http_folder):
    folder = http_folder.path / "s"
    with Dense.create(folder, np.uint8, (REC,), codec="raw", data_shards=1) as w:
        rng = np.random.default_rng(0)
        for _ in range(N // 64):
            w.append(rng.integers(0, 255, (64, REC), dtype=np.uint8))
    return folder, http_folder.url_for("s")


def _cycles(seed=7):
    """A cyclic order: a fresh permutation each epoch, BATCH records a step."""
    perms = {}

    def batch_of(step):
        epoch = step // STEPS
        if epoch not in perms:
            perms[epoch] = np.random.default_rng([seed, epoch]).permutation(N)
        return perms[epoch][(step % STEPS) * BATCH:(step % STEPS + 1) * BATCH]
    return batch_of


def _settle(mirror):
    """Wait for the mirror's prefetches under way (planned reads among them)."""
    for _, future in list(mirror._pending):
        future.result()


def _sequential(ds, at):
    """Tell `ds` a future of BATCH consecutive records a step (wrapping), at progress at[0]."""
    handle = ds.foresee(lambda step: np.arange(step * BATCH, (step + 1) * BATCH) % N, lambda: at[0])
    assert handle is not None
    return handle


def _optional_room(budget, room):
    """Make `budget` admit nothing optional (a partial admission: a planned read's, a
    gather's gaps or joined deferred records) until room[0]; a gather's own records always."""
    real = budget.reserve

    def reserve(incoming, *args, partial=False, **kw):
        return real(incoming if room[0] or not partial else 0, *args, partial=partial, **kw)
    budget.reserve = reserve


def _two_epochs(url, tmp_path, name, *, foresee):
    """Epoch 1 then epoch 2 of the cyclic order through a mirror with half the records'
    bytes as its budget; the bytes fetched in epoch 2."""
    batch_of = _cycles()
    at = [0]
    opts = {"cache_dir": str(tmp_path / name), "cache_bytes": N * REC // 2}
    with Dense.open(url, storage_options=opts) as ds:
        if foresee:
            handle = ds.foresee(batch_of, lambda: at[0])
            assert handle is not None
        local = None
        for step in range(2 * STEPS):
            if step == STEPS:
                local = ds.remote_stats()["bytes"]
            got = ds[np.sort(batch_of(step))]
            assert got.shape == (BATCH, REC)
            at[0] = step + 1
        assert local is not None
        return ds.remote_stats()["bytes"] - local


def test_a_second_cyclic_epoch_fetches_what_the_optimal_policy_fetches(http_folder, tmp_path):
    from zrecord_testkit.caching import belady_fetched, lru_fetched

    _, url = _store(http_folder)
    batch_of = _cycles()
    reads = [int(r) for step in range(2 * STEPS) for r in batch_of(step)]
    optimal = sum(belady_fetched(reads, [REC] * N, N * REC // 2)[N:])
    lru_model = sum(lru_fetched(reads, [REC] * N, N * REC // 2)[N:])
    ours = _two_epochs(url, tmp_path, "next-use", foresee=True)
    lru = _two_epochs(url, tmp_path, "lru", foresee=False)
    # Belady keeps the half of the records epoch 2 reads first: half of them are fetched.
    assert optimal == N * REC // 2
    print("OURS", ours / optimal)
    assert ours <= optimal * 1.05, (ours, optimal)  # the bound: within 5%
    # LRU keeps what epoch 1 read last, and a fresh order reads it at random times.
    assert lru >= optimal * 1.4 and lru_model >= optimal * 1.4, (lru, lru_model, optimal)


def test_hints_merge_across_readers_and_go_with_their_reader(http_folder, tmp_path):
    """Two readers of one mirror: each chunk's hint is the earlier of their live hints; a
    reader replaces its own hints; closing a foresight (or its reader going: progress None)
    clears the hints that are still its own."""
    _, url = _store(http_folder)
    opts = {"cache_dir": str(tmp_path / "c"), "cache_bytes": N * REC // 2}
    with Dense.open(url, storage_options=opts) as a, Dense.open(url, storage_options=opts) as b:
        ahead = [0]
        near = a.foresee(lambda s: np.array([s % N]), lambda: 0)  # record s at step s
        far = b.foresee(lambda s: np.array([(N - 1 - s) % N]), lambda: ahead[0])
        a[np.array([0])]  # catch_up: a draws its horizon and hints it
        b[np.array([0])]
        budget = a._remote._budget
        hints = np.array(budget._hints)
        first, _ = budget.chunk_spans(np.array([0, N - 1], np.uint64))
        # Record 0 is a's step 0 and b's step N-1: a's earlier hint holds; record N-1 the
        # other way round.
        assert 0 < hints[first[0]] < hints[first[1]] + 10**9
        assert hints[first[1]] > 0
        near.close()
        after = np.array(budget._hints)
        # a's own hints are gone; b's (every chunk it reads) remain.
        assert (after[hints == 0] == 0).all()
        assert int((after > 0).sum()) > 0
        ahead[0] = None  # b's reader is gone
        b[np.array([1])]
        assert not np.array(budget._hints).any()
        assert far.closed


def test_eviction_order_is_hinted_farthest_first_then_unhinted_least_recent(http_folder, tmp_path):
    _, url = _store(http_folder)
    opts = {"cache_dir": str(tmp_path / "c"), "cache_bytes": _mirror_cache.BUDGET_MIN_BYTES}
    with Dense.open(url, storage_options=opts) as ds:
        budget = ds._remote._budget
        ds[np.arange(0, 24, dtype=np.uint64)]  # 3 MiB: within the 4 MiB budget
        first, last = budget.chunk_spans(np.arange(0, 24, dtype=np.uint64))
        chunks = np.unique(np.concatenate([np.arange(f, e + 1) for f, e in zip(first, last)]))
        mine = np.zeros(budget.chunk_count, np.uint64)
        now = time.time_ns()
        # Every held chunk hinted, the first ones needed farthest ahead.
        budget.hint(chunks, now + 10**9 * (chunks.shape[0] - np.arange(chunks.shape[0])), mine)
        ds[np.arange(24, 40, dtype=np.uint64)]  # 2 MiB more: over the budget
        held = np.flatnonzero(np.array(budget._stamps))
        kept = np.intersect1d(held, chunks)
        # What went is the farthest-hinted: the held hinted chunks are the nearest ones.
        assert kept.shape[0] < chunks.shape[0]
        assert (kept == chunks[chunks.shape[0] - kept.shape[0]:]).all(), (kept, chunks)


def test_a_fetch_that_must_be_made_evicts_again_what_a_prefetch_stamped_under_its_eviction(
        http_folder, tmp_path, monkeypatch):
    """An eviction passes over the chunks whose stamps changed since its snapshot. A prefetch
    of held records stamps them expected meanwhile, and a gather's fetch, which must be made,
    was then admitted past the budget (the test below failed so, 1 MiB over 5 MiB, about once
    in 50 runs on starved cores). Here that prefetch runs inside the first two evictions: the
    admission evicts again on a fresh snapshot and stays within the budget."""
    _, url = _store(http_folder)
    opts = {"cache_dir": str(tmp_path / "c"), "cache_bytes": _mirror_cache.BUDGET_MIN_BYTES}
    with Dense.open(url, storage_options=opts) as ds:
        budget = ds._remote._budget
        ds[np.arange(0, 24, dtype=np.uint64)]  # 3 MiB held, of a 4 MiB budget
        first, last = budget.chunk_spans(np.arange(0, 24, dtype=np.uint64))
        chunks = np.unique(np.concatenate([np.arange(f, e + 1) for f, e in zip(first, last)]))
        now = time.time_ns()
        budget.hint(chunks, np.full(chunks.shape, now + 10**9, np.uint64),
                    np.zeros(budget.chunk_count, np.uint64))
        evictions, real_evict, real_evict_in = [0], budget._evict, budget._evict_in

        def evict(keep, incoming=0, beyond=None):
            evictions[0] += 1
            return real_evict(keep, incoming, beyond)

        def evict_in(order, stamps, used, target):
            if evictions[0] <= 2:
                budget.expect(order)  # the prefetch, between the snapshot and the punches
            return real_evict_in(order, stamps, used, target)

        monkeypatch.setattr(budget, "_evict", evict)
        monkeypatch.setattr(budget, "_evict_in", evict_in)
        admitted = budget.reserve(3 << 20, None, hold=True, beyond=now)
        try:
            assert admitted == 3 << 20
            assert budget.used() + budget._admission.reserved <= budget.budget, (budget.used(), budget._admission.reserved)
            assert evictions[0] == 3  # with beyond, without, and again
        finally:
            budget.release(admitted)
            budget.finished()


def test_foresee_is_none_where_nothing_is_evicted(http_folder, tmp_path):
    folder, url = _store(http_folder)
    with Dense.open(folder) as local:
        assert local.foresee(lambda s: np.array([0]), lambda: 0) is None
    with Dense.open(url, storage_options={"cache_dir": str(tmp_path / "c")}) as remote:
        assert remote.foresee(lambda s: np.array([0]), lambda: 0) is None
    # A closed store foresees nothing (a loader may be made over it; its reads raise).
    opts = {"cache_dir": str(tmp_path / "b"), "cache_bytes": N * REC // 2}
    budgeted = Dense.open(url, storage_options=opts)
    assert budgeted.foresee(lambda s: np.array([0]), lambda: 0) is not None
    budgeted.close()
    assert budgeted.foresee(lambda s: np.array([0]), lambda: 0) is None


@pytest.mark.parametrize("empty_first", [True, False], ids=["all-empty", "empty-at-the-end"])
def test_empty_records_are_foreseen_as_needing_no_chunk(http_folder, tmp_path, empty_first):
    """Records of no bytes need no chunk of the mirror. Was: the foresight gave each the chunk
    its offset falls in, which for a store of empty records only (or one at the end of its
    shard) is past the last chunk, and a budgeted reader told its future failed every read
    with IndexError."""
    from zrecord import Ragged
    folder = http_folder.path / f"empty-{empty_first}"
    # The second store's shard is exactly one chunk (8 x 512 bytes): its empty records lie
    # at its end, the first byte of a chunk that does not exist.
    records = [np.zeros(0, np.int32)] * 16 if empty_first else \
        [np.arange(128, dtype=np.int32) + n for n in range(8)] + [np.zeros(0, np.int32)] * 8
    with Ragged.create(folder, np.int32, 1, codec="raw", data_shards=1) as w:
        w.append(records)
    opts = {"cache_dir": str(tmp_path / "c"), "cache_bytes": _mirror_cache.BUDGET_MIN_BYTES}
    with Ragged.open(http_folder.url_for(folder.name), storage_options=opts) as ds:
        at = [0]
        handle = ds.foresee(lambda step: np.arange(step * 4, (step + 1) * 4) % 16, lambda: at[0])
        assert handle is not None
        for step in range(8):
            got = ds[np.arange(step * 4, (step + 1) * 4) % 16]
            for k, r in zip(np.arange(step * 4, (step + 1) * 4) % 16, got):
                np.testing.assert_array_equal(r, records[k])
            at[0] = step + 1


def test_reads_are_planned_a_segment_at_a_time_from_the_known_future(http_folder, tmp_path):
    """A foresight plans the records of the steps ahead in segments of half the bytes it is
    allowed, each returned once, none while half is planned ahead of progress, again from
    a step sought back to, none once its reader is gone; the mirror fetches a segment together:
    two steps of neighbours cost one GET where each step's own gather would make one each."""
    _, url = _store(http_folder)
    at = [0]
    opts = {"cache_dir": str(tmp_path / "c"), "cache_bytes": 8 << 20}
    with Dense.open(url, storage_options=opts) as ds:
        handle = ds.foresee(lambda step: np.arange(step * BATCH, (step + 1) * BATCH) % N,
                            lambda: at[0] if at[0] >= 0 else None)
        assert handle is not None
        steps = 8 * BATCH * REC  # allowed: eight steps' records (segments of four, four ahead)

        def planned():
            return [(recs.tolist(), until) for recs, until in handle.plan(steps)]

        def seg(first, end):
            return [(list(range(first * BATCH, end * BATCH)), end)]
        assert planned() == seg(0, 4)
        assert planned() == []  # four steps planned ahead
        at[0] = 1  # three of the segment's four steps are still ahead: three quarters count
        assert planned() == seg(4, 8)
        at[0] = 2
        assert planned() == []
        at[0] = 0  # sought back
        assert planned() == seg(0, 4)
        at[0] = -1  # the reader is gone
        assert planned() == []
    opts = {"cache_dir": str(tmp_path / "d"), "cache_bytes": 16 << 20}
    with Dense.open(url, storage_options=opts) as ds:
        at[0] = 0
        ds.foresee(lambda step: np.arange(step * BATCH, (step + 1) * BATCH) % N, lambda: at[0])
        # The mirror plans segments of half its budget (8 MiB: eight steps) while less than
        # half is planned ahead, one segment a gather: steps 0-7, then 8-15 once one of the
        # first is passed, each one GET; the gathers' own records were all planned.
        for step in range(4):
            ds[np.arange(step * BATCH, (step + 1) * BATCH)]
            at[0] = step + 1
        _settle(ds._remote)
        assert ds.remote_stats()["requests"] == 2
        assert ds.remote_stats()["bytes"] == 16 * BATCH * REC


def test_the_first_horizon_is_short_and_each_later_one_twice_as_long(http_folder, tmp_path,
                                                                    monkeypatch):
    """The first gather draws a horizon of FIRST_RECORDS draws, not the longest (at 2 million
    draws it kept a loader's first batch waiting seconds); each horizon drawn after is twice
    the one before, up to the most (here not the store's two epochs, which
    test_the_horizon_stops_growing_at_two_epochs checks)."""
    from zrecord import _foresight

    monkeypatch.setattr(_foresight, "HORIZON_EPOCHS", 1 << 20)
    _, url = _store(http_folder)
    at = [0]
    with Dense.open(url, storage_options={"cache_dir": str(tmp_path / "c"), "cache_bytes": 8 << 20}) as ds:
        handle = ds.foresee(_cycles(), lambda: at[0])
        assert handle is not None
        ds[np.sort(_cycles()(0))]
        first = handle._end - handle._base
        assert first * BATCH == _foresight.FIRST_RECORDS
        at[0] = first // 2 + 1  # past the middle: drawn again, twice as long
        handle.catch_up()
        assert (handle._end - handle._base) == 2 * first


def test_a_planned_read_the_budget_has_no_room_for_is_made_later_not_dropped(http_folder, tmp_path):
    """What the budget cannot admit of a planned read is handed back to the foresight and
    planned again (first, before any new segment) until progress passes the end of its
    segment; the mirror fetches it once there is room, in one GET as planned."""
    _, url = _store(http_folder)
    at = [0]
    with Dense.open(url, storage_options={"cache_dir": str(tmp_path / "c"), "cache_bytes": 8 << 20}) as ds:
        handle = _sequential(ds, at)
        mirror, room = ds._remote, [False]
        _optional_room(mirror._budget, room)
        mirror._plan_ahead(handle)  # steps 0-3 (half of 8 MiB): no room, deferred
        _settle(mirror)
        assert ds.remote_stats()["requests"] == 0
        room[0] = True
        mirror._plan_ahead(handle)  # the deferred read (no new segment: half is planned)
        _settle(mirror)
        assert ds.remote_stats()["requests"] == 1
        assert ds.remote_stats()["bytes"] == 4 * BATCH * REC
        # Deferred reads go once progress reaches the end of their segment.
        handle.defer(np.arange(4 * BATCH, 5 * BATCH, dtype=np.uint64), 5)
        handle.defer(np.arange(0, BATCH, dtype=np.uint64), 2)
        at[0] = 2
        reads = handle.plan(8 * BATCH * REC)
        assert [(recs.tolist(), until) for recs, until in reads][0] == (list(range(4 * BATCH, 5 * BATCH)), 5)
        assert all(until > 2 for _, until in reads)


@pytest.mark.parametrize("room_for_it", [True, False])
def test_a_gather_fetches_a_deferred_planned_read_it_joins_whole(http_folder, tmp_path, room_for_it):
    """A planned read that the budget could not admit yet (deferred) is fetched whole, in the
    GET of the first gather that needs any of its records, when the budget has room for it by
    then, instead of the gather's own records now and the rest in what pieces are left later;
    without room the gather fetches its own records alone."""
    _, url = _store(http_folder)
    at = [0]
    with Dense.open(url, storage_options={"cache_dir": str(tmp_path / "c"), "cache_bytes": 8 << 20}) as ds:
        handle = _sequential(ds, at)
        mirror, room = ds._remote, [False]
        _optional_room(mirror._budget, room)  # a gather's own records are always admitted
        mirror._plan_ahead(handle)  # steps 0-3 (half of 8 MiB): no room, deferred
        _settle(mirror)
        assert ds.remote_stats()["requests"] == 0
        assert [recs.shape[0] for recs in handle.deferred_records()] == [4 * BATCH]
        room[0] = room_for_it
        mirror.ensure(np.array([1, 2], np.uint64))  # a gather's fetch, two records of step 0
        assert ds.remote_stats()["requests"] == 1
        assert ds.remote_stats()["bytes"] == (4 * BATCH if room_for_it else 2) * REC


def test_a_planned_read_of_many_records_is_not_cut_into_slices(http_folder, tmp_path):
    """A planned read of more records than a prefetch takes at once (PREFETCH_RECORDS_MAX)
    is fetched whole: its requests join across what were the slices' edges (it was fetched in
    slices of 16,384 record numbers, each ending its requests: a store of small records made
    a GET per slice)."""
    from zrecord import _remote

    n = 3 * _remote.PREFETCH_RECORDS_MAX + 100  # 49,252 records of 64 bytes: 3 MiB
    with Dense.create(http_folder.path / "small", np.uint8, (64,), codec="raw", data_shards=1) as w:
        w.append(np.zeros((n, 64), np.uint8))
    url = http_folder.url_for("small")
    steps = 8
    opts = {"cache_dir": str(tmp_path / "c"), "cache_bytes": 8 << 20}
    with Dense.open(url, storage_options=opts) as ds:
        batch = -(-n // steps)
        handle = ds.foresee(lambda step: np.arange(step * batch, min(n, (step + 1) * batch)), lambda: 0)
        assert handle is not None
        ds._remote._plan_ahead(handle)  # half the budget (4 MiB) holds every record: one segment
        _settle(ds._remote)
        assert ds.remote_stats()["requests"] == 1
        assert ds.remote_stats()["bytes"] == n * 64


def test_a_future_that_reads_none_of_the_stores_records_is_no_error(http_folder, tmp_path):
    """A reader told a future of steps that read none of its records (a dataset's part whose
    records no step of the horizon reads) draws an empty horizon and gathers as before."""
    _, url = _store(http_folder)
    with Dense.open(url, storage_options={"cache_dir": str(tmp_path / "c"), "cache_bytes": 8 << 20}) as ds:
        handle = ds.foresee(lambda step: np.array([N + step], np.int64), lambda: 0)
        assert handle is not None
        with Dense.open(http_folder.path / "s") as local:
            np.testing.assert_array_equal(ds[np.array([3, 5])], local[np.array([3, 5])])
        handle.close()


def test_a_gather_waits_for_a_get_under_way_that_writes_its_records(http_folder, tmp_path):
    """A record that a GET under way writes (asked for, or read through its gaps by a joined
    prefetch) is waited for, not asked for again: two readers' requests joined through each
    other's records fetched 12% of a photograph epoch twice."""
    import threading

    folder, url = _store(http_folder)
    with Dense.open(url, storage_options={"cache_dir": str(tmp_path / "c"), "gap_bytes": 1 << 20}) as ds:
        mirror = ds._remote
        ds[np.array([0])]  # the mirror made, one record fetched
        asked = np.array([8, 15], np.uint64)  # joined through 9..14
        runs = mirror._runs(mirror._missing(mirror._locate(asked)))
        assert len(runs) == 1
        flight = mirror._take_off(runs)
        got = {}
        reader = threading.Thread(target=lambda: got.setdefault("x", ds[np.array([11])]))
        reader.start()
        reader.join(0.5)
        assert reader.is_alive()  # waiting for the GET under way
        mirror._submit(mirror._fetch_runs(runs)).result()
        mirror._land(flight)
        reader.join(10)
        assert not reader.is_alive()
        assert ds.remote_stats()["requests"] == 2  # record 0, then 8..15 once
        with Dense.open(folder) as local:
            np.testing.assert_array_equal(got["x"], local[np.array([11])])


def test_a_get_under_way_covers_only_the_bytes_it_writes_not_the_numbers_between(http_folder, tmp_path):
    """Records are numbered across shards in runs (a writer's choice), so a GET of one
    shard's bytes does not write the records of another shard numbered between its own: a
    gather of those does not wait for it (they were skipped by prefetches before, which cost
    the token corpus 8x the GETs of its blocks)."""
    import threading

    n, rec = 4096, 1024
    data = np.arange(n * rec, dtype=np.uint64).astype(np.uint8).reshape(n, rec)
    with Dense.create(http_folder.path / "striped", np.uint8, (rec,), codec="raw", data_shards=2) as w:
        for k in range(0, n, 512):  # each append is split into one run per shard
            w.append(data[k:k + 512])
    with Dense.open(http_folder.url_for("striped"), storage_options={"cache_dir": str(tmp_path / "c")}) as ds:
        mirror = ds._remote
        ds[np.array([0])]  # the mirror made
        where = mirror._locate(np.arange(n, dtype=np.uint64))
        shard0 = np.flatnonzero(where.shards == 0)
        between = np.flatnonzero((where.shards == 1) & (np.arange(n) > shard0[1]) & (np.arange(n) < shard0[-1]))
        assert between.shape[0], "the writer put no record of shard 1 between two of shard 0"
        runs = mirror._runs(mirror._missing(mirror._locate(shard0[1:].astype(np.uint64))), 1 << 30)
        flight = mirror._take_off(runs)
        try:
            got = {}
            reader = threading.Thread(target=lambda: got.setdefault("x", ds[np.array([between[0]])]))
            reader.start()
            reader.join(10)
            assert not reader.is_alive()  # not held up by a GET of the other shard
            np.testing.assert_array_equal(got["x"], data[[between[0]]])
        finally:
            mirror._land(flight)


def test_a_gather_that_must_fetch_evicts_a_step_already_read_whose_hint_lags(http_folder, tmp_path,
                                                                              monkeypatch):
    """A loader's progress counts delivered steps, so while the gather of step k runs, the
    chunks of step k - 1 (read already) are still foreseen before it. A gather that must fetch
    and has no other gather in flight beside it evicts them (Belady's order over everything
    foreseen) rather than taking the mirror past its budget: with planned reads admitted into
    the rest, the photographs' mirror reached 64-68 MiB in a 57.4 MiB budget."""
    from zrecord_testkit.caching import record_peaks

    _, url = _store(http_folder)
    at = [0]
    batch, budget = 24, 5 << 20  # steps of 3 MiB: one read, a part of the next planned
    peaks = record_peaks(monkeypatch, _mirror_cache.Budget)
    order = np.random.default_rng(3).permutation(N)
    steps = N // batch
    with Dense.open(url, storage_options={"cache_dir": str(tmp_path / "c"), "cache_bytes": budget,
                                          "gap_bytes": 0}) as ds:
        assert ds.foresee(lambda step: order[(step % steps) * batch:(step % steps + 1) * batch],
                          lambda: at[0]) is not None
        for step in range(2 * steps):
            at[0] = max(0, step - 1)  # the step before is being delivered
            k = step % steps
            assert ds[order[k * batch:(k + 1) * batch]].shape == (batch, REC)
            _settle(ds._remote)
    assert peaks and max(peaks) <= budget, (max(peaks), budget)


def test_a_planned_read_admits_first_the_runs_read_first(http_folder, tmp_path):
    """Where the budget admits only part of a planned read, it admits the runs whose records
    are read soonest (by their chunks' hints), not those that lie first in the file: the rest
    waits for the room that reading frees (photographs in BLOCKS order through 128 MiB: 218
    GETs an epoch against 232-239 in file order)."""
    _, url = _store(http_folder)
    at = [0]

    def batch_of(step):
        if step >= 16:
            raise ValueError("the end of the run")
        return np.arange(160, 168) if step == 0 else np.arange(8 * step - 8, 8 * step)

    opts = {"cache_dir": str(tmp_path / "c"), "cache_bytes": 8 << 20, "gap_bytes": 0}
    with Dense.open(url, storage_options=opts) as ds:
        handle = ds.foresee(batch_of, lambda: at[0])
        assert handle is not None
        mirror, budget = ds._remote, ds._remote._budget
        handle.catch_up()  # the hints of the steps ahead
        real = budget.reserve
        budget.reserve = lambda incoming, *a, **kw: real(min(incoming, 1 << 20), *a, **kw)
        mirror._plan_ahead(handle)  # steps 0-3: records 160-167, then 0-23 (2 runs)
        _settle(mirror)
        assert ds.remote_stats()["requests"] == 1
        held = mirror._missing(mirror._locate(np.arange(N, dtype=np.uint64))).recs
        assert not np.isin(np.arange(160, 168), held).any()  # step 0's records: fetched
        assert np.isin(np.arange(0, 24), held).all()  # later steps': deferred


def test_a_planned_segment_takes_whole_the_runs_its_steps_read_part_of(http_folder, tmp_path):
    """A segment that ends inside a window of blocks read in a shuffled order (loaderx's
    BLOCKS) takes with it the rest of each block it reads some records of, from the steps
    after it: each block is fetched whole, in one GET, where it was fetched in the pieces that
    each segment's own records left (photographs in 8 MiB blocks: 1.3-1.6x the GETs of whole
    blocks). A run read in order (a sequential future) is not taken early."""
    _, url = _store(http_folder)
    block = 8  # records: 1 MiB, one request at most
    blocks = np.random.default_rng(3).permutation(N // block)
    window = 4  # blocks: 32 records, 4 steps

    def batch_of(step):
        w = step // window
        if w >= len(blocks) // window:
            raise ValueError("the end of the run")
        recs = (blocks[w * window:(w + 1) * window, None] * block + np.arange(block)).ravel()
        order = np.random.default_rng([5, w]).permutation(recs)
        return order[(step % window) * BATCH:(step % window + 1) * BATCH]

    at = [0]
    # Half the budget, a segment, is 6 steps: the first ends in the middle of window 1.
    opts = {"cache_dir": str(tmp_path / "c"), "cache_bytes": 12 << 20,
            "request_bytes_max": block * REC}
    with Dense.open(url, storage_options=opts) as ds:
        handle = ds.foresee(batch_of, lambda: at[0])
        assert handle is not None
        (recs, until), = handle.plan(12 << 20)
        assert until == 6
        wanted = np.unique(np.concatenate([batch_of(s) for s in range(6)]))
        taken = np.unique(recs // block)
        # Whole blocks: every one the segment reads some records of (and a block of window 2
        # read right after it may come too, where it lies beside one of window 1's: its run
        # of consecutive records holds both).
        assert recs.tolist() == (taken[:, None] * block + np.arange(block)).ravel().tolist()
        assert np.isin(np.unique(wanted // block), taken).all()
        assert np.isin(recs, np.concatenate([batch_of(s) for s in range(12)])).all()
        at[0] = -1  # this foresight is done; the mirror's gathers below have their own
        for step in range(12):
            at[0] = step
            if step == 0:
                handle = ds.foresee(batch_of, lambda: at[0])
            got = ds[np.sort(batch_of(step))]
            assert got.shape == (BATCH, REC)
            _settle(ds._remote)
        stats = ds.remote_stats()
        # Every GET was one whole block, and every block read was fetched.
        assert stats["bytes"] == stats["requests"] * block * REC
        assert stats["requests"] >= 3 * window
    # In order: the segment is its own steps' records, nothing more.
    with Dense.open(url, storage_options={"cache_dir": str(tmp_path / "d"), "cache_bytes": 12 << 20}) as ds:
        handle = _sequential(ds, [0])
        (recs, until), = handle.plan(12 << 20)
        assert (recs.tolist(), until) == (list(range(6 * BATCH)), 6)


def test_a_progress_that_drops_its_loader_does_not_deadlock_the_foresight(http_folder):
    """Found in review. Was: the foresight called the caller's progress() under its own lock;
    a progress() that dropped the last reference to its loader (another thread had let go of
    it) ran the loader's finalizer there, which closes the foresight, which waited for that
    lock: the gather hung for good."""
    import threading
    import weakref

    class Loader:
        pass

    _, url = _store(http_folder)
    ds = Dense.open(url, storage_options={"cache_bytes": N * REC // 2})
    box = [Loader()]

    def progress():
        loader = box.pop() if box else None  # the last reference, dropped at return
        del loader
        return 0

    handle = ds.foresee(lambda step: np.arange(step * BATCH, (step + 1) * BATCH) % N, progress)
    assert handle is not None
    weakref.finalize(box[0], handle.close)
    done = threading.Event()

    def gather():
        ds[np.arange(BATCH)]
        done.set()

    threading.Thread(target=gather, daemon=True).start()
    # On a hang the store is left open: closing it would wait for the hung gather.
    assert done.wait(30), "the gather hung in the foresight"
    ds.close()


def test_the_horizon_stops_growing_at_two_epochs(http_folder):
    """Found in review (a leak campaign). Was: the horizon doubled at every draw up to 2^21
    record draws whatever the store's size: over a store of 192 records it reached thousands
    of epochs ahead, and over a 20,000-record one 105 epochs and about 200 MiB of keys and
    their temporaries, held for the loader's life."""
    _, url = _store(http_folder)
    with Dense.open(url, storage_options={"cache_bytes": N * REC // 2}) as ds:
        at = [0]
        handle = _sequential(ds, at)
        (foresight,) = ds._remote._foresights
        for _ in range(12):
            foresight.catch_up()
            assert (foresight._end - foresight._base) * BATCH <= max(2 * N, 1 << 14)
            at[0] = (foresight._base + foresight._end + 1) // 2  # past the middle: drawn again
        handle.close()
