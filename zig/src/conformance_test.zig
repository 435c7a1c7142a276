//! The native core against the conformance vectors of format 1.0 (conformance/v1/cases.json),
//! 1.1 (conformance/v1.1/cases.json) and 1.2 (conformance/v1.2/cases.json), through the C ABI,
//! the way every binding uses the core.
//!
//! Run from the repository root (the noxfile's `conformance` session does, once per folder):
//!   python -m ziglang test zig/src/conformance_test.zig zig/src/sigbus_guard.c -lc <libzstd.so.1>
//! ZR_CONFORMANCE_DIR names the vectors folder (default `conformance/v1`).
//!
//! Invariants:
//! - Every case is run, and every failure is printed, before the test fails: one broken case
//!   does not hide the others.
//! - A valid case passes when open succeeds, the info matches the manifest, every record has
//!   the expected .npy file's dtype, shape and exact bytes (read one at a time and as one
//!   batch) and verify passes. An invalid case passes when the exact ZR_E_* code of its error
//!   is returned: by open for phase "open"; by open, or else by reading each record and by
//!   verify (on fresh readers), for phase "read"; by open, or else by verify after every
//!   record read (reading succeeds, or fails with the case's read_error), for phase "verify".
//!   The core reads a store with index parts by part unless open is asked to validate the
//!   index (spec §9.6), so a case of v1.2 with `bad_records` is run both ways: a plain open
//!   succeeds, every read of a record in `bad_records` fails with the case's error and every
//!   other record reads; an open with ZR_OPEN_VALIDATE_INDEX fails with it (damage to the
//!   index) or the read of the first bad record does (record data). A rejected checksum names
//!   the case's `bad_part` ([ZR-PRT-011]).
//! - A case that the newest folder the core implements (`newest_folder`) lists in its
//!   `supersedes` is skipped, and counted as such: its bytes mean something else to a reader of
//!   that format (conformance/README.md).

const std = @import("std");
const root = @import("root.zig");
const abi = @import("abi.zig");
const sys = @import("sys.zig");
const format = @import("format.zig");

const Status = abi.Status;
const Reader = @import("reader.zig").Reader;
const gpa = std.testing.allocator;

extern "c" fn getenv(name: [*:0]const u8) ?[*:0]const u8;

const Case = struct {
    name: []const u8,
    expect: []const u8,
    store: []const u8,
    kind: ?[]const u8 = null,
    dtype: ?[]const u8 = null,
    dtype_descr: ?[]const u8 = null,
    dtype_length: ?u32 = null,
    dtype_unit: ?[]const u8 = null,
    ndim: ?u8 = null,
    item_shape: ?[]const u64 = null,
    codec: ?[]const u8 = null,
    data_shards: ?u16 = null,
    format_version: ?[2]u16 = null,
    record_count: ?u64 = null,
    records: ?[]const []const u8 = null,
    @"error": ?[]const u8 = null,
    error_number: ?i32 = null,
    phase: ?[]const u8 = null,
    read_error_number: ?i32 = null,
    bad_part: ?[]const u8 = null,
    bad_records: ?[2]u64 = null,
};

const Superseded = struct {
    case: []const u8,
    by: []const u8,
};

const Manifest = struct {
    cases: []const Case,
    supersedes: []const Superseded = &.{},
};

/// The folder of the newest format the core implements; its `supersedes` applies to every
/// earlier folder.
const newest_folder = "v1.2";

/// Spec section 3.3 dtype names by code (code = index + 1), from the core's one table.
const dtype_names = blk: {
    var names: [format.dtypes.len][]const u8 = undefined;
    for (format.dtypes, 0..) |dt, i| names[i] = dt.name;
    break :blk names;
};
const codec_names = [_][]const u8{ "raw", "zstd", "zstd_dict" };
const unit_names = blk: {
    var names: [format.datetime_units.len][]const u8 = undefined;
    for (format.datetime_units, 0..) |u, i| names[i] = u;
    break :blk names;
};

/// Raised (and printed) when a case does not conform; the loop goes on to the next case.
const Mismatch = error{Mismatch};

