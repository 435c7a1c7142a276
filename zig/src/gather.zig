//! Gathers, prefetches and verification reads: the workers that copy, read and decode a
//! batch's records, with the contexts they share.
//!
//! Small records are copied from the read-only shared mappings of the shards; large ones (and
//! every record of a cold batch) are read with pread(2), or with O_DIRECT when the store was
//! opened to bypass the page cache.
//!
//! Invariants:
//! - A record's checksum is verified before its bytes are returned for the first time by this
//!   reader ([ZR-SUM-002]); a bit per record remembers it. Bits are set atomically and only
//!   after a successful check, so concurrent gathers may verify a record twice, never zero
//!   times. A mismatch found in the caller's output is confirmed by a second read into private
//!   memory before it is reported, so overlapping Ragged outputs cannot fake one.
//! - Compressed stores (spec §6): every record is decoded straight into its place in the
//!   caller's output, only after its stored bytes passed the checksum, and must decode to
//!   exactly its logical size ([ZR-IDX-005]). Decompression contexts come from a fixed set of
//!   slots, each claimed by an atomic flag and created on first use; a thread that finds every
//!   slot taken uses a temporary context for its call.
//! - Which records are read with pread (`usesPread`), and how cold batches are hinted and
//!   probed (readahead.zig), changes how fast a gather runs, never what it returns: every path
//!   checks each record exactly as above.
//! - Every worker's share of a gather or verify that may touch a mapping runs inside the SIGBUS
//!   guard of sigbus_guard.c (one guarded region per share), so a shard truncated after open
//!   fails with ZR_E_CORRUPT naming the record; the pread path reports it from the short read.
//!   A share allocates what it needs before its region starts and frees it after, so a fault
//!   that ends the region leaks nothing.

const std = @import("std");
const abi = @import("abi.zig");
const diag_mod = @import("diag.zig");
const format = @import("format.zig");
const parallel = @import("parallel.zig");
const sys = @import("sys.zig");
const codec = @import("codec.zig");
const readahead = @import("readahead.zig");
const compact = @import("compact.zig");
const Reader = @import("reader.zig").Reader;
const Location = compact.Location;

const Diag = diag_mod.Diag;
const Error = diag_mod.Error;
const alloc = std.heap.c_allocator;

/// Batches with less output than this run on the calling thread: spawning a worker costs
/// 50 to 90 µs, about what copying 4 MiB costs.
pub const gather_parallel_bytes_min: u64 = 4 << 20;
/// With `threads` = 0, one worker per this much output, up to `gather_auto_workers_max`.
pub const gather_bytes_per_worker: u64 = 2 << 20;
pub const gather_auto_workers_max: usize = 8;
/// Workers of a cold batch (readahead.zig) of compressed records, or of raw records of at
/// least `pread_record_bytes_min` on average, whatever the CPU count, within the two limits
/// above: they wait for the device more than they compute.
pub const gather_cold_workers_min: usize = 4;
/// The same two thresholds for compressed stores, counted in logical (decoded) bytes:
/// decompression runs at 1 to 2 GB/s per core, so a worker pays off on far less output.
pub const gather_compressed_parallel_bytes_min: u64 = 512 << 10;
pub const gather_compressed_bytes_per_worker: u64 = 256 << 10;
/// What one compressed record costs to decode beyond its bytes, as bytes of output: a frame
/// header, and for frames without a dictionary the entropy tables each frame carries (a
/// 235-byte token record took ~4 us to decode without a dictionary, ~1.7 us with one).
pub const gather_compressed_record_cost_bytes: u64 = 4 << 10;
/// Pooled decompression contexts per reader (about 100 to 200 KiB each once used).
pub const decoder_slots_count: usize = 16;
/// Records of at least this many stored bytes are read with pread(2) instead of being copied
/// from the shard's mapping. Every page of a mapping that a gather touches stays mapped into
/// the process and counts in its RSS and PSS, so random gathers over a store make the process
/// appear to hold the whole store; pread copies from the page cache without mapping anything.
/// For large records the system call costs little next to the copy itself (a 32 KiB copy
/// takes about 3 µs, a pread call about 1 µs more); for small records it would dominate, and
/// the prefetching copy from the mapping is kept.
///
/// A store whose records average at least this many stored bytes reads its small records
/// with pread too (`Reader.pread_every_record`). The page cache holds file data in large
/// folios, and a fault on one page of a mapping maps the whole folio (up to 2 MiB, measured:
/// 206 records under 32 KiB of a 1,493-record zstd image store mapped 46 MiB of it); in such a
/// store the few small records are not worth that, and the mapping is then never touched.
pub const pread_record_bytes_min: u64 = 32 << 10;
/// Largest compressed (or, in verify, raw) record read into a worker's scratch buffer; larger
/// ones are read through the mapping, so that a worker never holds more than this much
/// scratch. Such records are so large that their own pages dwarf the mapping's overhead.
pub const pread_scratch_bytes_max: u64 = 16 << 20;

/// With the page cache bypassed (`Reader.bypass`), a batch of records read with O_DIRECT gets
/// up to this many workers whatever the CPU count: each waits for the device most of the
/// time, and the device needs a queue of several reads to reach its bandwidth (measured on
/// the development disk: 16 threads of O_DIRECT reads of 147 KiB reached 90% of its queue
/// depth 32 bandwidth, with half the CPU time of page-cache reads of the same records).
pub const gather_bypass_workers: usize = 16;

/// A shard mapping as the SIGBUS guard sees it (sigbus_guard.c's struct zr_guard_range).
pub const GuardRange = extern struct {
    base: ?[*]const u8 = null,
    len: usize = 0,
};

/// One guarded region (sigbus_guard.c's struct zr_guard), in the `Share` of runShare.
const Guard = extern struct {
    ranges: [*]const GuardRange,
    range_count: usize,
    /// The record the region works on; written through a volatile pointer before the record's
    /// mapped bytes are touched, so that the value the handler leaves behind is current.
    record: u64 = no_record,
    fault_addr: ?*const anyopaque = null,
    jump: ?*anyopaque = null,

    const no_record = std.math.maxInt(u64);

    fn setRecord(g: *Guard, rec: u64) void {
        const p: *volatile u64 = &g.record;
        p.* = rec;
    }

    fn currentRecord(g: *Guard) u64 {
        const p: *volatile u64 = &g.record;
        return p.*;
    }
};

pub extern fn zr_guard_install() void;
extern fn zr_guard_run(g: *Guard, body: *const fn (?*anyopaque) callconv(.c) void, arg: ?*anyopaque) c_int;

pub const DecoderSlot = struct {
    busy: std.atomic.Value(bool) = .init(false),
    /// Touched only by the thread that holds `busy`, or by close.
    dec: ?codec.Decompressor = null,
};

/// A decompression context held for the length of one worker's share of a call.
const DecoderLease = struct {
    slot: ?*DecoderSlot,
    temp: codec.Decompressor = undefined,

    fn get(l: *DecoderLease) *codec.Decompressor {
        return if (l.slot) |slot| &slot.dec.? else &l.temp;
    }

    fn release(l: *DecoderLease) void {
        if (l.slot) |slot| slot.busy.store(false, .release) else l.temp.deinit();
    }

    /// Like `release`, but frees the context instead of pooling it; a slot makes a fresh one
    /// on its next use.
    fn discard(l: *DecoderLease) void {
        if (l.slot) |slot| {
            if (slot.dec) |*dec| dec.deinit();
            slot.dec = null;
        }
        l.release();
    }
};

/// Claims a pooled decompression context, creating it on first use, or makes a temporary
/// one when every slot is taken.
fn acquireDecoder(r: *Reader, d: *Diag) Error!DecoderLease {
    const shared: ?*const codec.SharedDict = if (r.ddict) |*dd| dd else null;
    for (&r.decoders) |*slot| {
        if (slot.busy.load(.monotonic)) continue;
        if (slot.busy.cmpxchgStrong(false, true, .acquire, .monotonic) != null) continue;
        if (slot.dec == null) {
            slot.dec = codec.Decompressor.init(shared) catch {
                slot.busy.store(false, .release);
                return d.noMemory("a zstd decompression context");
            };
        }
        return .{ .slot = slot };
    }
    const temp = codec.Decompressor.init(shared) catch return d.noMemory("a zstd decompression context");
    return .{ .slot = null, .temp = temp };
}

