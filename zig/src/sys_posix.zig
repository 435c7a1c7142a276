//! The half of the OS layer (`sys.zig`) that every POSIX system shares: descriptors, errno,
//! positioned reads and writes, mappings, directories, flock, fork tracking. What differs
//! between Linux and macOS comes from their own halves, through `sys.zig`'s names.
//!
//! Invariants: those of `sys.zig`.

const std = @import("std");
const builtin = @import("builtin");
const sys = @import("sys.zig");
const os = switch (builtin.os.tag) {
    .linux => @import("sys_linux.zig"),
    .macos => @import("sys_macos.zig"),
    else => @compileError("sys_posix.zig is for POSIX systems"),
};

pub const Fd = c_int;
pub const invalid_fd: Fd = -1;
const OsError = sys.OsError;
const IoVec = sys.IoVec;
const FileKind = sys.FileKind;
const AT_FDCWD = sys.AT_FDCWD;
const O_CLOEXEC = sys.O_CLOEXEC;
const EINTR = sys.EINTR;
const EIO = sys.EIO;
const EEXIST = sys.EEXIST;
const ENOENT = sys.ENOENT;
const ENAMETOOLONG = sys.ENAMETOOLONG;
const path_bytes_max = sys.path_bytes_max;

const c = struct {
    extern "c" fn openat(dirfd: c_int, path: [*:0]const u8, flags: c_int, ...) c_int;
    extern "c" fn close(fd: c_int) c_int;
    extern "c" fn pread(fd: c_int, buf: [*]u8, count: usize, offset: i64) isize;
    extern "c" fn pwrite(fd: c_int, buf: [*]const u8, count: usize, offset: i64) isize;
    extern "c" fn pwritev(fd: c_int, iov: [*]const IoVec, iovcnt: c_int, offset: i64) isize;
    extern "c" fn lseek(fd: c_int, offset: i64, whence: c_int) i64;
    extern "c" fn ftruncate(fd: c_int, length: i64) c_int;
    extern "c" fn mmap(addr: ?*anyopaque, len: usize, prot: c_int, flags: c_int, fd: c_int, off: i64) usize;
    extern "c" fn munmap(addr: *anyopaque, len: usize) c_int;
    extern "c" fn madvise(addr: *anyopaque, len: usize, advice: c_int) c_int;
    extern "c" fn mincore(addr: *anyopaque, len: usize, vec: [*]u8) c_int;
    extern "c" fn clock_gettime(clock: c_int, ts: *std.c.timespec) c_int;
    extern "c" fn nanosleep(req: *const std.c.timespec, rem: ?*std.c.timespec) c_int;
    extern "c" fn mkdir(path: [*:0]const u8, mode: c_uint) c_int;
    extern "c" fn rename(old: [*:0]const u8, new: [*:0]const u8) c_int;
    extern "c" fn unlinkat(dirfd: c_int, path: [*:0]const u8, flags: c_int) c_int;
    extern "c" fn rmdir(path: [*:0]const u8) c_int;
    extern "c" fn getpid() c_int;
    extern "c" fn faccessat(dirfd: c_int, path: [*:0]const u8, mode: c_int, flags: c_int) c_int;
    extern "c" fn sched_yield() c_int;
    extern "c" fn flock(fd: c_int, operation: c_int) c_int;
    extern "c" fn dup(fd: c_int) c_int;
    extern "c" fn closedir(dir: *anyopaque) c_int;
    extern "c" fn geteuid() c_uint;
    extern "c" fn futimens(fd: c_int, times: ?*const [2]std.c.timespec) c_int;
    extern "c" fn fchmod(fd: c_int, mode: c_uint) c_int;
};

const PROT_READ: c_int = 1;
const PROT_WRITE: c_int = 2;
const MAP_SHARED: c_int = 1;
const MAP_PRIVATE: c_int = 2;
const CLOCK_REALTIME: c_int = 0;
const SEEK_END: c_int = 2;

