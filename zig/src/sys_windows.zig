//! The Windows half of the OS layer (`sys.zig`), for Windows 10 and later on x86-64: both the
//! part that POSIX systems share (`sys_posix.zig`) and the system's own (`sys_linux.zig`),
//! over the Win32 API (kernel32; ntdll for sleeping on a word, advapi32 for random bytes).
//!
//! How each concern is served:
//! - a descriptor is a HANDLE; a path relative to a directory handle is resolved against the
//!   directory's final path (GetFinalPathNameByHandleW), since Win32 has no openat;
//! - errno is this layer's own thread-local value, set from GetLastError by a fixed table
//!   (`errnoOf`), with the C runtime's numbers (ENOENT 2, EEXIST 17, ...);
//! - publish without replacing: MoveFileExW without MOVEFILE_REPLACE_EXISTING;
//! - durable flush: FlushFileBuffers (a directory needs none: NTFS journals its entries);
//! - reads around the cache: FILE_FLAG_NO_BUFFERING at open (it cannot be turned on later, so
//!   `setDirect(true)` fails with EINVAL and the durable writer writes through the cache);
//! - mappings: CreateFileMappingW and MapViewOfFile. Windows refuses to shrink a file while a
//!   view of it exists (ERROR_USER_MAPPED_FILE), so the SIGBUS guard has nothing to catch here
//!   (sigbus_guard.c runs the body unguarded); an I/O error under a view of a network file
//!   raises EXCEPTION_IN_PAGE_ERROR, which nothing catches;
//! - locks: LockFileEx on one byte far beyond any data, so that reads are never blocked;
//! - no fork: `watchForks` does nothing and the generation stays 0;
//! - owners and modes: Windows files have ACLs, not a uid and mode bits; `fstat` reports the
//!   caller's own uid and mode 0600 (0400 for a read-only file), so the index cache's owner
//!   check always passes there and the profile folder's ACL is what protects the cache.
//!
//! Invariants: those of `sys.zig`. Compiled and tested in CI (`nox -s windows`: the Zig suite
//! under Wine); the tests that need fork, FIFOs, symbolic links, chmod or truncating a mapped
//! file are skipped there.

const std = @import("std");
const sys = @import("sys.zig");

pub const Fd = *anyopaque;
pub const invalid_fd: Fd = @ptrFromInt(std.math.maxInt(usize)); // INVALID_HANDLE_VALUE
const OsError = sys.OsError;
const IoVec = sys.IoVec;
const FileKind = sys.FileKind;
const FileStat = sys.FileStat;
const FileIdentity = sys.FileIdentity;
const Advice = sys.Advice;

// Open flags: this layer's own bits, translated by `openAt`.
pub const O_CREAT: c_int = 0x100;
pub const O_EXCL: c_int = 0x200;
pub const O_CLOEXEC: c_int = 0; // handles are not inherited unless asked for
pub const O_NONBLOCK: c_int = 0; // a FIFO cannot take a file's name on Windows
pub const O_DIRECTORY: c_int = 0x1000;
pub const O_NOFOLLOW: c_int = 0x2000;
const O_DIRECT: c_int = 0x4000;

/// The current directory, for `openAt`: a value no handle takes (handles are multiples of 4).
pub const AT_FDCWD: Fd = @ptrFromInt(std.math.maxInt(usize) - 99);
/// The longest path in UTF-8 bytes, terminating NUL included (Windows allows 32,767 UTF-16
/// units with the \\?\ prefix; the core's buffers stay those of Linux).
pub const path_bytes_max: usize = 4096;
pub const MAP_ANONYMOUS: c_int = 0;
pub const MAP_NORESERVE: c_int = 0;

// The C runtime's errno numbers where they differ from Linux.
pub const ENOSYS: i32 = 40;
pub const ENOTEMPTY: i32 = 41;
pub const ELOOP: i32 = 114;
pub const ENAMETOOLONG: i32 = 38;
pub const EWOULDBLOCK: i32 = 140;
const EACCES: i32 = 13;
const EBADF: i32 = 9;
const EBUSY: i32 = 16;
const EXDEV: i32 = 18;
const ENOSPC: i32 = 28;

const BOOL = c_int;
const DWORD = u32;
const WCHAR = u16;

const FILETIME = extern struct { low: DWORD, high: DWORD };
const OVERLAPPED = extern struct {
    internal: usize = 0,
    internal_high: usize = 0,
    offset: DWORD = 0,
    offset_high: DWORD = 0,
    event: ?*anyopaque = null,
};
const ByHandleFileInformation = extern struct {
    attributes: DWORD,
    creation: FILETIME,
    last_access: FILETIME,
    last_write: FILETIME,
    volume_serial: DWORD,
    size_high: DWORD,
    size_low: DWORD,
    links: DWORD,
    index_high: DWORD,
    index_low: DWORD,
};
const FileBasicInfo = extern struct {
    creation: i64,
    last_access: i64,
    last_write: i64,
    change: i64,
    attributes: DWORD,
};
const Win32FindDataW = extern struct {
    attributes: DWORD,
    creation: FILETIME,
    last_access: FILETIME,
    last_write: FILETIME,
    size_high: DWORD,
    size_low: DWORD,
    reserved0: DWORD,
    reserved1: DWORD,
    name: [260]WCHAR,
    alternate: [14]WCHAR,
};
const MemoryBasicInformation = extern struct {
    base: ?*anyopaque,
    allocation_base: ?*anyopaque,
    allocation_protect: DWORD,
    partition_id: u16,
    region_size: usize,
    state: DWORD,
    protect: DWORD,
    kind: DWORD,
};
const MemoryStatusEx = extern struct {
    length: DWORD,
    load: DWORD,
    total_phys: u64,
    avail_phys: u64,
    total_page_file: u64,
    avail_page_file: u64,
    total_virtual: u64,
    avail_virtual: u64,
    avail_extended_virtual: u64,
};

