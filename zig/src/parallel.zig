//! Per-call worker threads.
//!
//! Invariants:
//! - There is no persistent pool: every parallel call spawns its workers and joins all of them
//!   before it returns, so no thread of ours outlives a call and fork() is always safe between
//!   calls (a pool would leave threads, and locks they hold, behind in a forked child).
//! - Work is a range [0, total) of units. With `Split.contiguous` it is cut into one
//!   sub-range per worker (the calling thread takes the first), for work that owns per-worker
//!   state keyed by its range (the writer's lanes). With `Split.claimed` workers claim chunks
//!   of about total / (workers * claims_per_worker) units in increasing order from a shared
//!   counter until none is left, so a worker that runs slower (a busy core, records that
//!   decode slower) does not hold up the call: the others take its share.
//! - Each worker has its own `Diag`; when several fail, the failure of the lowest range is
//!   reported, so the error a caller sees does not depend on scheduling more than necessary.
//!   With `Split.claimed`, once one chunk fails no new chunk is claimed; every chunk below it
//!   was claimed earlier and runs to its end, so the reported failure is the lowest failing
//!   unit of the whole call.
//! - If a thread cannot be spawned, or the bookkeeping cannot be allocated, the work runs on
//!   the calling thread instead: parallelism is an optimisation, never a new way to fail.

const std = @import("std");
const assert = std.debug.assert;
const diag_mod = @import("diag.zig");
const sys = @import("sys.zig");
const Diag = diag_mod.Diag;
const Error = diag_mod.Error;

/// Most workers one call uses, whatever the caller asks for.
pub const workers_max: usize = 64;

/// Stack for worker threads: they hash, copy and format messages, nothing recursive.
const worker_stack_bytes: usize = 1 << 20;

/// How `run` shares the units among its workers (see the invariants above).
pub const Split = enum { contiguous, claimed };

/// With `Split.claimed`, each worker claims about this many chunks of an evenly shared call:
/// enough that a worker slowed by half leaves the others little to wait for, few enough that
/// the per-chunk setup of `work` (a decoder lease, a scratch buffer) stays negligible.
pub const claims_per_worker: u64 = 8;

/// Counters that the workers of one `run` share.
const Shared = struct {
    next: std.atomic.Value(u64) = .init(0),
    failed: std.atomic.Value(bool) = .init(false),
    grain: u64,
    total: u64,
};

/// One worker of a `run` over `Ctx` with `work`: its range (contiguous split), its diagnosis
/// and where its work failed.
fn Slot(comptime Ctx: type, comptime work: fn (*const Ctx, u64, u64, *Diag) Error!void) type {
    return struct {
        diag: Diag = .{},
        result: ?Error = null,
        /// First unit of the range whose work failed.
        failed_at: u64 = std.math.maxInt(u64),
        thread: ?std.Thread = null,
        begin: u64 = 0,
        end: u64 = 0,

        fn main(c: *const Ctx, slot: *@This(), shared: *Shared, how: Split) void {
            if (how == .contiguous) {
                _ = slot.runRange(c, slot.begin, slot.end, shared);
                return;
            }
            while (!shared.failed.load(.acquire)) {
                const b = shared.next.fetchAdd(shared.grain, .monotonic);
                if (b >= shared.total) return;
                if (!slot.runRange(c, b, @min(shared.total, b + shared.grain), shared)) return;
            }
        }

        fn runRange(slot: *@This(), c: *const Ctx, b: u64, e: u64, shared: *Shared) bool {
            assert(b < e and e <= shared.total);
            work(c, b, e, &slot.diag) catch |err| {
                slot.result = err;
                slot.failed_at = b;
                shared.failed.store(true, .release);
                return false;
            };
            return true;
        }
    };
}

