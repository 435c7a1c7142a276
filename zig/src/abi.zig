//! The extern structs of zig/include/zrecord.h, mirrored field for field.
//!
//! Invariants:
//! - Layouts equal the C header's on every supported target; the comptime checks below pin
//!   sizes and offsets so a drift fails the build instead of corrupting memory.

const std = @import("std");
const format = @import("format.zig");

pub const Status = extern struct {
    code: i32,
    os_errno: i32,
    record: i64,
    shard: i32,
    reserved: i32,
    message: [4096]u8,
};

pub const Schema = extern struct {
    kind: u8,
    dtype: u8,
    ndim: u8,
    codec: u8,
    data_shards: u8,
    reserved: [3]u8,
    item_shape: [format.ndim_max]u64,
};

pub const Info = extern struct {
    schema: Schema,
    format_major: u16,
    format_minor: u16,
    dict_size: u32,
    record_count: u64,
    logical_bytes: u64,
    stored_bytes: u64,
    record_size: u64,
    itemsize: u64,
};

/// zr_writer_open flags.
pub const write_no_sync: u32 = 1;
pub const write_flags_known: u32 = write_no_sync;

comptime {
    std.debug.assert(@sizeOf(Status) == 4120);
    std.debug.assert(@offsetOf(Status, "record") == 8);
    std.debug.assert(@offsetOf(Status, "message") == 24);
    std.debug.assert(@sizeOf(Schema) == 264);
    std.debug.assert(@offsetOf(Schema, "item_shape") == 8);
    std.debug.assert(@sizeOf(Info) == 312);
    std.debug.assert(@offsetOf(Info, "format_major") == 264);
    std.debug.assert(@offsetOf(Info, "dict_size") == 268);
    std.debug.assert(@offsetOf(Info, "record_count") == 272);
    std.debug.assert(@offsetOf(Info, "itemsize") == 304);
}
