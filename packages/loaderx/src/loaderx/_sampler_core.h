/* The sampler's batch function in C: `lx_fill` writes one rank's batch of record indices as a
 * pure function of (configuration, step). Declared for Cython in _sampler_core.pxd and
 * compiled into loaderx/_sampler.abi3.so with _sampler.pyx (see build_support.py).
 *
 * Invariants:
 * - Nothing is carried between steps: the output depends on `*c` and `step` only, so a seek is
 *   O(1) and a resumed run draws exactly what the uninterrupted one would have drawn.
 * - The caller has checked the configuration: 1 <= length <= 2^63, batch >= 1, world >= 1,
 *   rank < world, batch * world <= 2^63, and, when endless (`finite` 0), for CYCLIC and
 *   BLOCKS batch * world <= length; `finite` is never set for IID; for BLOCKS block >= 1,
 *   window >= 1 and block * window <= 2^63. Nothing
 *   here allocates, and `out` holds `batch` values.
 * - Every index written is below `length`.
 * - Global sequence: position p of step s (p < G, rank p / batch) is a function of (s, p)
 *   and the configuration other than (batch, world, rank), whenever G = batch * world is
 *   kept: so states resume exactly across world sizes with the same global batch. `lx_fill` returns how many it wrote: always
 *   `batch` when endless; when `finite`, fewer (possibly 0) at the last step of a pass.
 */
#ifndef LOADERX_SAMPLER_CORE_H
#define LOADERX_SAMPLER_CORE_H

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

typedef struct {
    uint64_t length, batch, rank, world, mode, key;
    /* 0: endless (the seed's semantics); 1: in passes (every record exactly once per pass,
       the last step of a pass short). How many passes is the caller's business. */
    uint64_t finite;
    /* BLOCKS only: records per block (R >= 1) and blocks per window (W >= 1), R * W <= 2^63. */
    uint64_t block, window;
} lx_config;

enum { LX_SEQUENTIAL = 0, LX_IID = 1, LX_CYCLIC = 2, LX_BLOCKS = 3 };
#define LX_GOLDEN 0x9E3779B97F4A7C15ULL

/* Steps in one pass: ceil(length / G). Below 2^63 + 1, as length <= 2^63 and G >= 1. */
static inline uint64_t lx_steps_per_pass(const lx_config *c) {
    const uint64_t G = c->batch * c->world;
    return c->length / G + (c->length % G != 0);
}

/* This rank's span of `step` when `finite`: `*first` is the position (in the pass) of its
   first record, `*pass` the pass, and the return value the number of records (0..batch). A
   full step gives rank r positions [r * batch, (r + 1) * batch) of it; the last step of a pass
   holds rem = length mod G records, which are split as evenly as ranks allow (rank r gets
   rem / world records, plus one if r < rem mod world), contiguously in rank order, so every
   position of the pass belongs to exactly one rank. */
static inline uint64_t lx_pass_span(const lx_config *c, uint64_t step, uint64_t *first,
                                    uint64_t *pass) {
    const uint64_t B = c->batch, N = c->length, W = c->world, R = c->rank;
    const uint64_t G = B * W;
    const uint64_t per_pass = lx_steps_per_pass(c);
    const uint64_t k = step % per_pass;
    const uint64_t start = k * G;  /* < N <= 2^63: no overflow */
    const uint64_t rem = N - start;
    *pass = step / per_pass;
    if (rem >= G) {
        *first = start + R * B;
        return B;
    }
    const uint64_t base = rem / W, extra = rem % W;
    *first = start + R * base + (R < extra ? R : extra);
    return base + (R < extra);
}

/* The number of indices `lx_fill` writes for `step`: `batch`, except at the end of a pass. */
static inline uint64_t lx_count(const lx_config *c, uint64_t step) {
    uint64_t first, pass;
    if (!c->finite) return c->batch;
    return lx_pass_span(c, step, &first, &pass);
}

