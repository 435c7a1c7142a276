//! End-to-end tests through the C ABI: write, publish, open, gather, corrupt, close.
//!
//! Invariants:
//! - Each test works in its own fresh directory under /tmp and removes it at the end; a test
//!   that leaves anything behind fails (the final rmdir requires an empty directory).

const std = @import("std");
const t = @import("testing.zig");
const root = @import("root.zig");
const abi = @import("abi.zig");
const sys = @import("sys.zig");
const format = @import("format.zig");
const writer_mod = @import("writer.zig");

const testing = std.testing;
const Status = abi.Status;
const Writer = writer_mod.Writer;
const Reader = @import("reader.zig").Reader;

test "dense round trip: several shards, uneven split, sync and no-sync" {
    var td: t.TempDir = .{};
    try td.init();
    var st: Status = undefined;
    var pbuf: [256]u8 = undefined;
    const path = td.sub(&pbuf, "dense");
    const schema = t.schemaOf(1, 3, &.{7}, 3);
    var w: ?*Writer = null;
    try testing.expectEqual(@as(c_int, 0), root.zr_writer_open(path, &schema, null, 0, 0, &w, &st));
    // The page-cache budget can be set on any writer (a no-op where it is not direct), but
    // not on a null one.
    try testing.expectEqual(@as(c_int, 0), root.zr_writer_set_page_cache_bytes(w, 0, &st));
    try testing.expectEqual(@as(c_int, t.ZR_E_INVALID_ARGUMENT), root.zr_writer_set_page_cache_bytes(null, 0, &st));
    var data: [7 * 40]u8 = undefined;
    for (&data, 0..) |*b, i| b.* = t.pattern(i);
    // Calls of 10, 1, 0 and 29 records: runs of 0 records happen when a call has fewer
    // records than shards.
    var done: usize = 0;
    for ([_]usize{ 10, 1, 0, 29 }) |n| {
        try testing.expectEqual(@as(c_int, 0), root.zr_writer_append_dense(w, &data[done * 7], n * 7, n, &st));
        done += n;
    }
    try testing.expectEqual(@as(u64, 40), root.zr_writer_count(w));
    // A size that does not match count * record_size is refused and changes nothing.
    try testing.expectEqual(@as(c_int, t.ZR_E_INVALID_ARGUMENT), root.zr_writer_append_dense(w, &data, 8, 1, &st));
    try testing.expectEqual(@as(u64, 40), root.zr_writer_count(w));
    try testing.expectEqual(@as(c_int, 0), root.zr_writer_publish(w, &st));
    root.zr_writer_free(w);

    var r: ?*Reader = null;
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_open(path, &r, &st));
    var info: abi.Info = undefined;
    root.zr_reader_info(r, &info);
    try testing.expectEqual(@as(u64, 40), info.record_count);
    try testing.expectEqual(@as(u64, 7), info.record_size);
    try testing.expectEqual(@as(u8, 3), info.schema.data_shards);
    try testing.expectEqual(@as(u64, 7), info.schema.item_shape[0]);
    try testing.expectEqual(@as(u64, 280), info.stored_bytes);
    try testing.expectEqual(@as(u64, 0), root.zr_reader_dict(r, null, 0));
    const idx = [_]u64{ 39, 0, 5, 5, 17, 10, 11 };
    var out: [idx.len * 7]u8 = undefined;
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_gather_dense(r, &idx, idx.len, &out, out.len, 0, &st));
    for (idx, 0..) |rec, j| try testing.expectEqualSlices(u8, data[rec * 7 ..][0..7], out[j * 7 ..][0..7]);
    // Out-of-range index: ZR_E_INDEX naming position and value.
    const bad = [_]u64{ 1, 40 };
    try testing.expectEqual(@as(c_int, t.ZR_E_INDEX), root.zr_reader_gather_dense(r, &bad, 2, &out, 14, 0, &st));
    try t.expectContains(t.msg(&st), "index 40 at position 1");
    try testing.expectEqual(
        @as(c_int, t.ZR_E_INVALID_ARGUMENT),
        root.zr_reader_gather_dense(r, &idx, idx.len, &out, out.len - 1, 0, &st),
    );
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_verify(r, 0, 40, &st));
    try testing.expectEqual(@as(c_int, t.ZR_E_INDEX), root.zr_reader_verify(r, 39, 2, &st));
    root.zr_reader_close(r);
    root.zr_reader_close(r);
    try testing.expectEqual(
        @as(c_int, t.ZR_E_CLOSED),
        root.zr_reader_gather_dense(r, &idx, idx.len, &out, out.len, 0, &st),
    );
    root.zr_reader_free(r);
    td.removeStore("dense", 3);

    // Zero-size records (an axis of length 0), with NO_SYNC.
    const path0 = td.sub(&pbuf, "empty");
    const schema0 = t.schemaOf(1, 12, &.{ 0, 3 }, 2);
    try testing.expectEqual(@as(c_int, 0), root.zr_writer_open(path0, &schema0, null, 0, 1, &w, &st));
    try testing.expectEqual(@as(c_int, 0), root.zr_writer_append_dense(w, null, 0, 5, &st));
    try testing.expectEqual(@as(c_int, 0), root.zr_writer_publish(w, &st));
    root.zr_writer_free(w);
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_open(path0, &r, &st));
    const idx0 = [_]u64{ 4, 0, 2 };
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_gather_dense(r, &idx0, 3, null, 0, 0, &st));
    root.zr_reader_free(r);
    td.removeStore("empty", 2);
    try td.deinitExpectEmpty();
}

