//! The cache folder of compact indexes: one file per index file a reader of this host has
//! validated, which later readers of the same index file map instead of reading and
//! validating the index again (spec §9.5).
//!
//! Invariants:
//! - A cache file is named by the store's header checksum and the index file's device and
//!   inode, and holds the index file's whole identity (size, times of change) and checksums of
//!   its own regions; a file that differs in any of these, or is not complete, is not used, and
//!   the index is validated and built again (and the file replaced).
//! - A file is written under a temporary name in the cache folder and renamed into place
//!   complete, so a reader never maps a file another process is still writing; readers that
//!   mapped a file that is replaced keep their mapping.
//! - Nothing here fails an open: a cache that cannot be read, created or written leaves the
//!   index to be built in memory. Only running out of memory is an error.

const std = @import("std");
const diag_mod = @import("diag.zig");
const sys = @import("sys.zig");
const compact = @import("compact.zig");
const Reader = @import("reader.zig").Reader;

const Diag = diag_mod.Diag;
const Error = diag_mod.Error;
const alloc = std.heap.c_allocator;

/// The path of the cache file of an index file, in a fixed buffer.
pub const Name = struct {
    buf: [sys.path_bytes_max]u8 = undefined,

    /// The path in folder `dir` for the store of header checksum `header_checksum` whose
    /// index file is `id`; null when the path would be too long.
    pub fn init(n: *Name, dir: []const u8, header_checksum: u64, id: sys.FileIdentity) ?[:0]const u8 {
        return std.fmt.bufPrintSentinel(&n.buf, "{s}/{x:0>16}-{x}-{x}-{x}.zrx", .{
            std.mem.trimEnd(u8, dir, "/"), header_checksum, id.dev_major, id.dev_minor, id.ino,
        }, 0) catch null;
    }
};

/// The key fields of the compact index file of `r`'s index file `id` (compact.FileHeader).
pub fn keyOf(r: *const Reader, id: sys.FileIdentity) compact.FileHeader {
    return .{
        .store_header_checksum = r.header.header_checksum,
        .index = id,
        .record_count = r.header.record_count,
        .ndim = if (r.header.kind == .ragged) r.header.ndim else 0,
        .headers_at = 0,
        .headers_len = 0,
        .bits_at = 0,
        .bits_len = 0,
    };
}

/// Maps the cache file at `path` into `r` if it is the intact compact index of `r`'s index
/// file `id`; false (and `r` unchanged) otherwise.
pub fn load(r: *Reader, path: [:0]const u8, id: sys.FileIdentity, d: *Diag) Error!bool {
    const fd = sys.open(path, sys.O_RDONLY | sys.O_NOFOLLOW | sys.O_NONBLOCK | sys.O_CLOEXEC, 0) catch return false;
    defer sys.close(fd);
    const st = sys.fstat(fd) catch return false;
    if (st.kind != .regular) return false;
    var h: compact.FileHeader = undefined;
    if (st.size < @sizeOf(compact.FileHeader)) return false;
    var short = false;
    sys.preadAll(fd, std.mem.asBytes(&h), 0, &short) catch return false;
    if (!compact.headerFits(h, st.size)) return false;
    const key = keyOf(r, id);
    if (h.store_header_checksum != key.store_header_checksum or h.record_count != key.record_count or
        h.ndim != key.ndim or !std.mem.eql(u8, std.mem.asBytes(&h.index), std.mem.asBytes(&key.index))) return false;
    const len = std.math.cast(usize, st.size) orelse return false;
    const map = sys.mmapRead(fd, len) catch return false;
    const view = compact.viewOf(h, map);
    if (!compact.regionsMatch(h, view)) {
        sys.munmap(map);
        return false;
    }
    const words: usize = @intCast((view.blockCount() + 63) / 64);
    const checked = alloc.alloc(u64, words) catch {
        sys.munmap(map);
        return d.noMemory("the bitmap of checked index blocks");
    };
    @memset(checked, 0);
    r.compact_map = map;
    r.compact = view;
    r.blocks_checked = checked;
    r.index_source = .cached;
    return true;
}

/// Where a compact index is built: a temporary file of the cache folder, published by a rename
/// once complete, or an anonymous memory file.
pub const Output = struct {
    fd: sys.Fd = -1,
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
            if (std.fmt.bufPrintSentinel(&o.tmp_buf, "{s}.tmp-{d}-{x}", .{ path, sys.getpid(), sys.randomU64() }, 0)) |tmp| {
                if (sys.open(tmp, sys.O_RDWR | sys.O_CREAT | sys.O_EXCL | sys.O_NOFOLLOW | sys.O_CLOEXEC, 0o644)) |fd| {
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
        o.dropFile();
        o.fd = sys.memfd("zrecord-index") catch blk: {
            o.errno = sys.errno();
            break :blk -1;
        };
    }

    /// Renames the temporary file into place; false for a memory file or a failed rename.
    pub fn publish(o: *Output) bool {
        if (o.tmp_len == 0) return false;
        sys.rename(o.tmpPath(), o.final.?) catch {
            o.dropFile();
            return false;
        };
        o.tmp_len = 0;
        return true;
    }

    fn dropFile(o: *Output) void {
        if (o.tmp_len > 0) sys.unlinkAt(sys.AT_FDCWD, o.tmpPath()) catch {};
        o.tmp_len = 0;
        if (o.fd >= 0) sys.close(o.fd);
        o.fd = -1;
    }

    /// Closes the file (a mapping of it stays valid) and removes an unpublished one.
    pub fn close(o: *Output) void {
        if (o.tmp_len > 0) sys.unlinkAt(sys.AT_FDCWD, o.tmpPath()) catch {};
        o.tmp_len = 0;
        if (o.fd >= 0) sys.close(o.fd);
        o.fd = -1;
    }
};
