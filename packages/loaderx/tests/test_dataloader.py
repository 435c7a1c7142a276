"""DataLoader: step order, exact resume, bounded prefetch, errors, threads, stats."""

from __future__ import annotations

import gc
import json
import threading
import time
import weakref

import numpy as np
import pytest

from loaderx.dataloader import DataLoader, LoaderClosedError
from loaderx.sampler import Sampler
from loaderx.zrecord import ClosedError, Dense, Ragged

Mode = Sampler.Mode
N = 500


@pytest.fixture
def streams(tmp_path):
    x = np.arange(N * 6, dtype=np.float32).reshape(N, 2, 3)
    y = np.arange(N, dtype=np.int64)
    with Dense.create(tmp_path / "x", np.float32, (2, 3), codec="zstd") as w:
        w.append(x)
    with Dense.create(tmp_path / "y", np.int64, (), codec="raw") as w:
        w.append(y)
    with Ragged.create(tmp_path / "t", np.int32, 1, codec="zstd") as w:
        w.append(np.full(i % 5, i, np.int32) for i in range(N))
    opened = {"x": Dense.open(tmp_path / "x"), "y": Dense.open(tmp_path / "y"),
              "t": Ragged.open(tmp_path / "t")}
    yield opened
    for s in opened.values():
        s.close()


def loader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("loaderx")]


def test_batches_are_index_aligned_dicts(streams):
    s = Sampler(N, 16, Mode.CYCLIC, seed=1)
    expect = Sampler(N, 16, Mode.CYCLIC, seed=1)
    with DataLoader(streams, s) as loader:
        for _ in range(5):
            batch = next(loader)
            idx = expect.next()
            assert set(batch) == {"x", "y", "t"}
            assert batch["x"].shape == (16, 2, 3)
            np.testing.assert_array_equal(batch["y"], idx)
            np.testing.assert_array_equal(batch["x"][:, 0, 0], idx * 6)
            assert isinstance(batch["t"], list)
            assert [len(r) for r in batch["t"]] == [int(i) % 5 for i in idx]


def test_delivery_is_in_step_order_under_a_randomly_sleeping_transform(streams):
    rng = np.random.default_rng(0)
    delays = rng.uniform(0, 0.01, size=200)

    def transform(batch):
        step = int(batch["y"][0])  # SEQUENTIAL with batch 1: the record is the step (mod N)
        time.sleep(delays[step % 200])
        return step

    with DataLoader({"y": streams["y"]}, Sampler(N, 1, Mode.SEQUENTIAL), transform,
                    workers=8, prefetch=8) as loader:
        got = [next(loader) for _ in range(120)]
        assert loader.last_step == 119 and loader.step == 120
    assert got == list(range(120))


def _blocks(mode: Mode) -> dict[str, int]:
    """The block settings that mode BLOCKS needs (none for the other modes)."""
    return {"block_records": 5, "window_blocks": 2} if mode is Mode.BLOCKS else {}


@pytest.mark.parametrize("mode", list(Mode))
def test_resume_at_random_steps_equals_the_uninterrupted_run(streams, mode):
    def run(loader, n):
        return [(b["y"].tolist(), [r.tolist() for r in b["t"]]) for b in
                (next(loader) for _ in range(n))]

    with DataLoader(streams, Sampler(N, 8, mode, seed=3, **_blocks(mode))) as loader:
        reference = run(loader, 60)
    rng = np.random.default_rng(1)
    for k in rng.integers(0, 60, 20):
        k = int(k)
        with DataLoader(streams, Sampler(N, 8, mode, seed=3, **_blocks(mode)), prefetch=3) as first:
            head = run(first, k)
            state = json.loads(json.dumps(first.state_dict()))  # survives a checkpoint file
        assert state["step"] == k
        with DataLoader(streams, Sampler(N, 8, mode, seed=3, **_blocks(mode)), state=state) as resumed:
            tail = run(resumed, 60 - k)
        assert head + tail == reference