const k = struct {
    extern "kernel32" fn CreateFileW(
        name: [*:0]const WCHAR,
        access: DWORD,
        share: DWORD,
        sa: ?*anyopaque,
        disposition: DWORD,
        flags: DWORD,
        template: ?*anyopaque,
    ) callconv(.winapi) Fd;
    extern "kernel32" fn CloseHandle(h: Fd) callconv(.winapi) BOOL;
    extern "kernel32" fn ReadFile(h: Fd, buf: [*]u8, n: DWORD, done: ?*DWORD, ov: ?*OVERLAPPED) callconv(.winapi) BOOL;
    extern "kernel32" fn WriteFile(
        h: Fd,
        buf: [*]const u8,
        n: DWORD,
        done: ?*DWORD,
        ov: ?*OVERLAPPED,
    ) callconv(.winapi) BOOL;
    extern "kernel32" fn GetLastError() callconv(.winapi) DWORD;
    extern "kernel32" fn FlushFileBuffers(h: Fd) callconv(.winapi) BOOL;
    extern "kernel32" fn GetFileSizeEx(h: Fd, size: *i64) callconv(.winapi) BOOL;
    extern "kernel32" fn GetFileInformationByHandle(h: Fd, info: *ByHandleFileInformation) callconv(.winapi) BOOL;
    extern "kernel32" fn GetFileInformationByHandleEx(
        h: Fd,
        class: c_int,
        info: *anyopaque,
        size: DWORD,
    ) callconv(.winapi) BOOL;
    extern "kernel32" fn SetFileInformationByHandle(
        h: Fd,
        class: c_int,
        info: *anyopaque,
        size: DWORD,
    ) callconv(.winapi) BOOL;
    extern "kernel32" fn SetFileTime(
        h: Fd,
        c: ?*const FILETIME,
        a: ?*const FILETIME,
        w: ?*const FILETIME,
    ) callconv(.winapi) BOOL;
    extern "kernel32" fn GetSystemTimeAsFileTime(ft: *FILETIME) callconv(.winapi) void;
    extern "kernel32" fn QueryPerformanceCounter(count: *i64) callconv(.winapi) BOOL;
    extern "kernel32" fn QueryPerformanceFrequency(freq: *i64) callconv(.winapi) BOOL;
    extern "kernel32" fn Sleep(ms: DWORD) callconv(.winapi) void;
    extern "kernel32" fn SwitchToThread() callconv(.winapi) BOOL;
    extern "kernel32" fn GetCurrentProcessId() callconv(.winapi) DWORD;
    extern "kernel32" fn CreateDirectoryW(name: [*:0]const WCHAR, sa: ?*anyopaque) callconv(.winapi) BOOL;
    extern "kernel32" fn RemoveDirectoryW(name: [*:0]const WCHAR) callconv(.winapi) BOOL;
    extern "kernel32" fn DeleteFileW(name: [*:0]const WCHAR) callconv(.winapi) BOOL;
    extern "kernel32" fn MoveFileExW(old: [*:0]const WCHAR, new: [*:0]const WCHAR, flags: DWORD) callconv(.winapi) BOOL;
    extern "kernel32" fn GetFileAttributesW(name: [*:0]const WCHAR) callconv(.winapi) DWORD;
    extern "kernel32" fn GetFinalPathNameByHandleW(
        h: Fd,
        buf: [*]WCHAR,
        n: DWORD,
        flags: DWORD,
    ) callconv(.winapi) DWORD;
    extern "kernel32" fn CreateFileMappingW(
        h: Fd,
        sa: ?*anyopaque,
        protect: DWORD,
        hi: DWORD,
        lo: DWORD,
        name: ?[*:0]const WCHAR,
    ) callconv(.winapi) ?Fd;
    extern "kernel32" fn MapViewOfFile(
        h: Fd,
        access: DWORD,
        hi: DWORD,
        lo: DWORD,
        n: usize,
    ) callconv(.winapi) ?*anyopaque;
    extern "kernel32" fn UnmapViewOfFile(p: *const anyopaque) callconv(.winapi) BOOL;
    extern "kernel32" fn VirtualAlloc(
        p: ?*anyopaque,
        n: usize,
        kind: DWORD,
        protect: DWORD,
    ) callconv(.winapi) ?*anyopaque;
    extern "kernel32" fn VirtualFree(p: *anyopaque, n: usize, kind: DWORD) callconv(.winapi) BOOL;
    extern "kernel32" fn VirtualQuery(
        p: *const anyopaque,
        info: *MemoryBasicInformation,
        n: usize,
    ) callconv(.winapi) usize;
    extern "kernel32" fn LockFileEx(
        h: Fd,
        flags: DWORD,
        reserved: DWORD,
        lo: DWORD,
        hi: DWORD,
        ov: *OVERLAPPED,
    ) callconv(.winapi) BOOL;
    extern "kernel32" fn UnlockFileEx(
        h: Fd,
        reserved: DWORD,
        lo: DWORD,
        hi: DWORD,
        ov: *OVERLAPPED,
    ) callconv(.winapi) BOOL;
    extern "kernel32" fn FindFirstFileW(pattern: [*:0]const WCHAR, data: *Win32FindDataW) callconv(.winapi) Fd;
    extern "kernel32" fn FindNextFileW(h: Fd, data: *Win32FindDataW) callconv(.winapi) BOOL;
    extern "kernel32" fn FindClose(h: Fd) callconv(.winapi) BOOL;
    extern "kernel32" fn GetTempPathW(n: DWORD, buf: [*]WCHAR) callconv(.winapi) DWORD;
    extern "kernel32" fn GlobalMemoryStatusEx(status: *MemoryStatusEx) callconv(.winapi) BOOL;
    extern "ntdll" fn RtlWaitOnAddress(
        addr: *const anyopaque,
        cmp: *const anyopaque,
        size: usize,
        timeout: ?*const i64,
    ) callconv(.winapi) c_int;
    extern "ntdll" fn RtlWakeAddressAll(addr: *const anyopaque) callconv(.winapi) void;
    extern "advapi32" fn SystemFunction036(buf: [*]u8, n: DWORD) callconv(.winapi) u8;
};

