"""Build the benchmarks' data from real files that ship in Debian and PyPI packages.

    python benchmarks/prepare_data.py OUT [--parts vision,text,hf] [--n-images N]

Nothing is downloaded: the images, texts and Fashion-MNIST come from installed Debian
packages (benchmarks/README.md lists them; a missing source is skipped with a warning), the
tokenizer from the `blingfire` wheel. OUT receives the files the benchmark scripts read:

  vision_dense.npy            (N, 3, 224, 224) uint8: short side resized to 256 (bilinear),
                              centre crop 224
  vision_ragged_payload.npy   every image as CHW uint8 at native size (long side above
  vision_ragged_index.npz     --max-side box-reduced by an integer factor), concatenated;
                              `shapes` (N, 3) and byte `offsets` (N + 1), int64
  vision_manifest.json        per image: source, file, SHA-256 of the encoded file, size, mode
  tokens.npy, offsets.npy     GPT-2 token ids (int32) of documentation paragraphs, and the
                              record boundaries (int64, N + 1): records of 16..512 tokens
  token_blocks.npy            (M, 512) int32: tokens.npy cut into blocks
  hf/fashion_mnist/           a `datasets` DatasetDict (Image, ClassLabel) saved with
                              save_to_disk: the converter benchmark's source
  hf/photos/                  a `datasets` Dataset of the vision part's images as their
                              original files (Image of bytes, `source` ClassLabel): the
                              photo conversions' and decoding benchmarks' source (needs the
                              vision part, run before it)
  metadata.json               arguments, versions, counts and the SHA-256 of every output

The same installed packages and arguments give the same bytes. The published benchmark
figures were measured on data prepared by an earlier script following the same recipe (1,493
images with 22 sample photographs of scikit-image, scikit-learn and matplotlib, which this
script leaves out; the same 127,633 token records); compare figures of one run with each
other, not with another machine's.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import hashlib
import io
import json
import math
import os
import random
import re
import shutil
import struct
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

IMAGE_EXT = (".jpg", ".jpeg", ".png", ".webp")
# Synthetic test patterns among OpenCV's sample images (calibration boards, text, masks).
OPENCV_SYNTHETIC = ("chessboard", "calib", "pattern", "aruco", "board", "text", "mask",
                    "logo", "gradient", "template", "left0", "right0", "box")


# -- vision -----------------------------------------------------------------------------

def _files(patterns: list[str], exclude: tuple[str, ...] = ()) -> list[str]:
    found = sorted({p for pat in patterns for p in glob.glob(pat, recursive=True)
                    if p.lower().endswith(IMAGE_EXT)})
    return [p for p in found if not any(x in p.lower() for x in exclude)]


def _largest_per_folder(paths: list[str]) -> list[str]:
    """KDE wallpapers ship one picture in many sizes: keep the largest file of each folder."""
    best: dict[str, str] = {}
    for p in paths:
        folder = os.path.dirname(p)
        if folder not in best or os.path.getsize(p) > os.path.getsize(best[folder]):
            best[folder] = p
    return sorted(best.values())


def _rcc_images(path: str) -> list[tuple[str, bytes]]:
    """The image files inside a Qt resource file (.rcc), as (name, encoded bytes).

    The format (Qt's rcc, versions 1-3): a "qres" magic, the version and the offsets of the
    tree, the data and the names; tree nodes of 14 bytes (22 from version 2) name a directory
    (its children's count and first index) or a file (its data offset); file data is a 4-byte
    length and the bytes, zlib-compressed with a 4-byte length prefix when flag 1 is set, a
    zstd frame when flag 4 is set.
    """
    blob = Path(path).read_bytes()
    if blob[:4] != b"qres":
        return []
    version, tree, data, names = struct.unpack(">IIII", blob[4:20])
    node_size = 14 if version == 1 else 22

    def name_of(offset: int) -> str:
        (length,) = struct.unpack(">H", blob[names + offset:names + offset + 2])
        raw = blob[names + offset + 6:names + offset + 6 + 2 * length]
        return raw.decode("utf-16-be")

    out: list[tuple[str, bytes]] = []

    def visit(index: int, prefix: str) -> None:
        at = tree + index * node_size
        name_offset, flags = struct.unpack(">IH", blob[at:at + 6])
        name = prefix + "/" + (name_of(name_offset) if index else "")
        if flags & 2:  # a directory
            count, first = struct.unpack(">II", blob[at + 6:at + 14])
            for child in range(first, first + count):
                visit(child, name.rstrip("/"))
            return
        (offset,) = struct.unpack(">I", blob[at + 10:at + 14])
        (size,) = struct.unpack(">I", blob[data + offset:data + offset + 4])
        payload = blob[data + offset + 4:data + offset + 4 + size]
        if not name.lower().endswith(IMAGE_EXT):
            return
        if flags & 1:
            payload = zlib.decompress(payload[4:])
        elif flags & 4:
            import zstandard
            payload = zstandard.ZstdDecompressor().decompress(payload, max_output_size=1 << 28)
        out.append((name, payload))

    visit(0, "")
    return out


def _candidates() -> dict[str, list[tuple[str, bytes | None]]]:
    """Per source, (file name, encoded bytes or None to read the file)."""
    as_files = {
        "stellarium-nebulae": _files(["/usr/share/stellarium/nebulae/default/*"]),
        "stellarium-landscapes": _files(["/usr/share/stellarium/landscapes/*/*"]),
        "stellarium-textures": _files(["/usr/share/stellarium/textures/*"]),
        "wallpapers": _largest_per_folder(_files(["/usr/share/wallpapers/*/contents/images/*"]))
        + _files(["/usr/share/backgrounds/**/*"]),
        "opencv-samples": _files(["/usr/share/doc/opencv-doc/examples/data/*"], OPENCV_SYNTHETIC),
        "tuxpaint-stamps": _files(["/usr/share/tuxpaint/stamps/**/*"], ("/symbols/",)),
    }
    sources: dict[str, list[tuple[str, bytes | None]]] = {
        name: [(p, None) for p in paths] for name, paths in as_files.items()}
    sources["gcompris"] = [(f"{rcc}:{name}", payload)
                           for rcc in sorted(glob.glob("/usr/share/gcompris-qt/rcc/*.rcc"))
                           for name, payload in _rcc_images(rcc)]
    return sources


def _rgb(image, opaque_only: bool):
    """`image` as RGB, transparency composited onto white; None if `opaque_only` and it is
    not fully opaque."""
    from PIL import Image

    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        if opaque_only and rgba.getchannel("A").getextrema()[0] < 255:
            return None
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return image.convert("RGB")


def _dense_view(image) -> np.ndarray:
    """Short side to 256 (bilinear), centre crop 224 (offsets rounded as torchvision does)."""
    from PIL import Image

    w, h = image.size
    size = (256, int(256 * h / w)) if w <= h else (int(256 * w / h), 256)
    resized = image.resize(size, Image.BILINEAR)
    left = int(round((size[0] - 224) / 2.0))
    top = int(round((size[1] - 224) / 2.0))
    crop = resized.crop((left, top, left + 224, top + 224))
    return np.asarray(crop, dtype=np.uint8).transpose(2, 0, 1)


def _npy_header(length: int) -> bytes:
    """The .npy header of a one-dimensional uint8 array of `length` bytes."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buffer, {"descr": "|u1", "fortran_order": False, "shape": (length,)})
    return buffer.getvalue()


def _image_pool(min_side: int) -> tuple[list, dict[str, int], dict[str, int]]:
    """Every distinct image of the packages at least `min_side` pixels on its short side, as
    (source, name, sha256, payload or None); what was skipped, and the candidates per source."""
    from PIL import Image

    pool, seen, skipped = [], set(), {"small": 0, "transparent": 0, "duplicate": 0,
                                     "unreadable": 0}
    per_source_candidates = {}
    for source, items in _candidates().items():
        per_source_candidates[source] = len(items)
        if not items:
            print(f"warning: no images from {source} (package not installed?)", file=sys.stderr)
        for name, payload in items:
            data = payload if payload is not None else Path(name).read_bytes()
            digest = hashlib.sha256(data).hexdigest()
            if digest in seen:
                skipped["duplicate"] += 1
                continue
            try:
                image = Image.open(io.BytesIO(data))  # reads the header: the size
            except Exception:  # noqa: BLE001 - a file Pillow cannot decode is skipped
                skipped["unreadable"] += 1
                continue
            if min(image.size) < min_side:
                skipped["small"] += 1
                continue
            seen.add(digest)
            pool.append((source, name, digest, payload))  # files are read again when used
    return pool, skipped, per_source_candidates


def vision(out: Path, n_images: int, min_side: int, max_side: int, seed: int) -> dict:
    from PIL import Image

    pool, skipped, per_source_candidates = _image_pool(min_side)
    random.Random(seed).shuffle(pool)
    chosen = pool[:n_images] if n_images else pool
    n = len(chosen)
    dense = np.lib.format.open_memmap(out / "vision_dense.npy", mode="w+", dtype=np.uint8,
                                      shape=(n, 3, 224, 224))
    shapes, offsets, manifest = [], [0], []
    # The payload is written once, straight into its .npy file: the header (of a fixed size,
    # NumPy pads it to 64 bytes) is written last, when the length is known.
    header_size = len(_npy_header(10 ** 15))
    with open(out / "vision_ragged_payload.npy", "wb") as payload:
        payload.write(b"\0" * header_size)
        kept = 0
        for source, name, digest, payload_bytes in chosen:
            data = payload_bytes if payload_bytes is not None else Path(name).read_bytes()
            original = Image.open(io.BytesIO(data))
            rgb = _rgb(original, opaque_only=(source == "gcompris"))
            if rgb is None:
                skipped["transparent"] += 1
                continue
            dense[kept] = _dense_view(rgb)
            factor = math.ceil(max(rgb.size) / max_side) if max_side and max(rgb.size) > max_side else 1
            native = rgb.reduce(factor) if factor > 1 else rgb
            chw = np.ascontiguousarray(np.asarray(native, dtype=np.uint8).transpose(2, 0, 1))
            payload.write(chw.tobytes())
            shapes.append(chw.shape)
            offsets.append(offsets[-1] + chw.nbytes)
            manifest.append({"source": source, "file": name, "sha256": digest,
                             "size": list(original.size), "mode": original.mode,
                             "reduce": factor})
            kept += 1
        header = _npy_header(offsets[-1])
        assert len(header) == header_size
        payload.seek(0)
        payload.write(header)
    dense.flush()
    del dense
    if kept < n:  # transparent gcompris images were dropped: shorten the dense array
        full = np.load(out / "vision_dense.npy", mmap_mode="r")[:kept].copy()
        np.save(out / "vision_dense.npy", full)
    payload_bytes = offsets[-1]
    np.savez(out / "vision_ragged_index.npz", shapes=np.array(shapes, dtype=np.int64),
             offsets=np.array(offsets, dtype=np.int64))
    (out / "vision_manifest.json").write_text(json.dumps(manifest, indent=1))
    per_source: dict[str, int] = {}
    for item in manifest:
        per_source[item["source"]] = per_source.get(item["source"], 0) + 1
    return {"n_images": kept, "per_source": per_source, "candidates_per_source":
            per_source_candidates, "skipped": skipped, "min_side": min_side,
            "max_side": max_side, "ragged_payload_bytes": payload_bytes}


# -- text -------------------------------------------------------------------------------

TEXT_SOURCES = {
    "python-docs": "/usr/share/doc/python3*/html/_sources",
    "linux-docs": "/usr/share/doc/linux-doc-*/html/_sources",
}
_UNDERLINE = re.compile(r"^([=\-~^\"'`#*+_:.])\1{2,}\s*$")


def _paragraphs(text: str) -> list[str]:
    """Blank-line separated paragraphs; heading underlines dropped, whitespace collapsed,
    directives and comments (paragraphs starting with "..") left out."""
    out = []
    for block in re.split(r"\n\s*\n", text):
        lines = [ln for ln in block.splitlines() if not _UNDERLINE.match(ln.strip())]
        para = " ".join(" ".join(lines).split())
        if para and not para.startswith(".."):
            out.append(para)
    return out


def text(out: Path, min_fragment: int, split_at: int) -> dict:
    import blingfire

    model = blingfire.load_model(os.path.join(os.path.dirname(blingfire.__file__), "gpt2.bin"))
    files = []
    for pattern in TEXT_SOURCES.values():
        roots = sorted(glob.glob(pattern))
        if not roots:
            print(f"warning: no documentation at {pattern} (package not installed?)",
                  file=sys.stderr)
            continue
        files += sorted(p for p in glob.glob(os.path.join(roots[-1], "**", "*.txt"),
                                             recursive=True) if "/translations/" not in p)
    records: list[np.ndarray] = []
    carry = np.zeros(0, dtype=np.int32)
    for path in files:
        for para in _paragraphs(Path(path).read_text(errors="replace")):
            ids = np.asarray(blingfire.text_to_ids(model, para, 4 * len(para) + 16, 0, True),
                             dtype=np.int32)
            ids = np.concatenate([carry, ids])
            carry = np.zeros(0, dtype=np.int32)
            while len(ids) > split_at:
                records.append(ids[:split_at])
                ids = ids[split_at:]
            if len(ids) < min_fragment:
                carry = ids  # merged into the next record
            else:
                records.append(ids)
    if len(carry):
        records.append(carry)  # the last record may be shorter
    blingfire.free_model(model)
    tokens = np.concatenate(records)
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in records])]).astype(np.int64)
    np.save(out / "tokens.npy", tokens)
    np.save(out / "offsets.npy", offsets)
    blocks = len(tokens) // 512
    np.save(out / "token_blocks.npy", tokens[:blocks * 512].reshape(blocks, 512))
    return {"files": len(files), "n_tokens": int(len(tokens)), "n_records": len(records),
            "token_blocks": blocks, "tokenizer": "blingfire gpt2.bin (GPT-2 BPE ids)"}


