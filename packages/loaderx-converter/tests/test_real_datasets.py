"""Real datasets through the converter ([V1]): encoded media kept as bytes, per-column
codecs that never inflate small columns, metadata in one call, null elements by position, and
one decoding pass. Every test converts real ``datasets`` objects; the tests named ``*_real_*``
also read the prepared real data (../shared/data/prepare_data.py) when it is present."""

from __future__ import annotations

import io
import json
import os
import struct
import zlib
from pathlib import Path

import datasets
import numpy as np
import PIL.Image
import pytest
from datasets import ClassLabel, Dataset, DatasetDict, Features, List, Sequence, Value

import zrecord
from loaderx_converter import (
    InconsistentRecordsError,
    NullValueError,
    OptionError,
    UnsafePathError,
    UnsupportedFeatureError,
    convert,
    from_local,
    info,
)
from loaderx_converter._headers import PNG_MODES, image_header, sniff

REPO = Path(__file__).resolve().parents[3]


def _data_dir() -> Path | None:
    """The prepared real data: LOADERX_BENCH_DATA, else ../data beside the checkout (or two up,
    for a worktree under wt/)."""
    for candidate in (os.environ.get("LOADERX_BENCH_DATA"), REPO.parent / "data",
                      REPO.parent.parent / "data"):
        if candidate and (Path(candidate) / "hf").is_dir():
            return Path(candidate)
    return None


DATA = _data_dir()
needs_data = pytest.mark.skipif(DATA is None, reason="the prepared real data (hf/) is absent")


def _encode(array: np.ndarray, fmt: str, **kwargs) -> bytes:
    buf = io.BytesIO()
    image = PIL.Image.fromarray(array)
    if "mode" in kwargs:
        image = image.convert(kwargs.pop("mode"))
    image.save(buf, format=fmt, **kwargs)
    return buf.getvalue()


def _images(files: list[bytes], feature=None) -> Dataset:
    return Dataset.from_dict({"img": [{"bytes": f, "path": None} for f in files]},
                             features=Features({"img": feature or datasets.Image()}))


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


def _png_file(rng, width: int, height: int, depth: int, colour: int, interlace: int = 0) -> bytes:
    """A PNG written here, byte by byte: random samples under a random filter type per row
    (any byte string is a valid filtered stream), so every unfilter path is exercised."""
    row = -(-width * _CHANNELS[colour] * depth // 8)
    raw = b"".join(bytes([int(rng.integers(0, 5))]) + rng.integers(0, 256, row, dtype=np.uint8).tobytes()
                   for _ in range(height))
    parts = [b"\x89PNG\r\n\x1a\n",
             _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, depth, colour, 0, 0, interlace))]
    if colour == 3:
        parts.append(_chunk(b"PLTE", rng.integers(0, 256, 3 * 2 ** depth, dtype=np.uint8).tobytes()))
    if interlace:  # Adam7 needs its own layout; a stream of the right length for 8 passes
        raw = zlib.compress(bytes(len(raw) * 2))
        parts.append(_chunk(b"IDAT", raw))
    else:
        data = zlib.compress(raw)
        parts += [_chunk(b"IDAT", data[:7]), _chunk(b"IDAT", data[7:])]  # two IDAT chunks
    parts.append(_chunk(b"IEND", b""))
    return b"".join(parts)


def _store_bytes(path: Path) -> list[bytes]:
    with zrecord.Ragged.open(path) as store:
        return [r.tobytes() for r in store[:]] if len(store) else []


def _nothing_at(root: Path) -> bool:
    siblings = [p for p in root.parent.iterdir() if p.name.startswith(f".{root.name}.")]
    return not os.path.lexists(root) and not siblings


# -- encoded media ([V1] item 1) -------------------------------------------------------------


