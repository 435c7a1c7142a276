//! A fuzzer of compact index files (compact.zig), which are input: a cache folder holds them
//! between processes, and anyone who can read a store can craft one that passes its checksums
//! (index_cache.zig). The property: whatever a file holds, `headerFits`, `regionsMatch` and
//! `blockInBounds` either refuse it or every record of the blocks they accept decodes without
//! reading outside the file (Debug builds check every slice bound, so such a read panics here).
//!
//! Invariants:
//! - Deterministic: the files and their mutations come from fixed seeds, so a failure repeats.
//!   Set ZRECORD_FUZZ_ROUNDS to run more rounds than the suite's default.
//! - Half of the mutated files are sealed anew (region and header checksums made to match), as
//!   a crafted file would be, so that mutations reach the decoder rather than only the
//!   checksum checks.

const std = @import("std");
const format = @import("format.zig");
const sys = @import("sys.zig");
const compact = @import("compact.zig");
const t = @import("testing.zig");

const testing = std.testing;
const gpa = testing.allocator;

/// Rounds per layout in the suite: each builds one file and mutates it this many times.
const rounds_default: usize = 400;

fn rounds() usize {
    const text = std.c.getenv("ZRECORD_FUZZ_ROUNDS") orelse return rounds_default;
    return std.fmt.parseInt(usize, std.mem.sliceTo(text, 0), 10) catch rounds_default;
}

/// A compact index file of `n` random records of `ndim` axes in one of three layouts (back to
/// back in one shard, runs in three shards, anywhere), built by `compact.Builder`.
fn buildFile(random: std.Random, ndim: u8, n: usize, layout: u8) ![]u8 {
    const fd = try sys.memfd("compact-fuzz");
    defer sys.close(fd);
    var buf: [3 * 4096]u8 = undefined;
    var key: compact.FileHeader = .{
        .store_header_checksum = random.int(u64),
        .index = std.mem.zeroes(sys.FileIdentity),
        .sums = std.mem.zeroes(sys.FileIdentity),
        .record_count = n,
        .ndim = ndim,
        .headers_at = 0,
        .headers_len = 0,
        .bits_at = 0,
        .bits_len = 0,
    };
    key.seal();
    var b = compact.Builder.init(fd, key, "/fuzz/store", &buf);
    var next: [3]u64 = .{ 0, 0, 0 };
    for (0..n) |i| {
        const shard: u8 = if (layout == 0) 0 else @intCast(if (layout == 1) i * 3 / n else random.uintLessThan(u8, 3));
        const size: u32 = if (layout == 2) random.int(u32) else random.intRangeAtMost(u32, 0, 500);
        var p: compact.Pending = .{
            .offset = if (layout == 2) random.int(u64) else next[shard],
            .stored_size = size,
            .shard = shard,
            .sum = random.int(u32),
        };
        next[shard] += size;
        for (0..ndim) |k| p.dims[k] = if (layout == 2) random.int(u32) else random.intRangeAtMost(u32, 1, 300);
        try b.add(p);
    }
    const h = try b.finish();
    const bytes = try gpa.alloc(u8, @intCast(compact.fileBytes(h)));
    var short = false;
    try sys.preadAll(fd, bytes, 0, &short);
    return bytes;
}

/// One to eight random changes: flipped bits anywhere, or extreme values written over fields
/// of the file header and of block headers, where the decoder's arithmetic starts.
fn mutate(random: std.Random, bytes: []u8) void {
    const extremes = [_]u64{ 0, 1, 7, 8, 56, 57, 63, 64, 65, 255, 1 << 32, std.math.maxInt(u64) };
    const count = random.intRangeAtMost(usize, 1, 8);
    for (0..count) |_| {
        switch (random.uintLessThan(u8, 3)) {
            0 => bytes[random.uintLessThan(usize, bytes.len)] ^= @as(u8, 1) << random.int(u3),
            1 => {
                const at = random.uintLessThan(usize, bytes.len);
                bytes[at] = @truncate(extremes[random.uintLessThan(usize, extremes.len)]);
            },
            else => {
                // A field of the header or of the first block headers, on an 8-byte boundary.
                const limit = @min(bytes.len, 1024) - 8;
                const at = random.uintLessThan(usize, limit / 8) * 8;
                std.mem.writeInt(u64, bytes[at..][0..8], extremes[random.uintLessThan(usize, extremes.len)], .little);
            },
        }
    }
}

