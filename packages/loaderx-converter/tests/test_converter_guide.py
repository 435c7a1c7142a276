"""The converter guide's walk through a photo collection ([V1]), run as written.

The blocks of docs/guides/converter.md marked ``<!-- test: NAME -->`` are taken from the guide
byte for byte and run in order in one folder: shell blocks with the real console script,
Python blocks in one namespace. Their data is laid out as the guide says: ``data/hf/photos``
(a save_to_disk folder) and ``data/hf/docs_text.parquet``, made from the first rows of the
real data (../shared/data/prepare_data.py) when it is present, else from images and text made
here with the same schema.
"""

from __future__ import annotations

import io
import re
import shlex
import subprocess
import sys
from pathlib import Path

import datasets
import numpy as np
import PIL.Image
import pytest
from datasets import ClassLabel, Dataset, Features, Value

import zrecord

REPO = Path(__file__).resolve().parents[3]
GUIDE = REPO / "docs" / "guides" / "converter.md"
BIN = Path(sys.executable).parent


def blocks(name: str) -> list[tuple[str, str]]:
    """(language, code) of every block marked ``<!-- test: name -->``, in order."""
    found = re.findall(r"<!-- test: ([\w-]+) -->\n```(\w+)\n(.*?)```", GUIDE.read_text(), re.S)
    return [(lang, code) for tag, lang, code in found if tag == name]


def _data_dir() -> Path | None:
    import os

    for candidate in (os.environ.get("LOADERX_BENCH_DATA"), REPO.parent / "data",
                      REPO.parent.parent / "data"):
        if candidate and (Path(candidate) / "hf" / "photos").is_dir():
            return Path(candidate)
    return None


def _made_photos() -> Dataset:
    rng = np.random.default_rng(0)
    files, sources = [], []
    for k in range(40):
        pixels = rng.integers(0, 255, (30 + k, 40, 3), dtype=np.uint8)
        image = PIL.Image.fromarray(pixels).convert(["RGB", "RGBA", "P", "L"][k % 4])
        buf = io.BytesIO()
        image.save(buf, format=["PNG", "JPEG", "WEBP"][k % 3] if image.mode in ("RGB", "L")
                   else "PNG")
        files.append({"bytes": buf.getvalue(), "path": None})
        sources.append(k % 3)
    return Dataset.from_dict(
        {"image": files, "source": sources, "path": [f"{k}.png" for k in range(40)],
         "width": [40] * 40, "height": [30 + k for k in range(40)]},
        features=Features({"image": datasets.Image(),
                           "source": ClassLabel(names=["a", "b", "c"]), "path": Value("string"),
                           "width": Value("int32"), "height": Value("int32")}))


@pytest.fixture()
def folder(tmp_path, monkeypatch) -> Path:
    real = _data_dir()
    hf = tmp_path / "data" / "hf"
    hf.mkdir(parents=True)
    if real is not None:
        photos = datasets.load_from_disk(str(real / "hf" / "photos")).select(range(60))
        text = Dataset.from_parquet(str(real / "hf" / "docs_text.parquet")).select(range(3000))
    else:
        photos = _made_photos()
        text = Dataset.from_dict({"text": ["a paragraph", "and another one"] * 50,
                                  "source": [1] * 100, "doc": ["x.rst"] * 100})
    photos.save_to_disk(str(hf / "photos"))
    text.to_parquet(str(hf / "docs_text.parquet"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _run_shell(code: str, cwd: Path) -> None:
    for line in code.strip().splitlines():
        argv = shlex.split(line)
        assert argv[0] == "loaderx-convert", line
        proc = subprocess.run([str(BIN / argv[0]), *argv[1:]], cwd=cwd, capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr


def test_the_guides_photo_collection_runs_from_the_command_line_and_from_python(folder, capsys):
    pytest.importorskip("loaderx.transforms")  # the guide trains with loaderx
    cli, python, text = blocks("photos-cli"), blocks("photos-python"), blocks("text")
    assert [lang for lang, _ in cli] == ["sh"] and len(python) == 2 and len(text) == 1
    _run_shell(cli[0][1], folder)
    photos = datasets.load_from_disk(str(folder / "data" / "hf" / "photos"))
    files = [row["bytes"] for row in photos.with_format("arrow")[:].column("image").to_pylist()]
    with zrecord.Ragged.open(folder / "photos" / "train" / "image") as store:
        assert [r.tobytes() for r in store[:]] == files

    namespace: dict = {"__name__": "__guide__"}
    for _, code in python:
        exec(compile(code, str(GUIDE), "exec"), namespace)
    meta = namespace["meta"]
    assert namespace["sources"] == photos.features["source"].names
    assert meta["train"]["image"].encoding == "encoded"
    assert "photos-py" in capsys.readouterr().out
    batch = namespace["batch"]
    assert batch["image"].shape == (32, 224, 224, 3) and batch["image"].dtype == np.uint8
    assert batch["source"].shape == (32,)

    exec(compile(text[0][1], str(GUIDE), "exec"), namespace)
    ids = zrecord.Ragged.open(folder / "text-ids" / "train" / "ids")
    first = pq_first_text(folder)
    assert ids[0].tolist() == list(first.encode())
    ids.close()


def pq_first_text(folder: Path) -> str:
    import pyarrow.parquet as pq

    return str(pq.read_table(folder / "data" / "hf" / "docs_text.parquet").column("text")[0])
