//! End-to-end tests of the reader's read modes (readahead.zig) through the C ABI: every mode
//! returns the same records and fails the same way on corrupt or truncated shards, prefetch
//! accepts every valid batch and rejects invalid ones, and a store evicted from the page cache
//! is read hinted.
//!
//! Invariants:
//! - As in tests.zig, each test works in its own fresh directory under /tmp and removes it;
//!   a test that leaves anything behind fails.
//! - No assertion depends on timing. Whether the page cache really dropped a store's pages
//!   depends on the file system (a tmpfs cannot drop them), so assertions about the adaptive
//!   mode's estimate are made only when mincore(2) shows that the eviction took.

const std = @import("std");
const root = @import("root.zig");
const abi = @import("abi.zig");
const t = @import("testing.zig");
const reader_mod = @import("reader.zig");
const gather_mod = @import("gather.zig");
const readahead = @import("readahead.zig");
const sys = @import("sys.zig");

const testing = std.testing;
const gpa = testing.allocator;
const Status = abi.Status;
const Reader = reader_mod.Reader;
const TempDir = t.TempDir;

const modes = [_]readahead.Mode{ .mapped, .hinted, .auto };
const threshold: usize = @intCast(gather_mod.pread_record_bytes_min);

extern "c" fn truncate(path: [*:0]const u8, length: i64) c_int;

fn setMode(r: *Reader, mode: readahead.Mode) !void {
    var st: Status = undefined;
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_set_reads(r, @backingInt(mode), &st));
}

/// Text-like bytes, which compress.
fn textData(seed: u64, len: usize) ![]u8 {
    const buf = try gpa.alloc(u8, len);
    var prng = std.Random.DefaultPrng.init(seed);
    t.fillWords(prng.random(), buf);
    return buf;
}

fn writeRagged(
    td: *const TempDir,
    name: []const u8,
    codec: u8,
    dict: []const u8,
    shards: u8,
    recs: []const []const u8,
) !void {
    var pbuf: [256]u8 = undefined;
    var st: Status = undefined;
    const schema = t.schemaWith(2, 3, &.{0}, shards, codec); // uint8, rank 1
    var w: ?*@import("writer.zig").Writer = null;
    const dict_ptr: ?[*]const u8 = if (dict.len > 0) dict.ptr else null;
    try testing.expectEqual(
        @as(c_int, 0),
        root.zr_writer_open(td.sub(&pbuf, name), &schema, dict_ptr, dict.len, 1, &w, &st),
    );
    defer root.zr_writer_free(w);
    const ptrs = try gpa.alloc(u64, recs.len);
    defer gpa.free(ptrs);
    const shapes = try gpa.alloc(u64, recs.len);
    defer gpa.free(shapes);
    for (recs, ptrs, shapes) |rec, *p, *s| {
        p.* = if (rec.len == 0) 0 else @intFromPtr(rec.ptr);
        s.* = rec.len;
    }
    try testing.expectEqual(@as(c_int, 0), root.zr_writer_append_ragged(w, ptrs.ptr, shapes.ptr, recs.len, &st));
    try testing.expectEqual(@as(c_int, 0), root.zr_writer_publish(w, &st));
}

fn expectRaggedGather(r: *Reader, recs: []const []const u8, idx: []const u64, threads: u32) !void {
    const offsets = try gpa.alloc(u64, idx.len);
    defer gpa.free(offsets);
    var total: u64 = 0;
    for (idx, offsets) |rec, *off| {
        off.* = total;
        total += recs[@intCast(rec)].len;
    }
    const out = try gpa.alloc(u8, @intCast(@max(total, 1)));
    defer gpa.free(out);
    @memset(out, 0xAA);
    var st: Status = undefined;
    const rc = root.zr_reader_gather_ragged(r, idx.ptr, idx.len, out.ptr, offsets.ptr, null, total, threads, &st);
    if (rc != 0) std.debug.print("gather_ragged failed: {s}\n", .{t.msg(&st)});
    try testing.expectEqual(@as(c_int, 0), rc);
    for (idx, offsets) |rec, off| {
        const want = recs[@intCast(rec)];
        try testing.expectEqualSlices(u8, want, out[@intCast(off)..][0..want.len]);
    }
}

/// A batch of `n` positions over `count` records, repeats included.
fn batchOf(buf: []u64, count: u64, seed: u64) []u64 {
    var prng = std.Random.DefaultPrng.init(seed);
    for (buf) |*v| v.* = prng.random().uintLessThan(u64, count);
    buf[buf.len - 1] = buf[0];
    return buf;
}