def test_resume_after_repeated_resumes_and_load_state_dict(streams):
    with DataLoader(streams, Sampler(N, 4, Mode.IID, seed=5)) as loader:
        ref = [next(loader)["y"].tolist() for _ in range(31)]
    got = []
    state = None
    for chunk in (3, 7, 1, 9, 10):
        with DataLoader(streams, Sampler(N, 4, Mode.IID, seed=5), state=state) as loader:
            got += [next(loader)["y"].tolist() for _ in range(chunk)]
            state = loader.state_dict()
    assert got == ref[:30]
    with DataLoader(streams, Sampler(N, 4, Mode.IID, seed=5)) as loader:
        next(loader)
        loader.load_state_dict(state)  # in flight: steps 1..4, discarded
        assert next(loader)["y"].tolist() == ref[30]
        loader.load_state_dict({**state, "step": 12})
        assert next(loader)["y"].tolist() == ref[12]


def test_state_mismatch_is_a_clear_error(streams):
    with DataLoader(streams, Sampler(N, 4, Mode.IID, seed=5)) as loader:
        state = loader.state_dict()
    with pytest.raises(ValueError, match="seed saved 5 != current 6"):
        DataLoader(streams, Sampler(N, 4, Mode.IID, seed=6), state=state)
    with pytest.raises(ValueError, match="streams"):
        DataLoader({"x": streams["x"]}, Sampler(N, 4, Mode.IID, seed=5), state=state)
    with pytest.raises(ValueError, match="version"):
        DataLoader(streams, Sampler(N, 4, Mode.IID, seed=5), state={**state, "version": 99})


def test_prefetch_bounds_the_work_in_flight(streams):
    started = []
    release = threading.Event()

    def transform(batch):
        started.append(1)
        release.wait(5)
        return batch

    loader = DataLoader({"y": streams["y"]}, Sampler(N, 2, Mode.SEQUENTIAL), transform,
                        workers=8, prefetch=3)
    consumer = threading.Thread(target=lambda: [next(loader) for _ in range(2)])
    consumer.start()
    time.sleep(0.3)
    assert len(started) == 2        # prefetch - 1 steps in flight: the held batch counts
    release.set()
    consumer.join(5)
    time.sleep(0.1)
    assert len(started) <= 2 + 2    # delivered + in flight
    loader.close()


def test_transform_exception_reaches_the_consumer_with_its_traceback(streams):
    def transform(batch):
        if int(batch["y"][0]) == 6:
            raise KeyError("bad record")
        return batch

    loader = DataLoader({"y": streams["y"]}, Sampler(N, 2, Mode.SEQUENTIAL), transform)
    next(loader), next(loader), next(loader)
    with pytest.raises(KeyError, match="bad record") as info:
        next(loader)
    frames = [f.name for f in info.traceback]
    assert "transform" in frames
    assert loader.closed
    with pytest.raises(LoaderClosedError, match="after an error"):
        next(loader)
    assert not loader_threads()


def test_close_joins_every_thread_promptly_and_is_idempotent(streams):
    loader = DataLoader(streams, Sampler(N, 8, Mode.IID), workers=4)
    next(loader)
    assert loader_threads()
    time.sleep(0.05)
    t = time.perf_counter()
    loader.close()
    elapsed = time.perf_counter() - t
    assert elapsed < 0.1, f"idle close took {elapsed:.3f} s"
    assert not loader_threads()
    loader.close()
    with pytest.raises(LoaderClosedError):
        next(loader)


def test_dropping_the_loader_leaves_no_thread(streams):
    loader = DataLoader(streams, Sampler(N, 8, Mode.IID), workers=4)
    next(loader)
    del loader
    gc.collect()
    deadline = time.time() + 2
    while loader_threads() and time.time() < deadline:
        time.sleep(0.01)
    assert not loader_threads()


def test_closing_a_stream_under_a_running_loader_is_a_clear_error(tmp_path):
    x = np.zeros((2000, 256), np.uint8)
    with Dense.create(tmp_path / "x", np.uint8, (256,), codec="raw") as w:
        w.append(x)
    store = Dense.open(tmp_path / "x")
    loader = DataLoader({"x": store}, Sampler(2000, 64, Mode.IID), workers=4, prefetch=4)
    next(loader)
    store.close()
    with pytest.raises(ClosedError, match="closed"):
        for _ in range(10):
            next(loader)
    assert loader.closed and not loader_threads()


