//! The cache folder of compact indexes, and the one owner of a compact index that a reader did
//! not build itself: one file per index file that a reader of this user on this host has
//! validated, which later readers of the same index file map instead of reading and validating
//! the index again (spec §9.5); the checks of what such a file says before a gather or a
//! verification uses it; and the folder's bound.
//!
//! Invariants:
//! - Trust ([ZR-ERR-008]): a cache file is used only when this process's effective user made
//!   it and nobody else can have changed it since: a regular file, opened without following a
//!   symbolic link, owned by the effective user and writable by nobody else (`trusted`). Its
//!   checksums are not secret: anyone who can read a store can seal a file that points each
//!   record at another record's bytes, whose checksum it copies, so its checksums only guard
//!   against accidents, and its owner against other users. Files are created 0600 and named
//!   with the user's id, so users sharing a folder never collide.
//! - A file is never changed in place: it is made read-only for everyone, its owner included
//!   (0400), before it is renamed into place, and a file that anyone can write is not used
//!   (`usable`). A reader maps the file and checks each record's entry once, at its first
//!   read. A program of the user cannot change the file by accident (opening it to write or
//!   truncate fails), only by changing its mode first, or as root, whom no mode stops.
//!   Windows, whose renames cannot replace a read-only file, keeps files writable.
//! - A change made in place under a reader anyway fails its calls, never the process: the
//!   decoding is total (compact.zig), every place is checked against its shard at every read
//!   (`Reader.place`), a truncation's lost pages read as zeros and fail every later call
//!   (sigbus_guard.c's zero-filled ranges; the file's tail page tells a cut inside a page:
//!   `Reader.intact`), and a Ragged record must fill the output slot its caller sized from
//!   `shapes()` (`Reader.gatherRagged`), also when the file changed between the two calls
//!   or within the gather. What it cannot tell: a place changed to another place inside the
//!   store (or a raw shape to another of the same size) after the record's checksum passed,
//!   which reads wrong, as it would if the shard's own bytes were changed in place (a
//!   published store's files never change: [ZR-PUB-005]); a compressed record's shape in
//!   `shapes()` (its gather fails).
//! - A cache file is named by the store's header checksum, the index file's device and inode
//!   and the user, and holds the whole identity (size, times of change) of the index file and,
//!   in a store with index parts, of index.zrs (spec §9.5), and
//!   checksums of its own regions; a file that differs in any of these, or is not complete, is
//!   not used, and the index is validated and built again (and the file replaced).
//! - What a loaded file says is checked against the store before a record it describes is
//!   read ([ZR-ERR-007]): `ensureRecord` for each record a gather reads, `ensureBlock` for each
//!   block a verification covers. A file crafted by its own user can fail a call, never send a
//!   read outside a shard.
//! - A file is written under a temporary name in the cache folder and renamed into place
//!   complete, so a reader never maps a file another process is still writing; readers that
//!   mapped a file that is replaced or removed keep their mapping.
//! - The folder is bounded (`maybePrune`): indexes of fewer than `Policy.records_min` records
//!   are never written (validating them at open costs a few milliseconds at most); after a
//!   reader writes a file, the folder is pruned when it was last pruned `prune_interval_s`
//!   ago or more, or when the new file is large against the bound. Pruning removes this user's
//!   files of stores that are gone or changed, of older file versions, and stale temporaries,
//!   then the least recently used beyond the bound (the newest stays). A load refreshes its
//!   file's time of change (at most hourly), so "least recently used" means used, not written.
//!   Pruning costs O(files) at most once per interval, not per open, runs on a detached
//!   thread (the open that found it due returns at once), and never waits for another
//!   process that prunes: the thread holds the stamp's lock until it is done.
//! - Nothing here fails an open: a cache that cannot be read, created or written leaves the
//!   index to be built in memory. Only running out of memory is an error.

const std = @import("std");
const abi = @import("abi.zig");
const diag_mod = @import("diag.zig");
const format = @import("format.zig");
const sys = @import("sys.zig");
const compact = @import("compact.zig");
const reader_mod = @import("reader.zig");

const Reader = reader_mod.Reader;
const IndexSource = reader_mod.IndexSource;
const Diag = diag_mod.Diag;
const Error = diag_mod.Error;
const alloc = std.heap.c_allocator;
const Map = []align(std.heap.page_size_min) const u8;

