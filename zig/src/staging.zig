//! The publish protocol (spec §7): a store, or a directory tree that a tool builds on top of
//! zrecord, is written inside a temporary sibling directory and published by one atomic rename.
//!
//! Invariants:
//! - The temporary directory `<parent>/.<name>.zr-tmp-<16 hex>` is created only once its lock
//!   file `<parent>/.<name>.zr-tmp-<16 hex>.lock` exists and this process holds an exclusive
//!   flock(2) on it ([ZR-PUB-006]), taken while the file still lies under that name (another
//!   writer's reap can take a lock file in the instant between its create and its flock; the
//!   creator then starts again under a fresh name, `lockNew`). The lock is held until the
//!   directory has been renamed to the store's path or removed; only then is the lock file
//!   unlinked and closed.
//! - A temporary is stale exactly when its lock can be taken. A flock belongs to an open file
//!   description and is released by the kernel when the last process holding it dies, in any
//!   PID namespace and on NFS (where the client maps it onto byte-range locks), so neither a
//!   writer in another container nor a reused process id can make a live temporary look
//!   stale. A temporary without a lock file (another tool's, or a release before the lock) is
//!   never removed, and no name is ever parsed for numbers.
//! - Removal never follows symbolic links: directories are opened with O_NOFOLLOW relative to
//!   their parent's descriptor, and a link is removed as the link itself.
//! - Nothing is created inside a published store (a directory holding `header.zrh`): such a
//!   path is refused before any directory is made ([ZR-PUB-005]).

const std = @import("std");
const assert = std.debug.assert;
const diag_mod = @import("diag.zig");
const sys = @import("sys.zig");

const Diag = diag_mod.Diag;
const Error = diag_mod.Error;
const Fd = sys.Fd;
const alloc = std.heap.c_allocator;

/// What a temporary's name holds after `.<name>`.
const tmp_marker = ".zr-tmp-";
const lock_suffix = ".lock";
/// Directory levels `removeTree` descends; a deeper tree is left partly in place rather than
/// risking the stack on a hostile tree (the converter's trees are three levels deep).
const remove_depth_max: u32 = 32;
/// Parent directories `makeParents` creates or checks for one path.
const parents_depth_max: usize = 256;
/// Fresh lock files `createLocked` makes after others' reaps took the previous ones (each time
/// a reap has to fall into the instant between a create and its lock, so a few suffice).
const lock_taken_retries_max: usize = 64;