# -- Hugging Face ------------------------------------------------------------------------

FASHION = "/usr/share/datasets/fashion-mnist"
FASHION_NAMES = ["T - shirt / top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                 "Sneaker", "Bag", "Ankle boot"]


def _idx(path: str) -> np.ndarray:
    """An IDX file (the MNIST format): a magic giving the rank, the sizes, then uint8 data."""
    raw = gzip.open(path).read()
    ndim = raw[3]
    shape = struct.unpack(f">{ndim}I", raw[4:4 + 4 * ndim])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def hf(out: Path) -> dict:
    import datasets
    from PIL import Image

    features = datasets.Features({"image": datasets.Image(),
                                  "label": datasets.ClassLabel(names=FASHION_NAMES)})
    splits = {}
    for split, prefix in (("train", "train"), ("test", "t10k")):
        images = _idx(f"{FASHION}/{prefix}-images-idx3-ubyte.gz")
        labels = _idx(f"{FASHION}/{prefix}-labels-idx1-ubyte.gz")
        splits[split] = datasets.Dataset.from_dict(
            {"image": [Image.fromarray(im) for im in images], "label": labels.tolist()},
            features=features)
    dataset = datasets.DatasetDict(splits)
    dataset.save_to_disk(str(out / "hf" / "fashion_mnist"))
    return {"fashion_mnist": {k: len(v) for k, v in splits.items()},
            "photos": hf_photos(out)}


def hf_photos(out: Path) -> int | None:
    """hf/photos: the vision part's images as their original encoded files (an Image column
    of bytes, a ClassLabel of their sources), in the order of vision_manifest.json, each
    checked against the SHA-256 there; None (with a warning) without that manifest."""
    import datasets

    manifest_path = out / "vision_manifest.json"
    if not manifest_path.exists():
        print("hf: no vision_manifest.json (run the vision part first): hf/photos skipped",
              file=sys.stderr)
        return None
    manifest = json.loads(manifest_path.read_text())
    payloads = {name: payload for items in _candidates().values() for name, payload in items
                if payload is not None}
    sources = sorted({item["source"] for item in manifest})

    def rows() -> Any:
        for item in manifest:
            name = item["file"]
            data = payloads[name] if name in payloads else Path(name).read_bytes()
            if hashlib.sha256(data).hexdigest() != item["sha256"]:
                raise SystemExit(f"hf: {name} is not the file the vision part read (SHA-256 "
                                 "differs): run both parts from the same installed packages")
            yield {"image": {"bytes": data, "path": None}, "source": item["source"]}

    features = datasets.Features({"image": datasets.Image(),
                                  "source": datasets.ClassLabel(names=sources)})
    # Built in a cache of its own, removed once saved (not in ~/.cache/huggingface).
    cache = out / "hf" / ".photos-cache"
    try:
        photos = datasets.Dataset.from_generator(rows, features=features, cache_dir=str(cache))
        photos.save_to_disk(str(out / "hf" / "photos"))
        return int(photos.num_rows)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


# -- main -------------------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="a new or empty folder")
    parser.add_argument("--parts", default="vision,text,hf")
    parser.add_argument("--n-images", type=int, default=0, help="at most this many (0: all)")
    parser.add_argument("--min-side", type=int, default=128, help="skip smaller images")
    parser.add_argument("--max-side", type=int, default=2048,
                        help="Ragged: box-reduce longer images by an integer factor (0: never)")
    parser.add_argument("--seed", type=int, default=0, help="order of the image pool")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    parts = set(args.parts.split(","))
    meta: dict = {"argv": sys.argv[1:], "python": sys.version.split()[0],
                  "numpy": np.__version__}
    started = time.perf_counter()
    if "vision" in parts:
        meta["vision"] = vision(args.out, args.n_images, args.min_side, args.max_side, args.seed)
        print(f"vision: {meta['vision']['n_images']} images")
    if "text" in parts:
        meta["text"] = text(args.out, min_fragment=16, split_at=512)
        print(f"text: {meta['text']['n_records']} records, {meta['text']['n_tokens']} tokens")
    if "hf" in parts:
        meta["hf"] = hf(args.out)
        print(f"hf: {meta['hf']}")
    meta["outputs"] = {}
    for path in sorted(p for p in args.out.rglob("*") if p.is_file() and p.name != "metadata.json"):
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        meta["outputs"][str(path.relative_to(args.out))] = {"bytes": path.stat().st_size,
                                                           "sha256": h.hexdigest()}
    meta["seconds"] = round(time.perf_counter() - started, 1)
    (args.out / "metadata.json").write_text(json.dumps(meta, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