/// Largest single read or write Linux performs (0x7ffff000); larger requests are looped.
const io_chunk_bytes_max: usize = 0x7fff_f000;

pub fn errno() i32 {
    return os.errnoLocation().*;
}

pub fn setErrno(value: i32) void {
    os.errnoLocation().* = value;
}

pub fn open(path: [*:0]const u8, flags: c_int, mode: c_uint) OsError!Fd {
    return openAt(AT_FDCWD, path, flags, mode);
}

pub fn openAt(dir: Fd, path: [*:0]const u8, flags: c_int, mode: c_uint) OsError!Fd {
    while (true) {
        const fd = c.openat(dir, path, flags | O_CLOEXEC, mode);
        if (fd >= 0) return fd;
        if (errno() != EINTR) return error.Os;
    }
}

/// Closes a descriptor, keeping the caller's errno: close is used on cleanup paths that must
/// not disturb the errno of the failure being reported.
pub fn close(fd: Fd) void {
    const saved = errno();
    _ = c.close(fd);
    setErrno(saved);
}

/// Reads exactly buf.len bytes at `offset`; returns error.Os with errno EIO (and `short`
/// set) if the file ends first.
pub fn preadAll(fd: Fd, buf: []u8, offset: u64, short: *bool) OsError!void {
    short.* = false;
    var done: usize = 0;
    while (done < buf.len) {
        const want = @min(buf.len - done, io_chunk_bytes_max);
        const n = c.pread(fd, buf[done..].ptr, want, @intCast(offset + done));
        if (n < 0) {
            if (errno() == EINTR) continue;
            return error.Os;
        }
        if (n == 0) {
            short.* = true;
            setErrno(EIO);
            return error.Os;
        }
        done += @intCast(n);
    }
}

/// One pread(2) of up to buf.len bytes at `offset` (EINTR retried): the bytes read, 0 at the
/// end of the file.
pub fn preadSome(fd: Fd, buf: []u8, offset: u64) OsError!usize {
    while (true) {
        const n = c.pread(fd, buf.ptr, @min(buf.len, io_chunk_bytes_max), @intCast(offset));
        if (n >= 0) return @intCast(n);
        if (errno() != EINTR) return error.Os;
    }
}

pub fn pwriteAll(fd: Fd, buf: []const u8, offset: u64) OsError!void {
    var done: usize = 0;
    while (done < buf.len) {
        const want = @min(buf.len - done, io_chunk_bytes_max);
        const n = c.pwrite(fd, buf[done..].ptr, want, @intCast(offset + done));
        if (n < 0) {
            if (errno() == EINTR) continue;
            return error.Os;
        }
        // A zero-byte write of a non-empty buffer cannot make progress; report it as EIO.
        if (n == 0) {
            setErrno(EIO);
            return error.Os;
        }
        done += @intCast(n);
    }
}

/// Writes every byte described by `iov` at `offset`, handling short writes. `iov` is
/// modified: entries are advanced past what was written.
pub fn pwritevAll(fd: Fd, iov: []IoVec, offset: u64) OsError!void {
    var first: usize = 0;
    var pos = offset;
    // Empty entries would make the kernel report 0 for a batch that has nothing to write.
    while (first < iov.len and iov[first].len == 0) first += 1;
    while (first < iov.len) {
        const cnt: c_int = @intCast(@min(iov.len - first, 1024));
        const n = c.pwritev(fd, iov[first..].ptr, cnt, @intCast(pos));
        if (n < 0) {
            if (errno() == EINTR) continue;
            return error.Os;
        }
        if (n == 0) {
            setErrno(EIO);
            return error.Os;
        }
        var left: usize = @intCast(n);
        pos += left;
        while (left > 0) {
            if (iov[first].len <= left) {
                left -= iov[first].len;
                first += 1;
            } else {
                iov[first].base += left;
                iov[first].len -= left;
                left = 0;
            }
        }
        while (first < iov.len and iov[first].len == 0) first += 1;
    }
}

