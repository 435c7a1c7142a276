//! The store reader: validates a published store when it is opened, then serves random-access
//! gathers from the shard files: small records are copied from read-only shared mappings,
//! large ones (and every record of a cold batch) are read with pread(2), or with O_DIRECT when
//! the store was opened to bypass the page cache.
//!
//! Invariants:
//! - Opening checks every rule of the spec that needs no record data: the header (§3), each
//!   shard's size, the index's size and checksum, and every index entry in isolation (§4).
//!   After open, every entry's byte range lies inside its shard's mapping, so gathers index
//!   the mappings without further bounds doubt.
//! - The store directory is opened once (a symbolic link to it is followed) and every store
//!   file is opened relative to it with O_NOFOLLOW and checked to be a regular file
//!   ([ZR-GEN-004]), so every byte the reader reads, hashes or sizes belongs to a file inside
//!   the store. Messages never echo a checksum the reader computed: a mismatch says which
//!   checksum the store expected, not what the bytes hash to.
//! - Sizes read from disk are checked before anything is allocated from them: the header
//!   against `format.header_size_bytes_max`, the index against the header and the file. An
//!   index larger than `index_check_chunk_bytes` must also match its checksum, streamed
//!   through a buffer of that size, before its copy is allocated: open allocates memory in
//!   proportion to the index only once its bytes are the ones the header sealed, never to what
//!   a (sparse) file claims. Open takes O(header + index) time: the index is read twice when
//!   it is larger than that buffer.
//! - A record's checksum is verified before its bytes are returned for the first time by this
//!   reader ([ZR-SUM-002]); a bit per record remembers it. Bits are set atomically and only
//!   after a successful check, so concurrent gathers may verify a record twice, never zero
//!   times.
//! - Concurrency: every call increments the count of calls in flight and then checks `state`;
//!   close sets `state` and then waits for the count to drain before unmapping. Both sides use
//!   sequentially consistent operations, so either the call sees the closing state or close
//!   sees the call. The handle itself (path, header, dictionary) lives until `free`, so a late
//!   call on a closed reader fails with ZR_E_CLOSED instead of touching freed memory.
//! - fork(): a child gets a copy of the reader made while other threads of the parent may have
//!   been inside calls, or closing it; those threads do not exist in the child. The count of
//!   calls in flight and the closing states carry the fork generation (sys.forkGeneration) of
//!   the process whose threads they describe, so a child discards counts and half-done closes
//!   it inherited instead of waiting for them forever. No thread of ours is inside a call in the
//!   child at the moment of fork (the forking thread is not in a call), so discarding is exact.
//!   Decoder slots that parent threads held stay taken in the child and are never reused or
//!   freed: their thread may have been inside libzstd with them.
//! - Compressed stores (spec §6): every record is decoded straight into its place in the
//!   caller's output, only after its stored bytes passed the checksum, and must decode to
//!   exactly its logical size ([ZR-IDX-005]). A zstd_dict store's dictionary is compiled once
//!   at open ([ZR-COD-002]) and shared read-only. Decompression contexts come from a fixed set
//!   of slots, each claimed by an atomic flag and created on first use; a thread that finds
//!   every slot taken uses a temporary context for its call. Slots are freed only by close,
//!   once no call is in flight.
//! - Records whose stored size is at least `pread_record_bytes_min`, and every record of a
//!   store whose mean stored size is at least that, are read with pread(2) on a descriptor held
//!   open per shard, never through the mapping: raw ones straight into their
//!   place in the caller's output, compressed ones into a scratch buffer of the worker, which
//!   is then decoded into the output. Their checksum is verified on the bytes read; a mismatch
//!   found in the caller's output is confirmed by a second read into private memory before it
//!   is reported, so overlapping Ragged outputs cannot fake one.
//! - Cold batches (readahead.zig): a batch that the reader's estimate and a mincore sample
//!   find outside the page cache is hinted ahead of its reads (posix_fadvise WILLNEED) and
//!   every record of it is read with pread, none through the mappings; so is a batch found in
//!   the page cache just after a prefetch call hinted records (they were brought in for this
//!   read, and mapping them would charge their pages to the process), each share timing its
//!   first records as a warm batch's do; any other batch expected warm is read as before
//!   (small records through the mappings), each share timing its first records. Either way
//!   each record is checked exactly as above. Hints and samples are system calls about files
//!   and mappings, never a touch of a mapped byte, and keep no state across calls but the
//!   estimate (two atomics).
//! - Cache bypass (`bypass`, ZR_OPEN_CACHE_BYPASS): records that use pread and fit a scratch
//!   buffer are read with O_DIRECT, in whole aligned blocks, into a worker's page-aligned
//!   scratch buffer, checked there and copied or decoded out; they are never hinted.
//! - The mappings are of files that the spec makes immutable after publication
//!   ([ZR-PUB-005]). A file truncated by someone else after open is reported as ZR_E_CORRUPT:
//!   by the pread path when a read comes up short, and on the mapping path by the SIGBUS
//!   guard of sigbus_guard.c, inside which every worker's share of a gather or verify that may
//!   touch a mapping runs (one guarded region per share, not per record). A SIGBUS outside a
//!   guarded region, or at an address outside this reader's mappings, is not ours and goes to
//!   whatever handled SIGBUS before.

const std = @import("std");
const abi = @import("abi.zig");
const diag_mod = @import("diag.zig");
const format = @import("format.zig");
const parallel = @import("parallel.zig");
const sys = @import("sys.zig");
const codec = @import("codec.zig");
const zstd_dict = @import("zstd_dict.zig");
const readahead = @import("readahead.zig");

const Diag = diag_mod.Diag;
const Error = diag_mod.Error;
const alloc = std.heap.c_allocator;
const Map = []align(std.heap.page_size_min) const u8;

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

/// An index larger than this is streamed through a buffer of this size to check its checksum
/// before the reader allocates its copy; a smaller one is read once, straight into the copy.
pub const index_check_chunk_bytes: usize = 1 << 20;

/// A shard mapping as the SIGBUS guard sees it (sigbus_guard.c's struct zr_guard_range).
const GuardRange = extern struct {
    base: ?[*]const u8 = null,
    len: usize = 0,
};

/// One guarded region (sigbus_guard.c's struct zr_guard), on the stack of runGuarded.
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

extern fn zr_guard_install() void;
extern fn zr_guard_run(g: *Guard, body: *const fn (?*anyopaque) callconv(.c) void, arg: ?*anyopaque) c_int;

