//! The OS layer of the core: thin wrappers over the C library, one small interface per concern
//! (publish without replacing, durable write and flush, reads around the page cache, read
//! advice, mappings, random bytes, sleeping on a word, file identity).
//!
//! Invariants:
//! - What is the same on every POSIX system (open, pread, pwrite, mmap, flock, ...) is here;
//!   what differs (the ABI's constants, and each concern whose fast path is the system's own
//!   call) is in the system's half, `sys_linux.zig` or `sys_macos.zig`, which export the same
//!   names. Callers use only this file.
//! - The C library functions are declared by hand (Zig 0.17 has no @cImport, and the std file
//!   API changes between releases), except the few whose symbol name differs between
//!   architectures of one system, which come from std.c.
//! - Every wrapper either succeeds or returns `error.Os` with the thread's errno describing the
//!   failure; callers read it with `errno()` immediately, before any other C call.
//! - EINTR is retried here, so callers never see it.
//! - Nothing here allocates or panics.

const std = @import("std");
const builtin = @import("builtin");

/// The system's half of the layer.
const os = switch (builtin.os.tag) {
    .linux => @import("sys_linux.zig"),
    .macos => @import("sys_macos.zig"),
    else => @compileError("zrecord: the core has no OS layer for " ++ @tagName(builtin.os.tag)),
};

pub const OsError = error{Os};

pub const Fd = c_int;

pub const IoVec = extern struct {
    base: [*]const u8,
    len: usize,
};

const c = struct {
    extern "c" fn openat(dirfd: c_int, path: [*:0]const u8, flags: c_int, ...) c_int;
    extern "c" fn close(fd: c_int) c_int;
    extern "c" fn pread(fd: c_int, buf: [*]u8, count: usize, offset: i64) isize;
    extern "c" fn pwrite(fd: c_int, buf: [*]const u8, count: usize, offset: i64) isize;
    extern "c" fn pwritev(fd: c_int, iov: [*]const IoVec, iovcnt: c_int, offset: i64) isize;
    extern "c" fn lseek(fd: c_int, offset: i64, whence: c_int) i64;
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
};

pub const O_RDONLY: c_int = 0;
pub const O_WRONLY: c_int = 1;
pub const O_RDWR: c_int = 2;
pub const O_CREAT: c_int = os.O_CREAT;
pub const O_EXCL: c_int = os.O_EXCL;
pub const O_CLOEXEC: c_int = os.O_CLOEXEC;
/// Has no effect on regular files; the reader opens store files with it so that a FIFO put in
/// a file's place is refused instead of blocking open forever.
pub const O_NONBLOCK: c_int = os.O_NONBLOCK;
pub const O_DIRECTORY: c_int = os.O_DIRECTORY;
/// open(2) fails with ELOOP instead of following a symbolic link in the last component.
pub const O_NOFOLLOW: c_int = os.O_NOFOLLOW;

/// The alignment of reads around the page cache (`openDirectAt`): a multiple of the 512- and
/// 4096-byte logical blocks of disks, and of the page size of x86_64.
pub const direct_align_bytes: usize = 4096;

pub const AT_FDCWD: c_int = os.AT_FDCWD;
pub const LOCK_EX: c_int = 2;
pub const LOCK_NB: c_int = 4;
pub const LOCK_UN: c_int = 8;
/// PATH_MAX of the system, terminating NUL included.
pub const path_bytes_max: usize = os.path_bytes_max;
const PROT_READ: c_int = 1;
const PROT_WRITE: c_int = 2;
const MAP_SHARED: c_int = 1;
const MAP_PRIVATE: c_int = 2;
pub const MADV_RANDOM: c_int = 1;
const CLOCK_REALTIME: c_int = 0;
const SEEK_END: c_int = 2;
const S_IFMT: u32 = 0o170000;
const S_IFREG: u32 = 0o100000;
const S_IFDIR: u32 = 0o040000;

/// Advice on how a file's bytes will be read (`fadvise`, `fadviseRange`).
pub const Advice = enum {
    /// In no particular order: no read-ahead.
    random,
    /// Soon: start reading them into the page cache without waiting.
    willneed,
    /// Not again: their cached pages may go (a no-op where the system has no such advice).
    dontneed,
};

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
pub const ENOSYS: i32 = os.ENOSYS;
pub const ENOTEMPTY: i32 = os.ENOTEMPTY;
pub const ELOOP: i32 = os.ELOOP;
pub const ENAMETOOLONG: i32 = os.ENAMETOOLONG;
/// flock(2)'s "held by another open file" (EAGAIN, the same code on Linux and macOS).
pub const EWOULDBLOCK: i32 = os.EWOULDBLOCK;

/// Largest single read or write Linux performs (0x7ffff000); larger requests are looped.
const io_chunk_bytes_max: usize = 0x7fff_f000;

pub fn errno() i32 {
    return os.errnoLocation().*;
}

pub fn setErrno(value: i32) void {
    os.errnoLocation().* = value;
}

/// The C library's description of an errno.
pub const errnoText = os.errnoText;

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

