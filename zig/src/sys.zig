//! Thin wrappers over the C library and a few Linux system calls.
//!
//! Invariants:
//! - The C library functions are declared here by hand (Zig 0.17 has no @cImport, and the std
//!   file API changes between releases); the few raw system calls (renameat2, statx, getrandom)
//!   come from std.os.linux, whose numbers are correct per architecture.
//! - Every wrapper either succeeds or returns `error.Os` with the thread's errno describing the
//!   failure; callers read it with `errno()` immediately, before any other C call.
//! - EINTR is retried here, so callers never see it.
//! - Nothing here allocates or panics.

const std = @import("std");
const builtin = @import("builtin");
const linux = std.os.linux;

pub const OsError = error{Os};

pub const Fd = c_int;

pub const IoVec = extern struct {
    base: [*]const u8,
    len: usize,
};

const c = struct {
    extern "c" fn open(path: [*:0]const u8, flags: c_int, ...) c_int;
    extern "c" fn openat(dirfd: c_int, path: [*:0]const u8, flags: c_int, ...) c_int;
    extern "c" fn close(fd: c_int) c_int;
    extern "c" fn pread(fd: c_int, buf: [*]u8, count: usize, offset: i64) isize;
    extern "c" fn pwrite(fd: c_int, buf: [*]const u8, count: usize, offset: i64) isize;
    extern "c" fn pwritev(fd: c_int, iov: [*]const IoVec, iovcnt: c_int, offset: i64) isize;
    extern "c" fn lseek(fd: c_int, offset: i64, whence: c_int) i64;
    extern "c" fn fsync(fd: c_int) c_int;
    extern "c" fn fcntl(fd: c_int, cmd: c_int, ...) c_int;
    extern "c" fn fstatfs(fd: c_int, buf: *[256]u8) c_int;
    extern "c" fn mmap(addr: ?*anyopaque, len: usize, prot: c_int, flags: c_int, fd: c_int, off: i64) usize;
    extern "c" fn munmap(addr: *anyopaque, len: usize) c_int;
    extern "c" fn madvise(addr: *anyopaque, len: usize, advice: c_int) c_int;
    extern "c" fn posix_fadvise(fd: c_int, offset: i64, len: i64, advice: c_int) c_int;
    extern "c" fn mincore(addr: *anyopaque, len: usize, vec: [*]u8) c_int;
    extern "c" fn clock_gettime(clock: c_int, ts: *linux.timespec) c_int;
    extern "c" fn mkdir(path: [*:0]const u8, mode: c_uint) c_int;
    extern "c" fn rename(old: [*:0]const u8, new: [*:0]const u8) c_int;
    extern "c" fn unlinkat(dirfd: c_int, path: [*:0]const u8, flags: c_int) c_int;
    extern "c" fn rmdir(path: [*:0]const u8) c_int;
    extern "c" fn getpid() c_int;
    extern "c" fn faccessat(dirfd: c_int, path: [*:0]const u8, mode: c_int, flags: c_int) c_int;
    extern "c" fn sched_yield() c_int;
    extern "c" fn __errno_location() *c_int;
    extern "c" fn __mempcpy(noalias dst: [*]u8, noalias src: [*]const u8, n: usize) [*]u8;
    extern "c" fn flock(fd: c_int, operation: c_int) c_int;
    extern "c" fn sync_file_range(fd: c_int, offset: i64, nbytes: i64, flags: c_uint) c_int;
    extern "c" fn realpath(path: [*:0]const u8, resolved: [*]u8) ?[*:0]u8;
    extern "c" fn dup(fd: c_int) c_int;
    extern "c" fn fdopendir(fd: c_int) ?*anyopaque;
    extern "c" fn readdir(dir: *anyopaque) ?*std.c.dirent;
    extern "c" fn closedir(dir: *anyopaque) c_int;
    extern "c" fn geteuid() c_uint;
    extern "c" fn futimens(fd: c_int, times: ?*const [2]linux.timespec) c_int;
    extern "c" fn readlink(path: [*:0]const u8, buf: [*]u8, size: usize) isize;
};

