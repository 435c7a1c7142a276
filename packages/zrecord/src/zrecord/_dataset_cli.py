"""The ``zrecord`` command line on a dataset of many stores (a folder or prefix holding
``dataset-NNNNNNNN.zrm`` manifests, or the path of one manifest): ``info`` describes the
version and its parts, ``verify`` checks every part in order, ``head`` and ``stats`` read it as
one store does. ``cost`` and ``publish`` take stores (``publish`` of the dataset's folder
uploads its parts and then its manifests)."""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from zrecord import _manifest
from zrecord._dataset import DenseDataset, RaggedDataset, open_dataset
from zrecord._objects import is_url
from zrecord._paths import HEADER_NAME
from zrecord._tree import WRITER_SAYS, unfinished_writes
from zrecord._types import StorageOptions
from zrecord.cli import (
    COMMANDS,
    EXIT_INVALID,
    _dumps,
    _human,
    _shown,
    _status_of,
    _verify_store,
    say,
)
from zrecord.console import EXIT_OK, EXIT_RUNTIME, EXIT_USAGE, message_of
from zrecord.errors import ZrecordError


def is_dataset(path: str) -> bool:
    """Whether `path` names a dataset: a manifest's path or URL, or a local folder that holds
    a manifest and is no store."""
    if _manifest.version_of(os.path.basename(path.rstrip("/"))) is not None:
        return True
    if "://" in path or not os.path.isdir(path) or os.path.lexists(os.path.join(path, HEADER_NAME)):
        return False
    try:
        return any(_manifest.version_of(name) is not None for name in os.listdir(path))
    except OSError:
        return False


def run_dataset(args: argparse.Namespace, path: str, options: StorageOptions) -> int:
    """Run ``zrecord COMMAND`` on the dataset at `path`."""
    command = f"zrecord {args.command}"
    try:
        ds = open_dataset(path, storage_options=options or None)
    except (ZrecordError, OSError, MemoryError) as exc:
        say(f"{command}: {message_of(exc)}")
        return _status_of(exc)
    except ValueError as exc:
        say(f"{command}: {exc}")
        return EXIT_USAGE
    with ds:
        try:
            if args.command == "info":
                return _info(ds, args)
            if args.command == "verify":
                return _verify(ds, args)
            return COMMANDS[args.command](ds, args)  # type: ignore[arg-type]
        except BrokenPipeError:
            raise  # the reader of the output went away: run_tool ends quietly (141)
        except (ZrecordError, OSError) as exc:
            say(f"{command}: {message_of(exc)}")
            return _status_of(exc)


def _staging_left(ds: DenseDataset | RaggedDataset) -> list[tuple[str, str]]:
    """(folder, writer state) of each staging folder of a `write_dataset` run in a local
    dataset's folder (``.parts.zr-tmp-*``): unfinished runs, whose writer may be gone."""
    if is_url(ds.path):
        return []
    return unfinished_writes(os.path.join(ds.path, "parts"))


def _info(ds: DenseDataset | RaggedDataset, args: argparse.Namespace) -> int:
    info = ds.info()
    left = _staging_left(ds)
    if args.json:
        print(_dumps({**info, "unfinished_writes": [{"path": t, "writer": w} for t, w in left]}))
        return 0
    shape = (f"item_shape {tuple(info['item_shape'])}" if info["kind"] == "Dense"
             else f"ndim {info['ndim']} (shapes vary per record)")
    print(_shown(f"{info['path']}: {info['kind']} dataset, version {info['version']}, "
                 f"{len(info['parts']):,} parts"))
    print(f"  records       {info['records']:,}")
    print(f"  dtype         {info['dtype']}, {shape}")
    print(f"  codec         {info['codec']}")
    print(f"  logical size  {_human(info['logical_bytes'])}")
    print(f"  stored size   {_human(info['stored_bytes'])}")
    print(f"  digest        {info['digest']}")
    width = max(len(p["name"]) for p in info["parts"])
    for start, part in zip(ds.starts, info["parts"]):
        print(_shown(f"  {part['name']:<{width}}  {part['records']:>12,} records from "
                     f"{start:,}  digest {part['digest']}"))
    for temporary, state in left:
        print(_shown(f"  unfinished write {os.path.basename(temporary)}: {WRITER_SAYS[state]}"))
    return 0


def _verify(ds: DenseDataset | RaggedDataset, args: argparse.Namespace) -> int:
    """Every part in order; exit 1 at the first corrupt part (the rest are not checked), or
    3 when every part was checked and some only in part (records over --max-record-bytes)."""
    started = time.perf_counter()
    results: list[dict[str, Any]] = []
    status = EXIT_OK
    incomplete: list[str] = []
    for k, (name, part) in enumerate(zip(ds.part_names, ds.parts)):
        part_status, result, line = _verify_store(part, args, _shown(f"{ds.path}: {name}"))
        if result.get("record") is not None:
            # The part's own numbering in "record" (as `zrecord verify PART` says it), and
            # the dataset's, by which ds[i] reads it.
            result = {**result, "dataset_record": int(ds._starts[k]) + int(result["record"])}
        results.append({**result, "path": name})
        if not args.json:
            print(_shown(f"{name}: {line}"), flush=True)
        if part_status == EXIT_INVALID:
            status = part_status
            break
        if part_status != EXIT_OK:
            # Checked in part: the parts after it may still be corrupt, so go on.
            status = part_status
            incomplete.append(name)
    ok = {EXIT_OK: True, EXIT_RUNTIME: None}.get(status, False)
    seconds = time.perf_counter() - started
    if args.json:
        print(_dumps({"path": ds.path, "kind": "dataset", "version": ds.version, "ok": ok,
                      "parts": results, "seconds": seconds}))
    elif status == EXIT_OK:
        print(_shown(f"{ds.path}: OK: {len(ds):,} records in {len(ds.parts):,} parts, "
                     f"{_human(ds.stored_bytes)} checked in {seconds:.2f} s"))
    elif status == EXIT_INVALID:
        where = results[-1].get("dataset_record")
        record = "" if where is None else f", record {where:,} of the dataset"
        print(_shown(f"{ds.path}: CORRUPT: part {results[-1]['path']}{record}"))
    else:
        print(_shown(f"{ds.path}: INCOMPLETE: {len(incomplete):,} of {len(ds.parts):,} parts "
                     f"checked in part ({', '.join(incomplete[:5])}"
                     f"{', ...' if len(incomplete) > 5 else ''}), no corruption found"))
    return status