const DecoderSlot = struct {
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

/// `Reader.state` packs one of these (low byte) with the fork generation of the process whose
/// thread set it (high 32 bits); `Reader.flight` packs that generation with the count of calls
/// in flight (low 32 bits).
const state_open: u8 = 0;
const state_closing: u8 = 1;
/// Set once calls have drained, while the files are being released.
const state_releasing: u8 = 2;
const state_closed: u8 = 3;

fn packGen(gen: u32, low: u32) u64 {
    return @as(u64, gen) << 32 | low;
}

fn genOf(word: u64) u32 {
    return @intCast(word >> 32);
}

fn lowOf(word: u64) u32 {
    return @truncate(word);
}

pub const Reader = struct {
    /// Calls in flight, with the fork generation they were counted in (see packGen).
    flight: std.atomic.Value(u64) = .init(0),
    state: std.atomic.Value(u64) = .init(state_open),
    /// The fork generation of the process that opened the reader.
    opened_gen: u32 = 0,
    path: [:0]const u8,
    header: format.Header,
    header_bytes: []u8,
    record_size: u64,
    itemsize: u64,
    entry_size: usize,
    maps: [format.data_shards_max]Map = @splat(&.{}),
    /// The same mappings, for the SIGBUS guard.
    guard_ranges: [format.data_shards_max]GuardRange = @splat(.{}),
    /// One read-only descriptor per shard, for the pread path; -1 where none is open.
    fds: [format.data_shards_max]sys.Fd = @splat(-1),
    /// Whether every record is read with pread, not only large ones (set by validateIndex).
    pread_every_record: bool = false,
    /// Opened with ZR_OPEN_CACHE_BYPASS: records read with pread (and at most
    /// `pread_scratch_bytes_max` stored bytes) are read with O_DIRECT through `direct_fds`,
    /// never into the page cache, and never hinted.
    bypass: bool = false,
    /// One O_DIRECT descriptor per non-empty shard when `bypass`; -1 elsewhere.
    direct_fds: [format.data_shards_max]sys.Fd = @splat(-1),
    /// Whether `checkLayout` has passed; verify runs it until it has.
    layout_checked: std.atomic.Value(bool) = .init(false),
    index: []u8 = &.{},
    verified: []u64 = &.{},
    /// zstd_dict: the header's dictionary compiled for decompression.
    ddict: ?codec.SharedDict = null,
    decoders: [decoder_slots_count]DecoderSlot = @splat(.{}),
    /// Whether gathers expect the store's records to be in the page cache (readahead.zig).
    estimate: readahead.Estimate = .{},
    /// A readahead.Mode: how batches not known to be in the page cache are read.
    reads: std.atomic.Value(u8) = .init(@intFromEnum(readahead.Mode.auto)),

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
        zr_guard_install();
        const header_bytes = try readHeader(dfd, path, d);
        var keep_header = false;
        defer if (!keep_header) alloc.free(header_bytes);
        var name_buf: [4096 + 16]u8 = undefined;
        const hname = std.fmt.bufPrint(&name_buf, "{s}/header.zrh", .{path}) catch "header.zrh";
        const h = try format.decodeHeader(header_bytes, hname, d);

        const r = alloc.create(Reader) catch return noMemory(d, "the reader handle");
        r.* = .{
            .path = "",
            .header = h,
            .header_bytes = header_bytes,
            .record_size = if (h.kind == .dense) h.recordSize() else 0,
            .itemsize = h.itemsize(),
            .entry_size = h.index_entry_size,
            .opened_gen = sys.forkGeneration(),
            .bypass = flags & abi.open_cache_bypass != 0,
        };
        r.flight.store(packGen(r.opened_gen, 0), .seq_cst);
        r.state.store(packGen(r.opened_gen, state_open), .seq_cst);
        keep_header = true;
        errdefer {
            r.releaseFiles();
            alloc.free(r.header_bytes);
            if (r.path.len > 0) alloc.free(r.path);
            alloc.destroy(r);
        }
        r.path = alloc.dupeSentinel(u8, path, 0) catch return noMemory(d, "the store path");
        // [ZR-COD-002] decodeHeader has verified dict_checksum ([ZR-HDR-013]); a malformed
        // zstd-format dictionary is rejected here, used by a record or not ([ZR-COD-004]).
        if (h.codec == .zstd_dict) {
            // [ZR-COD-010] .. [ZR-COD-012] checked here, by spec section 6.3, so that the
            // message says which rule; libzstd then compiles what passed.
            if (zstd_dict.check(r.dict())) |problem| return d.fail(error.Corrupt, "store '{s}': the " ++
                "{d}-byte zstd-format dictionary in header.zrh is malformed: {s} (ZR-COD-004, {s})", .{ path, h.dict_size, problem.what, problem.rule });
            r.ddict = codec.SharedDict.initDecompress(r.dict()) catch |err| switch (err) {
                error.OutOfMemory => return noMemory(d, "the decompression dictionary"),
                else => return d.fail(error.Corrupt, "store '{s}': the {d}-byte dictionary in " ++
                    "header.zrh is not a valid zstd dictionary (it has the zstd dictionary magic " ++
                    "but malformed entropy tables), so no record can be decoded (ZR-COD-004)", .{ path, h.dict_size }),
            };
        }
        try r.mapShards(dfd, d);
        if (r.bypass) try r.openDirect(dfd, d);
        try r.readIndex(dfd, d);
        try r.validateIndex(d);
        const words: usize = @intCast((h.record_count + 63) / 64);
        r.verified = alloc.alloc(u64, words) catch return noMemory(d, "the verification bitmap");
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
                "header ({d} bytes) (ZR-HDR-003)", .{ hname, st.size, format.header_size_bytes_max });
        }
        const bytes = alloc.alloc(u8, @intCast(st.size)) catch return noMemory(d, "the header");
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
            const buf = alloc.alloc(u8, index_check_chunk_bytes) catch return noMemory(d, "a buffer to check the index");
            defer alloc.free(buf);
            if (try hashFile(fd, len, buf, r.path, "index.zri", d) != r.header.index_checksum) return indexChecksumError(r, d);
        }
        r.index = alloc.alloc(u8, len) catch return noMemory(d, "the index");
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
            shard_sums[bytes[12]] +|= format.decodeEntry(bytes).stored_size;
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
            stored_sum / r.header.record_count >= pread_record_bytes_min;
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
    fn checkLayout(r: *const Reader, d: *Diag) Error!void {
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
            try r.checkShardLayoutSorted(@intCast(k), d);
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
        const placed = alloc.alloc(Placed, count) catch return noMemory(d, "the sorted record ranges of a shard for verify");
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

    fn entryBytes(r: *const Reader, rec: u64) []const u8 {
        return r.index[@intCast(rec * r.entry_size)..][0..r.entry_size];
    }

    /// A record's logical size; its shape was validated against the limits at open.
    fn logicalSize(r: *const Reader, rec: u64) u64 {
        if (r.header.kind == .dense) return r.record_size;
        const bytes = r.entryBytes(rec);
        var dims: [format.ndim_max]u64 = undefined;
        for (dims[0..r.header.ndim], 0..) |*dim, axis| dim.* = format.entryDim(bytes, axis);
        return format.logicalSize(dims[0..r.header.ndim], r.itemsize).?;
    }

    fn compressed(r: *const Reader) bool {
        return r.header.codec != .raw;
    }

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
                    return noMemory(d, "a zstd decompression context");
                };
            }
            return .{ .slot = slot };
        }
        const temp = codec.Decompressor.init(shared) catch return noMemory(d, "a zstd decompression context");
        return .{ .slot = null, .temp = temp };
    }

    /// Decodes record `rec`, whose checksum has passed, into exactly `dst`
    /// ([ZR-IDX-005]).
    fn decodeRecord(r: *const Reader, dec: *codec.Decompressor, rec: u64, e: format.Entry, src: []const u8, dst: []u8, d: *Diag) Error!void {
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
                    const why = if (dec.reason) |reason| reason else if (dec.last_code != 0) codec.errorName(dec.last_code) else "it is not " ++
                        "exactly one complete frame with a content size, made without a dictionary " ++
                        "or with this store's";
                    break :blk d.fail(error.DecodeFailed, "store '{s}': record {d} ({d} stored bytes " ++
                        "at offset {d} of data-{d:0>3}.zrd) failed to decode as a zstd frame of {s}: " ++
                        "{s} (ZR-IDX-005)", .{ r.path, rec, e.stored_size, e.offset, e.shard, what, why });
                },
            };
        };
    }

    /// The stored bytes of a record; in bounds by the validation done at open.
    fn storedBytes(r: *const Reader, e: format.Entry) []const u8 {
        return r.maps[e.shard][@intCast(e.offset)..][0..e.stored_size];
    }

    fn isVerified(r: *const Reader, rec: u64) bool {
        const word = @atomicLoad(u64, &r.verified[@intCast(rec / 64)], .monotonic);
        return word & (@as(u64, 1) << @intCast(rec % 64)) != 0;
    }

    fn markVerified(r: *const Reader, rec: u64) void {
        _ = @atomicRmw(u64, &r.verified[@intCast(rec / 64)], .Or, @as(u64, 1) << @intCast(rec % 64), .monotonic);
    }

    /// [ZR-SUM-001] Checks a record's stored bytes against the index.
    fn checkRecord(r: *const Reader, rec: u64, e: format.Entry, stored: []const u8, d: *Diag) Error!void {
        if (format.xxh64(stored) == e.checksum) {
            r.markVerified(rec);
            return;
        }
        d.record = @intCast(rec);
        d.shard = e.shard;
        return d.fail(error.ChecksumMismatch, "store '{s}': record {d} is corrupt: its {d} stored " ++
            "bytes at offset {d} of data-{d:0>3}.zrd do not match the index's checksum " ++
            "0x{x:0>16} (ZR-SUM-001)", .{ r.path, rec, e.stored_size, e.offset, e.shard, e.checksum });
    }

    /// Whether a record is read with pread(2) rather than from the mapping. Empty records
    /// need neither.
    fn usesPread(r: *const Reader, e: format.Entry) bool {
        return e.stored_size >= pread_record_bytes_min or (r.pread_every_record and e.stored_size > 0);
    }

    /// Whether record `e` is read with O_DIRECT (`bypass`).
    fn readsDirect(r: *const Reader, e: format.Entry) bool {
        return r.bypass and r.usesPread(e) and e.stored_size <= pread_scratch_bytes_max;
    }

    /// Reads record `rec`'s stored bytes with O_DIRECT, for `bypass`: the aligned blocks that
    /// hold them go into `scratch` (page-aligned), and the result borrows the record's bytes
    /// from it. A file that ends before the record's last byte was truncated after open.
    fn readDirect(r: *const Reader, rec: u64, e: format.Entry, scratch: *Scratch, d: *Diag) Error![]const u8 {
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
                    "offset {d}) from data-{d:0>3}.zrd with O_DIRECT failed", .{ r.path, rec, e.stored_size, e.offset, e.shard });
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
    fn readStored(r: *const Reader, rec: u64, e: format.Entry, buf: []u8, d: *Diag) Error!void {
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

    /// [ZR-SUM-001] Checks a record read into the caller's output. Another position of an
    /// overlapping Ragged output, or another thread of the caller, may have written into `dst`
    /// since it was read, so a mismatch is confirmed on a second read into private memory
    /// before it is reported; if that read passes, it is copied into `dst`.
    fn checkInOutput(r: *const Reader, rec: u64, e: format.Entry, dst: []u8, d: *Diag) Error!void {
        if (format.xxh64(dst) == e.checksum) {
            r.markVerified(rec);
            return;
        }
        const again = alloc.alloc(u8, e.stored_size) catch {
            d.record = @intCast(rec);
            return noMemory(d, "a buffer to re-read a record whose checksum failed");
        };
        defer alloc.free(again);
        try r.readStored(rec, e, again, d);
        try r.checkRecord(rec, e, again, d);
        @memcpy(dst, again);
    }

    /// The error for a SIGBUS that ended a guarded region while it worked on record `rec`
    /// (Guard.no_record if it had not begun one, which no body does before touching a mapping).
    fn mappingFault(r: *const Reader, rec: u64, d: *Diag) Error {
        if (rec >= r.header.record_count) return d.fail(error.Corrupt, "store '{s}': a shard file " ++
            "could not be read through its mapping (SIGBUS): it was truncated after the store was " ++
            "opened, or its storage failed (ZR-PUB-005)", .{r.path});
        const e = format.decodeEntry(r.entryBytes(rec));
        d.record = @intCast(rec);
        d.shard = e.shard;
        return d.fail(error.Corrupt, "store '{s}': the {d} stored bytes of record {d} at offset {d} " ++
            "of data-{d:0>3}.zrd could not be read through its mapping (SIGBUS): the file was " ++
            "truncated after the store was opened, or its storage failed (ZR-PUB-005)", .{ r.path, e.stored_size, rec, e.offset, e.shard });
    }

    /// Record `rec`'s stored bytes: from the mapping, or for a large record read with pread
    /// into `scratch`, whose contents the result then borrows.
    fn storedView(r: *const Reader, rec: u64, e: format.Entry, pread: bool, scratch: *Scratch, d: *Diag) Error![]const u8 {
        if (r.readsDirect(e)) return r.readDirect(rec, e, scratch, d);
        if (!pread or e.stored_size > pread_scratch_bytes_max) return r.storedBytes(e);
        const buf = try scratch.get(e.stored_size, rec, d);
        try r.readStored(rec, e, buf, d);
        return buf;
    }

    /// Registers a call in flight, or fails if the reader is closing or closed.
    fn enter(r: *Reader, d: *Diag) Error!void {
        const gen = sys.forkGeneration();
        var f = r.flight.load(.seq_cst);
        while (true) {
            // A count of an earlier generation was inherited across fork(): the calls it
            // counts were made by threads that do not exist in this process, so it restarts.
            const next = if (genOf(f) == gen) f + 1 else packGen(gen, 1);
            f = r.flight.cmpxchgWeak(f, next, .seq_cst, .seq_cst) orelse break;
        }
        if (lowOf(r.state.load(.seq_cst)) != state_open) {
            r.leave();
            return d.fail(error.Closed, "the reader of store '{s}' is closed", .{r.path});
        }
    }

    /// Ends a call begun by `enter` in this process. The count it decrements is of this
    /// process's generation: `enter` put it there, and only a fork (which no thread inside a
    /// call makes) starts another generation, in another process.
    fn leave(r: *Reader) void {
        _ = r.flight.fetchSub(1, .seq_cst);
    }

    fn checkIndices(r: *const Reader, idx: [*]const u64, n: u64, d: *Diag) Error!void {
        var i: u64 = 0;
        while (i < n) : (i += 1) {
            const v = idx[@intCast(i)];
            if (v >= r.header.record_count) return d.fail(error.IndexOutOfRange, "index {d} at " ++
                "position {d} is out of range for store '{s}' of {d} records", .{ v, i, r.path, r.header.record_count });
        }
    }

    pub fn gatherDense(r: *Reader, idx: ?[*]const u64, n: u64, out: ?[*]u8, out_size: u64, threads: u32, d: *Diag) Error!void {
        try r.enter(d);
        defer r.leave();
        if (r.header.kind != .dense) return d.fail(error.InvalidArgument, "gather_dense on the " ++
            "Ragged store '{s}'; use shapes and gather_ragged", .{r.path});
        const want = std.math.mul(u64, n, r.record_size) catch return d.fail(error.InvalidArgument, "" ++
            "{d} records of {d} bytes overflow 64 bits", .{ n, r.record_size });
        if (out_size != want) return d.fail(error.InvalidArgument, "gather_dense got an output of " ++
            "{d} bytes for {d} records, but {d} records of record_size {d} need exactly {d}", .{ out_size, n, n, r.record_size, want });
        if (n == 0) return;
        if (idx == null) return d.fail(error.InvalidArgument, "gather_dense got a null index array", .{});
        if (want > 0 and out == null) return d.fail(error.InvalidArgument, "gather_dense got a " ++
            "null output buffer for {d} bytes", .{want});
        try r.checkIndices(idx.?, n, d);
        const ctx: GatherCtx = .{ .r = r, .idx = idx.?, .out = out orelse undefined, .n = n };
        try r.runBatch(&ctx, want, threads, gatherDenseWork, d);
    }

    pub fn shapes(r: *Reader, idx: ?[*]const u64, n: u64, shapes_out: ?[*]u64, sizes_out: ?[*]u64, d: *Diag) Error!void {
        try r.enter(d);
        defer r.leave();
        if (n == 0) return;
        if (idx == null or sizes_out == null or (shapes_out == null and r.header.ndim > 0)) {
            return d.fail(error.InvalidArgument, "shapes got a null index, shapes or sizes array " ++
                "for {d} records", .{n});
        }
        const ndim: usize = r.header.ndim;
        _ = std.math.mul(u64, n, ndim) catch return d.fail(error.InvalidArgument, "shapes: {d} " ++
            "records of {d} axes overflow 64 bits", .{ n, ndim });
        try r.checkIndices(idx.?, n, d);
        var i: u64 = 0;
        while (i < n) : (i += 1) {
            const rec = idx.?[@intCast(i)];
            const dst: []u64 = if (ndim > 0) shapes_out.?[@intCast(i * ndim)..][0..ndim] else &.{};
            switch (r.header.kind) {
                .dense => {
                    @memcpy(dst, r.header.item_shape[0..ndim]);
                    sizes_out.?[@intCast(i)] = r.record_size;
                },
                .ragged => {
                    const bytes = r.entryBytes(rec);
                    for (dst, 0..) |*v, axis| v.* = format.entryDim(bytes, axis);
                    sizes_out.?[@intCast(i)] = r.logicalSize(rec);
                },
            }
        }
    }

    pub fn gatherRagged(
        r: *Reader,
        idx: ?[*]const u64,
        n: u64,
        out: ?[*]u8,
        offsets: ?[*]const u64,
        out_size: u64,
        threads: u32,
        d: *Diag,
    ) Error!void {
        try r.enter(d);
        defer r.leave();
        if (n == 0) return;
        if (idx == null or offsets == null) return d.fail(error.InvalidArgument, "gather_ragged " ++
            "got a null index or offsets array for {d} records", .{n});
        try r.checkIndices(idx.?, n, d);
        var total: u64 = 0;
        var i: u64 = 0;
        while (i < n) : (i += 1) {
            const rec = idx.?[@intCast(i)];
            const size = r.logicalSize(rec);
            const off = offsets.?[@intCast(i)];
            if (size > out_size or off > out_size - size) return d.fail(error.InvalidArgument, "" ++
                "gather_ragged: record {d} (position {d}) has {d} bytes at output offset {d}, " ++
                "past the end of the {d}-byte output", .{ rec, i, size, off, out_size });
            total +|= size;
        }
        if (total > 0 and out == null) return d.fail(error.InvalidArgument, "gather_ragged got a " ++
            "null output buffer for {d} bytes", .{total});
        const ctx: GatherCtx = .{ .r = r, .idx = idx.?, .out = out orelse undefined, .offsets = offsets.?, .n = n };
        try r.runBatch(&ctx, total, threads, gatherRaggedWork, d);
    }

    /// How this reader reads batches not known to be in the page cache.
    pub fn readMode(r: *const Reader) readahead.Mode {
        return @enumFromInt(r.reads.load(.monotonic));
    }

    pub fn setReadMode(r: *Reader, mode: readahead.Mode) void {
        r.reads.store(@intFromEnum(mode), .monotonic);
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
        return parallel.run(GatherCtx, &ctx, work, n, r.workerCount(bytes, n, threads, cold), .claimed, d);
    }

    /// The end of the run of positions from `begin` (at least one record, unless `begin` is
    /// the end) whose stored bytes stay within `bytes_max` and records within `records_max`.
    fn runEnd(r: *const Reader, ctx: *const GatherCtx, begin: u64, bytes_max: u64, records_max: u64) u64 {
        var end = begin;
        var stored: u64 = 0;
        while (end < ctx.n and end - begin < records_max) {
            const size = format.decodeEntry(r.entryBytes(ctx.record(end))).stored_size;
            if (end > begin and stored + size > bytes_max) break;
            stored += size;
            end += 1;
        }
        return end;
    }

    /// Starts reading records idx[0..n) into the page cache and returns without waiting for
    /// them (zr_reader_prefetch): nothing when a residency sample finds them there, or the
    /// reader's mode is `mapped`; otherwise hints for at most readahead.prefetch_records_max
    /// records and readahead.window_bytes_max stored bytes, the first ones given.
    pub fn prefetch(r: *Reader, idx: ?[*]const u64, n: u64, d: *Diag) Error!void {
        try r.enter(d);
        defer r.leave();
        if (n == 0) return;
        if (idx == null) return d.fail(error.InvalidArgument, "prefetch got a null index array", .{});
        try r.checkIndices(idx.?, n, d);
        const mode = r.readMode();
        if (mode == .mapped) return;
        const ctx: GatherCtx = .{ .r = r, .idx = idx.?, .out = undefined, .n = @min(n, readahead.prefetch_records_max) };
        if (mode == .auto) {
            const resident = ctx.batch().sampleResident(0, ctx.n);
            r.estimate.notePrefetch(!resident);
            if (resident) return;
        }
        ctx.batch().hint(0, r.runEnd(&ctx, 0, readahead.window_bytes_max, readahead.window_records_max));
    }

    pub fn verify(r: *Reader, start: u64, n: u64, d: *Diag) Error!void {
        try r.enter(d);
        defer r.leave();
        if (start > r.header.record_count or n > r.header.record_count - start) {
            return d.fail(error.IndexOutOfRange, "verify range [{d}, {d}+{d}) is out of range " ++
                "for store '{s}' of {d} records", .{ start, start, n, r.path, r.header.record_count });
        }
        // Record checksums prove only the bytes of records; that they prove the whole store
        // rests on the layout, which no range of records can see alone. Checked once per
        // reader, whichever range is verified first; a failure is reported by every verify.
        if (!r.layout_checked.load(.acquire)) {
            try r.checkLayout(d);
            r.layout_checked.store(true, .release);
        }
        var total: u64 = 0;
        var i: u64 = start;
        // Hashing reads the stored bytes; decoding writes the logical ones.
        while (i < start + n) : (i += 1) {
            total += if (r.compressed()) r.logicalSize(i) else format.decodeEntry(r.entryBytes(i)).stored_size;
        }
        // Verify reads every record of the range once, in record order: its hints coalesce into
        // long ranges, which cost next to nothing where the store is in the page cache and
        // turn one read per page into long reads where it is not.
        var frontier: std.atomic.Value(u64) = .init(0);
        const ctx: GatherCtx = .{ .r = r, .idx = undefined, .out = undefined, .start = start, .n = n, .in_order = true, .frontier = &frontier };
        try parallel.run(GatherCtx, &ctx, verifyWork, n, r.workerCount(total, n, 0, false), .claimed, d);
    }

    pub fn fillInfo(r: *const Reader, info: *abi.Info) void {
        const h = &r.header;
        info.* = std.mem.zeroes(abi.Info);
        info.schema.kind = @backingInt(h.kind);
        info.schema.dtype = h.dtype;
        info.schema.dtype_length = h.dtype_length;
        info.schema.dtype_unit = h.dtype_unit;
        info.schema.ndim = h.ndim;
        info.schema.codec = @backingInt(h.codec);
        info.schema.data_shards = h.data_shards;
        if (h.kind == .dense) @memcpy(info.schema.item_shape[0..h.ndim], h.item_shape[0..h.ndim]);
        info.format_major = h.format_major;
        info.format_minor = h.format_minor;
        info.dict_size = h.dict_size;
        info.record_count = h.record_count;
        info.logical_bytes = h.logical_bytes;
        info.stored_bytes = h.stored_bytes;
        info.record_size = r.record_size;
        info.itemsize = r.itemsize;
        info.header_checksum = h.header_checksum;
    }

    pub fn dict(r: *const Reader) []const u8 {
        return r.header_bytes[r.header.dict_offset..][0..r.header.dict_size];
    }

    /// Unmaps and closes the shards and frees the index and bitmap (not the handle, path or
    /// header).
    fn releaseFiles(r: *Reader) void {
        for (&r.maps, &r.guard_ranges) |*m, *g| {
            if (m.len > 0) sys.munmap(m.*);
            m.* = &.{};
            g.* = .{};
        }
        for (&r.fds, &r.direct_fds) |*fd, *dfd| {
            if (fd.* >= 0) sys.close(fd.*);
            fd.* = -1;
            if (dfd.* >= 0) sys.close(dfd.*);
            dfd.* = -1;
        }
        if (r.index.len > 0) alloc.free(r.index);
        r.index = &.{};
        if (r.verified.len > 0) alloc.free(r.verified);
        r.verified = &.{};
        // Decompressors borrow the compiled dictionary, so they go first.
        for (&r.decoders) |*slot| {
            if (slot.busy.load(.acquire)) {
                // Calls have drained, so the slot is held by a thread of the process this one
                // was forked from. That thread may have been inside libzstd with the context,
                // so the context is left as it is: never reused, never freed.
                std.debug.assert(sys.forkGeneration() != r.opened_gen);
                continue;
            }
            if (slot.dec) |*dec| dec.deinit();
            slot.dec = null;
        }
        if (r.ddict) |*dd| dd.deinit();
        r.ddict = null;
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

    /// Closes the reader, or waits until another thread of this process has closed it; returns
    /// once the files are released.
    pub fn close(r: *Reader) void {
        const gen = sys.forkGeneration();
        var s = r.state.load(.seq_cst);
        while (true) {
            const ours = genOf(s) == gen;
            switch (lowOf(s)) {
                state_open => {
                    s = r.state.cmpxchgStrong(s, packGen(gen, state_closing), .seq_cst, .seq_cst) orelse
                        return r.finishClose(gen);
                },
                state_closing => if (ours) {
                    sys.yield();
                    s = r.state.load(.seq_cst);
                } else {
                    // The closing thread was in the process this one was forked from, and had
                    // released nothing yet: this thread takes its place.
                    s = r.state.cmpxchgStrong(s, packGen(gen, state_closing), .seq_cst, .seq_cst) orelse
                        return r.finishClose(gen);
                },
                state_releasing => if (ours) {
                    sys.yield();
                    s = r.state.load(.seq_cst);
                } else {
                    // This process was forked while the parent released the files; how far it
                    // got in this copy is unknown, so nothing more is released here (the
                    // copies of the mappings and descriptors go when the process exits).
                    s = r.state.cmpxchgStrong(s, packGen(gen, state_closed), .seq_cst, .seq_cst) orelse
                        return;
                },
                else => return,
            }
        }
    }

    /// The rest of `close` for the thread that set the closing state in generation `gen`.
    fn finishClose(r: *Reader, gen: u32) void {
        var spins: usize = 0;
        while (true) : (spins += 1) {
            const f = r.flight.load(.seq_cst);
            // A count of an earlier generation was inherited across fork(): its threads do
            // not exist in this process.
            if (genOf(f) != gen or lowOf(f) == 0) break;
            if (spins < 64) std.atomic.spinLoopHint() else sys.yield();
        }
        r.state.store(packGen(gen, state_releasing), .seq_cst);
        r.releaseFiles();
        r.state.store(packGen(gen, state_closed), .seq_cst);
    }

    pub fn free(r: *Reader) void {
        r.close();
        alloc.free(r.header_bytes);
        alloc.free(r.path);
        alloc.destroy(r);
    }
};

/// A worker's buffer for the length of its share of one call: reused across its records,
/// grown to the largest size asked of it, and freed when the share ends.
const Scratch = struct {
    /// Aligned for O_DIRECT reads (`Reader.readDirect`).
    buf: []align(sys.direct_align_bytes) u8 = &.{},

    fn get(s: *Scratch, size: usize, rec: u64, d: *Diag) Error![]u8 {
        if (size > s.buf.len) {
            s.deinit();
            s.buf = alloc.alignedAlloc(u8, .fromByteUnits(sys.direct_align_bytes), size) catch {
                d.record = @intCast(rec);
                return noMemory(d, "a worker's buffer to read or decode a record");
            };
        }
        return s.buf[0..size];
    }

    fn deinit(s: *Scratch) void {
        if (s.buf.len > 0) alloc.free(s.buf);
        s.buf = &.{};
    }
};

const GatherCtx = struct {
    r: *Reader,
    idx: [*]const u64,
    out: [*]u8,
    offsets: [*]const u64 = undefined,
    start: u64 = 0,
    /// Positions in the batch.
    n: u64,
    /// Verify: position `pos` is record `start + pos`, and `idx` is not used.
    in_order: bool = false,
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
        return if (ctx.in_order) ctx.start + pos else ctx.idx[@intCast(pos)];
    }

    /// The stored bytes of the record at position `pos`, for readahead.Batch.
    pub fn span(ctx: *const GatherCtx, pos: u64) readahead.Span {
        const e = format.decodeEntry(ctx.r.entryBytes(ctx.record(pos)));
        // Records read with O_DIRECT never go through the page cache: nothing to hint or ask.
        if (ctx.r.readsDirect(e)) return .{ .shard = e.shard, .offset = e.offset, .len = 0 };
        return .{ .shard = e.shard, .offset = e.offset, .len = e.stored_size };
    }

    /// Starts reading a page-aligned span of a shard into the page cache (readahead.Batch).
    pub fn advise(ctx: *const GatherCtx, s: readahead.Span) void {
        sys.fadviseRange(ctx.r.fds[s.shard], s.offset, s.len, sys.POSIX_FADV_WILLNEED);
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
        const target = ctx.r.runEnd(ctx, end, readahead.ahead_bytes, readahead.window_records_max);
        var h = f.load(.monotonic);
        while (h < target) {
            h = f.cmpxchgWeak(h, target, .monotonic, .monotonic) orelse return ctx.batch().hint(h, target);
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
            b.hint(next, ctx.r.runEnd(ctx, next, readahead.window_bytes_max, readahead.window_records_max));
        } else b.hint(next, share_end);
    }
};