def test_encoded_images_are_the_files_bytes_with_their_formats(tmp_path):
    """[V1] item 1: images="encoded" stores each file's bytes exactly (Ragged uint8, rank 1),
    records the formats in the provenance, and each record's format in "img.format" (a
    ClassLabel column) when the column mixes formats."""
    rng = np.random.default_rng(0)
    files = [_encode(rng.integers(0, 255, (9, 7, 3), dtype=np.uint8), "JPEG"),
             _encode(rng.integers(0, 255, (5, 4), dtype=np.uint8), "PNG"),
             _encode(rng.integers(0, 255, (6, 6, 4), dtype=np.uint8), "WEBP", lossless=True),
             _encode(rng.integers(0, 255, (3, 8, 3), dtype=np.uint8), "PNG", mode="P"),
             _encode(rng.integers(0, 255, (4, 4, 3), dtype=np.uint8), "GIF")]
    ds = _images(files).add_column("label", [0, 1, 1, 0, 1])
    record = convert(ds, tmp_path / "out", images="encoded", progress=False)
    col = record["splits"]["train"]["columns"]["img"]
    assert (col["kind"], col["dtype"], col["ndim"], col["encoding"]) == ("Ragged", "|u1", 1,
                                                                         "encoded")
    assert col["formats"] == {"JPEG": 1, "PNG": 2, "WEBP": 1, "GIF": 1}
    assert _store_bytes(tmp_path / "out" / "train" / "img") == files
    assert col["format_column"] == "img.format"
    names = record["splits"]["train"]["columns"]["img.format"]["feature"]["names"]
    assert names == ["GIF", "JPEG", "PNG", "WEBP"]
    codes = zrecord.Dense.open(tmp_path / "out" / "train" / "img.format")[:]
    assert [names[c] for c in codes] == ["JPEG", "PNG", "WEBP", "PNG", "GIF"]
    assert info(tmp_path / "out")["train"]["img.format"].label_names == names
    assert record["options"]["images"] == "encoded"


def test_one_format_needs_no_format_column_and_decode_false_is_accepted(tmp_path):
    files = [_encode(np.full((3, 3), k, np.uint8), "PNG") for k in range(4)]
    ds = _images(files, datasets.Image(decode=False))
    record = convert(ds, tmp_path / "out", images="encoded", progress=False)
    cols = record["splits"]["train"]["columns"]
    assert list(cols) == ["img"] and cols["img"]["formats"] == {"PNG": 4}
    assert _store_bytes(tmp_path / "out" / "train" / "img") == files
    # Decoding was asked for a column that holds bytes: the message names the way out.
    with pytest.raises(UnsupportedFeatureError, match="images='encoded'"):
        convert(ds, tmp_path / "decoded", progress=False)


def test_image_paths_are_read_from_disk_in_both_modes(tmp_path):
    """Image columns made from files on disk hold paths, not bytes: both modes read them."""
    rng = np.random.default_rng(1)
    paths, arrays = [], []
    for k in range(3):
        arrays.append(rng.integers(0, 255, (4 + k, 5, 3), dtype=np.uint8))
        paths.append(str(tmp_path / f"{k}.png"))
        PIL.Image.fromarray(arrays[-1]).save(paths[-1])
    ds = Dataset.from_dict({"img": paths}).cast_column("img", datasets.Image())
    assert ds.data.column("img").to_pylist()[0]["bytes"] is None
    convert(ds, tmp_path / "enc", images="encoded", progress=False)
    assert _store_bytes(tmp_path / "enc" / "train" / "img") == [Path(p).read_bytes() for p in paths]
    convert(ds, tmp_path / "dec", progress=False)
    with zrecord.Ragged.open(tmp_path / "dec" / "train" / "img") as store:
        for got, want in zip(store[:], arrays):
            np.testing.assert_array_equal(got, want)


def test_encoded_audio_is_the_files_bytes(tmp_path):
    import soundfile

    clips = []
    for n in (0, 7, 300):
        buf = io.BytesIO()
        soundfile.write(buf, np.zeros((n, 1), np.float32), 8000, format="WAV", subtype="FLOAT")
        clips.append(buf.getvalue())
    ds = Dataset.from_dict({"audio": [{"bytes": c, "path": None} for c in clips]}).cast_column(
        "audio", datasets.Audio(sampling_rate=16000))  # another rate: kept files are never resampled
    record = convert(ds, tmp_path / "out", audio="encoded", progress=False)
    assert record["splits"]["train"]["columns"]["audio"]["formats"] == {"WAV": 3}
    assert _store_bytes(tmp_path / "out" / "train" / "audio") == clips


