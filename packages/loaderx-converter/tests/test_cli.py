"""What SOURCE means on the command line, and what huggingface() accepts: an existing path is
local, a bare owner/name is a Hub dataset id, and anything else is a local path that does not
exist, said as such (it was sent to the Hub and reported as an invalid repository id)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from datasets import Dataset

from loaderx_converter import SourceError, huggingface, resolve_revision
from loaderx_converter._hub import is_hub_id
from loaderx_converter.cli import main

CONVERT_SCRIPT = Path(sys.executable).parent / "loaderx-convert"
# Refused at once: no Hub is asked for a source that is not owner/name.
UNREACHABLE = ["--endpoint", "http://127.0.0.1:9", "--quiet"]


@pytest.mark.parametrize("source, hub", [
    ("ylecun/mnist", True), ("org_1/data.v2-x", True), ("a/b", True),
    ("/nonexistent", False), ("./data", False), ("../data", False), ("~/data", False),
    ("~user/data", False), ("data/", False), ("/data", False), ("a/b/c", False),
    ("mnist", False), (".hidden/data", False), ("org/.data", False), ("org/..", False),
    ("org/da..ta", False), ("org/da--ta", False), ("org/-data", False), ("org/data.", False),
    ("org\\data", False), ("org/da ta", False), ("", False), ("org/" + "d" * 97, False),
])
def test_a_hub_id_is_a_bare_owner_slash_name(source, hub):
    assert is_hub_id(source) is hub


def _run(capsys, *argv: str) -> tuple[int, str]:
    status = main([*argv])
    return status, capsys.readouterr().err


@pytest.mark.parametrize("source", ["/nonexistent", "./missing", "../missing", "~/missing",
                                    "a/b/c", "org/.hidden", "missing/"])
def test_a_path_that_does_not_exist_is_said_to_be_missing(capsys, tmp_path, source):
    status, err = _run(capsys, source, str(tmp_path / "out"), *UNREACHABLE)
    assert status == 1, err
    assert err == f"loaderx-convert: error: no such file or directory: {source!r}\n"
    assert not (tmp_path / "out").exists()


def test_a_bare_name_is_missing_and_hints_at_owner_slash_name(capsys, tmp_path):
    status, err = _run(capsys, "mnist", str(tmp_path / "out"), *UNREACHABLE)
    assert status == 1
    assert err == ("loaderx-convert: error: no such file or directory: 'mnist'; a Hub dataset id "
                   "is owner/name (e.g. ylecun/mnist)\n")


def test_owner_slash_name_goes_to_the_hub_unless_that_path_exists(capsys, tmp_path,
                                                                   monkeypatch):
    monkeypatch.chdir(tmp_path)
    # Offline (HF_HUB_OFFLINE=1) or not, the Hub cannot provide it: a HubError, exit 3.
    status, err = _run(capsys, "org/data", "out", "--cache-dir", "cache", *UNREACHABLE)
    assert status == 3 and "revision 'main' of dataset 'org/data'" in err
    assert "SOURCE 'org/data' is read as a Hub dataset id: there is no such local path" in err
    Dataset.from_dict({"x": [1, 2]}).save_to_disk("org/data")
    status, err = _run(capsys, "org/data", "out", *UNREACHABLE)
    assert status == 0, err
    assert (tmp_path / "out" / "train" / "x").is_dir()


def test_the_installed_command_on_a_missing_absolute_path():
    """The call of the report, as a user types it."""
    proc = subprocess.run([str(CONVERT_SCRIPT), "/nonexistent", "out"], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == "loaderx-convert: error: no such file or directory: '/nonexistent'\n"


@pytest.mark.parametrize("repo_id", ["/nonexistent", "./data", "mnist", "a/b/c", "~/x"])
def test_huggingface_refuses_a_path_before_asking_anything(tmp_path, repo_id):
    with pytest.raises(SourceError, match=rf"huggingface: the Hub dataset id must be owner/name "
                                          rf"\(e.g. ylecun/mnist\); got '{repo_id}'; a local "
                                          r"save_to_disk folder or parquet file is loaded with "
                                          r"from_local\(path\)"):
        huggingface(repo_id, endpoint="http://127.0.0.1:9", cache_dir=str(tmp_path))
    with pytest.raises(SourceError, match="resolve_revision: the Hub dataset id must be"):
        resolve_revision(repo_id, "main", offline=True, cache_dir=str(tmp_path))
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(SourceError, match="got int"):
        huggingface(5)  # type: ignore[arg-type]
