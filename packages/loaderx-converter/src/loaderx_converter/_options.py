"""Per-column store options of convert(): which codec and dictionary each column gets.

``codec`` and ``dict_bytes`` are one value for every column, or a mapping column -> value in
which the key ``"*"`` gives the default for the columns it does not name. ``dict_from`` names
columns whose dictionary is trained from their own records.

Invariants:
- Every option is checked before the dataset is read: codec names, dictionaries (zrecord's own
  checks), keys that name no converted column, a dictionary given for a column whose codec
  does not use one, a ``zstd_dict`` column without a dictionary.
- A codec the user named for a column is used as it is. A codec that reaches a column only as
  the default never makes a small fixed-size column (labels, ids: at most
  ``SMALL_RECORD_BYTES_MAX`` bytes per record) larger than raw: the default codec and raw are
  measured on a sample of the column's records, written with zrecord itself, and the smaller
  wins. Encoded files (JPEG, PNG, ... kept as bytes) are already compressed: the default codec
  is kept for them only if it saves at least ``ENCODED_SAVING_MIN`` of raw's bytes on a
  sample, since every read would pay for decompressing. The choice and its measurement go
  into the provenance.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import zrecord
from loaderx_converter._spelling import Spelling
from loaderx_converter.errors import OptionError

DEFAULT_KEY = "*"
# Records at most this large (Dense) are "small": the default codec must earn its place.
SMALL_RECORD_BYTES_MAX = 64
# Records written twice (raw is computed, the codec is written) to choose a column's codec;
# a sample of encoded files stops at CODEC_SAMPLE_BYTES_MAX.
CODEC_SAMPLE_RECORDS = 4096
CODEC_SAMPLE_BYTES_MAX = 16 << 20
# The share of raw's bytes a codec must save on encoded files to be kept as their default.
ENCODED_SAVING_MIN = 0.05
# At most this many bytes of a column's records train its dictionary (dict_from).
DICT_SAMPLE_BYTES_MAX = 32 << 20


@dataclass
class ColumnOptions:
    """The store options of one column, and where they came from."""

    codec: zrecord.Codec
    named: bool  # the user named this column in `codec` (so it is used as it is)
    dict_bytes: bytes | None = None
    train: bool = False  # dict_from: train the dictionary from this column
    choice: dict[str, Any] | None = None  # how a default codec was kept or replaced
    dict_source: dict[str, Any] | None = None  # what the trained dictionary was trained on

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"codec": self.codec}
        if self.choice is not None:
            out["codec_choice"] = self.choice
        if self.dict_bytes is not None:
            out["dictionary"] = {"bytes": len(self.dict_bytes),
                                 "sha256": hashlib.sha256(self.dict_bytes).hexdigest(),
                                 **(self.dict_source or {"given": True})}
        return out


@dataclass(frozen=True)
class Requested:
    """The options as given, split into defaults and per-column values, checked for form."""

    codec: zrecord.Codec
    codecs: dict[str, zrecord.Codec]
    dict_default: bytes | None
    dicts: dict[str, bytes]
    dict_from: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """What the provenance records of the request (dictionaries by size, not content)."""
        out: dict[str, Any] = {"codec": {DEFAULT_KEY: self.codec, **self.codecs}}
        if self.dict_default is not None or self.dicts:
            out["dict_bytes"] = {k: len(v) for k, v in (
                [(DEFAULT_KEY, self.dict_default)] if self.dict_default is not None else [])}
            out["dict_bytes"].update({k: len(v) for k, v in self.dicts.items()})
        if self.dict_from:
            out["dict_from"] = list(self.dict_from)
        return out


def _split(value: Any, keyword: str, default: Any, spell: Spelling) -> tuple[Any, dict[str, Any]]:
    if not isinstance(value, Mapping):
        return value, {}
    named = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise OptionError(f"convert: the keys of {spell.name(keyword)} are column names (or "
                              f"{DEFAULT_KEY!r} for the default); got {key!r}")
        if key != DEFAULT_KEY:
            named[key] = item
    return value.get(DEFAULT_KEY, default), named


def _dict(value: Any, column: str | None, spell: Spelling) -> bytes:
    where = f"the dictionary for column {column!r}" if column else "the dictionary"
    try:
        zrecord.check_store_options(codec="zstd_dict", dict_bytes=value)
    except zrecord.ZrecordError as exc:
        raise OptionError(f"convert: {where} ({spell.name('dict_bytes')}) is refused: "
                          f"{exc}") from exc
    return bytes(value)


def request(codec: Any, dict_bytes: Any, dict_from: Any, data_shards: Any,
            spell: Spelling) -> Requested:
    """Check the form of every option before the dataset is touched."""
    default, codecs = _split(codec, "codec", "zstd", spell)
    for column, value in [(None, default), *codecs.items()]:
        # zrecord's list: a codec it gains is one the converter offers.
        if not isinstance(value, str) or value not in zrecord.CODECS:
            whose = f" for column {column!r}" if column else ""
            raise OptionError(f"convert: {spell.name('codec')}{whose} must be one of "
                              f"{', '.join(map(repr, zrecord.CODECS))}; got {value!r}")
    dict_default, dicts = _split(dict_bytes, "dict_bytes", None, spell)
    if dict_default is not None:
        dict_default = _dict(dict_default, None, spell)
    dicts = {c: _dict(d, c, spell) for c, d in dicts.items()}
    if isinstance(dict_from, str):
        dict_from = [dict_from]
    trained = tuple(dict.fromkeys(dict_from or ()))
    if not all(isinstance(c, str) for c in trained):
        raise OptionError(f"convert: {spell.name('dict_from')} names columns; got {dict_from!r}")
    try:
        zrecord.check_store_options(codec="raw", data_shards=data_shards)
    except zrecord.ZrecordError as exc:
        raise OptionError(f"convert: {spell.name('data_shards')} must be an int in 1..255; got "
                          f"{data_shards!r}") from exc
    if default == "zstd_dict" and dict_default is None and not dicts and not trained:
        raise OptionError(
            f"convert: codec 'zstd_dict' needs {spell.name('dict_bytes')} (a dictionary: train "
            f"one with zrecord.train_dict(settled_data)) or {spell.name('dict_from')} (columns "
            "whose dictionary is trained from their own records)")
    uses_dict = default == "zstd_dict" or "zstd_dict" in codecs.values() or bool(trained)
    if dict_default is not None and not uses_dict:
        raise OptionError(f"convert: {spell.name('dict_bytes')} is only used by codec "
                          f"'zstd_dict'; got codec {default!r} with a dictionary")
    return Requested(default, codecs, dict_default, dicts, trained)


def resolve(req: Requested, columns: Iterable[str], spell: Spelling) -> dict[str, ColumnOptions]:
    """The options of every converted column (the union over splits), or OptionError for
    anything that names no converted column or leaves a zstd_dict column without a dictionary."""
    converted = list(dict.fromkeys(columns))
    for keyword, names in (("codec", req.codecs), ("dict_bytes", req.dicts),
                           ("dict_from", req.dict_from)):
        unknown = [c for c in names if c not in converted]
        if unknown:
            raise OptionError(f"convert: {spell.name(keyword)} names column(s) {unknown} that "
                              f"are not converted; the converted columns are {converted}")
    out = {}
    for c in converted:
        named = c in req.codecs
        codec = req.codecs.get(c, req.codec)
        opts = ColumnOptions(codec, named)
        if c in req.dict_from:
            if named and codec != "zstd_dict":
                raise OptionError(
                    f"convert: {spell.name('dict_from')} trains a dictionary for column {c!r}, "
                    f"but {spell.name('codec')} gives it codec {codec!r}")
            if c in req.dicts:
                raise OptionError(f"convert: column {c!r} has a dictionary in "
                                  f"{spell.name('dict_bytes')} and one to train in "
                                  f"{spell.name('dict_from')}; choose one")
            opts.codec, opts.named, opts.train = "zstd_dict", True, True
        elif c in req.dicts:
            if codec != "zstd_dict":
                raise OptionError(f"convert: {spell.name('dict_bytes')} gives column {c!r} a "
                                  f"dictionary, but its codec is {codec!r}; add "
                                  f"{spell.per_column('codec', c, 'zstd_dict')}")
            opts.dict_bytes = req.dicts[c]
        elif codec == "zstd_dict":
            if req.dict_default is None:
                ways = (f"--dict {c}=FILE, or have one trained with --dict-from {c}"
                        if spell.cli else
                        f"dict_bytes={{{c!r}: d}} (d = zrecord.train_dict(...)), or have one "
                        f"trained with dict_from=[{c!r}]")
                raise OptionError(f"convert: column {c!r} has codec 'zstd_dict' but no "
                                  f"dictionary: give one with {ways}")
            opts.dict_bytes = req.dict_default
        out[c] = opts
    return out


def is_small(kind: str, record_bytes: int | None) -> bool:
    """A column whose default codec must beat raw on a sample (see the module docstring)."""
    return kind == "Dense" and record_bytes is not None and record_bytes <= SMALL_RECORD_BYTES_MAX


def choose_codec(opts: ColumnOptions, sample: np.ndarray | list[np.ndarray], scratch: Path,
                 saving_min: float = 0.0) -> None:
    """Keep the default codec of a column only if it stores `sample` (a Dense batch or a list
    of Ragged records) in fewer bytes than raw, by at least `saving_min` of raw's bytes; record
    the measurement in ``opts.choice``."""
    requested = opts.codec
    records = len(sample)
    raw_bytes = int(sample.nbytes if isinstance(sample, np.ndarray)
                    else sum(r.nbytes for r in sample))
    measured: dict[str, Any] = {"requested": requested, "sample_records": records,
                                "raw_bytes": raw_bytes}
    if requested == "raw" or records == 0:
        opts.choice = {**measured, "chosen": requested,
                       "why": "nothing to measure" if records == 0 else "raw was asked for"}
        return
    with tempfile.TemporaryDirectory(prefix="codec-sample-", dir=scratch) as folder:
        path = Path(folder) / "sample"
        writer: Any
        if isinstance(sample, np.ndarray):
            writer = zrecord.Dense.create(path, sample.dtype, sample.shape[1:], codec=requested,
                                          data_shards=1, dict_bytes=opts.dict_bytes, sync=False)
        else:
            writer = zrecord.Ragged.create(path, sample[0].dtype, sample[0].ndim,
                                           codec=requested, data_shards=1,
                                           dict_bytes=opts.dict_bytes, sync=False)
        with writer:
            writer.append(sample)
        with zrecord.open_store(path) as store:
            coded = int(store.stored_bytes)
    measured[f"{requested}_bytes"] = coded
    ratio = coded / max(1, raw_bytes)
    if ratio < 1.0 - saving_min:
        opts.choice = {**measured, "chosen": requested,
                       "why": f"{requested} stores the sample in {ratio:.2f}x the bytes of raw"}
        return
    wanted = (f"; a saving of at least {saving_min:.0%} was required" if saving_min else "")
    opts.choice = {**measured, "chosen": "raw",
                   "why": f"{requested} would store the sample in {ratio:.2f}x the bytes of raw"
                          + wanted}
    opts.codec, opts.dict_bytes = "raw", None


def train(opts: ColumnOptions, records: Iterable[np.ndarray], split: str, column: str,
          spell: Spelling) -> None:
    """Train the dictionary of a dict_from column from its records (the first ones, up to
    DICT_SAMPLE_BYTES_MAX bytes)."""
    counted = _Counted(records)
    try:
        opts.dict_bytes = zrecord.train_dict(counted, sample_bytes_max=DICT_SAMPLE_BYTES_MAX)
    except (ValueError, zrecord.ZrecordError) as exc:
        raise OptionError(
            f"convert: {spell.name('dict_from')} could not train a dictionary from split "
            f"{split!r} column {column!r}: {exc}; give that column another codec "
            f"({spell.per_column('codec', column, 'zstd')})") from exc
    opts.dict_source = {"trained_from": {"split": split, "column": column,
                                         "records_read": counted.count,
                                         "sample_bytes_max": DICT_SAMPLE_BYTES_MAX}}


class _Counted:
    """An iterable that counts the records taken from it."""

    def __init__(self, records: Iterable[np.ndarray]) -> None:
        self._records = records
        self.count = 0

    def __iter__(self) -> Any:
        for rec in self._records:
            self.count += 1
            yield rec
