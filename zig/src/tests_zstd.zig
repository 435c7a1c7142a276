//! End-to-end tests of the compressed codecs `zstd` and `zstd_dict` (spec §6) and of
//! zr_train_dict, through the C ABI.
//!
//! Invariants:
//! - As in tests.zig, each test works in its own fresh directory under /tmp and removes it;
//!   a test that leaves anything behind fails.
//! - Corruption tests that must get past the checksums recompute them (record, index, header,
//!   dictionary) exactly as a forger would, so that the decoder itself is what is tested.

const std = @import("std");
const root = @import("root.zig");
const abi = @import("abi.zig");
const sys = @import("sys.zig");
const format = @import("format.zig");
const t = @import("testing.zig");
const writer_mod = @import("writer.zig");
const reader_mod = @import("reader.zig");
const gather_mod = @import("gather.zig");

const testing = std.testing;
const gpa = testing.allocator;
const Status = abi.Status;
const Writer = writer_mod.Writer;
const Reader = reader_mod.Reader;
const TempDir = t.TempDir;

/// Recomputes record `rec`'s checksum from its stored bytes, then the index checksum and the
/// header checksum, so that a corrupted frame passes every checksum.
fn resealRecord(td: *const TempDir, store: []const u8, rec: u64) !void {
    var b1: [128]u8 = undefined;
    const header = try t.readAlloc(td, t.storeFile(&b1, store, "header.zrh"));
    defer gpa.free(header);
    const index = try t.readAlloc(td, t.storeFile(&b1, store, "index.zri"));
    defer gpa.free(index);
    const es: usize = std.mem.readInt(u32, header[48..52], .little);
    const e = format.decodeEntry(index[@intCast(rec * es)..][0..es]);
    var nb: [32]u8 = undefined;
    const shard_name = try std.fmt.bufPrint(&nb, "data-{d:0>3}.zrd", .{e.shard});
    const shard = try t.readAlloc(td, t.storeFile(&b1, store, shard_name));
    defer gpa.free(shard);
    const sum = format.xxh64(shard[@intCast(e.offset)..][0..e.stored_size]);
    std.mem.writeInt(u64, index[@intCast(rec * es + 16)..][0..8], sum, .little);
    try t.patchFile(td, t.storeFile(&b1, store, "index.zri"), 0, index);
    std.mem.writeInt(u64, header[64..72], format.xxh64(index), .little);
    t.sealHeader(header);
    try t.patchFile(td, t.storeFile(&b1, store, "header.zrh"), 0, header);
}

