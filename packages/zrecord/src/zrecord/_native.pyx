# cython: language_level=3, boundscheck=False, wraparound=False
# cython: freethreading_compatible = True
"""Thin binding of the native core (zig/include/zrecord.h).

Invariants:
- Native handles never cross this layer: each is owned by a `Writer` or `Reader` object that
  frees it in `__dealloc__` (a writer never published is aborted first). Arrays cross it as
  NumPy objects whose data pointer is read from `__array_struct__` (a PyCapsule holding NumPy's
  documented PyArrayInterface). That keeps the binding inside the Limited API of CPython 3.10,
  which has no buffer protocol, and costs ~0.1 us per array. The caller keeps the arrays alive.
- Every array is checked here (C-contiguous, aligned, writeable where written, size) before its
  pointer reaches native code.
- Every native call runs with the GIL released, except three that only read a constant table or
  one field (zr_result_name, zr_dtype_info, zr_staging_dir).
- Every failure goes through `_fail`, the one place that turns a zr_status into an exception.
"""

from cpython.pycapsule cimport PyCapsule_GetPointer
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memset

from zrecord._capi cimport *

from zrecord import errors as _errors

cdef extern from *:
    """
    /* NumPy's array interface struct (numpy.org/doc/stable/reference/arrays.interface.html). */
    typedef struct {
        int two; int nd; char typekind; int itemsize; int flags;
        Py_ssize_t *shape; Py_ssize_t *strides; void *data; PyObject *descr;
    } zr_array_interface;
    """
    ctypedef struct zr_array_interface:
        int two
        int nd
        char typekind
        int itemsize
        int flags
        Py_ssize_t *shape
        Py_ssize_t *strides
        void *data

cdef enum:
    ARRAY_C_CONTIGUOUS = 0x0001
    ARRAY_ALIGNED = 0x0100
    ARRAY_NOTSWAPPED = 0x0200
    ARRAY_WRITEABLE = 0x0400


cdef int _array(object arr, bint writable, void **ptr, uint64_t *nbytes, int ndim,
                uint64_t *shape) except -1:
    """Data pointer and size of a C-contiguous, aligned NumPy array.

    With `shape` given, also checks that the array has `ndim` axes and copies its shape there.
    The capsule (and so the struct it points to) lives until this function returns.
    """
    cdef object capsule = arr.__array_struct__
    cdef zr_array_interface *ai = <zr_array_interface *> PyCapsule_GetPointer(capsule, NULL)
    cdef uint64_t n = ai.itemsize
    cdef int i
    if ai.two != 2:
        raise TypeError("not a NumPy array interface")
    if (ai.flags & (ARRAY_C_CONTIGUOUS | ARRAY_ALIGNED)) != (ARRAY_C_CONTIGUOUS | ARRAY_ALIGNED):
        raise ValueError("array must be C-contiguous and aligned")
    if writable and not (ai.flags & ARRAY_WRITEABLE):
        raise ValueError("output array must be writeable")
    if shape != NULL and ai.nd != ndim:
        raise ValueError(f"array has {ai.nd} axes; expected {ndim}")
    for i in range(ai.nd):
        n *= <uint64_t> ai.shape[i]
        if shape != NULL:
            shape[i] = <uint64_t> ai.shape[i]
    ptr[0] = ai.data
    nbytes[0] = n
    return 0


cdef inline int _buffer(object arr, bint writable, void **ptr, uint64_t *nbytes) except -1:
    return _array(arr, writable, ptr, nbytes, 0, NULL)


cdef int _u64(object arr, bint writable, uint64_t **ptr, uint64_t count) except -1:
    """Pointer to `count` uint64 values of a contiguous array (the caller checked the dtype)."""
    cdef void *p
    cdef uint64_t nbytes
    _buffer(arr, writable, &p, &nbytes)
    if nbytes != count * 8:
        raise ValueError(f"expected {count} uint64 values, got {nbytes} bytes")
    ptr[0] = <uint64_t *> p
    return 0


cdef int _fail(int rc, zr_status *st) except -1:
    raise _errors.from_status(result_name(rc), st.os_errno, st.record, st.shard,
                              st.message.decode("utf-8", "replace"))


def result_name(int code):
    """The zrecord.h name of a result code ("ZR_E_CORRUPT"), as the native core spells it;
    "ZR_E_UNKNOWN(n)" for a code the core does not have."""
    cdef const char *name = zr_result_name(code)
    return f"ZR_E_UNKNOWN({code})" if name == NULL else (<bytes> name).decode("ascii")


def dtype_table():
    """The core's dtype table (spec §3.3): a list of (code, NumPy name, itemsize)."""
    cdef uint32_t itemsize = 0
    cdef const char *name
    out = []
    for code in range(1, 256):
        name = zr_dtype_info(code, &itemsize)
        if name != NULL:
            out.append((code, (<bytes> name).decode("ascii"), itemsize))
    return out


def datetime_units():
    """The core's datetime64/timedelta64 unit table (spec §3.3): a list of (code, NumPy name)."""
    cdef const char *name
    out = []
    for code in range(1, 256):
        name = zr_datetime_unit(code)
        if name != NULL:
            out.append((code, (<bytes> name).decode("ascii")))
    return out


