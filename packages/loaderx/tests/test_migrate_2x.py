"""docs/examples/migrate_2x_stores.py, run as docs/coming-from.md says: stores written by the
published loaderx 2.x become zrecord stores with the same records.

Needs the published loaderx in its own environment (the two share a name; `nox -s loaderx`
makes one):
LOADERX_PEER_PYTHON is that environment's python, as for the benchmarks
(`python -m venv ../peerenv && ../peerenv/bin/pip install loaderx==2.5.9`). Skipped without it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "docs" / "examples" / "migrate_2x_stores.py"
PEER = os.environ.get("LOADERX_PEER_PYTHON")

pytestmark = pytest.mark.skipif(not PEER, reason="LOADERX_PEER_PYTHON (a python with the "
                                "published loaderx 2.x) is not set")

# Written by the published loaderx: three codecs, both kinds, one store nested in a folder
# beside a plain file (as a converted dataset has provenance.json).
WRITE_2X = """
import numpy as np, os, sys
from loaderx.zrecord import Dense, Ragged
from loaderx.utils import train_dict
root = sys.argv[1]
os.makedirs(os.path.join(root, "nested"))
open(os.path.join(root, "provenance.json"), "w").write('{"source": "test"}')
x = np.arange(3000 * 6, dtype=np.float32).reshape(3000, 2, 3)
with Dense.create(os.path.join(root, "dense_raw"), x.dtype, (2, 3), codec="raw") as w:
    w.append(x)
with Dense.create(os.path.join(root, "nested", "dense_zstd"), x.dtype, (2, 3), codec="zstd") as w:
    w.append(x)
seqs = [np.arange(n % 97 + 1, dtype=np.int32) * 3 for n in range(2000)]
d = train_dict(seqs)
with Ragged.create(os.path.join(root, "ragged_dict"), np.int32, 1, codec="zstd_dict",
                   dict_bytes=d) as w:
    w.append(seqs)
print(__import__("loaderx").__version__)
"""


def test_stores_of_loaderx_2x_move_with_their_records(tmp_path):
    old = tmp_path / "old"
    done = subprocess.run([PEER, "-c", WRITE_2X, str(old)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("2."), "LOADERX_PEER_PYTHON must have loaderx 2.x"
    for step, python, args in (("export", PEER, [old, tmp_path / "work"]),
                               ("import", sys.executable, [tmp_path / "work", tmp_path / "new"])):
        done = subprocess.run([python, str(SCRIPT), step, *map(str, args)], capture_output=True,
                              text=True)
        assert done.returncode == 0, done.stdout + done.stderr

    from zrecord import Dense, Ragged

    new = tmp_path / "new"
    x = np.arange(3000 * 6, dtype=np.float32).reshape(3000, 2, 3)
    for rel, codec in (("dense_raw", "raw"), ("nested/dense_zstd", "zstd")):
        with Dense.open(new / rel) as s:
            assert (s.codec, s.dtype, s.item_shape) == (codec, np.float32, (2, 3))
            np.testing.assert_array_equal(s[:], x)
    with Ragged.open(new / "ragged_dict") as s:
        assert s.codec == "zstd_dict" and s.dict_bytes
        got = s[:]
        assert len(got) == 2000
        for n, record in enumerate(got):
            np.testing.assert_array_equal(record, np.arange(n % 97 + 1, dtype=np.int32) * 3)
    assert json.loads((new / "provenance.json").read_text()) == {"source": "test"}
