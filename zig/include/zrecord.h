/*
 * zrecord.h: the one C ABI of the zrecord native core.
 *
 * Invariants of this interface:
 * - Handles are opaque. A writer is published or aborted, then freed (zr_writer_free aborts an
 *   unpublished writer first); a reader is freed exactly once, closed or not (zr_reader_free
 *   closes it first if needed); a staging handle likewise. Free functions never fail.
 * - Every fallible call returns 0 on success or a negative ZR_E_* code, and fills the
 *   caller-provided zr_status with the code, the OS errno (if any), the record and shard the
 *   error concerns (or -1) and a NUL-terminated English message that names what was given and
 *   what was required.
 * - Output goes into caller-provided buffers whose sizes are passed and checked.
 * - Every input is validated here: no input, and no file content, may abort the process.
 * - All calls may be made without holding the Python GIL. A reader may be used from many
 *   threads at once; zr_reader_close waits for calls in flight and makes later calls fail
 *   with ZR_E_CLOSED. A writer must not be used from two threads at once.
 */
#ifndef ZRECORD_H
#define ZRECORD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Result codes: every fallible call returns ZR_OK or one of these, as an int. This enum is the
 * one table of them: the Zig core's is checked against it through zr_result_name, and
 * zrecord.errors maps each name (never a number) to one Python exception class. */
typedef enum zr_result {
    ZR_OK = 0,
    ZR_E_INVALID_ARGUMENT = -1,  /* ValueError: bad argument (schema, sizes, limits) */
    ZR_E_IO = -2,                /* OSError: the OS refused a file operation (errno set) */
    ZR_E_NOT_FOUND = -3,         /* FileNotFoundError: path or parent missing */
    ZR_E_EXISTS = -4,            /* FileExistsError: the store path already exists */
    ZR_E_NO_MEMORY = -5,         /* MemoryError */
    ZR_E_INDEX = -6,             /* IndexError: record index out of range */
    ZR_E_CLOSED = -7,            /* the reader was closed */
    ZR_E_BAD_MAGIC = -10,        /* not a zrecord header */
    ZR_E_VERSION = -11,          /* format major newer than this reader */
    ZR_E_CORRUPT = -12,          /* structure violates the spec (sizes, offsets, reserved) */
    ZR_E_CHECKSUM = -13,         /* a checksum does not match (header, index, dict, record) */
    ZR_E_NOT_PUBLISHED = -14,    /* directory without header.zrh */
    ZR_E_UNSUPPORTED = -15,      /* unknown codec/dtype/kind code, or codec not built in */
    ZR_E_LIMIT = -16,            /* a format limit is exceeded */
    ZR_E_DECODE = -17,           /* a compressed frame failed to decode to its logical size */
    ZR_E_IMMUTABLE = -18         /* PermissionError: the path lies inside a published store */
} zr_result;

/* The NumPy name of dtype code `code` of spec §3.3 ("float32") with its item size in
 * `*itemsize` (if not NULL); NULL for a reserved code. The core's one dtype table. The
 * parametric dtypes of format 1.1 take zr_schema's dtype_length and dtype_unit: "datetime64"
 * and "timedelta64" (item size 8) a unit and a count, "bytes", "str" and "void" a length, their
 * item size being given here as 0 (spec §3.3). */
const char *zr_dtype_info(uint8_t code, uint32_t *itemsize);

/* The NumPy name of datetime64/timedelta64 unit code `code` of spec §3.3 ("ns"), or NULL for a
 * reserved code. */
const char *zr_datetime_unit(uint8_t code);

/* The name of result code `code` ("ZR_E_CORRUPT"), or NULL if the core has no such code. */
const char *zr_result_name(int code);