/// The file's data and metadata on stable storage (on macOS, F_FULLFSYNC: past the drive's
/// write cache).
pub const fsync = os.fsyncFd;

/// Opens `name` in `dir` for reads and writes around the page cache: O_DIRECT on Linux (the
/// buffers, offsets and lengths then aligned to `direct_align_bytes`), F_NOCACHE on macOS.
/// Fails (errno EINVAL) where the file system cannot.
pub const openDirectAt = os.openDirectAt;

/// Turns reads and writes around the page cache (`openDirectAt`) on or off for an open file.
/// Fails (errno EINVAL) where the file system cannot write around its page cache.
pub const setDirect = os.setDirect;

/// What reads and writes around the page cache ask of buffer addresses and file offsets and
/// lengths on an open file, as statx(STATX_DIOALIGN) reports it (Linux 6.1 and later): `null`
/// where the system or the file system does not say (always on macOS, whose F_NOCACHE asks
/// for no alignment), a result with `offset == 0` where direct I/O is unsupported.
pub const DirectIoAlignment = struct { memory: u32, offset: u32 };

pub const directIoAlignment = os.directIoAlignment;

/// Whether the open file lives on a file system held in memory (tmpfs, ramfs), whose writes
/// never reach a device.
pub const isMemoryFs = os.isMemoryFs;

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

/// The kind of file that the type bits of a st_mode say.
pub fn kindOfMode(mode: u32) FileKind {
    return switch (mode & S_IFMT) {
        S_IFREG => .regular,
        S_IFDIR => .directory,
        else => .other,
    };
}

/// The size of an open file, by lseek(SEEK_END).
pub fn seekEnd(fd: Fd) OsError!u64 {
    const end = c.lseek(fd, 0, SEEK_END);
    if (end < 0) return error.Os;
    return @intCast(end);
}

/// The size, type, owner and permissions of an open file (statx on Linux, where an old kernel
/// without it gives the size only).
pub const fstat = os.fstat;

/// `fstat` of the entry `name` of the directory `dir`, not following a symbolic link (a link
/// is `.other`).
pub const fstatAt = os.fstatAt;

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
pub const fdPath = os.fdPath;

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

/// The identity of an open file.
pub const fileIdentity = os.fileIdentity;

/// An anonymous file, closed on exec: shared by the processes that map it (forked children
/// inherit the mapping), gone with its last descriptor and mapping (memfd_create on Linux; on
/// macOS a temporary file unlinked at once).
pub const memfd = os.memfd;

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

/// Asks the kernel to start writing back [offset, offset + len) of `fd` without waiting
/// (sync_file_range with SYNC_FILE_RANGE_WRITE on Linux; nothing on macOS). A hint: failure
/// is ignored, errno is kept, and durability still comes from fsync.
pub fn startWriteback(fd: Fd, offset: u64, len: u64) void {
    if (len == 0) return;
    const saved = errno();
    os.startWriteback(fd, offset, len);
    setErrno(saved);
}

/// Advice on the whole file. Only a hint: failure is ignored and errno kept.
pub fn fadvise(fd: Fd, advice: Advice) void {
    const saved = errno();
    os.fadviseRange(fd, 0, 0, advice);
    setErrno(saved);
}

/// Advice on the byte range [offset, offset + len) of `fd` (`willneed` starts reading it into
/// the page cache and returns without waiting for the reads). Only a hint: failure is ignored
/// and errno kept.
pub fn fadviseRange(fd: Fd, offset: u64, len: u64, advice: Advice) void {
    if (len == 0) return;
    const saved = errno();
    os.fadviseRange(fd, offset, len, advice);
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

/// Whether the directory `dir_path` holds a regular file `header.zrh`: a published store
/// (spec §7). Symbolic links are not followed for the header.
pub fn isStoreDir(dir_path: []const u8) bool {
    var buf: [path_bytes_max]u8 = undefined;
    const name = "/header.zrh";
    if (dir_path.len + name.len >= buf.len) return false;
    @memcpy(buf[0..dir_path.len], dir_path);
    @memcpy(buf[dir_path.len..][0..name.len], name);
    buf[dir_path.len + name.len] = 0;
    const mode = os.modeAt(buf[0 .. dir_path.len + name.len :0]) orelse return false;
    return kindOfMode(mode) == .regular;
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

/// Copies `src` into `dst` (same length, not overlapping) with the C library's copy routine
/// where it is faster. The core is compiled for the baseline CPU, so a plain `@memcpy` becomes
/// Zig's own 16-byte SSE2 loop (compiler_rt provides `memcpy` inside the library); glibc picks
/// its copy for the running CPU (AVX2, `rep movsb`) when the library is loaded.
pub fn copy(dst: []u8, src: []const u8) void {
    std.debug.assert(dst.len == src.len);
    if (dst.len == 0) return;
    os.copy(dst, src);
}

/// Sleeps while the 32-bit word at `word` holds `expected` (or until woken); returns at once
/// if it holds something else. Spurious returns are possible: callers loop.
pub const futexWait = os.futexWait;

/// Wakes every thread sleeping in `futexWait` on `word`.
pub const futexWake = os.futexWake;

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