test "every read mode returns the same Dense records, small and large, raw and compressed" {
    var td: TempDir = .{};
    try td.init();
    var dict_buf: [16 << 10]u8 = undefined;
    const dict = dict_buf[0..try t.trainRowsDict(&dict_buf)];
    const n = 40;
    for ([_]u8{ t.codec_raw, t.codec_zstd, t.codec_zstd_dict }) |codec| {
        for ([_]usize{ 300, 4096 + 5, threshold + 1 }) |rs| {
            const data = if (codec == t.codec_raw) try t.randomBytes(rs, n * rs) else try textData(rs, n * rs);
            defer gpa.free(data);
            const d: []const u8 = if (codec == t.codec_zstd_dict) dict else "";
            try t.writeDense(&td, "d", codec, d, 3, rs, data, &.{ 17, 23 });
            for (modes) |mode| {
                for ([_]u32{ 1, 4 }) |threads| {
                    // Evicted first where the file system can, so that the adaptive mode
                    // meets both cold and warm batches.
                    _ = try t.evict(&td, "d", 3);
                    const r = try t.openOk(&td, "d");
                    try setMode(r, mode);
                    var buf: [64]u64 = undefined;
                    const idx = batchOf(&buf, n, rs + threads);
                    // First with the checksums checked, then from the verified bitmap.
                    try t.expectDenseGather(r, data, rs, idx, threads);
                    try t.expectDenseGather(r, data, rs, idx, threads);
                    var st: Status = undefined;
                    try testing.expectEqual(@as(c_int, 0), root.zr_reader_verify(r, 0, n, &st));
                    root.zr_reader_free(r);
                }
            }
            td.removeStore("d", 3);
        }
    }
    try td.deinitExpectEmpty();
}

test "every read mode returns the same Ragged records, empty ones included" {
    var td: TempDir = .{};
    try td.init();
    var dict_buf: [16 << 10]u8 = undefined;
    const dict = dict_buf[0..try t.trainRowsDict(&dict_buf)];
    const text = try textData(9, 3 * threshold);
    defer gpa.free(text);
    const recs = [_][]const u8{
        "", text[0..1],    text[5..300],                 text[0 .. 2 * threshold],
        "", text[7..5000], text[100 .. threshold + 100], text[1..2],
    };
    for ([_]u8{ t.codec_raw, t.codec_zstd, t.codec_zstd_dict }) |codec| {
        const d: []const u8 = if (codec == t.codec_zstd_dict) dict else "";
        try writeRagged(&td, "r", codec, d, 2, &recs);
        for (modes) |mode| {
            _ = try t.evict(&td, "r", 2);
            const r = try t.openOk(&td, "r");
            try setMode(r, mode);
            const idx = [_]u64{ 3, 0, 2, 2, 7, 4, 6, 5, 1, 3 };
            try expectRaggedGather(r, &recs, &idx, 1);
            try expectRaggedGather(r, &recs, &idx, 3);
            root.zr_reader_free(r);
        }
        td.removeStore("r", 2);
    }
    try td.deinitExpectEmpty();
}

test "a flipped byte fails its record's checksum in every read mode" {
    var td: TempDir = .{};
    try td.init();
    for ([_]usize{ 512, threshold }) |rs| {
        const n = 8;
        const data = try t.randomBytes(rs, n * rs);
        defer gpa.free(data);
        for (modes) |mode| {
            try t.writeDense(&td, "d", t.codec_raw, "", 1, rs, data, &.{n});
            // Record 5 lies at offset 5 * rs of the only shard.
            var b: [1]u8 = .{~data[5 * rs + 3]};
            try t.patchFile(&td, "d/data-000.zrd", 5 * rs + 3, &b);
            _ = try t.evict(&td, "d", 1);
            const r = try t.openOk(&td, "d");
            try setMode(r, mode);
            const idx = [_]u64{ 1, 5, 2 };
            const out = try gpa.alloc(u8, idx.len * rs);
            defer gpa.free(out);
            var st: Status = undefined;
            // Verify first, on the store as cold as the file system allows (it hints ahead).
            try testing.expectEqual(abi.Result.checksum.code(), root.zr_reader_verify(r, 0, n, &st));
            try testing.expectEqual(@as(i64, 5), st.record);
            _ = try t.evict(&td, "d", 1);
            try testing.expectEqual(
                abi.Result.checksum.code(),
                root.zr_reader_gather_dense(r, &idx, idx.len, out.ptr, out.len, 1, &st),
            );
            try testing.expectEqual(@as(i64, 5), st.record);
            try t.expectContains(t.msg(&st), "record 5 ");
            // The records before it and after it still read.
            const good = [_]u64{ 1, 2 };
            try t.expectDenseGather(r, data, rs, &good, 1);
            root.zr_reader_free(r);
            td.removeStore("d", 1);
        }
    }
    try td.deinitExpectEmpty();
}