/* Format constants (spec/format-v1.md). */
#define ZR_FORMAT_MAJOR 1
#define ZR_FORMAT_MINOR 2
#define ZR_KIND_DENSE 1
#define ZR_KIND_RAGGED 2
#define ZR_CODEC_RAW 0
#define ZR_CODEC_ZSTD 1
#define ZR_CODEC_ZSTD_DICT 2
#define ZR_NDIM_MAX 32
#define ZR_DATA_SHARDS_MAX 255
#define ZR_RECORD_SIZE_BYTES_MAX 2147483648ULL
#define ZR_DIM_MAX 4294967295ULL
#define ZR_DICT_SIZE_BYTES_MAX 16777216ULL
#define ZR_RECORD_COUNT_MAX 281474976710656ULL
#define ZR_ITEMSIZE_BYTES_MAX 2147483647ULL /* NumPy keeps an item size in a C int */
#define ZR_UNIT_COUNT_MAX 2147483647ULL /* of datetime64/timedelta64; NumPy's C int too */

/* Writer flags. */
#define ZR_WRITE_NO_SYNC 1u /* skip fsync before publishing (benchmarks, scratch data) */
/* Write index parts (format 1.2, spec §4.1: index.zrs and the header's group sums) with the
 * writer defaults; zr_writer_open only. Without it a store is written as format 1.0 or 1.1,
 * readable by readers of 1.1. */
#define ZR_WRITE_INDEX_PARTS 2u

typedef struct zr_status {
    int32_t code;        /* ZR_OK or ZR_E_* */
    int32_t os_errno;    /* errno of the failing OS call, or 0 */
    int64_t record;      /* record index the error concerns, or -1 */
    int32_t shard;       /* shard number the error concerns, or -1 */
    int32_t reserved;
    char message[4096];  /* NUL-terminated; a long one loses the middle of its paths first */
} zr_status;

typedef struct zr_schema {
    uint8_t kind;        /* ZR_KIND_* */
    uint8_t dtype;       /* dtype code, spec §3.3 */
    uint8_t ndim;        /* record rank */
    uint8_t codec;       /* ZR_CODEC_* */
    uint8_t data_shards; /* 1..255 */
    uint8_t reserved[3];
    uint64_t item_shape[ZR_NDIM_MAX]; /* Dense: first ndim entries; Ragged: ignored */
    uint32_t dtype_length; /* S<n>, V<n>: n bytes; U<n>: n characters; datetime64 and
                              timedelta64: units per tick (the 5 of M8[5s]); else 0 */
    uint8_t dtype_unit;    /* datetime64 and timedelta64: unit code (zr_datetime_unit); else 0 */
    uint8_t reserved2[3];
} zr_schema;

typedef struct zr_info {
    zr_schema schema;
    uint16_t format_major;
    uint16_t format_minor;
    uint32_t dict_size;
    uint64_t record_count;
    uint64_t logical_bytes;
    uint64_t stored_bytes;
    uint64_t record_size;   /* Dense: logical bytes per record; Ragged: 0 */
    uint64_t itemsize;
    uint64_t header_checksum; /* the header's own checksum (spec §3.2): the store's identity,
                                 since it covers the schema, the index checksum, the shard
                                 sizes and the dictionary */
} zr_info;

typedef struct zr_writer zr_writer;
typedef struct zr_reader zr_reader;

/* ---- writer ---------------------------------------------------------------------------- */

/* Validates the schema, then creates a temporary sibling directory of `path` (spec §7) and its
 * files, holding the lock that marks it as in use. Missing parent directories are created
 * (mode 0777 less the umask). Fails with ZR_E_EXISTS if `path` exists and ZR_E_IMMUTABLE if
 * it lies inside a published store. Stale temporaries of the same name (whose lock is free)
 * are removed first.
 * `dict`/`dict_size` must be given for zstd_dict only. `flags`: ZR_WRITE_*. */
int zr_writer_open(const char *path, const zr_schema *schema, const uint8_t *dict,
                   size_t dict_size, uint32_t flags, zr_writer **out, zr_status *st);

/* Appends `count` Dense records laid out contiguously at `data` (count * record_size bytes,
 * `size` must equal that). Encodes on up to data_shards threads; returns after every byte is
 * written to the OS. */
int zr_writer_append_dense(zr_writer *w, const void *data, uint64_t size, uint64_t count,
                           zr_status *st);

