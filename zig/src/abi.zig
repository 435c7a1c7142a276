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
    dtype_length: u32,
    dtype_unit: u8,
    reserved2: [3]u8,
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
    header_checksum: u64,
};

/// The result codes of zrecord.h's `zr_result`, by the lower-case name that follows `ZR_E_`
/// there (`ok` is `ZR_OK`). `resultName` gives the header's spelling, so a test can check the
/// two tables against each other.
pub const Result = enum(c_int) {
    ok = 0,
    invalid_argument = -1,
    io = -2,
    not_found = -3,
    exists = -4,
    no_memory = -5,
    index = -6,
    closed = -7,
    bad_magic = -10,
    version = -11,
    corrupt = -12,
    checksum = -13,
    not_published = -14,
    unsupported = -15,
    limit = -16,
    decode = -17,
    immutable = -18,

    pub fn code(r: Result) c_int {
        return @backingInt(r);
    }
};

/// "ZR_OK" or "ZR_E_" followed by the tag in upper case, for every code; null for others.
pub fn resultName(value: c_int) ?[*:0]const u8 {
    const info = @typeInfo(Result).@"enum";
    inline for (info.field_names, info.field_values) |name, v| {
        if (v == value) return comptime upperName(name);
    }
    return null;
}

fn upperName(comptime tag: []const u8) [*:0]const u8 {
    comptime {
        const prefix = if (std.mem.eql(u8, tag, "ok")) "ZR_" else "ZR_E_";
        var buf: [prefix.len + tag.len:0]u8 = undefined;
        @memcpy(buf[0..prefix.len], prefix);
        for (tag, 0..) |ch, i| buf[prefix.len + i] = std.ascii.toUpper(ch);
        buf[buf.len] = 0;
        const final = buf;
        return &final;
    }
}

/// zr_writer_open flags.
pub const write_no_sync: u32 = 1;
/// zrecord.h ZR_WRITE_INDEX_PARTS: write index parts (format 1.2, spec §4.1) with the writer
/// defaults of [ZR-PRT-008].
pub const write_index_parts: u32 = 2;
pub const write_flags_known: u32 = write_no_sync | write_index_parts;
/// zrecord.h ZR_OPEN_CACHE_BYPASS.
pub const open_cache_bypass: u32 = 1;
/// zrecord.h ZR_OPEN_VALIDATE_INDEX: read and validate index.zri even where the index cache
/// holds a compact index built from it.
pub const open_validate_index: u32 = 2;
/// zrecord.h ZR_OPEN_CHECK_EVERY_READ: every read of a record is checked against its checksum,
/// and read with pread (never copied through a mapping): the shard files are a cache that
/// other processes fill and punch holes in while this reader has them open.
pub const open_check_every_read: u32 = 4;
/// zrecord.h ZR_OPEN_WHOLE_INDEX: a store with index parts is judged whole at open (or taken
/// from a cache file that fits), never by part: the reader copied the whole index anyway.
pub const open_whole_index: u32 = 8;
pub const open_flags_known: u32 = open_cache_bypass | open_validate_index | open_check_every_read | open_whole_index;
/// zrecord.h ZR_INDEX_CACHE_RECORDS_MIN_DEFAULT and ZR_INDEX_CACHE_BYTES_DEFAULT: what
/// zr_open_opts' 0 means (index_cache.Policy).
pub const index_cache_records_min_default: u64 = 1 << 16;
pub const index_cache_bytes_default: u64 = 16 << 30;

/// zrecord.h zr_open_opts.
pub const OpenOpts = extern struct {
    flags: u32,
    reserved: u32,
    /// The index cache folder, or null for none.
    index_cache: ?[*:0]const u8,
    /// Indexes of fewer records never use the folder; 0: the default (index_cache.Policy).
    index_cache_records_min: u64 = 0,
    /// The bound of the folder in bytes; 0: the default (index_cache.Policy).
    index_cache_bytes: u64 = 0,
    /// What messages call the store, or null for its path.
    name: ?[*:0]const u8 = null,
};

/// zrecord.h zr_index_info.
pub const IndexInfo = extern struct {
    /// Bytes of the compact index's mapping: block headers and bit fields.
    resident_bytes: u64,
    /// ZR_INDEX_* of zrecord.h (reader.IndexSource).
    source: u32,
    reserved: u32,
};

/// zrecord.h zr_layout: what a header says of the store's files (zr_header_layout).
pub const Layout = extern struct {
    record_count: u64,
    index_size: u64,
    /// Bytes of index.zrs (8 per index block), 0 without index parts.
    sums_size: u64,
    stored_bytes: u64,
    /// B and T of spec §4.1, 0 without index parts.
    index_blocks: u64,
    sum_groups: u64,
    index_entry_size: u32,
    data_shards: u8,
    index_parts: u8,
    index_block_shift: u8,
    index_group_shift: u8,
    header_checksum: u64,
    /// 1 when a reader opened without ZR_OPEN_WHOLE_INDEX judges the index by part
    /// (index_parts.byPartFits): a store with index parts whose blocks fit one buffer.
    by_part: u8,
    reserved: [7]u8,
    shard_sizes: [format.data_shards_max]u64,
};

/// zrecord.h zr_index_want: a run of index parts of one file that a batch needs and the
/// reader has not judged (zr_reader_index_wants).
pub const IndexWant = extern struct {
    /// ZR_PART_BLOCKS: index blocks first..last of index.zri; ZR_PART_GROUPS: sum groups
    /// first..last of index.zrs.
    file: u32,
    reserved: u32,
    first: u64,
    last: u64,
    /// The bytes of that file they occupy, [start, end).
    start: u64,
    end: u64,
};
pub const part_blocks: u32 = 0;
pub const part_groups: u32 = 1;

/// zrecord.h ZR_PARTS_COLD: zr_parts_gather_ragged's caller expects the batch cold.
pub const parts_cold: u32 = 1;
pub const parts_flags_known: u32 = parts_cold;

comptime {
    format.assertNoPadding(OpenOpts);
    format.assertNoPadding(Layout);
    format.assertNoPadding(IndexWant);
    std.debug.assert(@sizeOf(Layout) == 72 + 8 * 255);
    std.debug.assert(@offsetOf(Layout, "shard_sizes") == 72);
    std.debug.assert(@sizeOf(IndexWant) == 40);
    format.assertNoPadding(IndexInfo);
    std.debug.assert(@sizeOf(OpenOpts) == 40);
    std.debug.assert(@sizeOf(Status) == 4120);
    std.debug.assert(@offsetOf(Status, "record") == 8);
    std.debug.assert(@offsetOf(Status, "message") == 24);
    std.debug.assert(@sizeOf(Schema) == 272);
    std.debug.assert(@offsetOf(Schema, "item_shape") == 8);
    std.debug.assert(@offsetOf(Schema, "dtype_length") == 264);
    std.debug.assert(@offsetOf(Schema, "dtype_unit") == 268);
    std.debug.assert(@sizeOf(Info) == 328);
    std.debug.assert(@offsetOf(Info, "header_checksum") == 320);
    std.debug.assert(@offsetOf(Info, "format_major") == 272);
    std.debug.assert(@offsetOf(Info, "dict_size") == 276);
    std.debug.assert(@offsetOf(Info, "record_count") == 280);
    std.debug.assert(@offsetOf(Info, "itemsize") == 312);
}