pub const Staging = struct {
    /// The store's path, its parent directory and final component, as given.
    path: [:0]const u8 = "",
    parent: [:0]const u8 = "",
    name: []const u8 = "",
    tmp_path: [:0]const u8 = "",
    lock_path: [:0]const u8 = "",
    /// The temporary directory, open for the owner to create its files relative to it.
    tmp_fd: Fd = sys.invalid_fd,
    lock_fd: Fd = sys.invalid_fd,

    /// Checks `path` (new, not inside a published store), creates its missing parent
    /// directories, removes stale temporaries of the same name and creates a locked temporary
    /// directory for it.
    pub fn create(path: []const u8, d: *Diag) Error!Staging {
        if (path.len == 0) return d.fail(error.InvalidArgument, "the store path is empty; a " ++
            "path to a directory that does not exist yet is required", .{});
        const parts = splitPath(path) orelse return d.fail(error.InvalidArgument, "store path " ++
            "'{s}' has no final name component; a path like 'dir/name' is required", .{path});
        var s: Staging = .{};
        errdefer s.deinit();
        s.path = alloc.dupeSentinel(u8, path, 0) catch return d.noMemory("the store path");
        s.parent = alloc.dupeSentinel(u8, parts.parent, 0) catch return d.noMemory("the store path");
        s.name = s.path[parts.name_start..][0..parts.name.len];
        try refuseInsideStore(s.parent, s.path, d);
        try makeParents(s.parent, s.path, d);
        if (sys.exists(s.path)) |present| {
            if (present) return d.fail(error.Exists, "store path '{s}' already exists; zrecord " ++
                "never replaces anything (ZR-PUB-003)", .{s.path});
        } else |_| {
            const e = sys.errno();
            if (e == sys.ENOTDIR) return d.failOs(error.NotFound, e, "a parent of store path " ++
                "'{s}' is not a directory", .{s.path});
            return d.failOs(error.Io, e, "cannot check whether store path '{s}' exists", .{s.path});
        }
        reapStale(s.parent, s.name);
        try s.createLocked(d);
        // A staging that `create` returns holds its lock and its open temporary directory,
        // named after the store; `publish` or `abort` releases them.
        assert(s.lock_fd != sys.invalid_fd and s.tmp_fd != sys.invalid_fd);
        assert(std.mem.endsWith(u8, s.lock_path, lock_suffix) and std.mem.startsWith(u8, s.lock_path, s.tmp_path));
        assert(std.mem.indexOf(u8, std.fs.path.basename(s.tmp_path), tmp_marker) != null);
        return s;
    }

    fn createLocked(s: *Staging, d: *Diag) Error!void {
        assert(s.lock_fd == sys.invalid_fd and s.tmp_fd == sys.invalid_fd and s.tmp_path.len == 0);
        var attempt: usize = 0;
        var taken: usize = 0;
        while (true) : (attempt += 1) {
            const tmp = std.fmt.allocPrintSentinel(alloc, "{s}/.{s}" ++ tmp_marker ++ "{x:0>16}", .{
                s.parent, s.name, sys.randomU64(),
            }, 0) catch return d.noMemory("the temporary path");
            const lock = std.fmt.allocPrintSentinel(alloc, "{s}" ++ lock_suffix, .{tmp}, 0) catch {
                alloc.free(tmp);
                return d.noMemory("the temporary path");
            };
            const fd = sys.open(lock, sys.O_RDWR | sys.O_CREAT | sys.O_EXCL | sys.O_NOFOLLOW, 0o666) catch {
                const e = sys.errno();
                alloc.free(tmp);
                alloc.free(lock);
                // A random name collision is retried; any other failure is final.
                if (e == sys.EEXIST and attempt < 8) continue;
                return tempError(d, e, s.path, s.parent);
            };
            s.tmp_path = tmp;
            s.lock_path = lock;
            s.lock_fd = fd;
            const outcome = lockNew(fd, lock);
            if (outcome == .locked) break;
            if (outcome == .taken and taken < lock_taken_retries_max) {
                // Another writer's reap took this file in the instant before its lock and
                // unlinks it (or already has): start again under a fresh name. The reap
                // removes the file; this writer can no longer tell that the name is its own.
                taken += 1;
                sys.close(fd);
                alloc.free(tmp);
                alloc.free(lock);
                s.tmp_path = "";
                s.lock_path = "";
                s.lock_fd = sys.invalid_fd;
                continue;
            }
            // flock itself is unsupported, or the lock was taken again and again: no liveness
            // can be shown, and the write is refused rather than left to be reaped as stale.
            return d.failOs(error.Io, sys.errno(), "cannot lock '{s}', which marks the " ++
                "temporary directory of store '{s}' as in use", .{ s.lock_path, s.path });
        }
        sys.mkdir(s.tmp_path, 0o777) catch return tempError(d, sys.errno(), s.path, s.parent);
        s.tmp_fd = sys.open(s.tmp_path, sys.O_RDONLY | sys.O_DIRECTORY | sys.O_NOFOLLOW, 0) catch {
            const e = sys.errno();
            sys.rmdir(s.tmp_path) catch {};
            return d.failOs(error.Io, e, "cannot open the temporary directory '{s}'", .{s.tmp_path});
        };
    }

    /// Renames the temporary directory to the store's path ([ZR-PUB-003]); with `sync`, the
    /// temporary directory is flushed before and the parent after ([ZR-PUB-002]). The caller
    /// has made every file inside complete (and durable, with `sync`) before. On failure
    /// nothing is removed: the caller aborts.
    pub fn publish(s: *Staging, sync: bool, d: *Diag) Error!void {
        if (sync) try s.syncTmpDir(d);
        try s.rename(sync, d);
    }

    /// Flushes the temporary directory itself (the names of the files in it).
    pub fn syncTmpDir(s: *const Staging, d: *Diag) Error!void {
        sys.fsync(s.tmp_fd) catch return d.failOs(error.Io, sys.errno(), "flushing " ++
            "the temporary directory '{s}' failed", .{s.tmp_path});
    }

    /// The second half of `publish`: the rename, then (with `sync`) the parent's flush. The
    /// caller has made the temporary directory and everything in it durable before.
    pub fn rename(s: *Staging, sync: bool, d: *Diag) Error!void {
        // Only a staging that holds its lock publishes: a reap may remove an unlocked one.
        assert(s.lock_fd != sys.invalid_fd and s.tmp_fd != sys.invalid_fd and s.tmp_path.len > 0);
        sys.renameNoReplace(s.tmp_path, s.path) catch {
            const e = sys.errno();
            if (e == sys.EEXIST or e == sys.ENOTEMPTY) return d.failOs(error.Exists, e, "store " ++
                "path '{s}' appeared while the store was written; zrecord never replaces " ++
                "anything (ZR-PUB-003)", .{s.path});
            if (e == sys.ENOENT or e == sys.ENOTDIR) return d.failOs(error.NotFound, e, "cannot " ++
                "publish '{s}': its parent directory '{s}' is gone", .{ s.path, s.parent });
            return d.failOs(error.Io, e, "renaming '{s}' to '{s}' failed", .{ s.tmp_path, s.path });
        };
        // The directory now lives at the store path: nothing temporary is left but the lock.
        sys.close(s.tmp_fd);
        s.tmp_fd = sys.invalid_fd;
        alloc.free(s.tmp_path);
        s.tmp_path = "";
        s.unlock();
        assert(s.lock_fd == sys.invalid_fd and s.tmp_fd == sys.invalid_fd);
        // The rename is durable once the parent directory is flushed. The store is already
        // published when this fails, so it is reported but nothing is undone.
        if (sync) {
            const pfd = sys.open(s.parent, sys.O_RDONLY | sys.O_DIRECTORY, 0) catch {
                return d.failOs(error.Io, sys.errno(), "store '{s}' was published, but its " ++
                    "parent directory '{s}' could not be opened to flush it", .{ s.path, s.parent });
            };
            defer sys.close(pfd);
            sys.fsync(pfd) catch return d.failOs(error.Io, sys.errno(), "store '{s}' was " ++
                "published, but flushing its parent directory '{s}' failed", .{ s.path, s.parent });
        }
    }

    /// Flushes every file and directory below the temporary directory, for callers that built
    /// a tree of their own in it (the writer flushes its files itself).
    pub fn syncTree(s: *Staging, d: *Diag) Error!void {
        syncDir(s.tmp_fd, 0) catch return d.failOs(error.Io, sys.errno(), "flushing the files " ++
            "below the temporary directory '{s}' failed", .{s.tmp_path});
    }

    /// Removes the temporary directory and everything in it, then the lock. Failures are
    /// ignored: this runs on error paths whose original error matters more, and what remains
    /// is a hidden temporary that the next writer of this name removes.
    pub fn abort(s: *Staging) void {
        if (s.tmp_path.len > 0) {
            if (s.tmp_fd != sys.invalid_fd) sys.close(s.tmp_fd);
            s.tmp_fd = sys.invalid_fd;
            const parent_fd = sys.open(s.parent, sys.O_RDONLY | sys.O_DIRECTORY, 0) catch sys.invalid_fd;
            if (parent_fd != sys.invalid_fd) {
                const base = std.fs.path.basename(s.tmp_path);
                var buf: [256]u8 = undefined;
                if (base.len < buf.len) {
                    @memcpy(buf[0..base.len], base);
                    buf[base.len] = 0;
                    removeTree(parent_fd, buf[0..base.len :0], 0);
                }
                sys.close(parent_fd);
            }
            alloc.free(s.tmp_path);
            s.tmp_path = "";
        }
        s.unlock();
        assert(s.tmp_fd == sys.invalid_fd and s.lock_fd == sys.invalid_fd and s.tmp_path.len == 0);
    }

    fn unlock(s: *Staging) void {
        if (s.lock_fd == sys.invalid_fd) return;
        sys.unlinkAt(sys.AT_FDCWD, s.lock_path) catch {};
        sys.close(s.lock_fd);
        s.lock_fd = sys.invalid_fd;
    }

    /// Frees the paths; `abort` or `publish` came first.
    pub fn deinit(s: *Staging) void {
        if (s.tmp_fd != sys.invalid_fd or s.lock_fd != sys.invalid_fd) s.abort();
        if (s.path.len > 0) alloc.free(s.path);
        if (s.parent.len > 0) alloc.free(s.parent);
        if (s.tmp_path.len > 0) alloc.free(s.tmp_path);
        if (s.lock_path.len > 0) alloc.free(s.lock_path);
        s.* = .{};
    }
};

