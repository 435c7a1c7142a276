//! The store writer: appends records to shard files inside a temporary sibling directory and
//! publishes it by one atomic rename (spec §7).
//!
//! Invariants:
//! - Nothing is created at the store's path before publication ([ZR-PUB-001]); all files live
//!   in a locked temporary directory until the rename ([ZR-PUB-003]); staging.zig owns that
//!   protocol (the temporary's name and lock, stale temporaries, the rename).
//! - Each append splits its records into `data_shards` contiguous runs; run k goes to the end
//!   of shard k, so shard files hold nothing but stored record bytes ([ZR-DAT-001]) and
//!   records never overlap ([ZR-IDX-006]).
//! - Every argument is validated before the first byte is written, so a rejected append
//!   leaves the writer unchanged. A failure after writing started (I/O, memory) poisons the
//!   writer: later appends and publish fail with the original error, and abort cleans up.
//! - The memory one append uses is bounded by the slice limits below, whatever its size.
//! - A writer is used from one thread at a time (zrecord.h); it spawns per-call workers only.
//! - Compressed codecs (spec §6) encode each record as its own zstd frame at
//!   `codec.default_level` ([ZR-COD-001]); the checksum covers the frame ([ZR-SUM-001]). A
//!   worker covering shards [begin, end) uses `lanes[begin]` (its Compressor and frame buffer)
//!   and no other; worker ranges are disjoint, so no two threads share a lane. Frames are
//!   batched in the lane buffer and written with one pwrite per `lane_flush_bytes`, and a lane
//!   buffer is never larger than `lane_buffer_bytes_min` or the bound of the largest record
//!   it compressed (kept only up to `lane_buffer_keep_bytes_max` between appends).
//! - A durable writer on a file system that takes O_DIRECT (`Writer.direct`) writes each
//!   shard's first bytes (its share of `page_cache_bytes_max`, `ShardState.buffered_left`)
//!   through the page cache with writeback started behind them (a MiB at a time,
//!   `writeback_bytes_min`), and the rest around the page cache, from its lane buffers, in
//!   whole `direct_block_bytes` blocks at block-aligned offsets: a run's buffer starts at its
//!   shard's last block boundary with the bytes of the shard's partial last block in front
//!   (`ShardState.tail`), and leaves the new partial block there for the next run or for
//!   publish. Small flushes go through the page cache too
//!   (`direct_write_bytes_min`). Both ways share one buffer discipline, so a shard switches at
//!   any flush. So the disk works while the next bytes are produced, and `publish` has little
//!   left to flush (decision record 0001 §18).
//! - With ZR_WRITE_INDEX_PARTS (format 1.2, spec §4.1), index blocks of 2^8 entries are hashed
//!   as their entries are written, and their sums go to index.zrs in the temporary directory;
//!   publish completes the last block, reads index.zrs back for the group sums (g is chosen
//!   from the final record count, [ZR-PRT-008]) and flushes index.zrs with the index, so the
//!   rename publishes it with the rest.

const std = @import("std");
const abi = @import("abi.zig");
const diag_mod = @import("diag.zig");
const format = @import("format.zig");
const parallel = @import("parallel.zig");
const sys = @import("sys.zig");
const codec = @import("codec.zig");
const staging = @import("staging.zig");
const async_write = @import("async_write.zig");

const Diag = diag_mod.Diag;
const Error = diag_mod.Error;
const Fd = sys.Fd;
const alloc = std.heap.c_allocator;

/// An append is processed in slices of at most this much input, so that a huge call does not
/// hold a huge index scratch buffer.
pub const slice_input_bytes_max: u64 = 64 << 20;
/// Index scratch of one slice (entries are 24 to 152 bytes).
pub const slice_index_bytes_max: u64 = 16 << 20;
pub const slice_records_max: u64 = 1 << 20;
/// Slices smaller than this are written on the calling thread: spawning costs more than it
/// saves.
pub const parallel_write_bytes_min: u64 = 8 << 20;
/// The same for compressed codecs: compression runs at 300 to 500 MB/s per core, so a worker
/// pays for its spawn on far less input than a raw copy does.
pub const parallel_compress_bytes_min: u64 = 256 << 10;
/// A lane writes its batched frames once they reach this many bytes.
pub const lane_flush_bytes: usize = 1 << 20;
/// A lane buffer holds at least this much, so a full batch plus one small record's bound fit.
pub const lane_buffer_bytes_min: usize = 2 << 20;
/// Lane buffers grown past this (for a huge record) are freed at the end of the append.
pub const lane_buffer_keep_bytes_max: usize = 16 << 20;
/// pwritev batch for Ragged runs (the Linux IOV_MAX).
const iov_batch_max: usize = 1024;
/// Alignment of direct writes: buffer addresses, file offsets and lengths. 4 KiB satisfies
/// every common device (512-byte and 4 KiB sectors); a file system that asks for more is
/// written through the page cache.
pub const direct_block_bytes: usize = 4096;
/// The lane buffer that raw records are copied into for direct writes: each direct write is
/// at most this large, and a lane waits for one at a time.
pub const direct_buffer_bytes: usize = 1 << 20;
/// A flush of fewer new bytes than this goes through the page cache: a direct write waits
/// for the device, which costs more than a buffered copy for little data.
pub const direct_write_bytes_min: usize = 128 << 10;
/// Raw slices of a direct writer are written by up to this many workers even on fewer CPUs:
/// each worker waits for the device most of the time, and more writes in flight keep the
/// device busy.
pub const direct_workers_min: usize = 4;
/// Raw slices of a direct writer of at least this many bytes are written in parallel.
pub const parallel_direct_bytes_min: u64 = 1 << 20;
/// Records are copied into a direct lane buffer and checksummed there in pieces of this
/// size, so that the checksum reads bytes still in the CPU cache.
const copy_piece_bytes: usize = 64 << 10;
/// A durable direct writer writes the first bytes of a store through the page cache, with
/// writeback started behind each write, and only then with O_DIRECT: stores up to this size
/// are written at the speed of the page cache and flushed in one go by publish, which on the
/// disks measured beats direct writes; beyond it, direct writes spare the page cache the
/// reclaim and throttling that made buffered writes of gigabytes 2-3x slower (decision record
/// 0001 §18). At most 1/32 of the machine's memory.
pub const page_cache_bytes_max: u64 = 256 << 20;
/// Threads that flush a durable store's files at publish.
const fsync_workers_max: usize = 16;
/// `startWriteback`'s name for the index file.
const index_lane: usize = format.data_shards_max;
/// A durable writer starts writing back a file's new bytes once this many have been written
/// since its last start, not after every write: writes of one small record each (a dataset
/// written one input at a time) otherwise cost two sync_file_range calls a record, each of
/// which sent the disk a few KiB, and the index's one partial page again and again (a part of
/// 1,563 records of 12 KiB: 99-126 ms to write durably, against 28-30 ms without flushing).
/// What is left when the store is published is flushed by publish, as before.
const writeback_bytes_min: u64 = 1 << 20;
/// index.zrs is read back at publish through a buffer of this size.
const sums_read_bytes: usize = 1 << 16;

/// The index parts a writer with ZR_WRITE_INDEX_PARTS builds as it goes: the running hash of
/// the index block being filled, and block sums not yet written to index.zrs.
const Parts = struct {
    block_hash: format.XxHash64 = format.XxHash64.init(0),
    /// Bytes of the current index block hashed so far.
    block_filled: u64 = 0,
    pending: [512]u64 = undefined,
    pending_len: usize = 0,
    /// Block sums written to index.zrs.
    sums_written: u64 = 0,
};

const State = enum { open, released };

const block_align = std.mem.Alignment.fromByteUnits(direct_block_bytes);
const LaneBuf = []align(direct_block_bytes) u8;

fn alignDown(x: u64) u64 {
    return x & ~@as(u64, direct_block_bytes - 1);
}

