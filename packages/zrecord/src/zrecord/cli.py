"""The ``zrecord`` command line: inspect and check stores.

  zrecord info PATH          schema, counts, codec, shards, sizes, compression ratio; for a
                             folder, a table of the stores below it
  zrecord verify PATH        check every record's checksum (and that compressed records
                             decode); exit 1 naming the first corrupt record; for a folder,
                             every store below it, naming the stores that failed
  zrecord head PATH [-n N]   the first N records, summarised
  zrecord stats PATH         distribution of record sizes (and of shapes, for Ragged)

PATH may be a URL (``s3://BUCKET/PREFIX``, ``https://HOST/PATH``); every command that takes a
store's location takes ``--endpoint-url`` to reach it (one definition: ``_storage_arguments``).

Every command takes ``--json`` for output that scripts can parse: strict JSON (RFC 8259).
Errors print one line to stderr. Exit statuses (``zrecord.console``): 0 success; 1 PATH is
not a valid store (nothing there, a folder, an unfinished write, corrupt) or ``verify`` found
a corrupt record; 2 usage; 3 the system failed (I/O, permissions, memory) or ``verify`` could
not check every record; 4 ``publish``'s destination already holds a store (or another
publisher is publishing there); 130 Ctrl-C; 141 the reader of the output went away. Names and paths
(which come from disk) are printed with every character that is not printable escaped, so
that no name can drive the terminal.

Invariant: every command runs in memory bounded independently of record size. ``info`` and
``stats`` read no record data. The read API decodes a record whole, so ``head`` and ``verify``
decode at most one record at a time and only records of at most ``--max-record-bytes``
decoded bytes (``MAX_RECORD_BYTES_DEFAULT``); larger ones are described (shape, dtype, size)
but not decoded. ``head`` shows at most ``--values`` values of a record, never a Python list
of a whole large record, and streams its output.

What the bound costs: ``verify`` holds one decoded record (in the core's scratch buffer,
freed after each call), or for smaller records scratch buffers of at most
``_VERIFY_ALONE_BYTES`` per core (the core reads stored bytes through 16 MiB buffers too).
``head`` holds one decoded record plus the idle output buffers that the store recycles between
reads (at most 4, each of at most the limit plus 1/8), hence its lower default.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from zrecord import __version__
from zrecord._cost import BLOCK_BYTES_DEFAULT, PRICES, REQUEST_BYTES_MAX_DEFAULT, Price, epoch_cost
from zrecord._dataset import dataset_versions
from zrecord._kinds import Dense, Ragged
from zrecord._objects import is_url, redact
from zrecord._publish import Published, publish, publish_entries
from zrecord._reader import DenseReader, RaggedReader, open_store
from zrecord._tree import (
    DIRECTORIES_MAX,
    TEMPORARY_MARKER,
    WRITER_SAYS,
    Survey,
    has_store_files,
    is_store_dir,
    is_temporary_name,
    remote_survey,
    survey,
    unfinished_writes,
    writer_state,
)
from zrecord._types import StorageOptions
from zrecord.console import (
    EXIT_OK,
    EXIT_RUNTIME,
    EXIT_USAGE,
    PROGRESS_LINES_INTERVAL_S,
    HelpFormatter,
    epilog,
    message_of,
    paragraph,
    progress_bar,
    run_tool,
)
from zrecord.console import say as _say_raw
from zrecord.errors import (
    FormatError,
    NotPublishedError,
    StoreExistsError,
    StoreNotFoundError,
    StoreOSError,
    ZrecordError,
)

EXIT_INVALID = 1  # the store is not a valid store, or verification found it corrupt
EXIT_EXISTS = 4  # publish: the destination holds a store already (retrying will not help)
# The exit statuses of --help (console.STATUSES_COMMON follow).
STATUSES = [
    (EXIT_OK, "success"),
    (EXIT_INVALID, "PATH is not a valid store (nothing there, not a store, an unfinished\n"
                   "write, corrupt), or verify found a corrupt record"),
    (EXIT_USAGE, "usage error"),
    (EXIT_RUNTIME, "the system failed (I/O error, permission denied, out of memory), or\n"
                   "verify could not check every record (see --max-record-bytes)"),
    (EXIT_EXISTS, "publish: the URL already holds a published store (or another publisher\n"
                  "is publishing there)"),
]

# Records whose decoded size exceeds this are not decoded (flag --max-record-bytes): the read
# API decodes a record whole. `head` wants a few values and keeps recycled buffers, so it
# stops lower than `verify`, whose job is to check every record.
MAX_RECORD_BYTES_DEFAULT = {"head": 64 << 20, "verify": 256 << 20}
# Values `head` shows of each record (flag --values); NumPy's summarised print shows 3 + 3.
VALUES_DEFAULT = 6
# `verify` hands the native core about this many stored bytes per call (progress steps).
_VERIFY_CHUNK_BYTES = 64 << 20
# Compressed records of at least this decoded size are verified one per call: each of the
# core's workers decodes into a scratch buffer as large as its largest record, so this keeps
# one such buffer alive at a time.
_VERIFY_ALONE_BYTES = 16 << 20
# `verify` looks up record shapes this many records at a time (memory bounded by the count).
_SHAPES_RECORDS = 1 << 16
_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20,
               "g": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tib": 1 << 40}


def _count(text: str) -> int:
    """An argparse type: a count of 0 or more (a negative one is a usage error, exit 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid count {text!r}: not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"invalid count {text!r}: must be 0 or more")
    return value


def _byte_size(text: str) -> int:
    """An argparse type: a byte count, optionally with a binary unit (256M, 1GiB, 4096)."""
    match = re.fullmatch(r"\s*([0-9]+)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _SIZE_UNITS:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: give a number of bytes, "
                                         "optionally with K, M, G or T (binary: 1K = 1024)")
    return int(match.group(1)) * _SIZE_UNITS[unit]


def _positive_byte_size(text: str) -> int:
    """`_byte_size`, at least 1 byte."""
    size = _byte_size(text)
    if size < 1:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: at least 1 byte")
    return size


