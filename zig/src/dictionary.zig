//! Dictionary training for codec `zstd_dict` (zr_train_dict): argument validation and
//! diagnostics around `codec.trainDictionary`.
//!
//! Invariants:
//! - Every argument is checked before libzstd sees it: the sample sizes must add up, without
//!   overflow, to exactly the bytes given, and the capacity must lie in
//!   `dict_capacity_bytes_min .. dict_size_bytes_max`, so a trained dictionary always fits a
//!   store's header ([ZR-HDR-013]).
//! - When libzstd cannot train (too few, too small or too uniform samples), the caller learns
//!   how much was given and that more representative data is needed, as InvalidArgument.

const std = @import("std");
const codec = @import("codec.zig");
const diag_mod = @import("diag.zig");
const format = @import("format.zig");

const Diag = diag_mod.Diag;
const Error = diag_mod.Error;

/// The smallest dictionary capacity accepted. libzstd needs room for its entropy tables (a few
/// hundred bytes at least); a smaller capacity can only fail.
pub const dict_capacity_bytes_min: u64 = 256;

/// zstd typically needs about this many times the dictionary's size in samples.
const samples_per_dict_byte: u64 = 100;

comptime {
    // The sizes array is handed to libzstd (size_t) without a copy.
    std.debug.assert(@sizeOf(usize) == @sizeOf(u64));
}

/// Trains a dictionary of at most `capacity` bytes into `out` and returns its size.
pub fn train(
    samples: ?[*]const u8,
    samples_size: u64,
    sizes: ?[*]const u64,
    count: u64,
    out: ?[*]u8,
    capacity: u64,
    d: *Diag,
) Error!u64 {
    if (count == 0) return d.fail(error.InvalidArgument, "train_dict got 0 samples; at least " ++
        "one is required, and zstd typically needs thousands of small samples", .{});
    if (count > std.math.maxInt(c_uint)) return d.fail(error.InvalidArgument, "train_dict got " ++
        "{d} samples; at most {d} are supported", .{ count, std.math.maxInt(c_uint) });
    const size_list = sizes orelse return d.fail(error.InvalidArgument, "train_dict got a null " ++
        "sizes array for {d} samples", .{count});
    if (samples_size > 0 and samples == null) return d.fail(error.InvalidArgument, "train_dict " ++
        "got a null samples pointer for {d} bytes", .{samples_size});
    if (capacity < dict_capacity_bytes_min) return d.fail(error.InvalidArgument, "train_dict got " ++
        "a dictionary capacity of {d} bytes; at least {d} are required", .{ capacity, dict_capacity_bytes_min });
    if (capacity > format.dict_size_bytes_max) return d.fail(error.LimitExceeded, "train_dict got " ++
        "a dictionary capacity of {d} bytes, above dict_size_bytes_max {d} (ZR-LIM-001)", .{
        capacity, format.dict_size_bytes_max,
    });
    const dst = out orelse return d.fail(error.InvalidArgument, "train_dict got a null output " ++
        "buffer for {d} bytes", .{capacity});
    const n: usize = @intCast(count);
    var total: u64 = 0;
    for (size_list[0..n], 0..) |size, i| {
        total = std.math.add(u64, total, size) catch return d.fail(error.InvalidArgument, "" ++
            "train_dict: the sample sizes overflow 64 bits at sample {d}", .{i});
    }
    if (total != samples_size) return d.fail(error.InvalidArgument, "train_dict: the {d} sample " ++
        "sizes add up to {d} bytes, but {d} bytes of samples were given; they must be equal", .{
        count, total, samples_size,
    });
    const src: []const u8 = if (samples_size == 0) &.{} else samples.?[0..@intCast(samples_size)];
    const size_slice: []const usize = @ptrCast(size_list[0..n]);

    const written = codec.trainDictionary(dst[0..@intCast(capacity)], src, size_slice) catch |err| switch (err) {
        error.OutOfMemory => return d.fail(error.OutOfMemory, "out of memory training a " ++
            "dictionary from {d} samples of {d} bytes in all", .{ count, samples_size }),
        else => return d.fail(error.InvalidArgument, "zstd could not train a dictionary of up " ++
            "to {d} bytes from the {d} samples given ({d} bytes in all); more representative " ++
            "data is needed: zstd typically needs about {d} times the dictionary size in " ++
            "samples (here about {d} bytes), spread over many samples", .{
            capacity, count, samples_size, samples_per_dict_byte, capacity * samples_per_dict_byte,
        }),
    };
    return written;
}
