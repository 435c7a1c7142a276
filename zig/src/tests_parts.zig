//! End-to-end tests of index parts (format 1.2, spec §4.1) through the C ABI: the bytes the
//! writer writes for them, open's whole path over them in the order of [ZR-PRT-010]
//! (ZR_OPEN_VALIDATE_INDEX), and the path by part that a plain open takes ([ZR-PRT-009]).
//!
//! Invariants:
//! - As in tests.zig, each test works in its own fresh directory under /tmp and removes it; a
//!   test that leaves anything behind fails.
//! - Expected bytes are computed here from spec §4.1, not taken from the writer.

const std = @import("std");
const root = @import("root.zig");
const abi = @import("abi.zig");
const sys = @import("sys.zig");
const format = @import("format.zig");
const t = @import("testing.zig");
const Reader = @import("reader.zig").Reader;

const testing = std.testing;
const gpa = testing.allocator;
const Status = abi.Status;
const TempDir = t.TempDir;

const parts_flags = abi.write_no_sync | abi.write_index_parts;

/// 1000 one-byte Dense records in calls that cross block boundaries: 4 index blocks (256, 256,
/// 256, 232 entries), one sum group.
const records_count: usize = 1000;
const calls = [_]usize{ 300, 1, 0, 699 };

fn writeParts(td: *const TempDir, name: []const u8, data: []u8) !void {
    for (data, 0..) |*b, i| b.* = t.pattern(i);
    try t.writeDenseFlags(td, name, 0, "", 2, 1, data, &calls, parts_flags);
}

/// Opens by the whole path (a plain open reads by part) and expects it to fail.
fn expectOpenFails(td: *const TempDir, store: []const u8, code: abi.Result, needles: []const []const u8) !void {
    var pbuf: [256]u8 = undefined;
    var st: Status = undefined;
    var r: ?*Reader = null;
    const rc = root.zr_reader_open_ex(td.sub(&pbuf, store), abi.open_validate_index, &r, &st);
    try testing.expectEqual(code.code(), rc);
    try testing.expect(r == null);
    for (needles) |needle| try t.expectContains(t.msg(&st), needle);
}

test "index parts: the writer writes index.zrs and group_sums as spec section 4.1 gives them" {
    var td: TempDir = .{};
    try td.init();
    var data: [records_count]u8 = undefined;
    try writeParts(&td, "s", &data);
    var b1: [64]u8 = undefined;
    const header = try t.readAlloc(&td, t.storeFile(&b1, "s", "header.zrh"));
    defer gpa.free(header);
    const index = try t.readAlloc(&td, t.storeFile(&b1, "s", "index.zri"));
    defer gpa.free(index);
    const sums = try t.readAlloc(&td, t.storeFile(&b1, "s", "index.zrs"));
    defer gpa.free(sums);
    // [ZR-HDR-018] minor 2, bit 0, the writer defaults s = 8 and g = 10 ([ZR-PRT-008]).
    try testing.expectEqual(@as(u16, 2), std.mem.readInt(u16, header[10..12], .little));
    try testing.expectEqual(@as(u64, 1), std.mem.readInt(u64, header[80..88], .little));
    try testing.expectEqual(@as(u8, 8), header[93]);
    try testing.expectEqual(@as(u8, 10), header[94]);
    try testing.expect(std.mem.allEqual(u8, header[95..128], 0));
    // index.zrs: the XXH64 of each block of 256 entries of 24 bytes, the last one short.
    try testing.expectEqual(@as(usize, 4 * 8), sums.len);
    for (0..4) |b| {
        const begin = b * 256 * 24;
        const end = @min(begin + 256 * 24, index.len);
        try testing.expectEqual(format.xxh64(index[begin..end]), std.mem.readInt(u64, sums[8 * b ..][0..8], .little));
    }
    // One group sum after item_shape (8) and shard_sizes (2 × 8), then the checksum: T = 1.
    try testing.expectEqual(@as(usize, 128 + 8 + 16 + 8 + 8), header.len);
    try testing.expectEqual(format.xxh64(sums), std.mem.readInt(u64, header[152..160], .little));
    try testing.expectEqual(format.xxh64(index), std.mem.readInt(u64, header[64..72], .little));
    const r = try t.openOk(&td, "s");
    try t.expectDenseGather(r, &data, 1, &.{ 999, 0, 256, 511, 512 }, 1);
    var st: Status = undefined;
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_verify(r, 0, records_count, &st));
    root.zr_reader_free(r);
    td.removeStore("s", 2);

    // No records: an empty index.zrs and no group sums (B = T = 0).
    try t.writeDenseFlags(&td, "e", 0, "", 1, 1, &.{}, &.{}, parts_flags);
    const esums = try t.readAlloc(&td, t.storeFile(&b1, "e", "index.zrs"));
    defer gpa.free(esums);
    try testing.expectEqual(@as(usize, 0), esums.len);
    const eheader = try t.readAlloc(&td, t.storeFile(&b1, "e", "header.zrh"));
    defer gpa.free(eheader);
    try testing.expectEqual(@as(usize, 128 + 8 + 8 + 8), eheader.len);
    root.zr_reader_free(try t.openOk(&td, "e"));
    td.removeStore("e", 1);
    try td.deinitExpectEmpty();
}