// Open flags differ between architectures for O_DIRECTORY and O_NOFOLLOW.
pub const O_RDONLY: c_int = 0;
pub const O_WRONLY: c_int = 1;
pub const O_RDWR: c_int = 2;
pub const O_CREAT: c_int = 0o100;
pub const O_EXCL: c_int = 0o200;
pub const O_CLOEXEC: c_int = 0o2000000;
/// The same on x86_64 and aarch64. Has no effect on regular files; the reader opens store files
/// with it so that a FIFO put in a file's place is refused instead of blocking open forever.
pub const O_NONBLOCK: c_int = 0o4000;
pub const O_DIRECTORY: c_int = switch (builtin.cpu.arch) {
    .x86_64 => 0o200000,
    .aarch64 => 0o40000,
    else => @compileError("zrecord: add O_DIRECTORY for this architecture"),
};
/// open(2) fails with ELOOP instead of following a symbolic link in the last component.
pub const O_NOFOLLOW: c_int = switch (builtin.cpu.arch) {
    .x86_64 => 0o400000,
    .aarch64 => 0o100000,
    else => @compileError("zrecord: add O_NOFOLLOW for this architecture"),
};

/// open(2) and fcntl(F_SETFL): read or write around the page cache, straight from the caller's
/// buffer; offsets, lengths and buffers must be aligned to the device's logical block size
/// (reads use `direct_align_bytes`; writes ask the file's `directIoAlignment`).
pub const O_DIRECT: c_int = switch (builtin.cpu.arch) {
    .x86_64 => 0o40000,
    .aarch64 => 0o200000,
    else => @compileError("zrecord: add O_DIRECT for this architecture"),
};
/// The alignment of O_DIRECT reads: a multiple of the 512- and 4096-byte logical blocks of
/// disks, and of the page size of x86_64.
pub const direct_align_bytes: usize = 4096;

const F_GETFL: c_int = 3;
const F_SETFL: c_int = 4;

pub const AT_FDCWD: c_int = -100;
const AT_SYMLINK_NOFOLLOW: c_int = 0x100;
const AT_REMOVEDIR: c_int = 0x200;
pub const LOCK_EX: c_int = 2;
pub const LOCK_NB: c_int = 4;
pub const LOCK_UN: c_int = 8;
/// PATH_MAX of Linux, terminating NUL included.
pub const path_bytes_max: usize = 4096;
const AT_EMPTY_PATH: u32 = 0x1000;
const PROT_READ: c_int = 1;
const PROT_WRITE: c_int = 2;
const MAP_SHARED: c_int = 1;
const MAP_PRIVATE: c_int = 2;
const MAP_ANONYMOUS: c_int = 0x20;
const MAP_NORESERVE: c_int = 0x4000;
const MFD_CLOEXEC: u32 = 1;
pub const MADV_RANDOM: c_int = 1;
pub const POSIX_FADV_RANDOM: c_int = 1;
pub const POSIX_FADV_WILLNEED: c_int = 3;
const CLOCK_REALTIME: c_int = 0;
const CLOCK_MONOTONIC: c_int = 1;
const SEEK_END: c_int = 2;
const S_IFMT: u32 = 0o170000;
const S_IFREG: u32 = 0o100000;
const S_IFDIR: u32 = 0o040000;

pub const EPERM: i32 = 1;
pub const ENOENT: i32 = 2;
pub const EINTR: i32 = 4;
pub const EIO: i32 = 5;
pub const ENXIO: i32 = 6;
pub const ENOMEM: i32 = 12;
pub const EEXIST: i32 = 17;
pub const ENOTDIR: i32 = 20;
pub const EISDIR: i32 = 21;
pub const EINVAL: i32 = 22;
pub const ENOSYS: i32 = 38;
pub const ENOTEMPTY: i32 = 39;
pub const ELOOP: i32 = 40;
pub const ENAMETOOLONG: i32 = 36;

/// Largest single read or write Linux performs (0x7ffff000); larger requests are looped.
const io_chunk_bytes_max: usize = 0x7fff_f000;

pub fn errno() i32 {
    return c.__errno_location().*;
}

