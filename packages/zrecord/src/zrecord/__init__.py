"""zrecord: a typed, ordered, immutable on-disk record container.

A store is an ordered sequence of NumPy records written once by an append-only writer and
published atomically by ``close()``. :class:`Dense` stores one fixed-shape array per record,
:class:`Ragged` one variable-shape array (fixed dtype and rank) per record. The logical ID of a
record is its append position. The on-disk format is specified in ``spec/format-v1.md``.

``Dense.open`` returns a :class:`DenseReader` and ``Dense.create`` a :class:`DenseWriter`
(likewise for Ragged): distinct types, so a type checker rejects appending to a reader or
indexing a writer; both are instances of their kind (``isinstance(x, Dense)``).
"""

from zrecord._cost import (
    LINKS,
    PRICES,
    EpochCost,
    Link,
    Price,
    block_records_for,
    epoch_cost,
    link_of,
    price_of,
)
from zrecord._dataset import (
    DenseDataset,
    RaggedDataset,
    dataset_versions,
    extend_dataset,
    open_dataset,
    publish_dataset,
)
from zrecord._dict import train_dict
from zrecord._dtypes import CODECS, check_store_options
from zrecord._kinds import Dense, Ragged
from zrecord._objects import is_url
from zrecord._parallel import write_dataset
from zrecord._paths import enclosing_store, store_location
from zrecord._publish import check_destination, publish, publish_folder
from zrecord._reader import DenseReader, RaggedReader, open_store
from zrecord._staging import staged_directory
from zrecord._types import Codec, StorageOptions
from zrecord._writer import DenseWriter, RaggedWriter
from zrecord.errors import (
    ChecksumError,
    ClosedError,
    CorruptStoreError,
    FormatError,
    ImmutableStoreError,
    StoreExistsError,
    StoreIndexError,
    StoreNotFoundError,
    ZrecordError,
)

# The one place the distribution's version is written: pyproject.toml reads it from here.
__version__ = "0.1.0"


def __getattr__(name: str) -> str:
    # ``zrecord.__zstd_version__``: the zstd the codecs run (zrecord/_build_info.py), looked up
    # on first use: it reads the build's record and may ask the loaded library.
    if name == "__zstd_version__":
        from zrecord._build_info import zstd_version

        globals()[name] = version = zstd_version()
        return version
    raise AttributeError(f"module 'zrecord' has no attribute {name!r}")


__all__ = [
    "CODECS",
    "PRICES",
    "ChecksumError",
    "ClosedError",
    "Codec",
    "CorruptStoreError",
    "Dense",
    "DenseDataset",
    "DenseReader",
    "DenseWriter",
    "EpochCost",
    "FormatError",
    "ImmutableStoreError",
    "LINKS",
    "Link",
    "Ragged",
    "RaggedDataset",
    "RaggedReader",
    "Price",
    "RaggedWriter",
    "StoreExistsError",
    "StoreIndexError",
    "StorageOptions",
    "StoreNotFoundError",
    "ZrecordError",
    "__version__",
    "__zstd_version__",
    "block_records_for",
    "check_destination",
    "check_store_options",
    "dataset_versions",
    "enclosing_store",
    "epoch_cost",
    "extend_dataset",
    "is_url",
    "link_of",
    "open_dataset",
    "open_store",
    "price_of",
    "publish",
    "publish_dataset",
    "publish_folder",
    "staged_directory",
    "store_location",
    "train_dict",
    "write_dataset",
]
