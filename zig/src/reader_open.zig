//! Opening a store: the store directory and its files, the header, the shard mappings, the
//! index, and every check of the spec that needs no record data; and the layout check that
//! whole-store verification adds.
//!
//! Invariants:
//! - Open checks every rule of the spec that needs no record data: the header (§3), each
//!   shard's size, the index's size and checksum, and every index entry in isolation (§4), in
//!   the order of spec §9 ([ZR-ERR-003]); by part, the index's checks wait for the gathers of
//!   its blocks (below). After open, every entry a gather can reach has a byte range inside its
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
//!   a (sparse) file claims. Open takes O(header + index) time; by part, O(header), and the
//!   memory it commits is a bit per index block and per sum group.
//! - A store with index parts (spec §4.1) is judged by part unless open is asked to validate
//!   the index (ZR_OPEN_VALIDATE_INDEX) or to judge it whole (ZR_OPEN_WHOLE_INDEX, the mirror
//!   of a remote store), or a cache file holds a validation of it, or its blocks
//!   do not fit the path by part (`index_parts.byPartFits`): open then runs steps 4.1 and 4.2
//!   and nothing else of the index ([ZR-PRT-009]), reserves a compact index that gathers fill
//!   block by block (index_parts.zig), and writes no cache file. The rule "after open, every
//!   entry lies inside its shard" then holds for every entry a gather can reach: gathers judge
//!   their records' blocks before they read them (`Reader.checkIndices`). Otherwise it is judged
//!   whole at open, in the order of [ZR-PRT-010]: index.zri's size (4.1), index.zrs's size
//!   (4.2), every sum group (4.3), every index block (4.4), the whole index's checksum (4.5),
//!   every entry (5), the sums (6). Steps 4.4, 4.5 and 5 share the one pass over index.zri; a
//!   failure of an earlier step is reported over one of a later step found first. A store
//!   without the bit never opens index.zrs ([ZR-PRT-007]).

const std = @import("std");
const assert = std.debug.assert;
const abi = @import("abi.zig");
const diag_mod = @import("diag.zig");
const format = @import("format.zig");
const sys = @import("sys.zig");
const codec = @import("codec.zig");
const zstd_dict = @import("zstd_dict.zig");
const gather = @import("gather.zig");
const compact = @import("compact.zig");
const index_cache = @import("index_cache.zig");
const index_parts = @import("index_parts.zig");
const Reader = @import("reader.zig").Reader;

const Diag = diag_mod.Diag;
const Error = diag_mod.Error;
const alloc = std.heap.c_allocator;

/// index.zri is read through a buffer of about this size (a whole number of entries), for its
/// checksum and its entries.
pub const index_check_chunk_bytes: usize = 1 << 20;

/// How a store is opened (zrecord.h zr_open_opts).
pub const Options = struct {
    /// ZR_OPEN_* flags.
    flags: u32 = 0,
    /// The folder of compact index files shared by the readers of this host; null keeps the
    /// compact index in memory only.
    index_cache: ?[:0]const u8 = null,
    /// Which indexes go to that folder, and its bound.
    index_cache_policy: index_cache.Policy = .{},
    /// What messages call the store once its folder is open (`Reader.path`); null: its path.
    name: ?[]const u8 = null,
};

