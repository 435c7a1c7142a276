"""Errors raised by the converter. Each also subclasses the matching builtin.

The converter's own modules raise only these classes (zrecord's errors, and the operating
system's ``OSError`` and ``MemoryError``, pass through unchanged), so ``except
ConversionError`` catches every refusal of the converter and nothing else.
"""

from __future__ import annotations


class ConversionError(Exception):
    """Base class of every error the converter raises on its own."""


class UnsupportedFeatureError(ConversionError, TypeError):
    """A column's feature type (strings, nested dicts, ...) has no typed array form."""


class NullValueError(ConversionError, ValueError):
    """A column holds a null (missing value); zrecord records have no null."""


class InconsistentRecordsError(ConversionError, ValueError):
    """Records of one column disagree on dtype or rank, or a nested list is not rectangular."""


class ArgumentTypeError(ConversionError, TypeError):
    """An argument of a type the converter does not take: a dataset that is not a
    ``datasets.Dataset`` or ``DatasetDict`` (a streaming one, a list, ...), or ``columns``
    given as one string instead of a list of names."""


class _NotFoundError(ConversionError, KeyError):
    """A name looked up that is not there; the message lists the names that are."""

    def __str__(self) -> str:
        # KeyError's str() is the repr of its key; this message is a sentence.
        return str(self.args[0]) if self.args else ""


class ColumnNotFoundError(_NotFoundError):
    """A column asked for (``convert(columns=...)``, ``RootInfo.label_names``,
    ``SplitInfo[column]``) that the split or converted root does not have; the message lists
    the columns it has."""


class SplitNotFoundError(_NotFoundError):
    """A split asked for (``RootInfo[split]``, ``RootInfo.features(split)``) that the converted
    root does not have; the message lists its splits."""


class ColumnKindError(ConversionError, ValueError):
    """A column is not of the kind the call needs (``label_names`` of a column that is not a
    ClassLabel column)."""


class SourceError(ConversionError, ValueError):
    """The source is not one the converter reads: a local path that is neither a
    ``save_to_disk`` folder nor parquet file(s), or one ``datasets`` cannot load (an unknown
    configuration, say: the error of ``datasets`` is the ``__cause__``); a Hub dataset id that
    is not ``owner/name``; a ``provenance.json`` that is not the converter's."""


class SourceNotFoundError(ConversionError, FileNotFoundError):
    """Nothing exists at the local path given as the source (``from_local``, the command
    line), or a folder given to ``info`` is not a converted root (no ``provenance.json``).

    Raised as ``SourceNotFoundError(errno.ENOENT, "no such file or directory", path)``, it
    has ``errno`` and ``filename`` and reads ``no such file or directory: 'path'``.
    """

    def __str__(self) -> str:
        # OSError's str() starts with "[Errno 2]", which says less than the words after it.
        if self.filename is not None and self.strerror:
            return f"{self.strerror}: {self.filename!r}"
        return super().__str__()


class DestinationExistsError(ConversionError, FileExistsError):
    """``root`` exists: ``convert`` never writes into or over an existing path."""


class _IncompleteWriteError(ConversionError, RuntimeError):
    """A store written by ``convert`` does not hold its split's row count. It would be a bug
    of the converter, checked before anything is published."""


class WorkerError(ConversionError, RuntimeError):
    """A worker process of ``convert(..., workers=N)`` ended before returning its batch
    (killed, or out of memory); the message names the split and rows it held. Nothing was
    published."""


class HubError(ConversionError, ConnectionError):
    """The Hugging Face Hub (or the local cache, offline) could not provide the snapshot."""


class OptionError(ConversionError, ValueError):
    """A store option of ``convert`` (codec, dictionary, shard count) is invalid; the zrecord
    error that says why is its ``__cause__``."""


class UnsafePathError(ConversionError, ValueError):
    """A split or column name cannot be one folder name under ``root`` (``/abs``, ``a/b``,
    ``..``, a leading ``.``, too long, ...), or ``root`` lies inside a published zrecord store,
    or ``root`` is a URL the converter cannot publish to (``gs://``, ``https://``: only
    ``s3://``), or ``storage_options`` were given with a local ``root``.

    ``split`` and ``column`` name the offender (``column`` is None for a split name; both are
    None for ``root``); ``reason`` says what is wrong with it.
    """

    def __init__(self, message: str, *, split: str | None = None, column: str | None = None,
                 reason: str = "") -> None:
        super().__init__(message)
        self.split = split
        self.column = column
        self.reason = reason