test "zstd and zstd_dict Dense round trips over one and several shards" {
    var td: TempDir = .{};
    try td.init();
    var dict_buf: [16 << 10]u8 = undefined;
    const dict = dict_buf[0..try t.trainRowsDict(&dict_buf)];
    var prng = std.Random.DefaultPrng.init(7);
    const rs = 96;
    const n = 50;
    var data: [rs * n]u8 = undefined;
    t.fillWords(prng.random(), &data);

    for ([_]u8{ t.codec_zstd, t.codec_zstd_dict }) |codec| {
        for ([_]u8{ 1, 4 }) |shards| {
            const d: []const u8 = if (codec == t.codec_zstd_dict) dict else "";
            // Calls of 10, 1, 0 and 39 records: runs of 0 records happen on several shards.
            try t.writeDense(&td, "d", codec, d, shards, rs, &data, &.{ 10, 1, 0, 39 });
            const r = try t.openOk(&td, "d");
            var info: abi.Info = undefined;
            root.zr_reader_info(r, &info);
            try testing.expectEqual(codec, info.schema.codec);
            try testing.expectEqual(@as(u64, n), info.record_count);
            try testing.expectEqual(@as(u64, rs * n), info.logical_bytes);
            try testing.expect(info.stored_bytes > 0 and info.stored_bytes < info.logical_bytes);
            // The dictionary comes back byte for byte ([ZR-COD-002]).
            try testing.expectEqual(@as(u64, d.len), root.zr_reader_dict(r, null, 0));
            try testing.expectEqual(@as(u32, @intCast(d.len)), info.dict_size);
            if (d.len > 0) {
                var back: [16 << 10]u8 = undefined;
                try testing.expectEqual(@as(u64, d.len), root.zr_reader_dict(r, &back, back.len));
                try testing.expectEqualSlices(u8, d, back[0..d.len]);
            }
            const idx = [_]u64{ 49, 0, 5, 5, 17, 10, 11, 48 };
            // Twice: first with the checksums checked, then from the verified bitmap.
            try t.expectDenseGather(r, &data, rs, &idx, 0);
            try t.expectDenseGather(r, &data, rs, &idx, 0);
            var st: Status = undefined;
            try testing.expectEqual(@as(c_int, 0), root.zr_reader_verify(r, 0, n, &st));
            root.zr_reader_free(r);
            td.removeStore("d", shards);
        }
    }

    // Zero-size Dense records still store one (tiny) frame each.
    var pbuf: [256]u8 = undefined;
    var st: Status = undefined;
    const schema0 = t.schemaWith(1, 12, &.{ 0, 3 }, 2, t.codec_zstd);
    var w: ?*Writer = null;
    try testing.expectEqual(@as(c_int, 0), root.zr_writer_open(td.sub(&pbuf, "z"), &schema0, null, 0, 1, &w, &st));
    try testing.expectEqual(@as(c_int, 0), root.zr_writer_append_dense(w, null, 0, 5, &st));
    try testing.expectEqual(@as(c_int, 0), root.zr_writer_publish(w, &st));
    root.zr_writer_free(w);
    const r = try t.openOk(&td, "z");
    var info: abi.Info = undefined;
    root.zr_reader_info(r, &info);
    try testing.expectEqual(@as(u64, 0), info.logical_bytes);
    try testing.expect(info.stored_bytes >= 5 * 9);
    const idx0 = [_]u64{ 4, 0, 2 };
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_gather_dense(r, &idx0, 3, null, 0, 0, &st));
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_verify(r, 0, 5, &st));
    root.zr_reader_free(r);
    td.removeStore("z", 2);
    try td.deinitExpectEmpty();
}

test "Ragged round trips with records of 0 bytes, 1 byte and 1 MiB" {
    var td: TempDir = .{};
    try td.init();
    var dict_buf: [16 << 10]u8 = undefined;
    const dict = dict_buf[0..try t.trainRowsDict(&dict_buf)];
    var prng = std.Random.DefaultPrng.init(8);
    const random = prng.random();
    const big_text = try gpa.alloc(u8, 1 << 20);
    defer gpa.free(big_text);
    t.fillWords(random, big_text);
    const big_random = try gpa.alloc(u8, 1 << 20);
    defer gpa.free(big_random);
    random.bytes(big_random);
    var small: [5000]u8 = undefined;
    t.fillWords(random, &small);
    const one = [_]u8{0x5A};
    const recs = [_][]const u8{ "", &one, big_text, big_random, small[0..100], "", small[0..1], &small, big_text[3..] };
    const idx = [_]u64{ 8, 1, 0, 3, 5, 2, 4, 6, 7, 0, 2 };
    for ([_]u8{ t.codec_zstd, t.codec_zstd_dict }) |codec| {
        const d: []const u8 = if (codec == t.codec_zstd_dict) dict else "";
        for ([_]u8{ 1, 3 }) |shards| {
            _ = try t.raggedRoundTrip(&td, codec, d, shards, &recs, &idx, 0);
            td.removeStore("r", shards);
        }
    }
    try td.deinitExpectEmpty();
}

