//! End-to-end tests of the compact index and its cache folder through the C ABI: an index is
//! built, written to the cache, and loaded by later opens; a cache file that is damaged, stale
//! or crafted is never trusted to send a read outside the store.
//!
//! Invariants:
//! - As in tests.zig, each test works in its own fresh directory under /tmp (the cache folder
//!   inside it) and removes it; a test that leaves anything behind fails.

const std = @import("std");
const root = @import("root.zig");
const abi = @import("abi.zig");
const sys = @import("sys.zig");
const format = @import("format.zig");
const compact = @import("compact.zig");
const index_cache = @import("index_cache.zig");
const t = @import("testing.zig");
const Reader = @import("reader.zig").Reader;
const IndexSource = @import("reader.zig").IndexSource;

const testing = std.testing;
const gpa = testing.allocator;
const Status = abi.Status;
const TempDir = t.TempDir;

fn openWith(td: *const TempDir, store: []const u8, flags: u32) !*Reader {
    var pbuf: [256]u8 = undefined;
    var cbuf: [256]u8 = undefined;
    // Every index uses the folder, however small (the default leaves small ones in memory).
    const opts: abi.OpenOpts = .{
        .flags = flags,
        .reserved = 0,
        .index_cache = td.sub(&cbuf, "cache"),
        .index_cache_records_min = 1,
    };
    var st: Status = undefined;
    var r: ?*Reader = null;
    const rc = root.zr_reader_open_opts(td.sub(&pbuf, store), &opts, &r, &st);
    if (rc != 0) std.debug.print("open failed: {s}\n", .{t.msg(&st)});
    try testing.expectEqual(@as(c_int, 0), rc);
    return r.?;
}

fn sourceOf(r: *const Reader) IndexSource {
    var info: abi.IndexInfo = undefined;
    root.zr_reader_index_info(r, &info);
    return @fromBackingInt(@intCast(info.source));
}

/// The one cache file of the test's cache folder; its name goes into `buf`.
fn cacheFile(td: *const TempDir, buf: []u8) ![:0]const u8 {
    var cbuf: [256]u8 = undefined;
    const fd = try sys.open(td.sub(&cbuf, "cache"), sys.O_RDONLY | sys.O_DIRECTORY, 0);
    defer sys.close(fd);
    var dir = sys.Dir.open(fd) orelse return error.NoDir;
    defer dir.close();
    var found: ?[:0]const u8 = null;
    while (dir.next()) |name| {
        // The folder's pruning stamp (index_cache.maybePrune) is no cache file.
        if (std.mem.startsWith(u8, name, ".prune-stamp-")) continue;
        try testing.expect(found == null);
        found = try std.fmt.bufPrintSentinel(buf, "cache/{s}", .{name}, 0);
    }
    return found orelse error.NoCacheFile;
}

/// Waits for a pruning of the test's cache folder to end: its thread holds the stamp's lock
/// until it is done (index_cache.maybePrune).
fn waitPruned(td: *const TempDir) !void {
    var cbuf: [256]u8 = undefined;
    var nbuf: [64]u8 = undefined;
    const rel = try std.fmt.bufPrint(&nbuf, "cache/.prune-stamp-{d}", .{sys.geteuid()});
    const fd = sys.open(td.sub(&cbuf, rel), sys.O_RDWR, 0) catch return;
    defer sys.close(fd);
    try sys.flock(fd, sys.LOCK_EX);
    try sys.flock(fd, sys.LOCK_UN);
}

/// Removes the cache folder and every file in it.
fn removeCache(td: *const TempDir) void {
    var cbuf: [256]u8 = undefined;
    const path = td.sub(&cbuf, "cache");
    unlinkAll(path);
    // Closed first: waiting on a folder that this test holds open would wait for itself.
    t.rmdirSettled(path) catch {};
}