/// Opens the store at `path_c` and checks every rule that needs no record data.
pub fn open(path_c: [*:0]const u8, opts: Options, d: *Diag) Error!*Reader {
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
    // From here on every message names the store by `shown` (a mirror's URL), its files by
    // their names in it.
    const shown = opts.name orelse path;

    sys.watchForks();
    gather.zr_guard_install();
    const header_bytes = try readHeader(dfd, shown, d);
    var name_buf: [4096 + 16]u8 = undefined;
    const hname = std.fmt.bufPrint(&name_buf, "{s}/header.zrh", .{shown}) catch "header.zrh";
    const h = format.decodeHeader(header_bytes, hname, d) catch |err| {
        alloc.free(header_bytes);
        return err;
    };
    const r = try Reader.create(shown, h, header_bytes, opts.flags, d);
    errdefer r.free();
    // [ZR-COD-002] decodeHeader has verified dict_checksum ([ZR-HDR-013]); a malformed
    // zstd-format dictionary is rejected here, used by a record or not ([ZR-COD-004]).
    if (h.codec == .zstd_dict) {
        // [ZR-COD-010] .. [ZR-COD-012] checked here, by spec section 6.3, so that the
        // message says which rule; libzstd then compiles what passed.
        if (zstd_dict.check(r.dict())) |problem| return d.fail(error.Corrupt, "store '{s}': the " ++
            "{d}-byte zstd-format dictionary in header.zrh is malformed: {s} (ZR-COD-004, {s})", .{
            r.path, h.dict_size, problem.what, problem.rule,
        });
        r.ddict = codec.SharedDict.initDecompress(r.dict()) catch |err| switch (err) {
            error.OutOfMemory => return d.noMemory("the decompression dictionary"),
            else => return d.fail(error.Corrupt, "store '{s}': the {d}-byte dictionary in " ++
                "header.zrh is not a valid zstd dictionary (it has the zstd dictionary magic " ++
                "but malformed entropy tables), so no record can be decoded (ZR-COD-004)", .{ r.path, h.dict_size }),
        };
    }
    try mapShards(r, dfd, d);
    if (r.bypass) try openDirect(r, dfd, d);
    r.adoptIndex(try loadIndex(r, dfd, opts, d));
    r.pread_every_record = r.check_every_read or
        (h.record_count > 0 and h.stored_bytes / h.record_count >= gather.pread_record_bytes_min);
    // Zeroed and committed page by page as records are first verified: open costs nothing
    // per record here, whatever the store's size.
    const words: usize = @intCast((h.record_count + 63) / 64);
    if (words > 0) {
        const map = sys.mmapSparse(std.mem.alignForward(usize, 8 * words, std.heap.page_size_min)) catch
            return d.failOs(error.OutOfMemory, sys.errno(), "cannot reserve the verification bitmap", .{});
        r.verified = @as([*]u64, @ptrCast(map.ptr))[0..words];
    }
    // What gathers rely on from here: one mapping and descriptor per shard, of the size the
    // header gives, the index open for verify, and a compact index of every record (by part,
    // one that gathers fill block by block before they read it).
    assert(r.index_fd != sys.invalid_fd and r.compact.record_count == h.record_count);
    for (0..h.data_shards) |k| assert(r.fds[k] != sys.invalid_fd and r.maps[k].len == h.shard_sizes[k]);
    return r;
}

fn readHeader(dfd: sys.Fd, path: []const u8, d: *Diag) Error![]u8 {
    // [ZR-PUB-004]
    const st = try openRegular(dfd, path, "header.zrh", d) orelse
        return d.failOs(error.NotPublished, sys.ENOENT, "'{s}' has no header.zrh: it is not a published " ++
            "zrecord store (an unfinished or aborted write leaves such a directory) (ZR-PUB-004)", .{path});
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
    try format.checkHeaderPrefix(prefix[0..prefix_len], st.size, hname, d);
    const bytes = alloc.alloc(u8, @intCast(st.size)) catch return d.noMemory("the header");
    errdefer alloc.free(bytes);
    sys.preadAll(hfd, bytes, 0, &short) catch return readError(d, path, "header.zrh", short);
    return bytes;
}