test "index parts: open judges every group, then every block, then the index, naming the part" {
    var td: TempDir = .{};
    try td.init();
    var data: [records_count]u8 = undefined;
    var b1: [64]u8 = undefined;
    try writeParts(&td, "s", &data);
    root.zr_reader_free(try t.openOk(&td, "s"));
    // [ZR-PRT-005] A reserved byte of record 300's entry, index checksum resealed: block 1
    // fails its block sum, before the entry's own rule (step 5) is looked at.
    try t.flipByte(&td, t.storeFile(&b1, "s", "index.zri"), 300 * 24 + 13);
    try t.resealIndex(&td, "s");
    try expectOpenFails(&td, "s", .checksum, &.{ "index block 1 (records 256 to 511)", "ZR-PRT-005" });
    // Without the reseal the whole index fails too (4.5), but the block (4.4) comes first.
    try writeParts(&td, "u", &data);
    try t.flipByte(&td, t.storeFile(&b1, "u", "index.zri"), 999 * 24 + 13);
    try expectOpenFails(&td, "u", .checksum, &.{ "index block 3 (records 768 to 999)", "index.zri" });
    // [ZR-PRT-004] A byte of block sum 2 in index.zrs: its group fails before any block.
    try t.flipByte(&td, t.storeFile(&b1, "u", "index.zrs"), 2 * 8 + 3);
    try expectOpenFails(&td, "u", .checksum, &.{ "sum group 0 (index blocks 0 to 3, records 0 to 999)", "ZR-PRT-004" });
    td.removeStore("u", 2);
    td.removeStore("s", 2);

    // [ZR-PRT-001] index.zrs missing, or of the wrong size: corrupt (step 4.2).
    try writeParts(&td, "m", &data);
    var pbuf: [256]u8 = undefined;
    try sys.unlinkAt(sys.AT_FDCWD, td.sub(&pbuf, "m/index.zrs"));
    try expectOpenFails(&td, "m", .corrupt, &.{"no index.zrs"});
    const fd = try sys.open(td.sub(&pbuf, "m/index.zrs"), sys.O_WRONLY | sys.O_CREAT | sys.O_EXCL, 0o644);
    try sys.pwriteAll(fd, &(@as([40]u8, @splat(0))), 0);
    sys.close(fd);
    try expectOpenFails(&td, "m", .corrupt, &.{ "index.zrs' has 40 bytes", "exactly 32", "ZR-PRT-001" });
    td.removeStore("m", 2);
    try td.deinitExpectEmpty();
}