def test_an_image_column_of_non_images_fails_before_writing(tmp_path):
    ds = _images([_encode(np.zeros((2, 2), np.uint8), "PNG"), b"not an image at all"])
    with pytest.raises(InconsistentRecordsError, match="row 1 is not an image file"):
        convert(ds, tmp_path / "out", images="encoded", progress=False)
    assert _nothing_at(tmp_path / "out")


def test_the_format_column_name_must_be_free(tmp_path):
    ds = _images([_encode(np.zeros((2, 2), np.uint8), "PNG"),
                  _encode(np.zeros((2, 2), np.uint8), "GIF")]).add_column("img.format", [1, 2])
    with pytest.raises(UnsafePathError, match="img.format"):
        convert(ds, tmp_path / "out", images="encoded", progress=False)
    assert _nothing_at(tmp_path / "out")


def test_a_bad_images_option_is_an_option_error(tmp_path):
    with pytest.raises(OptionError, match="images must be 'decode' or 'encoded'"):
        convert(_images([]), tmp_path / "out", images="bytes", progress=False)


@needs_data
def test_real_photos_encoded_are_their_files_and_cost_what_the_files_cost(tmp_path):
    photos = datasets.load_from_disk(str(DATA / "hf" / "photos")).select(range(120))
    record = convert(photos, tmp_path / "out", images="encoded", columns=["image", "source"],
                     codec="raw", progress=False)
    files = [row["bytes"] for row in photos.with_format("arrow")[:].column("image").to_pylist()]
    assert _store_bytes(tmp_path / "out" / "train" / "image") == files
    formats = record["splits"]["train"]["columns"]["image"]["formats"]
    assert sum(formats.values()) == 120 and set(formats) <= {"JPEG", "PNG", "WEBP"}
    with zrecord.Ragged.open(tmp_path / "out" / "train" / "image") as store:
        assert store.stored_bytes == sum(len(f) for f in files)


# -- per-column codecs ([V1] item 3) ---------------------------------------------------------


def _labelled(n: int = 3000) -> Dataset:
    rng = np.random.default_rng(2)
    return Dataset.from_dict(
        {"x": rng.integers(0, 4, (n, 64)).astype(np.uint8).tolist(),
         "label": rng.integers(0, 10, n).tolist(), "id": np.arange(n, dtype=np.int64),
         "zeros": [[0] * 64] * n},
        features=Features({"x": List(Value("uint8"), length=64),
                           "label": ClassLabel(names=[str(k) for k in range(10)]),
                           "id": Value("int64"), "zeros": List(Value("uint8"), length=64)}))


def test_small_columns_never_grow_under_the_default_codec(tmp_path):
    """[V1] item 3: labels and ids under the default zstd would take more bytes than raw; the
    default is measured against raw on a sample and the choice is recorded. A compressible
    small column keeps zstd; a large column is never measured."""
    record = convert(_labelled(), tmp_path / "out", progress=False)
    cols = record["splits"]["train"]["columns"]
    assert cols["label"]["codec"] == "raw" and cols["id"]["codec"] == "raw"
    choice = cols["label"]["codec_choice"]
    assert choice["requested"] == "zstd" and choice["chosen"] == "raw"
    assert choice["zstd_bytes"] > choice["raw_bytes"] == 8 * 3000
    assert cols["zeros"]["codec"] == "zstd" and cols["zeros"]["codec_choice"]["chosen"] == "zstd"
    for name in ("label", "id"):
        with zrecord.Dense.open(tmp_path / "out" / "train" / name) as store:
            assert store.codec == "raw" and store.stored_bytes == store.nbytes