/// Runs `work(ctx, begin, end, diag)` over [0, total) on `workers` threads (including the
/// caller's). `work` must be safe to run concurrently on disjoint ranges; with
/// `Split.claimed` one worker may call it several times, on increasing ranges.
pub fn run(
    comptime Ctx: type,
    ctx: *const Ctx,
    comptime work: fn (*const Ctx, u64, u64, *Diag) Error!void,
    total: u64,
    workers_wanted: usize,
    split: Split,
    d: *Diag,
) Error!void {
    const workers: usize = @intCast(@min(@as(u64, @min(workers_wanted, workers_max)), total));
    assert(workers <= workers_max and workers <= total or workers == 0);
    if (workers <= 1) return work(ctx, 0, total, d);
    const S = Slot(Ctx, work);
    const alloc = std.heap.c_allocator;
    const slots = alloc.alloc(S, workers) catch return work(ctx, 0, total, d);
    defer alloc.free(slots);
    // total * (k+1) cannot overflow: totals are record counts (< 2^48) or shard counts.
    for (slots, 0..) |*slot, k| {
        slot.* = .{
            .begin = total * k / workers,
            .end = total * (k + 1) / workers,
        };
    }
    // The contiguous ranges tile [0, total), none empty, since workers <= total.
    assert(slots[0].begin == 0 and slots[workers - 1].end == total);
    for (slots[1..], slots[0 .. workers - 1]) |slot, before| assert(slot.begin == before.end and slot.begin < slot.end);
    var shared: Shared = .{
        .grain = @max(1, total / (workers * claims_per_worker)),
        .total = total,
    };
    for (slots[1..]) |*slot| {
        slot.thread = std.Thread.spawn(
            .{ .stack_size = worker_stack_bytes },
            S.main,
            .{ ctx, slot, &shared, split },
        ) catch null;
    }
    S.main(ctx, &slots[0], &shared, split);
    for (slots[1..]) |*slot| {
        if (slot.thread) |t| t.join() else S.main(ctx, slot, &shared, split);
    }
    var first: ?*S = null;
    for (slots) |*slot| {
        if (slot.result != null and (first == null or slot.failed_at < first.?.failed_at)) first = slot;
    }
    if (first) |slot| {
        d.copyFrom(&slot.diag);
        return slot.result.?;
    }
    // No failure: every unit was worked, so claiming went past the end.
    assert(!shared.failed.load(.acquire));
    assert(split == .contiguous or shared.next.load(.monotonic) >= total);
}

test "parallel run covers every unit once and reports the first failure" {
    const Ctx = struct {
        hits: []u8,
        fail_at: u64,
        fn work(c: *const @This(), begin: u64, end: u64, d: *Diag) Error!void {
            var i = begin;
            while (i < end) : (i += 1) {
                if (i == c.fail_at) return d.fail(error.Corrupt, "unit {d}", .{i});
                _ = @atomicRmw(u8, &c.hits[@intCast(i)], .Add, 1, .monotonic);
            }
        }
    };
    for ([_]Split{ .contiguous, .claimed }) |split| {
        for ([_]usize{ 2, 7 }) |workers| {
            var hits: [1000]u8 = @splat(0);
            var d: Diag = .{};
            const ctx: Ctx = .{ .hits = &hits, .fail_at = std.math.maxInt(u64) };
            try run(Ctx, &ctx, Ctx.work, hits.len, workers, split, &d);
            for (hits) |h| try std.testing.expectEqual(@as(u8, 1), h);
            const bad: Ctx = .{ .hits = &hits, .fail_at = 500 };
            try std.testing.expectError(error.Corrupt, run(Ctx, &bad, Ctx.work, hits.len, workers, split, &d));
            try std.testing.expectEqualStrings("unit 500", d.text());
        }
    }
}

test "claimed chunks: two failures report the lower one, whichever worker met it" {
    const Ctx = struct {
        fn work(_: *const @This(), begin: u64, end: u64, d: *Diag) Error!void {
            var i = begin;
            while (i < end) : (i += 1) {
                // The higher failure comes first in time: its chunk returns at once, the lower
                // one only after a delay.
                if (i == 900) return d.fail(error.Corrupt, "unit {d}", .{i});
                if (i == 130) {
                    sys.sleepNs(20 * std.time.ns_per_ms);
                    return d.fail(error.Corrupt, "unit {d}", .{i});
                }
            }
        }
    };
    var d: Diag = .{};
    const ctx: Ctx = .{};
    try std.testing.expectError(error.Corrupt, run(Ctx, &ctx, Ctx.work, 1000, 4, .claimed, &d));
    try std.testing.expectEqualStrings("unit 130", d.text());
}
