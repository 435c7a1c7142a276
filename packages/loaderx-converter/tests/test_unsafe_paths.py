"""The converter writes only where it is told: column and split names that would leave the
destination are refused, so are destinations inside published stores, and planted temporaries
beside the destination are left alone. These are the converter's regressions of the
hostile-input trial [R1]; each test cites its item."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import Dataset, DatasetDict

import zrecord
from loaderx_converter import UnsafePathError, convert

CONVERT_SCRIPT = Path(sys.executable).parent / "loaderx-convert"


def _tree(folder: Path) -> list[str]:
    """Every path under `folder`, relative, sorted: what a failed conversion must not change."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CONVERT_SCRIPT), *argv, "--quiet"], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def _bad_column_names(tmp_path: Path) -> list[str]:
    return [str(tmp_path / "outside"), "../../escape", "a/b", "..", ".", "", ".hidden",
            ".x.zr-tmp-1-0123456789abcdef", "x" * 240, "é" * 120]


def test_column_names_that_would_leave_the_root_are_refused(tmp_path):
    """[R1] item 1: a column named "/abs/x" (or "../..", "a/b", "..", ...) was joined onto
    root/split and published a store outside root, outside the atomic publish. Every column
    name is now checked before anything is written; nothing appears anywhere."""
    (tmp_path / "work").mkdir()
    for k, name in enumerate(_bad_column_names(tmp_path)):
        root = tmp_path / "work" / f"root{k}"
        before = _tree(tmp_path)
        ds = Dataset.from_dict({"ok": [1, 2], name: [[1, 2], [3, 4]]})
        with pytest.raises(UnsafePathError, match="column") as info:
            convert(ds, root, codec="raw", progress=False)
        assert info.value.split == "train" and info.value.column == name, name
        assert repr(name) in str(info.value)
        # The way out is in the message, and it works.
        assert "columns=" in str(info.value) and "rename_column" in str(info.value)
        assert _tree(tmp_path) == before, name
        convert(ds, root, codec="raw", columns=["ok"], progress=False)
        assert zrecord.Dense.open(root / "train" / "ok")[:].tolist() == [1, 2]


def test_split_names_that_would_leave_the_root_are_refused(tmp_path):
    """[R1] item 1: a split name is a path component too ("../esc" published root/../esc);
    so is "provenance.json", which would have collided with the file written beside the
    splits after every store was written."""
    ds = Dataset.from_dict({"c": [[1, 2]]})
    for k, name in enumerate([str(tmp_path / "abs"), "../esc", "..", ".", "", "provenance.json",
                              "t/v"]):
        root = tmp_path / f"root{k}"
        before = _tree(tmp_path)
        with pytest.raises(UnsafePathError, match="split") as info:
            convert(DatasetDict({name: ds}), root, codec="raw", progress=False)
        assert info.value.split == name and info.value.column is None
        assert "DatasetDict" in str(info.value)
        assert _tree(tmp_path) == before, name
    with pytest.raises(UnsafePathError):
        convert(Dataset.from_dict({"c": [1]}, split="../x"), tmp_path / "s", progress=False)
    assert not (tmp_path / "x").exists()


def test_a_root_inside_a_published_store_is_refused(tmp_path):
    """[R1] item 1: a destination inside a published store (which is immutable, its folder
    included) was written into it; it is refused, also through a symbolic link."""
    store = tmp_path / "store"
    with zrecord.Dense.create(store, np.int8, (), codec="raw") as w:
        w.append(np.arange(3, dtype=np.int8))
    (tmp_path / "link").symlink_to(store)
    ds = Dataset.from_dict({"c": [1, 2]})
    before = _tree(tmp_path)
    for root in (store / "sub", tmp_path / "link" / "sub"):
        with pytest.raises(UnsafePathError, match="inside the published zrecord store"):
            convert(ds, root, codec="raw", progress=False)
    os.mkdir(store / "deeper")  # what a hostile or careless tool might have done
    with pytest.raises(UnsafePathError, match="immutable"):
        convert(ds, store / "deeper" / "sub", codec="raw", progress=False)
    os.rmdir(store / "deeper")
    assert _tree(tmp_path) == before