/// How readers use the cache folder (zrecord.h zr_open_opts; 0 there means the default).
pub const Policy = struct {
    /// Indexes of fewer records are validated at every open and never written to the folder.
    records_min: u64 = records_min_default,
    /// The folder's bound: what pruning keeps of this user's files, in bytes.
    budget_bytes: u64 = budget_bytes_default,
};

/// About 5 ms of validation at a first open (60-80 ns per entry), against a file of at least
/// 320 KiB in the folder.
pub const records_min_default: u64 = abi.index_cache_records_min_default;
pub const budget_bytes_default: u64 = abi.index_cache_bytes_default;
/// Pruning runs at most this often, unless the file just written is at least
/// 1/`prune_large_share` of the bound: a bound is exceeded by at most what readers write
/// within one interval in files smaller than that.
pub const prune_interval_s: i64 = 600;
const prune_large_share: u64 = 16;
/// Temporary files of a reader that died are removed once they are this old.
pub const stale_temp_s: i64 = 24 * 3600;
/// A load refreshes its file's time of change when it is older than this.
const touch_interval_s: i64 = 3600;
const file_suffix = ".zrx";
/// Temporary files are named after their final name plus this and the writer's pid and a
/// random number (`Output.create`), so `temp_marker` finds them.
const temp_infix = ".tmp-";
const temp_marker = file_suffix ++ temp_infix;

/// The path of the cache file of an index file, in a fixed buffer.
pub const Name = struct {
    buf: [sys.path_bytes_max]u8 = undefined,

    /// The path in folder `dir` for the store of header checksum `header_checksum` whose
    /// index file is `id`, for user `uid`; null when the path would be too long.
    pub fn init(n: *Name, dir: []const u8, header_checksum: u64, id: sys.FileIdentity, uid: u32) ?[:0]const u8 {
        return std.fmt.bufPrintSentinel(&n.buf, "{s}/{x:0>16}-{x}-{x}-{x}-{d}" ++ file_suffix, .{
            std.mem.trimEnd(u8, dir, "/"), header_checksum, id.dev_major, id.dev_minor, id.ino, uid,
        }, 0) catch null;
    }
};

/// A reader's compact index: its mapping and view, how it was made, and, for one loaded from
/// a cache file, one bit per block whose records have all been checked against the store
/// (empty for an index the reader built, whose every entry it validated).
pub const Loaded = struct {
    map: Map,
    view: compact.View,
    source: IndexSource,
    blocks_checked: []u64 = &.{},
    /// Of a cache file: where its tail page starts in `map` (compact.tailAt); 0 otherwise.
    tail: usize = 0,
    /// Of a cache file (loaded, or built and published): its slot among the zero-filled ranges
    /// (`register`), or -2 where there are none; -1 otherwise.
    slot: c_int = -1,
};

/// [ZR-ERR-008] Whether a cache file of status `st` can only have been made by this user.
pub fn trusted(st: sys.FileStat) bool {
    return st.kind == .regular and st.uid == sys.geteuid() and st.perm & 0o022 == 0;
}

/// Whether a reader may map the cache file of status `st`: `trusted`, and writable by nobody,
/// so that no program changes it in place by accident under the mapping (module invariants).
pub fn usable(st: sys.FileStat) bool {
    return trusted(st) and (!sys.read_only_files or st.perm & 0o222 == 0);
}

/// The key fields of the compact index file of `r`'s index files (compact.FileHeader): `id`
/// of index.zri, and `r.sums_id` of index.zrs in a store with index parts.
pub fn keyOf(r: *const Reader, id: sys.FileIdentity) compact.FileHeader {
    return .{
        .store_header_checksum = r.header.header_checksum,
        .index = id,
        .sums = r.sums_id,
        .record_count = r.header.record_count,
        .ndim = if (r.header.kind == .ragged) r.header.ndim else 0,
        .headers_at = 0,
        .headers_len = 0,
        .bits_at = 0,
        .bits_len = 0,
    };
}

fn keyMatches(h: compact.FileHeader, key: compact.FileHeader) bool {
    return h.store_header_checksum == key.store_header_checksum and h.record_count == key.record_count and
        h.ndim == key.ndim and sys.sameVersion(h.index, key.index) and sys.sameVersion(h.sums, key.sums);
}

