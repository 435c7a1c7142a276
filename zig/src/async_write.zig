//! A helper thread that performs one worker's file writes while the worker prepares the next
//! buffer: double buffering for the direct writes of a durable writer (decision record 0001
//! §18), so that the device has a write to work on while records are copied or compressed.
//!
//! Invariants:
//! - At most one write is posted at a time, and only by the one worker that owns the helper;
//!   `post` requires the helper idle, which `wait` ensures. A posted write's bytes belong to
//!   the helper until `wait` returns: the worker fills another buffer meanwhile.
//! - The thread is spawned on the first `post` and joined by `stop`, which the owner calls
//!   before its own parallel call returns, so no thread of ours outlives a call (parallel.zig).
//! - If the thread cannot be spawned, writes run on the calling thread: the helper is an
//!   optimisation, never a new way to fail.
//! - A failure is reported once, by the `wait` after the failed write, with the write and the
//!   errno, so that the caller can name the file and offset or retry the same bytes.

const std = @import("std");
const sys = @import("sys.zig");

const Fd = sys.Fd;

/// The helper only calls pwrite, but glibc refuses stacks that cannot also hold the static
/// thread-local storage (large in test binaries); the size of parallel.zig's workers always
/// works, and untouched stack pages cost nothing.
const helper_stack_bytes: usize = 1 << 20;

const idle: u32 = 0;
const posted: u32 = 1;
const quit: u32 = 2;

pub const Write = struct {
    fd: Fd,
    bytes: []const u8,
    offset: u64,
};

pub const Failure = struct {
    write: Write,
    errno: i32,
};

pub const AsyncWriter = struct {
    state: std.atomic.Value(u32) = .init(idle),
    job: Write = undefined,
    /// errno of the last write, 0 if it succeeded; read once the helper is idle again.
    job_errno: i32 = 0,
    /// Whether a write was posted whose result `wait` has not reported yet.
    unreported: bool = false,
    thread: ?std.Thread = null,
    spawn_failed: bool = false,

    /// Hands `write` to the helper. The helper must be idle (`wait` returned).
    pub fn post(a: *AsyncWriter, write: Write) void {
        std.debug.assert(a.state.load(.acquire) == idle and !a.unreported);
        a.job = write;
        a.unreported = true;
        if (a.thread == null and !a.spawn_failed) {
            a.thread = std.Thread.spawn(.{ .stack_size = helper_stack_bytes }, main, .{a}) catch blk: {
                a.spawn_failed = true;
                break :blk null;
            };
        }
        if (a.thread == null) {
            a.job_errno = perform(write);
            return;
        }
        a.state.store(posted, .release);
        sys.futexWake(&a.state);
    }

    /// Waits for the posted write, if any; returns its failure, once.
    pub fn wait(a: *AsyncWriter) ?Failure {
        while (a.state.load(.acquire) == posted) sys.futexWait(&a.state, posted);
        if (!a.unreported) return null;
        a.unreported = false;
        if (a.job_errno == 0) return null;
        return .{ .write = a.job, .errno = a.job_errno };
    }

    /// Waits for the posted write and ends the thread. A failure not yet reported is dropped:
    /// the caller stops only after reporting (or on a path that already failed).
    pub fn stop(a: *AsyncWriter) void {
        _ = a.wait();
        if (a.thread) |t| {
            a.state.store(quit, .release);
            sys.futexWake(&a.state);
            t.join();
            a.thread = null;
            a.state.store(idle, .release);
        }
    }

    fn main(a: *AsyncWriter) void {
        while (true) {
            const s = a.state.load(.acquire);
            if (s == quit) return;
            if (s == idle) {
                sys.futexWait(&a.state, idle);
                continue;
            }
            a.job_errno = perform(a.job);
            a.state.store(idle, .release);
            sys.futexWake(&a.state);
        }
    }

    fn perform(write: Write) i32 {
        sys.pwriteAll(write.fd, write.bytes, write.offset) catch return sys.errno();
        return 0;
    }
};

test "posted writes land, one at a time, and a failure is reported once with its errno" {
    const t = std.testing;
    const fd = try sys.memfd("zrecord-async");
    defer sys.close(fd);
    var a: AsyncWriter = .{};
    defer a.stop();
    var bufs: [2][4096]u8 = undefined;
    var i: usize = 0;
    while (i < 64) : (i += 1) {
        try t.expect(a.wait() == null);
        const buf = &bufs[i % 2];
        @memset(buf, @intCast(i));
        a.post(.{ .fd = fd, .bytes = buf, .offset = i * 4096 });
    }
    try t.expect(a.wait() == null);
    var back: [4096]u8 = undefined;
    var short = false;
    i = 0;
    while (i < 64) : (i += 1) {
        try sys.preadAll(fd, &back, i * 4096, &short);
        try t.expect(back[0] == i and back[4095] == i);
    }
    // A write to a closed descriptor fails with EBADF, reported by the next wait only.
    a.post(.{ .fd = sys.invalid_fd, .bytes = &bufs[0], .offset = 0 });
    const f = a.wait() orelse return error.TestExpectedFailure;
    try t.expectEqual(@as(i32, 9), f.errno);
    try t.expectEqual(sys.invalid_fd, f.write.fd);
    try t.expect(a.wait() == null);
}
