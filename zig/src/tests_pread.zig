//! End-to-end tests of the pread path of the reader (large records, and every record of a
//! store whose records are large on average), through the C ABI: round trips around
//! `pread_record_bytes_min` for every codec and both kinds, corruption, and a shard truncated
//! after open.
//!
//! Invariants:
//! - As in tests.zig, each test works in its own fresh directory under /tmp and removes it;
//!   a test that leaves anything behind fails.
//! - Record bytes are random, so that compressed records stay about as large as raw ones and
//!   land on the side of the threshold the test means.

const std = @import("std");
const root = @import("root.zig");
const abi = @import("abi.zig");
const t = @import("testing.zig");
const reader_mod = @import("reader.zig");
const gather_mod = @import("gather.zig");
const sys = @import("sys.zig");

const testing = std.testing;
const gpa = testing.allocator;
const Status = abi.Status;
const Reader = reader_mod.Reader;
const TempDir = t.TempDir;

const threshold: usize = @intCast(gather_mod.pread_record_bytes_min);

extern "c" fn truncate(path: [*:0]const u8, length: i64) c_int;

test "pread path: raw, zstd and zstd_dict Dense round trips around the threshold" {
    var td: TempDir = .{};
    try td.init();
    var dict_buf: [16 << 10]u8 = undefined;
    const dict = dict_buf[0..try t.trainRowsDict(&dict_buf)];
    const n = 9;
    for ([_]u8{ t.codec_raw, t.codec_zstd, t.codec_zstd_dict }) |codec| {
        for ([_]usize{ threshold - 1, threshold, threshold + 1, 3 * threshold }) |rs| {
            const data = try t.randomBytes(rs, n * rs);
            defer gpa.free(data);
            const d: []const u8 = if (codec == t.codec_zstd_dict) dict else "";
            try t.writeDense(&td, "d", codec, d, 2, rs, data, &.{ 4, 5 });
            const r = try t.openOk(&td, "d");
            // Raw records are exactly rs bytes; random bytes compress to a little more.
            if (codec == t.codec_raw) try testing.expectEqual(rs >= threshold, r.pread_every_record);
            if (codec != t.codec_raw) try testing.expect(r.pread_every_record);
            const idx = [_]u64{ 8, 0, 3, 3, 7, 1, 4 };
            // First with the checksums checked, then from the verified bitmap.
            try t.expectDenseGather(r, data, rs, &idx, 1);
            try t.expectDenseGather(r, data, rs, &idx, 1);
            // A batch large enough for several workers, each with its own scratch buffer.
            var big: [96]u64 = undefined;
            for (&big, 0..) |*v, j| v.* = (j * 5) % n;
            try t.expectDenseGather(r, data, rs, &big, 2);
            var st: Status = undefined;
            try testing.expectEqual(@as(c_int, 0), root.zr_reader_verify(r, 0, n, &st));
            root.zr_reader_free(r);
            td.removeStore("d", 2);
        }
    }
    try td.deinitExpectEmpty();
}

test "pread path: Ragged round trips with small and large records, mixed and mostly large" {
    var td: TempDir = .{};
    try td.init();
    var dict_buf: [16 << 10]u8 = undefined;
    const dict = dict_buf[0..try t.trainRowsDict(&dict_buf)];
    const big = try t.randomBytes(1, 1 << 20);
    defer gpa.free(big);
    var small: [100]u8 = undefined;
    var prng = std.Random.DefaultPrng.init(2);
    t.fillWords(prng.random(), &small);

    // Mostly small: only the records of at least the threshold are read with pread.
    var mixed: [48][]const u8 = undefined;
    for (&mixed, 0..) |*rec, i| rec.* = small[0 .. i % small.len];
    mixed[5] = big[0 .. threshold - 1];
    mixed[17] = big[1..][0..threshold];
    mixed[30] = big[2..][0 .. threshold + 1];
    mixed[41] = big[3..][0 .. 200 << 10];
    const mixed_idx = [_]u64{ 41, 0, 5, 17, 30, 2, 17, 47, 41, 1 };
    // Mostly large: every record, the small ones too, is read with pread.
    const large = [_][]const u8{
        "", small[0..10], big[0 .. threshold - 1], big[7..][0..threshold], big[9..], small[0..1],
    };
    const large_idx = [_]u64{ 4, 1, 0, 3, 2, 5, 4, 1 };

    for ([_]u8{ t.codec_raw, t.codec_zstd, t.codec_zstd_dict }) |codec| {
        const d: []const u8 = if (codec == t.codec_zstd_dict) dict else "";
        for ([_]u8{ 1, 3 }) |shards| {
            for ([_]bool{ false, true }) |mostly_large| {
                const recs: []const []const u8 = if (mostly_large) &large else &mixed;
                const idx: []const u64 = if (mostly_large) &large_idx else &mixed_idx;
                _ = try t.raggedRoundTrip(&td, codec, d, shards, recs, idx, 2);
                const r = try t.openOk(&td, "r");
                try testing.expectEqual(mostly_large, r.pread_every_record);
                root.zr_reader_free(r);
                td.removeStore("r", shards);
            }
        }
    }
    try td.deinitExpectEmpty();
}

