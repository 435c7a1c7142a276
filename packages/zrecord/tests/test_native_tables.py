"""Each table of the native core lives once, and every copy is checked against it here: the
result codes (zrecord.h's `zr_result`), the header's other constants (its `#define`s: format
version, kinds, codecs, limits, flags) and the dtype table (format.zig). The Zig core, the
binding and zrecord's Python modules must agree with them name for name and number for number.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from zrecord import _native, errors

# The Zig core: beside the tests in an sdist, at the top of the repository otherwise.
ZIG_CANDIDATES = [Path(__file__).resolve().parents[3] / "zig",
                  Path(__file__).resolve().parents[1] / "zig"]
HEADER_CANDIDATES = [zig / "include" / "zrecord.h" for zig in ZIG_CANDIDATES]


def zig_dir() -> Path:
    zig = next((p for p in ZIG_CANDIDATES if (p / "include" / "zrecord.h").is_file()), None)
    if zig is None:
        pytest.fail(f"zrecord.h not found at {HEADER_CANDIDATES}")
    return zig


def header_text() -> str:
    return (zig_dir() / "include" / "zrecord.h").read_text()


def header_codes() -> dict[str, int]:
    text = header_text()
    body = re.search(r"typedef enum zr_result \{(.*?)\} zr_result;", text, re.S)
    assert body is not None, "zrecord.h has no `typedef enum zr_result`"
    return {m.group(1): int(m.group(2))
            for m in re.finditer(r"^\s*(ZR_\w+)\s*=\s*(-?\d+)", body.group(1), re.M)}


def header_constants() -> dict[str, int]:
    """Every `#define ZR_...` of zrecord.h with its value (a decimal integer, maybe suffixed)."""
    defines = dict(re.findall(r"^#define (ZR_\w+) (\S+)", header_text(), re.M))
    values = {}
    for name, text in defines.items():
        number = re.fullmatch(r"(\d+)(?:u|U|ULL|ull)?", text)
        assert number is not None, f"zrecord.h: {name} is {text!r}, not a decimal integer"
        values[name] = int(number.group(1))
    return values


_ZIG_OPS: dict[type[ast.operator], Callable[[int, int], int]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.LShift: operator.lshift}


def _zig_int(expr: str, where: str, names: Callable[[str], int] | None = None) -> int:
    """The value of a Zig integer constant expression of literals, + - * << and parentheses
    (which Zig and Python both parse with + and - binding tighter than <<), and of the names
    of other constants where `names` gives their values."""
    def value(node: ast.expr) -> int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _ZIG_OPS:
            return _ZIG_OPS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.Name) and names is not None:
            return names(node.id)
        raise AssertionError(f"{where}: {expr!r} is not a constant expression this test reads")
    # Digit separators go; the underscores of names stay. The parentheses let it span lines.
    text = re.sub(r"(?<=\d)_(?=\d)", "", expr)
    return value(ast.parse(f"({text})", mode="eval").body)


def zig_const(file: str, name: str) -> int:
    """`pub const name: T = <expr>;` of zig/src/<file>, over one line or more; names in <expr>
    are other `pub const`s of the same file."""
    text = (zig_dir() / "src" / file).read_text()
    found = re.search(rf"^pub const {name}: \w+ = (.+?);", text, re.M | re.S)
    assert found is not None, f"zig/src/{file} has no `pub const {name}`"
    return _zig_int(found.group(1), f"zig/src/{file} {name}", lambda other: zig_const(file, other))


def zig_enum(file: str, enum: str) -> dict[str, int]:
    """The fields and values of `pub const Enum = enum(T) { ... };` of zig/src/<file>."""
    text = (zig_dir() / "src" / file).read_text()
    body = re.search(rf"^pub const {enum} = enum\(\w+\) \{{(.*?)^\}};", text, re.M | re.S)
    assert body is not None, f"zig/src/{file} has no `pub const {enum} = enum(...)`"
    return {m.group(1): _zig_int(m.group(2), f"zig/src/{file} {enum}.{m.group(1)}")
            for m in re.finditer(r"^\s*(\w+) = ([^,]+),", body.group(1), re.M)}


# Where the Zig core keeps each group of the header's constants: ZR_<GROUP>_<FIELD> is field
# <field> of an enum; any other ZR_<NAME> is `pub const <name>` of format.zig or abi.zig.
ZIG_ENUMS = {"KIND": ("format.zig", "Kind"), "CODEC": ("format.zig", "Codec"),
             "READS": ("readahead.zig", "Mode")}
ZIG_CONSTS = {"format.zig": ["format_major", "format_minor", "ndim_max", "data_shards_max",
                             "record_size_bytes_max", "dim_max", "dict_size_bytes_max",
                             "record_count_max", "itemsize_bytes_max", "unit_count_max", "header_size_bytes_max"],
              "abi.zig": ["write_no_sync", "write_index_parts", "open_cache_bypass", "open_validate_index", "open_check_every_read",
                          "open_whole_index", "part_blocks", "part_groups", "parts_cold",
                          "index_cache_records_min_default", "index_cache_bytes_default"]}


def zig_constants() -> dict[str, int]:
    """The Zig core's values of the header's constants, by the header's names."""
    out = {}
    for group, (file, enum) in ZIG_ENUMS.items():
        for field, number in zig_enum(file, enum).items():
            out[f"ZR_{group}_{field.upper()}"] = number
    for file, names in ZIG_CONSTS.items():
        for name in names:
            out[f"ZR_{name.upper()}"] = zig_const(file, name)
    return out


