//! Index parts (format 1.2, spec §4.1) on the whole path: index.zrs at open (step 4.2), every
//! sum group against the header's group sums (step 4.3), and every index block against its
//! block sum (step 4.4), streamed beside the pass over index.zri that hashes the whole index
//! (step 4.5) and judges its entries (step 5). And by part ([ZR-PRT-009], `Lazy`): a gather
//! judges the index blocks of its records, each once, and fills the compact index from them.
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
//! - By part: no entry of a block reaches the compact index before its group, its block sum
//!   and every entry of the block passed, in that order; a block is compared with the block
//!   sum its group was judged with (kept in `Lazy.sums`), never with one read again from
//!   index.zrs, which may have changed since; a block's bit is set only after its compact
//!   blocks are filled; memory at open is reservations (the compact index, the judged groups'
//!   block sums), committed as groups and blocks are judged, and one bit per block and per
//!   group. Concurrency rules: `Lazy`.

const std = @import("std");
const assert = std.debug.assert;
const diag_mod = @import("diag.zig");
const format = @import("format.zig");
const sys = @import("sys.zig");
const Reader = @import("reader.zig").Reader;
const compact = @import("compact.zig");
const abi = @import("abi.zig");
const alloc = std.heap.c_allocator;

const Diag = diag_mod.Diag;
const Error = diag_mod.Error;

/// Block sums are read from index.zrs this many at a time.
pub const sums_buffer_count: usize = 8192;
/// A hint of what a batch needs of an index of at most this many bytes asks for the whole
/// index.zri and index.zrs (`hint`).
pub const hint_whole_bytes_max: u64 = 256 << 10;

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
    return groupErrorOf(&r.header, r.path, t, d);
}

/// The error of sum group `t` of the store named `name` with header `h`.
pub fn groupErrorOf(h: *const format.Header, name: []const u8, t: u64, d: *Diag) Error {
    const blocks = groupBlocks(h, t);
    d.record = -1;
    d.shard = -1;
    return d.fail(error.ChecksumMismatch, "'{s}/index.zrs': sum group {d} (index blocks {d} to {d}, " ++
        "records {d} to {d}) does not match its group sum in header.zrh (ZR-PRT-004)", .{
        name, t, blocks[0], blocks[1], blockRecords(h, blocks[0])[0], blockRecords(h, blocks[1])[1],
    });
}

pub fn blockError(r: *const Reader, b: u64, d: *Diag) Error {
    return blockErrorOf(&r.header, r.path, b, d);
}

/// The error of index block `b` of the store named `name` with header `h`.
pub fn blockErrorOf(h: *const format.Header, name: []const u8, b: u64, d: *Diag) Error {
    const recs = blockRecords(h, b);
    d.record = -1;
    d.shard = -1;
    return d.fail(error.ChecksumMismatch, "'{s}/index.zri': index block {d} (records {d} to {d}) " ++
        "does not match its block sum in index.zrs (ZR-PRT-005)", .{ name, b, recs[0], recs[1] });
}