/// What a direct writer remembers of one shard between runs (see the invariants above).
const ShardState = struct {
    /// The bytes of the shard's last partial block: [alignDown(size), size).
    tail: [direct_block_bytes]u8 = undefined,
    /// Whether those bytes are already in the file (a buffered flush wrote them).
    tail_on_disk: bool = false,
    /// Whether the descriptor has O_DIRECT set now.
    fd_direct: bool = false,
    /// Cleared when a direct write of this shard failed with EINVAL (an alignment the file
    /// system did not announce): the shard is written through the page cache from then on.
    direct_ok: bool = true,
    /// Bytes this shard may still write through the page cache before its writes go around
    /// it (its share of the writer's page-cache budget, `Writer.setPageCacheBytes`).
    buffered_left: u64 = 0,
};

/// Compression state and output buffers of one worker (see the invariants above).
const Lane = struct {
    compressor: ?codec.Compressor = null,
    buf: LaneBuf = &.{},
    /// A direct writer's second buffer: the one the helper thread writes while `buf` fills.
    spare: LaneBuf = &.{},

    fn deinit(lane: *Lane) void {
        if (lane.compressor) |*c| c.deinit();
        lane.compressor = null;
        lane.freeBufs();
    }

    fn freeBufs(lane: *Lane) void {
        if (lane.buf.len > 0) alloc.free(lane.buf);
        if (lane.spare.len > 0) alloc.free(lane.spare);
        lane.buf = &.{};
        lane.spare = &.{};
    }

    /// Gives the spare buffer at least `size` bytes (its contents are not kept).
    fn ensureSpare(lane: *Lane, size: usize, d: *Diag) Error!void {
        if (lane.spare.len >= size) return;
        if (lane.spare.len > 0) alloc.free(lane.spare);
        lane.spare = &.{};
        lane.spare = alloc.alignedAlloc(u8, block_align, size) catch {
            return d.fail(error.OutOfMemory, "out of memory allocating a {d}-byte write buffer", .{size});
        };
    }

    /// Grows the buffer to at least `size` bytes (a multiple of the block size), keeping its
    /// first `keep` bytes.
    fn ensureBuf(lane: *Lane, size: usize, keep: usize, d: *Diag) Error!void {
        if (lane.buf.len >= size) return;
        const want = std.mem.alignForward(usize, size, direct_block_bytes);
        const new = alloc.alignedAlloc(u8, block_align, want) catch {
            return d.fail(error.OutOfMemory, "out of memory allocating a {d}-byte write buffer", .{want});
        };
        if (keep > 0) sys.copy(new[0..keep], lane.buf[0..keep]);
        if (lane.buf.len > 0) alloc.free(lane.buf);
        lane.buf = new;
    }

    /// Creates the lane's compression context on its first use.
    fn ensureCompressor(lane: *Lane, w: *const Writer, d: *Diag) Error!void {
        if (lane.compressor != null) return;
        const shared: ?*const codec.SharedDict = if (w.cdict) |*cd| cd else null;
        lane.compressor = codec.Compressor.init(codec.default_level, shared) catch |err| switch (err) {
            error.OutOfMemory => return d.noMemory("a zstd compression context"),
            // The level is a valid constant and the dictionary was compiled at open.
            else => unreachable,
        };
    }
};