/// Decodes record `rec`, whose checksum has passed, into exactly `dst`
/// ([ZR-IDX-005]).
fn decodeRecord(
    r: *const Reader,
    dec: *codec.Decompressor,
    rec: u64,
    e: Location,
    src: []const u8,
    dst: []u8,
    d: *Diag,
) Error!void {
    dec.decompress(dst, src) catch |err| {
        d.record = @intCast(rec);
        d.shard = e.shard;
        return switch (err) {
            error.OutOfMemory => d.fail(error.OutOfMemory, "store '{s}': out of memory decoding " ++
                "record {d} of data-{d:0>3}.zrd", .{ r.path, rec, e.shard }),
            error.SizeMismatch => d.fail(error.DecodeFailed, "store '{s}': record {d} ({d} stored " ++
                "bytes at offset {d} of data-{d:0>3}.zrd) does not decode to its logical size of " ++
                "{d} bytes: its zstd frame declares no content size or another one (ZR-IDX-005, " ++
                "ZR-COD-006)", .{ r.path, rec, e.stored_size, e.offset, e.shard, dst.len }),
            else => blk: {
                const what = if (r.header.codec == .zstd_dict) "this store's dictionary" else "codec zstd";
                const why = if (dec.reason) |reason|
                    reason
                else if (dec.last_code != 0)
                    codec.errorName(dec.last_code)
                else
                    "it is not exactly one complete frame with a content size, made without a dictionary " ++
                        "or with this store's";
                break :blk d.fail(error.DecodeFailed, "store '{s}': record {d} ({d} stored bytes " ++
                    "at offset {d} of data-{d:0>3}.zrd) failed to decode as a zstd frame of {s}: " ++
                    "{s} (ZR-IDX-005)", .{ r.path, rec, e.stored_size, e.offset, e.shard, what, why });
            },
        };
    };
}

/// The stored bytes of a record; in bounds by the validation done at open.
fn storedBytes(r: *const Reader, e: Location) []const u8 {
    return r.maps[e.shard][@intCast(e.offset)..][0..e.stored_size];
}

/// Whether record `rec`'s checksum has passed in this reader (which implies its place was
/// checked before it was read).
pub fn isVerified(r: *const Reader, rec: u64) bool {
    const word = @atomicLoad(u64, &r.verified[@intCast(rec / 64)], .monotonic);
    return word & (@as(u64, 1) << @intCast(rec % 64)) != 0;
}

/// Nothing for a reader opened with ZR_OPEN_CHECK_EVERY_READ, which checks every read.
fn markVerified(r: *const Reader, rec: u64) void {
    if (r.check_every_read) return;
    _ = @atomicRmw(u64, &r.verified[@intCast(rec / 64)], .Or, @as(u64, 1) << @intCast(rec % 64), .monotonic);
}

/// What a record's stored bytes are checked against: the whole checksum of its index entry
/// (verify, from index.zri) or its low 32 bits, which the compact index keeps (first reads;
/// [ZR-SUM-004]).
const Want = struct {
    value: u64,
    mask: u64,

    fn whole(sum: u64) Want {
        return .{ .value = sum, .mask = std.math.maxInt(u64) };
    }

    fn low(sum: u32) Want {
        return .{ .value = sum, .mask = std.math.maxInt(u32) };
    }

    fn matches(w: Want, stored: []const u8) bool {
        return format.xxh64(stored) & w.mask == w.value;
    }
};

/// [ZR-SUM-001] Checks a record's stored bytes against `want`, its checksum in the index.
fn checkRecord(r: *const Reader, rec: u64, e: Location, stored: []const u8, want: Want, d: *Diag) Error!void {
    if (want.matches(stored)) {
        markVerified(r, rec);
        return;
    }
    d.record = @intCast(rec);
    d.shard = e.shard;
    const part = if (want.mask == std.math.maxInt(u64)) "" else "the low 32 bits of ";
    return d.fail(error.ChecksumMismatch, "store '{s}': record {d} is corrupt: its {d} stored " ++
        "bytes at offset {d} of data-{d:0>3}.zrd do not match {s}the index's checksum " ++
        "(0x{x}) (ZR-SUM-001)", .{ r.path, rec, e.stored_size, e.offset, e.shard, part, want.value });
}

/// `checkRecord` for a record this reader has not checked yet; nothing for one it has.
fn checkOnce(r: *const Reader, rec: u64, e: Location, stored: []const u8, d: *Diag) Error!void {
    if (!isVerified(r, rec)) try checkRecord(r, rec, e, stored, firstReadSum(r, rec), d);
}

/// What a record's first read is checked against: the low half of its checksum, from the
/// compact index, in memory beside the record's place (index.zri is read by verify only).
fn firstReadSum(r: *const Reader, rec: u64) Want {
    return .low(r.compact.sum(rec));
}

/// Whether a record is read with pread(2) rather than from the mapping. Empty records
/// need neither.
fn usesPread(r: *const Reader, e: Location) bool {
    return e.stored_size >= pread_record_bytes_min or (r.pread_every_record and e.stored_size > 0);
}

/// Whether record `e` is read with O_DIRECT (`bypass`).
fn readsDirect(r: *const Reader, e: Location) bool {
    return r.bypass and usesPread(r, e) and e.stored_size <= pread_scratch_bytes_max;
}

/// Reads record `rec`'s stored bytes with O_DIRECT, for `bypass`: the aligned blocks that
/// hold them go into `scratch` (page-aligned), and the result borrows the record's bytes
/// from it. A file that ends before the record's last byte was truncated after open.
fn readDirect(r: *const Reader, rec: u64, e: Location, scratch: *Scratch, d: *Diag) Error![]const u8 {
    const a: u64 = sys.direct_align_bytes;
    const first = e.offset - e.offset % a;
    const end = e.offset + e.stored_size;
    const last = (end + a - 1) / a * a;
    const buf = try scratch.get(@intCast(last - first), rec, d);
    var done: u64 = 0;
    while (first + done < end) {
        const n = sys.preadSome(r.direct_fds[e.shard], buf[@intCast(done)..], first + done) catch {
            d.record = @intCast(rec);
            d.shard = e.shard;
            return d.failOs(error.Io, sys.errno(), "store '{s}': reading record {d} ({d} bytes at " ++
                "offset {d}) from data-{d:0>3}.zrd with O_DIRECT failed", .{
                r.path, rec, e.stored_size, e.offset, e.shard,
            });
        };
        // Only the end of the file makes an O_DIRECT read short; a read cut anywhere else
        // could not be continued at an unaligned offset.
        if (n == 0 or (n % a != 0 and first + done + n < end)) {
            d.record = @intCast(rec);
            d.shard = e.shard;
            return d.fail(error.Corrupt, "store '{s}': data-{d:0>3}.zrd ended before the {d} " ++
                "stored bytes of record {d} at offset {d} were read: the file was truncated " ++
                "after the store was opened (ZR-PUB-005)", .{ r.path, e.shard, e.stored_size, rec, e.offset });
        }
        done += n;
    }
    return buf[@intCast(e.offset - first)..][0..e.stored_size];
}

/// Reads record `rec`'s stored bytes into `buf` (exactly `e.stored_size` bytes) with
/// pread(2). Partial reads are continued and EINTR retried (sys.preadAll); a file that ends
/// first was truncated after open, which is corruption, not a crash.
fn readStored(r: *const Reader, rec: u64, e: Location, buf: []u8, d: *Diag) Error!void {
    std.debug.assert(buf.len == e.stored_size);
    var short = false;
    sys.preadAll(r.fds[e.shard], buf, e.offset, &short) catch {
        const errno = sys.errno();
        d.record = @intCast(rec);
        d.shard = e.shard;
        if (short) return d.fail(error.Corrupt, "store '{s}': data-{d:0>3}.zrd ended before " ++
            "the {d} stored bytes of record {d} at offset {d} were read: the file was " ++
            "truncated after the store was opened (ZR-PUB-005)", .{ r.path, e.shard, e.stored_size, rec, e.offset });
        return d.failOs(error.Io, errno, "store '{s}': reading record {d} ({d} bytes at " ++
            "offset {d}) from data-{d:0>3}.zrd failed", .{ r.path, rec, e.stored_size, e.offset, e.shard });
    };
}

/// [ZR-SUM-001] Checks a record read into the caller's output, unless this reader has checked
/// it before. Another position of an overlapping Ragged output, or another thread of the
/// caller, may have written into `dst` since it was read, so a mismatch is confirmed on a
/// second read into private memory before it is reported; if that read passes, it is copied
/// into `dst`.
fn checkOutputOnce(r: *const Reader, rec: u64, e: Location, dst: []u8, d: *Diag) Error!void {
    if (isVerified(r, rec)) return;
    const want = firstReadSum(r, rec);
    if (want.matches(dst)) {
        markVerified(r, rec);
        return;
    }
    const again = alloc.alloc(u8, e.stored_size) catch {
        d.record = @intCast(rec);
        return d.noMemory("a buffer to re-read a record whose checksum failed");
    };
    defer alloc.free(again);
    try readStored(r, rec, e, again, d);
    try checkRecord(r, rec, e, again, want, d);
    @memcpy(dst, again);
}

