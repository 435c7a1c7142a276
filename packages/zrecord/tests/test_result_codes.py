"""The result codes live in one table, zrecord.h's `zr_result` ([H1] step 2): the Zig core,
the binding and zrecord.errors must agree with it name for name and number for number."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
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


def test_the_dtype_table_is_the_native_cores_and_the_independent_copies_agree() -> None:
    """[H1] step 5: one dtype table in the core (format.zig), read by zrecord through
    zr_dtype_info; the deliberate independent copies (the reference reader, the fuzzer's store
    model) are checked against it here."""
    import sys

    from zrecord import _dtypes

    native = {code: (name, size) for code, name, size in _native.dtype_table()}
    fixed = {code: v for code, v in native.items() if code not in _dtypes._PARAMETRIC}
    assert {code: (dt.name, dt.itemsize) for code, dt in _dtypes._DTYPES.items()} == fixed
    # Format 1.1's parametric dtypes: datetime64/timedelta64 (item size 8, a unit), S, U, V
    # (item size from dtype_length, 0 in the table).
    assert {code: np.dtype(name).kind for code, (name, _) in native.items()
            if code in _dtypes._PARAMETRIC} == _dtypes._PARAMETRIC
    assert dict(_native.datetime_units()) == _dtypes._UNITS
    root = Path(__file__).resolve().parents[3]
    sys.path.insert(0, str(root / "conformance"))
    sys.path.insert(0, str(Path(__file__).resolve().parent / "fuzz"))
    try:
        import storemodel
        from reference import reader as ref
    finally:
        del sys.path[:2]
    assert {code: (dt.name, dt.itemsize) for code, dt in ref.DTYPES.items()} == fixed
    assert {code: name for code, (name, _) in ref.PARAMETRIC.items()} == {
        code: name for code, (name, _) in native.items() if code in _dtypes._PARAMETRIC}
    assert ref.UNITS == _dtypes._UNITS
    assert {**storemodel.ITEMSIZE, **{c: 0 for c in storemodel.ITEMSIZE_PER_LENGTH}} == {
        code: size for code, (_, size) in native.items()}
