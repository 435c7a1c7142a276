//! The checks a reader makes on a zstd-format dictionary (spec/format-v1.md §6.3:
//! [ZR-COD-004], [ZR-COD-010], [ZR-COD-011], [ZR-COD-012]), done here rather than left to
//! libzstd, so that this core accepts exactly the dictionaries the spec calls well formed,
//! whatever libzstd release is loaded.
//!
//! Invariants:
//! - `check` reads no byte outside `dict`; bits of a table description past the end of the
//!   dictionary read as zero, and a description that needs them is malformed.
//! - It allocates nothing and takes time linear in the size of the entropy tables (at most a
//!   few hundred bytes are ever parsed; the content is only measured).
//! - The algorithm is spec §6.3's, step for step: a second reader written from the spec must
//!   reach the same verdict on every dictionary.

const std = @import("std");

/// The first four bytes, little-endian, of a zstd-format dictionary (RFC 8878 §5).
pub const dictionary_magic: u32 = 0xEC30A437;

/// Largest accuracy logs and symbol values of the entropy tables of a dictionary (RFC 8878
/// §4.1.1 and §5): literal Huffman weights (FSE-compressed), offsets, match lengths and
/// literal lengths.
const weights_log_max: u5 = 6;
const weights_symbol_max: usize = 255;
const offsets_log_max: u5 = 8;
const offsets_symbol_max: usize = 31;
const match_lengths_log_max: u5 = 9;
const match_lengths_symbol_max: usize = 52;
const literal_lengths_log_max: u5 = 9;
const literal_lengths_symbol_max: usize = 35;
/// A Huffman weight and the depth of a Huffman tree are at most 12 (RFC 8878 §4.2.1).
const huffman_log_max: u5 = 12;
/// At most 255 weights are decoded; the last symbol's weight is implied.
const weights_count_max: usize = 255;

/// Why a dictionary is malformed: the rule and a sentence that says what was found.
pub const Problem = struct {
    rule: []const u8,
    what: []const u8,
};

/// Whether `dict` is a zstd-format dictionary: at least 8 bytes starting with the magic
/// ([ZR-COD-004]). Any other dictionary is raw content and cannot be malformed.
pub fn isZstdFormat(dict: []const u8) bool {
    return dict.len >= 8 and std.mem.readInt(u32, dict[0..4], .little) == dictionary_magic;
}

/// Null if `dict` is raw content or a well-formed zstd-format dictionary; otherwise what is
/// wrong with it, by the first rule of spec §6.3 that it breaks.
pub fn check(dict: []const u8) ?Problem {
    if (!isZstdFormat(dict)) return null;
    // [ZR-COD-010]
    if (std.mem.readInt(u32, dict[4..8], .little) == 0) {
        return .{
            .rule = "ZR-COD-010",
            .what = "its Dictionary_ID is 0, which RFC 8878 reserves for \"no dictionary\"",
        };
    }
    // [ZR-COD-011] The entropy tables, in the order of RFC 8878 §5.
    var pos: usize = 8;
    pos = huffmanDescription(dict, pos) catch |err| return tableProblem(err);
    var probs: [weights_symbol_max + 1]i16 = undefined;
    const tables = [_]struct { log_max: u5, symbol_max: usize }{
        .{ .log_max = offsets_log_max, .symbol_max = offsets_symbol_max },
        .{ .log_max = match_lengths_log_max, .symbol_max = match_lengths_symbol_max },
        .{ .log_max = literal_lengths_log_max, .symbol_max = literal_lengths_symbol_max },
    };
    for (tables) |t| {
        const desc = fseDescription(dict[pos..], t.log_max, t.symbol_max, &probs) catch |err| return tableProblem(err);
        pos += desc.len;
    }
    // [ZR-COD-012] Three repeat offsets, each in 1 .. the size of the content after them.
    if (dict.len - pos < 12) {
        return .{ .rule = "ZR-COD-012", .what = "it ends before its three 4-byte repeat offsets" };
    }
    const content: u64 = dict.len - pos - 12;
    for (0..3) |k| {
        const rep = std.mem.readInt(u32, dict[pos + 4 * k ..][0..4], .little);
        if (rep == 0) return .{ .rule = "ZR-COD-012", .what = "a repeat offset is 0" };
        if (rep > content) return .{
            .rule = "ZR-COD-012",
            .what = "a repeat offset is larger than the dictionary's content",
        };
    }
    return null;
}

const TableError = error{
    Truncated,
    AccuracyLog,
    TooManySymbols,
    Probabilities,
    NoStream,
    NoEndMark,
    TooManyWeights,
    Weights,
};