test "dense parallel write and gather (large batches)" {
    var td: t.TempDir = .{};
    try td.init();
    var st: Status = undefined;
    var pbuf: [256]u8 = undefined;
    const path = td.sub(&pbuf, "big");
    const rs = 4096;
    const n = 2600; // about 10 MiB: above both parallel thresholds
    const schema = t.schemaOf(1, 11, &.{1024}, 5);
    const data = try testing.allocator.alloc(u8, rs * n);
    defer testing.allocator.free(data);
    for (data, 0..) |*b, i| b.* = t.pattern(i);
    var w: ?*Writer = null;
    try testing.expectEqual(@as(c_int, 0), root.zr_writer_open(path, &schema, null, 0, 1, &w, &st));
    try testing.expectEqual(@as(c_int, 0), root.zr_writer_append_dense(w, data.ptr, data.len, n, &st));
    try testing.expectEqual(@as(c_int, 0), root.zr_writer_publish(w, &st));
    root.zr_writer_free(w);

    var r: ?*Reader = null;
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_open(path, &r, &st));
    const idx = try testing.allocator.alloc(u64, n);
    defer testing.allocator.free(idx);
    for (idx, 0..) |*v, i| v.* = (i * 7919) % n;
    const out = try testing.allocator.alloc(u8, rs * n);
    defer testing.allocator.free(out);
    for ([_]u32{ 0, 3 }) |threads| {
        @memset(out, 0);
        try testing.expectEqual(
            @as(c_int, 0),
            root.zr_reader_gather_dense(r, idx.ptr, n, out.ptr, out.len, threads, &st),
        );
        for (idx, 0..) |rec, j| try testing.expectEqualSlices(u8, data[rec * rs ..][0..rs], out[j * rs ..][0..rs]);
    }
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_verify(r, 0, n, &st));
    root.zr_reader_free(r);
    td.removeStore("big", 5);
    try td.deinitExpectEmpty();
}