fn mapShards(r: *Reader, dfd: sys.Fd, d: *Diag) Error!void {
    var name_buf: [16]u8 = undefined;
    for (0..r.header.data_shards) |k| {
        assert(r.fds[k] == sys.invalid_fd and r.maps[k].len == 0);
        const name = std.fmt.bufPrintSentinel(&name_buf, "data-{d:0>3}.zrd", .{k}, 0) catch unreachable;
        d.shard = @intCast(k);
        // [ZR-GEN-001]
        const st = try openRegular(dfd, r.path, name, d) orelse
            return d.failOs(error.Corrupt, sys.ENOENT, "store '{s}' is missing its shard file {s} " ++
                "(the header names {d} shards) (ZR-GEN-001)", .{ r.path, name, r.header.data_shards });
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
        sys.fadvise(fd, .random);
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
        const fd = sys.openDirectAt(dfd, name, sys.O_RDONLY | sys.O_NONBLOCK | sys.O_NOFOLLOW) catch {
            const e = sys.errno();
            if (e == sys.EINVAL) return d.failOs(error.Io, e, "cannot bypass the page cache for " ++
                "'{s}/{s}': its file system does not support O_DIRECT reads; open the store " ++
                "without cache bypass", .{ r.path, name });
            return d.failOs(error.Io, e, "cannot open '{s}/{s}' for reads that bypass the page " ++
                "cache", .{ r.path, name });
        };
        r.direct_fds[k] = fd;
        const st = sys.fstat(fd) catch return d.failOs(error.Io, sys.errno(), "cannot stat " ++
            "'{s}/{s}'", .{ r.path, name });
        if (st.kind != .regular or st.size != r.header.shard_sizes[k]) return d.fail(error.Corrupt, "" ++
            "'{s}/{s}' changed while the store was opened", .{ r.path, name });
    }
    d.shard = -1;
}

/// Opens index.zri and makes the compact index: loaded from the cache folder when a trusted
/// file built from this very index file is there and intact (unless `opts` asks for full
/// validation), else built by `buildIndex`, which validates every entry. Indexes of fewer
/// records than the policy's minimum never use the folder.
fn loadIndex(r: *Reader, dfd: sys.Fd, opts: Options, d: *Diag) Error!index_cache.Loaded {
    assert(r.index_fd == sys.invalid_fd and r.compact_map.len == 0);
    const st = try openRegular(dfd, r.path, "index.zri", d) orelse
        return d.failOs(error.Corrupt, sys.ENOENT, "store '{s}' is missing its index.zri (ZR-GEN-001)", .{r.path});
    // Kept open for verify, which reads the whole checksums; releaseFiles closes it, on failure too.
    r.index_fd = st.fd;
    // [ZR-HDR-011] The size is checked before anything is read or allocated from it.
    if (st.size != r.header.index_size) return d.fail(error.Corrupt, "'{s}/index.zri' has " ++
        "{d} bytes, but the header's index_size says {d} (ZR-HDR-011)", .{ r.path, st.size, r.header.index_size });
    _ = std.math.cast(usize, st.size) orelse return d.fail(error.LimitExceeded, "" ++
        "'{s}/index.zri' is too large for this platform", .{r.path});
    const id = sys.fileIdentity(st.fd) catch return d.failOs(error.Io, sys.errno(), "cannot stat " ++
        "'{s}/index.zri'", .{r.path});
    // [ZR-PRT-001] step 4.2, at every open, whether the cache folder holds the index or not.
    if (r.header.hasParts()) {
        const sums = try openRegular(dfd, r.path, "index.zrs", d) orelse return missingSums(r, d);
        try index_parts.openSums(r, sums.fd, sums.size, d);
    }
    var name: index_cache.Name = .{};
    const policy = opts.index_cache_policy;
    const dir = if (r.header.record_count >= policy.records_min) opts.index_cache else null;
    const cache = if (dir) |c| name.init(c, r.header.header_checksum, id, sys.geteuid()) else null;
    if (cache) |c| if (opts.flags & abi.open_validate_index == 0) {
        if (try index_cache.load(r, c, id, d)) |loaded| return loaded;
    };
    // [ZR-PRT-009] By part: nothing more of the index at open; gathers judge the blocks of
    // their records (index_parts.ensureRecord). No cache file is written: it would claim a
    // validation of the whole index. ZR_OPEN_WHOLE_INDEX asks for the whole path instead.
    const whole = abi.open_validate_index | abi.open_whole_index;
    if (opts.flags & whole == 0 and index_parts.byPartFits(&r.header)) {
        const lazy = try index_parts.Lazy.create(&r.header, d);
        r.parts = lazy;
        return .{ .map = lazy.slots.map, .view = lazy.slots.view, .source = .by_part };
    }
    // The store's absolute path goes into a cache file only (for pruning): one readlink.
    var store_path: [sys.path_bytes_max]u8 = undefined;
    const path = if (cache != null) sys.fdPath(dfd, &store_path) orelse "" else "";
    const built = try buildIndex(r, id, cache, path, d);
    if (built.source == .built_cached) index_cache.maybePrune(dir.?, policy, built.map.len);
    return built;
}