test "index parts: ZR_OPEN_WHOLE_INDEX judges the whole index at open, never by part" {
    // The mirror of a store read by URL has copied the whole index: it opens with this flag,
    // so a damaged part fails open as with ZR_OPEN_VALIDATE_INDEX, and an intact store is
    // built (not read by part), so that a cache folder would keep its compact index.
    var td: TempDir = .{};
    try td.init();
    var data: [records_count]u8 = undefined;
    var b1: [64]u8 = undefined;
    var pbuf: [256]u8 = undefined;
    var st: Status = undefined;
    try writeParts(&td, "s", &data);
    var r: ?*Reader = null;
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_open_ex(td.sub(&pbuf, "s"), abi.open_whole_index, &r, &st));
    try testing.expectEqual(@import("reader.zig").IndexSource.built, r.?.index_source);
    try testing.expect(r.?.parts == null);
    try t.expectDenseGather(r.?, &data, 1, &.{ 999, 0, 300 }, 1);
    root.zr_reader_free(r.?);
    r = null;
    try t.flipByte(&td, t.storeFile(&b1, "s", "index.zri"), 300 * 24 + 13);
    try t.resealIndex(&td, "s");
    const rc = root.zr_reader_open_ex(td.sub(&pbuf, "s"), abi.open_whole_index, &r, &st);
    try testing.expectEqual(abi.Result.checksum.code(), rc);
    try testing.expect(r == null);
    try t.expectContains(t.msg(&st), "index block 1 (records 256 to 511)");
    td.removeStore("s", 2);
    try td.deinitExpectEmpty();
}

extern "c" fn symlink(target: [*:0]const u8, link: [*:0]const u8) c_int;

test "index parts: index.zrs is a store file only with the bit" {
    // Windows: symbolic links need a privilege.
    if (comptime @import("builtin").os.tag == .windows) return error.SkipZigTest;
    var td: TempDir = .{};
    try td.init();
    var data: [records_count]u8 = undefined;
    var pbuf: [256]u8 = undefined;
    var tbuf: [256]u8 = undefined;
    // [ZR-GEN-004] a link in index.zrs's place is not followed, even to the store's own bytes.
    try writeParts(&td, "s", &data);
    try testing.expectEqual(@as(c_int, 0), std.c.rename(td.sub(&pbuf, "s/index.zrs"), td.sub(&tbuf, "outside")));
    try testing.expectEqual(@as(c_int, 0), symlink(td.sub(&tbuf, "outside"), td.sub(&pbuf, "s/index.zrs")));
    try expectOpenFails(&td, "s", .corrupt, &.{ "index.zrs", "symbolic link" });
    try sys.unlinkAt(sys.AT_FDCWD, td.sub(&pbuf, "outside"));
    td.removeStore("s", 2);
    // [ZR-PRT-007] Beside a store without index parts, index.zrs is ignored, whatever it is.
    try t.writeDense(&td, "p", 0, "", 1, 1, &data, &.{records_count});
    try sys.mkdir(td.sub(&pbuf, "p/index.zrs"), 0o755);
    const r = try t.openOk(&td, "p");
    try testing.expectEqual(@as(u64, 0), r.header.required_features);
    try testing.expect(r.sums_fd == sys.invalid_fd);
    root.zr_reader_free(r);
    try sys.rmdir(td.sub(&pbuf, "p/index.zrs"));
    td.removeStore("p", 1);
    try td.deinitExpectEmpty();
}

