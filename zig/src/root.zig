//! The C ABI of zrecord (zig/include/zrecord.h): one exported function per declaration.
//!
//! Invariants:
//! - Every exported function checks its pointers and handles before use and never panics on
//!   any input; failures become a ZR_E_* code plus a filled `zr_status`.
//! - Every fallible call writes `zr_status` on success too (code 0, empty message), so a caller
//!   never reads a stale message.
//! - This file holds no logic of its own beyond argument plumbing: the format lives in
//!   format.zig, the writer and reader in their files.

const std = @import("std");
const assert = std.debug.assert;
const abi = @import("abi.zig");
const diag_mod = @import("diag.zig");
const format = @import("format.zig");
const reader_mod = @import("reader.zig");
const writer_mod = @import("writer.zig");
const dictionary = @import("dictionary.zig");
const staging = @import("staging.zig");
const readahead = @import("readahead.zig");
const gather = @import("gather.zig");
const index_cache = @import("index_cache.zig");
const index_parts = @import("index_parts.zig");
const index_table = @import("index_table.zig");
const sys = @import("sys.zig");

const Diag = diag_mod.Diag;
const Error = diag_mod.Error;
const Writer = writer_mod.Writer;
const Reader = reader_mod.Reader;
const Status = abi.Status;

/// Safety panics (which no input should reach) print one line through libc and abort. The
/// default handler would pull in std.Io.Threaded, whose initialisation changes process-wide
/// signal dispositions inside the host Python process.
pub const panic = std.debug.FullPanic(panicHandler);

extern "c" fn write(fd: c_int, buf: [*]const u8, len: usize) isize;
extern "c" fn abort() noreturn;

fn panicHandler(message: []const u8, first_trace_addr: ?usize) noreturn {
    @branchHint(.cold);
    _ = first_trace_addr;
    const prefix = "zrecord native core: internal error: ";
    _ = write(2, prefix, prefix.len);
    _ = write(2, message.ptr, message.len);
    _ = write(2, "\n", 1);
    abort();
}

fn finish(st: ?*Status, result: Error!void, d: *const Diag) c_int {
    const s = st orelse return if (result) |_| 0 else |err| diag_mod.code(err);
    if (result) |_| {
        s.code = 0;
        s.os_errno = 0;
        s.record = -1;
        s.shard = -1;
        s.reserved = 0;
        s.message[0] = 0;
        return 0;
    } else |err| {
        // Every failure has a code of zrecord.h's (negative) and a message that fits.
        assert(diag_mod.code(err) < 0 and d.message_len < s.message.len);
        s.code = diag_mod.code(err);
        s.os_errno = d.os_errno;
        s.record = d.record;
        s.shard = d.shard;
        s.reserved = 0;
        @memcpy(s.message[0 .. d.message_len + 1], d.message[0 .. d.message_len + 1]);
        return s.code;
    }
}

fn nullArgument(d: *Diag, comptime what: []const u8) Error {
    return d.fail(error.InvalidArgument, what ++ " must not be NULL", .{});
}

// ---- writer ------------------------------------------------------------------------------

pub export fn zr_writer_open(
    path: ?[*:0]const u8,
    schema: ?*const abi.Schema,
    dict: ?[*]const u8,
    dict_size: usize,
    flags: u32,
    out: ?*?*Writer,
    st: ?*Status,
) c_int {
    var d: Diag = .{};
    const result: Error!void = blk: {
        const o = out orelse break :blk nullArgument(&d, "out");
        o.* = null;
        const p = path orelse break :blk nullArgument(&d, "path");
        const s = schema orelse break :blk nullArgument(&d, "schema");
        o.* = Writer.open(p, s, dict, dict_size, flags, &d) catch |err| break :blk err;
    };
    return finish(st, result, &d);
}

pub export fn zr_writer_append_dense(w: ?*Writer, data: ?*const anyopaque, size: u64, count: u64, st: ?*Status) c_int {
    var d: Diag = .{};
    const result: Error!void = if (w) |wr|
        wr.appendDense(@ptrCast(data), size, count, &d)
    else
        nullArgument(&d, "writer");
    return finish(st, result, &d);
}

