"""loaderx-converter: offline import of Hugging Face datasets into zrecord stores.

``huggingface()`` resolves a Hub revision to an exact commit and loads that snapshot;
``from_local()`` loads a ``save_to_disk`` folder or parquet files; ``convert()`` writes one typed
zrecord store per column under ``root/split/column`` and publishes the whole tree at once, so
training needs neither ``datasets`` nor Arrow; ``info()`` says what a converted root holds
(splits, columns, features, ClassLabel names, source). The user's import path is
``loaderx.converter``.
"""

from loaderx_converter._convert import convert
from loaderx_converter._hub import Provenance, from_local, huggingface, resolve_revision
from loaderx_converter._info import ColumnInfo, RootInfo, SplitInfo, info
from loaderx_converter.errors import (
    ArgumentTypeError,
    ColumnKindError,
    ColumnNotFoundError,
    ConversionError,
    DestinationExistsError,
    HubError,
    InconsistentRecordsError,
    NullValueError,
    OptionError,
    SourceError,
    SourceNotFoundError,
    SplitNotFoundError,
    UnsafePathError,
    UnsupportedFeatureError,
    WorkerError,
)

# The one place the distribution's version is written: pyproject.toml reads it from here.
__version__ = "0.1.0"

__all__ = [
    "ArgumentTypeError",
    "ColumnInfo",
    "ColumnKindError",
    "ColumnNotFoundError",
    "ConversionError",
    "DestinationExistsError",
    "HubError",
    "InconsistentRecordsError",
    "NullValueError",
    "OptionError",
    "Provenance",
    "RootInfo",
    "SourceError",
    "SourceNotFoundError",
    "SplitInfo",
    "SplitNotFoundError",
    "UnsafePathError",
    "UnsupportedFeatureError",
    "WorkerError",
    "__version__",
    "convert",
    "from_local",
    "huggingface",
    "info",
    "resolve_revision",
]
