"""loaderx: a stateless sampler and a prefetching DataLoader over zrecord stores.

``from loaderx import DataLoader, Sampler`` gives the two classes a training loop needs (and
``Mix``, ``Mode``, ``LoaderClosedError``, ``BatchContext``); they live in
``loaderx.dataloader`` and ``loaderx.sampler``, whose import paths stay valid. The storage layer is the separate
distribution ``zrecord``; ``loaderx.zrecord`` and ``loaderx.utils`` re-export it so that code
written against the combined package keeps its import paths. ``loaderx.converter``
re-exports the optional ``loaderx-converter``; ``loaderx.torch`` and ``loaderx.ray`` need
PyTorch and Ray and are imported only when asked for.
"""

from loaderx.dataloader import BatchContext, DataLoader, LoaderClosedError
from loaderx.sampler import Mix, Mode, Sampler

# The one place the distribution's version is written: pyproject.toml reads it from here.
# 3.x: a new implementation of the loaderx design (the 2.x line is the published original).
__version__ = "3.0.0a0"

__all__ = ["BatchContext", "DataLoader", "LoaderClosedError", "Mix", "Mode", "Sampler"]
