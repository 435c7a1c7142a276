"""The ``zrecord`` command line: inspect and check stores.

  zrecord info PATH          schema, counts, codec, shards, sizes, compression ratio
  zrecord verify PATH        check every record's checksum (and that compressed records
                             decode); exit 1 naming the first corrupt record
  zrecord head PATH [-n N]   the first N records, summarised
  zrecord stats PATH         distribution of record sizes (and of shapes, for Ragged)

Every command takes ``--json`` for output that scripts can parse: strict JSON (RFC 8259).
Errors (no store, a corrupt header, ...) print one line to stderr and exit 2; ``verify`` exits
1 on corruption and 2 when it could not check every record.

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

from zrecord._reader import Dense, Ragged, open_store
from zrecord.errors import StoreOSError, ZrecordError

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


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.1f} {unit}" if unit != "B" else f"{int(n):,} B"
        n /= 1024
    return f"{n:,.1f} TiB"  # pragma: no cover - loop always returns


def _info(store: Dense | Ragged) -> dict[str, Any]:
    info = store.info()
    info["compression_ratio"] = (info["logical_bytes"] / info["stored_bytes"]
                                 if info["stored_bytes"] else None)
    return info


def cmd_info(store: Dense | Ragged, args: argparse.Namespace) -> int:
    """``zrecord info``: schema, counts, codec, shards, sizes and compression ratio."""
    info = _info(store)
    if args.json:
        print(_dumps(info))
        return 0
    shape = (f"item_shape {tuple(info['item_shape'])}" if info["kind"] == "Dense"
             else f"ndim {info['ndim']} (shapes vary per record)")
    ratio = info["compression_ratio"]
    print(f"{info['path']}: {info['kind']} store, format {'.'.join(map(str, info['format_version']))}")
    print(f"  records       {info['records']:,}")
    print(f"  dtype         {info['dtype']}, {shape}")
    print(f"  codec         {info['codec']}" + (f" (dictionary {_human(info['dict_bytes'])})"
                                               if info["dict_bytes"] else ""))
    print(f"  data shards   {info['data_shards']}")
    print(f"  logical size  {_human(info['logical_bytes'])}")
    print(f"  stored size   {_human(info['stored_bytes'])}"
          + (f"  (compression ratio {ratio:.2f}x)" if ratio else ""))
    return 0


def _progress(done: int, total: int, started: float, nbytes: int) -> None:
    width = 30
    filled = width * done // max(1, total)
    rate = nbytes / max(1e-9, time.perf_counter() - started)
    sys.stderr.write(f"\rverifying [{'#' * filled}{'.' * (width - filled)}] {done:,}/{total:,} "
                     f"records, {_human(rate)}/s")
    sys.stderr.flush()


def _decoded_bytes(store: Dense | Ragged, start: int, stop: int) -> np.ndarray:
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


def _verify_runs(store: Dense | Ragged, limit: int) -> Iterator[tuple[int, int, bool]]:
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


def cmd_verify(store: Dense | Ragged, args: argparse.Namespace) -> int:
    """``zrecord verify``: every checksum; exit status 1 naming the first corrupt record."""
    n = len(store)
    mean = store.stored_bytes / n if n else 1
    limit = args.max_record_bytes
    started = time.perf_counter()
    show = not args.json and not args.quiet and sys.stderr.isatty()
    checked = skipped = 0
    first_skipped: int | None = None
    try:
        for start, stop, skip in _verify_runs(store, limit):
            if skip:
                skipped += stop - start
                first_skipped = start if first_skipped is None else first_skipped
            else:
                store.verify(start, stop)
                checked += stop - start
            if show:
                _progress(stop, n, started, int(stop * mean))
    except ZrecordError as exc:
        if show:
            sys.stderr.write("\n")
        if isinstance(exc, (MemoryError, StoreOSError)):
            raise  # the store could not be checked; nothing says it is corrupt
        result = {"path": store.path, "ok": False, "records_checked": checked,
                  "records_skipped": skipped, "record": exc.record, "shard": exc.shard,
                  "error": str(exc)}
        print(_dumps(result) if args.json else f"CORRUPT: {exc}")
        return 1
    if show:
        sys.stderr.write("\n")
    seconds = time.perf_counter() - started
    if skipped:
        assert first_skipped is not None
        size = _human(float(_decoded_bytes(store, first_skipped, first_skipped + 1)[0]))
        message = (f"{checked:,} of {n:,} records checked, no corruption found; {skipped:,} "
                   f"decode to more than --max-record-bytes ({_human(limit)}) and were not "
                   f"checked (the first: record {first_skipped}, {size}). verify decodes a "
                   "compressed record whole: raise --max-record-bytes to check them, with "
                   "that much memory free")
        if args.json:
            print(_dumps({"path": store.path, "ok": None, "records_checked": checked,
                          "records_skipped": skipped, "first_skipped": first_skipped,
                          "max_record_bytes": limit, "seconds": seconds, "error": message}))
        else:
            print(f"INCOMPLETE: {message}")
        return 2
    if args.json:
        print(_dumps({"path": store.path, "ok": True, "records_checked": n,
                      "records_skipped": 0, "seconds": seconds}))
    else:
        print(f"OK: {n:,} records, {_human(store.stored_bytes)} checked in {seconds:.2f} s")
    return 0


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
    arr = np.asarray(record)
    if arr.size == 0:
        return []
    if arr.dtype.kind == "c":
        arr = np.stack([arr.real, arr.imag], axis=-1)
    values = arr.tolist()
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        values = _finite_or_name(values)
    return values


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
            text = np.array2string(self.values, threshold=sys.maxsize, max_line_width=100)
        elif self.head.size == 0:
            text = "[...]"
        else:
            # NumPy's own summary of a 1-D array whose middle (one filler value, never shown)
            # stands for the values left out, so the values read like NumPy's print.
            edge = self.head.size
            row = np.concatenate([self.head, self.head[:1], self.tail])
            text = np.array2string(row, threshold=2 * edge, edgeitems=edge, max_line_width=100)
        return f"{title}:\n  " + text.replace("\n", "\n  ")


def _describe(store: Dense | Ragged, i: int) -> _Shown:
    """Record `i`'s shape and decoded size, from the index alone (no record data read)."""
    if isinstance(store, Ragged):
        shape = tuple(int(d) for d in store.shapes(i)[0].view(np.uint64))
    else:
        shape = store.item_shape
    return _Shown(i, shape, store.dtype, math.prod(shape) * store.dtype.itemsize)


