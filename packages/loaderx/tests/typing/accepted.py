"""Uses of loaderx's public types that a type checker must accept, as the guides write them;
zrecord's tests/typing/check_types.py runs mypy --strict on this file (``nox -s lint``) and
requires no error at all. Every ``assert_type`` is exact: were a batch typed ``Any`` (or
loaderx not found), mypy would report it. test_typing_uses.py also runs `main`, so every use
is real.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from loaderx.converter import ConversionError, convert, info
from loaderx.dataloader import BatchContext, DataLoader
from loaderx.sampler import Mix, Sampler
from loaderx.zrecord import Dense

if TYPE_CHECKING:
    from typing_extensions import assert_type
else:
    def assert_type(value: Any, expected: Any) -> Any:
        return value  # checked by mypy only; at run time the asserts below check values


def count(batch: dict[str, Any]) -> int:
    return len(batch["x"])


def shifted(batch: dict[str, Any], ctx: BatchContext) -> np.ndarray:
    return np.asarray(batch["x"]) + ctx.step


def main(folder: str) -> None:
    path = os.path.join(folder, "x")
    with Dense.create(path, np.int64, (), codec="raw") as w:
        w.append(np.arange(12, dtype=np.int64))
    streams = {"x": Dense.open(path)}
    sampler = Sampler(len(streams["x"]), 4, "cyclic", seed=1)
    per_epoch: int = sampler.steps_per_cycle          # an int in every mode
    for _ in range(Sampler(12, 5, Sampler.Mode.IID).steps_per_cycle):
        pass
    with DataLoader(streams, sampler) as loader:
        batch = next(loader)
        assert_type(batch, dict[str, Any])
        assert_type(loader.next(), dict[str, Any])
    with DataLoader(streams, sampler, count, workers=2) as counting:
        assert_type(next(counting), int)
    with DataLoader(streams, sampler, shifted) as with_context:
        assert_type(next(with_context), np.ndarray)
    first = Sampler(6, 2, Sampler.Mode.SEQUENTIAL, passes=1)
    with DataLoader(streams, first, subset=True) as part:
        assert [len(b["x"]) for b in part] == [2] * per_epoch
    mix = Mix([streams, streams], [1, 1], batch_size=4, mode="iid")
    with DataLoader(mix.streams, mix) as mixed:
        assert_type(next(mixed), dict[str, Any])
    try:
        convert(None, os.path.join(folder, "converted"), codec="zstd", images="encoded")
    except ConversionError:
        pass
    else:
        raise AssertionError("convert(None, ...) must refuse the dataset")
    assert callable(info)
