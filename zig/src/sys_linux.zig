//! The Linux half of the OS layer (`sys.zig`): the constants of Linux's ABI, and each concern
//! whose fast path is a Linux system call (statx, renameat2 with RENAME_NOREPLACE, getrandom,
//! futex, memfd_create, O_DIRECT, sync_file_range, posix_fadvise).
//!
//! Invariants: those of `sys.zig` (errno set on every `error.Os`, EINTR retried, no
//! allocation); the raw system calls come from std.os.linux, whose numbers are correct per
//! architecture; every other call goes through glibc.

const std = @import("std");
const builtin = @import("builtin");
const linux = std.os.linux;
const sys = @import("sys.zig");

const Fd = sys.Fd;
const OsError = sys.OsError;
const FileStat = sys.FileStat;
const FileIdentity = sys.FileIdentity;

// Open flags differ between architectures for O_DIRECTORY and O_NOFOLLOW.
pub const O_CREAT: c_int = 0o100;
pub const O_EXCL: c_int = 0o200;
pub const O_CLOEXEC: c_int = 0o2000000;
pub const O_NONBLOCK: c_int = 0o4000;
pub const O_DIRECTORY: c_int = switch (builtin.cpu.arch) {
    .x86_64 => 0o200000,
    .aarch64 => 0o40000,
    else => @compileError("zrecord: add O_DIRECTORY for this architecture"),
};
pub const O_NOFOLLOW: c_int = switch (builtin.cpu.arch) {
    .x86_64 => 0o400000,
    .aarch64 => 0o100000,
    else => @compileError("zrecord: add O_NOFOLLOW for this architecture"),
};
/// open(2) and fcntl(F_SETFL): read or write around the page cache, straight from the caller's
/// buffer; offsets, lengths and buffers must be aligned to the device's logical block size.
const O_DIRECT: c_int = switch (builtin.cpu.arch) {
    .x86_64 => 0o40000,
    .aarch64 => 0o200000,
    else => @compileError("zrecord: add O_DIRECT for this architecture"),
};

pub const AT_FDCWD: c_int = -100;
pub const AT_SYMLINK_NOFOLLOW: c_int = 0x100;
pub const AT_REMOVEDIR: c_int = 0x200;
/// PATH_MAX of Linux, terminating NUL included.
pub const path_bytes_max: usize = 4096;
const AT_EMPTY_PATH: u32 = 0x1000;
pub const MAP_ANONYMOUS: c_int = 0x20;
pub const MAP_NORESERVE: c_int = 0x4000;
const MFD_CLOEXEC: u32 = 1;
pub const CLOCK_MONOTONIC: c_int = 1;
const F_GETFL: c_int = 3;
const F_SETFL: c_int = 4;

pub const ENOSYS: i32 = 38;
pub const ENOTEMPTY: i32 = 39;
pub const ELOOP: i32 = 40;
pub const ENAMETOOLONG: i32 = 36;
pub const EWOULDBLOCK: i32 = 11;

pub const sc_pagesize: c_int = 30; // _SC_PAGESIZE (glibc and musl)
pub const sc_phys_pages: c_int = 85; // _SC_PHYS_PAGES (glibc and musl)

/// glibc's pthread_once_t is an int, PTHREAD_ONCE_INIT 0.
pub const PthreadOnce = c_int;
pub const pthread_once_init: PthreadOnce = 0;

extern "c" fn __errno_location() *c_int;
extern "c" fn __mempcpy(noalias dst: [*]u8, noalias src: [*]const u8, n: usize) [*]u8;
extern "c" fn fstatfs(fd: c_int, buf: *[256]u8) c_int;
extern "c" fn fcntl(fd: c_int, cmd: c_int, ...) c_int;
extern "c" fn fsync(fd: c_int) c_int;
extern "c" fn sync_file_range(fd: c_int, offset: i64, nbytes: i64, flags: c_uint) c_int;
extern "c" fn posix_fadvise(fd: c_int, offset: i64, len: i64, advice: c_int) c_int;
extern "c" fn strerror_r(errnum: c_int, buf: [*]u8, buflen: usize) ?[*:0]const u8;
extern "c" fn readlink(path: [*:0]const u8, buf: [*]u8, size: usize) isize;
pub extern "c" fn fdopendir(fd: c_int) ?*anyopaque;
pub extern "c" fn readdir(dir: *anyopaque) ?*std.c.dirent;
pub extern "c" fn realpath(path: [*:0]const u8, resolved: [*]u8) ?[*:0]u8;