pub const Writer = struct {
    state: State = .open,
    flags: u32,
    /// The store's path and its temporary directory (tmp_fd: the files are created in it).
    stage: staging.Staging = .{},
    /// The running header: counts, sizes and the schema; `shard_sizes` are the shard ends.
    header: format.Header,
    itemsize: u64,
    record_size: u64,
    entry_size: u32,
    shard_fds: [format.data_shards_max]Fd = @splat(sys.invalid_fd),
    index_fd: Fd = sys.invalid_fd,
    index_hash: format.XxHash64 = format.XxHash64.init(0),
    /// With ZR_WRITE_INDEX_PARTS: index.zrs, the sums of the index blocks (`parts`).
    sums_fd: Fd = sys.invalid_fd,
    parts: Parts = .{},
    dict: []u8 = &.{},
    scratch: []u8 = &.{},
    /// zstd_dict: the store's dictionary compiled once, shared read-only by every lane.
    cdict: ?codec.SharedDict = null,
    lanes: [format.data_shards_max]Lane = @splat(.{}),
    /// A durable writer whose shard files take O_DIRECT (see the invariants above); then
    /// `shards` holds one state per shard.
    direct: bool = false,
    shards: []ShardState = &.{},
    /// Per file (a shard k, or the index at `index_lane`): where the bytes whose writeback
    /// has not been started begin. Element k is only touched by the worker writing shard k.
    writeback_from: [format.data_shards_max + 1]u64 = @splat(0),
    poisoned: ?Error = null,
    poison_diag: Diag = .{},

    fn shardName(buf: *[16]u8, k: usize) [:0]const u8 {
        return std.fmt.bufPrintSentinel(buf, "data-{d:0>3}.zrd", .{k}, 0) catch unreachable;
    }

    /// Validates the schema, creates the temporary directory and its files.
    pub fn open(
        path_c: [*:0]const u8,
        schema: *const abi.Schema,
        dict_ptr: ?[*]const u8,
        dict_size: usize,
        flags: u32,
        d: *Diag,
    ) Error!*Writer {
        const path = std.mem.sliceTo(path_c, 0);
        if (flags & ~abi.write_flags_known != 0) {
            return d.fail(error.InvalidArgument, "unknown writer flags 0x{x}; only " ++
                "ZR_WRITE_NO_SYNC (0x1) and ZR_WRITE_INDEX_PARTS (0x2) are defined", .{flags});
        }
        var h = try validateSchema(schema, dict_ptr, dict_size, d);
        if (flags & abi.write_index_parts != 0) {
            // [ZR-HDR-018] index parts are what format 1.2 defines, whatever the dtype.
            h.required_features |= format.feature_index_parts;
            h.format_minor = @max(h.format_minor, format.index_parts_minor);
            h.index_block_shift = format.index_block_shift_default;
        }

        const w = alloc.create(Writer) catch return d.noMemory("the writer handle");
        w.* = .{
            .flags = flags,
            .header = h,
            .itemsize = h.itemsize(),
            .record_size = if (h.kind == .dense) h.recordSize() else 0,
            .entry_size = format.indexEntrySize(h.kind, h.ndim),
        };
        errdefer w.destroy();
        if (dict_size > 0) {
            w.dict = alloc.dupe(u8, dict_ptr.?[0..dict_size]) catch return d.noMemory("the dictionary");
        }
        if (h.codec == .zstd_dict) {
            w.cdict = codec.SharedDict.initCompress(w.dict, codec.default_level) catch |err| switch (err) {
                error.OutOfMemory => return d.noMemory("the compression dictionary"),
                else => return d.fail(error.InvalidArgument, "the {d}-byte dictionary given for " ++
                    "store '{s}' is not a valid zstd dictionary (it starts with the zstd " ++
                    "dictionary magic but breaks spec section 6.3: a Dictionary_ID of 0, " ++
                    "malformed entropy tables or repeat offsets); pass a dictionary made by " ++
                    "train_dict", .{ w.dict.len, path }),
            };
        }
        w.stage = try staging.Staging.create(path, d);
        try w.createFiles(d);
        return w;
    }

    fn createFile(w: *Writer, name: [:0]const u8, d: *Diag) Error!Fd {
        return sys.openAt(w.stage.tmp_fd, name, sys.O_WRONLY | sys.O_CREAT | sys.O_EXCL, 0o666) catch {
            return d.failOs(error.Io, sys.errno(), "cannot create '{s}/{s}'", .{ w.stage.tmp_path, name });
        };
    }

    fn createFiles(w: *Writer, d: *Diag) Error!void {
        var buf: [16]u8 = undefined;
        for (0..w.header.data_shards) |k| {
            w.shard_fds[k] = try w.createFile(shardName(&buf, k), d);
        }
        w.index_fd = try w.createFile("index.zri", d);
        if (w.header.hasParts()) {
            // Read back at publish for the group sums.
            w.sums_fd = sys.openAt(w.stage.tmp_fd, "index.zrs", sys.O_RDWR | sys.O_CREAT | sys.O_EXCL, 0o666) catch {
                return d.failOs(error.Io, sys.errno(), "cannot create '{s}/index.zrs'", .{w.stage.tmp_path});
            };
        }
        if (w.flags & abi.write_no_sync == 0 and directWritable(w.shard_fds[0])) {
            w.shards = alloc.alloc(ShardState, w.header.data_shards) catch return d.noMemory("the shard states");
            @memset(w.shards, .{});
            w.direct = true;
            w.setPageCacheBytes(pageCacheBytesDefault());
        }
    }

    /// Closes every descriptor and frees every buffer but the handle and its paths.
    fn release(w: *Writer) void {
        for (w.shard_fds[0..w.header.data_shards]) |*fd| {
            if (fd.* != sys.invalid_fd) sys.close(fd.*);
            fd.* = sys.invalid_fd;
        }
        if (w.index_fd != sys.invalid_fd) sys.close(w.index_fd);
        w.index_fd = sys.invalid_fd;
        if (w.sums_fd != sys.invalid_fd) sys.close(w.sums_fd);
        w.sums_fd = sys.invalid_fd;
        if (w.dict.len > 0) alloc.free(w.dict);
        w.dict = &.{};
        if (w.scratch.len > 0) alloc.free(w.scratch);
        w.scratch = &.{};
        if (w.shards.len > 0) alloc.free(w.shards);
        w.shards = &.{};
        // Compressors borrow the compiled dictionary, so they go first.
        for (&w.lanes) |*lane| lane.deinit();
        if (w.cdict) |*cd| cd.deinit();
        w.cdict = null;
        w.state = .released;
    }

    fn destroy(w: *Writer) void {
        if (w.state == .open) w.release();
        w.stage.deinit();
        alloc.destroy(w);
    }

    pub fn abort(w: *Writer) void {
        if (w.state != .open) return;
        // Descriptors first: the temporary directory is then removed with everything in it.
        w.release();
        w.stage.abort();
    }

    pub fn free(w: *Writer) void {
        w.abort();
        w.destroy();
    }

    pub fn count(w: *const Writer) u64 {
        return w.header.record_count;
    }

    /// Lets the shards of a direct writer write `bytes` more (shared evenly) through the page
    /// cache before their writes go direct; 0 makes every large write direct from now on.
    /// No effect on a writer that is not direct (zr_writer_set_page_cache_bytes).
    pub fn setPageCacheBytes(w: *Writer, bytes: u64) void {
        for (w.shards) |*st| st.buffered_left = bytes / w.header.data_shards;
    }

    fn checkUsable(w: *Writer, d: *Diag) Error!void {
        if (w.state != .open) return d.fail(error.InvalidArgument, "the writer for '{s}' was " ++
            "already published or aborted; open a new writer", .{w.stage.path});
        if (w.poisoned) |err| {
            d.os_errno = w.poison_diag.os_errno;
            d.record = w.poison_diag.record;
            d.shard = w.poison_diag.shard;
            d.print("the writer for '{s}' is unusable after an earlier append failed; it can " ++
                "only be aborted. The first failure was: {s}", .{ w.stage.path, w.poison_diag.text() });
            return err;
        }
    }

    fn poison(w: *Writer, err: Error, d: *const Diag) void {
        w.poisoned = err;
        w.poison_diag.copyFrom(d);
    }

    fn checkCountLimit(w: *Writer, n: u64, d: *Diag) Error!void {
        if (n > format.record_count_max - w.header.record_count) {
            return d.fail(error.LimitExceeded, "appending {d} records to the {d} of '{s}' " ++
                "exceeds record_count_max {d} (ZR-LIM-001)", .{
                n, w.header.record_count, w.stage.path, format.record_count_max,
            });
        }
    }

    /// Grows the index scratch to hold `n` entries; it is kept for later appends.
    fn ensureScratch(w: *Writer, n: u64, d: *Diag) Error!void {
        const need: usize = @intCast(n * w.entry_size);
        if (w.scratch.len >= need) return;
        if (w.scratch.len > 0) alloc.free(w.scratch);
        w.scratch = &.{};
        w.scratch = alloc.alloc(u8, need) catch return d.noMemory("the index scratch buffer");
    }

    fn sliceRecordsMax(w: *const Writer) u64 {
        return @min(slice_records_max, slice_index_bytes_max / w.entry_size);
    }

    pub fn appendDense(w: *Writer, data: ?[*]const u8, size: u64, n: u64, d: *Diag) Error!void {
        try w.checkUsable(d);
        if (w.header.kind != .dense) return d.fail(error.InvalidArgument, "append_dense on the " ++
            "Ragged writer for '{s}'; use append_ragged", .{w.stage.path});
        const want = std.math.mul(u64, n, w.record_size) catch return d.fail(error.InvalidArgument, "" ++
            "{d} records of {d} bytes overflow 64 bits", .{ n, w.record_size });
        if (size != want) return d.fail(error.InvalidArgument, "append_dense got {d} bytes for {d} " ++
            "records, but {d} records of record_size {d} need exactly {d} bytes", .{ size, n, n, w.record_size, want });
        if (n == 0) return;
        if (size > 0 and data == null) return d.fail(error.InvalidArgument, "append_dense got a " ++
            "null data pointer for {d} bytes", .{size});
        try w.checkCountLimit(n, d);

        var per_slice = w.sliceRecordsMax();
        if (w.record_size > 0) per_slice = @max(1, @min(per_slice, slice_input_bytes_max / w.record_size));
        var done: u64 = 0;
        while (done < n) {
            const m = @min(per_slice, n - done);
            const base: [*]const u8 = if (size == 0)
                @ptrFromInt(1)
            else
                data.? + @as(usize, @intCast(done * w.record_size));
            w.writeSlice(m, m * w.record_size, .{ .dense = base }, d) catch |err| {
                w.poison(err, d);
                return err;
            };
            done += m;
        }
    }

    pub fn appendRagged(w: *Writer, ptrs: ?[*]const u64, shapes: ?[*]const u64, n: u64, d: *Diag) Error!void {
        try w.checkUsable(d);
        if (w.header.kind != .ragged) return d.fail(error.InvalidArgument, "append_ragged on the " ++
            "Dense writer for '{s}'; use append_dense", .{w.stage.path});
        if (n == 0) return;
        if (ptrs == null or shapes == null) return d.fail(error.InvalidArgument, "append_ragged " ++
            "got a null ptrs or shapes array for {d} records", .{n});
        try w.checkCountLimit(n, d);
        const ndim: usize = w.header.ndim;
        // Every record is validated before anything is written ([ZR-LIM-001]).
        var i: u64 = 0;
        while (i < n) : (i += 1) {
            const shape = shapes.?[@intCast(i * ndim)..][0..ndim];
            for (shape, 0..) |dim, axis| if (dim > format.dim_max) {
                d.record = @intCast(w.header.record_count + i);
                return d.fail(error.LimitExceeded, "record {d} has length {d} on axis {d}, above " ++
                    "dim_max {d} (ZR-LIM-001)", .{ w.header.record_count + i, dim, axis, format.dim_max });
            };
            const size = format.logicalSize(shape, w.itemsize) orelse {
                d.record = @intCast(w.header.record_count + i);
                // The size given, as [ZR-LIM-001] asks (saturated where it overflows 64 bits).
                var sat: u64 = w.itemsize;
                for (shape) |dim| sat *|= dim;
                return d.fail(error.LimitExceeded, "record {d} has {d}{s} bytes (its shape's " ++
                    "elements times itemsize {d}), above record_size_bytes_max {d} (ZR-LIM-001)", .{
                    w.header.record_count + i,
                    sat,
                    if (sat == std.math.maxInt(u64)) " or more" else "",
                    w.itemsize,
                    format.record_size_bytes_max,
                });
            };
            if (size > 0 and ptrs.?[@intCast(i)] == 0) {
                d.record = @intCast(w.header.record_count + i);
                return d.fail(error.InvalidArgument, "record {d} has {d} bytes but a null " ++
                    "pointer", .{ w.header.record_count + i, size });
            }
        }
        const per_slice = w.sliceRecordsMax();
        var start: u64 = 0;
        while (start < n) {
            var end = start;
            var bytes: u64 = 0;
            while (end < n and end - start < per_slice) {
                const size = w.raggedSize(shapes.?, end);
                if (end > start and bytes + size > slice_input_bytes_max) break;
                bytes += size;
                end += 1;
            }
            const records: Records = .{ .ragged = .{
                .ptrs = ptrs.? + @as(usize, @intCast(start)),
                .shapes = shapes.? + @as(usize, @intCast(start * ndim)),
            } };
            w.writeSlice(end - start, bytes, records, d) catch |err| {
                w.poison(err, d);
                return err;
            };
            start = end;
        }
    }

    fn raggedSize(w: *const Writer, shapes: [*]const u64, i: u64) u64 {
        const ndim: usize = w.header.ndim;
        return format.logicalSize(shapes[@intCast(i * ndim)..][0..ndim], w.itemsize).?;
    }

    /// Writes one slice: data runs to the shards (on worker threads if large), then the index
    /// entries in record order.
    fn writeSlice(w: *Writer, n: u64, total_bytes: u64, records: Records, d: *Diag) Error!void {
        try w.ensureScratch(n, d);
        const shards: usize = w.header.data_shards;
        var run_bytes: [format.data_shards_max]u64 = @splat(0);
        const ctx: SliceCtx = .{
            .w = w,
            .n = n,
            .total_bytes = total_bytes,
            .records = records,
            .start_offsets = w.header.shard_sizes,
            .run_bytes = &run_bytes,
        };
        const compressed = w.header.codec != .raw;
        const cpus = sys.cpuCount();
        // A slice's runs compress at different speeds (records differ in size and
        // compressibility); with two workers per CPU the OS shares the cores among the runs
        // still going, so a slice is not held up by one long run (decision record 0001 §10).
        // Direct raw workers mostly wait for the device, so there are at least
        // `direct_workers_min` of them (§18).
        const parallel_min, const workers_max = if (compressed)
            .{ parallel_compress_bytes_min, 2 * cpus }
        else if (w.direct)
            .{ parallel_direct_bytes_min, @max(cpus, direct_workers_min) }
        else
            .{ parallel_write_bytes_min, cpus };
        const workers: usize = if (ctx.total_bytes >= parallel_min and shards > 1)
            @min(shards, workers_max)
        else
            1;
        defer if (compressed) w.trimLanes();
        try parallel.run(SliceCtx, &ctx, writeLanes, shards, workers, .contiguous, d);

        var stored: u64 = 0;
        for (0..shards) |k| {
            w.header.shard_sizes[k] += run_bytes[k];
            stored += run_bytes[k];
        }
        // Raw records store exactly their logical bytes.
        std.debug.assert(compressed or stored == total_bytes);
        const index_bytes = w.scratch[0..@intCast(n * w.entry_size)];
        sys.pwriteAll(w.index_fd, index_bytes, w.header.index_size) catch {
            return d.failOs(error.Io, sys.errno(), "writing {d} bytes at offset {d} of " ++
                "'{s}/index.zri' failed", .{ index_bytes.len, w.header.index_size, w.stage.tmp_path });
        };
        w.startWriteback(index_lane, w.header.index_size, index_bytes.len);
        w.index_hash.update(index_bytes);
        if (w.header.hasParts()) try w.hashBlocks(index_bytes, d);
        w.header.index_size += index_bytes.len;
        w.header.record_count += n;
        w.header.logical_bytes += total_bytes;
        w.header.stored_bytes += stored;
    }

    /// Hashes entries just appended to the index into the sums of their index blocks, and
    /// writes each completed block's sum to index.zrs (spec §4.1).
    fn hashBlocks(w: *Writer, bytes: []const u8, d: *Diag) Error!void {
        const block_bytes = @as(u64, w.entry_size) << @intCast(w.header.index_block_shift);
        var rest = bytes;
        while (rest.len > 0) {
            const take: usize = @intCast(@min(block_bytes - w.parts.block_filled, rest.len));
            w.parts.block_hash.update(rest[0..take]);
            w.parts.block_filled += take;
            rest = rest[take..];
            if (w.parts.block_filled == block_bytes) try w.endBlock(d);
        }
    }

    fn endBlock(w: *Writer, d: *Diag) Error!void {
        w.parts.pending[w.parts.pending_len] = w.parts.block_hash.final();
        w.parts.pending_len += 1;
        w.parts.block_hash = format.XxHash64.init(0);
        w.parts.block_filled = 0;
        if (w.parts.pending_len == w.parts.pending.len) try w.flushSums(d);
    }

    fn flushSums(w: *Writer, d: *Diag) Error!void {
        const bytes = std.mem.sliceAsBytes(w.parts.pending[0..w.parts.pending_len]);
        const at = 8 * w.parts.sums_written;
        sys.pwriteAll(w.sums_fd, bytes, at) catch return d.failOs(error.Io, sys.errno(), "writing {d} " ++
            "bytes at offset {d} of '{s}/index.zrs' failed", .{ bytes.len, at, w.stage.tmp_path });
        w.parts.sums_written += w.parts.pending_len;
        w.parts.pending_len = 0;
    }

    /// Completes index.zrs (the last, partial block) and returns the header's group sums for
    /// the writer defaults' g ([ZR-PRT-008]), read back from index.zrs a buffer at a time.
    /// The caller frees the slice.
    fn finishParts(w: *Writer, d: *Diag) Error![]u64 {
        if (w.parts.block_filled > 0) try w.endBlock(d);
        try w.flushSums(d);
        const n = w.header.record_count;
        const shifts = format.defaultPartShifts(n);
        w.header.index_group_shift = shifts[1];
        const blocks = format.partsOf(n, shifts[0]);
        std.debug.assert(shifts[0] == w.header.index_block_shift and blocks == w.parts.sums_written);
        const groups = format.partsOf(blocks, shifts[1]);
        const sums = alloc.alloc(u64, @intCast(groups)) catch return d.noMemory("the group sums");
        errdefer alloc.free(sums);
        const buf = alloc.alloc(u8, sums_read_bytes) catch return d.noMemory("a buffer to read index.zrs");
        defer alloc.free(buf);
        const group_bytes = @as(u64, 8) << @intCast(shifts[1]);
        for (sums, 0..) |*sum, t| {
            var hasher = format.XxHash64.init(0);
            const begin = t * group_bytes;
            const end = @min(begin + group_bytes, 8 * blocks);
            var off = begin;
            while (off < end) {
                const chunk = buf[0..@intCast(@min(buf.len, end - off))];
                var short = false;
                sys.preadAll(w.sums_fd, chunk, off, &short) catch return d.failOs(error.Io, sys.errno(), "" ++
                    "reading back '{s}/index.zrs' failed", .{w.stage.tmp_path});
                hasher.update(chunk);
                off += chunk.len;
            }
            sum.* = hasher.final();
        }
        return sums;
    }

    /// Bytes [offset, offset + len) of shard k (or the index, k == `index_lane`) were just
    /// written: when the store is to be durable, starts writing back what was written since
    /// the last start once that is `writeback_bytes_min` or more. The disk works while the next
    /// bytes are produced, so `publish` finds little left to flush and dirty pages do not pile
    /// up in the page cache (decision record 0001, durable writes).
    fn startWriteback(w: *Writer, k: usize, offset: u64, len: u64) void {
        if (w.flags & abi.write_no_sync != 0) return;
        // A write below the mark (a partial block written again) moves it back.
        const from = @min(w.writeback_from[k], offset);
        const end = offset + len;
        if (end - from < writeback_bytes_min) {
            w.writeback_from[k] = from;
            return;
        }
        sys.startWriteback(if (k == index_lane) w.index_fd else w.shard_fds[k], from, end - from);
        w.writeback_from[k] = end;
    }

    /// Frees lane buffers that a huge record grew, so that one such record does not pin its
    /// frame's memory for the writer's lifetime.
    fn trimLanes(w: *Writer) void {
        for (&w.lanes) |*lane| {
            const oversized = lane.buf.len > lane_buffer_keep_bytes_max or lane.spare.len > lane_buffer_keep_bytes_max;
            if (oversized) lane.freeBufs();
        }
    }

    /// Publishes the store. The writer's resources are released whatever the outcome.
    pub fn publish(w: *Writer, d: *Diag) Error!void {
        if (w.state != .open) return d.fail(error.InvalidArgument, "the writer for '{s}' was " ++
            "already published or aborted", .{w.stage.path});
        w.publishInner(d) catch |err| {
            w.abort();
            return err;
        };
        w.release();
    }

    fn publishInner(w: *Writer, d: *Diag) Error!void {
        try w.checkUsable(d);
        const sync = w.flags & abi.write_no_sync == 0;
        // [ZR-PUB-002] header.zrh is written only after every shard and the index are complete
        // and, for a durable store, flushed. The files are flushed in parallel: each fsync
        // mostly waits for the device, which takes several requests at once.
        const group_sums: []u64 = if (w.header.hasParts()) try w.finishParts(d) else &.{};
        defer if (w.header.hasParts()) alloc.free(group_sums);
        if (sync) {
            const files: u64 = @as(u64, w.header.data_shards) + 1 + @intFromBool(w.header.hasParts());
            try parallel.run(Writer, w, flushFiles, files, @intCast(@min(files, fsync_workers_max)), .contiguous, d);
        }
        var h = w.header;
        var hasher = w.index_hash;
        h.index_checksum = hasher.final();
        const dict_size: u32 = @intCast(w.dict.len);
        const size: usize = @intCast(format.headerSize(h.kind, h.ndim, h.data_shards, group_sums.len, dict_size));
        const bytes = alloc.alloc(u8, size) catch return d.noMemory("the header");
        defer alloc.free(bytes);
        format.encodeHeader(&h, group_sums, w.dict, bytes);

        const hfd = try w.createFile("header.zrh", d);
        defer sys.close(hfd);
        sys.pwriteAll(hfd, bytes, 0) catch return d.failOs(error.Io, sys.errno(), "writing " ++
            "'{s}/header.zrh' failed", .{w.stage.tmp_path});
        if (sync) {
            // The header and the temporary directory's entries are flushed together; both
            // are durable before the rename, which is all that [ZR-PUB-002] asks.
            const last: LastFlush = .{ .w = w, .header_fd = hfd };
            try parallel.run(LastFlush, &last, LastFlush.run, 2, 2, .contiguous, d);
        }
        // [ZR-PUB-003] One atomic rename that never replaces an existing path; the parent
        // directory is flushed after it.
        try w.stage.rename(sync, d);
    }
};

