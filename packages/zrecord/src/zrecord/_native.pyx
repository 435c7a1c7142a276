# cython: language_level=3, boundscheck=False, wraparound=False
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
from libc.stdint cimport uint8_t, uint32_t, uint64_t, uintptr_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, memset

from cpython.ref cimport PyObject, Py_REFCNT

cdef extern from "Python.h":
    # Part of the Limited API; declared with a raw pointer so that NULL (exhausted, or an
    # exception is set) is seen as such rather than turned into an error by Cython.
    PyObject *PyIter_Next(object it)
    PyObject *PyErr_Occurred()
    void Py_DecRef(PyObject *o)

from zrecord._capi cimport *

from numpy import ndarray as _ndarray

# The ndarray type in a C variable: under the Limited API every use of a module-level name is
# a dictionary lookup, which cost more than the rest of `_take` for a small record.
cdef object _NDARRAY = _ndarray

from zrecord import errors as _errors

import sys as _sys

# `_unshared` reads reference counts; the CPythons zrecord is tested on count every reference
# a frame or container holds. On others, records that are not immutable are always copied.
cdef bint _REFCOUNTS_TRUSTED = (3, 10) <= _sys.version_info[:2] <= (3, 13)


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


# The fields that open every NumPy array object (NumPy's PyArrayObject_fields, read directly by
# NumPy's own C API macros and unchanged from NumPy 1.7 to 2.x), at their offsets on a 64-bit
# CPython with the GIL: after the 16-byte object header come data, nd, dimensions, strides,
# base, descr and flags. Reading them costs a few loads where `__array_struct__` allocates a
# capsule and two blocks per array, which was most of `ragged_collect`'s time per record.
# `_probe_array_fields` checks every offset against `__array_struct__` at import; if anything
# differs (another NumPy, a free-threaded or 32-bit CPython), every record takes the capsule.
DEF FIELD_DATA = 16
DEF FIELD_ND = 24
DEF FIELD_DIMS = 32
DEF FIELD_BASE = 48
DEF FIELD_DESCR = 56
DEF FIELD_FLAGS = 64


cdef inline char *_field_ptr(object arr, Py_ssize_t offset) noexcept:
    return (<char *> <PyObject *> arr) + offset


cdef bint _probe_array_fields() except -1:
    """True if the fields of NumPy arrays sit at the offsets above, checked on arrays of
    several ranks, layouts, bases and dtypes against what `__array_struct__` reports."""
    import numpy as np
    cdef object capsule
    cdef zr_array_interface *ai
    cdef Py_ssize_t *dims
    cdef int i, nd, flags
    cdef int mask = ARRAY_C_CONTIGUOUS | ARRAY_ALIGNED | ARRAY_WRITEABLE
    if sizeof(void *) != 8 or _sys.implementation.name != "cpython" or \
            getattr(_sys, "_is_gil_enabled", lambda: True)() is False:
        return False
    base = np.arange(2 * 3 * 5, dtype=np.int32).reshape(2, 3, 5)
    probes = [base, base[:, 1:], base.T, base[1], np.zeros(0, np.float64),
              np.frombuffer(b"abcdefgh", np.uint8), np.ones((4, 1), np.int16)[::2]]
    for arr in probes:
        capsule = arr.__array_struct__
        ai = <zr_array_interface *> PyCapsule_GetPointer(capsule, NULL)
        nd = (<int *> _field_ptr(arr, FIELD_ND))[0]
        flags = (<int *> _field_ptr(arr, FIELD_FLAGS))[0]
        if (<void **> _field_ptr(arr, FIELD_DATA))[0] != ai.data or nd != ai.nd:
            return False
        if (flags & mask) != (ai.flags & mask):
            return False
        dims = (<Py_ssize_t **> _field_ptr(arr, FIELD_DIMS))[0]
        for i in range(nd):
            if dims[i] != ai.shape[i]:
                return False
        if (<PyObject **> _field_ptr(arr, FIELD_DESCR))[0] != <PyObject *> arr.dtype:
            return False
        if arr.base is None:
            if (<PyObject **> _field_ptr(arr, FIELD_BASE))[0] != NULL:
                return False
        elif (<PyObject **> _field_ptr(arr, FIELD_BASE))[0] != <PyObject *> arr.base:
            return False
    return True


cdef bint _ARRAY_FIELDS = _probe_array_fields()


def array_fields_readable():
    """Whether `ragged_collect` reads NumPy arrays' fields directly here (for tests)."""
    return bool(_ARRAY_FIELDS)


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


