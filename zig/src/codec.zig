//! The record codecs `zstd` and `zstd_dict` (spec/format-v1.md §6), over the platform's
//! libzstd (`libzstd.so.1`, linked dynamically). Codec `raw` needs no code here.
//!
//! Invariants:
//! - Every record is one independent, complete zstd frame ([ZR-COD-001]) with the content size
//!   field set and no checksum, so that any conforming zstd decoder reads it and a reader can
//!   check a frame's size before decoding a byte of it.
//! - `Decompressor.decompress` accepts a `src` only if it is exactly one complete zstd frame
//!   (not a skippable or legacy frame, nothing before or after it) whose declared content size
//!   equals `dst.len`, that names no dictionary but the one given, whose window is at most
//!   `windowSizeMax(dst.len)`, whose blocks are within Block_Maximum_Size and whose sequences
//!   section headers keep [ZR-COD-016] (spec §6.2: [ZR-COD-005] .. [ZR-COD-008], [ZR-COD-013],
//!   [ZR-COD-016]); it then writes exactly `dst.len` bytes or fails. It reads the frame header
//!   and walks the blocks' headers itself, so these rules hold whatever libzstd release is
//!   loaded, never trusts a length from the frame over the caller's buffer, and no input makes
//!   it panic. What spec [ZR-COD-019] leaves to the decoder is libzstd's to judge.
//! - A dictionary is checked by `zstd_dict.check` (spec §6.3) before libzstd sees it.
//! - A `SharedDict` is read-only once built, so one can serve every thread of a store at once;
//!   `Compressor` and `Decompressor` hold mutable libzstd state and belong to one thread each.
//! - Every libzstd object created here is freed by the matching `deinit`, and an `init` that
//!   fails leaves nothing allocated.
//! - Only libzstd's stable API is used, declared by hand below from its 1.5 headers, because
//!   Zig 0.17 has no @cImport and the build needs no zstd headers.

const std = @import("std");
const assert = std.debug.assert;
const zstd_dict = @import("zstd_dict.zig");
const format = @import("format.zig");

pub const Error = error{
    OutOfMemory,
    CompressFailed,
    DecodeFailed,
    SizeMismatch,
    DictionaryInvalid,
    TrainFailed,
};

/// The level writers use unless told otherwise (spec §6).
pub const default_level: i32 = 3;

// libzstd's stable API (zstd.h and zdict.h of 1.5). Plain `extern` rather than `extern "zstd"`
// so that the library is named once, on the link line, as the path of `libzstd.so.1`; every
// common Linux base image has that file but not always the unversioned `libzstd.so`.
const ZSTD_CCtx = opaque {};
const ZSTD_DCtx = opaque {};
const ZSTD_CDict = opaque {};
const ZSTD_DDict = opaque {};

extern fn ZSTD_compressBound(src_size: usize) usize;
extern fn ZSTD_isError(code: usize) c_uint;
extern fn ZSTD_getErrorName(code: usize) [*:0]const u8;
extern fn ZSTD_minCLevel() c_int;
extern fn ZSTD_maxCLevel() c_int;

extern fn ZSTD_createCCtx() ?*ZSTD_CCtx;
extern fn ZSTD_freeCCtx(cctx: ?*ZSTD_CCtx) usize;
extern fn ZSTD_compressCCtx(
    cctx: *ZSTD_CCtx,
    dst: ?*anyopaque,
    dst_capacity: usize,
    src: ?*const anyopaque,
    src_size: usize,
    compression_level: c_int,
) usize;

extern fn ZSTD_createDCtx() ?*ZSTD_DCtx;
extern fn ZSTD_freeDCtx(dctx: ?*ZSTD_DCtx) usize;
extern fn ZSTD_decompressDCtx(
    dctx: *ZSTD_DCtx,
    dst: ?*anyopaque,
    dst_capacity: usize,
    src: ?*const anyopaque,
    src_size: usize,
) usize;

extern fn ZSTD_createCDict(dict: ?*const anyopaque, dict_size: usize, compression_level: c_int) ?*ZSTD_CDict;
extern fn ZSTD_freeCDict(cdict: ?*ZSTD_CDict) usize;
extern fn ZSTD_compress_usingCDict(
    cctx: *ZSTD_CCtx,
    dst: ?*anyopaque,
    dst_capacity: usize,
    src: ?*const anyopaque,
    src_size: usize,
    cdict: *const ZSTD_CDict,
) usize;

extern fn ZSTD_createDDict(dict: ?*const anyopaque, dict_size: usize) ?*ZSTD_DDict;
extern fn ZSTD_freeDDict(ddict: ?*ZSTD_DDict) usize;
extern fn ZSTD_decompress_usingDDict(
    dctx: *ZSTD_DCtx,
    dst: ?*anyopaque,
    dst_capacity: usize,
    src: ?*const anyopaque,
    src_size: usize,
    ddict: *const ZSTD_DDict,
) usize;

extern fn ZSTD_getFrameContentSize(src: ?*const anyopaque, src_size: usize) c_ulonglong;
extern fn ZSTD_findFrameCompressedSize(src: ?*const anyopaque, src_size: usize) usize;
extern fn ZSTD_getDictID_fromDict(dict: ?*const anyopaque, dict_size: usize) c_uint;
extern fn ZSTD_DCtx_setParameter(dctx: *ZSTD_DCtx, param: c_int, value: c_int) usize;
// The buffer-less streaming decoder (zstd.h, static-linking section; exported by libzstd.so
// since 1.0): one call per frame header, block header and block, each returning what it wrote.
extern fn ZSTD_decompressBegin(dctx: *ZSTD_DCtx) usize;
extern fn ZSTD_decompressBegin_usingDDict(dctx: *ZSTD_DCtx, ddict: *const ZSTD_DDict) usize;
extern fn ZSTD_nextSrcSizeToDecompress(dctx: *ZSTD_DCtx) usize;
extern fn ZSTD_decompressContinue(
    dctx: *ZSTD_DCtx,
    dst: ?*anyopaque,
    dst_capacity: usize,
    src: ?*const anyopaque,
    src_size: usize,
) usize;

/// ZSTD_d_windowLogMax of zstd.h's ZSTD_dParameter (stable since 1.4.0).
const zstd_d_window_log_max: c_int = 100;

extern fn ZDICT_trainFromBuffer(
    dict_buffer: ?*anyopaque,
    dict_buffer_capacity: usize,
    samples_buffer: ?*const anyopaque,
    samples_sizes: ?[*]const usize,
    nb_samples: c_uint,
) usize;
extern fn ZDICT_isError(code: usize) c_uint;