const LockOutcome = enum { locked, taken, failed };

/// Takes the lock of the lock file just created as `lock` and open as `fd`, and checks that
/// `lock` still names that file: `.locked` when both hold, `.taken` when another process took
/// the file first, `.failed` (errno set) when flock or a check failed otherwise.
///
/// A lock file exists unlocked for an instant between its O_EXCL create and its flock. A
/// writer reaping stale temporaries in the same directory (`reapOne`) may open it then, find
/// its lock free and its temporary absent, as for a lock left by a writer killed after its
/// rename, and unlink it. Its creator then either finds the lock held (the reap holds it
/// until its unlink is done) or takes it after the reap closed it, on a file no longer in the
/// directory, which no later writer could see as alive. Both show here, and the creator starts
/// again under a fresh name. Once this returns `.locked` the file is safe: a reap removes
/// only what it has locked itself. (Making the reap leave young lock files instead would need
/// a clock and a guess at how long an instant is.)
fn lockNew(fd: Fd, lock: [:0]const u8) LockOutcome {
    sys.flock(fd, sys.LOCK_EX | sys.LOCK_NB) catch {
        return if (sys.errno() == sys.EWOULDBLOCK) .taken else .failed;
    };
    const mine = sys.fileIdentity(fd) catch return .failed;
    const named = sys.open(lock, sys.O_RDONLY | sys.O_NOFOLLOW | sys.O_NONBLOCK, 0) catch {
        return if (sys.errno() == sys.ENOENT) .taken else .failed;
    };
    defer sys.close(named);
    const now = sys.fileIdentity(named) catch return .failed;
    assert(named != fd);
    return if (sys.sameFile(now, mine)) .locked else .taken;
}