def test_streams_must_have_equal_lengths(streams, tmp_path):
    with Dense.create(tmp_path / "short", np.int8, (), codec="raw") as w:
        w.append(np.zeros(10, np.int8))
    with Dense.open(tmp_path / "short") as short:
        with pytest.raises(ValueError, match=r"x=500, short=10"):
            DataLoader({"x": streams["x"], "short": short}, Sampler(10, 2, Mode.IID))
    with pytest.raises(TypeError):
        DataLoader({}, Sampler(10, 2, Mode.IID))
    with pytest.raises(TypeError, match="next"):
        DataLoader(streams, [1, 2, 3])
    with pytest.raises(ValueError, match="draws from 1000 records"):
        DataLoader(streams, Sampler(1000, 2, Mode.IID))
    with pytest.raises(ValueError, match="workers"):
        DataLoader(streams, Sampler(N, 2, Mode.IID), workers=0)


def test_a_sampler_shorter_than_the_streams_is_refused_unless_subset_is_meant(streams):
    """[U3] 5: a Sampler built for a smaller store left the rest of the data unread without a
    word. It is refused, naming both lengths and the way out; with subset=True only the first
    records are read, as asked (also through TorchIterable's sampler form)."""
    short = Sampler(10, 5, Mode.SEQUENTIAL, passes=1)
    with pytest.raises(ValueError, match=r"first 10 records but the streams have 500, so "
                                         r"records 10\.\.499 would never be read.*subset=True"):
        DataLoader(streams, short)
    with DataLoader(streams, short, subset=True) as loader:
        got = np.concatenate([batch["x"] for batch in loader])
    np.testing.assert_array_equal(got, np.asarray(streams["x"][np.arange(10)]))
    with DataLoader(streams, Sampler(N, 5, Mode.IID)) as whole:  # the same length: fine
        next(whole)
    try:
        from loaderx.torch import TorchIterable
    except ImportError:
        return  # torch is not installed in this environment; the loader's check is above
    with pytest.raises(ValueError, match="subset=True"):
        TorchIterable(streams, Sampler(10, 5, Mode.SEQUENTIAL))
    fresh = Sampler(10, 5, Mode.SEQUENTIAL, passes=1)
    assert len(list(TorchIterable(streams, fresh, None, subset=True))) == 2


def test_duck_typed_streams_and_custom_sampler():
    class Reverse:
        """A custom sampler: ordinary NumPy code, no loaderx adapter."""

        def __init__(self):
            self.step = 0
            self.buf = np.empty(3, np.int64)

        def next(self):
            self.buf[:] = np.arange(3) + 3 * self.step
            self.step += 1
            return self.buf[::-1].copy()

    features = np.arange(40).reshape(20, 2)
    labels = np.arange(20) * 10
    with DataLoader({"f": features, "l": labels}, Reverse(), workers=2) as loader:
        b0, b1 = next(loader), next(loader)
    np.testing.assert_array_equal(b0["l"], [20, 10, 0])
    np.testing.assert_array_equal(b1["f"], features[[5, 4, 3]])


def test_streams_and_samplers_satisfy_the_protocols(streams):
    """The loader's seams are the protocols of loaderx.protocols: zrecord stores, arrays and
    Mix streams are Streams; Sampler and Mix are BatchSamplers; a list is neither."""
    from loaderx.protocols import BatchSampler, Stream
    from loaderx.sampler import Mix

    mix = Mix([{"y": streams["y"]}, {"y": np.arange(7)}], [1, 1], batch_size=4)
    for stream in (*streams.values(), np.zeros(3), *mix.streams.values()):
        assert isinstance(stream, Stream)
    assert isinstance(Sampler(N, 2, Mode.IID), BatchSampler) and isinstance(mix, BatchSampler)
    assert not isinstance([1, 2], BatchSampler) and not isinstance(3, Stream)