/// What one worker holds for one share of a call: acquired before its guarded region and
/// released after it, so that a SIGBUS ending the region leaks nothing.
const Share = struct {
    lease: ?DecoderLease = null,
    scratch: Scratch = .{},
    decode_scratch: Scratch = .{},

    fn deinit(s: *Share, faulted: bool) void {
        if (s.lease) |*l| {
            // A fault may have ended a decode half way; the context is not worth trusting.
            if (faulted) l.discard() else l.release();
        }
        s.scratch.deinit();
        s.decode_scratch.deinit();
    }
};

/// The body of a guarded region: a worker's share [begin, end) of a call. It must store each
/// record's number in `guard.record` (volatile) before touching the record's mapped bytes, and
/// must not allocate or lock anything that a jump out of it would leave behind (see
/// sigbus_guard.c); what it needs lives in `share`.
const GuardedWork = fn (ctx: *const GatherCtx, begin: u64, end: u64, share: *Share, guard: *Guard, d: *Diag) Error!void;

/// Runs `work` on [begin, end) inside the SIGBUS guard: a shard truncated after open (or whose
/// storage fails) makes the mapped copy fault, and the share then fails with ZR_E_CORRUPT
/// naming the record instead of killing the process.
fn runGuarded(ctx: *const GatherCtx, begin: u64, end: u64, d: *Diag, comptime work: GuardedWork) Error!void {
    const r = ctx.r;
    var share: Share = .{};
    if (r.compressed()) share.lease = try r.acquireDecoder(d);
    var faulted = false;
    defer share.deinit(faulted);
    var guard: Guard = .{ .ranges = &r.guard_ranges, .range_count = r.header.data_shards };
    const Frame = struct {
        ctx: *const GatherCtx,
        begin: u64,
        end: u64,
        share: *Share,
        guard: *Guard,
        d: *Diag,
        result: Error!void = {},

        fn body(arg: ?*anyopaque) callconv(.c) void {
            const f: *@This() = @ptrCast(@alignCast(arg.?));
            f.result = work(f.ctx, f.begin, f.end, f.share, f.guard, f.d);
        }
    };
    var frame: Frame = .{ .ctx = ctx, .begin = begin, .end = end, .share = &share, .guard = &guard, .d = d };
    if (zr_guard_run(&guard, Frame.body, &frame) != 0) {
        faulted = true;
        return r.mappingFault(guard.currentRecord(), d);
    }
    return frame.result;
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
        if (rs >= pread_record_bytes_min or ctx.cold) return probed(ctx, begin, end, .{}, gatherDenseRawPread, d);
        return runGuarded(ctx, begin, end, d, gatherDenseRaw);
    }
    return runGuarded(ctx, begin, end, d, gatherDenseDecode);
}