fn tableProblem(err: TableError) Problem {
    const what = switch (err) {
        error.Truncated => "an entropy table runs past the end of the dictionary",
        error.AccuracyLog => "an entropy table's accuracy log is above its maximum",
        error.TooManySymbols => "an entropy table has more symbols than its alphabet",
        error.Probabilities => "an FSE table's probabilities do not add up to its table size",
        error.NoStream => "the literals' Huffman weights have no FSE bitstream",
        error.NoEndMark => "the literals' Huffman weights' FSE bitstream has no end mark (its last byte is 0)",
        error.TooManyWeights => "the literals' Huffman weights decode to more than 255 weights",
        error.Weights => "the literals' Huffman weights do not describe a valid Huffman tree",
    };
    return .{ .rule = "ZR-COD-011", .what = what };
}

/// Reads bits least-significant first from `bytes`, as zstd's forward bitstreams are read;
/// bits past the end read as zero and count as consumed, so the caller checks `used` after.
const ForwardBits = struct {
    bytes: []const u8,
    bit: u64 = 0,

    fn peek(r: *const ForwardBits, n: u5) u32 {
        var v: u32 = 0;
        var k: u5 = 0;
        while (k < n) : (k += 1) {
            const at = r.bit + k;
            const byte: u8 = if (at / 8 < r.bytes.len) r.bytes[@intCast(at / 8)] else 0;
            v |= @as(u32, (byte >> @intCast(at % 8)) & 1) << k;
        }
        return v;
    }

    fn read(r: *ForwardBits, n: u5) u32 {
        const v = r.peek(n);
        r.bit += n;
        return v;
    }

    /// Whole bytes the bits read so far occupy.
    fn used(r: *const ForwardBits) u64 {
        return (r.bit + 7) / 8;
    }
};

const Description = struct { len: usize, log: u5, symbols: usize };

/// One FSE table description (RFC 8878 §4.1.1) at the start of `bytes`: the accuracy log
/// (at most `log_max`) and one probability per symbol (at most `symbol_max` + 1 symbols) into
/// `probs`, where -1 is a "less than 1" probability. The probabilities must use up exactly
/// 2^log points, and the description must end within `bytes`.
fn fseDescription(bytes: []const u8, log_max: u5, symbol_max: usize, probs: []i16) TableError!Description {
    var r: ForwardBits = .{ .bytes = bytes };
    const log_wide = r.read(4) + 5;
    if (log_wide > log_max) return error.AccuracyLog;
    const log: u5 = @intCast(log_wide);
    var remaining: i32 = (@as(i32, 1) << log) + 1;
    var threshold: i32 = @as(i32, 1) << log;
    var nbits: u5 = log + 1;
    var n: usize = 0;
    while (remaining > 1) {
        if (n > symbol_max) return error.TooManySymbols;
        const max: i32 = 2 * threshold - 1 - remaining;
        var value: i32 = @intCast(r.peek(nbits - 1));
        if (value < max) {
            r.bit += nbits - 1;
        } else {
            value = @intCast(r.peek(nbits));
            if (value >= threshold) value -= max;
            r.bit += nbits;
        }
        const prob: i32 = value - 1;
        remaining -= if (prob < 0) -prob else prob;
        probs[n] = @intCast(prob);
        n += 1;
        if (prob == 0) {
            // Repeat flags: 2 bits each, the number of further zero probabilities; 3 means
            // another flag follows.
            while (true) {
                const more = r.read(2);
                for (0..more) |_| {
                    if (n > symbol_max) return error.TooManySymbols;
                    probs[n] = 0;
                    n += 1;
                }
                if (more != 3) break;
            }
        }
        while (remaining > 1 and remaining < threshold) {
            nbits -= 1;
            threshold >>= 1;
        }
    }
    if (remaining != 1) return error.Probabilities;
    if (r.used() > bytes.len) return error.Truncated;
    return .{ .len = @intCast(r.used()), .log = log, .symbols = n };
}