def test_wrong_streams_or_sampler_say_what_was_given_and_what_is_required(streams):
    sampler = Sampler(N, 2, Mode.IID)
    with pytest.raises(TypeError, match=r"non-empty dict .*Streams.*; got dict \{\}"):
        DataLoader({}, sampler)
    with pytest.raises(TypeError, match=r"got list \["):
        DataLoader([streams["x"]], sampler)  # a list of stores, not a dict
    with pytest.raises(TypeError, match=r"stream 'n' \(int\) has no __len__ and no "
                                        r"__getitem__: a Stream needs __len__ and batch"):
        DataLoader({"n": 5}, sampler)
    with pytest.raises(TypeError, match=r"stream 's' \(set\) has no __getitem__: a Stream"):
        DataLoader({"s": {1, 2}}, sampler)
    with pytest.raises(TypeError, match=r"stream 'z' \(ndarray\) has no usable __len__ "
                                        r"\(.*\): a Stream needs a length"):
        DataLoader({"z": np.array(3.0)}, sampler)  # a 0-d array has __len__ but no length
    with pytest.raises(TypeError, match=r"sampler must be a BatchSampler .*next\(\) method"
                                        r".*; got list \[1, 2, 3\]"):
        DataLoader(streams, [1, 2, 3])

    class NoNext:
        next = None  # an attribute that is not a method is not a sampler

    with pytest.raises(TypeError, match="got NoNext"):
        DataLoader(streams, NoNext())


def test_stats_show_where_the_time_goes(streams):
    def slow(batch):
        time.sleep(0.005)
        return batch

    with DataLoader(streams, Sampler(N, 8, Mode.IID), slow, workers=2) as loader:
        for _ in range(20):
            next(loader)
        stats = loader.stats()
    assert stats["batches"] == 20
    assert stats["transform_s"] >= 20 * 0.004
    assert stats["gather_s"] > 0 and stats["consumer_wait_s"] >= 0
    assert stats["batches_per_s"] > 0


def test_close_from_another_thread_always_gives_loader_closed_error(streams):
    """[R1] item 11: close() racing a consumer on another thread gave CancelledError or
    "cannot schedule new futures after shutdown" in about a fifth of the rounds.

    Each round closes the loader after a different short delay, so the close lands at every
    point of next(): while it submits, while it waits on a queued or running step, between
    steps. Every other round has a slow transform, so that the close often finds a step
    running. The consumer must see LoaderClosedError and nothing else, and no thread may remain.
    """
    rng = np.random.default_rng(11)
    outcomes: dict[str, int] = {}

    def slow(batch):
        time.sleep(0.0005)
        return batch

    for round_, delay in enumerate(rng.uniform(0, 0.003, 100)):
        loader = DataLoader({"y": streams["y"]}, Sampler(N, 4, Mode.IID),
                            slow if round_ % 2 else None, workers=2, prefetch=3)
        outcome: list[BaseException | None] = []

        def consume(loader=loader, outcome=outcome):
            try:
                for _ in range(10_000):
                    next(loader)
                outcome.append(None)  # never blocked by the close: finished cleanly
            except BaseException as exc:  # noqa: BLE001 - the test records whatever escapes
                outcome.append(exc)

        consumer = threading.Thread(target=consume)
        consumer.start()
        time.sleep(delay)
        loader.close()
        consumer.join(5)
        assert not consumer.is_alive()
        assert not loader_threads()
        (got,) = outcome
        assert got is None or isinstance(got, LoaderClosedError), repr(got)
        name = type(got).__name__
        outcomes[name] = outcomes.get(name, 0) + 1
    assert outcomes.get("LoaderClosedError", 0) > 0, outcomes


# -- evaluation passes ([U1] 1) ------------------------------------------------------------


@pytest.mark.parametrize("mode", [Mode.SEQUENTIAL, Mode.CYCLIC])
def test_one_pass_reads_every_record_once_then_stops(streams, mode):
    """The eval loop: `for batch in loader` ends after every record was read exactly once,
    with a final short batch; len() is the number of steps."""
    with DataLoader(streams, Sampler(N, 64, mode, seed=1, passes=1), workers=3) as loader:
        assert len(loader) == 8                            # ceil(500 / 64)
        batches = list(loader)
        assert len(batches) == 8
        assert [len(b["y"]) for b in batches] == [64] * 7 + [500 - 7 * 64]
        assert [len(b["t"]) for b in batches][-1] == 500 - 7 * 64
        assert batches[-1]["x"].shape == (500 - 7 * 64, 2, 3)
        ids = np.concatenate([b["y"] for b in batches])
        assert sorted(ids.tolist()) == list(range(N))
        if mode is Mode.SEQUENTIAL:
            assert ids.tolist() == list(range(N))
        with pytest.raises(StopIteration):                # again and again, not an error
            next(loader)
        assert not loader.closed
        assert loader.state_dict()["step"] == 8
        loader.load_state_dict({**loader.state_dict(), "step": 6})  # rewinds
        assert [b["y"].tolist() for b in loader] == [b["y"].tolist() for b in batches[6:]]