test "a shard truncated after open fails with ZR_E_CORRUPT in every read mode" {
    // Windows: no truncate(2); a mapped file cannot shrink there.
    if (comptime @import("builtin").os.tag == .windows) return error.SkipZigTest;
    var td: TempDir = .{};
    try td.init();
    const rs = 2048;
    const n = 16;
    const data = try t.randomBytes(1, n * rs);
    defer gpa.free(data);
    for (modes) |mode| {
        try t.writeDense(&td, "d", t.codec_raw, "", 1, rs, data, &.{n});
        const r = try t.openOk(&td, "d");
        try setMode(r, mode);
        var pbuf: [256]u8 = undefined;
        try testing.expectEqual(@as(c_int, 0), truncate(td.sub(&pbuf, "d/data-000.zrd"), 2 * rs));
        var idx: [n]u64 = undefined;
        for (&idx, 0..) |*v, i| v.* = i;
        const out = try gpa.alloc(u8, n * rs);
        defer gpa.free(out);
        var st: Status = undefined;
        try testing.expectEqual(
            abi.Result.corrupt.code(),
            root.zr_reader_gather_dense(r, &idx, n, out.ptr, out.len, 1, &st),
        );
        try t.expectContains(t.msg(&st), "truncated");
        try testing.expect(st.record >= 2);
        // Prefetching what is left of the shard, or past its end, is a hint and fails nothing.
        try testing.expectEqual(@as(c_int, 0), root.zr_reader_prefetch(r, &idx, n, &st));
        try t.expectDenseGather(r, data, rs, idx[0..2], 1);
        root.zr_reader_free(r);
        td.removeStore("d", 1);
    }
    try td.deinitExpectEmpty();
}

test "prefetch_hinted says whether it hinted: not for records in the page cache, nor when mapped" {
    var td: TempDir = .{};
    try td.init();
    const rs = 700;
    const n = 300;
    const data = try t.randomBytes(3, n * rs);
    defer gpa.free(data);
    try t.writeDense(&td, "d", t.codec_raw, "", 2, rs, data, &.{ 100, 200 });
    var st: Status = undefined;
    var buf: [256]u64 = undefined;
    const idx = batchOf(&buf, n, 3);
    var hinted: u32 = 7;
    for (modes) |mode| {
        const r = try t.openOk(&td, "d");
        try setMode(r, mode);
        // Read once: in the page cache now.
        try t.expectDenseGather(r, data, rs, idx, 1);
        try testing.expectEqual(@as(c_int, 0), root.zr_reader_prefetch_hinted(r, idx.ptr, idx.len, &hinted, &st));
        // auto samples and finds them; mapped never hints; hinted always does.
        try testing.expectEqual(@as(u32, @intFromBool(mode == .hinted)), hinted);
        try testing.expectEqual(@as(c_int, 0), root.zr_reader_prefetch_hinted(r, null, 0, &hinted, &st));
        try testing.expectEqual(@as(u32, 0), hinted);
        try testing.expectEqual(@as(c_int, 0), root.zr_reader_prefetch_hinted(r, idx.ptr, idx.len, null, &st));
        root.zr_reader_free(r);
    }
    td.removeStore("d", 2);
    try td.deinitExpectEmpty();
}