/// ZSTD_CONTENTSIZE_UNKNOWN and ZSTD_CONTENTSIZE_ERROR of zstd.h.
const content_size_unknown: u64 = 0 -% @as(u64, 1);
const content_size_error: u64 = 0 -% @as(u64, 2);

/// The first four bytes, little-endian, of every zstd frame (RFC 8878 §3.1.1). Skippable and
/// legacy frames have other magics; neither can hold a record, so both are refused.
const frame_magic: u32 = 0xFD2FB528;
/// The first four bytes, little-endian, of a dictionary in zstd's own format (RFC 8878 §5).
const dictionary_magic: u32 = 0xEC30A437;

/// libzstd returns an error as `0 - code`; these codes below 100 are pinned since 1.3.1
/// (zstd_errors.h). Only allocation failure is told apart, so that it surfaces as
/// OutOfMemory rather than as a codec failure.
const zstd_error_memory_allocation: usize = 64;
const zstd_error_corruption_detected: usize = 20;
const zstd_error_src_size_wrong: usize = 72;

fn isError(code: usize) bool {
    return ZSTD_isError(code) != 0;
}

fn isAllocationError(code: usize) bool {
    return isError(code) and 0 -% code == zstd_error_memory_allocation;
}

/// The name libzstd gives a return code, for diagnostics. The string is static and lives as
/// long as the process; a code that is not an error reads "No error detected".
pub fn errorName(code: usize) []const u8 {
    return std.mem.span(ZSTD_getErrorName(code));
}

fn levelValid(level: i32) bool {
    return level >= ZSTD_minCLevel() and level <= ZSTD_maxCLevel();
}

/// A dictionary compiled once and shared, read-only, by every thread of one store: a CDict for
/// writers or a DDict for readers. Only what is asked for is built, because each costs memory
/// in proportion to the dictionary and a store is opened either to write or to read.
///
/// The dictionary bytes are copied, so the caller may free them after `init*` returns. Both
/// zstd-format dictionaries (as `trainDictionary` makes) and raw-content dictionaries are
/// accepted, as libzstd and other zstd decoders do by default; only the former carry an ID,
/// which lets a reader tell a frame made with another dictionary before decoding it.
pub const SharedDict = struct {
    cdict: ?*ZSTD_CDict = null,
    ddict: ?*ZSTD_DDict = null,
    /// The dictionary's ID, or 0 for a raw-content dictionary.
    id: u32 = 0,
    /// The level the CDict was compiled for; meaningless without one.
    level: i32 = default_level,

    /// Builds the compression half. The level is fixed here, for every frame made with it.
    pub fn initCompress(dict: []const u8, level: i32) Error!SharedDict {
        try checkDictionary(dict);
        if (!levelValid(level)) return error.CompressFailed;
        const cdict = ZSTD_createCDict(dict.ptr, dict.len, level) orelse
            return creationFailure(dict);
        return .{ .cdict = cdict, .id = ZSTD_getDictID_fromDict(dict.ptr, dict.len), .level = level };
    }

    /// Builds the decompression half.
    pub fn initDecompress(dict: []const u8) Error!SharedDict {
        try checkDictionary(dict);
        const ddict = ZSTD_createDDict(dict.ptr, dict.len) orelse
            return creationFailure(dict);
        return .{ .ddict = ddict, .id = ZSTD_getDictID_fromDict(dict.ptr, dict.len) };
    }

    /// Frees the compiled dictionary. Every Compressor and Decompressor made with it must be
    /// done with it first, since they borrow it rather than copy it.
    pub fn deinit(self: *SharedDict) void {
        if (self.cdict) |cdict| _ = ZSTD_freeCDict(cdict);
        if (self.ddict) |ddict| _ = ZSTD_freeDDict(ddict);
        self.* = undefined;
    }

    /// An empty dictionary would silently mean "no dictionary" to libzstd, which is never what
    /// a `zstd_dict` store means (ZR-HDR-013 requires a non-empty one). A zstd-format one must
    /// pass the checks of spec §6.3, whatever libzstd would accept.
    fn checkDictionary(dict: []const u8) Error!void {
        if (dict.len == 0) return error.DictionaryInvalid;
        if (zstd_dict.check(dict) != null) return error.DictionaryInvalid;
    }

    /// libzstd returns NULL both when it runs out of memory and when a zstd-format dictionary
    /// has malformed entropy tables. A raw-content dictionary cannot be malformed, so for one
    /// of those only memory is left to blame; for a zstd-format one the broken dictionary is
    /// by far the likelier cause.
    fn creationFailure(dict: []const u8) Error {
        if (dict.len >= 4 and std.mem.readInt(u32, dict[0..4], .little) == dictionary_magic) {
            return error.DictionaryInvalid;
        }
        return error.OutOfMemory;
    }
};

/// One per thread: it is not thread-safe, and it is cheap to reuse for many records because
/// libzstd keeps its working memory between frames.
pub const Compressor = struct {
    cctx: *ZSTD_CCtx,
    level: i32,
    cdict: ?*const ZSTD_CDict,
    /// The libzstd return code of the last failed call, for `errorName` in diagnostics; 0 when
    /// nothing has failed.
    last_code: usize = 0,

    /// With a dictionary, frames are compressed at the level the dictionary was compiled for,
    /// and `level` is only checked, because libzstd fixes a CDict's level when it builds it.
    pub fn init(level: i32, dict: ?*const SharedDict) Error!Compressor {
        if (!levelValid(level)) return error.CompressFailed;
        var cdict: ?*const ZSTD_CDict = null;
        if (dict) |d| cdict = d.cdict orelse return error.DictionaryInvalid;
        const cctx = ZSTD_createCCtx() orelse return error.OutOfMemory;
        return .{ .cctx = cctx, .level = level, .cdict = cdict };
    }

    pub fn deinit(self: *Compressor) void {
        _ = ZSTD_freeCCtx(self.cctx);
        self.* = undefined;
    }

    /// The largest frame `compress` can make from `src_len` bytes. For a length so large that
    /// no bound exists it returns maxInt(usize), which no allocation can satisfy, so the caller
    /// fails on memory instead of overrunning a buffer sized from a wrapped-around bound.
    pub fn bound(src_len: usize) usize {
        const result = ZSTD_compressBound(src_len);
        if (isError(result) or result < src_len) return std.math.maxInt(usize);
        return result;
    }

    /// Compresses `src` into `dst` as one frame and returns the frame's size. A `dst` of
    /// `bound(src.len)` bytes always suffices; a smaller one works when the frame fits and
    /// fails with CompressFailed otherwise. An empty `src` still makes a valid (tiny) frame.
    pub fn compress(self: *Compressor, dst: []u8, src: []const u8) Error!usize {
        // One-shot compression writes the content size and no checksum by default, which is
        // exactly the frame the format wants, so no parameters are set.
        const result = if (self.cdict) |cdict|
            ZSTD_compress_usingCDict(self.cctx, dst.ptr, dst.len, src.ptr, src.len, cdict)
        else
            ZSTD_compressCCtx(self.cctx, dst.ptr, dst.len, src.ptr, src.len, self.level);
        if (isError(result)) {
            self.last_code = result;
            return if (isAllocationError(result)) error.OutOfMemory else error.CompressFailed;
        }
        assert(result <= dst.len);
        return result;
    }
};

