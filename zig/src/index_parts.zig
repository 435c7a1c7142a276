//! Index parts (format 1.2, spec §4.1) on the whole path: index.zrs at open (step 4.2), every
//! sum group against the header's group sums (step 4.3), and every index block against its
//! block sum (step 4.4), streamed beside the pass over index.zri that hashes the whole index
//! (step 4.5) and judges its entries (step 5).
//!
//! Invariants:
//! - The order of [ZR-PRT-010]: `checkGroups` judges every sum group before any block sum is
//!   used; a `BlockHasher` fails on the first block, in block order, that does not match its
//!   sum, and its caller reports that before the whole index's checksum and before any entry.
//! - A block sum is used only once its group passed: the block sums a `BlockHasher` reads are
//!   hashed again per group as they are read, and compared with the group sum when the group
//!   ends, so an index.zrs changed between `checkGroups` and the pass over index.zri is
//!   reported as its group's mismatch, not trusted.
//! - Memory is one buffer of block sums, whatever the store's size; nothing is allocated from
//!   a size read from disk.
//! - Errors name the part and the records it describes ([ZR-PRT-011]).

const std = @import("std");
const assert = std.debug.assert;
const diag_mod = @import("diag.zig");
const format = @import("format.zig");
const sys = @import("sys.zig");
const Reader = @import("reader.zig").Reader;

const Diag = diag_mod.Diag;
const Error = diag_mod.Error;

/// Block sums are read from index.zrs this many at a time.
pub const sums_buffer_count: usize = 8192;

/// The first and last record of index block `b` of the store (b < B).
fn blockRecords(h: *const format.Header, b: u64) [2]u64 {
    const first = b << @intCast(h.index_block_shift);
    const last = @min(first + ((@as(u64, 1) << @intCast(h.index_block_shift)) - 1), h.record_count - 1);
    return .{ first, last };
}

/// The first and last index block of sum group `t` (t < T).
fn groupBlocks(h: *const format.Header, t: u64) [2]u64 {
    const first = t << @intCast(h.index_group_shift);
    const last = @min(first + ((@as(u64, 1) << @intCast(h.index_group_shift)) - 1), h.blockCount() - 1);
    return .{ first, last };
}

pub fn groupError(r: *const Reader, t: u64, d: *Diag) Error {
    const h = &r.header;
    const blocks = groupBlocks(h, t);
    d.record = -1;
    d.shard = -1;
    return d.fail(error.ChecksumMismatch, "'{s}/index.zrs': sum group {d} (index blocks {d} to {d}, " ++
        "records {d} to {d}) does not match its group sum in header.zrh (ZR-PRT-004)", .{
        r.path, t, blocks[0], blocks[1], blockRecords(h, blocks[0])[0], blockRecords(h, blocks[1])[1],
    });
}

pub fn blockError(r: *const Reader, b: u64, d: *Diag) Error {
    const recs = blockRecords(&r.header, b);
    d.record = -1;
    d.shard = -1;
    return d.fail(error.ChecksumMismatch, "'{s}/index.zri': index block {d} (records {d} to {d}) " ++
        "does not match its block sum in index.zrs (ZR-PRT-005)", .{ r.path, b, recs[0], recs[1] });
}

/// [ZR-PRT-001] Step 4.2 for index.zrs, opened by the caller as a store file (without
/// following links, checked to be a regular file) of `size` bytes: exactly 8 × B bytes. Keeps
/// its descriptor (closed with the reader's files, on failure too) and identity in the reader.
pub fn openSums(r: *Reader, fd: sys.Fd, size: u64, d: *Diag) Error!void {
    assert(r.header.hasParts() and r.sums_fd < 0);
    r.sums_fd = fd;
    const want = 8 * r.header.blockCount();
    if (size != want) return d.fail(error.Corrupt, "'{s}/index.zrs' has {d} bytes, but the " ++
        "store's {d} index blocks need exactly {d} (8 per block sum) (ZR-PRT-001)", .{
        r.path, size, r.header.blockCount(), want,
    });
    r.sums_id = sys.fileIdentity(fd) catch return d.failOs(error.Io, sys.errno(), "cannot stat " ++
        "'{s}/index.zrs'", .{r.path});
}

