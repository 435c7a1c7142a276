"""loaderx-converter: offline import of Hugging Face datasets into zrecord stores.

This release carries the package skeleton and its version only. ``huggingface()`` and
``convert()`` arrive with issue [F5]; until then this package exports nothing else, and
``from loaderx.converter import convert`` fails with an ImportError naming the missing name.
"""

__version__ = "0.1.0a0"

__all__ = ["__version__"]