test "ragged round trip with zero-size records" {
    var td: t.TempDir = .{};
    try td.init();
    var st: Status = undefined;
    var pbuf: [256]u8 = undefined;
    const path = td.sub(&pbuf, "ragged");
    const schema = t.schemaOf(2, 4, &.{ 0, 0 }, 3); // int16, ndim 2
    var w: ?*Writer = null;
    try testing.expectEqual(@as(c_int, 0), root.zr_writer_open(path, &schema, null, 0, 0, &w, &st));
    const shapes = [_]u64{ 2, 3, 0, 5, 1, 1, 4, 0, 3, 3, 1, 7, 0, 0 };
    const n = shapes.len / 2;
    var bufs: [n][32]u16 = undefined;
    var ptrs: [n]u64 = undefined;
    for (&bufs, 0..) |*b, i| {
        for (b, 0..) |*v, k| v.* = @intCast(i * 100 + k);
        ptrs[i] = @intFromPtr(b);
    }
    ptrs[1] = 0; // a zero-size record may have a null pointer
    try testing.expectEqual(@as(c_int, 0), root.zr_writer_append_ragged(w, &ptrs, &shapes, 4, &st));
    try testing.expectEqual(@as(c_int, 0), root.zr_writer_append_ragged(w, ptrs[4..].ptr, shapes[8..].ptr, n - 4, &st));
    // Limits name the record by its writer-wide index.
    const huge = [_]u64{ 1 << 32, 1 };
    try testing.expectEqual(@as(c_int, t.ZR_E_LIMIT), root.zr_writer_append_ragged(w, &ptrs, &huge, 1, &st));
    try testing.expectEqual(@as(i64, n), st.record);
    try t.expectContains(t.msg(&st), "dim_max");
    const too_big = [_]u64{ 1 << 30, 2 };
    try testing.expectEqual(@as(c_int, t.ZR_E_LIMIT), root.zr_writer_append_ragged(w, &ptrs, &too_big, 1, &st));
    try testing.expectEqual(@as(c_int, 0), root.zr_writer_publish(w, &st));
    root.zr_writer_free(w);

    var r: ?*Reader = null;
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_open(path, &r, &st));
    const idx = [_]u64{ 6, 1, 0, 3, 5, 2, 4, 0 };
    var out_shapes: [idx.len * 2]u64 = undefined;
    var sizes: [idx.len]u64 = undefined;
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_shapes(r, &idx, idx.len, &out_shapes, &sizes, &st));
    var offsets: [idx.len]u64 = undefined;
    var total: u64 = 0;
    for (idx, 0..) |rec, j| {
        try testing.expectEqualSlices(u64, shapes[rec * 2 ..][0..2], out_shapes[j * 2 ..][0..2]);
        try testing.expectEqual(shapes[rec * 2] * shapes[rec * 2 + 1] * 2, sizes[j]);
        offsets[j] = total;
        total += sizes[j];
    }
    var out: [512]u8 = undefined;
    try testing.expectEqual(
        @as(c_int, 0),
        root.zr_reader_gather_ragged(r, &idx, idx.len, &out, &offsets, null, total, 0, &st),
    );
    for (idx, 0..) |rec, j| {
        const want = std.mem.sliceAsBytes(bufs[rec][0..@intCast(sizes[j] / 2)]);
        try testing.expectEqualSlices(u8, want, out[@intCast(offsets[j])..][0..@intCast(sizes[j])]);
    }
    // An output too small for the last record is refused.
    try testing.expectEqual(
        @as(c_int, t.ZR_E_INVALID_ARGUMENT),
        root.zr_reader_gather_ragged(r, &idx, idx.len, &out, &offsets, null, total - 1, 0, &st),
    );
    try testing.expectEqual(
        @as(c_int, t.ZR_E_INVALID_ARGUMENT),
        root.zr_reader_gather_dense(r, &idx, 1, &out, 12, 0, &st),
    );
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_verify(r, 0, n, &st));
    root.zr_reader_free(r);
    td.removeStore("ragged", 3);
    try td.deinitExpectEmpty();
}

fn writeSmallDense(td: *const t.TempDir, name: []const u8, shards: u8, n: usize) !void {
    var st: Status = undefined;
    var pbuf: [256]u8 = undefined;
    const path = td.sub(&pbuf, name);
    const schema = t.schemaOf(1, 3, &.{16}, shards);
    var w: ?*Writer = null;
    try testing.expectEqual(@as(c_int, 0), root.zr_writer_open(path, &schema, null, 0, 1, &w, &st));
    defer root.zr_writer_free(w);
    var data: [16 * 64]u8 = undefined;
    for (&data, 0..) |*b, i| b.* = t.pattern(i);
    try testing.expectEqual(@as(c_int, 0), root.zr_writer_append_dense(w, &data, n * 16, n, &st));
    try testing.expectEqual(@as(c_int, 0), root.zr_writer_publish(w, &st));
}

fn writeRaggedRows(td: *const t.TempDir, name: []const u8, rows: []const []const u16) !void {
    var pbuf: [256]u8 = undefined;
    var st: Status = undefined;
    const schema = t.schemaOf(2, 4, &.{0}, 1); // int16, ndim 1
    var w: ?*Writer = null;
    try testing.expectEqual(@as(c_int, 0), root.zr_writer_open(td.sub(&pbuf, name), &schema, null, 0, 0, &w, &st));
    for (rows) |row| {
        const ptr = [_]u64{@intFromPtr(row.ptr)};
        const shape = [_]u64{row.len};
        try testing.expectEqual(@as(c_int, 0), root.zr_writer_append_ragged(w, &ptr, &shape, 1, &st));
    }
    try testing.expectEqual(@as(c_int, 0), root.zr_writer_publish(w, &st));
    root.zr_writer_free(w);
}