const Ctx = struct {
    dir: []const u8,
    case: *const Case,

    fn fail(c: *const Ctx, comptime fmt: []const u8, args: anytype) Mismatch {
        std.debug.print("FAIL {s}: " ++ fmt ++ "\n", .{c.case.name} ++ args);
        return error.Mismatch;
    }

    fn path(c: *const Ctx, buf: []u8, rel: []const u8) [:0]u8 {
        return std.fmt.bufPrintSentinel(buf, "{s}/{s}", .{ c.dir, rel }, 0) catch unreachable;
    }
};

fn readFile(p: [*:0]const u8) ![]u8 {
    const fd = try sys.open(p, sys.O_RDONLY, 0);
    defer sys.close(fd);
    const size: usize = @intCast((try sys.fstat(fd)).size);
    const buf = try gpa.alloc(u8, size);
    errdefer gpa.free(buf);
    var short = false;
    try sys.preadAll(fd, buf, 0, &short);
    return buf;
}

/// One record of a .npy file (format 1.0 to 3.0, C order): its descr, shape and data bytes.
const Npy = struct {
    bytes: []u8,
    descr: []const u8,
    shape: [32]u64 = undefined,
    ndim: usize = 0,
    data: []const u8,

    fn parse(bytes: []u8) !Npy {
        if (bytes.len < 10 or !std.mem.eql(u8, bytes[0..6], "\x93NUMPY")) return error.NotNpy;
        const major = bytes[6];
        const len_bytes: usize = if (major == 1) 2 else 4;
        const header_len: usize = if (major == 1)
            std.mem.readInt(u16, bytes[8..10], .little)
        else
            std.mem.readInt(u32, bytes[8..12], .little);
        const start = 8 + len_bytes;
        if (bytes.len < start + header_len) return error.NotNpy;
        const text = bytes[start .. start + header_len];
        if (std.mem.indexOf(u8, text, "'fortran_order': False") == null) return error.NotNpy;
        const descr = try between(text, "'descr': '", "'");
        var out: Npy = .{ .bytes = bytes, .descr = descr, .data = bytes[start + header_len ..] };
        var it = std.mem.tokenizeAny(u8, try between(text, "'shape': (", ")"), ", ");
        while (it.next()) |dim| : (out.ndim += 1) out.shape[out.ndim] = try std.fmt.parseInt(u64, dim, 10);
        return out;
    }

    fn between(text: []const u8, open: []const u8, close: []const u8) ![]const u8 {
        const a = (std.mem.indexOf(u8, text, open) orelse return error.NotNpy) + open.len;
        const b = std.mem.indexOfPos(u8, text, a, close) orelse return error.NotNpy;
        return text[a..b];
    }
};

fn openStore(c: *const Ctx, st: *Status) struct { rc: c_int, r: ?*Reader } {
    var buf: [4096]u8 = undefined;
    var r: ?*Reader = null;
    const rc = root.zr_reader_open(c.path(&buf, c.case.store), &r, st);
    return .{ .rc = rc, .r = r };
}

fn message(st: *const Status) []const u8 {
    return std.mem.sliceTo(&st.message, 0);
}

/// Reads record `i` into a new buffer (caller frees); returns the ZR_E_* code on failure.
fn readRecord(
    r: *Reader,
    info: *const abi.Info,
    i: u64,
    shape: []u64,
    st: *Status,
) !union(enum) { ok: []u8, err: c_int } {
    const idx = [1]u64{i};
    if (info.schema.kind == 1) {
        const n: usize = @intCast(info.record_size);
        const out = try gpa.alloc(u8, @max(n, 1));
        const rc = root.zr_reader_gather_dense(r, &idx, 1, out.ptr, n, 1, st);
        if (rc != 0) {
            gpa.free(out);
            return .{ .err = rc };
        }
        @memcpy(shape[0..info.schema.ndim], info.schema.item_shape[0..info.schema.ndim]);
        return .{ .ok = out[0..n] };
    }
    var size: u64 = 0;
    var rc = root.zr_reader_shapes(r, &idx, 1, shape.ptr, @ptrCast(&size), st);
    if (rc != 0) return .{ .err = rc };
    const n: usize = @intCast(size);
    const out = try gpa.alloc(u8, @max(n, 1));
    const offsets = [1]u64{0};
    rc = root.zr_reader_gather_ragged(r, &idx, 1, out.ptr, &offsets, null, size, 1, st);
    if (rc != 0) {
        gpa.free(out);
        return .{ .err = rc };
    }
    return .{ .ok = out[0..n] };
}

