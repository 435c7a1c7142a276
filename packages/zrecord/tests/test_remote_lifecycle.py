"""The life of a store opened by URL beyond its reads: URLs refused before any request, a close
that races a gather, a process forked after reads, and readers of one mirror whose evictions
punch records out under each other. Each test forces its window by hooks and events, not by
timing."""

from __future__ import annotations

import os
import queue
import threading
import time

import numpy as np
import pytest

from zrecord import Dense, _mirror_cache, open_store, publish
from zrecord._objects import Client, storage_settings
from zrecord.cli import main
from zrecord.errors import ClosedError, RemoteError

pytestmark = pytest.mark.remote

ORDER = ("index.zri", "index.zrs", "data-000.zrd", "header.zrh")
# Records of 20,000 bytes: not a divisor of CHUNK_BYTES, so some records lie in two chunks.
RECORD_BYTES = 20_000
RECORDS = 320  # 6.4 MB: more than the smallest budget (4 MiB), which the eviction tests use
# The chunk of the mirrors of these tests, which pick the chunks of a record by hand: 256 KiB
# (stores of this size have 4 KiB chunks: chunk_bytes_for).
CHUNK_BYTES = 256 << 10


@pytest.fixture(autouse=True)
def _chunks_of_256_kib(monkeypatch):
    monkeypatch.setattr(_mirror_cache, "CHUNK_BYTES_MIN", CHUNK_BYTES)
    # One chunk a punch: the punch tests stop an eviction between the punches of two chunks.
    monkeypatch.setattr(_mirror_cache, "PUNCH_RUN_BYTES", CHUNK_BYTES)


@pytest.fixture(scope="module")
def straddling(tmp_path_factory):
    """A Dense raw store of one shard whose records straddle chunk boundaries. Without index
    parts: readers with and without a budget then share one mirror (a budget reads the index
    whole, so a store with parts has a mirror per path: decision 0008)."""
    root = tmp_path_factory.mktemp("remote-lifecycle")
    data = np.random.default_rng(11).integers(0, 255, (RECORDS, RECORD_BYTES), dtype=np.uint8)
    with Dense.create(root / "s", np.uint8, (RECORD_BYTES,), codec="raw", data_shards=1, index_cache=None,
                      index_parts=False) as w:
        w.append(data)
    return root / "s", data


@pytest.fixture(scope="module")
def straddling_parts(straddling):
    """The same records in a store with index parts: its mirror reads the index by part."""
    folder, data = straddling
    with Dense.create(folder.parent / "p", np.uint8, (RECORD_BYTES,), codec="raw", data_shards=1,
                      index_cache=None, index_parts=True) as w:
        w.append(data)
    return folder.parent / "p", data


def _serve(http_folder, folder, name: str = "s") -> str:
    for part in ORDER:
        if (folder / part).exists():  # index.zrs: only in a store with index parts
            http_folder.write(f"{name}/{part}", (folder / part).read_bytes())
    return http_folder.url_for(name)


# --- [R2] 8: a URL without a bucket or host ------------------------------------------------


@pytest.mark.parametrize("url", ["s3://", "s3:///prefix", "http://", "https://:443/x"])
def test_a_url_without_a_bucket_or_host_is_a_value_error_naming_it(url):
    """Was: "s3://" raised pyo3's PanicException (a BaseException) from inside obstore."""
    with pytest.raises(ValueError, match="names no (bucket|host)") as info:
        open_store(url, storage_options={"retries": 0})
    assert repr(url) in str(info.value)
    with pytest.raises(ValueError, match="names no (bucket|host)"):
        Dense.open(url, storage_options={"retries": 0})


def test_a_url_with_a_secret_and_no_host_is_named_without_the_secret():
    with pytest.raises(ValueError, match="names no host") as info:
        open_store("https://user:s3cret@/x?token=s3cret2")
    assert "s3cret" not in str(info.value) and "'https:///x'" in str(info.value)


