"""loaderx.ray: zrecord stores read as a Ray Dataset on a local Ray instance.

Skipped when Ray is not installed; the `distributed` nox session installs ``loaderx[ray]``.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ray.data")

import ray  # noqa: E402

from loaderx.ray import ZrecordDatasource, read_zrecord  # noqa: E402
from loaderx.zrecord import Dense, Ragged  # noqa: E402

N = 503  # prime, so no read-task split is even


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield
    ray.shutdown()


def _tokens(i: int) -> np.ndarray:
    return np.arange(i % 7, dtype=np.int32) + i


def _patch(i: int) -> np.ndarray:
    return np.full((1 + i % 3, 2 + i % 2), i, dtype=np.float64)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("ray")
    x = np.arange(N * 6, dtype=np.float32).reshape(N, 2, 3)
    with Dense.create(root / "x", np.float32, (2, 3), codec="zstd") as w:
        w.append(x)
    with Dense.create(root / "y", np.int64, (), codec="raw") as w:
        w.append(np.arange(N, dtype=np.int64) * 10)
    with Ragged.create(root / "tok", np.int32, 1, codec="zstd") as w:
        w.append(_tokens(i) for i in range(N))
    with Ragged.create(root / "patch", np.float64, 2, codec="raw") as w:
        w.append(_patch(i) for i in range(N))
    with Dense.create(root / "short", np.int64, (), codec="raw") as w:
        w.append(np.arange(N - 1, dtype=np.int64))
    return root, x


@pytest.mark.parametrize("parallelism", [1, 2, 7])
def test_every_record_is_read_once_with_exact_values(local_ray, stores, parallelism):
    root, x = stores
    opened = Dense.open(root / "x")
    try:
        ds = read_zrecord({"x": opened, "y": root / "y", "tok": str(root / "tok"),
                           "patch": root / "patch"}, parallelism=parallelism,
                          index_column="id")
        rows = ds.take_all()
    finally:
        opened.close()
    ids = sorted(r["id"] for r in rows)
    assert ids == list(range(N))                           # every record exactly once
    for r in rows:
        i = r["id"]
        np.testing.assert_array_equal(r["x"], x[i])
        assert r["x"].dtype == np.float32 and r["x"].shape == (2, 3)
        assert r["y"] == 10 * i
        np.testing.assert_array_equal(r["tok"], _tokens(i))
        assert r["tok"].dtype == np.int32
        np.testing.assert_array_equal(r["patch"], _patch(i))
        assert r["patch"].shape == _patch(i).shape


def test_read_tasks_partition_the_ids(local_ray, stores, monkeypatch):
    root, _ = stores
    monkeypatch.setattr("loaderx.ray.BLOCK_BYTES_TARGET", 16 * 40)  # 40 rows of id + y
    source = ZrecordDatasource({"y": root / "y"}, index_column="id")
    tasks = source.get_read_tasks(4)
    assert [t.metadata.num_rows for t in tasks] == [125, 126, 126, 126]
    blocks = [blk for t in tasks for blk in t()]
    assert max(b.num_rows for b in blocks) == 40           # bounded blocks within a task
    ids = np.concatenate([b.column("id").to_numpy() for b in blocks])
    assert ids.tolist() == list(range(N))
    assert len(source.get_read_tasks(10_000)) == N         # never more tasks than records


def test_schema_is_tensor_columns(local_ray, stores):
    root, _ = stores
    ds = read_zrecord({"x": root / "x", "tok": root / "tok", "y": root / "y"}, parallelism=2)
    schema = ds.schema()
    types = dict(zip(schema.names, [str(t) for t in schema.types], strict=True))
    assert "Tensor" in types["x"] and "(2, 3)" in types["x"]
    assert "VariableShapedTensor" in types["tok"] or "ndim=1" in types["tok"]
    batch = ds.take_batch(4, batch_format="numpy")
    assert batch["x"].shape == (4, 2, 3)


def test_ragged_records_with_one_shape_stay_variable_shaped(local_ray, tmp_path):
    with Ragged.create(tmp_path / "same", np.int16, 1, codec="raw") as w:
        w.append(np.arange(3, dtype=np.int16) for _ in range(5))
    rows = read_zrecord({"s": tmp_path / "same"}, parallelism=1).take_all()
    assert [r["s"].tolist() for r in rows] == [[0, 1, 2]] * 5


def test_relative_paths_are_resolved_on_the_driver(local_ray, stores, monkeypatch):
    root, _ = stores
    monkeypatch.chdir(root)
    rows = read_zrecord({"y": "y"}, parallelism=3, index_column="id").take_all()
    assert sorted((r["id"], r["y"]) for r in rows) == [(i, 10 * i) for i in range(N)]


def test_misaligned_lengths_are_refused(stores):
    root, _ = stores
    with pytest.raises(ValueError, match=r"same number of records.*y=503.*short=502"):
        read_zrecord({"y": root / "y", "short": root / "short"})


def test_bad_arguments_are_refused(stores):
    root, _ = stores
    with pytest.raises(TypeError, match="non-empty dict"):
        read_zrecord({})
    with pytest.raises(TypeError, match="column 'a' must be a zrecord Dense or Ragged store"):
        read_zrecord({"a": np.zeros(3)})
    with pytest.raises(ValueError, match="parallelism must be -1"):
        read_zrecord({"y": root / "y"}, parallelism=0)
    with pytest.raises(ValueError, match="index_column"):
        read_zrecord({"y": root / "y"}, index_column="y")
    from zrecord import StoreNotFoundError

    with pytest.raises(StoreNotFoundError):
        read_zrecord({"y": root / "missing"})
