//! Helpers shared by the Zig test files: a fresh folder per test, stores written and read
//! through the C ABI, files patched in place, messages checked, data made.
//!
//! Invariants:
//! - Each test works in its own fresh directory under /tmp (`TempDir`) and removes it at the
//!   end; a test that leaves anything behind fails (the final rmdir needs an empty directory).
//! - Helpers go through the C ABI (root.zig), as every binding does, unless a name says
//!   otherwise; they fail the calling test with the call's message when a call fails.

const std = @import("std");
const root = @import("root.zig");
const abi = @import("abi.zig");
const sys = @import("sys.zig");
const format = @import("format.zig");
const compact = @import("compact.zig");
const Reader = @import("reader.zig").Reader;
const Writer = @import("writer.zig").Writer;

const testing = std.testing;
const gpa = testing.allocator;
const Status = abi.Status;

pub const ZR_E_INVALID_ARGUMENT = abi.Result.invalid_argument.code();
pub const ZR_E_IO = abi.Result.io.code();
pub const ZR_E_NOT_FOUND = abi.Result.not_found.code();
pub const ZR_E_EXISTS = abi.Result.exists.code();
pub const ZR_E_NO_MEMORY = abi.Result.no_memory.code();
pub const ZR_E_INDEX = abi.Result.index.code();
pub const ZR_E_CLOSED = abi.Result.closed.code();
pub const ZR_E_BAD_MAGIC = abi.Result.bad_magic.code();
pub const ZR_E_VERSION = abi.Result.version.code();
pub const ZR_E_CORRUPT = abi.Result.corrupt.code();
pub const ZR_E_CHECKSUM = abi.Result.checksum.code();
pub const ZR_E_NOT_PUBLISHED = abi.Result.not_published.code();
pub const ZR_E_UNSUPPORTED = abi.Result.unsupported.code();
pub const ZR_E_LIMIT = abi.Result.limit.code();
pub const ZR_E_DECODE = abi.Result.decode.code();
pub const ZR_E_IMMUTABLE = abi.Result.immutable.code();

pub const codec_raw: u8 = 0;
pub const codec_zstd: u8 = 1;
pub const codec_zstd_dict: u8 = 2;
pub const dtype_uint8: u8 = 3;

extern "c" fn getenv(name: [*:0]const u8) ?[*:0]const u8;

/// A new private folder for a test, `{tmp}/{prefix}-{pid}-{random}`, its path in `out`: tmp is
/// /tmp on POSIX systems and %TEMP% on Windows.
pub fn makeTempDir(out: []u8, prefix: []const u8) ![:0]u8 {
    const windows = @import("builtin").os.tag == .windows;
    const base = if (windows) std.mem.sliceTo(getenv("TEMP") orelse "C:\\Windows\\Temp", 0) else "/tmp";
    const args = .{ base, prefix, sys.getpid(), sys.randomU64() };
    const path = try std.fmt.bufPrintSentinel(out, "{s}/{s}-{d}-{x}", args, 0);
    sys.mkdir(path, 0o700) catch return error.MkdirFailed;
    return path;
}

/// Whether the tests run on Windows, where some of them cannot (no fork, FIFO or chmod; a
/// mapped file cannot be truncated; symbolic links need a privilege).
pub const on_windows = @import("builtin").os.tag == .windows;

/// Cuts the file `rel` of the test's folder to `len` bytes.
pub fn truncateFile(td: *const TempDir, rel: []const u8, len: u64) !void {
    var buf: [256]u8 = undefined;
    const fd = try sys.open(td.sub(&buf, rel), sys.O_RDWR, 0);
    defer sys.close(fd);
    try sys.setFileSize(fd, len);
}

