"""loaderx: a stateless sampler and a prefetching DataLoader over zrecord stores.

The storage layer is the separate distribution ``zrecord``; ``loaderx.zrecord`` and
``loaderx.utils`` re-export it so that code written against the combined package keeps its
import paths. ``loaderx.converter`` re-exports the optional ``loaderx-converter``.
"""

# The one place the distribution's version is written: pyproject.toml reads it from here.
# 3.x: a new implementation of the loaderx design (the 2.x line is the published original).
__version__ = "3.0.0a0"