/// The error for a SIGBUS that ended a guarded region while it worked on record `rec`
/// (Guard.no_record if it had not begun one, which no body does before touching a mapping).
fn mappingFault(r: *const Reader, rec: u64, d: *Diag) Error {
    if (rec >= r.header.record_count) return d.fail(error.Corrupt, "store '{s}': a shard file " ++
        "could not be read through its mapping (SIGBUS): it was truncated after the store was " ++
        "opened, or its storage failed (ZR-PUB-005)", .{r.path});
    const e = r.location(rec);
    d.record = @intCast(rec);
    d.shard = e.shard;
    return d.fail(error.Corrupt, "store '{s}': the {d} stored bytes of record {d} at offset {d} " ++
        "of data-{d:0>3}.zrd could not be read through its mapping (SIGBUS): the file was " ++
        "truncated after the store was opened, or its storage failed (ZR-PUB-005)", .{
        r.path, e.stored_size, rec, e.offset, e.shard,
    });
}

/// Record `rec`'s stored bytes: from the mapping, or for a large record read with pread
/// into `scratch`, whose contents the result then borrows.
fn storedView(r: *const Reader, rec: u64, e: Location, pread: bool, scratch: *Scratch, d: *Diag) Error![]const u8 {
    if (readsDirect(r, e)) return readDirect(r, rec, e, scratch, d);
    // A reader that checks every read never decodes from a mapping, whose bytes could change
    // between the check and the decode (ZR_OPEN_CHECK_EVERY_READ).
    if (!pread or (e.stored_size > pread_scratch_bytes_max and !r.check_every_read)) return storedBytes(r, e);
    const buf = try scratch.get(e.stored_size, rec, d);
    try readStored(r, rec, e, buf, d);
    return buf;
}

/// Runs `work` over the positions of the batch `base` (whose output holds `bytes`
/// logical bytes). A batch that the estimate expects cold, and that a residency sample
/// confirms, is hinted ahead of its reads (`GatherCtx.hintAhead`) and read with pread;
/// one that follows a prefetch which hinted (readahead.Estimate.prefetched) is sampled
/// too, and when the sample finds it resident it is read with pread, each share probing
/// its first records (`probed`); any other batch is read as it always was, through the
/// mappings where records are small, with the same probe in case the estimate is wrong.
fn runBatch(r: *Reader, base: *const GatherCtx, bytes: u64, threads: u32, comptime work: anytype, d: *Diag) Error!void {
    // A store whose every record is read with O_DIRECT has nothing to hint or probe.
    const mode: readahead.Mode = if (r.bypass and r.pread_every_record) .mapped else r.readMode();
    const n = base.n;
    var cold = mode == .hinted;
    const prefetched = mode == .auto and r.estimate.takePrefetched();
    if (mode == .auto and (r.estimate.expectsCold() or prefetched)) {
        cold = !base.batch().sampleResident(0, n);
        r.estimate.set(cold);
    }
    var hinted: std.atomic.Value(bool) = .init(false);
    var frontier: std.atomic.Value(u64) = .init(0);
    var ctx = base.*;
    if (cold) {
        // The first share hints, not this thread before the workers start: measured on
        // cold zstd token batches, hinting while the workers are being spawned (and
        // their first reads go out unhinted) was 15% faster than hinting first.
        ctx.cold = true;
        ctx.frontier = &frontier;
    } else {
        // Found in the page cache after a prefetch hinted it: read with pread, so that its
        // pages stay out of the mappings (readahead.Estimate.prefetched). Probed like any
        // warm batch: the kernel may have dropped hinted pages before this read.
        ctx.cold = prefetched;
        ctx.probe = mode == .auto;
        ctx.hinted = &hinted;
    }
    return parallel.run(GatherCtx, &ctx, work, n, workerCount(r, bytes, n, threads, cold), .claimed, d);
}

/// The end of the run of positions from `begin` (at least one record, unless `begin` is
/// the end) whose stored bytes stay within `bytes_max` and records within `records_max`.
fn runEnd(r: *const Reader, ctx: *const GatherCtx, begin: u64, bytes_max: u64, records_max: u64) u64 {
    var end = begin;
    var stored: u64 = 0;
    while (end < ctx.n and end - begin < records_max) {
        const size = r.location(ctx.record(end)).stored_size;
        if (end > begin and stored + size > bytes_max) break;
        stored += size;
        end += 1;
    }
    return end;
}

/// Workers for a batch of `n` records and `bytes` output: the calling thread alone below
/// the parallel threshold of the store's codec; otherwise `threads`, or with 0 one per
/// bytes-per-worker up to the CPUs and `gather_auto_workers_max`. For compressed stores
/// each record also counts `gather_compressed_record_cost_bytes`, since decoding a frame
/// has a fixed cost that small records do not amortise.
fn workerCount(r: *const Reader, bytes: u64, n: u64, threads: u32, cold: bool) usize {
    const parallel_min = if (r.compressed()) gather_compressed_parallel_bytes_min else gather_parallel_bytes_min;
    const per_worker = if (r.compressed()) gather_compressed_bytes_per_worker else gather_bytes_per_worker;
    const work = if (r.compressed()) bytes +| n *| gather_compressed_record_cost_bytes else bytes;
    if (work < parallel_min) return 1;
    if (threads != 0) return @min(threads, parallel.workers_max);
    const by_size: u64 = work / per_worker + @intFromBool(work % per_worker != 0);
    // A worker of a cold batch mostly waits for its reads, so more of them than CPUs keep
    // the CPUs busy decoding or copying while some wait. Not for small raw records: the
    // first share hints them all, and their copies cost less than a worker.
    const large = n > 0 and bytes / n >= pread_record_bytes_min;
    if (r.bypass and large) return @intCast(@min(by_size, gather_bypass_workers));
    var cpus = sys.cpuCount();
    // Decoding is compute-bound, like the writer's compression (decision record 0001,
    // sections 10 and 17): with two workers per CPU the kernel shares every CPU among the
    // chunks still going, and a CPU that other processes also want is not left to one.
    // Only for batches large enough that the extra workers' start (50-90 us each) is
    // lost in the work.
    if (r.compressed() and work >= gather_parallel_bytes_min) cpus *= 2;
    if (cold and (large or r.compressed())) cpus = @max(cpus, gather_cold_workers_min);
    return @intCast(@min(@min(by_size, cpus), gather_auto_workers_max));
}

/// Reader.gatherDense once its arguments have passed: records idx[0..n) into `out`, which
/// holds exactly `bytes` (null only when that is zero).
pub fn dense(r: *Reader, idx: [*]const u64, n: u64, out: ?[*]u8, bytes: u64, threads: u32, d: *Diag) Error!void {
    const ctx: GatherCtx = .{ .r = r, .job = .{ .dense = .{ .idx = idx, .out = outSlice(out, bytes) } }, .n = n };
    return runBatch(r, &ctx, bytes, threads, gatherDenseWork, d);
}

/// Reader.gatherRagged once its arguments have passed: record idx[i] at out + offsets[i]
/// (sizes[i] bytes where `sizes` is given, each checked against the output by that first
/// pass), `bytes` logical bytes in all, within an output of `out_size` bytes (`out` is null
/// only when `bytes` is zero).
pub fn ragged(
    r: *Reader,
    idx: [*]const u64,
    n: u64,
    out: ?[*]u8,
    out_size: u64,
    offsets: [*]const u64,
    sizes: ?[*]const u64,
    bytes: u64,
    threads: u32,
    d: *Diag,
) Error!void {
    const job: Job = .{ .ragged = .{ .idx = idx, .out = outSlice(out, out_size), .offsets = offsets, .sizes = sizes } };
    const ctx: GatherCtx = .{ .r = r, .job = job, .n = n };
    return runBatch(r, &ctx, bytes, threads, gatherRaggedWork, d);
}