# The C header's result codes by name, with the values the C compiler saw in zrecord.h.
RESULT_CODES = {
    "ZR_OK": ZR_OK,
    "ZR_E_INVALID_ARGUMENT": ZR_E_INVALID_ARGUMENT,
    "ZR_E_IO": ZR_E_IO,
    "ZR_E_NOT_FOUND": ZR_E_NOT_FOUND,
    "ZR_E_EXISTS": ZR_E_EXISTS,
    "ZR_E_NO_MEMORY": ZR_E_NO_MEMORY,
    "ZR_E_INDEX": ZR_E_INDEX,
    "ZR_E_CLOSED": ZR_E_CLOSED,
    "ZR_E_BAD_MAGIC": ZR_E_BAD_MAGIC,
    "ZR_E_VERSION": ZR_E_VERSION,
    "ZR_E_CORRUPT": ZR_E_CORRUPT,
    "ZR_E_CHECKSUM": ZR_E_CHECKSUM,
    "ZR_E_NOT_PUBLISHED": ZR_E_NOT_PUBLISHED,
    "ZR_E_UNSUPPORTED": ZR_E_UNSUPPORTED,
    "ZR_E_LIMIT": ZR_E_LIMIT,
    "ZR_E_DECODE": ZR_E_DECODE,
    "ZR_E_IMMUTABLE": ZR_E_IMMUTABLE,
}


# The C header's other constants (format version, kinds, codecs, limits, flags) by name, with
# the values the C compiler saw in zrecord.h: the one table that zrecord's Python modules read.
CONSTANTS = {
    "ZR_FORMAT_MAJOR": ZR_FORMAT_MAJOR,
    "ZR_FORMAT_MINOR": ZR_FORMAT_MINOR,
    "ZR_KIND_DENSE": ZR_KIND_DENSE,
    "ZR_KIND_RAGGED": ZR_KIND_RAGGED,
    "ZR_CODEC_RAW": ZR_CODEC_RAW,
    "ZR_CODEC_ZSTD": ZR_CODEC_ZSTD,
    "ZR_CODEC_ZSTD_DICT": ZR_CODEC_ZSTD_DICT,
    "ZR_NDIM_MAX": ZR_NDIM_MAX,
    "ZR_DATA_SHARDS_MAX": ZR_DATA_SHARDS_MAX,
    "ZR_RECORD_SIZE_BYTES_MAX": ZR_RECORD_SIZE_BYTES_MAX,
    "ZR_DIM_MAX": ZR_DIM_MAX,
    "ZR_DICT_SIZE_BYTES_MAX": ZR_DICT_SIZE_BYTES_MAX,
    "ZR_RECORD_COUNT_MAX": ZR_RECORD_COUNT_MAX,
    "ZR_ITEMSIZE_BYTES_MAX": ZR_ITEMSIZE_BYTES_MAX,
    "ZR_UNIT_COUNT_MAX": ZR_UNIT_COUNT_MAX,
    "ZR_WRITE_NO_SYNC": ZR_WRITE_NO_SYNC,
    "ZR_WRITE_INDEX_PARTS": ZR_WRITE_INDEX_PARTS,
    "ZR_OPEN_CACHE_BYPASS": ZR_OPEN_CACHE_BYPASS,
    "ZR_OPEN_VALIDATE_INDEX": ZR_OPEN_VALIDATE_INDEX,
    "ZR_OPEN_CHECK_EVERY_READ": ZR_OPEN_CHECK_EVERY_READ,
    "ZR_OPEN_WHOLE_INDEX": ZR_OPEN_WHOLE_INDEX,
    "ZR_PART_BLOCKS": ZR_PART_BLOCKS,
    "ZR_PART_GROUPS": ZR_PART_GROUPS,
    "ZR_HEADER_SIZE_BYTES_MAX": ZR_HEADER_SIZE_BYTES_MAX,
    "ZR_INDEX_CACHE_RECORDS_MIN_DEFAULT": ZR_INDEX_CACHE_RECORDS_MIN_DEFAULT,
    "ZR_INDEX_CACHE_BYTES_DEFAULT": ZR_INDEX_CACHE_BYTES_DEFAULT,
    "ZR_READS_AUTO": ZR_READS_AUTO,
    "ZR_READS_MAPPED": ZR_READS_MAPPED,
    "ZR_READS_HINTED": ZR_READS_HINTED,
    "ZR_PARTS_COLD": ZR_PARTS_COLD,
}


# The Ragged collector (RaggedChunk, ragged_collect), kept in its own file: it is the one
# part of this module that works record by record rather than binding a native call.
include "_ragged_collect.pxi"


