"""Progress bars for long work that the caller asked to watch (``progress=True``).

zrecord needs only NumPy at run time, so tqdm is imported only when a bar is asked for; a
missing tqdm is an ImportError that says how to install it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager


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


@contextmanager
def progress_bar(enabled: bool, total: int | None, desc: str,
                 unit: str = "records") -> Iterator[Callable[[int], object]]:
    """Yield ``update(n)``: a tqdm bar's when `enabled`, else a function that does nothing."""
    if not enabled:
        yield lambda n: None
        return
    try:
        from tqdm.auto import tqdm
    except ImportError as exc:
        raise ImportError("progress=True needs tqdm: pip install tqdm") from exc
    bar = tqdm(total=total, desc=desc, unit=unit, unit_scale=True, dynamic_ncols=True)
    try:
        yield bar.update
    finally:
        bar.close()