def _usd(text: str) -> float:
    """An argparse type: a price in US dollars, a finite number of at least 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"invalid price {text!r}: give a number of US dollars, "
                                         "0 or more")
    return value


def _dollars(value: float) -> str:
    """A price as given, to its last significant digit ($0.0006, not $0.001)."""
    return f"${value:,.6g}" if value < 1000 else f"${value:,.2f}"


def _shown(text: str) -> str:
    """`text` with every character that is not printable written as Python's repr writes it
    (``\\x1b``, ``\\n``, ``\\u202e``), and a byte of a name that is not UTF-8 (decoded by
    Python as a lone surrogate) as ``\\xNN``.

    Store names and paths come from disk and from other people's files: printed raw, an
    escape sequence in one would drive the terminal (recolour, retitle, move the cursor or
    hide the rest of the line), and a byte that is not UTF-8 would end the command with an
    encoding error. Backslashes are left alone, so that a message quoting a name with
    ``{name!r}`` is not escaped twice.
    """
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escaped(ch) for ch in text)


def _escaped(ch: str) -> str:
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:  # os.fsdecode turns a byte b that is not UTF-8 into U+DC00 + b
        return f"\\x{code - 0xDC00:02x}"
    return repr(ch)[1:-1]


def say(line: str) -> None:
    """One line on stderr (``zrecord.console.say``), with what is not printable escaped
    (`_shown`): error messages quote paths and names from disk."""
    _say_raw(_shown(line))


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.1f} {unit}" if unit != "B" else f"{int(n):,} B"
        n /= 1024
    return f"{n:,.1f} TiB"  # pragma: no cover - loop always returns


def _info(store: DenseReader | RaggedReader) -> dict[str, Any]:
    info = store.info()
    info["compression_ratio"] = (info["logical_bytes"] / info["stored_bytes"]
                                 if info["stored_bytes"] else None)
    return info


def cmd_info(store: DenseReader | RaggedReader, args: argparse.Namespace) -> int:
    """``zrecord info``: schema, counts, codec, shards, sizes and compression ratio."""
    info = _info(store)
    if args.json:
        print(_dumps(info))
        return 0
    shape = (f"item_shape {tuple(info['item_shape'])}" if info["kind"] == "Dense"
             else f"ndim {info['ndim']} (shapes vary per record)")
    ratio = info["compression_ratio"]
    print(f"{_shown(info['path'])}: {info['kind']} store, format {'.'.join(map(str, info['format_version']))}")
    print(f"  records       {info['records']:,}")
    print(f"  dtype         {info['dtype']}, {shape}")
    print(f"  codec         {info['codec']}" + (f" (dictionary {_human(info['dict_bytes'])})"
                                               if info["dict_bytes"] else ""))
    print(f"  data shards   {info['data_shards']}")
    print(f"  logical size  {_human(info['logical_bytes'])}")
    print(f"  stored size   {_human(info['stored_bytes'])}"
          + (f"  (compression ratio {ratio:.2f}x)" if ratio else ""))
    return 0


def _decoded_bytes(store: DenseReader | RaggedReader, start: int, stop: int) -> np.ndarray:
    """Decoded bytes of records ``[start, stop)`` as float64 (exact below 2**53, and a shape
    from a hostile header cannot overflow it); no record data is read."""
    itemsize = store.dtype.itemsize
    if isinstance(store, Dense):
        return np.full(stop - start, float(math.prod(store.item_shape) * itemsize))
    # shapes() gives the axes as int64; view them as the unsigned values they are.
    shapes = store.shapes(slice(start, stop)).view(np.uint64)
    sizes: np.ndarray = shapes.astype(np.float64).prod(axis=1) * itemsize
    sizes[(shapes == 0).any(axis=1)] = 0.0
    return sizes


def _verify_runs(store: DenseReader | RaggedReader, limit: int) -> Iterator[tuple[int, int, bool]]:
    """(start, stop, skip) runs that cover every record in order: records to verify in one
    native call (skip False), or records above `limit` that are not decoded (skip True).

    A raw record is hashed where it lies (no decode buffer), so raw stores have no skips.
    """
    n = len(store)
    mean = store.stored_bytes / n if n else 1.0
    step = max(1, int(_VERIFY_CHUNK_BYTES // max(1.0, mean)))
    if store.codec == "raw":
        for start in range(0, n, step):
            yield start, min(n, start + step), False
        return
    for base in range(0, n, _SHAPES_RECORDS):
        sizes = _decoded_bytes(store, base, min(n, base + _SHAPES_RECORDS))
        # 0: verify in chunks, 1: verify alone, 2: skip.
        kind = np.where(sizes > limit, 2, np.where(sizes >= _VERIFY_ALONE_BYTES, 1, 0))
        bounds = [0, *(np.flatnonzero(np.diff(kind)) + 1).tolist(), len(kind)]
        for a, b in zip(bounds, bounds[1:]):
            k, a, b = int(kind[a]), base + a, base + b
            if k == 2:
                yield a, b, True
            else:
                for start in range(a, b, 1 if k == 1 else step):
                    yield start, min(b, start + (1 if k == 1 else step)), False


def _verify_store(store: DenseReader | RaggedReader, args: argparse.Namespace,
                  desc: str) -> tuple[int, dict[str, Any], str]:
    """Check every record of `store`, showing progress as `desc`: (exit status, the result
    for --json, the line for people)."""
    n = len(store)
    limit = args.max_record_bytes
    started = time.perf_counter()
    checked = skipped = 0
    first_skipped: int | None = None
    try:
        # A corrupt record ends the bar by the exception, so no "done" line follows it.
        with progress_bar(not args.json and not args.quiet, n, desc) as advance:
            for start, stop, skip in _verify_runs(store, limit):
                if skip:
                    skipped += stop - start
                    first_skipped = start if first_skipped is None else first_skipped
                else:
                    store.verify(start, stop)
                    checked += stop - start
                advance(stop - start)
    except ZrecordError as exc:
        if isinstance(exc, (MemoryError, StoreOSError)):
            raise  # the store could not be checked; nothing says it is corrupt
        return EXIT_INVALID, {"path": store.path, "ok": False, "records_checked": checked,
                              "records_skipped": skipped, "record": exc.record,
                              "shard": exc.shard, "error": str(exc)}, f"CORRUPT: {exc}"
    seconds = time.perf_counter() - started
    if skipped:
        assert first_skipped is not None
        size = _human(float(_decoded_bytes(store, first_skipped, first_skipped + 1)[0]))
        message = (f"{checked:,} of {n:,} records checked, no corruption found; {skipped:,} "
                   f"decode to more than --max-record-bytes ({_human(limit)}) and were not "
                   f"checked (the first: record {first_skipped}, {size}). verify decodes a "
                   "compressed record whole: raise --max-record-bytes to check them, with "
                   "that much memory free")
        return EXIT_RUNTIME, {"path": store.path, "ok": None, "records_checked": checked,
                              "records_skipped": skipped, "first_skipped": first_skipped,
                              "max_record_bytes": limit, "seconds": seconds,
                              "error": message}, f"INCOMPLETE: {message}"
    return EXIT_OK, {"path": store.path, "ok": True, "records_checked": n, "records_skipped": 0,
                     "seconds": seconds}, (f"OK: {n:,} records, {_human(store.stored_bytes)} "
                                           f"checked in {seconds:.2f} s")


def cmd_verify(store: DenseReader | RaggedReader, args: argparse.Namespace) -> int:
    """``zrecord verify``: every checksum; exit status 1 naming the first corrupt record."""
    status, result, line = _verify_store(store, args, _shown(store.path))
    print(_dumps(result) if args.json else _shown(line))
    return status


def _verify_one_of(args: argparse.Namespace, root: str,
                   rel: str) -> tuple[int, dict[str, Any], str]:
    """Verify the store at `rel` below folder `root`; a store that does not open, or that
    the system fails to read, is a result too, so that the other stores are still checked."""
    where = f"{root.rstrip('/')}/{rel}" if is_url(root) else os.path.join(root, rel)
    try:
        with open_store(where, storage_options=_storage_options(args) or None) as store:
            status, result, line = _verify_store(store, args, _shown(rel))
    except BrokenPipeError:
        raise  # the reader went away: run_tool ends the command quietly
    except (ZrecordError, OSError, MemoryError) as exc:
        status = _status_of(exc)
        what = "ERROR" if status == EXIT_RUNTIME else "NOT A VALID STORE"
        result, line = {"ok": None if status == EXIT_RUNTIME else False,
                        "error": str(exc)}, f"{what}: {exc}"
    return status, {**result, "path": rel}, f"{rel}: {line}"


def _verify_folder(args: argparse.Namespace, path: str, found: Survey) -> int:
    """``zrecord verify FOLDER``: verify every store below the folder, one after the other.
    Exit 1 when a store is corrupt or not a valid store, else 3 when one could not be
    checked whole, else 0; the last line names the stores that failed."""
    started = time.perf_counter()
    results: list[dict[str, Any]] = []
    failed: list[str] = []
    statuses = set()
    for entry in found.stores:
        status, result, line = _verify_one_of(args, path, entry["path"])
        results.append(result)
        if status != EXIT_OK:
            failed.append(entry["path"])
        statuses.add(status)
        if not args.json:
            print(_shown(line), flush=True)  # each store as it is done, in step with the progress
    for problem in found.problems:
        failed.append(problem["path"])
        statuses.add(problem["status"])
    status = (EXIT_INVALID if EXIT_INVALID in statuses or not found.stores
              else EXIT_RUNTIME if EXIT_RUNTIME in statuses else EXIT_OK)
    if args.json:
        print(_dumps({"path": path, "kind": "folder",
                      "ok": {EXIT_OK: True, EXIT_RUNTIME: None}.get(status, False),
                      "stores": results, "datasets": found.datasets, "failed": failed,
                      "unfinished": found.unfinished,
                      "problems": [{"path": p["path"], "error": p["error"]}
                                   for p in found.problems],
                      "links_not_followed": found.links_not_followed,
                      "truncated": found.truncated,
                      "seconds": time.perf_counter() - started}))
        return status
    _print_leftovers(found, args.max_depth)
    n, ok = len(found.stores), sum(r["ok"] is True for r in results)
    d = len(found.datasets)
    datasets = f"; {d:,} dataset{'s' if d != 1 else ''} whose parts match their manifest" if d else ""
    print(_shown(f"{path}: {ok:,} of {n:,} store{'s' if n != 1 else ''} OK{datasets}"
                 + (f"; FAILED: {', '.join(failed)}" if failed else "")))
    return status


# JSON (RFC 8259) has no NaN or infinities; they are written as these strings (the spellings
# of JavaScript and of Python's float()), so every output parses with any strict parser.
_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _finite_or_name(value: Any) -> Any:
    """`value` (nested lists of Python numbers) with every non-finite float replaced by its
    name in ``_NON_FINITE``."""
    if isinstance(value, list):
        return [_finite_or_name(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return _NON_FINITE[repr(value)]
    return value


def _json_values(record: Any) -> Any:
    """A record's values as JSON: nested lists, complex numbers as [real, imag] pairs (JSON
    has no complex type; found by the fuzzer), non-finite floats as "NaN", "Infinity" and
    "-Infinity" (JSON has no such numbers), and [] for an empty record whatever its shape:
    nested empty lists for a shape like (2**24, 0) would be millions of Python lists (also
    found by the fuzzer)."""
    arr = _printable(np.asarray(record))
    if arr.size == 0:
        return []
    if arr.dtype.kind == "c":
        arr = np.stack([arr.real, arr.imag], axis=-1)
    if arr.dtype.kind in "MmSV":
        # JSON has no time, duration or bytes type: ISO 8601 times ("NaT" for NaT), durations
        # as NumPy writes them ("5 seconds"), S<n> as ASCII with escapes, V<n> as hex.
        flat = arr.reshape(-1)
        if arr.dtype.kind == "M":
            shown = np.datetime_as_string(flat).tolist()
        elif arr.dtype.kind == "m":
            shown = [str(v) for v in flat]
        elif arr.dtype.kind == "S":
            shown = [v.decode("ascii", "backslashreplace") for v in flat.tolist()]
        else:
            shown = [bytes(v).hex() for v in flat.tolist()]
        return np.array(shown, dtype=object).reshape(arr.shape).tolist()
    values = arr.tolist()
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        values = _finite_or_name(values)
    return values


def _printable(arr: np.ndarray) -> np.ndarray:
    """`arr`, or for a str array holding UCS-4 code units above U+10FFFF (valid in a store,
    spec [ZR-GEN-008], but beyond what NumPy can turn into Python text), an object array of the
    same strings with each such unit written as an escape."""
    if arr.dtype.kind != "U" or arr.size == 0:
        return arr
    units = np.ascontiguousarray(arr).view("<u4").reshape(*arr.shape, -1)
    if int(units.max()) <= 0x10FFFF:
        return arr
    chars = units.shape[-1]
    flat = units.reshape(-1, chars)
    out = np.empty(len(flat), dtype=object)
    for k, row in enumerate(flat.tolist()):
        while row and row[-1] == 0:
            row.pop()
        out[k] = "".join(chr(u) if u <= 0x10FFFF else f"\\U{u:08x}" for u in row)
    return out.reshape(arr.shape)


def _dumps(value: Any) -> str:
    """Strict JSON: a non-finite float that escaped ``_json_values`` is a bug, not output."""
    return json.dumps(value, allow_nan=False)


class _Shown:
    """What `head` shows of one record: its description and at most `--values` values.

    `values` is the whole record when it has at most that many values; otherwise `head` and
    `tail` are its first and last ``values // 2`` values, flat in row-major order. A record
    above ``--max-record-bytes`` is not decoded (`read` is False) and shows no values.
    """

    def __init__(self, index: int, shape: tuple[int, ...], dtype: np.dtype[Any],
                 nbytes: int) -> None:
        self.index, self.shape, self.dtype, self.nbytes = index, shape, dtype, nbytes
        self.read = False
        self.values: np.ndarray | None = None
        self.head: np.ndarray = np.empty(0, dtype)
        self.tail: np.ndarray = np.empty(0, dtype)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"index": self.index, "shape": list(self.shape),
                               "dtype": str(self.dtype), "nbytes": self.nbytes,
                               "read": self.read, "truncated": self.values is None}
        if self.values is None:
            out["head"] = _json_values(self.head)
            out["tail"] = _json_values(self.tail)
        else:
            out["values"] = _json_values(self.values)
        return out

    def to_text(self, limit: int) -> str:
        title = f"[{self.index}] shape {self.shape} {self.dtype}"
        if not self.read:
            return (f"{title}, {_human(self.nbytes)}: not read (above --max-record-bytes "
                    f"{_human(limit)})")
        if self.values is not None:
            text = np.array2string(_printable(self.values), threshold=sys.maxsize, max_line_width=100)
        elif self.head.size == 0:
            text = "[...]"
        else:
            # NumPy's own summary of a 1-D array whose middle (one filler value, never shown)
            # stands for the values left out, so the values read like NumPy's print.
            edge = self.head.size
            row = _printable(np.concatenate([self.head, self.head[:1], self.tail]))
            text = np.array2string(row, threshold=2 * edge, edgeitems=edge, max_line_width=100)
        return f"{title}:\n  " + text.replace("\n", "\n  ")


def _describe(store: DenseReader | RaggedReader, i: int) -> _Shown:
    """Record `i`'s shape and decoded size, from the index alone (no record data read)."""
    if isinstance(store, Ragged):
        shape = tuple(int(d) for d in store.shapes(i)[0].view(np.uint64))
    else:
        shape = store.item_shape
    return _Shown(i, shape, store.dtype, math.prod(shape) * store.dtype.itemsize)


