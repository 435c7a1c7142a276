//! A store's index as bytes in memory, judged against its header, and its entries decoded:
//! for a program that copies a store's files (the publisher), which must know that the bytes
//! it holds, not the files as they are by then, are the store's, and where each record lies.
//!
//! Invariants:
//! - The order of a whole judgement (spec §9.6 [ZR-PRT-010]): the sizes, every sum group, every
//!   index block, the index checksum, every entry in record order (step 5), then step 6; the
//!   first failure is reported with the code and words of a local open's, naming `name`.
//! - On failure the outputs hold nothing to be used (entries before the failing one may have
//!   been written).

const std = @import("std");
const format = @import("format.zig");
const diag_mod = @import("diag.zig");
const index_parts = @import("index_parts.zig");
const reader_open = @import("reader_open.zig");

const Diag = diag_mod.Diag;
const Error = diag_mod.Error;

/// Where every record lies: `record_count` of each.
pub const Table = struct {
    offsets: []u64,
    stored_sizes: []u64,
    shards: []u8,
    checksums: []u64,
};

/// Judges `index` and `sums` (empty without index parts) as the index files of the store
/// with header `h` (decoded from `header_bytes`), named `name` in messages, and fills `out`.
pub fn judge(
    h: *const format.Header,
    header_bytes: []const u8,
    name: []const u8,
    index: []const u8,
    sums: []const u8,
    out: Table,
    d: *Diag,
) Error!void {
    const n = h.record_count;
    std.debug.assert(out.offsets.len == n and out.stored_sizes.len == n and out.shards.len == n and
        out.checksums.len == n);
    // [ZR-HDR-011]
    if (index.len != h.index_size) return d.fail(error.Corrupt, "'{s}/index.zri' has {d} bytes, but " ++
        "the header's index_size says {d} (ZR-HDR-011)", .{ name, index.len, h.index_size });
    if (h.hasParts()) {
        // [ZR-PRT-001] .. [ZR-PRT-005], in the order of [ZR-PRT-010].
        const want = 8 * h.blockCount();
        if (sums.len != want) return d.fail(error.Corrupt, "'{s}/index.zrs' has {d} bytes, but the " ++
            "store's {d} index blocks need exactly {d} (8 per block sum) (ZR-PRT-001)", .{
            name, sums.len, h.blockCount(), want,
        });
        const group_bytes = @as(u64, 8) << @intCast(h.index_group_shift);
        var t: u64 = 0;
        while (t < h.groupCount()) : (t += 1) {
            const begin = t * group_bytes;
            const group = sums[@intCast(begin)..@intCast(@min(begin + group_bytes, want))];
            if (format.xxh64(group) != h.groupSum(header_bytes, t)) return index_parts.groupErrorOf(h, name, t, d);
        }
        const block_bytes = @as(u64, h.index_entry_size) << @intCast(h.index_block_shift);
        var b: u64 = 0;
        while (b < h.blockCount()) : (b += 1) {
            const begin = b * block_bytes;
            const block = index[@intCast(begin)..@intCast(@min(begin + block_bytes, index.len))];
            const sum = std.mem.readInt(u64, sums[@intCast(8 * b)..][0..8], .little);
            if (format.xxh64(block) != sum) return index_parts.blockErrorOf(h, name, b, d);
        }
    } else if (sums.len != 0) return d.fail(error.InvalidArgument, "store '{s}' has no index parts, " ++
        "so it has no index.zrs; got {d} bytes of one", .{ name, sums.len });
    if (format.xxh64(index) != h.index_checksum) return reader_open.indexChecksumErrorOf(h, name, d);
    // Step 5, every entry; step 6, their sums.
    const es: usize = h.index_entry_size;
    const sizes: format.EntrySizes = .of(h);
    var shard_sums: [format.data_shards_max]u64 = @splat(0);
    var logical_sum: u64 = 0;
    var rec: u64 = 0;
    while (rec < n) : (rec += 1) {
        const bytes = index[@intCast(rec * es)..][0..es];
        const logical = try format.validateEntry(h, sizes, bytes, rec, name, d);
        const e = format.decodeEntry(bytes);
        const i: usize = @intCast(rec);
        out.offsets[i] = e.offset;
        out.stored_sizes[i] = e.stored_size;
        out.shards[i] = e.shard;
        out.checksums[i] = e.checksum;
        // Saturating sums: a crafted index cannot wrap them around to the expected value.
        shard_sums[e.shard] +|= e.stored_size;
        logical_sum +|= logical;
    }
    try reader_open.checkSumsOf(h, name, &shard_sums, logical_sum, d);
}