test "index parts: the writer's group sums over two sum groups, read back from index.zrs" {
    // 2^18 + 1 records: 1025 index blocks of the writer defaults, so T = 2 sum groups (1024
    // block sums and 1), the second group's sum over one block sum.
    var td: TempDir = .{};
    try td.init();
    const n: usize = (1 << 18) + 1;
    const data = try gpa.alloc(u8, n);
    defer gpa.free(data);
    for (data, 0..) |*b, i| b.* = t.pattern(i);
    try t.writeDenseFlags(&td, "s", 0, "", 3, 1, data, &.{ 1000, n - 1000 }, parts_flags);
    var b1: [64]u8 = undefined;
    const header = try t.readAlloc(&td, t.storeFile(&b1, "s", "header.zrh"));
    defer gpa.free(header);
    const sums = try t.readAlloc(&td, t.storeFile(&b1, "s", "index.zrs"));
    defer gpa.free(sums);
    try testing.expectEqual(@as(usize, 8 * 1025), sums.len);
    const groups_at = 128 + 8 + 3 * 8;
    try testing.expectEqual(@as(usize, groups_at + 2 * 8 + 8), header.len);
    const group_sums = header[groups_at..][0..16];
    try testing.expectEqual(format.xxh64(sums[0 .. 8 * 1024]), std.mem.readInt(u64, group_sums[0..8], .little));
    try testing.expectEqual(format.xxh64(sums[8 * 1024 ..]), std.mem.readInt(u64, group_sums[8..16], .little));
    const r = try t.openOk(&td, "s");
    try t.expectDenseGather(r, data, 1, &.{ n - 1, 0, 1 << 18 }, 1);
    root.zr_reader_free(r);
    // Block sum 1024, alone in group 1, damaged: group 1 is named, with its one block.
    try t.flipByte(&td, t.storeFile(&b1, "s", "index.zrs"), 8 * 1024);
    try expectOpenFails(&td, "s", .checksum, &.{"sum group 1 (index blocks 1024 to 1024, records 262144 to 262144)"});
    td.removeStore("s", 3);
    try td.deinitExpectEmpty();
}

test "index parts: verify of a reader that did not hash the index judges groups, blocks, then the index" {
    // What verify runs for a reader whose compact index came from the cache folder (spec §9.5,
    // [ZR-PRT-010]): its open read neither index file's contents. Files changed in place keep
    // the descriptors the reader holds.
    const reader_open = @import("reader_open.zig");
    const Diag = @import("diag.zig").Diag;
    var td: TempDir = .{};
    try td.init();
    var data: [records_count]u8 = undefined;
    var b1: [64]u8 = undefined;
    try writeParts(&td, "s", &data);
    const r = try t.openOk(&td, "s");
    var freed = false;
    defer if (!freed) root.zr_reader_free(r);
    var d: Diag = .{};
    try reader_open.checkIndexChecksum(r, &d);
    // A reserved byte of record 600 (block 2): the block before the whole index's checksum.
    try t.flipByte(&td, t.storeFile(&b1, "s", "index.zri"), 600 * 24 + 13);
    try testing.expectError(error.ChecksumMismatch, reader_open.checkIndexChecksum(r, &d));
    try t.expectContains(d.text(), "index block 2 (records 512 to 767)");
    // A block sum of group 0 too: the group before any block.
    try t.flipByte(&td, t.storeFile(&b1, "s", "index.zrs"), 0);
    try testing.expectError(error.ChecksumMismatch, reader_open.checkIndexChecksum(r, &d));
    try t.expectContains(d.text(), "sum group 0");
    // Both restored, the whole index's checksum alone (the header's, in memory, is changed).
    try t.flipByte(&td, t.storeFile(&b1, "s", "index.zrs"), 0);
    try t.flipByte(&td, t.storeFile(&b1, "s", "index.zri"), 600 * 24 + 13);
    try reader_open.checkIndexChecksum(r, &d);
    r.header.index_checksum ^= 1;
    try testing.expectError(error.ChecksumMismatch, reader_open.checkIndexChecksum(r, &d));
    try t.expectContains(d.text(), "index_checksum");
    r.header.index_checksum ^= 1;
    // Freed first: Windows deletes no file that a view maps.
    root.zr_reader_free(r);
    freed = true;
    td.removeStore("s", 2);
    try td.deinitExpectEmpty();
}

