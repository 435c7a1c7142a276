# The Ragged collector of zrecord's binding, included into _native.pyx (so it is part of the one
# extension zrecord._native, and its names are that module's): `ragged_collect` moves records
# from the caller's iterator into a `RaggedChunk`, the pointer and shape arrays that
# `Writer.append_chunk` hands to zr_writer_append_ragged, without a Python-level step per record.
#
# Invariants:
# - A record is taken only if it is exactly what the store holds (an ndarray of the chunk's rank
#   and the store's dtype, native byte order, C-contiguous, aligned); anything else goes to the
#   caller's `fix`, which raises or returns a copy that is.
# - A record is held by reference only while nothing else can change its bytes before the chunk
#   is written; any other is copied into the chunk's staging buffer (`RaggedChunk`).
# - Nothing here calls the native core. The native write reads a chunk's pointer and shape
#   arrays inside `Writer.append_chunk`, under `with nogil`, after `RaggedChunk._resolve`
#   (nogil too) has turned staged offsets into addresses.
# It uses the binding's `zr_array_interface` and ARRAY_* flags, declared before the include.

from cpython.pycapsule cimport PyCapsule_GetPointer
from cpython.ref cimport PyObject, Py_REFCNT
from libc.stdint cimport uint8_t, uint64_t, uintptr_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy

cdef extern from "Python.h":
    # Part of the Limited API; declared with a raw pointer so that NULL (exhausted, or an
    # exception is set) is seen as such rather than turned into an error by Cython.
    PyObject *PyIter_Next(object it)
    PyObject *PyErr_Occurred()
    void Py_DecRef(PyObject *o)

from numpy import ndarray as _ndarray

# The ndarray type in a C variable: under the Limited API every use of a module-level name is
# a dictionary lookup, which cost more than the rest of `_take` for a small record.
cdef object _NDARRAY = _ndarray

import sys as _sys

# `_unshared` reads reference counts; the CPythons zrecord is tested on count every reference
# a frame or container holds. On others, records that are not immutable are always copied.
cdef bint _REFCOUNTS_TRUSTED = (3, 10) <= _sys.version_info[:2] <= (3, 13)


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
            if _map_kind(rec) != NOT_MAPPED:
                # Copied by fix (strided, say): the memory map it was read from has its
                # consumed pages released as well, as for records taken as they are.
                chunk.mapped.append(rec)
            rec = fix(rec, first + <uint64_t> chunk.count)
            if not _take(chunk, rec, kind, itemsize, Py_REFCNT(rec) == 1, exact):
                raise TypeError(f"zrecord: record {first + <uint64_t> chunk.count} is still not a "
                                f"C-contiguous, aligned, native-order array after conversion")
    return False