/// Unlinks the files of folder `path` (at most 8, of names under 128 bytes: a cache's).
fn unlinkAll(path: [:0]const u8) void {
    const fd = sys.open(path, sys.O_RDONLY | sys.O_DIRECTORY, 0) catch return;
    defer sys.close(fd);
    var names: [8][128]u8 = undefined;
    var count: usize = 0;
    if (sys.Dir.open(fd)) |dir_const| {
        var dir = dir_const;
        defer dir.close();
        while (dir.next()) |name| : (count += 1) {
            if (count == names.len or name.len >= names[0].len) break;
            @memcpy(names[count][0 .. name.len + 1], name[0 .. name.len + 1]);
        }
    }
    for (names[0..count]) |*name| sys.unlinkAt(fd, @ptrCast(name)) catch {};
}

fn writeTokens(td: *const TempDir, n: usize) ![]const []const u8 {
    const recs = try gpa.alloc([]const u8, n);
    var prng = std.Random.DefaultPrng.init(5);
    for (recs, 0..) |*rec, i| {
        const buf = try gpa.alloc(u8, prng.random().intRangeAtMost(usize, 0, 300));
        for (buf, 0..) |*b, k| b.* = t.pattern(i + k);
        rec.* = buf;
    }
    _ = try t.raggedRoundTrip(td, t.codec_raw, "", 3, recs, &.{ 0, @intCast(n - 1), @intCast(n / 2) }, 1);
    return recs;
}

fn freeTokens(recs: []const []const u8) void {
    for (recs) |rec| gpa.free(rec);
    gpa.free(recs);
}

/// A store "r" of `n` Ragged records of 0 to 300 bytes in three shards, in a fresh folder with a
/// cache folder beside it.
const Tokens = struct {
    td: TempDir = .{},
    recs: []const []const u8 = &.{},

    /// `primed`: opened once, so that the cache folder holds its compact index, and the
    /// pruning that first write started (on a thread of its own) ended: a test that then
    /// damages the cache file would race it.
    fn init(f: *Tokens, n: usize, primed: bool) !void {
        try f.td.init();
        f.recs = try writeTokens(&f.td, n);
        if (primed) {
            root.zr_reader_free(try openWith(&f.td, "r", 0));
            try waitPruned(&f.td);
        }
    }

    fn deinit(f: *Tokens) !void {
        freeTokens(f.recs);
        removeCache(&f.td);
        f.td.removeStore("r", 3);
        try f.td.deinitExpectEmpty();
    }
};

fn expectRagged(r: *Reader, recs: []const []const u8, idx: []const u64) !void {
    var total: usize = 0;
    for (idx) |i| total += recs[@intCast(i)].len;
    const out = try gpa.alloc(u8, total + 1);
    defer gpa.free(out);
    const offsets = try gpa.alloc(u64, idx.len);
    defer gpa.free(offsets);
    var at: u64 = 0;
    for (idx, offsets) |i, *o| {
        o.* = at;
        at += recs[@intCast(i)].len;
    }
    var st: Status = undefined;
    const rc = root.zr_reader_gather_ragged(r, idx.ptr, idx.len, out.ptr, offsets.ptr, null, out.len, 1, &st);
    if (rc != 0) std.debug.print("gather_ragged failed: {s}\n", .{t.msg(&st)});
    try testing.expectEqual(@as(c_int, 0), rc);
    for (idx, offsets) |i, o| {
        try testing.expectEqualSlices(u8, recs[@intCast(i)], out[@intCast(o)..][0..recs[@intCast(i)].len]);
    }
}

test "the first open builds the compact index into the cache, later opens load it and read the same" {
    // [ZR-ERR-006] the later open relies on the first one's validation of the same index file.
    const n = 1000;
    var f: Tokens = .{};
    try f.init(n, false);
    const td = &f.td;
    const recs = f.recs;
    const idx = [_]u64{ 999, 0, 500, 63, 64, 65, 128, 3 };
    const r1 = try openWith(td, "r", 0);
    try testing.expectEqual(IndexSource.built_cached, sourceOf(r1));
    try expectRagged(r1, recs, &idx);
    const r2 = try openWith(td, "r", 0);
    try testing.expectEqual(IndexSource.cached, sourceOf(r2));
    try expectRagged(r2, recs, &idx);
    var st: Status = undefined;
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_verify(r2, 0, n, &st));
    // Three shards of records of 0 to 300 bytes, back to back: far below the 32 bytes of
    // their index entries, 4 of them the checksum's low half.
    var info: abi.IndexInfo = undefined;
    root.zr_reader_index_info(r2, &info);
    try testing.expect(info.resident_bytes < 10 * n);
    // Full validation builds again, and replaces the file.
    const r3 = try openWith(td, "r", abi.open_validate_index);
    // Windows replaces no file that a view maps (r1's and r2's): the rebuilt index stays in
    // its unnamed temporary file there.
    try testing.expectEqual(if (t.on_windows) IndexSource.built else IndexSource.built_cached, sourceOf(r3));
    try expectRagged(r3, recs, &idx);
    for ([_]*Reader{ r1, r2, r3 }) |r| root.zr_reader_free(r);
    // Without a cache folder nothing is written.
    const r4 = try t.openOk(td, "r");
    try testing.expectEqual(IndexSource.built, sourceOf(r4));
    root.zr_reader_free(r4);
    try f.deinit();
}

