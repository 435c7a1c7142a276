//! Opening a store: the store directory and its files, the header, the shard mappings, the
//! index, and every check of the spec that needs no record data; and the layout check that
//! whole-store verification adds.
//!
//! Invariants:
//! - Open checks every rule of the spec that needs no record data: the header (§3), each
//!   shard's size, the index's size and checksum, and every index entry in isolation (§4), in
//!   the order of spec §9 ([ZR-ERR-003]). After open, every entry's byte range lies inside its
//!   shard's mapping, so gathers index the mappings without further bounds doubt.
//! - The store directory is opened once (a symbolic link to it is followed) and every store
//!   file is opened relative to it with O_NOFOLLOW and checked to be a regular file
//!   ([ZR-GEN-004]), so every byte the reader reads, hashes or sizes belongs to a file inside
//!   the store. Messages never echo a checksum the reader computed.
//! - Sizes read from disk are checked before anything is allocated from them: the header
//!   against `format.header_size_bytes_max`, the index against the header and the file. An
//!   index larger than `index_check_chunk_bytes` must also match its checksum, streamed
//!   through a buffer of that size, before its copy is allocated: open allocates memory in
//!   proportion to the index only once its bytes are the ones the header sealed, never to what
//!   a (sparse) file claims. Open takes O(header + index) time.

const std = @import("std");
const abi = @import("abi.zig");
const diag_mod = @import("diag.zig");
const format = @import("format.zig");
const sys = @import("sys.zig");
const codec = @import("codec.zig");
const zstd_dict = @import("zstd_dict.zig");
const gather = @import("gather.zig");
const Reader = @import("reader.zig").Reader;

const Diag = diag_mod.Diag;
const Error = diag_mod.Error;
const alloc = std.heap.c_allocator;

/// An index larger than this is streamed through a buffer of this size to check its checksum
/// before the reader allocates its copy; a smaller one is read once, straight into the copy.
pub const index_check_chunk_bytes: usize = 1 << 20;

pub fn open(path_c: [*:0]const u8, flags: u32, d: *Diag) Error!*Reader {
    const path = std.mem.sliceTo(path_c, 0);
    if (path.len == 0) return d.fail(error.InvalidArgument, "the store path is empty", .{});
    const dfd = sys.open(path_c, sys.O_RDONLY | sys.O_DIRECTORY, 0) catch {
        const e = sys.errno();
        if (e == sys.ENOENT) return d.failOs(error.NotFound, e, "store '{s}' does not exist", .{path});
        // [ZR-GEN-005]
        if (e == sys.ENOTDIR) return d.failOs(error.NotPublished, e, "'{s}' is not a " ++
            "directory, so it holds no published store; a zrecord store is a directory " ++
            "(ZR-GEN-005)", .{path});
        return d.failOs(error.Io, e, "cannot open store directory '{s}'", .{path});
    };
    defer sys.close(dfd);

    sys.watchForks();
    gather.zr_guard_install();
    const header_bytes = try readHeader(dfd, path, d);
    var name_buf: [4096 + 16]u8 = undefined;
    const hname = std.fmt.bufPrint(&name_buf, "{s}/header.zrh", .{path}) catch "header.zrh";
    const h = format.decodeHeader(header_bytes, hname, d) catch |err| {
        alloc.free(header_bytes);
        return err;
    };
    const r = try Reader.create(path, h, header_bytes, flags, d);
    errdefer r.free();
    // [ZR-COD-002] decodeHeader has verified dict_checksum ([ZR-HDR-013]); a malformed
    // zstd-format dictionary is rejected here, used by a record or not ([ZR-COD-004]).
    if (h.codec == .zstd_dict) {
        // [ZR-COD-010] .. [ZR-COD-012] checked here, by spec section 6.3, so that the
        // message says which rule; libzstd then compiles what passed.
        if (zstd_dict.check(r.dict())) |problem| return d.fail(error.Corrupt, "store '{s}': the " ++
            "{d}-byte zstd-format dictionary in header.zrh is malformed: {s} (ZR-COD-004, {s})", .{ path, h.dict_size, problem.what, problem.rule });
        r.ddict = codec.SharedDict.initDecompress(r.dict()) catch |err| switch (err) {
            error.OutOfMemory => return d.noMemory("the decompression dictionary"),
            else => return d.fail(error.Corrupt, "store '{s}': the {d}-byte dictionary in " ++
                "header.zrh is not a valid zstd dictionary (it has the zstd dictionary magic " ++
                "but malformed entropy tables), so no record can be decoded (ZR-COD-004)", .{ path, h.dict_size }),
        };
    }
    try mapShards(r, dfd, d);
    if (r.bypass) try openDirect(r, dfd, d);
    try readIndex(r, dfd, d);
    try validateIndex(r, d);
    const words: usize = @intCast((h.record_count + 63) / 64);
    r.verified = alloc.alloc(u64, words) catch return d.noMemory("the verification bitmap");
    @memset(r.verified, 0);
    return r;
}

