"""The main job, end to end: real data -> zrecord stores -> DataLoader training -> resume.

Data: scikit-learn's bundled handwritten digits (1,797 real 8x8 scans from the UCI set), so the
demo needs no network. It builds a Hugging Face DatasetDict from them and converts it with
loaderx.converter (an image store and a label store per split, zstd), trains a
softmax classifier in NumPy from a loaderx DataLoader, then proves exact resume: a run stopped
at a checkpoint and resumed from the saved loader state ends with bit-identical weights to the
uninterrupted run. It prints accuracy, throughput and where the time went.

Usage: python benchmarks/demo.py [--steps N] [--batch B] [--checkpoint K] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from typing import Any

import datasets
import numpy as np

from loaderx.converter import convert
from loaderx.dataloader import DataLoader
from loaderx.sampler import Sampler
from loaderx.zrecord import Dense
from zrecord.console import progress_bar


def to_features(batch: dict) -> tuple[np.ndarray, np.ndarray]:
    """The collate step, run on loader threads: uint8 8x8 images -> float features."""
    x = batch["image"].reshape(len(batch["image"]), 64).astype(np.float32) / 16.0
    return x, batch["label"]


def train(loader: DataLoader, steps: int, w: np.ndarray, b: np.ndarray,
          label: str) -> tuple[np.ndarray, np.ndarray]:
    """`steps` steps of softmax regression from `loader`; the new weights. Progress goes to
    stderr through zrecord's progress_bar, as the converter's does: a bar redrawn in place on
    a terminal, a few plain lines in a log (a redrawn bar there is one line of every redraw)."""
    loss = float("nan")
    with progress_bar(True, steps, label, unit="steps") as advance:
        for _ in range(steps):
            x, y = next(loader)
            logits = x @ w + b
            logits -= logits.max(axis=1, keepdims=True)
            p = np.exp(logits)
            p /= p.sum(axis=1, keepdims=True)
            loss = float(-np.log(p[np.arange(len(y)), y] + 1e-9).mean())
            p[np.arange(len(y)), y] -= 1.0
            w = w - 0.5 * (x.T @ p) / len(y)
            b = b - 0.5 * p.mean(axis=0)
            advance(1)
    print(f"{label}: loss {loss:.3f} after {steps} steps")
    return w, b


def digits_dataset() -> datasets.DatasetDict:
    """scikit-learn's 1,797 handwritten digits (8x8, values 0..16) as a Hugging Face
    DatasetDict of a train and a test split, to be converted like any Hub dataset."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = digits.images.astype(np.uint8)          # (1797, 8, 8), values 0..16
    labels = digits.target.astype(np.int64)          # (1797,)
    order = np.random.default_rng(0).permutation(len(images))
    splits = {"test": order[:300], "train": order[300:]}
    features = datasets.Features({"image": datasets.Array2D((8, 8), "uint8"),
                                  "label": datasets.ClassLabel(names=[str(d) for d in range(10)])})
    return datasets.DatasetDict({
        split: datasets.Dataset.from_dict({"image": images[ids], "label": labels[ids]},
                                          features=features)
        for split, ids in splits.items()})


def train_twice(streams: dict[str, Dense], args: argparse.Namespace) -> dict[str, Any]:
    """Run A trains `args.steps` steps uninterrupted; run B stops at the checkpoint, saves the
    loader's state as JSON and resumes in a new loader. Both runs' weights, run A's time and
    loader statistics, and the saved state."""
    n = len(streams["image"])

    def make_loader(state: dict | None = None) -> DataLoader:
        sampler = Sampler(n, args.batch, Sampler.Mode.CYCLIC, seed=42)
        return DataLoader(streams, sampler, transform=to_features, workers=2, prefetch=4,
                          state=state)

    zeros = (np.zeros((64, 10), np.float32), np.zeros(10, np.float32))
    t_a = time.perf_counter()
    with make_loader() as loader:
        w_a, b_a = train(loader, args.steps, *zeros, "run A")
        stats = loader.stats()
    seconds_a = time.perf_counter() - t_a
    with make_loader() as loader:
        w_b, b_b = train(loader, args.checkpoint, *zeros, "run B to the checkpoint")
        saved = json.dumps(loader.state_dict())
    with make_loader(json.loads(saved)) as loader:
        w_b, b_b = train(loader, args.steps - args.checkpoint, w_b, b_b, "run B resumed")
    return {"a": (w_a, b_a), "b": (w_b, b_b), "seconds_a": seconds_a, "stats": stats,
            "saved": saved}


def test_accuracy(root: str, weights: np.ndarray, bias: np.ndarray) -> float:
    """The share of the test split that the linear model classifies right."""
    with Dense.open(os.path.join(root, "test", "image")) as xs, \
            Dense.open(os.path.join(root, "test", "label")) as ys:
        xt = xs[:].reshape(len(xs), 64).astype(np.float32) / 16.0
        return float(((xt @ weights + bias).argmax(axis=1) == ys[:]).mean())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--checkpoint", type=int, default=150, help="step at which run B stops")
    ap.add_argument("--out", default=None, help="folder for the stores (default: a temp dir)")
    args = ap.parse_args(argv)
    dataset = digits_dataset()
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(args.out or tmp, "digits")
        t0 = time.perf_counter()
        convert(dataset, root, codec="zstd")
        print(f"converted {sum(len(d) for d in dataset.values())} records into 4 stores under "
              f"{root} in {time.perf_counter() - t0:.3f} s")
        streams = {"image": Dense.open(os.path.join(root, "train", "image")),
                   "label": Dense.open(os.path.join(root, "train", "label"))}
        runs = train_twice(streams, args)
        (w_a, b_a), (w_b, b_b) = runs["a"], runs["b"]
        identical = np.array_equal(w_a, w_b) and np.array_equal(b_a, b_b)
        print(f"checkpoint at step {args.checkpoint}: {runs['saved']}")
        print(f"resumed run == uninterrupted run: {identical} (bit-identical weights)")
        acc = test_accuracy(root, w_a, b_a)
        for s in streams.values():
            s.close()
    stats, seconds_a = runs["stats"], runs["seconds_a"]
    rate = args.steps / seconds_a
    print(f"test accuracy {acc:.3f} after {args.steps} steps of batch {args.batch}")
    print(f"throughput (run A): {rate:,.0f} steps/s, {rate * args.batch:,.0f} records/s")
    print(f"where the time went: gather {stats['gather_s']:.3f} s and collate "
          f"{stats['transform_s']:.3f} s on loader threads; the training loop waited "
          f"{stats['consumer_wait_s']:.3f} s for batches out of {seconds_a:.3f} s")
    if not identical:
        print("ERROR: the resumed run differs from the uninterrupted one", file=sys.stderr)
        return 1
    if acc < 0.85:
        print(f"ERROR: accuracy {acc:.3f} is lower than expected (>= 0.85)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