def _show(store: DenseReader | RaggedReader, i: int, values: int, limit: int) -> _Shown:
    shown = _describe(store, i)
    if shown.nbytes > limit:
        return shown
    record = store[i]
    flat = record.reshape(-1)
    shown.read = True
    if flat.size <= values:
        shown.values = np.array(record)
    else:
        edge = values // 2
        shown.head = flat[:edge].copy()
        shown.tail = flat[flat.size - edge:].copy()
    # Only copies survive: the decoded record goes back to the store's buffer pool now.
    del record, flat
    return shown


def cmd_head(store: DenseReader | RaggedReader, args: argparse.Namespace) -> int:
    """``zrecord head``: the first ``-n`` records, at most ``--values`` values of each."""
    count = min(args.n, len(store))
    limit = args.max_record_bytes
    not_read: list[_Shown] = []
    out = sys.stdout
    for i in range(count):
        shown = _show(store, i, args.values, limit)
        if not shown.read:
            not_read.append(shown)
        if args.json:
            # Streamed record by record, so output memory does not grow with -n either.
            out.write(("[\n" if i == 0 else ",\n") + _dumps(shown.to_json()))
        else:
            out.write(shown.to_text(limit) + "\n")
    if args.json:
        out.write("\n]\n" if count else "[]\n")
    if not_read:
        first = not_read[0]
        print(f"zrecord head: {len(not_read)} record(s) decode to more than --max-record-bytes "
              f"({_human(limit)}) and were not read (the first: record {first.index}, "
              f"{_human(first.nbytes)}); a record is decoded whole, so raise the limit to see "
              "their values with that much memory free", file=sys.stderr)
    return 0