# Records below this many bytes are always copied into their chunk's staging buffer: the copy
# costs less than finding out whether the record could be held by reference.
DEF STAGE_ALWAYS_BYTES = 16384


cdef class RaggedChunk:
    """Records collected for one Ragged append call, filled by `ragged_collect` without a
    Python-level step per record: their data pointers and shapes, and for each record either
    the array itself (kept alive here) or a copy of its bytes in `stage`.

    A record is held by reference only when nothing can change its bytes before the chunk is
    written: records of a list or tuple (iterating one runs no code), and records whose memory
    is immutable (bytes, a read-only memory map) or reachable through nothing but the record
    itself (see `_unshared`). Anything else, such as a generator yielding one buffer refilled
    each time, is copied when it is taken ([R1] item 2). A staged record's pointer holds its
    offset in `stage` until `_resolve` turns it into an address, just before the write, since
    `stage` may move while it grows.
    """

    cdef uint64_t *ptrs
    cdef uint64_t *shapes
    cdef uint8_t *staged
    cdef uint8_t *stage
    cdef size_t stage_len
    cdef size_t stage_cap
    cdef Py_ssize_t cap
    cdef readonly Py_ssize_t count
    cdef readonly uint64_t nbytes
    cdef readonly int ndim
    cdef readonly list arrays
    # The records that are NumPy memory maps, whose consumed pages the writer releases
    # (zrecord._pages): looking for them among all records cost a microsecond per record.
    cdef readonly list mapped
    # The store's dtype object and item size, set by ragged_collect: records whose dtype is
    # this very object are read through their fields (`_take_plain`).
    cdef PyObject *descr
    cdef object dtype
    cdef uint64_t itemsize
    # Records copied into `stage` since the chunk was made, for tests and diagnostics.
    cdef readonly uint64_t copied
    # Set by ragged_collect for list and tuple sources, whose records are never copied.
    cdef public bint trusted

    def __init__(self, int ndim):
        self.ndim = ndim
        self.arrays = []
        self.mapped = []

    def __dealloc__(self):
        free(self.ptrs)
        free(self.shapes)
        free(self.staged)
        free(self.stage)

    def clear(self):
        self.count = 0
        self.nbytes = 0
        self.stage_len = 0
        self.arrays = []
        self.mapped = []

    cdef int _grow(self) except -1:
        cdef Py_ssize_t cap = max(64, 2 * self.cap)
        cdef uint64_t *p = <uint64_t *> realloc(self.ptrs, cap * sizeof(uint64_t))
        if p == NULL:
            raise MemoryError("zrecord: no memory for a Ragged append chunk")
        self.ptrs = p
        p = <uint64_t *> realloc(self.shapes, max(cap * self.ndim, 1) * sizeof(uint64_t))
        if p == NULL:
            raise MemoryError("zrecord: no memory for a Ragged append chunk")
        self.shapes = p
        cdef uint8_t *f = <uint8_t *> realloc(self.staged, cap)
        if f == NULL:
            raise MemoryError("zrecord: no memory for a Ragged append chunk")
        self.staged = f
        self.cap = cap
        return 0

    cdef int _stage(self, const void *data, size_t n) except -1:
        """Copy `n` bytes into the staging buffer; the record's pointer becomes its offset."""
        cdef size_t cap
        cdef uint8_t *p
        if self.stage_len + n > self.stage_cap:
            cap = max(<size_t> (1 << 20), 2 * self.stage_cap, self.stage_len + n)
            p = <uint8_t *> realloc(self.stage, cap)
            if p == NULL:
                raise MemoryError(f"zrecord: no memory to copy a {n}-byte Ragged record")
            self.stage = p
            self.stage_cap = cap
        if n:
            memcpy(self.stage + self.stage_len, data, n)
        self.ptrs[self.count] = self.stage_len
        self.staged[self.count] = 1
        self.stage_len += n
        self.copied += 1
        return 0

    cdef void _resolve(self) noexcept nogil:
        """Turn the offsets of staged records into addresses (once, before the write)."""
        cdef Py_ssize_t i
        for i in range(self.count):
            if self.staged[i]:
                self.ptrs[i] += <uint64_t> <uintptr_t> self.stage
                self.staged[i] = 0


cdef enum MapKind:
    NOT_MAPPED = 0
    MAPPED_READONLY = 1  # a NumPy memory map opened with mode "r": nothing here writes it
    MAPPED_WRITABLE = 2


cdef MapKind _map_kind(object arr) except *:
    """Whether `arr` is (a view of) a NumPy memory map, and of which kind. Plain ndarrays are
    answered without an attribute lookup, which costs as much as copying a small record."""
    if type(arr) is _NDARRAY or getattr(arr, "_mmap", None) is None:
        return NOT_MAPPED
    return MAPPED_READONLY if getattr(arr, "mode", None) == "r" else MAPPED_WRITABLE


