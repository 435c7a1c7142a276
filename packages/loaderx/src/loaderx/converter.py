"""The import path ``loaderx.converter``: the optional ``loaderx-converter`` distribution.

Importing it without the distribution installed raises an ImportError that says how to
install it, instead of a bare ModuleNotFoundError.
"""

# A star import of the converter's __all__, not names copied in at run time: type checkers
# follow it, so `from loaderx.converter import convert` type-checks ([U3] 6).
try:
    from loaderx_converter import *  # noqa: F403
    from loaderx_converter import __all__ as __all__
    from loaderx_converter import __version__ as __version__
except ImportError as exc:  # pragma: no cover - exercised by a subprocess test
    raise ImportError(
        "loaderx.converter needs the optional converter distribution: from a clone of the "
        "repository, in its root, pip install ./packages/zrecord ./packages/loaderx-converter "
        "(from the release's wheelhouse: pip install --no-index --find-links dist "
        "loaderx-converter; the loaderx on PyPI is another project)"
    ) from exc