fn tempError(d: *Diag, e: i32, path: []const u8, parent: []const u8) Error {
    if (e == sys.ENOENT or e == sys.ENOTDIR) return d.failOs(error.NotFound, e, "the parent " ++
        "directory '{s}' of store path '{s}' does not exist", .{ parent, path });
    return d.failOs(error.Io, e, "cannot create the temporary directory for store '{s}' in " ++
        "'{s}'", .{ path, parent });
}

const PathParts = struct { parent: []const u8, name: []const u8, name_start: usize };

/// Splits a path into its parent directory and final component, ignoring trailing slashes.
fn splitPath(path: []const u8) ?PathParts {
    var end = path.len;
    while (end > 0 and path[end - 1] == '/') end -= 1;
    if (end == 0) return null;
    const trimmed = path[0..end];
    const slash = std.mem.lastIndexOfScalar(u8, trimmed, '/');
    const start = if (slash) |s| s + 1 else 0;
    const name = trimmed[start..];
    if (std.mem.eql(u8, name, ".") or std.mem.eql(u8, name, "..")) return null;
    const parent: []const u8 = if (slash) |s| (if (s == 0) "/" else trimmed[0..s]) else ".";
    assert(name.len > 0 and std.mem.indexOfScalar(u8, name, '/') == null);
    assert(start + name.len == end and parent.len > 0);
    return .{ .parent = parent, .name = name, .name_start = start };
}

/// Fails with error.Immutable if `parent` (the parent directory of store path `path`) is, or
/// lies inside, a published store. Only existing directories can be stores, so the walk starts
/// at the deepest existing ancestor, resolved through symbolic links, and goes up to "/".
fn refuseInsideStore(parent: [:0]const u8, path: []const u8, d: *Diag) Error!void {
    var buf: [sys.path_bytes_max]u8 = undefined;
    if (parent.len >= buf.len) return;
    @memcpy(buf[0..parent.len], parent);
    var len = parent.len;
    var resolved: [sys.path_bytes_max]u8 = undefined;
    var real: []const u8 = while (true) {
        buf[len] = 0;
        if (sys.realpath(buf[0..len :0], &resolved)) |r| break r else |_| {}
        // "." or "/" that cannot be resolved leaves nothing to check.
        if (len == 1 and (buf[0] == '.' or buf[0] == '/')) return;
        // Drop the last component; a relative path ends at ".", an absolute one at "/".
        if (std.mem.lastIndexOfScalar(u8, buf[0..len], '/')) |slash| {
            len = @max(slash, 1);
        } else {
            buf[0] = '.';
            len = 1;
        }
    };
    while (true) {
        if (sys.isStoreDir(real)) return d.fail(error.Immutable, "store path '{s}' lies inside " ++
            "the published store '{s}'; published stores are immutable (ZR-PUB-005), so " ++
            "choose a path outside it", .{ path, real });
        real = std.fs.path.dirname(real) orelse return;
    }
}