fn gatherOne(r: *Reader, rec: u64, st: *Status) c_int {
    var out: [1]u8 = undefined;
    const idx = [_]u64{rec};
    return root.zr_reader_gather_dense(r, &idx, 1, &out, 1, 1, st);
}

/// Expects every read of records `recs` (one at a time) to fail with `code`, naming `needle`.
fn expectReadsFail(r: *Reader, recs: []const u64, code: abi.Result, needle: []const u8) !void {
    var st: Status = undefined;
    for (recs) |rec| {
        try testing.expectEqual(code.code(), gatherOne(r, rec, &st));
        try t.expectContains(t.msg(&st), needle);
    }
}

/// Writes store "s", flips a byte of its file `name` at `offset`, and opens it (by part).
fn openDamaged(td: *const TempDir, data: []u8, name: []const u8, offset: u64) !*Reader {
    var b1: [64]u8 = undefined;
    try writeParts(td, "s", data);
    try t.flipByte(td, t.storeFile(&b1, "s", name), offset);
    return t.openOk(td, "s");
}

fn lazyOf(r: *const Reader) *index_parts.Lazy {
    return r.parts.?;
}

const index_parts = @import("index_parts.zig");

test "index parts by part: open judges no part, a gather judges the blocks of its records once" {
    var td: TempDir = .{};
    try td.init();
    var data: [records_count]u8 = undefined;
    try writeParts(&td, "s", &data);
    const r = try t.openOk(&td, "s");
    var freed = false;
    defer if (!freed) root.zr_reader_free(r);
    try testing.expectEqual(@import("reader.zig").IndexSource.by_part, r.index_source);
    const l = lazyOf(r);
    try testing.expectEqual(@as(u64, 0), l.judged.load(.monotonic));
    // Records 999 (block 3) and 0 (block 0), then again: two blocks judged, once each.
    try t.expectDenseGather(r, &data, 1, &.{ 999, 0, 998, 1 }, 1);
    try testing.expectEqual(@as(u64, 2), l.judged.load(.monotonic));
    try t.expectDenseGather(r, &data, 1, &.{ 3, 300, 777, 0 }, 2);
    try testing.expectEqual(@as(u64, 3), l.judged.load(.monotonic));
    try testing.expect(!index_parts.allPassed(r, l));
    // An index out of range is refused as out of range, after the blocks before it in the
    // batch were judged (they stay judged), and the block after it is not judged.
    var st: Status = undefined;
    var out: [3]u8 = undefined;
    const bad = [_]u64{ 1, records_count, 600 };
    try testing.expectEqual(@as(c_int, -6), root.zr_reader_gather_dense(r, &bad, 3, &out, 3, 1, &st));
    try t.expectContains(t.msg(&st), "index 1000 at position 1 is out of range");
    try testing.expectEqual(@as(u64, 3), l.judged.load(.monotonic));
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_verify(r, 0, records_count, &st));
    try testing.expectEqual(@as(u64, 4), l.judged.load(.monotonic));
    // Every block passed: a gather no longer tests each record's block.
    try testing.expect(index_parts.allPassed(r, l));
    try testing.expectEqual(@as(c_int, -6), root.zr_reader_gather_dense(r, &bad, 3, &out, 3, 1, &st));
    try t.expectContains(t.msg(&st), "index 1000 at position 1 is out of range");
    try t.expectDenseGather(r, &data, 1, &.{ 300, 600 }, 1);
    // Freed first: Windows deletes no file that a view maps.
    root.zr_reader_free(r);
    freed = true;
    td.removeStore("s", 2);
    try td.deinitExpectEmpty();
}

