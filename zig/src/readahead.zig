//! Reading cold records with the device's queue full: the reader's estimate of whether its
//! store is in the page cache, residency samples, the timing probe of gathers that expect warm
//! data, and read-ahead hints for a batch.
//!
//! A gather copies its records in batch order. When they are in the page cache that is a
//! memory copy; when they are not, each record's read waits for the device before the next
//! one is asked for, so the device sees one read at a time (queue depth 1), while it serves
//! dozens at once almost as fast as one. A hint, posix_fadvise(POSIX_FADV_WILLNEED) on a
//! record's byte range, starts the read of those pages into the page cache and returns without
//! waiting; hinting every record of a batch before copying any puts the whole batch in the
//! device's queue, and the copies then find their pages arrived or arriving.
//!
//! Invariants:
//! - Everything here is advice: a hint or a sample that fails changes how fast a gather runs,
//!   never what it returns or whether it fails. Nothing here allocates, locks, or returns an
//!   error; the sort buffer is on the stack, a fixed number of records at a time.
//! - Nothing here touches a record's bytes: hints and samples are system calls about a file
//!   (fadvise) or a mapping (mincore), so they cannot raise SIGBUS on a truncated shard, and
//!   they may run inside or outside the reader's guarded regions.
//! - The estimate (`Estimate`) is one atomic per reader, read and written with relaxed order
//!   by concurrent gathers; either value is safe, a wrong one only costs time once: a gather
//!   that expects warm data probes its first records and hints the rest when they are slow,
//!   one that expects cold data samples a few records and skips the hints when they are all
//!   resident.
//! - Warm gathers pay two clock reads per share (a worker's claimed chunk: its first
//!   `probe_records` records are timed apart from the loop over the rest) and two relaxed
//!   loads per call, and a system call only when those records were slow: a hint costs about
//!   1 µs even on cached pages, ten times the copy of a small record.

const std = @import("std");
const assert = std.debug.assert;
const sys = @import("sys.zig");

/// How a reader reads records not known to be in the page cache (zrecord.h ZR_READS_*).
pub const Mode = enum(u8) {
    /// Adaptive: batches that the estimate and a residency sample call cold are hinted and
    /// read with pread; others are read as before this module, with a timing probe.
    auto = 0,
    /// Never hint: every batch is read as if it were in the page cache (mapped copies for
    /// small records, pread for large ones), the way gathers worked before this module.
    mapped = 1,
    /// Always hint: every batch is hinted and every record read with pread.
    hinted = 2,
};

/// Records sampled with mincore(2) when a gather that expects cold data starts (or when a
/// probe found records slow): a system call each, about 0.5 µs.
pub const sample_records: u64 = 4;
/// Pages of a record's start that a sample asks about; a record counts as resident when they
/// all are.
pub const sample_pages_max: usize = 16;
/// Records at the start of each share whose copy the probe times.
pub const probe_records: u64 = 4;
/// A probed record slower than this, plus `probe_ns_per_kib` per KiB of it, suggests that it
/// waited for the device: a copy from the page cache of a small record takes well under a
/// microsecond (a first touch of a page through a fresh mapping a few), a read from this
/// project's test disk at queue depth 1 takes 55 µs or more.
pub const probe_ns_per_record: u64 = 8_000;
/// ... a rate of 1 GiB/s: copies from the page cache run at several GiB/s, single reads of
/// large records from a disk at well under 1 GiB/s.
pub const probe_ns_per_kib: u64 = 1_000;
/// Records whose hints are sorted together; 24 bytes each on the stack of the hinting thread.
pub const hint_sort_records: usize = 512;
/// A gather that its probe found cold hints at most this many stored bytes and records
/// ahead at once.
pub const window_bytes_max: u64 = 64 << 20;
pub const window_records_max: u64 = 16 << 10;
/// A cold batch keeps its hints this many stored bytes ahead of its workers' reads (and
/// at most `window_records_max` records): enough reads in the device's queue to reach its
/// bandwidth, little enough that the hints do not delay the first copies long.
pub const ahead_bytes: u64 = 4 << 20;
/// At most this many records are hinted by one prefetch call (`Reader.prefetch`), and at most
/// `window_bytes_max` bytes of them; the rest of the call's records are left alone.
pub const prefetch_records_max: u64 = window_records_max;

/// Where a record's stored bytes lie; `len` is 0 for an empty record.
pub const Span = struct {
    shard: u8,
    offset: u64,
    len: u64,
};