fn readHeader(dfd: sys.Fd, path: []const u8, d: *Diag) Error![]u8 {
    // [ZR-PUB-004]
    const st = try openRegular(dfd, path, "header.zrh", d) orelse return d.failOs(error.NotPublished,
        sys.ENOENT, "'{s}' has no header.zrh: it is not a published zrecord store (an " ++
        "unfinished or aborted write leaves such a directory) (ZR-PUB-004)", .{path});
    const hfd = st.fd;
    defer sys.close(hfd);
    // The magic and version are judged before the size, so that a file of another kind or
    // a newer major is reported as such ([ZR-HDR-002]).
    var prefix: [12]u8 = undefined;
    const prefix_len: usize = @intCast(@min(st.size, prefix.len));
    var short = false;
    sys.preadAll(hfd, prefix[0..prefix_len], 0, &short) catch return readError(d, path, "header.zrh", short);
    var name_buf: [4096 + 16]u8 = undefined;
    const hname = std.fmt.bufPrint(&name_buf, "{s}/header.zrh", .{path}) catch "header.zrh";
    try format.checkMagicVersion(prefix[0..prefix_len], hname, d);
    if (st.size > format.header_size_bytes_max) {
        return d.fail(error.Corrupt, "'{s}' has {d} bytes, more than the largest valid " ++
            "header ({d} bytes) (ZR-HDR-022)", .{ hname, st.size, format.header_size_bytes_max });
    }
    const bytes = alloc.alloc(u8, @intCast(st.size)) catch return d.noMemory("the header");
    errdefer alloc.free(bytes);
    sys.preadAll(hfd, bytes, 0, &short) catch return readError(d, path, "header.zrh", short);
    return bytes;
}

fn mapShards(r: *Reader, dfd: sys.Fd, d: *Diag) Error!void {
    var name_buf: [16]u8 = undefined;
    for (0..r.header.data_shards) |k| {
        const name = std.fmt.bufPrintSentinel(&name_buf, "data-{d:0>3}.zrd", .{k}, 0) catch unreachable;
        d.shard = @intCast(k);
        // [ZR-GEN-001]
        const st = try openRegular(dfd, r.path, name, d) orelse return d.failOs(error.Corrupt,
            sys.ENOENT, "store '{s}' is missing its shard file {s} (the header names {d} " ++
            "shards) (ZR-GEN-001)", .{ r.path, name, r.header.data_shards });
        const fd = st.fd;
        // Kept open for the pread path; releaseFiles closes it, on failure too.
        r.fds[k] = fd;
        // [ZR-HDR-010]
        const want = r.header.shard_sizes[k];
        if (st.size != want) return d.fail(error.Corrupt, "'{s}/{s}' has {d} bytes, but the " ++
            "header's shard_sizes says {d} (ZR-HDR-010)", .{ r.path, name, st.size, want });
        if (st.size == 0) continue;
        const len = std.math.cast(usize, st.size) orelse return d.fail(error.LimitExceeded, "" ++
            "'{s}/{s}' is too large to map on this platform", .{ r.path, name });
        r.maps[k] = sys.mmapRead(fd, len) catch {
            const e = sys.errno();
            return d.failOs(if (e == sys.ENOMEM) error.OutOfMemory else error.Io, e, "cannot map " ++
                "'{s}/{s}' ({d} bytes)", .{ r.path, name, st.size });
        };
        r.guard_ranges[k] = .{ .base = r.maps[k].ptr, .len = r.maps[k].len };
        // Gathers touch records in random order; read-ahead would mostly fetch pages that
        // the batch does not use.
        sys.madvise(r.maps[k], sys.MADV_RANDOM);
        sys.fadvise(fd, sys.POSIX_FADV_RANDOM);
    }
    d.shard = -1;
}