/* A keyed permutation of [0, n), n >= 1. Up to LX_TABLE_MAX records, a table (below);
   above, a Feistel network on the b bits of the smallest power of two that holds n, cycle-
   walked into [0, n) (fewer than 2 steps on average). Its two parts, the high a = b / 2 bits
   and the low c = b - a, take turns: each of LX_ROUNDS rounds xors one part with a function
   of the other and of the round's 64-bit key (the top bits of lx_mix64 of their xor: every
   key bit counts). Each round is a bijection whatever the function, so the network is one.
   The earlier permutation (multiplications and xorshifts, each step masked to the domain)
   kept only the keys' low bits: its orders came from a small, biased family (40 distinct
   orders of 6 records in 20,000 cycles; a chi-square z of 25.7 for the positions of 100
   records, where NumPy's shuffle gives 0-3), and so did BLOCKS' order of a few dozen
   blocks. */
#define LX_ROUNDS 6

/* Up to this many records the permutation is a table, shuffled by Fisher-Yates from the key:
   every order equally likely, where a Feistel network on a few bits is not (its rounds are
   even permutations of the domain; 6 records: a chi-square z of 12 over 20,000 cycles). */
#define LX_TABLE_MAX 64

typedef struct {
    uint64_t n, cmask;
    unsigned a, c;
    uint64_t keys[LX_ROUNDS];
    unsigned char table[LX_TABLE_MAX];
} lx_perm;

static inline void lx_perm_init(lx_perm *p, uint64_t n, uint64_t key) {
    unsigned b = 1, i;
    while (b < 63 && (1ULL << b) < n) b++;
    p->n = n;
    p->a = b / 2;
    p->c = b - p->a;
    p->cmask = (1ULL << p->c) - 1;
    for (i = 0; i < LX_ROUNDS; i++) p->keys[i] = lx_mix64(key + (i + 1) * LX_GOLDEN);
    if (n <= LX_TABLE_MAX) {
        for (i = 0; i < n; i++) p->table[i] = (unsigned char)i;
        for (i = (unsigned)n; i > 1; i--) {
            const uint64_t j = lx_below(lx_mix64(p->keys[0] + i * LX_GOLDEN), i);
            const unsigned char t = p->table[i - 1];
            p->table[i - 1] = p->table[j];
            p->table[j] = t;
        }
    }
}

/* The Feistel network (n > LX_TABLE_MAX, so a >= 3 and c >= 4). */
static inline uint64_t lx_permute(const lx_perm *p, uint64_t x) {
    uint64_t l = x >> p->c, r = x & p->cmask;
    unsigned i;
    for (i = 0; i < LX_ROUNDS; i += 2) {
        l ^= lx_mix64(r ^ p->keys[i]) >> (64 - p->a);
        r ^= lx_mix64(l ^ p->keys[i + 1]) >> (64 - p->c);
    }
    return (l << p->c) | r;
}

/* lx_permute of LX_LANES consecutive values x .. x + LX_LANES - 1 into out, in lock step: the
   values' rounds are independent, and interleaved the CPU overlaps their multiplies (one
   value at a time waits on each round's two dependent multiplies). */
#define LX_LANES 8
static inline void lx_permute_lanes(const lx_perm *p, uint64_t x, uint64_t *restrict out) {
    const unsigned a = p->a, c = p->c;
    const uint64_t cmask = p->cmask;
    uint64_t l[LX_LANES], r[LX_LANES];
    unsigned i, j;
    for (j = 0; j < LX_LANES; j++) {
        l[j] = (x + j) >> c;
        r[j] = (x + j) & cmask;
    }
    for (i = 0; i < LX_ROUNDS; i += 2) {
        const uint64_t k0 = p->keys[i], k1 = p->keys[i + 1];
        for (j = 0; j < LX_LANES; j++) l[j] ^= lx_mix64(r[j] ^ k0) >> (64 - a);
        for (j = 0; j < LX_LANES; j++) r[j] ^= lx_mix64(l[j] ^ k1) >> (64 - c);
    }
    for (j = 0; j < LX_LANES; j++) out[j] = (l[j] << c) | r[j];
}