const GENERIC_READ: DWORD = 0x8000_0000;
const GENERIC_WRITE: DWORD = 0x4000_0000;
const FILE_READ_ATTRIBUTES: DWORD = 0x80;
const SHARE_ALL: DWORD = 0x7; // read, write, delete
const CREATE_NEW: DWORD = 1;
const OPEN_EXISTING: DWORD = 3;
const OPEN_ALWAYS: DWORD = 4;
const ATTRIBUTE_READONLY: DWORD = 0x1;
const ATTRIBUTE_DIRECTORY: DWORD = 0x10;
const ATTRIBUTE_NORMAL: DWORD = 0x80;
const ATTRIBUTE_TEMPORARY: DWORD = 0x100;
const ATTRIBUTE_REPARSE_POINT: DWORD = 0x400;
const INVALID_ATTRIBUTES: DWORD = 0xFFFF_FFFF;
const FLAG_NO_BUFFERING: DWORD = 0x2000_0000;
const FLAG_BACKUP_SEMANTICS: DWORD = 0x0200_0000;
const FLAG_OPEN_REPARSE_POINT: DWORD = 0x0020_0000;
const FLAG_DELETE_ON_CLOSE: DWORD = 0x0400_0000;
const MOVEFILE_REPLACE_EXISTING: DWORD = 0x1;
const PAGE_READONLY: DWORD = 0x2;
const PAGE_READWRITE: DWORD = 0x4;
const FILE_MAP_READ: DWORD = 0x4;
const MEM_COMMIT_RESERVE: DWORD = 0x3000;
const MEM_RELEASE: DWORD = 0x8000;
const MEM_MAPPED: DWORD = 0x40000;
const LOCKFILE_FAIL_IMMEDIATELY: DWORD = 0x1;
const LOCKFILE_EXCLUSIVE_LOCK: DWORD = 0x2;
const FILE_BASIC_INFO_CLASS: c_int = 0;
const FILE_DISPOSITION_INFO_CLASS: c_int = 4;
const FILE_END_OF_FILE_INFO_CLASS: c_int = 6;
const FILE_DISPOSITION_INFO_EX_CLASS: c_int = 21;
const DISPOSITION_DELETE: DWORD = 0x1;
const DISPOSITION_POSIX_SEMANTICS: DWORD = 0x2;
const DISPOSITION_IGNORE_READONLY: DWORD = 0x10;
const DELETE: DWORD = 0x10000;
/// Seconds from 1601-01-01 (FILETIME's epoch) to 1970-01-01.
const epoch_gap_s: i64 = 11_644_473_600;

threadlocal var errno_value: c_int = 0;

pub fn errno() i32 {
    return errno_value;
}

pub fn setErrno(value: i32) void {
    errno_value = value;
}

/// The errno that stands for a Win32 error code.
fn errnoOf(code: DWORD) i32 {
    return switch (code) {
        2, 3, 15, 161 => sys.ENOENT, // file, path, drive not found; bad path name
        5, 19, 1314 => EACCES, // access denied, write-protected, privilege not held
        6 => EBADF,
        8, 14 => sys.ENOMEM,
        17 => EXDEV,
        32 => EBUSY, // a sharing violation
        33, 158 => EWOULDBLOCK, // a lock violation, not locked
        38 => sys.EIO, // the end of the file
        39, 112 => ENOSPC,
        50, 87, 1, 120 => sys.EINVAL, // not supported, bad parameter, bad function, no such call
        80, 183 => sys.EEXIST,
        145 => ENOTEMPTY,
        206 => ENAMETOOLONG,
        267 => sys.ENOTDIR,
        1921 => ELOOP, // a link that cannot be resolved
        else => sys.EIO,
    };
}

fn failLast() OsError {
    errno_value = errnoOf(k.GetLastError());
    return error.Os;
}

fn failWith(e: i32) OsError {
    errno_value = e;
    return error.Os;
}

pub fn errnoText(value: i32, buf: *[128]u8) []const u8 {
    _ = buf;
    return switch (value) {
        sys.EPERM => "Operation not permitted",
        sys.ENOENT => "No such file or directory",
        sys.EIO => "Input/output error",
        EBADF => "Bad file descriptor",
        sys.ENOMEM => "Not enough memory",
        EACCES => "Permission denied",
        EBUSY => "Resource busy (a sharing violation)",
        sys.EEXIST => "File exists",
        EXDEV => "Not the same device",
        sys.ENOTDIR => "Not a directory",
        sys.EISDIR => "Is a directory",
        sys.EINVAL => "Invalid argument",
        ENOSPC => "No space left on device",
        ENAMETOOLONG => "File name too long",
        ENOSYS => "Function not implemented",
        ENOTEMPTY => "Directory not empty",
        ELOOP => "A symbolic link where none is followed",
        EWOULDBLOCK => "Held by another open file",
        else => "unknown error",
    };
}

