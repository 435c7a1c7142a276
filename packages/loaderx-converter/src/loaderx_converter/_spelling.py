"""How an error names the way out: in Python keywords, or in command-line flags.

The same check raises for ``convert(...)`` and for ``loaderx-convert``; a message that tells a
command-line user to pass ``columns=[...]`` sends them looking for a flag that does not exist.
Every message that names an option asks a :class:`Spelling` for its words; the command line
passes :data:`CLI`, everything else gets :data:`PYTHON`.
"""

from __future__ import annotations

from dataclasses import dataclass

# Keyword of convert() -> its command-line flag.
_FLAGS = {
    "codec": "--codec",
    "dict_bytes": "--dict",
    "dict_from": "--dict-from",
    "data_shards": "--data-shards",
    "columns": "--columns",
    "images": "--images",
    "audio": "--audio",
    "workers": "--workers",
}


@dataclass(frozen=True)
class Spelling:
    """The words of one interface (Python or the command line) for the options of convert."""

    cli: bool

    def name(self, keyword: str) -> str:
        """``codec`` in Python, ``--codec`` on the command line."""
        return _FLAGS[keyword] if self.cli else keyword

    def option(self, keyword: str, value: str) -> str:
        """``images='encoded'`` in Python, ``--images encoded`` on the command line."""
        return f"{_FLAGS[keyword]} {value}" if self.cli else f"{keyword}={value!r}"

    def per_column(self, keyword: str, column: str, value: str) -> str:
        """How to give `value` to one column: ``codec={'label': 'raw'}`` / ``--codec label=raw``."""
        if self.cli:
            return f"{_FLAGS[keyword]} {column}={value}"
        return f"{keyword}={{{column!r}: {value if keyword == 'dict_bytes' else repr(value)}}}"

    def leave_out(self, column: str) -> str:
        """How to convert the other columns and not `column`."""
        if self.cli:
            return (f"leave {column!r} out with --columns (a comma-separated list of the "
                    "columns to keep)")
        return f"leave {column!r} out with columns=[...] (the columns to keep)"

    def one_mode(self, column: str, mode: str = "RGB") -> str:
        """How to give an Image column one mode."""
        if self.cli:
            return (f"decode them to one mode with --cast {column}={mode} (or --image-mode "
                    f"{mode} for every Image column)")
        return (f"cast it to one mode first: dataset = dataset.cast_column({column!r}, "
                f"datasets.Image(mode={mode!r}))")

    def fix_in_python(self, what: str) -> str:
        """A change only Python can make (`what`), worded for this interface."""
        if self.cli:
            return f"{what} in Python, then convert with loaderx_converter.convert"
        return what


PYTHON = Spelling(cli=False)
CLI = Spelling(cli=True)