fn freeRecord(b: []u8) void {
    // Zero-size records were allocated as one byte.
    gpa.free(b.ptr[0..@max(b.len, 1)]);
}

fn nameIndex(names: []const []const u8, name: []const u8) ?usize {
    for (names, 0..) |n, k| if (std.mem.eql(u8, n, name)) return k;
    return null;
}

fn runValid(c: *const Ctx) !void {
    var st: Status = undefined;
    const o = openStore(c, &st);
    if (o.rc != 0) return c.fail("open returned {d}: {s}", .{ o.rc, message(&st) });
    const r = o.r.?;
    defer root.zr_reader_free(r);
    var info: abi.Info = undefined;
    root.zr_reader_info(r, &info);
    var descr_buf: [64]u8 = undefined;
    const descr = try expectSchema(c, &info, &descr_buf);
    const total = try expectEachRecord(c, r, &info, descr, &st);
    // All records in one batch, in reverse order: the same bytes again.
    if (c.case.records.?.len > 0 and info.schema.kind == 1) try expectDenseBatch(c, r, &info, total, &st);
    const rc = root.zr_reader_verify(r, 0, info.record_count, &st);
    if (rc != 0) return c.fail("verify: error {d}: {s}", .{ rc, message(&st) });
}

/// Checks the store's info (kind, dtype and its parameters, ndim, codec, shards, record count,
/// format version, item shape) against the manifest, and returns the store's NumPy descr,
/// written into `descr_buf`, that every record's .npy file must have.
fn expectSchema(c: *const Ctx, info: *const abi.Info, descr_buf: []u8) ![]const u8 {
    const case = c.case;
    const s = info.schema;
    const want_kind: u8 = if (std.mem.eql(u8, case.kind.?, "dense")) 1 else 2;
    const want_dtype = (nameIndex(&dtype_names, case.dtype.?) orelse return c.fail("dtype {s}?", .{case.dtype.?})) + 1;
    const want_codec = nameIndex(&codec_names, case.codec.?) orelse return c.fail("codec {s}?", .{case.codec.?});
    const want_unit: u8 = if (case.dtype_unit) |u|
        @intCast((nameIndex(&unit_names, u) orelse return c.fail("unit {s}?", .{u})) + 1)
    else
        0;
    if (s.dtype_length != (case.dtype_length orelse 0) or s.dtype_unit != want_unit) {
        return c.fail("info dtype_length {d} dtype_unit {d}, the manifest says {d} and {d}", .{
            s.dtype_length, s.dtype_unit, case.dtype_length orelse 0, want_unit,
        });
    }
    const descr = format.npyDescr(descr_buf, s.dtype, s.dtype_length, s.dtype_unit);
    if (case.dtype_descr) |want_descr| {
        if (!std.mem.eql(u8, descr, want_descr)) {
            return c.fail("dtype {s}, the manifest says {s}", .{ descr, want_descr });
        }
    }
    if (s.kind != want_kind or s.dtype != want_dtype or s.ndim != case.ndim.? or s.codec != want_codec or
        s.data_shards != case.data_shards.? or info.record_count != case.record_count.? or
        info.format_major != case.format_version.?[0] or info.format_minor != case.format_version.?[1])
    {
        return c.fail("info kind {d} dtype {d} ndim {d} codec {d} shards {d} count {d} version {d}.{d} " ++
            "does not match the manifest", .{
            s.kind, s.dtype, s.ndim, s.codec, s.data_shards, info.record_count, info.format_major, info.format_minor,
        });
    }
    if (case.item_shape) |shape| {
        if (!std.mem.eql(u64, shape, s.item_shape[0..s.ndim])) return c.fail("item_shape differs", .{});
    }
    return descr;
}

