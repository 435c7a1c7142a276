"""The stateless sampler: batch indices as a pure function of (seed, step).

``Sampler(length, batch_size, mode, seed=0, *, rank=0, world_size=1, passes=None,
block_records=None, window_blocks=8)`` draws
one batch of record indices per step. ``next()`` (and iteration) returns a read-only view of
one reused uint64 buffer: it is *borrowed* until the next draw from the same sampler, so copy
it only if it must outlive that draw. The indices are uint64, as the user's design has them:
NumPy turns ``indices - offset`` with an int64 ``offset`` into float64, and torch does not index
with uint64 tensors, so convert first where that matters (``indices.astype(np.int64)``: every
index is below 2**63); a loader transform's ``ctx.indices`` is int64 already. ``seek(step)`` is O(1) and makes ``step`` the next one
drawn, so a run resumes without replaying draws. The sampler is endless unless ``passes`` is given.

Modes:

- ``SEQUENTIAL``: records in order, wrapping at the end (a batch may straddle the wrap).
- ``IID``: uniform with replacement.
- ``CYCLIC``: each cycle is a fresh pseudo-random permutation, drawn without replacement in full
  batches; when ``length`` is not a multiple of the global batch, each cycle omits
  ``length mod (batch_size * world_size)`` records, chosen afresh by each cycle's permutation. No dataset-sized permutation is
  ever allocated (the permutation is a keyed bijection computed per index: a Feistel network
  on 64-bit round keys, or a shuffled table up to 64 records, so that few records get every
  order with equal chance).
- ``BLOCKS`` (locality-aware): as CYCLIC (cycles, full batches, passes), in another order.
  The records are cut into blocks of ``block_records`` consecutive records (the last block
  short when ``block_records`` does not divide ``length``); each cycle takes the full blocks
  in a fresh pseudo-random order (the short one's place among them drawn per cycle too),
  cuts that order into windows of
  ``window_blocks`` blocks, and draws each window's records in a fresh permutation of their
  own. So the ``window_blocks * block_records`` positions of a window read only that many
  blocks, each a run of records that a store lays back to back: one ranged read each from
  object storage instead of one per record. ``window_blocks`` tunes between reading whole
  blocks (1) and a uniform shuffle (a window of the whole dataset); ``block_records(store,
  block_bytes=8 << 20)`` sizes blocks in stored bytes. Exact resume, ``seek``, ranks and
  ``reshard`` work as for CYCLIC.

Passes (evaluation): ``Sampler(..., passes=k)`` with SEQUENTIAL, CYCLIC or BLOCKS reads every record
exactly once per pass, for ``k`` passes, then ``next()`` raises StopIteration; ``len(sampler)``
and ``sampler.steps`` are the number of steps, ``k * ceil(length / (batch_size *
world_size))``. Nothing is dropped: the last step of each pass holds the
``length mod (batch_size * world_size)`` remaining records (SEQUENTIAL: the last ones in
order; CYCLIC: the end of that pass's permutation; a pass of CYCLIC is the permutation of the
cycle with the same number). With several ranks, every rank still runs the same number of
steps, and that last step's records are split as evenly as the ranks allow: rank ``r`` gets
``rem // world_size`` of them plus one if ``r < rem % world_size`` (``rem`` the remainder), so
its last batch may be short or empty (zero records) while the ranks together cover every
record exactly once. IID draws with replacement and has no passes (a ValueError).

Arguments: ``length`` is 1..2**63; ``batch_size`` and ``world_size`` are at least 1, with
``batch_size * world_size`` at most 2**63; ``rank`` is 0..world_size-1; ``seed`` is any
unsigned 64-bit value, 0..2**64-1 (each seed gives its own stream), and steps are 0..2**64-1.
Anything else raises ValueError (TypeError for a non-integer) naming the value and the range.

Ranks: with ``world_size > 1`` the ranks together draw the global batch of ``batch_size *
world_size`` indices per step and rank ``r`` takes positions ``[r * batch_size, (r + 1) *
batch_size)`` of it: disjoint positions of one sequence, so SEQUENTIAL and CYCLIC ranks never
share a record within a step (IID draws with replacement, so two positions may hold the same
record, as within one process's batch). Every rank has the same number of steps: the sampler
is endless and all ranks share the same step counter semantics, so no rank runs out early.

Elastic resume: what the global batch holds depends on its size, never on how it is split
into ranks, so a ``state_dict()`` saved with one world size resumes exactly with another that
keeps ``batch_size * world_size``: ``load_state_dict`` accepts it (from any rank), and
``Sampler.reshard(state, world_size=..., rank=...)`` rewrites it for a rank of the new
topology (its ``batch_size`` is the one to build with). Otherwise it is refused with a
ValueError that names the world sizes and batch sizes that would work.

``Mix(sources, weights, seed=0, *, batch_size=...)`` mixes several sources (stream dicts, each
cycling with its own sampler) into one batch stream with exact per-record proportions; it is
also a pure function of (seed, step). See ``loaderx._mix``.

``Sampler`` and ``Mode`` live in ``loaderx._sampler_api`` (over the compiled
``loaderx._sampler``) and ``Mix`` in ``loaderx._mix``; this module re-exports them.
"""

from loaderx._mix import Mix
from loaderx._sampler_api import Mode, ModeName, Sampler, block_records

__all__ = ["Mix", "Mode", "ModeName", "Sampler", "block_records"]
