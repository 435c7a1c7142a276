"""convert(): one typed zrecord store per column under ``root/split/column``, published whole.

Invariants:
- Nothing appears at `root` until every column of every split is written, each store is
  published, and every column of a split has the split's row count. Until then everything
  lives in zrecord's locked temporary sibling (``zrecord.staged_directory``, the protocol its
  writers use): a failure removes it, and a later conversion or writer of the same name
  removes it once its process is gone (SIGKILL), whatever PID namespace that process ran in.
- Everything that can be known before writing is checked before writing: split and column
  names that cannot be one folder under ``root`` (``_paths``), a ``root`` inside a published
  store, unsupported features, nulls, non-rectangular nested lists, mixed image modes.
- Memory is bounded by the batch, never by the dataset: Arrow data are memory-mapped and read
  in slices of at most ``batch_rows`` rows.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa

import zrecord
from loaderx_converter._features import ColumnPlan, Where, reader_for
from loaderx_converter._hub import PROVENANCE_ATTR, Provenance
from loaderx_converter._paths import PROVENANCE_FILE, check_names, check_root
from loaderx_converter.errors import OptionError

BATCH_BYTES_TARGET = 32 << 20  # decoded bytes per batch and column that we aim not to exceed
BATCH_ROWS_MAX = 4096


def _splits(dataset: Any) -> dict[str, Any]:
    import datasets

    if isinstance(dataset, datasets.DatasetDict):
        return {str(name): ds for name, ds in dataset.items()}
    if isinstance(dataset, datasets.Dataset):
        return {str(dataset.split or "train"): dataset}
    if isinstance(dataset, (datasets.IterableDataset, datasets.IterableDatasetDict)):
        raise TypeError("convert: streaming (Iterable) datasets are not supported; load the "
                        "dataset without streaming=True (Arrow files are memory-mapped, so this "
                        "does not load it into memory)")
    raise TypeError(f"convert: expected a datasets.DatasetDict or Dataset; got {type(dataset).__name__}")


def _dict_for(dict_bytes: Any, codec: str, column: str) -> bytes | None:
    if codec != "zstd_dict":
        return None
    if isinstance(dict_bytes, Mapping):
        if column not in dict_bytes:
            raise ValueError(f"convert: codec 'zstd_dict' and dict_bytes has no entry for column "
                             f"{column!r}; it has {sorted(dict_bytes)}")
        return bytes(dict_bytes[column])
    return bytes(dict_bytes)


def _check_arguments(codec: Any, dict_bytes: Any, data_shards: Any) -> None:
    """zrecord's own checks of the store options, for every column's dictionary, before any
    work; its errors reach the caller wrapped in an :class:`OptionError`."""
    dicts = list(dict_bytes.values()) if isinstance(dict_bytes, Mapping) else [dict_bytes]
    try:
        for one in dicts or [None]:
            zrecord.check_store_options(codec=codec, dict_bytes=one, data_shards=data_shards)
    except zrecord.ZrecordError as exc:
        raise OptionError(f"convert: {exc} (dict_bytes may also be a dict column -> bytes)"
                          if codec == "zstd_dict" else f"convert: {exc}") from exc


def _select(splits: dict[str, Any], columns: Sequence[str] | None) -> dict[str, list[str]]:
    if isinstance(columns, str):
        raise TypeError(f"convert: columns must be a list of names, not the string {columns!r}")
    chosen = {}
    for split, ds in splits.items():
        names = list(ds.column_names)
        if columns is None:
            chosen[split] = names
            continue
        missing = [c for c in columns if c not in names]
        if missing:
            raise KeyError(f"convert: split {split!r} has no column(s) {missing}; it has {names}")
        chosen[split] = list(dict.fromkeys(columns))
        if not chosen[split]:
            raise ValueError("convert: columns=[] selects nothing to convert")
    return chosen


def _batch_rows(ds: Any, columns: list[str]) -> int:
    """Rows per batch so that one batch of the widest column stays near the byte target."""
    n = max(1, ds.num_rows)
    table = ds.data.table if hasattr(ds.data, "table") else ds.data
    widest = max((table.column(c).nbytes for c in columns), default=0) / n
    # Encoded images and audio grow when decoded; allow for it.
    widest *= 8 if any(_is_media(ds.features[c]) for c in columns) else 1
    return int(max(1, min(BATCH_ROWS_MAX, BATCH_BYTES_TARGET // max(1.0, widest))))


def _is_media(feature: Any) -> bool:
    import datasets

    return isinstance(feature, (datasets.Image, datasets.Audio))


def _batches(ds: Any, rows: int) -> Any:
    """(first row, pyarrow.Table) slices of `ds`, honouring any indices mapping."""
    start = 0
    for table in ds.with_format("arrow").iter(batch_size=rows):
        yield start, table
        start += table.num_rows


def _column(table: pa.Table, name: str) -> pa.Array:
    col = table.column(name)
    return col.chunk(0) if col.num_chunks == 1 else pa.concat_arrays(col.chunks)


def _progress(enabled: bool, total: int, desc: str) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="rows", unit_scale=True, disable=not enabled,
                dynamic_ncols=True)


def _versions() -> dict[str, str]:
    import datasets

    from loaderx_converter import __version__

    return {"loaderx-converter": __version__, "zrecord": zrecord.__version__,
            "datasets": datasets.__version__}


def convert(dataset: Any, root: Any, *, codec: str = "zstd", columns: Sequence[str] | None = None,
            dict_bytes: bytes | Mapping[str, bytes] | None = None, data_shards: int = 4,
            progress: bool = True) -> dict[str, Any]:
    """Write every (selected) column of every split as a zrecord store under ``root/split/column``.

    `dataset` is a ``datasets.DatasetDict`` or a single ``Dataset`` (written as its split name,
    or ``"train"``). Fixed-shape columns become :class:`zrecord.Dense`, variable-shape ones
    :class:`zrecord.Ragged`; values, dtypes and shapes are kept exactly, nothing is filtered,
    padded or transformed. `codec` is ``"raw"``, ``"zstd"`` or ``"zstd_dict"`` (then
    `dict_bytes` is one dictionary for every column or a dict column -> dictionary).
    `columns` selects a subset. `data_shards` is passed to each store.

    Unsupported features, nulls and names that cannot be one folder name (``/``, ``..``, a
    leading ``.``, ...: :class:`UnsafePathError`) raise before anything is written. `root` must
    not exist and must not lie inside a published zrecord store (missing parent folders are
    made, as for every zrecord store); it appears, with every store
    and ``provenance.json``, only when all are written and the row counts agree. Returns the
    provenance record that was written.
    """
    _check_arguments(codec, dict_bytes, data_shards)
    root = Path(os.fspath(root)).absolute()
    if os.path.lexists(root):
        raise FileExistsError(errno.EEXIST, "convert: the destination must not exist", str(root))
    check_root(root)
    splits = _splits(dataset)
    chosen = _select(splits, columns)
    check_names(root, chosen)

    readers = {split: {c: reader_for(Where(split, c, splits[split].features[c])) for c in cols}
               for split, cols in chosen.items()}
    with ThreadPoolExecutor(os.cpu_count() or 1, thread_name_prefix="loaderx-convert") as pool:
        for by_column in readers.values():
            for reader in by_column.values():
                reader.pool = pool
        return _convert(dataset, root, splits, chosen, readers, codec, dict_bytes, data_shards,
                        progress)


def _convert(dataset: Any, root: Path, splits: dict[str, Any], chosen: dict[str, list[str]],
             readers: dict[str, dict[str, Any]], codec: str, dict_bytes: Any, data_shards: int,
             progress: bool) -> dict[str, Any]:
    if codec == "zstd_dict":
        for cols in chosen.values():
            for c in cols:
                _dict_for(dict_bytes, codec, c)
    plans: dict[str, dict[str, ColumnPlan]] = {}
    for split, ds in splits.items():
        rows = _batch_rows(ds, chosen[split])
        with _progress(progress, ds.num_rows, f"{split}: check") as bar:
            for row0, table in _batches(ds, rows):
                for c in chosen[split]:
                    readers[split][c].scan(_column(table, c), row0)
                bar.update(table.num_rows)
        plans[split] = {c: readers[split][c].plan() for c in chosen[split]}

    with zrecord.staged_directory(root) as staged:
        tmp = Path(staged)
        layout: dict[str, Any] = {}
        for split, ds in splits.items():
            layout[split] = _write_split(ds, tmp / split, split, chosen[split], readers[split],
                                         plans[split], codec, dict_bytes, data_shards, progress)
        provenance = getattr(dataset, PROVENANCE_ATTR, None) or Provenance(source="datasets object")
        record = {
            "format": "loaderx-converter provenance 1",
            "provenance": provenance.to_dict(),
            "codec": codec,
            "versions": _versions(),
            "splits": layout,
        }
        with open(tmp / PROVENANCE_FILE, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=2, sort_keys=True)
            f.write("\n")
        # Leaving the block flushes every file below `tmp` and renames it to `root`.
    return record


def _write_split(ds: Any, folder: Path, split: str, cols: list[str], readers: dict[str, Any],
                 plans: dict[str, ColumnPlan], codec: str, dict_bytes: Any, data_shards: int,
                 progress: bool) -> dict[str, Any]:
    folder.mkdir()
    writers: dict[str, Any] = {}
    try:
        for c in cols:
            plan = plans[c]
            cls = zrecord.Dense if plan.kind == "Dense" else zrecord.Ragged
            shape = plan.item_shape if plan.kind == "Dense" else plan.ndim
            writers[c] = cls.create(folder / c, plan.dtype, shape, codec=codec,
                                    data_shards=data_shards,
                                    dict_bytes=_dict_for(dict_bytes, codec, c))
        rows = _batch_rows(ds, cols)
        with _progress(progress, ds.num_rows, f"{split}: write") as bar:
            for row0, table in _batches(ds, rows):
                for c in cols:
                    writers[c].append(readers[c].extract(_column(table, c), plans[c], row0))
                bar.update(table.num_rows)
        for c in cols:
            writers[c].close()
    except BaseException:
        for w in writers.values():
            if not w.closed:
                w.abort()
        raise
    columns: dict[str, Any] = {}
    for c in cols:
        with zrecord.open_store(folder / c) as store:
            if len(store) != ds.num_rows:
                raise RuntimeError(f"convert: split {split!r} column {c!r} has {len(store)} "
                                   f"records, expected {ds.num_rows}; nothing was published")
        columns[c] = {**plans[c].describe(), "records": ds.num_rows,
                      "feature": _feature_dict(ds.features[c])}
    return {"rows": ds.num_rows, "columns": columns}


def _feature_dict(feature: Any) -> Any:
    import datasets

    return datasets.Features({"_": feature}).to_dict()["_"]