/// The literals' Huffman tree description (RFC 8878 §4.2.1) at `dict[pos..]`; returns where it
/// ends. The weights are either 4-bit values (header byte 128 or more) or an FSE-compressed
/// bitstream of `header` bytes; either way they must describe a valid tree.
fn huffmanDescription(dict: []const u8, pos: usize) TableError!usize {
    if (pos >= dict.len) return error.Truncated;
    const header = dict[pos];
    var weights: [weights_count_max]u8 = undefined;
    var count: usize = 0;
    var end: usize = undefined;
    if (header >= 128) {
        count = header - 127;
        const bytes = (count + 1) / 2;
        if (dict.len - pos - 1 < bytes) return error.Truncated;
        for (0..count) |k| {
            const b = dict[pos + 1 + k / 2];
            weights[k] = if (k % 2 == 0) b >> 4 else b & 15;
        }
        end = pos + 1 + bytes;
    } else {
        if (dict.len - pos - 1 < header) return error.Truncated;
        const sub = dict[pos + 1 ..][0..header];
        count = try fseWeights(sub, &weights);
        end = pos + 1 + header;
    }
    try checkWeights(weights[0..count]);
    return end;
}

/// Decodes FSE-compressed Huffman weights (RFC 8878 §4.2.1.2) from `sub`, a table description
/// (accuracy log at most 6) and then a backward bitstream read with two interleaved states.
fn fseWeights(sub: []const u8, out: *[weights_count_max]u8) TableError!usize {
    var probs: [weights_symbol_max + 1]i16 = undefined;
    const desc = try fseDescription(sub, weights_log_max, weights_symbol_max, &probs);
    const stream = sub[desc.len..];
    if (stream.len == 0) return error.NoStream;
    if (stream[stream.len - 1] == 0) return error.NoEndMark;

    var table: [1 << weights_log_max]Cell = undefined;
    buildTable(probs[0..desc.symbols], desc.log, table[0 .. @as(usize, 1) << desc.log]);

    var r: BackwardBits = .init(stream);
    var s1 = r.read(desc.log);
    var s2 = r.read(desc.log);
    if (r.overflowed()) return error.Truncated;
    var n: usize = 0;
    while (true) {
        // Each step emits one weight, or two when the bitstream runs out.
        if (n > weights_count_max - 2) return error.TooManyWeights;
        out[n] = table[s1].symbol;
        n += 1;
        s1 = table[s1].base + r.read(table[s1].bits);
        if (r.overflowed()) {
            out[n] = table[s2].symbol;
            return n + 1;
        }
        if (n > weights_count_max - 2) return error.TooManyWeights;
        out[n] = table[s2].symbol;
        n += 1;
        s2 = table[s2].base + r.read(table[s2].bits);
        if (r.overflowed()) {
            out[n] = table[s1].symbol;
            return n + 1;
        }
    }
}

const Cell = struct { symbol: u8, bits: u5, base: u32 };

/// The FSE decoding table of RFC 8878 §4.1.1 for `probs` and accuracy log `log`: "less than 1"
/// symbols at the top, the others spread with the standard step, then each cell's state
/// transition.
fn buildTable(probs: []const i16, log: u5, table: []Cell) void {
    const size: u32 = @as(u32, 1) << log;
    var next: [weights_symbol_max + 1]u32 = undefined;
    var high: u32 = size - 1;
    for (probs, 0..) |p, s| {
        if (p == -1) {
            table[high].symbol = @intCast(s);
            high -%= 1;
            next[s] = 1;
        } else next[s] = @intCast(@max(p, 0));
    }
    const step: u32 = (size >> 1) + (size >> 3) + 3;
    const mask = size - 1;
    var position: u32 = 0;
    for (probs, 0..) |p, s| {
        var k: i16 = 0;
        while (k < p) : (k += 1) {
            table[position].symbol = @intCast(s);
            position = (position + step) & mask;
            while (position > high) position = (position + step) & mask;
        }
    }
    for (table) |*cell| {
        const x = next[cell.symbol];
        next[cell.symbol] += 1;
        const bits: u5 = @intCast(log - (31 - @clz(x)));
        cell.bits = bits;
        cell.base = (x << bits) - size;
    }
}

/// Reads a zstd backward bitstream (RFC 8878 §4.1): from the bit below the end mark (the
/// highest set bit of the last byte) towards bit 0. Bits below bit 0 read as zero; reading
/// any of them overflows the stream.
const BackwardBits = struct {
    bytes: []const u8,
    /// Bits not yet read; negative once more bits were read than the stream holds.
    left: i64,

    fn init(bytes: []const u8) BackwardBits {
        const last = bytes[bytes.len - 1];
        return .{ .bytes = bytes, .left = @as(i64, @intCast(bytes.len - 1)) * 8 + (7 - @clz(last)) };
    }

    fn read(r: *BackwardBits, n: u5) u32 {
        var v: u32 = 0;
        var k: u5 = 0;
        while (k < n) : (k += 1) {
            r.left -= 1;
            var bit: u32 = 0;
            if (r.left >= 0) {
                const at: u64 = @intCast(r.left);
                bit = (r.bytes[@intCast(at / 8)] >> @intCast(at % 8)) & 1;
            }
            v = (v << 1) | bit;
        }
        return v;
    }

    fn overflowed(r: *const BackwardBits) bool {
        return r.left < 0;
    }
};

