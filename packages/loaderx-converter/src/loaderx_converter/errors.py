"""Errors raised by the converter. Each also subclasses the matching builtin."""

from __future__ import annotations


class ConversionError(Exception):
    """Base class of every error the converter raises on its own."""


class UnsupportedFeatureError(ConversionError, TypeError):
    """A column's feature type (strings, nested dicts, ...) has no typed array form."""


class NullValueError(ConversionError, ValueError):
    """A column holds a null (missing value); zrecord records have no null."""


class InconsistentRecordsError(ConversionError, ValueError):
    """Records of one column disagree on dtype or rank, or a nested list is not rectangular."""


class HubError(ConversionError, ConnectionError):
    """The Hugging Face Hub (or the local cache, offline) could not provide the snapshot."""


class OptionError(ConversionError, ValueError):
    """A store option of ``convert`` (codec, dictionary, shard count) is invalid; the zrecord
    error that says why is its ``__cause__``."""


class UnsafePathError(ConversionError, ValueError):
    """A split or column name cannot be one folder name under ``root`` (``/abs``, ``a/b``,
    ``..``, a leading ``.``, too long, ...), or ``root`` lies inside a published zrecord store.

    ``split`` and ``column`` name the offender (``column`` is None for a split name; both are
    None for ``root``); ``reason`` says what is wrong with it.
    """

    def __init__(self, message: str, *, split: str | None = None, column: str | None = None,
                 reason: str = "") -> None:
        super().__init__(message)
        self.split = split
        self.column = column
        self.reason = reason