def _distribution(values: np.ndarray) -> dict[str, float]:
    if values.size == 0:
        return {}
    q = np.percentile(values, [0, 10, 50, 90, 100])
    return {"min": float(q[0]), "p10": float(q[1]), "median": float(q[2]), "p90": float(q[3]),
            "max": float(q[4]), "mean": float(values.mean())}


def cmd_stats(store: DenseReader | RaggedReader, args: argparse.Namespace) -> int:
    """``zrecord stats``: the distribution of record sizes."""
    n = len(store)
    stats: dict[str, Any] = {"path": store.path, "kind": store.info()["kind"], "records": n}
    if isinstance(store, Ragged):
        shapes = store.shapes()
        sizes = shapes.prod(axis=1) * store.dtype.itemsize if n else np.zeros(0)
        stats["record_bytes"] = _distribution(sizes.astype(np.float64))
        stats["axes"] = [_distribution(shapes[:, k].astype(np.float64))
                         for k in range(store.ndim)]
        stats["empty_records"] = int((sizes == 0).sum()) if n else 0
    else:
        size = int(np.prod(store.item_shape, dtype=np.int64)) * store.dtype.itemsize
        stats["record_bytes"] = {"all": size}
    stats["stored_bytes_per_record"] = store.stored_bytes / n if n else 0
    if args.json:
        print(_dumps(stats))
        return 0
    print(f"{_shown(store.path)}: {stats['kind']}, {n:,} records")
    rb = stats["record_bytes"]
    if "all" in rb:
        print(f"  record size   {_human(rb['all'])} (fixed)")
    elif rb:
        print("  record size   " + ", ".join(f"{k} {_human(v)}" for k, v in rb.items()))
        for k, axis in enumerate(stats["axes"]):
            print(f"  axis {k}        " + ", ".join(f"{name} {v:,.1f}" for name, v in axis.items()))
        print(f"  empty records {stats['empty_records']:,}")
    print(f"  stored/record {_human(stats['stored_bytes_per_record'])}")
    return 0