/// One per thread: it is not thread-safe, and it is cheap to reuse for many records.
pub const Decompressor = struct {
    dctx: *ZSTD_DCtx,
    ddict: ?*const ZSTD_DDict,
    dict_id: u32,
    /// The libzstd return code of the last failed libzstd call, for `errorName` in
    /// diagnostics; 0 when nothing has failed or when this module itself refused the input.
    last_code: usize = 0,
    /// Why this module refused the last input itself (a rule of spec §6.2), for diagnostics;
    /// null when it did not.
    reason: ?[]const u8 = null,
    /// The ZSTD_d_windowLogMax last set on `dctx` (0: libzstd's default).
    window_log_max: u6 = 0,

    pub fn init(dict: ?*const SharedDict) Error!Decompressor {
        var ddict: ?*const ZSTD_DDict = null;
        var dict_id: u32 = 0;
        if (dict) |d| {
            ddict = d.ddict orelse return error.DictionaryInvalid;
            dict_id = d.id;
        }
        const dctx = ZSTD_createDCtx() orelse return error.OutOfMemory;
        return .{ .dctx = dctx, .ddict = ddict, .dict_id = dict_id };
    }

    pub fn deinit(self: *Decompressor) void {
        _ = ZSTD_freeDCtx(self.dctx);
        self.* = undefined;
    }

    /// Decodes the one frame `src` into exactly `dst.len` bytes ([ZR-IDX-005]).
    ///
    /// SizeMismatch: the frame declares no content size, or one other than `dst.len`
    /// ([ZR-COD-006]).
    /// DecodeFailed: `src` is not exactly one complete zstd frame ([ZR-COD-005]), the frame
    /// names a dictionary other than the one given, or one when none was given ([ZR-COD-007]),
    /// declares a window above `windowSizeMax(dst.len)` ([ZR-COD-008]), has a block above
    /// Block_Maximum_Size ([ZR-COD-013]) or a sequences section header that [ZR-COD-016]
    /// forbids, or its contents are corrupt (its content checksum, if any, included). A frame
    /// that names no dictionary is decoded with the one given, if any ([ZR-COD-007]). On error
    /// the contents of `dst` are unspecified.
    pub fn decompress(self: *Decompressor, dst: []u8, src: []const u8) Error!void {
        self.last_code = 0;
        self.reason = null;
        const fh = try self.checkFrame(dst.len, src);
        try self.capWindowLog(dst.len);

        // [ZR-COD-013] The stored size of every block, from its header; what a Compressed
        // block decodes to is known only by decoding it. A frame of at most one block's worth
        // of content cannot hold a block that decodes to more, so it is decoded in one call;
        // a larger one block by block, each block's output checked (libzstd checks neither
        // before 1.5.6, and no Raw or RLE block in its one-shot decoder at all).
        const block_max = @min(fh.window_size, block_size_max);
        if (blockOverMax(src[fh.size..], block_max)) {
            self.reason = "a block of its zstd frame is larger than Block_Maximum_Size, the " ++
                "frame's window or 128 KiB, whichever is smaller (ZR-COD-013)";
            return error.DecodeFailed;
        }
        // checkFrame found the frame's content size equal to `dst.len`.
        const result = if (dst.len <= block_max)
            self.decodeWhole(dst, src)
        else
            self.decodeByBlock(dst, src, block_max);
        if (isError(result)) {
            self.last_code = result;
            return if (isAllocationError(result)) error.OutOfMemory else error.DecodeFailed;
        }
        if (result != dst.len) return error.DecodeFailed;
        // [ZR-COD-016] Judged after libzstd has read the frame, when its bytes are in cache: the
        // sequences section header lies past the literals, a cache line that the walk would
        // otherwise be the first to fetch (a frame refused here leaves `dst` unspecified, as
        // any refused frame does).
        if (sequencesWalkProblem(src[fh.size..])) |why| {
            self.reason = why;
            return error.DecodeFailed;
        }
    }

    /// decompress's checks of what the frame header and libzstd's scan of the frame say, made
    /// before any byte is decoded: the header parses, declares a content size of exactly
    /// `dst_len`, names this store's dictionary or none, declares a window within the cap,
    /// and the frame is all of `src`. A failed check sets `reason` or `last_code`. Inline:
    /// decompress runs for every compressed record read.
    inline fn checkFrame(self: *Decompressor, dst_len: usize, src: []const u8) Error!FrameHeader {
        const fh = FrameHeader.parse(src) catch |err| {
            self.reason = switch (err) {
                error.NotAFrame => "its stored bytes do not start with the zstd frame magic 28 B5 2F FD " ++
                    "(a skippable or legacy frame, or no frame) (ZR-COD-005)",
                error.Truncated => "its stored bytes end inside the zstd frame header (ZR-COD-005)",
                error.ReservedBit => "its frame header sets the reserved bit of the frame header " ++
                    "descriptor (ZR-COD-005)",
            };
            return error.DecodeFailed;
        };
        // [ZR-COD-006]
        const content_size = fh.content_size orelse {
            self.reason = "its zstd frame declares no content size (ZR-COD-006)";
            return error.SizeMismatch;
        };
        if (content_size != dst_len) return error.SizeMismatch;
        // [ZR-COD-007] libzstd makes the same check, but only outside fuzzing builds; checking
        // here keeps "wrong dictionary" an error whatever build of the library is loaded.
        if (fh.dict_id != 0 and fh.dict_id != self.dict_id) {
            self.reason = if (self.ddict == null)
                "its zstd frame names a dictionary, and a store of codec zstd has none (ZR-COD-007)"
            else
                "its zstd frame names a dictionary other than this store's (ZR-COD-007)";
            return error.DecodeFailed;
        }
        // [ZR-COD-008]
        if (fh.window_size > windowSizeMax(dst_len)) {
            self.reason = "its zstd frame declares a window larger than the record's logical size " ++
                "rounded up to a power of two, and larger than 128 MiB (ZR-COD-008)";
            return error.DecodeFailed;
        }
        // Trailing bytes are refused rather than ignored, because the index gives each record
        // its exact stored size; extra bytes mean the index and the data disagree.
        const frame_size = ZSTD_findFrameCompressedSize(src.ptr, src.len);
        if (isError(frame_size)) {
            self.last_code = frame_size;
            return error.DecodeFailed;
        }
        if (frame_size != src.len) {
            self.reason = "its stored bytes hold more than one zstd frame (ZR-COD-005)";
            return error.DecodeFailed;
        }
        return fh;
    }

    /// Gives libzstd itself the window cap of a record of `dst_len` bytes, in case a frame's
    /// blocks ask for more than its header declared; the parameter is set only when the cap
    /// changes. Inline: decompress runs for every compressed record read.
    inline fn capWindowLog(self: *Decompressor, dst_len: usize) Error!void {
        const log = windowLogMax(dst_len);
        if (log != self.window_log_max) {
            const code = ZSTD_DCtx_setParameter(self.dctx, zstd_d_window_log_max, log);
            if (isError(code)) {
                self.last_code = code;
                return error.DecodeFailed;
            }
            self.window_log_max = log;
        }
    }

    /// Decodes `src` in one call; returns what libzstd returns.
    fn decodeWhole(self: *Decompressor, dst: []u8, src: []const u8) usize {
        return if (self.ddict) |ddict|
            ZSTD_decompress_usingDDict(self.dctx, dst.ptr, dst.len, src.ptr, src.len, ddict)
        else
            ZSTD_decompressDCtx(self.dctx, dst.ptr, dst.len, src.ptr, src.len);
    }

    /// Decodes `src` one frame header, block header and block at a time; returns the bytes
    /// written or a libzstd error code. A block that writes more than `block_max` bytes ends it
    /// with `reason` set ([ZR-COD-013]); the caller has checked that `src` is one whole frame.
    fn decodeByBlock(self: *Decompressor, dst: []u8, src: []const u8, block_max: u64) usize {
        const begun = if (self.ddict) |ddict|
            ZSTD_decompressBegin_usingDDict(self.dctx, ddict)
        else
            ZSTD_decompressBegin(self.dctx);
        if (isError(begun)) return begun;
        var in: usize = 0;
        var out: usize = 0;
        while (true) {
            const want = ZSTD_nextSrcSizeToDecompress(self.dctx);
            if (want == 0) return out;
            if (want > src.len - in) return zstdError(zstd_error_src_size_wrong);
            const wrote = ZSTD_decompressContinue(self.dctx, dst.ptr + out, dst.len - out, src.ptr + in, want);
            if (isError(wrote)) return wrote;
            if (wrote > block_max) {
                self.reason = "a block of its zstd frame decodes to more than Block_Maximum_Size, " ++
                    "the frame's window or 128 KiB, whichever is smaller (ZR-COD-013)";
                return zstdError(zstd_error_corruption_detected);
            }
            in += want;
            out += wrote;
        }
    }
};