/// Opens every non-empty shard a second time with O_DIRECT, for `bypass`, and checks that
/// it is still the regular file of the size `mapShards` found (a file swapped in between
/// would also fail every record's checksum).
fn openDirect(r: *Reader, dfd: sys.Fd, d: *Diag) Error!void {
    var name_buf: [16]u8 = undefined;
    for (0..r.header.data_shards) |k| {
        if (r.maps[k].len == 0) continue;
        const name = std.fmt.bufPrintSentinel(&name_buf, "data-{d:0>3}.zrd", .{k}, 0) catch unreachable;
        d.shard = @intCast(k);
        const fd = sys.openAt(dfd, name, sys.O_RDONLY | sys.O_NONBLOCK | sys.O_NOFOLLOW | sys.O_DIRECT, 0) catch {
            const e = sys.errno();
            if (e == sys.EINVAL) return d.failOs(error.Io, e, "cannot bypass the page cache for " ++
                "'{s}/{s}': its file system does not support O_DIRECT reads; open the store " ++
                "without cache bypass", .{ r.path, name });
            return d.failOs(error.Io, e, "cannot open '{s}/{s}' for reads that bypass the page cache", .{ r.path, name });
        };
        r.direct_fds[k] = fd;
        const st = sys.fstat(fd) catch return d.failOs(error.Io, sys.errno(), "cannot stat '{s}/{s}'", .{ r.path, name });
        if (st.kind != .regular or st.size != r.header.shard_sizes[k]) return d.fail(error.Corrupt, "" ++
            "'{s}/{s}' changed while the store was opened", .{ r.path, name });
    }
    d.shard = -1;
}

fn readIndex(r: *Reader, dfd: sys.Fd, d: *Diag) Error!void {
    const st = try openRegular(dfd, r.path, "index.zri", d) orelse return d.failOs(error.Corrupt,
        sys.ENOENT, "store '{s}' is missing its index.zri (ZR-GEN-001)", .{r.path});
    const fd = st.fd;
    defer sys.close(fd);
    // [ZR-HDR-011] The size is checked before the index is allocated.
    if (st.size != r.header.index_size) return d.fail(error.Corrupt, "'{s}/index.zri' has " ++
        "{d} bytes, but the header's index_size says {d} (ZR-HDR-011)", .{ r.path, st.size, r.header.index_size });
    const len = std.math.cast(usize, st.size) orelse return d.fail(error.LimitExceeded, "" ++
        "'{s}/index.zri' is too large for this platform", .{r.path});
    // [ZR-HDR-011] A header can claim an index of any size that a sparse file (no byte on
    // disk) matches, so the checksum is checked first, by streaming the file through a
    // fixed buffer; only an index whose bytes are the ones the header sealed is copied.
    if (len > index_check_chunk_bytes) {
        const buf = alloc.alloc(u8, index_check_chunk_bytes) catch return d.noMemory("a buffer to check the index");
        defer alloc.free(buf);
        if (try hashFile(fd, len, buf, r.path, "index.zri", d) != r.header.index_checksum) return indexChecksumError(r, d);
    }
    r.index = alloc.alloc(u8, len) catch return d.noMemory("the index");
    // The copy is hashed too: it, not the file, is what open validates and gathers use,
    // and the file may have changed since the first pass.
    if (try hashFile(fd, len, r.index, r.path, "index.zri", d) != r.header.index_checksum) return indexChecksumError(r, d);
}