/// Whether the tests run under Wine (its ntdll exports wine_get_version), which emulates some
/// Windows behaviour with the host's: its byte-range locks are the process's, as POSIX
/// fcntl locks are, where Windows' belong to a handle.
pub fn underWine() bool {
    if (!on_windows) return false;
    const w = struct {
        extern "kernel32" fn GetModuleHandleA(name: [*:0]const u8) callconv(.winapi) ?*anyopaque;
        extern "kernel32" fn GetProcAddress(module: *anyopaque, name: [*:0]const u8) callconv(.winapi) ?*anyopaque;
    };
    const ntdll = w.GetModuleHandleA("ntdll.dll") orelse return false;
    return w.GetProcAddress(ntdll, "wine_get_version") != null;
}

pub const TempDir = struct {
    buf: [256]u8 = undefined,
    len: usize = 0,

    pub fn init(t: *TempDir) !void {
        t.len = (try makeTempDir(&t.buf, "zrecord-test")).len;
    }

    pub fn sub(t: *const TempDir, buf: []u8, name: []const u8) [:0]u8 {
        return std.fmt.bufPrintSentinel(buf, "{s}/{s}", .{ t.buf[0..t.len], name }, 0) catch unreachable;
    }

    /// Removes a published store (its files are known) and then the temp dir, which must be
    /// empty by then.
    pub fn removeStore(t: *const TempDir, name: []const u8, shards: usize) void {
        var buf: [256]u8 = undefined;
        const p = t.sub(&buf, name);
        const dfd = sys.open(p, sys.O_RDONLY | sys.O_DIRECTORY, 0) catch return;
        defer sys.close(dfd);
        var nb: [16]u8 = undefined;
        for (0..shards) |k| {
            sys.unlinkAt(dfd, std.fmt.bufPrintSentinel(&nb, "data-{d:0>3}.zrd", .{k}, 0) catch unreachable) catch {};
        }
        sys.unlinkAt(dfd, "index.zri") catch {};
        sys.unlinkAt(dfd, "index.zrs") catch {};
        sys.unlinkAt(dfd, "header.zrh") catch {};
        sys.rmdir(p) catch {};
    }

    pub fn deinitExpectEmpty(t: *TempDir) !void {
        const p: [*:0]const u8 = @ptrCast(&t.buf);
        rmdirSettled(p) catch return error.TempDirNotEmpty;
    }
};

/// How long `rmdirSettled` waits for entries deleted while another handle held them open.
const settle_ns: u64 = 10 * std.time.ns_per_s;

/// Removes the empty folder `path`, waiting up to `settle_ns` for what another handle keeps in
/// it: on Windows (and Wine) a file deleted while a handle holds it open stays until that
/// handle is closed, and so does a folder deleted while one is open. The index cache's pruning
/// runs on a detached thread holding its folder and its stamp file open until it ends
/// (index_cache.maybePrune), which can be after the test that wrote the cache has removed
/// them; under load it was (three tests of the cache failed under Wine, CI beside other
/// work). A folder that something else keeps non-empty still fails, after the wait.
pub fn rmdirSettled(path: [*:0]const u8) sys.OsError!void {
    const deadline = sys.monotonicNs() + settle_ns;
    while (true) {
        sys.rmdir(path) catch |err| {
            if (sys.monotonicNs() > deadline) return err;
            sys.sleepNs(10 * std.time.ns_per_ms);
            continue;
        };
        return;
    }
}

pub fn schemaOf(kind: u8, dtype: u8, shape: []const u64, shards: u8) abi.Schema {
    var s = std.mem.zeroes(abi.Schema);
    s.kind = kind;
    s.dtype = dtype;
    s.ndim = @intCast(shape.len);
    s.codec = 0;
    s.data_shards = shards;
    @memcpy(s.item_shape[0..shape.len], shape);
    return s;
}

pub fn msg(st: *const Status) []const u8 {
    return std.mem.sliceTo(&st.message, 0);
}

pub fn expectContains(hay: []const u8, needle: []const u8) !void {
    if (std.mem.indexOf(u8, hay, needle) == null) {
        std.debug.print("message '{s}' lacks '{s}'\n", .{ hay, needle });
        return error.TestExpectedContains;
    }
}

pub fn pattern(i: usize) u8 {
    return @truncate(i *% 131 +% 7);
}