/// A mapping whose pages a truncation of its file may take: a SIGBUS in it maps zeros over
/// the page and sets `flag` (sigbus_guard.c). The slot; -1 when the table is full, -2 where
/// no handler is installed (Windows, whose files cannot shrink under a view).
extern fn zr_guard_zero_register(base: [*]const u8, len: usize, flag: *volatile c_int) c_int;
pub extern fn zr_guard_zero_unregister(slot: c_int) void;

/// Registers `map`, a mapping of a file of the cache folder, as a zero-filled range whose
/// faults set `r.compact_lost` (written by the signal handler only): its slot (as
/// zr_guard_zero_register's).
pub fn register(r: *const Reader, map: Map) c_int {
    return zr_guard_zero_register(map.ptr, map.len, @constCast(&r.compact_lost));
}

/// The compact index in the cache file at `path`, if that file is trusted and is the intact
/// compact index of `r`'s index file `id`; null otherwise. The mapping is a zero-filled range
/// of `r`'s (`Reader.compact_lost`) from the moment it exists: the file may be truncated
/// while its regions are hashed here, as later; a file truncated by then is not used.
pub fn load(r: *const Reader, path: [:0]const u8, id: sys.FileIdentity, d: *Diag) Error!?Loaded {
    const fd = sys.open(path, sys.O_RDONLY | sys.O_NOFOLLOW | sys.O_NONBLOCK | sys.O_CLOEXEC, 0) catch return null;
    defer sys.close(fd);
    const st = sys.fstat(fd) catch return null;
    if (!usable(st) or st.size < @sizeOf(compact.FileHeader)) return null;
    var h: compact.FileHeader = undefined;
    var short = false;
    sys.preadAll(fd, std.mem.asBytes(&h), 0, &short) catch return null;
    if (!compact.headerFits(h, st.size) or !keyMatches(h, keyOf(r, id))) return null;
    // A tail of smaller pages than this host's would share its page with decoded bytes.
    if (h.tail_len < std.heap.pageSize()) return null;
    const len = std.math.cast(usize, st.size) orelse return null;
    const map = sys.mmapRead(fd, len) catch return null;
    const slot = register(r, map);
    const lost: *volatile c_int = @constCast(&r.compact_lost);
    // Every slot taken (thousands of readers): the index is built in this reader's memory.
    if (slot == -1) {
        sys.munmap(map);
        return null;
    }
    const view = compact.viewOf(h, map);
    if (!compact.regionsMatch(h, view) or lost.* != 0) {
        zr_guard_zero_unregister(slot);
        sys.munmap(map);
        lost.* = 0;
        return null;
    }
    const words: usize = @intCast((view.blockCount() + 63) / 64);
    const checked = alloc.alloc(u64, @max(words, 1)) catch {
        zr_guard_zero_unregister(slot);
        sys.munmap(map);
        return d.noMemory("the bitmap of checked index blocks");
    };
    @memset(checked, 0);
    if (sys.nowSeconds() - st.mtime_sec > touch_interval_s) sys.touch(fd) catch {};
    std.debug.assert(view.record_count == r.header.record_count);
    const tail: usize = @intCast(compact.tailAt(h));
    return .{ .map = map, .view = view, .source = .cached, .blocks_checked = checked, .tail = tail, .slot = slot };
}

// ---- checks of a loaded file against the store ([ZR-ERR-007]) ---------------------------

/// Marks block `blk` of a compact index loaded from a cache file as checked, after checking
/// its records against the store the way open checks entries ([ZR-ERR-002] step 5). Verify
/// checks whole blocks; gathers check only the records they read (`ensureRecord`).
pub fn ensureBlock(r: *const Reader, blk: u64, d: *Diag) Error!void {
    std.debug.assert(r.blocks_checked.len > 0);
    std.debug.assert(blk < r.compact.blockCount());
    if (blockChecked(r, blk)) return;
    try checkBlockBounds(r, blk, d);
    var rec = blk * compact.block_records;
    const end = @min(r.header.record_count, rec + compact.block_records);
    while (rec < end) : (rec += 1) try checkEntry(r, rec, d);
    _ = @atomicRmw(u64, &r.blocks_checked[@intCast(blk / 64)], .Or, blockBit(blk), .release);
}