test "large compressed batches take the threaded write, gather and verify paths" {
    var td: TempDir = .{};
    try td.init();
    var prng = std.Random.DefaultPrng.init(9);
    const random = prng.random();
    const rs = 4096;
    const n = 700; // 2.8 MiB: above the compressed write and read thresholds
    comptime std.debug.assert(rs * n > writer_mod.parallel_compress_bytes_min);
    comptime std.debug.assert(rs * n > 2 * gather_mod.gather_compressed_parallel_bytes_min);
    const data = try gpa.alloc(u8, rs * n);
    defer gpa.free(data);
    t.fillWords(random, data);
    try t.writeDense(&td, "big", t.codec_zstd, "", 4, rs, data, &.{n});
    const r = try t.openOk(&td, "big");
    const idx = try gpa.alloc(u64, n);
    defer gpa.free(idx);
    for (idx, 0..) |*v, i| v.* = (i * 7919) % n;
    for ([_]u32{ 0, 3, 1 }) |threads| try t.expectDenseGather(r, data, rs, idx, threads);
    var st: Status = undefined;
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_verify(r, 0, n, &st));

    // Many calls at once use more decompression contexts than the pool has, so some run on
    // temporary ones.
    const Worker = struct {
        fn main(rd: *Reader, want: []const u8, ids: []const u64, result: *c_int) void {
            const out = gpa.alloc(u8, ids.len * rs) catch {
                result.* = -100;
                return;
            };
            defer gpa.free(out);
            var s: Status = undefined;
            for (0..3) |_| {
                const rc = root.zr_reader_gather_dense(rd, ids.ptr, ids.len, out.ptr, out.len, 3, &s);
                if (rc != 0) {
                    result.* = rc;
                    return;
                }
                for (ids, 0..) |rec, j| {
                    if (!std.mem.eql(u8, want[@intCast(rec * rs)..][0..rs], out[j * rs ..][0..rs])) {
                        result.* = -101;
                        return;
                    }
                }
            }
        }
    };
    var results: [gather_mod.decoder_slots_count + 4]c_int = @splat(0);
    var threads: [results.len]std.Thread = undefined;
    for (&threads, &results) |*th, *res| th.* = try std.Thread.spawn(.{}, Worker.main, .{ r, data, idx, res });
    for (threads) |th| th.join();
    for (results) |res| try testing.expectEqual(@as(c_int, 0), res);
    root.zr_reader_free(r);
    td.removeStore("big", 4);

    // Ragged with a dictionary, also above both thresholds.
    var dict_buf: [16 << 10]u8 = undefined;
    const dict = dict_buf[0..try t.trainRowsDict(&dict_buf)];
    const recs = try gpa.alloc([]const u8, 400);
    defer gpa.free(recs);
    var off: usize = 0;
    for (recs) |*rec| {
        const len = random.uintLessThan(usize, 8192);
        if (off + len > data.len) off = 0;
        rec.* = data[off..][0..len];
        off += len;
    }
    const ridx = try gpa.alloc(u64, recs.len);
    defer gpa.free(ridx);
    for (ridx, 0..) |*v, i| v.* = (i * 37) % recs.len;
    _ = try t.raggedRoundTrip(&td, t.codec_zstd_dict, dict, 5, recs, ridx, 0);
    td.removeStore("r", 5);
    try td.deinitExpectEmpty();
}

test "a flipped byte in a compressed record fails its checksum, naming it" {
    var td: TempDir = .{};
    try td.init();
    var prng = std.Random.DefaultPrng.init(10);
    const rs = 200;
    var data: [rs * 10]u8 = undefined;
    t.fillWords(prng.random(), &data);
    try t.writeDense(&td, "s", t.codec_zstd, "", 2, rs, &data, &.{10});
    // Shard 1 holds records 5..9.
    const e = try t.entryOf(&td, "s", 6, 24);
    try testing.expectEqual(@as(u8, 1), e.shard);
    try t.patchFile(&td, "s/data-001.zrd", e.offset + e.stored_size / 2, &.{0xff});
    var pbuf: [256]u8 = undefined;
    const path = td.sub(&pbuf, "s");
    const r = try t.openOk(&td, "s");
    var st: Status = undefined;
    var out: [2 * rs]u8 = undefined;
    const ok = [_]u64{ 0, 5 };
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_gather_dense(r, &ok, 2, &out, out.len, 0, &st));
    const idx = [_]u64{ 0, 6 };
    try testing.expectEqual(
        @as(c_int, t.ZR_E_CHECKSUM),
        root.zr_reader_gather_dense(r, &idx, 2, &out, out.len, 0, &st),
    );
    try testing.expectEqual(@as(i64, 6), st.record);
    try testing.expectEqual(@as(i32, 1), st.shard);
    try t.expectContains(t.msg(&st), "record 6");
    try t.expectContains(t.msg(&st), "data-001.zrd");
    try t.expectContains(t.msg(&st), path);
    try testing.expectEqual(@as(c_int, t.ZR_E_CHECKSUM), root.zr_reader_verify(r, 0, 10, &st));
    try testing.expectEqual(@as(i64, 6), st.record);
    root.zr_reader_free(r);
    td.removeStore("s", 2);
    try td.deinitExpectEmpty();
}