/// The largest window a compressed record of `logical` bytes may declare ([ZR-COD-008]): its
/// logical size rounded up to a power of two, but never less than 2^27 (128 MiB, libzstd's
/// default limit, which every frame libzstd writes at any level without an explicit window
/// keeps to). At most 2^31, since a record is at most record_size_bytes_max.
pub fn windowSizeMax(logical: u64) u64 {
    return @as(u64, 1) << windowLogMax(logical);
}

fn windowLogMax(logical: u64) u6 {
    const floor: u6 = format.window_log_floor;
    if (logical <= @as(u64, 1) << floor) return floor;
    return @intCast(64 - @clz(logical - 1));
}

/// What spec §6.2 reads from a frame header (RFC 8878 §3.1.1.1).
/// The largest Block_Maximum_Size of any frame (RFC 8878 §3.1.1.2.4): 128 KiB.
const block_size_max: u64 = 128 << 10;

/// Whether a block of the frame whose blocks start at `blocks` (after its frame header) has a
/// Block_Size above `block_max`: the stored size of a Raw or Compressed block, the repeat
/// count of an RLE block ([ZR-COD-013]). Reads only block headers, each 3 bytes; a frame that
/// ends early is left to the decoder, which refuses it.
fn blockOverMax(blocks: []const u8, block_max: u64) bool {
    var pos: usize = 0;
    while (blocks.len - pos >= 3) {
        const header = std.mem.readInt(u24, blocks[pos..][0..3], .little);
        const size: u64 = header >> 3;
        if (size > block_max) return true;
        // Block_Type 1 (RLE) stores one byte for `size` repeats; 0 (Raw) and 2 (Compressed)
        // store `size` bytes; 3 is reserved and refused by the decoder.
        const stored: u64 = if ((header >> 1) & 3 == 1) 1 else size;
        if (header & 1 != 0 or stored > blocks.len - pos - 3) return false;
        pos += 3 + @as(usize, @intCast(stored));
    }
    return false;
}

/// What breaks [ZR-COD-016] in the Compressed blocks of a frame whose blocks start at
/// `blocks`, or null. Reads the 3-byte block headers and, in each Compressed block, the few
/// bytes of its literals and sequences section headers; a frame that ends early, or a block
/// whose sections do not fit in it, is left to the decoder, which refuses it.
fn sequencesWalkProblem(blocks: []const u8) ?[]const u8 {
    var pos: usize = 0;
    while (blocks.len - pos >= 3) {
        const header = std.mem.readInt(u24, blocks[pos..][0..3], .little);
        const block_type = (header >> 1) & 3;
        const stored: usize = if (block_type == 1) 1 else header >> 3;
        if (stored > blocks.len - pos - 3) return null;
        const body = blocks[pos + 3 ..][0..stored];
        if (block_type == 2) {
            if (sequencesHeaderProblem(body)) |why| return why;
        }
        if (header & 1 != 0) return null;
        pos += 3 + stored;
    }
    return null;
}

/// The size of a Compressed block's literals section (RFC 8878 §3.1.1.3.1.1) from its header:
/// the header, then Regenerated_Size bytes (Raw), one byte (RLE) or Compressed_Size bytes
/// (Compressed, Treeless); null if the header does not fit in the block.
fn literalsSectionSize(block: []const u8) ?u64 {
    if (block.len == 0) return null;
    const b0 = block[0];
    const size_format = (b0 >> 2) & 3;
    if (b0 & 3 < 2) {
        const header_size: usize = switch (size_format) {
            1 => 2,
            3 => 3,
            else => 1,
        };
        if (block.len < header_size) return null;
        const value = littleEndian(block[0..header_size]);
        const regenerated = if (header_size == 1) value >> 3 else value >> 4;
        return header_size + if (b0 & 3 == 0) regenerated else 1;
    }
    const header_size: usize = switch (size_format) {
        0, 1 => 3,
        2 => 4,
        else => 5,
    };
    const bits: u6 = switch (size_format) {
        0, 1 => 10,
        2 => 14,
        else => 18,
    };
    if (block.len < header_size) return null;
    const value = littleEndian(block[0..header_size]);
    return header_size + ((value >> (4 + bits)) & ((@as(u64, 1) << bits) - 1));
}