/// Reader.prefetch once its arguments have passed and its mode is not `mapped`: hints the
/// first records of idx[0..n), unless (in mode `auto`) a sample finds them in the page cache.
pub fn prefetch(r: *Reader, idx: [*]const u64, n: u64, mode: readahead.Mode) bool {
    const ctx: GatherCtx = .{
        .r = r,
        .job = .{ .prefetch = .{ .idx = idx } },
        .n = @min(n, readahead.prefetch_records_max),
    };
    if (mode == .auto) {
        const resident = ctx.batch().sampleResident(0, ctx.n);
        r.estimate.notePrefetch(!resident);
        if (resident) return false;
    }
    ctx.hint(0, runEnd(r, &ctx, 0, readahead.window_bytes_max, readahead.window_records_max));
    return true;
}

/// Reader.verify once its range has passed and the layout check with it: checks and (for
/// compressed codecs) decodes every record of [start, start + n).
pub fn verify(r: *Reader, start: u64, n: u64, d: *Diag) Error!void {
    var total: u64 = 0;
    var i: u64 = start;
    // Hashing reads the stored bytes; decoding writes the logical ones.
    while (i < start + n) : (i += 1) {
        total +|= if (r.compressed()) r.logicalSize(i) else r.location(i).stored_size;
    }
    // Verify reads every record of the range once, in record order: its hints coalesce into
    // long ranges, which cost next to nothing where the store is in the page cache and
    // turn one read per page into long reads where it is not.
    var frontier: std.atomic.Value(u64) = .init(0);
    const ctx: GatherCtx = .{ .r = r, .job = .{ .verify = .{ .start = start } }, .n = n, .frontier = &frontier };
    try parallel.run(GatherCtx, &ctx, verifyWork, n, workerCount(r, total, n, 0, false), .claimed, d);
}

/// The caller's output as a slice: `len` bytes at `out`, or none when `out` is null (which
/// callers allow only when no record has a byte to write).
fn outSlice(out: ?[*]u8, len: u64) []u8 {
    return if (out) |p| p[0..@intCast(len)] else &.{};
}

/// A worker's buffer for the length of its share of one call: reused across its records,
/// grown to the largest size asked of it, and freed when the share ends.
const Scratch = struct {
    /// Aligned for O_DIRECT reads (`readDirect`).
    buf: []align(sys.direct_align_bytes) u8 = &.{},

    fn get(s: *Scratch, size: usize, rec: u64, d: *Diag) Error![]u8 {
        if (size > s.buf.len) {
            s.deinit();
            s.buf = alloc.alignedAlloc(u8, .fromByteUnits(sys.direct_align_bytes), size) catch {
                d.record = @intCast(rec);
                return d.noMemory("a worker's buffer to read or decode a record");
            };
        }
        return s.buf[0..size];
    }

    fn deinit(s: *Scratch) void {
        if (s.buf.len > 0) alloc.free(s.buf);
        s.buf = &.{};
    }
};

/// What a call asks of its workers, with the arrays that only that call has.
const Job = union(enum) {
    /// Dense records idx[pos] into out[pos * record_size ..].
    dense: struct { idx: [*]const u64, out: []u8 },
    /// Ragged records idx[pos] into out[offsets[pos] ..][0..sizes[pos]] (without `sizes`,
    /// each record's size as the copy finds it).
    ragged: struct { idx: [*]const u64, out: []u8, offsets: [*]const u64, sizes: ?[*]const u64 },
    /// Records start + pos, checked (and decoded into scratch), not returned.
    verify: struct { start: u64 },
    /// Records idx[pos], hinted only.
    prefetch: struct { idx: [*]const u64 },
};

const GatherCtx = struct {
    r: *Reader,
    job: Job,
    /// Positions in the batch.
    n: u64,
    /// Every non-empty record is read with pread, none through the mappings (whose pages
    /// would stay mapped into the process): the batch was hinted, or found cached just after
    /// a prefetch hinted it.
    cold: bool = false,
    /// Each share times its first records (`probed`); set with `hinted`.
    probe: bool = false,
    /// Set by the first share whose probe found the batch cold and hinted the rest of it.
    hinted: ?*std.atomic.Value(bool) = null,
    /// Cold batches: the position up to which records have been hinted (`hintAhead`).
    frontier: ?*std.atomic.Value(u64) = null,

    fn batch(ctx: *const GatherCtx) readahead.Batch(GatherCtx) {
        return .{ .src = ctx };
    }

    /// The record at position `pos`.
    fn record(ctx: *const GatherCtx, pos: u64) u64 {
        return switch (ctx.job) {
            .verify => |v| v.start + pos,
            inline else => |j| j.idx[@intCast(pos)],
        };
    }

    /// The stored bytes of the record at position `pos`, for readahead.Batch.
    pub fn span(ctx: *const GatherCtx, pos: u64) readahead.Span {
        const e = ctx.r.location(ctx.record(pos));
        // A place outside the store (a cache file changed under the reader) is not hinted;
        // the read fails at `Reader.place`.
        if (!ctx.r.placeFits(e)) return .{ .shard = 0, .offset = 0, .len = 0 };
        // Records read with O_DIRECT never go through the page cache: nothing to hint or ask.
        if (readsDirect(ctx.r, e)) return .{ .shard = e.shard, .offset = e.offset, .len = 0 };
        return .{ .shard = e.shard, .offset = e.offset, .len = e.stored_size };
    }

    /// Starts reading a page-aligned span of a shard into the page cache (readahead.Batch).
    pub fn advise(ctx: *const GatherCtx, s: readahead.Span) void {
        sys.fadviseRange(ctx.r.fds[s.shard], s.offset, s.len, .willneed);
    }

    /// Whether a page-aligned span of a shard is in the page cache (readahead.Batch); when
    /// the kernel does not say, it counts as resident: without an answer the reader reads
    /// as it did before hints existed.
    pub fn resident(ctx: *const GatherCtx, s: readahead.Span) bool {
        var vec: [readahead.sample_pages_max]u8 = undefined;
        const map = ctx.r.maps[s.shard];
        const len: usize = @intCast(@min(s.len, map.len - s.offset));
        return sys.resident(map.ptr + @as(usize, @intCast(s.offset)), len, &vec) orelse true;
    }

    /// Called by each share [begin, end) of a cold batch before it reads: makes sure that the
    /// records from the share's start to readahead.ahead_bytes past its end have been hinted.
    /// Shares are claimed in increasing order, so the hinted frontier runs ahead of every
    /// worker's reads by about that much: the device's queue holds that many bytes of
    /// reads, and the page cache no more than that ahead of the copies.
    fn hintAhead(ctx: *const GatherCtx, end: u64) void {
        const f = ctx.frontier orelse return;
        const target = runEnd(ctx.r, ctx, end, readahead.ahead_bytes, readahead.window_records_max);
        var h = f.load(.monotonic);
        while (h < target) {
            h = f.cmpxchgWeak(h, target, .monotonic, .monotonic) orelse return ctx.hint(h, target);
        }
    }

    /// A share's probe found its first records slow: unless the next records are in the page
    /// cache after all (the time went elsewhere), the reader now expects cold data, and the
    /// rest of the batch is hinted, by the first share to get here; later ones hint the rest
    /// of their own share [next, share_end).
    fn onSlow(ctx: *const GatherCtx, next: u64, share_end: u64) void {
        const b = ctx.batch();
        if (b.nextResident(next, ctx.n)) return;
        ctx.r.estimate.set(true);
        if (!ctx.hinted.?.swap(true, .monotonic)) {
            ctx.hint(next, runEnd(ctx.r, ctx, next, readahead.window_bytes_max, readahead.window_records_max));
        } else ctx.hint(next, share_end);
    }

    /// Starts reading positions [begin, end) into the page cache.
    fn hint(ctx: *const GatherCtx, begin: u64, end: u64) void {
        ctx.batch().hint(begin, end);
    }
};

/// What one worker holds for one share [begin, end) of a call: acquired before its guarded
/// region and released after it, so that a SIGBUS ending the region leaks nothing.
const Share = struct {
    lease: ?DecoderLease = null,
    scratch: Scratch = .{},
    decode_scratch: Scratch = .{},
    /// Verify's checksums, read in record order (its buffer allocated for verify's shares
    /// only: a gather's shares would pay to set up 16 KiB they never use).
    sums: SumReader = .{},
    /// The share's guarded region, when it has one (`runShare`).
    guard: Guard,

    fn deinit(s: *Share, faulted: bool) void {
        if (s.lease) |*l| {
            // A fault may have ended a decode half way; the context is not worth trusting.
            if (faulted) l.discard() else l.release();
        }
        s.scratch.deinit();
        s.decode_scratch.deinit();
        if (s.sums.buf.len > 0) alloc.free(s.sums.buf);
    }
};

