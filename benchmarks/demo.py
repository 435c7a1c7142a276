"""The main job, end to end: real data -> zrecord stores -> training loop -> throughput.

Data: scikit-learn's bundled handwritten digits (1,797 real 8x8 scans from the UCI set), so the
demo needs no network. It writes one Dense store for the images and one for the labels, then
trains a softmax classifier in NumPy by gathering random batches from the stores, and prints
accuracy, throughput and where the time went.

Usage: python benchmarks/demo.py [--steps N] [--batch B] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

from zrecord import Dense


def progress(label: str, done: int, total: int, extra: str = "") -> None:
    width = 30
    filled = width * done // max(1, total)
    sys.stdout.write(f"\r{label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} {extra}")
    if done >= total:
        sys.stdout.write("\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--out", default=None, help="folder for the stores (default: a temp dir)")
    args = ap.parse_args(argv)

    from sklearn.datasets import load_digits

    digits = load_digits()
    images = digits.images.astype(np.uint8)          # (1797, 8, 8), values 0..16
    labels = digits.target.astype(np.int64)          # (1797,)
    rng = np.random.default_rng(0)
    order = rng.permutation(len(images))
    test_ids, train_ids = order[:300], order[300:]

    with tempfile.TemporaryDirectory() as tmp:
        root = args.out or tmp
        t0 = time.perf_counter()
        for split, ids in (("train", train_ids), ("test", test_ids)):
            with Dense.create(os.path.join(root, split, "image"), np.uint8, (8, 8),
                              codec="raw") as w:
                w.append(images[ids])
            with Dense.create(os.path.join(root, split, "label"), np.int64, (),
                              codec="raw") as w:
                w.append(labels[ids])
        print(f"wrote 4 stores under {root} in {time.perf_counter() - t0:.3f} s "
              f"({len(train_ids)} train / {len(test_ids)} test digits)")

        x_store = Dense.open(os.path.join(root, "train", "image"))
        y_store = Dense.open(os.path.join(root, "train", "label"))
        n = len(x_store)
        w = np.zeros((64, 10), np.float32)
        b = np.zeros(10, np.float32)
        gather_s = compute_s = 0.0
        t_start = time.perf_counter()
        for step in range(1, args.steps + 1):
            t = time.perf_counter()
            idx = rng.integers(0, n, args.batch)
            x = x_store[idx].reshape(args.batch, 64).astype(np.float32) / 16.0
            y = y_store[idx]
            t2 = time.perf_counter()
            logits = x @ w + b
            logits -= logits.max(axis=1, keepdims=True)
            p = np.exp(logits)
            p /= p.sum(axis=1, keepdims=True)
            loss = -np.log(p[np.arange(args.batch), y] + 1e-9).mean()
            p[np.arange(args.batch), y] -= 1.0
            w -= 0.5 * (x.T @ p) / args.batch
            b -= 0.5 * p.mean(axis=0)
            t3 = time.perf_counter()
            gather_s += t2 - t
            compute_s += t3 - t2
            if step % 50 == 0 or step == args.steps:
                progress("training", step, args.steps, f"loss {loss:.3f}")
        total = time.perf_counter() - t_start

        with Dense.open(os.path.join(root, "test", "image")) as xs, \
                Dense.open(os.path.join(root, "test", "label")) as ys:
            xt = xs[:].reshape(len(xs), 64).astype(np.float32) / 16.0
            acc = float(((xt @ w + b).argmax(axis=1) == ys[:]).mean())
        x_store.close()
        y_store.close()

    print(f"test accuracy {acc:.3f} after {args.steps} steps of batch {args.batch}")
    print(f"throughput: {args.steps / total:,.0f} steps/s, {args.steps * args.batch / total:,.0f} "
          f"records/s")
    print(f"time: gather {gather_s:.3f} s ({100 * gather_s / total:.0f}%), "
          f"compute {compute_s:.3f} s ({100 * compute_s / total:.0f}%), total {total:.3f} s")
    if acc < 0.85:
        print("accuracy is lower than expected (>= 0.85)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
