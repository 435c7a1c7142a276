"""The reference side of the zrecord format v1: a reader and a writer written from
spec/format-v1.md alone, with NumPy, `zstandard` and a pure-Python XXH64.

Nothing here imports zrecord; the point of this package is to be a second, independent reading
of the spec against which the native core and the conformance vectors are checked.
"""