/// `bytes` (at most 8) read as one little-endian number.
fn littleEndian(bytes: []const u8) u64 {
    var value: u64 = 0;
    for (bytes, 0..) |b, k| value |= @as(u64, b) << @intCast(8 * k);
    return value;
}

/// What breaks [ZR-COD-016] in one Compressed block's sequences section header, or null: a
/// Number_of_Sequences of 0 is the single byte 0 and the block's last byte, and otherwise the
/// reserved bits (1-0) of Symbol_Compression_Modes are 0. libzstd up to 1.5.5 and from 1.5.6
/// on judge both differently, which is why they are read here.
fn sequencesHeaderProblem(block: []const u8) ?[]const u8 {
    const end = literalsSectionSize(block) orelse return null;
    if (end >= block.len) return null;
    const at: usize = @intCast(end);
    const byte0 = block[at];
    if (byte0 == 0) {
        if (at + 1 == block.len) return null;
        return "a block of its zstd frame has bytes after a Number_of_Sequences of 0 (ZR-COD-016)";
    }
    if (byte0 == 128 and at + 1 < block.len and block[at + 1] == 0) {
        return "a block of its zstd frame writes a Number_of_Sequences of 0 in two bytes (ZR-COD-016)";
    }
    const width: usize = if (byte0 < 128) 1 else if (byte0 < 255) 2 else 3;
    if (block.len - at > width and block[at + width] & 3 != 0) {
        return "a block of its zstd frame sets the reserved bits of Symbol_Compression_Modes (ZR-COD-016)";
    }
    return null;
}

/// The value libzstd returns for error `code` (`0 - code`).
fn zstdError(code: usize) usize {
    return 0 -% code;
}

pub const FrameHeader = struct {
    window_size: u64,
    content_size: ?u64,
    dict_id: u32,
    has_checksum: bool,
    size: usize,

    pub const ParseError = error{ NotAFrame, Truncated, ReservedBit };

    pub fn parse(src: []const u8) ParseError!FrameHeader {
        if (src.len < 4 or std.mem.readInt(u32, src[0..4], .little) != frame_magic) return error.NotAFrame;
        if (src.len < 5) return error.Truncated;
        const fhd = src[4];
        if (fhd & 0x08 != 0) return error.ReservedBit;
        const single_segment = fhd & 0x20 != 0;
        const did_size: usize = switch (fhd & 3) {
            0 => 0,
            1 => 1,
            2 => 2,
            else => 4,
        };
        const fcs_flag = fhd >> 6;
        const fcs_size: usize = switch (fcs_flag) {
            0 => if (single_segment) 1 else 0,
            1 => 2,
            2 => 4,
            else => 8,
        };
        const size = 5 + @as(usize, @intFromBool(!single_segment)) + did_size + fcs_size;
        if (src.len < size) return error.Truncated;
        var pos: usize = 5;
        var window: u64 = 0;
        if (!single_segment) {
            const wd = src[pos];
            pos += 1;
            const log: u6 = 10 + @as(u6, @intCast(wd >> 3));
            const base = @as(u64, 1) << log;
            window = base + (base / 8) * (wd & 7);
        }
        var dict_id: u32 = 0;
        for (0..did_size) |k| dict_id |= @as(u32, src[pos + k]) << @intCast(8 * k);
        pos += did_size;
        var content: ?u64 = null;
        if (fcs_size > 0) {
            var v: u64 = 0;
            for (0..fcs_size) |k| v |= @as(u64, src[pos + k]) << @intCast(8 * k);
            if (fcs_size == 2) v += 256;
            content = v;
        }
        if (single_segment) window = content.?;
        return .{
            .window_size = window,
            .content_size = content,
            .dict_id = dict_id,
            .has_checksum = fhd & 4 != 0,
            .size = size,
        };
    }
};

/// Trains a dictionary with ZDICT_trainFromBuffer from `samples`, the concatenation of samples
/// whose lengths are `sample_sizes`, and returns how many bytes of `dst` it wrote. `dst.len` is
/// the largest dictionary wanted (about 100 times smaller than the samples is typical).
///
/// TrainFailed: the sizes do not add up to `samples.len`, there are no samples or more than
/// libzstd can count, or libzstd cannot make a dictionary from them (too few or too small
/// samples, or `dst` too small).
pub fn trainDictionary(dst: []u8, samples: []const u8, sample_sizes: []const usize) Error!usize {
    if (sample_sizes.len == 0 or sample_sizes.len > std.math.maxInt(c_uint)) return error.TrainFailed;
    var total: usize = 0;
    for (sample_sizes) |size| {
        total = std.math.add(usize, total, size) catch return error.TrainFailed;
    }
    if (total != samples.len) return error.TrainFailed;

    const result = ZDICT_trainFromBuffer(
        dst.ptr,
        dst.len,
        samples.ptr,
        sample_sizes.ptr,
        @intCast(sample_sizes.len),
    );
    if (ZDICT_isError(result) != 0) {
        return if (isAllocationError(result)) error.OutOfMemory else error.TrainFailed;
    }
    assert(result <= dst.len);
    return result;
}

// Tests.

const testing = std.testing;

fn roundTrip(c: *Compressor, d: *Decompressor, data: []const u8) !usize {
    const gpa = testing.allocator;
    const frame = try gpa.alloc(u8, Compressor.bound(data.len));
    defer gpa.free(frame);
    const frame_size = try c.compress(frame, data);
    try testing.expectEqual(@as(u64, data.len), ZSTD_getFrameContentSize(frame.ptr, frame_size));

    const out = try gpa.alloc(u8, data.len);
    defer gpa.free(out);
    try d.decompress(out, frame[0..frame_size]);
    try testing.expectEqualSlices(u8, data, out);
    return frame_size;
}

fn fillCompressible(random: std.Random, buf: []u8) void {
    const words = [_][]const u8{ "alpha ", "beta ", "gamma ", "delta ", "epsilon ", "zeta " };
    var i: usize = 0;
    while (i < buf.len) {
        const word = words[random.uintLessThan(usize, words.len)];
        const n = @min(word.len, buf.len - i);
        @memcpy(buf[i..][0..n], word[0..n]);
        i += n;
    }
}