pub fn errnoLocation() *c_int {
    return __errno_location();
}

fn fail(e: linux.E) OsError {
    sys.setErrno(@intCast(@backingInt(e)));
    return error.Os;
}

pub fn fsyncFd(fd: Fd) OsError!void {
    while (fsync(fd) != 0) {
        if (sys.errno() != sys.EINTR) return error.Os;
    }
}

/// Opens `name` in `dir` with O_DIRECT added to `flags`.
pub fn openDirectAt(dir: Fd, name: [*:0]const u8, flags: c_int) OsError!Fd {
    return sys.openAt(dir, name, flags | O_DIRECT, 0);
}

pub fn setDirect(fd: Fd, on: bool) OsError!void {
    const flags = fcntl(fd, F_GETFL);
    if (flags < 0) return error.Os;
    const want = if (on) flags | O_DIRECT else flags & ~O_DIRECT;
    if (want == flags) return;
    while (fcntl(fd, F_SETFL, want) != 0) {
        if (sys.errno() != sys.EINTR) return error.Os;
    }
}

/// statx(STATX_DIOALIGN), Linux 6.1 and later.
pub fn directIoAlignment(fd: Fd) ?sys.DirectIoAlignment {
    var stx: linux.Statx = undefined;
    const rc = linux.statx(fd, "", AT_EMPTY_PATH, .{ .DIOALIGN = true }, &stx);
    if (linux.errno(rc) != .SUCCESS or !stx.mask.DIOALIGN) return null;
    return .{ .memory = stx.dio_mem_align, .offset = stx.dio_offset_align };
}

pub fn isMemoryFs(fd: Fd) bool {
    // struct statfs starts with f_type, a long, on every 64-bit Linux; 256 bytes hold the
    // whole struct (120 on x86_64 and aarch64).
    var buf: [256]u8 align(8) = undefined;
    if (fstatfs(fd, &buf) != 0) return false;
    const f_type = std.mem.readInt(i64, buf[0..8], builtin.cpu.arch.endian());
    const tmpfs_magic: i64 = 0x01021994;
    const ramfs_magic: i64 = 0x858458f6;
    return f_type == tmpfs_magic or f_type == ramfs_magic;
}

const stat_want: linux.STATX = .{ .TYPE = true, .MODE = true, .UID = true, .MTIME = true, .SIZE = true };

fn statOf(stx: *const linux.Statx) FileStat {
    const mode: u32 = stx.mode;
    return .{
        .size = stx.size,
        .kind = sys.kindOfMode(mode),
        .uid = stx.uid,
        .perm = mode & 0o7777,
        .mtime_sec = stx.mtime.sec,
    };
}

/// statx; lseek where statx is unavailable (the size only).
pub fn fstat(fd: Fd) OsError!FileStat {
    var stx: linux.Statx = undefined;
    const rc = linux.statx(fd, "", AT_EMPTY_PATH, stat_want, &stx);
    const e = linux.errno(rc);
    if (e == .SUCCESS) return statOf(&stx);
    if (e != .NOSYS and e != .PERM) return fail(e);
    return .{ .size = try sys.seekEnd(fd), .kind = .regular };
}

pub fn fstatAt(dir: Fd, name: [*:0]const u8) OsError!FileStat {
    var stx: linux.Statx = undefined;
    const rc = linux.statx(dir, name, AT_SYMLINK_NOFOLLOW, stat_want, &stx);
    const e = linux.errno(rc);
    if (e != .SUCCESS) return fail(e);
    return statOf(&stx);
}

