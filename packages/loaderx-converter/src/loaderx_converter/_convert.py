"""convert(): one typed zrecord store per column under ``root/split/column``, published whole.

Invariants:
- Nothing appears at `root` until every column of every split is written, each store is
  published, and every column of a split has the split's row count. Until then everything
  lives in zrecord's locked temporary sibling (``zrecord.staged_directory``, the protocol its
  writers use): a failure removes it, and a later conversion or writer of the same name
  removes it once its process is gone (SIGKILL), whatever PID namespace that process ran in.
  An ``s3://`` root is converted so into a private staging folder and only then published
  whole (``_paths.Destination``, ``zrecord.publish_folder``: the stores, then
  ``provenance.json``); nothing is uploaded before the conversion has succeeded.
- Everything that can be known before writing is checked before writing: the options
  (``_options``), split and column names that cannot be one folder under ``root``
  (``_paths``), a ``root`` inside a published store, unsupported features, nulls,
  non-rectangular nested lists, mixed image modes. The check pass reads image headers only,
  so each image is decoded once, while writing (``_features``).
- Memory is bounded by the batch, never by the dataset: Arrow data are memory-mapped and read
  in slices of at most ``BATCH_ROWS_MAX`` rows and about ``BATCH_BYTES_TARGET`` bytes. The
  check pass learns each image's (and clip's) decoded size from its header, so the write pass
  cuts its batches by the bytes they decode to (a batch holds one huge image alone, or
  thousands of thumbnails); what the check pass keeps is nine bytes per image.
- ``workers`` changes who extracts the write pass's records, never what is written: worker
  processes run the same readers on the same batches and this process appends their records
  in batch order (``_workers``).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa

import zrecord
from loaderx_converter import _options
from loaderx_converter._features import MEDIA_MODES, ColumnPlan, Where, _EncodedReader, reader_for
from loaderx_converter._hub import Provenance, provenance_of
from loaderx_converter._options import ColumnOptions, Requested
from loaderx_converter._paths import PROVENANCE_FILE, Destination, check_names
from loaderx_converter._spelling import PYTHON, Spelling
from loaderx_converter._workers import Team, column_of, extract
from loaderx_converter.errors import (
    ArgumentTypeError,
    ColumnNotFoundError,
    OptionError,
    UnsafePathError,
    _IncompleteWriteError,
)
from zrecord import Codec
from zrecord.console import progress_bar

BATCH_BYTES_TARGET = 32 << 20  # decoded bytes per batch and column that we aim not to exceed
BATCH_ROWS_MAX = 4096
PROVENANCE_FORMAT = "loaderx-converter provenance 1"
# The per-record format of an encoded column of mixed formats is the store "COLUMN.format".
FORMAT_SUFFIX = ".format"


def _splits(dataset: Any) -> dict[str, Any]:
    import datasets

    if isinstance(dataset, datasets.DatasetDict):
        return {str(name): ds for name, ds in dataset.items()}
    if isinstance(dataset, datasets.Dataset):
        return {str(dataset.split or "train"): dataset}
    if isinstance(dataset, (datasets.IterableDataset, datasets.IterableDatasetDict)):
        raise ArgumentTypeError("convert: streaming (Iterable) datasets are not supported; load the "
                        "dataset without streaming=True (Arrow files are memory-mapped, so this "
                        "does not load it into memory)")
    raise ArgumentTypeError(f"convert: expected a datasets.DatasetDict or Dataset; got "
                            f"{type(dataset).__name__}")


def _select(splits: dict[str, Any], columns: Sequence[str] | None,
            spell: Spelling) -> dict[str, list[str]]:
    if isinstance(columns, str):
        raise ArgumentTypeError(f"convert: {spell.name('columns')} must be a list of names, not "
                                f"the string {columns!r}")
    chosen = {}
    for split, ds in splits.items():
        names = list(ds.column_names)
        if columns is None:
            chosen[split] = names
            continue
        missing = [c for c in columns if c not in names]
        if missing:
            raise ColumnNotFoundError(f"convert: split {split!r} has no column(s) {missing} "
                                      f"(asked for in {spell.name('columns')}); it has {names}")
        chosen[split] = list(dict.fromkeys(columns))
        if not chosen[split]:
            raise OptionError(f"convert: {spell.name('columns')} selects nothing to convert")
    return chosen


def _batch_rows(ds: Any, columns: list[str]) -> int:
    """Rows per batch so that one batch of the widest column's Arrow data stays near the byte
    target (what the records decode to is bounded separately, see ``_cuts``)."""
    n = max(1, ds.num_rows)
    table = ds.data.table if hasattr(ds.data, "table") else ds.data
    widest = max((table.column(c).nbytes for c in columns), default=0) / n
    return int(max(1, min(BATCH_ROWS_MAX, BATCH_BYTES_TARGET // max(1.0, widest))))


def _cuts(n: int, rows: int, decoded: np.ndarray | None) -> list[int]:
    """Batch boundaries over `n` rows: at most `rows` rows per batch and, when `decoded` gives
    each row's decoded bytes, about BATCH_BYTES_TARGET of them (one row at least)."""
    if decoded is None:
        return [*range(0, n, rows), n] if n else [0]
    ends = np.cumsum(decoded, dtype=np.uint64)
    cuts = [0]
    while cuts[-1] < n:
        start = cuts[-1]
        before = int(ends[start - 1]) if start else 0
        fits = int(np.searchsorted(ends, before + BATCH_BYTES_TARGET, side="right"))
        cuts.append(min(n, start + rows, max(start + 1, fits)))
    return cuts