/// The checksums of consecutive records, read from index.zri a buffer at a time: verify reads
/// every record of its range in record order, and one read per checksum would cost a system
/// call per record.
const SumReader = struct {
    buf: []u8 = &.{},
    /// The records whose entries `buf` holds: [first, first + count).
    first: u64 = 0,
    count: u64 = 0,

    const sum_buffer_bytes = 16 << 10;

    fn init(s: *SumReader, d: *Diag) Error!void {
        s.buf = alloc.alloc(u8, sum_buffer_bytes) catch return d.noMemory("a buffer for the checksums verify reads");
    }

    fn get(s: *SumReader, r: *const Reader, rec: u64, d: *Diag) Error!u64 {
        const es = r.entry_size;
        if (rec < s.first or rec >= s.first + s.count) {
            const n = @min(sum_buffer_bytes / es, r.header.record_count - rec);
            var short = false;
            sys.preadAll(r.index_fd, s.buf[0..@intCast(n * es)], rec * es, &short) catch {
                d.record = @intCast(rec);
                if (short) return d.fail(error.Corrupt, "store '{s}': index.zri ended before the entry of " ++
                    "record {d}: the file was truncated after the store was opened (ZR-PUB-005)", .{ r.path, rec });
                return d.failOs(error.Io, sys.errno(), "store '{s}': reading the entries of records " ++
                    "from {d} in index.zri failed", .{ r.path, rec });
            };
            s.first = rec;
            s.count = n;
        }
        const at: usize = @intCast((rec - s.first) * es);
        return format.decodeEntry(s.buf[at..][0..es]).checksum;
    }
};

/// The work of one share [begin, end) of a call. Inside a guarded region it must store each
/// record's number in `share.guard` (volatile) before touching the record's mapped bytes, and
/// must not allocate or lock anything that a jump out of it would leave behind (see
/// sigbus_guard.c); what it needs lives in `share`.
const ShareWork = fn (ctx: *const GatherCtx, begin: u64, end: u64, share: *Share, d: *Diag) Error!void;

/// Whether a share runs inside the SIGBUS guard: any share that may touch a mapping must.
const Guarding = enum { guarded, unguarded };

/// Runs `work` on [begin, end) with a fresh `Share`. Guarded, a shard truncated after open (or
/// whose storage fails) makes the mapped copy fault, and the share then fails with
/// ZR_E_CORRUPT naming the record instead of killing the process.
fn runShare(
    ctx: *const GatherCtx,
    begin: u64,
    end: u64,
    d: *Diag,
    comptime guarding: Guarding,
    comptime work: ShareWork,
) Error!void {
    const r = ctx.r;
    var share: Share = .{ .guard = .{ .ranges = &r.guard_ranges, .range_count = r.header.data_shards } };
    var faulted = false;
    defer share.deinit(faulted);
    if (r.compressed()) share.lease = try acquireDecoder(r, d);
    if (ctx.job == .verify) try share.sums.init(d);
    if (guarding == .unguarded) return work(ctx, begin, end, &share, d);
    const Frame = struct {
        ctx: *const GatherCtx,
        begin: u64,
        end: u64,
        share: *Share,
        d: *Diag,
        result: Error!void = {},

        fn body(arg: ?*anyopaque) callconv(.c) void {
            const f: *@This() = @ptrCast(@alignCast(arg.?));
            f.result = work(f.ctx, f.begin, f.end, f.share, f.d);
        }
    };
    var frame: Frame = .{ .ctx = ctx, .begin = begin, .end = end, .share = &share, .d = d };
    if (zr_guard_run(&share.guard, Frame.body, &frame) != 0) {
        faulted = true;
        return mappingFault(r, share.guard.currentRecord(), d);
    }
    return frame.result;
}

/// `range` with the probe of a batch that probes (`GatherCtx.probe`: one expected warm, or
/// one found cached after a prefetch): the share's first readahead.probe_records records are
/// timed apart from the rest, and if they were slow the rest of the batch is hinted
/// (`GatherCtx.onSlow`). The loop over the rest is the same code as without a probe: the
/// probe costs two clock reads per share.
fn probed(comptime range: ShareWork) ShareWork {
    return struct {
        fn run(ctx: *const GatherCtx, begin: u64, end: u64, share: *Share, d: *Diag) Error!void {
            if (!ctx.probe or end <= begin) return range(ctx, begin, end, share, d);
            const mid = @min(end, begin + readahead.probe_records);
            // Fewer records of the batch after the probed ones than were probed: a slow probe
            // would hint too few (onSlow) to pay for its two clock reads and the split loop,
            // so none is made. A dataset's batch calls a gather of about 4 records per part
            // and judges the whole batch itself (_dataset.py): probes in the parts' gathers
            // cost 3-4% of a batch of 256 token records over 64 parts.
            if (ctx.n - mid < readahead.probe_records) return range(ctx, begin, end, share, d);
            const start = sys.monotonicNs();
            try range(ctx, begin, mid, share, d);
            const took = sys.monotonicNs() -% start;
            if (took > (mid - begin) * readahead.probe_ns_per_record) {
                var bytes: u64 = 0;
                var j = begin;
                while (j < mid) : (j += 1) bytes += ctx.r.location(ctx.record(j)).stored_size;
                if (readahead.slow(took, mid - begin, bytes)) ctx.onSlow(mid, end);
            }
            return range(ctx, mid, end, share, d);
        }
    }.run;
}

/// Copies (raw) or decodes positions [begin, end) of a Dense batch. The checksum is verified
/// on the stored bytes before they are copied or decoded, so a corrupt record is never returned,
/// no decoder sees unverified bytes, and overlapping outputs cannot fake a mismatch. Large
/// compressed records, and every record of a cold batch, are read with pread into a scratch
/// buffer first.
fn gatherDenseWork(ctx: *const GatherCtx, begin: u64, end: u64, d: *Diag) Error!void {
    const r = ctx.r;
    ctx.hintAhead(end);
    const rs: usize = @intCast(r.record_size);
    if (!r.compressed() and rs > 0) {
        // Records read with pread never touch a mapping, so they need no guard.
        if (rs >= pread_record_bytes_min or ctx.cold or r.check_every_read) {
            return runShare(ctx, begin, end, d, .unguarded, probed(gatherDenseRawPread));
        }
        return runShare(ctx, begin, end, d, .guarded, probed(gatherDenseRaw));
    }
    return runShare(ctx, begin, end, d, .guarded, probed(gatherDenseDecode));
}

/// gatherDenseWork for compressed records, and for raw records of size zero.
fn gatherDenseDecode(ctx: *const GatherCtx, begin: u64, end: u64, share: *Share, d: *Diag) Error!void {
    const r = ctx.r;
    const job = ctx.job.dense;
    const rs: usize = @intCast(r.record_size);
    var j = begin;
    while (j < end) : (j += 1) {
        const rec = job.idx[@intCast(j)];
        share.guard.setRecord(rec);
        const e = try r.place(rec, d);
        const pread = if (ctx.cold) e.stored_size > 0 else usesPread(r, e);
        const src = try storedView(r, rec, e, pread, &share.scratch, d);
        try checkOnce(r, rec, e, src, d);
        const dst: []u8 = if (rs > 0) job.out[@as(usize, @intCast(j)) * rs ..][0..rs] else &.{};
        if (share.lease) |*l| {
            try decodeRecord(r, l.get(), rec, e, src, dst, d);
        } else if (rs > 0) sys.copy(dst, src);
    }
}

/// Batch positions ahead of the copy at which a raw gather prefetches a record's block header
/// of the compact index, then (once that has arrived) the record's bit fields, then (once
/// those have) the start of its bytes. With fresh random indices each record costs dependent
/// cache misses, its index and then its data; for small records they, not the copy, set the
/// pace, and prefetching overlaps them with earlier copies.
const gather_prefetch_entry_ahead: u64 = 16;
const gather_prefetch_bits_ahead: u64 = 12;
const gather_prefetch_record_ahead: u64 = 8;
/// Bytes of a record's start that are prefetched; the hardware prefetcher streams the rest.
const gather_prefetch_record_bytes: usize = 256;