def test_publish_to_a_url_without_a_bucket_is_a_value_error(straddling, capsys):
    folder, _ = straddling
    with pytest.raises(ValueError, match=r"names no bucket"):
        publish(folder, "s3://", storage_options={"retries": 0})
    assert main(["publish", str(folder), "s3://", "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "zrecord publish: " in err and "names no bucket" in err


@pytest.mark.parametrize("url", ["s3://", "http://"])
def test_the_cli_says_one_line_for_a_url_without_a_bucket_or_host(url, capsys):
    assert main(["info", url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("zrecord info: ") and "Traceback" not in err


def test_a_panic_in_the_client_is_a_remote_error_naming_the_url():
    """The safety net: whatever else makes obstore panic reaches the caller as a RemoteError
    (an Exception) naming the URL, not as a BaseException."""
    from obstore.store import HTTPStore

    client = Client("http://127.0.0.1:9/store", storage_settings({"retries": 0}))
    # What "s3://" used to become: obstore panics on it. Both of the client's stores: its
    # first request goes without retries (Client._request).
    client.store = client._first = HTTPStore.from_url("s3:")
    with pytest.raises(RemoteError, match=r"http://127.0.0.1:9/store/header.zrh: .*panic") as info:
        client.get("header.zrh")
    assert isinstance(info.value, Exception)


# --- [R2] 12: records punched out under a reader by other readers' evictions ----------------


def _straddler(ds) -> tuple[int, int]:
    """A record of `ds` that lies in two chunks, and the first of them."""
    places = ds._remote._located(np.arange(len(ds), dtype=np.uint64))
    starts = places.offsets.astype(np.int64)
    ends = starts + places.sizes.astype(np.int64) - 1
    rec = int(np.flatnonzero(starts // CHUNK_BYTES != ends // CHUNK_BYTES)[2])
    return rec, int(starts[rec] // CHUNK_BYTES)


def _before_gathers(monkeypatch, ds, action) -> list[int]:
    """Run `action(k)` before the k-th gather of `ds` (k from 1) from now on; the list returned
    holds the gathers made so far."""
    real = ds._gather
    calls: list[int] = []

    def gather(idx):
        calls.append(len(calls) + 1)
        action(len(calls))
        return real(idx)

    monkeypatch.setattr(ds, "_gather", gather)
    return calls


def _age(budget, oldest: list[int]) -> None:
    """Make every chunk that holds something read a while ago, `oldest` (in order) before all
    the others: the next eviction takes them first."""
    now = time.time_ns() - 1_000_000_000
    held = np.array(budget._stamps) != 0
    budget._stamps[held] = now
    for k, c in enumerate(oldest):
        budget._stamps[c] = k + 1


def test_a_record_in_two_chunks_of_one_eviction_read_between_their_punches(http_folder, straddling,
                                                                           tmp_path, monkeypatch):
    """Another reader's eviction punches the two chunks of a record one after the other, and
    this reader reads the record between the punches: the first punch fails its gather, the
    refetch is punched again by the second. Was: ChecksumError for an intact record (one count
    for the eviction's whole batch, taken before this read began, so no second refetch)."""
    folder, data = straddling
    url = _serve(http_folder, folder)
    opts = {"cache_dir": str(tmp_path / "c"), "cache_bytes": _mirror_cache.BUDGET_MIN_BYTES}
    with Dense.open(url, storage_options=opts) as ds, Dense.open(url, storage_options=opts) as other:
        rec, first = _straddler(ds)
        ds._remote.ensure(np.arange(RECORDS))  # the whole store: over the budget, not evicted yet
        _age(other._remote._budget, [first, first + 1])

        punches: queue.Queue[object] = queue.Queue()
        go = threading.Semaphore(0)
        free = threading.Event()
        failures: list[BaseException] = []

        def evict() -> None:
            try:
                other._remote._budget.check()
            except BaseException as exc:  # noqa: BLE001 - reported below
                failures.append(exc)
            finally:
                punches.put("done")

        thread = threading.Thread(target=evict)
        real_punch = _mirror_cache._punch

        def gated(fd: int, offset: int, length: int) -> None:
            # The evicting thread stops before each punch until the test lets it go on.
            if threading.current_thread() is thread and not free.is_set():
                punches.put(offset // CHUNK_BYTES)
                assert go.acquire(timeout=20), "the test never let the punch go on"
            real_punch(fd, offset, length)

        monkeypatch.setattr(_mirror_cache, "_punch", gated)
        thread.start()
        try:
            assert punches.get(timeout=20) == first  # stopped before punching the record's first chunk
            def punch_once_more(k: int) -> None:
                # Before each of the first two gathers, the evictor punches once more: the
                # record's first chunk, then the next chunk it chose; then it goes on alone.
                if k > 2:
                    free.set()
                go.release()
                if k <= 2:
                    punches.get(timeout=20)

            calls = _before_gathers(monkeypatch, ds, punch_once_more)
            np.testing.assert_array_equal(ds[[rec]][0], data[rec])
            assert len(calls) >= 2  # the first punch did fail a gather
        finally:
            free.set()
            for _ in range(64):
                go.release()
            thread.join(timeout=20)
        assert not failures, failures
        assert other.remote_stats()["evictions"] > 0


def test_readers_with_and_without_a_budget_do_not_share_a_mirror(http_folder, straddling, tmp_path):
    """A reader without a budget fills its mirror whole; one with a budget in the same cache
    folder keeps within it. Was: one mirror for both (a store without index parts), whose bytes
    the reader without a budget had fetched unstamped, so that the budget could never evict
    them: the budgeted reader held the whole store, past its 4 MiB."""
    folder, data = straddling
    url = _serve(http_folder, folder)
    shared = {"cache_dir": str(tmp_path / "c")}
    budget = 4 << 20
    with Dense.open(url, storage_options=shared) as whole:
        np.testing.assert_array_equal(whole[np.arange(RECORDS)], data)
        with Dense.open(url, storage_options={**shared, "cache_bytes": budget}) as small:
            np.testing.assert_array_equal(small[np.arange(0, RECORDS, 3)][:4], data[0:12:3])
            assert small.remote_stats()["cache_bytes"] <= budget
            assert small.remote_stats()["requests"] > 0  # it did not read the other's mirror
    mirrors = [p for p in (tmp_path / "c").iterdir() if not p.name.startswith(".")]
    assert len(mirrors) == 2


def test_a_record_punched_out_under_its_read_again_and_again_is_sheltered_once_refetched(
        http_folder, straddling, tmp_path, monkeypatch):
    """Two readers sharing a budget too small for both: before each gather of this reader, the
    other fetches the whole store and evicts, and the record's chunk is the one it may take
    (foreseen, far ahead; everything else fetched and not read yet). Was: the record punched
    out under each of its refetches, then ChecksumError for an intact record after 8 tries."""
    folder, data = straddling
    url = _serve(http_folder, folder)
    opts = {"cache_dir": str(tmp_path / "c"), "cache_bytes": _mirror_cache.BUDGET_MIN_BYTES}
    with Dense.open(url, storage_options=opts) as ds, Dense.open(url, storage_options=opts) as other:
        rec = 7
        chunk = int(ds._remote._located(np.array([rec], np.uint64)).offsets[0]) // CHUNK_BYTES
        budget = other._remote._budget
        # A reader foresees the record's chunk far ahead: the one an eviction takes first.
        budget._hints[chunk] = time.time_ns() + 20 * 10**9

        def evict(k: int) -> None:
            other._remote.ensure(np.arange(RECORDS))
            budget.check()

        calls = _before_gathers(monkeypatch, ds, evict)
        np.testing.assert_array_equal(ds[[rec]][0], data[rec])
        assert 2 <= len(calls) <= 3  # punched once (or twice: the first fetch, the refetch)
        assert other.remote_stats()["evictions"] > 0


def test_readers_of_one_mirror_in_one_process_admit_their_fetches_together(http_folder, straddling,
                                                                           tmp_path):
    """Two readers of one budgeted mirror in one process: what one admitted for its fetches
    under way is room the other cannot take. Was: each counted only its own, and two loaders
    together held the mirror 15-47% past its budget."""
    folder, data = straddling
    url = _serve(http_folder, folder)
    opts = {"cache_dir": str(tmp_path / "c"), "cache_bytes": _mirror_cache.BUDGET_MIN_BYTES}
    with Dense.open(url, storage_options=opts) as a, Dense.open(url, storage_options=opts) as b:
        first, second = a._remote._budget, b._remote._budget
        room = first.budget - first.used()
        assert first.reserve(room - 4096, partial=True) == room - 4096
        assert second.reserve(1 << 20, partial=True) == 4096  # only what the first left
        first.release(room - 4096)
        assert second.reserve(1 << 20, partial=True) == 1 << 20
        second.release(4096 + (1 << 20))
        np.testing.assert_array_equal(b[[3, 1]], data[[3, 1]])
    assert _mirror_cache._admissions == {}  # gone with their readers


def test_close_waits_for_an_eviction_under_way_before_closing_what_it_punches(
        http_folder, straddling, tmp_path, monkeypatch):
    """close() while another thread's eviction is about to punch: the shard's descriptor must
    still be the shard's when the punch runs. Was: close() closed it under the eviction, whose
    punch then went to a closed descriptor, or to whatever file had been given its number."""
    folder, data = straddling
    url = _serve(http_folder, folder)
    opts = {"cache_dir": str(tmp_path / "c"), "cache_bytes": _mirror_cache.BUDGET_MIN_BYTES}
    ds = Dense.open(url, storage_options=opts)
    ds._remote.ensure(np.arange(RECORDS))  # past the budget (fetched, so not evicted yet)
    _age(ds._remote._budget, [])  # read a while ago: the next check evicts
    shard = os.fstat(ds._remote._fd(0))
    punching, go = threading.Event(), threading.Event()
    targets: list[tuple[int, int] | None] = []
    real_punch = _mirror_cache._punch

    def gated(fd: int, offset: int, length: int) -> None:
        punching.set()
        assert go.wait(timeout=20)
        try:
            st = os.fstat(fd)
            targets.append((st.st_dev, st.st_ino))
        except OSError:
            targets.append(None)
        real_punch(fd, offset, length)

    monkeypatch.setattr(_mirror_cache, "_punch", gated)
    budget = ds._remote._budget
    ended: list[BaseException | None] = []

    def evict() -> None:
        try:
            budget.check()
            ended.append(None)
        except ClosedError as exc:  # the rest of the eviction, after the punch: the store closed
            ended.append(exc)

    evicting = threading.Thread(target=evict)
    evicting.start()
    assert punching.wait(timeout=20)
    closing = threading.Thread(target=ds.close)
    closing.start()
    closing.join(timeout=0.5)
    assert closing.is_alive()  # waiting for the eviction under way
    go.set()
    evicting.join(timeout=20)
    closing.join(timeout=20)
    assert not closing.is_alive() and len(ended) == 1 and targets
    assert all(t == (shard.st_dev, shard.st_ino) for t in targets), targets


def test_close_wakes_a_gather_waiting_for_room(http_folder, straddling, tmp_path, monkeypatch):
    """A gather waiting in the budget's admission for another gather's room when the reader
    closes stops waiting at once, with ClosedError. Was: it went on waiting until its next look
    (every 0.5 s), as nothing woke it."""
    folder, _ = straddling
    url = _serve(http_folder, folder)
    monkeypatch.setattr(_mirror_cache, "ROOM_WAIT_S", 60.0)
    monkeypatch.setattr(_mirror_cache, "ROOM_POLL_S", 60.0)  # only a wake-up ends its wait
    opts = {"cache_dir": str(tmp_path / "c"), "cache_bytes": _mirror_cache.BUDGET_MIN_BYTES}
    ds = Dense.open(url, storage_options=opts)
    budget = ds._remote._budget
    room = budget.budget - budget.used()
    assert budget.reserve(room, hold=True) == room  # another gather holds all the room
    waited: list[float] = []

    def gather() -> None:
        began = time.monotonic()
        with pytest.raises(ClosedError):
            budget.reserve(8192, hold=True)
        waited.append(time.monotonic() - began)

    waiting = threading.Thread(target=gather)
    waiting.start()
    waiting.join(timeout=1.0)
    assert waiting.is_alive()  # waiting for room
    ds.close()
    waiting.join(timeout=20)
    assert not waiting.is_alive() and waited and waited[0] < 20, waited


# --- [R2] 11: a gather racing close() ------------------------------------------------------


def _held_fetches(monkeypatch) -> threading.Event:
    """Every ranged GET of this process waits until it is cancelled; the event is set once one
    has begun."""
    import asyncio

    begun = threading.Event()

    async def never(self, name, start, end, etag):
        begun.set()
        await asyncio.Event().wait()

    monkeypatch.setattr(Client, "get_range", never)
    return begun


def _in_thread(fn) -> tuple[threading.Thread, list[BaseException]]:
    """`fn()` in a thread of its own; the list gets what it raised."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - the test checks what it was
            raised.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, raised


@pytest.mark.parametrize("prefetched", [False, True])
def test_a_gather_whose_fetch_close_cancels_raises_closed_error(http_folder, straddling, monkeypatch,
                                                                 prefetched):
    """close() while a gather waits for its ranged GET, or for the prefetch that fetches its
    records. Was: concurrent.futures.CancelledError out of the gather."""
    folder, _ = straddling
    url = _serve(http_folder, folder)
    begun = _held_fetches(monkeypatch)
    ds = Dense.open(url)
    if prefetched:
        ds.prefetch([3, 4])
    thread, raised = _in_thread(lambda: ds[[3, 4]])
    assert begun.wait(timeout=20)
    ds.close()
    thread.join(timeout=20)
    assert not thread.is_alive(), "the gather still waits after close()"
    assert len(raised) == 1 and isinstance(raised[0], ClosedError), raised
    assert url in str(raised[0])


def test_gathers_in_a_loop_racing_close_end_in_closed_error(http_folder, straddling):
    """Gathers of records the mirror lacks, one after another in a thread, while the main
    thread closes the store: each run ends within a bounded time, with ClosedError."""
    folder, data = straddling
    url = _serve(http_folder, folder)
    for attempt in range(6):
        ds = Dense.open(url, storage_options={"gap_bytes": 0})
        rng = np.random.default_rng(attempt)
        started = threading.Event()

        def gather_forever(ds=ds, rng=rng, started=started) -> None:
            while True:
                idx = rng.integers(0, RECORDS, 4)
                np.testing.assert_array_equal(ds[idx], data[idx])
                started.set()

        thread, raised = _in_thread(gather_forever)
        assert started.wait(timeout=20)
        time.sleep(0.002 * attempt)  # close at different points of a gather
        ds.close()
        thread.join(timeout=20)
        assert not thread.is_alive(), "a gather still waits after close()"
        assert len(raised) == 1 and isinstance(raised[0], ClosedError), raised


def test_close_waits_for_a_large_get_written_off_the_event_loop(http_folder, straddling, monkeypatch):
    """A GET of at least WRITE_THREAD_BYTES is written to the mirror by a writer thread while
    the event loop goes on; close() cancels the fetch, but must not close the file under the
    write (its descriptor number could be reused by then): it returns after the write ends."""
    from zrecord import _remote

    folder, data = straddling
    url = _serve(http_folder, folder)
    monkeypatch.setattr(_remote, "WRITE_THREAD_BYTES", 1 << 20)
    real = _remote.pwrite_all
    writing, release = threading.Event(), threading.Event()
    written: list[tuple[int, bool]] = []

    def held(fd, payload, at):
        if len(payload) >= 1 << 20:  # the writer thread's
            writing.set()
            assert release.wait(timeout=20)
        real(fd, payload, at)
        written.append((len(payload), threading.current_thread().name.startswith("zrecord-mirror-write")))

    monkeypatch.setattr(_remote, "pwrite_all", held)
    ds = Dense.open(url, storage_options={"request_bytes_max": 8 << 20})
    np.testing.assert_array_equal(ds[[0]], data[[0]])  # a small GET: written on the loop
    ds.prefetch(np.arange(100, 200))  # one GET of 2 MB
    assert writing.wait(timeout=20)
    closing, _ = _in_thread(ds.close)
    closing.join(timeout=0.5)
    assert closing.is_alive(), "close() returned while a write to the mirror was under way"
    release.set()
    closing.join(timeout=20)
    assert not closing.is_alive()
    # (The index's bytes, written at open, come first.)
    assert written[-2:] == [(RECORD_BYTES, False), (100 * RECORD_BYTES, True)], written
    # The store reads whole afterwards (a new reader, with a private mirror of its own).
    with Dense.open(url) as again:
        np.testing.assert_array_equal(again[np.arange(100, 200)], data[100:200])


# --- [R2] 4: fork() after reads by URL ----------------------------------------------------


def _forked(fn, timeout_s: float = 20) -> tuple:
    """What `fn()` returned in a child forked now, as ("returned", value), or what it raised, as
    ("raised", class name, message); the test fails if the child is still busy after
    `timeout_s` (it is killed). The child never returns into pytest."""
    import pickle
    import select
    import signal

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            try:
                out: tuple = ("returned", fn())
            except BaseException as exc:  # noqa: BLE001 - the parent checks what it was
                out = ("raised", type(exc).__name__, str(exc))
            os.write(w, pickle.dumps(out))
        finally:
            os._exit(0)
    os.close(w)
    try:
        ready, _, _ = select.select([r], [], [], timeout_s)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            pytest.fail(f"the forked child was still busy after {timeout_s} s (a hang)")
        chunks = []
        while chunk := os.read(r, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    return pickle.loads(b"".join(chunks))


@pytest.mark.parametrize("store", ["straddling", "straddling_parts"])
def test_a_child_forked_after_reads_by_url_reads_what_the_mirror_holds_and_never_hangs(
        http_folder, store, request):
    """Was: the child's first fetch waited forever (on the parent's event loop, whose thread
    the child does not have; and obstore's client does not work in a child forked after it ran),
    and the child's close() removed the parent's private mirror. By part, the child also reads
    through the index blocks its parent judged, and fails clearly on a record whose index part
    it would have to fetch."""
    folder, data = request.getfixturevalue(store)
    url = _serve(http_folder, folder)
    ds = Dense.open(url)
    held = np.arange(10)
    np.testing.assert_array_equal(ds[held], data[held])

    def child():
        same = bool(np.array_equal(ds[held], data[held]))  # the mirror's records: no request
        outcomes = []
        for fetch in (lambda: ds[[200, 201]], lambda: Dense.open(url)):
            try:
                fetch()
                outcomes.append("fetched")
            except RemoteError as exc:
                outcomes.append(str(exc))
        ds.prefetch([300])  # a prefetch that cannot fetch says nothing
        ds.close()
        return same, outcomes

    result = _forked(child)
    assert result[0] == "returned", result
    same, outcomes = result[1]
    assert same
    for said in outcomes:
        assert "forked" in said and "'spawn'" in said and url in said, said
    # The parent's private mirror, its event loop and its client are as they were.
    assert os.path.isdir(os.path.join(ds._remote.root, "store"))
    idx = np.array([200, 201, 300])
    np.testing.assert_array_equal(ds[idx], data[idx])
    ds.close()


def test_a_child_forked_while_a_prefetch_is_under_way_never_waits_for_it(http_folder, straddling,
                                                                         monkeypatch):
    """Was: a gather in the child of records the parent's prefetch was fetching waited forever
    for that prefetch, which runs in the parent only."""
    import asyncio

    folder, data = straddling
    url = _serve(http_folder, folder)
    parent = os.getpid()
    release = threading.Event()
    begun = threading.Event()
    real_get_range = Client.get_range

    async def held_in_the_parent(self, name, start, end, etag):
        # In the parent, each ranged GET waits until the test releases it (30 s at most).
        if os.getpid() == parent:
            begun.set()
            until = time.monotonic() + 30
            while not release.is_set() and time.monotonic() < until:
                await asyncio.sleep(0.005)
        return await real_get_range(self, name, start, end, etag)

    monkeypatch.setattr(Client, "get_range", held_in_the_parent)
    with Dense.open(url, storage_options={"gap_bytes": 0}) as ds:
        release.set()
        ds[[0]]
        release.clear()
        begun.clear()
        ds.prefetch([100, 101])
        assert begun.wait(timeout=20)

        def child():
            first = bool(np.array_equal(ds[[0]], data[[0]]))
            try:
                ds[[100]]
                return first, "fetched"
            except RemoteError as exc:
                return first, str(exc)

        result = _forked(child)
        release.set()
        assert result[0] == "returned", result
        assert result[1][0] and "forked" in result[1][1], result
        np.testing.assert_array_equal(ds[[100, 101]], data[[100, 101]])


def test_a_budget_holds_at_its_peak_with_prefetch(http_folder, tmp_path, monkeypatch):
    """[O3] point 4: the mirror's bytes on disk, sampled after every write of a fetch (not
    after the trim), never exceed cache_bytes while random batches are read with the next one
    prefetched, as the DataLoader does. Was: the budget was trimmed after each fetch only, and a
    prefetch fetched up to 64 MiB whatever the budget (here a 4 MiB budget reached 4.5 MiB)."""
    from zrecord_testkit.caching import record_peaks

    folder = tmp_path / "big"
    with Dense.create(folder, np.uint8, (8192,), codec="raw", data_shards=1) as w:
        w.append(np.random.default_rng(0).integers(0, 255, (4096, 8192), dtype=np.uint8))
    url = _serve(http_folder, folder)
    budget = _mirror_cache.BUDGET_MIN_BYTES
    peaks = record_peaks(monkeypatch, _mirror_cache.Budget)
    rng = np.random.default_rng(1)
    batches = [np.sort(rng.choice(4096, 48, replace=False)) for _ in range(30)]
    opts = {"cache_dir": str(tmp_path / "c"), "cache_bytes": budget, "gap_bytes": 0}
    with Dense.open(url, storage_options=opts) as ds:
        for k, idx in enumerate(batches):
            if k + 1 < len(batches):
                ds.prefetch(batches[k + 1])
            got = ds[idx]
            assert int(got[0, 0]) == int(Dense.open(folder)[int(idx[0])][0])
        stats = ds.remote_stats()
    assert peaks and max(peaks) <= budget, (max(peaks), budget)
    assert stats["evictions"] > 0


def _targets(fds: str, names: list[str]) -> list[str]:
    """What descriptors `names` of folder `fds` point at (a failure's message)."""
    out = []
    for name in names:
        try:
            out.append(f"{name} -> {os.readlink(os.path.join(fds, name))}")
        except OSError:
            out.append(f"{name} -> ?")
    return out


def test_opening_a_store_by_url_as_the_other_kind_releases_what_it_opened(http_folder, straddling):
    """Was: KindMismatchError left the mirror open (its files, deleted, held by descriptors
    that nothing closed, and its fetch thread): about 10 descriptors leaked per try."""
    from zrecord import Ragged
    from zrecord.errors import KindMismatchError

    folder, _ = straddling
    url = _serve(http_folder, folder)
    with pytest.raises(KindMismatchError):  # the first try: whatever is opened once for good
        Ragged.open(url)
    fds = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"
    before = len(os.listdir(fds))
    kept = []  # the errors, kept as a caller's log would keep them (their tracebacks too)
    for _ in range(5):
        with pytest.raises(KindMismatchError, match="is a Dense store; open it with Dense.open") as info:
            Ragged.open(url)
        kept.append(info.value)
    # About 50 before; a connection or two of a client may still be closing.
    assert len(os.listdir(fds)) < before + 5


@pytest.mark.parametrize("options", [None, {"cache_bytes": 8 << 20}])
def test_a_reader_by_url_dropped_without_close_releases_its_thread_files_and_mirror(
        http_folder, straddling, tmp_path, monkeypatch, options):
    """Was: the event loop's thread held the mirror, so a reader dropped unclosed was never
    collected: its 'zrecord-fetch' thread, descriptors and private mirror in TMPDIR stayed
    until the process ended, one set per reader; then, with a budget, its lru.u64 descriptor
    (the budget's) still stayed."""
    import gc
    import tempfile

    folder, data = straddling
    url = _serve(http_folder, folder)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    fds = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"

    def fetch_threads() -> int:
        return sum(t.name == "zrecord-fetch" for t in threading.enumerate())

    def read_and_drop(i: int) -> None:
        store = open_store(url, storage_options=options)
        np.testing.assert_array_equal(store[[i]][0], data[i])

    read_and_drop(0)  # what the object storage client makes once per process
    gc.collect()
    # The dropped reader's thread ends on its own time (under load, after this line ran).
    deadline = time.monotonic() + 10
    while fetch_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    threads, before = fetch_threads(), len(os.listdir(fds))
    assert threads == 0
    for i in range(4):
        read_and_drop(i)
    gc.collect()
    # The client's connections close on its own runtime's threads: waited for, as the threads.
    deadline = time.monotonic() + 10
    while (fetch_threads() > threads or len(os.listdir(fds)) > before + 1) \
            and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fetch_threads() == threads
    left = os.listdir(fds)
    assert len(left) <= before + 1, _targets(fds, left)
    assert [p for p in os.listdir(tmp_path) if not p.endswith(".lock")] == []


@pytest.mark.parametrize("answered", [False, True])
def test_a_request_racing_the_clients_close_ends_with_what_it_began_with(http_folder, answered):
    """Found in review. Was: close() between a request's closed check and its use of the
    store made it fail with obstore's "Expected an object store instance, got None"."""
    http_folder.write("o", b"x" * 10)
    client = Client(http_folder.url_for(""), storage_settings({"retries": 0}), answered=answered)
    counted = client.count
    in_request = threading.Event()

    def slow_count(**kw):  # the window between the check and the request, held open
        counted(**kw)
        in_request.set()
        time.sleep(0.2)

    client.count = slow_count
    out: list[object] = []
    worker = threading.Thread(target=lambda: out.append(client.head("o")))
    worker.start()
    in_request.wait(5)
    client.close()
    worker.join()
    assert len(out) == 1 and out[0][0] == 10  # type: ignore[index]
    with pytest.raises(ClosedError, match="the store was closed"):
        client.head("o")