/// The share [begin, end) of a batch through `range(ctx, cold, begin, end, args..., d)`.
/// A batch read with pread (`GatherCtx.cold`) passes `cold` true, any other false. A batch
/// that probes (`GatherCtx.probe`: one expected warm, or one found cached after a prefetch)
/// has its first readahead.probe_records records timed apart from the rest, and if they were
/// slow the rest of the batch is hinted (`GatherCtx.onSlow`). The loop over the rest is the
/// same code as without a probe: the probe costs two clock reads per share.
fn probed(ctx: *const GatherCtx, begin: u64, end: u64, args: anytype, comptime range: anytype, d: *Diag) Error!void {
    return if (ctx.cold) probedAs(true, ctx, begin, end, args, range, d) else probedAs(false, ctx, begin, end, args, range, d);
}

fn probedAs(comptime cold: bool, ctx: *const GatherCtx, begin: u64, end: u64, args: anytype, comptime range: anytype, d: *Diag) Error!void {
    if (!ctx.probe or end <= begin) return @call(.auto, range, .{ ctx, cold, begin, end } ++ args ++ .{d});
    const mid = @min(end, begin + readahead.probe_records);
    const start = sys.monotonicNs();
    try @call(.auto, range, .{ ctx, cold, begin, mid } ++ args ++ .{d});
    const took = sys.monotonicNs() -% start;
    if (took > (mid - begin) * readahead.probe_ns_per_record) {
        var bytes: u64 = 0;
        var j = begin;
        while (j < mid) : (j += 1) bytes += format.decodeEntry(ctx.r.entryBytes(ctx.record(j))).stored_size;
        if (readahead.slow(took, mid - begin, bytes)) ctx.onSlow(mid, end);
    }
    return @call(.auto, range, .{ ctx, cold, mid, end } ++ args ++ .{d});
}