def _show(store: Dense | Ragged, i: int, values: int, limit: int) -> _Shown:
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


def cmd_head(store: Dense | Ragged, args: argparse.Namespace) -> int:
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


def cmd_stats(store: Dense | Ragged, args: argparse.Namespace) -> int:
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
    print(f"{store.path}: {stats['kind']}, {n:,} records")
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


COMMANDS = {"info": cmd_info, "verify": cmd_verify, "head": cmd_head, "stats": cmd_stats}


def main(argv: list[str] | None = None) -> int:
    """Run the ``zrecord`` command line; returns the exit status."""
    ap = argparse.ArgumentParser(prog="zrecord", description="Inspect and check zrecord stores.")
    sub = ap.add_subparsers(dest="command", required=True)
    for name, fn in COMMANDS.items():
        p = sub.add_parser(name, help=(fn.__doc__ or "").strip() or None)
        p.add_argument("path")
        p.add_argument("--json", action="store_true",
                       help="machine-readable output, strict JSON (RFC 8259)"
                            + (": non-finite values as \"NaN\", \"Infinity\", \"-Infinity\", "
                               "complex ones as [real, imag]" if name == "head" else ""))
        if name == "head":
            p.add_argument("-n", type=_count, default=5,
                           help="records to show, 0 or more (default 5)")
            p.add_argument("--values", type=_count, default=VALUES_DEFAULT, metavar="N",
                           help="values to show per record: a record of at most N values is "
                                "shown whole, a longer one as its first and last N//2 values "
                                f"in row-major order (default {VALUES_DEFAULT})")
        if name in ("head", "verify"):
            what = ("a record's values are not shown" if name == "head"
                    else "a record is not checked, and verify exits 2")
            default = MAX_RECORD_BYTES_DEFAULT[name]
            p.add_argument("--max-record-bytes", type=_byte_size, default=default,
                           metavar="SIZE",
                           help="decode no record larger than SIZE bytes (e.g. 64M, 2G; "
                                f"default {default >> 20}M): a record is decoded whole, so "
                                f"this bounds the memory used; above it {what}"
                                + ("" if name == "head" else " (raw stores need no decoding "
                                   "and are always checked whole)"))
        if name == "verify":
            p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    try:
        store = open_store(args.path)
    except (ZrecordError, OSError) as exc:
        print(f"zrecord {args.command}: {exc}", file=sys.stderr)
        return 2
    with store:
        try:
            return COMMANDS[args.command](store, args)
        except BrokenPipeError:
            # The reader of our output went away (`zrecord head ... | head -1`): nothing more
            # can be said there, and the interpreter must not complain when it flushes.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
            return 2
        except MemoryError as exc:
            hint = ("; lower --max-record-bytes" if args.command in ("head", "verify") else "")
            print(f"zrecord {args.command}: out of memory: {exc}{hint}", file=sys.stderr)
            return 2
        except (ZrecordError, OSError) as exc:
            # A store that opens can still hold a corrupt record or a shape NumPy cannot hold;
            # `head` and `stats` report that like any other error (verify reports its own).
            print(f"zrecord {args.command}: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(f"zrecord {args.command}: interrupted", file=sys.stderr)
            return 130


if __name__ == "__main__":
    sys.exit(main())