test "one gather over many readers, part after part, and when it declines" {
    var td: t.TempDir = undefined;
    try td.init();
    var st: Status = undefined;
    const a_rows = [_][]const u16{ &.{ 1, 2, 3 }, &.{}, &.{ 4, 5 } };
    const b_rows = [_][]const u16{ &.{ 6, 7, 8, 9 }, &.{10} };
    try writeRaggedRows(&td, "a", &a_rows);
    try writeRaggedRows(&td, "b", &b_rows);
    const ra = try t.openOk(&td, "a");
    const rb = try t.openOk(&td, "b");
    const readers = [_]*Reader{ ra, rb };
    for (readers) |r| try testing.expectEqual(@as(c_int, 0), root.zr_reader_set_reads(r, 1, &st)); // mapped
    // The batch [b0, a2, a0, b1], grouped by part: a's at batch positions 1 and 2, b's at 0 and 3.
    const order = [_]u64{ 1, 2, 0, 3 };
    const bounds = [_]u64{ 0, 2, 4 };
    const sizes = [_]u64{ 8, 4, 6, 2 };
    var out: [20]u8 = undefined;
    const Call = struct {
        readers: []const *Reader,
        flags: u32 = 0,
        taken: u32 = 9,
        st: Status = undefined,

        fn run(c: *@This(), order_: []const u64, bounds_: []const u64, sizes_: []const u64, dst: []u8) c_int {
            const local = [_]u64{ 2, 0, 0, 1 };
            const at = [_]u64{ 0, 8, 12, 18 };
            const rs = c.readers;
            return root.zr_parts_gather_ragged(
                rs.ptr,
                rs.len,
                order_.ptr,
                &local,
                bounds_.ptr,
                4,
                dst.ptr,
                &at,
                sizes_.ptr,
                dst.len,
                c.flags,
                &c.taken,
                &c.st,
            );
        }
    };
    var call: Call = .{ .readers = &readers };
    const bad: c_int = t.ZR_E_INVALID_ARGUMENT;
    try testing.expectEqual(@as(c_int, 0), call.run(&order, &bounds, &sizes, &out));
    try testing.expectEqual(@as(u32, 1), call.taken);
    const want = [_]u16{ 6, 7, 8, 9, 4, 5, 1, 2, 3, 10 };
    try testing.expectEqualSlices(u8, std.mem.sliceAsBytes(&want), &out);
    // A plan whose bounds do not end at the batch's count, a position past it, a slot one
    // byte short, an output too small: refused, naming what is wrong.
    try testing.expectEqual(bad, call.run(&order, &.{ 0, 2, 3 }, &sizes, &out));
    try t.expectContains(t.msg(&call.st), "bounds run from 0 to 3, not 0 to 4");
    try testing.expectEqual(bad, call.run(&.{ 1, 2, 0, 4 }, &bounds, &sizes, &out));
    try testing.expectEqual(bad, call.run(&order, &bounds, &.{ 8, 3, 6, 2 }, &out));
    try t.expectContains(t.msg(&call.st), "(position 1)");
    try testing.expectEqual(bad, call.run(&order, &bounds, &sizes, out[0 .. out.len - 1]));
    // A reader that hints every batch: declined, nothing written, every reader left (each
    // still closes).
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_set_reads(rb, 2, &st));
    @memset(&out, 0xEE);
    try testing.expectEqual(@as(c_int, 0), call.run(&order, &bounds, &sizes, &out));
    try testing.expectEqual(@as(u32, 0), call.taken);
    for (out) |byte| try testing.expectEqual(@as(u8, 0xEE), byte);
    // Expected cold (ZR_PARTS_COLD): a reader that never hints declines it; with readers that
    // may hint, one that hints every batch makes it cold (hinted, read with pread), and a
    // sample of resident records a warm one; the same bytes each time.
    call.flags = 1;
    try testing.expectEqual(@as(c_int, 0), call.run(&order, &bounds, &sizes, &out));
    try testing.expectEqual(@as(u32, 0), call.taken);
    for (out) |byte| try testing.expectEqual(@as(u8, 0xEE), byte);
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_set_reads(ra, 0, &st)); // auto
    try testing.expectEqual(@as(c_int, 0), call.run(&order, &bounds, &sizes, &out));
    try testing.expectEqual(@as(u32, 2), call.taken);
    try testing.expectEqualSlices(u8, std.mem.sliceAsBytes(&want), &out);
    try testing.expect(ra.estimate.expectsCold() and rb.estimate.expectsCold());
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_set_reads(rb, 0, &st));
    @memset(&out, 0xEE);
    try testing.expectEqual(@as(c_int, 0), call.run(&order, &bounds, &sizes, &out));
    try testing.expectEqual(@as(u32, 1), call.taken); // just written: in the page cache
    try testing.expectEqualSlices(u8, std.mem.sliceAsBytes(&want), &out);
    try testing.expect(!ra.estimate.expectsCold() and !rb.estimate.expectsCold());
    call.flags = 6;
    try testing.expectEqual(bad, call.run(&order, &bounds, &sizes, &out));
    try t.expectContains(t.msg(&call.st), "unknown flags 0x6");
    root.zr_reader_free(ra);
    root.zr_reader_free(rb);
    td.removeStore("a", 1);
    td.removeStore("b", 1);
    try td.deinitExpectEmpty();
}