pub fn patchFile(td: *const TempDir, rel: []const u8, offset: u64, bytes: []const u8) !void {
    var pbuf: [256]u8 = undefined;
    const p = td.sub(&pbuf, rel);
    const fd = try sys.open(p, sys.O_WRONLY, 0);
    defer sys.close(fd);
    try sys.pwriteAll(fd, bytes, offset);
}

pub fn schemaWith(kind: u8, dtype: u8, shape: []const u64, shards: u8, codec: u8) abi.Schema {
    var s = schemaOf(kind, dtype, shape, shards);
    s.codec = codec;
    return s;
}

/// Text-like bytes: they compress well, but not to nothing.
pub fn fillWords(random: std.Random, buf: []u8) void {
    const words = [_][]const u8{ "alpha ", "beta ", "gamma ", "delta ", "epsilon ", "zeta ", "eta " };
    var i: usize = 0;
    while (i < buf.len) {
        const word = words[random.uintLessThan(usize, words.len)];
        const n = @min(word.len, buf.len - i);
        @memcpy(buf[i..][0..n], word[0..n]);
        i += n;
    }
}

/// `count` similar small JSON rows, as a store of user records might hold: their
/// concatenation (owned by the caller) and their sizes.
pub fn makeRows(random: std.Random, sizes: []u64) ![]u8 {
    var list: std.ArrayList(u8) = .empty;
    errdefer list.deinit(gpa);
    const names = [_][]const u8{ "ada", "grace", "linus", "ken", "barbara", "edsger" };
    const cities = [_][]const u8{ "London", "Paris", "Zurich", "Oslo", "Lisbon" };
    var line: [256]u8 = undefined;
    for (sizes) |*size| {
        const text = try std.fmt.bufPrint(&line,
            \\{{"id":{d},"name":"{s}","city":"{s}","score":{d},"active":{s},"tags":["user","v2"]}}
        , .{
            random.int(u32),
            names[random.uintLessThan(usize, names.len)],
            cities[random.uintLessThan(usize, cities.len)],
            random.uintLessThan(u32, 100000),
            if (random.boolean()) "true" else "false",
        });
        try list.appendSlice(gpa, text);
        size.* = text.len;
    }
    return list.toOwnedSlice(gpa);
}

/// Trains a dictionary on 2000 rows through the ABI; returns its length in `out`.
pub fn trainRowsDict(out: []u8) !usize {
    var prng = std.Random.DefaultPrng.init(42);
    var sizes: [2000]u64 = undefined;
    const rows = try makeRows(prng.random(), &sizes);
    defer gpa.free(rows);
    var st: Status = undefined;
    var len: u64 = 0;
    try testing.expectEqual(
        @as(c_int, 0),
        root.zr_train_dict(rows.ptr, rows.len, &sizes, sizes.len, out.ptr, out.len, &len, &st),
    );
    try testing.expect(len > 0 and len <= out.len);
    return @intCast(len);
}

pub fn openOk(td: *const TempDir, name: []const u8) !*Reader {
    var pbuf: [256]u8 = undefined;
    var st: Status = undefined;
    var r: ?*Reader = null;
    const rc = root.zr_reader_open(td.sub(&pbuf, name), &r, &st);
    if (rc != 0) std.debug.print("open failed: {s}\n", .{msg(&st)});
    try testing.expectEqual(@as(c_int, 0), rc);
    return r.?;
}

pub fn readAlloc(td: *const TempDir, rel: []const u8) ![]u8 {
    var pbuf: [256]u8 = undefined;
    const fd = try sys.open(td.sub(&pbuf, rel), sys.O_RDONLY, 0);
    defer sys.close(fd);
    const size: usize = @intCast((try sys.fstat(fd)).size);
    const buf = try gpa.alloc(u8, size);
    errdefer gpa.free(buf);
    var short = false;
    try sys.preadAll(fd, buf, 0, &short);
    return buf;
}