/// gatherDenseWork for compressed records, and for raw records of size zero.
fn gatherDenseDecode(ctx: *const GatherCtx, begin: u64, end: u64, share: *Share, guard: *Guard, d: *Diag) Error!void {
    return probed(ctx, begin, end, .{ share, guard }, gatherDenseDecodeRange, d);
}

fn gatherDenseDecodeRange(ctx: *const GatherCtx, comptime cold: bool, begin: u64, end: u64, share: *Share, guard: *Guard, d: *Diag) Error!void {
    const r = ctx.r;
    const rs: usize = @intCast(r.record_size);
    var j = begin;
    while (j < end) : (j += 1) {
        const rec = ctx.idx[@intCast(j)];
        guard.setRecord(rec);
        const e = format.decodeEntry(r.entryBytes(rec));
        const pread = if (cold) e.stored_size > 0 else r.usesPread(e);
        const src = try r.storedView(rec, e, pread, &share.scratch, d);
        if (!r.isVerified(rec)) try r.checkRecord(rec, e, src, d);
        const dst: []u8 = if (rs > 0) ctx.out[@as(usize, @intCast(j)) * rs ..][0..rs] else &.{};
        if (share.lease) |*l| {
            try r.decodeRecord(l.get(), rec, e, src, dst, d);
        } else if (rs > 0) sys.copy(dst, src);
    }
}