test "a corrupt frame with a recomputed checksum is ZR_E_DECODE, never a panic" {
    var td: TempDir = .{};
    try td.init();
    var prng = std.Random.DefaultPrng.init(11);
    const random = prng.random();
    const rs = 200;
    const n = 10;
    var data: [rs * n]u8 = undefined;
    t.fillWords(random, &data);
    try t.writeDense(&td, "f", t.codec_zstd, "", 2, rs, &data, &.{n});
    var pbuf: [256]u8 = undefined;
    const path = td.sub(&pbuf, "f");
    const e = try t.entryOf(&td, "f", 7, 24);
    try testing.expectEqual(@as(u8, 1), e.shard);
    const shard = try t.readAlloc(&td, "f/data-001.zrd");
    defer gpa.free(shard);
    const frame = shard[@intCast(e.offset)..][0..e.stored_size];
    const all = [_]u64{ 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 };
    var out: [rs * n]u8 = undefined;
    var st: Status = undefined;

    // A broken magic: not a zstd frame at all.
    try t.patchFile(&td, "f/data-001.zrd", e.offset, &.{frame[0] ^ 0x01});
    try resealRecord(&td, "f", 7);
    var r = try t.openOk(&td, "f");
    try testing.expectEqual(@as(c_int, t.ZR_E_DECODE), root.zr_reader_gather_dense(r, &all, n, &out, out.len, 0, &st));
    try testing.expectEqual(@as(i64, 7), st.record);
    try testing.expectEqual(@as(i32, 1), st.shard);
    try t.expectContains(t.msg(&st), "record 7");
    try t.expectContains(t.msg(&st), "data-001.zrd");
    try t.expectContains(t.msg(&st), path);
    try testing.expectEqual(@as(c_int, t.ZR_E_DECODE), root.zr_reader_verify(r, 0, n, &st));
    try testing.expectEqual(@as(i64, 7), st.record);
    root.zr_reader_free(r);
    try t.patchFile(&td, "f/data-001.zrd", e.offset, frame[0..1]);

    // A content size one short of the record: the frame header of a 200-byte record is the
    // single-segment kind with a 1-byte content size right after the descriptor.
    const fhd = frame[4];
    try testing.expect(fhd & 0x20 != 0 and fhd >> 6 == 0);
    try testing.expectEqual(@as(u8, rs), frame[5]);
    try t.patchFile(&td, "f/data-001.zrd", e.offset + 5, &.{rs - 1});
    try resealRecord(&td, "f", 7);
    r = try t.openOk(&td, "f");
    try testing.expectEqual(@as(c_int, t.ZR_E_DECODE), root.zr_reader_gather_dense(r, &all, n, &out, out.len, 0, &st));
    try testing.expectEqual(@as(i64, 7), st.record);
    try t.expectContains(t.msg(&st), "logical size");
    root.zr_reader_free(r);

    // Random damage anywhere in the frame decodes, or fails with ZR_E_DECODE; nothing else.
    const mutant = try gpa.alloc(u8, frame.len);
    defer gpa.free(mutant);
    var decode_errors: usize = 0;
    for (0..300) |_| {
        @memcpy(mutant, frame);
        for (0..1 + random.uintLessThan(usize, 3)) |_| mutant[random.uintLessThan(usize, mutant.len)] = random.int(u8);
        try t.patchFile(&td, "f/data-001.zrd", e.offset, mutant);
        try resealRecord(&td, "f", 7);
        r = try t.openOk(&td, "f");
        const rc = root.zr_reader_gather_dense(r, &all, n, &out, out.len, 0, &st);
        try testing.expect(rc == 0 or rc == t.ZR_E_DECODE);
        if (rc != 0) decode_errors += 1;
        try testing.expectEqual(rc, root.zr_reader_verify(r, 0, n, &st));
        root.zr_reader_free(r);
    }
    try testing.expect(decode_errors > 0);
    td.removeStore("f", 2);
    try td.deinitExpectEmpty();
}

