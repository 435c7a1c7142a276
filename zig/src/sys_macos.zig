//! The macOS half of the OS layer (`sys.zig`), for macOS 11 and later on arm64 and x86-64:
//! the constants of Darwin's ABI, and each concern that Linux serves with its own system calls,
//! served here by libSystem:
//!
//! - publish without replacing: renamex_np(RENAME_EXCL);
//! - durable flush: fcntl(F_FULLFSYNC), which asks the drive to empty its write cache (fsync
//!   on macOS only hands the data to the drive); fsync where the file system refuses it;
//! - reads and writes around the page cache: fcntl(F_NOCACHE), which, unlike O_DIRECT, needs
//!   no alignment (the callers align anyway);
//! - read advice: F_RDAHEAD off for random access, F_RDADVISE to start reading a range; there
//!   is no advice to drop cached pages, so that one is a no-op;
//! - no writeback hint (sync_file_range): writeback starts on the system's schedule, and
//!   durability still comes from the flush;
//! - anonymous files (memfd on Linux): a temporary file unlinked at once;
//! - sleeping on a word (futex on Linux): __ulock_wait / __ulock_wake, which libSystem has
//!   exported since macOS 10.12 and which the C++ runtime and Zig's own std use;
//! - random bytes: arc4random_buf, which cannot fail;
//! - the path of an open file: fcntl(F_GETPATH).
//!
//! Symbols whose name differs on x86-64 (`$INODE64`, `$DARWIN_EXTSN`) come from std.c, which
//! picks the right one per architecture. This file is compiled and linked for both CPUs in CI
//! (`nox -s macos`); no macOS machine runs it there.

const std = @import("std");
const builtin = @import("builtin");
const sys = @import("sys.zig");

const Fd = sys.Fd;
const OsError = sys.OsError;
const FileStat = sys.FileStat;
const FileIdentity = sys.FileIdentity;

pub const O_CREAT: c_int = 0x200;
pub const O_EXCL: c_int = 0x800;
pub const O_CLOEXEC: c_int = 0x1000000;
pub const O_NONBLOCK: c_int = 0x4;
pub const O_DIRECTORY: c_int = 0x100000;
pub const O_NOFOLLOW: c_int = 0x100;

pub const AT_FDCWD: c_int = -2;
pub const AT_SYMLINK_NOFOLLOW: c_int = 0x20;
pub const AT_REMOVEDIR: c_int = 0x80;
/// PATH_MAX (and MAXPATHLEN, which F_GETPATH fills) of Darwin, terminating NUL included.
pub const path_bytes_max: usize = 1024;
pub const MAP_ANONYMOUS: c_int = 0x1000;
pub const MAP_NORESERVE: c_int = 0x40;
pub const CLOCK_MONOTONIC: c_int = 6;
const F_RDADVISE: c_int = 44;
const F_RDAHEAD: c_int = 45;
const F_NOCACHE: c_int = 48;
const F_GETPATH: c_int = 50;
const F_FULLFSYNC: c_int = 51;
const RENAME_EXCL: c_uint = 0x4;

pub const ENOSYS: i32 = @backingInt(std.c.E.NOSYS);
pub const ENOTEMPTY: i32 = @backingInt(std.c.E.NOTEMPTY);
pub const ELOOP: i32 = @backingInt(std.c.E.LOOP);
pub const ENAMETOOLONG: i32 = @backingInt(std.c.E.NAMETOOLONG);
pub const EWOULDBLOCK: i32 = @backingInt(std.c.E.AGAIN);
const ENOTSUP: i32 = @backingInt(std.c.E.OPNOTSUPP); // ENOTSUP: the same code on Darwin

pub const sc_pagesize: c_int = 29; // _SC_PAGESIZE
pub const sc_phys_pages: c_int = 200; // _SC_PHYS_PAGES

/// Darwin's pthread_once_t: a signature word and 8 opaque bytes; PTHREAD_ONCE_INIT is
/// {_PTHREAD_ONCE_SIG_init, {0}}.
pub const PthreadOnce = extern struct { sig: c_long, rest: [8]u8 };
pub const pthread_once_init: PthreadOnce = .{ .sig = 0x30B1BCBA, .rest = @splat(0) };