/// Batch positions ahead of the copy at which a raw gather prefetches a record's index entry,
/// and then (once that entry has arrived) the start of its bytes. With fresh random indices each
/// record costs two dependent cache misses, its entry and then its data; for small records
/// they, not the copy, set the pace, and prefetching overlaps them with earlier copies.
const gather_prefetch_entry_ahead: u64 = 16;
const gather_prefetch_record_ahead: u64 = 8;
/// Bytes of a record's start that are prefetched; the hardware prefetcher streams the rest.
const gather_prefetch_record_bytes: usize = 256;

/// gatherDenseWork for raw records of nonzero size under `pread_record_bytes_min` in a batch
/// that is not cold: the same checks and copies, with the index entries and record starts of
/// later positions prefetched (a prefetch never faults, even on a page past the end of a
/// truncated file).
fn gatherDenseRaw(ctx: *const GatherCtx, begin: u64, end: u64, share: *Share, guard: *Guard, d: *Diag) Error!void {
    _ = share;
    return probed(ctx, begin, end, .{guard}, gatherDenseRawRange, d);
}

fn gatherDenseRawRange(ctx: *const GatherCtx, comptime cold: bool, begin: u64, end: u64, guard: *Guard, d: *Diag) Error!void {
    std.debug.assert(!cold); // cold batches read raw records with gatherDenseRawPread
    const r = ctx.r;
    const rs: usize = @intCast(r.record_size);
    const es = r.entry_size;
    const idx = ctx.idx;
    const pf_bytes = @min(rs, gather_prefetch_record_bytes);
    var j = begin;
    while (j < end) : (j += 1) {
        if (j + gather_prefetch_entry_ahead < end) {
            const ahead = idx[@intCast(j + gather_prefetch_entry_ahead)];
            // Out-of-range indices were rejected by checkIndices before any worker started.
            @prefetch(r.index.ptr + @as(usize, @intCast(ahead)) * es, .{});
        }
        if (j + gather_prefetch_record_ahead < end) {
            const ahead = format.decodeEntry(r.entryBytes(idx[@intCast(j + gather_prefetch_record_ahead)]));
            const p = r.maps[ahead.shard].ptr + @as(usize, @intCast(ahead.offset));
            var off: usize = 0;
            while (off < pf_bytes) : (off += 64) @prefetch(p + off, .{});
        }
        const rec = idx[@intCast(j)];
        guard.setRecord(rec);
        const e = format.decodeEntry(r.entryBytes(rec));
        const src = r.storedBytes(e);
        if (!r.isVerified(rec)) try r.checkRecord(rec, e, src, d);
        sys.copy(ctx.out[@as(usize, @intCast(j)) * rs ..][0..rs], src);
    }
}

