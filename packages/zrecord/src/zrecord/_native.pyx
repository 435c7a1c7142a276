# cython: language_level=3, boundscheck=False, wraparound=False
"""Thin binding of the native core (zig/include/zrecord.h).

Invariants:
- Handles and buffers cross this layer as integer addresses (`uintptr_t`). The Python layer
  owns every buffer (NumPy arrays) and keeps it alive for the duration of the call; this keeps
  the binding inside the Limited API of CPython 3.10, which has no buffer protocol.
- Every native call runs with the GIL released.
- Every failure goes through `_fail`, the one place that turns a zr_status into an exception.
"""

from libc.stdint cimport uint8_t, uint32_t, uint64_t, uintptr_t
from libc.string cimport memset

from zrecord._capi cimport *

from zrecord import errors as _errors


cdef int _fail(int rc, zr_status *st) except -1:
    raise _errors.from_status(rc, st.os_errno, st.record, st.shard,
                              st.message.decode("utf-8", "replace"))


cdef inline zr_writer *_w(uintptr_t handle) noexcept nogil:
    return <zr_writer *> handle


cdef inline zr_reader *_r(uintptr_t handle) noexcept nogil:
    return <zr_reader *> handle


def writer_open(bytes path, int kind, int dtype, int ndim, int codec, int data_shards,
                tuple item_shape, object dict_bytes, uint32_t flags):
    """Create a writer; returns its handle."""
    cdef zr_schema schema
    cdef zr_status st
    cdef zr_writer *w = NULL
    cdef const char *cpath = path
    cdef const uint8_t *dptr = NULL
    cdef size_t dsize = 0
    cdef bytes d
    cdef int rc, i
    memset(&schema, 0, sizeof(schema))
    schema.kind = kind
    schema.dtype = dtype
    schema.ndim = ndim
    schema.codec = codec
    schema.data_shards = data_shards
    for i in range(min(len(item_shape), 32)):
        schema.item_shape[i] = item_shape[i]
    if dict_bytes is not None:
        d = dict_bytes
        dptr = <const uint8_t *> (<const char *> d)
        dsize = len(d)
    with nogil:
        rc = zr_writer_open(cpath, &schema, dptr, dsize, flags, &w, &st)
    if rc != 0:
        _fail(rc, &st)
    return <uintptr_t> w


def writer_append_dense(uintptr_t handle, uintptr_t data, uint64_t size, uint64_t count):
    cdef zr_status st
    cdef int rc
    with nogil:
        rc = zr_writer_append_dense(_w(handle), <const void *> data, size, count, &st)
    if rc != 0:
        _fail(rc, &st)


def writer_append_ragged(uintptr_t handle, uintptr_t ptrs, uintptr_t shapes, uint64_t count):
    cdef zr_status st
    cdef int rc
    with nogil:
        rc = zr_writer_append_ragged(_w(handle), <const uint64_t *> ptrs,
                                     <const uint64_t *> shapes, count, &st)
    if rc != 0:
        _fail(rc, &st)


def writer_count(uintptr_t handle):
    return zr_writer_count(_w(handle))


def writer_publish(uintptr_t handle):
    cdef zr_status st
    cdef int rc
    with nogil:
        rc = zr_writer_publish(_w(handle), &st)
    if rc != 0:
        _fail(rc, &st)


def writer_abort(uintptr_t handle):
    with nogil:
        zr_writer_abort(_w(handle))


def writer_free(uintptr_t handle):
    with nogil:
        zr_writer_free(_w(handle))


def reader_open(bytes path):
    cdef zr_status st
    cdef zr_reader *r = NULL
    cdef const char *cpath = path
    cdef int rc
    with nogil:
        rc = zr_reader_open(cpath, &r, &st)
    if rc != 0:
        _fail(rc, &st)
    return <uintptr_t> r


def reader_info(uintptr_t handle):
    """Returns a dict of the store's schema and sizes."""
    cdef zr_info info
    memset(&info, 0, sizeof(info))
    zr_reader_info(_r(handle), &info)
    ndim = info.schema.ndim
    return {
        "kind": info.schema.kind,
        "dtype": info.schema.dtype,
        "ndim": ndim,
        "codec": info.schema.codec,
        "data_shards": info.schema.data_shards,
        "item_shape": tuple(info.schema.item_shape[i] for i in range(ndim))
        if info.schema.kind == 1 else None,
        "format_version": (info.format_major, info.format_minor),
        "dict_size": info.dict_size,
        "record_count": info.record_count,
        "logical_bytes": info.logical_bytes,
        "stored_bytes": info.stored_bytes,
        "record_size": info.record_size,
        "itemsize": info.itemsize,
    }


def reader_dict(uintptr_t handle, uintptr_t out, uint64_t capacity):
    return zr_reader_dict(_r(handle), <uint8_t *> out, capacity)


def reader_gather_dense(uintptr_t handle, uintptr_t idx, uint64_t count, uintptr_t out,
                        uint64_t out_size, uint32_t threads=0):
    cdef zr_status st
    cdef int rc
    with nogil:
        rc = zr_reader_gather_dense(_r(handle), <const uint64_t *> idx, count, <void *> out,
                                    out_size, threads, &st)
    if rc != 0:
        _fail(rc, &st)


def reader_shapes(uintptr_t handle, uintptr_t idx, uint64_t count, uintptr_t shapes,
                  uintptr_t sizes):
    cdef zr_status st
    cdef int rc
    with nogil:
        rc = zr_reader_shapes(_r(handle), <const uint64_t *> idx, count, <uint64_t *> shapes,
                              <uint64_t *> sizes, &st)
    if rc != 0:
        _fail(rc, &st)


def reader_gather_ragged(uintptr_t handle, uintptr_t idx, uint64_t count, uintptr_t out,
                         uintptr_t offsets, uint64_t out_size, uint32_t threads=0):
    cdef zr_status st
    cdef int rc
    with nogil:
        rc = zr_reader_gather_ragged(_r(handle), <const uint64_t *> idx, count, <void *> out,
                                     <const uint64_t *> offsets, out_size, threads, &st)
    if rc != 0:
        _fail(rc, &st)


def reader_verify(uintptr_t handle, uint64_t start, uint64_t count):
    cdef zr_status st
    cdef int rc
    with nogil:
        rc = zr_reader_verify(_r(handle), start, count, &st)
    if rc != 0:
        _fail(rc, &st)


def reader_close(uintptr_t handle):
    with nogil:
        zr_reader_close(_r(handle))


def reader_free(uintptr_t handle):
    with nogil:
        zr_reader_free(_r(handle))


def xxh64(uintptr_t data, uint64_t size):
    """XXH64 (seed 0) of `size` bytes at address `data`: the format's checksum."""
    cdef uint64_t h
    with nogil:
        h = zr_xxh64(<const void *> data, size)
    return h