cdef class Writer:
    """A native writer owned by this object (zrecord.h): `__dealloc__` aborts it unless it was
    published or aborted, then frees it, so no handle outlives its owner and no integer can
    be mistaken for one. Calls must not overlap (the Python writer holds a lock)."""

    cdef zr_writer *w
    cdef readonly bint done

    def __cinit__(self, bytes path, int kind, int dtype, int ndim, int codec, int data_shards,
                  tuple item_shape, object dict_bytes, uint32_t flags, uint32_t dtype_length=0,
                  uint8_t dtype_unit=0):
        cdef zr_schema schema
        cdef zr_status st
        cdef const char *cpath = path
        cdef const uint8_t *dptr = NULL
        cdef size_t dsize = 0
        cdef bytes d
        cdef int rc, i
        memset(&schema, 0, sizeof(schema))
        schema.kind = kind
        schema.dtype = dtype
        schema.dtype_length = dtype_length
        schema.dtype_unit = dtype_unit
        schema.ndim = ndim
        schema.codec = codec
        schema.data_shards = data_shards
        for i in range(min(len(item_shape), ZR_NDIM_MAX)):
            schema.item_shape[i] = item_shape[i]
        if dict_bytes is not None:
            d = dict_bytes
            dptr = <const uint8_t *> (<const char *> d)
            dsize = len(d)
        with nogil:
            rc = zr_writer_open(cpath, &schema, dptr, dsize, flags, &self.w, &st)
        if rc != 0:
            _fail(rc, &st)

    def __dealloc__(self):
        if self.w != NULL:
            with nogil:
                if not self.done:
                    zr_writer_abort(self.w)
                zr_writer_free(self.w)

    def append_dense(self, object data, uint64_t count):
        """Append `count` records from the C-contiguous array `data`."""
        cdef zr_status st
        cdef int rc
        cdef void *p
        cdef uint64_t size
        _buffer(data, False, &p, &size)
        with nogil:
            rc = zr_writer_append_dense(self.w, p, size, count, &st)
        if rc != 0:
            _fail(rc, &st)

    def append_chunk(self, RaggedChunk chunk):
        """Append the records of `chunk`, in order."""
        cdef zr_status st
        cdef int rc
        with nogil:
            chunk._resolve()
            rc = zr_writer_append_ragged(self.w, chunk.ptrs, chunk.shapes, chunk.count, &st)
        if rc != 0:
            _fail(rc, &st)

    def count(self):
        cdef uint64_t n
        with nogil:
            n = zr_writer_count(self.w)
        return n

    def set_page_cache_bytes(self, uint64_t nbytes):
        """How many more bytes a durable writer on an O_DIRECT-capable file system writes
        through the page cache before its writes go direct (zrecord.h
        zr_writer_set_page_cache_bytes). For tests and measurements."""
        cdef zr_status st
        cdef int rc
        with nogil:
            rc = zr_writer_set_page_cache_bytes(self.w, nbytes, &st)
        if rc != 0:
            _fail(rc, &st)

    def publish(self):
        """Publish the store (once); the writer is done whatever the outcome."""
        cdef zr_status st
        cdef int rc
        self.done = True
        with nogil:
            rc = zr_writer_publish(self.w, &st)
        if rc != 0:
            _fail(rc, &st)

    def abort(self):
        """Discard everything; idempotent, and a no-op once published."""
        if not self.done:
            self.done = True
            with nogil:
                zr_writer_abort(self.w)