/// Writes `count` similar small JSON-like records, as a store of user rows might hold, and
/// returns their concatenation and sizes.
fn makeSamples(random: std.Random, count: usize, sizes: []usize) ![]u8 {
    const gpa = testing.allocator;
    var list: std.ArrayList(u8) = .empty;
    errdefer list.deinit(gpa);
    const names = [_][]const u8{ "ada", "grace", "linus", "ken", "barbara", "edsger" };
    const cities = [_][]const u8{ "London", "Paris", "Zurich", "Oslo", "Lisbon" };
    var line: [256]u8 = undefined;
    for (0..count) |i| {
        const text = try std.fmt.bufPrint(&line,
            \\{{"id":{d},"name":"{s}","city":"{s}","score":{d},"active":{s},"tags":["user","v2"]}}
        , .{
            random.int(u32),
            names[random.uintLessThan(usize, names.len)],
            cities[random.uintLessThan(usize, cities.len)],
            random.uintLessThan(u32, 100000),
            if (random.boolean()) "true" else "false",
        });
        try list.appendSlice(gpa, text);
        sizes[i] = text.len;
    }
    return list.toOwnedSlice(gpa);
}

test "round trip of random and compressible data without a dictionary" {
    var prng = std.Random.DefaultPrng.init(1);
    const random = prng.random();
    var c = try Compressor.init(default_level, null);
    defer c.deinit();
    var d = try Decompressor.init(null);
    defer d.deinit();

    const gpa = testing.allocator;
    for ([_]usize{ 0, 1, 100, 1 << 20 }) |size| {
        const data = try gpa.alloc(u8, size);
        defer gpa.free(data);
        random.bytes(data);
        _ = try roundTrip(&c, &d, data);
        fillCompressible(random, data);
        const frame_size = try roundTrip(&c, &d, data);
        if (size == 1 << 20) try testing.expect(frame_size < size / 4);
    }
}

test "an empty record is a valid frame and decodes into an empty buffer" {
    var c = try Compressor.init(default_level, null);
    defer c.deinit();
    var d = try Decompressor.init(null);
    defer d.deinit();
    var frame: [64]u8 = undefined;
    const frame_size = try c.compress(&frame, &.{});
    try testing.expect(frame_size > 0);
    try d.decompress(&.{}, frame[0..frame_size]);
    var one: [1]u8 = undefined;
    try testing.expectError(error.SizeMismatch, d.decompress(&one, frame[0..frame_size]));
}

test "a trained dictionary round-trips and beats no dictionary on similar records" {
    const gpa = testing.allocator;
    var prng = std.Random.DefaultPrng.init(2);
    const random = prng.random();
    const count = 2000;
    const sizes = try gpa.alloc(usize, count);
    defer gpa.free(sizes);
    const samples = try makeSamples(random, count, sizes);
    defer gpa.free(samples);

    var dict_buf: [16 * 1024]u8 = undefined;
    const dict_len = try trainDictionary(&dict_buf, samples, sizes);
    try testing.expect(dict_len > 0 and dict_len <= dict_buf.len);
    const dict = dict_buf[0..dict_len];

    var cdict = try SharedDict.initCompress(dict, default_level);
    defer cdict.deinit();
    var ddict = try SharedDict.initDecompress(dict);
    defer ddict.deinit();
    try testing.expect(cdict.id != 0 and cdict.id == ddict.id);

    var plain_c = try Compressor.init(default_level, null);
    defer plain_c.deinit();
    var plain_d = try Decompressor.init(null);
    defer plain_d.deinit();
    var dict_c = try Compressor.init(default_level, &cdict);
    defer dict_c.deinit();
    var dict_d = try Decompressor.init(&ddict);
    defer dict_d.deinit();

    var plain_total: usize = 0;
    var dict_total: usize = 0;
    var offset: usize = 0;
    for (sizes) |size| {
        const record = samples[offset..][0..size];
        offset += size;
        plain_total += try roundTrip(&plain_c, &plain_d, record);
        dict_total += try roundTrip(&dict_c, &dict_d, record);
    }
    try testing.expect(dict_total * 2 < plain_total);

    // The dictionary codec handles the edge sizes too.
    for ([_]usize{ 0, 1, 100, 1 << 20 }) |size| {
        const data = try gpa.alloc(u8, size);
        defer gpa.free(data);
        random.bytes(data);
        _ = try roundTrip(&dict_c, &dict_d, data);
        fillCompressible(random, data);
        _ = try roundTrip(&dict_c, &dict_d, data);
    }

    // A frame made with the dictionary refuses to decode without it or with another one.
    var frame: [512]u8 = undefined;
    const record = samples[0..sizes[0]];
    const frame_size = try dict_c.compress(&frame, record);
    const out = try gpa.alloc(u8, record.len);
    defer gpa.free(out);
    try testing.expectError(error.DecodeFailed, plain_d.decompress(out, frame[0..frame_size]));

    var other_buf: [16 * 1024]u8 = undefined;
    const other_samples = try makeSamples(random, count, sizes);
    defer gpa.free(other_samples);
    const other_len = try trainDictionary(&other_buf, other_samples, sizes);
    var other = try SharedDict.initDecompress(other_buf[0..other_len]);
    defer other.deinit();
    try testing.expect(other.id != ddict.id);
    var other_d = try Decompressor.init(&other);
    defer other_d.deinit();
    try testing.expectError(error.DecodeFailed, other_d.decompress(out, frame[0..frame_size]));

    // A frame made without a dictionary still decodes with one, as libzstd allows.
    const plain_size = try plain_c.compress(&frame, record);
    try dict_d.decompress(out, frame[0..plain_size]);
    try testing.expectEqualSlices(u8, record, out);

    // Each half of a SharedDict serves only its own side.
    try testing.expectError(error.DictionaryInvalid, Compressor.init(default_level, &ddict));
    try testing.expectError(error.DictionaryInvalid, Decompressor.init(&cdict));
}

test "a frame decoded into the wrong size is a SizeMismatch" {
    var c = try Compressor.init(default_level, null);
    defer c.deinit();
    var d = try Decompressor.init(null);
    defer d.deinit();
    const data = "the quick brown fox jumps over the lazy dog, " ++
        "then the lazy dog wakes and chases the quick brown fox round the yard";
    var frame: [1024]u8 = undefined;
    const frame_size = try c.compress(&frame, data);
    var small: [data.len - 1]u8 = undefined;
    var large: [data.len + 1]u8 = undefined;
    try testing.expectError(error.SizeMismatch, d.decompress(&small, frame[0..frame_size]));
    try testing.expectError(error.SizeMismatch, d.decompress(&large, frame[0..frame_size]));
    try testing.expectError(error.SizeMismatch, d.decompress(&.{}, frame[0..frame_size]));
}