def test_a_codec_named_for_a_column_is_used_as_it_is(tmp_path):
    record = convert(_labelled(), tmp_path / "out", codec={"*": "raw", "label": "zstd"},
                     progress=False)
    cols = record["splits"]["train"]["columns"]
    assert cols["label"]["codec"] == "zstd" and "codec_choice" not in cols["label"]
    assert cols["x"]["codec"] == "raw" and cols["id"]["codec"] == "raw"
    assert record["options"]["codec"] == {"*": "raw", "label": "zstd"}
    with zrecord.Dense.open(tmp_path / "out" / "train" / "label") as store:
        assert store.codec == "zstd"


def test_dictionaries_per_column_and_trained_from_a_column(tmp_path):
    ds = _labelled()
    d = zrecord.train_dict(np.asarray(ds["x"], np.uint8), dict_size=1024)
    record = convert(ds, tmp_path / "one", codec={"x": "zstd_dict", "*": "zstd"},
                     dict_bytes={"*": d}, progress=False)
    assert record["splits"]["train"]["columns"]["x"]["dictionary"]["bytes"] == len(d)
    assert zrecord.Dense.open(tmp_path / "one" / "train" / "x").dict_bytes == d
    record = convert(ds, tmp_path / "two", dict_from="x", progress=False)
    x = record["splits"]["train"]["columns"]["x"]
    assert x["codec"] == "zstd_dict" and x["dictionary"]["trained_from"]["column"] == "x"
    with zrecord.Dense.open(tmp_path / "two" / "train" / "x") as store:
        assert store.dict_bytes and len(store.dict_bytes) == x["dictionary"]["bytes"]
        np.testing.assert_array_equal(store[:], np.asarray(ds["x"], np.uint8))


@pytest.mark.parametrize("kwargs, match", [
    ({"codec": {"nope": "raw"}}, r"codec names column\(s\) \['nope'\]"),
    ({"codec": {"label": "lz4"}}, "codec for column 'label' must be one of"),
    ({"codec": {"label": "raw"}, "dict_from": "label"}, "gives it codec 'raw'"),
    ({"dict_bytes": {"x": b"d" * 300}}, "its codec is 'zstd'"),
    ({"codec": {"x": "zstd_dict"}}, r"dict_bytes=\{'x': d\}"),
    ({"dict_from": ["nope"]}, r"dict_from names column\(s\) \['nope'\]"),
    ({"dict_bytes": {"x": b""}, "codec": {"x": "zstd_dict"}}, "dictionary for column 'x'"),
])
def test_option_errors_before_writing(tmp_path, kwargs, match):
    with pytest.raises(OptionError, match=match):
        convert(_labelled(50), tmp_path / "out", progress=False, **kwargs)
    assert _nothing_at(tmp_path / "out")


@needs_data
def test_real_fashion_mnist_labels_stay_raw(tmp_path):
    fm = datasets.load_from_disk(str(DATA / "hf" / "fashion_mnist"))
    small = DatasetDict({"test": fm["test"].select(range(2000))})
    record = convert(small, tmp_path / "out", progress=False)
    label = record["splits"]["test"]["columns"]["label"]
    assert label["codec"] == "raw" and label["codec_choice"]["zstd_bytes"] > 8 * 2000
    assert record["splits"]["test"]["columns"]["image"]["codec"] == "zstd"


# -- metadata ([V1] item 5) ------------------------------------------------------------------


def test_info_reads_splits_columns_features_and_label_names(tmp_path):
    rng = np.random.default_rng(3)
    ds = Dataset.from_dict(
        {"img": [{"bytes": _encode(rng.integers(0, 255, (4, 5, 3), dtype=np.uint8), "PNG"),
                  "path": None} for _ in range(6)],
         "label": [0, 1, 2, 0, 1, 2], "tags": [[0, 1], [], [2], [1], [], [0]]},
        features=Features({"img": datasets.Image(),
                           "label": ClassLabel(names=["cat", "dog", "fox"]),
                           "tags": Sequence(ClassLabel(names=["a", "b", "c"]))}))
    convert(DatasetDict({"train": ds, "test": ds.select([0, 1])}), tmp_path / "out",
            progress=False)
    meta = info(tmp_path / "out")
    assert list(meta.splits) == ["train", "test"] and meta["test"].rows == 2
    img = meta["train"]["img"]
    assert (img.kind, img.dtype, img.item_shape, img.ndim) == ("Dense", np.uint8, (4, 5, 3), 3)
    assert img.encoding == "decoded" and img.feature["_type"] == "Image"
    assert meta["train"]["label"].label_names == ["cat", "dog", "fox"]
    assert meta.label_names("tags") == ["a", "b", "c"]
    assert meta["train"]["tags"].kind == "Ragged" and meta["train"]["tags"].item_shape is None
    assert meta["train"]["label"].codec == "raw"
    assert meta.source["source"] == "datasets object"
    assert meta.features("test")["label"].names == ["cat", "dog", "fox"]
    assert "label: Dense int64 () raw (labels [cat, dog, fox])" in str(meta)
    with pytest.raises(ValueError, match="not a ClassLabel"):
        meta.label_names("img")
    with pytest.raises(FileNotFoundError, match="not a converted dataset root"):
        info(tmp_path / "out" / "train")