/// `ensureBlock` for one record: its block's header and its own entry, unless the whole block
/// was checked. A gather of random records from a fresh reader touches a new block with
/// almost every record, and checking the block's 64 entries for each made cold gathers 0.7x
/// as fast; the caller skips records whose checksum has passed, which were checked before.
pub fn ensureRecord(r: *const Reader, rec: u64, d: *Diag) Error!void {
    std.debug.assert(r.blocks_checked.len > 0);
    std.debug.assert(rec < r.header.record_count);
    const blk = rec / compact.block_records;
    if (blockChecked(r, blk)) return;
    try checkBlockBounds(r, blk, d);
    try checkEntry(r, rec, d);
}

fn blockBit(blk: u64) u64 {
    return @as(u64, 1) << @intCast(blk % 64);
}

fn blockChecked(r: *const Reader, blk: u64) bool {
    return @atomicLoad(u64, &r.blocks_checked[@intCast(blk / 64)], .acquire) & blockBit(blk) != 0;
}

fn checkBlockBounds(r: *const Reader, blk: u64, d: *Diag) Error!void {
    if (!compact.blockInBounds(&r.compact, blk)) return cacheDamaged(r, blk * compact.block_records, d);
}

/// Checks record `rec`'s place and shape, decoded from a block whose header is in bounds,
/// with the rules open applies to index entries.
fn checkEntry(r: *const Reader, rec: u64, d: *Diag) Error!void {
    const h = &r.header;
    var entry: [format.index_entry_fixed_bytes + 4 * format.ndim_max + 4]u8 = undefined;
    const es: usize = r.entry_size;
    std.debug.assert(es <= entry.len);
    const loc = r.location(rec);
    var shape: [format.ndim_max]u64 = undefined;
    const ndim: usize = if (h.kind == .ragged) h.ndim else 0;
    r.compact.shape(rec, shape[0..ndim]);
    format.encodeEntry(entry[0..es], .{
        .offset = loc.offset,
        .stored_size = loc.stored_size,
        .shard = loc.shard,
        .checksum = 0,
    }, shape[0..ndim]);
    var scratch: Diag = .{};
    _ = format.validateEntry(h, .of(h), entry[0..es], rec, r.path, &scratch) catch return cacheDamaged(r, rec, d);
}

/// The error for a place that `Reader.place` refused at a read: the record's entry passed its
/// first check, so the mapped file changed since.
pub fn placeLost(r: *const Reader, rec: u64, d: *Diag) Error {
    d.record = @intCast(rec);
    if (!r.mapsCacheFile()) return d.fail(error.Corrupt, "store '{s}': the compact index " ++
        "built at open says record {d} lies outside its shard (internal error: please report " ++
        "it)", .{ r.path, rec });
    return d.fail(error.Corrupt, "store '{s}': the compact index mapped from the index cache " ++
        "folder now says record {d} lies outside its shard, or has another size than its shape " ++
        "or its output slot, after it passed its check: the cache file " ++
        "was changed in place under this reader: reopen the store (a changed file is not " ++
        "used again: the index is rebuilt)", .{ r.path, rec });
}

/// The error for a call of a reader whose cache file lost pages under it (Reader.intact).
pub fn mappingLost(r: *const Reader, d: *Diag) Error {
    d.record = -1;
    d.shard = -1;
    return d.fail(error.Corrupt, "store '{s}': the compact index file this reader mapped from " ++
        "the index cache was truncated under it (SIGBUS), so what the call decoded cannot be " ++
        "trusted: reopen the store (a truncated file is not used again: the index is " ++
        "rebuilt)", .{r.path});
}

fn cacheDamaged(r: *const Reader, rec: u64, d: *Diag) Error {
    d.record = @intCast(rec);
    return d.fail(error.Corrupt, "store '{s}': the compact index loaded from the index cache " ++
        "says where record {d} is, and that place is not in the store: the cache file is " ++
        "damaged; open the store with full index validation (or delete the cache folder's " ++
        "files) to rebuild it", .{ r.path, rec });
}

// ---- writing a file ------------------------------------------------------------------------

