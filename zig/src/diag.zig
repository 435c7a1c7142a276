//! Errors and diagnostics shared by every module of the core.
//!
//! Invariants:
//! - Every failure is one member of `Error`, and each member maps to exactly one ZR_E_* code of
//!   zrecord.h (`code`). Functions that can only fail in some ways use narrower error sets
//!   that coerce to `Error`.
//! - Whoever returns an error first describes it in a `Diag`: the OS errno, the record and the
//!   shard it concerns, and an English message that names what was given and what was
//!   required. Callers further up only propagate; they never overwrite a message.
//! - A message is at most `message_bytes_max` bytes and always NUL-terminated in the buffer.
//!   One that does not fit loses the middle of its longest string arguments (store paths,
//!   file names) first, marked by "...": the format's own text, which says what went wrong,
//!   and its numbers (record, offset, sizes) stay whole. Only a message whose text and numbers
//!   alone exceed the buffer, which none does, is cut at its end (on a UTF-8 boundary).

const std = @import("std");
const abi = @import("abi.zig");
const sys = @import("sys.zig");

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

/// The zrecord.h result code of each error.
pub fn code(err: Error) i32 {
    const r: abi.Result = switch (err) {
        error.InvalidArgument => .invalid_argument,
        error.Io => .io,
        error.NotFound => .not_found,
        error.Exists => .exists,
        error.OutOfMemory => .no_memory,
        error.IndexOutOfRange => .index,
        error.Closed => .closed,
        error.BadMagic => .bad_magic,
        error.VersionUnsupported => .version,
        error.Corrupt => .corrupt,
        error.ChecksumMismatch => .checksum,
        error.NotPublished => .not_published,
        error.Unsupported => .unsupported,
        error.LimitExceeded => .limit,
        error.DecodeFailed => .decode,
        error.Immutable => .immutable,
    };
    return r.code();
}

/// zr_status.message is 4096 bytes (PATH_MAX); one is kept for the terminating NUL.
pub const message_bytes_max = 4095;

/// A string argument shortened to fit a message keeps at least this many bytes, the
/// ellipsis included, so that both ends of a path stay recognisable.
const elided_bytes_min = 48;
const ellipsis = "...";