/// The size of an open file, by lseek(SEEK_END).
/// ftruncate(2).
pub fn setFileSize(fd: Fd, len: u64) OsError!void {
    while (c.ftruncate(fd, @intCast(len)) != 0) {
        if (errno() != EINTR) return error.Os;
    }
}

pub fn seekEnd(fd: Fd) OsError!u64 {
    const end = c.lseek(fd, 0, SEEK_END);
    if (end < 0) return error.Os;
    return @intCast(end);
}

/// The effective user id of this process.
pub fn geteuid() u32 {
    return c.geteuid();
}

/// Sets the times of last access and change of contents of an open file to now.
pub fn touch(fd: Fd) OsError!void {
    if (c.futimens(fd, null) != 0) return error.Os;
}

/// Makes an open file read-only for everyone (mode 0400): its owner can still read it, and
/// change it only by changing the mode first. An open descriptor keeps the access it has.
pub fn makeReadOnly(fd: Fd) OsError!void {
    if (c.fchmod(fd, 0o400) != 0) return error.Os;
}

/// Whether `makeReadOnly` leaves a mark that `FileStat.perm` shows.
pub const read_only_files = true;

/// Renames `old` to `new`, replacing what is at `new` (rename(2)).
pub fn rename(old: [*:0]const u8, new: [*:0]const u8) OsError!void {
    if (c.rename(old, new) != 0) return error.Os;
}

/// Creates directory `path` and its missing parents with `mode`; an existing directory is
/// success.
pub fn mkdirAll(path: [:0]const u8, mode: c_uint) OsError!void {
    var buf: [path_bytes_max]u8 = undefined;
    if (path.len >= buf.len) {
        setErrno(ENAMETOOLONG);
        return error.Os;
    }
    @memcpy(buf[0..path.len], path);
    var i: usize = 1;
    while (i <= path.len) : (i += 1) {
        if (i < path.len and path[i] != '/') continue;
        buf[i] = 0;
        if (c.mkdir(@ptrCast(&buf), mode) != 0 and errno() != EEXIST) return error.Os;
        if (i < path.len) buf[i] = '/';
    }
}

/// Maps a whole file read-only and shared, so that concurrent readers share the page cache.
pub fn mmapRead(fd: Fd, len: usize) OsError![]align(std.heap.page_size_min) const u8 {
    const addr = c.mmap(null, len, PROT_READ, MAP_SHARED, fd, 0);
    if (addr == std.math.maxInt(usize)) return error.Os;
    const p: [*]align(std.heap.page_size_min) const u8 = @ptrFromInt(addr);
    return p[0..len];
}

/// Reserves `len` bytes of zeroed, writable private memory that the system commits page by
/// page as they are first written (MAP_NORESERVE): a reservation for the worst case costs
/// only the pages used.
pub fn mmapSparse(len: usize) OsError![]align(std.heap.page_size_min) u8 {
    const addr = c.mmap(null, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | os.MAP_ANONYMOUS | os.MAP_NORESERVE, -1, 0);
    if (addr == std.math.maxInt(usize)) return error.Os;
    const p: [*]align(std.heap.page_size_min) u8 = @ptrFromInt(addr);
    return p[0..len];
}

pub fn munmap(mem: []align(std.heap.page_size_min) const u8) void {
    _ = c.munmap(@ptrCast(@constCast(mem.ptr)), mem.len);
}

/// Advice is only a hint; failure is ignored.
pub fn madvise(mem: []align(std.heap.page_size_min) const u8, advice: c_int) void {
    _ = c.madvise(@ptrCast(@constCast(mem.ptr)), mem.len, advice);
}

/// Whether every page of [base, base + len) is in the page cache, by mincore(2), which asks
/// the kernel and touches none of the bytes (so it cannot fault on a truncated file). `base`
/// must be aligned to the page size (std.heap.pageSize()) and the range must fit in `vec.len`
/// pages. Null when the kernel does not say; errno is kept.
pub fn resident(base: [*]const u8, len: usize, vec: []u8) ?bool {
    if (len == 0) return true;
    const pages = (len + std.heap.pageSize() - 1) / std.heap.pageSize();
    std.debug.assert(pages <= vec.len);
    const saved = errno();
    defer setErrno(saved);
    if (c.mincore(@ptrCast(@constCast(base)), len, vec.ptr) != 0) return null;
    for (vec[0..pages]) |v| {
        if (v & 1 == 0) return false;
    }
    return true;
}