def cmd_cost(store: DenseReader | RaggedReader, args: argparse.Namespace) -> int:
    """``zrecord cost``: what one epoch over the store costs in object storage."""
    price, price_name = PRICES[args.price], args.price
    if args.usd_per_million_gets is not None or args.usd_per_gb is not None:
        # The one given replaces its part of --price's; the other part stays.
        gets = price.usd_per_million_gets if args.usd_per_million_gets is None else args.usd_per_million_gets
        per_gb = price.usd_per_gb if args.usd_per_gb is None else args.usd_per_gb
        price = Price(gets, per_gb)
        price_name = f"{args.price} with the given prices"
    rows = epoch_cost(store, block_bytes=args.block_bytes, gap_bytes=args.gap_bytes,
                      request_bytes_max=args.request_bytes_max, price=price)
    if args.json:
        print(_dumps({"path": store.path, "price": {"name": price_name, **vars(price)},
                      "epochs": [r.as_dict() for r in rows]}))
        return 0
    print(f"{_shown(store.path)}: {len(store):,} records, {_human(store.stored_bytes)} stored; "
          f"one epoch at {price_name} ({_dollars(price.usd_per_million_gets)} per million "
          f"GETs, {_dollars(price.usd_per_gb)} per GB):")
    for r in rows:
        how = r.how if r.block_records is None else f"blocks of {r.block_records:,} records"
        print(f"  {how:<28} {r.requests:>14,} GETs  {_human(r.bytes):>12}  "
              f"x{r.amplification:.2f}  ${r.usd:,.4f}")
        if r.blocks is not None and r.runs is not None and r.runs > r.blocks:
            # A dataset's blocks also break where its parts do, whatever their layout.
            why = ("its parts' ends and their layout split its blocks" if hasattr(store, "parts")
                   else "the store's layout splits its blocks")
            print(f"    {r.blocks:,} blocks whose records lie in {r.runs:,} runs stored back to back "
                  f"({r.runs / r.blocks:.2f} a block,\n    a request or more each): {why} (see the "
                  "object storage guide,\n    \"Laying out a store for reading by blocks\")")
    return 0


COMMANDS = {"info": cmd_info, "verify": cmd_verify, "head": cmd_head, "stats": cmd_stats,
            "cost": cmd_cost}

# What each command does, for --help (plain text: argparse prints it as it is).
_SUMMARIES = {
    "info": "schema, counts, codec, shards, sizes and compression ratio of a store; for a "
            "folder that is not a store, a table of the stores below it",
    "verify": "check every record's checksum (and that compressed records decode); for a "
              "folder that is not a store, of every store below it",
    "head": "the first records, at most --values values of each",
    "stats": "distribution of record sizes (and of shapes, for Ragged stores)",
    "cost": "the ranged GETs, bytes and dollars of one epoch over the store in object storage: "
            "read record by record (a uniform shuffle: the most it costs), and by blocks of "
            "consecutive records (loaderx's Sampler mode BLOCKS: the fewest, which a run "
            "nears only through a mirror with a cache_bytes budget of two windows or more), "
            "counted from where the records lie",
}
_EXAMPLES = {
    "info": [("zrecord info data/mnist/train/image", "one store"),
             ("zrecord info data/mnist", "every store below a folder, as a table"),
             ("zrecord info s3://b/mnist/train/image --endpoint-url http://minio:9000",
              "a store in a MinIO-style server (any command but publish reads a URL)"),
             ("zrecord info data/mnist --json", "the same for scripts")],
    "verify": [("zrecord verify data/mnist/train/image", "exit status 0: every record intact"),
               ("zrecord verify data/mnist", "every store below a folder"),
               ("zrecord verify STORE --json", "one JSON object, no progress"),
               ("zrecord verify STORE --max-record-bytes 2G", "also decode records up to 2 GiB")],
    "head": [("zrecord head STORE -n 3", "the first 3 records, summarised"),
             ("zrecord head STORE --values 20 --json", "up to 20 values of each, as JSON"),
             ("zrecord head STORE -n 100 | head -5", "a closed pipe ends it quietly")],
    "stats": [("zrecord stats STORE", "record sizes: min, p10, median, p90, max, mean"),
              ("zrecord stats STORE --json", "the same for scripts")],
    "cost": [("zrecord cost s3://bucket/corpora/tokens", "per record and by 8 MiB blocks, S3 prices"),
             ("zrecord cost STORE --block-bytes 64M --price gcs-standard", "larger blocks, GCS"),
             ("zrecord cost STORE --usd-per-million-gets 0.2 --json", "your own price, as JSON")],
    "publish": [("zrecord publish data/tokens s3://bucket/corpora/tokens", "upload, header last"),
                ("zrecord publish data/mnist s3://bucket/mnist",
                 "every store below a folder (a converted dataset), provenance.json last"),
                ("zrecord publish STORE s3://b/p --endpoint-url http://minio:9000",
                 "to a MinIO-style server"),
                ("zrecord info s3://bucket/corpora/tokens", "any command reads a URL too")],
}
# Levels below a folder that `info` and `verify` search for stores (flag --max-depth): a converted
# dataset keeps its stores two levels down (ROOT/split/column).
TREE_DEPTH_DEFAULT = 6


