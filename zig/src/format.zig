//! The on-disk format 1.2 (spec/format-v1.md): limits, codes, header and index entry encoding,
//! decoding and validation.
//!
//! Invariants:
//! - This module does no I/O; it turns bytes into validated values and back.
//! - `decodeHeader` reads no byte it has not bounds-checked against the buffer it was given,
//!   and checks the rules in the order of spec §9.2 ([ZR-ERR-003]), so that a header breaking
//!   several rules fails on the first one the spec lists: the version before anything else
//!   after the magic ([ZR-HDR-002]), the codes and feature bits before the reserved bytes and
//!   the sizes that depend on them, [ZR-HDR-003] before the variable part.
//! - `validateEntry` checks an index entry's rules in the order of spec §9.3.
//! - `encodeHeader(decodeHeader(x)) == x` for every valid header `x`.
//! - A header with `index_parts` (required_features bit 0, spec §4.1) has its two shifts judged
//!   and T computed without overflow (step 2.10a) before the size rule that counts 8 × T bytes
//!   of group_sums; without the bit, bytes 93 and 94 are reserved and zero, as in 1.1.
//! - Every dtype's item size comes from `Header.itemsize` (the table `dtypes` and, for the
//!   parametric dtypes of format 1.1, the header's dtype_length), never from a special case.

const std = @import("std");
const diag_mod = @import("diag.zig");
const Diag = diag_mod.Diag;

pub const XxHash64 = std.hash.XxHash64;

/// XXH64 with seed 0, the one checksum of the format ([ZR-SUM-001]).
pub fn xxh64(bytes: []const u8) u64 {
    return XxHash64.hash(0, bytes);
}

// Format constants and limits, spec §3 and §8.
pub const magic = [8]u8{ 0x89, 'Z', 'R', 'E', 'C', '\r', '\n', 0x1a };
pub const format_major: u16 = 1;
/// The newest minor this core implements. Writers write the lowest minor whose codes a store
/// uses ([ZR-HDR-018]), so a store without 1.1 dtypes is written as 1.0, byte for byte.
pub const format_minor: u16 = 2;
pub const header_fixed_bytes: usize = 128;
pub const data_shards_min: u64 = 1;
pub const data_shards_max: u64 = 255;
pub const ndim_max: u64 = 32;
pub const record_size_bytes_max: u64 = 1 << 31;
pub const stored_size_bytes_max: u64 = (1 << 32) - 1;
pub const dim_max: u64 = (1 << 32) - 1;
pub const dict_size_bytes_max: u64 = 1 << 24;
pub const record_count_max: u64 = 1 << 48;
/// Index parts (spec §4.1, §8): the largest shifts and the most sum groups a reader accepts.
pub const index_block_shift_max: u8 = 48;
pub const index_group_shift_max: u8 = 48;
pub const index_groups_max: u64 = 1 << 16;
/// The writer defaults of [ZR-PRT-008]: index blocks of 2^8 entries, sum groups of at least
/// 2^10 block sums.
pub const index_block_shift_default: u8 = 8;
pub const index_group_shift_min_default: u8 = 10;
pub const index_entry_fixed_bytes: u32 = 24;
/// The largest item size of a dtype (NumPy's own bound: its itemsize is a C int).
pub const itemsize_bytes_max: u64 = (1 << 31) - 1;
/// The largest product of a shape's non-zero axes times the itemsize ([ZR-HDR-021],
/// [ZR-IDX-007]): the most bytes a 64-bit NumPy array may span, which it checks even when
/// another axis is zero.
pub const extent_bytes_max: u64 = (1 << 63) - 1;
/// The largest unit count of a datetime64 or timedelta64 dtype (NumPy keeps it in a C int).
pub const unit_count_max: u64 = (1 << 31) - 1;
/// A compressed record's frame may declare a window of at most its logical size rounded up to
/// a power of two, and always at least this much ([ZR-COD-008]).
pub const window_log_floor: u6 = 27;

/// The largest header any valid store can have: the fixed part, the largest variable part,
/// padding and the checksum ([ZR-HDR-022]). Readers refuse to allocate more than this for a
/// header.
pub const header_size_bytes_max: u64 = header_fixed_bytes + 8 * ndim_max + 8 * data_shards_max +
    8 * index_groups_max + dict_size_bytes_max + 8;

comptime {
    std.debug.assert(header_size_bytes_max == 17_303_936);
}

/// required_features bit 0 (format 1.2): the store has index parts (spec §4.1).
pub const feature_index_parts: u64 = 1 << 0;
/// The minor version that defined `feature_index_parts`.
pub const index_parts_minor: u16 = 2;

/// The bits of required_features this core implements ([ZR-HDR-017]). A later minor that
/// defines one adds it here together with the code that honours it.
pub const required_features_known: u64 = feature_index_parts;

/// ⌈n / 2^shift⌉ without overflow, for any n and any shift up to 63: the number of index
/// blocks of n records, or of sum groups of n block sums (spec §4.1).
pub fn partsOf(n: u64, shift: u8) u64 {
    std.debug.assert(shift < 64);
    const sh: u6 = @intCast(shift);
    const mask = (@as(u64, 1) << sh) - 1;
    return (n >> sh) + @intFromBool(n & mask != 0);
}

/// T, the number of sum groups of a store of `record_count` records (spec §4.1).
pub fn groupCount(record_count: u64, block_shift: u8, group_shift: u8) u64 {
    return partsOf(partsOf(record_count, block_shift), group_shift);
}

/// The writer defaults of [ZR-PRT-008] for `record_count` records: s = 8 and g the smallest
/// value of at least 10 for which T <= index_groups_max.
pub fn defaultPartShifts(record_count: u64) [2]u8 {
    const s = index_block_shift_default;
    var g = index_group_shift_min_default;
    while (groupCount(record_count, s, g) > index_groups_max) g += 1;
    return .{ s, g };
}

pub const Kind = enum(u8) {
    dense = 1,
    ragged = 2,
};

pub const Codec = enum(u8) {
    raw = 0,
    zstd = 1,
    zstd_dict = 2,

    pub fn name(c: Codec) []const u8 {
        return @tagName(c);
    }
};

/// How a dtype's parameters (header fields dtype_length and dtype_unit, spec §3.3) are used.
pub const Param = enum {
    /// A dtype of format 1.0: both fields are zero.
    none,
    /// S<n> and V<n>: dtype_length is the item size n in bytes; dtype_unit is zero.
    bytes,
    /// U<n>: dtype_length is the number n of UCS-4 characters, the item size 4n; dtype_unit
    /// is zero.
    chars,
    /// datetime64 and timedelta64: dtype_unit is the unit (`datetime_units`) and dtype_length
    /// the count of units per tick (the 5 of M8[5s]); the item size is 8.
    unit,
};

/// One dtype code of spec §3.3: its NumPy name, item size (0 for a parametric dtype, whose
/// item size the header gives), how its parameters are used and the `descr` NumPy writes in a
/// .npy file for it (little-endian; one-byte types have no byte order). A parametric dtype's
/// descr continues with its parameter: `<M8` + `[5s]`, `|S` + `3`.
pub const Dtype = struct {
    code: u8,
    name: [:0]const u8,
    itemsize: u8,
    npy_descr: []const u8,
    param: Param = .none,
    /// The minor version of the format that defined the code.
    minor: u16 = 0,
};

/// The dtype table of spec §3.3: the one copy in the core. The Python package reads it through
/// zr_dtype_info; the reference reader keeps its own, written from the spec, on purpose.
pub const dtypes = [_]Dtype{
    .{ .code = 1, .name = "bool", .itemsize = 1, .npy_descr = "|b1" },
    .{ .code = 2, .name = "int8", .itemsize = 1, .npy_descr = "|i1" },
    .{ .code = 3, .name = "uint8", .itemsize = 1, .npy_descr = "|u1" },
    .{ .code = 4, .name = "int16", .itemsize = 2, .npy_descr = "<i2" },
    .{ .code = 5, .name = "uint16", .itemsize = 2, .npy_descr = "<u2" },
    .{ .code = 6, .name = "int32", .itemsize = 4, .npy_descr = "<i4" },
    .{ .code = 7, .name = "uint32", .itemsize = 4, .npy_descr = "<u4" },
    .{ .code = 8, .name = "int64", .itemsize = 8, .npy_descr = "<i8" },
    .{ .code = 9, .name = "uint64", .itemsize = 8, .npy_descr = "<u8" },
    .{ .code = 10, .name = "float16", .itemsize = 2, .npy_descr = "<f2" },
    .{ .code = 11, .name = "float32", .itemsize = 4, .npy_descr = "<f4" },
    .{ .code = 12, .name = "float64", .itemsize = 8, .npy_descr = "<f8" },
    .{ .code = 13, .name = "complex64", .itemsize = 8, .npy_descr = "<c8" },
    .{ .code = 14, .name = "complex128", .itemsize = 16, .npy_descr = "<c16" },
    .{ .code = 15, .name = "datetime64", .itemsize = 8, .npy_descr = "<M8", .param = .unit, .minor = 1 },
    .{ .code = 16, .name = "timedelta64", .itemsize = 8, .npy_descr = "<m8", .param = .unit, .minor = 1 },
    .{ .code = 17, .name = "bytes", .itemsize = 0, .npy_descr = "|S", .param = .bytes, .minor = 1 },
    .{ .code = 18, .name = "str", .itemsize = 0, .npy_descr = "<U", .param = .chars, .minor = 1 },
    .{ .code = 19, .name = "void", .itemsize = 0, .npy_descr = "|V", .param = .bytes, .minor = 1 },
};