pub export fn zr_writer_append_ragged(
    w: ?*Writer,
    ptrs: ?[*]const u64,
    shapes: ?[*]const u64,
    count: u64,
    st: ?*Status,
) c_int {
    var d: Diag = .{};
    const result: Error!void = if (w) |wr| wr.appendRagged(ptrs, shapes, count, &d) else nullArgument(&d, "writer");
    return finish(st, result, &d);
}

pub export fn zr_writer_count(w: ?*const Writer) u64 {
    return if (w) |wr| wr.count() else 0;
}

pub export fn zr_writer_set_page_cache_bytes(w: ?*Writer, bytes: u64, st: ?*Status) c_int {
    var d: Diag = .{};
    const result: Error!void = if (w) |wr| wr.setPageCacheBytes(bytes) else nullArgument(&d, "writer");
    return finish(st, result, &d);
}

pub export fn zr_writer_publish(w: ?*Writer, st: ?*Status) c_int {
    var d: Diag = .{};
    const result: Error!void = if (w) |wr| wr.publish(&d) else nullArgument(&d, "writer");
    return finish(st, result, &d);
}

pub export fn zr_writer_abort(w: ?*Writer) void {
    if (w) |wr| wr.abort();
}

pub export fn zr_writer_free(w: ?*Writer) void {
    if (w) |wr| wr.free();
}

// ---- staging: publish a directory tree atomically -------------------------------------------

pub export fn zr_staging_open(path: ?[*:0]const u8, out: ?*?*staging.Staging, st: ?*Status) c_int {
    var d: Diag = .{};
    const result: Error!void = blk: {
        const o = out orelse break :blk nullArgument(&d, "out");
        o.* = null;
        const p = path orelse break :blk nullArgument(&d, "path");
        const s = std.heap.c_allocator.create(staging.Staging) catch
            break :blk d.fail(error.OutOfMemory, "out of memory allocating a staging handle", .{});
        s.* = staging.Staging.create(std.mem.sliceTo(p, 0), &d) catch |err| {
            std.heap.c_allocator.destroy(s);
            break :blk err;
        };
        o.* = s;
    };
    return finish(st, result, &d);
}

pub export fn zr_staging_dir(s: ?*const staging.Staging) ?[*:0]const u8 {
    const stage = s orelse return null;
    return if (stage.tmp_path.len > 0) stage.tmp_path.ptr else null;
}

pub export fn zr_staging_publish(s: ?*staging.Staging, flags: u32, st: ?*Status) c_int {
    var d: Diag = .{};
    const result: Error!void = blk: {
        const stage = s orelse break :blk nullArgument(&d, "staging");
        if (flags & ~abi.write_no_sync != 0) break :blk d.fail(error.InvalidArgument, "unknown staging " ++
            "flags 0x{x}; only ZR_WRITE_NO_SYNC (0x1) is defined", .{flags});
        if (stage.tmp_path.len == 0) break :blk d.fail(error.InvalidArgument, "the staged " ++
            "directory for '{s}' was already published or aborted", .{stage.path});
        const sync = flags & abi.write_no_sync == 0;
        if (sync) stage.syncTree(&d) catch |err| break :blk err;
        stage.publish(sync, &d) catch |err| break :blk err;
    };
    return finish(st, result, &d);
}

pub export fn zr_staging_abort(s: ?*staging.Staging) void {
    if (s) |stage| stage.abort();
}

pub export fn zr_staging_free(s: ?*staging.Staging) void {
    if (s) |stage| {
        stage.deinit();
        std.heap.c_allocator.destroy(stage);
    }
}

// ---- reader ------------------------------------------------------------------------------

pub export fn zr_reader_open(path: ?[*:0]const u8, out: ?*?*Reader, st: ?*Status) c_int {
    return zr_reader_open_ex(path, 0, out, st);
}

