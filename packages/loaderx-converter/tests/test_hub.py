"""huggingface(), from_local(), the CLI, and a conversion killed half way.

The Hub is unreachable here, so huggingface() runs against a populated local cache laid out
the way huggingface_hub lays it out, in a subprocess with HF_HUB_OFFLINE=1; its revision
resolution is tested with a fake Hub API object. The data are real ``datasets`` objects.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import PIL.Image
import pytest
from datasets import ClassLabel, Dataset, DatasetDict, Features, Image, Sequence, Value

import zrecord
from loaderx_converter import HubError, convert, from_local, huggingface, resolve_revision

SEED = Path(__file__).parent / "seed"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _png(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    PIL.Image.fromarray(array).save(buf, format="PNG")
    return buf.getvalue()


def _mnist_like(n: int, seed: int) -> Dataset:
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 255, (n, 28, 28), dtype=np.uint8)
    return Dataset.from_dict(
        {"image": [{"bytes": _png(a), "path": None} for a in images],
         "label": rng.integers(0, 10, n).tolist()},
        features=Features({"image": Image(), "label": ClassLabel(names=[str(d) for d in range(10)])}))


def _populate_cache(cache: Path, repo_id: str) -> DatasetDict:
    """Lay out `repo_id` at COMMIT in a huggingface_hub cache, as a download would."""
    repo = cache / ("datasets--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    data = repo / "snapshots" / COMMIT / "mnist"
    data.mkdir(parents=True)
    dataset = DatasetDict({"train": _mnist_like(30, 0), "test": _mnist_like(12, 1)})
    for split, ds in dataset.items():
        ds.to_parquet(str(data / f"{split}-00000-of-00001.parquet"))
    return dataset


def _offline_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(tmp_path / "home"),
               HF_HUB_CACHE=str(tmp_path / "cache"),
               HF_DATASETS_CACHE=str(tmp_path / "datasets-cache"))
    env.pop("HF_ENDPOINT", None)
    return env


def test_seed_example_converts_a_cached_snapshot_offline(tmp_path):
    source = _populate_cache(tmp_path / "cache", "ylecun/mnist")
    work = tmp_path / "work"
    work.mkdir()
    subprocess.run([sys.executable, str(SEED / "hf_convert.py")], cwd=work,
                   env=_offline_env(tmp_path), check=True, timeout=300)
    root = work / "mnist"
    assert sorted(p.name for p in root.iterdir()) == ["provenance.json", "test", "train"]
    for split, ds in source.items():
        images = zrecord.Dense.open(root / split / "image")
        assert images.item_shape == (28, 28) and images.dtype == np.uint8
        np.testing.assert_array_equal(images[:], np.stack([np.asarray(r) for r in ds["image"]]))
        np.testing.assert_array_equal(zrecord.Dense.open(root / split / "label")[:], ds["label"])
    provenance = json.loads((root / "provenance.json").read_text())["provenance"]
    assert provenance == {"source": "huggingface", "repo_id": "ylecun/mnist", "config": None,
                          "revision": COMMIT, "requested_revision": "main", "endpoint": None}


def test_seed_endpoint_example_runs_offline_from_the_cache(tmp_path):
    _populate_cache(tmp_path / "cache", "ylecun/mnist")
    code = (SEED / "hf_endpoint.py").read_text() + (
        "\nprint(dataset['train'].num_rows, dataset.loaderx_provenance.endpoint)\n")
    out = subprocess.run([sys.executable, "-c", code], env=_offline_env(tmp_path), check=True,
                         capture_output=True, text=True, timeout=300)
    assert out.stdout.split()[-2:] == ["30", "https://hf-mirror.com"]


def test_offline_without_the_snapshot_fails_fast_and_clearly(tmp_path):
    code = "from loaderx.converter import huggingface\nhuggingface('nobody/nothing')\n"
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], env=_offline_env(tmp_path),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "HubError" in out.stderr and "offline" in out.stderr and "'nobody/nothing'" in out.stderr
    assert time.monotonic() - start < 60


class FakeInfo:
    def __init__(self, sha):
        self.sha = sha


class FakeApi:
    """Answers dataset_info like the Hub does, and records what it was asked."""

    def __init__(self, refs):
        self.refs = refs
        self.asked = []

    def dataset_info(self, repo_id, revision=None):
        self.asked.append((repo_id, revision))
        if (repo_id, revision) not in self.refs:
            raise FileNotFoundError(f"404: {repo_id}@{revision}")
        return FakeInfo(self.refs[(repo_id, revision)])


def test_revision_resolution_asks_the_hub_and_returns_the_commit():
    api = FakeApi({("org/data", "main"): COMMIT, ("org/data", "v1.0"): "f" * 40})
    assert resolve_revision("org/data", "main", api=api, offline=False) == COMMIT
    assert resolve_revision("org/data", "v1.0", api=api, offline=False) == "f" * 40
    assert api.asked == [("org/data", "main"), ("org/data", "v1.0")]
    assert resolve_revision("org/data", "a" * 40, api=api, offline=False) == "a" * 40
    assert len(api.asked) == 2  # a commit hash needs no question


def test_revision_resolution_errors_are_clear():
    api = FakeApi({("org/data", "main"): "not-a-commit"})
    with pytest.raises(HubError, match="'nope' of dataset 'org/data'.*HF_HUB_OFFLINE=1"):
        resolve_revision("org/data", "nope", api=api, offline=False)
    with pytest.raises(HubError, match="no commit hash"):
        resolve_revision("org/data", "main", api=api, offline=False)


def test_offline_resolution_reads_the_cache_refs(tmp_path):
    _populate_cache(tmp_path, "org/data")
    assert resolve_revision("org/data", "main", cache_dir=str(tmp_path), offline=True) == COMMIT
    with pytest.raises(HubError, match="no record of revision 'dev'"):
        resolve_revision("org/data", "dev", cache_dir=str(tmp_path), offline=True)


def test_unreachable_endpoint_fails_with_a_hub_error(tmp_path, monkeypatch):
    monkeypatch.setattr("loaderx_converter._hub._offline", lambda: False)
    with pytest.raises(HubError, match="could not resolve revision 'main'"):
        huggingface("org/data", endpoint="http://127.0.0.1:9", cache_dir=str(tmp_path))


def test_from_local_reads_save_to_disk_and_parquet(tmp_path):
    dataset = DatasetDict({"train": _mnist_like(5, 2), "test": _mnist_like(3, 3)})
    dataset.save_to_disk(str(tmp_path / "saved"))
    loaded = from_local(tmp_path / "saved")
    assert {k: v.num_rows for k, v in loaded.items()} == {"train": 5, "test": 3}
    assert loaded.loaderx_provenance.source == "local"
    dataset["train"].to_parquet(str(tmp_path / "one.parquet"))
    assert from_local(tmp_path / "one.parquet")["train"].num_rows == 5
    with pytest.raises(FileNotFoundError):
        from_local(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="neither a save_to_disk folder nor parquet"):
        from_local(tmp_path / "empty")


def test_cli_converts_a_local_folder_and_reports_errors(tmp_path):
    dataset = DatasetDict({"train": _mnist_like(6, 4)})
    dataset.save_to_disk(str(tmp_path / "saved"))
    cli = [sys.executable, "-m", "loaderx_converter.cli"]
    out = subprocess.run([*cli, str(tmp_path / "saved"), str(tmp_path / "out"), "--codec", "raw",
                          "--quiet"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "train/image: Dense |u1 [28, 28] x 6" in out.stdout
    again = subprocess.run([*cli, str(tmp_path / "saved"), str(tmp_path / "out"), "--quiet"],
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 1 and "must not exist" in again.stderr


KILL_SCRIPT = """
import sys
import numpy as np
from datasets import Dataset, Features, Sequence, Value
from loaderx_converter import convert
n = 400_000
ds = Dataset.from_dict({"x": np.arange(n, dtype=np.int64),
                        "v": [[i % 7] * (i % 11) for i in range(n)]},
                       features=Features({"x": Value("int64"), "v": Sequence(Value("int32"))}))