/// Writes 10 Dense records of `rs` random bytes over 2 shards (records 5..9 in data-001.zrd).
fn writeLargeDense(td: *const TempDir, codec: u8, rs: usize) ![]u8 {
    const data = try t.randomBytes(rs + codec, 10 * rs);
    errdefer gpa.free(data);
    try t.writeDense(td, "s", codec, "", 2, rs, data, &.{10});
    return data;
}

test "pread path: a flipped byte fails the checksum, naming store, file and record" {
    var td: TempDir = .{};
    try td.init();
    var pbuf: [256]u8 = undefined;
    const path = td.sub(&pbuf, "s");
    for ([_]u8{ t.codec_raw, t.codec_zstd }) |codec| {
        const rs = 2 * threshold;
        const data = try writeLargeDense(&td, codec, rs);
        defer gpa.free(data);
        const r0 = try t.openOk(&td, "s");
        const e = try t.entryOf(&td, "s", 6, r0.entry_size);
        root.zr_reader_free(r0);
        try testing.expectEqual(@as(u8, 1), e.shard);
        try t.flipByte(&td, "s/data-001.zrd", e.offset + e.stored_size / 2);
        const r = try t.openOk(&td, "s");
        try testing.expect(r.pread_every_record);
        const out = try gpa.alloc(u8, 2 * rs);
        defer gpa.free(out);
        var st: Status = undefined;
        const ok = [_]u64{ 0, 5 };
        try testing.expectEqual(@as(c_int, 0), root.zr_reader_gather_dense(r, &ok, 2, out.ptr, out.len, 0, &st));
        const idx = [_]u64{ 0, 6 };
        // Twice: a failed record is not remembered as verified.
        for (0..2) |_| {
            try testing.expectEqual(
                @as(c_int, t.ZR_E_CHECKSUM),
                root.zr_reader_gather_dense(r, &idx, 2, out.ptr, out.len, 0, &st),
            );
            try testing.expectEqual(@as(i64, 6), st.record);
            try testing.expectEqual(@as(i32, 1), st.shard);
            try t.expectContains(t.msg(&st), "record 6");
            try t.expectContains(t.msg(&st), "data-001.zrd");
            try t.expectContains(t.msg(&st), path);
        }
        try testing.expectEqual(@as(c_int, t.ZR_E_CHECKSUM), root.zr_reader_verify(r, 0, 10, &st));
        try testing.expectEqual(@as(i64, 6), st.record);
        root.zr_reader_free(r);
        td.removeStore("s", 2);
    }

    // A large raw Ragged record among small ones, read with pread into the caller's output.
    const big = try t.randomBytes(3, 2 * threshold);
    defer gpa.free(big);
    var recs: [40][]const u8 = undefined;
    for (&recs) |*rec| rec.* = big[0..50];
    recs[3] = big;
    _ = try t.raggedRoundTrip(&td, t.codec_raw, "", 1, &recs, &.{ 3, 0 }, 1);
    const r0 = try t.openOk(&td, "r");
    try testing.expect(!r0.pread_every_record);
    const e = try t.entryOf(&td, "r", 3, r0.entry_size);
    root.zr_reader_free(r0);
    try t.flipByte(&td, "r/data-000.zrd", e.offset + 100);
    const r = try t.openOk(&td, "r");
    const out = try gpa.alloc(u8, big.len + 50);
    defer gpa.free(out);
    var st: Status = undefined;
    const idx = [_]u64{ 0, 3 };
    const offsets = [_]u64{ 0, 50 };
    try testing.expectEqual(
        @as(c_int, t.ZR_E_CHECKSUM),
        root.zr_reader_gather_ragged(r, &idx, 2, out.ptr, &offsets, null, out.len, 1, &st),
    );
    try testing.expectEqual(@as(i64, 3), st.record);
    try t.expectContains(t.msg(&st), "record 3");
    try t.expectContains(t.msg(&st), "data-000.zrd");
    root.zr_reader_free(r);
    td.removeStore("r", 1);
    try td.deinitExpectEmpty();
}