/// The datetime64/timedelta64 units of spec §3.3 by code (code = index + 1), as NumPy spells
/// them. Code 0 (NumPy's generic unit) and codes above 13 are reserved.
pub const datetime_units = [_][:0]const u8{ "Y", "M", "W", "D", "h", "m", "s", "ms", "us", "ns", "ps", "fs", "as" };

comptime {
    for (dtypes, 1..) |dt, code| std.debug.assert(dt.code == code);
}

/// The entry of a dtype code, or null for a reserved code.
pub fn dtype(code: u8) ?*const Dtype {
    return if (code >= 1 and code <= dtypes.len) &dtypes[code - 1] else null;
}

pub fn dtypeName(code: u8) []const u8 {
    return if (dtype(code)) |dt| dt.name else "reserved";
}

/// The NumPy name of datetime unit `code`, or null for a reserved code.
pub fn unitName(code: u8) ?[:0]const u8 {
    return if (code >= 1 and code <= datetime_units.len) datetime_units[code - 1] else null;
}

/// What is wrong with a dtype code and its parameters, in the order spec §9.2 checks it.
pub const DtypeProblem = enum {
    /// The code is reserved ([ZR-HDR-006]).
    unknown_code,
    /// A datetime64/timedelta64 unit code that is reserved ([ZR-HDR-019]).
    unknown_unit,
    /// A parameter field that this dtype does not use is not zero ([ZR-HDR-019]).
    unused_param,
    /// dtype_length is 0 or, for a unit count, above unit_count_max ([ZR-HDR-019]).
    bad_length,
    /// The item size exceeds itemsize_bytes_max ([ZR-HDR-020]).
    itemsize_limit,
};

/// The item size of a dtype code with its parameters (spec §3.3), or what is wrong with them.
pub fn dtypeCheck(code: u8, length: u32, unit: u8) union(enum) { ok: u64, bad: DtypeProblem } {
    const dt = dtype(code) orelse return .{ .bad = .unknown_code };
    switch (dt.param) {
        .none => if (length != 0 or unit != 0) return .{ .bad = .unused_param },
        .unit => {
            if (unitName(unit) == null) return .{ .bad = .unknown_unit };
            if (length == 0 or length > unit_count_max) return .{ .bad = .bad_length };
        },
        .bytes, .chars => {
            if (unit != 0) return .{ .bad = .unused_param };
            if (length == 0) return .{ .bad = .bad_length };
        },
    }
    const size: u64 = switch (dt.param) {
        .none, .unit => dt.itemsize,
        .bytes => length,
        .chars => 4 * @as(u64, length),
    };
    if (size > itemsize_bytes_max) return .{ .bad = .itemsize_limit };
    return .{ .ok = size };
}

/// The minor version a store of dtype `code` needs (the one that defined the code).
pub fn minorFor(code: u8) u16 {
    return if (dtype(code)) |dt| dt.minor else 0;
}

/// The NumPy descr of a valid dtype with its parameters (`<M8[5s]`, `|S3`, `<f4`) into `buf`.
pub fn npyDescr(buf: []u8, code: u8, length: u32, unit: u8) []const u8 {
    const dt = dtype(code).?;
    return switch (dt.param) {
        .none => dt.npy_descr,
        .bytes, .chars => std.fmt.bufPrint(buf, "{s}{d}", .{ dt.npy_descr, length }) catch unreachable,
        .unit => if (length == 1)
            std.fmt.bufPrint(buf, "{s}[{s}]", .{ dt.npy_descr, unitName(unit).? }) catch unreachable
        else
            std.fmt.bufPrint(buf, "{s}[{d}{s}]", .{ dt.npy_descr, length, unitName(unit).? }) catch unreachable,
    };
}

/// Index entry size from kind and rank ([ZR-HDR-012], spec §4).
pub fn indexEntrySize(kind: Kind, ndim: u8) u32 {
    return switch (kind) {
        .dense => index_entry_fixed_bytes,
        .ragged => std.mem.alignForward(u32, index_entry_fixed_bytes + 4 * @as(u32, ndim), 8),
    };
}

/// Total header size for a schema, `groups` sum groups (T, 0 without index parts) and a
/// dictionary size, spec §3.2 (checksum included). `groups` is at most index_groups_max.
pub fn headerSize(kind: Kind, ndim: u8, data_shards: u8, groups: u64, dict_size: u32) u64 {
    std.debug.assert(groups <= index_groups_max);
    const shape_bytes: u64 = if (kind == .dense) 8 * @as(u64, ndim) else 0;
    const variable = shape_bytes + 8 * @as(u64, data_shards) + 8 * groups + dict_size;
    return std.mem.alignForward(u64, header_fixed_bytes + variable, 8) + 8;
}

/// Product of `dims` times `itemsize`, or null if it exceeds `record_size_bytes_max`. An axis of
/// length zero makes the record empty whatever the other axes are, so it is checked first and
/// huge axes beside it do not count as overflow.
pub fn logicalSize(dims: []const u64, itemsize: u64) ?u64 {
    for (dims) |d| if (d == 0) return 0;
    var size: u64 = itemsize;
    for (dims) |d| {
        size = std.math.mul(u64, size, d) catch return null;
        if (size > record_size_bytes_max) return null;
    }
    if (size > record_size_bytes_max) return null;
    return size;
}

/// Whether the product of the non-zero axes of `dims` times `itemsize` is at most
/// `extent_bytes_max` ([ZR-HDR-021], [ZR-IDX-007]): NumPy refuses any larger shape, even one
/// with a zero axis, so no reader could return such a record as an array.
pub fn extentFits(dims: []const u64, itemsize: u64) bool {
    var size: u64 = itemsize;
    for (dims) |d| {
        if (d == 0) continue;
        size = std.math.mul(u64, size, d) catch return false;
        if (size > extent_bytes_max) return false;
    }
    return size <= extent_bytes_max;
}

pub const Header = struct {
    format_major: u16 = format_major,
    /// Writers set the lowest minor whose codes the store uses (`minorFor`, [ZR-HDR-018]).
    format_minor: u16 = 0,
    header_size: u32 = 0,
    kind: Kind,
    dtype: u8,
    /// The dtype's parameters (spec §3.3): zero for the dtypes of format 1.0.
    dtype_length: u32 = 0,
    dtype_unit: u8 = 0,
    required_features: u64 = 0,
    /// With `feature_index_parts`: s and g of spec §4.1; zero without it.
    index_block_shift: u8 = 0,
    index_group_shift: u8 = 0,
    ndim: u8,
    codec: Codec,
    data_shards: u8,
    record_count: u64 = 0,
    logical_bytes: u64 = 0,
    stored_bytes: u64 = 0,
    index_entry_size: u32 = 0,
    dict_size: u32 = 0,
    index_size: u64 = 0,
    index_checksum: u64 = 0,
    dict_checksum: u64 = 0,
    item_shape: [ndim_max]u64 = @splat(0),
    shard_sizes: [data_shards_max]u64 = @splat(0),
    /// Offset of the dictionary within the header bytes (decoding only).
    dict_offset: u32 = 0,
    /// Offset of group_sums within the header bytes (decoding only; spec §3.2).
    group_sums_offset: u32 = 0,
    /// The header file's checksum ([ZR-HDR-004]; decoding only): the store's identity.
    header_checksum: u64 = 0,

    /// The item size of the header's dtype with its parameters; only meaningful for a
    /// validated header (or a schema checked with `dtypeCheck`).
    pub fn itemsize(h: *const Header) u64 {
        return dtypeCheck(h.dtype, h.dtype_length, h.dtype_unit).ok;
    }

    /// Whether the store has index parts (spec §4.1).
    pub fn hasParts(h: *const Header) bool {
        return h.required_features & feature_index_parts != 0;
    }

    /// B, the number of index blocks (0 without index parts).
    pub fn blockCount(h: *const Header) u64 {
        return if (h.hasParts()) partsOf(h.record_count, h.index_block_shift) else 0;
    }

    /// T, the number of sum groups (0 without index parts).
    pub fn groupCount(h: *const Header) u64 {
        return if (h.hasParts()) partsOf(h.blockCount(), h.index_group_shift) else 0;
    }

    /// Group sum t of a header decoded from `bytes` (t < groupCount()).
    pub fn groupSum(h: *const Header, bytes: []const u8, t: u64) u64 {
        std.debug.assert(t < h.groupCount());
        return get(u64, bytes, h.group_sums_offset + 8 * @as(usize, @intCast(t)));
    }

    /// Dense record size; only meaningful for a validated Dense header.
    pub fn recordSize(h: *const Header) u64 {
        return logicalSize(h.item_shape[0..h.ndim], h.itemsize()).?;
    }
};

/// Fails the build if `T` has padding: every byte of an on-disk struct is one of its fields,
/// so a field added or resized without its neighbours moved cannot leave bytes unwritten.
pub fn assertNoPadding(comptime T: type) void {
    var fields_bytes: usize = 0;
    for (@typeInfo(T).@"struct".field_types) |F| fields_bytes += @sizeOf(F);
    std.debug.assert(fields_bytes == @sizeOf(T));
}