test "a flipped byte in a shard fails the record's checksum, naming it" {
    var td: t.TempDir = .{};
    try td.init();
    try writeSmallDense(&td, "s", 2, 10);
    // Shard 1 holds records 5..9; its byte 20 is inside record 6.
    try t.patchFile(&td, "s/data-001.zrd", 20, "\xff");
    var st: Status = undefined;
    var pbuf: [256]u8 = undefined;
    const path = td.sub(&pbuf, "s");
    var r: ?*Reader = null;
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_open(path, &r, &st));
    var out: [32]u8 = undefined;
    const ok = [_]u64{ 0, 5 };
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_gather_dense(r, &ok, 2, &out, 32, 0, &st));
    const idx = [_]u64{ 0, 6 };
    try testing.expectEqual(@as(c_int, t.ZR_E_CHECKSUM), root.zr_reader_gather_dense(r, &idx, 2, &out, 32, 0, &st));
    try testing.expectEqual(@as(i64, 6), st.record);
    try testing.expectEqual(@as(i32, 1), st.shard);
    try t.expectContains(t.msg(&st), "record 6");
    try t.expectContains(t.msg(&st), "data-001.zrd");
    try t.expectContains(t.msg(&st), path);
    // The failure is not remembered as verified: it fails again, and verify finds it.
    try testing.expectEqual(@as(c_int, t.ZR_E_CHECKSUM), root.zr_reader_gather_dense(r, &idx, 2, &out, 32, 0, &st));
    try testing.expectEqual(@as(c_int, t.ZR_E_CHECKSUM), root.zr_reader_verify(r, 0, 10, &st));
    try testing.expectEqual(@as(i64, 6), st.record);
    root.zr_reader_free(r);
    td.removeStore("s", 2);
    try td.deinitExpectEmpty();
}

test "open rejects broken stores: shard size, index checksum, header, missing shard" {
    var td: t.TempDir = .{};
    try td.init();
    var st: Status = undefined;
    var pbuf: [256]u8 = undefined;
    var r: ?*Reader = null;

    try writeSmallDense(&td, "a", 2, 10);
    try t.patchFile(&td, "a/data-000.zrd", 80, "x"); // one byte past the end
    try testing.expectEqual(@as(c_int, t.ZR_E_CORRUPT), root.zr_reader_open(td.sub(&pbuf, "a"), &r, &st));
    try t.expectContains(t.msg(&st), "data-000.zrd");
    try testing.expect(r == null);
    td.removeStore("a", 2);

    try writeSmallDense(&td, "b", 2, 10);
    try t.patchFile(&td, "b/index.zri", 30, "\x01");
    try testing.expectEqual(@as(c_int, t.ZR_E_CHECKSUM), root.zr_reader_open(td.sub(&pbuf, "b"), &r, &st));
    try t.expectContains(t.msg(&st), "index.zri");
    td.removeStore("b", 2);

    try writeSmallDense(&td, "c", 2, 10);
    try t.patchFile(&td, "c/header.zrh", 0, "\x00");
    try testing.expectEqual(@as(c_int, t.ZR_E_BAD_MAGIC), root.zr_reader_open(td.sub(&pbuf, "c"), &r, &st));
    try t.patchFile(&td, "c/header.zrh", 0, "\x89");
    try t.patchFile(&td, "c/header.zrh", 8, "\x02");
    try testing.expectEqual(abi.Result.version.code(), root.zr_reader_open(td.sub(&pbuf, "c"), &r, &st));
    try t.expectContains(t.msg(&st), "2.0");
    td.removeStore("c", 2);

    try writeSmallDense(&td, "d", 3, 10);
    try sys.unlinkAt(sys.AT_FDCWD, td.sub(&pbuf, "d/data-002.zrd"));
    try testing.expectEqual(@as(c_int, t.ZR_E_CORRUPT), root.zr_reader_open(td.sub(&pbuf, "d"), &r, &st));
    try t.expectContains(t.msg(&st), "data-002.zrd");
    td.removeStore("d", 2);

    try testing.expectEqual(@as(c_int, t.ZR_E_NOT_FOUND), root.zr_reader_open(td.sub(&pbuf, "nothing"), &r, &st));
    try td.deinitExpectEmpty();
}