// ---- paths -------------------------------------------------------------------------------

/// A NUL-terminated UTF-16 path.
const WPath = struct {
    buf: [path_bytes_max + 8]WCHAR = undefined,
    len: usize = 0,

    fn z(p: *const WPath) [*:0]const WCHAR {
        return @ptrCast(&p.buf);
    }
};

fn isAbsolute(path: []const u8) bool {
    if (path.len >= 1 and (path[0] == '/' or path[0] == '\\')) return true;
    return path.len >= 2 and path[1] == ':';
}

/// `name` in UTF-16 (slashes made backslashes), after the final path of `dir` unless `dir` is
/// AT_FDCWD or `name` is absolute.
fn widePath(dir: Fd, name: []const u8, out: *WPath) OsError!void {
    out.len = 0;
    if (dir != AT_FDCWD and !isAbsolute(name)) {
        out.len = try finalPath(dir, &out.buf);
        if (out.len + 1 >= out.buf.len) return failWith(ENAMETOOLONG);
        out.buf[out.len] = '\\';
        out.len += 1;
    }
    const room = out.buf.len - out.len - 1;
    const n = std.unicode.calcUtf16LeLen(name) catch return failWith(sys.EINVAL);
    if (n > room) return failWith(ENAMETOOLONG);
    _ = std.unicode.utf8ToUtf16Le(out.buf[out.len..], name) catch return failWith(sys.EINVAL);
    for (out.buf[out.len..][0..n]) |*c| {
        if (c.* == '/') c.* = '\\';
    }
    out.len += n;
    out.buf[out.len] = 0;
}

/// The final path of an open file or directory, \\?\ form, in UTF-16; its length.
fn finalPath(h: Fd, buf: []WCHAR) OsError!usize {
    const n = k.GetFinalPathNameByHandleW(h, buf.ptr, @intCast(buf.len), 0);
    if (n == 0) return failLast();
    if (n >= buf.len) return failWith(ENAMETOOLONG);
    return n;
}

/// The final path of `h` in UTF-8, without the \\?\ prefix (\\?\UNC\ becomes \\).
fn finalPathUtf8(h: Fd, out: []u8) ?[]const u8 {
    var wide: [path_bytes_max]WCHAR = undefined;
    var n = finalPath(h, &wide) catch return null;
    var start: usize = 0;
    const unc = std.unicode.utf8ToUtf16LeStringLiteral("\\\\?\\UNC\\");
    const long = std.unicode.utf8ToUtf16LeStringLiteral("\\\\?\\");
    if (std.mem.startsWith(WCHAR, wide[0..n], unc)) {
        start = unc.len - 2;
        wide[start] = '\\';
        wide[start + 1] = '\\';
    } else if (std.mem.startsWith(WCHAR, wide[0..n], long)) {
        start = long.len;
    }
    n -= start;
    const len = std.unicode.utf16LeToUtf8(out, wide[start..][0..n]) catch return null;
    if (len >= out.len) return null;
    out[len] = 0;
    return out[0..len];
}

// ---- descriptors -------------------------------------------------------------------------

pub fn open(path: [*:0]const u8, flags: c_int, mode: c_uint) OsError!Fd {
    return openAt(AT_FDCWD, path, flags, mode);
}

pub fn openAt(dir: Fd, path: [*:0]const u8, flags: c_int, mode: c_uint) OsError!Fd {
    _ = mode;
    var wide: WPath = .{};
    try widePath(dir, std.mem.sliceTo(path, 0), &wide);
    const access: DWORD = switch (flags & 3) {
        sys.O_WRONLY => GENERIC_WRITE,
        sys.O_RDWR => GENERIC_READ | GENERIC_WRITE,
        else => GENERIC_READ,
    };
    const disposition: DWORD = if (flags & O_CREAT == 0)
        OPEN_EXISTING
    else if (flags & O_EXCL != 0) CREATE_NEW else OPEN_ALWAYS;
    var attrs: DWORD = ATTRIBUTE_NORMAL | FLAG_BACKUP_SEMANTICS;
    if (flags & O_NOFOLLOW != 0) attrs |= FLAG_OPEN_REPARSE_POINT;
    if (flags & O_DIRECT != 0) attrs |= FLAG_NO_BUFFERING;
    const h = k.CreateFileW(wide.z(), access, SHARE_ALL, null, disposition, attrs, null);
    if (h == invalid_fd) return failLast();
    var info: ByHandleFileInformation = undefined;
    if (k.GetFileInformationByHandle(h, &info) == 0) {
        const e = failLast();
        _ = k.CloseHandle(h);
        return e;
    }
    const want_dir = flags & O_DIRECTORY != 0;
    const is_dir = info.attributes & ATTRIBUTE_DIRECTORY != 0;
    var refuse: i32 = 0;
    if (flags & O_NOFOLLOW != 0 and info.attributes & ATTRIBUTE_REPARSE_POINT != 0) refuse = ELOOP;
    if (want_dir and !is_dir) refuse = sys.ENOTDIR;
    if (!want_dir and is_dir and flags & 3 != sys.O_RDONLY) refuse = sys.EISDIR;
    if (refuse != 0) {
        _ = k.CloseHandle(h);
        return failWith(refuse);
    }
    return h;
}

