"""The import path ``loaderx.utils``: store utilities from the ``zrecord`` distribution."""

from zrecord import open_store, train_dict

__all__ = ["open_store", "train_dict"]
