"""Issue [V1] item 4: the command line can do what the API does (per-column codecs, encoded
images, casts, trained dictionaries), and its errors name its flags, not Python keywords.
Every test runs the real console script on a save_to_disk folder of a real ``datasets``
object."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import datasets
import numpy as np
import PIL.Image
import pytest
from datasets import ClassLabel, Dataset, Features, List, Value

import zrecord

CONVERT_SCRIPT = Path(sys.executable).parent / "loaderx-convert"


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CONVERT_SCRIPT), *argv, "--quiet"], capture_output=True,
                          text=True, timeout=300)


def _png(array: np.ndarray, fmt: str = "PNG") -> bytes:
    buf = io.BytesIO()
    PIL.Image.fromarray(array).save(buf, format=fmt)
    return buf.getvalue()


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> Path:
    """Grey PNGs and RGB JPEGs of one size (mixed modes), labels, a text column, and a
    compressible uint8 vector column."""
    rng = np.random.default_rng(0)
    n = 1200
    files = [_png(rng.integers(0, 255, (6, 6), dtype=np.uint8)) if i % 2 else
             _png(rng.integers(0, 255, (6, 6, 3), dtype=np.uint8), "JPEG") for i in range(n)]
    path = tmp_path_factory.mktemp("mixed") / "saved"
    Dataset.from_dict(
        {"image": [{"bytes": f, "path": None} for f in files],
         "label": rng.integers(0, 3, n).tolist(), "caption": ["a photo"] * n,
         "vec": rng.integers(0, 4, (n, 96)).astype(np.uint8).tolist()},
        features=Features({"image": datasets.Image(), "label": ClassLabel(names=["a", "b", "c"]),
                           "caption": Value("string"),
                           "vec": List(Value("uint8"), length=96)})).save_to_disk(str(path))
    return path


def _error(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.startswith("loaderx-convert")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_v1_04_columns_with_spaces_encoded_images_and_per_column_codecs(mixed, tmp_path):
    root = tmp_path / "out"
    proc = _cli(str(mixed), str(root), "--columns", " image , label, vec ", "--images",
                "encoded", "--codec", "zstd", "--codec", "label=raw", "--codec", "vec=raw")
    assert proc.returncode == 0, proc.stderr
    record = json.loads((root / "provenance.json").read_text())
    cols = record["splits"]["train"]["columns"]
    assert list(cols) == ["image", "image.format", "label", "vec"]
    assert cols["image"]["encoding"] == "encoded"
    assert cols["image"]["formats"] == {"JPEG": 600, "PNG": 600}
    assert cols["label"]["codec"] == "raw" and "codec_choice" not in cols["label"]
    assert record["options"]["codec"] == {"*": "zstd", "label": "raw", "vec": "raw"}
    assert f"{root}/train/image: Ragged |u1 ndim=1 x 1200" in proc.stdout


@pytest.mark.parametrize("flags", [["--cast", "image=RGB"], ["--image-mode", "RGB"]])
def test_v1_04_cast_and_image_mode_decode_to_one_mode(mixed, tmp_path, flags):
    root = tmp_path / "out"
    proc = _cli(str(mixed), str(root), "--columns", "image,label", *flags)
    assert proc.returncode == 0, proc.stderr
    with zrecord.Dense.open(root / "train" / "image") as store:
        assert store.item_shape == (6, 6, 3)
        saved = datasets.load_from_disk(str(mixed))
        np.testing.assert_array_equal(store[1], np.asarray(saved[1]["image"].convert("RGB")))
    record = json.loads((root / "provenance.json").read_text())
    assert record["splits"]["train"]["columns"]["image"]["feature"]["mode"] == "RGB"
    assert record["provenance"]["source"] == "local"  # the cast kept the provenance


def test_v1_04_dictionaries_from_a_column_and_from_a_file(mixed, tmp_path):
    proc = _cli(str(mixed), str(tmp_path / "a"), "--columns", "vec,label", "--dict-from", "vec")
    assert proc.returncode == 0, proc.stderr
    with zrecord.Dense.open(tmp_path / "a" / "train" / "vec") as store:
        assert store.codec == "zstd_dict" and store.dict_bytes
        (tmp_path / "vec.dict").write_bytes(store.dict_bytes)
    proc = _cli(str(mixed), str(tmp_path / "b"), "--columns", "vec", "--codec", "vec=zstd_dict",
                "--dict", f"vec={tmp_path / 'vec.dict'}")
    assert proc.returncode == 0, proc.stderr
    assert zrecord.Dense.open(tmp_path / "b" / "train" / "vec").dict_bytes == \
        (tmp_path / "vec.dict").read_bytes()


@pytest.mark.parametrize("argv, says, never", [
    ([], "Leave 'caption' out with --columns", "columns=["),
    (["--columns", "image"], "--cast image=RGB (or --image-mode RGB", "cast_column"),
    (["--columns", "vec", "--codec", "vec=zstd_dict"], "--dict vec=FILE, or have one trained "
                                                         "with --dict-from vec", "dict_bytes"),
    (["--columns", "vec", "--codec", "nope=raw"], "--codec names column(s) ['nope']", "codec="),
    (["--columns", "image", "--cast", "label=RGB"], "--cast label=RGB: column 'label' is", ""),
    (["--columns", "image, nope"], "asked for in --columns", "columns="),
])
def test_v1_04_errors_name_the_flags(mixed, tmp_path, argv, says, never):
    proc = _cli(str(mixed), str(tmp_path / "out"), *argv)
    line = _error(proc)
    assert proc.returncode == 1, proc.stderr
    assert says in line, line
    assert not never or never not in line, line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv, says", [
    (["--codec", "lz4"], "argument --codec: 'lz4' is not a codec"),
    (["--codec", "=raw"], "names no column"),
    (["--cast", "image"], "argument --cast: 'image' is not COLUMN=MODE"),
    (["--image-mode", "RGBQ"], "argument --image-mode: 'RGBQ' is not a Pillow image mode"),
    (["--images", "bytes"], "argument --images: invalid choice"),
])
def test_v1_04_bad_flag_values_are_usage_errors(mixed, tmp_path, argv, says):
    proc = _cli(str(mixed), str(tmp_path / "out"), *argv)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr


def test_v1_04_audio_encoded_from_the_command_line(tmp_path):
    import soundfile

    clips = []
    for n in (3, 50):
        buf = io.BytesIO()
        soundfile.write(buf, np.zeros((n, 2), np.float32), 8000, format="FLAC")
        clips.append(buf.getvalue())
    saved = tmp_path / "saved"
    Dataset.from_dict({"audio": [{"bytes": c, "path": None} for c in clips]}).cast_column(
        "audio", datasets.Audio()).save_to_disk(str(saved))
    proc = _cli(str(saved), str(tmp_path / "out"), "--audio", "encoded")
    assert proc.returncode == 0, proc.stderr
    assert "encoded FLAC 2" in proc.stdout
    with zrecord.Ragged.open(tmp_path / "out" / "train" / "audio") as store:
        assert [r.tobytes() for r in store[:]] == clips