/// The fixed part of `header.zrh` (spec §3.1), field for field. Both supported targets are
/// little-endian, so the struct's bytes are the file's bytes (checked at compile time).
pub const FixedHeader = extern struct {
    magic: [8]u8,
    format_major: u16,
    format_minor: u16,
    header_size: u32,
    kind: u8,
    dtype: u8,
    ndim: u8,
    codec: u8,
    data_shards: u8,
    reserved0: [3]u8,
    record_count: u64,
    logical_bytes: u64,
    stored_bytes: u64,
    index_entry_size: u32,
    dict_size: u32,
    index_size: u64,
    index_checksum: u64,
    dict_checksum: u64,
    required_features: u64,
    dtype_length: u32,
    dtype_unit: u8,
    index_block_shift: u8,
    index_group_shift: u8,
    reserved1: [33]u8,

    fn read(bytes: []const u8) FixedHeader {
        return std.mem.bytesToValue(FixedHeader, bytes[0..header_fixed_bytes]);
    }
};

comptime {
    std.debug.assert(@import("builtin").cpu.arch.endian() == .little);
    std.debug.assert(@sizeOf(FixedHeader) == header_fixed_bytes);
    assertNoPadding(FixedHeader);
    // The offsets of spec §3.1's table; a field out of place fails the build.
    const offsets = .{
        .{ "format_major", 8 },       .{ "format_minor", 10 },      .{ "header_size", 12 },   .{ "kind", 16 },
        .{ "dtype", 17 },             .{ "ndim", 18 },              .{ "codec", 19 },         .{ "data_shards", 20 },
        .{ "reserved0", 21 },         .{ "record_count", 24 },      .{ "logical_bytes", 32 }, .{ "stored_bytes", 40 },
        .{ "index_entry_size", 48 },  .{ "dict_size", 52 },         .{ "index_size", 56 },    .{ "index_checksum", 64 },
        .{ "dict_checksum", 72 },     .{ "required_features", 80 }, .{ "dtype_length", 88 },  .{ "dtype_unit", 92 },
        .{ "index_block_shift", 93 }, .{ "index_group_shift", 94 }, .{ "reserved1", 95 },
    };
    for (offsets) |pair| std.debug.assert(@offsetOf(FixedHeader, pair[0]) == pair[1]);
}

/// Encodes a header into `out`, whose length must be `headerSize(...)` for the header's
/// schema, `group_sums.len` and `dict.len`. The fields header_size, index_entry_size,
/// dict_size and dict_checksum are derived here, not taken from `h`; `group_sums` holds T sums
/// for a header with index parts and none without.
pub fn encodeHeader(h: *const Header, group_sums: []const u64, dict: []const u8, out: []u8) void {
    std.debug.assert(group_sums.len == h.groupCount());
    const dict_size: u32 = @intCast(dict.len);
    const size = headerSize(h.kind, h.ndim, h.data_shards, group_sums.len, dict_size);
    std.debug.assert(out.len == size);
    @memset(out, 0);
    const fixed: FixedHeader = .{
        .magic = magic,
        .format_major = h.format_major,
        .format_minor = h.format_minor,
        .header_size = @intCast(size),
        .kind = @backingInt(h.kind),
        .dtype = h.dtype,
        .ndim = h.ndim,
        .codec = @backingInt(h.codec),
        .data_shards = h.data_shards,
        .reserved0 = @splat(0),
        .record_count = h.record_count,
        .logical_bytes = h.logical_bytes,
        .stored_bytes = h.stored_bytes,
        .index_entry_size = indexEntrySize(h.kind, h.ndim),
        .dict_size = dict_size,
        .index_size = h.index_size,
        .index_checksum = h.index_checksum,
        .dict_checksum = if (dict.len == 0) 0 else xxh64(dict),
        .required_features = h.required_features,
        .dtype_length = h.dtype_length,
        .dtype_unit = h.dtype_unit,
        .index_block_shift = if (h.hasParts()) h.index_block_shift else 0,
        .index_group_shift = if (h.hasParts()) h.index_group_shift else 0,
        .reserved1 = @splat(0),
    };
    @memcpy(out[0..header_fixed_bytes], std.mem.asBytes(&fixed));
    var pos: usize = header_fixed_bytes;
    const shape: []const u64 = if (h.kind == .dense) h.item_shape[0..h.ndim] else &.{};
    for (shape) |dim| {
        put(u64, out, pos, dim);
        pos += 8;
    }
    for (h.shard_sizes[0..h.data_shards]) |size_k| {
        put(u64, out, pos, size_k);
        pos += 8;
    }
    for (group_sums) |sum| {
        put(u64, out, pos, sum);
        pos += 8;
    }
    @memcpy(out[pos..][0..dict.len], dict);
    put(u64, out, out.len - 8, xxh64(out[0 .. out.len - 8]));
}

pub const HeaderError = error{
    BadMagic,
    VersionUnsupported,
    Corrupt,
    ChecksumMismatch,
    Unsupported,
    LimitExceeded,
};

/// Checks the magic and the major version ([ZR-HDR-001], [ZR-HDR-002]) on the first bytes of a
/// header file, which is all a reader looks at before it trusts the file's size.
pub fn checkMagicVersion(bytes: []const u8, name: []const u8, d: *Diag) HeaderError!void {
    // [ZR-HDR-001]
    if (bytes.len < 8 or !std.mem.eql(u8, bytes[0..8], &magic)) {
        return d.fail(error.BadMagic, "'{s}' is not a zrecord header: its first 8 bytes are not " ++
            "the magic 89 5A 52 45 43 0D 0A 1A (ZR-HDR-001)", .{name});
    }
    // [ZR-ERR-002] The version is bytes 8..11; a shorter file holds none to judge.
    if (bytes.len < 12) {
        return d.fail(error.Corrupt, "'{s}' is truncated: {d} bytes, too short to hold the " ++
            "format version (bytes 8 to 11) (ZR-ERR-002, ZR-HDR-003)", .{ name, bytes.len });
    }
    // [ZR-HDR-002] [ZR-HDR-016] The major version is interpreted before any other field; any
    // major but 1, 0 included, is another format.
    const major = get(u16, bytes, @offsetOf(FixedHeader, "format_major"));
    const minor = get(u16, bytes, @offsetOf(FixedHeader, "format_minor"));
    if (major != format_major) {
        return d.fail(error.VersionUnsupported, "'{s}' has format version {d}.{d}, but this " ++
            "reader supports format version {d}.{d} (major {d} only) (ZR-HDR-002, ZR-HDR-016)", .{
            name, major, minor, format_major, format_minor, format_major,
        });
    }
}

/// What a reader judges of a header file before it reads the file whole: the magic and the
/// major version on its first bytes `prefix` ([ZR-HDR-001], [ZR-HDR-002]), then its size
/// `file_size` against the largest valid header ([ZR-HDR-022]), so that a file of another kind
/// or a newer major is reported as such, and no file larger than any header is read.
pub fn checkHeaderPrefix(prefix: []const u8, file_size: u64, name: []const u8, d: *Diag) HeaderError!void {
    try checkMagicVersion(prefix, name, d);
    if (file_size > header_size_bytes_max) {
        return d.fail(error.Corrupt, "'{s}' has {d} bytes, more than the largest valid header " ++
            "({d} bytes) (ZR-HDR-022)", .{ name, file_size, header_size_bytes_max });
    }
}

/// Validates and decodes a complete header file. `name` names the file in messages. The
/// checks run in the order of spec §9.2 ([ZR-ERR-003]), one step per function below.
pub fn decodeHeader(bytes: []const u8, name: []const u8, d: *Diag) HeaderError!Header {
    try checkMagicVersion(bytes, name, d);
    try checkSizeAndChecksum(bytes, name, d);
    const header_checksum = get(u64, bytes, bytes.len - 8);
    const f = FixedHeader.read(bytes);
    try checkCodes(&f, name, d);
    // [ZR-HDR-005] reserved0 and the undefined rest of reserved1: after the codes and feature
    // bits, so that what a later minor defines there is reported as unsupported, not corrupt.
    for (f.reserved0, @offsetOf(FixedHeader, "reserved0")..) |b, off| {
        if (b != 0) return reservedError(d, name, "reserved0", off, b);
    }
    // [ZR-PRT-007] Without index_parts, bytes 93 and 94 are reserved1 as in format 1.1.
    if (f.required_features & feature_index_parts == 0) {
        const shifts = [2]u8{ f.index_block_shift, f.index_group_shift };
        for (shifts, @offsetOf(FixedHeader, "index_block_shift")..) |b, off| {
            if (b != 0) return reservedError(d, name, "reserved1", off, b);
        }
    }
    for (f.reserved1, @offsetOf(FixedHeader, "reserved1")..) |b, off| {
        if (b != 0) return reservedError(d, name, "reserved1", off, b);
    }
    var h = try decodeSchema(&f, name, d);
    h.header_checksum = header_checksum;
    try decodeVariable(&h, bytes, name, d);
    try checkTotals(&h, bytes, name, d);
    return h;
}

/// [ZR-HDR-003] [ZR-HDR-022] the file's size against header_size, before the variable part is
/// read; [ZR-HDR-004] the checksum.
fn checkSizeAndChecksum(bytes: []const u8, name: []const u8, d: *Diag) HeaderError!void {
    if (bytes.len < header_fixed_bytes + 8) {
        return d.fail(error.Corrupt, "'{s}' is truncated: {d} bytes, but a header needs at least " ++
            "{d} (128-byte fixed part and 8-byte checksum) (ZR-HDR-003)", .{ name, bytes.len, header_fixed_bytes + 8 });
    }
    if (bytes.len > header_size_bytes_max) {
        return d.fail(error.Corrupt, "'{s}' has {d} bytes, more than the largest valid header " ++
            "({d} bytes) (ZR-HDR-022)", .{ name, bytes.len, header_size_bytes_max });
    }
    const header_size = get(u32, bytes, @offsetOf(FixedHeader, "header_size"));
    if (header_size != bytes.len) {
        return d.fail(error.Corrupt, "'{s}' declares header_size {d} but the file has {d} bytes " ++
            "(ZR-HDR-003)", .{ name, header_size, bytes.len });
    }
    if (header_size % 8 != 0) {
        return d.fail(error.Corrupt, "'{s}' declares header_size {d}, which is not a multiple of " ++
            "8 (ZR-HDR-003)", .{ name, header_size });
    }
    const want_sum = get(u64, bytes, bytes.len - 8);
    if (want_sum != xxh64(bytes[0 .. bytes.len - 8])) {
        return d.fail(error.ChecksumMismatch, "'{s}' header checksum mismatch: its first {d} bytes " ++
            "do not match the header_checksum 0x{x:0>16} it ends with (ZR-HDR-004)", .{
            name, bytes.len - 8, want_sum,
        });
    }
}