cdef class Reader:
    """A native reader owned by this object (zrecord.h): `__dealloc__` frees it (closing it
    first if needed). Calls may overlap from many threads; `close()` waits for them, and a call
    after it fails with ClosedError. A call holds a reference to this object, so the handle
    cannot be freed while one runs."""

    cdef zr_reader *r

    def __cinit__(self, bytes path, uint32_t flags=0, bytes index_cache=None,
                  uint64_t index_cache_records_min=0, uint64_t index_cache_bytes=0,
                  bytes name=None):
        cdef zr_status st
        cdef const char *cpath = path
        cdef zr_open_opts opts
        cdef int rc
        memset(&opts, 0, sizeof(opts))
        opts.flags = flags
        opts.index_cache = NULL if index_cache is None else <const char *>index_cache
        opts.index_cache_records_min = index_cache_records_min
        opts.index_cache_bytes = index_cache_bytes
        # What messages call the store (a mirror's URL); NULL: its path.
        opts.name = NULL if name is None else <const char *>name
        with nogil:
            rc = zr_reader_open_opts(cpath, &opts, &self.r, &st)
        if rc != 0:
            _fail(rc, &st)

    def index_info(self):
        """How the compact index was made (``source``: ``"built"``, ``"built_cached"``,
        ``"cached"`` or ``"by_part"``) and its size in bytes (``resident_bytes``)."""
        cdef zr_index_info info
        with nogil:
            zr_reader_index_info(self.r, &info)
        names = {ZR_INDEX_BUILT: "built", ZR_INDEX_BUILT_CACHED: "built_cached",
                 ZR_INDEX_CACHED: "cached", ZR_INDEX_BY_PART: "by_part"}
        return {"source": names[info.source], "resident_bytes": info.resident_bytes}

    def __dealloc__(self):
        if self.r != NULL:
            with nogil:
                zr_reader_free(self.r)

    def info(self):
        """The store's schema and sizes, as a dict."""
        cdef zr_info info
        memset(&info, 0, sizeof(info))
        with nogil:
            zr_reader_info(self.r, &info)
        ndim = info.schema.ndim
        return {
            "kind": info.schema.kind,
            "dtype": info.schema.dtype,
            "dtype_length": info.schema.dtype_length,
            "dtype_unit": info.schema.dtype_unit,
            "ndim": ndim,
            "codec": info.schema.codec,
            "data_shards": info.schema.data_shards,
            "item_shape": tuple(info.schema.item_shape[i] for i in range(ndim))
            if info.schema.kind == ZR_KIND_DENSE else None,
            "format_version": (info.format_major, info.format_minor),
            "dict_size": info.dict_size,
            "record_count": info.record_count,
            "logical_bytes": info.logical_bytes,
            "stored_bytes": info.stored_bytes,
            "record_size": info.record_size,
            "itemsize": info.itemsize,
            "header_checksum": info.header_checksum,
        }

    def dict_into(self, object out):
        """Copies the dictionary into the uint8 array `out` if it fits; returns its size."""
        cdef void *p
        cdef uint64_t nbytes, size
        _buffer(out, True, &p, &nbytes)
        with nogil:
            size = zr_reader_dict(self.r, <uint8_t *> p, nbytes)
        return size

    def gather_dense(self, object idx, uint64_t count, object out, uint32_t threads=0):
        """Gather records idx[0..count) (a uint64 array) into the array `out`."""
        cdef zr_status st
        cdef int rc
        cdef uint64_t *ip
        cdef void *op
        cdef uint64_t out_size
        _u64(idx, False, &ip, count)
        _buffer(out, True, &op, &out_size)
        with nogil:
            rc = zr_reader_gather_dense(self.r, ip, count, op, out_size, threads, &st)
        if rc != 0:
            _fail(rc, &st)

    def shapes(self, object idx, uint64_t count, uint64_t ndim, object shapes, object sizes):
        """Shapes (count x ndim uint64) and logical byte sizes (count uint64) of records idx."""
        cdef zr_status st
        cdef int rc
        cdef uint64_t *ip
        cdef uint64_t *sp
        cdef uint64_t *zp
        _u64(idx, False, &ip, count)
        _u64(shapes, True, &sp, count * ndim)
        _u64(sizes, True, &zp, count)
        with nogil:
            rc = zr_reader_shapes(self.r, ip, count, sp, zp, &st)
        if rc != 0:
            _fail(rc, &st)

    def gather_ragged(self, object idx, uint64_t count, object out, object offsets,
                      object sizes=None, uint32_t threads=0):
        """Gather record idx[i] to byte offset offsets[i] of the array `out`, into a slot of
        sizes[i] bytes where `sizes` (uint64, from `shapes`) is given: a record of another
        size fails the call."""
        cdef zr_status st
        cdef int rc
        cdef uint64_t *ip
        cdef uint64_t *fp
        cdef uint64_t *zp = NULL
        cdef void *op
        cdef uint64_t out_size
        _u64(idx, False, &ip, count)
        _u64(offsets, False, &fp, count)
        if sizes is not None:
            _u64(sizes, False, &zp, count)
        _buffer(out, True, &op, &out_size)
        with nogil:
            rc = zr_reader_gather_ragged(self.r, ip, count, op, fp, zp, out_size, threads, &st)
        if rc != 0:
            _fail(rc, &st)

    def verify(self, uint64_t start, uint64_t count):
        cdef zr_status st
        cdef int rc
        with nogil:
            rc = zr_reader_verify(self.r, start, count, &st)
        if rc != 0:
            _fail(rc, &st)

    def prefetch(self, object idx, uint64_t count):
        """Starts reading records idx[0..count) (a uint64 array) into the page cache; returns
        without waiting for them."""
        cdef zr_status st
        cdef int rc
        cdef uint64_t *ip
        _u64(idx, False, &ip, count)
        with nogil:
            rc = zr_reader_prefetch(self.r, ip, count, &st)
        if rc != 0:
            _fail(rc, &st)

    def index_wants(self, object idx, uint64_t count, object out):
        """Writes the runs of index parts that judging records idx[0..count) (a uint64 array)
        needs and this reader has not judged (zrecord.h zr_reader_index_wants) into `out`, a
        uint64 array of 2 × count × 5 values read as rows (file, first, last, start, end):
        zr_index_want's layout on a little-endian host, `file` (0: index blocks of index.zri,
        1: sum groups of index.zrs) in the low half of the row's first value. Returns how many
        rows it wrote."""
        cdef zr_status st
        cdef int rc
        cdef uint64_t *ip
        cdef uint64_t *op
        cdef uint64_t found = 0
        _u64(idx, False, &ip, count)
        _u64(out, True, &op, 10 * count)
        with nogil:
            rc = zr_reader_index_wants(self.r, ip, count, <zr_index_want *> op, &found, &st)
        if rc != 0:
            _fail(rc, &st)
        return found

    def locate(self, object idx, uint64_t count, object shards, object offsets, object sizes):
        """Writes where records idx[0..count) lie into the uint64 arrays `shards`, `offsets`
        and `sizes` (stored bytes), each record's index block judged first as a gather judges
        it (zrecord.h zr_reader_locate)."""
        cdef zr_status st
        cdef int rc
        cdef uint64_t *ip
        cdef uint64_t *sp
        cdef uint64_t *op
        cdef uint64_t *zp
        _u64(idx, False, &ip, count)
        _u64(shards, True, &sp, count)
        _u64(offsets, True, &op, count)
        _u64(sizes, True, &zp, count)
        with nogil:
            rc = zr_reader_locate(self.r, ip, count, sp, op, zp, &st)
        if rc != 0:
            _fail(rc, &st)

    def set_reads(self, uint32_t mode):
        """How batches not known to be in the page cache are read: 0 adaptive (the default),
        1 never hinted, 2 always hinted and read with pread (zrecord.h ZR_READS_*)."""
        cdef zr_status st
        cdef int rc
        with nogil:
            rc = zr_reader_set_reads(self.r, mode, &st)
        if rc != 0:
            _fail(rc, &st)

    def close(self):
        """Waits for calls in flight, then releases the store's files. Idempotent."""
        with nogil:
            zr_reader_close(self.r)


cdef class Staging:
    """A locked temporary directory for a tree to publish at a path at once (zr_staging_*),
    owned by this object: `__dealloc__` removes it unless it was published."""

    cdef zr_staging *s

    def __cinit__(self, bytes path):
        cdef zr_status st
        cdef const char *cpath = path
        cdef int rc
        with nogil:
            rc = zr_staging_open(cpath, &self.s, &st)
        if rc != 0:
            _fail(rc, &st)

    def __dealloc__(self):
        if self.s != NULL:
            with nogil:
                zr_staging_free(self.s)

    def directory(self):
        """The temporary directory's path, or None after publish or abort."""
        cdef const char *p = zr_staging_dir(self.s)
        return None if p == NULL else <bytes> p

    def publish(self, uint32_t flags):
        cdef zr_status st
        cdef int rc
        with nogil:
            rc = zr_staging_publish(self.s, flags, &st)
        if rc != 0:
            _fail(rc, &st)

    def abort(self):
        with nogil:
            zr_staging_abort(self.s)


