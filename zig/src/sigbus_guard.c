/*
 * sigbus_guard.c: turns a SIGBUS raised by reading a shard mapping into an error the reader
 * can report, for the gathers and verification of gather.zig.
 *
 * A read-only shared mapping of a file that someone truncates after it was mapped raises SIGBUS
 * on the first touch of a page past the new end of the file (or of a page the storage fails to
 * read). No check made before the copy can rule that out, since the file may shrink between
 * the check and the copy, so the copy itself runs inside a guarded region that the signal
 * handler can leave with siglongjmp.
 *
 * This is C because entering a guarded region means calling sigsetjmp, which returns twice.
 * Zig 0.17 cannot express a returns-twice call: it has no setjmp of its own, and a C sigsetjmp
 * called from Zig would be compiled as an ordinary call, so the optimiser could keep values in
 * registers that the second return finds clobbered. Here the C compiler knows sigsetjmp, and
 * the Zig code only runs between the two returns, as a callback.
 *
 * Invariants:
 * - One process-wide SIGBUS handler, installed once (pthread_once) by the first reader opened.
 *   It jumps only when the faulting thread is inside a guarded region (a thread-specific
 *   pointer set by zr_guard_run) and the faulting address lies in one of the ranges that region
 *   registered (the reader's shard mappings). Any other SIGBUS is handed to the disposition
 *   that was installed before ours: its handler is called, SIG_DFL is restored and the signal
 *   raised again (the process ends as it would have without us), SIG_IGN is honoured for a
 *   signal sent by kill() and treated as SIG_DFL for a fault, which cannot be ignored. So
 *   SIGBUS from other code is never swallowed.
 * - The handler uses only operations that are safe in a signal handler: pthread_getspecific,
 *   comparisons, pthread_sigmask, sigaction, raise and siglongjmp. The thread's region is found
 *   with pthread_getspecific rather than a __thread variable: the extension's TLS block (mostly
 *   Zig's own, 256 KiB) is too large for the initial-exec model in a library loaded with
 *   dlopen ("cannot allocate memory in static TLS block"), and the general-dynamic model's
 *   __tls_get_addr may allocate on a thread's first touch, which a SIGBUS on a thread that
 *   never ran a region would be. glibc's pthread_getspecific only reads the thread descriptor
 *   and returns NULL on a thread that never set the key.
 * - A guarded region must not hold a lock or leave half-made state at any instruction that
 *   can touch a registered range: the jump skips everything between the fault and
 *   zr_guard_run. gather.zig's guarded bodies copy, hash and decode only; they acquire their
 *   decoder and scratch buffers outside the region.
 * - The guard costs one sigsetjmp (no system call: the signal mask is not saved) and two
 *   pthread_setspecific calls per region, and the body's store of the current record number
 *   into the guard per record.
 *
 * Zero-filled ranges (zr_guard_zero_register): a mapping whose reads are too many and too
 * scattered to run in regions, the compact index a reader maps from the index cache folder
 * (index_cache.zig), is registered process-wide instead. A SIGBUS in one (the file was
 * truncated under the reader) maps a page of zeros over the faulting page, sets the range's
 * flag, and returns: the faulting load runs again and reads zeros. The reader's decoding is
 * total (compact.zig) and checks every place it reads, so zeros cannot send a read outside a
 * shard, and each call of the reader fails at its end once the flag is set (Reader.intact),
 * so no record decoded from zeros is returned as good.
 * - The table is fixed-size and read by the handler without a lock: a slot is published by a
 *   release store of its base after its length and flag, and withdrawn (base NULL) before the
 *   mapping is unmapped, which a reader does only with no call in flight, so no fault of it
 *   can be racing. Mapping the page is mmap(2) with MAP_FIXED, one system call; POSIX does not
 *   list mmap as async-signal-safe, but it takes no lock of libc's (glibc and macOS wrap the
 *   system call directly).
 */

#ifndef _WIN32

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

/* A byte range the region may fault in; mirrors gather.zig's GuardRange. */
struct zr_guard_range {
    const uint8_t *base;
    size_t len;
};

/* One guarded region; mirrors gather.zig's Guard, which owns it. */
struct zr_guard {
    const struct zr_guard_range *ranges;
    size_t range_count;
    /* The record the body is working on, stored by the body (volatile on both sides) so that
     * the error can name it. */
    volatile uint64_t record;
    /* Where the fault hit; set by the handler before it jumps. */
    const void *volatile fault_addr;
    /* The region's jump buffer while the body runs; NULL outside it. */
    sigjmp_buf *jump;
};