/// The header and the temporary directory, flushed on two threads at publish.
const LastFlush = struct {
    w: *Writer,
    header_fd: Fd,

    fn run(c: *const LastFlush, begin: u64, end: u64, d: *Diag) Error!void {
        var u = begin;
        while (u < end) : (u += 1) {
            if (u == 0) {
                sys.fsync(c.header_fd) catch return d.failOs(error.Io, sys.errno(), "flushing " ++
                    "'{s}/header.zrh' failed", .{c.w.stage.tmp_path});
            } else {
                try c.w.stage.syncTmpDir(d);
            }
        }
    }
};

/// Completes and flushes files [begin, end) of the writer: shards 0..data_shards-1 (a direct
/// writer first writes the partial last block it kept), then the index, then index.zrs.
fn flushFiles(w: *const Writer, begin: u64, end: u64, d: *Diag) Error!void {
    var buf: [16]u8 = undefined;
    var k = begin;
    while (k < end) : (k += 1) {
        const is_index = k == w.header.data_shards;
        const is_sums = k == @as(u64, w.header.data_shards) + 1;
        const fd = if (is_index) w.index_fd else if (is_sums) w.sums_fd else w.shard_fds[@intCast(k)];
        if (!is_index and !is_sums and w.direct) try writeTail(w, @intCast(k), d);
        sys.fsync(fd) catch {
            if (!is_index and !is_sums) d.shard = @intCast(k);
            const name: []const u8 = if (is_index)
                "index.zri"
            else if (is_sums)
                "index.zrs"
            else
                Writer.shardName(&buf, @intCast(k));
            return d.failOs(error.Io, sys.errno(), "flushing '{s}/{s}' failed", .{ w.stage.tmp_path, name });
        };
    }
}