test "a corrupt dictionary fails at open or at decode, never a panic" {
    var td: TempDir = .{};
    try td.init();
    var dict_buf: [16 << 10]u8 = undefined;
    const dict = dict_buf[0..try t.trainRowsDict(&dict_buf)];
    var prng = std.Random.DefaultPrng.init(12);
    const random = prng.random();
    var sizes: [40]u64 = undefined;
    const rows = try t.makeRows(random, &sizes);
    defer gpa.free(rows);
    {
        var pbuf: [256]u8 = undefined;
        var st: Status = undefined;
        const schema = t.schemaWith(2, t.dtype_uint8, &.{0}, 2, t.codec_zstd_dict);
        var w: ?*Writer = null;
        try testing.expectEqual(
            @as(c_int, 0),
            root.zr_writer_open(td.sub(&pbuf, "c"), &schema, dict.ptr, dict.len, 1, &w, &st),
        );
        defer root.zr_writer_free(w);
        var ptrs: [sizes.len]u64 = undefined;
        var off: usize = 0;
        for (&ptrs, sizes) |*p, size| {
            p.* = @intFromPtr(rows[off..].ptr);
            off += @intCast(size);
        }
        try testing.expectEqual(@as(c_int, 0), root.zr_writer_append_ragged(w, &ptrs, &sizes, sizes.len, &st));
        try testing.expectEqual(@as(c_int, 0), root.zr_writer_publish(w, &st));
    }
    const original = try t.readAlloc(&td, "c/header.zrh");
    defer gpa.free(original);
    const header = try gpa.alloc(u8, original.len);
    defer gpa.free(header);
    const dict_offset = 128 + 8 * 2; // Ragged: no item_shape, two shard sizes
    try testing.expectEqualSlices(u8, dict, original[dict_offset..][0..dict.len]);
    const all = [_]u64{
        0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17, 18, 19,
        20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39,
    };
    var offsets: [all.len]u64 = undefined;
    var total: u64 = 0;
    for (&offsets, sizes) |*o, size| {
        o.* = total;
        total += size;
    }
    const out = try gpa.alloc(u8, @intCast(total));
    defer gpa.free(out);
    var pbuf: [256]u8 = undefined;
    const path = td.sub(&pbuf, "c");
    var st: Status = undefined;

    // Without a recomputed dict_checksum, any change is a checksum error at open.
    @memcpy(header, original);
    header[dict_offset + 100] ^= 0x40;
    t.sealHeader(header);
    try t.patchFile(&td, "c/header.zrh", 0, header);
    var r: ?*Reader = null;
    try testing.expectEqual(@as(c_int, t.ZR_E_CHECKSUM), root.zr_reader_open(path, &r, &st));
    try t.expectContains(t.msg(&st), "dict_checksum");

    // With every checksum recomputed: a changed magic or ID, or garbage tables, is an error at
    // open or decode; a change anywhere else is at most wrong data, never a crash.
    const Damage = struct { pos: usize, len: usize, must_fail: bool };
    var cases: std.ArrayList(Damage) = .empty;
    defer cases.deinit(gpa);
    for (0..8) |pos| try cases.append(gpa, .{ .pos = pos, .len = 1, .must_fail = true });
    try cases.append(gpa, .{ .pos = 8, .len = 200, .must_fail = true });
    for (0..60) |_| try cases.append(gpa, .{
        .pos = random.uintLessThan(usize, dict.len),
        .len = 1,
        .must_fail = false,
    });
    for (cases.items) |c| {
        @memcpy(header, original);
        const end = @min(dict.len, c.pos + c.len);
        if (c.len == 1)
            header[dict_offset + c.pos] ^= 0xA5
        else
            random.bytes(header[dict_offset + c.pos .. dict_offset + end]);
        std.mem.writeInt(u64, header[72..80], format.xxh64(header[dict_offset..][0..dict.len]), .little);
        t.sealHeader(header);
        try t.patchFile(&td, "c/header.zrh", 0, header);
        r = null;
        const rc = root.zr_reader_open(path, &r, &st);
        if (rc != 0) {
            try testing.expectEqual(@as(c_int, t.ZR_E_CORRUPT), rc);
            try t.expectContains(t.msg(&st), "dictionary");
            try testing.expect(r == null);
            continue;
        }
        const g = root.zr_reader_gather_ragged(r, &all, all.len, out.ptr, &offsets, null, total, 0, &st);
        try testing.expect(g == 0 or g == t.ZR_E_DECODE);
        if (c.must_fail) try testing.expectEqual(@as(c_int, t.ZR_E_DECODE), g);
        const v = root.zr_reader_verify(r, 0, all.len, &st);
        try testing.expect(v == 0 or v == t.ZR_E_DECODE);
        root.zr_reader_free(r);
    }
    try t.patchFile(&td, "c/header.zrh", 0, original);
    r = try t.openOk(&td, "c");
    try testing.expectEqual(
        @as(c_int, 0),
        root.zr_reader_gather_ragged(r, &all, all.len, out.ptr, &offsets, null, total, 0, &st),
    );
    try testing.expectEqualSlices(u8, rows, out);
    root.zr_reader_free(r);
    td.removeStore("c", 2);
    try td.deinitExpectEmpty();
}

