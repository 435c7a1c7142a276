"""zrecord.staged_directory: a directory tree published at once ([ZR-PUB-001], [ZR-PUB-003],
[ZR-PUB-006]), the protocol the writers use, offered to tools such as the converter."""

from __future__ import annotations

import os

import numpy as np
import pytest

import zrecord
from zrecord import Dense, staged_directory


def test_tree_appears_whole_on_success(tmp_path):
    root = tmp_path / "data" / "root"
    with staged_directory(root) as tmp:
        assert os.path.basename(tmp).startswith(".root.zr-tmp-")
        assert os.path.isfile(tmp + ".lock")
        with Dense.create(os.path.join(tmp, "train", "x"), np.int16, (2,), codec="raw") as w:
            w.append(np.ones((3, 2), np.int16))
        with open(os.path.join(tmp, "notes.txt"), "w") as f:
            f.write("hello")
        assert not root.exists()
    assert sorted(os.listdir(tmp_path / "data")) == ["root"]  # the lock is gone too
    assert (root / "notes.txt").read_text() == "hello"
    with Dense.open(root / "train" / "x") as ds:
        assert ds[2].tolist() == [1, 1]


def test_nothing_appears_on_an_exception(tmp_path):
    root = tmp_path / "root"
    with pytest.raises(RuntimeError, match="boom"):
        with staged_directory(root) as tmp:
            os.makedirs(os.path.join(tmp, "a", "b"))
            os.symlink("/etc", os.path.join(tmp, "a", "link"))
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []
    assert os.path.isdir("/etc")


def test_the_path_must_be_new_and_outside_published_stores(tmp_path):
    (tmp_path / "taken").mkdir()
    with pytest.raises(zrecord.StoreExistsError):
        with staged_directory(tmp_path / "taken"):
            pass
    with Dense.create(tmp_path / "store", np.uint8, (1,), codec="raw"):
        pass
    with pytest.raises(zrecord.ImmutableStoreError):
        with staged_directory(tmp_path / "store" / "inside"):
            pass
    # Something appearing at the path meanwhile is refused at publish; nothing is replaced.
    with pytest.raises(zrecord.StoreExistsError):
        with staged_directory(tmp_path / "late"):
            (tmp_path / "late").mkdir()
    assert os.listdir(tmp_path / "late") == []
    assert sorted(os.listdir(tmp_path)) == ["late", "store", "taken"]


def test_a_stale_tree_is_removed_by_the_next_one(tmp_path):
    """A dead process's temporary (its lock free) is removed by the next staging of the name."""
    stale = tmp_path / ".root.zr-tmp-00000000000000aa"
    (stale / "train" / "x").mkdir(parents=True)
    (tmp_path / ".root.zr-tmp-00000000000000aa.lock").write_text("")
    with staged_directory(tmp_path / "root"):
        pass
    assert sorted(os.listdir(tmp_path)) == ["root"]


class _ThenInterrupted:
    """A native handle whose publish() runs, then raises KeyboardInterrupt: a Ctrl-C that
    arrived during the native call, which Python raises once the call has returned."""

    def __init__(self, handle):
        self._handle = handle

    def publish(self, *args):
        self._handle.publish(*args)
        raise KeyboardInterrupt("Ctrl-C")

    def __getattr__(self, name):
        return getattr(self._handle, name)


def test_an_interrupt_after_the_rename_says_the_tree_and_the_store_are_published(tmp_path,
                                                                                 monkeypatch):
    """Found in review (an interrupt campaign). Was: a Ctrl-C or SIGTERM that came while the
    native publish ran was raised once it had returned, and the converter then said the
    conversion was undone while ROOT was published and complete (a rerun: "destination must
    not exist"); a writer's close() raised it the same way, saying nothing of the store."""
    from zrecord import _staging

    real = _staging._native.Staging
    monkeypatch.setattr(_staging._native, "Staging", lambda path: _ThenInterrupted(real(path)))
    with pytest.raises(KeyboardInterrupt) as info:
        with zrecord.staged_directory(tmp_path / "root") as d:
            with Dense.create(os.path.join(d, "s"), np.int32, (2,), codec="raw") as w:
                w.append(np.zeros((3, 2), np.int32))
    assert info.value.__notes__ == [f"{tmp_path / 'root'} was published before the interrupt: "
                                    "it is complete"]
    with Dense.open(tmp_path / "root" / "s") as ds:
        assert len(ds) == 3
    # A writer's close(): the store is published, and the interrupt says so.
    w = Dense.create(tmp_path / "w", np.int32, (2,), codec="raw")
    w.append(np.zeros((3, 2), np.int32))
    w._handle = _ThenInterrupted(w._handle)
    with pytest.raises(KeyboardInterrupt) as info:
        w.close()
    assert info.value.__notes__ == [f"{tmp_path / 'w'} was published before the interrupt: "
                                    "the store is complete"]
    w.close()  # done
    with Dense.open(tmp_path / "w") as ds:
        assert len(ds) == 3