def _parquet(path: Path, columns: dict[str, list[int]]) -> None:
    pq.write_table(pa.table({name: pa.array(v, pa.int64()) for name, v in columns.items()}), path)


def test_the_cli_refuses_column_names_that_would_leave_the_root(tmp_path):
    """[R1] item 1: `loaderx-convert f.parquet root` with a column named "/abs/dir" published
    a store at /abs/dir. The console script now refuses it in one line that names the column
    and the --columns way out, writes nothing, and converts with --columns."""
    outside = tmp_path / "abs" / "dir"
    outside.parent.mkdir()
    _parquet(tmp_path / "f.parquet", {"ok": [1, 2, 3], str(outside): [4, 5, 6]})
    before = _tree(tmp_path)
    proc = _cli("f.parquet", "root", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    # (datasets' own "Generating train split" progress lines may precede it.)
    err = [line for line in proc.stderr.splitlines() if "loaderx-convert" in line]
    assert len(err) == 1 and err[0].startswith("loaderx-convert: error:"), proc.stderr
    assert repr(str(outside)) in err[0] and "--columns" in err[0]
    assert "Traceback" not in proc.stderr
    assert _tree(tmp_path) == before
    proc = _cli("f.parquet", "root", "--columns", "ok", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert zrecord.Dense.open(tmp_path / "root" / "train" / "ok")[:].tolist() == [1, 2, 3]
    assert not outside.exists()


def test_the_cli_refuses_a_root_inside_a_published_store(tmp_path):
    """[R1] item 1: the console script refuses a destination inside a published store."""
    _parquet(tmp_path / "f.parquet", {"ok": [1, 2, 3]})
    with zrecord.Dense.create(tmp_path / "store", np.int8, (), codec="raw") as w:
        w.append(np.arange(3, dtype=np.int8))
    before = _tree(tmp_path)
    proc = _cli("f.parquet", "store/sub", cwd=tmp_path)
    assert proc.returncode == 1 and "inside the published zrecord store" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert _tree(tmp_path) == before


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(proc.stdout)


def test_malformed_temporaries_are_ignored(tmp_path):
    """[R1] item 9: a planted sibling ".NAME.convert-tmp-99999999999999999999-x" made convert
    raise OverflowError (os.kill of a PID no pid_t holds); other malformed names raised
    ValueError ("²" passes str.isdigit) or were read as PIDs. Conversions now publish through
    zrecord's staging ([ZR-PUB-006]): no name is parsed, anything without a free lock is left
    alone, a link is never followed, and a temporary whose lock is free is still removed."""
    root = tmp_path / "root"
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("precious")
    planted = [".root.convert-tmp-99999999999999999999-x", ".root.convert-tmp-²-x",
               ".root.convert-tmp-٣-deadbeef", ".root.convert-tmp-0-deadbeef",
               ".root.convert-tmp--1-deadbeef", ".root.convert-tmp-", ".root.convert-tmp-12",
               f".root.convert-tmp-{2**31}-deadbeef", ".root.convert-tmp-1-NOTHEX00"]
    for name in planted:
        (tmp_path / name).mkdir()
        (tmp_path / name / "inside").write_text("x")
    (tmp_path / ".root.convert-tmp-7-file").write_text("a file, not a folder")
    dead = _dead_pid()
    link = tmp_path / f".root.convert-tmp-{dead}-0badc0de"
    link.symlink_to(victim)
    stale = tmp_path / ".root.zr-tmp-0123456789abcdef"
    stale.mkdir()
    (stale / "train").mkdir()
    (tmp_path / ".root.zr-tmp-0123456789abcdef.lock").write_text("")  # nobody holds it
    convert(Dataset.from_dict({"c": [1, 2]}), root, codec="raw", progress=False)
    assert zrecord.Dense.open(root / "train" / "c")[:].tolist() == [1, 2]
    for name in planted:
        assert (tmp_path / name / "inside").exists(), name
    assert (tmp_path / ".root.convert-tmp-7-file").is_file()
    assert link.is_symlink() and (victim / "keep").read_text() == "precious"
    assert not stale.exists()
