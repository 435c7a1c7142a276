"""What a DataLoader does when it is used in ways it cannot serve (found in review): each is
refused with an error that names the misuse, or handled so that no step is lost, repeated or
misnumbered."""

from __future__ import annotations

import copy
import os
import pickle
import threading
import time

import numpy as np
import pytest

from loaderx import LoaderClosedError
from loaderx.dataloader import DataLoader
from loaderx.sampler import Sampler

N = 120


def _streams():
    return {"x": np.arange(N, dtype=np.int64) + 100}


class _Fixed:
    """A user's sampler whose every step is `indices`."""

    def __init__(self, indices):
        self.indices = indices

    def next(self):
        return self.indices


@pytest.mark.parametrize("indices, error, words", [
    (np.array([True, False, True] + [False] * 5), TypeError, "dtype bool"),
    (np.array([1.7, 2.9]), TypeError, "dtype float64"),
    (np.array([-1, 2]), ValueError, "negative index"),
])
def test_indices_that_are_not_record_numbers_are_refused(indices, error, words):
    """Was: cast to uint64 as they were, so a mask read records 0 and 1, floats truncated,
    and -1 wrapped to the last record of an array stream."""
    with DataLoader(_streams(), _Fixed(indices), workers=1) as loader:
        with pytest.raises(error, match=words):
            next(loader)


def test_a_loader_closed_inside_the_transform_is_an_error_of_the_step():
    """A transform that reads another loader, closed meanwhile: its LoaderClosedError is the
    step's error (this loader closes, the state stays at the last step delivered). Was: taken
    for this loader's own closing, which stayed open with its next steps numbered one too low,
    and a resume repeated a batch."""
    inner = DataLoader(_streams(), Sampler(N, 4, "sequential"), workers=1)
    fail = threading.Event()

    def transform(batch):
        if fail.is_set():
            next(inner)
        return batch

    with DataLoader(_streams(), Sampler(N, 4, "sequential"), transform, workers=1, prefetch=1,
                    readahead=0) as outer:
        assert next(outer)["x"].tolist() == [100, 101, 102, 103]
        inner.close()
        fail.set()
        with pytest.raises(LoaderClosedError):
            next(outer)
        assert outer.closed and outer.state_dict()["step"] == 1


def test_a_loader_made_on_a_used_sampler_goes_on_from_the_last_step_delivered():
    """Was: the sampler was left where the first loader had drawn it, past the steps in flight
    and read ahead, which the second loader then never delivered."""
    sampler = Sampler(N, 3, "sequential")
    with DataLoader(_streams(), sampler, workers=2, prefetch=3, readahead=3) as first:
        for _ in range(3):
            next(first)
        assert first.step == 3 and sampler.step > 3  # drawn ahead while it runs
    assert sampler.step == 3
    with DataLoader(_streams(), sampler, workers=1) as second:
        assert next(second)["x"].tolist() == [109, 110, 111]


def test_next_from_a_second_thread_at_once_is_refused():
    """Was: both went on, and the steps, ctx and state followed neither order."""
    entered, release = threading.Event(), threading.Event()

    def slow(batch):
        entered.set()
        release.wait(20)
        return batch

    with DataLoader(_streams(), Sampler(N, 4, "sequential"), slow, workers=1, prefetch=1,
                    readahead=0) as loader:
        first = threading.Thread(target=lambda: next(loader))
        first.start()
        assert entered.wait(20)
        with pytest.raises(RuntimeError, match="running on another thread"):
            next(loader)
        release.set()
        first.join(20)
        assert next(loader)["x"].tolist() == [104, 105, 106, 107]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_loader_in_a_forked_child_says_so_instead_of_hanging():
    """Was: next() in the child waited forever for threads that the fork did not copy."""
    with DataLoader(_streams(), Sampler(N, 4, "sequential"), workers=1) as loader:
        next(loader)
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child
            try:
                next(loader)
                said = b"a batch"
            except RuntimeError as exc:
                said = str(exc).encode()
            os.write(write_end, said)
            os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as f:
            said = f.read().decode()
        os.waitpid(pid, 0)
        assert "threads do not survive fork()" in said, said
        assert next(loader)["x"].tolist() == [104, 105, 106, 107]  # the parent's goes on