pub export fn zr_reader_open_ex(path: ?[*:0]const u8, flags: u32, out: ?*?*Reader, st: ?*Status) c_int {
    const opts: abi.OpenOpts = .{ .flags = flags, .reserved = 0, .index_cache = null };
    return zr_reader_open_opts(path, &opts, out, st);
}

pub export fn zr_reader_open_opts(
    path: ?[*:0]const u8,
    opts: ?*const abi.OpenOpts,
    out: ?*?*Reader,
    st: ?*Status,
) c_int {
    var d: Diag = .{};
    const result: Error!void = blk: {
        const o = out orelse break :blk nullArgument(&d, "out");
        o.* = null;
        const p = path orelse break :blk nullArgument(&d, "path");
        const op = opts orelse break :blk nullArgument(&d, "opts");
        if (op.flags & ~abi.open_flags_known != 0) break :blk d.fail(error.InvalidArgument, "unknown " ++
            "open flags 0x{x}; only ZR_OPEN_CACHE_BYPASS (0x1), ZR_OPEN_VALIDATE_INDEX (0x2), " ++
            "ZR_OPEN_CHECK_EVERY_READ (0x4) and ZR_OPEN_WHOLE_INDEX (0x8) are defined", .{op.flags});
        if (op.reserved != 0) break :blk d.fail(error.InvalidArgument, "zr_open_opts.reserved must be zero", .{});
        const name: ?[]const u8 = if (op.name) |n| std.mem.sliceTo(n, 0) else null;
        if (name) |n| if (n.len == 0) break :blk d.fail(error.InvalidArgument, "zr_open_opts.name is " ++
            "empty; pass NULL to name the store by its path", .{});
        const cache: ?[:0]const u8 = if (op.index_cache) |c| std.mem.sliceTo(c, 0) else null;
        if (cache) |c| if (c.len == 0) break :blk d.fail(error.InvalidArgument, "the index cache folder is " ++
            "an empty path; pass NULL for none", .{});
        const policy: index_cache.Policy = .{
            .records_min = if (op.index_cache_records_min == 0)
                index_cache.records_min_default
            else
                op.index_cache_records_min,
            .budget_bytes = if (op.index_cache_bytes == 0) index_cache.budget_bytes_default else op.index_cache_bytes,
        };
        assert(policy.records_min > 0 and policy.budget_bytes > 0);
        o.* = Reader.open(p, .{
            .flags = op.flags,
            .index_cache = cache,
            .index_cache_policy = policy,
            .name = name,
        }, &d) catch |err| break :blk err;
    };
    // The handle is set exactly when the open succeeded.
    if (out) |o| assert((o.* != null) == (if (result) |_| true else |_| false));
    return finish(st, result, &d);
}

/// Prunes the index cache folder `folder` now, whenever it was last pruned, to `budget_bytes`
/// of this user's files (index_cache.prune); a folder that does not exist holds nothing.
pub export fn zr_index_cache_prune(
    folder: ?[*:0]const u8,
    budget_bytes: u64,
    out: ?*index_cache.PruneStats,
    st: ?*Status,
) c_int {
    var d: Diag = .{};
    const result: Error!void = blk: {
        const f = folder orelse break :blk nullArgument(&d, "folder");
        const o = out orelse break :blk nullArgument(&d, "out");
        o.* = .{};
        const dfd = sys.open(f, sys.O_RDONLY | sys.O_DIRECTORY | sys.O_CLOEXEC, 0) catch {
            const e = sys.errno();
            if (e == sys.ENOENT) break :blk;
            break :blk d.failOs(error.Io, e, "cannot open the index cache folder '{s}'", .{std.mem.sliceTo(f, 0)});
        };
        defer sys.close(dfd);
        o.* = index_cache.prune(dfd, budget_bytes, sys.nowSeconds()) catch
            break :blk d.noMemory("the list of index cache files");
    };
    return finish(st, result, &d);
}

