"""Mode BLOCKS, the locality-aware shuffle: every cycle a permutation of the records whose
windows read whole blocks of consecutive records; stateless like the other modes (seek,
resume, ranks, elastic resume, passes), and its settings checked."""

from __future__ import annotations

import json

import numpy as np
import pytest

from loaderx.sampler import Mix, Sampler, block_records

Mode = Sampler.Mode


def one_pass(length: int, block: int, window: int, seed: int = 0, batch: int = 1) -> list[int]:
    """The order of cycle 0: one pass, read to its end."""
    s = Sampler(length, batch, "blocks", seed, passes=1, block_records=block, window_blocks=window)
    return np.concatenate([b.copy() for b in s]).tolist()


def _windows(order: list[int], length: int, block: int, window: int) -> list[set[int]]:
    """The blocks (record // block) of each window of `order`, cut where the blocks read so
    far are whole and `window` of them (or the order ends); AssertionError where a window
    would read more than `window` blocks."""
    full = length // block
    size = {b: block if b < full else length - full * block for b in range(-(-length // block))}
    windows, seen = [], {}
    for k, r in enumerate(order):
        seen[r // block] = seen.get(r // block, 0) + 1
        assert len(seen) <= window, (k, seen)
        if all(n == size[b] for b, n in seen.items()) and (len(seen) == window or
                                                           k == length - 1):
            windows.append(set(seen))
            seen = {}
    assert not seen
    return windows


@pytest.mark.parametrize("length,block,window", [(1000, 10, 4), (1003, 10, 4), (97, 7, 3),
                                                 (50, 64, 2), (64, 8, 8), (1, 1, 1), (30, 1, 1)])
def test_a_cycle_is_a_permutation_whose_windows_read_whole_blocks(length, block, window):
    order = one_pass(length, block, window, seed=5)
    assert sorted(order) == list(range(length))                 # every record exactly once
    windows = _windows(order, length, block, window)             # <= W blocks, each whole
    assert sum(len(w) for w in windows) == -(-length // block)
    if length % block == 0:
        # No short block: windows of W * block positions, as the order always was.
        span = block * window
        assert [set(r // block for r in order[w:w + span]) for w in range(0, length, span)] == windows


def test_the_short_block_is_cut_at_a_new_place_each_cycle_so_no_record_is_always_left_unread():
    """An endless run reads the full batches of each cycle and leaves the last positions
    unread, where the short block is. Was: the short block was always the last records, so
    with 1,050 records in blocks of 64 and batches of 100 records 1,024..1,049 were never
    read; 983,140 in blocks of 4,096 and batches of 256 never read the last 100."""
    for length, batch, block in ((1050, 100, 64), (983_140, 256, 4096)):
        s = Sampler(length, batch, "blocks", seed=0, block_records=block)
        per = s.steps_per_cycle
        tail = range(length - length % block, length)
        counts = np.zeros(length, np.int64)
        cycles = 200 if length < 10_000 else 6
        for k in range(cycles * per):
            np.add.at(counts, s.batch(k).astype(np.int64), 1)
        assert counts[tail.start:].sum() > 0, (length, block)
        if length < 10_000:
            assert counts.min() > 0.8 * cycles * (per * batch / length)  # none left far behind


def test_cycles_and_seeds_give_fresh_orders_and_windows_are_shuffled():
    s = Sampler(4096, 64, Mode.BLOCKS, seed=1, block_records=16, window_blocks=4)
    per = s.steps_per_cycle
    assert per == 64
    c0 = np.concatenate([s.batch(k) for k in range(per)])
    c1 = np.concatenate([s.batch(per + k) for k in range(per)])
    assert sorted(c0.tolist()) == sorted(c1.tolist()) == list(range(4096))
    assert c0.tolist() != c1.tolist()
    assert one_pass(4096, 16, 4, seed=1) != one_pass(4096, 16, 4, seed=2)
    # Within a window the records are not in block order, and blocks are not in store order.
    first = c0[:64].tolist()
    assert first != sorted(first)
    block_order = [int(r) // 16 for r in c0[::64]]
    assert block_order != sorted(block_order)
    # A window of the whole dataset is one shuffle of every record.
    assert sorted(one_pass(100, 10, 10)) == list(range(100))


def test_seek_and_state_resume_exactly():
    a = Sampler(10_000, 32, "blocks", 3, block_records=100, window_blocks=5)
    run = [a.next().copy() for _ in range(700)]                 # past a cycle (312 steps)
    b = Sampler(10_000, 32, "blocks", 3, block_records=100, window_blocks=5)
    b.seek(400)
    assert all(np.array_equal(b.next(), run[k]) for k in range(400, 700))
    state = a.state_dict()
    assert json.loads(json.dumps(state)) == state
    assert state["block_records"] == 100 and state["window_blocks"] == 5 and state["mode"] == "BLOCKS"
    c = Sampler(10_000, 32, "blocks", 3, block_records=100, window_blocks=5)
    c.load_state_dict(state)
    assert np.array_equal(c.next(), a.next())
    other = Sampler(10_000, 32, "blocks", 3, block_records=50, window_blocks=5)
    with pytest.raises(ValueError, match="block_records saved 100 != current 50"):
        other.load_state_dict(state)
    # The other modes' states are as before: no block settings in them.
    assert "block_records" not in Sampler(10, 2, "cyclic").state_dict()
    assert "block_records=100, window_blocks=5) at step 701" in repr(a)


@pytest.mark.parametrize("world", [2, 3, 4])
def test_ranks_split_one_global_sequence_and_resume_elastically(world):
    """Rank r of W draws positions [r * b, (r + 1) * b) of the global batch, which is the
    same whatever the split: disjoint ranks, and a state resumes with another world size."""
    g = 12
    one = Sampler(600, g, Mode.BLOCKS, seed=9, block_records=7, window_blocks=3)
    ranks = [Sampler(600, g // world, Mode.BLOCKS, seed=9, rank=r, world_size=world,
                     block_records=7, window_blocks=3) for r in range(world)]
    for step in (0, 1, 49, 50, 51, 1000):
        joined = np.concatenate([s.batch(step) for s in ranks])
        assert np.array_equal(joined, one.batch(step))
        assert len(set(joined.tolist())) == g
    state = Sampler.reshard(one.state_dict() | {"step": 77}, world_size=world, rank=world - 1)
    resumed = Sampler(600, state["batch_size"], "blocks", 9, rank=world - 1, world_size=world,
                      block_records=7, window_blocks=3)
    resumed.load_state_dict(state)
    assert np.array_equal(resumed.next(), one.batch(77)[-(g // world):])


@pytest.mark.parametrize("length,batch,world", [(100, 7, 2), (64, 8, 2), (5, 4, 2), (1000, 30, 3)])
def test_passes_cover_every_record_once_across_ranks(length, batch, world):
    samplers = [Sampler(length, batch, "blocks", seed=4, rank=r, world_size=world, passes=2,
                        block_records=6, window_blocks=2) for r in range(world)]
    per_pass = -(-length // (batch * world))
    runs = [[b.copy() for b in s] for s in samplers]
    for p in range(2):
        got = np.concatenate([runs[r][k] for k in range(p * per_pass, (p + 1) * per_pass)
                              for r in range(world)])
        assert sorted(got.tolist()) == list(range(length))


def test_huge_lengths_need_no_dataset_sized_memory():
    s = Sampler(1 << 63, 1024, "blocks", 11, block_records=1 << 20, window_blocks=16)
    for step in (0, 12345, (1 << 40) + 3):
        b = s.batch(step)
        assert len(b) == 1024 and int(b.max()) < (1 << 63) and len(set(b.tolist())) == 1024
        # A batch of a window of 16 blocks touches at most 16 blocks.
        assert len({int(r) >> 20 for r in b}) <= 16


@pytest.mark.parametrize("kwargs,match", [
    ({"mode": "blocks"}, "mode BLOCKS needs block_records"),
    ({"mode": "cyclic", "block_records": 4}, "block_records is a setting of mode BLOCKS"),
    ({"mode": "blocks", "block_records": 0}, "block_records must be >= 1; got 0"),
    ({"mode": "blocks", "block_records": 4, "window_blocks": 0}, "window_blocks must be >= 1"),
    ({"mode": "blocks", "block_records": 1 << 62, "window_blocks": 4},
     r"block_records \* window_blocks must be <= 2\*\*63"),
    ({"mode": "blocks", "block_records": 4, "batch_size": 200}, "BLOCKS draws full batches"),
    ({"mode": "iid", "block_records": 4}, "block_records is a setting of mode BLOCKS"),
])
def test_invalid_settings_are_clear_errors(kwargs, match):
    args = {"length": 100, "batch_size": 10} | kwargs
    with pytest.raises(ValueError, match=match):
        Sampler(**args)


class _Store:
    def __init__(self, n: int, stored: int) -> None:
        self.n, self.stored_bytes = n, stored

    def __len__(self) -> int:
        return self.n


def test_block_records_sizes_blocks_in_stored_bytes():
    assert block_records(_Store(1_000_000, 227_000_000), 8 << 20) == 36_954   # 227-byte tokens
    assert block_records(_Store(965, 965 * 150_000), 8 << 20) == 55           # photographs
    assert block_records(_Store(10, 10 << 30)) == 1                            # larger than a block
    assert block_records(_Store(100, 100)) == 100                              # the whole store
    with pytest.raises(ValueError, match="empty store"):
        block_records(_Store(0, 0))


def test_mix_takes_blocks_samplers():
    """A BLOCKS source in a Mix draws its records in the BLOCKS order, at its own pace."""
    s0 = Sampler(200, 8, "blocks", 1, block_records=10, window_blocks=2)
    s1 = Sampler(50, 8, "cyclic", 2)
    m = Mix([s0, s1], [3, 1], batch_size=8)
    idx = np.concatenate([m.batch(step) for step in range(20)])
    mine = idx[idx < 200]                                       # source 0's records
    expected = np.concatenate([s0.batch(k) for k in range(len(mine) // 8 + 1)])[:len(mine)]
    assert mine.tolist() == expected.tolist()


@pytest.mark.parametrize("mode", ["blocks", Mode.BLOCKS])
def test_mix_of_stream_dicts_in_blocks_mode_says_how_to_give_it(mode):
    """Was: ValueError "Sampler mode BLOCKS needs block_records" from inside Mix, which takes
    no block_records: mode "blocks" could never be used there."""
    with pytest.raises(ValueError, match=r"Mix source 0 is a stream dict.*mode BLOCKS needs "
                       r"block_records: give it as a \(streams, Sampler\("):
        Mix([{"x": np.arange(100)}, {"x": np.arange(50)}], [1, 1], batch_size=8, mode=mode)
