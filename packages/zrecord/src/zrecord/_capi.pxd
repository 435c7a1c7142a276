# Declarations of the native core's C ABI (zig/include/zrecord.h). Declarations only.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

cdef extern from "zrecord.h" nogil:
    # The values come from the header when the C file is compiled; only the names are here.
    cdef enum zr_result:
        ZR_OK
        ZR_E_INVALID_ARGUMENT
        ZR_E_IO
        ZR_E_NOT_FOUND
        ZR_E_EXISTS
        ZR_E_NO_MEMORY
        ZR_E_INDEX
        ZR_E_CLOSED
        ZR_E_BAD_MAGIC
        ZR_E_VERSION
        ZR_E_CORRUPT
        ZR_E_CHECKSUM
        ZR_E_NOT_PUBLISHED
        ZR_E_UNSUPPORTED
        ZR_E_LIMIT
        ZR_E_DECODE
        ZR_E_IMMUTABLE
    # The format constants, limits and flags (#defines of zrecord.h): declared here once, by
    # name only, so that the C compiler gives each the header's value. _native.CONSTANTS
    # exports them by these names.
    const uint16_t ZR_FORMAT_MAJOR
    const uint16_t ZR_FORMAT_MINOR
    const uint8_t ZR_KIND_DENSE
    const uint8_t ZR_KIND_RAGGED
    const uint8_t ZR_CODEC_RAW
    const uint8_t ZR_CODEC_ZSTD
    const uint8_t ZR_CODEC_ZSTD_DICT
    const uint64_t ZR_NDIM_MAX
    const uint64_t ZR_DATA_SHARDS_MAX
    const uint64_t ZR_RECORD_SIZE_BYTES_MAX
    const uint64_t ZR_DIM_MAX
    const uint64_t ZR_DICT_SIZE_BYTES_MAX
    const uint64_t ZR_RECORD_COUNT_MAX
    const uint64_t ZR_ITEMSIZE_BYTES_MAX
    const uint64_t ZR_UNIT_COUNT_MAX
    const uint32_t ZR_WRITE_NO_SYNC
    const uint32_t ZR_WRITE_INDEX_PARTS
    const uint32_t ZR_OPEN_CACHE_BYPASS
    const uint32_t ZR_OPEN_VALIDATE_INDEX
    const uint32_t ZR_OPEN_CHECK_EVERY_READ
    const uint32_t ZR_OPEN_WHOLE_INDEX
    const uint32_t ZR_PART_BLOCKS
    const uint32_t ZR_PART_GROUPS
    const uint64_t ZR_HEADER_SIZE_BYTES_MAX
    const uint64_t ZR_INDEX_CACHE_RECORDS_MIN_DEFAULT
    const uint64_t ZR_INDEX_CACHE_BYTES_DEFAULT
    const uint32_t ZR_READS_AUTO
    const uint32_t ZR_READS_MAPPED
    const uint32_t ZR_READS_HINTED
    const uint32_t ZR_PARTS_COLD

    const char *zr_result_name(int code)
    const char *zr_dtype_info(uint8_t code, uint32_t *itemsize)
    const char *zr_datetime_unit(uint8_t code)

    ctypedef struct zr_status:
        int32_t code
        int32_t os_errno
        int64_t record
        int32_t shard
        char message[4096]

    ctypedef struct zr_schema:
        uint8_t kind
        uint8_t dtype
        uint8_t ndim
        uint8_t codec
        uint8_t data_shards
        uint64_t item_shape[32]
        uint32_t dtype_length
        uint8_t dtype_unit

    ctypedef struct zr_info:
        zr_schema schema
        uint16_t format_major
        uint16_t format_minor
        uint32_t dict_size
        uint64_t record_count
        uint64_t logical_bytes
        uint64_t stored_bytes
        uint64_t record_size
        uint64_t itemsize
        uint64_t header_checksum

    ctypedef struct zr_writer:
        pass
    ctypedef struct zr_reader:
        pass

    int zr_writer_open(const char *path, const zr_schema *schema, const uint8_t *dict,
                       size_t dict_size, uint32_t flags, zr_writer **out, zr_status *st)
    int zr_writer_append_dense(zr_writer *w, const void *data, uint64_t size, uint64_t count,
                               zr_status *st)
    int zr_writer_append_ragged(zr_writer *w, const uint64_t *ptrs, const uint64_t *shapes,
                                uint64_t count, zr_status *st)
    uint64_t zr_writer_count(const zr_writer *w)
    int zr_writer_set_page_cache_bytes(zr_writer *w, uint64_t nbytes, zr_status *st)
    int zr_writer_publish(zr_writer *w, zr_status *st)
    void zr_writer_abort(zr_writer *w)
    void zr_writer_free(zr_writer *w)

    ctypedef struct zr_staging:
        pass
    int zr_staging_open(const char *path, zr_staging **out, zr_status *st)
    const char *zr_staging_dir(const zr_staging *s)
    int zr_staging_publish(zr_staging *s, uint32_t flags, zr_status *st)
    void zr_staging_abort(zr_staging *s)
    void zr_staging_free(zr_staging *s)

    int zr_reader_open(const char *path, zr_reader **out, zr_status *st)
    int zr_reader_open_ex(const char *path, uint32_t flags, zr_reader **out, zr_status *st)

    ctypedef struct zr_open_opts:
        uint32_t flags
        uint32_t reserved
        const char *index_cache
        uint64_t index_cache_records_min
        uint64_t index_cache_bytes
        const char *name

    ctypedef struct zr_prune_stats:
        uint64_t kept
        uint64_t kept_bytes
        uint64_t removed
        uint64_t removed_bytes

    int zr_index_cache_prune(const char *folder, uint64_t budget_bytes, zr_prune_stats *out,
                             zr_status *st)

    int zr_reader_open_opts(const char *path, const zr_open_opts *opts, zr_reader **out,
                            zr_status *st)

    enum:
        ZR_INDEX_BUILT
        ZR_INDEX_BUILT_CACHED
        ZR_INDEX_CACHED
        ZR_INDEX_BY_PART

    ctypedef struct zr_index_info:
        uint64_t resident_bytes
        uint32_t source
        uint32_t reserved

    void zr_reader_index_info(const zr_reader *r, zr_index_info *out)
    void zr_reader_info(const zr_reader *r, zr_info *out)
    uint64_t zr_reader_dict(const zr_reader *r, uint8_t *out, uint64_t capacity)
    int zr_reader_gather_dense(zr_reader *r, const uint64_t *idx, uint64_t count, void *out,
                               uint64_t out_size, uint32_t threads, zr_status *st)
    int zr_reader_shapes(zr_reader *r, const uint64_t *idx, uint64_t count, uint64_t *shapes,
                         uint64_t *sizes, zr_status *st)
    int zr_reader_gather_ragged(zr_reader *r, const uint64_t *idx, uint64_t count, void *out,
                                const uint64_t *offsets, const uint64_t *sizes, uint64_t out_size,
                                uint32_t threads, zr_status *st)
    int zr_parts_gather_ragged(zr_reader **readers, uint64_t parts, const uint64_t *order,
                               const uint64_t *local, const uint64_t *bounds, uint64_t count,
                               void *out, const uint64_t *offsets, const uint64_t *sizes,
                               uint64_t out_size, uint32_t flags, uint32_t *taken,
                               zr_status *st)
    int zr_reader_verify(zr_reader *r, uint64_t start, uint64_t count, zr_status *st)
    int zr_reader_prefetch(zr_reader *r, const uint64_t *idx, uint64_t count, zr_status *st)
    int zr_reader_prefetch_hinted(zr_reader *r, const uint64_t *idx, uint64_t count,
                                  uint32_t *hinted, zr_status *st)
    int zr_reader_hint_index(zr_reader *r, const uint64_t *idx, uint64_t count, uint32_t *passed,
                             zr_status *st)
    ctypedef struct zr_index_want:
        uint32_t file
        uint32_t reserved
        uint64_t first
        uint64_t last
        uint64_t start
        uint64_t end
    int zr_reader_index_wants(zr_reader *r, const uint64_t *idx, uint64_t count,
                              zr_index_want *out, uint64_t *out_count, zr_status *st)
    int zr_reader_locate(zr_reader *r, const uint64_t *idx, uint64_t count, uint64_t *shards,
                         uint64_t *offsets, uint64_t *sizes, zr_status *st)
    ctypedef struct zr_layout:
        uint64_t record_count
        uint64_t index_size
        uint64_t sums_size
        uint64_t stored_bytes
        uint64_t index_blocks
        uint64_t sum_groups
        uint32_t index_entry_size
        uint8_t data_shards
        uint8_t index_parts
        uint8_t index_block_shift
        uint8_t index_group_shift
        uint64_t header_checksum
        uint8_t by_part
        uint8_t reserved[7]
        uint64_t shard_sizes[255]
    int zr_header_layout(const void *bytes, uint64_t size, uint64_t file_size, const char *name,
                         zr_layout *out, zr_status *st)
    int zr_index_table(const void *header, uint64_t header_size, const void *index,
                       uint64_t index_size, const void *sums, uint64_t sums_size, const char *name,
                       uint64_t record_count, uint64_t *offsets, uint64_t *stored_sizes,
                       uint8_t *shards, uint64_t *checksums, zr_status *st)
    int zr_reader_set_reads(zr_reader *r, uint32_t mode, zr_status *st)
    void zr_reader_close(zr_reader *r)
    void zr_reader_free(zr_reader *r)
    int zr_train_dict(const void *samples, uint64_t samples_size, const uint64_t *sizes,
                      uint64_t count, uint8_t *out, uint64_t capacity, uint64_t *out_size,
                      zr_status *st)
    uint64_t zr_xxh64(const void *data, uint64_t size)