/// Where a compact index is built: a temporary file of the cache folder, published by a rename
/// once complete, or an anonymous memory file.
pub const Output = struct {
    fd: sys.Fd = sys.invalid_fd,
    /// The errno of the last failure to make a file (memory files included).
    errno: i32 = 0,
    final: ?[:0]const u8,
    tmp_buf: [sys.path_bytes_max + 48]u8 = undefined,
    /// The length of the temporary file's path in `tmp_buf`; 0 for a memory file.
    tmp_len: usize = 0,

    pub fn create(cache: ?[:0]const u8) Output {
        var o: Output = .{ .final = cache };
        if (cache) |path| if (std.fs.path.dirname(path)) |dir| {
            var dir_buf: [sys.path_bytes_max]u8 = undefined;
            if (std.fmt.bufPrintSentinel(&dir_buf, "{s}", .{dir}, 0)) |dir_z| {
                sys.mkdirAll(dir_z, 0o755) catch {};
            } else |_| {}
            if (std.fmt.bufPrintSentinel(
                &o.tmp_buf,
                "{s}" ++ temp_infix ++ "{d}-{x}",
                .{ path, sys.getpid(), sys.randomU64() },
                0,
            )) |tmp| {
                // 0600: no other user can use the file (`trusted`), so none needs to read it.
                if (sys.open(tmp, sys.O_RDWR | sys.O_CREAT | sys.O_EXCL | sys.O_NOFOLLOW | sys.O_CLOEXEC, 0o600)) |fd| {
                    o.fd = fd;
                    o.tmp_len = tmp.len;
                    return o;
                } else |_| {}
            } else |_| {}
        };
        o.fallBack();
        return o;
    }

    fn tmpPath(o: *Output) [:0]const u8 {
        return o.tmp_buf[0..o.tmp_len :0];
    }

    /// Drops the temporary file, if any, for a memory file.
    pub fn fallBack(o: *Output) void {
        o.close();
        o.fd = sys.memfd("zrecord-index") catch blk: {
            o.errno = sys.errno();
            break :blk sys.invalid_fd;
        };
    }

    /// Makes the temporary file read-only and renames it into place; false for a memory
    /// file or a failed change of mode or rename (then the temporary name is removed). The
    /// descriptor stays open either way, for the caller's mapping; `close` closes it.
    pub fn publish(o: *Output) bool {
        if (o.tmp_len == 0) return false;
        std.debug.assert(o.fd != sys.invalid_fd);
        sys.makeReadOnly(o.fd) catch {
            sys.unlinkAt(sys.AT_FDCWD, o.tmpPath()) catch {};
            o.tmp_len = 0;
            return false;
        };
        sys.rename(o.tmpPath(), o.final.?) catch {
            sys.unlinkAt(sys.AT_FDCWD, o.tmpPath()) catch {};
            o.tmp_len = 0;
            return false;
        };
        o.tmp_len = 0;
        return true;
    }

    /// Closes the file (a mapping of it stays valid) and removes an unpublished one.
    pub fn close(o: *Output) void {
        if (o.tmp_len > 0) sys.unlinkAt(sys.AT_FDCWD, o.tmpPath()) catch {};
        o.tmp_len = 0;
        if (o.fd != sys.invalid_fd) sys.close(o.fd);
        o.fd = sys.invalid_fd;
    }
};

// ---- the folder's bound ---------------------------------------------------------------------

/// What one pruning found and did, among this user's files.
pub const PruneStats = extern struct {
    /// Compact index files kept, and their bytes.
    kept: u64 = 0,
    kept_bytes: u64 = 0,
    /// Files removed (stale temporaries included), and their bytes.
    removed: u64 = 0,
    removed_bytes: u64 = 0,
};

comptime {
    format.assertNoPadding(PruneStats);
}

