"""Sizes as people read them (reprs, messages). Progress itself is
:func:`zrecord.console.progress_bar`, public for the tools built on zrecord."""

from __future__ import annotations


def human_bytes(n: int) -> str:
    """`n` bytes as people read them: "512 B", "4.0 KiB", "116 MiB", "1.5 GiB"."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            if unit == "B":
                return f"{int(size)} B"
            return f"{size:.1f} {unit}" if size < 10 else f"{size:,.0f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")