pub fn close(fd: Fd) void {
    _ = k.CloseHandle(fd);
}

/// Largest single read or write asked of ReadFile/WriteFile, as on Linux.
const io_chunk_bytes_max: usize = 0x7fff_f000;

fn at(offset: u64) OVERLAPPED {
    return .{ .offset = @truncate(offset), .offset_high = @truncate(offset >> 32) };
}

pub fn preadSome(fd: Fd, buf: []u8, offset: u64) OsError!usize {
    var ov = at(offset);
    var done: DWORD = 0;
    if (k.ReadFile(fd, buf.ptr, @intCast(@min(buf.len, io_chunk_bytes_max)), &done, &ov) == 0) {
        if (k.GetLastError() == 38) return 0; // ERROR_HANDLE_EOF
        return failLast();
    }
    return done;
}

pub fn preadAll(fd: Fd, buf: []u8, offset: u64, short: *bool) OsError!void {
    short.* = false;
    var done: usize = 0;
    while (done < buf.len) {
        const n = try preadSome(fd, buf[done..], offset + done);
        if (n == 0) {
            short.* = true;
            return failWith(sys.EIO);
        }
        done += n;
    }
}

pub fn pwriteAll(fd: Fd, buf: []const u8, offset: u64) OsError!void {
    var done: usize = 0;
    while (done < buf.len) {
        var ov = at(offset + done);
        var n: DWORD = 0;
        const want: DWORD = @intCast(@min(buf.len - done, io_chunk_bytes_max));
        if (k.WriteFile(fd, buf[done..].ptr, want, &n, &ov) == 0) return failLast();
        if (n == 0) return failWith(sys.EIO);
        done += n;
    }
}

/// One write per entry (Win32 gathers only page-aligned buffers, WriteFileGather); entries are
/// emptied as they are written.
pub fn pwritevAll(fd: Fd, iov: []IoVec, offset: u64) OsError!void {
    var pos = offset;
    for (iov) |*v| {
        try pwriteAll(fd, v.base[0..v.len], pos);
        pos += v.len;
        v.base += v.len;
        v.len = 0;
    }
}

/// FlushFileBuffers. It needs a handle open for writing, where fsync(2) takes any: a file
/// open for reading is flushed through a second handle of its own; a directory needs no flush.
pub fn fsyncFd(fd: Fd) OsError!void {
    if (k.FlushFileBuffers(fd) != 0) return;
    const code = k.GetLastError();
    var info: ByHandleFileInformation = undefined;
    if (k.GetFileInformationByHandle(fd, &info) != 0 and info.attributes & ATTRIBUTE_DIRECTORY != 0) return;
    if (code != 5) return failWith(errnoOf(code)); // not ERROR_ACCESS_DENIED
    var wide: WPath = .{};
    wide.len = try finalPath(fd, &wide.buf);
    wide.buf[wide.len] = 0;
    const w = k.CreateFileW(wide.z(), GENERIC_WRITE, SHARE_ALL, null, OPEN_EXISTING, ATTRIBUTE_NORMAL, null);
    if (w == invalid_fd) return failLast();
    defer _ = k.CloseHandle(w);
    if (k.FlushFileBuffers(w) == 0) return failLast();
}

pub fn openDirectAt(dir: Fd, name: [*:0]const u8, flags: c_int) OsError!Fd {
    return openAt(dir, name, flags | O_DIRECT, 0);
}

/// FILE_FLAG_NO_BUFFERING is chosen at open: it cannot be turned on for an open handle.
pub fn setDirect(fd: Fd, on: bool) OsError!void {
    _ = fd;
    if (on) return failWith(sys.EINVAL);
}

pub fn directIoAlignment(fd: Fd) ?sys.DirectIoAlignment {
    _ = fd;
    return null;
}

pub fn isMemoryFs(fd: Fd) bool {
    _ = fd;
    return false;
}

/// SetFileInformationByHandle(FileEndOfFileInfo); fails for a file that a view maps.
pub fn setFileSize(fd: Fd, len: u64) OsError!void {
    var end: i64 = @intCast(len);
    if (k.SetFileInformationByHandle(fd, FILE_END_OF_FILE_INFO_CLASS, &end, @sizeOf(i64)) == 0) return failLast();
}

pub fn seekEnd(fd: Fd) OsError!u64 {
    var size: i64 = 0;
    if (k.GetFileSizeEx(fd, &size) == 0) return failLast();
    return @intCast(size);
}

fn unixSeconds(t: FILETIME) i64 {
    const ticks: i64 = @intCast((@as(u64, t.high) << 32) | t.low);
    return @divFloor(ticks, 10_000_000) - epoch_gap_s;
}

fn statOf(info: *const ByHandleFileInformation) FileStat {
    const a = info.attributes;
    const kind: FileKind = if (a & ATTRIBUTE_REPARSE_POINT != 0)
        .other
    else if (a & ATTRIBUTE_DIRECTORY != 0) .directory else .regular;
    return .{
        .size = (@as(u64, info.size_high) << 32) | info.size_low,
        .kind = kind,
        .uid = geteuid(),
        .perm = if (a & ATTRIBUTE_READONLY != 0) 0o400 else 0o600,
        .mtime_sec = unixSeconds(info.last_write),
    };
}

pub fn fstat(fd: Fd) OsError!FileStat {
    var info: ByHandleFileInformation = undefined;
    if (k.GetFileInformationByHandle(fd, &info) == 0) return failLast();
    return statOf(&info);
}