def _storage_arguments(p: argparse.ArgumentParser) -> None:
    """The options of a command that takes a store's location, to reach it in object storage
    (``storage_options`` of the API, read by `_storage_options`): one definition for every
    command, ``publish`` included."""
    p.add_argument("--endpoint-url", metavar="URL", default=None,
                   help="for an s3:// URL: an S3-compatible server (MinIO, Ceph, R2, ...) "
                        "instead of AWS (else AWS_ENDPOINT_URL, if set)")


def _storage_options(args: argparse.Namespace) -> StorageOptions:
    """The ``storage_options`` that the options of `_storage_arguments` give."""
    return {"endpoint_url": args.endpoint_url} if args.endpoint_url else {}


# What a folder of stores given as PATH means, for the commands that take one.
_FOLDER_HELP = {"info": "listed as a table", "verify": "each verified"}


def _path_help(command: str) -> str:
    """What PATH may be for `command`: a store, a folder of stores where it takes one (and
    then an s3:// prefix of stores too), or a URL."""
    folder = _FOLDER_HELP.get(command)
    if folder is None:
        return "a store (a folder holding header.zrh); or a URL: s3://BUCKET/PREFIX, https://HOST/PATH"
    return (f"a store (a folder holding header.zrh); or a folder of stores, {folder}; or a URL: "
            "s3://BUCKET/PREFIX (also a prefix of stores, as a folder), https://HOST/PATH")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="zrecord", formatter_class=HelpFormatter,
        description=paragraph("Inspect and check zrecord stores. Every command takes --json "
                              "for output that scripts can parse (strict JSON, RFC 8259)."),
        epilog=epilog(STATUSES, [e for name in COMMANDS for e in _EXAMPLES[name][:1]]))
    ap.add_argument("--version", action="version", version=f"zrecord {__version__}",
                    help="print the version of zrecord and exit")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands",
                            help="one of these; zrecord COMMAND --help tells more")
    for name in COMMANDS:
        summary = _SUMMARIES[name]
        p = sub.add_parser(name, help=summary,
                           description=paragraph(summary[:1].upper() + summary[1:] + "."),
                           formatter_class=HelpFormatter,
                           epilog=epilog(STATUSES, _EXAMPLES[name]))
        p.add_argument("path", metavar="PATH", help=_path_help(name))
        _storage_arguments(p)
        p.add_argument("--json", action="store_true",
                       help="machine-readable output, strict JSON (RFC 8259)"
                            + (": non-finite values as \"NaN\", \"Infinity\", \"-Infinity\", "
                               "complex ones as [real, imag]" if name == "head" else ""))
        if name in ("info", "verify"):
            p.add_argument("--max-depth", type=_count, default=TREE_DEPTH_DEFAULT, metavar="N",
                           help="when PATH is a folder: look for stores at most N levels "
                                "below it (symbolic links are not followed)")
        if name == "head":
            p.add_argument("-n", type=_count, default=5, metavar="N",
                           help="records to show, 0 or more")
            p.add_argument("--values", type=_count, default=VALUES_DEFAULT, metavar="N",
                           help="values to show per record: a record of at most N values is "
                                "shown whole, a longer one as its first and last N//2 values "
                                "in row-major order")
        if name in ("head", "verify"):
            what = ("a record's values are not shown" if name == "head"
                    else "a record is not checked, and verify exits 3")
            p.add_argument("--max-record-bytes", type=_byte_size, metavar="SIZE",
                           default=f"{MAX_RECORD_BYTES_DEFAULT[name] >> 20}M",
                           help="decode no record larger than SIZE bytes (e.g. 64M, 2G; "
                                "binary units): a record is decoded whole, so this bounds the "
                                f"memory used; above it {what}"
                                + ("" if name == "head" else " (raw stores need no decoding "
                                   "and are always checked whole)"))
        if name == "cost":
            p.add_argument("--block-bytes", type=_positive_byte_size, default=BLOCK_BYTES_DEFAULT,
                           metavar="SIZE", help="stored bytes of a block (binary units: 8M), "
                           "as loaderx.sampler.block_records(store, block_bytes) sizes it")
            p.add_argument("--gap-bytes", type=_byte_size, default=0, metavar="SIZE",
                           help="neighbouring records of one shard at most SIZE apart share a "
                                "request (the gap is downloaded too)")
            p.add_argument("--request-bytes-max", type=_positive_byte_size, metavar="SIZE",
                           default=REQUEST_BYTES_MAX_DEFAULT, help="the largest request")
            p.add_argument("--price", choices=sorted(PRICES), default="s3-standard",
                           help="list prices: " + "; ".join(f"{k}: {v.source}"
                                                            for k, v in PRICES.items()))
            p.add_argument("--usd-per-million-gets", type=_usd, default=None, metavar="USD",
                           help="your price of a million GETs (instead of --price's)")
            p.add_argument("--usd-per-gb", type=_usd, default=None, metavar="USD",
                           help="your price of a GB transferred (instead of --price's)")
        if name == "verify":
            p.add_argument("-q", "--quiet", action="store_true",
                           help="no progress on stderr (else a bar on a terminal, and "
                                f"elsewhere a line every {PROGRESS_LINES_INTERVAL_S:.0f} s and "
                                "one per store checked; none with --json)")
    _publish_parser(sub)
    return ap


_PUBLISH_SUMMARY = ("upload a local store, or every store below a folder, to object storage so "
                    "that no reader sees one half uploaded: verified first, header.zrh last, "
                    "never over a published store")


def _publish_parser(sub: Any) -> None:
    p = sub.add_parser("publish", help=_PUBLISH_SUMMARY, formatter_class=HelpFormatter,
                       description=paragraph(_PUBLISH_SUMMARY[:1].upper() + _PUBLISH_SUMMARY[1:]
                                             + ". A folder's stores go to URL/<their path "
                                             "below PATH>, then the files directly in it "
                                             "(provenance.json); publishing a folder again "
                                             "skips what is there already. Credentials, "
                                             "region and endpoint come as AWS's tools take "
                                             "them (AWS_* variables, ~/.aws/credentials, "
                                             "AWS_PROFILE)."),
                       epilog=epilog(STATUSES, _EXAMPLES["publish"]))
    p.add_argument("path", metavar="PATH",
                   help="the local store to upload, or a folder of stores (such as "
                        "loaderx-convert's output)")
    p.add_argument("url", metavar="URL", help="where: s3://BUCKET/PREFIX")
    _storage_arguments(p)
    p.add_argument("--json", action="store_true",
                   help="machine-readable output, strict JSON (RFC 8259), errors included")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")