test "prefetch takes every valid batch in every mode and refuses invalid arguments" {
    var td: TempDir = .{};
    try td.init();
    const rs = 700;
    const n = 300;
    const data = try t.randomBytes(2, n * rs);
    defer gpa.free(data);
    try t.writeDense(&td, "d", t.codec_raw, "", 2, rs, data, &.{ 100, 200 });
    var st: Status = undefined;
    for (modes) |mode| {
        _ = try t.evict(&td, "d", 2);
        const r = try t.openOk(&td, "d");
        try setMode(r, mode);
        var buf: [256]u64 = undefined;
        const idx = batchOf(&buf, n, 3);
        try testing.expectEqual(@as(c_int, 0), root.zr_reader_prefetch(r, idx.ptr, idx.len, &st));
        // Twice, and with nothing to do.
        try testing.expectEqual(@as(c_int, 0), root.zr_reader_prefetch(r, idx.ptr, idx.len, &st));
        try testing.expectEqual(@as(c_int, 0), root.zr_reader_prefetch(r, null, 0, &st));
        try t.expectDenseGather(r, data, rs, idx, 1);
        const bad = [_]u64{ 4, n };
        try testing.expectEqual(abi.Result.index.code(), root.zr_reader_prefetch(r, &bad, bad.len, &st));
        try t.expectContains(t.msg(&st), "index 300 at position 1");
        try testing.expectEqual(abi.Result.invalid_argument.code(), root.zr_reader_prefetch(r, null, 3, &st));
        root.zr_reader_close(r);
        try testing.expectEqual(abi.Result.closed.code(), root.zr_reader_prefetch(r, idx.ptr, idx.len, &st));
        root.zr_reader_free(r);
    }
    try testing.expectEqual(abi.Result.invalid_argument.code(), root.zr_reader_prefetch(null, null, 0, &st));
    td.removeStore("d", 2);
    try td.deinitExpectEmpty();
}

test "more records than one prefetch hints, and more than one sort buffer holds, read back" {
    var td: TempDir = .{};
    try td.init();
    const rs = 8;
    const n = readahead.prefetch_records_max + 3 * readahead.hint_sort_records;
    const data = try t.randomBytes(3, n * rs);
    defer gpa.free(data);
    try t.writeDense(&td, "d", t.codec_raw, "", 4, rs, data, &.{n});
    const idx = try gpa.alloc(u64, n + 5);
    defer gpa.free(idx);
    for (idx, 0..) |*v, i| v.* = (i * 7919) % n;
    var st: Status = undefined;
    for ([_]readahead.Mode{ .hinted, .auto }) |mode| {
        _ = try t.evict(&td, "d", 4);
        const r = try t.openOk(&td, "d");
        try setMode(r, mode);
        try testing.expectEqual(@as(c_int, 0), root.zr_reader_prefetch(r, idx.ptr, idx.len, &st));
        try t.expectDenseGather(r, data, rs, idx, 0);
        root.zr_reader_free(r);
    }
    td.removeStore("d", 4);
    try td.deinitExpectEmpty();
}

test "set_reads refuses an unknown mode and a null reader" {
    var td: TempDir = .{};
    try td.init();
    const data = [_]u8{ 1, 2, 3, 4 };
    try t.writeDense(&td, "d", t.codec_raw, "", 1, 2, &data, &.{2});
    const r = try t.openOk(&td, "d");
    var st: Status = undefined;
    try testing.expectEqual(abi.Result.invalid_argument.code(), root.zr_reader_set_reads(r, 3, &st));
    try t.expectContains(t.msg(&st), "unknown read mode 3");
    try testing.expectEqual(abi.Result.invalid_argument.code(), root.zr_reader_set_reads(null, 0, &st));
    try testing.expectEqual(readahead.Mode.auto, r.readMode());
    root.zr_reader_free(r);
    td.removeStore("d", 1);
    try td.deinitExpectEmpty();
}

/// A raw Dense store "d" of `n` records of `rs` bytes in two shards, evicted from the page
/// cache (`evicted`: whether that took, which only the file system decides) and opened.
const EvictedDense = struct {
    const rs = 1024;
    const n = 2000;
    td: TempDir = .{},
    data: []u8 = &.{},
    all: [n]u64 = undefined,
    r: *Reader = undefined,
    evicted: bool = false,

    fn init(s: *EvictedDense, seed: u64) !void {
        try s.td.init();
        s.data = try t.randomBytes(seed, n * rs);
        try t.writeDense(&s.td, "d", t.codec_raw, "", 2, rs, s.data, &.{n});
        for (&s.all, 0..) |*v, i| v.* = i;
        s.evicted = try t.evict(&s.td, "d", 2);
        s.r = try t.openOk(&s.td, "d");
    }

    fn gather(s: *const EvictedDense, idx: []const u64, threads: u32) !void {
        try t.expectDenseGather(s.r, s.data, rs, idx, threads);
    }

    fn deinit(s: *EvictedDense) !void {
        root.zr_reader_free(s.r);
        s.td.removeStore("d", 2);
        gpa.free(s.data);
        try s.td.deinitExpectEmpty();
    }
};