/// Opens `name` in `dir` for its attributes only, links not followed.
fn openAttributes(dir: Fd, name: []const u8) OsError!Fd {
    var wide: WPath = .{};
    try widePath(dir, name, &wide);
    const flags = FLAG_BACKUP_SEMANTICS | FLAG_OPEN_REPARSE_POINT;
    const h = k.CreateFileW(wide.z(), FILE_READ_ATTRIBUTES, SHARE_ALL, null, OPEN_EXISTING, flags, null);
    if (h == invalid_fd) return failLast();
    return h;
}

pub fn fstatAt(dir: Fd, name: [*:0]const u8) OsError!FileStat {
    const h = try openAttributes(dir, std.mem.sliceTo(name, 0));
    defer _ = k.CloseHandle(h);
    return fstat(h);
}

/// There are no uids on Windows: every file reads as the caller's own (see the top).
pub fn geteuid() u32 {
    return 0;
}

fn nowFiletime() FILETIME {
    var ft: FILETIME = undefined;
    k.GetSystemTimeAsFileTime(&ft);
    return ft;
}

/// Leaves the file as it is: Windows refuses to replace a read-only file by a rename, which
/// is how a cache file of a changed index is replaced (index_cache.zig).
pub fn makeReadOnly(fd: Fd) OsError!void {
    _ = fd;
}

/// `makeReadOnly` leaves no mark here.
pub const read_only_files = false;

pub fn touch(fd: Fd) OsError!void {
    const now = nowFiletime();
    if (k.SetFileTime(fd, null, &now, &now) == 0) return failLast();
}

pub fn fdPath(fd: Fd, out: *[path_bytes_max]u8) ?[]const u8 {
    return finalPathUtf8(fd, out);
}

pub fn fileIdentity(fd: Fd) OsError!FileIdentity {
    var info: ByHandleFileInformation = undefined;
    if (k.GetFileInformationByHandle(fd, &info) == 0) return failLast();
    var basic: FileBasicInfo = undefined;
    const basic_size = @sizeOf(FileBasicInfo);
    if (k.GetFileInformationByHandleEx(fd, FILE_BASIC_INFO_CLASS, &basic, basic_size) == 0) return failLast();
    const write_ticks: i64 = @intCast((@as(u64, info.last_write.high) << 32) | info.last_write.low);
    return .{
        .dev_major = info.volume_serial,
        .dev_minor = 0,
        .ino = (@as(u64, info.index_high) << 32) | info.index_low,
        .size = (@as(u64, info.size_high) << 32) | info.size_low,
        .mtime_sec = @divFloor(write_ticks, 10_000_000) - epoch_gap_s,
        .mtime_nsec = @intCast(@mod(write_ticks, 10_000_000) * 100),
        .ctime_sec = @divFloor(basic.change, 10_000_000) - epoch_gap_s,
        .ctime_nsec = @intCast(@mod(basic.change, 10_000_000) * 100),
    };
}

var temp_counter: std.atomic.Value(u64) = .init(0);

/// A new file in the temporary folder, deleted when its last handle closes.
pub fn memfd(name: [*:0]const u8) OsError!Fd {
    var wide: WPath = .{};
    const n = k.GetTempPathW(@intCast(wide.buf.len), &wide.buf);
    if (n == 0) return failLast();
    var tail: [160]u8 = undefined;
    const suffix = std.fmt.bufPrint(&tail, "{s}-{d}-{x}-{d}", .{
        std.mem.sliceTo(name, 0), getpid(), randomU64(), temp_counter.fetchAdd(1, .monotonic),
    }) catch return failWith(ENAMETOOLONG);
    if (n + suffix.len + 1 >= wide.buf.len) return failWith(ENAMETOOLONG);
    for (suffix, 0..) |c, i| wide.buf[n + i] = c;
    wide.buf[n + suffix.len] = 0;
    const flags = ATTRIBUTE_TEMPORARY | FLAG_DELETE_ON_CLOSE;
    const h = k.CreateFileW(wide.z(), GENERIC_READ | GENERIC_WRITE, SHARE_ALL, null, CREATE_NEW, flags, null);
    if (h == invalid_fd) return failLast();
    return h;
}

pub fn rename(old: [*:0]const u8, new: [*:0]const u8) OsError!void {
    return move(old, new, MOVEFILE_REPLACE_EXISTING);
}

/// MoveFileExW without MOVEFILE_REPLACE_EXISTING: fails with EEXIST where `new` exists.
pub fn renameNoReplace(old: [*:0]const u8, new: [*:0]const u8) OsError!void {
    return move(old, new, 0);
}

fn move(old: [*:0]const u8, new: [*:0]const u8, flags: DWORD) OsError!void {
    var a: WPath = .{};
    var b: WPath = .{};
    try widePath(AT_FDCWD, std.mem.sliceTo(old, 0), &a);
    try widePath(AT_FDCWD, std.mem.sliceTo(new, 0), &b);
    if (k.MoveFileExW(a.z(), b.z(), flags) == 0) return failLast();
}

pub fn mkdir(path: [*:0]const u8, mode: c_uint) OsError!void {
    _ = mode;
    var wide: WPath = .{};
    try widePath(AT_FDCWD, std.mem.sliceTo(path, 0), &wide);
    if (k.CreateDirectoryW(wide.z(), null) == 0) return failLast();
}