/// Reads every record on its own and compares its dtype, shape and bytes with its expected
/// .npy file; returns the records' total size in bytes.
fn expectEachRecord(c: *const Ctx, r: *Reader, info: *const abi.Info, descr: []const u8, st: *Status) !usize {
    const s = info.schema;
    const records = c.case.records.?;
    if (records.len != info.record_count) {
        return c.fail("{d} expected files for {d} records", .{ records.len, info.record_count });
    }
    var total: usize = 0;
    for (records, 0..) |rel, i| {
        var pbuf: [4096]u8 = undefined;
        const bytes = try readFile(c.path(&pbuf, rel));
        defer gpa.free(bytes);
        const npy = Npy.parse(bytes) catch return c.fail("{s} is not a C-order .npy file", .{rel});
        if (!std.mem.eql(u8, npy.descr, descr)) {
            return c.fail("{s} has descr {s}, the store's dtype is {s}", .{ rel, npy.descr, c.case.dtype.? });
        }
        var shape: [32]u64 = undefined;
        const got = switch (try readRecord(r, info, i, &shape, st)) {
            .ok => |b| b,
            .err => |rc| return c.fail("record {d}: error {d}: {s}", .{ i, rc, message(st) }),
        };
        defer freeRecord(got);
        if (npy.ndim != s.ndim or !std.mem.eql(u64, npy.shape[0..npy.ndim], shape[0..s.ndim])) {
            return c.fail("record {d}: shape {any}, expected {any}", .{ i, shape[0..s.ndim], npy.shape[0..npy.ndim] });
        }
        if (!std.mem.eql(u8, got, npy.data)) return c.fail("record {d}: bytes differ from {s}", .{ i, rel });
        total += got.len;
    }
    return total;
}

/// Reads every record of a Dense store in one gather, in reverse order, and compares each
/// with its expected .npy file: a batch must return the same bytes as single reads.
fn expectDenseBatch(c: *const Ctx, r: *Reader, info: *const abi.Info, total: usize, st: *Status) !void {
    const records = c.case.records.?;
    const n = records.len;
    const idx = try gpa.alloc(u64, n);
    defer gpa.free(idx);
    for (idx, 0..) |*v, k| v.* = n - 1 - k;
    const out = try gpa.alloc(u8, @max(total, 1));
    defer gpa.free(out);
    const rc = root.zr_reader_gather_dense(r, idx.ptr, n, out.ptr, total, 0, st);
    if (rc != 0) return c.fail("batch gather: error {d}: {s}", .{ rc, message(st) });
    const rs: usize = @intCast(info.record_size);
    for (idx, 0..) |rec, k| {
        var pbuf: [4096]u8 = undefined;
        const bytes = try readFile(c.path(&pbuf, records[@intCast(rec)]));
        defer gpa.free(bytes);
        const npy = try Npy.parse(bytes);
        if (!std.mem.eql(u8, out[k * rs ..][0..rs], npy.data)) return c.fail("batch: record {d} differs", .{rec});
    }
}

/// [ZR-PRT-009] By part (a plain open): the records of `bad` fail with `want`, naming the
/// case's part when it is a checksum, every other record reads. Whole ([ZR-PRT-010]): open with
/// ZR_OPEN_VALIDATE_INDEX fails with `want`.
fn checkByPartAndWhole(c: *const Ctx, bad: [2]u64, want: c_int) !void {
    var st: Status = undefined;
    const r = openStore(c, &st).r.?;
    defer root.zr_reader_free(r);
    var info: abi.Info = undefined;
    root.zr_reader_info(r, &info);
    var shape: [32]u64 = undefined;
    var i: u64 = 0;
    while (i < info.record_count) : (i += 1) {
        const in_bad = i >= bad[0] and i <= bad[1];
        switch (try readRecord(r, &info, i, &shape, &st)) {
            .ok => |b| {
                freeRecord(b);
                if (in_bad) return c.fail("record {d} read by part, expected {d}", .{ i, want });
            },
            .err => |rc| {
                if (!in_bad or rc != want) {
                    return c.fail("reading record {d} by part returned {d} ({s})", .{ i, rc, message(&st) });
                }
                const part = c.case.bad_part orelse continue;
                if (want == abi.Result.checksum.code() and std.mem.indexOf(u8, message(&st), part) == null) {
                    return c.fail("the message does not name {s}: {s}", .{ part, message(&st) });
                }
            },
        }
    }
    // Whole: damage to the index fails open; damage to a record's data, its read.
    var buf: [4096]u8 = undefined;
    var whole: ?*Reader = null;
    const rc = root.zr_reader_open_ex(c.path(&buf, c.case.store), abi.open_validate_index, &whole, &st);
    if (whole) |w| {
        defer root.zr_reader_free(w);
        switch (try readRecord(w, &info, bad[0], &shape, &st)) {
            .ok => |b| {
                freeRecord(b);
                return c.fail("record {d} read after an open that judged the whole index", .{bad[0]});
            },
            .err => |e| if (e != want) {
                return c.fail("reading record {d} after a whole open returned {d} ({s})", .{ bad[0], e, message(&st) });
            },
        }
    } else if (rc != want) {
        return c.fail("open judging the whole index returned {d} ({s}), expected {d}", .{ rc, message(&st), want });
    }
}

