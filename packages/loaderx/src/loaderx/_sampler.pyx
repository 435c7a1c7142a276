# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The sampler's batch function: a pure function of (configuration, seed, step).

Invariants:
- `fill_batch(cfg, step, out)` writes the `batch_size` indices of this rank's batch at `step`
  and depends on nothing else: no state is carried between steps, so `seek` is O(1) and a
  resumed run draws exactly what the uninterrupted one would have drawn.
- Global batch: at every step the `world_size` ranks together draw G = batch_size * world_size
  positions; rank r owns positions [r * batch_size, (r + 1) * batch_size) of that step.
- Modes:
  SEQUENTIAL  position p of step s is record (s * G + p) mod length: in order, wrapping.
  IID         uniform with replacement, from a counter-based generator (wyrand's output
              function of the global draw counter) mapped to [0, m) by a 128-bit multiply. With world_size > 1
              each rank draws from its own stride of the records (i = rank + world_size * j,
              j < length // world_size), so ranks never share an index.
  CYCLIC      cycle c = s // (length // G) is a fresh pseudo-random permutation of the records
              (a keyed bijective mixer on the next power of two, cycle-walked into
              [0, length)); step s takes positions [k * G, (k + 1) * G) of it (k = s mod steps
              per cycle). Full batches only; the length mod G positions at the end of each
              cycle's permutation are omitted, and they are different records every cycle.
  No dataset-sized allocation in any mode.
"""

from cpython.pycapsule cimport PyCapsule_GetPointer
from libc.stdint cimport uint64_t

cdef extern from *:
    """
    #include <stdint.h>
    typedef unsigned __int128 lx_u128;

    static inline uint64_t lx_mix64(uint64_t z) {
        /* SplitMix64's finalizer: a bijective 64-bit mixer with full avalanche. */
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        return z ^ (z >> 31);
    }

    static inline uint64_t lx_wyrand(uint64_t x) {
        /* wyrand's output function of a counter: one 128-bit multiply, folded. */
        lx_u128 t = (lx_u128)x * (x ^ 0xE7037ED1A0B428DBULL);
        return (uint64_t)(t >> 64) ^ (uint64_t)t;
    }

    static inline uint64_t lx_below(uint64_t u, uint64_t m) {
        /* Maps a uniform 64-bit value to [0, m); bias at most m / 2^64. */
        return (uint64_t)(((lx_u128)u * m) >> 64);
    }

    /* A keyed permutation of [0, 2^bits): three rounds of key mixing, multiplication by an
       odd constant and an xorshift by half the width, every step masked to `bits` bits.
       Each step is a bijection of the domain (odd multipliers are invertible modulo 2^bits,
       x ^= x >> s is invertible for s >= 1), so the composition is one too. */
    static inline uint64_t lx_permute(uint64_t x, uint64_t mask, unsigned half,
                                      const uint64_t keys[3]) {
        x = ((x ^ keys[0]) * 0x9E3779B97F4A7C15ULL) & mask;
        x ^= x >> half;
        x = ((x + keys[1]) * 0xBF58476D1CE4E5B9ULL) & mask;
        x ^= x >> half;
        x = ((x ^ keys[2]) * 0x94D049BB133111EBULL) & mask;
        return x ^ (x >> half);
    }

    typedef struct {
        uint64_t length, batch, rank, world, mode, key;
    } lx_config;

    enum { LX_SEQUENTIAL = 0, LX_IID = 1, LX_CYCLIC = 2 };
    #define LX_GOLDEN 0x9E3779B97F4A7C15ULL

    static void lx_fill(const lx_config *c, uint64_t step, uint64_t *restrict out) {
        /* Every field is read once into a local: `out` is uint64_t too, so without that the
           compiler would have to reload the configuration after every store. */
        const uint64_t B = c->batch, N = c->length, W = c->world, R = c->rank, K = c->key;
        const uint64_t G = B * W;
        const uint64_t first = R * B;   /* this rank's first position in the step */
        uint64_t i;
        if (c->mode == LX_SEQUENTIAL) {
            uint64_t p = (uint64_t)((((lx_u128)step * G) + first) % N);
            for (i = 0; i < B; i++) {
                out[i] = p;
                if (++p == N) p = 0;
            }
        } else if (c->mode == LX_IID) {
            const uint64_t m = N / W;
            const uint64_t counter = step * G + first;
            for (i = 0; i < B; i++) {
                uint64_t u = lx_wyrand(K + (counter + i) * 0xA0761D6478BD642FULL);
                out[i] = R + W * lx_below(u, m);
            }
        } else {
            const uint64_t per_cycle = N / G;
            const uint64_t cycle = step / per_cycle;
            const uint64_t base = (step % per_cycle) * G + first;
            unsigned bits = 1;
            while (bits < 64 && (1ULL << bits) < N) bits++;
            const uint64_t mask = (bits == 64) ? ~0ULL : ((1ULL << bits) - 1);
            const unsigned half = (bits + 1) / 2;
            uint64_t keys[3];
            const uint64_t ck = lx_mix64(K ^ lx_mix64(cycle + LX_GOLDEN));
            for (i = 0; i < 3; i++) keys[i] = lx_mix64(ck + (i + 1) * LX_GOLDEN);
            /* One branch-free pass lets the CPU overlap the indices' dependency chains; the
               few values that land in [length, 2^bits) are cycle-walked afterwards. */
            for (i = 0; i < B; i++)
                out[i] = lx_permute(base + i, mask, half, keys);
            for (i = 0; i < B; i++) {
                uint64_t y = out[i];
                while (y >= N) y = lx_permute(y, mask, half, keys);
                out[i] = y;
            }
        }
    }

    /* NumPy's array interface struct, to read a buffer's address inside the Limited API. */
    typedef struct {
        int two; int nd; char typekind; int itemsize; int flags;
        Py_ssize_t *shape; Py_ssize_t *strides; void *data; PyObject *descr;
    } lx_array_interface;
    """
    ctypedef struct lx_config:
        uint64_t length, batch, rank, world, mode, key
    ctypedef struct lx_array_interface:
        int two
        int nd
        int itemsize
        int flags
        Py_ssize_t *shape
        void *data
    uint64_t lx_mix64(uint64_t z) nogil
    void lx_fill(const lx_config *c, uint64_t step, uint64_t *out) nogil


cdef uint64_t *_uint64_data(object arr, uint64_t count) except NULL:
    """Address of a C-contiguous, writeable uint64 array of `count` elements."""
    capsule = arr.__array_struct__
    cdef lx_array_interface *ai = <lx_array_interface *> PyCapsule_GetPointer(capsule, NULL)
    if ai.two != 2 or ai.nd != 1 or ai.itemsize != 8 or ai.shape[0] != <Py_ssize_t> count:
        raise ValueError(f"expected a one-dimensional uint64 array of {count} elements")
    if (ai.flags & 0x0501) != 0x0501:  # C-contiguous, aligned, writeable
        raise ValueError("index buffer must be C-contiguous, aligned and writeable")
    return <uint64_t *> ai.data


cdef class SamplerCore:
    """Configuration, step counter and the reused batch buffer. See loaderx.sampler.Sampler."""

    cdef lx_config cfg
    cdef uint64_t _step
    cdef uint64_t *data
    cdef object _buffer
    cdef object _view

    def __init__(self, uint64_t length, uint64_t batch_size, int mode, uint64_t seed,
                 uint64_t rank, uint64_t world_size, object buffer):
        # The Python layer validates every argument; this layer only stores them.
        self.cfg.length = length
        self.cfg.batch = batch_size
        self.cfg.mode = mode
        self.cfg.rank = rank
        self.cfg.world = world_size
        self.cfg.key = lx_mix64(seed ^ 0x6C6F61646572780AULL)
        self._step = 0
        self._buffer = buffer
        self.data = _uint64_data(buffer, batch_size)
        view = buffer[:]
        view.flags.writeable = False
        self._view = view

    def next(self):
        """The next batch of indices: a read-only view of the reused buffer (borrowed)."""
        lx_fill(&self.cfg, self._step, self.data)
        self._step += 1
        return self._view

    def __next__(self):
        lx_fill(&self.cfg, self._step, self.data)
        self._step += 1
        return self._view

    def batch_at(self, uint64_t step, object out):
        """Writes the batch of `step` into `out` (a uint64 array); the step counter is unchanged."""
        cdef uint64_t *p = _uint64_data(out, self.cfg.batch)
        with nogil:
            lx_fill(&self.cfg, step, p)
        return out

    def seek(self, uint64_t step):
        """Make `step` the next step drawn. O(1)."""
        self._step = step

    @property
    def step(self):
        """The step the next draw returns (the number of draws since step 0, after seeks)."""
        return self._step