/// Gathers after a prefetch that hinted (`Estimate.notePrefetch`) that read the batches they
/// find in the page cache with pread rather than through the mappings: a loader prefetches
/// every step, so this only has to outlast the steps between two prefetch calls.
pub const prefetched_gathers: u32 = 8;
/// Prefetches in a row that must find their records in the page cache before the estimate
/// takes the store for one that stays there (`Estimate.notePrefetch`). A prefetch samples
/// `sample_records` records, so over a store of which a fraction f is cached one prefetch
/// finds them all cached with probability f^4 (2.6% at f = 0.4: every 40th step of a
/// loader), and `warm_prefetches` in a row with f^16 (4e-7 at 0.4, 0.19 at 0.9, 0.85 at 0.99).
pub const warm_prefetches: u32 = 4;

/// The reader's estimate of whether its store is in the page cache.
pub const Estimate = struct {
    /// A reader starts out expecting cold data: its first gather samples before it hints, so
    /// a warm store costs that gather a few system calls, not a probe's worth of waiting.
    cold: std.atomic.Value(bool) = .init(true),
    /// Gathers left that follow a prefetch which found its records outside the page cache and
    /// hinted them. Their records are in the page cache because they were hinted, not because
    /// the store stays there: copying them through the mappings would map every page (and
    /// the kernel maps up to 16 cached neighbours with each fault) into the process, where
    /// they count as its memory and cost the kernel unmapping work when it reclaims them. A
    /// run of `warm_prefetches` prefetches that find their records resident sets this to 0:
    /// the store is warm. One such prefetch alone does not: where part of the store is
    /// cached, some prefetch finds its sample there by chance, and the gathers after it would
    /// map every cached page they touch (measured: a loader over a tokens store with 40% of
    /// its pages cached held 317 MiB of shard pages after 1,000 steps).
    prefetched: std.atomic.Value(u32) = .init(0),
    /// Prefetches in a row that found their records resident.
    resident_prefetches: std.atomic.Value(u32) = .init(0),

    pub fn expectsCold(e: *const Estimate) bool {
        return e.cold.load(.monotonic);
    }

    pub fn set(e: *Estimate, cold: bool) void {
        if (e.cold.load(.monotonic) != cold) e.cold.store(cold, .monotonic);
    }

    /// A prefetch call sampled its records: `hinted` when it found them outside the page
    /// cache and hinted them.
    pub fn notePrefetch(e: *Estimate, hinted: bool) void {
        if (hinted) {
            if (e.resident_prefetches.load(.monotonic) != 0) e.resident_prefetches.store(0, .monotonic);
            if (e.prefetched.load(.monotonic) != prefetched_gathers) e.prefetched.store(prefetched_gathers, .monotonic);
            return;
        }
        const run = e.resident_prefetches.fetchAdd(1, .monotonic) +| 1;
        if (run >= warm_prefetches and e.prefetched.load(.monotonic) != 0) e.prefetched.store(0, .monotonic);
    }

    /// Whether this gather follows a prefetch that hinted; counts it.
    pub fn takePrefetched(e: *Estimate) bool {
        var left = e.prefetched.load(.monotonic);
        assert(left <= prefetched_gathers);
        while (left > 0) {
            left = e.prefetched.cmpxchgWeak(left, left - 1, .monotonic, .monotonic) orelse return true;
        }
        return false;
    }
};

/// Hinting and sampling over a batch. `Src` provides `span(pos)` for the batch's positions,
/// `advise(span)`, which starts reading a page-aligned span into the page cache, and
/// `resident(span)`, which says whether a page-aligned span of at most `sample_pages_max`
/// pages is there (the reader's gather context: posix_fadvise and mincore).
pub fn Batch(comptime Src: type) type {
    return struct {
        src: *const Src,

        const Self = @This();

        /// Starts reading the records at positions [begin, end) into the page cache, sorted
        /// by shard and offset `hint_sort_records` at a time, records whose pages touch or
        /// overlap coalesced into one range.
        pub fn hint(b: Self, begin: u64, end: u64) void {
            assert(begin <= end);
            var buf: [hint_sort_records]Span = undefined;
            var pos = begin;
            while (pos < end) {
                var n: usize = 0;
                while (pos < end and n < buf.len) : (pos += 1) {
                    const s = b.src.span(pos);
                    if (s.len == 0) continue;
                    buf[n] = pageSpan(s);
                    n += 1;
                }
                adviseCoalesced(b.src, buf[0..n]);
            }
        }

        /// Whether the records at `sample_records` positions spread over [begin, end) are in
        /// the page cache (their first `sample_pages_max` pages).
        pub fn sampleResident(b: Self, begin: u64, end: u64) bool {
            if (end <= begin) return true;
            const n = end - begin;
            const k = @min(n, sample_records);
            var i: u64 = 0;
            while (i < k) : (i += 1) {
                const pos = begin + i * n / k;
                assert(pos < end);
                if (!b.residentAt(pos)) return false;
            }
            return true;
        }

        /// Whether the records at positions [begin, min(end, begin + sample_records)) are in
        /// the page cache.
        pub fn nextResident(b: Self, begin: u64, end: u64) bool {
            var pos = begin;
            while (pos < end and pos < begin + sample_records) : (pos += 1) {
                if (!b.residentAt(pos)) return false;
            }
            return true;
        }

        fn residentAt(b: Self, pos: u64) bool {
            const s = b.src.span(pos);
            if (s.len == 0) return true;
            var ps = pageSpan(s);
            ps.len = @min(ps.len, sample_pages_max * std.heap.pageSize());
            return b.src.resident(ps);
        }
    };
}