cdef bint _readonly_map(object obj) except -1:
    return _map_kind(obj) == MAPPED_READONLY


cdef bint _unshared(object rec, bint alone) except -1:
    """True if nothing but the append can change the bytes of `rec` before they are written.

    `alone`: the caller's reference to `rec` is its only one. The memory is safe if it is
    immutable (a bytes object, a read-only memory map) anywhere along the chain of `.base`
    objects, or if `rec` is alone and every object of that chain is referenced by nothing but
    its successor: then no other code, a generator's frame included, can reach the memory.
    """
    cdef object obj = rec
    cdef object nxt = None
    alone = alone and _REFCOUNTS_TRUSTED
    while True:
        if type(obj) is bytes or (isinstance(obj, _NDARRAY) and _readonly_map(obj)):
            return True
        if not isinstance(obj, _NDARRAY):
            return False  # another exporter (bytearray, mmap, memoryview, ...) may be written
        nxt = obj.base
        if nxt is None:
            return alone
        # `nxt` is referenced by its successor along the chain and by the local `nxt` here.
        if Py_REFCNT(nxt) != 2:
            alone = False
        obj = nxt


cdef int _take_plain(RaggedChunk chunk, object arr, PyObject *descr, bint alone) except -1:
    """`_take` for an array of exactly type ndarray whose dtype object is `descr` (the store's
    own, so kind, size and byte order match), through its fields: 1 if taken, 0 if it must go
    the general way (another rank, not C-contiguous or not aligned)."""
    cdef int flags = (<int *> _field_ptr(arr, FIELD_FLAGS))[0]
    cdef int i
    cdef uint64_t n
    cdef Py_ssize_t *dims
    cdef void *data
    if (<int *> _field_ptr(arr, FIELD_ND))[0] != chunk.ndim or \
            (flags & (ARRAY_C_CONTIGUOUS | ARRAY_ALIGNED)) != (ARRAY_C_CONTIGUOUS | ARRAY_ALIGNED):
        return 0
    if chunk.count == chunk.cap:
        chunk._grow()
    dims = (<Py_ssize_t **> _field_ptr(arr, FIELD_DIMS))[0]
    n = chunk.itemsize
    for i in range(chunk.ndim):
        n *= <uint64_t> dims[i]
        chunk.shapes[chunk.count * chunk.ndim + i] = <uint64_t> dims[i]
    data = (<void **> _field_ptr(arr, FIELD_DATA))[0]
    # An array without a base owns its memory: unshared exactly when the caller's reference is
    # its only one (`_unshared`, whose other cases need the chain of bases).
    if chunk.trusted or (n >= STAGE_ALWAYS_BYTES and (
            _unshared(arr, alone) if (<PyObject **> _field_ptr(arr, FIELD_BASE))[0] != NULL
            else (alone and _REFCOUNTS_TRUSTED))):
        chunk.ptrs[chunk.count] = <uint64_t> <uintptr_t> data
        chunk.staged[chunk.count] = 0
        chunk.arrays.append(arr)
    else:
        chunk._stage(data, n)
    chunk.count += 1
    chunk.nbytes += n
    return 1


cdef int _take(RaggedChunk chunk, object arr, char kind, int itemsize, bint alone,
               object exact) except -1:
    """Add `arr` to `chunk` if it is exactly what the store takes; 0 if not (nothing added).
    `alone`: the caller's reference to `arr` is its only one (see `_unshared`). `exact`: a dtype
    that `arr`'s must equal, for kinds whose kind letter and item size do not say everything
    (a datetime's unit, a structured dtype beside V<n>); None for the others."""
    cdef object capsule
    cdef zr_array_interface *ai
    cdef uint64_t n
    cdef int i
    cdef MapKind mapped
    cdef int need = ARRAY_C_CONTIGUOUS | ARRAY_ALIGNED | ARRAY_NOTSWAPPED
    if chunk.descr != NULL and type(arr) is _NDARRAY and \
            (<PyObject **> _field_ptr(arr, FIELD_DESCR))[0] == chunk.descr:
        if _take_plain(chunk, arr, chunk.descr, alone):
            return 1
    if not isinstance(arr, _NDARRAY):
        return 0
    capsule = arr.__array_struct__
    ai = <zr_array_interface *> PyCapsule_GetPointer(capsule, NULL)
    if ai.two != 2 or ai.nd != chunk.ndim or ai.typekind != kind or ai.itemsize != itemsize \
            or (ai.flags & need) != need:
        return 0
    if exact is not None and arr.dtype != exact:
        return 0
    if chunk.count == chunk.cap:
        chunk._grow()
    n = <uint64_t> itemsize
    for i in range(ai.nd):
        n *= <uint64_t> ai.shape[i]
        chunk.shapes[chunk.count * chunk.ndim + i] = <uint64_t> ai.shape[i]
    mapped = _map_kind(arr)
    if chunk.trusted or mapped == MAPPED_READONLY or (n >= STAGE_ALWAYS_BYTES and
                                                      _unshared(arr, alone)):
        chunk.ptrs[chunk.count] = <uint64_t> <uintptr_t> ai.data
        chunk.staged[chunk.count] = 0
        chunk.arrays.append(arr)
    else:
        chunk._stage(ai.data, n)
        if mapped != NOT_MAPPED:
            chunk.arrays.append(arr)
    if mapped != NOT_MAPPED:
        chunk.mapped.append(arr)  # so that the writer releases the consumed pages
    chunk.count += 1
    chunk.nbytes += n
    return 1