fn runInvalid(c: *const Ctx) !void {
    const case = c.case;
    const want: c_int = case.error_number.?;
    var st: Status = undefined;
    const o = openStore(c, &st);
    if (o.rc == want) {
        if (message(&st).len == 0) return c.fail("error {d} without a message", .{want});
        // [ZR-PRT-011] a damaged part is named, with the records it describes.
        if (case.bad_part) |part| {
            const named = std.mem.indexOf(u8, message(&st), part) != null;
            if (want == abi.Result.checksum.code() and !named) {
                return c.fail("the message does not name {s}: {s}", .{ part, message(&st) });
            }
        }
        return;
    }
    if (o.rc != 0) {
        return c.fail("open returned {d} ({s}), expected {d} ({s})", .{ o.rc, message(&st), want, case.@"error".? });
    }
    root.zr_reader_free(o.r.?);
    if (std.mem.eql(u8, case.phase.?, "open")) {
        return c.fail("open succeeded, expected {d} ({s})", .{ want, case.@"error".? });
    }
    if (case.bad_records) |bad| try checkByPartAndWhole(c, bad, want);
    const verify_phase = std.mem.eql(u8, case.phase.?, "verify");

    // Phase "read": every record in turn, then verify on a fresh reader. Phase "verify": the
    // records read (or fail with the case's read_error, a record's own rule); verify, which
    // checks the layout first (spec section 9.4), must fail with the case's error.
    {
        const r = openStore(c, &st).r.?;
        defer root.zr_reader_free(r);
        var info: abi.Info = undefined;
        root.zr_reader_info(r, &info);
        var shape: [32]u64 = undefined;
        var got: c_int = 0;
        var i: u64 = 0;
        while (i < info.record_count and got == 0) : (i += 1) {
            switch (try readRecord(r, &info, i, &shape, &st)) {
                .ok => |b| freeRecord(b),
                .err => |rc| got = rc,
            }
        }
        const read_want: c_int = if (verify_phase) case.read_error_number orelse 0 else want;
        if (got != want and got != read_want) {
            return c.fail("reading the records returned {d} ({s}), expected {d}", .{ got, message(&st), read_want });
        }
    }
    const r = openStore(c, &st).r.?;
    defer root.zr_reader_free(r);
    var info: abi.Info = undefined;
    root.zr_reader_info(r, &info);
    const rc = root.zr_reader_verify(r, 0, info.record_count, &st);
    if (rc != want) return c.fail("verify returned {d} ({s}), expected {d}", .{ rc, message(&st), want });
}

test "conformance v1: every case of cases.json, exact records and exact error codes" {
    const dir: []const u8 = if (getenv("ZR_CONFORMANCE_DIR")) |d| std.mem.sliceTo(d, 0) else "conformance/v1";
    var pbuf: [4096]u8 = undefined;
    const manifest_path = std.fmt.bufPrintSentinel(&pbuf, "{s}/cases.json", .{dir}, 0) catch unreachable;
    const text = readFile(manifest_path) catch |err| {
        std.debug.print("cannot read {s} ({t}); run from the repository root or set " ++
            "ZR_CONFORMANCE_DIR\n", .{ manifest_path, err });
        return err;
    };
    defer gpa.free(text);
    const parsed = try std.json.parseFromSlice(Manifest, gpa, text, .{ .ignore_unknown_fields = true });
    defer parsed.deinit();
    const newest = try readNewest(dir);
    defer if (newest) |m| m.deinit();
    const supersedes: []const Superseded = if (newest) |m| m.value.supersedes else &.{};

    var failed: usize = 0;
    var valid: usize = 0;
    var skipped: usize = 0;
    for (parsed.value.cases) |*case| {
        if (isSuperseded(supersedes, std.fs.path.basename(dir), case.name)) {
            skipped += 1;
            continue;
        }
        const c: Ctx = .{ .dir = dir, .case = case };
        const is_valid = std.mem.eql(u8, case.expect, "valid");
        if (is_valid) valid += 1;
        (if (is_valid) runValid(&c) else runInvalid(&c)) catch |err| switch (err) {
            error.Mismatch => failed += 1,
            else => return err,
        };
    }
    const n = parsed.value.cases.len - skipped;
    std.debug.print("conformance {s}: {d} of {d} cases pass ({d} valid, {d} invalid; {d} superseded)\n", .{
        dir, n - failed, n, valid, n - valid, skipped,
    });
    try std.testing.expect(n > 0);
    try std.testing.expectEqual(@as(usize, 0), failed);
}