pub const Diag = struct {
    os_errno: i32 = 0,
    record: i64 = -1,
    shard: i32 = -1,
    message_len: usize = 0,
    message: [message_bytes_max + 1]u8 = undefined,

    /// Clears `d` without writing its message buffer, which only a failure writes. In the
    /// safe release mode `var d: Diag = .{}` (or `= undefined`) fills all 4 KiB of it with
    /// 0xAA: a third of the time of a gather of a few records (a dataset's batch calls one
    /// per part). The C entry points of the hot paths (gathers, shapes, prefetch) declare
    /// `var d: Diag = undefined` with runtime safety off in their own body, which only
    /// forwards to functions that keep theirs, and call this.
    pub inline fn fresh(d: *Diag) void {
        d.os_errno = 0;
        d.record = -1;
        d.shard = -1;
        d.message_len = 0;
    }

    /// Formats the message; one that does not fit is shortened as the invariants say.
    pub fn print(d: *Diag, comptime fmt: []const u8, args: anytype) void {
        if (d.tryPrint(fmt, args)) return;
        // Too long: every string argument longer than a common cap keeps its head and tail
        // around an ellipsis, with the largest cap that makes the message fit.
        const full = std.fmt.count(fmt, args);
        const excess = full - message_bytes_max;
        var lengths: [maxStrings(@TypeOf(args))]usize = undefined;
        var count: usize = 0;
        const info = @typeInfo(@TypeOf(args)).@"struct";
        inline for (info.field_names, info.field_types, info.field_attrs) |name, T, attrs| {
            if (comptime isRuntimeString(T, attrs)) {
                lengths[count] = @field(args, name).len;
                count += 1;
            }
        }
        var longest: usize = 0;
        for (lengths[0..count]) |len| longest = @max(longest, len);
        // The largest cap whose savings cover the excess: savings grow as the cap shrinks.
        var lo: usize = elided_bytes_min;
        var hi: usize = longest;
        if (hi < lo or savings(lengths[0..count], lo) < excess) return d.printCut(fmt, args);
        while (lo < hi) {
            const mid = lo + (hi - lo + 1) / 2;
            if (savings(lengths[0..count], mid) >= excess) lo = mid else hi = mid - 1;
        }
        // Every shortened argument appears whole in the message, so together they fit in a
        // buffer the size of the message.
        var scratch: [message_bytes_max + 1]u8 = undefined;
        var used: usize = 0;
        var short = args;
        inline for (info.field_names, info.field_types, info.field_attrs) |name, T, attrs| {
            if (comptime isRuntimeString(T, attrs)) {
                const str: []const u8 = @field(args, name);
                if (str.len > lo) {
                    const out = scratch[used..];
                    const n = elide(str, lo, out);
                    // A sentinel-terminated argument gets its terminator in the scratch too.
                    out[n] = 0;
                    @field(short, name) = if (comptime isSentinel(T)) out[0..n :0] else out[0..n];
                    used += n + 1;
                }
            }
        }
        if (!d.tryPrint(fmt, short)) d.printCut(fmt, short);
    }

    fn tryPrint(d: *Diag, comptime fmt: []const u8, args: anytype) bool {
        var w: std.Io.Writer = .fixed(d.message[0..message_bytes_max]);
        w.print(fmt, args) catch return false;
        d.message_len = w.end;
        d.message[w.end] = 0;
        return true;
    }

    /// The last resort: the message cut at the end of the buffer.
    fn printCut(d: *Diag, comptime fmt: []const u8, args: anytype) void {
        var w: std.Io.Writer = .fixed(d.message[0..message_bytes_max]);
        w.print(fmt, args) catch {};
        const len = utf8Boundary(d.message[0..w.end]);
        d.message_len = len;
        d.message[len] = 0;
    }

    /// Describes an error and returns it, so failure sites read `return d.fail(error.X, ...)`.
    pub fn fail(d: *Diag, err: anytype, comptime fmt: []const u8, args: anytype) @TypeOf(err) {
        d.print(fmt, args);
        return err;
    }

    /// Fails with error.OutOfMemory, saying what could not be allocated.
    pub fn noMemory(d: *Diag, what: []const u8) Error {
        return d.fail(error.OutOfMemory, "out of memory allocating {s}", .{what});
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
        const desc = sys.errnoText(errno_value, &desc_buf);
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

fn isStringType(comptime T: type) bool {
    return T == []const u8 or T == []u8 or T == [:0]const u8 or T == [:0]u8;
}

fn isSentinel(comptime T: type) bool {
    return T == [:0]const u8 or T == [:0]u8;
}

/// Whether a format argument is a string slice known only at run time (a path, a name), which
/// a message may shorten; literals are part of what the message says. (Pointers to arrays are
/// not shortened: a shorter string would not fit their type. Every path in the core is a
/// slice.)
fn isRuntimeString(comptime T: type, comptime attrs: std.lang.Type.Struct.FieldAttributes) bool {
    return !attrs.@"comptime" and isStringType(T);
}

fn maxStrings(comptime Args: type) usize {
    const info = @typeInfo(Args).@"struct";
    var n: usize = 0;
    for (info.field_types, info.field_attrs) |T, attrs| {
        if (isRuntimeString(T, attrs)) n += 1;
    }
    return n;
}

/// Bytes saved by shortening every string longer than `cap` to `cap` bytes.
fn savings(lengths: []const usize, cap: usize) usize {
    var total: usize = 0;
    for (lengths) |len| {
        if (len > cap) total += len - cap;
    }
    return total;
}

/// Writes `str` shortened to at most `cap` bytes into `out`: its head, the ellipsis and its
/// tail, each end cut on a UTF-8 boundary; returns the length written. The tail gets the
/// larger half, since a path's last components name the file.
fn elide(str: []const u8, cap: usize, out: []u8) usize {
    const keep = cap - ellipsis.len;
    const head = utf8Boundary(str[0 .. keep / 2]);
    var tail_start = str.len - (keep - keep / 2);
    while (tail_start < str.len and (str[tail_start] & 0xC0) == 0x80) tail_start += 1;
    const tail = str[tail_start..];
    @memcpy(out[0..head], str[0..head]);
    @memcpy(out[head..][0..ellipsis.len], ellipsis);
    @memcpy(out[head + ellipsis.len ..][0..tail.len], tail);
    return head + ellipsis.len + tail.len;
}

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

test "diag truncates long messages on a UTF-8 boundary and keeps the NUL" {
    var d: Diag = .{};
    var long: [2 * (message_bytes_max + 200)]u8 = undefined; // two-byte sequences
    for (0..long.len / 2) |i| @memcpy(long[2 * i ..][0..2], "é");
    // An array pointer is not shortened from the middle: the message is cut at its end.
    d.print("{s}", .{&long});
    try std.testing.expect(d.message_len <= message_bytes_max);
    try std.testing.expectEqual(@as(u8, 0), d.message[d.message_len]);
    try std.testing.expect(std.unicode.utf8ValidateSlice(d.text()));
    // A slice is, and both of its cut ends fall on UTF-8 boundaries.
    d.print("{s}", .{@as([]const u8, &long)});
    try std.testing.expect(std.mem.indexOf(u8, d.text(), "...") != null);
    try std.testing.expect(d.message_len <= message_bytes_max);
    try std.testing.expectEqual(@as(u8, 0), d.message[d.message_len]);
    try std.testing.expect(std.unicode.utf8ValidateSlice(d.text()));
    var e: Diag = .{};
    const err = e.failOs(error.Io, 28, "writing '{s}'", .{"x"});
    try std.testing.expectEqual(error.Io, err);
    try std.testing.expect(std.mem.indexOf(u8, e.text(), "errno 28") != null);
    try std.testing.expectEqual(@as(i32, -2), code(error.Io));
}

test "a message too long for the buffer loses the middle of its paths, not its cause" {
    // [R1] item 17: messages were cut at 511 bytes, so with a long store path only the path
    // remained, never what was wrong with which record.
    var path_buf: [6000]u8 = undefined;
    for (&path_buf, 0..) |*c, i| c.* = if (i % 100 == 0) '/' else 'a' + @as(u8, @intCast(i % 26));
    @memcpy(path_buf[path_buf.len - 7 .. path_buf.len - 1], "/store");
    path_buf[path_buf.len - 1] = 0;
    const path: [:0]const u8 = path_buf[0 .. path_buf.len - 1 :0];
    var d: Diag = .{};
    const err = d.fail(error.ChecksumMismatch, "store '{s}': record {d} is corrupt: its {d} stored " ++
        "bytes at offset {d} of data-{d:0>3}.zrd do not match (ZR-SUM-001); also see '{s}'", .{
        path, 123456, 64, 4096, 7, @as([]const u8, path[0..4500]),
    });
    try std.testing.expectEqual(error.ChecksumMismatch, err);
    const text = d.text();
    try std.testing.expect(text.len <= message_bytes_max);
    try std.testing.expectEqual(@as(u8, 0), d.message[d.message_len]);
    try std.testing.expect(std.unicode.utf8ValidateSlice(text));
    for ([_][]const u8{
        "record 123456 is corrupt", "offset 4096 of data-007.zrd", "(ZR-SUM-001); also see '", "...", "/stor",
    }) |part| {
        try std.testing.expect(std.mem.indexOf(u8, text, part) != null);
    }
    // Both ends of the path survive.
    try std.testing.expect(std.mem.startsWith(u8, text, "store '" ++ path_buf[0..20]));
    // A message that fits is untouched.
    var e: Diag = .{};
    e.print("store '{s}': record {d}", .{ path[0..1000], 5 });
    try std.testing.expectEqual(@as(usize, "store '': record 5".len + 1000), e.text().len);
}