/* Appends `count` Ragged records. Record i starts at address ptrs[i] and has shape
 * shapes[i*ndim .. i*ndim+ndim-1]; its bytes are contiguous (C order). */
int zr_writer_append_ragged(zr_writer *w, const uint64_t *ptrs, const uint64_t *shapes,
                            uint64_t count, zr_status *st);

/* Records appended so far. */
uint64_t zr_writer_count(const zr_writer *w);

/* A durable writer on a file system that takes O_DIRECT writes the first bytes of a store
 * through the page cache (writeback started behind each write) and the rest with O_DIRECT;
 * this sets how many more bytes, shared evenly among the shards, go the first way (default:
 * 256 MiB or 1/32 of the machine's memory, whichever is less; 0: every large write is direct
 * from now on). No effect on other writers. For tests and measurements. */
int zr_writer_set_page_cache_bytes(zr_writer *w, uint64_t bytes, zr_status *st);

/* Flushes, writes header.zrh, renames the temporary directory to the path (failing with
 * ZR_E_EXISTS if something appeared there meanwhile). On failure the temporary directory is
 * removed. Either way the writer's resources are released, except the handle itself. */
int zr_writer_publish(zr_writer *w, zr_status *st);

/* Removes the temporary directory and releases resources. Safe after a failed publish. */
void zr_writer_abort(zr_writer *w);

/* Frees the handle, aborting the writer first unless it was published. Call once. */
void zr_writer_free(zr_writer *w);

/* ---- staging: publish a directory tree atomically -------------------------------------- */

typedef struct zr_staging zr_staging;

/* For a tool that builds a directory tree (stores inside it, files of its own) and publishes it
 * at `path` at once: creates the locked temporary sibling directory that the writer uses (spec
 * §7), with the checks and stale-temporary removal of zr_writer_open. */
int zr_staging_open(const char *path, zr_staging **out, zr_status *st);

/* The temporary directory to build in (NUL-terminated), or NULL after publish or abort. */
const char *zr_staging_dir(const zr_staging *s);

/* Flushes every file and directory below the temporary directory (unless `flags` holds
 * ZR_WRITE_NO_SYNC), renames it to the path (ZR_E_EXISTS if something appeared there) and
 * flushes the parent. On failure nothing is removed: call zr_staging_abort. */
int zr_staging_publish(zr_staging *s, uint32_t flags, zr_status *st);

/* Removes the temporary directory with everything below it (never following links). */
void zr_staging_abort(zr_staging *s);

/* Aborts unless published, then frees the handle. */
void zr_staging_free(zr_staging *s);

/* ---- reader ---------------------------------------------------------------------------- */

/* What a header file says of a store's files (zr_header_layout). */
typedef struct zr_layout {
    uint64_t record_count;
    uint64_t index_size;        /* bytes of index.zri */
    uint64_t sums_size;         /* bytes of index.zrs (8 per index block); 0 without index parts */
    uint64_t stored_bytes;
    uint64_t index_blocks;      /* B of spec §4.1; 0 without index parts */
    uint64_t sum_groups;        /* T of spec §4.1; 0 without index parts */
    uint32_t index_entry_size;
    uint8_t data_shards;
    uint8_t index_parts;        /* 1 when the store has index parts (required_features bit 0) */
    uint8_t index_block_shift;  /* s and g of spec §4.1; 0 without index parts */
    uint8_t index_group_shift;
    uint64_t header_checksum;
    uint8_t by_part;            /* 1 when a reader opened without ZR_OPEN_WHOLE_INDEX judges the
                                   index by part: index parts whose blocks fit its buffer (1 MiB) */
    uint8_t reserved[7];
    uint64_t shard_sizes[ZR_DATA_SHARDS_MAX];
} zr_layout;

/* Judges header file `name` (a name for messages: a path or a URL) of file_size bytes, whose
 * first `size` bytes are `bytes`, by the checks a reader's open makes of a header (spec §9.2),
 * and fills `out` from it. `size` is file_size, or, for a file larger than ZR_HEADER_SIZE_BYTES_MAX,
 * its first 12 bytes at least: the magic and the version are judged first, then the size. For a
 * reader that fetches a store's files itself, to lay them out and judge their sizes before
 * reading them. */