/// Writes the partial last block of shard k of a direct writer, unless it is in the file
/// already, through the page cache: a direct write would have to write a whole block.
fn writeTail(w: *const Writer, k: usize, d: *Diag) Error!void {
    const st = &w.shards[k];
    const size = w.header.shard_sizes[k];
    const start = alignDown(size);
    if (size == start or st.tail_on_disk) return;
    const bytes = st.tail[0..@intCast(size - start)];
    if (st.fd_direct) {
        sys.setDirect(w.shard_fds[k], false) catch return writeError(w, k, bytes.len, start, d);
        st.fd_direct = false;
    }
    sys.pwriteAll(w.shard_fds[k], bytes, start) catch return writeError(w, k, bytes.len, start, d);
    st.tail_on_disk = true;
}

/// The default page-cache budget of a direct writer: `page_cache_bytes_max`, or 1/32 of the
/// machine's memory where that is less.
fn pageCacheBytesDefault() u64 {
    const ram = sys.physicalMemoryBytes() orelse return page_cache_bytes_max;
    return @min(page_cache_bytes_max, ram / 32);
}

/// Whether a durable writer can write the shard file `fd` with O_DIRECT from buffers aligned
/// to `direct_block_bytes`. Memory file systems (tmpfs takes O_DIRECT since Linux 6.6 but
/// copies anyway) gain nothing from it and say nothing through statx, so where statx is
/// silent, O_DIRECT is used only if it can be set.
fn directWritable(fd: Fd) bool {
    if (sys.directIoAlignment(fd)) |a| {
        return a.offset != 0 and a.offset <= direct_block_bytes and a.memory <= direct_block_bytes;
    }
    if (sys.isMemoryFs(fd)) return false;
    sys.setDirect(fd, true) catch return false;
    sys.setDirect(fd, false) catch return false;
    return true;
}

/// The records of one slice: a contiguous Dense block, or Ragged pointers and shapes.
const Records = union(enum) {
    dense: [*]const u8,
    ragged: struct { ptrs: [*]const u64, shapes: [*]const u64 },
};

/// One slice of one append, shared read-only by the lane workers. Each lane writes only its
/// own outputs: `run_bytes[k]` and the index entries of run k's records in the scratch.
const SliceCtx = struct {
    w: *Writer,
    n: u64,
    total_bytes: u64,
    records: Records,
    /// The shard sizes before this slice: run k starts at `start_offsets[k]` of shard k.
    start_offsets: [format.data_shards_max]u64,
    run_bytes: *[format.data_shards_max]u64,
    /// Run k holds records [n * k / s, n * (k + 1) / s) of the slice, whatever their sizes:
    /// the layout of a store follows from its appends alone, and the conformance vectors that
    /// zrecord writes pin it (conformance/generate.py --check).
    fn runBounds(ctx: *const SliceCtx, k: u64) [2]u64 {
        const s: u64 = ctx.w.header.data_shards;
        return .{ ctx.n * k / s, ctx.n * (k + 1) / s };
    }

    /// The logical bytes of record j of the slice.
    fn recordBytes(ctx: *const SliceCtx, j: u64) []const u8 {
        const w = ctx.w;
        switch (ctx.records) {
            .dense => |base| {
                if (w.record_size == 0) return &.{};
                return base[@intCast(j * w.record_size)..][0..@intCast(w.record_size)];
            },
            .ragged => |r| {
                const size = w.raggedSize(r.shapes, j);
                if (size == 0) return &.{};
                const p: [*]const u8 = @ptrFromInt(@as(usize, @intCast(r.ptrs[@intCast(j)])));
                return p[0..@intCast(size)];
            },
        }
    }

    fn shape(ctx: *const SliceCtx, j: u64) []const u64 {
        const ndim: usize = ctx.w.header.ndim;
        return switch (ctx.records) {
            .dense => &.{},
            .ragged => |r| r.shapes[@intCast(j * ndim)..][0..ndim],
        };
    }
};