/// [ZR-HDR-017] the feature bits, [ZR-HDR-006] [ZR-COD-003] the codes, then the dtype's
/// parameters ([ZR-HDR-019], [ZR-HDR-020]): everything that says whether this reader can read
/// the store at all.
fn checkCodes(f: *const FixedHeader, name: []const u8, d: *Diag) HeaderError!void {
    const unknown = f.required_features & ~required_features_known;
    if (unknown != 0) {
        return d.fail(error.Unsupported, "'{s}' requires format features 0x{x} (required_features " ++
            "bits {d} and up) that this reader does not implement; a newer reader is needed " ++
            "(ZR-HDR-017)", .{ name, unknown, @ctz(unknown) });
    }
    if (f.kind != 1 and f.kind != 2) {
        return d.fail(error.Unsupported, "'{s}' has unknown kind {d}; kind must be 1 " ++
            "(Dense) or 2 (Ragged) (ZR-HDR-006)", .{ name, f.kind });
    }
    if (dtype(f.dtype) == null) {
        return d.fail(error.Unsupported, "'{s}' has unknown dtype {d}; dtype must be a code " ++
            "1..{d} of spec section 3.3 (ZR-HDR-006)", .{ name, f.dtype, dtypes.len });
    }
    // [ZR-COD-003]
    if (f.codec > 2) {
        return d.fail(error.Unsupported, "'{s}' has unknown codec {d}; codec must be 0 " ++
            "(raw), 1 (zstd) or 2 (zstd_dict) (ZR-HDR-006, ZR-COD-003)", .{ name, f.codec });
    }
    switch (dtypeCheck(f.dtype, f.dtype_length, f.dtype_unit)) {
        .ok => {},
        .bad => |problem| return dtypeError(d, name, f.dtype, f.dtype_length, f.dtype_unit, problem),
    }
}

fn dtypeError(d: *Diag, name: []const u8, code: u8, length: u32, unit: u8, problem: DtypeProblem) HeaderError {
    const dt_name = dtypeName(code);
    return switch (problem) {
        .unknown_code => unreachable,
        .unknown_unit => d.fail(error.Unsupported, "'{s}' has dtype {s} with unknown unit code " ++
            "{d}; the units are codes 1..{d} of spec section 3.3 (ZR-HDR-019)", .{
            name, dt_name, unit, datetime_units.len,
        }),
        .unused_param => d.fail(error.Corrupt, "'{s}' has dtype {s} with dtype_length {d} and " ++
            "dtype_unit {d}; this dtype does not use {s}, which must be zero (ZR-HDR-019)", .{
            name, dt_name, length, unit, if (dtype(code).?.param == .none) "either" else "dtype_unit",
        }),
        .bad_length => d.fail(error.Corrupt, "'{s}' has dtype {s} with dtype_length {d}; it must " ++
            "be in 1..{d} (ZR-HDR-019)", .{
            name, dt_name, length, if (dtype(code).?.param == .unit) unit_count_max else std.math.maxInt(u32),
        }),
        .itemsize_limit => d.fail(error.LimitExceeded, "'{s}' has dtype {s} with dtype_length {d}: " ++
            "an item size above itemsize_bytes_max {d} (ZR-HDR-020)", .{ name, dt_name, length, itemsize_bytes_max }),
    };
}

/// The schema fields ([ZR-HDR-007], [ZR-HDR-008], the dictionary size limit) and the exact
/// header size they imply ([ZR-HDR-003]); returns the header with every fixed field set. The
/// codes were checked by `checkCodes`.
fn decodeSchema(f: *const FixedHeader, name: []const u8, d: *Diag) HeaderError!Header {
    const kind: Kind = @fromBackingInt(@intCast(f.kind));
    const codec: Codec = @fromBackingInt(@intCast(f.codec));
    // [ZR-HDR-007]
    if (f.data_shards < data_shards_min) {
        return d.fail(error.LimitExceeded, "'{s}' has data_shards 0; data_shards must be in " ++
            "{d}..{d} (data_shards_min, ZR-HDR-007)", .{ name, data_shards_min, data_shards_max });
    }
    // [ZR-HDR-008]
    if (f.ndim > ndim_max) {
        return d.fail(error.LimitExceeded, "'{s}' has ndim {d}, above ndim_max {d} (ZR-HDR-008)", .{
            name, f.ndim, ndim_max,
        });
    }
    if (kind == .ragged and f.ndim == 0) {
        return d.fail(error.Corrupt, "'{s}' is a Ragged store with ndim 0; a Ragged store needs " ++
            "ndim >= 1 (ZR-HDR-008)", .{name});
    }
    if (f.dict_size > dict_size_bytes_max) {
        return d.fail(error.LimitExceeded, "'{s}' has dict_size {d}, above dict_size_bytes_max " ++
            "{d} (ZR-HDR-013)", .{ name, f.dict_size, dict_size_bytes_max });
    }
    const groups = try checkPartShifts(f, name, d);
    // [ZR-HDR-003] The size must match the variable part exactly.
    const want_size = headerSize(kind, f.ndim, f.data_shards, groups, f.dict_size);
    if (want_size != f.header_size) {
        return d.fail(error.Corrupt, "'{s}' declares header_size {d}, but its kind, ndim {d}, " ++
            "data_shards {d}, {d} sum groups and dict_size {d} require {d} (ZR-HDR-003)", .{
            name, f.header_size, f.ndim, f.data_shards, groups, f.dict_size, want_size,
        });
    }
    return .{
        .format_major = f.format_major,
        .format_minor = f.format_minor,
        .header_size = f.header_size,
        .kind = kind,
        .dtype = f.dtype,
        .dtype_length = f.dtype_length,
        .dtype_unit = f.dtype_unit,
        .required_features = f.required_features,
        .index_block_shift = f.index_block_shift,
        .index_group_shift = f.index_group_shift,
        .ndim = f.ndim,
        .codec = codec,
        .data_shards = f.data_shards,
        .record_count = f.record_count,
        .logical_bytes = f.logical_bytes,
        .stored_bytes = f.stored_bytes,
        .index_entry_size = f.index_entry_size,
        .dict_size = f.dict_size,
        .index_size = f.index_size,
        .index_checksum = f.index_checksum,
        .dict_checksum = f.dict_checksum,
    };
}

/// Step 2.10a ([ZR-PRT-002], [ZR-PRT-003]): with index_parts, each shift at most 48, then T at
/// most index_groups_max; returns T (0 without index parts). T comes from record_count before
/// record_count is judged against its own limit (step 2.15), so it is computed without
/// overflow for any record_count.
fn checkPartShifts(f: *const FixedHeader, name: []const u8, d: *Diag) HeaderError!u64 {
    if (f.required_features & feature_index_parts == 0) return 0;
    const shifts = .{
        .{ "index_block_shift", f.index_block_shift, index_block_shift_max },
        .{ "index_group_shift", f.index_group_shift, index_group_shift_max },
    };
    inline for (shifts) |sh| if (sh[1] > sh[2]) {
        return d.fail(error.LimitExceeded, "'{s}' has {s} {d}, above {s}_max {d} (ZR-PRT-002)", .{
            name, sh[0], sh[1], sh[0], sh[2],
        });
    };
    const groups = groupCount(f.record_count, f.index_block_shift, f.index_group_shift);
    if (groups > index_groups_max) {
        return d.fail(error.LimitExceeded, "'{s}' has {d} sum groups (record_count {d}, " ++
            "index_block_shift {d}, index_group_shift {d}), more than index_groups_max {d} " ++
            "(ZR-PRT-003)", .{
            name, groups, f.record_count, f.index_block_shift, f.index_group_shift, index_groups_max,
        });
    }
    return groups;
}

/// The variable part (spec §3.2): item_shape, shard_sizes, where group_sums and the dictionary
/// lie, and the padding ([ZR-HDR-005]).
fn decodeVariable(h: *Header, bytes: []const u8, name: []const u8, d: *Diag) HeaderError!void {
    var pos: usize = header_fixed_bytes;
    const shape: []u64 = if (h.kind == .dense) h.item_shape[0..h.ndim] else &.{};
    for (shape) |*dim| {
        dim.* = get(u64, bytes, pos);
        pos += 8;
    }
    for (h.shard_sizes[0..h.data_shards]) |*size_k| {
        size_k.* = get(u64, bytes, pos);
        pos += 8;
    }
    h.group_sums_offset = @intCast(pos);
    pos += 8 * @as(usize, @intCast(h.groupCount()));
    h.dict_offset = @intCast(pos);
    pos += h.dict_size;
    for (bytes[pos .. bytes.len - 8], pos..) |b, off| if (b != 0) return reservedError(d, name, "padding", off, b);
}