/// Reads the block sums of index.zrs in block order, each group hashed as it is read and
/// judged against its group sum when it ends ([ZR-PRT-004]).
pub const SumsReader = struct {
    r: *const Reader,
    buf: *[sums_buffer_count]u64,
    /// The block whose sum is buf[0], and how many sums buf holds.
    start: u64 = 0,
    len: usize = 0,
    group_hash: format.XxHash64 = format.XxHash64.init(0),

    /// The sum of block `b`, which is the block after the one of the previous call (0 first).
    /// Before it returns the last sum of a group, the group is judged.
    pub fn next(s: *SumsReader, b: u64, d: *Diag) Error!u64 {
        const h = &s.r.header;
        if (b >= s.start + s.len) {
            assert(b == s.start + s.len);
            const n: usize = @intCast(@min(s.buf.len, h.blockCount() - b));
            var short = false;
            sys.preadAll(s.r.sums_fd, std.mem.sliceAsBytes(s.buf[0..n]), 8 * b, &short) catch {
                if (short) return d.fail(error.Corrupt, "'{s}/index.zrs' ended while it was read: " ++
                    "the file changed size", .{s.r.path});
                return d.failOs(error.Io, sys.errno(), "reading '{s}/index.zrs' failed", .{s.r.path});
            };
            s.start = b;
            s.len = n;
        }
        const sum = s.buf[@intCast(b - s.start)];
        s.group_hash.update(std.mem.asBytes(&sum));
        const t = b >> @intCast(h.index_group_shift);
        if (groupBlocks(h, t)[1] == b) {
            if (s.group_hash.final() != h.groupSum(s.r.header_bytes, t)) return groupError(s.r, t, d);
            s.group_hash = format.XxHash64.init(0);
        }
        return std.mem.littleToNative(u64, sum);
    }
};

/// Step 4.3 for every sum group, in group order ([ZR-PRT-010]).
pub fn checkGroups(r: *const Reader, buf: *[sums_buffer_count]u64, d: *Diag) Error!void {
    var s: SumsReader = .{ .r = r, .buf = buf };
    var b: u64 = 0;
    while (b < r.header.blockCount()) : (b += 1) _ = try s.next(b, d);
}

/// Step 4.4 for every index block, in block order, fed with index.zri's bytes in order.
pub const BlockHasher = struct {
    sums: SumsReader,
    block_bytes: u64,
    block: u64 = 0,
    filled: u64 = 0,
    hash: format.XxHash64 = format.XxHash64.init(0),

    pub fn init(r: *const Reader, buf: *[sums_buffer_count]u64) BlockHasher {
        const block_bytes = @as(u64, r.header.index_entry_size) << @intCast(r.header.index_block_shift);
        return .{ .sums = .{ .r = r, .buf = buf }, .block_bytes = block_bytes };
    }

    /// Hashes the next bytes of index.zri; fails on a block that does not match its sum.
    pub fn update(bh: *BlockHasher, bytes: []const u8, d: *Diag) Error!void {
        var rest = bytes;
        while (rest.len > 0) {
            const take: usize = @intCast(@min(bh.block_bytes - bh.filled, rest.len));
            bh.hash.update(rest[0..take]);
            bh.filled += take;
            rest = rest[take..];
            if (bh.filled == bh.block_bytes) try bh.endBlock(d);
        }
    }

    /// Judges the last, partial block once every byte of index.zri has been given.
    pub fn finish(bh: *BlockHasher, d: *Diag) Error!void {
        if (bh.filled > 0) try bh.endBlock(d);
        assert(bh.block == bh.sums.r.header.blockCount());
    }

    fn endBlock(bh: *BlockHasher, d: *Diag) Error!void {
        const want = try bh.sums.next(bh.block, d);
        if (bh.hash.final() != want) return blockError(bh.sums.r, bh.block, d);
        bh.block += 1;
        bh.filled = 0;
        bh.hash = format.XxHash64.init(0);
    }
};