def test_eval_pass_over_ranks_is_exact_and_every_rank_runs_the_same_steps(streams):
    """500 records, 3 ranks of 32: 6 steps; the last holds 500 - 5 * 96 = 20 records, split
    7/7/6. The ranks together read every record once."""
    seen = []
    lengths = []
    for r in range(3):
        with DataLoader(streams, Sampler(N, 32, Mode.CYCLIC, seed=4, rank=r, world_size=3,
                                         passes=1)) as loader:
            got = [b["y"] for b in loader]
        lengths.append([len(b) for b in got])
        seen += np.concatenate(got).tolist()
    assert lengths == [[32] * 5 + [7], [32] * 5 + [7], [32] * 5 + [6]]
    assert sorted(seen) == list(range(N))


def test_an_eval_pass_resumes_exactly(streams):
    with DataLoader(streams, Sampler(N, 48, Mode.CYCLIC, seed=2, passes=2)) as loader:
        whole = [b["y"].tolist() for b in loader]
    for k in (0, 3, 10, 11, 22):
        with DataLoader(streams, Sampler(N, 48, Mode.CYCLIC, seed=2, passes=2)) as first:
            head = [next(first)["y"].tolist() for _ in range(k)]
            state = first.state_dict()
        with DataLoader(streams, Sampler(N, 48, Mode.CYCLIC, seed=2, passes=2),
                        state=state) as second:
            tail = [b["y"].tolist() for b in second]
        assert head + tail == whole


def test_empty_last_batches_reach_the_transform(streams):
    def count(batch):
        return len(batch["y"]), len(batch["t"]), batch["x"].shape

    # 500 = 31 * 16 + 4 records: with 8 ranks of 2 the last step gives ranks 4..7 nothing.
    with DataLoader(streams, Sampler(N, 2, Mode.SEQUENTIAL, rank=7, world_size=8, passes=1),
                    count) as loader:
        got = list(loader)
    assert got[-1] == (0, 0, (0, 2, 3)) and got[0] == (2, 2, (2, 2, 3))


def test_a_transform_raising_stop_iteration_is_an_error_not_the_end(streams):
    def transform(batch):
        raise StopIteration

    with DataLoader(streams, Sampler(N, 8, Mode.SEQUENTIAL, passes=1), transform) as loader:
        with pytest.raises(RuntimeError, match="transform raised StopIteration"):
            next(loader)


def test_a_stream_raising_stop_iteration_is_an_error_not_the_end():
    """A stream whose gather raises StopIteration (one backed by an exhausted iterator). Was:
    the endless loader's iteration ended quietly after the batches before it, as if the data
    had ended."""
    class Drained:
        def __init__(self) -> None:
            self.left = iter(range(3))

        def __len__(self) -> int:
            return 100

        def __getitem__(self, idx):  # type: ignore[no-untyped-def]
            next(self.left)  # the fourth gather raises StopIteration
            return np.asarray(idx)

    with DataLoader({"x": Drained()}, Sampler(100, 4, "cyclic"), workers=1, prefetch=2,
                    readahead=0) as loader:
        with pytest.raises(RuntimeError, match="stream 'x' raised StopIteration when gathered"):
            for _ in loader:
                pass


def test_an_endless_loader_has_no_len(streams):
    with DataLoader(streams, Sampler(N, 8, Mode.CYCLIC)) as loader:
        assert bool(loader)
        with pytest.raises(TypeError, match="endless DataLoader has no len"):
            len(loader)


