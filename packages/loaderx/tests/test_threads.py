"""Threads that really run at once (a free-threaded CPython, where the `freethreaded` nox session
runs this file with the GIL off; on a CPython with a GIL they interleave): one sampler drawn
from many threads, a transform that mutates shared state, and a loader closed while its
workers gather. Every result is checked exactly."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from loaderx.dataloader import DataLoader, LoaderClosedError
from loaderx.sampler import Sampler
from loaderx.zrecord import Dense, Ragged
from zrecord_testkit.threads import run_threads

THREADS = 8


@pytest.mark.parametrize("mode", ["iid", "cyclic", "blocks"])
def test_many_threads_drawing_from_one_sampler_each_get_a_step_of_their_own(mode):
    """next() takes the step counter and fills the reused buffer as one step: no draw is lost
    or repeated, and batch(step) (a new array) is the same from every thread."""
    extra = {"block_records": 16, "window_blocks": 4} if mode == "blocks" else {}
    sampler = Sampler(10_000, 32, mode, seed=5, **extra)
    draws = 3000
    assert run_threads(lambda k: [sampler.next() for _ in range(draws)]) == []
    assert sampler.step == THREADS * draws

    reference = Sampler(10_000, 32, mode, seed=5, **extra)
    expected = [reference.batch(step) for step in range(200)]

    def check(k: int) -> None:
        for step in range(k, 200, 3):
            np.testing.assert_array_equal(sampler.batch(step), expected[step])

    assert run_threads(check) == []


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("threads")
    rng = np.random.default_rng(4)
    dense = rng.integers(0, 1 << 30, size=(4000, 16), dtype=np.int64)
    ragged = [rng.integers(0, 1000, size=int(rng.integers(0, 40)), dtype=np.int32)
              for _ in range(4000)]
    with Dense.create(str(root / "d"), np.int64, (16,), codec="zstd") as w:
        w.append(dense)
    with Ragged.create(str(root / "r"), np.int32, 1, codec="zstd") as w:
        w.append(ragged)
    return root, dense, ragged


def test_a_transform_that_mutates_shared_state_runs_once_per_step_and_the_batches_are_exact(stores):
    root, dense, ragged = stores
    seen: dict[int, int] = {}
    lock = threading.Lock()
    log: list[int] = []

    def transform(batch, ctx):
        # Shared state, mutated from every worker: a dict under a lock, a list without one
        # (list.append is atomic on every CPython, free-threaded included).
        with lock:
            for i in ctx.indices.tolist():
                seen[i] = seen.get(i, 0) + 1
        log.append(ctx.step)
        batch["total"] = batch["d"].sum(axis=1)
        return batch

    sampler = Sampler(len(dense), 64, "cyclic", seed=9)
    reference = Sampler(len(dense), 64, "cyclic", seed=9)
    steps = 150
    with Dense.open(str(root / "d")) as d, Ragged.open(str(root / "r")) as r, \
            DataLoader({"d": d, "r": r}, sampler, transform, workers=8, prefetch=8) as loader:
        for step in range(steps):
            batch = next(loader)
            idx = reference.batch(step)
            np.testing.assert_array_equal(batch["d"], dense[idx])
            np.testing.assert_array_equal(batch["total"], dense[idx].sum(axis=1))
            for got, i in zip(batch["r"], idx):
                np.testing.assert_array_equal(got, ragged[i])
    # Every step the loader ran (those delivered and those prefetched) ran the transform once.
    # close() cancels the steps not started: one may be cancelled while a later one had
    # started already (a worker takes the next task as another marks its own running).
    ran = sorted(log)
    assert len(set(ran)) == len(ran) and set(range(steps)) <= set(ran) and ran[-1] < steps + 8 + 2
    expected: dict[int, int] = {}
    for step in ran:
        for i in reference.batch(step).tolist():
            expected[i] = expected.get(i, 0) + 1
    assert seen == expected


def _consume(loader, dense, reference, started, got) -> None:
    """Take batches (each checked) until the loader is closed; what ended it goes in `got`."""
    try:
        step = 0
        while True:
            batch = next(loader)
            np.testing.assert_array_equal(batch["d"], dense[reference.batch(step)])
            step += 1
            started.set()
    except LoaderClosedError:
        got.append(None)
    except BaseException as exc:  # noqa: BLE001 - reported by the caller
        got.append(exc)


def test_close_while_workers_gather_ends_the_consumer_and_every_worker(stores):
    """close() from another thread while the consumer waits and 8 workers gather: the consumer
    ends with LoaderClosedError, never a wrong or half batch, and no thread is left running."""
    root, dense, _ = stores
    reference = Sampler(len(dense), 128, "iid", seed=2)
    for round_ in range(5):
        sampler = Sampler(len(dense), 128, "iid", seed=2)
        before = threading.active_count()
        got: list[BaseException | None] = []
        started = threading.Event()
        with Dense.open(str(root / "d")) as d:
            loader = DataLoader({"d": d}, sampler, lambda b: {"d": b["d"] * 1}, workers=8,
                                prefetch=16)
            consumer = threading.Thread(target=_consume,
                                        args=(loader, dense, reference, started, got))
            consumer.start()
            assert started.wait(30)
            loader.close()
            consumer.join(30)
            assert not consumer.is_alive(), f"round {round_}: the consumer hung after close()"
        assert got == [None], f"round {round_}: {got}"
        assert threading.active_count() <= before, f"round {round_}: worker threads left running"
