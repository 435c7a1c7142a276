"""What the documentation's code blocks take for granted, for docs/tools/run_snippets.py.

The pages import these in hidden ``<!-- snippet-setup`` comments, so that every block runs
as printed. Nothing here is shown to readers; each helper says what it stands in for.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# True once offline_hub() has replaced huggingface(): run_snippets.py checks that the home
# page's first example ran before it.
HUB_STAND_IN = False


def digits(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """`n` 28x28 uint8 images of the digits 0-9 drawn in white on black, and their labels:
    a stand-in for MNIST with MNIST's shapes, dtypes and compressibility."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, size=n, dtype=np.int64)
    images = np.zeros((n, 28, 28), dtype=np.uint8)
    for i, label in enumerate(labels):
        canvas = Image.new("L", (28, 28))
        x, y = (int(v) for v in rng.integers(6, 14, size=2))
        ImageDraw.Draw(canvas).text((x, y), str(label), fill=int(rng.integers(160, 256)))
        images[i] = np.asarray(canvas)
    return images, labels


def mnist_dataset(train: int = 1000, test: int = 200) -> Any:
    """A ``datasets.DatasetDict`` with the features of ``ylecun/mnist`` (``image``: Image,
    ``label``: ClassLabel of the ten digits), built locally from :func:`digits`."""
    import datasets
    from PIL import Image

    features = datasets.Features({
        "image": datasets.Image(),
        "label": datasets.ClassLabel(names=[str(d) for d in range(10)]),
    })
    splits = {}
    for seed, (name, n) in enumerate((("train", train), ("test", test))):
        images, labels = digits(n, seed)
        splits[name] = datasets.Dataset.from_dict(
            {"image": [Image.fromarray(im) for im in images], "label": labels.tolist()},
            features=features)
    return datasets.DatasetDict(splits)


def offline_hub() -> None:
    """Make ``huggingface(repo_id, ...)`` return :func:`mnist_dataset` instead of downloading:
    the pages' examples convert ``ylecun/mnist``, and the documentation is built offline."""
    import loaderx_converter

    def huggingface(repo_id: str, **kwargs: Any) -> Any:
        if repo_id != "ylecun/mnist":
            raise AssertionError(f"the documentation's offline Hub has only ylecun/mnist, "
                                 f"not {repo_id!r}")
        return mnist_dataset()

    global HUB_STAND_IN
    HUB_STAND_IN = True
    loaderx_converter.huggingface = huggingface
    try:
        import loaderx.converter
    except ImportError:
        return
    loaderx.converter.huggingface = huggingface  # type: ignore[attr-defined]
