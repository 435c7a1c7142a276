"""Elastic resume ([M1] 1): a state saved with one world size resumes with another that keeps
the global batch, and the ranks together continue the uninterrupted run's global sequence of
records: none repeated, none skipped. Offline: every rank runs in this process.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from loaderx import DataLoader, Mix, Sampler
from loaderx.zrecord import Dense, Ragged

Mode = Sampler.Mode
N, G, STEPS = 1000, 32, 40  # G: the global batch


def build(state: dict) -> Sampler:
    """The sampler a (resharded) state describes, as a user would construct it, resumed."""
    sampler = Sampler(state["length"], state["batch_size"], state["mode"], state["seed"],
                      rank=state["rank"], world_size=state["world_size"],
                      passes=state["passes"])
    sampler.load_state_dict(state)
    return sampler


def global_steps(samplers: list[Sampler], steps: int) -> list[list[int]]:
    """Each step's global batch: the ranks' batches in rank order."""
    out = []
    for _ in range(steps):
        try:
            out.append(np.concatenate([s.next() for s in samplers]).tolist())
        except StopIteration:
            break
    return out


TRANSITIONS = [(4, 2), (4, 1), (2, 4), (1, 8), (8, 4)]
MODES = [(Mode.SEQUENTIAL, None), (Mode.IID, None), (Mode.CYCLIC, None),
         (Mode.SEQUENTIAL, 2), (Mode.CYCLIC, 3)]


@pytest.mark.parametrize("mode,passes", MODES)
@pytest.mark.parametrize("before,after", TRANSITIONS)
def test_sampler_resumes_the_global_sequence_with_another_world_size(mode, passes, before,
                                                                     after):
    def ranks(world: int) -> list[Sampler]:
        return [Sampler(N, G // world, mode, seed=11, rank=r, world_size=world, passes=passes)
                for r in range(world)]

    whole = global_steps(ranks(before), STEPS + 200)
    for k in (0, 1, 13, 31, 32):  # 31 and 32 straddle the end of a CYCLIC cycle (N // G = 31)
        first = ranks(before)
        head = global_steps(first, k)
        saved = json.loads(json.dumps(first[before - 1].state_dict()))  # any rank's state
        second = [build(Sampler.reshard(saved, world_size=after, rank=r)) for r in range(after)]
        assert {s.batch_size for s in second} == {G // after}
        assert {s.step for s in second} == {k}
        tail = global_steps(second, STEPS + 200 - k)
        assert head + tail == whole
    # The same through load_state_dict, on samplers built by hand for the new topology.
    first = ranks(before)
    head = global_steps(first, 9)
    second = ranks(after)
    for s in second:
        s.load_state_dict(first[0].state_dict())
    assert head + global_steps(second, 20) == whole[:29]


def test_a_global_batch_that_does_not_divide_is_refused_with_what_would_work():
    saved = Sampler(N, 8, Mode.CYCLIC, seed=1, rank=0, world_size=4).state_dict()
    with pytest.raises(ValueError) as info:
        Sampler.reshard(saved, world_size=3, rank=0)
    message = str(info.value)
    assert "batch_size 8 x world_size 4 = global batch 32" in message
    assert "32 records per step cannot be split evenly over 3 ranks" in message
    # reshard takes no batch size: the message names none that was not given (it said
    # "this run has batch_size 10 x world_size 3 = 30").
    assert "but it cannot be resharded to world_size 3." in message
    assert "this run has" not in message
    assert ("World sizes that can resume it: 1 (batch_size 32), 2 (batch_size 16), "
            "4 (batch_size 8), 8 (batch_size 4), 16 (batch_size 2), 32 (batch_size 1)") in message
    with pytest.raises(ValueError, match="with world_size 2, use batch_size 16"):
        Sampler(N, 8, Mode.CYCLIC, seed=1, rank=1, world_size=2).load_state_dict(saved)
    with pytest.raises(ValueError, match="cannot be split evenly over 3 ranks"):
        Sampler(N, 10, Mode.CYCLIC, seed=1, rank=0, world_size=3).load_state_dict(saved)
    # The same world size with another rank is still a mix-up, and says so.
    with pytest.raises(ValueError, match="rank saved 0 != current 1"):
        Sampler(N, 8, Mode.CYCLIC, seed=1, rank=1, world_size=4).load_state_dict(saved)
    # Everything but the split must match.
    with pytest.raises(ValueError, match="seed saved 1 != current 2"):
        Sampler(N, 16, Mode.CYCLIC, seed=2, rank=0, world_size=2).load_state_dict(saved)
    with pytest.raises(ValueError, match="rank in 0..world_size-1"):
        Sampler.reshard(saved, world_size=2, rank=2)


def test_reshard_offers_only_world_sizes_whose_sampler_can_be_built():
    """SEQUENTIAL over one rank may draw a global batch larger than the records; over more
    ranks the constructor refuses it (ranks would not draw disjoint indices). Was: reshard
    listed and returned states for world sizes 2 and 4, whose sampler then failed to build."""
    saved = Sampler(3, 4, Mode.SEQUENTIAL).state_dict()
    with pytest.raises(ValueError) as info:
        Sampler.reshard(saved, world_size=2, rank=1)
    message = str(info.value)
    assert "SEQUENTIAL needs the global batch (4) <= length (3)" in message
    assert message.endswith("World sizes that can resume it: 1 (batch_size 4)")
    assert Sampler.reshard(saved, world_size=1, rank=0)["batch_size"] == 4
    # With passes, or with a global batch within the records, every divisor still works.
    many = Sampler(8, 4, Mode.SEQUENTIAL, world_size=1).state_dict()
    state = Sampler.reshard(many, world_size=2, rank=1)
    assert Sampler(8, state["batch_size"], Mode.SEQUENTIAL, rank=1, world_size=2).batch_size == 2
    bounded = Sampler(3, 4, Mode.SEQUENTIAL, passes=2).state_dict()
    assert Sampler.reshard(bounded, world_size=4, rank=3)["batch_size"] == 1


@pytest.fixture
def stores(tmp_path):
    with Dense.create(tmp_path / "id", np.int64, (), codec="raw") as w:
        w.append(np.arange(N, dtype=np.int64))
    with Ragged.create(tmp_path / "tok", np.int32, 1, codec="zstd") as w:
        w.append(np.full(i % 3, i, np.int32) for i in range(N))
    opened = {"id": Dense.open(tmp_path / "id"), "tok": Ragged.open(tmp_path / "tok")}
    yield opened
    for s in opened.values():
        s.close()


def loader_steps(loaders: list[DataLoader], steps: int) -> list[list[int]]:
    return [np.concatenate([next(loader)["id"] for loader in loaders]).tolist()
            for _ in range(steps)]


@pytest.mark.parametrize("before,after", [(4, 2), (4, 1), (2, 4)])
def test_dataloader_states_resume_elastically(stores, before, after):
    def loaders(world: int, states=None) -> list[DataLoader]:
        return [DataLoader(stores, Sampler(N, G // world, Mode.CYCLIC, seed=5, rank=r,
                                           world_size=world),
                           workers=2, state=None if states is None else states[r])
                for r in range(world)]

    whole_loaders = loaders(before)
    whole = loader_steps(whole_loaders, STEPS)
    first = loaders(before)
    head = loader_steps(first, 17)
    saved = [json.loads(json.dumps(loader.state_dict())) for loader in first]
    states = [DataLoader.reshard(saved[0], world_size=after, rank=r) for r in range(after)]
    assert {s["sampler"]["batch_size"] for s in states} == {G // after}
    second = loaders(after, states)
    assert head + loader_steps(second, STEPS - 17) == whole
    for loader in whole_loaders + first + second:
        loader.close()


@pytest.mark.parametrize("before,after", [(4, 2), (4, 1), (2, 4)])
def test_mix_states_resume_elastically(before, after):
    sources = [{"x": np.arange(n, dtype=np.int64) + 10_000 * k}
               for k, n in enumerate((700, 45, 300))]

    def mixes(world: int) -> list[Mix]:
        return [Mix(sources, [5, 2, 3], seed=3, batch_size=G // world, rank=r,
                    world_size=world) for r in range(world)]

    def steps(ms: list[Mix], n: int) -> list[list[int]]:
        return [np.concatenate([m.next() for m in ms]).tolist() for _ in range(n)]

    whole = steps(mixes(before), STEPS)
    first = mixes(before)
    head = steps(first, 23)
    saved = json.loads(json.dumps(first[0].state_dict()))
    second = mixes(after)
    for r, m in enumerate(second):
        m.load_state_dict(Mix.reshard(saved, world_size=after, rank=r))
    assert head + steps(second, STEPS - 23) == whole
    with pytest.raises(ValueError, match="use batch_size 16"):
        Mix(sources, [5, 2, 3], seed=3, batch_size=8, rank=0, world_size=2).load_state_dict(
            saved)
