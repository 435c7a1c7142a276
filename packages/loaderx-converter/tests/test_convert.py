"""convert(): every feature kind, exact values, and failures that leave nothing behind."""

from __future__ import annotations

import errno
import io
import json
import os

import datasets
import numpy as np
import PIL.Image
import pytest
from datasets import (
    Array2D,
    Array3D,
    Audio,
    ClassLabel,
    Dataset,
    DatasetDict,
    Features,
    LargeList,
    List,
    Sequence,
    Value,
)

import zrecord
from loaderx_converter import (
    InconsistentRecordsError,
    NullValueError,
    UnsupportedFeatureError,
    convert,
)

NUMERIC = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
           "float16", "float32", "float64"]


def _png(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    PIL.Image.fromarray(array).save(buf, format="PNG")
    return buf.getvalue()


def _wav(samples: np.ndarray, rate: int) -> bytes:
    import soundfile

    buf = io.BytesIO()
    soundfile.write(buf, samples, rate, format="WAV", subtype="FLOAT")
    return buf.getvalue()


def _audio_dataset(files: list[bytes], feature: Audio) -> Dataset:
    """An Audio column built from encoded files (datasets itself would need torchcodec to encode)."""
    plain = Dataset.from_dict({"audio": [{"bytes": f, "path": None} for f in files]})
    return plain.cast_column("audio", feature)


def _leaf_dtype(feature) -> np.dtype:
    """The dtype a feature declares for its numbers."""
    while not isinstance(feature, (Value, ClassLabel)) and hasattr(feature, "feature"):
        feature = feature.feature
    if isinstance(feature, ClassLabel):
        return np.dtype("int64")
    return np.dtype(feature.dtype)


def _assert_exact(root, dataset: DatasetDict) -> None:
    """Every record equals what the dataset itself decodes, in value, shape and dtype."""
    for split, ds in dataset.items():
        for column in ds.column_names:
            store = zrecord.open_store(root / split / column)
            assert len(store) == ds.num_rows
            feature = ds.features[column]
            for i in range(ds.num_rows):
                got = store[i]
                value = ds[i][column]
                if isinstance(value, PIL.Image.Image):
                    want = np.asarray(value)
                else:
                    want = np.asarray(value, dtype=_leaf_dtype(feature))
                assert got.dtype == want.dtype, (split, column, i)
                assert got.shape == want.shape, (split, column, i)
                np.testing.assert_array_equal(got, want)
            store.close()


def _nothing_at(root) -> bool:
    siblings = [p for p in root.parent.iterdir() if p.name.startswith(f".{root.name}.")]
    return not os.path.lexists(root) and not siblings


@pytest.mark.parametrize("dtype", NUMERIC)
def test_every_numeric_value_dtype_is_dense_and_exact(tmp_path, dtype):
    rng = np.random.default_rng(0)
    values = (rng.integers(0, 2, 50) if dtype == "bool" else rng.integers(0, 100, 50)).astype(dtype)
    ds = Dataset.from_dict({"x": values}, features=Features({"x": Value(dtype)}))
    convert(DatasetDict({"train": ds}), tmp_path / "out", codec="raw", progress=False)
    store = zrecord.Dense.open(tmp_path / "out" / "train" / "x")
    assert store.dtype == np.dtype(dtype) and store.item_shape == ()
    np.testing.assert_array_equal(store[:], values)


def test_fixed_features_become_dense(tmp_path):
    rng = np.random.default_rng(1)
    n = 37
    features = Features({
        "label": ClassLabel(names=["a", "b", "c"]),
        "a2": Array2D((2, 3), "int16"),
        "a3": Array3D((2, 1, 4), "float32"),
        "fixed": List(Value("int32"), length=4),
        "fixed2": List(List(Value("uint8"), length=2), length=3),
    })
    data = {
        "label": rng.integers(0, 3, n).tolist(),
        "a2": [rng.integers(-50, 50, (2, 3)).astype(np.int16) for _ in range(n)],
        "a3": [rng.standard_normal((2, 1, 4)).astype(np.float32) for _ in range(n)],
        "fixed": [rng.integers(0, 9, 4).tolist() for _ in range(n)],
        "fixed2": [rng.integers(0, 9, (3, 2)).tolist() for _ in range(n)],
    }
    dataset = DatasetDict({"train": Dataset.from_dict(data, features=features)})
    record = convert(dataset, tmp_path / "out", progress=False)
    cols = record["splits"]["train"]["columns"]
    assert {c: (v["kind"], v.get("item_shape")) for c, v in cols.items()} == {
        "label": ("Dense", []), "a2": ("Dense", [2, 3]), "a3": ("Dense", [2, 1, 4]),
        "fixed": ("Dense", [4]), "fixed2": ("Dense", [3, 2])}
    assert zrecord.Dense.open(tmp_path / "out" / "train" / "label").dtype == np.int64
    _assert_exact(tmp_path / "out", dataset)


def test_variable_features_become_ragged_including_empty_records(tmp_path):
    features = Features({
        "seq": Sequence(Value("int64")),
        "large": LargeList(Value("float64")),
        "grid": List(List(Value("int32"))),
        "rows": List(List(Value("uint16"), length=2)),
        "arr": Array2D((None, 3), "float32"),
    })
    data = {
        "seq": [[1, 2, 3], [], [4]],
        "large": [[], [0.5], [1.5, 2.5]],
        "grid": [[[1, 2], [3, 4], [5, 6]], [], [[7], [8]]],
        "rows": [[], [[1, 2]], [[3, 4], [5, 6]]],
        "arr": [np.zeros((0, 3), np.float32), np.ones((2, 3), np.float32),
                np.arange(3, dtype=np.float32).reshape(1, 3)],
    }
    dataset = DatasetDict({"train": Dataset.from_dict(data, features=features)})
    record = convert(dataset, tmp_path / "out", codec="zstd", progress=False)
    cols = record["splits"]["train"]["columns"]
    assert {c: (v["kind"], v.get("ndim")) for c, v in cols.items()} == {
        "seq": ("Ragged", 1), "large": ("Ragged", 1), "grid": ("Ragged", 2),
        "rows": ("Ragged", 2), "arr": ("Ragged", 2)}
    root = tmp_path / "out" / "train"
    grid = zrecord.Ragged.open(root / "grid")
    assert [r.shape for r in grid[:]] == [(3, 2), (0, 0), (2, 1)]
    rows = zrecord.Ragged.open(root / "rows")
    assert [r.shape for r in rows[:]] == [(0, 2), (1, 2), (2, 2)]
    assert [r.shape for r in zrecord.Ragged.open(root / "seq")[:]] == [(3,), (0,), (1,)]
    arr = zrecord.Ragged.open(root / "arr")
    for got, want in zip(arr[:], data["arr"]):
        assert got.dtype == np.float32 and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    # Empty nested lists carry no inner length in Python, so compare those columns above.
    _assert_exact(tmp_path / "out", DatasetDict({"train": dataset["train"].remove_columns(
        ["grid", "rows", "arr"])}))


def test_images_of_one_size_are_dense_and_of_many_sizes_ragged(tmp_path):
    rng = np.random.default_rng(2)
    same = [rng.integers(0, 255, (5, 7, 3), dtype=np.uint8) for _ in range(6)]
    varied = [rng.integers(0, 255, (3 + i, 4 + 2 * i), dtype=np.uint8) for i in range(6)]
    features = Features({"same": datasets.Image(), "varied": datasets.Image()})
    ds = Dataset.from_dict({"same": [{"bytes": _png(a), "path": None} for a in same],
                            "varied": [{"bytes": _png(a), "path": None} for a in varied]},
                           features=features)
    dataset = DatasetDict({"train": ds, "test": ds.select([4, 1])})
    record = convert(dataset, tmp_path / "out", progress=False)
    cols = record["splits"]["train"]["columns"]
    assert cols["same"]["kind"] == "Dense" and cols["same"]["item_shape"] == [5, 7, 3]
    assert cols["varied"]["kind"] == "Ragged" and cols["varied"]["ndim"] == 2
    _assert_exact(tmp_path / "out", dataset)
    np.testing.assert_array_equal(zrecord.Ragged.open(tmp_path / "out" / "test" / "varied")[0],
                                  varied[4])


def test_image_mode_declared_by_the_feature_is_applied_like_datasets_does(tmp_path):
    gray = [np.full((4, 4), i, np.uint8) for i in range(3)]
    ds = Dataset.from_dict({"img": [{"bytes": _png(a), "path": None} for a in gray]},
                           features=Features({"img": datasets.Image(mode="RGB")}))
    convert(ds, tmp_path / "out", progress=False)
    store = zrecord.Dense.open(tmp_path / "out" / "train" / "img")
    assert store.item_shape == (4, 4, 3)
    _assert_exact(tmp_path / "out", DatasetDict({"train": ds}))


def test_exif_orientation_is_applied_like_datasets_does(tmp_path):
    """A JPEG turned by its EXIF tag decodes with height and width swapped; the probe knows."""
    files = []
    for orientation in (6, 1):
        exif = PIL.Image.Exif()
        exif[0x0112] = orientation
        buf = io.BytesIO()
        PIL.Image.fromarray(np.zeros((4, 8, 3), np.uint8)).save(buf, "JPEG", exif=exif.tobytes())
        files.append({"bytes": buf.getvalue(), "path": None})
    ds = Dataset.from_dict({"img": files}, features=Features({"img": datasets.Image()}))
    record = convert(ds, tmp_path / "out", progress=False)
    assert record["splits"]["train"]["columns"]["img"]["kind"] == "Ragged"
    shapes = [r.shape for r in zrecord.Ragged.open(tmp_path / "out" / "train" / "img")[:]]
    assert shapes == [(8, 4, 3), (4, 8, 3)]
    _assert_exact(tmp_path / "out", DatasetDict({"train": ds}))


def test_mixed_image_modes_fail_before_writing(tmp_path):
    images = [np.zeros((4, 4), np.uint8), np.zeros((4, 4, 3), np.uint8)]
    ds = Dataset.from_dict({"img": [{"bytes": _png(a), "path": None} for a in images]},
                           features=Features({"img": datasets.Image()}))
    with pytest.raises(InconsistentRecordsError, match=r"'train'.*'img'.*row 1"):
        convert(ds, tmp_path / "out", progress=False)
    assert _nothing_at(tmp_path / "out")


def test_audio_is_ragged_float32_channels_by_samples(tmp_path):
    rng = np.random.default_rng(3)
    clips = [rng.uniform(-1, 1, (n, 2)).astype(np.float32) for n in (0, 5, 300)]
    ds = _audio_dataset([_wav(c, 8000) for c in clips], Audio(sampling_rate=8000))
    convert(ds, tmp_path / "out", codec="raw", progress=False)
    store = zrecord.Ragged.open(tmp_path / "out" / "train" / "audio")
    assert store.dtype == np.float32 and store.ndim == 2
    for got, clip in zip(store[:], clips):
        np.testing.assert_array_equal(got, clip.T)


def test_audio_at_another_rate_fails_instead_of_resampling(tmp_path):
    clip = np.zeros((10, 1), np.float32)
    ds = _audio_dataset([_wav(clip, 8000)], Audio(sampling_rate=16000))
    with pytest.raises(InconsistentRecordsError, match="never resamples"):
        convert(ds, tmp_path / "out", progress=False)
    assert _nothing_at(tmp_path / "out")


@pytest.mark.parametrize("column, data, feature, row", [
    ("x", [1, None, 3], Value("int64"), 1),
    ("f", [0.5, 1.5, None], Value("float32"), 2),
    ("seq", [[1], [2, None], [3]], Sequence(Value("int32")), 1),
    ("seq", [[1], [2], None], Sequence(Value("int32")), 2),
    ("label", [0, None, 1], ClassLabel(names=["a", "b"]), 1),
    ("img", [{"bytes": _png(np.zeros((2, 2), np.uint8)), "path": None}, None],
     datasets.Image(), 1),
])
def test_nulls_fail_before_writing_naming_split_column_feature_and_row(tmp_path, column, data,
                                                                       feature, row):
    good = Dataset.from_dict({column: [data[0]]}, features=Features({column: feature}))
    bad = Dataset.from_dict({column: data}, features=Features({column: feature}))
    dataset = DatasetDict({"train": good, "validation": bad})
    with pytest.raises(NullValueError) as info:
        convert(dataset, tmp_path / "out", progress=False)
    message = str(info.value)
    assert "'validation'" in message and repr(column) in message and f"row {row}" in message
    assert type(feature).__name__ in message
    assert _nothing_at(tmp_path / "out")


def test_a_null_is_never_written_as_a_sentinel_value(tmp_path):
    """The published loaderx wrote INT64_MIN for a null; here a null can only be an error."""
    ds = Dataset.from_dict({"x": [None]}, features=Features({"x": Value("int64")}))
    with pytest.raises(NullValueError):
        convert(ds, tmp_path / "out", progress=False)


@pytest.mark.parametrize("feature, data, what", [
    (Value("string"), ["a", "b"], "Value dtype 'string'"),
    (Value("binary"), [b"a", b"b"], "Value dtype 'binary'"),
    ({"a": Value("int32"), "b": Value("int32")}, [{"a": 1, "b": 2}] * 2, "nested dicts"),
    (Sequence(Value("string")), [["a"], []], "lists of"),
    (Value("timestamp[s, tz=UTC]"), [0, 1], "time zone"),
    (Value("time64[us]"), [0, 1], "time64"),
])
def test_unsupported_features_fail_before_writing(tmp_path, feature, data, what):
    ds = Dataset.from_dict({"ok": [1, 2], "bad": data},
                           features=Features({"ok": Value("int8"), "bad": feature}))
    with pytest.raises(UnsupportedFeatureError, match=rf"'train', column 'bad'.*{what}"):
        convert(DatasetDict({"train": ds}), tmp_path / "out", progress=False)
    assert _nothing_at(tmp_path / "out")
    convert(DatasetDict({"train": ds}), tmp_path / "out", columns=["ok"], progress=False)
    assert sorted(p.name for p in (tmp_path / "out" / "train").iterdir()) == ["ok"]


def test_non_rectangular_nested_lists_fail_before_writing(tmp_path):
    ds = Dataset.from_dict({"g": [[[1, 2]], [[1, 2], [3]]]},
                           features=Features({"g": List(List(Value("int32")))}))
    with pytest.raises(InconsistentRecordsError, match="row 1.*axis 1"):
        convert(ds, tmp_path / "out", progress=False)
    deep = Dataset.from_dict({"g": [[[[1, 2]], [[3]]]]},
                             features=Features({"g": List(List(List(Value("int32"))))}))
    with pytest.raises(InconsistentRecordsError, match="row 0.*axis 2"):
        convert(deep, tmp_path / "out", progress=False)
    assert _nothing_at(tmp_path / "out")


def test_large_split_streams_in_batches_and_counts_agree(tmp_path):
    n = 10_000
    ds = Dataset.from_dict({"x": np.arange(n, dtype=np.int32),
                            "v": [[i] * (i % 5) for i in range(n)]},
                           features=Features({"x": Value("int32"), "v": Sequence(Value("int16"))}))
    shuffled = ds.shuffle(seed=0)  # an indices mapping: rows come in the mapped order
    convert(shuffled, tmp_path / "out", codec="zstd", data_shards=3, progress=False)
    x = zrecord.Dense.open(tmp_path / "out" / "train" / "x")[:]
    np.testing.assert_array_equal(x, np.asarray(shuffled["x"]))
    v = zrecord.Ragged.open(tmp_path / "out" / "train" / "v")
    assert [len(r) for r in v[:]] == [i % 5 for i in x]
    assert all(r.dtype == np.int16 for r in v[:50])


def test_provenance_file_and_layout(tmp_path):
    ds = Dataset.from_dict({"x": [1, 2]}, features=Features({"x": Value("uint8")}))
    record = convert(DatasetDict({"train": ds, "test": ds}), tmp_path / "out", progress=False)
    on_disk = json.loads((tmp_path / "out" / "provenance.json").read_text())
    assert on_disk == record
    assert on_disk["provenance"]["source"] == "datasets object"
    assert on_disk["splits"]["test"]["columns"]["x"] == {
        "kind": "Dense", "dtype": "|u1", "item_shape": [], "records": 2,
        "feature": {"dtype": "uint8", "_type": "Value"}, "codec": "raw",
        "codec_choice": {"requested": "zstd", "sample_records": 2, "raw_bytes": 2,
                         "zstd_bytes": 20, "chosen": "raw",
                         "why": "zstd would store the sample in 10.00x the bytes of raw"}}
    assert set(on_disk["versions"]) == {"loaderx-converter", "zrecord", "datasets"}


def test_zstd_dict_with_one_or_per_column_dictionaries(tmp_path):
    rng = np.random.default_rng(4)
    a = rng.integers(0, 4, (2000, 64)).astype(np.uint8)
    ds = Dataset.from_dict({"a": list(a), "b": list(a[::-1])},
                           features=Features({"a": List(Value("uint8"), length=64),
                                              "b": List(Value("uint8"), length=64)}))
    d = zrecord.train_dict(a, dict_size=1024)
    convert(ds, tmp_path / "one", codec="zstd_dict", dict_bytes=d, progress=False)
    convert(ds, tmp_path / "two", codec="zstd_dict", dict_bytes={"a": d, "b": d}, progress=False)
    for root in ("one", "two"):
        store = zrecord.Dense.open(tmp_path / root / "train" / "a")
        assert store.dict_bytes == d
        np.testing.assert_array_equal(store[:], a)
    with pytest.raises(ValueError, match="column 'b' has codec 'zstd_dict' but no dictionary"):
        convert(ds, tmp_path / "three", codec="zstd_dict", dict_bytes={"a": d}, progress=False)
    assert _nothing_at(tmp_path / "three")


def test_argument_errors(tmp_path):
    ds = Dataset.from_dict({"x": [1]}, features=Features({"x": Value("int8")}))
    (tmp_path / "exists").mkdir()
    with pytest.raises(FileExistsError):
        convert(ds, tmp_path / "exists", progress=False)
    # Missing parent folders are made, as for every zrecord store (one rule, [H1] step 1).
    convert(ds, tmp_path / "no" / "such", progress=False)
    assert (tmp_path / "no" / "such" / "provenance.json").is_file()
    with pytest.raises(ValueError, match="codec must be one of"):
        convert(ds, tmp_path / "o", codec="lz4", progress=False)
    with pytest.raises(ValueError, match="needs dict_bytes"):
        convert(ds, tmp_path / "o", codec="zstd_dict", progress=False)
    with pytest.raises(ValueError, match="only used by codec 'zstd_dict'"):
        convert(ds, tmp_path / "o", dict_bytes=b"x" * 300, progress=False)
    with pytest.raises(ValueError, match="data_shards"):
        convert(ds, tmp_path / "o", data_shards=0, progress=False)
    with pytest.raises(KeyError, match=r"no column\(s\) \['y'\]"):
        convert(ds, tmp_path / "o", columns=["y"], progress=False)
    with pytest.raises(TypeError, match="DatasetDict or Dataset"):
        convert({"train": [1, 2]}, tmp_path / "o", progress=False)
    assert _nothing_at(tmp_path / "o")


def test_a_failure_while_writing_removes_everything(tmp_path, monkeypatch):
    """A failure of the system while the write pass reads an image (an I/O error, which has an
    errno; a file whose pixels do not decode is test_errors.py's) publishes nothing, and is
    raised as it is."""
    from loaderx_converter import _features

    ds = Dataset.from_dict({"x": list(range(100)), "img": [
        {"bytes": _png(np.zeros((2, 2), np.uint8)), "path": None}] * 100},
        features=Features({"x": Value("int32"), "img": datasets.Image()}))

    def broken(*args):
        raise OSError(errno.EIO, "disk read failed")

    monkeypatch.setattr(_features._ImageReader, "_decode", broken)
    monkeypatch.setattr(_features._ImageReader, "_zip_into", broken)
    with pytest.raises(OSError, match="disk read failed"):
        convert(ds, tmp_path / "out", progress=False)
    assert _nothing_at(tmp_path / "out")


@pytest.mark.parametrize("feature, data, dtype", [
    (Value("timestamp[ns]"), [0, 1_700_000_000_123_456_789, -(2**62)], "datetime64[ns]"),
    (Value("timestamp[s]"), [0, 1_700_000_000, -1], "datetime64[s]"),
    (Value("duration[ms]"), [0, 5, -7], "timedelta64[ms]"),
    (Value("date32"), [0, 19000, -1], "datetime64[D]"),
    (Value("date64"), [0, 1_700_000_000_000, 86_400_000], "datetime64[ms]"),
])
def test_times_and_durations_become_datetime64_and_timedelta64(tmp_path, feature, data, dtype):
    """Format 1.1 holds datetime64/timedelta64 with their unit: exact values, NaT-free input."""
    import pyarrow as pa

    arrow_type = datasets.features.features.string_to_arrow(feature.dtype)
    width = pa.int32() if feature.dtype == "date32" else pa.int64()
    table = pa.table({"t": pa.array(data, type=width).view(arrow_type)})
    ds = Dataset(table).cast(Features({"t": feature}))
    convert(DatasetDict({"train": ds}), tmp_path / "out", progress=False)
    with zrecord.Dense.open(tmp_path / "out" / "train" / "t") as store:
        assert store.dtype == np.dtype(dtype)
        want = table.column("t").to_numpy().astype(dtype)
        assert store[:].tobytes() == want.tobytes()


def test_fixed_size_binary_becomes_bytes_records_byte_for_byte(tmp_path):
    import pyarrow as pa

    values = [b"ab\x00", b"\x00\xff\x01", b"xyz"]
    table = pa.table({"b": pa.array(values, type=pa.binary(3)), "l": pa.array(
        [[b"aa", b"b\x00"], [], [b"zz"]], type=pa.list_(pa.binary(2)))})
    ds = Dataset(table)
    assert ds.features["b"] == Value("fixed_size_binary[3]")
    convert(ds, tmp_path / "out", progress=False)
    with zrecord.Dense.open(tmp_path / "out" / "train" / "b") as store:
        assert store.dtype == np.dtype("S3")
        assert store[:].tobytes() == b"".join(values)
    with zrecord.Ragged.open(tmp_path / "out" / "train" / "l") as store:
        assert store.dtype == np.dtype("S2")
        assert [r.tobytes() for r in store[:]] == [b"aab\x00", b"", b"zz"]


def test_a_png_whose_pixels_do_not_decode_fails_while_writing_and_publishes_nothing(tmp_path):
    """[V1] item 6: the check pass reads headers only, so a PNG with a sound header and a
    broken pixel stream is found while writing; the conversion then fails and removes
    everything."""
    good = _png(np.arange(64, dtype=np.uint8).reshape(8, 8))
    start = good.index(b"IDAT") + 4
    bad = good[:start] + bytes(b ^ 0x5A for b in good[start:start + 12]) + good[start + 12:]
    ds = Dataset.from_dict({"img": [{"bytes": good, "path": None}] * 50
                                   + [{"bytes": bad, "path": None}]},
                           features=Features({"img": datasets.Image()}))
    with pytest.raises((OSError, ValueError)):
        convert(ds, tmp_path / "out", progress=False)
    assert _nothing_at(tmp_path / "out")