pub fn storeFile(buf: []u8, store: []const u8, file: []const u8) []const u8 {
    return std.fmt.bufPrint(buf, "{s}/{s}", .{ store, file }) catch unreachable;
}

pub fn sealHeader(header: []u8) void {
    std.mem.writeInt(u64, header[header.len - 8 ..][0..8], format.xxh64(header[0 .. header.len - 8]), .little);
}

/// Rewrites store `store`'s index checksum and header checksum to match its index.zri as it is.
pub fn resealIndex(td: *const TempDir, store: []const u8) !void {
    var b1: [128]u8 = undefined;
    const header = try readAlloc(td, storeFile(&b1, store, "header.zrh"));
    defer gpa.free(header);
    const index = try readAlloc(td, storeFile(&b1, store, "index.zri"));
    defer gpa.free(index);
    std.mem.writeInt(u64, header[64..72], format.xxh64(index), .little);
    sealHeader(header);
    try patchFile(td, storeFile(&b1, store, "header.zrh"), 0, header);
}

pub fn entryOf(td: *const TempDir, store: []const u8, rec: u64, es: usize) !format.Entry {
    var b1: [128]u8 = undefined;
    const index = try readAlloc(td, storeFile(&b1, store, "index.zri"));
    defer gpa.free(index);
    return format.decodeEntry(index[@intCast(rec * es)..][0..es]);
}

/// Writes `n` Dense records of `rs` uint8 bytes (text-like, from `data`) in calls of the
/// given sizes.
pub fn writeDense(
    td: *const TempDir,
    name: []const u8,
    codec: u8,
    dict: []const u8,
    shards: u8,
    rs: u64,
    data: []const u8,
    calls: []const usize,
) !void {
    return writeDenseFlags(td, name, codec, dict, shards, rs, data, calls, abi.write_no_sync);
}

/// writeDense with the given ZR_WRITE_* flags.
pub fn writeDenseFlags(
    td: *const TempDir,
    name: []const u8,
    codec: u8,
    dict: []const u8,
    shards: u8,
    rs: u64,
    data: []const u8,
    calls: []const usize,
    flags: u32,
) !void {
    var pbuf: [256]u8 = undefined;
    var st: Status = undefined;
    const schema = schemaWith(1, dtype_uint8, &.{rs}, shards, codec);
    var w: ?*Writer = null;
    const dict_ptr: ?[*]const u8 = if (dict.len > 0) dict.ptr else null;
    const rc = root.zr_writer_open(td.sub(&pbuf, name), &schema, dict_ptr, dict.len, flags, &w, &st);
    if (rc != 0) std.debug.print("writer_open failed: {s}\n", .{msg(&st)});
    try testing.expectEqual(@as(c_int, 0), rc);
    defer root.zr_writer_free(w);
    var done: usize = 0;
    for (calls) |n| {
        const bytes = n * rs;
        const p: ?*const anyopaque = if (bytes == 0) null else @ptrCast(data[done * rs ..].ptr);
        try testing.expectEqual(@as(c_int, 0), root.zr_writer_append_dense(w, p, bytes, n, &st));
        done += n;
    }
    try testing.expectEqual(@as(u64, done), root.zr_writer_count(w));
    try testing.expectEqual(@as(c_int, 0), root.zr_writer_publish(w, &st));
}

pub fn expectDenseGather(r: *Reader, data: []const u8, rs: usize, idx: []const u64, threads: u32) !void {
    const out = try gpa.alloc(u8, idx.len * rs);
    defer gpa.free(out);
    @memset(out, 0xAA);
    var st: Status = undefined;
    const out_ptr = if (out.len > 0) out.ptr else null;
    const rc = root.zr_reader_gather_dense(r, idx.ptr, idx.len, out_ptr, out.len, threads, &st);
    if (rc != 0) std.debug.print("gather_dense failed: {s}\n", .{msg(&st)});
    try testing.expectEqual(@as(c_int, 0), rc);
    for (idx, 0..) |rec, j| try testing.expectEqualSlices(u8, data[@intCast(rec * rs)..][0..rs], out[j * rs ..][0..rs]);
}