/// mkdir -p for the parent directory of a store path.
fn makeParents(parent: [:0]const u8, path: []const u8, d: *Diag) Error!void {
    if (sys.exists(parent)) |present| {
        if (present) return;
    } else |_| {}
    var buf: [sys.path_bytes_max]u8 = undefined;
    if (parent.len >= buf.len) return d.fail(error.InvalidArgument, "the parent directory of " ++
        "store path '{s}' is longer than {d} bytes", .{ path, buf.len - 1 });
    @memcpy(buf[0..parent.len], parent);
    var depth: usize = 0;
    var i: usize = 1;
    while (i <= parent.len) : (i += 1) {
        if (i < parent.len and buf[i] != '/') continue;
        if (buf[i - 1] == '/') continue;
        depth += 1;
        if (depth > parents_depth_max) break;
        const saved = buf[i];
        buf[i] = 0;
        sys.mkdir(buf[0..i :0], 0o777) catch {
            const e = sys.errno();
            if (e != sys.EEXIST) {
                return d.failOs(if (e == sys.ENOTDIR) error.NotFound else error.Io, e, "cannot create directory " ++
                    "'{s}' for store path '{s}'", .{ buf[0..i], path });
            }
        };
        buf[i] = saved;
    }
}

/// Removes the stale temporaries of store name `name` in directory `parent` (those whose lock
/// can be taken), and the free lock files of any name whose temporary is gone: a writer killed
/// between its rename and the unlink of its lock leaves one beside its published store.
/// Best effort: a failure leaves the entry for a later writer.
pub fn reapStale(parent: [:0]const u8, name: []const u8) void {
    const dfd = sys.open(parent, sys.O_RDONLY | sys.O_DIRECTORY, 0) catch return;
    defer sys.close(dfd);
    var dir = sys.Dir.open(dfd) orelse return;
    defer dir.close();
    while (dir.next()) |entry| {
        if (entry.len < 2 or entry[0] != '.') continue;
        const marker = std.mem.indexOf(u8, entry[1..], tmp_marker) orelse continue;
        // `.<name>.zr-tmp-` exactly: the name is matched whole, never parsed.
        const ours = marker == name.len and std.mem.eql(u8, entry[1..][0..name.len], name);
        if (ours or std.mem.endsWith(u8, entry, lock_suffix)) reapOne(dfd, entry);
    }
}

fn reapOne(dfd: Fd, entry: [:0]const u8) void {
    // A directory entry's name (at most NAME_MAX, 255 bytes) that `reapStale` matched.
    assert(entry.len < 256 and std.mem.indexOf(u8, entry, tmp_marker) != null);
    var buf: [256 + lock_suffix.len]u8 = undefined;
    const is_lock = std.mem.endsWith(u8, entry, lock_suffix);
    const lock_name: [:0]const u8 = if (is_lock) entry else blk: {
        @memcpy(buf[0..entry.len], entry);
        @memcpy(buf[entry.len..][0..lock_suffix.len], lock_suffix);
        buf[entry.len + lock_suffix.len] = 0;
        break :blk buf[0 .. entry.len + lock_suffix.len :0];
    };
    // A missing lock file proves nothing about the writer, so its temporary stays.
    const lfd = sys.openAt(dfd, lock_name, sys.O_RDWR | sys.O_NOFOLLOW | sys.O_NONBLOCK, 0) catch return;
    defer sys.close(lfd);
    sys.flock(lfd, sys.LOCK_EX | sys.LOCK_NB) catch return; // held: the writer is alive
    if (is_lock) {
        // An orphaned lock (its writer died between the rename and the unlink) goes only if
        // its temporary is gone too; otherwise the temporary's own turn removes both.
        var tmp_buf: [256]u8 = undefined;
        const tmp_len = entry.len - lock_suffix.len;
        @memcpy(tmp_buf[0..tmp_len], entry[0..tmp_len]);
        tmp_buf[tmp_len] = 0;
        if (sys.existsAt(dfd, tmp_buf[0..tmp_len :0])) |present| if (present) return else {} else |_| return;
    } else {
        removeTree(dfd, entry, 0);
    }
    sys.unlinkAt(dfd, lock_name) catch {};
}