def test_info_is_reexported_as_loaderx_converter_info(tmp_path):
    converter = pytest.importorskip("loaderx.converter")
    import loaderx_converter

    assert converter.info is loaderx_converter.info


def test_cast_column_keeps_the_provenance_of_the_source(tmp_path):
    """[V1] item 5: cast_column (and select_columns, select) return new objects without the
    provenance attribute; the provenance is found again by the Arrow files."""
    saved = tmp_path / "saved"
    Dataset.from_dict({"img": [{"bytes": _encode(np.zeros((3, 3), np.uint8), "PNG"),
                                "path": None}] * 4},
                      features=Features({"img": datasets.Image()})).save_to_disk(str(saved))
    loaded = from_local(str(saved))
    cast = loaded.cast_column("img", datasets.Image(mode="RGB"))
    assert not hasattr(cast, "loaderx_provenance")
    record = convert(cast, tmp_path / "out", progress=False)
    assert record["provenance"]["source"] == "local"
    assert record["provenance"]["repo_id"] == str(saved)
    assert record["splits"]["train"]["columns"]["img"]["item_shape"] == [3, 3, 3]
    record = convert(cast["train"].select([0, 2]), tmp_path / "out2", progress=False)
    assert record["provenance"]["source"] == "local"
    # A map writes new Arrow files: the source no longer describes its values.
    mapped = loaded["train"].map(lambda row: row)
    assert convert(mapped, tmp_path / "out3", progress=False)["provenance"]["source"] \
        == "datasets object"


@pytest.mark.parametrize("data, feature, where", [
    ([[3, None]], Sequence(Value("int32")), "row 0, element 1 is null"),
    ([[1], [3, None]], Sequence(Value("int32")), "row 1, element 1 is null"),
    ([[1, 2], [3, None]], List(Value("int32"), length=2), "row 1, element 1 is null"),
    ([[[3, None]]], List(List(Value("int32"))), r"row 0, element \[0\]\[1\] is null"),
    ([[[1]], [[2], None]], List(List(Value("int32"))), "row 1, element 1 is null"),
    ([[1], None], Sequence(Value("int32")), "row 1 is null"),
])
def test_a_null_inside_a_list_is_named_by_row_and_element(tmp_path, data, feature, where):
    ds = Dataset.from_dict({"s": data}, features=Features({"s": feature}))
    with pytest.raises(NullValueError, match=where):
        convert(ds, tmp_path / "out", progress=False)


def test_nulls_are_found_in_later_batches_at_their_row(tmp_path, monkeypatch):
    from loaderx_converter import _convert

    monkeypatch.setattr(_convert, "BATCH_ROWS_MAX", 7)
    rows = [[k, k] for k in range(30)]
    rows[23] = [5, None]
    ds = Dataset.from_dict({"s": rows}, features=Features({"s": Sequence(Value("int64"))}))
    with pytest.raises(NullValueError, match="row 23, element 1 is null"):
        convert(ds, tmp_path / "out", progress=False)


# -- one decoding pass ([V1] item 6) ---------------------------------------------------------