/// Lane worker: for each shard k in [begin, end), stores run k at the shard's end (raw bytes,
/// or one zstd frame per record) and encodes the index entries of its records.
fn writeLanes(ctx: *const SliceCtx, begin: u64, end: u64, d: *Diag) Error!void {
    const w = ctx.w;
    // A worker covering shards [begin, end) uses lanes[begin] only (see the invariants).
    const lane = &w.lanes[@intCast(begin)];
    // A direct writer's full buffers are written by a helper while the next one fills; it is
    // spawned on the first such buffer and joined before the worker returns.
    var helper: async_write.AsyncWriter = .{};
    defer helper.stop();
    const h: ?*async_write.AsyncWriter = if (w.direct) &helper else null;
    var k = begin;
    while (k < end) : (k += 1) {
        const kk: usize = @intCast(k);
        const start = ctx.start_offsets[kk];
        if (w.header.codec != .raw) {
            var sink: FrameSink = .{ .ctx = ctx, .out = try Out.init(w, kk, lane, h, start, lane_buffer_bytes_min, d) };
            try lane.ensureCompressor(w, d);
            try writeRun(ctx, kk, &sink, d);
        } else if (w.direct) {
            var sink: CopySink = .{ .ctx = ctx, .out = try Out.init(w, kk, lane, h, start, direct_buffer_bytes, d) };
            try writeRun(ctx, kk, &sink, d);
        } else {
            var sink: RawSink = .{ .ctx = ctx, .k = kk, .pos = start };
            try writeRun(ctx, kk, &sink, d);
        }
    }
}

/// What a sink stored for one record: its size and checksum.
const Stored = struct { len: u64, checksum: u64 };

/// Stores run k through `sink` and encodes its records' index entries: the part of a lane's
/// work that does not depend on the codec.
fn writeRun(ctx: *const SliceCtx, k: usize, sink: anytype, d: *Diag) Error!void {
    const w = ctx.w;
    const es: usize = w.entry_size;
    const bounds = ctx.runBounds(k);
    var offset = ctx.start_offsets[k];
    var j = bounds[0];
    while (j < bounds[1]) : (j += 1) {
        // [ZR-SUM-001] The checksum covers the stored bytes: the payload for raw, the frame
        // otherwise.
        const stored = try sink.put(j, d);
        format.encodeEntry(w.scratch[@intCast(j * es)..][0..es], .{
            .offset = offset,
            .stored_size = @intCast(stored.len),
            .shard = @intCast(k),
            .checksum = stored.checksum,
        }, ctx.shape(j));
        offset += stored.len;
    }
    try sink.finish(d);
    ctx.run_bytes[k] = offset - ctx.start_offsets[k];
}

/// Raw records go to the shard as they are, from the caller's memory through the page cache:
/// a Dense run in one pwrite of its contiguous block, Ragged records gathered into pwritev
/// batches. For writers that are not direct.
const RawSink = struct {
    ctx: *const SliceCtx,
    k: usize,
    /// Shard offset where the bytes not yet written (`iov`, or the Dense run) start.
    pos: u64,
    iov: [iov_batch_max]sys.IoVec = undefined,
    iov_len: usize = 0,
    iov_bytes: u64 = 0,

    fn put(s: *RawSink, j: u64, d: *Diag) Error!Stored {
        const rec = s.ctx.recordBytes(j);
        if (s.ctx.records == .ragged and rec.len > 0) {
            s.iov[s.iov_len] = .{ .base = rec.ptr, .len = rec.len };
            s.iov_len += 1;
            s.iov_bytes += rec.len;
            if (s.iov_len == s.iov.len) try s.flushIov(d);
        }
        return .{ .len = rec.len, .checksum = format.xxh64(rec) };
    }

    fn flushIov(s: *RawSink, d: *Diag) Error!void {
        const w = s.ctx.w;
        sys.pwritevAll(w.shard_fds[s.k], s.iov[0..s.iov_len], s.pos) catch {
            return writeError(w, s.k, s.iov_bytes, s.pos, d);
        };
        w.startWriteback(s.k, s.pos, s.iov_bytes);
        s.pos += s.iov_bytes;
        s.iov_len = 0;
        s.iov_bytes = 0;
    }

    fn finish(s: *RawSink, d: *Diag) Error!void {
        const w = s.ctx.w;
        switch (s.ctx.records) {
            .ragged => if (s.iov_len > 0) try s.flushIov(d),
            .dense => |base| {
                const bounds = s.ctx.runBounds(s.k);
                const len = (bounds[1] - bounds[0]) * w.record_size;
                if (len == 0) return;
                const bytes = base[@intCast(bounds[0] * w.record_size)..][0..@intCast(len)];
                sys.pwriteAll(w.shard_fds[s.k], bytes, s.pos) catch {
                    return writeError(w, s.k, len, s.pos, d);
                };
                w.startWriteback(s.k, s.pos, len);
            },
        }
    }
};

/// Raw records of a direct writer: copied into the lane buffer and checksummed there, piece
/// by piece while the piece is in the CPU cache, and written in large aligned blocks.
const CopySink = struct {
    ctx: *const SliceCtx,
    out: Out,

    fn put(s: *CopySink, j: u64, d: *Diag) Error!Stored {
        const rec = s.ctx.recordBytes(j);
        const o = &s.out;
        var hasher = format.XxHash64.init(0);
        var done: usize = 0;
        while (done < rec.len) {
            if (o.fill == o.lane.buf.len) try o.flush(d);
            const n = @min(rec.len - done, o.lane.buf.len - o.fill, copy_piece_bytes);
            const piece = o.lane.buf[o.fill..][0..n];
            sys.copy(piece, rec[done..][0..n]);
            hasher.update(piece);
            o.fill += n;
            done += n;
        }
        return .{ .len = rec.len, .checksum = hasher.final() };
    }

    fn finish(s: *CopySink, d: *Diag) Error!void {
        try s.out.finish(d);
    }
};

/// Compressed records: each becomes one zstd frame in the lane buffer ([ZR-COD-001]); frames
/// are written in batches of `lane_flush_bytes`.
const FrameSink = struct {
    ctx: *const SliceCtx,
    out: Out,

    fn put(s: *FrameSink, j: u64, d: *Diag) Error!Stored {
        const w = s.ctx.w;
        const o = &s.out;
        const rec = s.ctx.recordBytes(j);
        const record = w.header.record_count + j;
        errdefer {
            d.record = @intCast(record);
            d.shard = @intCast(o.k);
        }
        if (o.fill - o.on_disk >= lane_flush_bytes) try o.flush(d);
        try o.reserve(codec.Compressor.bound(rec.len), rec.len, record, d);
        const compressor = &o.lane.compressor.?;
        const size = compressor.compress(o.lane.buf[o.fill..], rec) catch |err| {
            return switch (err) {
                error.OutOfMemory => d.fail(error.OutOfMemory, "out of memory compressing " ++
                    "record {d} ({d} bytes) of '{s}'", .{ record, rec.len, w.stage.path }),
                else => d.fail(error.InvalidArgument, "libzstd failed to compress record {d} " ++
                    "({d} bytes) of '{s}': {s}", .{
                    record, rec.len, w.stage.path, codec.errorName(compressor.last_code),
                }),
            };
        };
        // A frame of a record within record_size_bytes_max is far below 4 GiB, but the index
        // field is 32 bits and the limit is the format's ([ZR-IDX-005]).
        if (size > format.stored_size_bytes_max) return d.fail(error.LimitExceeded, "record {d} " ++
            "compresses to {d} bytes, above stored_size_bytes_max {d} (ZR-LIM-001)", .{
            record, size, format.stored_size_bytes_max,
        });
        const frame = o.lane.buf[o.fill..][0..size];
        o.fill += size;
        return .{ .len = size, .checksum = format.xxh64(frame) };
    }

    fn finish(s: *FrameSink, d: *Diag) Error!void {
        try s.out.finish(d);
    }
};

