"""[S1] 3: the DataLoader hints the steps after those in flight to the streams that read ahead."""

from __future__ import annotations

import numpy as np
import pytest

from loaderx import DataLoader, Sampler
from loaderx.zrecord import Dense, Ragged

Mode = Sampler.Mode
N = 300


class Recording:
    """An array stream with a prefetch() that records what it was told, in order."""

    def __init__(self, n: int) -> None:
        self.data = np.arange(n, dtype=np.int64)
        self.hinted: list[list[int]] = []
        self.gathered = 0

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, idx):
        self.gathered += 1
        return self.data[idx]

    def prefetch(self, idx) -> None:
        assert not idx.flags.writeable  # the loader's own copy, shared with the gather
        self.hinted.append(idx.tolist())


def steps(seed: int, count: int, batch: int = 10) -> list[list[int]]:
    s = Sampler(N, batch, Mode.IID, seed=seed)
    return [s.next().tolist() for _ in range(count)]


@pytest.mark.parametrize(("prefetch", "readahead"), [(4, 2), (2, 0), (1, 5), (3, 1)])
def test_the_next_steps_are_hinted_in_step_order_and_no_further(prefetch, readahead):
    stream = Recording(N)
    in_flight = max(1, prefetch - 1)
    expect = steps(7, 40)
    with DataLoader({"v": stream}, Sampler(N, 10, Mode.IID, seed=7), prefetch=prefetch,
                    readahead=readahead) as loader:
        for k in range(20):
            batch = next(loader)
            assert batch["v"].tolist() == expect[k]
            # Step k's claim drew steps k .. k + in_flight - 1 (for the gathers, k delivered
            # now) and the readahead steps after them; nothing further. readahead=0 hints
            # nothing: each step is submitted as it is drawn, and its gather hints itself.
            assert stream.hinted == (expect[:k + in_flight + readahead] if readahead else [])


def test_every_stream_with_prefetch_is_hinted_others_are_not_needed():
    hinted, plain = Recording(N), np.arange(N) * 2
    with DataLoader({"h": hinted, "p": plain}, Sampler(N, 10, Mode.CYCLIC, seed=1)) as loader:
        batch = next(loader)
    np.testing.assert_array_equal(batch["p"], batch["h"] * 2)
    assert hinted.hinted[0] == batch["h"].tolist()


def test_a_stream_that_took_the_future_gets_no_hints_one_that_declined_does():
    """A stream whose ``foresee`` returned a handle plans its own reads from the sampler's
    future (a zrecord mirror with a budget): hints would compete with them for its budget.
    One whose ``foresee`` returned None (no budget) is hinted as any other."""
    class Foreseeing(Recording):
        def __init__(self, n: int, handle: object) -> None:
            super().__init__(n)
            self.handle = handle

        def foresee(self, batch_of, progress):
            return self.handle

    class Handle:
        def close(self) -> None:
            pass

    took, declined = Foreseeing(N, Handle()), Foreseeing(N, None)
    with DataLoader({"t": took, "d": declined}, Sampler(N, 10, Mode.CYCLIC, seed=1),
                    readahead=3) as loader:
        for _ in range(5):
            next(loader)
    assert took.hinted == [] and took.gathered == declined.gathered >= 5
    assert len(declined.hinted) >= 5


def test_a_finite_sampler_ends_exactly_with_readahead_beyond_its_end():
    stream = Recording(N)
    sampler = Sampler(N, 64, Mode.SEQUENTIAL, passes=1)
    with DataLoader({"v": stream}, sampler, readahead=8) as loader:
        got = np.concatenate([b["v"] for b in loader])
        with pytest.raises(StopIteration):
            next(loader)
        assert "ended" in repr(loader)
    assert sorted(got.tolist()) == list(range(N))
    assert len(stream.hinted) == len(loader) == 5


def test_resume_is_exact_and_drops_what_was_read_ahead():
    stream = Recording(N)
    expect = steps(3, 30)
    loader = DataLoader({"v": stream}, Sampler(N, 10, Mode.IID, seed=3), readahead=6)
    for _ in range(4):
        next(loader)
    state = loader.state_dict()
    assert state["step"] == 4  # not the sampler's step, which is 4 + 3 in flight + 6 ahead
    loader.load_state_dict({**state, "step": 2})
    stream.hinted.clear()
    assert next(loader)["v"].tolist() == expect[2]
    assert stream.hinted == expect[2:2 + 3 + 6]
    loader.close()
    resumed = DataLoader({"v": Recording(N)}, Sampler(N, 10, Mode.IID, seed=3), state=state)
    assert [next(resumed)["v"].tolist() for _ in range(3)] == expect[4:7]
    resumed.close()


def test_readahead_must_be_a_count():
    stream = Recording(N)
    with pytest.raises(ValueError, match="readahead must be 0 or more; got -1"):
        DataLoader({"v": stream}, Sampler(N, 10, Mode.IID), readahead=-1)
    with pytest.raises(TypeError):
        DataLoader({"v": stream}, Sampler(N, 10, Mode.IID), readahead=1.5)


def test_an_invalid_hint_reaches_the_consumer_and_closes_the_loader(tmp_path):
    with Dense.create(tmp_path / "d", np.int64, (), codec="raw") as w:
        w.append(np.arange(N, dtype=np.int64))
    store = Dense.open(tmp_path / "d")

    class Short:  # claims N records but the sampler draws past the store's end
        def next(self):
            return np.array([N + 5], dtype=np.uint64)

    loader = DataLoader({"d": store}, Short())
    with pytest.raises(IndexError):
        next(loader)
    assert loader.closed
    store.close()


def test_zrecord_stores_read_ahead_with_the_same_batches(tmp_path):
    with Dense.create(tmp_path / "d", np.float32, (4,), codec="zstd") as w:
        w.append(np.arange(N * 4, dtype=np.float32).reshape(N, 4))
    with Ragged.create(tmp_path / "r", np.int16, 1, codec="raw") as w:
        w.append(np.full(i % 7, i, np.int16) for i in range(N))
    streams = {"d": Dense.open(tmp_path / "d"), "r": Ragged.open(tmp_path / "r")}
    batches = {}
    for readahead in (0, 4):
        with DataLoader(streams, Sampler(N, 32, Mode.IID, seed=5), workers=2,
                        readahead=readahead) as loader:
            batches[readahead] = [next(loader) for _ in range(12)]
    for a, b in zip(batches[0], batches[4]):
        np.testing.assert_array_equal(a["d"], b["d"])
        assert [x.tolist() for x in a["r"]] == [x.tolist() for x in b["r"]]
    for s in streams.values():
        s.close()