/// Inverts one byte of a file.
pub fn flipByte(td: *const TempDir, rel: []const u8, offset: u64) !void {
    var pbuf: [256]u8 = undefined;
    const fd = try sys.open(td.sub(&pbuf, rel), sys.O_RDONLY, 0);
    var b: [1]u8 = undefined;
    var short = false;
    sys.preadAll(fd, &b, offset, &short) catch |err| {
        sys.close(fd);
        return err;
    };
    sys.close(fd);
    b[0] = ~b[0];
    try patchFile(td, rel, offset, &b);
}

pub fn randomBytes(seed: u64, len: usize) ![]u8 {
    const buf = try gpa.alloc(u8, len);
    var prng = std.Random.DefaultPrng.init(seed);
    prng.random().bytes(buf);
    return buf;
}

/// Flushes a store's shard files and asks the kernel to drop them from the page cache; returns
/// whether the first page of every non-empty shard is gone (a tmpfs keeps them).
pub fn evict(td: *const TempDir, store: []const u8, shards: usize) !bool {
    var gone = true;
    for (0..shards) |k| {
        var rbuf: [64]u8 = undefined;
        const rel = try std.fmt.bufPrint(&rbuf, "{s}/data-{d:0>3}.zrd", .{ store, k });
        var pbuf: [256]u8 = undefined;
        const fd = try sys.open(td.sub(&pbuf, rel), sys.O_RDONLY, 0);
        defer sys.close(fd);
        try sys.fsync(fd);
        sys.fadviseRange(fd, 0, std.math.maxInt(i64), .dontneed);
        const size = (try sys.fstat(fd)).size;
        if (size == 0) continue;
        const map = try sys.mmapRead(fd, @intCast(size));
        defer sys.munmap(map);
        var vec: [1]u8 = undefined;
        if (sys.resident(map.ptr, 1, &vec) orelse true) gone = false;
    }
    return gone;
}

/// Writes `recs` as the Ragged store "r" of `td`, in two appends, and returns their logical
/// size in bytes.
fn writeRaggedInTwoCalls(td: *const TempDir, codec: u8, dict: []const u8, shards: u8, recs: []const []const u8) !u64 {
    var pbuf: [256]u8 = undefined;
    var st: Status = undefined;
    const schema = schemaWith(2, dtype_uint8, &.{0}, shards, codec);
    var w: ?*Writer = null;
    const dict_ptr: ?[*]const u8 = if (dict.len > 0) dict.ptr else null;
    try testing.expectEqual(
        @as(c_int, 0),
        root.zr_writer_open(td.sub(&pbuf, "r"), &schema, dict_ptr, dict.len, 1, &w, &st),
    );
    const ptrs = try gpa.alloc(u64, recs.len);
    defer gpa.free(ptrs);
    const shapes = try gpa.alloc(u64, recs.len);
    defer gpa.free(shapes);
    var logical: u64 = 0;
    for (recs, ptrs, shapes) |rec, *p, *s| {
        p.* = if (rec.len == 0) 0 else @intFromPtr(rec.ptr);
        s.* = rec.len;
        logical += rec.len;
    }
    // Two calls, so that the second one's offsets start past the first one's frames.
    const half = recs.len / 2;
    try testing.expectEqual(@as(c_int, 0), root.zr_writer_append_ragged(w, ptrs.ptr, shapes.ptr, half, &st));
    try testing.expectEqual(
        @as(c_int, 0),
        root.zr_writer_append_ragged(w, ptrs[half..].ptr, shapes[half..].ptr, recs.len - half, &st),
    );
    try testing.expectEqual(@as(c_int, 0), root.zr_writer_publish(w, &st));
    root.zr_writer_free(w);
    return logical;
}

