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

const std = @import("std");
const abi = @import("abi.zig");
const diag_mod = @import("diag.zig");
const format = @import("format.zig");
const parallel = @import("parallel.zig");
const sys = @import("sys.zig");
const codec = @import("codec.zig");
const staging = @import("staging.zig");

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
/// Threads that flush a durable store's files at publish.
const fsync_workers_max: usize = 16;
/// `startWriteback`'s name for the index file.
const index_lane: usize = format.data_shards_max;

const State = enum { open, released };

/// Compression state of one worker (see the invariants above).
const Lane = struct {
    compressor: ?codec.Compressor = null,
    buf: []u8 = &.{},

    fn deinit(lane: *Lane) void {
        if (lane.compressor) |*c| c.deinit();
        lane.compressor = null;
        lane.freeBuf();
    }

    fn freeBuf(lane: *Lane) void {
        if (lane.buf.len > 0) alloc.free(lane.buf);
        lane.buf = &.{};
    }

    /// Creates the lane's compression context on its first use.
    fn ensureCompressor(lane: *Lane, w: *const Writer, d: *Diag) Error!void {
        if (lane.compressor != null) return;
        const shared: ?*const codec.SharedDict = if (w.cdict) |*cd| cd else null;
        lane.compressor = codec.Compressor.init(codec.default_level, shared) catch |err| switch (err) {
            error.OutOfMemory => return noMemory(d, "a zstd compression context"),
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
    shard_fds: [format.data_shards_max]Fd = @splat(-1),
    index_fd: Fd = -1,
    index_hash: format.XxHash64 = format.XxHash64.init(0),
    dict: []u8 = &.{},
    scratch: []u8 = &.{},
    /// zstd_dict: the store's dictionary compiled once, shared read-only by every lane.
    cdict: ?codec.SharedDict = null,
    lanes: [format.data_shards_max]Lane = @splat(.{}),
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
                "ZR_WRITE_NO_SYNC (0x1) is defined", .{flags});
        }
        const h = try validateSchema(schema, dict_ptr, dict_size, d);

        const w = alloc.create(Writer) catch return noMemory(d, "the writer handle");
        w.* = .{
            .flags = flags,
            .header = h,
            .itemsize = h.itemsize(),
            .record_size = if (h.kind == .dense) h.recordSize() else 0,
            .entry_size = format.indexEntrySize(h.kind, h.ndim),
        };
        errdefer w.destroy();
        if (dict_size > 0) {
            w.dict = alloc.dupe(u8, dict_ptr.?[0..dict_size]) catch return noMemory(d, "the dictionary");
        }
        if (h.codec == .zstd_dict) {
            w.cdict = codec.SharedDict.initCompress(w.dict, codec.default_level) catch |err| switch (err) {
                error.OutOfMemory => return noMemory(d, "the compression dictionary"),
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
    }

    /// Closes every descriptor and frees every buffer but the handle and its paths.
    fn release(w: *Writer) void {
        for (w.shard_fds[0..w.header.data_shards]) |*fd| {
            if (fd.* >= 0) sys.close(fd.*);
            fd.* = -1;
        }
        if (w.index_fd >= 0) sys.close(w.index_fd);
        w.index_fd = -1;
        if (w.dict.len > 0) alloc.free(w.dict);
        w.dict = &.{};
        if (w.scratch.len > 0) alloc.free(w.scratch);
        w.scratch = &.{};
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
                "exceeds record_count_max {d} (ZR-LIM-001)", .{ n, w.header.record_count, w.stage.path, format.record_count_max });
        }
    }

    /// Grows the index scratch to hold `n` entries; it is kept for later appends.
    fn ensureScratch(w: *Writer, n: u64, d: *Diag) Error!void {
        const need: usize = @intCast(n * w.entry_size);
        if (w.scratch.len >= need) return;
        if (w.scratch.len > 0) alloc.free(w.scratch);
        w.scratch = &.{};
        w.scratch = alloc.alloc(u8, need) catch return noMemory(d, "the index scratch buffer");
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
            const base: [*]const u8 = if (size == 0) @ptrFromInt(1) else data.? + @as(usize, @intCast(done * w.record_size));
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
                return d.fail(error.LimitExceeded, "record {d} has more than " ++
                    "record_size_bytes_max {d} bytes (ZR-LIM-001)", .{ w.header.record_count + i, format.record_size_bytes_max });
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
        const parallel_min = if (compressed) parallel_compress_bytes_min else parallel_write_bytes_min;
        // A slice's runs compress at different speeds (records differ in size and
        // compressibility); with two workers per CPU the OS shares the cores among the runs
        // still going, so a slice is not held up by one long run (decision record 0001 §10).
        const per_cpu: usize = if (compressed) 2 else 1;
        const workers: usize = if (ctx.total_bytes >= parallel_min and shards > 1)
            @min(shards, per_cpu * sys.cpuCount())
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
        w.header.index_size += index_bytes.len;
        w.header.record_count += n;
        w.header.logical_bytes += total_bytes;
        w.header.stored_bytes += stored;
    }

    /// Starts writing back bytes [offset, offset + len) of shard k (or the index, k ==
    /// `index_lane`) that were just written, when the store is to be durable: the disk works
    /// while the next bytes are produced, so `publish` finds little left to flush and dirty
    /// pages do not pile up in the page cache (decision record 0001, durable writes).
    fn startWriteback(w: *const Writer, k: usize, offset: u64, len: u64) void {
        if (w.flags & abi.write_no_sync != 0) return;
        sys.startWriteback(if (k == index_lane) w.index_fd else w.shard_fds[k], offset, len);
    }

    /// Frees lane buffers that a huge record grew, so that one such record does not pin its
    /// frame's memory for the writer's lifetime.
    fn trimLanes(w: *Writer) void {
        for (&w.lanes) |*lane| {
            if (lane.buf.len > lane_buffer_keep_bytes_max) lane.freeBuf();
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
        if (sync) {
            const files: u64 = @as(u64, w.header.data_shards) + 1;
            try parallel.run(Writer, w, fsyncFiles, files, @intCast(@min(files, fsync_workers_max)), .contiguous, d);
        }
        var h = w.header;
        var hasher = w.index_hash;
        h.index_checksum = hasher.final();
        const size: usize = @intCast(format.headerSize(h.kind, h.ndim, h.data_shards, @intCast(w.dict.len)));
        const bytes = alloc.alloc(u8, size) catch return noMemory(d, "the header");
        defer alloc.free(bytes);
        format.encodeHeader(&h, w.dict, bytes);

        const hfd = try w.createFile("header.zrh", d);
        defer sys.close(hfd);
        sys.pwriteAll(hfd, bytes, 0) catch return d.failOs(error.Io, sys.errno(), "writing " ++
            "'{s}/header.zrh' failed", .{w.stage.tmp_path});
        if (sync) {
            sys.fsync(hfd) catch return d.failOs(error.Io, sys.errno(), "flushing " ++
                "'{s}/header.zrh' failed", .{w.stage.tmp_path});
        }
        // [ZR-PUB-003] One atomic rename that never replaces an existing path.
        try w.stage.publish(sync, d);
    }
};

