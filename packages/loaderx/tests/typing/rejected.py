"""Uses of loaderx's public types that a type checker must reject. Each marked line must get
exactly the error its marker names (``# E: CODE`` or ``# E: CODE: TEXT``) and no other line
any (zrecord's tests/typing/check_types.py compares). Never run: every marked line fails at
run time too (ValueError, TypeError, AttributeError).
"""

from __future__ import annotations

from typing import Any

from loaderx.converter import convert
from loaderx.dataloader import DataLoader
from loaderx.sampler import Mix, Sampler


def misspelt_words(streams: dict[str, Any]) -> None:
    Sampler(10, 2, "shuffle")  # E: arg-type: "Sampler"
    Mix([streams], [1], mode="random")  # E: arg-type: "mode"
    convert(None, "out", codec="zstandard")  # E: arg-type: "codec"
    convert(None, "out", images="bytes")  # E: arg-type: "images"


def torch_keywords(streams: dict[str, Any], sampler: Sampler) -> None:
    DataLoader(streams, sampler, num_workers=2)  # E: call-overload
    DataLoader(streams, sampler, batch_size=32)  # E: call-overload


def batches_are_typed(streams: dict[str, Any], sampler: Sampler) -> None:
    loader = DataLoader(streams, sampler, lambda batch: len(batch))
    print(next(loader).shape)  # E: attr-defined: "int" has no attribute "shape"