/// Seconds since the epoch (the real-time clock), 0 where it cannot be read.
pub fn nowSeconds() i64 {
    var ts: std.c.timespec = undefined;
    if (c.clock_gettime(CLOCK_REALTIME, &ts) != 0) return 0;
    return ts.sec;
}

/// Nanoseconds on CLOCK_MONOTONIC (through the vDSO where the kernel offers it: tens of
/// nanoseconds, no system call).
pub fn monotonicNs() u64 {
    var ts: std.c.timespec = undefined;
    if (c.clock_gettime(os.CLOCK_MONOTONIC, &ts) != 0) return 0;
    return @as(u64, @intCast(ts.sec)) *% std.time.ns_per_s +% @as(u64, @intCast(ts.nsec));
}

/// Sleeps for at least `ns` nanoseconds (nanosleep, resumed after signals).
pub fn sleepNs(ns: u64) void {
    var req: std.c.timespec = .{ .sec = @intCast(ns / std.time.ns_per_s), .nsec = @intCast(ns % std.time.ns_per_s) };
    var rem: std.c.timespec = undefined;
    while (c.nanosleep(&req, &rem) != 0 and errno() == EINTR) req = rem;
}

pub fn mkdir(path: [*:0]const u8, mode: c_uint) OsError!void {
    if (c.mkdir(path, mode) != 0) return error.Os;
}

pub fn rmdir(path: [*:0]const u8) OsError!void {
    if (c.rmdir(path) != 0) return error.Os;
}

pub fn unlinkAt(dir: Fd, name: [*:0]const u8) OsError!void {
    if (c.unlinkat(dir, name, 0) != 0) return error.Os;
}

pub fn rmdirAt(dir: Fd, name: [*:0]const u8) OsError!void {
    if (c.unlinkat(dir, name, os.AT_REMOVEDIR) != 0) return error.Os;
}

/// Whether anything (a dangling symbolic link included) exists at `path`.
pub fn exists(path: [*:0]const u8) OsError!bool {
    return existsAt(AT_FDCWD, path);
}

/// Whether anything exists at `name` relative to directory `dir`, links not followed.
pub fn existsAt(dir: Fd, name: [*:0]const u8) OsError!bool {
    if (c.faccessat(dir, name, 0, os.AT_SYMLINK_NOFOLLOW) == 0) return true;
    if (errno() == ENOENT) return false;
    return error.Os;
}

/// Applies flock(2) `operation` (LOCK_EX, LOCK_NB, ...), retrying EINTR.
pub fn flock(fd: Fd, operation: c_int) OsError!void {
    while (c.flock(fd, operation) != 0) {
        if (errno() != EINTR) return error.Os;
    }
}

/// The canonical absolute form of `path` (every symbolic link resolved), in `out`.
pub fn realpath(path: [*:0]const u8, out: *[path_bytes_max]u8) OsError![]const u8 {
    const r = os.realpath(path, out) orelse return error.Os;
    return std.mem.sliceTo(r, 0);
}

/// The entries of an open directory, "." and ".." left out. The stream reads through its own
/// duplicate of the descriptor, which stays the caller's to close.
pub const Dir = struct {
    handle: *anyopaque,

    pub fn open(fd: Fd) ?Dir {
        const copy_fd = c.dup(fd);
        if (copy_fd < 0) return null;
        const h = os.fdopendir(copy_fd) orelse {
            _ = c.close(copy_fd);
            return null;
        };
        return .{ .handle = h };
    }

    /// The next entry's name, valid until the next call; null at the end (or on an error).
    pub fn next(dir: *Dir) ?[:0]const u8 {
        while (os.readdir(dir.handle)) |entry| {
            const name = std.mem.sliceTo(@as([*:0]const u8, @ptrCast(&entry.name)), 0);
            if (std.mem.eql(u8, name, ".") or std.mem.eql(u8, name, "..")) continue;
            return name;
        }
        return null;
    }

    pub fn close(dir: *Dir) void {
        const saved = errno();
        _ = c.closedir(dir.handle);
        setErrno(saved);
    }
};

