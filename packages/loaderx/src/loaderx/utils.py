"""The import path ``loaderx.utils``: store utilities from the ``zrecord`` distribution."""

from zrecord import open_store

__all__ = ["open_store"]
