"""The ``zrecord`` command line: inspect and check stores.

  zrecord info PATH          schema, counts, codec, shards, sizes, compression ratio
  zrecord verify PATH        check every record's checksum (and that compressed records
                             decode); exit 1 naming the first corrupt record
  zrecord head PATH [-n N]   the first N records
  zrecord stats PATH         distribution of record sizes (and of shapes, for Ragged)

Every command takes ``--json`` for output that scripts can parse. Errors (no store, a corrupt
header, ...) print one line to stderr and exit 2; ``verify`` exits 1 on corruption.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any

import numpy as np

from zrecord._store import Dense, Ragged, open_store
from zrecord.errors import ZrecordError

_VERIFY_CHUNK_BYTES = 64 << 20


def _count(text: str) -> int:
    """An argparse type: a count of 0 or more (a negative one is a usage error, exit 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid count {text!r}: not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"invalid count {text!r}: must be 0 or more")
    return value


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


def cmd_verify(store: Dense | Ragged, args: argparse.Namespace) -> int:
    """``zrecord verify``: every checksum; exit status 1 naming the first corrupt record."""
    n = len(store)
    mean = store.stored_bytes / n if n else 1
    step = max(1, int(_VERIFY_CHUNK_BYTES // max(1.0, mean)))
    started = time.perf_counter()
    show = not args.json and not args.quiet and sys.stderr.isatty()
    checked = 0
    try:
        for start in range(0, n, step):
            stop = min(n, start + step)
            store.verify(start, stop)
            checked = stop
            if show:
                _progress(checked, n, started, int(checked * mean))
    except ZrecordError as exc:
        if show:
            sys.stderr.write("\n")
        result = {"path": store.path, "ok": False, "records_checked": checked,
                  "record": exc.record, "shard": exc.shard, "error": str(exc)}
        print(_dumps(result) if args.json else f"CORRUPT: {exc}")
        return 1
    if show:
        sys.stderr.write("\n")
    seconds = time.perf_counter() - started
    if args.json:
        print(_dumps({"path": store.path, "ok": True, "records_checked": n,
                          "seconds": seconds}))
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


def cmd_head(store: Dense | Ragged, args: argparse.Namespace) -> int:
    """``zrecord head``: the first ``-n`` records."""
    count = min(args.n, len(store))
    records = store[:count]
    if args.json:
        print(_dumps([{"index": i, "shape": list(np.shape(r)), "values": _json_values(r)}
                          for i, r in enumerate(records)]))
        return 0
    with np.printoptions(threshold=args.threshold, edgeitems=3, linewidth=100):
        for i, r in enumerate(records):
            arr = np.asarray(r)
            print(f"[{i}] shape {arr.shape}:")
            print("  " + np.array2string(arr).replace("\n", "\n  "))
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
        p.add_argument("--json", action="store_true", help="machine-readable output")
        if name == "head":
            p.add_argument("-n", type=_count, default=5,
                           help="records to show, 0 or more (default 5)")
            p.add_argument("--threshold", type=int, default=60,
                           help="summarise arrays with more elements than this")
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
        except (ZrecordError, OSError) as exc:
            # A store that opens can still hold a corrupt record or a shape NumPy cannot hold;
            # `head` and `stats` report that like any other error (verify reports its own).
            print(f"zrecord {args.command}: {exc}", file=sys.stderr)
            return 2


if __name__ == "__main__":
    sys.exit(main())