test "index parts by part: a damaged block fails the reads of its records only, and verify" {
    var td: TempDir = .{};
    try td.init();
    var data: [records_count]u8 = undefined;
    var b1: [64]u8 = undefined;
    // A byte of record 600's checksum (block 2, records 512 to 767): open does not see it.
    const r = try openDamaged(&td, &data, "index.zri", 600 * 24 + 16);
    var freed = false;
    defer if (!freed) root.zr_reader_free(r);
    try expectReadsFail(r, &.{ 512, 600, 767, 512 }, .checksum, "index block 2 (records 512 to 767) does not match");
    var st: Status = undefined;
    try t.expectDenseGather(r, &data, 1, &.{ 511, 768, 0, 999 }, 1);
    try testing.expectEqual(abi.Result.checksum.code(), root.zr_reader_verify(r, 0, records_count, &st));
    try t.expectContains(t.msg(&st), "index block 2 (records 512 to 767)");
    // Freed first: Windows deletes no file that a view maps.
    root.zr_reader_free(r);
    freed = true;
    td.removeStore("s", 2);

    // An entry that breaks step 5 under a block sum that matches it: its block's records fail
    // with step 5's code, naming the block.
    try writeParts(&td, "e", &data);
    try t.patchFile(&td, t.storeFile(&b1, "e", "index.zri"), 300 * 24 + 13, &.{1});
    try t.resealIndex(&td, "e");
    try resealParts(&td, "e");
    const r2 = try t.openOk(&td, "e");
    var freed2 = false;
    defer if (!freed2) root.zr_reader_free(r2);
    try testing.expectEqual(abi.Result.corrupt.code(), gatherOne(r2, 256, &st));
    try t.expectContains(t.msg(&st), "record 300");
    try t.expectContains(t.msg(&st), "index block 1 (records 256 to 511)");
    try t.expectDenseGather(r2, &data, 1, &.{ 255, 512 }, 1);
    root.zr_reader_free(r2);
    freed2 = true;
    td.removeStore("e", 2);
    try td.deinitExpectEmpty();
}

/// Rewrites index.zrs and the group sums from index.zri (s = 8, g = 10, one group), and
/// reseals the header: a store whose parts agree with a changed index.
fn resealParts(td: *const TempDir, store: []const u8) !void {
    var b1: [64]u8 = undefined;
    const index = try t.readAlloc(td, t.storeFile(&b1, store, "index.zri"));
    defer gpa.free(index);
    var sums: [4 * 8]u8 = undefined;
    for (0..4) |b| {
        const begin = b * 256 * 24;
        const block = index[begin..@min(begin + 256 * 24, index.len)];
        std.mem.writeInt(u64, sums[8 * b ..][0..8], format.xxh64(block), .little);
    }
    try t.patchFile(td, t.storeFile(&b1, store, "index.zrs"), 0, &sums);
    const header = try t.readAlloc(td, t.storeFile(&b1, store, "header.zrh"));
    defer gpa.free(header);
    std.mem.writeInt(u64, header[152..160], format.xxh64(&sums), .little);
    t.sealHeader(header);
    try t.patchFile(td, t.storeFile(&b1, store, "header.zrh"), 0, header);
}

test "index parts by part: a damaged sum group fails the reads of all its blocks" {
    var td: TempDir = .{};
    try td.init();
    var data: [records_count]u8 = undefined;
    const r = try openDamaged(&td, &data, "index.zrs", 8 * 3 + 2);
    var freed = false;
    defer if (!freed) root.zr_reader_free(r);
    try expectReadsFail(r, &.{ 0, 999 }, .checksum, "sum group 0 (index blocks 0 to 3, records 0 to 999)");
    var st: Status = undefined;
    try testing.expectEqual(abi.Result.checksum.code(), root.zr_reader_verify(r, 0, records_count, &st));
    // Freed first: Windows deletes no file that a view maps.
    root.zr_reader_free(r);
    freed = true;
    td.removeStore("s", 2);
    try td.deinitExpectEmpty();
}

