"""Writers drop consumed pages of read-only memory maps, coalesced into one madvise per
mapping and chunk; records (some shared, some out of order) must still round-trip exactly."""

from __future__ import annotations

import mmap

import numpy as np

from zrecord import Ragged, _writer


def test_ragged_append_from_a_memmap_coalesces_releases(tmp_path, rng, monkeypatch) -> None:
    payload = rng.integers(0, 1 << 20, 300_000, dtype=np.int32)
    np.save(tmp_path / "p.npy", payload)
    src = np.load(tmp_path / "p.npy", mmap_mode="r")
    bounds = np.sort(rng.choice(np.arange(1, len(payload)), 999, replace=False))
    starts, ends = np.r_[0, bounds], np.r_[bounds, len(payload)]
    order = rng.permutation(len(starts))
    recs = [src[starts[i]:ends[i]] for i in order] + [src[:10]]
    calls = []
    real = np.frombuffer
    monkeypatch.setattr(_writer, "_RAGGED_CHUNK_RECORDS", 256)

    def spy(buf, *args, **kwargs):  # type: ignore[no-untyped-def]
        if isinstance(buf, mmap.mmap):  # one per released span
            calls.append(buf)
        return real(buf, *args, **kwargs)

    monkeypatch.setattr(np, "frombuffer", spy)
    path = str(tmp_path / "s")
    with Ragged.create(path, np.int32, 1, codec="raw", sync=False) as w:
        w.append(iter(recs))
    assert 1 <= len(calls) <= 4  # one per chunk of 256 records, not one per record
    with Ragged.open(path) as store:
        for got, want in zip(store[:], recs, strict=True):
            np.testing.assert_array_equal(got, want)