test "a damaged, truncated or stale cache file is not used: the index is built again" {
    // [ZR-ERR-006] a record that is not complete, fails its own checksums, or was made from
    // another version of index.zri is not relied on.
    const n = 300;
    var f: Tokens = .{};
    try f.init(n, true);
    const td = &f.td;
    const recs = f.recs;
    const idx = [_]u64{ 299, 0, 150 };
    var nbuf: [256]u8 = undefined;
    for (0..3) |damage| {
        const rel = try cacheFile(td, &nbuf);
        switch (damage) {
            // A flipped bit in the bit fields: their checksum fails.
            0 => {
                const bytes = try t.readAlloc(td, rel);
                defer gpa.free(bytes);
                const h = std.mem.bytesToValue(compact.FileHeader, bytes[0..@sizeOf(compact.FileHeader)]);
                const last: usize = @intCast(h.bits_at + h.bits_len - compact.bits_padding - 1);
                try t.patchFile(td, rel, last, &.{~bytes[last]});
            },
            1 => try t.truncateFile(td, rel, 200),
            // index.zri rewritten with the same bytes: its identity changes.
            else => {
                const index = try t.readAlloc(td, "r/index.zri");
                defer gpa.free(index);
                try t.patchFile(td, "r/index.zri", 0, index);
            },
        }
        const r = try openWith(td, "r", 0);
        try testing.expectEqual(IndexSource.built_cached, sourceOf(r));
        try expectRagged(r, recs, &idx);
        root.zr_reader_free(r);
    }
    try f.deinit();
}

test "pruning removes a file only while it is the one judged: a fresh file renamed over it stays" {
    // A reader writes its cache file by renaming it over the name of the file it replaces,
    // which a pruning on another thread may have judged stale a moment before.
    var f: Tokens = .{};
    try f.init(300, true);
    const td = &f.td;
    var nbuf: [256]u8 = undefined;
    const rel = try cacheFile(td, &nbuf);
    var pbuf: [256]u8 = undefined;
    var qbuf: [256]u8 = undefined;
    const path = td.sub(&pbuf, rel);
    const judged = blk: {
        const fd = try sys.open(path, sys.O_RDONLY, 0);
        defer sys.close(fd);
        break :blk try sys.fileIdentity(fd);
    };
    // Another file, as a reader writes it, renamed over the judged one.
    const bytes = try t.readAlloc(td, rel);
    defer gpa.free(bytes);
    const fresh = td.sub(&qbuf, "cache/fresh.tmp");
    {
        const fd = try sys.open(fresh, sys.O_WRONLY | sys.O_CREAT | sys.O_EXCL, 0o600);
        defer sys.close(fd);
        try sys.pwriteAll(fd, bytes, 0);
    }
    try sys.rename(fresh, path);
    {
        // Closed before the folder is removed (Windows removes no folder held open).
        var cbuf: [256]u8 = undefined;
        const dfd = try sys.open(td.sub(&cbuf, "cache"), sys.O_RDONLY | sys.O_DIRECTORY, 0);
        defer sys.close(dfd);
        const name = path[std.mem.lastIndexOfScalar(u8, path, '/').? + 1 .. :0];
        try testing.expect(!index_cache.removeJudged(dfd, name, judged));
        _ = try cacheFile(td, &nbuf);
        // The file it judges now goes.
        const now = blk: {
            const fd = try sys.open(path, sys.O_RDONLY, 0);
            defer sys.close(fd);
            break :blk try sys.fileIdentity(fd);
        };
        try testing.expect(index_cache.removeJudged(dfd, name, now));
        try testing.expectError(error.NoCacheFile, cacheFile(td, &nbuf));
    }
    try f.deinit();
}