/// Fills `out` with how `r`'s compact index was made and what it holds in memory.
pub export fn zr_reader_index_info(r: ?*const Reader, out: ?*abi.IndexInfo) void {
    const rd = r orelse return;
    const o = out orelse return;
    const resident = if (rd.parts) |l| l.filledBytes() else rd.compact.bytes();
    o.* = .{ .resident_bytes = resident, .source = @backingInt(rd.index_source), .reserved = 0 };
}

pub export fn zr_reader_info(r: ?*const Reader, out: ?*abi.Info) void {
    const rd = r orelse return;
    const o = out orelse return;
    rd.fillInfo(o);
}

pub export fn zr_reader_dict(r: ?*const Reader, out: ?[*]u8, capacity: u64) u64 {
    const rd = r orelse return 0;
    const dict = rd.dict();
    // The dictionary is copied only whole; a smaller buffer just learns the size.
    if (out != null and capacity >= dict.len and dict.len > 0) @memcpy(out.?[0..dict.len], dict);
    return dict.len;
}

pub export fn zr_reader_gather_dense(
    r: ?*Reader,
    idx: ?[*]const u64,
    count: u64,
    out: ?*anyopaque,
    out_size: u64,
    threads: u32,
    st: ?*Status,
) c_int {
    @setRuntimeSafety(false); // a hot path's forwarding only: Diag.fresh says why
    var d: Diag = undefined;
    d.fresh();
    const result: Error!void = if (r) |rd|
        rd.gatherDense(idx, count, @ptrCast(out), out_size, threads, &d)
    else
        nullArgument(&d, "reader");
    return finish(st, result, &d);
}

pub export fn zr_reader_shapes(
    r: ?*Reader,
    idx: ?[*]const u64,
    count: u64,
    shapes: ?[*]u64,
    sizes: ?[*]u64,
    st: ?*Status,
) c_int {
    @setRuntimeSafety(false); // a hot path's forwarding only: Diag.fresh says why
    var d: Diag = undefined;
    d.fresh();
    const result: Error!void = if (r) |rd| rd.shapes(idx, count, shapes, sizes, &d) else nullArgument(&d, "reader");
    return finish(st, result, &d);
}

pub export fn zr_reader_gather_ragged(
    r: ?*Reader,
    idx: ?[*]const u64,
    count: u64,
    out: ?*anyopaque,
    offsets: ?[*]const u64,
    sizes: ?[*]const u64,
    out_size: u64,
    threads: u32,
    st: ?*Status,
) c_int {
    @setRuntimeSafety(false); // a hot path's forwarding only: Diag.fresh says why
    var d: Diag = undefined;
    d.fresh();
    const result: Error!void = if (r) |rd|
        rd.gatherRagged(idx, count, @ptrCast(out), offsets, sizes, out_size, threads, &d)
    else
        nullArgument(&d, "reader");
    return finish(st, result, &d);
}

/// zr_reader_gather_ragged over many readers (a dataset's parts) in one call, part after
/// part in its plan's order (gather.raggedAcross): `*taken` 0, and nothing read, where a
/// touched reader does not read that way (the caller then gathers part by part); 1 where it
/// read the batch as warm, 2 where (with ZR_PARTS_COLD) it found it cold and hinted it.
pub export fn zr_parts_gather_ragged(
    readers: ?[*]const *Reader,
    parts: u64,
    order: ?[*]const u64,
    local: ?[*]const u64,
    bounds: ?[*]const u64,
    count: u64,
    out: ?*anyopaque,
    offsets: ?[*]const u64,
    sizes: ?[*]const u64,
    out_size: u64,
    flags: u32,
    taken: ?*u32,
    st: ?*Status,
) c_int {
    @setRuntimeSafety(false); // a hot path's forwarding only: Diag.fresh says why
    var d: Diag = undefined;
    d.fresh();
    const result: Error!void = blk: {
        const t = taken orelse break :blk nullArgument(&d, "taken");
        t.* = 0;
        if (count == 0) {
            t.* = 1;
            break :blk {};
        }
        if (readers == null or order == null or local == null or bounds == null or offsets == null or sizes == null) {
            break :blk d.fail(error.InvalidArgument, "parts_gather_ragged got a null array for {d} " ++
                "records", .{count});
        }
        if (flags & ~abi.parts_flags_known != 0) break :blk d.fail(error.InvalidArgument, "" ++
            "parts_gather_ragged got unknown flags 0x{x}", .{flags & ~abi.parts_flags_known});
        const rs = readers.?[0..@intCast(parts)];
        const plan: gather.Plan = .{ .order = order.?, .local = local.?, .bounds = bounds.?, .n = count };
        const slots: gather.Slots = .{ .offsets = offsets.?, .sizes = sizes.? };
        const cold = flags & abi.parts_cold != 0;
        const how = gather.raggedAcross(rs, plan, @ptrCast(out), out_size, slots, cold, &d) catch |err| break :blk err;
        t.* = @backingInt(how);
    };
    return finish(st, result, &d);
}