test "truncated, garbage, concatenated and skippable input is refused without a panic" {
    const gpa = testing.allocator;
    var prng = std.Random.DefaultPrng.init(3);
    const random = prng.random();
    var c = try Compressor.init(default_level, null);
    defer c.deinit();
    var d = try Decompressor.init(null);
    defer d.deinit();

    const data = try gpa.alloc(u8, 5000);
    defer gpa.free(data);
    fillCompressible(random, data);
    const out = try gpa.alloc(u8, data.len);
    defer gpa.free(out);
    const frame_buf = try gpa.alloc(u8, 2 * Compressor.bound(data.len));
    defer gpa.free(frame_buf);
    const frame_size = try c.compress(frame_buf, data);
    const frame = frame_buf[0..frame_size];

    // Every proper prefix of a frame, including the empty one.
    for (0..frame_size) |n| {
        try testing.expect(std.meta.isError(d.decompress(out, frame[0..n])));
    }

    // Two frames back to back are not one record.
    @memcpy(frame_buf[frame_size..][0..frame_size], frame);
    try testing.expectError(error.DecodeFailed, d.decompress(out, frame_buf[0 .. 2 * frame_size]));
    // Nor is a frame followed by a stray byte.
    try testing.expectError(error.DecodeFailed, d.decompress(out, frame_buf[0 .. frame_size + 1]));

    // Pure garbage, with and without a valid magic in front.
    var garbage: [300]u8 = undefined;
    for (0..200) |i| {
        random.bytes(&garbage);
        if (i % 2 == 0) std.mem.writeInt(u32, garbage[0..4], frame_magic, .little);
        try testing.expect(std.meta.isError(d.decompress(out, &garbage)));
    }

    // A skippable frame of nothing would otherwise read as an empty record.
    var skippable: [8]u8 = undefined;
    std.mem.writeInt(u32, skippable[0..4], 0x184D2A50, .little);
    std.mem.writeInt(u32, skippable[4..8], 0, .little);
    try testing.expectError(error.DecodeFailed, d.decompress(&.{}, &skippable));

    // Random corruption of a valid frame: any outcome but a crash or an overrun is fine, since
    // frames carry no checksum and a flipped literal can still decode.
    const mutant = try gpa.alloc(u8, frame_size);
    defer gpa.free(mutant);
    for (0..2000) |_| {
        @memcpy(mutant, frame);
        for (0..1 + random.uintLessThan(usize, 4)) |_| {
            mutant[random.uintLessThan(usize, frame_size)] = random.int(u8);
        }
        d.decompress(out, mutant) catch {};
    }
    // The decompressor is still usable after all of that.
    try d.decompress(out, frame);
    try testing.expectEqualSlices(u8, data, out);
}

test "a frame without a content size is refused" {
    // A hand-made frame (RFC 8878): header descriptor 0x00 means no content size field and a
    // window descriptor follows; then one last raw block of three bytes.
    const frame = [_]u8{ 0x28, 0xB5, 0x2F, 0xFD, 0x00, 0x00, 0x19, 0x00, 0x00, 'a', 'b', 'c' };
    var d = try Decompressor.init(null);
    defer d.deinit();
    try testing.expectEqual(content_size_unknown, ZSTD_getFrameContentSize(&frame, frame.len));
    var out: [3]u8 = undefined;
    try testing.expectError(error.SizeMismatch, d.decompress(&out, &frame));
    try testing.expect(std.mem.indexOf(u8, d.reason.?, "ZR-COD-006") != null);
}

test "the window cap: 128 MiB or the logical size rounded up, whichever is larger" {
    // [ZR-COD-008]
    try testing.expectEqual(@as(u64, 1 << 27), windowSizeMax(0));
    try testing.expectEqual(@as(u64, 1 << 27), windowSizeMax(1 << 27));
    try testing.expectEqual(@as(u64, 1 << 28), windowSizeMax((1 << 27) + 1));
    try testing.expectEqual(@as(u64, 1 << 31), windowSizeMax(1 << 31));
    var d = try Decompressor.init(null);
    defer d.deinit();
    // One raw block of 3 bytes behind a window descriptor: exponent e gives 2^(10 + e), and
    // the mantissa adds eighths. 2^27 decodes; 2^27 + 2^24 does not.
    var out: [3]u8 = undefined;
    for ([_]struct { wd: u8, ok: bool }{
        .{ .wd = 17 << 3, .ok = true },
        .{ .wd = (17 << 3) | 1, .ok = false },
        .{ .wd = 31 << 3, .ok = false },
    }) |c| {
        const frame = [_]u8{ 0x28, 0xB5, 0x2F, 0xFD, 0x80, c.wd, 3, 0, 0, 0, 0x19, 0x00, 0x00, 'a', 'b', 'c' };
        const fh = try FrameHeader.parse(&frame);
        try testing.expectEqual(@as(?u64, 3), fh.content_size);
        if (c.ok) {
            try d.decompress(&out, &frame);
            try testing.expectEqualStrings("abc", &out);
        } else {
            try testing.expectError(error.DecodeFailed, d.decompress(&out, &frame));
            try testing.expect(std.mem.indexOf(u8, d.reason.?, "ZR-COD-008") != null);
        }
    }
}

test "invalid dictionaries and levels are refused" {
    try testing.expectError(error.DictionaryInvalid, SharedDict.initCompress(&.{}, default_level));
    try testing.expectError(error.DictionaryInvalid, SharedDict.initDecompress(&.{}));

    // The zstd dictionary magic followed by garbage entropy tables.
    var bad: [512]u8 = undefined;
    var prng = std.Random.DefaultPrng.init(4);
    prng.random().bytes(&bad);
    std.mem.writeInt(u32, bad[0..4], dictionary_magic, .little);
    try testing.expectError(error.DictionaryInvalid, SharedDict.initCompress(&bad, default_level));
    try testing.expectError(error.DictionaryInvalid, SharedDict.initDecompress(&bad));

    try testing.expectError(error.CompressFailed, Compressor.init(ZSTD_maxCLevel() + 1, null));
    try testing.expectError(error.CompressFailed, SharedDict.initCompress("raw content dictionary", 1000));
}

test "a raw-content dictionary works and carries no ID" {
    const dict = "some content that records are likely to repeat, " ++
        "more content that records are likely to repeat, and numbers 0123456789";
    var cdict = try SharedDict.initCompress(dict, default_level);
    defer cdict.deinit();
    var ddict = try SharedDict.initDecompress(dict);
    defer ddict.deinit();
    try testing.expectEqual(@as(u32, 0), ddict.id);
    var c = try Compressor.init(default_level, &cdict);
    defer c.deinit();
    var d = try Decompressor.init(&ddict);
    defer d.deinit();
    _ = try roundTrip(&c, &d, "some content that records are likely to repeat, and then some");
}