/// Edits the cache file of `f`'s store with `edit` (given the file's bytes and header), seals
/// it anew (the checksums of its regions and of its header made to match), and opens the store,
/// which must map the crafted file.
fn openCrafted(f: *Tokens, comptime edit: fn (bytes: []u8, h: compact.FileHeader) anyerror!void) !*Reader {
    var nbuf: [256]u8 = undefined;
    const rel = try cacheFile(&f.td, &nbuf);
    const bytes = try t.readAlloc(&f.td, rel);
    defer gpa.free(bytes);
    const h = std.mem.bytesToValue(compact.FileHeader, bytes[0..@sizeOf(compact.FileHeader)]);
    try edit(bytes, h);
    t.resealCompact(bytes);
    try t.patchFile(&f.td, rel, 0, bytes);
    const r = try openWith(&f.td, "r", 0);
    try testing.expectEqual(IndexSource.cached, sourceOf(r));
    return r;
}

/// A gather of `idx` fails as corrupt, naming the damaged cache file and record `rec`.
fn expectCacheDamaged(r: *Reader, idx: []const u64, rec: u64) !void {
    var out: [1 << 16]u8 = undefined;
    var offsets: [8]u64 = undefined;
    for (offsets[0..idx.len], 0..) |*o, i| o.* = 1024 * i;
    var st: Status = undefined;
    try testing.expectEqual(
        t.ZR_E_CORRUPT,
        root.zr_reader_gather_ragged(r, idx.ptr, idx.len, &out, &offsets, null, out.len, 1, &st),
    );
    try t.expectContains(t.msg(&st), "cache file is damaged");
    var buf: [32]u8 = undefined;
    try t.expectContains(t.msg(&st), try std.fmt.bufPrint(&buf, "record {d} ", .{rec}));
}

/// Block 2's offset base moved far past every shard's end.
fn moveBlock2(bytes: []u8, h: compact.FileHeader) !void {
    const blk_at: usize = @intCast(h.headers_at + 2 * compact.blockHeaderBytes(h.ndim));
    std.mem.writeInt(u64, bytes[blk_at..][0..8], 1 << 40, .little);
}

/// The low bit of record 131's stored size (block 2's fourth record) flipped: a raw record
/// whose stored size no longer matches its shape.
fn resizeRecord131(bytes: []u8, h: compact.FileHeader) !void {
    const blk_at: usize = @intCast(h.headers_at + 2 * compact.blockHeaderBytes(h.ndim));
    const fixed = std.mem.bytesToValue(compact.BlockFixed, bytes[blk_at..][0..@sizeOf(compact.BlockFixed)]);
    try testing.expect(fixed.stored_bits > 0);
    const pos: u64 = fixed.bits_at * 8 + 3 * @as(u64, fixed.record_bits) + fixed.offset_bits;
    bytes[@intCast(h.bits_at + pos / 8)] ^= @as(u8, 1) << @intCast(pos % 8);
}

test "a cache file sealed anew with a record outside its shard fails the gather, never reads outside" {
    // [ZR-ERR-007] what the cache file says is checked against the store before a read.
    const n = 300;
    var f: Tokens = .{};
    try f.init(n, true);
    const r = try openCrafted(&f, moveBlock2);
    // Block 0 is sound, block 2 (records 128..191) is not.
    try expectRagged(r, f.recs, &.{ 0, 5 });
    try expectCacheDamaged(r, &.{130}, 130);
    var st: Status = undefined;
    try testing.expectEqual(t.ZR_E_CORRUPT, root.zr_reader_verify(r, 0, n, &st));
    root.zr_reader_free(r);
    try f.deinit();
}