/// Sorts page-aligned `spans` by shard and offset and has `src` advise them, spans whose pages
/// touch or overlap coalesced into one range: one system call for a run of neighbouring
/// records. Batch.hint's second half; it needs only `src.advise`, so it stands outside the
/// generic type, generic over `src` alone.
fn adviseCoalesced(src: anytype, spans: []Span) void {
    if (spans.len == 0) return;
    std.sort.pdq(Span, spans, {}, spanBefore);
    const page: u64 = std.heap.pageSize();
    var cur = spans[0];
    for (spans[1..]) |s| {
        // Sorted, and every span whole pages (pageSpan): so is every range advised.
        assert(!spanBefore({}, s, cur) and s.offset % page == 0 and s.len % page == 0);
        if (s.shard == cur.shard and s.offset <= cur.offset + cur.len) {
            cur.len = @max(cur.len, s.offset + s.len - cur.offset);
            continue;
        }
        src.advise(cur);
        cur = s;
    }
    src.advise(cur);
}

/// The pages a span lies in, as a span.
fn pageSpan(s: Span) Span {
    assert(s.len > 0);
    const page: u64 = std.heap.pageSize();
    const begin = s.offset - s.offset % page;
    const end = s.offset + s.len;
    const out: Span = .{ .shard = s.shard, .offset = begin, .len = (end - begin + page - 1) / page * page };
    assert(out.offset % page == 0 and out.len % page == 0 and out.offset + out.len >= end);
    return out;
}

fn spanBefore(_: void, a: Span, b: Span) bool {
    return a.shard < b.shard or (a.shard == b.shard and a.offset < b.offset);
}

/// Whether `records` records of `bytes` stored bytes that took `took_ns` to read were slower
/// than the page cache would have been.
pub fn slow(took_ns: u64, records: u64, bytes: u64) bool {
    return took_ns > records * probe_ns_per_record + bytes / 1024 * probe_ns_per_kib;
}

test "page spans cover whole pages and sort by shard, then offset" {
    const page: u64 = std.heap.pageSize();
    try std.testing.expectEqual(
        Span{ .shard = 1, .offset = 0, .len = page },
        pageSpan(.{ .shard = 1, .offset = 5, .len = 10 }),
    );
    try std.testing.expectEqual(
        Span{ .shard = 0, .offset = page, .len = 2 * page },
        pageSpan(.{ .shard = 0, .offset = 2 * page - 1, .len = 2 }),
    );
    try std.testing.expectEqual(
        Span{ .shard = 0, .offset = page, .len = page },
        pageSpan(.{ .shard = 0, .offset = page, .len = page }),
    );
    try std.testing.expect(spanBefore(
        {},
        .{ .shard = 0, .offset = 9, .len = 1 },
        .{ .shard = 1, .offset = 0, .len = 1 },
    ));
    try std.testing.expect(!spanBefore(
        {},
        .{ .shard = 1, .offset = 0, .len = 1 },
        .{ .shard = 0, .offset = 9, .len = 1 },
    ));
}

test "a probe is slow by its record count and bytes" {
    try std.testing.expect(!slow(4 * probe_ns_per_record, 4, 1000));
    try std.testing.expect(slow(4 * probe_ns_per_record + 1, 4, 1000));
    // Four 147 KiB records at 1.2 GiB/s are not slow; at 0.6 GiB/s they are.
    try std.testing.expect(!slow(480_000, 4, 4 * 150_528));
    try std.testing.expect(slow(960_000, 4, 4 * 150_528));
}

/// A batch of records whose spans are given, whose residency is a set of positions, and which
/// records its advice.
const FakeBatch = struct {
    spans: []const Span,
    cold: []const bool,
    advised: [16]Span = undefined,
    advised_count: usize = 0,
    asked: [16]u64 = undefined,
    asked_count: usize = 0,

    pub fn span(f: *const FakeBatch, pos: u64) Span {
        return f.spans[@intCast(pos)];
    }

    pub fn advise(f: *const FakeBatch, s: Span) void {
        const m: *FakeBatch = @constCast(f);
        m.advised[m.advised_count] = s;
        m.advised_count += 1;
    }

    pub fn resident(f: *const FakeBatch, s: Span) bool {
        const m: *FakeBatch = @constCast(f);
        for (f.spans, 0..) |rec, pos| {
            if (rec.shard == s.shard and rec.offset >= s.offset and rec.offset < s.offset + s.len) {
                m.asked[m.asked_count] = pos;
                m.asked_count += 1;
                return !f.cold[pos];
            }
        }
        unreachable;
    }
};