/// gatherDenseWork for raw records of nonzero size under `pread_record_bytes_min` in a batch
/// that is not cold: the same checks and copies, with the index entries and record starts of
/// later positions prefetched (a prefetch never faults, even on a page past the end of a
/// truncated file).
fn gatherDenseRaw(ctx: *const GatherCtx, begin: u64, end: u64, share: *Share, d: *Diag) Error!void {
    const r = ctx.r;
    const job = ctx.job.dense;
    const rs: usize = @intCast(r.record_size);
    const pf_bytes = @min(rs, gather_prefetch_record_bytes);
    var ring: [gather_prefetch_record_ahead]Location = undefined;
    var j = begin;
    while (j < end) : (j += 1) {
        // Out-of-range indices were rejected by checkIndices before any worker started.
        if (j + gather_prefetch_entry_ahead < end) {
            @prefetch(r.compact.headerOf(job.idx[@intCast(j + gather_prefetch_entry_ahead)]), .{});
        }
        if (j + gather_prefetch_bits_ahead < end) {
            r.compact.prefetchBits(job.idx[@intCast(j + gather_prefetch_bits_ahead)]);
        }
        const rec = job.idx[@intCast(j)];
        const slot: usize = @intCast(j % gather_prefetch_record_ahead);
        // The place found (and checked: `Reader.place`) for the prefetch,
        // `gather_prefetch_record_ahead` positions ago; its slot then takes the place of the
        // record as far ahead.
        const e = if (j >= begin + gather_prefetch_record_ahead) ring[slot] else try r.place(rec, d);
        if (j + gather_prefetch_record_ahead < end) {
            const ahead = try r.place(job.idx[@intCast(j + gather_prefetch_record_ahead)], d);
            ring[slot] = ahead;
            const p = r.maps[ahead.shard].ptr + @as(usize, @intCast(ahead.offset));
            var off: usize = 0;
            while (off < pf_bytes) : (off += 64) @prefetch(p + off, .{});
        }
        share.guard.setRecord(rec);
        const src = storedBytes(r, e);
        try checkOnce(r, rec, e, src, d);
        sys.copy(job.out[@as(usize, @intCast(j)) * rs ..][0..rs], src);
    }
}

/// gatherDenseWork for raw records of at least `pread_record_bytes_min` bytes, and for every
/// raw record of a cold batch: each is read with pread straight into its slot of the output
/// and checked there, so no page of the mapping is touched.
fn gatherDenseRawPread(ctx: *const GatherCtx, begin: u64, end: u64, share: *Share, d: *Diag) Error!void {
    const r = ctx.r;
    const job = ctx.job.dense;
    const rs: usize = @intCast(r.record_size);
    var j = begin;
    while (j < end) : (j += 1) {
        const rec = job.idx[@intCast(j)];
        const e = try r.place(rec, d);
        const dst = job.out[@as(usize, @intCast(j)) * rs ..][0..rs];
        if (readsDirect(r, e)) {
            // The aligned blocks land in private memory, checked before they are copied out.
            const src = try readDirect(r, rec, e, &share.scratch, d);
            try checkOnce(r, rec, e, src, d);
            sys.copy(dst, src);
            continue;
        }
        try readStored(r, rec, e, dst, d);
        try checkOutputOnce(r, rec, e, dst, d);
    }
}

fn gatherRaggedWork(ctx: *const GatherCtx, begin: u64, end: u64, d: *Diag) Error!void {
    ctx.hintAhead(end);
    return runShare(ctx, begin, end, d, .guarded, probed(gatherRagged));
}

/// Copies (raw) or decodes positions [begin, end) of a Ragged batch, each record to its
/// offset in the output, with the checks of gatherDenseWork.
fn gatherRagged(ctx: *const GatherCtx, begin: u64, end: u64, share: *Share, d: *Diag) Error!void {
    const r = ctx.r;
    const job = ctx.job.ragged;
    // The output was sized from the shapes the caller read first (Reader.gatherRagged); a
    // cache file changed under the reader since may say another size here, which must fail
    // the call, not reach past its slot or leave part of it unwritten (an index in the
    // reader's memory cannot change). A slot the caller gave was checked against the output
    // by the first pass, and each record's size is checked against its slot here.
    const mapped = r.mapsCacheFile();
    var j = begin;
    while (j < end) : (j += 1) {
        const rec = job.idx[@intCast(j)];
        share.guard.setRecord(rec);
        const e = try r.place(rec, d);
        const pread = if (ctx.cold) e.stored_size > 0 else usesPread(r, e);
        const at: usize = @intCast(job.offsets[@intCast(j)]);
        // Raw: the stored size is the logical size ([ZR-IDX-004]).
        const size = if (job.sizes) |s|
            s[@intCast(j)]
        else if (share.lease != null)
            r.logicalSize(rec)
        else
            e.stored_size;
        if (mapped and job.sizes == null and (size > job.out.len or at > job.out.len - size)) {
            return r.placeLost(rec, d);
        }
        if (job.sizes != null) {
            const holds = if (share.lease != null) r.logicalSize(rec) == size else e.stored_size == size;
            if (!holds) return slotMissed(r, rec, j, size, d);
        }
        if (share.lease) |*l| {
            const src = try storedView(r, rec, e, pread, &share.scratch, d);
            try checkOnce(r, rec, e, src, d);
            const dst: []u8 = if (size > 0) job.out[at..][0..@intCast(size)] else &.{};
            try decodeRecord(r, l.get(), rec, e, src, dst, d);
        } else {
            const dst = job.out[at..][0..@intCast(size)];
            if (pread and readsDirect(r, e)) {
                const src = try readDirect(r, rec, e, &share.scratch, d);
                try checkOnce(r, rec, e, src, d);
                sys.copy(dst, src);
                continue;
            }
            try copyRaw(r, rec, e, pread, dst, d);
        }
    }
}

/// A raw record's stored bytes, which fill `dst` (its slot, checked against its size by the
/// caller), into `dst`: read with pread and checked there, or checked in its mapping and
/// copied from it (in the caller's guarded region).
inline fn copyRaw(r: *const Reader, rec: u64, e: Location, pread: bool, dst: []u8, d: *Diag) Error!void {
    if (pread) {
        try readStored(r, rec, e, dst, d);
        return checkOutputOnce(r, rec, e, dst, d);
    }
    const src = storedBytes(r, e);
    try checkOnce(r, rec, e, src, d);
    if (src.len > 0) sys.copy(dst, src);
}

/// The error for Ragged record `rec` (batch position `j`) whose size is not its `slot`: its
/// mapped cache file changed in place since the caller's shapes() (Reader.placeLost), or, for
/// an index in the reader's memory, which cannot change, the caller's slot was wrong.
fn slotMissed(r: *const Reader, rec: u64, j: u64, slot: u64, d: *Diag) Error {
    if (r.mapsCacheFile()) return r.placeLost(rec, d);
    d.record = @intCast(rec);
    return d.fail(error.InvalidArgument, "gather_ragged: record {d} (position {d}) of store '{s}' " ++
        "does not have the {d} bytes of its output slot", .{ rec, j, r.path, slot });
}

fn verifyWork(ctx: *const GatherCtx, begin: u64, end: u64, d: *Diag) Error!void {
    ctx.hintAhead(end);
    return runShare(ctx, begin, end, d, .guarded, verifyRecords);
}

/// Checks every record's checksum (reading large ones with pread into a scratch buffer) and,
/// for compressed codecs, decodes it into a second scratch buffer.
fn verifyRecords(ctx: *const GatherCtx, begin: u64, end: u64, share: *Share, d: *Diag) Error!void {
    const r = ctx.r;
    const start = ctx.job.verify.start;
    var j = begin;
    while (j < end) : (j += 1) {
        const rec = start + j;
        share.guard.setRecord(rec);
        const e = try r.place(rec, d);
        const src = try storedView(r, rec, e, usesPread(r, e), &share.scratch, d);
        try checkRecord(r, rec, e, src, .whole(try share.sums.get(r, rec, d)), d);
        if (share.lease) |*l| {
            const logical = r.logicalSize(rec);
            if (logical > format.record_size_bytes_max) return r.placeLost(rec, d);
            const size: usize = @intCast(logical);
            try decodeRecord(r, l.get(), rec, e, src, try share.decode_scratch.get(size, rec, d), d);
        }
    }
}

// ---- a batch over many readers -----------------------------------------------------------

