"""The Python face of the compiled sampler: ``Sampler`` and ``Mode``, re-exported by
``loaderx.sampler`` (whose documentation describes the behaviour).

Invariants:
- Every argument is checked here, before it reaches ``SamplerCore``, which stores what it is
  given unchecked: ``length`` 1..LENGTH_MAX, ``batch_size`` and ``world_size`` >= 1 with
  their product at most LENGTH_MAX, ``rank`` 0..world_size-1, ``seed`` and steps 0..U64_MAX.
  An out-of-range value is a ValueError naming the value and its range, never folded into it.
- The configuration (``_cfg``, a frozen ``_Config``) is fixed at construction; the step is the
  only state. So ``state_dict()`` is the configuration plus the step, and ``load_state_dict``
  refuses a state whose configuration differs.
- This module imports nothing of loaderx but the compiled core, so ``loaderx._mix`` can build
  samplers from it without an import cycle.
"""

from __future__ import annotations

import dataclasses
import enum
import operator
import sys
from collections.abc import Mapping
from typing import Any, Literal, TypeAlias

import numpy as np

from loaderx._sampler import SamplerCore

# The largest `length`: indices and the sampler's arithmetic are 64-bit.
LENGTH_MAX = 1 << 63
# Seeds and steps are unsigned 64-bit values: 0 .. 2**64 - 1.
U64_MAX = (1 << 64) - 1


class Mode(enum.IntEnum):
    """How a Sampler draws indices."""

    SEQUENTIAL = 0
    IID = 1
    CYCLIC = 2
    BLOCKS = 3


ModeName = Literal["sequential", "iid", "cyclic", "blocks", "SEQUENTIAL", "IID", "CYCLIC", "BLOCKS"]
"""A sampling mode by name, as ``Sampler`` and ``Mix`` also take it (``"cyclic"``): any case is
accepted at run time; these spellings are the type, so that a type checker catches a misspelt
mode before the run."""


@dataclasses.dataclass(frozen=True)
class _Config:
    """A Sampler's configuration, checked: everything but the step."""

    length: int
    batch_size: int
    mode: Mode
    seed: int
    rank: int
    world_size: int
    passes: int | None
    # BLOCKS only (None in the other modes): records per block, blocks per window.
    block_records: int | None = None
    window_blocks: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """The configuration as the JSON-serialisable part of a state (mode by name); the
        BLOCKS settings only in that mode, so states of the other modes are as before."""
        out = {"length": self.length, "batch_size": self.batch_size, "mode": self.mode.name,
               "seed": self.seed, "rank": self.rank, "world_size": self.world_size,
               "passes": self.passes}
        if self.mode is Mode.BLOCKS:
            out |= {"block_records": self.block_records, "window_blocks": self.window_blocks}
        if self.mode in (Mode.CYCLIC, Mode.BLOCKS):
            out["order"] = ORDER
        return out


# Which permutation CYCLIC and BLOCKS draw their orders from (a state names it: a state of
# another resumes another sequence). 2: a Feistel network on 64-bit round keys, and a table
# up to 64 records (2026-12-07; before, order 1, absent from states: a small, biased family).
ORDER = 2


# How many world sizes an elastic-resume error lists at most.
_WORLD_SIZES_LISTED_MAX = 1024
# The configuration that may change between a saved state and the run resuming from it (when
# the global batch is kept): how the global batch is split into ranks.
TOPOLOGY = ("batch_size", "world_size", "rank")


def _ranks_overlap(mode: Mode, length: int, global_batch: int, world_size: int,
                   passes: int | None) -> bool:
    """The constructor's rule: SEQUENTIAL without passes, over more than one rank, needs a
    global batch of at most `length`, or its ranks would draw the same indices."""
    return passes is None and world_size > 1 and mode is Mode.SEQUENTIAL and \
        global_batch > length


