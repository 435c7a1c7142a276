"""convert(..., workers=N): worker processes extract, this process writes; the same stores."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import datasets
import numpy as np
import PIL.Image
import pytest
from datasets import ClassLabel, Dataset, DatasetDict, Features, List, Value

from loaderx_converter import OptionError, WorkerError, _convert, _workers, convert
from loaderx_converter.cli import main


def _png(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    PIL.Image.fromarray(array).save(buf, format="PNG")
    return buf.getvalue()


def _dataset(rows: int = 40, seed: int = 0) -> DatasetDict:
    """Images (PNG, two sizes: Ragged), labels and token lists, in two splits."""
    rng = np.random.default_rng(seed)
    features = Features({"image": datasets.Image(), "label": ClassLabel(names=["a", "b", "c"]),
                         "tokens": List(Value("int32"))})

    def split(n: int) -> Dataset:
        images = [rng.integers(0, 255, (32 + 8 * (i % 2), 32), dtype=np.uint8) for i in range(n)]
        return Dataset.from_dict({
            "image": [{"bytes": _png(a), "path": None} for a in images],
            "label": rng.integers(0, 3, n).tolist(),
            "tokens": [rng.integers(0, 50_000, int(rng.integers(0, 30))).tolist() for _ in range(n)],
        }, features=features)
    return DatasetDict({"train": split(rows), "test": split(rows // 3)})


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _nothing_at(root: Path) -> bool:
    siblings = [p for p in root.parent.iterdir() if p.name.startswith(f".{root.name}.")]
    return not os.path.lexists(root) and not siblings


@pytest.fixture
def small_batches(monkeypatch):
    """Batches of 7 rows, so that a split is many batches spread over the workers."""
    monkeypatch.setattr(_convert, "BATCH_ROWS_MAX", 7)


def test_workers_write_the_same_files_as_one_process(tmp_path, small_batches):
    dataset = _dataset()
    one = convert(dataset, tmp_path / "one", progress=False)
    three = convert(dataset, tmp_path / "three", workers=3, progress=False)
    assert one == three
    files = _files(tmp_path / "one")
    assert any(name.startswith("train/image/") for name in files)
    assert files == _files(tmp_path / "three")


def test_an_error_in_a_worker_is_raised_as_in_one_process(tmp_path, small_batches):
    good = _png((np.arange(4096) % 251).astype(np.uint8).reshape(64, 64))
    at = good.index(b"IDAT") + 8
    bad = good[:at] + bytes(b ^ 0x5A for b in good[at:at + 10]) + good[at + 10:]
    ds = Dataset.from_dict({"img": [{"bytes": good, "path": None}] * 9 + [{"bytes": bad, "path": None}]},
                           features=Features({"img": datasets.Image()}))
    with pytest.raises(ValueError) as alone:
        convert(ds, tmp_path / "one", progress=False)
    with pytest.raises(ValueError) as workers:
        convert(ds, tmp_path / "two", workers=2, progress=False)
    assert type(workers.value) is type(alone.value) and str(workers.value) == str(alone.value)
    cause = workers.value.__cause__
    assert isinstance(cause, WorkerError)
    assert "rows 7..9 of split 'train'" in str(cause) and "Traceback" in str(cause)
    assert _nothing_at(tmp_path / "one") and _nothing_at(tmp_path / "two")


def test_a_killed_worker_publishes_nothing_and_leaves_no_process(tmp_path, small_batches,
                                                                 monkeypatch):
    teams: list[_workers.Team] = []
    extracted = _workers.Team.extracted

    def kill_first(self, *args, **kwargs):
        teams.append(self)
        os.kill(self.members[0].proc.pid, signal.SIGKILL)
        return extracted(self, *args, **kwargs)

    monkeypatch.setattr(_workers.Team, "extracted", kill_first)
    with pytest.raises(WorkerError, match=r"killed by signal 9 while extracting .*split 'train'"):
        convert(_dataset(), tmp_path / "out", workers=2, progress=False)
    assert _nothing_at(tmp_path / "out")
    assert teams and all(w.proc.returncode is not None for w in teams[0].members)


@pytest.mark.parametrize("workers", [0, -1, True, 1.5, "2"])
def test_workers_must_be_a_whole_number_of_processes(tmp_path, workers):
    with pytest.raises(OptionError, match=r"workers must be a whole number of processes, at least 1"):
        convert(_dataset(4), tmp_path / "out", workers=workers, progress=False)
    assert _nothing_at(tmp_path / "out")


def test_the_command_line_takes_workers(tmp_path, capsys):
    _dataset().save_to_disk(str(tmp_path / "source"))
    assert main([str(tmp_path / "source"), str(tmp_path / "one"), "--quiet"]) == 0
    assert main([str(tmp_path / "source"), str(tmp_path / "two"), "--quiet", "--workers", "2"]) == 0
    assert _files(tmp_path / "one") == _files(tmp_path / "two")
    assert main([str(tmp_path / "source"), str(tmp_path / "three"), "--quiet", "--workers", "0"]) == 1
    assert "--workers must be a whole number of processes" in capsys.readouterr().err


def test_a_script_without_a_main_guard_converts_with_workers(tmp_path):
    """The workers never import the caller's __main__ (as spawned multiprocessing children
    would, running an unguarded script's conversion again)."""
    _dataset().save_to_disk(str(tmp_path / "source"))
    script = tmp_path / "convert_it.py"
    script.write_text(textwrap.dedent(f"""
        from loaderx_converter import convert, from_local
        record = convert(from_local({str(tmp_path / 'source')!r}), {str(tmp_path / 'out')!r},
                         workers=2, progress=False)
        print("converted", sorted(record["splits"]))
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("converted") == 1
    assert "['test', 'train']" in done.stdout


class _TwoArguments(Exception):
    def __init__(self, a, b):
        super().__init__(f"{a} and {b}")


def test_an_exception_that_does_not_pickle_comes_back_as_a_worker_error():
    kept = ValueError("row 3 is bad")
    assert _workers._portable(kept) is kept
    sent = _workers._portable(_TwoArguments(1, 2))
    assert isinstance(sent, WorkerError)
    assert "_TwoArguments: 1 and 2" in str(sent) and "does not pickle" in str(sent)
