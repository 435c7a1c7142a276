"""loaderx.transforms.DecodeImages: encoded files in, one fixed-shape batch out, on the
DataLoader's threads ([V1] item 2)."""

from __future__ import annotations

import io
import subprocess
import sys
import threading

import numpy as np
import pytest

import zrecord
from loaderx.dataloader import DataLoader
from loaderx.sampler import Sampler
from loaderx.transforms import DecodeImages

pytest.importorskip("PIL")
import PIL.Image  # noqa: E402
import PIL.ImageOps  # noqa: E402


def _file(array: np.ndarray, fmt: str, **kwargs) -> bytes:
    buf = io.BytesIO()
    PIL.Image.fromarray(array).save(buf, format=fmt, **kwargs)
    return buf.getvalue()


def _record(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype=np.uint8)


def _gradient(h: int, w: int) -> np.ndarray:
    y, x = np.mgrid[0:h, 0:w]
    return np.stack([(x * 255 // max(1, w - 1)), (y * 255 // max(1, h - 1)),
                     np.full((h, w), 80)], axis=-1).astype(np.uint8)


def test_same_size_png_comes_back_exactly_in_every_layout_and_mode():
    pixels = _gradient(6, 9)
    files = [_record(_file(pixels, "PNG")), _file(pixels, "PNG")]  # a record or bytes
    out = DecodeImages("img", size=(6, 9))({"img": files, "label": np.array([1, 2])})
    assert out["img"].shape == (2, 6, 9, 3) and out["img"].dtype == np.uint8
    np.testing.assert_array_equal(out["img"][0], pixels)
    np.testing.assert_array_equal(out["label"], [1, 2])
    chw = DecodeImages("img", size=(6, 9), layout="CHW", out_key="x")({"img": files})
    assert chw["x"].shape == (2, 3, 6, 9) and chw["x"].flags.c_contiguous
    np.testing.assert_array_equal(chw["x"][1], pixels.transpose(2, 0, 1))
    grey = DecodeImages("img", size=(6, 9), mode="L")({"img": files})["img"]
    assert grey.shape == (2, 6, 9, 1)
    np.testing.assert_array_equal(grey[0, :, :, 0],
                                  np.asarray(PIL.Image.fromarray(pixels).convert("L")))


def test_cover_cuts_the_centre_and_stretch_keeps_everything():
    wide = np.zeros((10, 30, 3), np.uint8)
    wide[:, 10:20] = 255  # a white middle third
    data = _file(wide, "PNG")
    cover = DecodeImages(size=(10, 10), resample="nearest")({"image": [data]})["image"][0]
    assert (cover == 255).all()  # the centre 10 x 10 is the white third
    stretch = DecodeImages(size=(10, 10), fit="stretch", resample="nearest")(
        {"image": [data]})["image"][0]
    assert (stretch[:, :3] == 0).all() and (stretch[:, 4:6] == 255).all()


@pytest.mark.parametrize("fmt, extra", [("JPEG", {"quality": 95}), ("WEBP", {"lossless": True}),
                                        ("PNG", {}), ("GIF", {})])
def test_every_format_and_mode_decodes_to_the_requested_shape(fmt, extra):
    pixels = _gradient(40, 64)
    files = [_file(pixels, fmt, **extra),
             _file(np.asarray(PIL.Image.fromarray(pixels).convert("L")), fmt, **extra)]
    out = DecodeImages(size=(20, 20))({"image": files})["image"]
    assert out.shape == (2, 20, 20, 3)
    # The centre of the gradient survives decoding and resampling (JPEG, GIF: roughly).
    assert abs(int(out[0, 10, 10, 0]) - int(pixels[20, 32, 0])) < 24


def test_jpeg_is_decoded_in_draft_mode_no_smaller_than_needed(monkeypatch):
    from PIL import JpegImagePlugin

    seen = []
    draft = JpegImagePlugin.JpegImageFile.draft

    def record(self, mode, size):
        out = draft(self, mode, size)
        seen.append((size, self.size))
        return out

    monkeypatch.setattr(JpegImagePlugin.JpegImageFile, "draft", record)
    big = _file(_gradient(800, 1200), "JPEG")
    out = DecodeImages(size=(100, 100))({"image": [big]})["image"]
    assert out.shape == (1, 100, 100, 3)
    (asked, got), = seen
    assert asked == (150, 100)  # covering 100 x 100 keeps 1200:800
    assert got == (150, 100)  # libjpeg's 1/8 scale: 150 x 100, no full-size decode
    seen.clear()
    DecodeImages(size=(100, 100), draft=False)({"image": [big]})
    assert seen == []


def test_exif_orientation_is_applied_like_datasets_does():
    tall = np.zeros((20, 10, 3), np.uint8)
    tall[:10] = 255  # white top half
    exif = PIL.Image.Exif()
    exif[0x0112] = 6  # stored turned: decoding turns it back by 90 degrees
    turned = np.ascontiguousarray(np.rot90(tall, k=1))  # 10 x 20, what a camera would store
    data = _file(turned, "PNG", exif=exif.tobytes())
    out = DecodeImages(size=(20, 10), resample="nearest")({"image": [data]})["image"][0]
    want = np.asarray(PIL.ImageOps.exif_transpose(PIL.Image.open(io.BytesIO(data))))
    np.testing.assert_array_equal(out, want)
    raw = DecodeImages(size=(10, 20), resample="nearest", exif=False)({"image": [data]})
    np.testing.assert_array_equal(raw["image"][0], turned)


def test_runs_on_the_loaders_threads_over_a_ragged_store(tmp_path):
    rng = np.random.default_rng(0)
    files = [_file(rng.integers(0, 255, (20 + k, 30, 3), dtype=np.uint8), "PNG")
             for k in range(12)]
    with zrecord.Ragged.create(tmp_path / "image", np.uint8, 1, codec="raw") as w:
        w.append([_record(f) for f in files])
    threads = set()
    decode = DecodeImages(size=(16, 16))

    def transform(batch):
        threads.add(threading.current_thread().name)
        return decode(batch)

    store = zrecord.Ragged.open(tmp_path / "image")
    with DataLoader({"image": store}, Sampler(12, 4, Sampler.Mode.SEQUENTIAL), transform,
                    workers=2, prefetch=3) as loader:
        batches = [next(loader)["image"] for _ in range(3)]
    store.close()
    assert all(b.shape == (4, 16, 16, 3) for b in batches)
    np.testing.assert_array_equal(batches[1][0], decode.decode_one(files[4]))
    assert threads and all(name.startswith("loaderx") for name in threads)


def test_a_bad_file_names_its_place_in_the_batch():
    good = _file(_gradient(4, 4), "PNG")
    with pytest.raises(ValueError, match=r"record 1 of the batch \('image', 5 bytes\)"):
        DecodeImages(size=(4, 4))({"image": [good, b"nope!"]})


@pytest.mark.parametrize("kwargs, match", [
    ({"size": (0, 4)}, "size must be"), ({"size": (4,)}, "size must be"),
    ({"mode": "RGBQ"}, "mode must be"), ({"fit": "pad"}, "fit must be"),
    ({"resample": "cubic"}, "resample must be"), ({"layout": "NHWC"}, "layout must be"),
])
def test_argument_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DecodeImages(**kwargs)


def test_without_pillow_the_error_names_the_extra():
    code = (
        "import sys\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'PIL':\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Hide())\n"
        "from loaderx.transforms import DecodeImages\n"  # the module imports without Pillow
        "try:\n"
        "    DecodeImages()\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'pillow>=10'" in out.stdout


def test_a_box_rounded_outside_the_image_is_clamped():
    """A 107 x 107 photo covering 224 x 224 computed a box from -7e-15: Pillow refused it
    ("box offset can't be negative") on the real photos."""
    out = DecodeImages(size=(224, 224))({"image": [_file(_gradient(107, 107), "PNG")]})
    assert out["image"].shape == (1, 224, 224, 3)