/// Flushes files [begin, end) of the writer: shards 0..data_shards-1, then the index.
fn fsyncFiles(w: *const Writer, begin: u64, end: u64, d: *Diag) Error!void {
    var buf: [16]u8 = undefined;
    var k = begin;
    while (k < end) : (k += 1) {
        const is_index = k == w.header.data_shards;
        const fd = if (is_index) w.index_fd else w.shard_fds[@intCast(k)];
        sys.fsync(fd) catch {
            if (!is_index) d.shard = @intCast(k);
            const name: []const u8 = if (is_index) "index.zri" else Writer.shardName(&buf, @intCast(k));
            return d.failOs(error.Io, sys.errno(), "flushing '{s}/{s}' failed", .{ w.stage.tmp_path, name });
        };
    }
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
    var k = begin;
    while (k < end) : (k += 1) {
        const kk: usize = @intCast(k);
        if (w.header.codec == .raw) {
            var sink: RawSink = .{ .ctx = ctx, .k = kk, .pos = ctx.start_offsets[kk] };
            try writeRun(ctx, kk, &sink, d);
        } else {
            // A worker covering shards [begin, end) uses lanes[begin] only (see the invariants).
            var sink: FrameSink = .{ .ctx = ctx, .k = kk, .lane = &w.lanes[@intCast(begin)], .pos = ctx.start_offsets[kk] };
            try sink.lane.ensureCompressor(w, d);
            try writeRun(ctx, kk, &sink, d);
        }
    }
}

/// Stores run k through `sink` and encodes its records' index entries: the part of a lane's
/// work that does not depend on the codec.
fn writeRun(ctx: *const SliceCtx, k: usize, sink: anytype, d: *Diag) Error!void {
    const w = ctx.w;
    const es: usize = w.entry_size;
    const bounds = ctx.runBounds(k);
    var offset = ctx.start_offsets[k];
    var j = bounds[0];
    while (j < bounds[1]) : (j += 1) {
        const stored = try sink.put(j, d);
        // [ZR-SUM-001] The checksum covers the stored bytes: the payload for raw, the frame
        // otherwise. `stored` stays valid until the next `put`.
        format.encodeEntry(w.scratch[@intCast(j * es)..][0..es], .{
            .offset = offset,
            .stored_size = @intCast(stored.len),
            .shard = @intCast(k),
            .checksum = format.xxh64(stored),
        }, ctx.shape(j));
        offset += stored.len;
    }
    try sink.finish(d);
    ctx.run_bytes[k] = offset - ctx.start_offsets[k];
}