fn setErrno(value: i32) void {
    c.__errno_location().* = value;
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

pub fn fsync(fd: Fd) OsError!void {
    while (c.fsync(fd) != 0) {
        if (errno() != EINTR) return error.Os;
    }
}

/// Turns O_DIRECT on or off for an open file. Fails (errno EINVAL) where the file system
/// cannot write around its page cache.
pub fn setDirect(fd: Fd, on: bool) OsError!void {
    const flags = c.fcntl(fd, F_GETFL);
    if (flags < 0) return error.Os;
    const want = if (on) flags | O_DIRECT else flags & ~O_DIRECT;
    if (want == flags) return;
    while (c.fcntl(fd, F_SETFL, want) != 0) {
        if (errno() != EINTR) return error.Os;
    }
}

/// What O_DIRECT asks of buffer addresses and file offsets and lengths on an open file, as
/// statx(STATX_DIOALIGN) reports it (Linux 6.1 and later): `null` where the kernel or the
/// file system does not say, a result with `offset == 0` where direct I/O is unsupported.
pub const DirectIoAlignment = struct { memory: u32, offset: u32 };

pub fn directIoAlignment(fd: Fd) ?DirectIoAlignment {
    var stx: linux.Statx = undefined;
    const rc = linux.statx(fd, "", AT_EMPTY_PATH, .{ .DIOALIGN = true }, &stx);
    if (linux.errno(rc) != .SUCCESS or !stx.mask.DIOALIGN) return null;
    return .{ .memory = stx.dio_mem_align, .offset = stx.dio_offset_align };
}

/// Whether the open file lives on a file system held in memory (tmpfs, ramfs), whose writes
/// never reach a device.
pub fn isMemoryFs(fd: Fd) bool {
    // struct statfs starts with f_type, a long, on every 64-bit Linux; 256 bytes hold the
    // whole struct (120 on x86_64 and aarch64).
    var buf: [256]u8 align(8) = undefined;
    if (c.fstatfs(fd, &buf) != 0) return false;
    const f_type = std.mem.readInt(i64, buf[0..8], builtin.cpu.arch.endian());
    const tmpfs_magic: i64 = 0x01021994;
    const ramfs_magic: i64 = 0x858458f6;
    return f_type == tmpfs_magic or f_type == ramfs_magic;
}

pub const FileKind = enum { regular, directory, other };

pub const FileStat = struct {
    size: u64,
    kind: FileKind,
    /// The owner, and the permission bits (mode & 0o7777); `uid_unknown` and 0o7777 where the
    /// system could not tell (the lseek fallback), so that a check of ownership fails.
    uid: u32 = uid_unknown,
    perm: u32 = 0o7777,
    /// The time of the last change of contents, in whole seconds since the epoch.
    mtime_sec: i64 = 0,
};

/// No user has this id (it is (uid_t)-1, which chown(2) reads as "no change").
pub const uid_unknown: u32 = std.math.maxInt(u32);

const stat_want: linux.STATX = .{ .TYPE = true, .MODE = true, .UID = true, .MTIME = true, .SIZE = true };

fn statOf(stx: *const linux.Statx) FileStat {
    const mode: u32 = stx.mode;
    const kind: FileKind = switch (mode & S_IFMT) {
        S_IFREG => .regular,
        S_IFDIR => .directory,
        else => .other,
    };
    return .{ .size = stx.size, .kind = kind, .uid = stx.uid, .perm = mode & 0o7777, .mtime_sec = stx.mtime.sec };
}

/// The size, type, owner and permissions of an open file, through statx (lseek where statx is
/// unavailable: the size only).
pub fn fstat(fd: Fd) OsError!FileStat {
    var stx: linux.Statx = undefined;
    const rc = linux.statx(fd, "", AT_EMPTY_PATH, stat_want, &stx);
    const e = linux.errno(rc);
    if (e == .SUCCESS) return statOf(&stx);
    if (e != .NOSYS and e != .PERM) {
        setErrno(@intCast(@backingInt(e)));
        return error.Os;
    }
    const end = c.lseek(fd, 0, SEEK_END);
    if (end < 0) return error.Os;
    return .{ .size = @intCast(end), .kind = .regular };
}

/// `fstat` of the entry `name` of the directory `dir`, not following a symbolic link (a link
/// is `.other`).
pub fn fstatAt(dir: Fd, name: [*:0]const u8) OsError!FileStat {
    var stx: linux.Statx = undefined;
    const rc = linux.statx(dir, name, AT_SYMLINK_NOFOLLOW, stat_want, &stx);
    const e = linux.errno(rc);
    if (e != .SUCCESS) {
        setErrno(@intCast(@backingInt(e)));
        return error.Os;
    }
    return statOf(&stx);
}

/// The effective user id of this process.
pub fn geteuid() u32 {
    return c.geteuid();
}

/// Sets the times of last access and change of contents of an open file to now.
pub fn touch(fd: Fd) OsError!void {
    if (c.futimens(fd, null) != 0) return error.Os;
}

/// The absolute path the kernel knows for the open file or directory `fd` (its
/// /proc/self/fd link), in `out`; null where it cannot tell (no /proc, a deleted file, a path
/// too long).
pub fn fdPath(fd: Fd, out: *[path_bytes_max]u8) ?[]const u8 {
    var link: [48]u8 = undefined;
    const name = std.fmt.bufPrintSentinel(&link, "/proc/self/fd/{d}", .{fd}, 0) catch return null;
    const n = c.readlink(name, out, out.len);
    if (n <= 0 or n >= out.len) return null;
    const path = out[0..@intCast(n)];
    if (path[0] != '/' or std.mem.endsWith(u8, path, " (deleted)")) return null;
    return path;
}

/// What tells one version of a file from another without reading it: the file (device and
/// inode), its size, and the times of its last change of contents and of status. A file
/// rewritten in place, replaced, truncated or extended has another identity.
pub const FileIdentity = extern struct {
    dev_major: u32,
    dev_minor: u32,
    ino: u64,
    size: u64,
    mtime_sec: i64,
    mtime_nsec: u64,
    ctime_sec: i64,
    ctime_nsec: u64,
};

/// Whether two identities are of the same file (device and inode), whatever its contents.
pub fn sameFile(a: FileIdentity, b: FileIdentity) bool {
    return a.ino == b.ino and a.dev_major == b.dev_major and a.dev_minor == b.dev_minor;
}

/// Whether two identities are of the same version of the same file (every field equal).
pub fn sameVersion(a: FileIdentity, b: FileIdentity) bool {
    return std.mem.eql(u8, std.mem.asBytes(&a), std.mem.asBytes(&b));
}

/// The identity of an open file, through statx.
pub fn fileIdentity(fd: Fd) OsError!FileIdentity {
    var stx: linux.Statx = undefined;
    const want: linux.STATX = .{ .INO = true, .SIZE = true, .MTIME = true, .CTIME = true };
    const rc = linux.statx(fd, "", AT_EMPTY_PATH, want, &stx);
    const e = linux.errno(rc);
    if (e != .SUCCESS) {
        setErrno(@intCast(@backingInt(e)));
        return error.Os;
    }
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

/// An anonymous file in memory (memfd_create), closed on exec: shared by the processes that
/// map it (forked children inherit the mapping), gone with its last descriptor and mapping.
pub fn memfd(name: [*:0]const u8) OsError!Fd {
    const rc = linux.memfd_create(name, MFD_CLOEXEC);
    const e = linux.errno(rc);
    if (e != .SUCCESS) {
        setErrno(@intCast(@backingInt(e)));
        return error.Os;
    }
    return @intCast(rc);
}

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
    const addr = c.mmap(null, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
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

/// Asks the kernel to start writing back [offset, offset + len) of `fd` without waiting
/// (sync_file_range with SYNC_FILE_RANGE_WRITE). A hint: failure is ignored, errno is kept,
/// and durability still comes from fsync.
pub fn startWriteback(fd: Fd, offset: u64, len: u64) void {
    if (len == 0) return;
    const saved = errno();
    _ = c.sync_file_range(fd, @intCast(offset), @intCast(len), 2);
    setErrno(saved);
}

/// Advice is only a hint; failure is ignored (posix_fadvise returns its error, errno is kept).
pub fn fadvise(fd: Fd, advice: c_int) void {
    _ = c.posix_fadvise(fd, 0, 0, advice);
}

/// Advice on the byte range [offset, offset + len) of `fd` (POSIX_FADV_WILLNEED starts reading
/// it into the page cache and returns without waiting for the reads). Only a hint: failure is
/// ignored and errno kept.
pub fn fadviseRange(fd: Fd, offset: u64, len: u64, advice: c_int) void {
    if (len == 0) return;
    const saved = errno();
    _ = c.posix_fadvise(fd, @intCast(offset), @intCast(len), advice);
    setErrno(saved);
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
    var ts: linux.timespec = undefined;
    if (c.clock_gettime(CLOCK_REALTIME, &ts) != 0) return 0;
    return ts.sec;
}

/// Nanoseconds on CLOCK_MONOTONIC (through the vDSO where the kernel offers it: tens of
/// nanoseconds, no system call).
pub fn monotonicNs() u64 {
    var ts: linux.timespec = undefined;
    if (c.clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return 0;
    return @as(u64, @intCast(ts.sec)) *% std.time.ns_per_s +% @as(u64, @intCast(ts.nsec));
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
    if (c.unlinkat(dir, name, AT_REMOVEDIR) != 0) return error.Os;
}

/// Whether anything (a dangling symbolic link included) exists at `path`.
pub fn exists(path: [*:0]const u8) OsError!bool {
    return existsAt(AT_FDCWD, path);
}

/// Whether anything exists at `name` relative to directory `dir`, links not followed.
pub fn existsAt(dir: Fd, name: [*:0]const u8) OsError!bool {
    if (c.faccessat(dir, name, 0, AT_SYMLINK_NOFOLLOW) == 0) return true;
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
    const r = c.realpath(path, out) orelse return error.Os;
    return std.mem.sliceTo(r, 0);
}

/// Whether the directory `dir_path` holds a regular file `header.zrh`: a published store
/// (spec §7). Symbolic links are not followed for the header.
pub fn isStoreDir(dir_path: []const u8) bool {
    var buf: [path_bytes_max]u8 = undefined;
    const name = "/header.zrh";
    if (dir_path.len + name.len >= buf.len) return false;
    @memcpy(buf[0..dir_path.len], dir_path);
    @memcpy(buf[dir_path.len..][0..name.len], name);
    buf[dir_path.len + name.len] = 0;
    var stx: linux.Statx = undefined;
    const path_z = buf[0 .. dir_path.len + name.len :0];
    const rc = linux.statx(AT_FDCWD, path_z, AT_SYMLINK_NOFOLLOW, .{ .TYPE = true }, &stx);
    if (linux.errno(rc) != .SUCCESS) return false;
    return (@as(u32, stx.mode) & S_IFMT) == S_IFREG;
}

/// The entries of an open directory, "." and ".." left out. The stream reads through its own
/// duplicate of the descriptor, which stays the caller's to close.
pub const Dir = struct {
    handle: *anyopaque,

    pub fn open(fd: Fd) ?Dir {
        const copy_fd = c.dup(fd);
        if (copy_fd < 0) return null;
        const h = c.fdopendir(copy_fd) orelse {
            _ = c.close(copy_fd);
            return null;
        };
        return .{ .handle = h };
    }

    /// The next entry's name, valid until the next call; null at the end (or on an error).
    pub fn next(dir: *Dir) ?[:0]const u8 {
        while (c.readdir(dir.handle)) |entry| {
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

/// Renames `old` to `new`, failing with EEXIST instead of replacing anything at `new`.
/// Where the kernel or file system lacks RENAME_NOREPLACE, it falls back to an existence
/// check followed by rename(2); that fallback has a race window, which only matters on such
/// systems.
pub fn renameNoReplace(old: [*:0]const u8, new: [*:0]const u8) OsError!void {
    const rc = linux.renameat2(AT_FDCWD, old, AT_FDCWD, new, .{ .NOREPLACE = true });
    const e = linux.errno(rc);
    switch (e) {
        .SUCCESS => return,
        .NOSYS, .INVAL => {},
        else => {
            setErrno(@intCast(@backingInt(e)));
            return error.Os;
        },
    }
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

/// 64 random bits for temporary names: getrandom, or else time, address and a counter, which
/// are unique enough together with the process id that precedes them in the name.
pub fn randomU64() u64 {
    var value: u64 = 0;
    const rc = linux.getrandom(@ptrCast(&value), @sizeOf(u64), 0);
    if (linux.errno(rc) == .SUCCESS and rc == @sizeOf(u64)) return value;
    var ts: linux.timespec = undefined;
    _ = linux.clock_gettime(.REALTIME, &ts);
    const n = @atomicRmw(u64, &random_counter, .Add, 1, .monotonic);
    const t: u64 = @bitCast(@as(i64, ts.sec) *% 1_000_000_000 +% @as(i64, ts.nsec));
    return std.hash.XxHash64.hash(n, std.mem.asBytes(&t)) ^ @intFromPtr(&value);
}

/// Copies `src` into `dst` (same length, not overlapping) with the C library's copy routine.
/// The core is compiled for the baseline CPU, so a plain `@memcpy` becomes Zig's own 16-byte
/// SSE2 loop (compiler_rt provides `memcpy` inside the library); glibc picks its copy for the
/// running CPU (AVX2, `rep movsb`) when the library is loaded. glibc's `__mempcpy` (exported
/// since GLIBC_2.2.5, the same implementations as its memcpy) is called by that name because
/// LLVM would turn a call to `memcpy` or `mempcpy` back into the compiler_rt copy.
pub fn copy(dst: []u8, src: []const u8) void {
    std.debug.assert(dst.len == src.len);
    if (dst.len == 0) return;
    _ = c.__mempcpy(dst.ptr, src.ptr, dst.len);
}

/// Sleeps while the 32-bit word at `word` holds `expected` (or until woken); returns at once
/// if it holds something else. Spurious returns are possible: callers loop.
pub fn futexWait(word: *const std.atomic.Value(u32), expected: u32) void {
    _ = linux.futex_4arg(&word.raw, .{ .cmd = .WAIT, .private = true }, expected, null);
}

/// Wakes every thread sleeping in `futexWait` on `word`.
pub fn futexWake(word: *const std.atomic.Value(u32)) void {
    _ = linux.futex_3arg(&word.raw, .{ .cmd = .WAKE, .private = true }, std.math.maxInt(i32));
}

pub fn yield() void {
    _ = c.sched_yield();
}

extern "c" fn pthread_atfork(
    prepare: ?*const fn () callconv(.c) void,
    parent: ?*const fn () callconv(.c) void,
    child: ?*const fn () callconv(.c) void,
) c_int;
extern "c" fn pthread_once(once: *c_int, init: *const fn () callconv(.c) void) c_int;

/// How many fork() calls separate this process from the process that first called
/// `watchForks` (its children count 1, their children 2, ...). A value remembered with some
/// state tells whether the state was made by this process or inherited by fork, in which case
/// the threads that it counts do not exist here.
var fork_generation: std.atomic.Value(u32) = .init(0);
/// glibc's pthread_once_t is an int, PTHREAD_ONCE_INIT 0.
var fork_watch_once: c_int = 0;

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
const sc_pagesize: c_int = 30; // _SC_PAGESIZE on Linux (glibc and musl)
const sc_phys_pages: c_int = 85; // _SC_PHYS_PAGES on Linux (glibc and musl)

/// The machine's physical memory in bytes, or null where sysconf cannot tell.
pub fn physicalMemoryBytes() ?u64 {
    const pages = sysconf(sc_phys_pages);
    const size = sysconf(sc_pagesize);
    if (pages <= 0 or size <= 0) return null;
    return @as(u64, @intCast(pages)) *| @as(u64, @intCast(size));
}

var cpu_count_cached: usize = 0;

/// Logical CPUs this process may run on (at least 1), cached after the first call.
pub fn cpuCount() usize {
    const cached = @atomicLoad(usize, &cpu_count_cached, .monotonic);
    if (cached != 0) return cached;
    const n = std.Thread.getCpuCount() catch 1;
    const v = @max(n, 1);
    @atomicStore(usize, &cpu_count_cached, v, .monotonic);
    return v;
}

test "sys wrappers report errno" {
    try std.testing.expectError(error.Os, open("/nonexistent-zrecord-path/x", O_RDONLY, 0));
    try std.testing.expectEqual(ENOENT, errno());
    try std.testing.expect(!(try exists("/nonexistent-zrecord-path")));
    try std.testing.expect(try exists("/"));
    try std.testing.expect(cpuCount() >= 1);
    try std.testing.expect(physicalMemoryBytes().? >= 64 << 20);
    try std.testing.expect(randomU64() != randomU64());
}