/// The runs of index parts that judging records idx[0..count) needs and `r` has not judged
/// (Reader.indexWants); `out` holds room for 2 × count of them.
pub export fn zr_reader_index_wants(
    r: ?*Reader,
    idx: ?[*]const u64,
    count: u64,
    out: ?[*]abi.IndexWant,
    out_count: ?*u64,
    st: ?*Status,
) c_int {
    var d: Diag = .{};
    const result: Error!void = blk: {
        const rd = r orelse break :blk nullArgument(&d, "reader");
        const oc = out_count orelse break :blk nullArgument(&d, "out_count");
        break :blk rd.indexWants(idx, count, out, oc, &d);
    };
    return finish(st, result, &d);
}

/// Where records idx[0..count) lie, each judged first (Reader.locate).
pub export fn zr_reader_locate(
    r: ?*Reader,
    idx: ?[*]const u64,
    count: u64,
    shards: ?[*]u64,
    offsets: ?[*]u64,
    sizes: ?[*]u64,
    st: ?*Status,
) c_int {
    var d: Diag = .{};
    const result: Error!void = if (r) |rd|
        rd.locate(idx, count, shards, offsets, sizes, &d)
    else
        nullArgument(&d, "reader");
    return finish(st, result, &d);
}

pub export fn zr_reader_verify(r: ?*Reader, start: u64, count: u64, st: ?*Status) c_int {
    var d: Diag = .{};
    const result: Error!void = if (r) |rd| rd.verify(start, count, &d) else nullArgument(&d, "reader");
    return finish(st, result, &d);
}

/// Hints the index parts that records idx[0..count) need and `r` has not judged
/// (Reader.hintIndex); `*passed` (when not null) 1 once every part has passed.
pub export fn zr_reader_hint_index(r: ?*Reader, idx: ?[*]const u64, count: u64, passed: ?*u32, st: ?*Status) c_int {
    var d: Diag = .{};
    const result: Error!void = blk: {
        const rd = r orelse break :blk nullArgument(&d, "reader");
        const all = rd.hintIndex(idx, count, &d) catch |err| break :blk err;
        if (passed) |p| p.* = @intFromBool(all);
    };
    return finish(st, result, &d);
}

pub export fn zr_reader_prefetch(r: ?*Reader, idx: ?[*]const u64, count: u64, st: ?*Status) c_int {
    return zr_reader_prefetch_hinted(r, idx, count, null, st);
}

pub export fn zr_reader_prefetch_hinted(
    r: ?*Reader,
    idx: ?[*]const u64,
    count: u64,
    hinted: ?*u32,
    st: ?*Status,
) c_int {
    @setRuntimeSafety(false); // a hot path's forwarding only: Diag.fresh says why
    var d: Diag = undefined;
    d.fresh();
    const result: Error!void = blk: {
        const rd = r orelse break :blk nullArgument(&d, "reader");
        const did = rd.prefetch(idx, count, &d) catch |err| break :blk err;
        if (hinted) |h| h.* = @intFromBool(did);
    };
    return finish(st, result, &d);
}