/// fsync of every regular file and directory below the open directory `dfd` (links are not
/// followed), then of `dfd` itself.
fn syncDir(dfd: Fd, depth: u32) sys.OsError!void {
    if (depth < remove_depth_max) {
        var dir = sys.Dir.open(dfd) orelse return error.Os;
        defer dir.close();
        while (dir.next()) |entry| {
            const fd = sys.openAt(dfd, entry, sys.O_RDONLY | sys.O_NOFOLLOW | sys.O_NONBLOCK, 0) catch |err| {
                if (sys.errno() == sys.ELOOP) continue; // a symbolic link: nothing of ours
                return err;
            };
            defer sys.close(fd);
            const st = try sys.fstat(fd);
            switch (st.kind) {
                .directory => try syncDir(fd, depth + 1),
                .regular => try sys.fsync(fd),
                .other => {},
            }
        }
    }
    try sys.fsync(dfd);
}

/// Removes `name` in directory `dfd`: a directory with everything below it, or anything else
/// as the entry itself (a symbolic link is never followed).
pub fn removeTree(dfd: Fd, name: [:0]const u8, depth: u32) void {
    sys.unlinkAt(dfd, name) catch {
        const e = sys.errno();
        if (e != sys.EISDIR and e != sys.EPERM) return;
        if (depth >= remove_depth_max) return;
        const sub = sys.openAt(dfd, name, sys.O_RDONLY | sys.O_DIRECTORY | sys.O_NOFOLLOW, 0) catch return;
        defer sys.close(sub);
        var dir = sys.Dir.open(sub) orelse return;
        while (dir.next()) |entry| removeTree(sub, entry, depth + 1);
        dir.close();
        sys.rmdirAt(dfd, name) catch {};
    };
}

test "splitPath" {
    const t = std.testing;
    const a = splitPath("a/b/c").?;
    try t.expectEqualStrings("a/b", a.parent);
    try t.expectEqualStrings("c", a.name);
    const b = splitPath("c//").?;
    try t.expectEqualStrings(".", b.parent);
    try t.expectEqualStrings("c", b.name);
    const c = splitPath("/c").?;
    try t.expectEqualStrings("/", c.parent);
    try t.expect(splitPath("/") == null);
    try t.expect(splitPath("a/..") == null);
}

/// A new private directory for a test, its path in `tmpl`.
fn testDir(tmpl: *[256:0]u8) ![:0]const u8 {
    return @import("testing.zig").makeTempDir(tmpl, "zrecord-staging");
}