/// The bytes of one run on their way to shard k, in the lane's buffer. A writer that is not
/// direct writes them where they belong, as they come. A direct writer starts the buffer at
/// the shard's last block boundary with the partial block's bytes in front, writes whole
/// blocks with O_DIRECT (a full buffer on the helper thread while the other buffer fills),
/// and keeps the new partial block for later (see the invariants).
const Out = struct {
    w: *Writer,
    k: usize,
    lane: *Lane,
    helper: ?*async_write.AsyncWriter,
    /// Shard offset of lane.buf[0].
    base: u64,
    /// Bytes of lane.buf in use.
    fill: usize = 0,
    /// lane.buf[0..on_disk] is in the file already.
    on_disk: usize = 0,

    /// Starts run k at shard offset `start` with a lane buffer of at least `buf_min` bytes.
    fn init(
        w: *Writer,
        k: usize,
        lane: *Lane,
        helper: ?*async_write.AsyncWriter,
        start: u64,
        buf_min: usize,
        d: *Diag,
    ) Error!Out {
        try lane.ensureBuf(buf_min, 0, d);
        if (!w.direct) return .{ .w = w, .k = k, .lane = lane, .helper = null, .base = start };
        const st = &w.shards[k];
        const base = alignDown(start);
        const n: usize = @intCast(start - base);
        sys.copy(lane.buf[0..n], st.tail[0..n]);
        return .{
            .w = w,
            .k = k,
            .lane = lane,
            .helper = helper,
            .base = base,
            .fill = n,
            .on_disk = if (st.tail_on_disk) n else 0,
        };
    }

    /// Makes room for `need` more bytes (the bound of a `rec_len`-byte record): flushes, and
    /// grows the buffer if that is not enough.
    fn reserve(o: *Out, need: usize, rec_len: usize, record: u64, d: *Diag) Error!void {
        if (need <= o.lane.buf.len - o.fill) return;
        try o.flush(d);
        if (need <= o.lane.buf.len - o.fill) return;
        o.lane.ensureBuf(@max(o.fill + need, lane_buffer_bytes_min), o.fill, d) catch {
            return d.fail(error.OutOfMemory, "out of memory allocating a {d}-byte buffer to " ++
                "compress record {d} ({d} bytes) of '{s}'", .{ o.fill + need, record, rec_len, o.w.stage.path });
        };
    }

    /// Writes what the buffer holds, except, for a direct writer, the partial last block.
    fn flush(o: *Out, d: *Diag) Error!void {
        return o.flushAs(false, d);
    }

    /// Flushes the run and, for a direct writer, keeps its partial last block.
    fn finish(o: *Out, d: *Diag) Error!void {
        try o.flushAs(true, d);
        if (!o.w.direct) return;
        const st = &o.w.shards[o.k];
        std.debug.assert(o.fill < direct_block_bytes);
        sys.copy(st.tail[0..o.fill], o.lane.buf[0..o.fill]);
        st.tail_on_disk = o.on_disk == o.fill;
    }

    /// `final`: the run ends here, so nothing may be left in flight.
    fn flushAs(o: *Out, final: bool, d: *Diag) Error!void {
        const w = o.w;
        if (final) try o.settle(d);
        const fresh = o.fill - o.on_disk;
        if (fresh == 0) return;
        if (!w.direct) {
            try o.writeBuffered(o.lane.buf[0..o.fill], o.base, d);
            o.base += o.fill;
            o.fill = 0;
            return;
        }
        const st = &w.shards[o.k];
        const whole: usize = @intCast(alignDown(o.fill));
        if (st.direct_ok and st.buffered_left == 0 and fresh >= direct_write_bytes_min and whole > 0) {
            if (!final and o.helper != null) return o.postDirect(whole, d);
            try o.writeDirect(whole, d);
            o.consume(whole);
            o.on_disk = 0;
        } else {
            try o.settle(d);
            try o.writeBuffered(o.lane.buf[o.on_disk..o.fill], o.base + o.on_disk, d);
            st.buffered_left -|= fresh;
            o.consume(whole);
            o.on_disk = o.fill;
        }
    }

    /// Hands lane.buf[0..n] to the helper and goes on in the spare buffer, which receives
    /// the bytes after the first n.
    fn postDirect(o: *Out, n: usize, d: *Diag) Error!void {
        const h = o.helper.?;
        const st = &o.w.shards[o.k];
        try o.settle(d);
        try o.lane.ensureSpare(o.lane.buf.len, d);
        if (!o.setDirect(true) or !st.direct_ok) {
            try o.writeDirect(n, d); // written through the page cache
            o.consume(n);
            o.on_disk = 0;
            return;
        }
        h.post(.{ .fd = o.w.shard_fds[o.k], .bytes = o.lane.buf[0..n], .offset = o.base });
        const rest = o.fill - n;
        if (rest > 0) sys.copy(o.lane.spare[0..rest], o.lane.buf[n..o.fill]);
        std.mem.swap(LaneBuf, &o.lane.buf, &o.lane.spare);
        o.base += n;
        o.fill = rest;
        o.on_disk = 0;
    }

    /// Waits for the helper's write in flight. One that the file system refused for its
    /// alignment (EINVAL) is written again through the page cache (its buffer is untouched
    /// until now), and the shard is written that way from then on.
    fn settle(o: *Out, d: *Diag) Error!void {
        const h = o.helper orelse return;
        const f = h.wait() orelse return;
        if (f.errno != sys.EINVAL) return writeErrorErrno(o.w, o.k, f.write.bytes.len, f.write.offset, f.errno, d);
        o.w.shards[o.k].direct_ok = false;
        try o.writeBuffered(f.write.bytes, f.write.offset, d);
    }

    /// Drops the first `n` bytes of the buffer (written), moving the rest to its front.
    fn consume(o: *Out, n: usize) void {
        const rest = o.fill - n;
        if (rest > 0 and n > 0) std.mem.copyForwards(u8, o.lane.buf[0..rest], o.lane.buf[n..o.fill]);
        o.base += n;
        o.fill = rest;
    }

    /// Sets or clears O_DIRECT on the shard's descriptor; false if it cannot be set.
    fn setDirect(o: *Out, on: bool) bool {
        const st = &o.w.shards[o.k];
        if (st.fd_direct == on) return true;
        sys.setDirect(o.w.shard_fds[o.k], on) catch {
            if (on) st.direct_ok = false;
            return false;
        };
        st.fd_direct = on;
        return true;
    }

    /// Writes lane.buf[0..n] (whole blocks at a block boundary) with O_DIRECT on the calling
    /// thread. Where the file system refuses (EINVAL: an alignment it did not announce), the
    /// shard is written through the page cache from then on, these bytes included.
    fn writeDirect(o: *Out, n: usize, d: *Diag) Error!void {
        const w = o.w;
        const st = &w.shards[o.k];
        if (st.direct_ok and o.setDirect(true)) {
            if (sys.pwriteAll(w.shard_fds[o.k], o.lane.buf[0..n], o.base)) return else |_| {}
            if (sys.errno() != sys.EINVAL) return writeError(w, o.k, n, o.base, d);
            st.direct_ok = false;
        }
        try o.writeBuffered(o.lane.buf[0..n], o.base, d);
    }

    fn writeBuffered(o: *Out, bytes: []const u8, offset: u64, d: *Diag) Error!void {
        const w = o.w;
        if (w.direct and !o.setDirect(false)) return writeError(w, o.k, bytes.len, offset, d);
        sys.pwriteAll(w.shard_fds[o.k], bytes, offset) catch return writeError(w, o.k, bytes.len, offset, d);
        w.startWriteback(o.k, offset, bytes.len);
    }
};