/// gatherDenseWork for raw records of at least `pread_record_bytes_min` bytes, and for every
/// raw record of a cold batch: each is read with pread straight into its slot of the output
/// and checked there, so no page of the mapping is touched.
fn gatherDenseRawPread(ctx: *const GatherCtx, comptime cold: bool, begin: u64, end: u64, d: *Diag) Error!void {
    _ = cold;
    const r = ctx.r;
    const rs: usize = @intCast(r.record_size);
    var scratch: Scratch = .{};
    defer scratch.deinit();
    var j = begin;
    while (j < end) : (j += 1) {
        const rec = ctx.idx[@intCast(j)];
        const e = format.decodeEntry(r.entryBytes(rec));
        const dst = ctx.out[@as(usize, @intCast(j)) * rs ..][0..rs];
        if (r.readsDirect(e)) {
            // The aligned blocks land in private memory, checked before they are copied out.
            const src = try r.readDirect(rec, e, &scratch, d);
            if (!r.isVerified(rec)) try r.checkRecord(rec, e, src, d);
            sys.copy(dst, src);
            continue;
        }
        try r.readStored(rec, e, dst, d);
        if (!r.isVerified(rec)) try r.checkInOutput(rec, e, dst, d);
    }
}

fn gatherRaggedWork(ctx: *const GatherCtx, begin: u64, end: u64, d: *Diag) Error!void {
    ctx.hintAhead(end);
    return runGuarded(ctx, begin, end, d, gatherRagged);
}

fn gatherRagged(ctx: *const GatherCtx, begin: u64, end: u64, share: *Share, guard: *Guard, d: *Diag) Error!void {
    return probed(ctx, begin, end, .{ share, guard }, gatherRaggedRange, d);
}

fn gatherRaggedRange(ctx: *const GatherCtx, comptime cold: bool, begin: u64, end: u64, share: *Share, guard: *Guard, d: *Diag) Error!void {
    const r = ctx.r;
    var j = begin;
    while (j < end) : (j += 1) {
        const rec = ctx.idx[@intCast(j)];
        guard.setRecord(rec);
        const e = format.decodeEntry(r.entryBytes(rec));
        const pread = if (cold) e.stored_size > 0 else r.usesPread(e);
        if (share.lease) |*l| {
            const src = try r.storedView(rec, e, pread, &share.scratch, d);
            if (!r.isVerified(rec)) try r.checkRecord(rec, e, src, d);
            const size: usize = @intCast(r.logicalSize(rec));
            const dst: []u8 = if (size > 0) ctx.out[@intCast(ctx.offsets[@intCast(j)])..][0..size] else &.{};
            try r.decodeRecord(l.get(), rec, e, src, dst, d);
        } else if (pread) {
            // Raw: the stored size is the logical size ([ZR-IDX-004]).
            const dst = ctx.out[@intCast(ctx.offsets[@intCast(j)])..][0..e.stored_size];
            if (r.readsDirect(e)) {
                const src = try r.readDirect(rec, e, &share.scratch, d);
                if (!r.isVerified(rec)) try r.checkRecord(rec, e, src, d);
                sys.copy(dst, src);
                continue;
            }
            try r.readStored(rec, e, dst, d);
            if (!r.isVerified(rec)) try r.checkInOutput(rec, e, dst, d);
        } else {
            const src = r.storedBytes(e);
            if (!r.isVerified(rec)) try r.checkRecord(rec, e, src, d);
            if (src.len > 0) sys.copy(ctx.out[@intCast(ctx.offsets[@intCast(j)])..][0..src.len], src);
        }
    }
}

fn verifyWork(ctx: *const GatherCtx, begin: u64, end: u64, d: *Diag) Error!void {
    ctx.hintAhead(end);
    return runGuarded(ctx, begin, end, d, verifyRecords);
}