def test_step_means_the_next_step_everywhere(streams):
    """[U1] 2: loader.step and state_dict()["step"] were off by one (the batch last delivered
    against the next one). Now both, like Sampler.step and Mix.step, are the next step;
    last_step is the batch just delivered."""
    sampler = Sampler(N, 8, Mode.CYCLIC, seed=1)
    with DataLoader(streams, sampler, prefetch=4) as loader:
        assert loader.step == loader.state_dict()["step"] == 0 and loader.last_step is None
        for k in range(5):
            next(loader)
            assert loader.last_step == k
            assert loader.step == loader.state_dict()["step"] == k + 1
        assert sampler.step > loader.step         # the sampler runs ahead by what is in flight
        state = loader.state_dict()
    with DataLoader(streams, Sampler(N, 8, Mode.CYCLIC, seed=1), state=state) as resumed:
        assert resumed.step == 5 and resumed.last_step is None
        next(resumed)
        assert resumed.last_step == 5 and resumed.step == 6
    seeked = Sampler(N, 8, Mode.CYCLIC, seed=1)
    seeked.seek(40)
    with DataLoader(streams, seeked) as loader:
        assert loader.step == 40


def test_repr_says_where_the_run_is_what_it_reads_and_how(streams):
    """[U1] 4."""
    def collate(batch):
        return batch

    loader = DataLoader(streams, Sampler(N, 64, Mode.SEQUENTIAL, passes=1), collate,
                        workers=3, prefetch=4)
    text = repr(loader)
    assert text.startswith("<DataLoader step 0 of 8, 0 in flight; 3 streams of 500 records: ")
    assert "x=Dense float32 (2, 3), y=Dense int64 (), t=Ragged int32 ndim=1" in text
    assert "Sampler(length=500, batch_size=64, mode=Sampler.Mode.SEQUENTIAL" in text
    assert "transform=collate; workers=3 prefetch=4 readahead=2>" in text
    next(loader)   # steps 0, 1 and 2 were submitted, 3 and 4 read ahead; 0 was delivered
    assert repr(loader).startswith("<DataLoader step 1 of 8, 2 in flight, 2 read ahead;")
    list(loader)
    assert repr(loader).startswith("<DataLoader step 8 of 8, 0 in flight, ended;")
    loader.close()
    assert repr(loader).startswith("<DataLoader closed;")
    with DataLoader({"a": np.zeros((4, 2))}, Sampler(4, 2, Mode.IID)) as plain:
        assert "1 stream of 4 records: a=ndarray float64 (2,);" in repr(plain)
        assert "transform=none" in repr(plain)


# -- reproducible random augmentation ([D1] 6) ---------------------------------------------


def augment(batch, ctx):
    """A random crop and flip per record, drawn from the batch's own generator only."""
    rng = ctx.rng
    x = batch["img"]
    out = np.empty((len(x), 6, 6), dtype=x.dtype)
    tops = rng.integers(0, 3, size=len(x))
    lefts = rng.integers(0, 3, size=len(x))
    flips = rng.random(len(x)) < 0.5
    for i, (top, left, flip) in enumerate(zip(tops, lefts, flips, strict=True)):
        crop = x[i, top:top + 6, left:left + 6]
        out[i] = crop[:, ::-1] if flip else crop
    time.sleep(float(rng.uniform(0, 0.002)))  # finish out of order across the workers
    return {"img": out, "id": batch["id"], "step": ctx.step, "indices": ctx.indices.copy()}


@pytest.fixture
def images(tmp_path):
    rng = np.random.default_rng(0)
    with Dense.create(tmp_path / "img", np.uint8, (8, 8), codec="zstd") as w:
        w.append(rng.integers(0, 256, size=(300, 8, 8), dtype=np.uint8))
    with Dense.create(tmp_path / "id", np.int64, (), codec="raw") as w:
        w.append(np.arange(300, dtype=np.int64))
    opened = {"img": Dense.open(tmp_path / "img"), "id": Dense.open(tmp_path / "id")}
    yield opened
    for s in opened.values():
        s.close()