pub fn fileIdentity(fd: Fd) OsError!FileIdentity {
    var stx: linux.Statx = undefined;
    const want: linux.STATX = .{ .INO = true, .SIZE = true, .MTIME = true, .CTIME = true };
    const rc = linux.statx(fd, "", AT_EMPTY_PATH, want, &stx);
    const e = linux.errno(rc);
    if (e != .SUCCESS) return fail(e);
    return .{
        .dev_major = stx.dev_major,
        .dev_minor = stx.dev_minor,
        .ino = stx.ino,
        .size = stx.size,
        .mtime_sec = stx.mtime.sec,
        .mtime_nsec = stx.mtime.nsec,
        .ctime_sec = stx.ctime.sec,
        .ctime_nsec = stx.ctime.nsec,
    };
}

/// memfd_create, closed on exec.
pub fn memfd(name: [*:0]const u8) OsError!Fd {
    const rc = linux.memfd_create(name, MFD_CLOEXEC);
    const e = linux.errno(rc);
    if (e != .SUCCESS) return fail(e);
    return @intCast(rc);
}

/// The /proc/self/fd link of `fd`.
pub fn fdPath(fd: Fd, out: *[path_bytes_max]u8) ?[]const u8 {
    var link: [48]u8 = undefined;
    const name = std.fmt.bufPrintSentinel(&link, "/proc/self/fd/{d}", .{fd}, 0) catch return null;
    const n = readlink(name, out, out.len);
    if (n <= 0 or n >= out.len) return null;
    const path = out[0..@intCast(n)];
    if (path[0] != '/' or std.mem.endsWith(u8, path, " (deleted)")) return null;
    return path;
}

/// renameat2 with RENAME_NOREPLACE; null where the kernel or the file system lacks it (the
/// caller falls back).
pub fn renameExclusive(old: [*:0]const u8, new: [*:0]const u8) ?OsError!void {
    const rc = linux.renameat2(AT_FDCWD, old, AT_FDCWD, new, .{ .NOREPLACE = true });
    const e = linux.errno(rc);
    return switch (e) {
        .SUCCESS => {},
        .NOSYS, .INVAL => null,
        else => fail(e),
    };
}

/// getrandom; false where it fails.
pub fn entropy(out: *u64) bool {
    const rc = linux.getrandom(@ptrCast(out), @sizeOf(u64), 0);
    return linux.errno(rc) == .SUCCESS and rc == @sizeOf(u64);
}

/// glibc's `__mempcpy` (exported since GLIBC_2.2.5, the same implementations as its memcpy) is
/// called by that name because LLVM would turn a call to `memcpy` or `mempcpy` back into the
/// compiler_rt copy.
pub fn copy(dst: []u8, src: []const u8) void {
    _ = __mempcpy(dst.ptr, src.ptr, dst.len);
}

pub fn futexWait(word: *const std.atomic.Value(u32), expected: u32) void {
    _ = linux.futex_4arg(&word.raw, .{ .cmd = .WAIT, .private = true }, expected, null);
}

pub fn futexWake(word: *const std.atomic.Value(u32)) void {
    _ = linux.futex_3arg(&word.raw, .{ .cmd = .WAKE, .private = true }, std.math.maxInt(i32));
}

/// sync_file_range(SYNC_FILE_RANGE_WRITE).
pub fn startWriteback(fd: Fd, offset: u64, len: u64) void {
    _ = sync_file_range(fd, @intCast(offset), @intCast(len), 2);
}

/// posix_fadvise; len 0 is to the end of the file.
pub fn fadviseRange(fd: Fd, offset: u64, len: u64, advice: sys.Advice) void {
    const code: c_int = switch (advice) {
        .random => 1,
        .willneed => 3,
        .dontneed => 4,
    };
    _ = posix_fadvise(fd, @intCast(offset), @intCast(len), code);
}

/// glibc's GNU strerror_r, which may return a static string instead of filling the buffer.
pub fn errnoText(errno_value: i32, buf: *[128]u8) []const u8 {
    buf[0] = 0;
    const p = strerror_r(errno_value, buf, buf.len) orelse return "unknown error";
    return std.mem.sliceTo(p, 0);
}