def _batches(ds: Any, cuts: list[int]) -> Iterator[tuple[int, pa.Table]]:
    """(first row, pyarrow.Table) slices of `ds` between consecutive `cuts`, honouring any
    indices mapping."""
    rows = ds.with_format("arrow")
    for start, end in zip(cuts, cuts[1:]):
        yield start, rows[start:end]


def _versions() -> dict[str, str]:
    import datasets

    from loaderx_converter import __version__

    return {"loaderx-converter": __version__, "zrecord": zrecord.__version__,
            "datasets": datasets.__version__}


# The words `images=` and `audio=` take (MEDIA_MODES at run time), for type checkers.
MediaMode = Literal["decode", "encoded"]


def convert(dataset: Any, root: str | os.PathLike[str], *,
            codec: Codec | Mapping[str, Codec] = "zstd",
            columns: Sequence[str] | None = None,
            dict_bytes: bytes | Mapping[str, bytes] | None = None,
            dict_from: str | Sequence[str] | None = None, images: MediaMode = "decode",
            audio: MediaMode = "decode", data_shards: int = 4, progress: bool = True,
            storage_options: zrecord.StorageOptions | None = None,
            workers: int = 1) -> dict[str, Any]:
    """Write every (selected) column of every split as a zrecord store under ``root/split/column``.

    `dataset` is a ``datasets.DatasetDict`` or a single ``Dataset`` (written as its split name,
    or ``"train"``). Fixed-shape columns become :class:`zrecord.Dense`, variable-shape ones
    :class:`zrecord.Ragged`; values, dtypes and shapes are kept exactly, nothing is filtered,
    padded or transformed. `columns` selects a subset.

    `codec` is ``"raw"``, ``"zstd"`` or ``"zstd_dict"``, or a dict column -> codec in which
    the key ``"*"`` is the default for the other columns. A codec a column gets only as the
    default is measured against raw on a sample when its records are small (at most 64 bytes:
    labels, ids), and raw is kept if the codec would not store them in fewer bytes; a codec
    named for the column is used as it is. ``zstd_dict`` columns need a dictionary:
    `dict_bytes` (one for every such column, or a dict column -> dictionary, ``"*"`` the
    default), or `dict_from` (a column name or a list of them) to train each named column's
    dictionary from its own records. `data_shards` is passed to each store.

    `workers` > 1 hands the write pass's batches to that many worker processes, which decode
    and flatten them while this process writes them in order; the files written are those of
    ``workers=1``, byte for byte. The workers never import the caller's ``__main__`` (no
    ``if __name__ == "__main__"`` guard is needed); an error in one is raised here with its
    own class, and a worker that is killed raises :class:`WorkerError`.

    `images` and `audio` say what ``Image`` and ``Audio`` columns hold: ``"decode"`` stores the
    pixels or samples, as ``datasets`` decodes them; ``"encoded"`` stores each file's bytes,
    exactly, as a Ragged uint8 record of rank 1, and records the file formats (and, when a
    column mixes formats, each record's format in the store ``COLUMN.format``).

    Unsupported features, nulls, bad options and names that cannot be one folder name (``/``,
    ``..``, a leading ``.``, ...: :class:`UnsafePathError`) raise before anything is written.
    Each refusal is a :class:`ConversionError` (and the matching builtin: see
    ``loaderx_converter.errors``). `root` must not exist (:class:`DestinationExistsError`) and
    must not lie inside a published zrecord store (missing parent folders are made, as for
    every zrecord store); it appears, with every store and
    ``provenance.json``, only when all are written and the row counts agree. Returns the
    provenance record that was written (``loaderx_converter.info(root)`` reads it back).

    `root` may be an ``s3://bucket/prefix`` URL (`storage_options` as for
    ``zrecord.Dense.open``; given with a local path they are an error). Each store's prefix
    is checked before anything is written (one that holds a store raises
    :class:`DestinationExistsError`); the dataset is converted into a private temporary
    folder (under ``storage_options["cache_dir"]`` when given), then published with
    ``zrecord.publish_folder``: every store verified and uploaded header last, and
    ``provenance.json`` last of all. A conversion that fails publishes nothing and removes
    the folder; a publish that fails keeps it, and its error says where and how to publish
    it from there. Other schemes (``gs://``, ``http(s)://``: :class:`UnsafePathError`) are
    refused, never taken for a local folder.
    """
    return run(dataset, root, codec=codec, columns=columns, dict_bytes=dict_bytes,
               dict_from=dict_from, images=images, audio=audio, data_shards=data_shards,
               progress=progress, spell=PYTHON, storage_options=storage_options, workers=workers)


