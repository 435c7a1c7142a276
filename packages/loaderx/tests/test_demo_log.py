"""The demo's progress in a log ([U3] item 7): the README's first command runs
benchmarks/demo.py, whose training progress was a bar redrawn with carriage returns on stdout,
so a log of it (CI, `nox -s demo > log`) held one line of every redraw, about 1,000
characters. It now goes through zrecord's progress_bar, as the converter's and the writers'
do: plain lines, each ended by a newline, where the output is not a terminal."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

# The demo's training loop on a small store, as demo.py runs it (its data step needs
# scikit-learn, which this session does not install; the loop is what draws progress).
TRAIN = """
import os, sys, tempfile
import numpy as np
sys.path.insert(0, sys.argv[1])
import demo
from loaderx.dataloader import DataLoader
from loaderx.sampler import Sampler
from loaderx.zrecord import Dense
with tempfile.TemporaryDirectory() as tmp:
    rng = np.random.default_rng(0)
    with Dense.create(os.path.join(tmp, "image"), np.uint8, (8, 8), codec="raw") as w:
        w.append(rng.integers(0, 17, (256, 8, 8), dtype=np.uint8))
    with Dense.create(os.path.join(tmp, "label"), np.int64, (), codec="raw") as w:
        w.append(rng.integers(0, 10, 256))
    streams = {k: Dense.open(os.path.join(tmp, k)) for k in ("image", "label")}
    with DataLoader(streams, Sampler(256, 32, Sampler.Mode.CYCLIC, seed=1),
                    transform=demo.to_features, workers=2, prefetch=4) as loader:
        demo.train(loader, 300, np.zeros((64, 10), np.float32), np.zeros(10, np.float32), "run A")
    for s in streams.values():
        s.close()
"""


def test_demo_training_progress_in_a_log_is_short_lines(tmp_path):
    out, err = tmp_path / "stdout.log", tmp_path / "stderr.log"
    with out.open("w") as stdout, err.open("w") as stderr:
        subprocess.run([sys.executable, "-c", TRAIN, str(ROOT / "benchmarks")], stdout=stdout,
                       stderr=stderr, check=True, timeout=120)
    log = out.read_text() + err.read_text()
    assert "\r" not in log, log[:300]
    assert log.endswith("\n")
    assert max(len(line) for line in log.splitlines()) < 120, log[:300]
    # The last line of the progress says that all steps are done.
    assert "run A: 300/300 steps (100%) done in" in err.read_text()
