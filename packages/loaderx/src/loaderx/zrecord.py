"""The import path ``loaderx.zrecord``: the public API of the ``zrecord`` distribution."""

from zrecord import (
    ChecksumError,
    ClosedError,
    CorruptStoreError,
    Dense,
    DenseReader,
    DenseWriter,
    FormatError,
    Ragged,
    RaggedReader,
    RaggedWriter,
    StoreExistsError,
    StoreIndexError,
    StoreNotFoundError,
    ZrecordError,
    open_store,
)

__all__ = [
    "ChecksumError",
    "ClosedError",
    "CorruptStoreError",
    "Dense",
    "DenseReader",
    "DenseWriter",
    "FormatError",
    "Ragged",
    "RaggedReader",
    "RaggedWriter",
    "StoreExistsError",
    "StoreIndexError",
    "StoreNotFoundError",
    "ZrecordError",
    "open_store",
]