/* Each thread's current region (a struct zr_guard *); NULL outside one. */
static pthread_key_t current_key;
static volatile int key_made;
static struct sigaction previous_action;
static pthread_once_t install_once = PTHREAD_ONCE_INIT;

static int in_ranges(const struct zr_guard *g, const void *addr)
{
    const uint8_t *p = (const uint8_t *)addr;
    for (size_t k = 0; k < g->range_count; k++) {
        const struct zr_guard_range *r = &g->ranges[k];
        if (r->len > 0 && p >= r->base && (size_t)(p - r->base) < r->len)
            return 1;
    }
    return 0;
}

/* A zero-filled range (zr_guard_zero_register). `base` is NULL while the slot is not in
 * use; `taken` is the slot's owner's claim (an atomic exchange: no lock, no libc call). */
struct zr_zero_range {
    const uint8_t *base;
    size_t len;
    volatile int *flag;
    int taken;
};

/* Slots for the compact indexes mapped at once in a process: one per open reader whose index
 * came from a cache file (a dataset of parts opens one reader per part). Past that many, a
 * reader's index runs unprotected, as before the table existed. */
#define ZR_ZERO_RANGES_MAX 4096
static struct zr_zero_range zero_ranges[ZR_ZERO_RANGES_MAX];
/* Slots below this were ever used: the handler scans no further. */
static size_t zero_used;
static uintptr_t page_mask;

/* Maps zeros over the page of `addr` if it lies in a registered range; 1 when it did. */
static int zero_fill(const void *addr)
{
    const uint8_t *p = (const uint8_t *)addr;
    size_t used = __atomic_load_n(&zero_used, __ATOMIC_ACQUIRE);
    for (size_t k = 0; k < used; k++) {
        const uint8_t *base = __atomic_load_n(&zero_ranges[k].base, __ATOMIC_ACQUIRE);
        if (base == NULL || p < base || (size_t)(p - base) >= zero_ranges[k].len)
            continue;
        volatile int *flag = zero_ranges[k].flag;
        /* Withdrawn (and maybe taken again) since `base` was read: not this range. */
        if (__atomic_load_n(&zero_ranges[k].base, __ATOMIC_ACQUIRE) != base)
            continue;
        void *page = (void *)((uintptr_t)p & ~page_mask);
        void *got = mmap(page, (size_t)page_mask + 1, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        if (got == MAP_FAILED)
            return 0;
        *flag = 1;
        return 1;
    }
    return 0;
}

/* Hands a SIGBUS that is not ours to the disposition installed before our handler. */
static void pass_on(int sig, siginfo_t *info, void *context)
{
    if (previous_action.sa_flags & SA_SIGINFO) {
        previous_action.sa_sigaction(sig, info, context);
        return;
    }
    /* si_code > 0: the kernel raised it for a fault, and returning would only fault again. */
    int fault = info != NULL && info->si_code > 0;
    if (previous_action.sa_handler == SIG_IGN && !fault)
        return;
    if (previous_action.sa_handler == SIG_DFL || previous_action.sa_handler == SIG_IGN) {
        struct sigaction dfl;
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        dfl.sa_flags = 0;
        sigaction(SIGBUS, &dfl, NULL);
        raise(SIGBUS);
        return;
    }
    previous_action.sa_handler(sig);
}

static void on_sigbus(int sig, siginfo_t *info, void *context)
{
    struct zr_guard *g = key_made ? (struct zr_guard *)pthread_getspecific(current_key) : NULL;
    if (g != NULL && g->jump != NULL && info != NULL && in_ranges(g, info->si_addr)) {
        g->fault_addr = info->si_addr;
        /* Our handler runs with SA_NODEFER, but a handler that chained to it may have blocked
         * SIGBUS; leaving it blocked would make the thread's next fault fatal. */
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGBUS);
        pthread_sigmask(SIG_UNBLOCK, &set, NULL);
        siglongjmp(*g->jump, 1);
    }
    /* si_code > 0: a fault, which returning retries; a SIGBUS sent by kill() is not ours. */
    if (info != NULL && info->si_code > 0 && zero_fill(info->si_addr))
        return;
    pass_on(sig, info, context);
}

