//! Per-call worker threads.
//!
//! Invariants:
//! - There is no persistent pool: every parallel call spawns its workers and joins all of them
//!   before it returns, so no thread of ours outlives a call and fork() is always safe between
//!   calls (a pool would leave threads, and locks they hold, behind in a forked child).
//! - Work is a range [0, total) of units split into contiguous sub-ranges, one per worker; the
//!   calling thread takes the first sub-range itself.
//! - Each worker has its own `Diag`; when several fail, the failure of the lowest sub-range is
//!   reported, so the error a caller sees does not depend on scheduling more than necessary.
//! - If a thread cannot be spawned, or the bookkeeping cannot be allocated, the work runs on
//!   the calling thread instead: parallelism is an optimisation, never a new way to fail.

const std = @import("std");
const diag_mod = @import("diag.zig");
const Diag = diag_mod.Diag;
const Error = diag_mod.Error;

/// Most workers one call uses, whatever the caller asks for.
pub const workers_max: usize = 64;

/// Stack for worker threads: they hash, copy and format messages, nothing recursive.
const worker_stack_bytes: usize = 1 << 20;

/// Runs `work(ctx, begin, end, diag)` over [0, total) on `workers` threads (including the
/// caller's). `work` must be safe to run concurrently on disjoint ranges.
pub fn run(
    comptime Ctx: type,
    ctx: *const Ctx,
    comptime work: fn (*const Ctx, u64, u64, *Diag) Error!void,
    total: u64,
    workers_wanted: usize,
    d: *Diag,
) Error!void {
    const workers: usize = @intCast(@min(@as(u64, @min(workers_wanted, workers_max)), total));
    if (workers <= 1) return work(ctx, 0, total, d);

    const Slot = struct {
        diag: Diag = .{},
        result: ?Error = null,
        thread: ?std.Thread = null,
        begin: u64 = 0,
        end: u64 = 0,

        fn main(c: *const Ctx, slot: *@This()) void {
            work(c, slot.begin, slot.end, &slot.diag) catch |err| {
                slot.result = err;
            };
        }
    };
    const alloc = std.heap.c_allocator;
    const slots = alloc.alloc(Slot, workers) catch return work(ctx, 0, total, d);
    defer alloc.free(slots);
    for (slots, 0..) |*slot, k| {
        slot.* = .{
            .begin = total * k / workers,
            .end = total * (k + 1) / workers,
        };
    }
    // total * (k+1) cannot overflow: totals are record counts (< 2^48) or shard counts.
    for (slots[1..]) |*slot| {
        slot.thread = std.Thread.spawn(.{ .stack_size = worker_stack_bytes }, Slot.main, .{ ctx, slot }) catch null;
    }
    Slot.main(ctx, &slots[0]);
    for (slots[1..]) |*slot| {
        if (slot.thread) |t| t.join() else Slot.main(ctx, slot);
    }
    for (slots) |*slot| {
        if (slot.result) |err| {
            d.copyFrom(&slot.diag);
            return err;
        }
    }
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
    var hits: [1000]u8 = @splat(0);
    var d: Diag = .{};
    const ctx: Ctx = .{ .hits = &hits, .fail_at = std.math.maxInt(u64) };
    try run(Ctx, &ctx, Ctx.work, hits.len, 7, &d);
    for (hits) |h| try std.testing.expectEqual(@as(u8, 1), h);
    const bad: Ctx = .{ .hits = &hits, .fail_at = 500 };
    try std.testing.expectError(error.Corrupt, run(Ctx, &bad, Ctx.work, hits.len, 7, &d));
    try std.testing.expectEqualStrings("unit 500", d.text());
}