test "zr_train_dict validates its arguments and says when the data is too little" {
    var st: Status = undefined;
    var dict: [4096]u8 = undefined;
    var len: u64 = 99;
    const tiny = "tiny sample data";
    const tiny_sizes = [_]u64{ 4, 4, 4, 4 };
    try testing.expectEqual(
        @as(c_int, t.ZR_E_INVALID_ARGUMENT),
        root.zr_train_dict(tiny, tiny.len, &tiny_sizes, 4, &dict, dict.len, &len, &st),
    );
    try testing.expectEqual(@as(u64, 0), len);
    try t.expectContains(t.msg(&st), "4 samples");
    try t.expectContains(t.msg(&st), "16 bytes");
    try t.expectContains(t.msg(&st), "more representative data");
    // No samples, sizes that do not add up, overflowing sizes.
    try testing.expectEqual(
        @as(c_int, t.ZR_E_INVALID_ARGUMENT),
        root.zr_train_dict(tiny, tiny.len, &tiny_sizes, 0, &dict, dict.len, &len, &st),
    );
    try testing.expectEqual(
        @as(c_int, t.ZR_E_INVALID_ARGUMENT),
        root.zr_train_dict(tiny, tiny.len, &tiny_sizes, 3, &dict, dict.len, &len, &st),
    );
    try t.expectContains(t.msg(&st), "add up to 12");
    const huge = [_]u64{ std.math.maxInt(u64), 17 };
    try testing.expectEqual(
        @as(c_int, t.ZR_E_INVALID_ARGUMENT),
        root.zr_train_dict(tiny, tiny.len, &huge, 2, &dict, dict.len, &len, &st),
    );
    // Capacity limits.
    try testing.expectEqual(
        @as(c_int, t.ZR_E_INVALID_ARGUMENT),
        root.zr_train_dict(tiny, tiny.len, &tiny_sizes, 4, &dict, 255, &len, &st),
    );
    try t.expectContains(t.msg(&st), "255");
    try testing.expectEqual(
        @as(c_int, t.ZR_E_LIMIT),
        root.zr_train_dict(tiny, tiny.len, &tiny_sizes, 4, &dict, format.dict_size_bytes_max + 1, &len, &st),
    );
    try t.expectContains(t.msg(&st), "dict_size_bytes_max");
    // Null pointers.
    try testing.expectEqual(
        @as(c_int, t.ZR_E_INVALID_ARGUMENT),
        root.zr_train_dict(tiny, tiny.len, &tiny_sizes, 4, null, dict.len, &len, &st),
    );
    try testing.expectEqual(
        @as(c_int, t.ZR_E_INVALID_ARGUMENT),
        root.zr_train_dict(tiny, tiny.len, null, 4, &dict, dict.len, &len, &st),
    );
    try testing.expectEqual(
        @as(c_int, t.ZR_E_INVALID_ARGUMENT),
        root.zr_train_dict(tiny, tiny.len, &tiny_sizes, 4, &dict, dict.len, null, &st),
    );
    try testing.expectEqual(
        @as(c_int, t.ZR_E_INVALID_ARGUMENT),
        root.zr_train_dict(null, 16, &tiny_sizes, 4, &dict, dict.len, &len, &st),
    );
}