/// Raw records go to the shard as they are: a Dense run in one pwrite of its contiguous
/// block, Ragged records gathered into pwritev batches.
const RawSink = struct {
    ctx: *const SliceCtx,
    k: usize,
    /// Shard offset where the bytes not yet written (`iov`, or the Dense run) start.
    pos: u64,
    iov: [iov_batch_max]sys.IoVec = undefined,
    iov_len: usize = 0,
    iov_bytes: u64 = 0,

    fn put(s: *RawSink, j: u64, d: *Diag) Error![]const u8 {
        const rec = s.ctx.recordBytes(j);
        if (s.ctx.records == .ragged and rec.len > 0) {
            s.iov[s.iov_len] = .{ .base = rec.ptr, .len = rec.len };
            s.iov_len += 1;
            s.iov_bytes += rec.len;
            if (s.iov_len == s.iov.len) try s.flushIov(d);
        }
        return rec;
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

/// Compressed records: each becomes one zstd frame in the lane buffer ([ZR-COD-001]); frames
/// are written in batches of `lane_flush_bytes`.
const FrameSink = struct {
    ctx: *const SliceCtx,
    k: usize,
    lane: *Lane,
    /// Shard offset of lane.buf[0].
    pos: u64,
    pending: usize = 0,

    fn put(s: *FrameSink, j: u64, d: *Diag) Error![]const u8 {
        const w = s.ctx.w;
        const lane = s.lane;
        const rec = s.ctx.recordBytes(j);
        const record = w.header.record_count + j;
        errdefer {
            d.record = @intCast(record);
            d.shard = @intCast(s.k);
        }
        if (s.pending >= lane_flush_bytes) try s.flush(d);
        const need = codec.Compressor.bound(rec.len);
        if (need > lane.buf.len - s.pending) {
            try s.flush(d);
            if (need > lane.buf.len) {
                lane.freeBuf();
                lane.buf = alloc.alloc(u8, @max(need, lane_buffer_bytes_min)) catch {
                    return d.fail(error.OutOfMemory, "out of memory allocating a {d}-byte " ++
                        "buffer to compress record {d} ({d} bytes) of '{s}'", .{
                        @max(need, lane_buffer_bytes_min), record, rec.len, w.stage.path,
                    });
                };
            }
        }
        const compressor = &lane.compressor.?;
        const size = compressor.compress(lane.buf[s.pending..], rec) catch |err| {
            return switch (err) {
                error.OutOfMemory => d.fail(error.OutOfMemory, "out of memory compressing " ++
                    "record {d} ({d} bytes) of '{s}'", .{ record, rec.len, w.stage.path }),
                else => d.fail(error.InvalidArgument, "libzstd failed to compress record {d} " ++
                    "({d} bytes) of '{s}': {s}", .{ record, rec.len, w.stage.path, codec.errorName(compressor.last_code) }),
            };
        };
        // A frame of a record within record_size_bytes_max is far below 4 GiB, but the index
        // field is 32 bits and the limit is the format's ([ZR-IDX-005]).
        if (size > format.stored_size_bytes_max) return d.fail(error.LimitExceeded, "record {d} " ++
            "compresses to {d} bytes, above stored_size_bytes_max {d} (ZR-LIM-001)", .{ record, size, format.stored_size_bytes_max });
        const frame = lane.buf[s.pending..][0..size];
        s.pending += size;
        return frame;
    }

    fn flush(s: *FrameSink, d: *Diag) Error!void {
        if (s.pending == 0) return;
        const w = s.ctx.w;
        sys.pwriteAll(w.shard_fds[s.k], s.lane.buf[0..s.pending], s.pos) catch {
            return writeError(w, s.k, s.pending, s.pos, d);
        };
        w.startWriteback(s.k, s.pos, s.pending);
        s.pos += s.pending;
        s.pending = 0;
    }

    fn finish(s: *FrameSink, d: *Diag) Error!void {
        try s.flush(d);
    }
};

fn writeError(w: *Writer, k: usize, len: u64, offset: u64, d: *Diag) Error {
    d.shard = @intCast(k);
    return d.failOs(error.Io, sys.errno(), "writing {d} bytes at offset {d} of " ++
        "'{s}/data-{d:0>3}.zrd' failed", .{ len, offset, w.stage.tmp_path, k });
}

fn noMemory(d: *Diag, what: []const u8) Error {
    return d.fail(error.OutOfMemory, "out of memory allocating {s}", .{what});
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
        "data_shards 0 is below data_shards_min {d}; data_shards must be in 1..{d} (ZR-LIM-001)", .{ format.data_shards_min, format.data_shards_max });
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
        if (dict_size > format.dict_size_bytes_max) return d.fail(error.LimitExceeded, "the " ++
            "dictionary has {d} bytes, above dict_size_bytes_max {d} (ZR-LIM-001)", .{ dict_size, format.dict_size_bytes_max });
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
            "units are codes 1..{d} of spec section 3.3", .{ format.dtypeName(s.dtype), s.dtype_unit, format.datetime_units.len }),
        .unused_param, .bad_length => d.fail(error.InvalidArgument, "schema dtype {s} has " ++
            "dtype_length {d} and dtype_unit {d}, which spec section 3.3 does not allow for it", .{
            format.dtypeName(s.dtype), s.dtype_length, s.dtype_unit,
        }),
        .itemsize_limit => d.fail(error.LimitExceeded, "schema dtype {s} with dtype_length {d} " ++
            "has an item size above itemsize_bytes_max {d} (ZR-LIM-001)", .{ format.dtypeName(s.dtype), s.dtype_length, format.itemsize_bytes_max }),
    };
}