/// Writes the given Ragged uint8 records, checks shapes, gather (in `idx` order) and verify.
pub fn raggedRoundTrip(
    td: *const TempDir,
    codec: u8,
    dict: []const u8,
    shards: u8,
    recs: []const []const u8,
    idx: []const u64,
    threads: u32,
) !u64 {
    const logical = try writeRaggedInTwoCalls(td, codec, dict, shards, recs);
    var st: Status = undefined;
    const r = try openOk(td, "r");
    defer root.zr_reader_free(r);
    var info: abi.Info = undefined;
    root.zr_reader_info(r, &info);
    try testing.expectEqual(logical, info.logical_bytes);
    const out_shapes = try gpa.alloc(u64, idx.len);
    defer gpa.free(out_shapes);
    const sizes = try gpa.alloc(u64, idx.len);
    defer gpa.free(sizes);
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_shapes(r, idx.ptr, idx.len, out_shapes.ptr, sizes.ptr, &st));
    const offsets = try gpa.alloc(u64, idx.len);
    defer gpa.free(offsets);
    var total: u64 = 0;
    for (idx, 0..) |rec, j| {
        try testing.expectEqual(@as(u64, recs[@intCast(rec)].len), out_shapes[j]);
        try testing.expectEqual(@as(u64, recs[@intCast(rec)].len), sizes[j]);
        offsets[j] = total;
        total += sizes[j];
    }
    const out = try gpa.alloc(u8, @intCast(total));
    defer gpa.free(out);
    const out_ptr = if (total > 0) out.ptr else null;
    const rc = root.zr_reader_gather_ragged(r, idx.ptr, idx.len, out_ptr, offsets.ptr, sizes.ptr, total, threads, &st);
    if (rc != 0) std.debug.print("gather_ragged failed: {s}\n", .{msg(&st)});
    try testing.expectEqual(@as(c_int, 0), rc);
    for (idx, 0..) |rec, j| {
        try testing.expectEqualSlices(u8, recs[@intCast(rec)], out[@intCast(offsets[j])..][0..@intCast(sizes[j])]);
    }
    if (total > 0) {
        // An output one byte short of the last record is refused before anything is decoded.
        try testing.expectEqual(
            @as(c_int, ZR_E_INVALID_ARGUMENT),
            root.zr_reader_gather_ragged(r, idx.ptr, idx.len, out.ptr, offsets.ptr, null, total - 1, threads, &st),
        );
        // So is a slot of another size than its record's, which still fits the output.
        var last: usize = 0;
        while (sizes[last] == 0) last += 1;
        sizes[last] -= 1;
        try testing.expectEqual(
            @as(c_int, ZR_E_INVALID_ARGUMENT),
            root.zr_reader_gather_ragged(r, idx.ptr, idx.len, out.ptr, offsets.ptr, sizes.ptr, total, threads, &st),
        );
        sizes[last] += 1;
    }
    try testing.expectEqual(@as(c_int, 0), root.zr_reader_verify(r, 0, recs.len, &st));
    return info.stored_bytes;
}

/// The region checksums and the header checksum of the compact index file `bytes` made to
/// match, as a crafted file would have them, where the header's regions lie inside the file; a
/// file whose regions do not is left for the checks.
pub fn resealCompact(bytes: []u8) void {
    var h = std.mem.bytesToValue(compact.FileHeader, bytes[0..@sizeOf(compact.FileHeader)]);
    const regions = [_]struct { at: u64, len: u64, sum: *u64 }{
        .{ .at = h.headers_at, .len = h.headers_len, .sum = &h.headers_checksum },
        .{ .at = h.bits_at, .len = h.bits_len, .sum = &h.bits_checksum },
        .{ .at = h.sums_at, .len = h.sums_len, .sum = &h.sums_checksum },
    };
    for (regions) |r| {
        const end = std.math.add(u64, r.at, r.len) catch continue;
        if (end > bytes.len) continue;
        r.sum.* = format.xxh64(bytes[@intCast(r.at)..@intCast(end)]);
    }
    h.seal();
    @memcpy(bytes[0..@sizeOf(compact.FileHeader)], std.mem.asBytes(&h));
}