pub fn mkdirAll(path: [:0]const u8, mode: c_uint) OsError!void {
    var buf: [path_bytes_max]u8 = undefined;
    if (path.len >= buf.len) return failWith(ENAMETOOLONG);
    @memcpy(buf[0..path.len], path);
    // Past a drive ("C:\") or a UNC server and share ("\\server\share\"), which are no folders
    // to create.
    var i: usize = if (path.len >= 3 and path[1] == ':') 3 else 1;
    while (i <= path.len) : (i += 1) {
        if (i < path.len and path[i] != '/' and path[i] != '\\') continue;
        buf[i] = 0;
        mkdir(@ptrCast(&buf), mode) catch {
            if (errno_value != sys.EEXIST and errno_value != EACCES) return error.Os;
        };
        if (i < path.len) buf[i] = path[i];
    }
    if (!(try exists(path))) return failWith(sys.ENOENT);
}

pub fn rmdir(path: [*:0]const u8) OsError!void {
    return rmdirAt(AT_FDCWD, path);
}

pub fn unlinkAt(dir: Fd, name: [*:0]const u8) OsError!void {
    return remove(dir, name, false);
}

pub fn rmdirAt(dir: Fd, name: [*:0]const u8) OsError!void {
    return remove(dir, name, true);
}

/// Removes a file (or an empty directory) with POSIX semantics where the file system has them
/// (NTFS on Windows 10 1709 and later): the name goes at once, even while handles to the file
/// are open, as unlink(2) does. Elsewhere the classic removal, whose name stays until the last
/// handle closes. A symbolic link is removed, not followed.
fn remove(dir: Fd, name: [*:0]const u8, directory: bool) OsError!void {
    var wide: WPath = .{};
    try widePath(dir, std.mem.sliceTo(name, 0), &wide);
    const flags = FLAG_BACKUP_SEMANTICS | FLAG_OPEN_REPARSE_POINT;
    const h = k.CreateFileW(wide.z(), DELETE | FILE_READ_ATTRIBUTES, SHARE_ALL, null, OPEN_EXISTING, flags, null);
    if (h == invalid_fd) return failLast();
    defer _ = k.CloseHandle(h);
    var info: ByHandleFileInformation = undefined;
    if (k.GetFileInformationByHandle(h, &info) == 0) return failLast();
    const is_dir = info.attributes & ATTRIBUTE_DIRECTORY != 0 and info.attributes & ATTRIBUTE_REPARSE_POINT == 0;
    if (is_dir != directory) return failWith(if (directory) sys.ENOTDIR else sys.EISDIR);
    var ex: DWORD = DISPOSITION_DELETE | DISPOSITION_POSIX_SEMANTICS | DISPOSITION_IGNORE_READONLY;
    if (k.SetFileInformationByHandle(h, FILE_DISPOSITION_INFO_EX_CLASS, &ex, @sizeOf(DWORD)) != 0) return;
    var classic: u8 = 1; // FILE_DISPOSITION_INFO.DeleteFile
    if (k.SetFileInformationByHandle(h, FILE_DISPOSITION_INFO_CLASS, &classic, 1) == 0) return failLast();
}

pub fn exists(path: [*:0]const u8) OsError!bool {
    return existsAt(AT_FDCWD, path);
}

pub fn existsAt(dir: Fd, name: [*:0]const u8) OsError!bool {
    var wide: WPath = .{};
    try widePath(dir, std.mem.sliceTo(name, 0), &wide);
    if (k.GetFileAttributesW(wide.z()) != INVALID_ATTRIBUTES) return true;
    const code = k.GetLastError();
    if (code == 2 or code == 3) return false;
    return failWith(errnoOf(code));
}

/// LockFileEx on the byte at 2^62, which no file reaches: the lock excludes other lockers
/// without blocking anybody's reads.
pub fn flock(fd: Fd, operation: c_int) OsError!void {
    var ov: OVERLAPPED = .{ .offset_high = 0x4000_0000 };
    if (operation & sys.LOCK_UN != 0) {
        if (k.UnlockFileEx(fd, 0, 1, 0, &ov) == 0) return failLast();
        return;
    }
    var flags: DWORD = LOCKFILE_EXCLUSIVE_LOCK;
    if (operation & sys.LOCK_NB != 0) flags |= LOCKFILE_FAIL_IMMEDIATELY;
    if (k.LockFileEx(fd, flags, 0, 1, 0, &ov) == 0) return failLast();
}

pub fn realpath(path: [*:0]const u8, out: *[path_bytes_max]u8) OsError![]const u8 {
    const h = try openAttributesFollowing(std.mem.sliceTo(path, 0));
    defer _ = k.CloseHandle(h);
    return finalPathUtf8(h, out) orelse failWith(ENAMETOOLONG);
}

fn openAttributesFollowing(path: []const u8) OsError!Fd {
    var wide: WPath = .{};
    try widePath(AT_FDCWD, path, &wide);
    const flags = FLAG_BACKUP_SEMANTICS;
    const h = k.CreateFileW(wide.z(), FILE_READ_ATTRIBUTES, SHARE_ALL, null, OPEN_EXISTING, flags, null);
    if (h == invalid_fd) return failLast();
    return h;
}

