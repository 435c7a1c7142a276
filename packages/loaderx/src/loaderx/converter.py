"""The import path ``loaderx.converter``: the optional ``loaderx-converter`` distribution.

Importing it without the distribution installed raises an ImportError that says how to
install it, instead of a bare ModuleNotFoundError.
"""

try:
    import loaderx_converter as _converter
except ImportError as exc:  # pragma: no cover - exercised by a subprocess test
    raise ImportError(
        "loaderx.converter needs the optional converter distribution: "
        "pip install 'loaderx[converter]' (until it is published, from a clone of the "
        "repository: pip install ./packages/loaderx-converter; the loaderx on PyPI is "
        "another project)"
    ) from exc

__all__ = list(getattr(_converter, "__all__", []))
globals().update({name: getattr(_converter, name) for name in __all__})