test "unpublished directory, existing path, missing parent, abort leaves nothing" {
    var td: t.TempDir = .{};
    try td.init();
    var st: Status = undefined;
    var pbuf: [256]u8 = undefined;
    const path = td.sub(&pbuf, "x");
    const schema = t.schemaOf(1, 1, &.{}, 4);
    var w: ?*Writer = null;
    try testing.expectEqual(@as(c_int, 0), root.zr_writer_open(path, &schema, null, 0, 0, &w, &st));
    const one = [_]u8{1};
    try testing.expectEqual(@as(c_int, 0), root.zr_writer_append_dense(w, &one, 1, 1, &st));
    // The temporary directory is a sibling whose name starts with '.' and holds '.zr-tmp-'.
    const tmp = w.?.stage.tmp_path;
    try t.expectContains(tmp, "/.x.zr-tmp-");
    var r: ?*Reader = null;
    try testing.expectEqual(@as(c_int, t.ZR_E_NOT_PUBLISHED), root.zr_reader_open(tmp, &r, &st));
    try testing.expect(!(try sys.exists(path)));
    root.zr_writer_abort(w);
    root.zr_writer_abort(w);
    try testing.expectEqual(@as(c_int, t.ZR_E_INVALID_ARGUMENT), root.zr_writer_publish(w, &st));
    root.zr_writer_free(w);

    // An existing path is refused at open, and at publish if it appears meanwhile.
    try sys.mkdir(path, 0o755);
    try testing.expectEqual(@as(c_int, t.ZR_E_EXISTS), root.zr_writer_open(path, &schema, null, 0, 0, &w, &st));
    try testing.expect(w == null);
    try sys.rmdir(path);
    try testing.expectEqual(@as(c_int, 0), root.zr_writer_open(path, &schema, null, 0, 0, &w, &st));
    try sys.mkdir(path, 0o755);
    try testing.expectEqual(@as(c_int, t.ZR_E_EXISTS), root.zr_writer_publish(w, &st));
    root.zr_writer_abort(w);
    root.zr_writer_free(w);
    try sys.rmdir(path);

    // Missing parent directories are created; a parent that is a file is refused.
    var mbuf: [256]u8 = undefined;
    try testing.expectEqual(@as(c_int, 0), root.zr_writer_open(td.sub(&mbuf, "made/x"), &schema, null, 0, 0, &w, &st));
    try testing.expectEqual(@as(c_int, 0), root.zr_writer_publish(w, &st));
    root.zr_writer_free(w);
    // Nothing may be created inside a published store, at any depth.
    try testing.expectEqual(
        @as(c_int, t.ZR_E_IMMUTABLE),
        root.zr_writer_open(td.sub(&mbuf, "made/x/y"), &schema, null, 0, 0, &w, &st),
    );
    try testing.expectEqual(
        @as(c_int, t.ZR_E_IMMUTABLE),
        root.zr_writer_open(td.sub(&mbuf, "made/x/a/b/y"), &schema, null, 0, 0, &w, &st),
    );
    try t.expectContains(t.msg(&st), "inside the published store");
    try testing.expect(!(try sys.exists(td.sub(&mbuf, "made/x/a"))));
    td.removeStore("made/x", 4);
    try sys.rmdir(td.sub(&mbuf, "made"));
    const ffd = try sys.open(td.sub(&mbuf, "file"), sys.O_WRONLY | sys.O_CREAT, 0o644);
    sys.close(ffd);
    try testing.expectEqual(
        @as(c_int, t.ZR_E_NOT_FOUND),
        root.zr_writer_open(td.sub(&mbuf, "file/x"), &schema, null, 0, 0, &w, &st),
    );
    try t.expectContains(t.msg(&st), "file");
    try sys.unlinkAt(sys.AT_FDCWD, td.sub(&mbuf, "file"));
    try td.deinitExpectEmpty();
}

