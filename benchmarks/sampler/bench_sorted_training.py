"""Training where order matters ([O3] point 2, second part): Fashion-MNIST written sorted by
class, a small classifier trained for a fixed number of steps under each order, test accuracy.

The training set (60,000 images of 28x28, 784 bytes each) is written to a zrecord Dense store
sorted by class, as a dataset often is (one class after another); the loaderx DataLoader
reads it under each order, batch 256, for `--passes` passes (234 steps each), and a
multilayer perceptron (784-256-10, ReLU, Adam at 1e-3, inputs scaled to [0, 1]) trains on the
batches. Test accuracy on the 10,000 test images, for `--seeds` seeds (the order's seed and
the model's initialisation), mean and range; beside it the order's batch skew (the mean total
variation distance between a batch's class histogram and the dataset's: 0.07 for a uniform
shuffle, 0.9 for the sorted order), computed as bench_shuffle_quality.py computes it.

Orders: the sorted order itself (SEQUENTIAL), a uniform shuffle (CYCLIC), the
locality-aware shuffle (BLOCKS) at the documented default (8 MiB blocks, a window of 8
blocks) and at smaller blocks and windows, and, with --mds-python, MosaicML Streaming 0.13.0's
`py1e` at the same block size and window, with --litdata-python LitData 0.2.76's default order
(its chunk = one block) (bench_shuffle_quality.py's way of running them).

Data: the Debian package dataset-fashion-mnist (/usr/share/datasets/fashion-mnist; `apt-get
install dataset-fashion-mnist`). Needs torch.

Usage: python benchmarks/sampler/bench_sorted_training.py [--passes 2] [--seeds 3]
       [--mds-python PY] [--litdata-python PY] [--json OUT]
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_shuffle_quality import label_skew, litdata_order, mds_order  # noqa: E402

FASHION = Path("/usr/share/datasets/fashion-mnist")
BATCH = 256
RECORD_BYTES = 784


def idx(path: Path) -> np.ndarray:
    """An IDX file (the MNIST format): a magic whose last byte is the rank, the sizes, data."""
    raw = gzip.decompress(path.read_bytes())
    rank = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(rank))
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * rank).reshape(shape)


class OrderSampler:
    """A BatchSampler over a fixed order (MDS's): batch k is order[k*BATCH:(k+1)*BATCH]."""

    def __init__(self, order: np.ndarray) -> None:
        self.order, self.step = order.astype(np.uint64), 0

    def next(self) -> np.ndarray:
        start = self.step * BATCH
        if start + BATCH > len(self.order):
            raise StopIteration
        self.step += 1
        return self.order[start:start + BATCH]


def train(folder: str, sampler: Any, seed: int, test: tuple[np.ndarray, np.ndarray]) -> tuple[float, list[int]]:
    """Train the MLP on every batch the sampler gives; its test accuracy and the batches'
    labels."""
    import torch

    from loaderx.dataloader import DataLoader
    from zrecord import Dense

    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    seen: list[int] = []
    with Dense.open(f"{folder}/image") as image, Dense.open(f"{folder}/label") as label, \
            DataLoader({"image": image, "label": label}, sampler, workers=2) as loader:
        for batch in loader:
            x = torch.from_numpy(batch["image"].astype(np.float32) / 255.0)
            y = torch.from_numpy(batch["label"])
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            seen.extend(batch["label"].tolist())
    with torch.no_grad():
        pred = model(torch.from_numpy(test[0].reshape(-1, 784).astype(np.float32) / 255.0)).argmax(1)
    return float((pred.numpy() == test[1]).mean()), seen


def orders(args: argparse.Namespace, seed: int) -> list[tuple[str, dict[str, Any], Any]]:
    """(name, settings, sampler) of every order for `seed`."""
    from loaderx.sampler import Sampler

    out: list[tuple[str, dict[str, Any], Any]] = [
        ("sorted (no shuffle)", {}, Sampler(60_000, BATCH, "sequential", seed, passes=args.passes)),
        ("uniform (CYCLIC)", {}, Sampler(60_000, BATCH, "cyclic", seed, passes=args.passes))]
    for block_bytes, window in ((8 << 20, 8), (1 << 20, 8), (256 << 10, 8), (256 << 10, 1)):
        r = block_bytes // RECORD_BYTES
        name = "BLOCKS, the default" if (block_bytes, window) == (8 << 20, 8) else "BLOCKS"
        out.append((name, {"block_kib": block_bytes >> 10, "window_blocks": window},
                    Sampler(60_000, BATCH, "blocks", seed, passes=args.passes, block_records=r,
                            window_blocks=window)))
    if args.mds_python:
        for block_bytes, window in ((1 << 20, 8), (256 << 10, 8)):
            r = block_bytes // RECORD_BYTES
            order = np.concatenate([mds_order(args.mds_python, "py1e", r, window * r, seed * 100 + p)
                                    for p in range(args.passes)])
            out.append(("MDS py1e", {"block_kib": block_bytes >> 10, "window_blocks": window},
                        OrderSampler(order)))
    if args.litdata_python:
        for block_bytes in (1 << 20, 256 << 10):
            r = block_bytes // RECORD_BYTES
            order = np.concatenate([litdata_order(args.litdata_python, r, seed * 100 + p)
                                    for p in range(args.passes)])
            out.append(("LitData FullShuffle", {"block_kib": block_bytes >> 10, "window_blocks": 1},
                        OrderSampler(order)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--mds-python", default=None)
    ap.add_argument("--litdata-python", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    from zrecord import Dense

    images, labels = idx(FASHION / "train-images-idx3-ubyte.gz"), idx(FASHION / "train-labels-idx1-ubyte.gz")
    test = (idx(FASHION / "t10k-images-idx3-ubyte.gz"), idx(FASHION / "t10k-labels-idx1-ubyte.gz").astype(np.int64))
    by_class = np.argsort(labels, kind="stable")
    results: dict[tuple[str, str], dict[str, Any]] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        with Dense.create(f"{folder}/image", np.uint8, (784,), codec="raw") as w:
            w.append(images.reshape(-1, 784)[by_class])
        with Dense.create(f"{folder}/label", np.int64, (), codec="raw") as w:
            w.append(labels[by_class].astype(np.int64))
        for seed in range(args.seeds):
            for name, settings, sampler in orders(args, seed):
                accuracy, seen = train(folder, sampler, seed, test)
                key = (name, json.dumps(settings, sort_keys=True))
                row = results.setdefault(key, {"order": name, **settings, "accuracy": [], "skew": []})
                row["accuracy"].append(accuracy)
                # label_skew takes record ids of a class-sorted store: 6,000 per class.
                ids = np.asarray(seen) * 6000
                row["skew"].append(label_skew(ids, BATCH))
                print(f"seed {seed} {name:<22} {settings}  accuracy {accuracy:.4f}", file=sys.stderr, flush=True)
    rows = list(results.values())
    uniform = statistics.mean(next(r for r in rows if r["order"].startswith("uniform"))["accuracy"])
    print("| order | block | window | batch skew | test accuracy, mean [range] | vs uniform (points) |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        acc = r["accuracy"]
        r["mean"], r["vs_uniform_points"] = statistics.mean(acc), 100 * (statistics.mean(acc) - uniform)
        block = f"{r['block_kib']:,} KiB" if "block_kib" in r else "-"
        print(f"| {r['order']} | {block} | {r.get('window_blocks', '-')} | {statistics.mean(r['skew']):.3f} | "
              f"{100 * r['mean']:.2f}% [{100 * min(acc):.2f}-{100 * max(acc):.2f}] | {r['vs_uniform_points']:+.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"passes": args.passes, "seeds": args.seeds, "batch": BATCH,
                                               "seconds": time.perf_counter() - started, "rows": rows},
                                              indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