/// The rules that relate fields to each other ([ZR-HDR-009] .. [ZR-HDR-014]).
fn checkTotals(h: *const Header, bytes: []const u8, name: []const u8, d: *Diag) HeaderError!void {
    // [ZR-HDR-009]
    if (h.kind == .dense and logicalSize(h.item_shape[0..h.ndim], h.itemsize()) == null) {
        return d.fail(error.LimitExceeded, "'{s}' has a Dense record size (item_shape times " ++
            "itemsize {d}) above record_size_bytes_max {d} (ZR-HDR-009)", .{
            name, h.itemsize(), record_size_bytes_max,
        });
    }
    // [ZR-HDR-021] An empty record's other axes still have to make a NumPy shape.
    if (h.kind == .dense and !extentFits(h.item_shape[0..h.ndim], h.itemsize())) {
        return d.fail(error.LimitExceeded, "'{s}' has item_shape whose non-zero axes times the " ++
            "itemsize {d} exceed extent_bytes_max {d}: no NumPy array has that shape (ZR-HDR-021)", .{
            name, h.itemsize(), extent_bytes_max,
        });
    }
    // [ZR-HDR-010] The sum is overflow-checked: a crafted header must not wrap around.
    var shard_sum: u64 = 0;
    for (h.shard_sizes[0..h.data_shards]) |size_k| {
        shard_sum = std.math.add(u64, shard_sum, size_k) catch return d.fail(error.Corrupt, "'{s}' has " ++
            "shard_sizes whose sum overflows 64 bits (ZR-HDR-010)", .{name});
    }
    if (shard_sum != h.stored_bytes) {
        return d.fail(error.Corrupt, "'{s}' has stored_bytes {d} but its shard_sizes sum to {d} " ++
            "(ZR-HDR-010)", .{ name, h.stored_bytes, shard_sum });
    }
    // [ZR-HDR-014] before the index size, whose product it bounds.
    if (h.record_count > record_count_max) {
        return d.fail(error.LimitExceeded, "'{s}' has record_count {d}, above record_count_max " ++
            "{d} (ZR-HDR-014)", .{ name, h.record_count, record_count_max });
    }
    // [ZR-HDR-012]
    const want_entry = indexEntrySize(h.kind, h.ndim);
    if (h.index_entry_size != want_entry) {
        return d.fail(error.Corrupt, "'{s}' has index_entry_size {d}, but kind {s} with ndim {d} " ++
            "requires {d} (ZR-HDR-012)", .{ name, h.index_entry_size, @tagName(h.kind), h.ndim, want_entry });
    }
    // [ZR-HDR-011] record_count <= 2^48 and entry size <= 152 keep this product far below 2^64.
    const want_index = h.record_count * want_entry;
    if (h.index_size != want_index) {
        return d.fail(error.Corrupt, "'{s}' has index_size {d}, but record_count {d} times " ++
            "index_entry_size {d} is {d} (ZR-HDR-011)", .{
            name, h.index_size, h.record_count, want_entry, want_index,
        });
    }
    try checkDictionary(h, bytes, name, d);
}

/// [ZR-HDR-013]: a dictionary exactly with zstd_dict, and its checksum, which is 0 without
/// one; any other value is a checksum mismatch ([ZR-HDR-023]).
fn checkDictionary(h: *const Header, bytes: []const u8, name: []const u8, d: *Diag) HeaderError!void {
    if (h.codec == .zstd_dict and h.dict_size == 0) {
        return d.fail(error.Corrupt, "'{s}' uses codec zstd_dict but has dict_size 0; zstd_dict " ++
            "needs a dictionary (ZR-HDR-013, ZR-COD-002)", .{name});
    }
    if (h.codec != .zstd_dict and h.dict_size != 0) {
        return d.fail(error.Corrupt, "'{s}' has dict_size {d} with codec {s}; only zstd_dict " ++
            "carries a dictionary (ZR-HDR-013)", .{ name, h.dict_size, h.codec.name() });
    }
    const dict = bytes[h.dict_offset..][0..h.dict_size];
    const want_dict_sum: u64 = if (h.dict_size == 0) 0 else xxh64(dict);
    if (h.dict_checksum != want_dict_sum) {
        if (h.dict_size == 0) return d.fail(error.ChecksumMismatch, "'{s}' dict_checksum mismatch: " ++
            "the store has no dictionary, so dict_checksum must be 0, not 0x{x:0>16} (ZR-HDR-023)", .{
            name, h.dict_checksum,
        });
        return d.fail(error.ChecksumMismatch, "'{s}' dict_checksum mismatch: the {d}-byte " ++
            "dictionary does not match the header's dict_checksum 0x{x:0>16} (ZR-HDR-013)", .{
            name, h.dict_size, h.dict_checksum,
        });
    }
}

fn reservedError(d: *Diag, name: []const u8, field: []const u8, off: usize, b: u8) HeaderError {
    return d.fail(error.Corrupt, "'{s}' has non-zero byte 0x{x:0>2} at offset {d} in {s}; " ++
        "reserved bytes must be zero (ZR-HDR-005)", .{ name, b, off, field });
}

/// The fixed part of an index entry (spec §4), field for field: the whole entry of a Dense
/// store, followed in a Ragged store by its shape (ndim u32 axes) and zero padding to a
/// multiple of 8 bytes. As with `FixedHeader`, the struct's bytes are the file's bytes.
pub const Entry = extern struct {
    offset: u64,
    stored_size: u32,
    shard: u8,
    reserved: [3]u8 = @splat(0),
    checksum: u64,
};

comptime {
    std.debug.assert(@sizeOf(Entry) == index_entry_fixed_bytes);
    assertNoPadding(Entry);
    const offsets = .{
        .{ "offset", 0 },
        .{ "stored_size", 8 },
        .{ "shard", 12 },
        .{ "reserved", 13 },
        .{ "checksum", 16 },
    };
    for (offsets) |pair| std.debug.assert(@offsetOf(Entry, pair[0]) == pair[1]);
}

/// The fixed part of the entry at the start of `bytes` (one whole entry, or more).
pub fn decodeEntry(bytes: []const u8) Entry {
    return std.mem.bytesToValue(Entry, bytes[0..index_entry_fixed_bytes]);
}

/// Encodes one entry; `out.len` is the entry size and `shape` has ndim axes (Ragged) or none.
/// The reserved bytes and the padding are written as zero, whatever `e.reserved` holds.
pub fn encodeEntry(out: []u8, e: Entry, shape: []const u64) void {
    var fixed = e;
    fixed.reserved = @splat(0);
    @memcpy(out[0..index_entry_fixed_bytes], std.mem.asBytes(&fixed));
    var pos: usize = index_entry_fixed_bytes;
    for (shape) |dim| {
        put(u32, out, pos, @intCast(dim));
        pos += 4;
    }
    @memset(out[pos..], 0);
}

/// The shape axes of a Ragged entry.
pub fn entryDim(bytes: []const u8, axis: usize) u64 {
    return get(u32, bytes, index_entry_fixed_bytes + 4 * axis);
}

pub const EntryError = error{ Corrupt, LimitExceeded };

/// What validateEntry needs of a header's dtype and shape, worked out once per index rather than
/// once per entry.
pub const EntrySizes = struct {
    itemsize: u64,
    /// Dense: every record's logical size; Ragged: 0.
    record_size: u64,

    pub fn of(h: *const Header) EntrySizes {
        return .{ .itemsize = h.itemsize(), .record_size = if (h.kind == .dense) h.recordSize() else 0 };
    }
};

/// Validates entry `i` in isolation against the header and the shard sizes (spec §4), in the
/// order of spec §9.3 ([ZR-ERR-003]), and returns its logical size. `sizes` is
/// `EntrySizes.of(h)`; `path` names the store in messages.
pub fn validateEntry(
    h: *const Header,
    sizes: EntrySizes,
    bytes: []const u8,
    i: u64,
    path: []const u8,
    d: *Diag,
) EntryError!u64 {
    const e = decodeEntry(bytes);
    d.record = @intCast(i);
    // [ZR-IDX-001]
    if (e.shard >= h.data_shards) {
        return d.fail(error.Corrupt, "store '{s}': index entry of record {d} names shard {d}, " ++
            "but the store has {d} data shards (ZR-IDX-001)", .{ path, i, e.shard, h.data_shards });
    }
    d.shard = e.shard;
    // [ZR-IDX-003]
    if (!std.mem.allEqual(u8, &e.reserved, 0)) {
        return d.fail(error.Corrupt, "store '{s}': index entry of record {d} has non-zero " ++
            "reserved bytes (ZR-IDX-003)", .{ path, i });
    }
    // [ZR-IDX-002] Compared as "offset > size - stored_size", which cannot overflow.
    const shard_size = h.shard_sizes[e.shard];
    if (e.stored_size > shard_size or e.offset > shard_size - e.stored_size) {
        return d.fail(error.Corrupt, "store '{s}': record {d} lies at bytes {d}+{d} of " ++
            "data-{d:0>3}.zrd, past its end at {d} bytes (ZR-IDX-002)", .{
            path, i, e.offset, e.stored_size, e.shard, shard_size,
        });
    }
    // [ZR-IDX-004]
    var logical: u64 = undefined;
    switch (h.kind) {
        .dense => logical = sizes.record_size,
        .ragged => {
            var dims: [ndim_max]u64 = undefined;
            for (dims[0..h.ndim], 0..) |*dim, axis| dim.* = entryDim(bytes, axis);
            logical = logicalSize(dims[0..h.ndim], sizes.itemsize) orelse {
                return d.fail(error.LimitExceeded, "store '{s}': record {d} has a shape whose " ++
                    "size exceeds record_size_bytes_max {d} (ZR-IDX-004)", .{ path, i, record_size_bytes_max });
            };
            // [ZR-IDX-007]
            if (!extentFits(dims[0..h.ndim], sizes.itemsize)) {
                return d.fail(error.LimitExceeded, "store '{s}': record {d} has a shape whose " ++
                    "non-zero axes times the itemsize exceed extent_bytes_max {d}: no NumPy " ++
                    "array has that shape (ZR-IDX-007)", .{ path, i, extent_bytes_max });
            }
            const pad_start = index_entry_fixed_bytes + 4 * @as(usize, h.ndim);
            for (bytes[pad_start..]) |b| if (b != 0) {
                return d.fail(error.Corrupt, "store '{s}': index entry of record {d} has " ++
                    "non-zero padding (ZR-IDX-003)", .{ path, i });
            };
        },
    }
    if (h.codec == .raw and e.stored_size != logical) {
        return d.fail(error.Corrupt, "store '{s}': record {d} has stored_size {d}, but codec raw " ++
            "requires its logical size {d} (ZR-IDX-004)", .{ path, i, e.stored_size, logical });
    }
    d.record = -1;
    d.shard = -1;
    return logical;
}