test "writer schema validation" {
    var td: t.TempDir = .{};
    try td.init();
    var st: Status = undefined;
    var pbuf: [256]u8 = undefined;
    const path = td.sub(&pbuf, "v");
    var w: ?*Writer = null;
    const Case = struct { s: abi.Schema, code: c_int, flags: u32 = 0 };
    var cases: [10]Case = undefined;
    cases[0] = .{ .s = t.schemaOf(3, 1, &.{}, 1), .code = t.ZR_E_INVALID_ARGUMENT };
    cases[1] = .{ .s = t.schemaOf(1, 15, &.{}, 1), .code = t.ZR_E_INVALID_ARGUMENT };
    cases[2] = .{ .s = t.schemaOf(1, 0, &.{}, 1), .code = t.ZR_E_INVALID_ARGUMENT };
    cases[3] = .{ .s = t.schemaOf(1, 1, &.{}, 0), .code = t.ZR_E_LIMIT };
    cases[4] = .{ .s = t.schemaOf(2, 1, &.{}, 1), .code = t.ZR_E_INVALID_ARGUMENT };
    cases[5] = .{ .s = t.schemaOf(1, 14, &.{ 1 << 20, (1 << 7) + 1 }, 1), .code = t.ZR_E_LIMIT };
    cases[6] = .{ .s = t.schemaOf(1, 1, &.{}, 1), .code = t.ZR_E_INVALID_ARGUMENT, .flags = 4 };
    // zstd_dict without a dictionary (ZR-COD-002).
    cases[7] = .{ .s = t.schemaOf(1, 1, &.{}, 1), .code = t.ZR_E_INVALID_ARGUMENT };
    cases[7].s.codec = 2;
    cases[8] = .{ .s = t.schemaOf(1, 1, &.{}, 1), .code = t.ZR_E_LIMIT };
    cases[8].s.ndim = 33;
    cases[9] = .{ .s = t.schemaOf(1, 1, &.{}, 1), .code = t.ZR_E_INVALID_ARGUMENT };
    cases[9].s.codec = 9;
    for (cases) |c| {
        try testing.expectEqual(c.code, root.zr_writer_open(path, &c.s, null, 0, c.flags, &w, &st));
        try testing.expect(w == null);
        try testing.expect(t.msg(&st).len > 0);
    }
    // A dictionary is only for zstd_dict.
    const s = t.schemaOf(1, 1, &.{}, 1);
    try testing.expectEqual(@as(c_int, t.ZR_E_INVALID_ARGUMENT), root.zr_writer_open(path, &s, "abc", 3, 0, &w, &st));
    try testing.expectEqual(@as(c_int, t.ZR_E_INVALID_ARGUMENT), root.zr_writer_open(null, &s, null, 0, 0, &w, &st));
    try td.deinitExpectEmpty();
}

test "a failed append poisons the writer; abort cleans up" {
    var td: t.TempDir = .{};
    try td.init();
    var st: Status = undefined;
    var pbuf: [256]u8 = undefined;
    const path = td.sub(&pbuf, "p");
    const schema = t.schemaOf(1, 3, &.{4}, 2);
    var w: ?*Writer = null;
    try testing.expectEqual(@as(c_int, 0), root.zr_writer_open(path, &schema, null, 0, 0, &w, &st));
    // Closing shard 1's descriptor behind the writer's back makes its next write fail (EBADF).
    sys.close(w.?.shard_fds[1]);
    const data: [16]u8 = @splat(0);
    try testing.expectEqual(@as(c_int, t.ZR_E_IO), root.zr_writer_append_dense(w, &data, 16, 4, &st));
    try testing.expect(st.os_errno != 0);
    try testing.expectEqual(@as(i32, 1), st.shard);
    try t.expectContains(t.msg(&st), "data-001.zrd");
    try testing.expectEqual(@as(c_int, t.ZR_E_IO), root.zr_writer_append_dense(w, &data, 4, 1, &st));
    try t.expectContains(t.msg(&st), "unusable");
    w.?.shard_fds[1] = sys.invalid_fd;
    try testing.expectEqual(@as(c_int, t.ZR_E_IO), root.zr_writer_publish(w, &st));
    root.zr_writer_abort(w);
    root.zr_writer_free(w);
    try testing.expect(!(try sys.exists(path)));
    try td.deinitExpectEmpty();
}

test "close waits for concurrent gathers, later calls get ZR_E_CLOSED" {
    var td: t.TempDir = .{};
    try td.init();
    try writeSmallDense(&td, "c", 3, 64);
    var st: Status = undefined;
    var pbuf: [256]u8 = undefined;
    var r: ?*Reader = null;
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_open(td.sub(&pbuf, "c"), &r, &st));
    const Worker = struct {
        fn main(rd: *Reader, result: *c_int) void {
            var s: Status = undefined;
            var idx: [64]u64 = undefined;
            for (&idx, 0..) |*v, i| v.* = (i * 5) % 64;
            var out: [64 * 16]u8 = undefined;
            while (true) {
                const rc = root.zr_reader_gather_dense(rd, &idx, 64, &out, out.len, 0, &s);
                if (rc != 0) {
                    result.* = rc;
                    return;
                }
            }
        }
    };
    var results: [4]c_int = @splat(0);
    var threads: [4]std.Thread = undefined;
    for (&threads, &results) |*th, *res| th.* = try std.Thread.spawn(.{}, Worker.main, .{ r.?, res });
    var i: usize = 0;
    while (i < 20000) : (i += 1) std.atomic.spinLoopHint();
    root.zr_reader_close(r);
    for (threads) |th| th.join();
    for (results) |res| try testing.expectEqual(@as(c_int, t.ZR_E_CLOSED), res);
    root.zr_reader_free(r);
    td.removeStore("c", 3);
    try td.deinitExpectEmpty();
}