print("converting", flush=True)
convert(ds, sys.argv[1], codec="zstd", progress=False)
print("done", flush=True)
"""


@pytest.mark.parametrize("delay", [0.0, 0.4, 1.2])
def test_killed_conversion_leaves_nothing_and_the_next_one_succeeds(tmp_path, delay):
    """SIGKILL while stores are being written publishes nothing; killed after the publish (a
    fast machine), the output is complete."""
    root = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, str(root)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "converting"
    deadline = time.monotonic() + 120
    while not any(p.name.startswith(".out.zr-tmp-") for p in tmp_path.iterdir()):
        assert proc.poll() is None, "the conversion ended before it started writing"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    if root.exists():  # the kill came after the publish: then the output must be complete
        assert (root / "provenance.json").exists()
        assert len(zrecord.Dense.open(root / "train" / "x")) == 400_000
        assert len(zrecord.Ragged.open(root / "train" / "v")) == 400_000
        return
    assert proc.returncode != 0
    ds = Dataset.from_dict({"x": [1, 2]}, features=Features({"x": Value("int8")}))
    convert(ds, root, progress=False)
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "out"]
    assert leftovers == [], leftovers  # the dead conversion's temporary folder was removed


def test_single_dataset_and_split_name(tmp_path):
    ds = Dataset.from_dict({"v": [[1], []]}, features=Features({"v": Sequence(Value("uint8"))}),
                           split="validation")
    convert(ds, tmp_path / "out", progress=False)
    store = zrecord.Ragged.open(tmp_path / "out" / "validation" / "v")
    assert [r.tolist() for r in store[:]] == [[1], []]