test "a gather checks each record it reads from a cache file, not only the first of its block" {
    // [ZR-ERR-007] gathers check single records of a cached index: one record that passed
    // must not vouch for a damaged neighbour in its block.
    const n = 300;
    var f: Tokens = .{};
    try f.init(n, true);
    const r = try openCrafted(&f, resizeRecord131);
    try expectRagged(r, f.recs, &.{ 128, 130, 132 });
    try expectCacheDamaged(r, &.{ 129, 131 }, 131);
    try expectRagged(r, f.recs, &.{129});
    var st: Status = undefined;
    try testing.expectEqual(t.ZR_E_CORRUPT, root.zr_reader_verify(r, 0, n, &st));
    root.zr_reader_free(r);
    try f.deinit();
}

test "verify of a reader whose index came from the cache checks index.zri itself" {
    // [ZR-ERR-007] a verification reads index.zri again, whatever was remembered.
    const n = 300;
    var f: Tokens = .{};
    try f.init(n, true);
    const td = &f.td;
    const r = try openWith(td, "r", 0);
    try testing.expectEqual(IndexSource.cached, sourceOf(r));
    // The index changes after open (an unchecked checksum byte of a record no gather read).
    try t.patchFile(td, "r/index.zri", 200 * 32 + 16, &.{0xEE});
    var st: Status = undefined;
    try testing.expectEqual(t.ZR_E_CHECKSUM, root.zr_reader_verify(r, 0, 1, &st));
    try t.expectContains(t.msg(&st), "index_checksum");
    root.zr_reader_free(r);
    try f.deinit();
}

test "fuzz: sealed cache files with random damage fail calls as corrupt, never read outside the store" {
    // [ZR-ERR-007] what a trusted cache file says is checked before a read: a file its own
    // user damaged and sealed anew can fail gathers, prefetches and verify, never crash them.
    const n = 300;
    var f: Tokens = .{};
    try f.init(n, true);
    const td = &f.td;
    var prng = std.Random.DefaultPrng.init(0x1dc);
    const random = prng.random();
    var nbuf: [256]u8 = undefined;
    var idx: [n]u64 = undefined;
    for (&idx, 0..) |*v, i| v.* = i;
    var cached: usize = 0;
    for (0..60) |_| {
        const rel = try cacheFile(td, &nbuf);
        const bytes = try t.readAlloc(td, rel);
        defer gpa.free(bytes);
        const h = std.mem.bytesToValue(compact.FileHeader, bytes[0..@sizeOf(compact.FileHeader)]);
        // Damage in the block headers and bit fields, where the places of records are.
        const first: usize = @intCast(h.headers_at);
        const last: usize = @intCast(h.bits_at + h.bits_len);
        for (0..random.intRangeAtMost(usize, 1, 6)) |_| {
            bytes[random.intRangeLessThan(usize, first, last)] ^= @as(u8, 1) << random.int(u3);
        }
        t.resealCompact(bytes);
        try t.patchFile(td, rel, 0, bytes);
        const r = try openWith(td, "r", 0);
        defer root.zr_reader_free(r);
        cached += @intFromBool(sourceOf(r) == .cached);
        var st: Status = undefined;
        const calls = [_]c_int{
            root.zr_reader_prefetch(r, &idx, n, &st),
            root.zr_reader_shapes(r, &idx, n, &shape_out, &size_out, &st),
            root.zr_reader_verify(r, 0, n, &st),
        };
        for (calls) |rc| if (rc != 0 and rc != t.ZR_E_CORRUPT and rc != t.ZR_E_CHECKSUM) {
            std.debug.print("unexpected result {d}: {s}\n", .{ rc, t.msg(&st) });
            return error.TestUnexpectedResult;
        };
        // Each record alone: a damaged one fails, the others read what was written.
        for (0..n) |i| gatherOne(r, f.recs, i) catch |err| switch (err) {
            error.Corrupt => {},
            else => return err,
        };
        // Full validation rebuilds the file for the next round.
        root.zr_reader_free(try openWith(td, "r", abi.open_validate_index));
    }
    try testing.expect(cached > 0);
    try f.deinit();
}

var shape_out: [300]u64 = undefined;
var size_out: [300]u64 = undefined;