fn writeError(w: *const Writer, k: usize, len: u64, offset: u64, d: *Diag) Error {
    return writeErrorErrno(w, k, len, offset, sys.errno(), d);
}

fn writeErrorErrno(w: *const Writer, k: usize, len: u64, offset: u64, e: i32, d: *Diag) Error {
    d.shard = @intCast(k);
    return d.failOs(error.Io, e, "writing {d} bytes at offset {d} of " ++
        "'{s}/data-{d:0>3}.zrd' failed", .{ len, offset, w.stage.tmp_path, k });
}

/// Validates a schema at the ABI and returns the header it starts.
fn validateSchema(
    s: *const abi.Schema,
    dict_ptr: ?[*]const u8,
    dict_size: usize,
    d: *Diag,
) Error!format.Header {
    if (s.reserved[0] != 0 or s.reserved[1] != 0 or s.reserved[2] != 0) {
        return d.fail(error.InvalidArgument, "schema.reserved must be zero", .{});
    }
    const kind: format.Kind = switch (s.kind) {
        1 => .dense,
        2 => .ragged,
        else => return d.fail(error.InvalidArgument, "schema kind {d} is unknown; kind must be " ++
            "1 (Dense) or 2 (Ragged)", .{s.kind}),
    };
    if (s.reserved2[0] != 0 or s.reserved2[1] != 0 or s.reserved2[2] != 0) {
        return d.fail(error.InvalidArgument, "schema.reserved2 must be zero", .{});
    }
    switch (format.dtypeCheck(s.dtype, s.dtype_length, s.dtype_unit)) {
        .ok => {},
        .bad => |problem| return schemaDtypeError(s, problem, d),
    }
    if (s.ndim > format.ndim_max) return d.fail(error.LimitExceeded, "schema ndim {d} exceeds " ++
        "ndim_max {d} (ZR-LIM-001)", .{ s.ndim, format.ndim_max });
    if (kind == .ragged and s.ndim == 0) return d.fail(error.InvalidArgument, "a Ragged schema " ++
        "needs ndim >= 1, got 0 (ZR-HDR-008)", .{});
    const codec_id: format.Codec = switch (s.codec) {
        0 => .raw,
        1 => .zstd,
        2 => .zstd_dict,
        else => return d.fail(error.InvalidArgument, "schema codec {d} is unknown; codec must " ++
            "be 0 (raw), 1 (zstd) or 2 (zstd_dict)", .{s.codec}),
    };
    if (s.data_shards < format.data_shards_min) return d.fail(error.LimitExceeded, "schema " ++
        "data_shards 0 is below data_shards_min {d}; data_shards must be in 1..{d} " ++
        "(ZR-LIM-001)", .{ format.data_shards_min, format.data_shards_max });
    var h: format.Header = .{
        .kind = kind,
        .dtype = s.dtype,
        .dtype_length = s.dtype_length,
        .dtype_unit = s.dtype_unit,
        // [ZR-HDR-018] The lowest minor that defines the store's codes: 1.0 stays 1.0.
        .format_minor = format.minorFor(s.dtype),
        .ndim = s.ndim,
        .codec = codec_id,
        .data_shards = s.data_shards,
    };
    if (kind == .dense) {
        @memcpy(h.item_shape[0..s.ndim], s.item_shape[0..s.ndim]);
        if (format.logicalSize(h.item_shape[0..s.ndim], h.itemsize()) == null) {
            var sat: u64 = h.itemsize();
            for (h.item_shape[0..s.ndim]) |dim| sat *|= dim;
            return d.fail(error.LimitExceeded, "Dense record size {d}{s} bytes (item_shape " ++
                "times itemsize {d}) exceeds record_size_bytes_max {d} (ZR-LIM-001)", .{
                sat, if (sat == std.math.maxInt(u64)) " or more" else "", h.itemsize(), format.record_size_bytes_max,
            });
        }
    }
    if (codec_id == .zstd_dict) {
        if (dict_size == 0 or dict_ptr == null) return d.fail(error.InvalidArgument, "codec " ++
            "zstd_dict needs a dictionary; none was given (ZR-COD-002)", .{});
        if (dict_size > format.dict_size_bytes_max) return d.fail(error.LimitExceeded, "the dictionary has {d} " ++
            "bytes, above dict_size_bytes_max {d} (ZR-LIM-001)", .{ dict_size, format.dict_size_bytes_max });
    } else if (dict_size != 0) {
        return d.fail(error.InvalidArgument, "a dictionary of {d} bytes was given with codec " ++
            "{s}; only zstd_dict takes one", .{ dict_size, codec_id.name() });
    }
    return h;
}

fn schemaDtypeError(s: *const abi.Schema, problem: format.DtypeProblem, d: *Diag) Error {
    return switch (problem) {
        .unknown_code => d.fail(error.InvalidArgument, "schema dtype {d} is unknown; dtype must " ++
            "be a code 1..{d} of spec section 3.3", .{ s.dtype, format.dtypes.len }),
        .unknown_unit => d.fail(error.InvalidArgument, "schema dtype {s} has unit code {d}; the " ++
            "units are codes 1..{d} of spec section 3.3", .{
            format.dtypeName(s.dtype), s.dtype_unit, format.datetime_units.len,
        }),
        .unused_param, .bad_length => d.fail(error.InvalidArgument, "schema dtype {s} has " ++
            "dtype_length {d} and dtype_unit {d}, which spec section 3.3 does not allow for it", .{
            format.dtypeName(s.dtype), s.dtype_length, s.dtype_unit,
        }),
        .itemsize_limit => d.fail(error.LimitExceeded, "schema dtype {s} with dtype_length {d} " ++
            "has an item size above itemsize_bytes_max {d} (ZR-LIM-001)", .{
            format.dtypeName(s.dtype), s.dtype_length, format.itemsize_bytes_max,
        }),
    };
}

test "a direct write that the file system refuses is written through the page cache" {
    const t = std.testing;
    var td: @import("testing.zig").TempDir = .{};
    try td.init();
    defer td.deinitExpectEmpty() catch {};
    var pbuf: [96]u8 = undefined;
    const path = td.sub(&pbuf, "s");
    var schema = std.mem.zeroes(abi.Schema);
    schema.kind = 2; // Ragged uint8, one shard, raw
    schema.dtype = 3;
    schema.ndim = 1;
    schema.data_shards = 1;
    var d: Diag = .{};
    const w = try Writer.open(path, &schema, null, 0, 0, &d);
    defer w.free();
    if (!w.direct) return error.SkipZigTest; // /tmp takes no O_DIRECT here
    const lane = &w.lanes[0];
    try lane.ensureBuf(2 * direct_block_bytes, 0, &d);
    for (lane.buf[0 .. 2 * direct_block_bytes], 0..) |*b, i| b.* = @truncate(i *% 7 +% 1);
    // An offset off the block grid, which every O_DIRECT file refuses with EINVAL, stands for
    // a file system that asks for more alignment than it announced.
    var o: Out = .{ .w = w, .k = 0, .lane = lane, .helper = null, .base = 100, .fill = 2 * direct_block_bytes };
    try o.writeDirect(2 * direct_block_bytes, &d);
    try t.expect(!w.shards[0].direct_ok);
    try t.expect(!w.shards[0].fd_direct);
    // The bytes are in the file all the same, and later flushes go through the page cache.
    const fd = try sys.openAt(w.stage.tmp_fd, "data-000.zrd", sys.O_RDONLY, 0);
    defer sys.close(fd);
    var back: [2 * direct_block_bytes]u8 = undefined;
    var short = false;
    try sys.preadAll(fd, &back, 100, &short);
    try t.expectEqualSlices(u8, lane.buf[0 .. 2 * direct_block_bytes], &back);
    o.base = 0;
    o.fill = 2 * direct_block_bytes;
    try o.flush(&d);
    try t.expect(!w.shards[0].fd_direct);
}
