//! Errors and diagnostics shared by every module of the core.
//!
//! Invariants:
//! - Every failure is one member of `Error`, and each member maps to exactly one ZR_E_* code of
//!   zrecord.h (`code`). Functions that can only fail in some ways use narrower error sets
//!   that coerce to `Error`.
//! - Whoever returns an error first describes it in a `Diag`: the OS errno, the record and the
//!   shard it concerns, and an English message that names what was given and what was
//!   required. Callers further up only propagate; they never overwrite a message.
//! - A message is at most `message_bytes_max` bytes, truncated on a UTF-8 boundary, and always
//!   NUL-terminated in the buffer.

const std = @import("std");

pub const Error = error{
    InvalidArgument,
    Io,
    NotFound,
    Exists,
    OutOfMemory,
    IndexOutOfRange,
    Closed,
    BadMagic,
    VersionUnsupported,
    Corrupt,
    ChecksumMismatch,
    NotPublished,
    Unsupported,
    LimitExceeded,
    DecodeFailed,
    Immutable,
};

/// The ZR_E_* result code of zrecord.h for each error.
pub fn code(err: Error) i32 {
    return switch (err) {
        error.InvalidArgument => -1,
        error.Io => -2,
        error.NotFound => -3,
        error.Exists => -4,
        error.OutOfMemory => -5,
        error.IndexOutOfRange => -6,
        error.Closed => -7,
        error.BadMagic => -10,
        error.VersionUnsupported => -11,
        error.Corrupt => -12,
        error.ChecksumMismatch => -13,
        error.NotPublished => -14,
        error.Unsupported => -15,
        error.LimitExceeded => -16,
        error.DecodeFailed => -17,
        error.Immutable => -18,
    };
}

/// zr_status.message is 512 bytes; one is kept for the terminating NUL.
pub const message_bytes_max = 511;

pub const Diag = struct {
    os_errno: i32 = 0,
    record: i64 = -1,
    shard: i32 = -1,
    message_len: usize = 0,
    message: [message_bytes_max + 1]u8 = undefined,

    /// Formats the message, truncating it safely if it does not fit.
    pub fn print(d: *Diag, comptime fmt: []const u8, args: anytype) void {
        var w: std.Io.Writer = .fixed(d.message[0..message_bytes_max]);
        const truncated = if (w.print(fmt, args)) |_| false else |_| true;
        var len = w.end;
        if (truncated) len = utf8Boundary(d.message[0..len]);
        d.message_len = len;
        d.message[len] = 0;
    }

    /// Describes an error and returns it, so failure sites read `return d.fail(error.X, ...)`.
    pub fn fail(d: *Diag, err: anytype, comptime fmt: []const u8, args: anytype) @TypeOf(err) {
        d.print(fmt, args);
        return err;
    }

    /// Like `fail`, for an OS call that set errno; the message gains the errno's description.
    pub fn failOs(
        d: *Diag,
        err: anytype,
        errno_value: i32,
        comptime fmt: []const u8,
        args: anytype,
    ) @TypeOf(err) {
        d.os_errno = errno_value;
        var desc_buf: [128]u8 = undefined;
        const desc = errnoText(errno_value, &desc_buf);
        d.print(fmt ++ " (errno {d}: {s})", args ++ .{ errno_value, desc });
        return err;
    }

    pub fn text(d: *const Diag) []const u8 {
        return d.message[0..d.message_len];
    }

    /// Copies another diagnosis, used when a worker thread's failure becomes the call's.
    pub fn copyFrom(d: *Diag, other: *const Diag) void {
        d.os_errno = other.os_errno;
        d.record = other.record;
        d.shard = other.shard;
        d.message_len = other.message_len;
        @memcpy(d.message[0 .. other.message_len + 1], other.message[0 .. other.message_len + 1]);
    }
};

/// Returns the length of the longest prefix of `bytes` that does not end inside a UTF-8
/// sequence, so that truncated messages stay valid text for the Python side.
fn utf8Boundary(bytes: []const u8) usize {
    var end = bytes.len;
    var back: usize = 0;
    while (end > 0 and back < 4 and (bytes[end - 1] & 0xC0) == 0x80) {
        end -= 1;
        back += 1;
    }
    if (end == 0) return bytes.len;
    const lead = bytes[end - 1];
    if (lead < 0x80) return bytes.len;
    const need: usize = if (lead >= 0xF0) 4 else if (lead >= 0xE0) 3 else if (lead >= 0xC0) 2 else 1;
    // The lead byte plus its continuation bytes form a complete sequence: keep everything.
    if (back + 1 >= need) return bytes.len;
    return end - 1;
}

extern "c" fn strerror_r(errnum: c_int, buf: [*]u8, buflen: usize) ?[*:0]const u8;

/// The C library's description of an errno (glibc's GNU strerror_r, which may return a static
/// string instead of filling the buffer).
fn errnoText(errno_value: i32, buf: *[128]u8) []const u8 {
    buf[0] = 0;
    const p = strerror_r(errno_value, buf, buf.len) orelse return "unknown error";
    return std.mem.sliceTo(p, 0);
}

test "diag truncates long messages on a UTF-8 boundary and keeps the NUL" {
    var d: Diag = .{};
    var long: [800]u8 = undefined; // 400 two-byte sequences
    for (0..400) |i| @memcpy(long[2 * i ..][0..2], "é");
    d.print("{s}", .{&long});
    try std.testing.expect(d.message_len <= message_bytes_max);
    try std.testing.expectEqual(@as(u8, 0), d.message[d.message_len]);
    try std.testing.expect(std.unicode.utf8ValidateSlice(d.text()));
    var e: Diag = .{};
    const err = e.failOs(error.Io, 28, "writing '{s}'", .{"x"});
    try std.testing.expectEqual(error.Io, err);
    try std.testing.expect(std.mem.indexOf(u8, e.text(), "errno 28") != null);
    try std.testing.expectEqual(@as(i32, -2), code(error.Io));
}