def test_a_loader_does_not_copy_or_pickle_and_says_what_to_do():
    """Was: copy.copy made a twin sharing the queue and executor (both misnumbered their
    steps), and pickle failed on an RLock."""
    with DataLoader(_streams(), Sampler(N, 4, "sequential"), workers=1) as loader:
        for attempt in (copy.copy, copy.deepcopy, pickle.dumps):
            with pytest.raises(TypeError, match=r"save state_dict\(\)"):
                attempt(loader)


def test_streams_and_arguments_of_the_wrong_kind_are_named(tmp_path):
    with pytest.raises(TypeError, match=r"stream 'x' is a list, which takes no index array .*: "
                                        r"give np.asarray"):
        DataLoader({"x": list(range(N))}, Sampler(N, 4, "sequential"))
    # Found by a newcomer. Was: a path's length (its characters) taken for its records (the
    # sampler "draws from 60000 records but the streams have 14"), and a state given as its
    # JSON text "'str' object has no attribute 'get'".
    for path in ("fm/train/image", tmp_path / "image"):
        with pytest.raises(TypeError, match=r"stream 'image' is a path \(.*image'\)?\), not a "
                           r"store: open it first"):
            DataLoader({"image": path}, Sampler(14, 2, "sequential"))
    with pytest.raises(TypeError, match=r"state must be the dict that state_dict\(\) returned "
                       r"\(parse a saved one: json.loads\(text\)\); got str"):
        DataLoader(_streams(), Sampler(N, 4, "sequential"), state='{"step": 3}')
    for name, value in (("workers", 1.5), ("prefetch", "4"), ("readahead", None), ("workers", True)):
        with pytest.raises(TypeError, match=f"{name} must be an int; got"):
            DataLoader(_streams(), Sampler(N, 4, "sequential"), **{name: value})




@pytest.mark.parametrize("workers", [1, 2, 4])
def test_a_transform_that_closes_its_loader_ends_the_run_cleanly(workers):
    """Found in review. Was: with 2 workers or more the process hung (one worker's close()
    joined the other under the loader's lock while the other's transform waited for that lock);
    with one, close() raised "cannot join current thread" inside the transform, and the
    sampler was left where the loader had drawn (step 8 for a loader at step 3)."""
    sampler = Sampler(N, 4, "sequential")
    holder: dict[str, DataLoader] = {}
    calls = []

    def transform(batch):
        calls.append(1)
        if len(calls) == 4:
            holder["loader"].close()  # a transform that decides the run must stop
        else:
            time.sleep(0.2)  # the others still at work when it does
        return batch

    loader = DataLoader(_streams(), sampler, transform, workers=workers, prefetch=6)
    holder["loader"] = loader
    outcome: list[object] = []

    def consume() -> None:
        try:
            while True:
                next(loader)
        except LoaderClosedError as exc:
            outcome.append(exc)

    before = {t.ident for t in threading.enumerate()}
    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    consumer.join(30)
    assert not consumer.is_alive(), "the consumer hung"
    assert isinstance(outcome[0], LoaderClosedError)
    loader.close()  # again, from the consumer's side
    assert sampler.step == loader.step
    # ... which joined every thread, as close() promises (found in review: it returned while
    # other workers' transforms still ran, the first close having been made on a worker).
    assert not [t.name for t in threading.enumerate() if t.ident not in before]
    deadline = time.monotonic() + 10
    while {t.ident for t in threading.enumerate()} - before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not [t.name for t in threading.enumerate() if t.ident not in before]


def test_a_loader_collected_on_its_own_worker_thread_shuts_down_without_error(monkeypatch):
    """Found in review. Was: a loader in a reference cycle, collected by a gc.collect() that
    ran on one of its workers, failed its finalizer ("Exception ignored ... cannot join
    current thread") and left its streams' foresight open."""
    import gc
    import sys

    raised: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda info: raised.append(info.exc_value))

    class Box:
        pass

    def transform(batch):
        gc.collect()  # as a collection an allocation triggers on this thread
        return batch

    for _ in range(10):
        box = Box()
        box.cycle = box
        box.loader = DataLoader(_streams(), Sampler(N, 4, "sequential"), transform, workers=3,
                                prefetch=4)
        next(box.loader)
        del box
        time.sleep(0.05)
    gc.collect()
    assert not [e for e in raised if "join" in str(e)], raised