/// Gathers record `i` alone: error.Corrupt where the call fails as corrupt or checksum; a
/// gather that succeeds must return the record's bytes.
fn gatherOne(r: *Reader, recs: []const []const u8, i: usize) !void {
    var out: [512]u8 = undefined;
    var offsets = [_]u64{0};
    var st: Status = undefined;
    const one = [_]u64{i};
    const rc = root.zr_reader_gather_ragged(r, &one, 1, &out, &offsets, null, out.len, 1, &st);
    if (rc == t.ZR_E_CORRUPT or rc == t.ZR_E_CHECKSUM) return error.Corrupt;
    if (rc != 0) {
        std.debug.print("unexpected result {d}: {s}\n", .{ rc, t.msg(&st) });
        return error.TestUnexpectedResult;
    }
    // A place changed by the damage holds other bytes, which fail the record's checksum.
    try testing.expectEqualSlices(u8, recs[i], out[0..recs[i].len]);
}

extern "c" fn chmod(path: [*:0]const u8, mode: c_uint) c_int;

test "a cache file that others may write is not trusted: the index is built again" {
    // Windows: no mode bits.
    if (comptime @import("builtin").os.tag == .windows) return error.SkipZigTest;
    // [ZR-ERR-008] only a file that this user owns and nobody else can write is relied on.
    const n = 300;
    var f: Tokens = .{};
    try f.init(n, true);
    var nbuf: [256]u8 = undefined;
    var pbuf: [256]u8 = undefined;
    for ([_]c_uint{ 0o620, 0o602 }) |mode| {
        const rel = try cacheFile(&f.td, &nbuf);
        try testing.expectEqual(@as(c_int, 0), chmod(f.td.sub(&pbuf, rel), mode));
        const r = try openWith(&f.td, "r", 0);
        try testing.expectEqual(IndexSource.built_cached, sourceOf(r));
        try expectRagged(r, f.recs, &.{ 0, 299 });
        root.zr_reader_free(r);
    }
    const r = try openWith(&f.td, "r", 0);
    try testing.expectEqual(IndexSource.cached, sourceOf(r));
    root.zr_reader_free(r);
    try f.deinit();
}

test "index parts: a cache file is keyed by index.zrs too, and a change of it builds again" {
    // Spec section 9.5: a remembered validation records the identity of both index files.
    var td: TempDir = .{};
    try td.init();
    var data: [600]u8 = undefined;
    for (&data, 0..) |*b, i| b.* = t.pattern(i);
    try t.writeDenseFlags(&td, "s", 0, "", 1, 1, &data, &.{600}, abi.write_no_sync | abi.write_index_parts);
    // A plain open without a cache file reads by part and writes none (it judged no part);
    // an open that judges the whole index writes one.
    var r = try openWith(&td, "s", 0);
    try testing.expectEqual(IndexSource.by_part, sourceOf(r));
    root.zr_reader_free(r);
    r = try openWith(&td, "s", abi.open_validate_index);
    try testing.expectEqual(IndexSource.built_cached, sourceOf(r));
    root.zr_reader_free(r);
    r = try openWith(&td, "s", 0);
    try testing.expectEqual(IndexSource.cached, sourceOf(r));
    try t.expectDenseGather(r, &data, 1, &.{ 599, 0, 300 }, 1);
    root.zr_reader_free(r);
    // The same bytes written again: index.zrs's time of change moves, index.zri's does not.
    var b1: [64]u8 = undefined;
    const sums = try t.readAlloc(&td, t.storeFile(&b1, "s", "index.zrs"));
    defer gpa.free(sums);
    sys.sleepNs(10 * std.time.ns_per_ms);
    try t.patchFile(&td, "s/index.zrs", 0, sums);
    r = try openWith(&td, "s", 0);
    try testing.expectEqual(IndexSource.by_part, sourceOf(r));
    var st: Status = undefined;
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_verify(r, 0, 600, &st));
    root.zr_reader_free(r);
    r = try openWith(&td, "s", abi.open_validate_index);
    try testing.expectEqual(IndexSource.built_cached, sourceOf(r));
    root.zr_reader_free(r);
    removeCache(&td);
    td.removeStore("s", 1);
    try td.deinitExpectEmpty();
}