/// [ZR-PRT-001] Step 4.2 for index.zrs, opened by the caller as a store file (without
/// following links, checked to be a regular file) of `size` bytes: exactly 8 × B bytes. Keeps
/// its descriptor (closed with the reader's files, on failure too) and identity in the reader.
pub fn openSums(r: *Reader, fd: sys.Fd, size: u64, d: *Diag) Error!void {
    assert(r.header.hasParts() and r.sums_fd == sys.invalid_fd);
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

// ---- by part ([ZR-PRT-009]) -------------------------------------------------------------

/// The largest index block a reader judges by part: one read into one buffer. A store with
/// larger blocks (s above 12 for Ragged stores of 32 axes, above 15 for Dense ones) is judged
/// whole at open (`byPartFits`).
pub const part_block_bytes_max: u64 = 1 << 20;

/// Index blocks whose judging threads take the same lock; a power of two.
const lock_stripes: usize = 64;

/// What a reader that judges its index by part keeps: the compact index, filled block by
/// block (`compact.Slots`), one bit per sum group and one per index block that passed, and
/// the locks that make each block judged and filled once.
///
/// Concurrency: a gather judges the blocks of its records (`ensureRecord`) on its calling
/// thread, before its workers start, and several gathers may run at once on other threads.
/// A block is judged and filled under its stripe's lock, and its bit is set (release) only
/// after its compact block is filled; a reader of the bit (acquire) sees the filled block. A
/// failed block sets no bit: each later read of its records judges it again and fails again,
/// so a failure is never remembered beyond the bytes that caused it. Groups are judged under
/// the lock of the block that needs them, so two blocks of one group on different stripes can
/// judge the group twice at once; both read the same bytes and agree, and the bit is set
/// with an atomic OR.
pub const Lazy = struct {
    slots: compact.Slots,
    /// One bit per index block, and one per sum group: passed.
    blocks: []u64,
    groups: []u64,
    /// With index blocks smaller than a compact block (s < 6): one bit per compact block,
    /// filled (`ensureSmall`); empty otherwise.
    units: []u64,
    /// The block sums of the groups that passed, as judged (one u64 per index block; an entry
    /// is read only once its group's bit is set): a block is compared with the sum its group
    /// was judged with, never with one read from index.zrs again ([ZR-PRT-005]). Allocated
    /// untouched, so that only the pages of judged groups become resident.
    sums: []u64,
    locks: [lock_stripes]ForkLock = @splat(.{}),
    /// A sum group is judged under its own stripe's lock (taken while a block's may be held,
    /// never the other way round), so that one thread at a time writes a group's `sums`.
    group_locks: [lock_stripes]ForkLock = @splat(.{}),
    /// How many index blocks this reader has judged (a passed or failed judgement each), for
    /// tests and zr_reader_index_info.
    judged: std.atomic.Value(u64) = .init(0),
    /// What `compact.Slots.fill` wrote, in bytes (zr_reader_index_info).
    filled: std.atomic.Value(u64) = .init(0),
    /// How many index blocks passed (bits set in `blocks`): once every block has, a gather
    /// skips the per-record test (`allPassed`).
    passed: std.atomic.Value(u64) = .init(0),
    /// Records per index block (2^s).
    block_records: u64,

    pub fn create(h: *const format.Header, d: *Diag) Error!*Lazy {
        const l = alloc.create(Lazy) catch return d.noMemory("the state of an index read by part");
        errdefer alloc.destroy(l);
        const ndim: u8 = if (h.kind == .ragged) h.ndim else 0;
        const slots = compact.Slots.init(h.record_count, ndim) catch
            return d.failOs(error.OutOfMemory, sys.errno(), "cannot reserve the compact index of a " ++
                "store of {d} records", .{h.record_count});
        errdefer {
            var s = slots;
            s.deinit();
        }
        const blocks = alloc.alloc(u64, @intCast((h.blockCount() + 63) / 64)) catch
            return d.noMemory("the bitmap of judged index blocks");
        errdefer alloc.free(blocks);
        const groups = alloc.alloc(u64, @intCast((h.groupCount() + 63) / 64)) catch
            return d.noMemory("the bitmap of judged sum groups");
        errdefer alloc.free(groups);
        const block_records = @as(u64, 1) << @intCast(h.index_block_shift);
        const compact_blocks = (h.record_count + compact.block_records - 1) / compact.block_records;
        const unit_count = if (block_records < compact.block_records) compact_blocks else 0;
        const units = alloc.alloc(u64, @intCast((unit_count + 63) / 64)) catch
            return d.noMemory("the bitmap of filled compact blocks");
        errdefer alloc.free(units);
        const sums = alloc.alloc(u64, @intCast(h.blockCount())) catch
            return d.noMemory("the block sums of judged sum groups");
        @memset(blocks, 0);
        @memset(groups, 0);
        @memset(units, 0);
        l.* = .{
            .slots = slots,
            .blocks = blocks,
            .groups = groups,
            .units = units,
            .sums = sums,
            .block_records = block_records,
        };
        return l;
    }

    /// The bytes of the compact index that the blocks filled so far wrote (the pages they
    /// commit may be more: a slot's page holds other slots too).
    pub fn filledBytes(l: *const Lazy) u64 {
        return l.filled.load(.monotonic);
    }

    /// Frees the bitmaps; the compact index's mapping belongs to the reader (`compact_map`).
    pub fn destroy(l: *Lazy) void {
        alloc.free(l.blocks);
        alloc.free(l.groups);
        alloc.free(l.units);
        alloc.free(l.sums);
        alloc.destroy(l);
    }
};

/// Whether a store with index parts can be judged by part: it has records, and its index
/// blocks are small enough for one buffer.
pub fn byPartFits(h: *const format.Header) bool {
    if (!h.hasParts() or h.record_count == 0) return false;
    const s = h.index_block_shift;
    return s < 40 and (@as(u64, h.index_entry_size) << @intCast(s)) <= part_block_bytes_max;
}

inline fn bitSet(bits: []const u64, i: u64) bool {
    const word = @atomicLoad(u64, &bits[@intCast(i / 64)], .acquire);
    return word & (@as(u64, 1) << @intCast(i % 64)) != 0;
}

fn setBit(bits: []u64, i: u64) void {
    _ = @atomicRmw(u64, &bits[@intCast(i / 64)], .Or, @as(u64, 1) << @intCast(i % 64), .release);
}

/// Marks index block `b` passed; called once per block, under the lock that judged it.
fn pass(l: *Lazy, b: u64) void {
    setBit(l.blocks, b);
    _ = l.passed.fetchAdd(1, .release);
}

/// Whether every index block of the store has passed: the reader then holds the whole
/// compact index, and `ensureRecord` has nothing left to do for any record.
pub fn allPassed(r: *const Reader, l: *const Lazy) bool {
    return l.passed.load(.acquire) == r.header.blockCount();
}

/// Makes record `rec`'s index block judged and its compact block filled, unless it is.
/// Inline: a gather calls it for every record, and once the block passed it is one load and
/// one test (the rest is out of line).
pub inline fn ensureRecord(r: *const Reader, l: *Lazy, rec: u64, d: *Diag) Error!void {
    const b = rec >> @intCast(r.header.index_block_shift);
    if (bitSet(l.blocks, b)) return;
    return judgeRecord(r, l, rec, b, d);
}

fn judgeRecord(r: *const Reader, l: *Lazy, rec: u64, b: u64, d: *Diag) Error!void {
    assert(rec < r.header.record_count);
    if (l.block_records >= compact.block_records) return ensureBlock(r, l, b, d);
    return ensureSmall(r, l, rec / compact.block_records, b, d);
}

/// What judging record `rec` needs of the index files that this reader has not judged
/// (zr_reader_index_wants), for a reader that fetches them before it judges them (the mirror
/// of a store read over a network): the index blocks `ensureRecord` would judge (its block, or
/// with blocks smaller than a compact block every block of its compact block) and their sum
/// groups, each a run of parts with the bytes it occupies. 0, 1 or 2 runs in `out`; none once
/// the record's block passed. A run may hold parts judged already, which cost their bytes only.
pub fn wants(r: *const Reader, l: *const Lazy, rec: u64, out: *[2]abi.IndexWant) usize {
    const h = &r.header;
    assert(rec < h.record_count);
    const b = rec >> @intCast(h.index_block_shift);
    if (bitSet(l.blocks, b)) return 0;
    var first_block = b;
    var last_block = b;
    if (l.block_records < compact.block_records) {
        const c = rec / compact.block_records;
        const first = c * compact.block_records;
        const last = @min(first + compact.block_records, h.record_count) - 1;
        first_block = first >> @intCast(h.index_block_shift);
        last_block = last >> @intCast(h.index_block_shift);
    }
    const first_group = first_block >> @intCast(h.index_group_shift);
    const last_group = last_block >> @intCast(h.index_group_shift);
    var k: usize = 0;
    var t = first_group;
    const need_groups = while (t <= last_group) : (t += 1) {
        if (!bitSet(l.groups, t)) break true;
    } else false;
    if (need_groups) {
        out[k] = .{
            .file = abi.part_groups,
            .reserved = 0,
            .first = first_group,
            .last = last_group,
            .start = 8 * groupBlocks(h, first_group)[0],
            .end = 8 * (groupBlocks(h, last_group)[1] + 1),
        };
        k += 1;
    }
    const es: u64 = r.entry_size;
    out[k] = .{
        .file = abi.part_blocks,
        .reserved = 0,
        .first = first_block,
        .last = last_block,
        .start = blockRecords(h, first_block)[0] * es,
        .end = (blockRecords(h, last_block)[1] + 1) * es,
    };
    return k + 1;
}

/// Whether record `rec`'s index block has passed (rec < the record count).
pub inline fn recordPassed(r: *const Reader, l: *const Lazy, rec: u64) bool {
    return bitSet(l.blocks, rec >> @intCast(r.header.index_block_shift));
}

/// Starts reading into the page cache what judging records idx[0..n) needs of index.zri and
/// index.zrs and has not judged (`wants`), so that a cold batch's index reads wait on the
/// device together rather than one block after another (a dataset's first cold batches of
/// 256 token records over 64 parts took 50 ms, then 20, 15, 10, against one store's 3).
/// Advice only: indices out of range are skipped (the caller reports them), nothing fails.
/// An index of at most `hint_whole_bytes_max` (a dataset's small parts) is hinted whole, once
/// a record needs a block not judged: one read of the file, where its blocks would each be one.
pub fn hint(r: *const Reader, l: *const Lazy, idx: [*]const u64, n: u64) void {
    const index_bytes = r.header.record_count * r.entry_size;
    var last_block: u64 = std.math.maxInt(u64);
    var i: u64 = 0;
    while (i < n) : (i += 1) {
        const rec = idx[@intCast(i)];
        if (rec >= r.header.record_count) continue;
        const b = rec >> @intCast(r.header.index_block_shift);
        if (b == last_block) continue;
        last_block = b;
        if (index_bytes <= hint_whole_bytes_max) {
            if (bitSet(l.blocks, b)) continue;
            sys.fadviseRange(r.index_fd, 0, index_bytes, .willneed);
            sys.fadviseRange(r.sums_fd, 0, 8 * r.header.blockCount(), .willneed);
            return;
        }
        var runs: [2]abi.IndexWant = undefined;
        for (runs[0..wants(r, l, rec, &runs)]) |w| {
            const fd = if (w.file == abi.part_groups) r.sums_fd else r.index_fd;
            sys.fadviseRange(fd, w.start, w.end - w.start, .willneed);
        }
    }
}

/// A spin lock that a process forked while a thread held it can take over: it holds its
/// holder's fork generation (sys.forkGeneration) + 1, and a holder of another generation was a
/// thread of the process this one was forked from, which does not exist here (a DataLoader
/// forks its workers while the parent may be judging a block). What that thread left half
/// done is redone: a block's bit is set only after its slots are filled, and filling a block
/// again writes the same bytes.
pub const ForkLock = struct {
    held: std.atomic.Value(u64) = .init(0),

    /// Judging a block takes microseconds (two small reads and a hash); a thread that waits
    /// for it yields rather than sleeps.
    pub fn lock(l: *ForkLock) void {
        const mine = @as(u64, sys.forkGeneration()) + 1;
        while (true) {
            const seen = l.held.load(.monotonic);
            if (seen == mine) {
                std.Thread.yield() catch std.atomic.spinLoopHint();
                continue;
            }
            // Free (0), or held by a thread of an ancestor process.
            if (l.held.cmpxchgWeak(seen, mine, .acquire, .monotonic) == null) return;
        }
    }

    pub fn unlock(l: *ForkLock) void {
        l.held.store(0, .release);
    }
};

/// Takes the lock of stripe `i`.
fn lockStripe(l: *Lazy, i: u64) *ForkLock {
    const lock = &l.locks[@intCast(i % lock_stripes)];
    lock.lock();
    return lock;
}

/// An index block of at least `compact.block_records` entries (s ≥ 6): judged, then its
/// compact blocks filled from it alone. A failed block fills nothing and sets no bit.
fn ensureBlock(r: *const Reader, l: *Lazy, b: u64, d: *Diag) Error!void {
    const h = &r.header;
    const lock = lockStripe(l, b);
    defer lock.unlock();
    if (bitSet(l.blocks, b)) return;
    const bytes = try judge(r, l, b, d);
    defer alloc.free(bytes);
    const es: usize = r.entry_size;
    const first_rec = blockRecords(h, b)[0];
    var pending: [compact.block_records]compact.Pending = undefined;
    var at: usize = 0;
    while (at < bytes.len) {
        const n: usize = @min(compact.block_records, (bytes.len - at) / es);
        for (0..n) |i| pending[i] = compact.pendingOf(h, bytes[at + i * es ..][0..es]);
        _ = l.filled.fetchAdd(l.slots.fill((first_rec + at / es) / compact.block_records, pending[0..n]), .monotonic);
        at += n * es;
    }
    pass(l, b);
}

/// Index blocks smaller than a compact block (s < 6): the compact block `c` that holds record
/// `b`'s block is filled once, from every index block it holds, each judged on its own; a
/// block that fails leaves placeholders there, which nothing reads, since its bit stays unset
/// and every read of its records judges it again (and fails again).
fn ensureSmall(r: *const Reader, l: *Lazy, c: u64, b: u64, d: *Diag) Error!void {
    const h = &r.header;
    const lock = lockStripe(l, c);
    defer lock.unlock();
    if (bitSet(l.blocks, b)) return;
    if (!bitSet(l.units, c)) {
        const first = c * compact.block_records;
        const n: usize = @intCast(@min(compact.block_records, h.record_count - first));
        const placeholder: compact.Pending = .{
            .offset = 0,
            .stored_size = 0,
            .shard = 0,
            .sum = 0,
            .dims = @splat(0),
        };
        var pending: [compact.block_records]compact.Pending = @splat(placeholder);
        var passed: u64 = 0;
        var bb = first >> @intCast(h.index_block_shift);
        while (bb <= (first + n - 1) >> @intCast(h.index_block_shift)) : (bb += 1) {
            var scratch: Diag = .{};
            const bytes = judge(r, l, bb, &scratch) catch |err| switch (err) {
                error.OutOfMemory, error.Io => |e| {
                    d.copyFrom(&scratch);
                    return e;
                },
                else => continue,
            };
            defer alloc.free(bytes);
            const recs = blockRecords(h, bb);
            for (0..@intCast(recs[1] - recs[0] + 1)) |i| {
                const entry = bytes[i * r.entry_size ..][0..r.entry_size];
                pending[@intCast(recs[0] + i - first)] = compact.pendingOf(h, entry);
            }
            passed |= @as(u64, 1) << @intCast(bb - (first >> @intCast(h.index_block_shift)));
        }
        _ = l.filled.fetchAdd(l.slots.fill(c, pending[0..n]), .monotonic);
        bb = first >> @intCast(h.index_block_shift);
        while (passed != 0) : (passed >>= 1) {
            if (passed & 1 != 0) pass(l, bb);
            bb += 1;
        }
        setBit(l.units, c);
        if (bitSet(l.blocks, b)) return;
    }
    // Block b failed when its compact block was filled: judged again for its error.
    const bytes = try judge(r, l, b, d);
    alloc.free(bytes);
    const recs = blockRecords(h, b);
    return d.fail(error.Corrupt, "'{s}/index.zri': index block {d} (records {d} to {d}) failed its " ++
        "checks in this reader and passed them later: the store's index files changed while it " ++
        "was open", .{ r.path, b, recs[0], recs[1] });
}

/// [ZR-PRT-004] to [ZR-PRT-006] for index block `b`: its sum group (unless it passed), its
/// block sum, then step 5 for every entry in record order. Returns the block's bytes, which
/// the caller frees.
fn judge(r: *const Reader, l: *Lazy, b: u64, d: *Diag) Error![]u8 {
    const h = &r.header;
    _ = l.judged.fetchAdd(1, .monotonic);
    const t = b >> @intCast(h.index_group_shift);
    if (!bitSet(l.groups, t)) try judgeGroup(r, l, t, d);
    const recs = blockRecords(h, b);
    const es: usize = r.entry_size;
    const buf = alloc.alloc(u8, @intCast((recs[1] - recs[0] + 1) * es)) catch return d.noMemory("an index block");
    errdefer alloc.free(buf);
    var short = false;
    sys.preadAll(r.index_fd, buf, recs[0] * es, &short) catch return partReadError(r, "index.zri", short, d);
    // The sum its group was judged with (the group's bit, acquired above, orders this read
    // after judgeGroup's writes).
    if (format.xxh64(buf) != l.sums[@intCast(b)]) return blockError(r, b, d);
    const sizes: format.EntrySizes = .of(h);
    var rec = recs[0];
    while (rec <= recs[1]) : (rec += 1) {
        const at: usize = @intCast((rec - recs[0]) * es);
        _ = format.validateEntry(h, sizes, buf[at..][0..es], rec, r.path, d) catch |err|
            return entryError(r, b, err, d);
    }
    return buf;
}

/// [ZR-PRT-004] for sum group `t` alone, under its group lock: its block sums read from
/// index.zrs into `l.sums`, hashed as read, and the group's bit set (release) only when they
/// match its group sum. A group that fails leaves its `sums` unread: its bit stays unset.
fn judgeGroup(r: *const Reader, l: *Lazy, t: u64, d: *Diag) Error!void {
    const h = &r.header;
    const lock = &l.group_locks[@intCast(t % lock_stripes)];
    lock.lock();
    defer lock.unlock();
    if (bitSet(l.groups, t)) return; // another thread judged it while this one waited
    const blocks = groupBlocks(h, t);
    const sums = l.sums[@intCast(blocks[0])..@intCast(blocks[1] + 1)];
    const bytes = std.mem.sliceAsBytes(sums);
    var short = false;
    sys.preadAll(r.sums_fd, bytes, 8 * blocks[0], &short) catch return partReadError(r, "index.zrs", short, d);
    if (format.xxh64(bytes) != h.groupSum(r.header_bytes, t)) return groupError(r, t, d);
    for (sums) |*sum| sum.* = std.mem.littleToNative(u64, sum.*);
    setBit(l.groups, t);
}

/// An entry of block `b` failed step 5: its message, with the block it fails named first
/// ([ZR-PRT-006], [ZR-PRT-011]).
fn entryError(r: *const Reader, b: u64, err: Error, d: *Diag) Error {
    var text: [diag_mod.message_bytes_max + 1]u8 = undefined;
    const old = d.text();
    @memcpy(text[0..old.len], old);
    const recs = blockRecords(&r.header, b);
    const record = d.record;
    const e = d.fail(err, "{s}; so no record of index block {d} (records {d} to {d}) can be " ++
        "read (ZR-PRT-006)", .{ text[0..old.len], b, recs[0], recs[1] });
    d.record = record;
    return e;
}

fn partReadError(r: *const Reader, name: []const u8, short: bool, d: *Diag) Error {
    if (short) return d.fail(error.Corrupt, "'{s}/{s}' ended while it was read: the file " ++
        "changed size", .{ r.path, name });
    return d.failOs(error.Io, sys.errno(), "reading '{s}/{s}' failed", .{ r.path, name });
}

test "a stripe lock held by a thread of the process this one was forked from is taken over" {
    // Windows: no fork.
    if (comptime @import("builtin").os.tag == .windows) return error.SkipZigTest;
    var l: ForkLock = .{};
    l.lock();
    l.unlock();
    // What a child process sees of a lock its parent's thread held at fork(): another
    // generation's mark. Taking it must not wait for a thread that does not exist here.
    l.held.store(@as(u64, sys.forkGeneration()) + 2, .monotonic);
    l.lock();
    try std.testing.expectEqual(@as(u64, sys.forkGeneration()) + 1, l.held.load(.monotonic));
    l.unlock();
    try std.testing.expectEqual(@as(u64, 0), l.held.load(.monotonic));
}
