# Declarations of the sampler's C batch function (_sampler_core.h). Declarations only.
from libc.stdint cimport uint64_t

cdef extern from "_sampler_core.h" nogil:
    ctypedef struct lx_config:
        uint64_t length, batch, rank, world, mode, key, finite, block, window

    uint64_t lx_mix64(uint64_t z)
    uint64_t lx_steps_per_pass(const lx_config *c)
    uint64_t lx_count(const lx_config *c, uint64_t step)
    uint64_t lx_fill(const lx_config *c, uint64_t step, uint64_t *out)