test "index parts by part: a block is judged against the sum its group passed with, not one read again" {
    // After group 0 passed (a read of block 0), block 2 of index.zri and its sum in index.zrs
    // are changed to agree with each other (the group sum in the header no longer does). A
    // reader that read the block sum from index.zrs again would accept the changed block; one
    // that compares with the sums its group was judged with refuses it ([ZR-PRT-005]).
    var td: TempDir = .{};
    try td.init();
    var data: [records_count]u8 = undefined;
    var b1: [64]u8 = undefined;
    try writeParts(&td, "s", &data);
    const r = try t.openOk(&td, "s");
    var freed = false;
    defer if (!freed) root.zr_reader_free(r);
    try t.expectDenseGather(r, &data, 1, &.{0}, 1);
    try t.patchFile(&td, t.storeFile(&b1, "s", "index.zri"), 600 * 24 + 16, &.{0x5a});
    const index = try t.readAlloc(&td, t.storeFile(&b1, "s", "index.zri"));
    defer gpa.free(index);
    var sum: [8]u8 = undefined;
    std.mem.writeInt(u64, &sum, format.xxh64(index[512 * 24 .. 768 * 24]), .little);
    try t.patchFile(&td, t.storeFile(&b1, "s", "index.zrs"), 8 * 2, &sum);
    try expectReadsFail(r, &.{600}, .checksum, "index block 2 (records 512 to 767) does not match");
    // Freed first: Windows deletes no file that a view maps.
    root.zr_reader_free(r);
    freed = true;
    td.removeStore("s", 2);
    try td.deinitExpectEmpty();
}

test "index parts by part: concurrent first reads of one block judge it and read right" {
    var td: TempDir = .{};
    try td.init();
    var data: [records_count]u8 = undefined;
    try writeParts(&td, "s", &data);
    const r = try t.openOk(&td, "s");
    var freed = false;
    defer if (!freed) root.zr_reader_free(r);
    const Worker = struct {
        fn run(rd: *Reader, bytes: []const u8, k: usize, failures: *std.atomic.Value(u32)) void {
            var st: Status = undefined;
            // Every thread reads records of block 1 first, then of every block.
            for (0..40) |j| {
                const rec: u64 = if (j < 20) 256 + (k * 7 + j) % 256 else (k * 131 + j * 37) % records_count;
                var out: [1]u8 = undefined;
                const idx = [_]u64{rec};
                if (root.zr_reader_gather_dense(rd, &idx, 1, &out, 1, 1, &st) != 0 or out[0] != bytes[@intCast(rec)]) {
                    _ = failures.fetchAdd(1, .monotonic);
                }
            }
        }
    };
    var failures: std.atomic.Value(u32) = .init(0);
    var threads: [8]std.Thread = undefined;
    for (&threads, 0..) |*th, k| th.* = try std.Thread.spawn(.{}, Worker.run, .{ r, &data, k, &failures });
    for (threads) |th| th.join();
    try testing.expectEqual(@as(u32, 0), failures.load(.monotonic));
    // Each block judged once: the stripes' locks let no block be judged twice.
    try testing.expectEqual(@as(u64, 4), lazyOf(r).judged.load(.monotonic));
    // Freed first: Windows deletes no file that a view maps.
    root.zr_reader_free(r);
    freed = true;
    td.removeStore("s", 2);
    try td.deinitExpectEmpty();
}

/// A run of one part, `first` = `last` = `part`.
fn want(file: u32, part: u64, start: u64, end: u64) abi.IndexWant {
    return .{ .file = file, .reserved = 0, .first = part, .last = part, .start = start, .end = end };
}