/// Builds the compact index from index.zri, validating on the way what open validates
/// ([ZR-ERR-002] steps 4 to 6): the index checksum, every entry in record order, then the sums.
/// One pass: the entries are validated as their bytes stream through the checksum, and the
/// first entry that fails is reported only once the checksum has passed, so a damaged index
/// is reported as one whatever its entries say. With `cache`, the index is built in a
/// temporary file of the cache folder and renamed into place once complete; without one (or
/// when that file cannot be written) in an anonymous memory file. `store_path` is the
/// store's absolute path, which the file records for pruning.
fn buildIndex(
    r: *Reader,
    id: sys.FileIdentity,
    cache: ?[:0]const u8,
    store_path: []const u8,
    d: *Diag,
) Error!index_cache.Loaded {
    var out = index_cache.Output.create(cache);
    defer out.close();
    var attempt: u8 = 0;
    while (true) : (attempt += 1) {
        if (out.fd == sys.invalid_fd) return d.failOs(error.Io, out.errno, "cannot create a memory file for the " ++
            "index of store '{s}'", .{r.path});
        const written = streamIndex(r, id, out.fd, store_path, d) catch |err| switch (err) {
            // The cache folder could not take the file (full, read-only): once more, in memory.
            error.CacheWrite => {
                if (attempt > 0) return d.failOs(error.Io, out.errno, "cannot write the compact index of " ++
                    "store '{s}' to memory", .{r.path});
                out.fallBack();
                continue;
            },
            else => |e| return e,
        };
        // Published before it is mapped: Windows refuses to rename a file that a view maps.
        // The descriptor stays open for the mapping either way. (Nor can Windows replace a
        // cache file that another reader maps: there the index stays in this temporary file,
        // unnamed, `.built`.)
        const published = out.publish();
        const map = sys.mmapRead(out.fd, @intCast(compact.fileBytes(written))) catch {
            const e = sys.errno();
            return d.failOs(if (e == sys.ENOMEM) error.OutOfMemory else error.Io, e, "cannot map the " ++
                "compact index of store '{s}'", .{r.path});
        };
        // Published, the file is the cache folder's, which another program may change in
        // place under this mapping, as under one that `index_cache.load` made.
        const slot = if (published) index_cache.register(r, map) else -1;
        if (slot == -1 and published) {
            // Every zero-filled range taken (thousands of readers): built again in memory.
            sys.munmap(map);
            out.fallBack();
            continue;
        }
        r.index_hashed.store(true, .release);
        return .{
            .map = map,
            .view = compact.viewOf(written, map),
            .source = if (published) .built_cached else .built,
            .tail = if (published) @intCast(compact.tailAt(written)) else 0,
            .slot = slot,
        };
    }
}

const StreamError = Error || error{CacheWrite};

/// streamIndex's one pass over index.zri into `out_fd`; returns the compact file's header.
fn streamIndex(
    r: *Reader,
    id: sys.FileIdentity,
    out_fd: sys.Fd,
    store_path: []const u8,
    d: *Diag,
) StreamError!compact.FileHeader {
    const buf = alloc.alloc(u8, 3 * build_buffer_bytes) catch
        return d.noMemory("the buffers to build the compact index");
    defer alloc.free(buf);
    const path = store_path[0..@min(store_path.len, compact.path_bytes_max)];
    var builder = compact.Builder.init(out_fd, index_cache.keyOf(r, id), path, buf);
    try judgeIndex(r, &builder, d);
    const written = builder.finish() catch return error.CacheWrite;
    assert(written.record_count == r.header.record_count and written.path_len == path.len);
    return written;
}