/// Checks every record's checksum (reading large ones with pread into a scratch buffer) and,
/// for compressed codecs, decodes it into a second scratch buffer.
fn verifyRecords(ctx: *const GatherCtx, begin: u64, end: u64, share: *Share, guard: *Guard, d: *Diag) Error!void {
    const r = ctx.r;
    var j = begin;
    while (j < end) : (j += 1) {
        const rec = ctx.start + j;
        guard.setRecord(rec);
        const e = format.decodeEntry(r.entryBytes(rec));
        const src = try r.storedView(rec, e, r.usesPread(e), &share.scratch, d);
        try r.checkRecord(rec, e, src, d);
        if (share.lease) |*l| {
            const size: usize = @intCast(r.logicalSize(rec));
            try r.decodeRecord(l.get(), rec, e, src, try share.decode_scratch.get(size, rec, d), d);
        }
    }
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

fn noMemory(d: *Diag, what: []const u8) Error {
    return d.fail(error.OutOfMemory, "out of memory allocating {s}", .{what});
}

test "a checksum mismatch found in the caller's output is confirmed by a second read" {
    const t = @import("tests.zig");
    const tz = @import("tests_zstd.zig");
    const root = @import("root.zig");
    const gpa = std.testing.allocator;
    var td: t.TempDir = .{};
    try td.init();
    const rs: usize = @intCast(pread_record_bytes_min);
    const data = try gpa.alloc(u8, 2 * rs);
    defer gpa.free(data);
    for (data, 0..) |*b, i| b.* = t.pattern(i);
    try tz.writeDense(&td, "s", 0, "", 1, rs, data, &.{2});
    const r = try tz.openOk(&td, "s");
    // What an overlapping output or another thread of the caller might leave in the slot.
    const dst = try gpa.alloc(u8, rs);
    defer gpa.free(dst);
    @memset(dst, 0x5A);
    var d: Diag = .{};
    try r.checkInOutput(1, format.decodeEntry(r.entryBytes(1)), dst, &d);
    try std.testing.expect(r.isVerified(1));
    try std.testing.expectEqualSlices(u8, data[rs..], dst);
    root.zr_reader_free(r);
    td.removeStore("s", 1);
    try td.deinitExpectEmpty();
}

extern "c" fn mkfifo(path: [*:0]const u8, mode: c_uint) c_int;

test "a FIFO in place of a store file is refused at open, not waited on" {
    // Found by review of the fuzz harness's file mutations: open(2) of a FIFO for reading
    // blocks until a writer appears, so before O_NONBLOCK such a store hung its opener forever.
    const t = @import("tests.zig");
    const tz = @import("tests_zstd.zig");
    const root = @import("root.zig");
    var td: t.TempDir = .{};
    try td.init();
    const names = [_][]const u8{ "header.zrh", "index.zri", "data-000.zrd" };
    const data = [_]u8{ 1, 2, 3, 4 };
    for (names, 0..) |name, k| {
        var sbuf: [8]u8 = undefined;
        const store = std.fmt.bufPrint(&sbuf, "s{d}", .{k}) catch unreachable;
        try tz.writeDense(&td, store, 0, "", 1, 2, &data, &.{2});
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
    const t = @import("tests.zig");
    const tz = @import("tests_zstd.zig");
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
        try tz.writeDense(&td, store, 0, "", 1, 2, &data, &.{2});
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

extern "c" fn fork() c_int;
extern "c" fn waitpid(pid: c_int, status: *c_int, options: c_int) c_int;
extern "c" fn alarm(seconds: c_uint) c_uint;
extern "c" fn _exit(code: c_int) noreturn;

test "a child forked while calls are in flight and a decoder slot is held can close the reader" {
    // [R1] item 5: fork() while another thread was inside a gather left the child's copy of the
    // reader counting a call that no thread of the child would ever finish, and the child's
    // close waited forever. The thread inside the call is stood in for by its marks: a count
    // in flight and a held decoder slot.
    const t = @import("tests.zig");
    const tz = @import("tests_zstd.zig");
    const root = @import("root.zig");
    var td: t.TempDir = .{};
    try td.init();
    var data: [64 * 16]u8 = undefined;
    for (&data, 0..) |*b, i| b.* = t.pattern(i / 3);
    try tz.writeDense(&td, "s", 1, "", 1, 64, &data, &.{16});
    const r = try tz.openOk(&td, "s");
    // A gather that needs a decoder creates the slot's context.
    try tz.expectDenseGather(r, &data, 64, &.{ 3, 1 }, 1);
    var d: Diag = .{};
    try r.enter(&d);
    const slot = &r.decoders[0];
    try std.testing.expect(!slot.busy.swap(true, .acquire));
    const pid = fork();
    if (pid == 0) {
        // The child: a read, then close, must finish; a hang dies by SIGALRM.
        _ = alarm(20);
        var out: [64 * 2]u8 = undefined;
        const idx = [_]u64{ 5, 0 };
        var st: abi.Status = undefined;
        var code: c_int = 0;
        if (root.zr_reader_gather_dense(r, &idx, 2, &out, out.len, 1, &st) != 0) code = 2;
        if (!std.mem.eql(u8, out[0..64], data[5 * 64 ..][0..64])) code = 3;
        root.zr_reader_close(r);
        if (root.zr_reader_gather_dense(r, &idx, 2, &out, out.len, 1, &st) != -7) code = 4;
        root.zr_reader_free(r);
        _exit(code);
    }
    try std.testing.expect(pid > 0);
    var status: c_int = 0;
    try std.testing.expectEqual(pid, waitpid(pid, &status, 0));
    // Exited (no signal), with status 0.
    try std.testing.expectEqual(@as(c_int, 0), status);
    // In this process the call and the slot are real until they end.
    slot.busy.store(false, .release);
    r.leave();
    root.zr_reader_free(r);
    td.removeStore("s", 1);
    try td.deinitExpectEmpty();
}

extern "c" fn truncate(path: [*:0]const u8, length: i64) c_int;
extern "c" fn raise(sig: c_int) c_int;
extern "c" fn dup2(old: c_int, new: c_int) c_int;

test "a shard truncated after open fails the mapped gather and verify with ZR_E_CORRUPT, not SIGBUS" {
    // [R1] item 6: records under pread_record_bytes_min are copied from the shard's mapping,
    // and a page past the new end of a truncated file raised SIGBUS there.
    const t = @import("tests.zig");
    const tz = @import("tests_zstd.zig");
    const root = @import("root.zig");
    var td: t.TempDir = .{};
    try td.init();
    const rs = 2048;
    var data: [16 * rs]u8 = undefined;
    for (&data, 0..) |*b, i| b.* = t.pattern(i);
    try tz.writeDense(&td, "s", 0, "", 1, rs, &data, &.{16});
    const r = try tz.openOk(&td, "s");
    var pbuf: [256]u8 = undefined;
    // Records 0 and 1 keep their bytes; record 2 starts on the first page past the new end.
    try std.testing.expectEqual(@as(c_int, 0), truncate(td.sub(&pbuf, "s/data-000.zrd"), 2 * rs));
    var out: [16 * rs]u8 = undefined;
    var idx: [16]u64 = undefined;
    for (&idx, 0..) |*v, i| v.* = i;
    var st: abi.Status = undefined;
    for ([_]u32{ 1, 2 }) |threads| {
        try std.testing.expectEqual(abi.Result.corrupt.code(), root.zr_reader_gather_dense(r, &idx, 16, &out, out.len, threads, &st));
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

test "an index larger than the check buffer is checked in chunks before it is copied" {
    // [R1] item 8: open used to allocate what index.zri claimed before its checksum said
    // anything. An index above index_check_chunk_bytes is now hashed through that buffer
    // first; a valid one opens and reads, a byte changed in its last chunk fails open.
    const t = @import("tests.zig");
    const tz = @import("tests_zstd.zig");
    const root = @import("root.zig");
    const gpa = std.testing.allocator;
    var td: t.TempDir = .{};
    try td.init();
    const n = index_check_chunk_bytes / format.index_entry_fixed_bytes + 1000;
    const data = try gpa.alloc(u8, n);
    defer gpa.free(data);
    for (data, 0..) |*b, i| b.* = t.pattern(i);
    try tz.writeDense(&td, "s", 0, "", 2, 1, data, &.{n});
    const r = try tz.openOk(&td, "s");
    try std.testing.expect(r.index.len > index_check_chunk_bytes);
    try tz.expectDenseGather(r, data, 1, &.{ n - 1, 0, n / 2 }, 1);
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
    const t = @import("tests.zig");
    const tz = @import("tests_zstd.zig");
    const root = @import("root.zig");
    var td: t.TempDir = .{};
    try td.init();
    var data: [4 * 8]u8 = undefined;
    for (&data, 0..) |*b, i| b.* = t.pattern(i);
    try tz.writeDense(&td, "s", 0, "", 1, 8, &data, &.{4});
    const r = try tz.openOk(&td, "s");
    var d: Diag = .{};
    try r.checkLayout(&d);
    const index: []u8 = @constCast(r.index);
    const es = r.entry_size;
    // Records 1 and 2 swap places: out of record order, still exact.
    std.mem.writeInt(u64, index[1 * es ..][0..8], 16, .little);
    std.mem.writeInt(u64, index[2 * es ..][0..8], 8, .little);
    try r.checkLayout(&d);
    // Record 3 moves onto record 0's second half: [4, 12) twice-covered, [24, 32) uncovered.
    std.mem.writeInt(u64, index[3 * es ..][0..8], 4, .little);
    try std.testing.expectError(error.Corrupt, r.checkLayout(&d));
    try t.expectContains(d.text(), "data-000.zrd");
    try t.expectContains(d.text(), "bytes [24, 32) belong to no record");
    try t.expectContains(d.text(), "bytes [4, 8) to both record 0 and record 3");
    try std.testing.expectEqual(@as(i32, 0), d.shard);
    root.zr_reader_free(r);
    td.removeStore("s", 1);
    try td.deinitExpectEmpty();
}

test "a slow probe hints the rest of the batch only when the next records are not in the page cache" {
    // The probe's timing is not under a test's control; what it triggers is: GatherCtx.onSlow
    // asks mincore about the next records before it trusts the clock.
    const t = @import("tests.zig");
    const tz = @import("tests_zstd.zig");
    const tr = @import("tests_readahead.zig");
    const root = @import("root.zig");
    var td: t.TempDir = .{};
    try td.init();
    const rs = 4096;
    var data: [64 * rs]u8 = undefined;
    for (&data, 0..) |*b, i| b.* = t.pattern(i);
    try tz.writeDense(&td, "s", 0, "", 1, rs, &data, &.{64});
    var idx: [64]u64 = undefined;
    for (&idx, 0..) |*v, i| v.* = 63 - i;
    for ([_]bool{ false, true }) |evicting| {
        const cold = evicting and try tr.evict(&td, "s", 1);
        const r = try tz.openOk(&td, "s");
        r.estimate.set(false);
        var hinted: std.atomic.Value(bool) = .init(false);
        const ctx: GatherCtx = .{ .r = r, .idx = &idx, .out = undefined, .n = idx.len, .probe = true, .hinted = &hinted };
        ctx.onSlow(4, 16);
        // Resident: the time went elsewhere (another process, a first touch), nothing changes.
        try std.testing.expectEqual(cold, r.estimate.expectsCold());
        try std.testing.expectEqual(cold, hinted.load(.monotonic));
        // A second share that finds its records slow hints only its own rest.
        ctx.onSlow(20, 24);
        try std.testing.expectEqual(cold, hinted.load(.monotonic));
        try tz.expectDenseGather(r, &data, rs, &idx, 1);
        root.zr_reader_free(r);
    }
    td.removeStore("s", 1);
    try td.deinitExpectEmpty();
}