def run(dataset: Any, root: Any, *, codec: Any, columns: Sequence[str] | None, dict_bytes: Any,
        dict_from: Any, images: str, audio: str, data_shards: int, progress: bool,
        spell: Spelling, storage_options: zrecord.StorageOptions | None = None,
        workers: int = 1) -> dict[str, Any]:
    """convert() with the words of its errors chosen by `spell` (the command line's own)."""
    req = _options.request(codec, dict_bytes, dict_from, data_shards, spell)
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise OptionError(f"convert: {spell.name('workers')} must be a whole number of "
                          f"processes, at least 1; got {workers!r}")
    workers = int(workers)
    for keyword, value in (("images", images), ("audio", audio)):
        if value not in MEDIA_MODES:
            raise OptionError(f"convert: {spell.name(keyword)} must be 'decode' or 'encoded'; "
                              f"got {value!r}")
    dest = Destination(root, storage_options)
    try:
        splits = _splits(dataset)
        chosen = _select(splits, columns, spell)
        check_names(dest.root, chosen)
        dest.check_stores(chosen)
        opts = _options.resolve(req, (c for cols in chosen.values() for c in cols), spell)
        readers = {split: {c: reader_for(Where(split, c, splits[split].features[c], spell),
                                         images=images, audio=audio) for c in cols}
                   for split, cols in chosen.items()}
        job = _Job(dataset, dest.root, splits, chosen, readers, opts, req, data_shards,
                   progress, spell, {"images": images, "audio": audio}, workers)
        with ThreadPoolExecutor(os.cpu_count() or 1, thread_name_prefix="loaderx-convert") as pool:
            for by_column in readers.values():
                for reader in by_column.values():
                    reader.pool = pool
            record = job.run()
    except BaseException:
        dest.discard()
        raise
    dest.publish(progress)
    return record