#define ZR_HEADER_SIZE_BYTES_MAX 17303936ULL
int zr_header_layout(const void *bytes, uint64_t size, uint64_t file_size, const char *name,
                     zr_layout *out, zr_status *st);

/* Judges `index` (index_size bytes) and `sums` (sums_size bytes; NULL and 0 without index
 * parts) as the index.zri and index.zrs of the store whose header is `header` (header_size
 * bytes, judged as zr_header_layout judges it), naming the store `name` in messages, in the
 * order of a whole judgement (spec 9.6 [ZR-PRT-010]: the sizes, sum groups, index blocks, the
 * index checksum, every entry, the sums of step 6), and decodes every entry into offsets,
 * stored_sizes, shards and checksums (record_count of each; nothing to be used on failure).
 * For a program that copies a store's files (the publisher): the bytes it holds are judged,
 * whatever the files hold by then. */
int zr_index_table(const void *header, uint64_t header_size, const void *index,
                   uint64_t index_size, const void *sums, uint64_t sums_size, const char *name,
                   uint64_t record_count, uint64_t *offsets, uint64_t *stored_sizes,
                   uint8_t *shards, uint64_t *checksums, zr_status *st);

/* Opens and validates a published store: header and index checksums, every structural rule of
 * the spec that does not need record data. The same as zr_reader_open_ex with flags 0 (no
 * index cache folder). A record's first read is checked against the low 32 bits of its
 * checksum, which the compact index keeps (spec ZR-SUM-004); zr_reader_verify compares all 64,
 * read from index.zri. */
int zr_reader_open(const char *path, zr_reader **out, zr_status *st);

/* Reader flags. ZR_OPEN_CACHE_BYPASS: records read with pread (those of at least 32 KiB, and
 * every record of a store whose records average that) are read with O_DIRECT, by up to 16
 * threads per gather, and never enter the page cache; for datasets larger than RAM. Small
 * records of other stores are read through the page cache as without the flag. Fails with
 * ZR_E_IO (errno EINVAL) where the file system refuses O_DIRECT. */
#define ZR_OPEN_CACHE_BYPASS 1u

/* ZR_OPEN_VALIDATE_INDEX: read and validate index.zri at open even where the index cache
 * folder holds a compact index built from that very file (and write the cache file anew). */
#define ZR_OPEN_VALIDATE_INDEX 2u

/* ZR_OPEN_CHECK_EVERY_READ: check every read of a record against its checksum, not only its
 * first, and read every record with pread, never through a mapping: for stores whose shard
 * files another process may change under the reader, such as the local cache of a store read
 * over a network (a record evicted from it reads back as a hole of zeros, which fails its
 * checksum; one copied through a mapping could change between its check and its copy). */
#define ZR_OPEN_CHECK_EVERY_READ 4u

/* ZR_OPEN_WHOLE_INDEX: never read a store with index parts by part: judge its whole index at
 * open (spec §9.6, ZR-PRT-010) unless the index cache folder holds a compact index built from
 * it, which is used. For a reader that has just copied the whole index anyway (the mirror of
 * a store read over a network), so that a damaged index fails open and a shared copy's
 * compact index is written to the index cache folder. */
#define ZR_OPEN_WHOLE_INDEX 8u

/* zr_reader_open with ZR_OPEN_* flags and no index cache folder; an unknown flag is
 * ZR_E_INVALID_ARGUMENT. */
int zr_reader_open_ex(const char *path, uint32_t flags, zr_reader **out, zr_status *st);