test "an evicted store is found cold and read hinted; once read, it is found warm" {
    var s: EvictedDense = .{};
    try s.init(4);
    try testing.expect(s.r.estimate.expectsCold());
    var buf: [200]u64 = undefined;
    const idx = batchOf(&buf, EvictedDense.n, 5);
    try s.gather(idx, 1);
    // Where the eviction took, the sample found the batch cold, and the estimate stays so.
    if (s.evicted) try testing.expect(s.r.estimate.expectsCold());
    // Every record read once is in the page cache now, so the next batch samples warm.
    try s.gather(&s.all, 0);
    try s.gather(idx, 1);
    try testing.expect(!s.r.estimate.expectsCold());
    try s.deinit();
}

test "gathers after a prefetch that hinted read with pread; a prefetch of cached records ends that" {
    var s: EvictedDense = .{};
    try s.init(6);
    var buf: [200]u64 = undefined;
    const idx = batchOf(&buf, EvictedDense.n, 8);
    const credit = &s.r.estimate.prefetched;
    var st: Status = undefined;
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_prefetch(s.r, idx.ptr, idx.len, &st));
    // Where the eviction took, the prefetch found the batch cold and hinted it.
    if (s.evicted) try testing.expectEqual(readahead.prefetched_gathers, credit.load(.monotonic));
    try s.gather(idx, 1);
    if (s.evicted) try testing.expectEqual(readahead.prefetched_gathers - 1, credit.load(.monotonic));
    // Every record is cached now: prefetches find their batch resident, and after
    // readahead.warm_prefetches of them in a row gathers go back to the mappings.
    try s.gather(&s.all, 0);
    for (0..readahead.warm_prefetches) |_| {
        if (s.evicted) try testing.expect(credit.load(.monotonic) > 0);
        try testing.expectEqual(@as(c_int, 0), root.zr_reader_prefetch(s.r, idx.ptr, idx.len, &st));
    }
    try testing.expectEqual(@as(u32, 0), credit.load(.monotonic));
    try s.gather(idx, 1);
    try s.deinit();
}

fn openBypass(td: *const TempDir, name: []const u8) !*Reader {
    var pbuf: [256]u8 = undefined;
    var st: Status = undefined;
    var r: ?*Reader = null;
    const rc = root.zr_reader_open_ex(td.sub(&pbuf, name), abi.open_cache_bypass, &r, &st);
    if (rc != 0) std.debug.print("open_ex failed: {s}\n", .{t.msg(&st)});
    try testing.expectEqual(@as(c_int, 0), rc);
    return r.?;
}

/// Whether any page of shard `k` of `store` is in the page cache.
fn anyResident(td: *const TempDir, store: []const u8, k: usize) !bool {
    var rbuf: [64]u8 = undefined;
    const rel = try std.fmt.bufPrint(&rbuf, "{s}/data-{d:0>3}.zrd", .{ store, k });
    var pbuf: [256]u8 = undefined;
    const fd = try sys.open(td.sub(&pbuf, rel), sys.O_RDONLY, 0);
    defer sys.close(fd);
    const size: usize = @intCast((try sys.fstat(fd)).size);
    const map = try sys.mmapRead(fd, size);
    defer sys.munmap(map);
    const page = std.heap.pageSize();
    var off: usize = 0;
    while (off < size) : (off += page) {
        var vec: [1]u8 = undefined;
        if (sys.resident(map.ptr + off, 1, &vec) orelse false) return true;
    }
    return false;
}