// [ZR-PUB-006]
test "a temporary is removed exactly when its lock can be taken" {
    const t = std.testing;
    var tmpl: [256:0]u8 = undefined;
    const rootz = try testDir(&tmpl);
    const root: []const u8 = rootz;
    var buf: [256]u8 = undefined;
    const live = try std.fmt.bufPrintSentinel(&buf, "{s}/.s.zr-tmp-4000000000-live", .{root}, 0);
    try sys.mkdir(live, 0o777);
    var lbuf: [256]u8 = undefined;
    const live_lock = try std.fmt.bufPrintSentinel(&lbuf, "{s}.lock", .{live}, 0);
    const held = try sys.open(live_lock, sys.O_RDWR | sys.O_CREAT, 0o666);
    try sys.flock(held, sys.LOCK_EX | sys.LOCK_NB);
    // A stale one with a file inside, a malformed one without a lock, another store's one.
    var sbuf: [256]u8 = undefined;
    const stale = try std.fmt.bufPrintSentinel(&sbuf, "{s}/.s.zr-tmp-99999999999999999999-x", .{root}, 0);
    try sys.mkdir(stale, 0o777);
    var fbuf: [300]u8 = undefined;
    sys.close(try sys.open(
        try std.fmt.bufPrintSentinel(&fbuf, "{s}/data-000.zrd", .{stale}, 0),
        sys.O_WRONLY | sys.O_CREAT,
        0o666,
    ));
    sys.close(try sys.open(
        try std.fmt.bufPrintSentinel(&fbuf, "{s}.lock", .{stale}, 0),
        sys.O_WRONLY | sys.O_CREAT,
        0o666,
    ));
    var nbuf: [256]u8 = undefined;
    const unlocked = try std.fmt.bufPrintSentinel(&nbuf, "{s}/.s.zr-tmp-", .{root}, 0);
    try sys.mkdir(unlocked, 0o777);
    var obuf: [256]u8 = undefined;
    const other = try std.fmt.bufPrintSentinel(&obuf, "{s}/.t.zr-tmp-1", .{root}, 0);
    try sys.mkdir(other, 0o777);
    sys.close(try sys.open(
        try std.fmt.bufPrintSentinel(&fbuf, "{s}.lock", .{other}, 0),
        sys.O_WRONLY | sys.O_CREAT,
        0o666,
    ));

    reapStale(rootz, "s");
    try t.expect(try sys.exists(live));
    try t.expect(try sys.exists(live_lock));
    try t.expect(!(try sys.exists(stale)));
    try t.expect(!(try sys.exists(try std.fmt.bufPrintSentinel(&fbuf, "{s}.lock", .{stale}, 0))));
    try t.expect(try sys.exists(unlocked));
    try t.expect(try sys.exists(other));

    // Once the writer is gone (its descriptor closed), the next writer of the name reaps it.
    sys.close(held);
    reapStale(rootz, "s");
    try t.expect(!(try sys.exists(live)));
    try t.expect(!(try sys.exists(live_lock)));

    try sys.rmdir(unlocked);
    try sys.rmdir(other);
    try sys.unlinkAt(sys.AT_FDCWD, try std.fmt.bufPrintSentinel(&fbuf, "{s}.lock", .{other}, 0));
    try sys.rmdir(rootz);
}

// [ZR-PUB-006]
test "a lock file that a reap took before its creator locked it is not used" {
    // Wine's locks belong to the process, not the handle: a second handle takes a held one.
    if (@import("testing.zig").underWine()) return error.SkipZigTest;
    const t = std.testing;
    var tmpl: [256:0]u8 = undefined;
    const root = try testDir(&tmpl);
    var buf: [256]u8 = undefined;
    const lock = try std.fmt.bufPrintSentinel(&buf, "{s}/.s.zr-tmp-1.lock", .{root}, 0);

    // A reap holds the lock (it opened the file first): the creator must not proceed.
    var fd = try sys.open(lock, sys.O_RDWR | sys.O_CREAT | sys.O_EXCL, 0o666);
    const reap = try sys.open(lock, sys.O_RDWR, 0);
    try sys.flock(reap, sys.LOCK_EX | sys.LOCK_NB);
    try t.expectEqual(LockOutcome.taken, lockNew(fd, lock));
    // The reap unlinked it and let go: the lock is free, but on a file no longer named.
    try sys.unlinkAt(sys.AT_FDCWD, lock);
    sys.close(reap);
    try t.expectEqual(LockOutcome.taken, lockNew(fd, lock));
    sys.close(fd);

    // A file of another inode under the name is not this creator's either.
    fd = try sys.open(lock, sys.O_RDWR | sys.O_CREAT | sys.O_EXCL, 0o666);
    try sys.unlinkAt(sys.AT_FDCWD, lock);
    sys.close(try sys.open(lock, sys.O_RDWR | sys.O_CREAT | sys.O_EXCL, 0o666));
    try t.expectEqual(LockOutcome.taken, lockNew(fd, lock));
    sys.close(fd);
    try sys.unlinkAt(sys.AT_FDCWD, lock);

    // Untouched, it is locked, and a reap now leaves it (and its temporary) alone.
    fd = try sys.open(lock, sys.O_RDWR | sys.O_CREAT | sys.O_EXCL, 0o666);
    try t.expectEqual(LockOutcome.locked, lockNew(fd, lock));
    reapStale(root, "s");
    try t.expect(try sys.exists(lock));
    sys.close(fd);
    try sys.unlinkAt(sys.AT_FDCWD, lock);
    try sys.rmdir(root);
}
