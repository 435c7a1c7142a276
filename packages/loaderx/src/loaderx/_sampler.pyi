# Type stubs for the compiled sampler (loaderx/_sampler.pyx). Index arrays are one-dimensional
# uint64 NumPy arrays of batch_size values.
import numpy as np
from typing_extensions import disjoint_base

# A cdef class has its own C layout, so it cannot be combined with another such base.
@disjoint_base
class SamplerCore:
    def __init__(self, length: int, batch_size: int, mode: int, seed: int, rank: int,
                 world_size: int, passes: int = 0, block_records: int = 1,
                 window_blocks: int = 1) -> None: ...
    def next(self) -> np.ndarray:
        """The next batch of indices: a read-only view of the reused buffer (borrowed).
        With passes, StopIteration after the last step."""
    def __next__(self) -> np.ndarray: ...
    def _batch(self, step: int) -> np.ndarray: ...
    def seek(self, step: int) -> None:
        """Make `step` the next step drawn. O(1)."""
    @property
    def _steps(self) -> int | None:
        """With passes, the number of steps of the whole run; endless: None."""
    @property
    def step(self) -> int:
        """The step the next draw returns (the number of draws since step 0, after seeks)."""