static inline uint64_t lx_perm_at(const lx_perm *p, uint64_t x) {
    if (p->n <= LX_TABLE_MAX) return p->table[x];
    uint64_t y = lx_permute(p, x);
    while (y >= p->n) y = lx_permute(p, y);
    return y;
}

/* The key of cycle `cycle`'s permutations. */
static inline uint64_t lx_cycle_key(uint64_t K, uint64_t cycle) {
    return lx_mix64(K ^ lx_mix64(cycle + LX_GOLDEN));
}

/* Writes `count` positions of cycle `cycle`'s permutation, from position `pos`. */
static void lx_permuted(uint64_t N, uint64_t K, uint64_t cycle, uint64_t pos, uint64_t count,
                        uint64_t *restrict out) {
    uint64_t i;
    lx_perm p;
    lx_perm_init(&p, N, lx_cycle_key(K, cycle));
    if (N <= LX_TABLE_MAX) {
        for (i = 0; i < count; i++) out[i] = p.table[pos + i];
        return;
    }
    /* One branch-free pass lets the CPU overlap the indices' dependency chains; the few
       values that land in [length, 2^bits) are cycle-walked afterwards. */
    for (i = 0; i + LX_LANES <= count; i += LX_LANES)
        lx_permute_lanes(&p, pos + i, out + i);
    for (; i < count; i++)
        out[i] = lx_permute(&p, pos + i);
    for (i = 0; i < count; i++) {
        uint64_t y = out[i];
        while (y >= N) y = lx_permute(&p, y);
        out[i] = y;
    }
}

/* BLOCKS: the block at slot `slot` of a cycle whose short block (block `full`, when `rest`)
   is at slot `s`; the others in the order of `order`. */
static inline uint64_t lx_block_of(const lx_perm *order, uint64_t slot, uint64_t s,
                                   uint64_t rest, uint64_t full) {
    if (rest && slot == s) return full;
    return lx_perm_at(order, slot - (rest && slot > s ? 1 : 0));
}

/* BLOCKS: writes `count` positions of cycle `cycle`'s order, from position `pos`. The records
   are cut into blocks of R consecutive records, the last one short (N % R records) when R does
   not divide N; the cycle's order takes the blocks in a random order, cut into windows of W
   blocks, and a window's records come in a permutation of their own. So a window reads at
   most W blocks, each a run of consecutive records starting at a multiple of R, and every
   record is at exactly one position of the cycle. The short block's place among the blocks
   is drawn per cycle like the others' (slot `s`); its window has R - N % R positions fewer,
   and the windows after it start that much earlier. (Always last, the short block fell where
   an endless run leaves a cycle's last positions unread, and was never read: 1,050 records
   in blocks of 64, batches of 100, records 1,024..1,049.) When R divides N there is no short
   block and the order is as it always was. */
