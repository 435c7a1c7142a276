"""The converter's errors: its modules raise only its own classes (each also the builtin a
caller would catch), its codec list is zrecord's, and its command line explains only the
errors it can explain."""

from __future__ import annotations

import ast
import builtins
import json
import os
from pathlib import Path

import pytest
from datasets import Dataset, DatasetDict

import loaderx_converter
import zrecord
from loaderx_converter import (
    ArgumentTypeError,
    ColumnKindError,
    ColumnNotFoundError,
    ConversionError,
    DestinationExistsError,
    InconsistentRecordsError,
    OptionError,
    SourceError,
    SourceNotFoundError,
    SplitNotFoundError,
    convert,
    from_local,
    info,
)
from loaderx_converter import cli as cli_module

SOURCE = Path(loaderx_converter.__file__).parent
BUILTIN_ERRORS = {name for name, value in vars(builtins).items()
                  if isinstance(value, type) and issubclass(value, BaseException)}


def _builtin_raises(path: Path) -> list[str]:
    """`raise Name(...)` / `raise Name` statements of a module whose Name is a builtin
    exception (argparse.ArgumentTypeError, an attribute, is argparse's protocol)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Raise) or node.exc is None:
            continue
        target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        if isinstance(target, ast.Name) and target.id in BUILTIN_ERRORS:
            found.append(f"{path.name}:{node.lineno}: raise {target.id}")
    return found


def test_the_modules_raise_only_the_converters_error_classes():
    found = [hit for path in sorted(SOURCE.glob("*.py")) for hit in _builtin_raises(path)]
    assert found == []


def test_every_error_class_is_a_conversion_error_and_a_builtin():
    exported = [getattr(loaderx_converter, name) for name in loaderx_converter.__all__]
    classes = [c for c in exported if isinstance(c, type) and issubclass(c, BaseException)]
    assert len(classes) == 15
    for cls in classes:
        builtin = [base for base in cls.__mro__
                   if base.__module__ == "builtins" and base not in (Exception, BaseException, object)]
        assert issubclass(cls, ConversionError) and (cls is ConversionError or builtin), cls


def _small() -> Dataset:
    return Dataset.from_dict({"x": [1, 2, 3]})


def test_refusals_are_the_converters_classes_and_keep_their_builtins(tmp_path):
    (tmp_path / "exists").mkdir()
    with pytest.raises(DestinationExistsError, match="must not exist") as caught:
        convert(_small(), tmp_path / "exists", progress=False)
    assert isinstance(caught.value, FileExistsError) and caught.value.filename
    with pytest.raises(ColumnNotFoundError) as missing:
        convert(_small(), tmp_path / "o", columns=["y"], progress=False)
    assert isinstance(missing.value, KeyError)
    # A sentence, not the repr of one (KeyError's own str()).
    assert str(missing.value).startswith("convert: split 'train' has no column(s) ['y']")
    with pytest.raises(OptionError, match="selects nothing"):
        convert(_small(), tmp_path / "o", columns=[], progress=False)
    for bad in ([_small()], {"train": [1, 2]}):
        with pytest.raises(ArgumentTypeError, match="DatasetDict or Dataset"):
            convert(bad, tmp_path / "o", progress=False)
    with pytest.raises(ArgumentTypeError, match="not the string 'x'") as typed:
        convert(_small(), tmp_path / "o", columns="x", progress=False)
    assert isinstance(typed.value, TypeError)
    with pytest.raises(ArgumentTypeError, match="root must be a path"):
        convert(_small(), 5, progress=False)


def test_sources_that_cannot_be_loaded(tmp_path):
    with pytest.raises(SourceNotFoundError) as caught:
        from_local(tmp_path / "missing")
    assert isinstance(caught.value, FileNotFoundError) and caught.value.errno == 2
    assert str(caught.value) == f"no such file or directory: {str(tmp_path / 'missing')!r}"
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match="neither a save_to_disk folder nor parquet"):
        from_local(tmp_path / "empty")
    _small().to_parquet(str(tmp_path / "pq" / "part.parquet"))
    # A configuration the folder does not have: datasets' ValueError is the cause.
    with pytest.raises(SourceError, match=r"datasets could not load .* \(config 'nope'\): "
                                          r"ValueError: BuilderConfig") as config:
        from_local(tmp_path / "pq", config="nope")
    assert isinstance(config.value.__cause__, ValueError)
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    with pytest.raises(SourceError, match="datasets could not load"):
        from_local(tmp_path / "bad.parquet")
    # A parquet file of no rows and no columns, and a save_to_disk folder whose split lists no
    # files: datasets' own error and an IndexError. Was: a traceback of either, exit 1.
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({}), tmp_path / "nothing.parquet")
    with pytest.raises(SourceError, match="datasets could not load .*nothing.parquet"):
        from_local(tmp_path / "nothing.parquet")
    _small().save_to_disk(str(tmp_path / "saved"))
    state = json.loads((tmp_path / "saved" / "state.json").read_text())
    for f in state["_data_files"]:
        (tmp_path / "saved" / f["filename"]).unlink()
    state["_data_files"] = []
    (tmp_path / "saved" / "state.json").write_text(json.dumps(state))
    with pytest.raises(SourceError, match="datasets could not load .*saved.*IndexError"):
        from_local(tmp_path / "saved")


def test_info_of_a_url_says_it_reads_a_root_on_this_machine(tmp_path, monkeypatch):
    """Was: the URL made into a local path, "'/cwd/s3:/bucket/x' is not a converted dataset"."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SourceError, match=r"'s3://bucket/x/' is a URL: its stores open by URL "
                                          r"\(zrecord.open_store\('s3://bucket/x/SPLIT/COLUMN'\)"):
        info("s3://bucket/x/")
    assert os.listdir(tmp_path) == []


