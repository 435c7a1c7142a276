"""info(root): what a converted root holds, in one call, without ``datasets``.

A converted root is plain zrecord stores plus ``provenance.json``. ``info`` joins the two:
each store's own schema and record count (read from the store, so they are the truth) and
what only the provenance knows (the Hugging Face feature of each column, ClassLabel names,
the codec chosen and why, file formats, the source and its revision).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

import zrecord
from loaderx_converter._paths import PROVENANCE_FILE
from loaderx_converter.errors import (
    ColumnKindError,
    ColumnNotFoundError,
    SourceError,
    SourceNotFoundError,
    SplitNotFoundError,
)


@dataclass(frozen=True)
class ColumnInfo:
    """One converted column of one split (a zrecord store at `path`)."""

    name: str
    path: str
    kind: str  # "Dense" or "Ragged"
    dtype: np.dtype[Any]
    item_shape: tuple[int, ...] | None  # Dense: each record's shape; Ragged: None
    ndim: int  # the rank of every record
    records: int
    codec: str
    feature: dict[str, Any]  # the Hugging Face feature, as ``Features.to_dict()`` writes it
    label_names: list[str] | None  # ClassLabel names (also of a list of ClassLabel), else None
    encoding: str | None  # Image and Audio: "decoded" or "encoded"; else None
    formats: dict[str, int] | None  # encoded files: records per format
    details: dict[str, Any]  # everything the provenance says about the column

    @property
    def shape(self) -> str:
        """``(28, 28)`` for Dense, ``ndim=3`` for Ragged: for printing."""
        return str(tuple(self.item_shape)) if self.item_shape is not None else f"ndim={self.ndim}"


@dataclass(frozen=True)
class SplitInfo:
    """One split: its row count and its columns, in the order of the dataset."""

    name: str
    rows: int
    columns: dict[str, ColumnInfo]

    def __getitem__(self, column: str) -> ColumnInfo:
        try:
            return self.columns[column]
        except KeyError:
            raise ColumnNotFoundError(f"split {self.name!r} has no column {column!r}; its "
                                      f"columns: {list(self.columns)}") from None


@dataclass(frozen=True)
class RootInfo:
    """What ``info(root)`` returns. ``info(root)["train"]["label"].label_names``."""

    root: str
    splits: dict[str, SplitInfo]
    source: dict[str, Any]  # where the data came from: source, repo_id, revision, ...
    versions: dict[str, str]
    record: dict[str, Any]  # the whole of provenance.json

    def __getitem__(self, split: str) -> SplitInfo:
        try:
            return self.splits[split]
        except KeyError:
            raise SplitNotFoundError(f"{self.root!r} has no split {split!r}; its splits: "
                                     f"{list(self.splits)}") from None

    def label_names(self, column: str, split: str | None = None) -> list[str]:
        """The ClassLabel names of `column` (in the first split that has it, or `split`)."""
        for name, s in self.splits.items():
            if (split is None or name == split) and column in s.columns:
                names = s.columns[column].label_names
                if names is None:
                    raise ColumnKindError(f"column {column!r} is not a ClassLabel column; its "
                                          f"feature is {s.columns[column].feature}")
                return names
        raise ColumnNotFoundError(
            f"no column {column!r}" + (f" in split {split!r}" if split else "") +
            f"; columns: {sorted({c for s in self.splits.values() for c in s.columns})}")

    def features(self, split: str | None = None) -> Any:
        """The columns' Hugging Face features as a ``datasets.Features`` (needs ``datasets``)."""
        import datasets

        s = self[split] if split is not None else next(iter(self.splits.values()))
        return datasets.Features.from_dict({c: col.feature for c, col in s.columns.items()})

    def __str__(self) -> str:
        src = self.source
        where = src.get("repo_id") or src.get("source", "?")
        if src.get("revision"):
            where += f" @ {src['revision']}"
        lines = [f"{self.root}: from {where}"]
        for s in self.splits.values():
            lines.append(f"  {s.name}: {s.rows:,} rows")
            for c in s.columns.values():
                extra = []
                if c.label_names is not None:
                    shown = ", ".join(c.label_names[:6]) + (", ..." if len(c.label_names) > 6 else "")
                    extra.append(f"labels [{shown}]")
                if c.encoding:
                    extra.append(c.encoding)
                if c.formats:
                    extra.append(", ".join(f"{k} {v}" for k, v in c.formats.items()))
                lines.append(f"    {c.name}: {c.kind} {c.dtype} {c.shape} {c.codec}"
                             + (f" ({'; '.join(extra)})" if extra else ""))
        return "\n".join(lines)


def _label_names(feature: Any) -> list[str] | None:
    while isinstance(feature, dict):
        if feature.get("_type") == "ClassLabel":
            names = feature.get("names")
            return [str(n) for n in names] if isinstance(names, list) else None
        feature = feature.get("feature")
    return None


def info(root: Any) -> RootInfo:
    """Splits, columns (kind, dtype, shape, records, codec), features, ClassLabel names, file
    formats and the source of the converted dataset at `root`.

    Schemas and counts come from the stores themselves; the rest from ``provenance.json``.
    Raises :class:`SourceNotFoundError` (a FileNotFoundError) when `root` holds no
    ``provenance.json`` (a single zrecord store is described by ``zrecord info`` and
    ``open_store(path).info()``), :class:`SourceError` when that file is not the converter's,
    or `root` is a URL (info reads a root on this machine).
    """
    text = os.fspath(root)
    if isinstance(text, str) and (zrecord.is_url(text) or "://" in text):
        # A URL is no local path: made absolute it named a folder 's3:' under the working one.
        raise SourceError(f"info reads a converted dataset root on this machine; {text!r} is a "
                          f"URL: its stores open by URL (zrecord.open_store('{text.rstrip('/')}"
                          "/SPLIT/COLUMN'), and its provenance.json lies beside them")
    root = os.path.abspath(text)
    path = os.path.join(root, PROVENANCE_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except FileNotFoundError:
        raise SourceNotFoundError(
            f"{root!r} is not a converted dataset root: it has no {PROVENANCE_FILE} (a single "
            "zrecord store is described by `zrecord info PATH`)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SourceError(f"{path!r} is not a loaderx-converter provenance file: it is not "
                          f"JSON ({exc})") from exc
    if not isinstance(record, dict) or "splits" not in record:
        raise SourceError(f"{path!r} is not a loaderx-converter provenance file: it has no "
                          "'splits'")
    splits = {}
    for split, entry in record["splits"].items():
        columns = {}
        for name, col in entry.get("columns", {}).items():
            store_path = os.path.join(root, split, name)
            with zrecord.open_store(store_path) as store:
                meta = store.info()
            feature = col.get("feature") or {}
            columns[name] = ColumnInfo(
                name=name, path=store_path, kind=str(meta["kind"]), dtype=np.dtype(meta["dtype"]),
                item_shape=tuple(meta["item_shape"]) if meta["item_shape"] is not None else None,
                ndim=int(meta["ndim"]), records=int(meta["records"]), codec=str(meta["codec"]),
                feature=feature, label_names=_label_names(feature),
                encoding=col.get("encoding"), formats=col.get("formats"), details=col)
        splits[split] = SplitInfo(split, int(entry.get("rows", 0)), columns)
    return RootInfo(root=root, splits=splits, source=record.get("provenance", {}),
                    versions=record.get("versions", {}), record=record)