@pytest.mark.parametrize("depth, colour", sorted(PNG_MODES))
def test_png_headers_agree_with_pillow(depth, colour):
    """The header reader's mode for every PNG colour type and bit depth is Pillow's."""
    rng = np.random.default_rng(depth * 10 + colour)
    for interlace in (0, 1):
        data = _png_file(rng, 5, 3, depth, colour, interlace)
        header = image_header(data)
        with PIL.Image.open(io.BytesIO(data)) as image:
            assert header is not None and (header.mode, header.width, header.height) == (
                image.mode, *image.size)
        assert (header.zip_rawmode is not None) == (depth == 8 and not interlace)


def test_jpeg_and_webp_headers_and_orientation_agree_with_pillow():
    rng = np.random.default_rng(5)
    pixels = rng.integers(0, 255, (6, 10, 3), dtype=np.uint8)
    files = [_encode(pixels, "JPEG"), _encode(pixels, "JPEG", mode="L"),
             _encode(pixels, "JPEG", mode="CMYK"), _encode(pixels, "WEBP"),
             _encode(pixels, "WEBP", lossless=True), _encode(pixels, "WEBP", mode="RGBA"),
             _encode(pixels, "WEBP", mode="RGBA", lossless=True)]
    for orientation in (1, 3, 6, 8):
        exif = PIL.Image.Exif()
        exif[0x0112] = orientation
        files += [_encode(pixels, "JPEG", exif=exif.tobytes()),
                  _encode(pixels, "WEBP", exif=exif.tobytes()),
                  _encode(pixels, "PNG", exif=exif.tobytes())]
    xmp = b'<x:xmpmeta><rdf:Description tiff:Orientation="6"/></x:xmpmeta>'
    files += [_encode(pixels, "JPEG", xmp=xmp), _encode(pixels, "WEBP", xmp=xmp)]
    for data in files:
        header = image_header(data)
        with PIL.Image.open(io.BytesIO(data)) as image:
            image.load()
            want = (image.format, image.mode, *image.size, image.getexif().get(0x0112))
        if header is not None:  # None leaves the file to Pillow: always allowed
            assert (header.format, header.mode, header.width, header.height,
                    header.orientation) == want
    assert sniff(files[0]) == "JPEG" and sniff(files[3]) == "WEBP"


@pytest.mark.parametrize("colour", sorted(_CHANNELS))
def test_pngs_decode_exactly_as_datasets_decodes_them(tmp_path, colour):
    """Random samples under random filters, for every 8-bit colour type (decoded in place for
    L, P and RGBA), interlaced ones too: every record equals dataset[i] as an array."""
    rng = np.random.default_rng(colour)
    files = [_png_file(rng, 7, 5, 8, colour) for _ in range(6)]
    files += [_png_file(rng, 3 + k, 4, 8, colour) for k in range(3)]  # other sizes: Ragged
    ds = DatasetDict({"same": _images(files[:6]), "varied": _images(files)})
    convert(ds, tmp_path / "out", progress=False)
    for split, part in ds.items():
        store = zrecord.open_store(tmp_path / "out" / split / "img")
        for i in range(part.num_rows):
            want = np.asarray(part[i]["img"])
            got = store[i]
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
        store.close()


def test_each_image_is_decoded_once(tmp_path, monkeypatch):
    """The check pass reads headers only: decoding happens once per image, while writing."""
    from loaderx_converter import _features

    calls = {"zip": 0, "pillow": 0, "open": 0}
    zip_into, decode, pil_open = (_features._ImageReader._zip_into,
                                  _features._ImageReader._decode, PIL.Image.open)

    def count(name, fn):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(_features._ImageReader, "_zip_into", staticmethod(count("zip", zip_into)))
    monkeypatch.setattr(_features._ImageReader, "_decode", count("pillow", decode))
    monkeypatch.setattr(PIL.Image, "open", count("open", pil_open))
    rng = np.random.default_rng(6)
    pixels = rng.integers(0, 255, (6, 6, 3), dtype=np.uint8)
    files = [_encode(pixels, "PNG")] * 40 + [_encode(pixels, "JPEG")] * 30
    convert(_images(files), tmp_path / "out", progress=False)
    assert calls == {"zip": 40, "pillow": 30, "open": 30}


