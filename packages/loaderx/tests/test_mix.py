"""loaderx.sampler.Mix: weighted per-record mixing as a pure function of (seed, step)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from loaderx.dataloader import DataLoader
from loaderx.sampler import Mix, Sampler
from loaderx.zrecord import Dense, Ragged


def arrays(*lengths: int) -> list[dict[str, np.ndarray]]:
    """Source k holds values k * 1000 + i, so a value names its source and record."""
    return [{"x": np.arange(n, dtype=np.int64) + 1000 * k} for k, n in enumerate(lengths)]


def take(mix: Mix, steps: int) -> list[list[int]]:
    return [mix.next().tolist() for _ in range(steps)]


def test_same_arguments_give_the_same_stream_and_seeds_differ():
    a = Mix(arrays(100, 30), [3, 1], seed=7, batch_size=16)
    b = Mix(arrays(100, 30), [3, 1], seed=7, batch_size=16)
    c = Mix(arrays(100, 30), [3, 1], seed=8, batch_size=16)
    assert take(a, 20) == take(b, 20)
    assert take(Mix(arrays(100, 30), [3, 1], seed=7, batch_size=16), 20) != take(c, 20)


def test_next_is_a_borrowed_readonly_uint64_view():
    m = Mix(arrays(50, 50), [1, 1], batch_size=8)
    v = m.next()
    assert v.dtype == np.uint64 and not v.flags.writeable and v.shape == (8,)
    assert np.shares_memory(v, m.next()) and m.step == 2


@pytest.mark.parametrize("step", [0, 1, 13, 999, 123_457])
def test_seek_equals_replay_and_batch_is_pure(step):
    mix = Mix(arrays(37, 11, 200), [0.5, 0.2, 0.3], seed=3, batch_size=12)
    if step < 2000:
        replay = Mix(arrays(37, 11, 200), [0.5, 0.2, 0.3], seed=3, batch_size=12)
        for _ in range(step):
            replay.next()
        expected = replay.next().copy()
    else:
        expected = mix.batch(step)
    mix.seek(step)
    assert mix.next().tolist() == expected.tolist()
    assert mix.batch(step).tolist() == expected.tolist() and mix.step == step + 1


@pytest.mark.parametrize("weights", [[7, 3], [0.7, 0.3], [1, 2, 3, 4], [5, 1, 1, 1, 1, 1],
                                     [0.123, 0.456, 0.789, 0.1]])
def test_proportions_are_exact_per_period_and_close_in_every_prefix(weights):
    k = len(weights)
    mix = Mix(arrays(*[97] * k), weights, seed=1, batch_size=10)
    steps = 2 * mix.period // 10 + 3
    src = mix.source_of(np.concatenate([mix.batch(s) for s in range(steps)]))
    share = np.array(mix.quanta) / mix.period
    np.testing.assert_allclose(share, np.array(weights) / sum(weights), atol=1e-12)
    counts = np.stack([np.cumsum(src == j) for j in range(k)], axis=1)
    expected = np.arange(1, len(src) + 1)[:, None] * share[None, :]
    assert np.abs(counts - expected).max() <= (k + 3) / 2     # documented bound
    if k == 2:
        assert np.abs(counts - expected).max() <= 1
    np.testing.assert_array_equal(counts[mix.period - 1], mix.quanta)  # exact per period


def test_empirical_weights_converge_with_rounded_weights():
    weights = [np.float32(0.1), 0.25, 1 / 3]   # not short decimals: rounded to 1/65536
    mix = Mix(arrays(10, 10, 10), weights, batch_size=64)
    src = mix.source_of(np.concatenate([mix.batch(s) for s in range(2000)]))
    freq = np.bincount(src, minlength=3) / len(src)
    np.testing.assert_allclose(freq, np.array(weights, dtype=float) / float(sum(weights)),
                               atol=2e-3)


def test_each_source_cycles_through_its_own_records():
    # Source 1 has 5 records: its sampler's batch is min(8, 5) = 5, a full permutation.
    mix = Mix(arrays(64, 5), [1, 1], seed=2, batch_size=8)
    values = np.concatenate([mix.streams["x"][mix.batch(s)] for s in range(40)])
    small = values[values >= 1000] - 1000
    assert len(small) >= 150
    for c in range(len(small) // 5):
        assert sorted(small[5 * c:5 * c + 5].tolist()) == [0, 1, 2, 3, 4]
    big = values[values < 1000]
    assert sorted(big[:64].tolist()) == list(range(64))        # CYCLIC, first cycle


@pytest.mark.parametrize("n", [11, 511])
def test_a_source_longer_than_the_batch_shows_every_record_once_a_cycle(n):
    """Found in review. Was: Mix built Sampler(n, min(G, n), CYCLIC), endless, whose cycles
    are full batches: a source of 511 records in batches of 256 showed 256 records a cycle
    and left out 255, so that over 20 cycles' worth of draws a record came 10 to 28 times."""
    batch = 4 if n == 11 else 256
    mix = Mix([{"x": np.arange(n)}, {"x": np.arange(50)}], [2, 1], seed=3, batch_size=batch)
    drawn: list[int] = []
    step = 0
    while len(drawn) < 20 * n:
        idx = mix.batch(step)
        drawn += [int(i) for i in idx if i < n]
        step += 1
    for c in range(20):
        assert sorted(drawn[c * n:(c + 1) * n]) == list(range(n)), c
    # The same records again from a resumed Mix, and with the global batch split in two ranks.
    again = Mix([{"x": np.arange(n)}, {"x": np.arange(50)}], [2, 1], seed=3, batch_size=batch)
    again.load_state_dict({**mix.state_dict(), "step": 3})
    assert again.next().tolist() == mix.batch(3).tolist()
    halves = [Mix([{"x": np.arange(n)}, {"x": np.arange(50)}], [2, 1], seed=3,
                  batch_size=batch // 2, rank=r, world_size=2) for r in range(2)]
    for s in range(step):
        assert np.concatenate([h.batch(s) for h in halves]).tolist() == mix.batch(s).tolist()


def test_many_vanishing_weights_take_their_slots_from_the_largest_quanta():
    """Weights that round to zero get one slot each, taken from the largest quantum at that
    moment (ties: the first source). Found in review: that was a scan of every source per
    vanished weight, quadratic (6,000 sources 5.2 s, 65,536 about ten minutes); now a heap,
    with the same quanta as the rule it replaced, computed here the old way."""
    from fractions import Fraction

    from loaderx import _mix

    def old_rule(weights):
        share = [Fraction(w) / sum(Fraction(v) for v in weights) for w in weights]
        raw = [x * _mix.PERIOD_MAX for x in share]
        quanta = [int(r) for r in raw]
        order = sorted(range(len(raw)), key=lambda k: (-(raw[k] - quanta[k]), k))
        for k in order[:_mix.PERIOD_MAX - sum(quanta)]:
            quanta[k] += 1
        for k in range(len(raw)):
            if share[k] > 0 and quanta[k] == 0:
                quanta[k] = 1
                quanta[max(range(len(raw)), key=lambda j: (quanta[j], -j))] -= 1
        g = np.gcd.reduce(quanta)
        return [q // int(g) for q in quanta]

    for weights in ([1] * 299 + [10**9], [1] * 100 + [10**9, 10**9 + 1] + [3] * 100,
                    [10**6 + 7, 10**6 + 3] + [1] * 400):
        assert _mix._quanta(weights, len(weights)) == old_rule(weights)
    quanta = _mix._quanta([1] * 65_535 + [10**12], 65_536)
    assert min(quanta) == 1 and sum(quanta) == _mix.PERIOD_MAX


def test_ranks_draw_disjoint_equal_shares_of_each_step():
    ranks = [Mix(arrays(400, 300), [2, 1], seed=4, batch_size=6, rank=r, world_size=3)
             for r in range(3)]
    single = Mix(arrays(400, 300), [2, 1], seed=4, batch_size=18)
    for step in range(20):
        parts = [m.batch(step) for m in ranks]
        assert all(len(p) == 6 for p in parts)
        together = np.concatenate(parts)
        assert len(set(together.tolist())) == 18
        assert together.tolist() == single.batch(step).tolist()


def test_pairs_bare_samplers_and_source_key():
    s0 = Sampler(20, 4, Sampler.Mode.SEQUENTIAL)
    s1 = Sampler(6, 3, Sampler.Mode.SEQUENTIAL)
    src = arrays(20, 6)
    bare = Mix([s0, s1], [1, 1], batch_size=4)
    assert bare.batch(3).tolist() == Mix([(src[0], s0), (src[1], s1)], [1, 1],
                                         batch_size=4).batch(3).tolist()
    with pytest.raises(TypeError, match="bare samplers"):
        _ = bare.streams
    m = Mix([(src[0], s0), (src[1], s1)], [1, 1], batch_size=4, source_key="source")
    idx = np.concatenate([m.batch(s) for s in range(5)])
    x = m.streams["x"][idx]
    assert m.streams["source"][idx].tolist() == (x // 1000).tolist()
    # SEQUENTIAL sources: each source's records come in order, at its own pace.
    assert (x[x < 1000]).tolist() == list(range(10))
    assert (x[x >= 1000] - 1000).tolist() == [0, 1, 2, 3, 4, 5, 0, 1, 2, 3]
    assert s0.step == 0 and s1.step == 0                      # the samplers never move


def test_bare_samplers_without_batch_size_must_agree():
    with pytest.raises(TypeError, match="batch_size="):
        Mix([Sampler(9, 2, "iid"), Sampler(9, 3, "iid")], [1, 1])
    assert Mix([Sampler(9, 2, "iid"), Sampler(9, 2, "iid")], [1, 1]).batch_size == 2


@pytest.fixture
def store_sources(tmp_path):
    sources, opened = [], []
    for k, n in enumerate((90, 25, 40)):
        with Dense.create(tmp_path / f"x{k}", np.float32, (2,), codec="zstd") as w:
            w.append((np.arange(2 * n, dtype=np.float32) + 10_000 * k).reshape(n, 2))
        with Ragged.create(tmp_path / f"t{k}", np.int32, 1, codec="raw") as w:
            w.append(np.full(i % 4, 100 * k + i % 97, dtype=np.int32) for i in range(n))
        s = {"x": Dense.open(tmp_path / f"x{k}"), "t": Ragged.open(tmp_path / f"t{k}")}
        sources.append(s)
        opened += list(s.values())
    yield sources
    for s in opened:
        s.close()


def test_dataloader_resume_equals_the_uninterrupted_run(store_sources):
    def mix():
        return Mix(store_sources, [0.6, 0.1, 0.3], seed=11, batch_size=16, mode="cyclic",
                   source_key="source")

    m = mix()
    with DataLoader(m.streams, m, workers=2, prefetch=3) as loader:
        full = [next(loader) for _ in range(30)]
    m = mix()
    with DataLoader(m.streams, m, workers=2, prefetch=3) as loader:
        first = [next(loader) for _ in range(12)]
        state = json.loads(json.dumps(loader.state_dict()))
    m = mix()
    with DataLoader(m.streams, m, workers=2, state=state) as loader:
        rest = [next(loader) for _ in range(18)]
    for a, b in zip(first + rest, full, strict=True):
        np.testing.assert_array_equal(a["x"], b["x"])
        np.testing.assert_array_equal(a["source"], b["source"])
        assert [t.tolist() for t in a["t"]] == [t.tolist() for t in b["t"]]
    # Values come from the right source and line up across streams.
    b = full[5]
    assert ((b["x"][:, 0] // 10_000).astype(int) == b["source"]).all()
    for t, src in zip(b["t"], b["source"], strict=True):
        assert (t // 100 == src).all()
    with pytest.raises(ValueError, match="different configuration"):
        other = Mix(store_sources, [0.5, 0.2, 0.3], seed=11, batch_size=16, source_key="source")
        DataLoader(other.streams, other, state=state)


@pytest.mark.parametrize("weights,error,match", [
    ([1, -1], ValueError, "must be >= 0; weight 1 is -1"),
    ([0, 0.0], ValueError, "must not all be zero"),
    ([1], ValueError, "one weight per source: 2 sources but 1 weights"),
    ([1, 2, 3], ValueError, "2 sources but 3 weights"),
    ([1, float("nan")], ValueError, "must be finite"),
    ([1, float("inf")], ValueError, "must be finite"),
    ([True, 1], TypeError, "must be a real number"),
    ([1, "2"], TypeError, "must be a real number"),
    ("12", TypeError, "sequence of numbers"),
])
def test_bad_weights_are_refused(weights, error, match):
    with pytest.raises(error, match=match):
        Mix(arrays(5, 5), weights, batch_size=2)


def test_bad_sources_are_refused():
    with pytest.raises(TypeError, match="non-empty list"):
        Mix([], [], batch_size=2)
    with pytest.raises(TypeError, match="source 1 must be a stream dict"):
        Mix([{"x": np.arange(3)}, 5], [1, 1], batch_size=2)
    with pytest.raises(ValueError, match="same stream names"):
        Mix([{"x": np.arange(3)}, {"y": np.arange(3)}], [1, 1], batch_size=2)
    with pytest.raises(ValueError, match="stream 'x' differs between Mix sources"):
        Mix([{"x": np.arange(3)}, {"x": np.arange(3.0)}], [1, 1], batch_size=2)
    with pytest.raises(ValueError, match="same length"):
        Mix([{"x": np.arange(3), "y": np.arange(4)}], [1], batch_size=2)
    with pytest.raises(ValueError, match="source 0: the sampler draws from 9 records but the streams have 3"):
        Mix([({"x": np.arange(3)}, Sampler(9, 2, "iid"))], [1])
    # A sampler of fewer records than its streams hold: refused unless subset=True, as the
    # DataLoader refuses it. Was: accepted, and the records past it were never read.
    with pytest.raises(ValueError, match=r"source 1: the sampler draws from the first 2 records .* subset=True"):
        Mix([{"x": np.arange(3)}, ({"x": np.arange(5)}, Sampler(2, 2, "iid"))], [1, 1], batch_size=2)
    mix = Mix([{"x": np.arange(3)}, ({"x": np.arange(5)}, Sampler(2, 2, "iid"))], [1, 1],
              batch_size=2, subset=True)
    drawn = np.concatenate([mix.next() for _ in range(20)])
    assert set(drawn.tolist()) <= {0, 1, 2, 3, 4} and not {5, 6, 7} & set(drawn.tolist())
    with pytest.raises(ValueError, match="source_key 'x' is already a stream name"):
        Mix(arrays(3), [1], batch_size=2, source_key="x")
    with pytest.raises(ValueError, match="rank"):
        Mix(arrays(3), [1], batch_size=2, rank=2, world_size=2)


def test_zero_weight_source_is_never_drawn_and_state_is_json():
    mix = Mix(arrays(10, 10, 10), [1, 0, 1], batch_size=5)
    src = mix.source_of(np.concatenate([mix.batch(s) for s in range(50)]))
    assert set(src.tolist()) == {0, 2}
    state = mix.state_dict()
    assert json.loads(json.dumps(state)) == state and state["quanta"] == [1, 0, 1]


def test_mix_seed_and_step_ranges_are_value_errors():
    """[R1] item 20: Mix takes the Sampler's seed range 0..2**64-1 and refuses other seeds
    and negative steps with a ValueError naming the value (batch(-1) was an OverflowError)."""
    with pytest.raises(ValueError, match=r"Mix seed must be in 0\.\.2\*\*64-1; got -1"):
        Mix([{"x": np.arange(10)}], [1], seed=-1, batch_size=2)
    mix = Mix([{"x": np.arange(10)}], [1], seed=(1 << 64) - 1, batch_size=2)
    with pytest.raises(ValueError, match=r"Mix step must be in 0\.\.2\*\*64-1; got -1"):
        mix.batch(-1)


def test_finite_samplers_are_refused():
    finite = Sampler(30, 8, "cyclic", passes=1)
    with pytest.raises(ValueError, match="must be endless"):
        Mix([({"x": np.arange(30)}, finite), {"x": np.arange(30)}], [1, 1], batch_size=8)


def test_repr_shows_each_sources_share_and_size():
    """[U1] 4."""
    mix = Mix(arrays(10_000, 500, 3000), [0.7, 0.2, 0.1], seed=42, batch_size=256,
              source_key="source")
    mix.seek(12)
    assert repr(mix) == ("<Mix of 3 sources: 70.0% of 10,000 records, 20.0% of 500, 10.0% of "
                         "3,000; batch_size=256 seed=42 rank=0 world_size=1; step 12>")
    with DataLoader(mix.streams, mix) as loader:
        text = repr(loader)
    assert "x=ndarray int64 () mixed from 3 sources" in text
    assert "source=source numbers (int64) of 3 sources" in text


def test_a_mixed_stream_tells_each_source_its_share_of_the_future():
    """The DataLoader over a Mix tells the mixed stream the Mix's future; each source that
    takes it (a store opened by URL with a cache budget) is told the positions of each step
    that fall in it, as its own positions; closing the loader closes their handles."""
    told = {}

    class Handle:
        closed = False

        def close(self):
            self.closed = True

    class Source:
        def __init__(self, name, n):
            self.name, self.n = name, n

        def __len__(self):
            return self.n

        def __getitem__(self, idx):
            return np.asarray(idx, dtype=np.int64)

        def foresee(self, batch_of, progress):
            told[self.name] = (batch_of, progress, Handle())
            return told[self.name][2]

    a, b = Source("a", 30), Source("b", 50)
    mix = Mix([{"x": a}, {"x": b}, {"x": np.arange(20)}], [1, 1, 1], batch_size=12, seed=3)
    with DataLoader(mix.streams, mix, workers=1) as loader:
        assert set(told) == {"a", "b"}
        for step in range(5):
            whole = mix.batch(step).astype(np.int64)
            assert told["a"][0](step).tolist() == whole[whole < 30].tolist()
            assert told["b"][0](step).tolist() == [i - 30 for i in whole.tolist() if 30 <= i < 80]
        next(loader)
        assert told["a"][1]() == 1
    assert told["a"][2].closed and told["b"][2].closed


def _reference(m, step):
    """Mix's indices of `step`, slot by slot in Python's ints (its schedule, then each
    source's sampler): what _fill computes vectorised."""
    out = []
    for o in range(step * m.batch_size, (step + 1) * m.batch_size):
        cycle, off = divmod(o, m.period)
        k = int(m._table_src[off])
        j = cycle * m.quanta[k] + int(m._table_rank[off])
        sampler = m._src.samplers[k]
        b, n = sampler.batch_size, sampler.length
        per = -(-n // b)  # the steps of a pass (the samplers Mix builds for CYCLIC)
        cycle_k, pos = divmod(j, n)
        out.append(int(sampler.batch(cycle_k * per + pos // b)[pos % b]) + int(m.offsets[k]))
    return out


@pytest.mark.parametrize("step", [0, 12345, 2**58 + 3, 2**61 + 7, 2**62 + 11])
def test_a_step_past_2_to_the_57_draws_what_its_sources_say(step):
    """Found in review. Was: int64 record numbers wrapped, so from about 2**58 a source got a
    negative step (ValueError), from 2**62 an OverflowError, and in between some steps came
    back with wrong records and no error."""
    m = Mix([{"x": np.arange(1001)}, {"x": np.arange(997)}], [0.7, 0.3], seed=1, batch_size=4)
    assert m.batch(step).tolist() == _reference(m, step)


def test_steps_no_source_can_draw_and_too_many_sources_are_clear_errors():
    from loaderx import _mix

    m = Mix([{"x": np.arange(1000)}, {"x": np.arange(1000)}], [0.7, 0.3], seed=1, batch_size=64)
    with pytest.raises(ValueError, match=r"Mix step must be in 0\.\.2\*\*64-1; got 18446744073709551616"):
        m.batch(2**64)
    small = Mix([{"x": np.arange(10)}, {"x": np.arange(10)}], [0.7, 0.3], seed=1, batch_size=64)
    with pytest.raises(ValueError, match="past the last step its Sampler draws"):
        small.batch(2**64 - 1)  # its sources draw batches of 10: step 2**64-1 needs more steps
    # Was: 65,537 equal weights left one source at zero quanta, never drawn, silently.
    with pytest.raises(ValueError, match="Mix takes at most 65,536 sources of positive weight; got 65,537"):
        _mix._quanta([1] * 65_537, 65_537)
    assert min(_mix._quanta([1] * 65_536, 65_536)) == 1


def test_a_mix_state_without_an_int_step_is_refused_as_a_samplers_is():
    """Found in review. Was: a bare KeyError('step') for a state without one, and step=True
    taken as step 1."""
    mix = Mix([{"x": np.arange(10)}, {"x": np.arange(7)}], [1, 1], batch_size=4)
    state = mix.state_dict()
    for bad in ({k: v for k, v in state.items() if k != "step"}, {**state, "step": True},
                {**state, "step": "3"}):
        with pytest.raises(ValueError, match=r"Mix state has no step \(an int\); got "):
            mix.load_state_dict(bad)
    mix.load_state_dict({**state, "step": np.int64(3)})
    assert mix.step == 3


def test_a_path_as_a_sources_stream_and_a_state_as_text_are_refused():
    """Found in review. Was: Mix took a path's length in characters for its records (the
    first batch then failed naming nothing), and a state given as its JSON text failed with
    "'str' object has no attribute 'get'"."""
    with pytest.raises(TypeError, match=r"stream 'x' of Mix source 0 is a path "
                       r"\('fm/train/image'\), not a store: open it first"):
        Mix([{"x": "fm/train/image"}, {"x": np.arange(10)}], [1, 1], batch_size=4)
    mix = Mix([{"x": np.arange(10)}, {"x": np.arange(7)}], [1, 1], batch_size=4)
    for target, what in ((mix, "Mix"), (Sampler(10, 2, "cyclic"), "sampler")):
        with pytest.raises(TypeError, match=rf"{what} state must be the dict that state_dict\(\) "
                           r"returned \(parse a saved one: json.loads\(text\)\); got str"):
            target.load_state_dict('{"step": 3}')