def _ranks_draw_apart(state: Mapping[str, Any], world_size: int) -> bool:
    """Whether a sampler of `state`'s settings can split its global batch over `world_size`
    ranks (``_ranks_overlap``); True for states that are not a Sampler's (a Mix's)."""
    length, batch, world = state.get("length"), state.get("batch_size"), state.get("world_size")
    if not isinstance(length, int) or not isinstance(batch, int) or not isinstance(world, int):
        return True
    try:
        mode = mode_of(state.get("mode"))  # type: ignore[arg-type]
    except (ValueError, TypeError):
        return True
    return not _ranks_overlap(mode, length, batch * world, world_size, state.get("passes"))


def _global_batch_error(what: str, saved_batch: int, saved_world: int, batch_size: int | None,
                        world_size: int, state: Mapping[str, Any] | None = None) -> str:
    """Why (batch_size, world_size) cannot resume a state saved with (saved_batch,
    saved_world), and which settings can; `batch_size` None: reshard(world_size), which takes
    no batch size. With `state`, only world sizes its sampler can be built with are listed."""
    g = saved_batch * saved_world
    works = [w for w in range(1, min(g, _WORLD_SIZES_LISTED_MAX) + 1)
             if g % w == 0 and (state is None or _ranks_draw_apart(state, w))]
    listed = ", ".join(f"{w} (batch_size {g // w})" for w in works)
    more = f" (listed up to {_WORLD_SIZES_LISTED_MAX})" if g > _WORLD_SIZES_LISTED_MAX else ""
    if state is not None and not _ranks_draw_apart(state, world_size):
        hint = (f"with world_size > 1, SEQUENTIAL needs the global batch ({g}) <= length "
                f"({state.get('length')}) so that ranks draw disjoint indices")
    elif g % world_size == 0:
        hint = f"with world_size {world_size}, use batch_size {g // world_size}"
    else:
        hint = f"{g} records per step cannot be split evenly over {world_size} ranks"
    asked = (f"it cannot be resharded to world_size {world_size}" if batch_size is None else
             f"this run has batch_size {batch_size} x world_size {world_size} = "
             f"{batch_size * world_size}")
    return (f"{what} state was saved with batch_size {saved_batch} x world_size {saved_world} "
            f"= global batch {g}, but {asked}. A run resumes exactly (no record "
            f"repeated or skipped) only with the same global batch: {hint}. World sizes that "
            f"can resume it{more}: {listed}")


def _check_topology(what: str, state: Mapping[str, Any], batch_size: int, world_size: int,
                    rank: int) -> None:
    """Accept a state of the same topology, or of another world size with the same global
    batch (elastic resume); refuse anything else with a message that says what would work."""
    saved_batch, saved_world = state.get("batch_size"), state.get("world_size")
    if not isinstance(saved_batch, int) or not isinstance(saved_world, int):
        raise ValueError(f"{what} state has no batch_size/world_size; got "
                         f"{saved_batch!r}/{saved_world!r}")
    if saved_batch * saved_world != batch_size * world_size:
        raise ValueError(_global_batch_error(what, saved_batch, saved_world, batch_size,
                                             world_size))
    if saved_world == world_size and state.get("rank") != rank:
        # The same topology: a state of another rank means checkpoints were mixed up.
        raise ValueError(f"{what} state was saved with a different configuration: rank saved "
                         f"{state.get('rank')!r} != current {rank!r} (with another world "
                         f"size, any rank may resume it: see reshard())")