@pytest.mark.parametrize("workers", [1, 4])
def test_random_augmentation_resumes_bit_identically(images, workers):
    """[D1] 6: a transform drawing from ctx.rng gives a resumed run bit-identical to the
    uninterrupted one, whatever the worker count, prefetch and stop point."""
    def run(n, state=None, workers=workers, prefetch=4):
        with DataLoader(images, Sampler(300, 16, Mode.CYCLIC, seed=9), augment,
                        workers=workers, prefetch=prefetch, state=state) as loader:
            out = [next(loader) for _ in range(n)]
            return out, loader.state_dict()

    whole, _ = run(40)
    for k in (1, 7, 18, 39):
        head, state = run(k, prefetch=6)
        tail, _ = run(40 - k, state=json.loads(json.dumps(state)), workers=3)
        for got, ref in zip(head + tail, whole, strict=True):
            assert got["step"] == ref["step"]
            np.testing.assert_array_equal(got["indices"], ref["indices"])
            np.testing.assert_array_equal(got["id"], ref["id"])
            assert got["img"].tobytes() == ref["img"].tobytes()
    assert [b["step"] for b in whole] == list(range(40))
    np.testing.assert_array_equal(whole[5]["indices"], Sampler(300, 16, Mode.CYCLIC,
                                                               seed=9).batch(5))
    # The augmentation does change from batch to batch (the test would be empty otherwise).
    assert len({b["img"].tobytes() for b in whole}) == 40


def test_context_generators_differ_by_seed_step_and_rank():
    from loaderx.dataloader import BatchContext

    idx = np.arange(4, dtype=np.uint64)

    def draw(seed, step, rank):
        return BatchContext(step, idx, seed, rank, 4).rng.integers(0, 1 << 62, 4).tolist()

    base = draw(1, 5, 0)
    assert draw(1, 5, 0) == base
    assert len({tuple(base), tuple(draw(2, 5, 0)), tuple(draw(1, 6, 0)),
                tuple(draw(1, 5, 1))}) == 4
    # Not the generator a user gets from the same seed directly or by spawning.
    assert np.random.default_rng(1).integers(0, 1 << 62, 4).tolist() != base
    child = np.random.SeedSequence(1).spawn(6)[5].spawn(1)[0]
    assert np.random.default_rng(child).integers(0, 1 << 62, 4).tolist() != base


def test_transform_arity_decides_whether_it_gets_a_context(images):
    seen = {}

    def one(batch):
        return "one"

    def with_default(batch, scale=2):
        return scale

    def two(batch, ctx):
        return ctx

    class Callable2:
        def __call__(self, batch, ctx):
            return ctx.step

    sampler = Sampler(300, 4, Mode.SEQUENTIAL, seed=3, rank=1, world_size=2)
    for name, fn in {"one": one, "default": with_default, "two": two, "cls": Callable2(),
                     "lambda": lambda b: "l", "lambda2": lambda b, c: c.rank, "builtin": len}.items():
        sampler.seek(0)
        with DataLoader(images, sampler, fn, workers=2) as loader:
            seen[name] = next(loader)
    assert seen["one"] == "one" and seen["default"] == 2 and seen["lambda"] == "l"
    assert seen["builtin"] == 2                      # len(batch): a builtin gets the batch only
    ctx = seen["two"]
    assert ctx.step == 0 and ctx.rank == 1 and ctx.world_size == 2 and ctx.seed == 3
    assert ctx.indices.tolist() == [4, 5, 6, 7] and not ctx.indices.flags.writeable
    # [U3] 6: int64, not the sampler's uint64: integer arithmetic stays integer, and torch
    # indexes with it.
    assert ctx.indices.dtype == np.int64 and (ctx.indices - np.int64(4)).dtype == np.int64
    assert seen["cls"] == 0 and seen["lambda2"] == 1
    assert "BatchContext step=0 rank=1/2 seed=3 records=4" in repr(ctx)


def test_the_guides_augmentation_example_runs_and_resumes(tmp_path):
    """The guide's block verbatim: a run of 5 steps, and one resumed at step 3."""
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[3] / "docs" / "guides" / "loaderx.md").read_text()
    marker = "<!-- augment.py -->\n```python\n"
    start = guide.index(marker) + len(marker)
    code = compile(guide[start:guide.index("```\n", start)], "augment.py", "exec")
    n = 70
    rng = np.random.default_rng(1)
    with Dense.create(tmp_path / "image", np.uint8, (3, 256, 256), codec="raw") as w:
        w.append(rng.integers(0, 256, (n, 3, 256, 256), dtype=np.uint8))
    with Dense.create(tmp_path / "label", np.int64, (), codec="raw") as w:
        w.append(np.arange(n, dtype=np.int64))
    streams = {"image": Dense.open(tmp_path / "image"), "label": Dense.open(tmp_path / "label")}
    runs = []
    for saved_state in (None, {"version": 1, "step": 3, "streams": {"image": n, "label": n}}):
        ns = {"streams": streams, "n": n, "saved_state": saved_state}
        exec(code, ns)
        with ns["loader"] as loader:
            runs.append([next(loader) for _ in range(5 if saved_state is None else 2)])
    for s in streams.values():
        s.close()
    assert runs[0][0]["image"].shape == (64, 3, 224, 224)
    for got, ref in zip(runs[1], runs[0][3:], strict=True):
        assert got["image"].tobytes() == ref["image"].tobytes()
        np.testing.assert_array_equal(got["label"], ref["label"])


