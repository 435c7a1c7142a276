//! The OS layer of the core: thin wrappers over the C library, one small interface per concern
//! (publish without replacing, durable write and flush, reads around the page cache, read
//! advice, mappings, random bytes, sleeping on a word, file identity).
//!
//! Invariants:
//! - Callers use only this file: it names every wrapper and constant. What is the same on
//!   every POSIX system (open, pread, pwrite, mmap, flock, ...) is implemented once, in
//!   `sys_posix.zig`; what differs (the ABI's constants, and each concern whose fast path is
//!   the system's own call) in the system's half, `sys_linux.zig` or `sys_macos.zig`, which
//!   export the same names. `sys_windows.zig` serves both parts on Windows, where files are
//!   handles, not descriptors.
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
    .windows => @import("sys_windows.zig"),
    else => @compileError("zrecord: the core has no OS layer for " ++ @tagName(builtin.os.tag)),
};

/// What every POSIX system has in common; Windows' half serves both parts.
const base = if (builtin.os.tag == .windows) os else @import("sys_posix.zig");

// Descriptors, errno, reads and writes, mappings, directories, locks, fork tracking
// (sys_posix.zig documents each).
pub const errno = base.errno;
pub const setErrno = base.setErrno;
pub const open = base.open;
pub const openAt = base.openAt;
pub const close = base.close;
pub const preadAll = base.preadAll;
pub const preadSome = base.preadSome;
pub const pwriteAll = base.pwriteAll;
pub const pwritevAll = base.pwritevAll;
pub const setFileSize = base.setFileSize;
pub const seekEnd = base.seekEnd;
pub const geteuid = base.geteuid;
pub const touch = base.touch;
pub const makeReadOnly = base.makeReadOnly;
pub const read_only_files = base.read_only_files;
pub const rename = base.rename;
pub const mkdirAll = base.mkdirAll;
pub const mmapRead = base.mmapRead;
pub const mmapSparse = base.mmapSparse;
pub const munmap = base.munmap;
pub const madvise = base.madvise;
pub const resident = base.resident;
pub const nowSeconds = base.nowSeconds;
pub const monotonicNs = base.monotonicNs;
pub const sleepNs = base.sleepNs;
pub const mkdir = base.mkdir;
pub const rmdir = base.rmdir;
pub const unlinkAt = base.unlinkAt;
pub const rmdirAt = base.rmdirAt;
pub const exists = base.exists;
pub const existsAt = base.existsAt;
pub const flock = base.flock;
pub const realpath = base.realpath;
pub const Dir = base.Dir;
pub const renameNoReplace = base.renameNoReplace;
pub const getpid = base.getpid;
pub const randomU64 = base.randomU64;
pub const yield = base.yield;
pub const watchForks = base.watchForks;
pub const forkGeneration = base.forkGeneration;
pub const physicalMemoryBytes = base.physicalMemoryBytes;

pub const OsError = error{Os};

/// An open file or directory.
pub const Fd = base.Fd;
/// No open file: what a descriptor field holds before open and after close.
pub const invalid_fd: Fd = base.invalid_fd;

pub const IoVec = extern struct {
    base: [*]const u8,
    len: usize,
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

pub const AT_FDCWD: Fd = os.AT_FDCWD;
pub const LOCK_EX: c_int = 2;
pub const LOCK_NB: c_int = 4;
pub const LOCK_UN: c_int = 8;
/// PATH_MAX of the system, terminating NUL included.
pub const path_bytes_max: usize = os.path_bytes_max;
pub const MADV_RANDOM: c_int = 1;
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
/// flock(2)'s "held by another open file" (EAGAIN, the same code on Linux and macOS; a lock
/// violation of LockFileEx on Windows).
pub const EWOULDBLOCK: i32 = os.EWOULDBLOCK;

/// The kind of file that the type bits of a st_mode say.
pub fn kindOfMode(mode: u32) FileKind {
    const S_IFMT: u32 = 0o170000;
    const S_IFREG: u32 = 0o100000;
    const S_IFDIR: u32 = 0o040000;
    return switch (mode & S_IFMT) {
        S_IFREG => .regular,
        S_IFDIR => .directory,
        else => .other,
    };
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
    const st = fstatAt(AT_FDCWD, buf[0 .. dir_path.len + name.len :0]) catch return false;
    return st.kind == .regular;
}

/// The C library's description of an errno.
pub const errnoText = os.errnoText;

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

/// The size, type, owner and permissions of an open file (statx on Linux, where an old kernel
/// without it gives the size only).
pub const fstat = os.fstat;

/// `fstat` of the entry `name` of the directory `dir`, not following a symbolic link (a link
/// is `.other`).
pub const fstatAt = os.fstatAt;

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
