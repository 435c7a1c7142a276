"""The result codes live in one table, zrecord.h's `zr_result` ([H1] step 2): the Zig core,
the binding and zrecord.errors must agree with it name for name and number for number."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from zrecord import _native, errors

HEADER_CANDIDATES = [Path(__file__).resolve().parents[3] / "zig" / "include" / "zrecord.h",
                     Path(__file__).resolve().parents[1] / "zig" / "include" / "zrecord.h"]


def header_codes() -> dict[str, int]:
    header = next((p for p in HEADER_CANDIDATES if p.is_file()), None)
    if header is None:
        pytest.fail(f"zrecord.h not found at {HEADER_CANDIDATES}")
    text = header.read_text()
    body = re.search(r"typedef enum zr_result \{(.*?)\} zr_result;", text, re.S)
    assert body is not None, "zrecord.h has no `typedef enum zr_result`"
    return {m.group(1): int(m.group(2))
            for m in re.finditer(r"^\s*(ZR_\w+)\s*=\s*(-?\d+)", body.group(1), re.M)}


def test_the_binding_was_compiled_against_the_header_in_the_tree() -> None:
    assert _native.RESULT_CODES == header_codes()


def test_the_zig_core_names_every_code_as_the_header_does() -> None:
    codes = header_codes()
    for name, number in codes.items():
        assert _native.result_name(number) == name
    for number in range(-64, 64):
        if number not in codes.values():
            assert _native.result_name(number).startswith("ZR_E_UNKNOWN")


def test_every_error_code_maps_to_one_exception_class() -> None:
    errors_in_header = {name for name in header_codes() if name != "ZR_OK"}
    assert set(errors.BY_RESULT_NAME) == errors_in_header
    for cls in errors.BY_RESULT_NAME.values():
        assert issubclass(cls, errors.ZrecordError)