test "hints are sorted by shard and offset, and records sharing or touching pages coalesce" {
    const page: u64 = std.heap.pageSize();
    const spans = [_]Span{
        .{ .shard = 1, .offset = 10 * page + 5, .len = 20 }, // one page of shard 1
        .{ .shard = 0, .offset = 3 * page, .len = 2 * page }, // pages 3, 4
        .{ .shard = 0, .offset = 0, .len = 0 }, // empty: never hinted
        .{ .shard = 0, .offset = 5 * page + 100, .len = 10 }, // page 5, touching: coalesced
        .{ .shard = 0, .offset = 3 * page + 7, .len = 1 }, // inside pages 3, 4
        .{ .shard = 0, .offset = 9 * page, .len = 1 }, // page 9, apart
        .{ .shard = 1, .offset = 10 * page + 100, .len = 1 }, // same page as the first
    };
    const cold: [spans.len]bool = @splat(false);
    var f: FakeBatch = .{ .spans = &spans, .cold = &cold };
    const b: Batch(FakeBatch) = .{ .src = &f };
    b.hint(0, spans.len);
    try std.testing.expectEqualSlices(Span, &.{
        .{ .shard = 0, .offset = 3 * page, .len = 3 * page },
        .{ .shard = 0, .offset = 9 * page, .len = page },
        .{ .shard = 1, .offset = 10 * page, .len = page },
    }, f.advised[0..f.advised_count]);
    // A sub-range hints only its own records.
    f.advised_count = 0;
    b.hint(5, 6);
    try std.testing.expectEqualSlices(
        Span,
        &.{.{ .shard = 0, .offset = 9 * page, .len = page }},
        f.advised[0..f.advised_count],
    );
}

test "samples spread over the batch; the next records are the ones after a probe" {
    const page: u64 = std.heap.pageSize();
    var spans: [12]Span = undefined;
    for (&spans, 0..) |*s, i| s.* = .{ .shard = 0, .offset = i * page, .len = 8 };
    var cold: [spans.len]bool = @splat(false);
    var f: FakeBatch = .{ .spans = &spans, .cold = &cold };
    const b: Batch(FakeBatch) = .{ .src = &f };
    try std.testing.expect(b.sampleResident(0, 12));
    try std.testing.expectEqualSlices(u64, &.{ 0, 3, 6, 9 }, f.asked[0..f.asked_count]);
    // One cold record among the samples makes the batch cold; one between them does not.
    cold[4] = true;
    f.asked_count = 0;
    try std.testing.expect(b.sampleResident(0, 12));
    cold[6] = true;
    try std.testing.expect(!b.sampleResident(0, 12));
    f.asked_count = 0;
    try std.testing.expect(b.nextResident(7, 12));
    try std.testing.expectEqualSlices(u64, &.{ 7, 8, 9, 10 }, f.asked[0..f.asked_count]);
    try std.testing.expect(!b.nextResident(3, 12));
    // Fewer records than samples: each is asked once; an empty batch is resident.
    f.asked_count = 0;
    try std.testing.expect(b.sampleResident(10, 12));
    try std.testing.expectEqualSlices(u64, &.{ 10, 11 }, f.asked[0..f.asked_count]);
    try std.testing.expect(b.sampleResident(5, 5));
}

// A run of prefetches that found their records cached ends that.
test "a prefetch that hinted lets the next gathers read with pread" {
    var e: Estimate = .{};
    try std.testing.expect(!e.takePrefetched());
    e.notePrefetch(true);
    for (0..prefetched_gathers) |_| try std.testing.expect(e.takePrefetched());
    try std.testing.expect(!e.takePrefetched());
    e.notePrefetch(true);
    try std.testing.expect(e.takePrefetched());
    // Fewer than warm_prefetches cached prefetches in a row leave the mark (a partly cached
    // store); a hinting prefetch starts the run again.
    for (0..warm_prefetches - 1) |_| e.notePrefetch(false);
    try std.testing.expect(e.takePrefetched());
    e.notePrefetch(true);
    for (0..warm_prefetches - 1) |_| e.notePrefetch(false);
    try std.testing.expect(e.takePrefetched());
    e.notePrefetch(false);
    try std.testing.expect(!e.takePrefetched());
    e.notePrefetch(false);
    try std.testing.expect(!e.takePrefetched());
}