/// The tree rules of RFC 8878 §4.2.1: weights at most 12, the implied last weight makes the
/// sum a power of two, the tree at most 12 deep, and an even number (at least two) of
/// weight-1 symbols.
fn checkWeights(weights: []const u8) TableError!void {
    var total: u32 = 0;
    var ones: u32 = 0;
    for (weights) |w| {
        if (w > huffman_log_max) return error.Weights;
        if (w > 0) total += @as(u32, 1) << @intCast(w - 1);
        if (w == 1) ones += 1;
    }
    if (total == 0) return error.Weights;
    const depth: u32 = 32 - @clz(total);
    if (depth > huffman_log_max) return error.Weights;
    const rest = (@as(u32, 1) << @intCast(depth)) - total;
    if (rest & (rest - 1) != 0) return error.Weights;
    if (rest == 1) ones += 1;
    if (ones < 2 or ones % 2 != 0) return error.Weights;
}

// ---- tests ----------------------------------------------------------------------------

const testing = std.testing;
const codec = @import("codec.zig");

/// A small valid zstd-format dictionary built by hand: ID 7, direct Huffman weights, flat FSE
/// tables, repeat offsets 1, 4, 8, and 16 bytes of content.
fn handDictionary(buf: []u8) []u8 {
    var n: usize = 0;
    const put = struct {
        fn bytes(b: []u8, at: *usize, src: []const u8) void {
            @memcpy(b[at.*..][0..src.len], src);
            at.* += src.len;
        }
    };
    put.bytes(buf, &n, &.{ 0x37, 0xA4, 0x30, 0xEC, 7, 0, 0, 0 });
    // Huffman: two direct weights of 1 (header 127 + 2), so the implied third is 2.
    put.bytes(buf, &n, &.{ 129, 0x11 });
    // Each FSE table: accuracy log 5 (4 zero bits), then symbol 0 with all 32 points, value
    // 33: with 33 points left and threshold 32, max is 30; 6 bits 111111 (63, whose low 5
    // bits 31 are not below 30) read as 63 - 30 = 33. Bits LSB first: F0 03.
    for (0..3) |_| put.bytes(buf, &n, &.{ 0xF0, 0x03 });
    put.bytes(buf, &n, &.{ 1, 0, 0, 0, 4, 0, 0, 0, 8, 0, 0, 0 });
    put.bytes(buf, &n, "0123456789abcdef");
    return buf[0..n];
}

test "a hand-built dictionary is well formed, and libzstd agrees" {
    var buf: [128]u8 = undefined;
    const dict = handDictionary(&buf);
    try testing.expectEqual(@as(?Problem, null), check(dict));
    var sd = try codec.SharedDict.initDecompress(dict);
    sd.deinit();
}

test "each broken rule of a zstd-format dictionary" {
    var buf: [128]u8 = undefined;
    const good = handDictionary(&buf);
    var b: [128]u8 = undefined;
    const cases = [_]struct { off: usize, value: u8, rule: []const u8 }{
        .{ .off = 4, .value = 0, .rule = "ZR-COD-010" }, // ID 0 (the other ID bytes are 0)
        // weights 1 and 2: 1 + 2 = 3, rest 1, ones 2: valid? see below
        .{ .off = 9, .value = 0x12, .rule = "ZR-COD-011" },
        .{ .off = 10, .value = 0x1F, .rule = "ZR-COD-011" }, // offsets' accuracy log 20
        .{ .off = good.len - 28, .value = 0, .rule = "ZR-COD-012" }, // first repeat offset 0
        .{ .off = good.len - 28, .value = 17, .rule = "ZR-COD-012" }, // 17 > 16 bytes of content
    };
    for (cases, 0..) |c, k| {
        @memcpy(b[0..good.len], good);
        b[c.off] = c.value;
        const got = check(b[0..good.len]);
        if (k == 1) {
            // Weights 1 and 2 sum to 3; the implied weight 1 makes 4, a valid tree of three
            // symbols with one weight-1 pair... but only two weight-1 symbols are needed and
            // there are two (1 and the implied one): well formed.
            try testing.expectEqual(@as(?Problem, null), got);
            continue;
        }
        try testing.expect(got != null);
        try testing.expectEqualStrings(c.rule, got.?.rule);
    }
    // Weights 2 and 2 sum to 4 = 2^2: the implied rest is 4 - 4 = 0... total 4 gives depth 3,
    // rest 4, weight 3, and no weight-1 symbol at all: not a tree.
    @memcpy(b[0..good.len], good);
    b[9] = 0x22;
    try testing.expectEqualStrings("ZR-COD-011", check(b[0..good.len]).?.rule);
    // Raw content: too short for the magic to count, or another first word.
    try testing.expectEqual(@as(?Problem, null), check(good[0..7]));
    try testing.expectEqual(@as(?Problem, null), check("not a zstd dictionary"));
    // The magic and an ID only: the tables are missing.
    try testing.expectEqualStrings("ZR-COD-011", check(good[0..8]).?.rule);
    // Cut before the repeat offsets end.
    try testing.expectEqualStrings("ZR-COD-012", check(good[0 .. good.len - 20]).?.rule);
}

