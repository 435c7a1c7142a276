"""A writer killed with SIGKILL leaves nothing that opens as a store, and the path stays usable."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from zrecord import Dense, Ragged

WRITER = textwrap.dedent("""
    import sys, numpy as np
    from zrecord import Dense, Ragged
    path, kind = sys.argv[1], sys.argv[2]
    if kind == "dense":
        w = Dense.create(path, np.uint8, (1 << 20,), codec="raw")
        block = np.full((16, 1 << 20), 7, np.uint8)
        print("ready", flush=True)
        while True:                      # appends until killed
            w.append(block)
    else:
        w = Ragged.create(path, np.int32, 1, codec="raw")
        def gen():
            i = 0
            while True:
                if i == 1000:
                    print("ready", flush=True)
                yield np.arange(i % 4096, dtype=np.int32)
                i += 1
        w.append(gen())
""")


def start_writer(path: str, kind: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", WRITER, path, kind], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_sigkill_mid_append_leaves_nothing_and_path_is_reusable(store_path, kind):  # [ZR-PUB-001]
    proc = start_writer(store_path, kind)
    time.sleep(0.5)  # let it write for a while, well past the first chunks
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    assert proc.returncode == -signal.SIGKILL
    # Nothing at the path: it neither exists nor opens as a store.
    assert not os.path.exists(store_path)
    with pytest.raises(FileNotFoundError):
        Dense.open(store_path)
    # The killed writer's temporary directory and its (now free) lock are all that is left...
    parent = os.path.dirname(store_path)
    leftovers = sorted(e for e in os.listdir(parent) if ".zr-tmp-" in e)
    assert len(leftovers) == 2 and leftovers[0].startswith(".store.zr-tmp-")
    assert leftovers[1] == leftovers[0] + ".lock"
    # ...and create at the path works (and removes the dead writer's leftovers).
    with Ragged.create(store_path, np.int16, 1, codec="raw") as w:
        w.append([np.arange(3, dtype=np.int16)])
    assert os.listdir(parent) == ["store"]
    with Ragged.open(store_path) as rs:
        np.testing.assert_array_equal(rs[0], [0, 1, 2])


def test_sigkill_during_publish_loop_leaves_nothing_or_a_valid_store(tmp_path):
    """Kill writers at staggered moments, including around close(): never anything between."""
    script = textwrap.dedent("""
        import sys, numpy as np
        from zrecord import Dense
        data = np.arange(4096 * 64, dtype=np.int64).reshape(4096, 64)
        with Dense.create(sys.argv[1], np.int64, (64,), codec="raw") as w:
            print("ready", flush=True)
            for _ in range(4):
                w.append(data)
    """)
    outcomes = {"nothing": 0, "published": 0}
    for k in range(6):
        path = str(tmp_path / f"s{k}")
        proc = subprocess.Popen([sys.executable, "-c", script, path], stdout=subprocess.PIPE,
                                text=True)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.01 * k)
        proc.kill()
        proc.wait(10)
        if os.path.exists(path):
            with Dense.open(path) as ds:
                assert len(ds) == 4 * 4096
                ds.verify()
            outcomes["published"] += 1
        else:
            outcomes["nothing"] += 1
    assert sum(outcomes.values()) == 6