fn validateIndex(r: *Reader, d: *Diag) Error!void {
    var shard_sums: [format.data_shards_max]u64 = @splat(0);
    var logical_sum: u64 = 0;
    var i: u64 = 0;
    while (i < r.header.record_count) : (i += 1) {
        const bytes = r.entryBytes(i);
        const logical = try format.validateEntry(&r.header, bytes, i, r.path, d);
        // Saturating sums: a crafted index cannot wrap them around to the expected value.
        const e = format.decodeEntry(bytes);
        shard_sums[e.shard] +|= e.stored_size;
        logical_sum +|= logical;
    }
    // [ZR-DAT-001]
    for (0..r.header.data_shards) |k| {
        if (shard_sums[k] != r.header.shard_sizes[k]) {
            d.shard = @intCast(k);
            return d.fail(error.Corrupt, "store '{s}': the records of data-{d:0>3}.zrd add up to " ++
                "{d} stored bytes, but the file has {d}; a shard holds only record bytes " ++
                "(ZR-DAT-001)", .{ r.path, k, shard_sums[k], r.header.shard_sizes[k] });
        }
    }
    if (logical_sum != r.header.logical_bytes) return d.fail(error.Corrupt, "store '{s}': the " ++
        "records add up to {d} logical bytes, but the header's logical_bytes says {d}", .{ r.path, logical_sum, r.header.logical_bytes });
    var stored_sum: u64 = 0;
    for (shard_sums[0..r.header.data_shards]) |sum| stored_sum +|= sum;
    r.pread_every_record = r.header.record_count > 0 and
        stored_sum / r.header.record_count >= gather.pread_record_bytes_min;
}

/// Checks that every byte of every shard lies in exactly one record's stored range
/// ([ZR-IDX-006], [ZR-DAT-001]), so that the record checksums cover every stored byte.
/// Open checks each range against its shard and the sums against the shard sizes, but
/// ranges that overlap and still add up leave other bytes under no checksum at all.
///
/// One pass in record order with a cursor per shard proves a shard whose records lie back
/// to back in record order, as every writer of this package lays them out; it needs no
/// memory. A shard laid out in another order (valid: spec §5) is sorted by offset, which
/// takes 16 bytes per record of that shard for the length of the check.
pub fn checkLayout(r: *const Reader, d: *Diag) Error!void {
    const shards = r.header.data_shards;
    var cursor: [format.data_shards_max]u64 = @splat(0);
    var in_order: std.StaticBitSet(format.data_shards_max) = .full;
    var i: u64 = 0;
    while (i < r.header.record_count) : (i += 1) {
        const e = format.decodeEntry(r.entryBytes(i));
        if (e.stored_size == 0 or !in_order.isSet(e.shard)) continue;
        if (e.offset == cursor[e.shard]) {
            cursor[e.shard] += e.stored_size;
        } else in_order.unset(e.shard);
    }
    for (0..shards) |k| {
        if (in_order.isSet(k)) {
            // Back to back from 0: no overlap, and no gap unless the end falls short.
            if (cursor[k] == r.header.shard_sizes[k]) continue;
            return layoutError(r, d, @intCast(k), .{ .begin = cursor[k], .end = r.header.shard_sizes[k] }, null);
        }
        try checkShardLayoutSorted(r, @intCast(k), d);
    }
}

const Span = struct { begin: u64, end: u64 };
const Overlap = struct { span: Span, first: u64, second: u64 };
const Placed = struct { offset: u64, rec: u64 };

fn placedBefore(_: void, a: Placed, b: Placed) bool {
    return a.offset < b.offset or (a.offset == b.offset and a.rec < b.rec);
}

/// checkLayout for one shard whose records are not back to back in record order.
fn checkShardLayoutSorted(r: *const Reader, k: u8, d: *Diag) Error!void {
    var count: usize = 0;
    var i: u64 = 0;
    while (i < r.header.record_count) : (i += 1) {
        const e = format.decodeEntry(r.entryBytes(i));
        if (e.shard == k and e.stored_size > 0) count += 1;
    }
    const placed = alloc.alloc(Placed, count) catch return d.noMemory("the sorted record ranges of a shard for verify");
    defer alloc.free(placed);
    var n: usize = 0;
    i = 0;
    while (i < r.header.record_count) : (i += 1) {
        const e = format.decodeEntry(r.entryBytes(i));
        if (e.shard != k or e.stored_size == 0) continue;
        placed[n] = .{ .offset = e.offset, .rec = i };
        n += 1;
    }
    std.sort.pdq(Placed, placed, {}, placedBefore);
    var covered: u64 = 0;
    // The record whose range reaches `covered`.
    var reaching: u64 = 0;
    var gap: ?Span = null;
    var overlap: ?Overlap = null;
    for (placed) |p| {
        const end = p.offset + format.decodeEntry(r.entryBytes(p.rec)).stored_size;
        if (p.offset > covered) {
            if (gap == null) gap = .{ .begin = covered, .end = p.offset };
        } else if (p.offset < covered and overlap == null) {
            overlap = .{ .span = .{ .begin = p.offset, .end = @min(covered, end) }, .first = reaching, .second = p.rec };
        }
        if (end > covered) {
            covered = end;
            reaching = p.rec;
        }
    }
    if (covered < r.header.shard_sizes[k] and gap == null) gap = .{ .begin = covered, .end = r.header.shard_sizes[k] };
    if (gap != null or overlap != null) return layoutError(r, d, k, gap, overlap);
}