typedef struct zr_open_opts {
    uint32_t flags;       /* ZR_OPEN_* */
    uint32_t reserved;    /* zero */
    /* The folder of compact index files that the readers of this host share (created if
     * missing), or NULL for none. Open maps the file built from the store's index.zri when it
     * is there and intact (spec §9.5), so that it neither reads nor validates index.zri again;
     * otherwise it validates index.zri, builds the compact index and writes it there (a folder
     * it cannot write is no error: the index is then kept in memory). Only files that this
     * process's effective user owns and nobody else can write are used (spec ZR-ERR-008). */
    const char *index_cache;
    /* Indexes of fewer records never use the folder (validating them costs little); 0: the
     * default, 65,536. */
    uint64_t index_cache_records_min;
    /* The folder's bound in bytes: after an open writes a file there, and at most every 10
     * minutes (or when the file is large against the bound), this user's files of stores that
     * are gone or changed are removed, then the least recently used beyond the bound (the
     * newest stays); 0: the default, 16 GiB. */
    uint64_t index_cache_bytes;
    /* What messages call the store once its folder is open (not empty), or NULL for `path`:
     * the URL of a store read through a local mirror, so that every message names the URL. */
    const char *name;
} zr_open_opts;

/* What 0 in zr_open_opts.index_cache_records_min and .index_cache_bytes stands for. */
#define ZR_INDEX_CACHE_RECORDS_MIN_DEFAULT 65536u
#define ZR_INDEX_CACHE_BYTES_DEFAULT 17179869184ull

/* zr_reader_open with options; `opts` must not be NULL. */
int zr_reader_open_opts(const char *path, const zr_open_opts *opts, zr_reader **out,
                        zr_status *st);

/* How a reader's compact index was made (zr_index_info.source). */
enum {
    ZR_INDEX_BUILT = 0,        /* validated and built at open, kept in memory only */
    ZR_INDEX_BUILT_CACHED = 1, /* validated and built at open, and written to the cache folder */
    ZR_INDEX_CACHED = 2,       /* mapped from the cache folder */
    ZR_INDEX_BY_PART = 3       /* format 1.2 index parts judged by part: none at open, each
                                  index block when a record of it is first read (spec 9.6) */
};

typedef struct zr_index_info {
    uint64_t resident_bytes; /* bytes of the compact index (a shared, read-only mapping); by
                                part, what the blocks filled so far wrote (private memory) */
    uint32_t source;         /* ZR_INDEX_* */
    uint32_t reserved;
} zr_index_info;

void zr_reader_index_info(const zr_reader *r, zr_index_info *out);

/* What zr_index_cache_prune found and did among this user's files of the folder. */
typedef struct zr_prune_stats {
    uint64_t kept;          /* compact index files kept */
    uint64_t kept_bytes;
    uint64_t removed;       /* files removed, stale temporaries included */
    uint64_t removed_bytes;
} zr_prune_stats;

/* Prunes the index cache folder `folder` now, as an open does when pruning is due (see
 * zr_open_opts.index_cache_bytes), to `budget_bytes` of this user's files. A folder that does
 * not exist is no error (nothing is kept). */
int zr_index_cache_prune(const char *folder, uint64_t budget_bytes, zr_prune_stats *out,
                         zr_status *st);

void zr_reader_info(const zr_reader *r, zr_info *out);

/* Copies the dictionary (if any) into `out` of `capacity` bytes; returns its size. */
uint64_t zr_reader_dict(const zr_reader *r, uint8_t *out, uint64_t capacity);

/* Dense: decodes records idx[0..count) into `out` (count * record_size bytes == out_size), in
 * the given order, verifying each record's checksum on its first read. `threads` = 0 picks a
 * count from the batch size. */
int zr_reader_gather_dense(zr_reader *r, const uint64_t *idx, uint64_t count, void *out,
                           uint64_t out_size, uint32_t threads, zr_status *st);

/* Ragged: writes each record's shape into shapes[i*ndim ..] and its logical size in bytes into
 * sizes[i]. */
int zr_reader_shapes(zr_reader *r, const uint64_t *idx, uint64_t count, uint64_t *shapes,
                     uint64_t *sizes, zr_status *st);

/* Ragged: decodes record idx[i] to out + offsets[i]; offsets[i] + size(idx[i]) must not exceed
 * out_size. `sizes` (may be NULL) gives each slot's size as the caller sized it from
 * zr_reader_shapes: a record whose logical size is not sizes[i] fails the call
 * (ZR_E_CORRUPT where the reader maps an index cache file, which was changed in place since;
 * ZR_E_INVALID_ARGUMENT otherwise). */