pub export fn zr_reader_set_reads(r: ?*Reader, mode: u32, st: ?*Status) c_int {
    var d: Diag = .{};
    const result: Error!void = blk: {
        const rd = r orelse break :blk nullArgument(&d, "reader");
        if (mode > @backingInt(readahead.Mode.hinted)) break :blk d.fail(error.InvalidArgument, "unknown " ++
            "read mode {d}; ZR_READS_AUTO (0), ZR_READS_MAPPED (1) and ZR_READS_HINTED (2) are defined", .{mode});
        rd.setReadMode(@fromBackingInt(@intCast(mode)));
    };
    return finish(st, result, &d);
}

pub export fn zr_reader_close(r: ?*Reader) void {
    if (r) |rd| rd.close();
}

pub export fn zr_reader_free(r: ?*Reader) void {
    if (r) |rd| rd.free();
}

// ---- headers -----------------------------------------------------------------------------

/// Judges the header file `name` of `file_size` bytes, of which `bytes` holds the first `size`
/// (all of them, or at least its first 12 when it is larger than any valid header), by the
/// checks of a reader's open (spec §9.2: format.checkHeaderPrefix, then format.decodeHeader),
/// and fills `out` with what it says of the store's files: for a reader that fetches those
/// files itself (the mirror of a store read over a network).
pub export fn zr_header_layout(
    bytes: ?[*]const u8,
    size: u64,
    file_size: u64,
    name: ?[*:0]const u8,
    out: ?*abi.Layout,
    st: ?*Status,
) c_int {
    var d: Diag = .{};
    const result: Error!void = blk: {
        const o = out orelse break :blk nullArgument(&d, "out");
        o.* = std.mem.zeroes(abi.Layout);
        const n = name orelse break :blk nullArgument(&d, "name");
        if (size > 0 and bytes == null) break :blk nullArgument(&d, "bytes");
        if (size > file_size) break :blk d.fail(error.InvalidArgument, "zr_header_layout got {d} " ++
            "bytes of a {d}-byte file", .{ size, file_size });
        const have: []const u8 = if (size == 0) &.{} else bytes.?[0..@intCast(size)];
        const where = std.mem.sliceTo(n, 0);
        format.checkHeaderPrefix(have[0..@min(have.len, 12)], file_size, where, &d) catch |err| break :blk err;
        if (size != file_size) break :blk d.fail(error.InvalidArgument, "zr_header_layout got {d} " ++
            "bytes of the {d}-byte header '{s}'; it judges a header of at most {d} bytes whole", .{
            size, file_size, where, format.header_size_bytes_max,
        });
        const h = format.decodeHeader(have, where, &d) catch |err| break :blk err;
        o.* = .{
            .record_count = h.record_count,
            .index_size = h.index_size,
            .sums_size = 8 * h.blockCount(),
            .stored_bytes = h.stored_bytes,
            .index_blocks = h.blockCount(),
            .sum_groups = h.groupCount(),
            .index_entry_size = h.index_entry_size,
            .data_shards = h.data_shards,
            .index_parts = @intFromBool(h.hasParts()),
            .index_block_shift = h.index_block_shift,
            .index_group_shift = h.index_group_shift,
            .header_checksum = h.header_checksum,
            .by_part = @intFromBool(index_parts.byPartFits(&h)),
            .reserved = @splat(0),
            .shard_sizes = h.shard_sizes,
        };
    };
    return finish(st, result, &d);
}