test "index parts: index_wants names the parts a batch needs until they pass, and locate judges them first" {
    var td: TempDir = .{};
    try td.init();
    var data: [records_count]u8 = undefined;
    try writeParts(&td, "s", &data);
    const r = try t.openOk(&td, "s");
    var st: Status = undefined;
    const idx = [_]u64{ 999, 0, 1 };
    var wants: [2 * idx.len]abi.IndexWant = undefined;
    var found: u64 = 0;
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_index_wants(r, &idx, idx.len, &wants, &found, &st));
    // Per record not judged: its sum group (index.zrs bytes of all 4 block sums), then its
    // block (index.zri bytes of its 256 or 232 entries of 24 bytes).
    try testing.expectEqual(@as(u64, 6), found);
    // Hinting what they need judges nothing and skips an index out of range (advice: the
    // gather that follows refuses it); no array for records is refused.
    const with_bad = [_]u64{ 999, records_count, 0 };
    var passed: u32 = 9;
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_hint_index(r, &with_bad, with_bad.len, &passed, &st));
    try testing.expectEqual(@as(u64, 0), lazyOf(r).judged.load(.monotonic));
    try testing.expectEqual(@as(u32, 0), passed);
    try testing.expectEqual(@as(c_int, t.ZR_E_INVALID_ARGUMENT), root.zr_reader_hint_index(r, null, 1, null, &st));
    try testing.expectEqual(want(abi.part_groups, 0, 0, 32), wants[0]);
    try testing.expectEqual(want(abi.part_blocks, 3, 768 * 24, 1000 * 24), wants[1]);
    try testing.expectEqual(want(abi.part_blocks, 0, 0, 256 * 24), wants[3]);
    var shards: [idx.len]u64 = undefined;
    var offsets: [idx.len]u64 = undefined;
    var sizes: [idx.len]u64 = undefined;
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_locate(r, &idx, idx.len, &shards, &offsets, &sizes, &st));
    // What index.zri says of each record.
    for (idx, 0..) |rec, i| {
        const e = try t.entryOf(&td, "s", rec, 24);
        try testing.expectEqual(@as(u64, e.shard), shards[i]);
        try testing.expectEqual(e.offset, offsets[i]);
        try testing.expectEqual(@as(u64, 1), sizes[i]);
    }
    try testing.expect(shards[0] != shards[1]);
    // Judged: nothing more is wanted for them; an index out of range is refused.
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_index_wants(r, &idx, idx.len, &wants, &found, &st));
    try testing.expectEqual(@as(u64, 0), found);
    const bad = [_]u64{1000};
    try testing.expectEqual(abi.Result.index.code(), root.zr_reader_index_wants(r, &bad, 1, &wants, &found, &st));
    try testing.expectEqual(abi.Result.index.code(), root.zr_reader_locate(r, &bad, 1, &shards, &offsets, &sizes, &st));
    // Every part judged (verify): nothing is left to hint, and the caller is told so.
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_verify(r, 0, records_count, &st));
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_hint_index(r, null, 1, &passed, &st));
    try testing.expectEqual(@as(u32, 1), passed);
    root.zr_reader_free(r);
    td.removeStore("s", 2);
}

test "index parts: locate fails on a damaged block as a gather would, naming the part" {
    var td: TempDir = .{};
    try td.init();
    var data: [records_count]u8 = undefined;
    try writeParts(&td, "s", &data);
    var b1: [64]u8 = undefined;
    try t.flipByte(&td, t.storeFile(&b1, "s", "index.zri"), 300 * 24 + 13); // block 1
    const r = try t.openOk(&td, "s");
    var st: Status = undefined;
    var shards: [1]u64 = undefined;
    var offsets: [1]u64 = undefined;
    var sizes: [1]u64 = undefined;
    const ok = [_]u64{5};
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_locate(r, &ok, 1, &shards, &offsets, &sizes, &st));
    const damaged = [_]u64{300};
    const rc = root.zr_reader_locate(r, &damaged, 1, &shards, &offsets, &sizes, &st);
    try testing.expectEqual(abi.Result.checksum.code(), rc);
    try t.expectContains(t.msg(&st), "index block 1 (records 256 to 511)");
    root.zr_reader_free(r);
    td.removeStore("s", 2);
}