int zr_reader_gather_ragged(zr_reader *r, const uint64_t *idx, uint64_t count, void *out,
                            const uint64_t *offsets, const uint64_t *sizes, uint64_t out_size,
                            uint32_t threads, zr_status *st);

/* zr_reader_gather_ragged over `parts` readers (the parts of a dataset) in one call, given
 * the batch grouped by part: reader g's records are at positions bounds[g] .. bounds[g+1] of
 * `order` and `local` (bounds[0] = 0, bounds[parts] = count, never falling); the one at
 * position j is record local[j] of readers[g], decoded to out + offsets[order[j]] into a slot
 * of sizes[order[j]] bytes (a record of another size fails the call, as there). Taken only
 * where every reader the batch touches is a raw store with its index in its own memory, read
 * without O_DIRECT and without a check of every read, for fewer than 4 MiB, and:
 * - flags 0 (a batch the caller expects in the page cache): every touched reader reads
 *   through its mappings and is taken to be warm (ZR_READS_MAPPED, or ZR_READS_AUTO with no
 *   cold estimate or prefetch hint pending); *taken = 1.
 * - ZR_PARTS_COLD (the caller found its last batch cold): every touched reader may be hinted
 *   (ZR_READS_AUTO or ZR_READS_HINTED). The batch is sampled once (the largest part's
 *   records): found outside the page cache, or with a ZR_READS_HINTED reader, every record is
 *   hinted, all parts before any read, and read with pread, *taken = 2; found there, it is read
 *   as a warm batch, *taken = 1. Each touched reader's estimate is set to what was found.
 * Otherwise *taken = 0 and nothing is read: the caller gathers each part's records with
 * zr_reader_gather_ragged, which samples, hints and reads cold records as it does. */
#define ZR_PARTS_COLD 1u
int zr_parts_gather_ragged(zr_reader *const *readers, uint64_t parts, const uint64_t *order,
                           const uint64_t *local, const uint64_t *bounds, uint64_t count,
                           void *out, const uint64_t *offsets, const uint64_t *sizes,
                           uint64_t out_size, uint32_t flags, uint32_t *taken, zr_status *st);

/* Checks the stored bytes of records [start, start+count) against their checksums (always,
 * even if verified before) and that compressed frames decode. */
int zr_reader_verify(zr_reader *r, uint64_t start, uint64_t count, zr_status *st);

/* Starts reading records idx[0..count) from disk into the page cache and returns without
 * waiting for them (posix_fadvise WILLNEED on each record's bytes, sorted and coalesced), so
 * that a later gather of them finds them there. A hint: it changes no result. It does nothing
 * when a sample of the records is already in the page cache, or with ZR_READS_MAPPED, and
 * hints at most the first 16,384 records and 64 MiB of stored bytes. It costs a few
 * microseconds per record not in the page cache; it waits for the device only when the
 * device's request queue is full. Fails only for invalid arguments (ZR_E_INDEX for an index
 * out of range) or a closed reader. */
int zr_reader_prefetch(zr_reader *r, const uint64_t *idx, uint64_t count, zr_status *st);

/* zr_reader_prefetch, and `*hinted` (when not NULL) says whether it hinted the records: 0 when
 * none were given, with ZR_READS_MAPPED, or when the sample found them in the page cache. A
 * caller that hints the records of one batch to many stores (the parts of a dataset) can skip
 * the others' samples once one found its records there. */
int zr_reader_prefetch_hinted(zr_reader *r, const uint64_t *idx, uint64_t count, uint32_t *hinted,
                              zr_status *st);

/* For a store opened by part (format 1.2, spec §4.1): starts reading into the page cache the
 * index parts that records idx[0..count) need and the reader has not judged yet, and returns
 * without waiting (posix_fadvise WILLNEED; an index of at most 256 KiB whole). A gather
 * judges its records' parts one after the other; a caller about to read one batch through
 * many readers (the parts of a dataset) hints them all first, so that their reads wait on the
 * device together. A hint: it judges nothing and changes no result; indices out of range are
 * skipped; nothing with ZR_READS_MAPPED. `*passed` (when not NULL) is 1 once every index part
 * has passed, or the reader judges none by part: later calls would hint nothing. Fails only
 * for a null `idx` with a count (while parts remain), or a closed reader. */