test "compressing into a buffer that is too small fails cleanly" {
    var prng = std.Random.DefaultPrng.init(5);
    var data: [1000]u8 = undefined;
    prng.random().bytes(&data);
    var c = try Compressor.init(default_level, null);
    defer c.deinit();
    var small: [100]u8 = undefined;
    try testing.expectError(error.CompressFailed, c.compress(&small, &data));
    try testing.expect(isError(c.last_code));
    try testing.expect(errorName(c.last_code).len > 0);
    try testing.expectEqual(std.math.maxInt(usize), Compressor.bound(std.math.maxInt(usize)));
}

test "training on too little data fails with TrainFailed" {
    var dict: [4096]u8 = undefined;
    const samples = "tiny sample data";
    try testing.expectError(error.TrainFailed, trainDictionary(&dict, samples, &.{ 4, 4, 4, 4 }));
    try testing.expectError(error.TrainFailed, trainDictionary(&dict, samples, &.{}));
    // Sizes that do not add up to the samples given.
    try testing.expectError(error.TrainFailed, trainDictionary(&dict, samples, &.{ 4, 4 }));
    try testing.expectError(error.TrainFailed, trainDictionary(&dict, samples, &.{ std.math.maxInt(usize), 17 }));
}

/// A frame of one last Compressed block holding `body`, behind a window descriptor of 1 KiB
/// and a 4-byte content size, written into `buf`.
fn compressedFrame(buf: []u8, content_size: u32, body: []const u8) []u8 {
    @memcpy(buf[0..6], &[_]u8{ 0x28, 0xB5, 0x2F, 0xFD, 0x80, 0x00 });
    std.mem.writeInt(u32, buf[6..10], content_size, .little);
    std.mem.writeInt(u24, buf[10..13], @intCast(1 | (2 << 1) | (body.len << 3)), .little);
    @memcpy(buf[13..][0..body.len], body);
    return buf[0 .. 13 + body.len];
}

test "sequences section headers are judged by the walk, whatever libzstd is loaded (ZR-COD-016)" {
    var d = try Decompressor.init(null);
    defer d.deinit();
    var buf: [64]u8 = undefined;
    var out: [8]u8 = undefined;
    // Four raw literals, then one sequence with every symbol type in RLE_Mode
    // (Symbol_Compression_Modes 0x54): literals length 4, offset code 2, match length code 1
    // (4 bytes); the 1-byte bitstream holds the offset's 2 extra bits (Offset_Value 5, so
    // offset 2) under its end mark.
    var body = [_]u8{ 4 << 3, 'a', 'b', 'c', 'd', 1, 0x54, 4, 2, 1, 0b101 };
    try testing.expectEqual(@as(?[]const u8, null), sequencesHeaderProblem(&body));
    try d.decompress(&out, compressedFrame(&buf, 8, &body));
    try testing.expectEqualStrings("abcdcdcd", &out);
    // libzstd up to 1.5.5 ignores the reserved bits and decodes the same bytes; 1.5.6 on
    // refuses them. The walk refuses them on either.
    for ([_]u8{ 1, 2, 3 }) |reserved| {
        body[6] = 0x54 | reserved;
        const why = sequencesHeaderProblem(&body) orelse return error.TestExpectedProblem;
        try testing.expect(std.mem.indexOf(u8, why, "Symbol_Compression_Modes (ZR-COD-016)") != null);
        try testing.expectError(error.DecodeFailed, d.decompress(&out, compressedFrame(&buf, 8, &body)));
    }
    // No sequences: the single byte 0 ends the block. 0 in two bytes (80 00) and a byte after
    // a 0 are refused, though libzstd returns 80 00 from 1.5.6 on and 80 00 00 up to 1.5.5.
    var literals: [4]u8 = undefined;
    const none = [_]u8{ 4 << 3, 'a', 'b', 'c', 'd', 0 };
    try testing.expectEqual(@as(?[]const u8, null), sequencesHeaderProblem(&none));
    try d.decompress(&literals, compressedFrame(&buf, 4, &none));
    try testing.expectEqualStrings("abcd", &literals);
    const refused = [_][]const u8{
        &.{ 4 << 3, 'a', 'b', 'c', 'd', 0x80, 0 },
        &.{ 4 << 3, 'a', 'b', 'c', 'd', 0x80, 0, 0 },
        &.{ 4 << 3, 'a', 'b', 'c', 'd', 0, 0 },
    };
    for (refused) |bad| {
        const why = sequencesHeaderProblem(bad) orelse return error.TestExpectedProblem;
        try testing.expect(std.mem.indexOf(u8, why, "Number_of_Sequences of 0") != null);
        try testing.expectError(error.DecodeFailed, d.decompress(&literals, compressedFrame(&buf, 4, bad)));
    }
}

test "the size of a literals section, from each form of its header" {
    var h: [5]u8 = undefined;
    // Raw, one header byte: Regenerated_Size in bits 3..7.
    try testing.expectEqual(@as(?u64, 1 + 21), literalsSectionSize(&.{21 << 3}));
    // Raw, two bytes (Size_Format 01): 12 bits of size.
    std.mem.writeInt(u16, h[0..2], 0 | (1 << 2) | (300 << 4), .little);
    try testing.expectEqual(@as(?u64, 2 + 300), literalsSectionSize(h[0..2]));
    // RLE, three bytes (Size_Format 11): one byte of content, whatever the size.
    std.mem.writeInt(u24, h[0..3], 1 | (3 << 2) | (70000 << 4), .little);
    try testing.expectEqual(@as(?u64, 3 + 1), literalsSectionSize(h[0..3]));
    // Compressed, three bytes (Size_Format 00): 10-bit sizes; Compressed_Size counts.
    std.mem.writeInt(u24, h[0..3], 2 | (100 << 4) | (60 << 14), .little);
    try testing.expectEqual(@as(?u64, 3 + 60), literalsSectionSize(h[0..3]));
    // Compressed, four bytes (Size_Format 10): 14-bit sizes.
    std.mem.writeInt(u32, h[0..4], 2 | (2 << 2) | (10000 << 4) | (5000 << 18), .little);
    try testing.expectEqual(@as(?u64, 4 + 5000), literalsSectionSize(h[0..4]));
    // Treeless, five bytes (Size_Format 11): 18-bit sizes.
    std.mem.writeInt(u40, h[0..5], 3 | (3 << 2) | (200000 << 4) | (100000 << 22), .little);
    try testing.expectEqual(@as(?u64, 5 + 100000), literalsSectionSize(h[0..5]));
    // A header cut short.
    try testing.expectEqual(@as(?u64, null), literalsSectionSize(h[0..4]));
    try testing.expectEqual(@as(?u64, null), literalsSectionSize(&.{}));
}
