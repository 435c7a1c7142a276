"""The exception hierarchy of zrecord.

Every class derives from :class:`ZrecordError` and also from the builtin exception a Python
user would expect for the situation (``IndexError``, ``FileExistsError``, ``ValueError``, ...),
so ``except IndexError`` keeps working. Errors raised by the native core carry the record index
and shard they concern (``record``/``shard``, ``None`` when not applicable) and a message that
names the store, the file and what was given versus what was required.
"""

from __future__ import annotations

import errno as _errno
import os


class ZrecordError(Exception):
    """Base class of every error raised by zrecord."""

    record: int | None = None
    shard: int | None = None


class StoreExistsError(ZrecordError, FileExistsError):
    """The path given to ``create`` already exists; published stores are never overwritten."""


class StoreNotFoundError(ZrecordError, FileNotFoundError):
    """No store (and no directory) exists at the path given to ``open``."""


class SchemaError(ZrecordError, TypeError, ValueError):
    """A schema (dtype, item shape, rank) or an appended value does not fit the contract."""


class CodecError(ZrecordError, ValueError):
    """A codec name or dictionary argument is invalid."""


class LimitError(ZrecordError, ValueError):
    """A format limit (record size, rank, shard count, dictionary size, ...) is exceeded."""


class ModeError(ZrecordError, TypeError):
    """A writer was read, or a reader was appended to."""


class ClosedError(ZrecordError, ValueError):
    """The store or writer was closed (or, for a writer, published or aborted)."""


class StoreIndexError(ZrecordError, IndexError):
    """A record index is outside ``0 .. len(store) - 1``."""


class FormatError(ZrecordError, ValueError):
    """The files at the path are not a valid zrecord store (spec violation)."""


class NotPublishedError(FormatError):
    """The directory holds no published store (no ``header.zrh``): a writer never finished."""


class BadMagicError(FormatError):
    """``header.zrh`` does not start with the zrecord magic."""


class UnsupportedVersionError(FormatError):
    """The store's format major version is newer than this reader."""


class UnsupportedError(FormatError):
    """The store uses a kind, dtype or codec code this build does not know."""


class CorruptStoreError(FormatError):
    """A structural rule of the format is violated (sizes, offsets, reserved bytes)."""


class ChecksumError(CorruptStoreError):
    """Stored bytes do not match their checksum: the store is corrupt."""


class DecodeError(CorruptStoreError):
    """A compressed record does not decode to its recorded size."""


class ImmutableStoreError(ZrecordError, PermissionError):
    """A store path lies inside a published store; published stores are immutable."""


class KindMismatchError(ZrecordError, TypeError):
    """A Dense store was opened as Ragged, or the reverse."""


class StoreOSError(ZrecordError, OSError):
    """The operating system refused a file operation (disk full, permissions, ...)."""


class RemoteError(StoreOSError):
    """A request to the object store or web server of a remote store failed after its retries
    (or was refused: access denied). The message names the URL and the object, never a
    credential."""


class StoreChangedError(RemoteError):
    """A store is no longer the one seen before: an object of a remote store changed after
    open (its ETag changed, or it is shorter), or a pickled store reopened in another process
    found another store at its location. It was replaced; open it again."""


class StoreMemoryError(ZrecordError, MemoryError):
    """The native core could not allocate memory."""


class InvalidArgumentError(ZrecordError, ValueError):
    """The native core refused an argument that the Python layer did not check first (for
    example too few samples to train a dictionary from)."""


class WorkerError(ZrecordError, RuntimeError):
    """An input of :func:`zrecord.write_dataset` failed in a worker (or a worker died), so
    nothing was published. ``input_index`` is the input's position (None when a worker
    died); the message carries the worker's traceback."""

    input_index: int | None = None


# Native result codes (zig/include/zrecord.h's zr_result) by name -> exception class. The one
# mapping; numbers never appear here (the binding passes the name the core gives a code).
BY_RESULT_NAME: dict[str, type[ZrecordError]] = {
    "ZR_E_INVALID_ARGUMENT": InvalidArgumentError,
    "ZR_E_IO": StoreOSError,
    "ZR_E_NOT_FOUND": StoreNotFoundError,
    "ZR_E_EXISTS": StoreExistsError,
    "ZR_E_NO_MEMORY": StoreMemoryError,
    "ZR_E_INDEX": StoreIndexError,
    "ZR_E_CLOSED": ClosedError,
    "ZR_E_BAD_MAGIC": BadMagicError,
    "ZR_E_VERSION": UnsupportedVersionError,
    "ZR_E_CORRUPT": CorruptStoreError,
    "ZR_E_CHECKSUM": ChecksumError,
    "ZR_E_NOT_PUBLISHED": NotPublishedError,
    "ZR_E_UNSUPPORTED": UnsupportedError,
    "ZR_E_LIMIT": LimitError,
    "ZR_E_DECODE": DecodeError,
    "ZR_E_IMMUTABLE": ImmutableStoreError,
}


def from_status(name: str, os_errno: int, record: int, shard: int, message: str) -> ZrecordError:
    """Build the exception for a native failure named `name` (used by the binding only)."""
    cls = BY_RESULT_NAME.get(name, ZrecordError)
    exc: ZrecordError
    if cls is StoreOSError:
        err = os_errno or _errno.EIO
        # The core already says "(errno N: text)" when it had an errno; say it once.
        said = f"(errno {err}: " in message
        exc = StoreOSError(err, message if said else f"{message} ({os.strerror(err)})")
    else:
        exc = cls(message)
    exc.record = record if record >= 0 else None
    exc.shard = shard if shard >= 0 else None
    return exc


# The exception classes are the public API; BY_RESULT_NAME and from_status serve the binding.
__all__ = [
    "BadMagicError",
    "ChecksumError",
    "ClosedError",
    "CodecError",
    "CorruptStoreError",
    "DecodeError",
    "FormatError",
    "ImmutableStoreError",
    "InvalidArgumentError",
    "KindMismatchError",
    "LimitError",
    "ModeError",
    "NotPublishedError",
    "RemoteError",
    "SchemaError",
    "StoreChangedError",
    "StoreExistsError",
    "StoreIndexError",
    "StoreMemoryError",
    "StoreNotFoundError",
    "StoreOSError",
    "UnsupportedError",
    "UnsupportedVersionError",
    "WorkerError",
    "ZrecordError",
]