int zr_reader_hint_index(zr_reader *r, const uint64_t *idx, uint64_t count, uint32_t *passed,
                         zr_status *st);

/* A run of index parts (format 1.2, spec §4.1) that a batch needs and a reader has not judged:
 * index blocks first..last of index.zri (ZR_PART_BLOCKS) or sum groups first..last of
 * index.zrs (ZR_PART_GROUPS), which occupy bytes [start, end) of that file. */
#define ZR_PART_BLOCKS 0u
#define ZR_PART_GROUPS 1u
typedef struct zr_index_want {
    uint32_t file;     /* ZR_PART_* */
    uint32_t reserved; /* zero */
    uint64_t first;
    uint64_t last;
    uint64_t start;
    uint64_t end;
} zr_index_want;

/* For a reader that fetches a store's index files itself before it reads them (the mirror of
 * a store read over a network): the runs of index parts that judging records idx[0..count)
 * needs and that `r` has not judged yet, in `out` (room for 2 × count runs; runs may repeat
 * and may hold parts judged already), their number in *out_count. None for a reader that
 * judged its index at open. Fails only for invalid arguments (ZR_E_INDEX for an index out of
 * range) or a closed reader. */
int zr_reader_index_wants(zr_reader *r, const uint64_t *idx, uint64_t count, zr_index_want *out,
                          uint64_t *out_count, zr_status *st);

/* Where records idx[0..count) lie: shards[i], offsets[i] and sizes[i] (stored bytes) of record
 * idx[i], each record's index block judged first as a gather judges it, so that a damaged part
 * of the index fails here as it would fail the gather (spec §9.6), and no location is given
 * from an index entry that has not passed its checks. */
int zr_reader_locate(zr_reader *r, const uint64_t *idx, uint64_t count, uint64_t *shards,
                     uint64_t *offsets, uint64_t *sizes, zr_status *st);

/* How a reader reads batches of records not known to be in the page cache; every mode returns
 * the same records and verifies them the same way. ZR_READS_AUTO (the default) hints and reads
 * with pread the batches that it finds cold (by an estimate kept per reader, a mincore sample,
 * and a timing probe of batches it expected warm); ZR_READS_MAPPED never hints and reads as
 * if every batch were cached (the reads before cold batches were told apart); ZR_READS_HINTED
 * hints and reads with pread every batch. For tests and measurements. */
#define ZR_READS_AUTO 0u
#define ZR_READS_MAPPED 1u
#define ZR_READS_HINTED 2u
int zr_reader_set_reads(zr_reader *r, uint32_t mode, zr_status *st);

/* Waits for calls in flight, then unmaps and closes every file. Later calls fail with
 * ZR_E_CLOSED. Idempotent. */
void zr_reader_close(zr_reader *r);

/* Frees the handle (closing it first if needed). */
void zr_reader_free(zr_reader *r);

/* ---- dictionaries ---------------------------------------------------------------------- */

/* Trains a zstd dictionary (ZDICT_trainFromBuffer) of at most `capacity` bytes from `count`
 * samples laid out back to back in `samples` (sizes[i] bytes each, summing to samples_size).
 * Writes the dictionary to `out` and its size to `*out_size`. Too little or too uniform data
 * fails with ZR_E_INVALID_ARGUMENT and a message saying how much was given. */
int zr_train_dict(const void *samples, uint64_t samples_size, const uint64_t *sizes,
                  uint64_t count, uint8_t *out, uint64_t capacity, uint64_t *out_size,
                  zr_status *st);

/* The checksum function of the format (XXH64, seed 0), for tools and tests. */
uint64_t zr_xxh64(const void *data, uint64_t size);

#ifdef __cplusplus
}
#endif
#endif /* ZRECORD_H */