def train_dict(object samples, object sizes, uint64_t count, uint64_t capacity):
    """Train a zstd dictionary of at most `capacity` bytes; returns it as bytes."""
    cdef zr_status st
    cdef int rc
    cdef void *sp
    cdef uint64_t samples_size
    cdef uint64_t *zp
    cdef uint64_t out_size = 0
    cdef uint8_t *out = <uint8_t *> malloc(max(capacity, 1))
    if out == NULL:
        raise MemoryError("zrecord: no memory for the dictionary")
    try:
        _buffer(samples, False, &sp, &samples_size)
        _u64(sizes, False, &zp, count)
        with nogil:
            rc = zr_train_dict(sp, samples_size, zp, count, out, capacity, &out_size, &st)
        if rc != 0:
            _fail(rc, &st)
        return out[:out_size]
    finally:
        free(out)


def prune_index_cache(bytes folder, uint64_t budget_bytes):
    """Prune the index cache folder `folder` now to `budget_bytes` of this user's files
    (zrecord.h zr_index_cache_prune); what it kept and removed."""
    cdef zr_status st
    cdef zr_prune_stats out
    cdef const char *cfolder = folder
    cdef int rc
    with nogil:
        rc = zr_index_cache_prune(cfolder, budget_bytes, &out, &st)
    if rc != 0:
        _fail(rc, &st)
    return {"kept": out.kept, "kept_bytes": out.kept_bytes, "removed": out.removed,
            "removed_bytes": out.removed_bytes}


def header_layout(object data, uint64_t file_size, str name):
    """What the header file `name` (a path or URL, for messages) of `file_size` bytes, whose
    first bytes are `data` (all of them, or at least 12 of a file larger than any header),
    says of the store's files (`data` a C-contiguous uint8 array), judged as a reader's open
    judges a header (zrecord.h
    zr_header_layout): a dict of its fields, shard_sizes a list. Raises what the open would."""
    cdef zr_status st
    cdef zr_layout out
    cdef int rc
    cdef bytes where = name.encode("utf-8", "surrogateescape")
    cdef const char *wp = where
    cdef uint64_t n
    cdef void *p
    _buffer(data, False, &p, &n)
    with nogil:
        rc = zr_header_layout(p, n, file_size, wp, &out, &st)
    if rc != 0:
        _fail(rc, &st)
    return {"record_count": out.record_count, "index_size": out.index_size,
            "sums_size": out.sums_size, "stored_bytes": out.stored_bytes,
            "index_blocks": out.index_blocks, "sum_groups": out.sum_groups,
            "index_entry_size": out.index_entry_size, "index_parts": bool(out.index_parts),
            "index_block_shift": out.index_block_shift, "index_group_shift": out.index_group_shift,
            "header_checksum": out.header_checksum, "by_part": bool(out.by_part),
            "shard_sizes": [out.shard_sizes[k] for k in range(out.data_shards)]}


def index_table(object header, object index, object sums, str name, object offsets,
                object stored_sizes, object shards, object checksums):
    """Judges `index` and `sums` (C-contiguous uint8 arrays; `sums` empty without index parts)
    as the index files of the store whose header is `header`, named `name` in messages, and
    fills `offsets`, `stored_sizes`, `checksums` (uint64) and `shards` (uint8), one of each per
    record (zrecord.h zr_index_table). Raises what a whole judgement of the index would."""
    cdef zr_status st
    cdef int rc
    cdef bytes where = name.encode("utf-8", "surrogateescape")
    cdef const char *wp = where
    cdef void *hp
    cdef void *ip
    cdef void *sp
    cdef void *kp
    cdef uint64_t hn, inn, sn, kn
    cdef uint64_t *op
    cdef uint64_t *zp
    cdef uint64_t *cp
    cdef uint64_t count = len(shards)
    _buffer(header, False, &hp, &hn)
    _buffer(index, False, &ip, &inn)
    _buffer(sums, False, &sp, &sn)
    _buffer(shards, True, &kp, &kn)
    _u64(offsets, True, &op, count)
    _u64(stored_sizes, True, &zp, count)
    _u64(checksums, True, &cp, count)
    with nogil:
        rc = zr_index_table(hp, hn, ip, inn, sp if sn > 0 else NULL, sn, wp, count, op, zp,
                            <uint8_t *> kp, cp, &st)
    if rc != 0:
        _fail(rc, &st)


cdef enum:
    # Parts' lookup table: buckets per part, and the most buckets (8 bytes each).
    PARTS_BUCKETS = 16
    PARTS_TABLE_MAX = 65536
    # Batches planned with the GIL let go (Parts.plan): about 60 us of work and more.
    PLAN_NOGIL_RECORDS = 16384