/// Decodes every record of every block the checks accept; returns how many were decoded.
fn decodeAccepted(bytes: []const u8) u64 {
    const h = std.mem.bytesToValue(compact.FileHeader, bytes[0..@sizeOf(compact.FileHeader)]);
    if (!compact.headerFits(h, bytes.len)) return 0;
    const v = compact.viewOf(h, bytes);
    if (!compact.regionsMatch(h, v)) return 0;
    var decoded: u64 = 0;
    var blk: u64 = 0;
    while (blk < v.blockCount()) : (blk += 1) {
        if (!compact.blockInBounds(&v, blk)) continue;
        var rec = blk * compact.block_records;
        const end = @min(v.record_count, rec + compact.block_records);
        while (rec < end) : (rec += 1) {
            const loc = v.location(rec);
            std.mem.doNotOptimizeAway(loc);
            var shape: [format.ndim_max]u64 = undefined;
            v.shape(rec, shape[0..v.ndim]);
            std.mem.doNotOptimizeAway(shape);
            std.mem.doNotOptimizeAway(v.sum(rec));
            decoded += 1;
        }
    }
    return decoded;
}

/// Decodes every record of a file whose header was accepted before its bytes changed: no
/// region or block check, as for a file changed under its reader after they passed.
fn decodeChanged(h: compact.FileHeader, bytes: []const u8) void {
    const v = compact.viewOf(h, bytes);
    var rec: u64 = 0;
    while (rec < v.record_count) : (rec += 1) {
        std.mem.doNotOptimizeAway(v.location(rec));
        var shape: [format.ndim_max]u64 = undefined;
        v.shape(rec, shape[0..v.ndim]);
        std.mem.doNotOptimizeAway(shape);
        v.prefetchBits(rec);
    }
}

test "fuzz: a file changed in place after its checks passed decodes every record without a panic" {
    var prng = std.Random.DefaultPrng.init(0x5eed_c4a9);
    const random = prng.random();
    for ([_]u8{ 0, 1, 3 }) |ndim| {
        for (0..3) |layout| {
            const n = random.intRangeAtMost(usize, 1, 700);
            const original = try buildFile(random, ndim, n, @intCast(layout));
            defer gpa.free(original);
            const h = std.mem.bytesToValue(compact.FileHeader, original[0..@sizeOf(compact.FileHeader)]);
            try testing.expect(compact.headerFits(h, original.len));
            const copy = try gpa.alloc(u8, original.len);
            defer gpa.free(copy);
            for (0..rounds()) |_| {
                @memcpy(copy, original);
                // The header stays as it was read at load; the mapped regions change.
                mutate(random, copy[@sizeOf(compact.FileHeader)..]);
                decodeChanged(h, copy);
            }
        }
    }
}

test "fuzz: a crafted compact index file is refused, or decodes without reading outside it" {
    var prng = std.Random.DefaultPrng.init(0x2e2d);
    const random = prng.random();
    var accepted: u64 = 0;
    for ([_]u8{ 0, 1, 3 }) |ndim| {
        for (0..3) |layout| {
            const n = random.intRangeAtMost(usize, 1, 700);
            const original = try buildFile(random, ndim, n, @intCast(layout));
            defer gpa.free(original);
            try testing.expectEqual(@as(u64, n), decodeAccepted(original));
            const copy = try gpa.alloc(u8, original.len);
            defer gpa.free(copy);
            for (0..rounds()) |_| {
                @memcpy(copy, original);
                mutate(random, copy);
                if (random.boolean()) t.resealCompact(copy);
                accepted += decodeAccepted(copy);
            }
        }
    }
    // The resealed mutations must reach the decoder, or the fuzzer tests only the checksums.
    try testing.expect(accepted > 0);
}