test "cache bypass reads every kind and codec the same and leaves large records out of the page cache" {
    var td: TempDir = .{};
    try td.init();
    var dict_buf: [16 << 10]u8 = undefined;
    const dict = dict_buf[0..try t.trainRowsDict(&dict_buf)];
    const n = 12;
    // Large records at offsets that are not multiples of the O_DIRECT alignment.
    const rs = threshold + 4097;
    for ([_]u8{ t.codec_raw, t.codec_zstd, t.codec_zstd_dict }) |codec| {
        const data = try t.randomBytes(rs + codec, n * rs);
        defer gpa.free(data);
        const d: []const u8 = if (codec == t.codec_zstd_dict) dict else "";
        try t.writeDense(&td, "d", codec, d, 2, rs, data, &.{ 5, 7 });
        const evicted = try t.evict(&td, "d", 2);
        const r = try openBypass(&td, "d");
        try testing.expect(r.bypass);
        const idx = [_]u64{ 11, 0, 5, 5, 6, 1, 10, 3, 2, 9, 8, 7, 4 };
        try t.expectDenseGather(r, data, rs, &idx, 1);
        try t.expectDenseGather(r, data, rs, &idx, 0);
        var st: Status = undefined;
        try testing.expectEqual(@as(c_int, 0), root.zr_reader_verify(r, 0, n, &st));
        try testing.expectEqual(@as(c_int, 0), root.zr_reader_prefetch(r, &idx, idx.len, &st));
        if (evicted) {
            try testing.expect(!try anyResident(&td, "d", 0));
            try testing.expect(!try anyResident(&td, "d", 1));
        }
        root.zr_reader_free(r);
        td.removeStore("d", 2);
    }
    // Ragged: small records through the page cache, large ones around it, in one store.
    const text = try textData(10, 3 * threshold);
    defer gpa.free(text);
    const recs = [_][]const u8{
        text[0..100], "", text[0 .. threshold + 1], text[3..4], text[9 .. 2 * threshold + 9], text[50..3000],
    };
    for ([_]u8{ t.codec_raw, t.codec_zstd }) |codec| {
        try writeRagged(&td, "r", codec, "", 1, &recs);
        _ = try t.evict(&td, "r", 1);
        const r = try openBypass(&td, "r");
        const idx = [_]u64{ 4, 0, 2, 1, 5, 3, 2 };
        try expectRaggedGather(r, &recs, &idx, 1);
        try expectRaggedGather(r, &recs, &idx, 4);
        root.zr_reader_free(r);
        td.removeStore("r", 1);
    }
    try td.deinitExpectEmpty();
}

test "cache bypass: a flipped byte fails its checksum, a truncated shard is ZR_E_CORRUPT" {
    // Windows: no truncate(2); a mapped file cannot shrink there.
    if (comptime @import("builtin").os.tag == .windows) return error.SkipZigTest;
    var td: TempDir = .{};
    try td.init();
    const rs = threshold + 100;
    const n = 6;
    const data = try t.randomBytes(11, n * rs);
    defer gpa.free(data);
    var st: Status = undefined;
    try t.writeDense(&td, "d", t.codec_raw, "", 1, rs, data, &.{n});
    var b: [1]u8 = .{~data[4 * rs + 7]};
    try t.patchFile(&td, "d/data-000.zrd", 4 * rs + 7, &b);
    const r = try openBypass(&td, "d");
    const idx = [_]u64{ 0, 4 };
    const out = try gpa.alloc(u8, idx.len * rs);
    defer gpa.free(out);
    try testing.expectEqual(
        abi.Result.checksum.code(),
        root.zr_reader_gather_dense(r, &idx, idx.len, out.ptr, out.len, 1, &st),
    );
    try testing.expectEqual(@as(i64, 4), st.record);
    try testing.expectEqual(abi.Result.checksum.code(), root.zr_reader_verify(r, 0, n, &st));
    // Cut inside record 2: records 0 and 1 still read, record 2 is reported truncated.
    var pbuf: [256]u8 = undefined;
    try testing.expectEqual(@as(c_int, 0), truncate(td.sub(&pbuf, "d/data-000.zrd"), 2 * rs + 10));
    const two = [_]u64{ 1, 2 };
    try testing.expectEqual(
        abi.Result.corrupt.code(),
        root.zr_reader_gather_dense(r, &two, two.len, out.ptr, out.len, 1, &st),
    );
    try testing.expectEqual(@as(i64, 2), st.record);
    try t.expectContains(t.msg(&st), "truncated");
    try t.expectDenseGather(r, data, rs, &.{ 1, 0 }, 1);
    root.zr_reader_free(r);
    td.removeStore("d", 1);
    try td.deinitExpectEmpty();
}

test "open_ex refuses unknown flags" {
    var td: TempDir = .{};
    try td.init();
    const data = [_]u8{ 1, 2 };
    try t.writeDense(&td, "d", t.codec_raw, "", 1, 2, &data, &.{1});
    var pbuf: [256]u8 = undefined;
    var st: Status = undefined;
    var r: ?*Reader = null;
    const rc = root.zr_reader_open_ex(td.sub(&pbuf, "d"), 16, &r, &st);
    try testing.expectEqual(abi.Result.invalid_argument.code(), rc);
    try t.expectContains(t.msg(&st), "unknown open flags 0x10");
    try testing.expect(r == null);
    td.removeStore("d", 1);
    try td.deinitExpectEmpty();
}