cdef class Parts:
    """The parts of a dataset, for its batch reads (each one call, which runs the parts'
    native calls in turn with the GIL released): their native readers, held alive by this
    object (so a handle outlives every call that uses it), and the record numbers their parts
    start at. Holds nothing that changes but which parts' index parts have all passed (flags
    that only ever go from 0 to 1: a stale 0 costs one more call), so calls may overlap from
    many threads.

    A batch's plan (`plan`) is one uint64 array of 2 * count + parts + 1 values: `order` (the
    batch's positions sorted by part, stably), `local` (those records' numbers within their
    parts, in that order) and `bounds` (part g's positions at order[bounds[g]:bounds[g+1]]). One
    array, not three: each array crossing this layer costs its capsule (module docstring)."""

    cdef list readers
    cdef zr_reader **rs
    cdef uint64_t *starts
    cdef readonly uint64_t parts
    # Where to look for a record's part: `table[b]` is the part holding record b << shift, so
    # record x lies in a part of table[x >> shift] .. table[(x >> shift) + 1] (a bucket of
    # records, about PARTS_BUCKETS of them per part): one load and, for the few buckets that
    # straddle the end of a part, a short search. A binary search over all the parts' starts
    # costs log2(parts) branches on random data, half of them mispredicted; a compiler may
    # turn a branch-free formulation back into branches.
    cdef uint64_t *table
    cdef uint64_t buckets
    cdef unsigned shift
    # passed[g]: part g's index parts have all passed (zr_reader_hint_index said so), so
    # hint_index skips it; hints_left: parts not known to have, 0 making it one test.
    cdef uint8_t *passed
    cdef uint64_t hints_left

    def __cinit__(self, list readers, object starts):
        cdef Py_ssize_t n = len(readers)
        cdef Py_ssize_t g
        cdef uint64_t *sp
        if n == 0:
            raise ValueError("a dataset has at least one part")
        _u64(starts, False, &sp, n + 1)
        if sp[0] != 0:
            raise ValueError(f"starts must begin at 0; got {sp[0]}")
        for g in range(n):
            if sp[g + 1] < sp[g]:
                raise ValueError(f"starts must be ascending; part {g} starts at {sp[g]} and "
                                 f"part {g + 1} at {sp[g + 1]}")
        # Buckets of 2**shift records: the fewest that give each part about PARTS_BUCKETS.
        cdef uint64_t total = sp[n]
        cdef uint64_t want = min(<uint64_t> n * PARTS_BUCKETS, PARTS_TABLE_MAX)
        cdef unsigned shift = 0
        while (total >> shift) >= want:
            shift += 1
        cdef uint64_t buckets = (total >> shift) + 1
        self.rs = <zr_reader **> malloc(n * sizeof(zr_reader *))
        self.starts = <uint64_t *> malloc((n + 1) * 8)
        self.table = <uint64_t *> malloc((buckets + 1) * 8)
        self.passed = <uint8_t *> malloc(n)
        if self.rs == NULL or self.starts == NULL or self.table == NULL or self.passed == NULL:
            raise MemoryError()
        memset(self.passed, 0, n)
        self.hints_left = n
        for g in range(n):
            self.rs[g] = (<Reader?> readers[g]).r
            self.starts[g] = sp[g]
        self.starts[n] = sp[n]
        self.readers = list(readers)
        self.parts = n
        self.shift = shift
        self.buckets = buckets
        # table[b]: the last part starting at or before record b << shift (a part with
        # records: an empty one starts where the next does); the last entry, n - 1, bounds
        # the last bucket.
        g = 0
        cdef uint64_t b
        for b in range(buckets):
            while <uint64_t> g + 1 < <uint64_t> n and sp[g + 1] <= (b << shift):
                g += 1
            self.table[b] = g
        self.table[buckets] = n - 1

    def __dealloc__(self):
        free(self.rs)
        free(self.starts)
        free(self.table)
        free(self.passed)

    cdef uint64_t *_plan_of(self, object plan, uint64_t count) except NULL:
        cdef uint64_t *pp
        _u64(plan, False, &pp, 2 * count + self.parts + 1)
        return pp

    def plan(self, object idx, uint64_t count, object plan):
        """Where the records idx[0..count) lie: returns the part that holds them all, else -1
        after writing `plan` (class docstring). One pass to find the parts (the lookup table:
        see `table`), one counting sort. StoreIndexError for a record past the
        dataset's end: the one range check of a dataset's gathers and hints."""
        cdef uint64_t *ip
        cdef uint64_t *op
        cdef uint64_t i
        cdef uint64_t parts = self.parts
        cdef uint64_t *sp = self.starts
        cdef uint64_t *table = self.table
        cdef unsigned shift = self.shift
        cdef uint64_t first = 0
        cdef bint one = True
        _u64(idx, False, &ip, count)
        _u64(plan, True, &op, 2 * count + parts + 1)
        cdef uint64_t *lp = op + count
        cdef uint64_t *bp = op + 2 * count
        for i in range(count):
            if ip[i] >= sp[parts]:
                raise _errors.StoreIndexError(f"record {ip[i]} of a dataset of {sp[parts]} records")
        # A batch's plan takes a few ns a record: the GIL is let go for large ones only. Let
        # go for every batch, it had to be taken back among the loader's threads each time,
        # which cost a DataLoader over 64 parts 3% of its batches (token batches of 256).
        if count >= PLAN_NOGIL_RECORDS:
            with nogil:
                first = _find_parts(ip, count, sp, parts, table, shift, op, bp, &one)
        else:
            first = _find_parts(ip, count, sp, parts, table, shift, op, bp, &one)
        if count == 0:
            return -1
        if one:
            return <long long> first
        return _place(sp, parts, ip, count, op, bp, lp)

    def shapes(self, object plan, uint64_t count, uint64_t ndim, object shapes, object sizes):
        """`Reader.shapes` over the parts in one call (zr_reader_shapes of each): the shapes
        (rows of `ndim` uint64) and logical sizes of the batch's records, at their positions in
        the batch."""
        cdef zr_status st
        cdef int rc = 0
        cdef uint64_t *pp = self._plan_of(plan, count)
        cdef uint64_t *bp = pp + 2 * count
        cdef uint64_t *lp = pp + count
        cdef uint64_t *sp
        cdef uint64_t *zp
        cdef uint64_t j, a, row, g
        _u64(shapes, True, &sp, count * ndim)
        _u64(sizes, True, &zp, count)
        cdef uint64_t *ts = <uint64_t *> malloc(max(count * (ndim + 1), 1) * 8)
        if ts == NULL:
            raise MemoryError()
        cdef uint64_t *tz = ts + count * ndim
        try:
            with nogil:
                for g in range(self.parts):
                    if bp[g + 1] > bp[g]:
                        rc = zr_reader_shapes(self.rs[g], lp + bp[g], bp[g + 1] - bp[g],
                                              ts + bp[g] * ndim, tz + bp[g], &st)
                        if rc != 0:
                            break
                if rc == 0:
                    for j in range(count):
                        row = pp[j]
                        zp[row] = tz[j]
                        for a in range(ndim):
                            sp[row * ndim + a] = ts[j * ndim + a]
        finally:
            free(ts)
        if rc != 0:
            _fail(rc, &st)

    def gather(self, object plan, uint64_t count, object out, object offsets, uint64_t size=0,
               uint64_t first=0, object end=None, uint32_t threads=0, object sizes=None):
        """The batch's records decoded into the array `out` (zr_reader_gather_ragged of each
        part, which places records of either kind): position j's at byte offsets[j] (uint64), or, with
        `offsets` None, at j * `size` (a Dense batch), into a slot of sizes[j] bytes where
        `sizes` (uint64, from `shapes`) is given. Only parts [first, end) (default all),
        so that two threads can share a batch. Runs with the GIL released. A whole Ragged
        batch (offsets and sizes given) goes in one call over the parts where they all read
        it that way (`_across`): returns whether it did."""
        cdef zr_status st
        cdef int rc = 0
        cdef uint64_t *pp = self._plan_of(plan, count)
        cdef uint64_t *fp = NULL
        cdef uint64_t *zp = NULL
        cdef uint64_t *slots = NULL
        cdef void *op
        cdef uint64_t out_size, j, lo, hi, g
        cdef uint64_t stop = self.parts if end is None else <uint64_t> end
        if first > stop or stop > self.parts:
            raise ValueError(f"parts [{first}, {stop}) of {self.parts}")
        if offsets is not None:
            _u64(offsets, False, &fp, count)
        if sizes is not None:
            _u64(sizes, False, &zp, count)
        _buffer(out, True, &op, &out_size)
        cdef uint64_t *bp = pp + 2 * count
        if fp != NULL and zp != NULL and first == 0 and stop == self.parts and threads <= 1 \
                and self._across(pp, count, op, fp, zp, out_size, 0):
            return True
        lo, hi = bp[first], bp[stop]
        cdef uint64_t *placed = <uint64_t *> malloc(max(count, 1) * (16 if zp != NULL else 8))
        if placed == NULL:
            raise MemoryError()
        if zp != NULL:
            slots = placed + count
        try:
            with nogil:
                # The offsets (and slot sizes) in the plan's order, which is how each part
                # reads its records.
                for j in range(lo, hi):
                    placed[j] = fp[pp[j]] if fp != NULL else pp[j] * size
                if slots != NULL:
                    for j in range(lo, hi):
                        slots[j] = zp[pp[j]]
                for g in range(first, stop):
                    if bp[g + 1] > bp[g]:
                        rc = zr_reader_gather_ragged(self.rs[g], pp + count + bp[g],
                                                     bp[g + 1] - bp[g], op, placed + bp[g],
                                                     slots + bp[g] if slots != NULL else NULL,
                                                     out_size, threads, &st)
                        if rc != 0:
                            break
        finally:
            free(placed)
        if rc != 0:
            _fail(rc, &st)
        return False

    def across(self, object plan, uint64_t count, object out, object offsets, object sizes,
               bint cold=False):
        """A whole Ragged batch (offsets and slot sizes as `gather` takes them) in one native
        call over the parts, where every part it touches reads it that way (`_across`): 0,
        nothing read, where one does not; 1 where it read the batch as warm; 2 where, with
        `cold` (the last batch was found cold), its sample found it cold and it was hinted
        across the parts and read with pread."""
        cdef uint64_t *pp = self._plan_of(plan, count)
        cdef uint64_t *fp
        cdef uint64_t *zp
        cdef void *op
        cdef uint64_t out_size
        _u64(offsets, False, &fp, count)
        _u64(sizes, False, &zp, count)
        _buffer(out, True, &op, &out_size)
        return self._across(pp, count, op, fp, zp, out_size, ZR_PARTS_COLD if cold else 0)

    cdef int _across(self, uint64_t *pp, uint64_t count, void *op, uint64_t *fp, uint64_t *zp,
                     uint64_t out_size, uint32_t flags) except -1:
        """A whole Ragged batch in one native call over the parts (zr_parts_gather_ragged),
        part after part in the plan's order, where every part it touches reads it that way (a
        raw part with its index in memory; taken to be in the page cache, or with
        ZR_PARTS_COLD sampled and, found cold, hinted across the parts): how it was taken (0:
        not, nothing read; 1: warm; 2: cold)."""
        cdef zr_status st
        cdef int rc
        cdef uint32_t taken = 0
        with nogil:
            rc = zr_parts_gather_ragged(self.rs, self.parts, pp, pp + count, pp + 2 * count, count,
                                        op, fp, zp, out_size, flags, &taken, &st)
        if rc != 0:
            _fail(rc, &st)
        return <int> taken

    def hint_index(self, object plan, uint64_t count):
        """For each part the batch touches, a hint of the index parts its records need and the
        part has not judged (zr_reader_hint_index): all of them in the device's queue before
        the first part's checks read any. Once a part's index parts have all passed it is
        skipped, and once every part's, the call costs one test."""
        if self.hints_left:
            self._hint_index(self._plan_of(plan, count), count)

    cdef int _hint_index(self, uint64_t *pp, uint64_t count) except -1:
        cdef zr_status st
        cdef int rc = 0
        cdef uint64_t *bp = pp + 2 * count
        cdef uint64_t *lp = pp + count
        cdef uint64_t g
        cdef uint32_t passed = 0
        with nogil:
            for g in range(self.parts):
                if bp[g + 1] > bp[g] and not self.passed[g]:
                    rc = zr_reader_hint_index(self.rs[g], lp + bp[g], bp[g + 1] - bp[g], &passed, &st)
                    if rc != 0:
                        break
                    if passed:
                        self.passed[g] = 1
        # Counted again, not decremented: two threads may both find a part passed. Each
        # count is of flags that only go up, so a stale one is only ever too high.
        cdef uint64_t left = 0
        for g in range(self.parts):
            left += not self.passed[g]
        self.hints_left = left
        if rc != 0:
            _fail(rc, &st)
        return 0

    def prefetch(self, object plan, uint64_t count):
        """`Reader.prefetch` over the parts in one call: for each part, a read-ahead hint for
        its records of the batch. The largest part's records go first; when its sample finds
        them in the page cache, the batch is taken to be there, and the other parts are not
        sampled (each sample costs a few system calls, which a batch spread over many parts
        would otherwise pay once per part). Returns whether it hinted (the batch was found
        cold). The index parts that the batch's records need and their parts have not judged
        are hinted first (`hint_index`): each part's prefetch judges them."""
        cdef zr_status st
        cdef int rc = 0
        cdef uint64_t *pp = self._plan_of(plan, count)
        cdef uint64_t *bp = pp + 2 * count
        cdef uint64_t *lp = pp + count
        cdef uint64_t g
        cdef uint64_t largest = 0
        cdef uint32_t hinted = 1
        if self.hints_left:
            self._hint_index(pp, count)
        with nogil:
            for g in range(self.parts):
                if bp[g + 1] - bp[g] > bp[largest + 1] - bp[largest]:
                    largest = g
            rc = zr_reader_prefetch_hinted(self.rs[largest], lp + bp[largest],
                                           bp[largest + 1] - bp[largest], &hinted, &st)
            for g in range(self.parts):
                if rc != 0 or not hinted:
                    break
                if g != largest and bp[g + 1] > bp[g]:
                    rc = zr_reader_prefetch(self.rs[g], lp + bp[g], bp[g + 1] - bp[g], &st)
        if rc != 0:
            _fail(rc, &st)
        return hinted != 0