cdef int raise_pending() except -1:
    """Propagate the exception that is already set (Cython checks for it on return)."""
    return -1


def ragged_collect(object it, RaggedChunk chunk, str dtype_kind, int itemsize,
                   Py_ssize_t max_records, uint64_t max_bytes, object fix, uint64_t first,
                   object exact=None, object dtype=None):
    """Move records from the iterator `it` into `chunk` until it holds `max_records` records
    or `max_bytes` bytes; return True once `it` is exhausted.

    A record taken as it is must be an ndarray of the chunk's ndim, of the store's numeric
    dtype (`dtype_kind`, `itemsize`, native byte order), C-contiguous and aligned. Anything
    else goes to `fix(record, record_number)` (numbered from `first`), which raises the
    user-facing error or returns a contiguous copy that is then taken. `exact`, if not None,
    is the store's dtype, which every record's must equal (datetime units, V<n>). `dtype`, the
    store's NumPy dtype, lets records of exactly that dtype object skip the array interface.
    """
    cdef char kind = ord(dtype_kind)
    cdef object rec
    cdef PyObject *p
    if dtype is not None and _ARRAY_FIELDS and dtype.itemsize == itemsize and \
            ord(dtype.kind) == kind and dtype.isnative:
        chunk.dtype = dtype  # keeps the object, and so the pointer, alive
        chunk.descr = <PyObject *> dtype
        chunk.itemsize = itemsize
    else:
        chunk.dtype = None
        chunk.descr = NULL
    while chunk.count < max_records and chunk.nbytes < max_bytes:
        p = PyIter_Next(it)
        if p == NULL:
            if PyErr_Occurred() != NULL:
                raise_pending()
            return True
        rec = <object> p  # a new reference of its own
        Py_DecRef(p)
        if not _take(chunk, rec, kind, itemsize, Py_REFCNT(rec) == 1, exact):
            rec = fix(rec, first + <uint64_t> chunk.count)
            if not _take(chunk, rec, kind, itemsize, Py_REFCNT(rec) == 1, exact):
                raise TypeError(f"zrecord: record {first + <uint64_t> chunk.count} is still not a "
                                f"C-contiguous, aligned, native-order array after conversion")
    return False


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
        for i in range(min(len(item_shape), 32)):
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

    def __cinit__(self, bytes path, uint32_t flags=0):
        cdef zr_status st
        cdef const char *cpath = path
        cdef int rc
        with nogil:
            rc = zr_reader_open_ex(cpath, flags, &self.r, &st)
        if rc != 0:
            _fail(rc, &st)

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
            if info.schema.kind == 1 else None,
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
                      uint32_t threads=0):
        """Gather record idx[i] to byte offset offsets[i] of the array `out`."""
        cdef zr_status st
        cdef int rc
        cdef uint64_t *ip
        cdef uint64_t *fp
        cdef void *op
        cdef uint64_t out_size
        _u64(idx, False, &ip, count)
        _u64(offsets, False, &fp, count)
        _buffer(out, True, &op, &out_size)
        with nogil:
            rc = zr_reader_gather_ragged(self.r, ip, count, op, fp, out_size, threads, &st)
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


def xxh64(object data):
    """XXH64 (seed 0) of a C-contiguous array's bytes: the format's checksum."""
    cdef uint64_t h
    cdef void *p
    cdef uint64_t n
    _buffer(data, False, &p, &n)
    with nogil:
        h = zr_xxh64(p, n)
    return h