static void lx_blocks(const lx_config *c, uint64_t cycle, uint64_t pos, uint64_t count,
                      uint64_t *restrict out) {
    const uint64_t N = c->length, R = c->block, W = c->window;
    const uint64_t full = N / R;     /* full blocks; the short block, if any, is block `full` */
    const uint64_t rest = N - full * R;  /* the short block's records */
    const uint64_t slots = full + (rest ? 1 : 0);
    const uint64_t span = W * R;     /* positions of a window of W full blocks */
    const uint64_t lack = rest ? R - rest : 0;  /* positions the short block's window lacks */
    const uint64_t ck = lx_cycle_key(c->key, cycle);
    /* The short block's slot, any of 0..full, and its window. */
    const uint64_t s = rest ? lx_below(lx_mix64(ck ^ 0x73686F7274ULL), full + 1) : slots;
    const uint64_t ws = s / W;
    const uint64_t after = (ws + 1) * span - lack;  /* where the window after it starts */
    lx_perm order, within;
    uint64_t i, w = 0, first = 0, started = 0, k = 0;
    /* The blocks of the window being read, found once per window when it has at most
       LX_TABLE_MAX of them (each a permutation's evaluation), not once per record. */
    uint64_t blocks[LX_TABLE_MAX];
    if (full > 0) lx_perm_init(&order, full, lx_mix64(ck ^ 0x626C6F636B73ULL));
    for (i = 0; i < count; i++) {
        const uint64_t p = pos + i;
        uint64_t pw;
        if (!rest || p < ws * span) pw = p / span;
        else if (p < after) pw = ws;
        else pw = ws + 1 + (p - after) / span;
        if (!started || pw != w) {
            w = pw;
            started = 1;
            /* w * W < slots: p < N. The last window holds the slots that are left. */
            k = slots - w * W < W ? slots - w * W : W;
            first = w * span - (rest && w > ws ? lack : 0);
            lx_perm_init(&within, k * R - (rest && w == ws ? lack : 0),
                         lx_mix64(ck + (w + 1) * LX_GOLDEN));
            if (k <= LX_TABLE_MAX) {
                uint64_t j;
                for (j = 0; j < k; j++) blocks[j] = lx_block_of(&order, w * W + j, s, rest, full);
            }
        }
        const uint64_t q = lx_perm_at(&within, p - first);
        uint64_t j, off;                 /* the slot within the window, the record within it */
        if (rest && w == ws) {
            const uint64_t js = s - w * W;
            if (q < js * R) {
                j = q / R;
                off = q % R;
            } else if (q < js * R + rest) {
                j = js;
                off = q - js * R;
            } else {
                const uint64_t q2 = q - js * R - rest;
                j = js + 1 + q2 / R;
                off = q2 % R;
            }
        } else {
            j = q / R;
            off = q % R;
        }
        const uint64_t block = k <= LX_TABLE_MAX ? blocks[j] : lx_block_of(&order, w * W + j, s, rest, full);
        out[i] = block * R + off;
    }
}

/* Writes this rank's indices of `step` to `out` and returns how many (see lx_count). */
static uint64_t lx_fill(const lx_config *c, uint64_t step, uint64_t *restrict out) {
    /* Every field is read once into a local: `out` is uint64_t too, so without that the
       compiler would have to reload the configuration after every store. */
    const uint64_t B = c->batch, N = c->length, W = c->world, R = c->rank, K = c->key;
    const uint64_t G = B * W;
    const uint64_t first = R * B;   /* this rank's first position in the step */
    uint64_t i;
    if (c->finite) {
        uint64_t pos, pass;
        const uint64_t n = lx_pass_span(c, step, &pos, &pass);
        if (c->mode == LX_SEQUENTIAL) {
            for (i = 0; i < n; i++) out[i] = pos + i;
        } else if (c->mode == LX_BLOCKS) {
            lx_blocks(c, pass, pos, n, out);
        } else {
            /* A pass of CYCLIC is cycle `pass`'s permutation, read to its end. */
            lx_permuted(N, K, pass, pos, n, out);
        }
        return n;
    }
    if (c->mode == LX_SEQUENTIAL) {
        uint64_t p = (uint64_t)((((lx_u128)step * G) + first) % N);
        for (i = 0; i < B; i++) {
            out[i] = p;
            if (++p == N) p = 0;
        }
    } else if (c->mode == LX_IID) {
        /* Draw p of the global sequence depends on p alone, not on how the global batch is
           split into ranks, so a run resumed with another world size continues it. */
        const uint64_t counter = step * G + first;
        for (i = 0; i < B; i++) {
            uint64_t u = lx_wyrand(K + (counter + i) * 0xA0761D6478BD642FULL);
            out[i] = lx_below(u, N);
        }
    } else {
        /* CYCLIC and BLOCKS: full batches of cycle `cycle`'s order. */
        const uint64_t per_cycle = N / G;
        const uint64_t cycle = step / per_cycle;
        if (c->mode == LX_BLOCKS)
            lx_blocks(c, cycle, (step % per_cycle) * G + first, B, out);
        else
            lx_permuted(N, K, cycle, (step % per_cycle) * G + first, B, out);
    }
    return B;
}

#endif /* LOADERX_SAMPLER_CORE_H */