/// After a reader wrote a `written`-byte file into the folder `dir`: prunes it when it is due
/// (module invariants). The folder's stamp file, one per user, holds the time of the last
/// pruning; its lock, never waited for, lets one process prune at a time.
pub fn maybePrune(dir: [:0]const u8, policy: Policy, written: u64) void {
    const dfd = sys.open(dir, sys.O_RDONLY | sys.O_DIRECTORY | sys.O_CLOEXEC, 0) catch return;
    var handed = false;
    defer if (!handed) sys.close(dfd);
    var name_buf: [48]u8 = undefined;
    const uid = sys.geteuid();
    const stamp_name = std.fmt.bufPrintSentinel(&name_buf, ".prune-stamp-{d}", .{uid}, 0) catch unreachable;
    const flags = sys.O_RDWR | sys.O_NOFOLLOW | sys.O_NONBLOCK | sys.O_CLOEXEC;
    var due = written *| prune_large_share >= policy.budget_bytes;
    const stamp = sys.openAt(dfd, stamp_name, flags, 0) catch blk: {
        due = true;
        break :blk sys.openAt(dfd, stamp_name, flags | sys.O_CREAT, 0o600) catch return;
    };
    defer if (!handed) sys.close(stamp);
    const st = sys.fstat(stamp) catch return;
    if (!trusted(st)) return;
    const now = sys.nowSeconds();
    if (!due and now - st.mtime_sec < prune_interval_s) return;
    sys.flock(stamp, sys.LOCK_EX | sys.LOCK_NB) catch return;
    sys.touch(stamp) catch {};
    // The pruning itself, O(files), runs on a thread of its own, so that the open (or the
    // writer's close) that found it due does not wait for it: a folder of 10,000 files costs
    // 0.1-0.2 s, and one full of files of deleted stores seconds of unlinks (measured,
    // docs/benchmarks.md). The thread holds the stamp's lock until it is done; a process that
    // exits first leaves the rest to the next pruning, which is due ten minutes later.
    const job: PruneJob = .{ .dfd = dfd, .stamp = stamp, .budget = policy.budget_bytes, .now = now };
    if (std.Thread.spawn(.{ .stack_size = prune_stack_bytes }, PruneJob.run, .{job})) |thread| {
        thread.detach();
        handed = true;
    } else |_| job.runHere();
}

/// A pruning handed to a thread: the folder and its stamp (locked), closed when it ends.
const PruneJob = struct {
    dfd: sys.Fd,
    stamp: sys.Fd,
    budget: u64,
    now: i64,

    fn run(job: PruneJob) void {
        job.runHere();
        sys.close(job.stamp);
        sys.close(job.dfd);
    }

    fn runHere(job: PruneJob) void {
        _ = prune(job.dfd, job.budget, job.now) catch {};
        // Released explicitly, not by the close: a child forked meanwhile holds a copy of the
        // stamp's descriptor, and with it the lock, for its whole life; pruning would stop for
        // this user until it exits.
        sys.flock(job.stamp, sys.LOCK_UN) catch {};
    }
};

/// The pruning thread's stack: `prune` keeps its lists on the heap and one path on the stack,
/// but glibc refuses stacks that cannot also hold the static thread-local storage (large in
/// test binaries), so this is parallel.zig's workers' size; untouched pages cost nothing.
const prune_stack_bytes: usize = 1 << 20;

const Kept = struct {
    mtime_sec: i64,
    size: u64,
    /// The file judged (`judge`), which is the one removed, if any.
    id: ?sys.FileIdentity,
    name_at: usize,
    name_len: usize,

    fn older(_: void, a: Kept, b: Kept) bool {
        return a.mtime_sec < b.mtime_sec;
    }
};

/// Prunes the cache folder open as `dfd` (module invariants) at time `now` (seconds since the
/// epoch), keeping at most `budget` bytes of this user's current files (and the newest in any
/// case). Files of other users, and names that are not the cache's, are left alone.
pub fn prune(dfd: sys.Fd, budget: u64, now: i64) error{OutOfMemory}!PruneStats {
    var stats: PruneStats = .{};
    var kept: std.ArrayList(Kept) = .empty;
    defer kept.deinit(alloc);
    var names: std.ArrayList(u8) = .empty;
    defer names.deinit(alloc);
    var dir = sys.Dir.open(dfd) orelse return stats;
    defer dir.close();
    while (dir.next()) |name| {
        const st = sys.fstatAt(dfd, name) catch continue;
        if (!trusted(st)) continue;
        const is_temp = std.mem.indexOf(u8, name, temp_marker) != null;
        if (!is_temp and !std.mem.endsWith(u8, name, file_suffix)) continue;
        // A temporary's name is its writer's own, never reused: no other file can take it.
        const judged: Judged = if (is_temp)
            .{ .current = now - st.mtime_sec <= stale_temp_s, .id = null }
        else
            judge(dfd, name, st.size);
        if (!judged.current) {
            if (removeJudged(dfd, name, judged.id)) {
                stats.removed += 1;
                stats.removed_bytes += st.size;
            }
            continue;
        }
        if (is_temp) continue;
        try kept.append(alloc, .{
            .mtime_sec = st.mtime_sec,
            .size = st.size,
            .id = judged.id,
            .name_at = names.items.len,
            .name_len = name.len,
        });
        try names.appendSlice(alloc, name[0 .. name.len + 1]);
    }
    std.mem.sort(Kept, kept.items, {}, Kept.older);
    var total: u64 = 0;
    for (kept.items) |k| total += k.size;
    var dropped: usize = 0;
    // The newest file always stays: it was just written, for a reader that maps it now.
    for (kept.items[0..kept.items.len -| 1]) |k| {
        if (total <= budget) break;
        total -= k.size;
        dropped += 1;
        if (removeJudged(dfd, names.items[k.name_at..][0..k.name_len :0], k.id)) {
            stats.removed += 1;
            stats.removed_bytes += k.size;
        }
    }
    stats.kept = kept.items.len - dropped;
    stats.kept_bytes = total;
    // Within the bound, or down to the newest file alone.
    std.debug.assert(stats.kept_bytes <= budget or stats.kept <= 1);
    return stats;
}