/// Renames `old` to `new`, failing with EEXIST instead of replacing anything at `new`
/// (renameat2 with RENAME_NOREPLACE on Linux, renamex_np with RENAME_EXCL on macOS). Where the
/// kernel or file system lacks it, it falls back to an existence check followed by rename(2);
/// that fallback has a race window, which only matters on such systems.
pub fn renameNoReplace(old: [*:0]const u8, new: [*:0]const u8) OsError!void {
    if (os.renameExclusive(old, new)) |done| return done;
    if (try exists(new)) {
        setErrno(EEXIST);
        return error.Os;
    }
    if (c.rename(old, new) != 0) return error.Os;
}

pub fn getpid() i32 {
    return c.getpid();
}

var random_counter: u64 = 0;

/// 64 random bits for temporary names: the system's random source (getrandom,
/// arc4random_buf), or else time, address and a counter, which are unique enough together
/// with the process id that precedes them in the name.
pub fn randomU64() u64 {
    var value: u64 = 0;
    if (os.entropy(&value)) return value;
    var ts: std.c.timespec = undefined;
    _ = c.clock_gettime(CLOCK_REALTIME, &ts);
    const n = @atomicRmw(u64, &random_counter, .Add, 1, .monotonic);
    const t: u64 = @bitCast(@as(i64, ts.sec) *% 1_000_000_000 +% @as(i64, ts.nsec));
    return std.hash.XxHash64.hash(n, std.mem.asBytes(&t)) ^ @intFromPtr(&value);
}

pub fn yield() void {
    _ = c.sched_yield();
}

extern "c" fn pthread_atfork(
    prepare: ?*const fn () callconv(.c) void,
    parent: ?*const fn () callconv(.c) void,
    child: ?*const fn () callconv(.c) void,
) c_int;
extern "c" fn pthread_once(once: *os.PthreadOnce, init: *const fn () callconv(.c) void) c_int;

/// How many fork() calls separate this process from the process that first called
/// `watchForks` (its children count 1, their children 2, ...). A value remembered with some
/// state tells whether the state was made by this process or inherited by fork, in which case
/// the threads that it counts do not exist here.
var fork_generation: std.atomic.Value(u32) = .init(0);
var fork_watch_once: os.PthreadOnce = os.pthread_once_init;

fn onForkChild() callconv(.c) void {
    // Runs in the child, on the one thread fork() leaves there, before fork() returns.
    _ = fork_generation.fetchAdd(1, .seq_cst);
}

fn registerForkWatch() callconv(.c) void {
    // pthread_atfork fails only without memory for the handler (ENOMEM); then
    // `forkGeneration` stays 0 in children, and state inherited across fork is treated as
    // this process's own, as before the generation existed.
    _ = pthread_atfork(null, null, onForkChild);
}

/// Makes `forkGeneration` count forks from now on; cheap after the first call.
pub fn watchForks() void {
    _ = pthread_once(&fork_watch_once, registerForkWatch);
}

pub fn forkGeneration() u32 {
    return fork_generation.load(.seq_cst);
}

extern "c" fn sysconf(name: c_int) c_long;
const sc_pagesize = os.sc_pagesize;
const sc_phys_pages = os.sc_phys_pages;

/// The machine's physical memory in bytes, or null where sysconf cannot tell.
pub fn physicalMemoryBytes() ?u64 {
    const pages = sysconf(sc_phys_pages);
    const size = sysconf(sc_pagesize);
    if (pages <= 0 or size <= 0) return null;
    return @as(u64, @intCast(pages)) *| @as(u64, @intCast(size));
}
