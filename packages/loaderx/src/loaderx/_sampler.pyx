# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: freethreading_compatible = True
"""The sampler's batch function: a pure function of (configuration, seed, step).

Invariants:
- `lx_fill(cfg, step, out)` (_sampler_core.h) writes the `batch_size` indices of this rank's
  batch at `step` and depends on nothing else: no state is carried between steps, so `seek` is O(1) and a
  resumed run draws exactly what the uninterrupted one would have drawn.
- Global batch: at every step the `world_size` ranks together draw G = batch_size * world_size
  positions; rank r owns positions [r * batch_size, (r + 1) * batch_size) of that step. What
  a position holds depends on (seed, step, position, G) only, never on how G is split into
  ranks: that is what makes elastic resume (another world size, the same G) exact.
- Modes:
  SEQUENTIAL  position p of step s is record (s * G + p) mod length: in order, wrapping.
  IID         uniform with replacement over all records, from a counter-based generator
              (wyrand's output function of the seed-keyed global draw counter
              step * G + position) mapped to [0, length) by a 128-bit multiply. Ranks draw
              disjoint positions of the global sequence, but as with one process drawing G
              records with replacement, two positions may hold the same record.
  CYCLIC      cycle c = s // (length // G) is a fresh pseudo-random permutation of the records
              (lx_perm: a shuffled table up to 64 records, else a Feistel network on the
              next power of two, cycle-walked into [0, length)); step s takes positions
              [k * G, (k + 1) * G) of it (k = s mod steps per cycle). Full batches only; the length mod G positions at the end of each
              cycle's permutation are omitted, so which records are omitted is drawn afresh
              by every cycle's permutation.
  BLOCKS      cycles and full batches as CYCLIC, of another order (lx_blocks): the records cut
              into blocks of `block_records` consecutive records, a permutation of the
              blocks (the short block's place, if any, drawn per cycle), cut into windows of
              `window_blocks` blocks, each window's records in a permutation of their own. A
              window of window_blocks * block_records positions reads that many blocks, each
              a run of consecutive records (one ranged read of a store).
  No dataset-sized allocation in any mode.
- Passes (`finite`, SEQUENTIAL, CYCLIC and BLOCKS): a pass is ceil(length / G) steps that
  cover positions 0 .. length - 1 once (SEQUENTIAL: the records in order; CYCLIC and BLOCKS:
  pass p is cycle p's order, read to its end); the last step of a pass holds length mod G positions,
  split as evenly as the ranks allow, so a rank's batch there is short or empty. After
  `passes` passes (`end` steps) a draw raises StopIteration and the step stays at `end`.
- The C batch function is `lx_fill` in _sampler_core.h; this module owns the buffers and the
  step counter. `_batch` (behind `Sampler.batch`, which Mix calls) releases the GIL while it
  fills; `next()` keeps it, as only the consuming thread draws and a typical fill is shorter
  than releasing and taking the GIL back.
- Buffers are bytearrays that this module allocates and NumPy views: their address comes from
  the Limited API (PyByteArray_AsString), so no NumPy C struct is declared here, and a view
  keeps its bytearray alive. A bytearray with an exported view cannot be resized, so the
  address stays valid as long as the view exists.
"""

cimport cython
from cpython.bytearray cimport PyByteArray_AsString
from libc.stdint cimport uint64_t, uintptr_t

from loaderx._sampler_core cimport lx_config, lx_count, lx_fill, lx_mix64, lx_steps_per_pass

import numpy as np


cdef uint64_t *_address(bytearray buffer) except NULL:
    """Address of `buffer`'s bytes, which this module fills with uint64 values."""
    cdef char *p = PyByteArray_AsString(buffer)
    if (<uintptr_t> p) % 8 != 0:  # pymalloc and malloc both align to 16 bytes
        raise RuntimeError("the index buffer is not 8-byte aligned")
    return <uint64_t *> p


cdef class SamplerCore:
    """Configuration, step counter and the reused batch buffer. See loaderx.sampler.Sampler."""

    cdef lx_config cfg
    cdef uint64_t _step
    cdef uint64_t _end       # with passes: the number of steps; endless: unused
    cdef uint64_t *data
    cdef bytearray _buffer
    cdef object _view

    def __init__(self, uint64_t length, uint64_t batch_size, int mode, uint64_t seed,
                 uint64_t rank, uint64_t world_size, uint64_t passes=0,
                 uint64_t block_records=1, uint64_t window_blocks=1):
        # The Python layer validates every argument; this layer only stores them. `passes` 0
        # is endless; otherwise passes * steps per pass is at most 2**64 - 1.
        self.cfg.length = length
        self.cfg.batch = batch_size
        self.cfg.mode = mode
        self.cfg.rank = rank
        self.cfg.world = world_size
        self.cfg.key = lx_mix64(seed ^ 0x6C6F61646572780AULL)
        self.cfg.finite = 1 if passes else 0
        self.cfg.block = block_records
        self.cfg.window = window_blocks
        self._end = passes * lx_steps_per_pass(&self.cfg) if passes else 0
        self._step = 0
        self._buffer = bytearray(8 * batch_size)
        self.data = _address(self._buffer)
        view = np.frombuffer(self._buffer, dtype=np.uint64)
        view.flags.writeable = False
        self._view = view

    cdef object _draw(self):
        cdef uint64_t n
        # The step counter and the reused buffer are this object's state: on a free-threaded
        # CPython, threads drawing from one sampler take turns on the object's own lock (a
        # no-op where the GIL does the same), so each draw gets a step of its own and fills
        # the buffer whole. The view stays borrowed: the next draw overwrites it.
        with cython.critical_section(self):
            if self.cfg.finite and self._step >= self._end:
                raise StopIteration
            n = lx_fill(&self.cfg, self._step, self.data)
            self._step += 1
        # Only the last step of a pass is short: a shorter view of the same buffer.
        return self._view if n == self.cfg.batch else self._view[:n]

    def next(self):
        """The next batch of indices: a read-only view of the reused buffer (borrowed).
        With passes, StopIteration after the last step."""
        return self._draw()

    def __next__(self):
        return self._draw()

    def _batch(self, uint64_t step):
        """A new uint64 array with the batch of `step`; the step counter is unchanged."""
        cdef uint64_t n = lx_count(&self.cfg, step)
        if n == 0:
            return np.empty(0, dtype=np.uint64)
        out = bytearray(8 * n)
        cdef uint64_t *p = _address(out)
        with nogil:
            lx_fill(&self.cfg, step, p)
        return np.frombuffer(out, dtype=np.uint64)

    def seek(self, uint64_t step):
        """Make `step` the next step drawn. O(1)."""
        with cython.critical_section(self):
            self._step = step

    @property
    def _steps(self):
        """With passes, the number of steps of the whole run; endless: None."""
        return self._end if self.cfg.finite else None

    @property
    def step(self):
        """The step the next draw returns (the number of draws since step 0, after seeks)."""
        return self._step