@pytest.mark.parametrize(("word", "points_to"), [
    ("num_workers", "workers="), ("batch_size", "Sampler(length, batch_size"),
    ("shuffle", "Sampler.Mode.IID"), ("collate_fn", "transform="),
    ("prefetch_factor", "prefetch="), ("drop_last", "every batch is whole")])
def test_pytorch_keywords_point_to_what_loaderx_takes(word, points_to):
    """[U3] PyTorch's keywords were a bare "unexpected keyword argument"."""
    import re

    with pytest.raises(TypeError, match=f"unexpected keyword argument '{word}': that is "
                       f"PyTorch's DataLoader's; loaderx's takes .*{re.escape(points_to)}"):
        DataLoader({}, Sampler(10, 2, Sampler.Mode.CYCLIC), **{word: 2})


@pytest.mark.parametrize(("word", "points_to"), [
    ("transform_workers", "workers="), ("prefetch_size", "prefetch=")])
def test_loaderx2_keywords_point_to_their_new_names(word, points_to):
    """loaderx 2.x's DataLoader(streams, sampler, transform_workers=4, prefetch_size=4) got a
    bare "unexpected keyword argument"."""
    import re

    with pytest.raises(TypeError, match=f"unexpected keyword argument '{word}': that is "
                       f"loaderx 2.x's; loaderx 3 takes {re.escape(points_to)}"):
        DataLoader({}, Sampler(10, 2, Sampler.Mode.CYCLIC), **{word: 2})


def test_help_lists_the_parameters():
    """[U3] help(DataLoader) showed no parameters: the signature is __init__'s, and the class
    docstring describes each one."""
    import inspect
    import pydoc

    assert list(inspect.signature(DataLoader).parameters) == [
        "streams", "sampler", "transform", "workers", "prefetch", "readahead", "state", "subset"]
    text = pydoc.render_doc(DataLoader, renderer=pydoc.plaintext)
    for name in ("``workers``", "``prefetch``", "``readahead``", "``state``", "``subset``",
                 "num_workers"):
        assert name in text


def test_streams_that_foresee_are_told_the_samplers_future_and_let_go_at_close():
    """A stream with ``foresee(batch_of, progress)`` is told the sampler's ``batch`` and the
    loader's step; progress() follows delivery, and is None once the loader is closed, when
    the handle is closed too. The loader is held weakly."""
    calls = []

    class Handle:
        closed = False

        def close(self):
            self.closed = True

    class Foreseeing:
        def __len__(self):
            return 100

        def __getitem__(self, idx):
            return np.asarray(idx)

        def foresee(self, batch_of, progress):
            calls.append((batch_of, progress, Handle()))
            return calls[-1][2]

    sampler = Sampler(100, 10, "cyclic", seed=1)
    loader = DataLoader({"a": Foreseeing(), "b": np.arange(100)}, sampler, workers=1)
    (batch_of, progress, handle), = calls
    assert (batch_of(3) == Sampler(100, 10, "cyclic", seed=1).batch(3)).all()
    assert progress() == 0
    next(loader)
    next(loader)
    assert progress() == 2
    loader.close()
    assert progress() is None and handle.closed
    loader2 = DataLoader({"a": Foreseeing()}, Sampler(100, 10, "cyclic", seed=1), workers=1)
    progress2, handle2 = calls[-1][1], calls[-1][2]
    ref = weakref.ref(loader2)
    del loader2
    gc.collect()
    assert ref() is None and progress2() is None and handle2.closed