test "pread path: a shard truncated after open is ZR_E_CORRUPT naming file and record, not SIGBUS" {
    // Windows: no truncate(2); a mapped file cannot shrink there.
    if (comptime @import("builtin").os.tag == .windows) return error.SkipZigTest;
    var td: TempDir = .{};
    try td.init();
    var pbuf: [256]u8 = undefined;
    var fbuf: [256]u8 = undefined;
    for ([_]u8{ t.codec_raw, t.codec_zstd }) |codec| {
        const rs = 2 * threshold;
        const data = try writeLargeDense(&td, codec, rs);
        defer gpa.free(data);
        const r = try t.openOk(&td, "s");
        const e = try t.entryOf(&td, "s", 9, r.entry_size);
        // Record 9 is the last one of data-001.zrd: cut the file in the middle of it.
        try testing.expectEqual(
            @as(c_int, 0),
            truncate(td.sub(&fbuf, "s/data-001.zrd"), @intCast(e.offset + e.stored_size / 2)),
        );
        const out = try gpa.alloc(u8, 2 * rs);
        defer gpa.free(out);
        var st: Status = undefined;
        const ok = [_]u64{ 0, 5 };
        try testing.expectEqual(@as(c_int, 0), root.zr_reader_gather_dense(r, &ok, 2, out.ptr, out.len, 0, &st));
        try testing.expectEqualSlices(u8, data[5 * rs ..][0..rs], out[rs..]);
        const idx = [_]u64{ 0, 9 };
        try testing.expectEqual(
            @as(c_int, t.ZR_E_CORRUPT),
            root.zr_reader_gather_dense(r, &idx, 2, out.ptr, out.len, 0, &st),
        );
        try testing.expectEqual(@as(i64, 9), st.record);
        try testing.expectEqual(@as(i32, 1), st.shard);
        try t.expectContains(t.msg(&st), "record 9");
        try t.expectContains(t.msg(&st), "data-001.zrd");
        try t.expectContains(t.msg(&st), "truncated");
        try t.expectContains(t.msg(&st), td.sub(&pbuf, "s"));
        try testing.expectEqual(@as(c_int, t.ZR_E_CORRUPT), root.zr_reader_verify(r, 0, 10, &st));
        try testing.expectEqual(@as(i64, 9), st.record);
        root.zr_reader_free(r);
        td.removeStore("s", 2);
    }

    // Ragged raw, a large record among small ones (the small ones stay on the mapping and
    // lie before the cut).
    const big = try t.randomBytes(4, 2 * threshold);
    defer gpa.free(big);
    var recs: [40][]const u8 = undefined;
    for (&recs) |*rec| rec.* = big[0..50];
    recs[39] = big;
    _ = try t.raggedRoundTrip(&td, t.codec_raw, "", 1, &recs, &.{ 39, 0 }, 1);
    const r = try t.openOk(&td, "r");
    try testing.expect(!r.pread_every_record);
    const e = try t.entryOf(&td, "r", 39, r.entry_size);
    try testing.expectEqual(@as(c_int, 0), truncate(td.sub(&fbuf, "r/data-000.zrd"), @intCast(e.offset + 1)));
    const out = try gpa.alloc(u8, big.len + 50);
    defer gpa.free(out);
    var st: Status = undefined;
    const idx = [_]u64{ 0, 39 };
    const offsets = [_]u64{ 0, 50 };
    try testing.expectEqual(
        @as(c_int, t.ZR_E_CORRUPT),
        root.zr_reader_gather_ragged(r, &idx, 2, out.ptr, &offsets, null, out.len, 1, &st),
    );
    try testing.expectEqual(@as(i64, 39), st.record);
    try t.expectContains(t.msg(&st), "data-000.zrd");
    try t.expectContains(t.msg(&st), "truncated");
    root.zr_reader_free(r);
    td.removeStore("r", 1);
    try td.deinitExpectEmpty();
}

