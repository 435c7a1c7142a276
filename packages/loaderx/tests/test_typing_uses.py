"""[U3] 6: loaderx's public types. The static side (what mypy --strict accepts in
typing/accepted.py and rejects in typing/rejected.py) runs in ``nox -s lint``; this runs the
accepted uses, so that each is real and each static type is the value's at run time."""

from __future__ import annotations

import runpy
import typing
from pathlib import Path

from loaderx.sampler import ModeName, Sampler
from loaderx_converter import _convert, _features


def test_the_accepted_typing_uses_run(tmp_path):
    uses = runpy.run_path(str(Path(__file__).parent / "typing" / "accepted.py"))
    uses["main"](str(tmp_path))


def test_the_literal_types_name_exactly_the_words_the_calls_take():
    assert set(typing.get_args(_convert.MediaMode)) == set(_features.MEDIA_MODES)
    assert {word.upper() for word in typing.get_args(ModeName)} == {m.name for m in Sampler.Mode}