/// Judges the whole index in the order of [ZR-PRT-010] (steps 4.3 to 6), for the verification
/// of a reader that judged it by part.
pub fn judgeWhole(r: *Reader, d: *Diag) Error!void {
    judgeIndex(r, null, d) catch |err| switch (err) {
        error.CacheWrite => unreachable,
        else => |e| return e,
    };
}

/// The one pass over index.zri of a whole judgement: with index parts every sum group, then
/// every block as its bytes stream by; the index checksum; every entry in record order (each
/// given to `builder`, if any); step 6.
fn judgeIndex(r: *Reader, builder: ?*compact.Builder, d: *Diag) StreamError!void {
    const h = &r.header;
    const es: usize = r.entry_size;
    const chunk_bytes = index_check_chunk_bytes / es * es;
    // The header validated index_size = record_count * entry_size ([ZR-HDR-011]), so chunks of
    // whole entries end exactly at the end of the index.
    assert(es > 0 and chunk_bytes > 0 and h.index_size == h.record_count * es);
    const buf = alloc.alloc(u8, chunk_bytes) catch return d.noMemory("a buffer to judge the index");
    defer alloc.free(buf);
    const sizes: format.EntrySizes = .of(h);
    var hasher = format.XxHash64.init(0);
    // [ZR-PRT-010] Every sum group before any block, every block before the whole index.
    var sums_buf: [index_parts.sums_buffer_count]u64 = undefined;
    if (h.hasParts()) try index_parts.checkGroups(r, &sums_buf, d);
    var blocks = index_parts.BlockHasher.init(r, &sums_buf);
    var shard_sums: [format.data_shards_max]u64 = @splat(0);
    var logical_sum: u64 = 0;
    var failed: ?Error = null;
    var rec: u64 = 0;
    var off: u64 = 0;
    while (off < h.index_size) {
        const chunk = buf[0..@intCast(@min(chunk_bytes, h.index_size - off))];
        var short = false;
        sys.preadAll(r.index_fd, chunk, off, &short) catch return readError(d, r.path, "index.zri", short);
        hasher.update(chunk);
        if (h.hasParts()) try blocks.update(chunk, d);
        off += chunk.len;
        if (failed != null) continue;
        var at: usize = 0;
        while (at < chunk.len) : ({
            at += es;
            rec += 1;
        }) {
            const bytes = chunk[at..][0..es];
            const logical = format.validateEntry(h, sizes, bytes, rec, r.path, d) catch |err| {
                failed = err;
                break;
            };
            const p = compact.pendingOf(h, bytes);
            // Saturating sums: a crafted index cannot wrap them around to the expected value.
            shard_sums[p.shard] +|= p.stored_size;
            logical_sum +|= logical;
            if (builder) |bd| bd.add(p) catch return error.CacheWrite;
        }
    }
    if (h.hasParts()) try blocks.finish(d);
    // [ZR-HDR-011] The checksum first: entries of a damaged index say nothing.
    if (hasher.final() != h.index_checksum) {
        d.record = -1;
        d.shard = -1;
        return indexChecksumError(r, d);
    }
    if (failed) |err| return err;
    assert(off == h.index_size and rec == h.record_count);
    try checkSums(r, &shard_sums, logical_sum, d);
}

fn missingSums(r: *const Reader, d: *Diag) Error {
    return d.failOs(error.Corrupt, sys.ENOENT, "store '{s}' has index parts (required_features bit 0) " ++
        "but no index.zrs (ZR-GEN-001, ZR-PRT-001)", .{r.path});
}

/// What the builder of a compact index writes at a time, per stream.
const build_buffer_bytes: usize = 1 << 20;

/// [ZR-ERR-002] step 6: [ZR-DAT-001] for each shard in shard order, then [ZR-HDR-015].
fn checkSums(r: *const Reader, shard_sums: *const [format.data_shards_max]u64, logical_sum: u64, d: *Diag) Error!void {
    return checkSumsOf(&r.header, r.path, shard_sums, logical_sum, d);
}

