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


def test_codec_notes(tmp_path, monkeypatch):
    """Train once on settled data, then install the dictionary in new stores."""
    rng = np.random.default_rng(1)
    vocab = rng.integers(0, 50_000, size=300, dtype=np.int32)
    settled = [vocab[rng.integers(0, 300, size=int(rng.integers(20, 120)))] for _ in range(3000)]
    settled_array = np.stack([np.resize(r, 64) for r in settled])        # (3000, 64) int32
    token_generator = (r for r in settled[:500])
    data = settled_array[:700]
    ns = run_block("codec_notes.py", tmp_path, monkeypatch, settled_array=settled_array,
                   token_generator=token_generator, data=data)
    from loaderx.zrecord import Dense, Ragged

    with Ragged.open(tmp_path / "tokens") as rs, Dense.open(tmp_path / "data") as ds:
        assert rs.codec == ds.codec == "zstd_dict"
        assert rs.dict_bytes == ds.dict_bytes == ns["d"]
        assert [r.tolist() for r in rs] == [r.tolist() for r in settled[:500]]
        np.testing.assert_array_equal(ds[:], data)


def test_codec_rewrite(tmp_path, monkeypatch):
    """Changing a store's codec means writing a new one; train_dict reads the open store."""
    from loaderx.zrecord import Dense

    rng = np.random.default_rng(2)
    source = rng.integers(0, 16, size=(2000, 96), dtype=np.int16)
    with Dense.create(tmp_path / "src", np.int16, (96,), codec="raw") as w:
        w.append(source)
    run_block("codec_rewrite.py", tmp_path, monkeypatch)
    with Dense.open(tmp_path / "dst") as d:
        assert d.codec == "zstd_dict" and d.dict_bytes
        np.testing.assert_array_equal(d[:], source)
        assert d.stored_bytes < source.nbytes