/// The manifest of `newest_folder` beside `dir`, or null where there is none.
fn readNewest(dir: []const u8) !?std.json.Parsed(Manifest) {
    var pbuf: [4096]u8 = undefined;
    const parent = std.fs.path.dirname(dir) orelse ".";
    const p = std.fmt.bufPrintSentinel(&pbuf, "{s}/" ++ newest_folder ++ "/cases.json", .{parent}, 0) catch unreachable;
    const text = readFile(p) catch |err| switch (err) {
        error.Os => return null,
        else => return err,
    };
    defer gpa.free(text);
    const opts: std.json.ParseOptions = .{ .ignore_unknown_fields = true, .allocate = .alloc_always };
    return try std.json.parseFromSlice(Manifest, gpa, text, opts);
}

/// Whether case `name` of folder `folder` ("v1.1") is listed in `supersedes` ("v1.1/name").
fn isSuperseded(supersedes: []const Superseded, folder: []const u8, name: []const u8) bool {
    for (supersedes) |s| {
        const slash = std.mem.indexOfScalar(u8, s.case, '/') orelse continue;
        if (std.mem.eql(u8, s.case[0..slash], folder) and std.mem.eql(u8, s.case[slash + 1 ..], name)) return true;
    }
    return false;
}

/// Writes `bytes` as a new file `name` inside directory `dir`.
fn writeFile(dir: []const u8, name: []const u8, bytes: []const u8) !void {
    var buf: [256]u8 = undefined;
    const p = try std.fmt.bufPrintSentinel(&buf, "{s}/{s}", .{ dir, name }, 0);
    const fd = try sys.open(p, sys.O_WRONLY | sys.O_CREAT | sys.O_EXCL, 0o644);
    defer sys.close(fd);
    try sys.pwriteAll(fd, bytes, 0);
}

test "conformance v1: dict_size above dict_size_bytes_max is a limit error (no vector: 16 MiB)" {
    // The one reader limit without a conformance vector: a store that breaks only this rule
    // has a header of more than 16 MiB. Built here, in a temporary directory, instead.
    const tests = @import("testing.zig");
    var td: tests.TempDir = .{};
    try td.init();
    var pbuf: [256]u8 = undefined;
    const store = td.sub(&pbuf, "s");
    try sys.mkdir(store, 0o755);

    const dict = try gpa.alloc(u8, format.dict_size_bytes_max + 8);
    defer gpa.free(dict);
    @memset(dict, 'z');
    const h: format.Header = .{
        .kind = .ragged,
        .dtype = 3,
        .ndim = 1,
        .codec = .zstd_dict,
        .data_shards = 1,
        .index_checksum = format.xxh64(""),
    };
    const header = try gpa.alloc(u8, @intCast(format.headerSize(h.kind, h.ndim, h.data_shards, 0, @intCast(dict.len))));
    defer gpa.free(header);
    format.encodeHeader(&h, &.{}, dict, header);
    try writeFile(store, "header.zrh", header);
    try writeFile(store, "index.zri", "");
    try writeFile(store, "data-000.zrd", "");

    var st: Status = undefined;
    var r: ?*Reader = null;
    const rc = root.zr_reader_open(store, &r, &st);
    if (r) |rd| root.zr_reader_free(rd);
    td.removeStore("s", 1);
    try td.deinitExpectEmpty();
    try std.testing.expectEqual(abi.Result.limit.code(), rc);
    try std.testing.expect(std.mem.indexOf(u8, message(&st), "dict_size_bytes_max") != null);
}