def reshard_state(what: str, state: Mapping[str, Any], world_size: int, rank: int
                  ) -> dict[str, Any]:
    """`state` (a Sampler's or a Mix's) for rank `rank` of `world_size` ranks with the same
    global batch; a ValueError says which world sizes can take it when none can."""
    world_size = operator.index(world_size)
    rank = operator.index(rank)
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"reshard needs world_size >= 1 and rank in 0..world_size-1; got "
                         f"world_size {world_size}, rank {rank}")
    saved_batch, saved_world = state.get("batch_size"), state.get("world_size")
    if not isinstance(saved_batch, int) or not isinstance(saved_world, int):
        raise ValueError(f"{what} state has no batch_size/world_size; got "
                         f"{saved_batch!r}/{saved_world!r}")
    g = saved_batch * saved_world
    if g % world_size or not _ranks_draw_apart(state, world_size):
        raise ValueError(_global_batch_error(what, saved_batch, saved_world, None, world_size,
                                             state))
    return {**state, "batch_size": g // world_size, "world_size": world_size, "rank": rank}


def mode_of(mode: Mode | ModeName | int) -> Mode:
    """`mode` (a Mode, its name in any case, or its number) as a Mode; ValueError otherwise."""
    if isinstance(mode, str):
        try:
            return Mode[mode.upper()]
        except KeyError:
            raise ValueError(f"Sampler mode must be one of {[m.name for m in Mode]}; "
                             f"got {mode!r}") from None
    names = ", ".join(f"{m.name} ({m.value})" for m in Mode)
    if isinstance(mode, bool) or not isinstance(mode, (int, np.integer)):
        # 2.0 was taken as CYCLIC.
        raise TypeError(f"Sampler mode must be a Sampler.Mode, its name or its number: {names}; "
                        f"got {mode!r}")
    try:
        return Mode(int(mode))
    except ValueError:
        raise ValueError(f"Sampler mode must be one of {names}; got {mode!r}") from None


def _sampler_of(state: Mapping[str, Any]) -> Sampler:
    """The sampler a state describes, at its step (Sampler.__reduce__)."""
    blocks = {k: state[k] for k in ("block_records", "window_blocks") if k in state}
    sampler = Sampler(state["length"], state["batch_size"], state["mode"], state["seed"],
                      rank=state["rank"], world_size=state["world_size"], passes=state["passes"],
                      **blocks)
    sampler.seek(state["step"])
    return sampler


# BLOCKS: blocks whose records are shuffled together, unless the caller says otherwise.
WINDOW_BLOCKS_DEFAULT = 8


def saved_step(what: str, state: Mapping[str, Any]) -> int:
    """The step of a saved state (an int, not a bool), else ValueError naming `what` (sampler,
    Mix) and the state's keys; TypeError for a state that is no dict."""
    if not isinstance(state, Mapping):
        # A state saved as JSON and given as its text, say.
        raise TypeError(f"{what} state must be the dict that state_dict() returned (parse a "
                        f"saved one: json.loads(text)); got {type(state).__name__}")
    step = state.get("step")
    if isinstance(step, (bool, np.bool_)) or not isinstance(step, (int, np.integer)):
        raise ValueError(f"{what} state has no step (an int); got {step!r} in a state of "
                         f"keys {sorted(state)}")
    return int(step)


def _blocks_settings(mode: Mode, block_records: Any, window_blocks: Any) -> tuple[int | None, int | None]:
    """(block_records, window_blocks) checked for BLOCKS; (None, None) for the other modes,
    which take no block_records."""
    if mode is not Mode.BLOCKS:
        if block_records is not None:
            raise ValueError(f"Sampler block_records is a setting of mode BLOCKS; got "
                             f"block_records={block_records!r} with mode {mode.name}")
        if window_blocks != WINDOW_BLOCKS_DEFAULT:  # 0 and "x" were accepted, and unused
            raise ValueError(f"Sampler window_blocks is a setting of mode BLOCKS; got "
                             f"window_blocks={window_blocks!r} with mode {mode.name}")
        return None, None
    if block_records is None:
        raise ValueError("Sampler mode BLOCKS needs block_records, the records of one block "
                         "(a run of consecutive records read at once): for a store, "
                         "loaderx.sampler.block_records(store, block_bytes) sizes it in bytes")
    r = _positive("block_records", block_records)
    w = _positive("window_blocks", window_blocks)
    if r * w > LENGTH_MAX:
        raise ValueError(f"Sampler block_records * window_blocks must be <= 2**63; got {r} * {w}")
    return r, w


def block_records(store: Any, block_bytes: int = 8 << 20) -> int:
    """Records per block for mode BLOCKS such that a block of `store` (a zrecord reader, or
    anything with ``len()`` and ``stored_bytes``) holds about `block_bytes` stored bytes, at
    least one record and at most ``len(store)``: ``block_bytes * len(store) //
    store.stored_bytes`` (for a store of no stored bytes, ``min(len(store), block_bytes)``)."""
    from zrecord import block_records_for  # the rule zrecord's epoch_cost counts blocks by

    block_bytes = _positive("block_bytes", block_bytes)
    n = len(store)
    if n < 1:
        raise ValueError("block_records of an empty store: it has no records to cut into blocks")
    return block_records_for(n, int(getattr(store, "stored_bytes", 0)), block_bytes)


def _int_arg(name: str, value: Any) -> int:
    if isinstance(value, (bool, np.bool_)):
        # True passed as 1 (a length, a batch size, a seed), never what was meant.
        raise TypeError(f"Sampler {name} must be an int; got {value!r}")
    try:
        return operator.index(value)
    except TypeError as exc:
        raise TypeError(f"Sampler {name} must be an int; got {type(value).__name__}") from exc


def _positive(name: str, value: Any) -> int:
    """`value` as an int in 1..LENGTH_MAX; the message names the bound that was crossed."""
    v = _int_arg(name, value)
    if v < 1:
        raise ValueError(f"Sampler {name} must be >= 1; got {v}")
    if v > LENGTH_MAX:
        raise ValueError(f"Sampler {name} must be <= 2**63; got {v}")
    return v


def _u64(name: str, value: Any) -> int:
    """`value` as an int in 0..2**64-1 (a seed or a step)."""
    v = _int_arg(name, value)
    if not 0 <= v <= U64_MAX:
        raise ValueError(f"Sampler {name} must be in 0..2**64-1; got {v}")
    return v


class Sampler(SamplerCore):
    """Batch indices as a pure function of (seed, step). See the module documentation.

    ``seed`` is 0..2**64-1; a seed outside that range is a ValueError, not folded into it.
    """

    # A type alias rather than a plain class attribute, so that ``Sampler.Mode`` is also
    # valid in annotations (mypy refuses a variable there).
    Mode: TypeAlias = Mode

    def __init__(self, length: int, batch_size: int, mode: Mode | ModeName | int,
                 seed: int = 0, *, rank: int = 0, world_size: int = 1,
                 passes: int | None = None, block_records: int | None = None,
                 window_blocks: int = WINDOW_BLOCKS_DEFAULT) -> None:
        length = _positive("length", length)
        batch_size = _positive("batch_size", batch_size)
        world_size = _positive("world_size", world_size)
        mode = mode_of(mode)
        rank = _int_arg("rank", rank)
        if not 0 <= rank < world_size:
            raise ValueError(f"Sampler rank must be in 0..{world_size - 1} for world_size "
                             f"{world_size}; got {rank}")
        seed = _u64("seed", seed)
        global_batch = batch_size * world_size
        if global_batch > LENGTH_MAX:
            raise ValueError(f"Sampler batch_size * world_size must be <= 2**63; got "
                             f"{batch_size} * {world_size} = {global_batch}")
        if passes is not None:
            passes = _int_arg("passes", passes)
            if mode is Mode.IID:
                raise ValueError("IID draws with replacement, so it has no passes over the "
                                 "records; use SEQUENTIAL (in order) or CYCLIC (shuffled) with "
                                 "passes=")
            per_pass = -(-length // global_batch)
            if passes < 1:
                raise ValueError(f"Sampler passes must be >= 1 or None (endless); got {passes}")
            if passes * per_pass > U64_MAX:
                raise ValueError(f"Sampler passes must be <= {U64_MAX // per_pass} for "
                                 f"{per_pass} steps per pass (steps are 0..2**64-1); got "
                                 f"{passes}")
        elif mode in (Mode.CYCLIC, Mode.BLOCKS) and global_batch > length:
            raise ValueError(
                f"{mode.name} draws full batches without replacement, so batch_size * world_size "
                f"({batch_size} * {world_size} = {global_batch}) must not exceed length "
                f"({length}); use IID or SEQUENTIAL, or a smaller batch")
        if _ranks_overlap(mode, length, global_batch, world_size, passes):
            raise ValueError(
                f"with world_size > 1, SEQUENTIAL needs batch_size * world_size ({global_batch}) "
                f"<= length ({length}) so that ranks draw disjoint indices")
        block, window = _blocks_settings(mode, block_records, window_blocks)
        self._cfg = _Config(length, batch_size, mode, seed, rank, world_size, passes, block, window)
        super().__init__(length, batch_size, int(mode), seed, rank, world_size, passes or 0,
                         block or 1, window or 1)

    # The seed's attribute names.
    @property
    def length(self) -> int:
        """The number of records drawn from (the index space ``0 .. length - 1``)."""
        return self._cfg.length

    @property
    def batch_size(self) -> int:
        """Indices per batch, per rank."""
        return self._cfg.batch_size

    @property
    def mode(self) -> Mode:
        """The sampling mode (SEQUENTIAL, IID, CYCLIC or BLOCKS)."""
        return self._cfg.mode

    @property
    def seed(self) -> int:
        """The seed: with the step, it determines every batch."""
        return self._cfg.seed

    @property
    def rank(self) -> int:
        """This process's rank, ``0 .. world_size - 1``."""
        return self._cfg.rank

    @property
    def world_size(self) -> int:
        """The number of ranks sharing the index space."""
        return self._cfg.world_size

    @property
    def passes(self) -> int | None:
        """With ``passes=k``, k; None for the endless default."""
        return self._cfg.passes

    @property
    def block_records(self) -> int | None:
        """BLOCKS: records per block (a run of consecutive records); None in other modes."""
        return self._cfg.block_records

    @property
    def window_blocks(self) -> int | None:
        """BLOCKS: blocks per window (whose records are shuffled together); None otherwise."""
        return self._cfg.window_blocks

    @property
    def steps(self) -> int | None:
        """The number of steps of the whole run (from step 0) with ``passes``; None when
        endless."""
        return self._steps

    def __len__(self) -> int:
        """The number of steps with ``passes``; an endless sampler has no ``len()``."""
        steps = self._steps
        if steps is None:
            raise TypeError("an endless Sampler has no len(); pass passes=1 for one pass over "
                            "the records")
        if steps > sys.maxsize:
            raise OverflowError(f"len() of a Sampler of {steps} steps: Python's len() holds at "
                                f"most {sys.maxsize}; sampler.steps gives the number")
        return int(steps)

    def __bool__(self) -> bool:
        # Without this, `if sampler:` would call __len__, which an endless sampler refuses.
        return True

    def __iter__(self) -> Sampler:
        return self

    def seek(self, step: int) -> None:
        """Make `step` the next step drawn. O(1): nothing is replayed. With passes, `step` is
        at most ``steps`` (the end: the next draw raises StopIteration)."""
        step = _u64("step", step)
        steps = self._steps
        if steps is not None and step > steps:
            raise ValueError(f"Sampler step must be in 0..{steps} for a run of {steps} steps; "
                             f"got {step}")
        super().seek(step)

    def batch(self, step: int) -> np.ndarray:
        """A new array with the indices of `step` (0..2**64-1, with passes 0..steps-1); the
        sampler's own step is unchanged."""
        step = _u64("step", step)
        steps = self._steps
        if steps is not None and step >= steps:
            raise ValueError(f"Sampler step must be in 0..{steps - 1} for a run of {steps} "
                             f"steps; got {step}")
        return self._batch(step)

    @property
    def steps_per_cycle(self) -> int:
        """Steps in one cycle, an epoch by count: CYCLIC endless, one permutation's full
        batches (``length // (batch_size * world_size)``); with passes, one pass
        (``ceil(length / (batch_size * world_size))``, SEQUENTIAL too). Endless IID and
        SEQUENTIAL have no cycle of whole batches; for them it is the steps that draw
        ``length`` records or just more (``ceil(length / (batch_size * world_size))``), so
        ``range(sampler.steps_per_cycle)`` is an epoch's loop in every mode."""
        global_batch = self.batch_size * self.world_size
        if self.passes is None and self.mode in (Mode.CYCLIC, Mode.BLOCKS):
            return self.length // global_batch
        return -(-self.length // global_batch)

    def state_dict(self) -> dict[str, Any]:
        """The configuration and the next step: small and JSON-serialisable."""
        return {**self._cfg.as_dict(), "step": int(self.step)}

    def __reduce__(self) -> tuple[Any, ...]:
        """A sampler pickles (and copies) as its state: the same configuration at the same
        step, with a buffer of its own."""
        return (_sampler_of, (self.state_dict(),))

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Seek to a saved step after checking that the configuration is the same, except
        for the split into ranks: a state saved with another world size resumes exactly when
        the global batch ``batch_size * world_size`` is the same (elastic resume; any rank
        may load it), and is refused otherwise with the batch sizes that would work."""
        # First: a different global batch also changes what derives from it (Mix's source
        # samplers), and its message says what would work.
        step = saved_step("sampler", state)
        _check_topology("sampler", state, self.batch_size, self.world_size, self.rank)
        config = self._cfg.as_dict()
        if isinstance(state.get("mode"), str):
            # Any case, as the constructor takes it ("cyclic" was refused as another mode).
            state = {**state, "mode": mode_of(state["mode"]).name}
        if "order" in config and state.get("mode") == config["mode"] \
                and state.get("order") != config["order"]:  # (another mode: said below)
            raise ValueError(f"sampler state was saved by a loaderx whose {self.mode.name} orders "
                             f"were another permutation (order {state.get('order', 1)!r}; this one "
                             f"draws order {ORDER}): it would not resume the same sequence. Start "
                             "the run again, or resume it with the loaderx that saved it")
        different = {k: (state.get(k), v) for k, v in config.items()
                     if k not in TOPOLOGY and state.get(k) != v}
        if different:
            raise ValueError("sampler state was saved with a different configuration: " +
                             ", ".join(f"{k} saved {s!r} != current {c!r}"
                                       for k, (s, c) in different.items()))
        self.seek(step)

    @staticmethod
    def reshard(state: Mapping[str, Any], *, world_size: int, rank: int) -> dict[str, Any]:
        """A saved ``state_dict()`` rewritten for rank `rank` of `world_size` ranks with the
        same global batch, so that ``state["batch_size"]`` is the batch size to build the
        new Sampler with. The run continues the same global sequence: no record repeated or
        skipped. Raises ValueError, naming the world sizes that work, when `world_size` does
        not divide the global batch."""
        return reshard_state("sampler", state, world_size, rank)

    def __repr__(self) -> str:
        """The constructor call that rebuilds this sampler, then where it is:
        ``Sampler(length=1000, batch_size=16, mode=Sampler.Mode.CYCLIC, seed=42, rank=0,
        world_size=2) at step 40 (cycle 1, step 9 of 31 in it)``."""
        passes = "" if self.passes is None else f", passes={self.passes}"
        blocks = ("" if self.mode is not Mode.BLOCKS else
                  f", block_records={self.block_records}, window_blocks={self.window_blocks}")
        return (f"Sampler(length={self.length}, batch_size={self.batch_size}, "
                f"mode=Sampler.Mode.{self.mode.name}, seed={self.seed}, rank={self.rank}, "
                f"world_size={self.world_size}{passes}{blocks}) at step {self.step}{self._where()}")

    def _where(self) -> str:
        """Where the next step lies in its cycle or pass (empty for IID)."""
        step, per = int(self.step), self.steps_per_cycle
        if self.passes is not None:
            if step >= self.passes * per:
                return " (ended)"
            if self.passes == 1:
                return f" of {per}"
            return (f" of {self.passes * per} (pass {step // per} of {self.passes}, step "
                    f"{step % per} of {per} in it)")
        if self.mode in (Mode.CYCLIC, Mode.BLOCKS):
            return f" (cycle {step // per}, step {step % per} of {per} in it)"
        if self.mode is Mode.SEQUENTIAL:
            first = (step * self.batch_size * self.world_size) % self.length
            return f" (next global position: record {first})"
        return ""


__all__ = ["LENGTH_MAX", "ORDER", "TOPOLOGY", "U64_MAX", "WINDOW_BLOCKS_DEFAULT", "Mode", "ModeName", "Sampler",
           "block_records", "reshard_state"]