test "xxh64 through the ABI" {
    try testing.expectEqual(@as(u64, 0xef46db3751d8e999), root.zr_xxh64(null, 0));
    const ten = [_]u8{ 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 };
    try testing.expectEqual(@as(u64, 0xf76d60ec32541987), root.zr_xxh64(&ten, 10));
}

test "open and gather never panic on any single-byte corruption of header or index" {
    var td: t.TempDir = .{};
    try td.init();
    var pbuf: [256]u8 = undefined;
    // A Ragged store exercises the most fields (shapes in the index).
    const path = td.sub(&pbuf, "f");
    {
        var st: Status = undefined;
        const schema = t.schemaOf(2, 6, &.{ 0, 0 }, 3);
        var w: ?*Writer = null;
        try testing.expectEqual(@as(c_int, 0), root.zr_writer_open(path, &schema, null, 0, 1, &w, &st));
        defer root.zr_writer_free(w);
        var vals: [64]u32 = undefined;
        for (&vals, 0..) |*v, i| v.* = @intCast(i);
        const ptrs = [_]u64{ @intFromPtr(&vals), @intFromPtr(&vals), @intFromPtr(&vals), @intFromPtr(&vals) };
        const shapes = [_]u64{ 2, 3, 0, 4, 1, 1, 4, 4 };
        try testing.expectEqual(@as(c_int, 0), root.zr_writer_append_ragged(w, &ptrs, &shapes, 4, &st));
        try testing.expectEqual(@as(c_int, 0), root.zr_writer_publish(w, &st));
    }
    for ([_][]const u8{ "f/header.zrh", "f/index.zri" }) |rel| {
        var fbuf: [256]u8 = undefined;
        const fpath = td.sub(&fbuf, rel);
        const fd = try sys.open(fpath, sys.O_RDONLY, 0);
        const size = (try sys.fstat(fd)).size;
        var original: [512]u8 = undefined;
        var short = false;
        try sys.preadAll(fd, original[0..@intCast(size)], 0, &short);
        sys.close(fd);
        var pos: u64 = 0;
        while (pos < size) : (pos += 1) {
            for ([_]u8{ 0x01, 0x80, 0xff }) |flip| {
                for ([_]bool{ false, true }) |reseal| {
                    const b = [_]u8{original[@intCast(pos)] ^ flip};
                    try t.patchFile(&td, rel, pos, &b);
                    // Resealing recomputes the checksums, so that the structural checks behind them
                    // see the corrupt value.
                    if (reseal) try resealStore(&td);
                    var st: Status = undefined;
                    var r: ?*Reader = null;
                    const rc = root.zr_reader_open(path, &r, &st);
                    if (rc == 0) {
                        // Only bytes outside every checksum could pass; data must still be sane.
                        const idx = [_]u64{ 0, 1, 2, 3 };
                        var shp: [8]u64 = undefined;
                        var sizes: [4]u64 = undefined;
                        _ = root.zr_reader_shapes(r, &idx, 4, &shp, &sizes, &st);
                        _ = root.zr_reader_verify(r, 0, 4, &st);
                        root.zr_reader_free(r);
                    } else {
                        try testing.expect(r == null);
                        try testing.expect(std.mem.sliceTo(&st.message, 0).len > 0);
                    }
                    try t.patchFile(&td, rel, pos, original[@intCast(pos)..][0..1]);
                    if (reseal) try resealStore(&td);
                }
            }
        }
    }
    td.removeStore("f", 3);
    try td.deinitExpectEmpty();
}

/// Rewrites store f's index checksum and header checksum to match the current bytes.
fn resealStore(td: *const t.TempDir) !void {
    const index = try t.readAlloc(td, "f/index.zri");
    defer std.testing.allocator.free(index);
    const header = try t.readAlloc(td, "f/header.zrh");
    defer std.testing.allocator.free(header);
    if (header.len < 136) return;
    std.mem.writeInt(u64, header[64..72], format.xxh64(index), .little);
    t.sealHeader(header);
    try t.patchFile(td, "f/header.zrh", 0, header);
}