class _Job:
    """One conversion: the check pass, the choices made from it, then the writes."""

    def __init__(self, dataset: Any, root: Path, splits: dict[str, Any],
                 chosen: dict[str, list[str]], readers: dict[str, dict[str, Any]],
                 opts: dict[str, ColumnOptions], req: Requested, data_shards: int,
                 progress: bool, spell: Spelling, media: dict[str, str], workers: int) -> None:
        self.dataset = dataset
        self.root = root
        self.splits = splits
        self.chosen = chosen
        self.readers = readers
        self.opts = opts
        self.req = req
        self.data_shards = data_shards
        self.progress = progress
        self.spell = spell
        self.media = media
        self.workers = workers
        self.team: Team | None = None  # the worker processes, while run() runs
        self.plans: dict[str, dict[str, ColumnPlan]] = {}
        self.formats: dict[str, list[str]] = {}  # encoded column of mixed formats -> names

    def cuts(self, split: str, decoded: bool = True) -> list[int]:
        """Batch boundaries of a split: by Arrow bytes for the check pass, also by decoded
        bytes (known from the check pass) for everything that decodes."""
        ds = self.splits[split]
        sizes = [np.frombuffer(r.sizes, dtype=np.uint64) for r in self.readers[split].values()
                 if decoded and getattr(r, "sizes", None) is not None]
        total = np.asarray(np.sum(sizes, axis=0, dtype=np.uint64)) if sizes else None
        return _cuts(ds.num_rows, _batch_rows(ds, self.chosen[split]), total)

    def run(self) -> dict[str, Any]:
        with Team(self.workers) if self.workers > 1 else contextlib.nullcontext() as team:
            self.team = team
            try:
                return self._run()
            finally:
                self.team = None

    def _run(self) -> dict[str, Any]:
        for split, ds in self.splits.items():
            with progress_bar(self.progress, ds.num_rows, f"{split}: check", "rows") as advance:
                for row0, table in _batches(ds, self.cuts(split, decoded=False)):
                    for c in self.chosen[split]:
                        self.readers[split][c].scan(column_of(table, c), row0)
                    advance(table.num_rows)
            self.plans[split] = {c: self.readers[split][c].plan() for c in self.chosen[split]}
        self._format_columns()
        for column, o in self.opts.items():
            if o.train:
                split = self._first_split_with(column)
                with progress_bar(self.progress, self.splits[split].num_rows,
                                  f"{column}: train dictionary", "rows") as advance:
                    _options.train(o, self._records(split, column, advance), split, column,
                                   self.spell)

        with zrecord.staged_directory(self.root) as staged:
            tmp = Path(staged)
            self._choose_codecs(tmp)
            layout = {split: self._write_split(split, tmp / split) for split in self.splits}
            provenance = provenance_of(self.dataset) or Provenance(source="datasets object")
            record = {
                "format": PROVENANCE_FORMAT,
                "provenance": provenance.to_dict(),
                "codec": self.req.codec,
                "options": {**self.req.to_dict(), **self.media, "data_shards": self.data_shards},
                "versions": _versions(),
                "splits": layout,
            }
            with open(tmp / PROVENANCE_FILE, "w", encoding="utf-8") as f:
                json.dump(record, f, indent=2)  # in the order of the splits and columns
                f.write("\n")
            # Leaving the block flushes every file below `tmp` and renames it to `root`.
        return record

    def _first_split_with(self, column: str) -> str:
        """The split whose records stand for the column: the first that has rows."""
        having = [s for s in self.splits if column in self.chosen[s]]
        return next((s for s in having if self.splits[s].num_rows), having[0])

    def _format_columns(self) -> None:
        """Encoded columns of mixed formats get a store of each record's format; its name must
        be a folder name free in every split (checked here, before anything is written)."""
        for column in self.opts:
            names: list[str] = []
            for split in self.chosen:
                reader = self.readers[split].get(column)
                if isinstance(reader, _EncodedReader):
                    names += [n for n in reader.names if n not in names]
            if len(names) < 2:
                continue
            extra = column + FORMAT_SUFFIX
            for split, ds in self.splits.items():
                if column in self.chosen[split] and extra in ds.column_names:
                    raise UnsafePathError(
                        f"convert: split {split!r} column {column!r} mixes file formats "
                        f"{sorted(names)}, and each record's format is written as the store "
                        f"{extra!r}, but the split has a column of that name; rename it first "
                        f"(dataset.rename_column({extra!r}, ...))", split=split, column=extra,
                        reason="is the name of the per-record format store of column "
                               f"{column!r}")
            check_names(self.root, {s: [extra] for s, cols in self.chosen.items()
                                    if column in cols})
            self.formats[column] = sorted(names)

    def _records(self, split: str, column: str,
                 advance: Callable[[int], object]) -> Iterator[np.ndarray]:
        """Every record of a column, in order (for training its dictionary)."""
        reader = self.readers[split][column]
        plan = self.plans[split][column]
        for row0, table in _batches(self.splits[split], self.cuts(split)):
            yield from reader.extract(column_of(table, column), plan, row0)
            advance(table.num_rows)

    def _choose_codecs(self, scratch: Path) -> None:
        """Measure the default codec against raw for small columns and for encoded files."""
        for column, o in self.opts.items():
            split = self._first_split_with(column)
            plan = self.plans[split][column]
            reader = self.readers[split][column]
            encoded = isinstance(reader, _EncodedReader)
            if o.named or not (encoded or _options.is_small(plan.kind, plan.record_bytes)):
                continue
            sample = self._sample(split, column)
            if encoded:
                _options.choose_codec(o, sample, scratch, _options.ENCODED_SAVING_MIN)
            else:
                _options.choose_codec(o, np.concatenate(sample) if sample else
                                      np.empty((0, *(plan.item_shape or ())), plan.dtype),
                                      scratch)

    def _sample(self, split: str, column: str) -> list[Any]:
        """The first records of a column, at most CODEC_SAMPLE_RECORDS of them and about
        CODEC_SAMPLE_BYTES_MAX bytes, read batch by batch (never the whole column at once):
        Dense batches (arrays) or Ragged records."""
        reader, plan = self.readers[split][column], self.plans[split][column]
        taken: list[Any] = []
        records = total = 0
        for row0, table in _batches(self.splits[split], self.cuts(split)):
            got = reader.extract(column_of(table, column), plan, row0)
            if plan.kind == "Dense":
                got = got[:_options.CODEC_SAMPLE_RECORDS - records]
                taken.append(got)
                records, total = records + len(got), total + got.nbytes
            else:
                for rec in got:
                    if records >= _options.CODEC_SAMPLE_RECORDS \
                            or total >= _options.CODEC_SAMPLE_BYTES_MAX:
                        break
                    taken.append(rec)
                    records, total = records + 1, total + rec.nbytes
            if records >= _options.CODEC_SAMPLE_RECORDS or total >= _options.CODEC_SAMPLE_BYTES_MAX:
                break
        return taken

    def _extracted(self, split: str) -> Generator[tuple[int, dict[str, Any]], None, None]:
        """(rows, records by column) of each write batch of a split, in order: extracted in
        this process, or with ``workers`` > 1 by that many worker processes (_workers)."""
        readers, plans, cols = self.readers[split], self.plans[split], self.chosen[split]
        batches = _batches(self.splits[split], self.cuts(split))
        if self.team is None:
            for row0, table in batches:
                yield table.num_rows, extract(readers, plans, cols, table, row0)
            return
        yield from self.team.extracted(batches, readers, plans, cols, split)

    def _write_split(self, split: str, folder: Path) -> dict[str, Any]:
        ds = self.splits[split]
        cols = self.chosen[split]
        readers, plans = self.readers[split], self.plans[split]
        folder.mkdir()
        writers: dict[str, Any] = {}
        # Appending (compressing, writing) batch k runs on its own thread, the GIL released,
        # while batch k + 1 is decoded: two batches of records exist at most.
        appender = ThreadPoolExecutor(1, thread_name_prefix="loaderx-convert-append")
        pending: Future[None] | None = None
        try:
            for c in cols:
                plan = plans[c]
                o = self.opts[c]
                if plan.kind == "Dense":
                    writers[c] = zrecord.Dense.create(
                        folder / c, plan.dtype, plan.item_shape or (), codec=o.codec,
                        data_shards=self.data_shards, dict_bytes=o.dict_bytes)
                else:
                    assert plan.ndim is not None, f"a Ragged plan without ndim: {plan}"
                    writers[c] = zrecord.Ragged.create(
                        folder / c, plan.dtype, plan.ndim, codec=o.codec,
                        data_shards=self.data_shards, dict_bytes=o.dict_bytes)
            with progress_bar(self.progress, ds.num_rows, f"{split}: write", "rows") as advance, \
                    contextlib.closing(self._extracted(split)) as extracted:
                for rows, batch in extracted:
                    if pending is not None:
                        pending.result()
                    pending = appender.submit(_append, writers, batch)
                    advance(rows)
                if pending is not None:
                    pending.result()
                    pending = None
            for c in cols:
                if c in self.formats:
                    extra = c + FORMAT_SUFFIX
                    writers[extra] = zrecord.Dense.create(folder / extra, np.uint8, (),
                                                          codec="raw", data_shards=1)
                    writers[extra].append(readers[c].format_codes(self.formats[c]))
            for w in writers.values():
                w.close()
        except BaseException:
            if pending is not None:
                pending.exception()  # wait: a writer is aborted only once nothing appends to it
            for w in writers.values():
                if not w.closed:
                    w.abort()
            raise
        finally:
            appender.shutdown(wait=True)
        columns: dict[str, Any] = {}
        for name in writers:
            with zrecord.open_store(folder / name) as store:
                if len(store) != ds.num_rows:
                    raise _IncompleteWriteError(
                        f"convert: split {split!r} column {name!r} has {len(store)} records, "
                        f"expected {ds.num_rows}; nothing was published")
        for c in cols:
            columns[c] = {**plans[c].describe(), **self.opts[c].describe(),
                          **readers[c].describe(), "records": ds.num_rows,
                          "feature": _feature_dict(ds.features[c])}
            if c in self.formats:
                extra = c + FORMAT_SUFFIX
                columns[c]["format_column"] = extra
                columns[extra] = {"kind": "Dense", "dtype": np.dtype(np.uint8).str,
                                  "item_shape": [], "codec": "raw", "records": ds.num_rows,
                                  "feature": {"_type": "ClassLabel", "names": self.formats[c]},
                                  "derived_from": c}
        return {"rows": ds.num_rows, "columns": columns}


def _append(writers: dict[str, Any], batch: dict[str, Any]) -> None:
    for column, records in batch.items():
        writers[column].append(records)


def _feature_dict(feature: Any) -> Any:
    import datasets

    return datasets.Features({"_": feature}).to_dict()["_"]