/// A dictionary trained by libzstd on JSON-like lines, into `buf`.
fn trainedDictionary(buf: []u8) ![]u8 {
    const gpa = testing.allocator;
    var samples: std.ArrayList(u8) = .empty;
    defer samples.deinit(gpa);
    var sizes: [1500]usize = undefined;
    var prng = std.Random.DefaultPrng.init(5);
    const random = prng.random();
    var line: [200]u8 = undefined;
    for (&sizes) |*size| {
        const text = try std.fmt.bufPrint(&line, "{{\"id\":{d},\"name\":\"user{d}\"," ++
            "\"score\":{d},\"tags\":[\"a\",\"b{d}\"]}}", .{
            random.int(u32), random.uintLessThan(u32, 50), random.uintLessThan(u32, 1000), random.uintLessThan(u8, 9),
        });
        try samples.appendSlice(gpa, text);
        size.* = text.len;
    }
    const n = try codec.trainDictionary(buf, samples.items, &sizes);
    return buf[0..n];
}

/// Whether libzstd loads `dict` as a dictionary.
fn libzstdLoads(dict: []const u8) !bool {
    var sd = codec.SharedDict.initDecompress(dict) catch |err| switch (err) {
        error.DictionaryInvalid => return false,
        else => return err,
    };
    sd.deinit();
    return true;
}

test "this check and libzstd agree on trained dictionaries and thousands of mutations of one" {
    var trained_buf: [2048]u8 = undefined;
    const trained = try trainedDictionary(&trained_buf);
    try testing.expectEqual(@as(?Problem, null), check(trained));
    var prng = std.Random.DefaultPrng.init(12);
    const random = prng.random();
    var buf: [2048]u8 = undefined;
    var refused: usize = 0;
    for (0..20000) |_| {
        @memcpy(buf[0..trained.len], trained);
        // Mutate the entropy tables (and sometimes the repeat offsets or the length).
        for (0..1 + random.uintLessThan(usize, 3)) |_| {
            buf[8 + random.uintLessThan(usize, @min(trained.len - 8, 400))] = random.int(u8);
        }
        var len = trained.len;
        if (random.uintLessThan(u8, 8) == 0) len = 8 + random.uintLessThan(usize, trained.len - 8);
        const dict = buf[0..len];
        if (std.mem.readInt(u32, dict[4..8], .little) == 0) continue;
        const ours = check(dict) == null;
        if (!ours) refused += 1;
        if (ours != try libzstdLoads(dict)) {
            std.debug.print("disagreement on a {d}-byte dictionary: check says {s}\n", .{
                len, if (ours) "valid" else check(dict).?.what,
            });
            return error.TestUnexpectedResult;
        }
    }
    try testing.expect(refused > 1000);
}

test "random garbage after the magic never crashes, and libzstd agrees" {
    var prng = std.Random.DefaultPrng.init(11);
    const random = prng.random();
    var buf: [600]u8 = undefined;
    for (0..3000) |_| {
        const len = 8 + random.uintLessThan(usize, buf.len - 8);
        random.bytes(buf[0..len]);
        std.mem.writeInt(u32, buf[0..4], dictionary_magic, .little);
        // This check and libzstd agree, but for Dictionary_ID 0, which only the spec refuses.
        if (std.mem.readInt(u32, buf[4..8], .little) == 0) continue;
        const verdict = check(buf[0..len]);
        if (verdict != null) {
            try testing.expectError(error.DictionaryInvalid, codec.SharedDict.initDecompress(buf[0..len]));
        } else {
            var sd = try codec.SharedDict.initDecompress(buf[0..len]);
            sd.deinit();
        }
    }
}