extern "c" fn __error() *c_int;
extern "c" fn fcntl(fd: c_int, cmd: c_int, ...) c_int;
extern "c" fn fsync(fd: c_int) c_int;
extern "c" fn strerror_r(errnum: c_int, buf: [*]u8, buflen: usize) c_int;
extern "c" fn renamex_np(old: [*:0]const u8, new: [*:0]const u8, flags: c_uint) c_int;
extern "c" fn arc4random_buf(buf: *anyopaque, len: usize) void;
extern "c" fn mkstemp(template: [*:0]u8) c_int;
extern "c" fn unlink(path: [*:0]const u8) c_int;
extern "c" fn getenv(name: [*:0]const u8) ?[*:0]const u8;
const dirs = struct {
    extern "c" fn @"fdopendir$INODE64"(fd: c_int) ?*anyopaque;
    extern "c" fn fdopendir(fd: c_int) ?*anyopaque;
};

/// `fdopendir$INODE64` on x86-64 (the variant that pairs with `readdir$INODE64`).
pub fn fdopendir(fd: c_int) ?*anyopaque {
    return if (builtin.cpu.arch == .x86_64) dirs.@"fdopendir$INODE64"(fd) else dirs.fdopendir(fd);
}

pub fn readdir(dir: *anyopaque) ?*std.c.dirent {
    return std.c.readdir(@ptrCast(dir));
}

pub fn realpath(path: [*:0]const u8, resolved: [*]u8) ?[*:0]u8 {
    return std.c.realpath(path, @ptrCast(resolved));
}

pub fn errnoLocation() *c_int {
    return __error();
}

/// F_FULLFSYNC: the data and the drive's write cache on stable storage. Where the file system
/// refuses it (ENOTSUP, EINVAL: some network and FUSE file systems), fsync.
pub fn fsyncFd(fd: Fd) OsError!void {
    while (fcntl(fd, F_FULLFSYNC) != 0) {
        const e = sys.errno();
        if (e == sys.EINTR) continue;
        if (e != ENOTSUP and e != sys.EINVAL) return error.Os;
        while (fsync(fd) != 0) {
            if (sys.errno() != sys.EINTR) return error.Os;
        }
        return;
    }
}

/// Opens `name` in `dir` and turns on F_NOCACHE.
pub fn openDirectAt(dir: Fd, name: [*:0]const u8, flags: c_int) OsError!Fd {
    const fd = try sys.openAt(dir, name, flags, 0);
    setDirect(fd, true) catch {
        sys.close(fd);
        return error.Os;
    };
    return fd;
}

pub fn setDirect(fd: Fd, on: bool) OsError!void {
    while (fcntl(fd, F_NOCACHE, @as(c_int, @intFromBool(on))) != 0) {
        if (sys.errno() != sys.EINTR) return error.Os;
    }
}

/// Darwin does not say; F_NOCACHE asks for no alignment.
pub fn directIoAlignment(fd: Fd) ?sys.DirectIoAlignment {
    _ = fd;
    return null;
}

/// macOS has no memory file system in common use (a RAM disk is HFS+ or APFS on a memory
/// device, whose writes do reach a device driver).
pub fn isMemoryFs(fd: Fd) bool {
    _ = fd;
    return false;
}

fn statOf(st: *const std.c.Stat) FileStat {
    const mode: u32 = st.mode;
    return .{
        .size = @intCast(st.size),
        .kind = sys.kindOfMode(mode),
        .uid = st.uid,
        .perm = mode & 0o7777,
        .mtime_sec = st.mtimespec.sec,
    };
}

pub fn fstat(fd: Fd) OsError!FileStat {
    var st: std.c.Stat = undefined;
    if (std.c.fstat(fd, &st) != 0) return error.Os;
    return statOf(&st);
}

pub fn fstatAt(dir: Fd, name: [*:0]const u8) OsError!FileStat {
    var st: std.c.Stat = undefined;
    if (std.c.fstatat(dir, name, &st, @intCast(AT_SYMLINK_NOFOLLOW)) != 0) return error.Os;
    return statOf(&st);
}