def test_the_command_line_names_root_and_endpoint_url_as_given(tmp_path, capsys, monkeypatch):
    """--endpoint-url with a local ROOT is a usage error naming the flag (was: "storage_options
    were given with the local path"); and a ROOT given with a trailing '/' prints the stores'
    paths without an empty segment (was: "ROOT//train/x", which for s3:// does not open)."""
    monkeypatch.chdir(tmp_path)
    _small().save_to_disk("src")
    with pytest.raises(SystemExit) as usage:
        cli_module.main(["src", "out/ep", "--endpoint-url", "http://127.0.0.1:9", "--quiet"])
    assert usage.value.code == 2
    assert "--endpoint-url is for an s3:// ROOT; ROOT 'out/ep' is a local path" in capsys.readouterr().err
    assert cli_module.main(["src", "out/x/", "--quiet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and all(line.startswith("out/x/train/") for line in lines), lines


@pytest.mark.parametrize("workers", [1, 2])
def test_an_image_that_does_not_decode_is_named_by_its_row(tmp_path, workers):
    """A PNG whose header is sound and whose pixel stream is damaged (found while writing), and
    a truncated JPEG (found by the check pass): one InconsistentRecordsError naming the row,
    exit 1. Was: Pillow's own ValueError with a traceback, or its OSError "Truncated File
    Read" as the system's failure (exit 3), naming no row."""
    import io

    import numpy as np
    import PIL.Image
    from datasets import Features, Image, Value

    rng = np.random.default_rng(0)

    def encoded(fmt: str) -> bytes:
        out = io.BytesIO()
        PIL.Image.fromarray(rng.integers(0, 255, (8, 9, 3), dtype=np.uint8)).save(out, format=fmt)
        return out.getvalue()

    damaged = bytearray(encoded("PNG"))
    at = damaged.index(b"IDAT") + 14
    damaged[at:at + 8] = b"\xff" * 8
    truncated = encoded("JPEG")[:300]
    features = Features({"image": Image(), "label": Value("int64")})
    for fmt, bad, row in (("PNG", bytes(damaged), 23), ("JPEG", truncated, 7)):
        images = [{"bytes": encoded(fmt), "path": None} for _ in range(40)]
        images[row] = {"bytes": bad, "path": None}
        ds = Dataset.from_dict({"image": images, "label": list(range(40))}, features=features)
        with pytest.raises(InconsistentRecordsError, match=f"column 'image'.*row {row} "):
            loaderx_converter.convert(ds, tmp_path / f"{fmt}-{workers}", progress=False,
                                      workers=workers)
        assert not (tmp_path / f"{fmt}-{workers}").exists()


def test_info_lookups_name_what_is_there(tmp_path):
    convert(DatasetDict({"train": _small()}), tmp_path / "out", progress=False)
    meta = info(tmp_path / "out")
    with pytest.raises(SplitNotFoundError, match=r"has no split 'test'; its splits: \['train'\]"):
        meta["test"]
    with pytest.raises(ColumnNotFoundError, match=r"split 'train' has no column 'y'; its "
                                                  r"columns: \['x'\]"):
        meta["train"]["y"]
    with pytest.raises(KeyError):
        meta.features("test")
    with pytest.raises(ColumnNotFoundError, match="no column 'y'"):
        meta.label_names("y")
    with pytest.raises(ColumnKindError, match="not a ClassLabel"):
        meta.label_names("x")
    with pytest.raises(SourceNotFoundError, match="not a converted dataset root"):
        info(tmp_path / "out" / "train")
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "provenance.json").write_text("{")
    with pytest.raises(SourceError, match="not JSON"):
        info(tmp_path / "fake")
    (tmp_path / "fake" / "provenance.json").write_text(json.dumps({"other": 1}))
    with pytest.raises(SourceError, match="has no 'splits'"):
        info(tmp_path / "fake")


def test_the_codec_list_is_zrecords(tmp_path, monkeypatch):
    """The converter offers the codecs zrecord names in zrecord.CODECS, no list of its own:
    with one codec fewer there, convert() and the command line refuse it too."""
    assert zrecord.CODECS == ("raw", "zstd", "zstd_dict")
    monkeypatch.setattr(zrecord, "CODECS", ("raw", "zstd"))
    with pytest.raises(OptionError, match=r"codec must be one of 'raw', 'zstd'; got 'zstd_dict'"):
        convert(_small(), tmp_path / "o", codec="zstd_dict", dict_from=["x"], progress=False)
    with pytest.raises(cli_module.argparse.ArgumentTypeError, match="is not a codec: raw, zstd "):
        cli_module._codec("zstd_dict")


def test_the_command_line_does_not_explain_a_bug(tmp_path, monkeypatch):
    """An error that is neither the converter's, zrecord's nor the system's is a bug: the
    command line lets it through with its traceback instead of printing it as a refusal of
    the dataset (it caught every ValueError, KeyError and TypeError)."""
    _small().save_to_disk(str(tmp_path / "saved"))

    def broken(*args, **kwargs):
        raise KeyError("a bug")

    monkeypatch.setattr(cli_module, "convert", broken)
    with pytest.raises(KeyError, match="a bug"):
        cli_module.main([str(tmp_path / "saved"), str(tmp_path / "out"), "--quiet"])
