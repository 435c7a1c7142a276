"""Threads started together, for the concurrency tests of zrecord and loaderx."""

from __future__ import annotations

import threading
from collections.abc import Callable


def run_threads(work: Callable[[int], object], n: int = 8, timeout: float = 120.0) -> list[str]:
    """Run ``work(k)`` for k in 0..n-1 on n threads released together by a barrier; return the
    failures (``"thread k: <exception>"``), empty when every call returned. Fails (an
    AssertionError) if a thread is still running `timeout` seconds after its start."""
    failures: list[str] = []
    barrier = threading.Barrier(n)

    def body(k: int) -> None:
        try:
            barrier.wait(10)
            work(k)
        except BaseException as exc:  # noqa: BLE001 - every failure is reported to the caller
            failures.append(f"thread {k}: {exc!r}")

    threads = [threading.Thread(target=body, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    return failures