def test_the_binding_was_compiled_against_the_header_in_the_tree() -> None:
    assert _native.RESULT_CODES == header_codes()
    assert _native.CONSTANTS == header_constants()


def test_every_header_constant_is_the_zig_cores() -> None:
    """The header's `#define`s are the C side of constants the Zig core defines on its own
    (format.zig, abi.zig, readahead.zig): the two must name the same constants with the same
    values, so that the binding and the core agree through the header."""
    assert header_constants() == zig_constants()


def test_the_python_modules_read_the_header_constants() -> None:
    from zrecord import _dtypes, _opening

    c = header_constants()
    assert (_dtypes.KIND_DENSE, _dtypes.KIND_RAGGED) == (c["ZR_KIND_DENSE"], c["ZR_KIND_RAGGED"])
    assert _dtypes.CODE_OF_CODEC == {"raw": c["ZR_CODEC_RAW"], "zstd": c["ZR_CODEC_ZSTD"],
                              "zstd_dict": c["ZR_CODEC_ZSTD_DICT"]}
    assert (_dtypes.NDIM_MAX, _dtypes.DATA_SHARDS_MAX, _dtypes.RECORD_SIZE_BYTES_MAX,
            _dtypes.DICT_SIZE_BYTES_MAX, _dtypes.ITEMSIZE_BYTES_MAX, _dtypes.UNIT_COUNT_MAX) == (
        c["ZR_NDIM_MAX"], c["ZR_DATA_SHARDS_MAX"], c["ZR_RECORD_SIZE_BYTES_MAX"],
        c["ZR_DICT_SIZE_BYTES_MAX"], c["ZR_ITEMSIZE_BYTES_MAX"], c["ZR_UNIT_COUNT_MAX"])
    assert _dtypes.WRITE_NO_SYNC == c["ZR_WRITE_NO_SYNC"]
    assert _dtypes.WRITE_INDEX_PARTS == c["ZR_WRITE_INDEX_PARTS"]
    assert _opening.CACHE_MODES == {"auto": 0, "bypass": c["ZR_OPEN_CACHE_BYPASS"]}
    assert _opening.VALIDATE_MODES == {"cached": 0, "full": c["ZR_OPEN_VALIDATE_INDEX"]}


def test_the_remote_layer_asks_the_core_and_keeps_no_copy_of_the_format() -> None:
    """[O2] point 3: the mirror lays out and judges a store's files from what the core says of
    them (`header_layout`, `index_wants`, `locate`), and its one limit, the largest header it
    reads whole, is the core's constant. Was: _remote.py read header fields at their offsets
    and kept copies of the limits of spec §8."""
    import inspect

    from zrecord import _mirror_files, _objects, _opening, _remote

    assert _remote.HEADER_SIZE_BYTES_MAX == zig_const("format.zig", "header_size_bytes_max") == 17_303_936
    for module in (_remote, _objects, _mirror_files, _opening):
        source = inspect.getsource(module)
        for copy in ("struct.unpack", "RECORD_COUNT_MAX", "INDEX_GROUPS_MAX", "INDEX_SHIFT_MAX",
                     "_FEATURE_INDEX_PARTS", "_MAGIC", "header[93]", ".replace(", "relabel"):
            assert copy not in source, (module.__name__, copy)
    # The publisher too: the core judges and decodes the index files it uploads
    # (`index_table`). Was: _publish.py parsed the header and the entries with struct.
    from zrecord import _publish

    source = inspect.getsource(_publish)
    for copy in ("struct.unpack", "RECORD_COUNT_MAX", "INDEX_GROUPS_MAX", "INDEX_SHIFT_MAX",
                 "_FEATURE_INDEX_PARTS", "_MAGIC", "header[64:72]", "table[:, "):
        assert copy not in source, ("_publish", copy)


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