/// A batch of Ragged records over many readers (a dataset's parts) in one call
/// (zr_parts_gather_ragged), grouped by reader as a dataset's plan orders it: part g's
/// records are at plan positions bounds[g]..bounds[g+1], the one at plan position j is record
/// local[j] of rs[g], for batch position order[j], and goes into its slot of sizes[order[j]]
/// bytes at byte offsets[order[j]] of `out`. Taken only where every reader the batch touches
/// reads its share as `acrossFits` says, for fewer bytes than gather_parallel_bytes_min;
/// otherwise it returns `.declined` having read nothing, and the caller gathers part by part.
/// A part's call of its own costs its entry, checks and guarded region (a few hundred ns: a
/// batch of 256 token records over 64 parts calls 64 of them for about 4 records each); here
/// every touched reader is entered once and the records are read in one guarded region whose
/// ranges are the touched readers' mappings, each checked as `gatherRagged` checks it. Part
/// after part, not in the batch's order: a record that switches to another reader's state
/// (its index, its bases, its checked-record bits) costs D1 misses (callgrind, one loop of
/// batches of 256 token records over 64 parts: 8,497-8,569 D1 read misses a batch in batch
/// order, 7,846-7,951 grouped by part; docs/benchmarks.md).
///
/// With `expect_cold` (the caller found its last batch cold) the batch is sampled, as one
/// reader samples a batch it expects cold (`runBatch`): found outside the page cache, every
/// touched part's records are hinted first, all of them in the device's queue at once, then
/// read with pread (`.cold`); found there, it is read as a warm batch (`.warm`). Each part's
/// own gather would sample and hint again the records that the caller's hints across the
/// parts had just asked for (two system calls more a record: cold token batches over 64
/// parts ran at 0.64-0.78x one store's rate).
pub fn raggedAcross(
    rs: []const *Reader,
    plan: Plan,
    out: ?[*]u8,
    out_size: u64,
    slots: Slots,
    expect_cold: bool,
    d: *Diag,
) Error!Across {
    try plan.check(rs.len, d);
    var entered: usize = 0;
    defer for (rs[0..entered], 0..) |r, g| {
        if (plan.records(g) > 0) r.leave();
    };
    var ranges: usize = 0;
    for (rs, 0..) |r, g| {
        if (plan.records(g) == 0) continue;
        try r.enter(d);
        entered = g + 1;
        if (!acrossFits(r, expect_cold)) return .declined;
        ranges += r.header.data_shards;
    }
    // The slots, which are the caller's arrays only.
    var total: u64 = 0;
    var pos: u64 = 0;
    while (pos < plan.n) : (pos += 1) {
        const size = slots.sizes[@intCast(pos)];
        const off = slots.offsets[@intCast(pos)];
        if (size > out_size or off > out_size - size) return d.fail(error.InvalidArgument, "" ++
            "parts_gather_ragged: position {d} has {d} bytes at output offset {d}, past the " ++
            "end of the {d}-byte output", .{ pos, size, off, out_size });
        total +|= size;
    }
    if (total > 0 and out == null) return d.fail(error.InvalidArgument, "parts_gather_ragged got " ++
        "a null output buffer for {d} bytes", .{total});
    // A batch this large is worth the workers that a part's own call may start (workerCount).
    if (total >= gather_parallel_bytes_min) return .declined;
    // Each part's records checked by one call, as a part's own gather checks them (judging
    // an index part reads and locks: not in the guarded region).
    for (rs, 0..) |r, g| {
        const k = plan.records(g);
        if (k > 0) try r.checkIndices(plan.part(g), k, d);
    }
    const found: Sampled = if (expect_cold) sampleAcross(rs, plan) else .{ .how = .warm, .pread = false };
    // The guard's ranges: every shard mapping of the touched readers.
    const guard_ranges = alloc.alloc(GuardRange, @max(ranges, 1)) catch
        return d.noMemory("the mappings a batch over many parts reads");
    defer alloc.free(guard_ranges);
    var at: usize = 0;
    for (rs, 0..) |r, g| {
        if (plan.records(g) == 0) continue;
        const k: usize = r.header.data_shards;
        @memcpy(guard_ranges[at..][0..k], r.guard_ranges[0..k]);
        at += k;
    }
    try copyAcross(rs, plan, outSlice(out, out_size), slots, guard_ranges[0..at], found.pread, d);
    for (rs, 0..) |r, g| {
        if (plan.records(g) > 0) try r.intact({}, d);
    }
    return found.how;
}

/// How raggedAcross took a batch (zr_parts_gather_ragged's `*taken`).
pub const Across = enum(u32) { declined = 0, warm = 1, cold = 2 };

/// What `sampleAcross` found, and whether the batch is read with pread.
const Sampled = struct { how: Across, pread: bool };

/// A batch over many readers that the caller expects cold: `.cold` where a reader reads every
/// batch hinted (ZR_READS_HINTED), or a sample of the largest part's records finds them
/// outside the page cache; each touched reader's estimate is set to what was found, and the
/// records of a `.cold` batch are hinted, part after part, before any is read. Read with
/// pread (`pread`) where found cold, or where a touched reader had a prefetch's hint to
/// honour (its pages are cached because they were hinted: `readahead.Estimate.prefetched`).
fn sampleAcross(rs: []const *Reader, plan: Plan) Sampled {
    var largest: usize = 0;
    var hinted_mode = false;
    for (rs, 0..) |r, g| {
        if (plan.records(g) > plan.records(largest)) largest = g;
        if (plan.records(g) > 0 and r.readMode() == .hinted) hinted_mode = true;
    }
    const cold = hinted_mode or !partCtx(rs[largest], plan, largest).batch().sampleResident(0, plan.records(largest));
    var pread = cold;
    for (rs, 0..) |r, g| {
        if (plan.records(g) == 0) continue;
        r.estimate.set(cold);
        if (r.estimate.takePrefetched()) pread = true;
        if (cold) partCtx(r, plan, g).hint(0, plan.records(g));
    }
    return .{ .how = if (cold) .cold else .warm, .pread = pread };
}

/// Part g's records of a plan, as a prefetch's context (for samples and hints).
fn partCtx(r: *Reader, plan: Plan, g: usize) GatherCtx {
    return .{ .r = r, .job = .{ .prefetch = .{ .idx = plan.part(g) } }, .n = plan.records(g) };
}

/// A dataset's plan of a batch of `n` records (see raggedAcross): order, local, bounds.
pub const Plan = struct {
    order: [*]const u64,
    local: [*]const u64,
    bounds: [*]const u64,
    n: u64,

    fn records(p: Plan, g: usize) u64 {
        return p.bounds[g + 1] - p.bounds[g];
    }

    /// Part g's local record numbers.
    fn part(p: Plan, g: usize) [*]const u64 {
        return p.local + @as(usize, @intCast(p.bounds[g]));
    }

    /// The part of plan position `j` (< n; bounds checked): the last with bounds[g] <= j.
    fn partAt(p: Plan, j: u64) usize {
        var g: usize = 0;
        while (p.bounds[g + 1] <= j) g += 1;
        return g;
    }

    /// Bounds that start at 0, never fall and end at n, and positions below n.
    fn check(p: Plan, parts: usize, d: *Diag) Error!void {
        if (p.bounds[0] != 0 or p.bounds[parts] != p.n) return d.fail(error.InvalidArgument, "" ++
            "parts_gather_ragged: the plan's bounds run from {d} to {d}, not 0 to {d}", .{
            p.bounds[0], p.bounds[parts], p.n,
        });
        for (0..parts) |g| {
            if (p.bounds[g + 1] < p.bounds[g]) return d.fail(error.InvalidArgument, "parts_gather_ragged: " ++
                "the plan's bounds fall at part {d}", .{g});
        }
        var j: u64 = 0;
        while (j < p.n) : (j += 1) {
            if (p.order[@intCast(j)] >= p.n) return d.fail(error.InvalidArgument, "parts_gather_ragged: " ++
                "plan position {d} names batch position {d} of {d}", .{ j, p.order[@intCast(j)], p.n });
        }
    }
};

/// Where each batch position's record goes: byte offsets[pos] of the output, sizes[pos] bytes.
pub const Slots = struct {
    offsets: [*]const u64,
    sizes: [*]const u64,
};

/// Whether reader `r` reads its share of a batch over many readers as `raggedAcross` does: a
/// raw store whose index is in its own memory (so the caller's slots need no second look),
/// with no O_DIRECT and no check of every read; for a batch the caller expects warm, read
/// through its mappings and taken to be in the page cache (mode `mapped`, or `auto` with
/// neither a cold estimate nor a prefetch's hint to honour: those gathers sample, hint or
/// pread, part by part in `runBatch`); for one it expects cold, a reader that may be hinted
/// (`auto` or `hinted`: the batch is sampled and hinted across the parts).
fn acrossFits(r: *Reader, expect_cold: bool) bool {
    if (r.compressed() or r.mapsCacheFile() or r.bypass or r.pread_every_record or r.check_every_read) return false;
    return switch (r.readMode()) {
        .mapped => !expect_cold,
        .hinted => expect_cold,
        .auto => expect_cold or (!r.estimate.expectsCold() and r.estimate.prefetched.load(.monotonic) == 0),
    };
}