/// What pruning found of one file of the folder: whether it stays, and which file it judged
/// (null where it could not tell, or for a temporary).
const Judged = struct {
    current: bool,
    id: ?sys.FileIdentity,
};

/// Removes the file named `name` if it is still the file that was judged (`id`). A reader
/// writes a cache file by renaming it over the name of the one it replaces, which may be the
/// stale file pruning just judged: without this check the fresh file went in its place (a
/// flaky test found it). A file loaded since it was judged (its time refreshed) stays too.
/// What is left is the time between this check and the unlink, not the whole listing's.
pub fn removeJudged(dfd: sys.Fd, name: [*:0]const u8, id: ?sys.FileIdentity) bool {
    if (id) |judged| {
        const fd = sys.openAt(dfd, name, judge_flags, 0) catch return false;
        const now = sys.fileIdentity(fd);
        sys.close(fd);
        if (now) |same| {
            if (!sys.sameVersion(same, judged)) return false;
        } else |_| return false;
    }
    sys.unlinkAt(dfd, name) catch return false;
    return true;
}

const judge_flags = sys.O_RDONLY | sys.O_NOFOLLOW | sys.O_NONBLOCK | sys.O_CLOEXEC;

/// `isCurrent` of the file named `name`, and the file's identity.
fn judge(dfd: sys.Fd, name: [*:0]const u8, size: u64) Judged {
    const fd = sys.openAt(dfd, name, judge_flags, 0) catch return .{ .current = true, .id = null };
    defer sys.close(fd);
    const id = sys.fileIdentity(fd) catch null;
    return .{ .current = isCurrent(fd, size), .id = id };
}

/// Whether the cache file open as `fd` (`size` bytes) is of this version and was built from
/// the index file its store holds now. A store that cannot be reached for another reason
/// than its absence (a folder it cannot search, a file system not mounted) keeps its file.
fn isCurrent(fd: sys.Fd, size: u64) bool {
    const open_flags = judge_flags;
    var h: compact.FileHeader = undefined;
    var short = false;
    if (size < @sizeOf(compact.FileHeader)) return false;
    sys.preadAll(fd, std.mem.asBytes(&h), 0, &short) catch return !short;
    // A file of a newer version is another release's, which judges it (two releases may share
    // a folder); one of an older version is never read again, and goes.
    if (std.mem.eql(u8, &h.magic, &compact.file_magic) and h.version > compact.file_version) return true;
    if (!compact.headerFits(h, size)) return false;
    var path: [sys.path_bytes_max]u8 = undefined;
    const suffix = "/index.zri";
    const len: usize = @intCast(h.path_len);
    if (len == 0 or len + suffix.len >= path.len) return false;
    sys.preadAll(fd, path[0..len], h.path_at, &short) catch return !short;
    @memcpy(path[len..][0..suffix.len], suffix);
    path[len + suffix.len] = 0;
    const index_fd = sys.open(path[0 .. len + suffix.len :0], open_flags, 0) catch {
        const e = sys.errno();
        return e != sys.ENOENT and e != sys.ENOTDIR;
    };
    defer sys.close(index_fd);
    const id = sys.fileIdentity(index_fd) catch return true;
    return sys.sameVersion(id, h.index);
}