fn get(comptime T: type, bytes: []const u8, off: usize) T {
    return std.mem.readInt(T, bytes[off..][0..@sizeOf(T)], .little);
}

fn put(comptime T: type, bytes: []u8, off: usize, v: T) void {
    std.mem.writeInt(T, bytes[off..][0..@sizeOf(T)], v, .little);
}

// ---- tests ------------------------------------------------------------------------------

const testing = std.testing;

fn sampleHeader() Header {
    var h: Header = .{ .kind = .dense, .dtype = 11, .ndim = 2, .codec = .raw, .data_shards = 3 };
    h.item_shape[0] = 4;
    h.item_shape[1] = 5;
    h.record_count = 10;
    h.logical_bytes = 10 * 80;
    h.shard_sizes[0] = 240;
    h.shard_sizes[1] = 320;
    h.shard_sizes[2] = 240;
    h.stored_bytes = 800;
    h.index_size = 10 * 24;
    h.index_checksum = 0x1234;
    return h;
}

fn encodeAlloc(h: *const Header, dict: []const u8) ![]u8 {
    return encodeAllocParts(h, &.{}, dict);
}

fn encodeAllocParts(h: *const Header, group_sums: []const u64, dict: []const u8) ![]u8 {
    const size = headerSize(h.kind, h.ndim, h.data_shards, group_sums.len, @intCast(dict.len));
    const buf = try testing.allocator.alloc(u8, @intCast(size));
    encodeHeader(h, group_sums, dict, buf);
    return buf;
}

/// Re-seals a modified header so that only the rule under test fails.
fn reseal(bytes: []u8) void {
    put(u64, bytes, bytes.len - 8, xxh64(bytes[0 .. bytes.len - 8]));
}

fn expectDecodeError(bytes: []const u8, want: HeaderError) !void {
    var d: Diag = .{};
    try testing.expectError(want, decodeHeader(bytes, "header.zrh", &d));
    try testing.expect(d.message_len > 0);
}

test "xxh64 known answers" {
    try testing.expectEqual(@as(u64, 0xef46db3751d8e999), xxh64(""));
    var ten: [10]u8 = undefined;
    for (&ten, 0..) |*b, i| b.* = @intCast(i);
    try testing.expectEqual(@as(u64, 0xf76d60ec32541987), xxh64(&ten));
    var s = XxHash64.init(0);
    s.update(ten[0..3]);
    s.update(ten[3..]);
    try testing.expectEqual(@as(u64, 0xf76d60ec32541987), s.final());
}

test "header round trip (dense and ragged with a dictionary)" {
    const h = sampleHeader();
    const buf = try encodeAlloc(&h, "");
    defer testing.allocator.free(buf);
    try testing.expectEqual(@as(usize, 128 + 16 + 24 + 8), buf.len);
    var d: Diag = .{};
    const got = try decodeHeader(buf, "header.zrh", &d);
    try testing.expectEqual(h.record_count, got.record_count);
    try testing.expectEqual(@as(u64, 80), got.recordSize());
    try testing.expectEqualSlices(u64, h.shard_sizes[0..3], got.shard_sizes[0..3]);
    try testing.expectEqualSlices(u64, h.item_shape[0..2], got.item_shape[0..2]);
    const again = try encodeAlloc(&got, "");
    defer testing.allocator.free(again);
    try testing.expectEqualSlices(u8, buf, again);

    var r: Header = .{ .kind = .ragged, .dtype = 3, .ndim = 3, .codec = .zstd_dict, .data_shards = 1 };
    r.record_count = 2;
    r.index_size = 2 * 40;
    const rbuf = try encodeAlloc(&r, "dictionary!");
    defer testing.allocator.free(rbuf);
    try testing.expectEqual(@as(usize, 0), rbuf.len % 8);
    const rgot = try decodeHeader(rbuf, "header.zrh", &d);
    try testing.expectEqual(@as(u32, 40), rgot.index_entry_size);
    try testing.expectEqualStrings("dictionary!", rbuf[rgot.dict_offset..][0..rgot.dict_size]);
}

test "header validation rejects each broken rule with its code" {
    const h = sampleHeader();
    const good = try encodeAlloc(&h, "");
    defer testing.allocator.free(good);
    const buf = try testing.allocator.alloc(u8, good.len);
    defer testing.allocator.free(buf);

    // [ZR-HDR-001] bad magic
    @memcpy(buf, good);
    buf[1] = 'X';
    try expectDecodeError(buf, error.BadMagic);
    try expectDecodeError(good[0..5], error.BadMagic);
    // [ZR-HDR-002] newer major, even with a broken checksum and size
    @memcpy(buf, good);
    put(u16, buf, 8, 2);
    buf[20] = 0;
    var d: Diag = .{};
    try testing.expectError(error.VersionUnsupported, decodeHeader(buf, "header.zrh", &d));
    try testing.expect(std.mem.indexOf(u8, d.text(), "2.0") != null);
    try testing.expect(std.mem.indexOf(u8, d.text(), "1.2") != null);
    // [ZR-HDR-016] major 0 is no version of this format either.
    put(u16, buf, 8, 0);
    try testing.expectError(error.VersionUnsupported, decodeHeader(buf, "header.zrh", &d));
    // A newer minor is accepted.
    @memcpy(buf, good);
    put(u16, buf, 10, 7);
    reseal(buf);
    _ = try decodeHeader(buf, "header.zrh", &d);
    // [ZR-HDR-003] header_size that does not match the file, or is not a multiple of 8
    @memcpy(buf, good);
    put(u32, buf, 12, @intCast(good.len + 8));
    reseal(buf);
    try expectDecodeError(buf, error.Corrupt);
    try expectDecodeError(good[0 .. good.len - 8], error.Corrupt);
    try expectDecodeError(good[0..100], error.Corrupt);
    // [ZR-HDR-004] checksum
    @memcpy(buf, good);
    buf[24] ^= 1;
    try expectDecodeError(buf, error.ChecksumMismatch);
    // [ZR-HDR-005] reserved0, reserved1, padding
    for ([_]usize{ 21, 23, 93, 127 }) |off| {
        @memcpy(buf, good);
        buf[off] = 1;
        reseal(buf);
        try expectDecodeError(buf, error.Corrupt);
    }
    // [ZR-HDR-006] unknown kind, dtype, codec (dtype 15 is datetime64 whose unit 0 is reserved)
    for ([_][2]u8{ .{ 16, 0 }, .{ 16, 3 }, .{ 17, 0 }, .{ 17, 15 }, .{ 17, 20 }, .{ 19, 3 } }) |fv| {
        @memcpy(buf, good);
        buf[fv[0]] = fv[1];
        reseal(buf);
        try expectDecodeError(buf, error.Unsupported);
    }
    // [ZR-HDR-007] zero shards
    @memcpy(buf, good);
    buf[20] = 0;
    reseal(buf);
    try expectDecodeError(buf, error.LimitExceeded);
    // [ZR-HDR-008] ndim 33 (the header size no longer matters: the limit is checked first)
    @memcpy(buf, good);
    buf[18] = 33;
    reseal(buf);
    try expectDecodeError(buf, error.LimitExceeded);
    // [ZR-HDR-003] ndim that does not match the variable part
    @memcpy(buf, good);
    buf[18] = 3;
    reseal(buf);
    try expectDecodeError(buf, error.Corrupt);
    // [ZR-HDR-010] stored_bytes against shard_sizes
    @memcpy(buf, good);
    put(u64, buf, 40, 801);
    reseal(buf);
    try expectDecodeError(buf, error.Corrupt);
    // [ZR-HDR-011] index size mismatch
    @memcpy(buf, good);
    put(u64, buf, 56, 10 * 24 + 1);
    reseal(buf);
    try expectDecodeError(buf, error.Corrupt);
    // [ZR-HDR-012] entry size
    @memcpy(buf, good);
    put(u32, buf, 48, 32);
    reseal(buf);
    try expectDecodeError(buf, error.Corrupt);
    // [ZR-HDR-014] record count
    @memcpy(buf, good);
    put(u64, buf, 24, record_count_max + 1);
    reseal(buf);
    try expectDecodeError(buf, error.LimitExceeded);
    // [ZR-HDR-009] record size 2^31 + itemsize
    var big = sampleHeader();
    big.item_shape[0] = 1 << 29;
    big.item_shape[1] = 5;
    const bigbuf = try encodeAlloc(&big, "");
    defer testing.allocator.free(bigbuf);
    try expectDecodeError(bigbuf, error.LimitExceeded);
    // [ZR-HDR-013] dictionary without zstd_dict, and dict checksum
    var withdict = sampleHeader();
    withdict.codec = .zstd;
    const dbuf = try encodeAlloc(&withdict, "abc");
    defer testing.allocator.free(dbuf);
    try expectDecodeError(dbuf, error.Corrupt);
    withdict.codec = .zstd_dict;
    const dbuf2 = try encodeAlloc(&withdict, "abc");
    defer testing.allocator.free(dbuf2);
    _ = try decodeHeader(dbuf2, "header.zrh", &d);
    put(u64, dbuf2, 72, 1);
    reseal(dbuf2);
    try expectDecodeError(dbuf2, error.ChecksumMismatch);
}