fn layoutError(r: *const Reader, d: *Diag, k: u8, gap: ?Span, overlap: ?Overlap) Error {
    d.shard = k;
    const head = "store '{s}': the records' stored ranges do not cover data-{d:0>3}.zrd exactly once, " ++
        "so some of its bytes are under no checksum: ";
    const tail = " (ZR-IDX-006, ZR-DAT-001)";
    if (overlap) |o| {
        d.record = @intCast(o.second);
        if (gap) |g| return d.fail(error.Corrupt, head ++ "bytes [{d}, {d}) belong to no record, " ++
            "and bytes [{d}, {d}) to both record {d} and record {d}" ++ tail, .{
            r.path, k, g.begin, g.end, o.span.begin, o.span.end, o.first, o.second,
        });
        return d.fail(error.Corrupt, head ++ "bytes [{d}, {d}) belong to both record {d} and " ++
            "record {d}" ++ tail, .{ r.path, k, o.span.begin, o.span.end, o.first, o.second });
    }
    const g = gap.?;
    return d.fail(error.Corrupt, head ++ "bytes [{d}, {d}) belong to no record" ++ tail, .{ r.path, k, g.begin, g.end });
}

/// Reads the first `len` bytes of `fd` and returns their XXH64: into `buf` itself when it
/// holds them all, else through it chunk by chunk. Each chunk is hashed as soon as it is read,
/// while it is in the cache.
fn hashFile(fd: sys.Fd, len: usize, buf: []u8, path: []const u8, name: []const u8, d: *Diag) Error!u64 {
    var hasher = format.XxHash64.init(0);
    var off: usize = 0;
    while (off < len) {
        const chunk = if (buf.len >= len) buf[off..][0..@min(index_check_chunk_bytes, len - off)] else buf[0..@min(buf.len, len - off)];
        var short = false;
        sys.preadAll(fd, chunk, off, &short) catch return readError(d, path, name, short);
        hasher.update(chunk);
        off += chunk.len;
    }
    return hasher.final();
}

fn indexChecksumError(r: *const Reader, d: *Diag) Error {
    return d.fail(error.ChecksumMismatch, "'{s}/index.zri' does not match the header's " ++
        "index_checksum 0x{x:0>16} (ZR-HDR-011)", .{ r.path, r.header.index_checksum });
}

/// Opens a store file for reading, relative to the store directory ([ZR-GEN-004]).
/// O_NOFOLLOW: a symbolic link in the file's place fails with ELOOP instead of being followed
/// to a file outside the store, whose size and checksums messages would otherwise disclose.
/// O_NONBLOCK: a FIFO in the file's place must be refused by the caller's regular-file check,
/// not block this open until some writer opens it.
fn openStoreFile(dfd: sys.Fd, name: [*:0]const u8) sys.OsError!sys.Fd {
    return sys.openAt(dfd, name, sys.O_RDONLY | sys.O_NONBLOCK | sys.O_NOFOLLOW, 0);
}

/// A store file opened with `openStoreFile` and checked to be a regular file, with its size.
const StoreFile = struct { fd: sys.Fd, size: u64 };

/// Opens store file `name` and checks that it is a regular file; null (errno ENOENT) when it
/// does not exist, which each caller reports by the rule it breaks. The caller closes `fd`.
fn openRegular(dfd: sys.Fd, path: []const u8, name: [:0]const u8, d: *Diag) Error!?StoreFile {
    const fd = openStoreFile(dfd, name) catch {
        const e = sys.errno();
        if (e == sys.ENOENT) return null;
        if (e == sys.ELOOP) return linkError(d, path, name);
        // A socket cannot be opened at all ([ZR-GEN-004]: not a regular file).
        if (e == sys.ENXIO) return d.fail(error.Corrupt, "'{s}/{s}' is not a regular file (ZR-GEN-004)", .{ path, name });
        return d.failOs(error.Io, e, "cannot open '{s}/{s}'", .{ path, name });
    };
    errdefer sys.close(fd);
    const st = sys.fstat(fd) catch return d.failOs(error.Io, sys.errno(), "cannot stat " ++
        "'{s}/{s}'", .{ path, name });
    if (st.kind != .regular) return d.fail(error.Corrupt, "'{s}/{s}' is not a regular file (ZR-GEN-004)", .{ path, name });
    return .{ .fd = fd, .size = st.size };
}

