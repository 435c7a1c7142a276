"""The prepared real data: where it is, the workloads of the store benchmarks, and the Dataset
PyTorch's ordinary recipe reads them through.

benchmarks/prepare_data.py makes the files (benchmarks/README.md, "Data"). The workloads, those
of [F2]:
  vision_dense   vision_dense.npy                (N, 3, 224, 224) uint8, 147 KiB per record
  vision_ragged  vision_ragged_payload/index     native-resolution CHW uint8, every axis varies
  token_blocks   token_blocks.npy                (M, 512) int32, 2 KiB per record
  tokens         tokens.npy + offsets.npy        variable-length int32 GPT-2 token records
`Workload` holds one of them (capped to a number of records) and checks a gathered batch for
exact dtype, shape, order and values; `Source` is a Ragged workload's flat payload with its
offsets and shapes. Nothing here imports a store library.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

# The repository (this file is benchmarks/common/data.py).
ROOT = Path(__file__).resolve().parents[2]


def default_data() -> str:
    """The --data default: $LOADERX_BENCH_DATA, else the folder `data` beside the repository."""
    return os.environ.get("LOADERX_BENCH_DATA", str(ROOT.parent / "data"))


class Source:
    """Records of a flat memory-mapped payload with offsets (in elements) and shapes."""

    def __init__(self, payload: np.ndarray, offsets: np.ndarray, shapes: np.ndarray,
                 files: list[str]) -> None:
        self.payload, self.offsets, self.shapes, self.files = payload, offsets, shapes, files
        self.dtype = payload.dtype
        self.ndim = shapes.shape[1]

    def __len__(self) -> int:
        return len(self.shapes)

    def __getitem__(self, i: int) -> np.ndarray:
        return self.payload[self.offsets[i]:self.offsets[i + 1]].reshape(self.shapes[i])

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self[i] for i in range(len(self)))

    def gather(self, idx: np.ndarray) -> list[np.ndarray]:
        return [np.array(self[int(i)]) for i in idx]

    def dict_sample(self, crop_bytes: int = 128 << 10) -> Iterator[np.ndarray]:
        """Training sample for train_dict: records in a fixed random order, as flat bytes cut
        to `crop_bytes` (zstd's trainer ignores longer samples). Whole records would not do:
        a peer that buffers only a few MiB of samples gets three native-resolution images
        and its trainer fails."""
        order = np.random.default_rng(0).permutation(len(self))
        return (np.ascontiguousarray(self[int(i)]).reshape(-1).view(np.uint8)[:crop_bytes]
                for i in order)

    @property
    def nbytes(self) -> int:
        return int(self.offsets[-1]) * self.dtype.itemsize


def load_ragged(data: str, name: str) -> Source | None:
    if name == "vision":
        files = ["vision_ragged_payload.npy", "vision_ragged_index.npz"]
    else:
        files = ["tokens.npy", "offsets.npy"]
    paths = [os.path.join(data, f) for f in files]
    if not all(os.path.exists(p) for p in paths):
        print(f"skipping {name}: {paths} missing (run benchmarks/prepare_data.py)",
              file=sys.stderr)
        return None
    payload = np.load(paths[0], mmap_mode="r")
    if name == "vision":
        index = np.load(paths[1])
        offsets, shapes = index["offsets"], index["shapes"]  # uint8 payload: bytes = elements
    else:
        offsets = np.load(paths[1])
        shapes = np.diff(offsets).reshape(-1, 1)
    return Source(payload, offsets, shapes, paths)


WORKLOADS = {  # name: (kind, files)
    "vision_dense": ("dense", "vision_dense.npy"),
    "vision_ragged": ("ragged", "vision"),
    "token_blocks": ("dense", "token_blocks.npy"),
    "tokens": ("ragged", "tokens"),
}


class Workload:
    """The prepared source of one workload, capped to `records`, plus how to compare."""

    def __init__(self, name: str, data: str, records: int | None) -> None:
        self.name = name
        self.kind, file = WORKLOADS[name]
        self.dense: np.ndarray | None = None
        self.ragged: Source | None = None
        if self.kind == "dense":
            path = os.path.join(data, file)
            if not os.path.exists(path):
                raise FileNotFoundError(f"{path} is missing (run benchmarks/prepare_data.py)")
            full = np.load(path, mmap_mode="r")
            self.dense = full[:records] if records else full
            self.dtype = self.dense.dtype
            self.n = len(self.dense)
            self.nbytes = int(self.dense.nbytes)
            self.item_shape = tuple(self.dense.shape[1:])
            self.ndim = len(self.item_shape)
        else:
            src = load_ragged(data, file)
            if src is None:
                raise FileNotFoundError(f"{name}: source files missing")
            if records and records < len(src):
                src = Source(src.payload[:int(src.offsets[records])], src.offsets[:records + 1],
                             src.shapes[:records], src.files)
            self.ragged = src
            self.dtype = src.dtype
            self.n = len(src)
            self.nbytes = src.nbytes
            self.ndim = src.ndim

    def record(self, i: int) -> np.ndarray:
        return self.dense[i] if self.dense is not None else self.ragged[i]  # type: ignore[index]

    def shape(self, i: int) -> tuple[int, ...]:
        if self.dense is not None:
            return self.item_shape
        return tuple(int(s) for s in self.ragged.shapes[i])  # type: ignore[union-attr]

    def warm(self) -> None:
        flat = self.dense.reshape(-1) if self.dense is not None else self.ragged.payload  # type: ignore[union-attr]
        flat[:: 4096 // self.dtype.itemsize].sum()

    def describe(self) -> str:
        if self.dense is not None:
            return f"{self.n:,} records of {self.item_shape} {self.dtype}"
        return f"{self.n:,} variable {self.ndim}-d {self.dtype} records"

    def check(self, label: str, idx: np.ndarray, got: Any) -> None:
        """Exact dtype, shape, order and values of one gathered batch."""
        if self.dense is not None:
            want = self.dense[idx]
            if (not isinstance(got, np.ndarray) or got.dtype != want.dtype
                    or got.shape != want.shape or not np.array_equal(got, want)):
                raise AssertionError(f"{label}: {self.name} batch at {idx[:4]}... differs")
            return
        if len(got) != len(idx):
            raise AssertionError(f"{label}: {len(got)} records for {len(idx)} indices")
        for rec, i in zip(got, idx, strict=True):
            want = self.record(int(i))
            if (not isinstance(rec, np.ndarray) or rec.dtype != want.dtype
                    or rec.shape != want.shape or not np.array_equal(rec, want)):
                raise AssertionError(f"{label}: {self.name} record {int(i)} differs")


def verify(label: str, w: Workload, gather: Callable[[np.ndarray], Any], batch: int) -> None:
    """A full sweep in order, then independent random batches."""
    for start in range(0, w.n, batch):
        idx = np.arange(start, min(start + batch, w.n))
        w.check(label, idx, gather(idx))
    rng = np.random.default_rng(99)
    for _ in range(5):
        idx = rng.integers(0, w.n, batch)
        w.check(label, idx, gather(idx))


class MmapDataset:
    """The ordinary PyTorch recipe: a per-sample Dataset over a read-only memory map."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.images: np.ndarray | None = None
        self.n = int(np.load(path, mmap_mode="r").shape[0])

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[Any, int]:
        import torch

        if self.images is None:  # open lazily, in each worker
            self.images = np.load(self.path, mmap_mode="r")
        return torch.from_numpy(np.array(self.images[i])), i
