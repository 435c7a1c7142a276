"""The user's examples (../shared/seed, sections "Records" and "Creating containers") verbatim.

Each file in seed/ is a code block copied byte for byte from the seed; this test runs it in a
fresh working directory. The names a block uses without defining (``consume``, ``images``,
``sequences``, and ``np`` in blocks that continue an earlier one) are provided here, exactly as
the surrounding prose of the seed describes them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

SEED = Path(__file__).parent / "seed"


def run_block(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **names) -> dict:
    monkeypatch.chdir(tmp_path)
    consumed: list[np.ndarray] = []
    namespace = {"__name__": "__seed__", "np": np, "consume": consumed.append, **names}
    code = compile((SEED / name).read_text(), str(SEED / name), "exec")
    exec(code, namespace)
    namespace["consumed"] = consumed
    return namespace


def test_records_dense(tmp_path, monkeypatch):
    ns = run_block("records_dense.py", tmp_path, monkeypatch)
    data = ns["data"]
    assert ns["batch"].shape == (3, 2, 4)
    np.testing.assert_array_equal(ns["batch"], data[[0, 5, 2]])
    assert [r.shape for r in ns["consumed"]] == [(2, 4)] * 8
    np.testing.assert_array_equal(np.stack(ns["consumed"]), data)


def test_records_ragged(tmp_path, monkeypatch):
    ns = run_block("records_ragged.py", tmp_path, monkeypatch)
    assert [r.shape for r in ns["records"]] == [(3,), (4,), (5,)]
    assert [r.tolist() for r in ns["consumed"]] == [[0, 1, 2], [0], [0, 1, 2, 3], [0],
                                                   [0, 1, 2, 3, 4]]
    np.testing.assert_array_equal(ns["padded"], [[0, 1, 2, 0, 0], [0, 1, 2, 3, 0],
                                                 [0, 1, 2, 3, 4]])


def test_creating_containers(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(10, 28, 28), dtype=np.uint8)
    sequences = (np.arange(n, dtype=np.int32) for n in (5, 0, 3))
    ns = run_block("creating_containers.py", tmp_path, monkeypatch, images=images,
                   sequences=sequences)
    np.testing.assert_array_equal(ns["first_four"], images[:4])
    from loaderx.zrecord import Ragged

    with Ragged.open(tmp_path / "tokens") as tok:
        assert [len(r) for r in tok] == [5, 0, 3]