static void install(void)
{
    long page = sysconf(_SC_PAGESIZE);
    page_mask = (uintptr_t)(page > 0 ? page : 4096) - 1;
    if (pthread_key_create(&current_key, NULL) != 0)
        return;
    struct sigaction action;
    action.sa_sigaction = on_sigbus;
    sigemptyset(&action.sa_mask);
    /* SA_ONSTACK: run on the thread's alternate stack if it has one (Python's faulthandler
     * gives the main thread one). SA_NODEFER: SIGBUS stays deliverable inside the handler, so
     * re-raising it for SIG_DFL ends the process at once. */
    action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    /* The previous action is read first, so that it is complete before any SIGBUS can reach
     * our handler. */
    if (sigaction(SIGBUS, NULL, &previous_action) != 0)
        return;
    if (sigaction(SIGBUS, &action, NULL) != 0)
        return;
    key_made = 1;
}

/* Installs the handler, once per process. If no thread-specific key is left (the process has
 * made PTHREAD_KEYS_MAX of them) or sigaction fails (it cannot with these arguments), regions
 * run unguarded, as before the guard existed. */
void zr_guard_install(void)
{
    pthread_once(&install_once, install);
}

/* Registers [base, base + len) as a zero-filled range whose faults set *flag to 1. Returns
 * its slot; -1 when every slot is taken (the caller must not rely on the mapping then); -2
 * when the handler is not installed (then no SIGBUS is caught anywhere). */
int zr_guard_zero_register(const void *base, size_t len, volatile int *flag)
{
    if (!key_made || base == NULL || len == 0)
        return -2;
    for (size_t k = 0; k < ZR_ZERO_RANGES_MAX; k++) {
        if (__atomic_exchange_n(&zero_ranges[k].taken, 1, __ATOMIC_ACQUIRE) != 0)
            continue;
        zero_ranges[k].len = len;
        zero_ranges[k].flag = flag;
        __atomic_store_n(&zero_ranges[k].base, (const uint8_t *)base, __ATOMIC_RELEASE);
        size_t used = __atomic_load_n(&zero_used, __ATOMIC_RELAXED);
        while (used < k + 1 && !__atomic_compare_exchange_n(&zero_used, &used, k + 1, 1,
                                                             __ATOMIC_RELEASE, __ATOMIC_RELAXED)) {
        }
        return (int)k;
    }
    return -1;
}

/* Withdraws a slot of zr_guard_zero_register (nothing for -1), before its range is unmapped. */
void zr_guard_zero_unregister(int slot)
{
    if (slot < 0 || slot >= ZR_ZERO_RANGES_MAX)
        return;
    __atomic_store_n(&zero_ranges[slot].base, NULL, __ATOMIC_RELEASE);
    __atomic_store_n(&zero_ranges[slot].taken, 0, __ATOMIC_RELEASE);
}

/* Runs body(arg) as a guarded region. Returns 0 when the body returned, 1 when a SIGBUS in
 * one of g's ranges ended it; then g->record and g->fault_addr say where. */
int zr_guard_run(struct zr_guard *g, void (*body)(void *), void *arg)
{
    if (!key_made) {
        body(arg);
        return 0;
    }
    sigjmp_buf jump;
    /* Regions do not nest today; restoring the outer one would keep a nested region correct. */
    void *volatile outer = pthread_getspecific(current_key);
    g->fault_addr = NULL;
    g->jump = &jump;
    if (sigsetjmp(jump, 0) != 0) {
        g->jump = NULL;
        pthread_setspecific(current_key, outer);
        return 1;
    }
    /* A thread's value for the key is stored in its descriptor (keys below 32) or in a block
     * allocated on its first pthread_setspecific; later calls allocate nothing. */
    pthread_setspecific(current_key, g);
    /* The handler must see the region before the body's first access to a mapping. */
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    body(arg);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    pthread_setspecific(current_key, outer);
    g->jump = NULL;
    return 0;
}

#else /* _WIN32 */

#include <stddef.h>

/* Windows refuses to shrink a file while a view of it is mapped (SetEndOfFile fails with
 * ERROR_USER_MAPPED_FILE), so a region has no such fault to catch there: it runs unguarded
 * (sys_windows.zig says what that leaves out). */
struct zr_guard;

void zr_guard_install(void)
{
}

int zr_guard_run(struct zr_guard *g, void (*body)(void *), void *arg)
{
    (void)g;
    body(arg);
    return 0;
}

/* Nothing to register: no view of a file can lose its pages to a truncation. */
int zr_guard_zero_register(const void *base, size_t len, volatile int *flag)
{
    (void)base;
    (void)len;
    (void)flag;
    return -2;
}

void zr_guard_zero_unregister(int slot)
{
    (void)slot;
}

#endif /* _WIN32 */