pub export fn zr_index_table(
    header: ?[*]const u8,
    header_size: u64,
    index: ?[*]const u8,
    index_size: u64,
    sums: ?[*]const u8,
    sums_size: u64,
    name: ?[*:0]const u8,
    record_count: u64,
    offsets: ?[*]u64,
    stored_sizes: ?[*]u64,
    shards: ?[*]u8,
    checksums: ?[*]u64,
    st: ?*Status,
) c_int {
    var d: Diag = .{};
    const result: Error!void = blk: {
        const n = name orelse break :blk nullArgument(&d, "name");
        const hp = header orelse break :blk nullArgument(&d, "header");
        if (index_size > 0 and index == null) break :blk nullArgument(&d, "index");
        if (sums_size > 0 and sums == null) break :blk nullArgument(&d, "sums");
        const where = std.mem.sliceTo(n, 0);
        const bytes = hp[0..@intCast(header_size)];
        format.checkHeaderPrefix(bytes[0..@min(bytes.len, 12)], header_size, where, &d) catch |err| break :blk err;
        const h = format.decodeHeader(bytes, where, &d) catch |err| break :blk err;
        if (record_count != h.record_count) break :blk d.fail(error.InvalidArgument, "zr_index_table: " ++
            "outputs of {d} records for a store of {d}", .{ record_count, h.record_count });
        const count: usize = @intCast(record_count);
        if (count > 0 and (offsets == null or stored_sizes == null or shards == null or checksums == null))
            break :blk nullArgument(&d, "offsets, stored_sizes, shards or checksums");
        const empty: []const u8 = &.{};
        index_table.judge(&h, bytes, where, if (index) |p| p[0..@intCast(index_size)] else empty, if (sums) |p|
            p[0..@intCast(sums_size)]
        else
            empty, .{
            .offsets = if (count > 0) offsets.?[0..count] else &.{},
            .stored_sizes = if (count > 0) stored_sizes.?[0..count] else &.{},
            .shards = if (count > 0) shards.?[0..count] else &.{},
            .checksums = if (count > 0) checksums.?[0..count] else &.{},
        }, &d) catch |err| break :blk err;
    };
    return finish(st, result, &d);
}

// ---- dictionaries ------------------------------------------------------------------------

pub export fn zr_train_dict(
    samples: ?*const anyopaque,
    samples_size: u64,
    sizes: ?[*]const u64,
    count: u64,
    out: ?[*]u8,
    capacity: u64,
    out_size: ?*u64,
    st: ?*Status,
) c_int {
    var d: Diag = .{};
    const result: Error!void = blk: {
        const o = out_size orelse break :blk nullArgument(&d, "out_size");
        o.* = 0;
        o.* = dictionary.train(@ptrCast(samples), samples_size, sizes, count, out, capacity, &d) catch |err|
            break :blk err;
    };
    return finish(st, result, &d);
}

pub export fn zr_dtype_info(code: u8, itemsize: ?*u32) ?[*:0]const u8 {
    const dt = format.dtype(code) orelse return null;
    if (itemsize) |out| out.* = dt.itemsize;
    return dt.name.ptr;
}

pub export fn zr_datetime_unit(code: u8) ?[*:0]const u8 {
    return if (format.unitName(code)) |n| n.ptr else null;
}

pub export fn zr_result_name(code: c_int) ?[*:0]const u8 {
    return abi.resultName(code);
}

pub export fn zr_xxh64(data: ?*const anyopaque, size: u64) u64 {
    if (size == 0) return format.xxh64("");
    const p: [*]const u8 = @ptrCast(data orelse return format.xxh64(""));
    return format.xxh64(p[0..@intCast(size)]);
}

test {
    _ = @import("diag.zig");
    _ = @import("codec.zig");
    _ = @import("zstd_dict.zig");
    _ = @import("dictionary.zig");
    _ = @import("tests_zstd.zig");
    _ = @import("tests_pread.zig");
    _ = @import("tests_readahead.zig");
    _ = @import("tests_index.zig");
    _ = @import("tests_parts.zig");
    _ = @import("sys.zig");
    _ = @import("format.zig");
    _ = @import("parallel.zig");
    _ = @import("writer.zig");
    _ = @import("async_write.zig");
    _ = @import("staging.zig");
    _ = @import("reader.zig");
    _ = @import("reader_open.zig");
    _ = @import("index_parts.zig");
    _ = @import("gather.zig");
    _ = @import("compact.zig");
    _ = @import("compact_fuzz.zig");
    _ = @import("readahead.zig");
    _ = @import("abi.zig");
    _ = @import("tests.zig");
}