fn openFlags(td: *const TempDir, name: []const u8, flags: u32) !*Reader {
    var pbuf: [256]u8 = undefined;
    var st: Status = undefined;
    var r: ?*Reader = null;
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_open_ex(td.sub(&pbuf, name), flags, &r, &st));
    return r.?;
}

// Without the flag, the first check stands.
test "ZR_OPEN_CHECK_EVERY_READ: a record changed after it was read fails its checksum on the next read" {
    var td: TempDir = .{};
    try td.init();
    const rs = 64;
    for ([_]u8{ t.codec_raw, t.codec_zstd }) |codec| {
        const data = try t.randomBytes(7 + codec, 32 * rs);
        defer gpa.free(data);
        try t.writeDense(&td, "s", codec, "", 1, rs, data, &.{32});
        const plain = try t.openOk(&td, "s");
        const checked = try openFlags(&td, "s", abi.open_check_every_read);
        // Small records, read with pread all the same: never copied through a mapping.
        try testing.expect(!plain.pread_every_record);
        try testing.expect(checked.pread_every_record);
        const e = try t.entryOf(&td, "s", 3, plain.entry_size);
        var out: [2 * rs]u8 = undefined;
        var st: Status = undefined;
        const idx = [_]u64{ 1, 3 };
        for ([_]*Reader{ plain, checked }) |r| {
            try testing.expectEqual(@as(c_int, 0), root.zr_reader_gather_dense(r, &idx, 2, &out, out.len, 1, &st));
            try testing.expectEqualSlices(u8, data[3 * rs ..][0..rs], out[rs..]);
        }
        try t.flipByte(&td, "s/data-000.zrd", e.offset + e.stored_size / 2);
        // The plain reader remembers record 3 as checked (what a published store promises:
        // its files never change); the checking one reads it again and refuses it, every time.
        if (codec == t.codec_raw) try testing.expectEqual(
            @as(c_int, 0),
            root.zr_reader_gather_dense(plain, &idx, 2, &out, out.len, 1, &st),
        );
        for (0..2) |_| {
            try testing.expectEqual(
                @as(c_int, t.ZR_E_CHECKSUM),
                root.zr_reader_gather_dense(checked, &idx, 2, &out, out.len, 1, &st),
            );
            try testing.expectEqual(@as(i64, 3), st.record);
        }
        // Once the bytes are right again (a cache that fetched the record anew), it reads.
        try t.flipByte(&td, "s/data-000.zrd", e.offset + e.stored_size / 2);
        try testing.expectEqual(@as(c_int, 0), root.zr_reader_gather_dense(checked, &idx, 2, &out, out.len, 1, &st));
        try testing.expectEqualSlices(u8, data[3 * rs ..][0..rs], out[rs..]);
        root.zr_reader_free(plain);
        root.zr_reader_free(checked);
        td.removeStore("s", 1);
    }
    // Ragged, raw: the same through the caller's output.
    const bytes = try t.randomBytes(11, 40 * 50);
    defer gpa.free(bytes);
    var recs: [40][]const u8 = undefined;
    for (&recs, 0..) |*rec, i| rec.* = bytes[i * 50 ..][0..50];
    _ = try t.raggedRoundTrip(&td, t.codec_raw, "", 1, &recs, &.{ 39, 0 }, 1);
    const r = try openFlags(&td, "r", abi.open_check_every_read);
    const e = try t.entryOf(&td, "r", 5, r.entry_size);
    var out: [100]u8 = undefined;
    var st: Status = undefined;
    const idx = [_]u64{ 4, 5 };
    const offsets = [_]u64{ 0, 50 };
    const rc = root.zr_reader_gather_ragged(r, &idx, 2, &out, &offsets, null, out.len, 1, &st);
    try testing.expectEqual(@as(c_int, 0), rc);
    try t.flipByte(&td, "r/data-000.zrd", e.offset + 10);
    try testing.expectEqual(
        @as(c_int, t.ZR_E_CHECKSUM),
        root.zr_reader_gather_ragged(r, &idx, 2, &out, &offsets, null, out.len, 1, &st),
    );
    try testing.expectEqual(@as(i64, 5), st.record);
    root.zr_reader_free(r);
    td.removeStore("r", 1);
    try td.deinitExpectEmpty();
}