/// The entries of an open directory, "." and ".." left out (FindFirstFileW over its path).
pub const Dir = struct {
    find: Fd,
    data: Win32FindDataW,
    pending: bool,
    name: [path_bytes_max]u8 = undefined,

    pub fn open(fd: Fd) ?Dir {
        var dir: Dir = .{ .find = invalid_fd, .data = undefined, .pending = true };
        var wide: WPath = .{};
        widePath(fd, "*", &wide) catch return null;
        dir.find = k.FindFirstFileW(wide.z(), &dir.data);
        if (dir.find == invalid_fd) return null;
        return dir;
    }

    pub fn next(dir: *Dir) ?[:0]const u8 {
        while (true) {
            if (!dir.pending and k.FindNextFileW(dir.find, &dir.data) == 0) return null;
            dir.pending = false;
            const wide = std.mem.sliceTo(&dir.data.name, 0);
            const n = std.unicode.utf16LeToUtf8(&dir.name, wide) catch continue;
            if (n >= dir.name.len) continue;
            dir.name[n] = 0;
            const name = dir.name[0..n :0];
            if (std.mem.eql(u8, name, ".") or std.mem.eql(u8, name, "..")) continue;
            return name;
        }
    }

    pub fn close(dir: *Dir) void {
        _ = k.FindClose(dir.find);
    }
};

// ---- memory ------------------------------------------------------------------------------

pub fn mmapRead(fd: Fd, len: usize) OsError![]align(std.heap.page_size_min) const u8 {
    const mapping = k.CreateFileMappingW(fd, null, PAGE_READONLY, 0, 0, null) orelse return failLast();
    defer _ = k.CloseHandle(mapping);
    const p = k.MapViewOfFile(mapping, FILE_MAP_READ, 0, 0, len) orelse return failLast();
    const bytes: [*]align(std.heap.page_size_min) const u8 = @ptrCast(@alignCast(p));
    return bytes[0..len];
}

/// Committed, zeroed, writable memory: Windows has no MAP_NORESERVE, but commits pages of
/// zeros lazily all the same (the commit charge is the whole length).
pub fn mmapSparse(len: usize) OsError![]align(std.heap.page_size_min) u8 {
    const p = k.VirtualAlloc(null, len, MEM_COMMIT_RESERVE, PAGE_READWRITE) orelse return failLast();
    const bytes: [*]align(std.heap.page_size_min) u8 = @ptrCast(@alignCast(p));
    return bytes[0..len];
}

/// Unmaps a view of a file, or frees what `mmapSparse` reserved.
pub fn munmap(mem: []align(std.heap.page_size_min) const u8) void {
    var info: MemoryBasicInformation = undefined;
    if (k.VirtualQuery(mem.ptr, &info, @sizeOf(MemoryBasicInformation)) != 0 and info.kind == MEM_MAPPED) {
        _ = k.UnmapViewOfFile(mem.ptr);
    } else {
        _ = k.VirtualFree(@constCast(mem.ptr), 0, MEM_RELEASE);
    }
}

/// No advice on Windows.
pub fn madvise(mem: []align(std.heap.page_size_min) const u8, advice: c_int) void {
    _ = .{ mem, advice };
}

/// Windows does not say which pages of a view are in its cache without touching them.
pub fn resident(base: [*]const u8, len: usize, vec: []u8) ?bool {
    _ = .{ base, len, vec };
    return null;
}

pub fn startWriteback(fd: Fd, offset: u64, len: u64) void {
    _ = .{ fd, offset, len };
}

pub fn fadviseRange(fd: Fd, offset: u64, len: u64, advice: Advice) void {
    _ = .{ fd, offset, len, advice };
}

pub fn copy(dst: []u8, src: []const u8) void {
    @memcpy(dst, src);
}

// ---- time, threads, processes ------------------------------------------------------------

pub fn nowSeconds() i64 {
    return unixSeconds(nowFiletime());
}

pub fn monotonicNs() u64 {
    var count: i64 = 0;
    var freq: i64 = 0;
    if (k.QueryPerformanceCounter(&count) == 0 or k.QueryPerformanceFrequency(&freq) == 0 or freq <= 0) return 0;
    const c: u128 = @intCast(count);
    return @truncate(c * std.time.ns_per_s / @as(u128, @intCast(freq)));
}

pub fn sleepNs(ns: u64) void {
    k.Sleep(@intCast(@min((ns + std.time.ns_per_ms - 1) / std.time.ns_per_ms, std.math.maxInt(DWORD) - 1)));
}

pub fn futexWait(word: *const std.atomic.Value(u32), expected: u32) void {
    _ = k.RtlWaitOnAddress(&word.raw, &expected, @sizeOf(u32), null);
}

pub fn futexWake(word: *const std.atomic.Value(u32)) void {
    k.RtlWakeAddressAll(&word.raw);
}

pub fn yield() void {
    _ = k.SwitchToThread();
}

pub fn getpid() i32 {
    return @bitCast(k.GetCurrentProcessId());
}

var random_counter: std.atomic.Value(u64) = .init(0);

/// RtlGenRandom; where it fails, time, address and a counter.
pub fn randomU64() u64 {
    var value: u64 = 0;
    if (k.SystemFunction036(@ptrCast(&value), @sizeOf(u64)) != 0) return value;
    const n = random_counter.fetchAdd(1, .monotonic);
    const t: u64 = @bitCast(nowSeconds());
    return std.hash.XxHash64.hash(n, std.mem.asBytes(&t)) ^ monotonicNs() ^ @intFromPtr(&value);
}

/// Windows has no fork: nothing to count.
pub fn watchForks() void {}

pub fn forkGeneration() u32 {
    return 0;
}

pub fn physicalMemoryBytes() ?u64 {
    var status: MemoryStatusEx = std.mem.zeroes(MemoryStatusEx);
    status.length = @sizeOf(MemoryStatusEx);
    if (k.GlobalMemoryStatusEx(&status) == 0) return null;
    return status.total_phys;
}