/// raggedAcross's reads, in one guarded region over `ranges`; the guard holds the plan
/// position being read, from which a fault names its reader and record. With `pread`, every
/// record is read with pread, none through the mappings.
fn copyAcross(
    rs: []const *Reader,
    plan: Plan,
    out: []u8,
    slots: Slots,
    ranges: []const GuardRange,
    pread: bool,
    d: *Diag,
) Error!void {
    var c: AcrossCopy = .{
        .rs = rs,
        .plan = plan,
        .out = out,
        .slots = slots,
        .pread = pread,
        .guard = .{ .ranges = ranges.ptr, .range_count = ranges.len },
        .d = d,
    };
    if (zr_guard_run(&c.guard, AcrossCopy.body, &c) != 0) {
        const j = c.guard.currentRecord();
        if (j >= plan.n) return mappingFault(rs[plan.partAt(0)], Guard.no_record, d);
        return mappingFault(rs[plan.partAt(j)], plan.local[@intCast(j)], d);
    }
    return c.result;
}

/// copyAcross's arguments, its guard and its result: the frame of its guarded region.
const AcrossCopy = struct {
    rs: []const *Reader,
    plan: Plan,
    out: []u8,
    slots: Slots,
    pread: bool,
    guard: Guard,
    d: *Diag,
    result: Error!void = {},

    fn body(arg: ?*anyopaque) callconv(.c) void {
        const c: *AcrossCopy = @ptrCast(@alignCast(arg.?));
        c.result = c.work();
    }

    fn work(c: *AcrossCopy) Error!void {
        const plan = c.plan;
        for (c.rs, 0..) |r, g| {
            var j = plan.bounds[g];
            while (j < plan.bounds[g + 1]) : (j += 1) {
                const pos = plan.order[@intCast(j)];
                const rec = plan.local[@intCast(j)];
                c.guard.setRecord(j);
                const e = try r.place(rec, c.d);
                const size = c.slots.sizes[@intCast(pos)];
                // Raw: the stored size is the logical size ([ZR-IDX-004]).
                if (e.stored_size != size) return slotMissed(r, rec, pos, size, c.d);
                const dst = c.out[@intCast(c.slots.offsets[@intCast(pos)])..][0..@intCast(size)];
                try copyRaw(r, rec, e, c.pread or usesPread(r, e), dst, c.d);
            }
        }
    }
};

// ---- tests ------------------------------------------------------------------------------

test "a checksum mismatch found in the caller's output is confirmed by a second read" {
    const t = @import("testing.zig");
    const root = @import("root.zig");
    const gpa = std.testing.allocator;
    var td: t.TempDir = .{};
    try td.init();
    const rs: usize = @intCast(pread_record_bytes_min);
    const data = try gpa.alloc(u8, 2 * rs);
    defer gpa.free(data);
    for (data, 0..) |*b, i| b.* = t.pattern(i);
    try t.writeDense(&td, "s", 0, "", 1, rs, data, &.{2});
    const r = try t.openOk(&td, "s");
    // What an overlapping output or another thread of the caller might leave in the slot.
    const dst = try gpa.alloc(u8, rs);
    defer gpa.free(dst);
    @memset(dst, 0x5A);
    var d: Diag = .{};
    try checkOutputOnce(r, 1, r.location(1), dst, &d);
    try std.testing.expect(isVerified(r, 1));
    try std.testing.expectEqualSlices(u8, data[rs..], dst);
    root.zr_reader_free(r);
    td.removeStore("s", 1);
    try td.deinitExpectEmpty();
}

extern "c" fn fork() c_int;
extern "c" fn waitpid(pid: c_int, status: *c_int, options: c_int) c_int;
extern "c" fn _exit(code: c_int) noreturn;

extern "c" fn truncate(path: [*:0]const u8, length: i64) c_int;
extern "c" fn raise(sig: c_int) c_int;
extern "c" fn dup2(old: c_int, new: c_int) c_int;

test "a shard truncated after open fails the mapped gather and verify with ZR_E_CORRUPT, not SIGBUS" {
    // Windows: no fork.
    if (comptime @import("builtin").os.tag == .windows) return error.SkipZigTest;
    // [R1] item 6: records under pread_record_bytes_min are copied from the shard's mapping,
    // and a page past the new end of a truncated file raised SIGBUS there.
    const t = @import("testing.zig");
    const root = @import("root.zig");
    var td: t.TempDir = .{};
    try td.init();
    const rs = 2048;
    var data: [16 * rs]u8 = undefined;
    for (&data, 0..) |*b, i| b.* = t.pattern(i);
    try t.writeDense(&td, "s", 0, "", 1, rs, &data, &.{16});
    const r = try t.openOk(&td, "s");
    var pbuf: [256]u8 = undefined;
    // Records 0 and 1 keep their bytes; record 2 starts on the first page past the new end.
    try std.testing.expectEqual(@as(c_int, 0), truncate(td.sub(&pbuf, "s/data-000.zrd"), 2 * rs));
    var out: [16 * rs]u8 = undefined;
    var idx: [16]u64 = undefined;
    for (&idx, 0..) |*v, i| v.* = i;
    var st: abi.Status = undefined;
    for ([_]u32{ 1, 2 }) |threads| {
        try std.testing.expectEqual(
            abi.Result.corrupt.code(),
            root.zr_reader_gather_dense(r, &idx, 16, &out, out.len, threads, &st),
        );
        try t.expectContains(t.msg(&st), "data-000.zrd");
        try t.expectContains(t.msg(&st), "truncated");
        try std.testing.expect(st.record >= 2);
        try std.testing.expectEqual(@as(i32, 0), st.shard);
    }
    try std.testing.expectEqual(abi.Result.corrupt.code(), root.zr_reader_verify(r, 0, 16, &st));
    try t.expectContains(t.msg(&st), "record 2 ");
    // The reader stays usable for what is left, and a fault left no region behind: a SIGBUS
    // raised outside any region still goes to the disposition before ours (checked in a child,
    // which it ends).
    try std.testing.expectEqual(@as(c_int, 0), root.zr_reader_gather_dense(r, &idx, 2, &out, 2 * rs, 1, &st));
    try std.testing.expectEqualSlices(u8, data[0 .. 2 * rs], out[0 .. 2 * rs]);
    const pid = fork();
    if (pid == 0) {
        // The handler before ours (the test runner's) prints a stack trace; it is expected.
        const null_fd = sys.open("/dev/null", sys.O_WRONLY, 0) catch _exit(2);
        _ = dup2(null_fd, 2);
        _ = raise(7); // SIGBUS
        _exit(0);
    }
    var status: c_int = 0;
    try std.testing.expectEqual(pid, waitpid(pid, &status, 0));
    // Killed by a signal (the low 7 bits of the status hold it), not exited.
    try std.testing.expect(status & 0x7f != 0);
    root.zr_reader_free(r);
    td.removeStore("s", 1);
    try td.deinitExpectEmpty();
}

test "a slow probe hints the rest of the batch only when the next records are not in the page cache" {
    // The probe's timing is not under a test's control; what it triggers is: GatherCtx.onSlow
    // asks mincore about the next records before it trusts the clock.
    const t = @import("testing.zig");
    const root = @import("root.zig");
    var td: t.TempDir = .{};
    try td.init();
    const rs = 4096;
    var data: [64 * rs]u8 = undefined;
    for (&data, 0..) |*b, i| b.* = t.pattern(i);
    try t.writeDense(&td, "s", 0, "", 1, rs, &data, &.{64});
    var idx: [64]u64 = undefined;
    for (&idx, 0..) |*v, i| v.* = 63 - i;
    for ([_]bool{ false, true }) |evicting| {
        const cold = evicting and try t.evict(&td, "s", 1);
        const r = try t.openOk(&td, "s");
        r.estimate.set(false);
        var hinted: std.atomic.Value(bool) = .init(false);
        const ctx: GatherCtx = .{
            .r = r,
            .job = .{ .prefetch = .{ .idx = &idx } },
            .n = idx.len,
            .probe = true,
            .hinted = &hinted,
        };
        ctx.onSlow(4, 16);
        // Resident: the time went elsewhere (another process, a first touch), nothing changes.
        try std.testing.expectEqual(cold, r.estimate.expectsCold());
        try std.testing.expectEqual(cold, hinted.load(.monotonic));
        // A second share that finds its records slow hints only its own rest.
        ctx.onSlow(20, 24);
        try std.testing.expectEqual(cold, hinted.load(.monotonic));
        try t.expectDenseGather(r, &data, rs, &idx, 1);
        root.zr_reader_free(r);
    }
    td.removeStore("s", 1);
    try td.deinitExpectEmpty();
}