fn linkError(d: *Diag, path: []const u8, name: []const u8) Error {
    return d.fail(error.Corrupt, "'{s}/{s}' is a symbolic link; every file of a store must be a " ++
        "regular file inside the store directory, and links are not followed (ZR-GEN-004)", .{ path, name });
}

fn readError(d: *Diag, path: []const u8, name: []const u8, short: bool) Error {
    if (short) return d.fail(error.Corrupt, "'{s}/{s}' ended while it was read: the file " ++
        "changed size", .{ path, name });
    return d.failOs(error.Io, sys.errno(), "reading '{s}/{s}' failed", .{ path, name });
}

// ---- tests ------------------------------------------------------------------------------

extern "c" fn mkfifo(path: [*:0]const u8, mode: c_uint) c_int;

test "a FIFO in place of a store file is refused at open, not waited on" {
    // Found by review of the fuzz harness's file mutations: open(2) of a FIFO for reading
    // blocks until a writer appears, so before O_NONBLOCK such a store hung its opener forever.
    const t = @import("testing.zig");
    const root = @import("root.zig");
    var td: t.TempDir = .{};
    try td.init();
    const names = [_][]const u8{ "header.zrh", "index.zri", "data-000.zrd" };
    const data = [_]u8{ 1, 2, 3, 4 };
    for (names, 0..) |name, k| {
        var sbuf: [8]u8 = undefined;
        const store = std.fmt.bufPrint(&sbuf, "s{d}", .{k}) catch unreachable;
        try t.writeDense(&td, store, 0, "", 1, 2, &data, &.{2});
        var rbuf: [64]u8 = undefined;
        const rel = std.fmt.bufPrint(&rbuf, "{s}/{s}", .{ store, name }) catch unreachable;
        var pbuf: [256]u8 = undefined;
        try sys.unlinkAt(sys.AT_FDCWD, td.sub(&pbuf, rel));
        try std.testing.expectEqual(@as(c_int, 0), mkfifo(td.sub(&pbuf, rel), 0o600));
        var st: abi.Status = undefined;
        var r: ?*Reader = null;
        try std.testing.expectEqual(abi.Result.corrupt.code(), root.zr_reader_open(td.sub(&pbuf, store), &r, &st));
        try t.expectContains(t.msg(&st), name);
        try t.expectContains(t.msg(&st), "not a regular file");
        try std.testing.expect(r == null);
        td.removeStore(store, 1);
    }
    try td.deinitExpectEmpty();
}

extern "c" fn symlink(target: [*:0]const u8, link: [*:0]const u8) c_int;

test "a symbolic link in place of a store file is refused at open, not followed" {
    // [R1] item 4: a shard linked to a file outside the store was read, and its size and the
    // checksums of its bytes appeared in messages ([ZR-GEN-004]).
    const t = @import("testing.zig");
    const root = @import("root.zig");
    var td: t.TempDir = .{};
    try td.init();
    const names = [_][]const u8{ "header.zrh", "index.zri", "data-000.zrd" };
    const data = [_]u8{ 1, 2, 3, 4 };
    var pbuf: [256]u8 = undefined;
    var tbuf: [256]u8 = undefined;
    for (names, 0..) |name, k| {
        var sbuf: [8]u8 = undefined;
        const store = std.fmt.bufPrint(&sbuf, "s{d}", .{k}) catch unreachable;
        try t.writeDense(&td, store, 0, "", 1, 2, &data, &.{2});
        var rbuf: [64]u8 = undefined;
        const rel = std.fmt.bufPrint(&rbuf, "{s}/{s}", .{ store, name }) catch unreachable;
        // The link points at the store's own file, moved out of the store: the same bytes, the
        // same size, so nothing but the link itself is wrong.
        const target = td.sub(&tbuf, "outside");
        try std.testing.expectEqual(@as(c_int, 0), std.c.rename(td.sub(&pbuf, rel), target));
        try std.testing.expectEqual(@as(c_int, 0), symlink(target, td.sub(&pbuf, rel)));
        var st: abi.Status = undefined;
        var r: ?*Reader = null;
        try std.testing.expectEqual(abi.Result.corrupt.code(), root.zr_reader_open(td.sub(&pbuf, store), &r, &st));
        try t.expectContains(t.msg(&st), name);
        try t.expectContains(t.msg(&st), "symbolic link");
        try std.testing.expect(r == null);
        try sys.unlinkAt(sys.AT_FDCWD, td.sub(&pbuf, "outside"));
        td.removeStore(store, 1);
    }
    try td.deinitExpectEmpty();
}