/// Step 6 for the store named `name` with header `h`: the records' stored sizes add up to
/// each shard's size, and their logical sizes to logical_bytes.
pub fn checkSumsOf(
    h: *const format.Header,
    name: []const u8,
    shard_sums: *const [format.data_shards_max]u64,
    logical_sum: u64,
    d: *Diag,
) Error!void {
    for (0..h.data_shards) |k| {
        if (shard_sums[k] != h.shard_sizes[k]) {
            d.shard = @intCast(k);
            return d.fail(error.Corrupt, "store '{s}': the records of data-{d:0>3}.zrd add up to " ++
                "{d} stored bytes, but the file has {d}; a shard holds only record bytes " ++
                "(ZR-DAT-001)", .{ name, k, shard_sums[k], h.shard_sizes[k] });
        }
    }
    if (logical_sum != h.logical_bytes) return d.fail(error.Corrupt, "store '{s}': the " ++
        "records add up to {d} logical bytes, but the header's logical_bytes says {d}", .{
        name, logical_sum, h.logical_bytes,
    });
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
        const e = try r.place(i, d);
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
        const e = try r.place(i, d);
        if (e.shard == k and e.stored_size > 0) count += 1;
    }
    const placed = alloc.alloc(Placed, count) catch return d.noMemory("the sorted record ranges of a shard for verify");
    defer alloc.free(placed);
    var n: usize = 0;
    i = 0;
    while (i < r.header.record_count) : (i += 1) {
        const e = try r.place(i, d);
        if (e.shard != k or e.stored_size == 0) continue;
        if (n == count) return r.placeLost(i, d); // changed since the count
        placed[n] = .{ .offset = e.offset, .rec = i };
        n += 1;
    }
    std.sort.pdq(Placed, placed[0..n], {}, placedBefore);
    var covered: u64 = 0;
    // The record whose range reaches `covered`.
    var reaching: u64 = 0;
    var gap: ?Span = null;
    var overlap: ?Overlap = null;
    for (placed[0..n]) |p| {
        const end = p.offset +| r.location(p.rec).stored_size;
        if (p.offset > covered) {
            if (gap == null) gap = .{ .begin = covered, .end = p.offset };
        } else if (p.offset < covered and overlap == null) {
            overlap = .{
                .span = .{ .begin = p.offset, .end = @min(covered, end) },
                .first = reaching,
                .second = p.rec,
            };
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
    return d.fail(error.Corrupt, head ++ "bytes [{d}, {d}) belong to no record" ++ tail, .{
        r.path, k, g.begin, g.end,
    });
}

/// Checks index.zri against the header's index checksum ([ZR-HDR-011]), for a verification
/// of a reader whose compact index came from the cache folder: its open did not read the file.
/// With index parts, every sum group and every index block first ([ZR-PRT-010], steps 4.3 to
/// 4.5).
pub fn checkIndexChecksum(r: *const Reader, d: *Diag) Error!void {
    const buf = alloc.alloc(u8, index_check_chunk_bytes) catch return d.noMemory("a buffer to check the index");
    defer alloc.free(buf);
    var sums_buf: [index_parts.sums_buffer_count]u64 = undefined;
    if (r.header.hasParts()) try index_parts.checkGroups(r, &sums_buf, d);
    var blocks = index_parts.BlockHasher.init(r, &sums_buf);
    var hasher = format.XxHash64.init(0);
    var off: u64 = 0;
    while (off < r.header.index_size) {
        const chunk = buf[0..@intCast(@min(buf.len, r.header.index_size - off))];
        var short = false;
        sys.preadAll(r.index_fd, chunk, off, &short) catch return readError(d, r.path, "index.zri", short);
        hasher.update(chunk);
        if (r.header.hasParts()) try blocks.update(chunk, d);
        off += chunk.len;
    }
    if (r.header.hasParts()) try blocks.finish(d);
    if (hasher.final() != r.header.index_checksum) return indexChecksumError(r, d);
}

fn indexChecksumError(r: *const Reader, d: *Diag) Error {
    return indexChecksumErrorOf(&r.header, r.path, d);
}

/// The error of an index.zri of the store named `name` that does not match header `h`.
pub fn indexChecksumErrorOf(h: *const format.Header, name: []const u8, d: *Diag) Error {
    return d.fail(error.ChecksumMismatch, "'{s}/index.zri' does not match the header's " ++
        "index_checksum 0x{x:0>16} (ZR-HDR-011)", .{ name, h.index_checksum });
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
        if (e == sys.ENXIO) {
            return d.fail(error.Corrupt, "'{s}/{s}' is not a regular file (ZR-GEN-004)", .{ path, name });
        }
        return d.failOs(error.Io, e, "cannot open '{s}/{s}'", .{ path, name });
    };
    errdefer sys.close(fd);
    const st = sys.fstat(fd) catch return d.failOs(error.Io, sys.errno(), "cannot stat " ++
        "'{s}/{s}'", .{ path, name });
    if (st.kind != .regular) {
        return d.fail(error.Corrupt, "'{s}/{s}' is not a regular file (ZR-GEN-004)", .{ path, name });
    }
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
    // Windows: no FIFOs.
    if (comptime @import("builtin").os.tag == .windows) return error.SkipZigTest;
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
    // Windows: symbolic links need a privilege.
    if (comptime @import("builtin").os.tag == .windows) return error.SkipZigTest;
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

test "an index larger than the read buffer is read in chunks and checked whole" {
    // [R1] item 8: open used to allocate what index.zri claimed before its checksum said
    // anything. An index above index_check_chunk_bytes is streamed through that buffer; a
    // valid one opens and reads, a byte changed in its last chunk fails open with the
    // index's checksum, though that byte also breaks its entry's reserved-bytes rule.
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
    try std.testing.expect(r.header.index_size > index_check_chunk_bytes);
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
    // The entries are rewritten in index.zri, resealed, and the store opened again each time:
    // open accepts them (each lies inside the shard, and the sizes add up).
    const t = @import("testing.zig");
    const root = @import("root.zig");
    var td: t.TempDir = .{};
    try td.init();
    var data: [4 * 8]u8 = undefined;
    for (&data, 0..) |*b, i| b.* = t.pattern(i);
    try t.writeDense(&td, "s", 0, "", 1, 8, &data, &.{4});
    var d: Diag = .{};
    var r = try t.openOk(&td, "s");
    try checkLayout(r, &d);
    root.zr_reader_free(r);
    const es = format.index_entry_fixed_bytes;
    var off: [8]u8 = undefined;
    // Records 1 and 2 swap places: out of record order, still exact.
    for ([_][2]u64{ .{ 1, 16 }, .{ 2, 8 } }) |move| {
        std.mem.writeInt(u64, &off, move[1], .little);
        try t.patchFile(&td, "s/index.zri", move[0] * es, &off);
    }
    try t.resealIndex(&td, "s");
    r = try t.openOk(&td, "s");
    try checkLayout(r, &d);
    root.zr_reader_free(r);
    // Record 3 moves onto record 0's second half: [4, 12) twice-covered, [24, 32) uncovered.
    std.mem.writeInt(u64, &off, 4, .little);
    try t.patchFile(&td, "s/index.zri", 3 * es, &off);
    try t.resealIndex(&td, "s");
    r = try t.openOk(&td, "s");
    try std.testing.expectError(error.Corrupt, checkLayout(r, &d));
    try t.expectContains(d.text(), "data-000.zrd");
    try t.expectContains(d.text(), "bytes [24, 32) belong to no record");
    try t.expectContains(d.text(), "bytes [4, 8) to both record 0 and record 3");
    try std.testing.expectEqual(@as(i32, 0), d.shard);
    root.zr_reader_free(r);
    td.removeStore("s", 1);
    try td.deinitExpectEmpty();
}