cdef long long _place(uint64_t *sp, uint64_t parts, uint64_t *ip, uint64_t count, uint64_t *op,
                      uint64_t *bp, uint64_t *lp) except -2:
    """Parts.plan's counting sort, `op` holding each position's part: `op` becomes the order,
    `lp` the local numbers."""
    cdef uint64_t *cursor = <uint64_t *> malloc(max(parts, 1) * 8)
    cdef uint64_t *part_of = <uint64_t *> malloc(max(count, 1) * 8)
    if cursor == NULL or part_of == NULL:
        free(cursor)
        free(part_of)
        raise MemoryError()
    if count >= PLAN_NOGIL_RECORDS:
        with nogil:
            _sort_by_part(sp, parts, ip, count, op, bp, lp, cursor, part_of)
    else:
        _sort_by_part(sp, parts, ip, count, op, bp, lp, cursor, part_of)
    free(cursor)
    free(part_of)
    return -1


cdef uint64_t _find_parts(uint64_t *ip, uint64_t count, uint64_t *sp, uint64_t parts,
                         uint64_t *table, unsigned shift, uint64_t *op, uint64_t *bp,
                         bint *one) noexcept nogil:
    """Parts.plan's first pass: each record's part into op[i], the parts' counts summed into
    `bp`; returns the first record's part, and *one stays true if every record is in it."""
    cdef uint64_t i, x, lo, hi, mid, k
    cdef uint64_t first = 0
    memset(bp, 0, (parts + 1) * 8)
    for i in range(count):
        # The last part whose start is at most the record (an empty part starts where the
        # next does, so it is never that one), between the parts of its bucket and of the
        # next (the table; usually the same part).
        x = ip[i]
        lo = table[x >> shift]
        hi = table[(x >> shift) + 1]
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if sp[mid] <= x:
                lo = mid
            else:
                hi = mid - 1
        op[i] = lo  # the part, for now
        bp[lo + 1] += 1
        if i == 0:
            first = lo
        elif lo != first:
            one[0] = False
    for k in range(parts):
        bp[k + 1] += bp[k]
    return first


cdef void _sort_by_part(uint64_t *sp, uint64_t parts, uint64_t *ip, uint64_t count,
                        uint64_t *op, uint64_t *bp, uint64_t *lp, uint64_t *cursor,
                        uint64_t *part_of) noexcept nogil:
    """_place's counting sort, with its two buffers."""
    cdef uint64_t i, k, at
    for k in range(parts):
        cursor[k] = bp[k]
    for i in range(count):
        part_of[i] = op[i]
    for i in range(count):
        k = part_of[i]
        at = cursor[k]
        cursor[k] += 1
        op[at] = i
        lp[at] = ip[i] - sp[k]


def xxh64(object data):
    """XXH64 (seed 0) of a C-contiguous array's bytes: the format's checksum."""
    cdef uint64_t h
    cdef void *p
    cdef uint64_t n
    _buffer(data, False, &p, &n)
    with nogil:
        h = zr_xxh64(p, n)
    return h