test "an index larger than the check buffer is checked in chunks before it is copied" {
    // [R1] item 8: open used to allocate what index.zri claimed before its checksum said
    // anything. An index above index_check_chunk_bytes is now hashed through that buffer
    // first; a valid one opens and reads, a byte changed in its last chunk fails open.
    const t = @import("testing.zig");
    const root = @import("root.zig");
    const gpa = std.testing.allocator;
    var td: t.TempDir = .{};
    try td.init();
    const n = index_check_chunk_bytes / format.index_entry_fixed_bytes + 1000;
    const data = try gpa.alloc(u8, n);
    defer gpa.free(data);
    for (data, 0..) |*b, i| b.* = t.pattern(i);
    try t.writeDense(&td, "s", 0, "", 2, 1, data, &.{n});
    const r = try t.openOk(&td, "s");
    try std.testing.expect(r.index.len > index_check_chunk_bytes);
    try t.expectDenseGather(r, data, 1, &.{ n - 1, 0, n / 2 }, 1);
    root.zr_reader_free(r);
    // The reserved bytes of the last entry: past the first chunk, and caught by the checksum.
    try t.patchFile(&td, "s/index.zri", (n - 1) * format.index_entry_fixed_bytes + 13, &.{1});
    var pbuf: [256]u8 = undefined;
    var st: abi.Status = undefined;
    var r2: ?*Reader = null;
    try std.testing.expectEqual(abi.Result.checksum.code(), root.zr_reader_open(td.sub(&pbuf, "s"), &r2, &st));
    try t.expectContains(t.msg(&st), "index.zri");
    td.removeStore("s", 2);
    try td.deinitExpectEmpty();
}

test "the layout check finds bytes no record covers, in record order or not" {
    // [R1] item 10: overlapping entries whose sizes add up left shard bytes under no checksum.
    // The entries of an opened reader's private index copy are rewritten in place: the layout
    // check reads only offsets, sizes and shards.
    const t = @import("testing.zig");
    const root = @import("root.zig");
    var td: t.TempDir = .{};
    try td.init();
    var data: [4 * 8]u8 = undefined;
    for (&data, 0..) |*b, i| b.* = t.pattern(i);
    try t.writeDense(&td, "s", 0, "", 1, 8, &data, &.{4});
    const r = try t.openOk(&td, "s");
    var d: Diag = .{};
    try checkLayout(r, &d);
    const index: []u8 = @constCast(r.index);
    const es = r.entry_size;
    // Records 1 and 2 swap places: out of record order, still exact.
    std.mem.writeInt(u64, index[1 * es ..][0..8], 16, .little);
    std.mem.writeInt(u64, index[2 * es ..][0..8], 8, .little);
    try checkLayout(r, &d);
    // Record 3 moves onto record 0's second half: [4, 12) twice-covered, [24, 32) uncovered.
    std.mem.writeInt(u64, index[3 * es ..][0..8], 4, .little);
    try std.testing.expectError(error.Corrupt, checkLayout(r, &d));
    try t.expectContains(d.text(), "data-000.zrd");
    try t.expectContains(d.text(), "bytes [24, 32) belong to no record");
    try t.expectContains(d.text(), "bytes [4, 8) to both record 0 and record 3");
    try std.testing.expectEqual(@as(i32, 0), d.shard);
    root.zr_reader_free(r);
    td.removeStore("s", 1);
    try td.deinitExpectEmpty();
}