test "index entry validation" {
    const h = sampleHeader();
    var d: Diag = .{};
    var e: [24]u8 = undefined;
    encodeEntry(&e, .{ .offset = 160, .stored_size = 80, .shard = 0, .checksum = 1 }, &.{});
    try testing.expectEqual(@as(u64, 80), try validateEntry(&h, .of(&h), &e, 0, "s", &d));
    // [ZR-IDX-002] offset past the end
    encodeEntry(&e, .{ .offset = 161, .stored_size = 80, .shard = 0, .checksum = 1 }, &.{});
    try testing.expectError(error.Corrupt, validateEntry(&h, .of(&h), &e, 3, "s", &d));
    try testing.expectEqual(@as(i64, 3), d.record);
    // [ZR-IDX-002] offset + size overflows 64 bits
    encodeEntry(&e, .{ .offset = std.math.maxInt(u64) - 7, .stored_size = 80, .shard = 1, .checksum = 1 }, &.{});
    try testing.expectError(error.Corrupt, validateEntry(&h, .of(&h), &e, 0, "s", &d));
    // [ZR-IDX-001] shard out of range
    encodeEntry(&e, .{ .offset = 0, .stored_size = 80, .shard = 3, .checksum = 1 }, &.{});
    try testing.expectError(error.Corrupt, validateEntry(&h, .of(&h), &e, 0, "s", &d));
    // [ZR-IDX-003] reserved
    encodeEntry(&e, .{ .offset = 0, .stored_size = 80, .shard = 0, .checksum = 1 }, &.{});
    e[14] = 1;
    try testing.expectError(error.Corrupt, validateEntry(&h, .of(&h), &e, 0, "s", &d));
    // [ZR-IDX-004] raw stored size must be the logical size
    encodeEntry(&e, .{ .offset = 0, .stored_size = 79, .shard = 0, .checksum = 1 }, &.{});
    try testing.expectError(error.Corrupt, validateEntry(&h, .of(&h), &e, 0, "s", &d));

    // Ragged: shape limits and padding.
    var r: Header = .{ .kind = .ragged, .dtype = 12, .ndim = 1, .codec = .raw, .data_shards = 1 };
    r.shard_sizes[0] = 1 << 40;
    var re: [32]u8 = undefined;
    encodeEntry(&re, .{ .offset = 0, .stored_size = 24, .shard = 0, .checksum = 1 }, &.{3});
    try testing.expectEqual(@as(u64, 24), try validateEntry(&r, .of(&r), &re, 0, "s", &d));
    encodeEntry(&re, .{ .offset = 0, .stored_size = 0, .shard = 0, .checksum = 1 }, &.{(1 << 28) + 1});
    try testing.expectError(error.LimitExceeded, validateEntry(&r, .of(&r), &re, 0, "s", &d));
    encodeEntry(&re, .{ .offset = 0, .stored_size = 24, .shard = 0, .checksum = 1 }, &.{3});
    re[30] = 1;
    try testing.expectError(error.Corrupt, validateEntry(&r, .of(&r), &re, 0, "s", &d));
}

test "logical size limits" {
    try testing.expectEqual(@as(?u64, 0), logicalSize(&.{ 0, std.math.maxInt(u64) }, 8));
    try testing.expectEqual(@as(?u64, 1 << 31), logicalSize(&.{ 1 << 28, 1 }, 8));
    try testing.expectEqual(@as(?u64, null), logicalSize(&.{ (1 << 28) + 1, 1 }, 8));
    try testing.expectEqual(@as(?u64, null), logicalSize(&.{ 1 << 40, 1 << 40 }, 1));
    try testing.expectEqual(@as(?u64, 16), logicalSize(&.{}, 16));
}

test "feature bits and the order of step 2: unsupported before reserved bytes and sizes" {
    const h = sampleHeader();
    const good = try encodeAlloc(&h, "");
    defer testing.allocator.free(good);
    const buf = try testing.allocator.alloc(u8, good.len);
    defer testing.allocator.free(buf);
    // [ZR-HDR-017] an unknown required feature, even with a reserved byte set too.
    for ([_]u6{ 1, 5, 63 }) |bit| {
        @memcpy(buf, good);
        put(u64, buf, 80, @as(u64, 1) << bit);
        buf[100] = 1;
        reseal(buf);
        try expectDecodeError(buf, error.Unsupported);
    }
    // [ZR-ERR-003] an unknown kind is unsupported even when the sizes it would imply do not add
    // up, and a reserved byte is judged before them.
    @memcpy(buf, good);
    buf[16] = 9;
    buf[18] = 7;
    reseal(buf);
    try expectDecodeError(buf, error.Unsupported);
    @memcpy(buf, good);
    buf[18] = 7;
    buf[100] = 1;
    reseal(buf);
    try expectDecodeError(buf, error.Corrupt);
    // [ZR-HDR-022] a file larger than any valid header, before its header_size is looked at.
    var d: Diag = .{};
    const huge = try testing.allocator.alloc(u8, header_size_bytes_max + 8);
    defer testing.allocator.free(huge);
    @memset(huge, 0);
    @memcpy(huge[0..good.len], good);
    try testing.expectError(error.Corrupt, decodeHeader(huge, "header.zrh", &d));
    try testing.expect(std.mem.indexOf(u8, d.text(), "ZR-HDR-022") != null);
}

test "parametric dtypes: item sizes, parameters and their errors" {
    // [ZR-HDR-019] [ZR-HDR-020]
    try testing.expectEqual(@as(u64, 8), dtypeCheck(15, 1, 10).ok);
    try testing.expectEqual(@as(u64, 8), dtypeCheck(16, 5, 7).ok);
    try testing.expectEqual(@as(u64, 3), dtypeCheck(17, 3, 0).ok);
    try testing.expectEqual(@as(u64, 8), dtypeCheck(18, 2, 0).ok);
    try testing.expectEqual(@as(u64, 4), dtypeCheck(19, 4, 0).ok);
    try testing.expectEqual(DtypeProblem.unknown_code, dtypeCheck(20, 0, 0).bad);
    try testing.expectEqual(DtypeProblem.unknown_unit, dtypeCheck(15, 1, 0).bad);
    try testing.expectEqual(DtypeProblem.unknown_unit, dtypeCheck(16, 1, 14).bad);
    try testing.expectEqual(DtypeProblem.bad_length, dtypeCheck(15, 0, 10).bad);
    try testing.expectEqual(DtypeProblem.bad_length, dtypeCheck(15, 1 << 31, 10).bad);
    try testing.expectEqual(DtypeProblem.bad_length, dtypeCheck(17, 0, 0).bad);
    try testing.expectEqual(DtypeProblem.unused_param, dtypeCheck(17, 3, 1).bad);
    try testing.expectEqual(DtypeProblem.unused_param, dtypeCheck(6, 1, 0).bad);
    try testing.expectEqual(DtypeProblem.unused_param, dtypeCheck(6, 0, 1).bad);
    try testing.expectEqual(DtypeProblem.itemsize_limit, dtypeCheck(18, 1 << 29, 0).bad);
    try testing.expectEqual(@as(u64, itemsize_bytes_max - 3), dtypeCheck(18, (1 << 29) - 1, 0).ok);
    try testing.expectEqual(DtypeProblem.itemsize_limit, dtypeCheck(19, 1 << 31, 0).bad);
    var buf: [32]u8 = undefined;
    try testing.expectEqualStrings("<M8[ns]", npyDescr(&buf, 15, 1, 10));
    try testing.expectEqualStrings("<m8[5s]", npyDescr(&buf, 16, 5, 7));
    try testing.expectEqualStrings("<U2", npyDescr(&buf, 18, 2, 0));
    try testing.expectEqualStrings("|V4", npyDescr(&buf, 19, 4, 0));
    try testing.expectEqualStrings("<f4", npyDescr(&buf, 11, 0, 0));
    try testing.expectEqual(@as(u16, 0), minorFor(14));
    try testing.expectEqual(@as(u16, 1), minorFor(17));

    // A U2 Dense store round-trips its parameters through the header.
    var h: Header = .{
        .kind = .dense,
        .dtype = 18,
        .dtype_length = 2,
        .ndim = 1,
        .codec = .raw,
        .data_shards = 1,
        .format_minor = 1,
    };
    h.item_shape[0] = 3;
    const bytes = try encodeAlloc(&h, "");
    defer testing.allocator.free(bytes);
    var d: Diag = .{};
    const got = try decodeHeader(bytes, "header.zrh", &d);
    try testing.expectEqual(@as(u64, 8), got.itemsize());
    try testing.expectEqual(@as(u64, 24), got.recordSize());
    try testing.expectEqual(@as(u16, 1), got.format_minor);
    // Each broken parameter with the code spec section 9.2 gives it.
    const cases = [_]struct { off: usize, size: u8, value: u64, want: HeaderError }{
        .{ .off = 88, .size = 4, .value = 0, .want = error.Corrupt },
        .{ .off = 92, .size = 1, .value = 1, .want = error.Corrupt },
        .{ .off = 88, .size = 4, .value = 1 << 30, .want = error.LimitExceeded },
    };
    for (cases) |c| {
        const b = try testing.allocator.dupe(u8, bytes);
        defer testing.allocator.free(b);
        switch (c.size) {
            1 => b[c.off] = @intCast(c.value),
            else => put(u32, b, c.off, @intCast(c.value)),
        }
        reseal(b);
        try expectDecodeError(b, c.want);
    }
}

