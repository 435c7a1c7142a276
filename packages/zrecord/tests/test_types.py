"""[U2] item 5: readers and writers are distinct types of one kind. The static side (what
mypy accepts and rejects) is checked by typing/check_types.py in `nox -s lint`; this file
checks that the types are the ones the values have at run time."""

from __future__ import annotations

import dataclasses
import runpy
from pathlib import Path

import numpy as np
import pytest

import zrecord
from zrecord import Dense, DenseReader, DenseWriter, Ragged, RaggedReader, RaggedWriter
from zrecord.errors import ModeError


def test_readers_and_writers_are_distinct_types_of_one_kind(tmp_path):
    """`open` returns a reader type (no append), `create` a writer type (no indexing); both
    are instances of their kind, and reprs keep naming the kind."""
    cases = [(Dense, DenseReader, DenseWriter, (2,)), (Ragged, RaggedReader, RaggedWriter, 1)]
    for kind, reader_type, writer_type, shape in cases:
        path = tmp_path / kind.__name__
        with kind.create(path, np.int16, shape, codec="raw") as w:
            assert type(w) is writer_type and isinstance(w, kind)
            assert not isinstance(w, reader_type) and not hasattr(writer_type, "shapes")
            w.append(np.zeros((3, 2), np.int16) if kind is Dense else [np.zeros(2, np.int16)])
            with pytest.raises(ModeError, match="cannot be read"):
                w[0]
        with kind.open(path) as r:
            assert type(r) is reader_type and isinstance(r, kind)
            assert not isinstance(r, writer_type)
            assert repr(r).startswith(f"<{kind.__name__} ")
            with pytest.raises(ModeError, match="read-only"):
                r.append(np.zeros((1, 2), np.int16))
        with zrecord.open_store(path) as any_kind:
            assert type(any_kind) is reader_type
    assert not issubclass(RaggedReader, Dense) and not issubclass(DenseWriter, Ragged)
    # The kinds only name what readers and writers share; they open nothing themselves.
    with pytest.raises(TypeError, match=r"kind of store, not a store: read one with Dense.open"):
        Dense(tmp_path / "Dense")


def test_the_accepted_typing_uses_run(tmp_path):
    """typing/accepted.py is what mypy must accept; run, each of its uses works as typed."""
    uses = runpy.run_path(str(Path(__file__).parent / "typing" / "accepted.py"))
    uses["main"](str(tmp_path))
    assert (tmp_path / "data-d").is_dir() and (tmp_path / "tokens-copy").is_dir()


def test_the_storage_options_type_names_exactly_the_keys_open_accepts():
    """[H3] B6: zrecord.StorageOptions is what a type checker holds storage_options to; the
    run-time check (unknown keys are an error) must accept the same keys, no more, no less."""
    from zrecord import _objects

    typed = set(zrecord.StorageOptions.__annotations__)
    assert typed == set(_objects.DEFAULTS) | set(_objects._S3_KEYS)
    # The judged settings: one field per tuning key, and the client's keys together.
    fields = {f.name for f in dataclasses.fields(_objects.StorageSettings)}
    assert fields == set(_objects.DEFAULTS) | {"client"}
    _objects.storage_settings({key: None for key in ("cache_dir", "cache_bytes")})
    with pytest.raises(ValueError, match="unknown storage option 'endpoint'"):
        _objects.storage_settings({"endpoint": "http://127.0.0.1:9"})


def test_the_codec_type_lists_the_codecs():
    import typing

    assert set(typing.get_args(zrecord.Codec)) == set(zrecord.CODECS)
    from zrecord import _opening, _types

    assert set(typing.get_args(_types.CacheMode)) == set(_opening.CACHE_MODES)
    assert set(typing.get_args(_types.Validate)) == set(_opening.VALIDATE_MODES)