test "a trained dictionary makes 2000 similar small records smaller than plain zstd" {
    var td: TempDir = .{};
    try td.init();
    var dict_buf: [16 << 10]u8 = undefined;
    const dict = dict_buf[0..try t.trainRowsDict(&dict_buf)];
    var prng = std.Random.DefaultPrng.init(13);
    var sizes: [2000]u64 = undefined;
    // Fresh rows of the same kind, not the training samples.
    const rows = try t.makeRows(prng.random(), &sizes);
    defer gpa.free(rows);
    const recs = try gpa.alloc([]const u8, sizes.len);
    defer gpa.free(recs);
    var off: usize = 0;
    for (recs, sizes) |*rec, size| {
        rec.* = rows[off..][0..@intCast(size)];
        off += @intCast(size);
    }
    const idx = [_]u64{ 1999, 0, 7, 1000, 7 };
    const plain = try t.raggedRoundTrip(&td, t.codec_zstd, "", 3, recs, &idx, 0);
    td.removeStore("r", 3);
    const with_dict = try t.raggedRoundTrip(&td, t.codec_zstd_dict, dict, 3, recs, &idx, 0);
    td.removeStore("r", 3);
    try testing.expect(with_dict * 2 < plain);
    try testing.expect(plain < rows.len);
    try td.deinitExpectEmpty();
}

test "writer dictionaries: raw-content works, malformed and oversized are refused" {
    var td: TempDir = .{};
    try td.init();
    var pbuf: [256]u8 = undefined;
    var st: Status = undefined;
    var w: ?*Writer = null;
    const schema = t.schemaWith(1, t.dtype_uint8, &.{64}, 1, t.codec_zstd_dict);
    // The zstd dictionary magic followed by garbage entropy tables.
    var bad: [512]u8 = undefined;
    var prng = std.Random.DefaultPrng.init(14);
    prng.random().bytes(&bad);
    std.mem.writeInt(u32, bad[0..4], 0xEC30A437, .little);
    try testing.expectEqual(
        @as(c_int, t.ZR_E_INVALID_ARGUMENT),
        root.zr_writer_open(td.sub(&pbuf, "w"), &schema, &bad, bad.len, 1, &w, &st),
    );
    try t.expectContains(t.msg(&st), "not a valid zstd dictionary");
    try testing.expect(w == null);
    // Too large a dictionary is refused before it is read.
    try testing.expectEqual(
        @as(c_int, t.ZR_E_LIMIT),
        root.zr_writer_open(td.sub(&pbuf, "w"), &schema, &bad, format.dict_size_bytes_max + 1, 1, &w, &st),
    );
    // Any bytes without the magic are a raw-content dictionary, which zstd accepts.
    const raw_dict = "alpha beta gamma delta epsilon zeta eta alpha beta gamma delta epsilon zeta eta";
    var data: [64 * 20]u8 = undefined;
    t.fillWords(prng.random(), &data);
    try t.writeDense(&td, "w", t.codec_zstd_dict, raw_dict, 1, 64, &data, &.{20});
    const r = try t.openOk(&td, "w");
    const idx = [_]u64{ 19, 3, 0 };
    try t.expectDenseGather(r, &data, 64, &idx, 0);
    root.zr_reader_free(r);
    td.removeStore("w", 1);
    try td.deinitExpectEmpty();
}