test "extent: the non-zero axes of an empty record must make a NumPy shape" {
    // [ZR-HDR-021] [ZR-IDX-007]
    try testing.expect(extentFits(&.{ 1 << 40, 0 }, 1));
    try testing.expect(extentFits(&.{ extent_bytes_max, 0 }, 1));
    try testing.expect(!extentFits(&.{ extent_bytes_max, 0 }, 2));
    try testing.expect(!extentFits(&.{ 1 << 40, 1 << 40, 0 }, 1));
    try testing.expect(!extentFits(&.{ dim_max, dim_max, 0 }, 1));
    try testing.expect(extentFits(&.{ dim_max, 1 << 31, 0 }, 1));
    var h = sampleHeader();
    h.ndim = 3;
    h.item_shape[0] = 1 << 40;
    h.item_shape[1] = 1 << 40;
    h.item_shape[2] = 0;
    const buf = try encodeAlloc(&h, "");
    defer testing.allocator.free(buf);
    try expectDecodeError(buf, error.LimitExceeded);
}

/// A Dense header of `n` records with index parts of shifts `s` and `g`, and its T group sums
/// (arbitrary values: decodeHeader does not look at index.zrs).
fn partsHeader(n: u64, s: u8, g: u8) Header {
    var h = sampleHeader();
    h.required_features = feature_index_parts;
    h.format_minor = index_parts_minor;
    h.index_block_shift = s;
    h.index_group_shift = g;
    h.record_count = n;
    h.index_size = n * 24;
    return h;
}

test "index parts: the writer defaults and the counts of blocks and groups" {
    // [ZR-PRT-008] s = 8 and the smallest g >= 10 with T <= 2^16.
    try testing.expectEqual([2]u8{ 8, 10 }, defaultPartShifts(0));
    try testing.expectEqual([2]u8{ 8, 10 }, defaultPartShifts(1 << 34));
    try testing.expectEqual([2]u8{ 8, 11 }, defaultPartShifts((1 << 34) + 1));
    try testing.expectEqual([2]u8{ 8, 24 }, defaultPartShifts(record_count_max));
    try testing.expectEqual(@as(u64, 0), partsOf(0, 8));
    try testing.expectEqual(@as(u64, 1), partsOf(1, 8));
    try testing.expectEqual(@as(u64, 1), partsOf(256, 8));
    try testing.expectEqual(@as(u64, 2), partsOf(257, 8));
    // No overflow near 2^64, nor with a shift of 0.
    try testing.expectEqual(@as(u64, 1 << 16), partsOf(std.math.maxInt(u64), 48));
    try testing.expectEqual(@as(u64, std.math.maxInt(u64)), partsOf(std.math.maxInt(u64), 0));
    try testing.expectEqual(@as(u64, 3815), groupCount(1_000_000_000, 8, 10));
}

test "index parts: bytes 93 and 94, group_sums and their round trip" {
    const h = partsHeader(1000, 2, 3);
    try testing.expectEqual(@as(u64, 250), h.blockCount());
    try testing.expectEqual(@as(u64, 32), h.groupCount());
    var sums: [32]u64 = undefined;
    for (&sums, 0..) |*v, t| v.* = 0x1111 * (t + 1);
    const buf = try encodeAllocParts(&h, &sums, "");
    defer testing.allocator.free(buf);
    try testing.expectEqual(@as(usize, 128 + 16 + 24 + 8 * 32 + 8), buf.len);
    try testing.expectEqual(@as(u8, 2), buf[93]);
    try testing.expectEqual(@as(u8, 3), buf[94]);
    try testing.expectEqual(@as(u64, 1), get(u64, buf, 80));
    // group_sums lie after shard_sizes, before the dictionary (spec §3.2).
    try testing.expectEqual(@as(u64, 0x1111), get(u64, buf, 128 + 16 + 24));
    var d: Diag = .{};
    const got = try decodeHeader(buf, "header.zrh", &d);
    try testing.expect(got.hasParts());
    try testing.expectEqual(@as(u8, 2), got.index_block_shift);
    try testing.expectEqual(@as(u8, 3), got.index_group_shift);
    for (sums, 0..) |v, t| try testing.expectEqual(v, got.groupSum(buf, t));
    const again = try encodeAllocParts(&got, &sums, "");
    defer testing.allocator.free(again);
    try testing.expectEqualSlices(u8, buf, again);
    // A dictionary follows the group sums.
    var hd = h;
    hd.codec = .zstd_dict;
    const dbuf = try encodeAllocParts(&hd, &sums, "dict");
    defer testing.allocator.free(dbuf);
    const dgot = try decodeHeader(dbuf, "header.zrh", &d);
    try testing.expectEqualStrings("dict", dbuf[dgot.dict_offset..][0..4]);
    try testing.expectEqual(@as(u32, 128 + 16 + 24 + 8 * 32), dgot.dict_offset);
}

test "index parts: step 2.10a and the rules around it" {
    var d: Diag = .{};
    // [ZR-PRT-007] Without the bit, bytes 93 and 94 are reserved (corrupt), as in 1.1.
    const plain = try encodeAlloc(&sampleHeader(), "");
    defer testing.allocator.free(plain);
    for ([_]usize{ 93, 94 }) |off| {
        const b = try testing.allocator.dupe(u8, plain);
        defer testing.allocator.free(b);
        b[off] = 8;
        reseal(b);
        try expectDecodeError(b, error.Corrupt);
    }
    // [ZR-PRT-002] a shift of 48 is accepted, 49 is limit (block shift, then group shift).
    const ok = partsHeader(10, 48, 48);
    const okbuf = try encodeAllocParts(&ok, &.{7}, "");
    defer testing.allocator.free(okbuf);
    _ = try decodeHeader(okbuf, "header.zrh", &d);
    for ([_]usize{ 93, 94 }) |off| {
        const b = try testing.allocator.dupe(u8, okbuf);
        defer testing.allocator.free(b);
        b[off] = 49;
        // Also a reserved byte and a wrong header_size: step 2.10a comes after 2.9, before 2.11.
        put(u32, b, 12, @intCast(b.len));
        reseal(b);
        try testing.expectError(error.LimitExceeded, decodeHeader(b, "header.zrh", &d));
        const want = if (off == 93) "index_block_shift 49" else "index_group_shift 49";
        try testing.expect(std.mem.indexOf(u8, d.text(), want) != null);
        b[100] = 1;
        reseal(b);
        try expectDecodeError(b, error.Corrupt);
    }
    // [ZR-PRT-003] T = 2^16 is accepted, 2^16 + 1 is limit, judged before the size rule (2.11)
    // and computed without overflow for a record_count far above record_count_max (2.15).
    const big = partsHeader(1 << 16, 0, 0);
    const sums = try testing.allocator.alloc(u64, 1 << 16);
    defer testing.allocator.free(sums);
    @memset(sums, 0);
    const bigbuf = try encodeAllocParts(&big, sums, "");
    defer testing.allocator.free(bigbuf);
    _ = try decodeHeader(bigbuf, "header.zrh", &d);
    put(u64, bigbuf, 24, (1 << 16) + 1);
    reseal(bigbuf);
    try testing.expectError(error.LimitExceeded, decodeHeader(bigbuf, "header.zrh", &d));
    try testing.expect(std.mem.indexOf(u8, d.text(), "ZR-PRT-003") != null);
    put(u64, bigbuf, 24, std.math.maxInt(u64));
    bigbuf[93] = 48;
    bigbuf[94] = 0;
    reseal(bigbuf);
    // 2^16 groups of one block of 2^48 records: T fits, then record_count is limit (2.15).
    try testing.expectError(error.LimitExceeded, decodeHeader(bigbuf, "header.zrh", &d));
    try testing.expect(std.mem.indexOf(u8, d.text(), "ZR-HDR-014") != null);
    // [ZR-HDR-003] header_size must count the T group sums.
    const small = partsHeader(1000, 8, 10);
    const sbuf = try encodeAllocParts(&small, &.{1}, "");
    defer testing.allocator.free(sbuf);
    _ = try decodeHeader(sbuf, "header.zrh", &d);
    put(u64, sbuf, 24, 256 * 1024 + 1);
    put(u64, sbuf, 56, (256 * 1024 + 1) * 24);
    reseal(sbuf);
    try testing.expectError(error.Corrupt, decodeHeader(sbuf, "header.zrh", &d));
    try testing.expect(std.mem.indexOf(u8, d.text(), "2 sum groups") != null);
}

test "index parts: header_size_bytes_max is 1.1's bound plus 8 x 2^16" {
    try testing.expectEqual(@as(u64, 16_779_648 + 8 * (1 << 16)), header_size_bytes_max);
    // The largest header of all: ndim 32, 255 shards, 2^16 groups and a 16 MiB dictionary.
    var h = partsHeader(1 << 16, 0, 0);
    h.ndim = 32;
    h.data_shards = 255;
    h.codec = .zstd_dict;
    try testing.expectEqual(header_size_bytes_max, headerSize(h.kind, 32, 255, 1 << 16, 1 << 24));
}