pub fn fileIdentity(fd: Fd) OsError!FileIdentity {
    var st: std.c.Stat = undefined;
    if (std.c.fstat(fd, &st) != 0) return error.Os;
    // Darwin's dev_t: major in the top 8 bits, minor in the low 24.
    const dev: u32 = @bitCast(st.dev);
    return .{
        .dev_major = dev >> 24,
        .dev_minor = dev & 0xff_ffff,
        .ino = st.ino,
        .size = @intCast(st.size),
        .mtime_sec = st.mtimespec.sec,
        .mtime_nsec = @intCast(st.mtimespec.nsec),
        .ctime_sec = st.ctimespec.sec,
        .ctime_nsec = @intCast(st.ctimespec.nsec),
    };
}

/// A file in $TMPDIR (else /tmp), unlinked as soon as it is made, closed on exec: gone with its
/// last descriptor and mapping, like Linux's memfd, but backed by the disk's page cache.
pub fn memfd(name: [*:0]const u8) OsError!Fd {
    var buf: [path_bytes_max]u8 = undefined;
    const dir = if (getenv("TMPDIR")) |t| std.mem.sliceTo(t, 0) else "/tmp";
    const trimmed = std.mem.trimEnd(u8, dir, "/");
    const path = std.fmt.bufPrintSentinel(&buf, "{s}/{s}-XXXXXX", .{ trimmed, std.mem.sliceTo(name, 0) }, 0) catch {
        sys.setErrno(ENAMETOOLONG);
        return error.Os;
    };
    const fd = mkstemp(path.ptr);
    if (fd < 0) return error.Os;
    _ = unlink(path.ptr);
    const F_SETFD: c_int = 2;
    const FD_CLOEXEC: c_int = 1;
    _ = fcntl(fd, F_SETFD, FD_CLOEXEC);
    return fd;
}

pub fn fdPath(fd: Fd, out: *[path_bytes_max]u8) ?[]const u8 {
    if (fcntl(fd, F_GETPATH, out) != 0) return null;
    const path = std.mem.sliceTo(out, 0);
    if (path.len == 0 or path[0] != '/') return null;
    return path;
}

/// renamex_np(RENAME_EXCL); null where the file system lacks it (ENOTSUP: the caller falls
/// back).
pub fn renameExclusive(old: [*:0]const u8, new: [*:0]const u8) ?OsError!void {
    if (renamex_np(old, new, RENAME_EXCL) == 0) return {};
    const e = sys.errno();
    if (e == ENOTSUP or e == sys.EINVAL or e == ENOSYS) return null;
    return error.Os;
}

pub fn entropy(out: *u64) bool {
    arc4random_buf(out, @sizeOf(u64));
    return true;
}

pub fn copy(dst: []u8, src: []const u8) void {
    @memcpy(dst, src);
}

pub fn futexWait(word: *const std.atomic.Value(u32), expected: u32) void {
    _ = std.c.__ulock_wait(.{ .op = .COMPARE_AND_WAIT, .NO_ERRNO = true }, &word.raw, expected, 0);
}

pub fn futexWake(word: *const std.atomic.Value(u32)) void {
    _ = std.c.__ulock_wake(.{ .op = .COMPARE_AND_WAIT, .WAKE_ALL = true, .NO_ERRNO = true }, &word.raw, 0);
}

/// No such hint on macOS.
pub fn startWriteback(fd: Fd, offset: u64, len: u64) void {
    _ = .{ fd, offset, len };
}

/// F_RDAHEAD off for random access; F_RDADVISE (at most 2 GiB a call, the width of its
/// count) to start reading a range; len 0 is to the end of the file, which F_RDADVISE cannot
/// say, so a whole-file `willneed` reads ahead the first 2 GiB.
pub fn fadviseRange(fd: Fd, offset: u64, len: u64, advice: sys.Advice) void {
    switch (advice) {
        .random => _ = fcntl(fd, F_RDAHEAD, @as(c_int, 0)),
        .willneed => {
            const Radvisory = extern struct { offset: i64, count: c_int };
            const count: u64 = if (len == 0) std.math.maxInt(c_int) else @min(len, std.math.maxInt(c_int));
            var ra: Radvisory = .{ .offset = @intCast(offset), .count = @intCast(count) };
            _ = fcntl(fd, F_RDADVISE, &ra);
        },
        .dontneed => {},
    }
}

/// The POSIX strerror_r, which fills the buffer.
pub fn errnoText(errno_value: i32, buf: *[128]u8) []const u8 {
    if (strerror_r(errno_value, buf, buf.len) != 0) return "unknown error";
    return std.mem.sliceTo(buf, 0);
}