def _publish(args: argparse.Namespace) -> int:
    """zrecord publish PATH URL: a store, or every store below a folder (one line each)."""
    options = _storage_options(args)
    url = redact(args.url)
    result: dict[str, Any] = {"path": args.path, "url": url}
    progress = not (args.quiet or args.json)

    def line(entry: Published) -> None:
        if not args.json:
            digest = f" (digest {entry.digest})" if entry.digest else ""
            print(_shown(f"{entry.path}: {entry.state} at {entry.url}{digest}"), flush=True)

    try:
        if os.path.isdir(args.path) and not is_store_dir(args.path):
            entries = publish_entries(args.path, args.url, storage_options=options,
                                      progress=progress, verify=True, on_entry=line)
            result.update(kind="folder", stores=[vars(e) for e in entries if e.digest],
                          files=[vars(e) for e in entries if not e.digest])
        else:
            result.update(kind="store", digest=publish(args.path, args.url, storage_options=options,
                                                       progress=progress))
    except (ZrecordError, OSError, MemoryError, ValueError, ImportError) as exc:
        status = (EXIT_EXISTS if isinstance(exc, StoreExistsError)
                  else EXIT_USAGE if isinstance(exc, (ValueError, ImportError))
                  and not isinstance(exc, (FormatError, ZrecordError)) else _status_of(exc))
        if args.json:
            print(_dumps({**result, "ok": False, "status": status, "error": str(exc)}))
        say(f"zrecord publish: {message_of(exc)}")
        return status
    if args.json:
        print(_dumps({**result, "ok": True}))
    elif result["kind"] == "store":
        print(_shown(f"{args.path} published at {url} (digest {result['digest']})"))
    else:
        print(_shown(f"{args.path}: {len(result['stores'])} store(s) and {len(result['files'])} "
                     f"file(s) at {url}"))
    return EXIT_OK


def _status_of(exc: BaseException) -> int:
    """The exit status for an error: the system's failures are runtime errors (3); everything
    the store's files say, nothing at PATH included, makes it not a valid store (1)."""
    if isinstance(exc, MemoryError):
        return EXIT_RUNTIME
    if isinstance(exc, StoreNotFoundError):
        return EXIT_INVALID
    return EXIT_RUNTIME if isinstance(exc, OSError) else EXIT_INVALID


def _target_of(temporary: str) -> str:
    """The store path a temporary directory ``.NAME.zr-tmp-*`` was to be published at."""
    parent, base = os.path.split(os.path.normpath(temporary))
    return os.path.join(parent, base[1:1 + base[1:].index(TEMPORARY_MARKER)])


def _unfinished(args: argparse.Namespace, path: str) -> int:
    """PATH is a writer's temporary directory: say so, and whether its writer is alive."""
    state = writer_state(os.path.normpath(path))
    if args.command == "info" and args.json:
        print(_dumps({"path": path, "kind": "unfinished", "writer": state,
                      "target": _target_of(path)}))
    else:
        say(f"zrecord {args.command}: {path!r} is an unfinished or aborted write of "
            f"{_target_of(path)!r}, not a store; {WRITER_SAYS[state]}")
    return EXIT_INVALID


def _holds_manifests(path: str, options: StorageOptions, exc: BaseException) -> bool:
    """Whether an s3:// prefix where no store opened (`exc`: none there) holds a dataset's
    manifests: one listing, made only then (a local folder is seen by is_dataset, a web
    server cannot be listed)."""
    if not path.startswith("s3://") or not isinstance(exc, (StoreNotFoundError, NotPublishedError)):
        return False
    try:
        return bool(dataset_versions(path, storage_options=options or None))
    except (ZrecordError, OSError, ValueError):
        return False  # the store's own error says more


def _not_a_store(args: argparse.Namespace, exc: BaseException) -> int:
    """`open_store` failed with `exc`: explain what lies at PATH instead, and how to go on."""
    path, command = args.path, f"zrecord {args.command}"
    if isinstance(exc, StoreNotFoundError) and not os.path.lexists(path):
        writes = unfinished_writes(path)
        if writes:
            temporary, state = writes[0]
            if args.command == "info" and args.json:
                # What `info --json` prints for the temporary itself, about the first one.
                print(_dumps({"path": temporary, "kind": "unfinished", "writer": state,
                              "target": path, "unfinished_writes": len(writes)}))
                return EXIT_INVALID
            say(f"{command}: no store at {path!r}, but {len(writes)} unfinished or aborted "
                f"write(s) of it, such as {temporary!r}: {WRITER_SAYS[state]}")
            return EXIT_INVALID
    elif os.path.isdir(path) and not is_store_dir(path) and not has_store_files(path):
        return _folder(args, path)
    if path.startswith("s3://") and args.command in ("info", "verify") and \
            isinstance(exc, (StoreNotFoundError, NotPublishedError)):
        # A prefix of stores (a folder published whole): listed, as a local folder is walked.
        try:
            found = remote_survey(path, _storage_options(args) or None, args.max_depth,
                                  describe=args.command == "info")
        except (ZrecordError, OSError, ValueError):
            found = None  # the store's own error says more
        if found is not None and (found.stores or found.problems or found.datasets):
            return _folder(args, path, found)
    say(f"{command}: {message_of(exc)}")
    return _status_of(exc)