@needs_data
def test_real_fashion_mnist_decodes_as_datasets_does(tmp_path):
    fm = datasets.load_from_disk(str(DATA / "hf" / "fashion_mnist"))["test"].select(range(3000))
    convert(fm, tmp_path / "out", progress=False)
    images = zrecord.Dense.open(tmp_path / "out" / "train" / "image")
    assert images.item_shape == (28, 28)
    np.testing.assert_array_equal(images[:], np.stack([np.asarray(im) for im in fm["image"]]))


@needs_data
def test_real_photos_headers_agree_with_pillow():
    photos = datasets.load_from_disk(str(DATA / "hf" / "photos"))
    column = photos.with_format("arrow")[:].column("image").to_pylist()
    read = 0
    for row in column:
        header = image_header(row["bytes"])
        if header is None:
            continue
        read += 1
        with PIL.Image.open(io.BytesIO(row["bytes"])) as image:
            image.load()
            assert (header.format, header.mode, header.width, header.height,
                    header.orientation) == (image.format, image.mode, *image.size,
                                            image.getexif().get(0x0112))
    assert read > 0.95 * len(column)


def test_provenance_records_the_options(tmp_path):
    record = convert(_labelled(20), tmp_path / "out", codec={"x": "raw"}, progress=False)
    on_disk = json.loads((tmp_path / "out" / "provenance.json").read_text())
    assert on_disk["options"] == {"codec": {"*": "zstd", "x": "raw"}, "images": "decode",
                                  "audio": "decode", "data_shards": 4}
    assert on_disk == record


def test_the_codec_sample_is_read_batch_by_batch_and_bounded(tmp_path, monkeypatch):
    """Choosing an encoded column's codec read the first 4,096 rows as one table, and so
    copied a column spread over several Arrow files whole (+408 MiB on the real photos); the
    sample now stops at its byte budget, read in the conversion's batches."""
    from loaderx_converter import _options

    monkeypatch.setattr(_options, "CODEC_SAMPLE_BYTES_MAX", 1000)
    rng = np.random.default_rng(7)
    parts = [_images([_encode(rng.integers(0, 255, (8, 8), dtype=np.uint8), "PNG")
                      for _ in range(20)]) for _ in range(2)]
    ds = datasets.concatenate_datasets(parts)  # two Arrow chunks
    record = convert(ds, tmp_path / "out", images="encoded", progress=False)
    choice = record["splits"]["train"]["columns"]["img"]["codec_choice"]
    size = len(ds.with_format("arrow")[:1].column("img")[0]["bytes"].as_py())
    assert choice["sample_records"] == -(-1000 // size)


def test_write_batches_are_cut_by_the_bytes_images_decode_to(tmp_path, monkeypatch):
    """Batches were sized from the files' bytes times 8; a few large photos in one batch
    decoded to far more (the real photos, decoded: peak RSS 1.1 GiB). The check pass now
    learns each image's decoded size from its header, and a batch decodes to about
    BATCH_BYTES_TARGET (a larger image alone)."""
    from loaderx_converter import _convert, _features

    target = 3 * 40 * 40 * 3
    monkeypatch.setattr(_convert, "BATCH_BYTES_TARGET", target)
    batches = []
    extract = _features._ImageReader.extract

    def spy(self, arr, plan, row0):
        out = extract(self, arr, plan, row0)
        batches.append(sum(r.nbytes for r in out))
        return out

    monkeypatch.setattr(_features._ImageReader, "extract", spy)
    rng = np.random.default_rng(8)
    sides = [40, 40, 40, 40, 90, 40, 10, 10, 10, 40]
    files = [_encode(rng.integers(0, 255, (s, s, 3), dtype=np.uint8), "PNG") for s in sides]
    convert(_images(files), tmp_path / "out", progress=False)
    assert sum(batches) == sum(s * s * 3 for s in sides)
    assert all(b <= target for b in batches if b != 90 * 90 * 3), batches
    assert 90 * 90 * 3 in batches  # the large image alone