def _folder(args: argparse.Namespace, path: str, found: Survey | None = None) -> int:
    """PATH is a folder (or an s3:// prefix whose survey is `found`), not a store: `info`
    lists the stores below it and `verify` verifies them; the other commands need one store
    and say where to find them."""
    command = f"zrecord {args.command}"
    describe = args.command == "info"
    searched = args.command in ("info", "verify")
    try:
        if found is None:
            found = survey(path, args.max_depth if searched else TREE_DEPTH_DEFAULT,
                           describe=describe)
    except OSError as exc:
        say(f"{command}: cannot read the folder {path!r}: {exc}")
        return _status_of(exc)
    for entries in (found.stores, found.unfinished, found.problems):
        entries.sort(key=lambda e: str(e["path"]))
    if not searched:
        first = os.path.join(path, found.stores[0]["path"]) if found.stores else ""
        held = (f"it holds {len(found.stores)} store(s), such as {first!r}; "
                f"'zrecord info {path}' lists them" if found.stores
                else "no store was found below it")
        say(f"{command}: {path!r} is a folder, not a store; {held}")
        return EXIT_INVALID
    if not (found.stores or found.unfinished or found.problems) and not args.json:
        deeper = (f" (searched {args.max_depth} levels deep; --max-depth searches deeper)"
                  if found.truncated else "")
        say(f"{command}: {path!r} is neither a store nor a folder holding stores or "
            f"unfinished writes{deeper}")
        return EXIT_INVALID
    if args.command == "verify":
        return _verify_folder(args, path, found)
    statuses = {p["status"] for p in found.problems}
    status = (EXIT_INVALID if EXIT_INVALID in statuses or not found.stores
              else EXIT_RUNTIME if statuses else EXIT_OK)
    if args.json:
        print(_dumps({"path": path, "kind": "folder", "stores": found.stores,
                      "unfinished": found.unfinished,
                      "problems": [{"path": p["path"], "error": p["error"]}
                                   for p in found.problems],
                      "links_not_followed": found.links_not_followed,
                      "truncated": found.truncated}))
    else:
        _print_folder(path, found, args.max_depth)
    return status


def _table(rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
    return ["  " + "  ".join(cell.rjust(w) if k in right else cell.ljust(w)
                             for k, (cell, w) in enumerate(zip(row, widths))).rstrip()
            for row in rows]


def _print_folder(path: str, found: Survey, depth: int) -> None:
    out = sys.stdout
    n = len(found.stores)
    out.write(f"{_shown(path)}: a folder holding {n:,} store{'s' if n != 1 else ''}\n")
    if found.stores:
        rows = [["path", "kind", "dtype", "shape", "records", "codec", "size"]]
        for s in found.stores:
            shape = (str(tuple(s["item_shape"])) if s["kind"] == "Dense" else f"ndim {s['ndim']}")
            rows.append([_shown(s["path"]), s["kind"], s["dtype"], shape, f"{s['records']:,}",
                         s["codec"], _human(s["disk_bytes"])])
        out.write("\n".join(_table(rows, right={4, 6})) + "\n")
        records = sum(s["records"] for s in found.stores)
        size = sum(s["disk_bytes"] for s in found.stores)
        out.write(f"  total: {records:,} records, {_human(size)} on disk\n")
    _print_leftovers(found, depth)


def _print_leftovers(found: Survey, depth: int) -> None:
    """What a folder's listing or verification says after its stores: unfinished writes,
    what is not a valid store, and what the walk left out."""
    out = sys.stdout
    if found.unfinished:
        out.write("unfinished or aborted writes (not stores):\n")
        for u in found.unfinished:
            out.write(f"  {_shown(u['path'])}: {WRITER_SAYS[u['writer']]}\n")
    if found.problems:
        out.write("not valid stores, or not readable:\n")
        for p in found.problems:
            out.write(_shown(f"  {p['path']}: {p['error']}") + "\n")
    if found.links_not_followed:
        out.write(f"{found.links_not_followed:,} symbolic link(s) to folders not followed\n")
    if found.truncated:
        out.write(f"folders more than {depth} levels down (or beyond {DIRECTORIES_MAX:,} "
                  "folders) were not searched; see --max-depth\n")


def _run(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "publish":
        return _publish(args)
    command = f"zrecord {args.command}"
    path = args.path
    # A temporary is never a published store, even once its writer wrote a header into it.
    if is_temporary_name(os.path.basename(os.path.normpath(path))) and os.path.isdir(path):
        return _unfinished(args, path)
    options = _storage_options(args)
    if options and not path.startswith("s3://"):
        say(f"{command}: --endpoint-url is for a store in S3 (an s3:// URL); got {path!r}")
        return EXIT_USAGE
    from zrecord._dataset_cli import is_dataset, run_dataset  # it imports this module

    if is_dataset(path):
        return run_dataset(args, path, options)
    try:
        store = open_store(path, storage_options=options or None)
    except (ZrecordError, OSError, MemoryError) as exc:
        if _holds_manifests(path, options, exc):
            return run_dataset(args, path, options)
        return _not_a_store(args, exc)
    except ValueError as exc:
        # A URL that names no bucket or host, or storage settings the client refuses.
        say(f"{command}: {exc}")
        return EXIT_USAGE
    with store:
        try:
            return COMMANDS[args.command](store, args)
        except BrokenPipeError:
            raise  # the reader went away: run_tool ends the command quietly
        except MemoryError as exc:
            hint = ("; lower --max-record-bytes" if args.command in ("head", "verify") else "")
            say(f"{command}: out of memory: {exc}{hint}")
            return EXIT_RUNTIME
        except (ZrecordError, OSError) as exc:
            # A store that opens can still hold a corrupt record or a shape NumPy cannot hold;
            # `head` and `stats` report that like any other error (verify reports its own).
            say(f"{command}: {message_of(exc)}")
            return _status_of(exc)


def main(argv: list[str] | None = None) -> int:
    """Run the ``zrecord`` command line and return its exit status.

    With `argv` None this process is the command (the console script, ``python -m
    zrecord.cli``): it reads ``sys.argv``, and Ctrl-C ends the process by SIGINT once its one
    line is printed (see ``zrecord.console``). With a list, nothing outside the call is
    touched and an interrupt returns 130.
    """
    return run_tool("zrecord", lambda: _run(argv), as_program=argv is None)


# The command line is the interface (docs/api/cli.md); in Python, only main() is public.
__all__ = ["main"]


if __name__ == "__main__":
    sys.exit(main())
