"""Batch transforms that run on the DataLoader's worker threads.

``DecodeImages`` turns a Ragged stream of encoded image files (what ``loaderx-convert
--images encoded`` writes: one JPEG, PNG, WebP, ... file per uint8 record) into one Dense
batch of a fixed shape, ready for a model::

    from loaderx.transforms import DecodeImages

    decode = DecodeImages("image", size=(224, 224))            # -> (B, 224, 224, 3) uint8
    loader = DataLoader(streams, sampler, transform=decode, workers=4, prefetch=9)

Invariants:
- Threads, not processes: Pillow releases the GIL while it decodes, converts and resamples, so
  ``workers`` loader threads decode ``workers`` batches at once in one address space. The
  transform keeps no state between calls; every call allocates its own output.
- Deterministic: the same record gives the same pixels on every call, whatever thread or
  step; there is no random crop here (random augmentation must be a function of (seed, step,
  rank) to resume exactly, which a batch transform cannot see).
- What a JPEG decodes to at full size is never computed when a smaller one is asked for:
  Pillow's draft mode lets libjpeg decode at 1/2, 1/4 or 1/8 scale, never below the size
  the resize needs.
- Pillow is imported when a ``DecodeImages`` is made, not when this module is: without it the
  error names what to install, the ``images`` extra's ``pip install 'pillow>=10'``.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["DecodeImages"]

_ORIENTATION_TAG = 0x0112
_RESAMPLE = ("nearest", "bilinear", "bicubic", "lanczos", "box", "hamming")


def _pillow() -> Any:
    """The PIL package, with Image and ImageOps imported."""
    try:
        import PIL.Image
        import PIL.ImageOps
    except ImportError as exc:
        raise ImportError("loaderx.transforms.DecodeImages needs Pillow (loaderx's images "
                          "extra): pip install 'pillow>=10'") from exc
    return PIL


class DecodeImages:
    """Decode a batch of encoded image files into one ``uint8`` array of a fixed shape.

    `key` names the stream holding the files (a list of 1-D uint8 arrays, as a Ragged store
    gives, or of ``bytes``). `size` is the output ``(height, width)``. Each image is turned by
    its EXIF orientation (as ``datasets`` does; ``exif=False`` skips it), converted to `mode`
    (a Pillow mode, e.g. ``"RGB"`` or ``"L"``; RGBA drops its alpha as ``Image.convert`` does),
    and resampled to `size`:

    - ``fit="cover"`` (default): scaled to cover `size`, keeping its aspect ratio, and the
      centre cut out, in one resampling (Pillow's ``resize(..., box=...)``);
    - ``fit="stretch"``: scaled to exactly `size`.

    `resample` is Pillow's filter by name (``"bilinear"`` by default). JPEG files are decoded
    at the smallest DCT scale that still covers what the resize needs (``draft=True``).
    `layout` is ``"HWC"`` (``(B, H, W, C)``) or ``"CHW"`` (``(B, C, H, W)``); the channel
    axis is always there (``C = 1`` for ``"L"``). The result replaces `key` in the batch (or
    goes to `out_key`); other streams pass through. A file Pillow cannot decode raises
    ``ValueError`` naming its position in the batch.
    """

    def __init__(self, key: str = "image", size: Sequence[int] = (224, 224), *,
                 mode: str = "RGB", fit: str = "cover", resample: str = "bilinear",
                 layout: str = "HWC", draft: bool = True, exif: bool = True,
                 out_key: str | None = None) -> None:
        self._pil = _pillow()
        image = self._pil.Image
        if len(size) != 2 or not all(isinstance(s, (int, np.integer)) and s > 0 for s in size):
            raise ValueError(f"DecodeImages size must be (height, width), two positive ints; "
                             f"got {size!r}")
        if mode not in image.MODES:
            raise ValueError(f"DecodeImages mode must be a Pillow mode (e.g. 'RGB', 'L'); "
                             f"got {mode!r}")
        if fit not in ("cover", "stretch"):
            raise ValueError(f"DecodeImages fit must be 'cover' or 'stretch'; got {fit!r}")
        if resample not in _RESAMPLE:
            raise ValueError(f"DecodeImages resample must be one of {', '.join(_RESAMPLE)}; "
                             f"got {resample!r}")
        if layout not in ("HWC", "CHW"):
            raise ValueError(f"DecodeImages layout must be 'HWC' or 'CHW'; got {layout!r}")
        self.key = key
        self.size = (int(size[0]), int(size[1]))
        self.mode = mode
        self.fit = fit
        self.resample = resample
        self.layout = layout
        self.draft = draft
        self.exif = exif
        self.out_key = key if out_key is None else out_key
        self._filter = getattr(image.Resampling, resample.upper())
        probe = np.asarray(image.new(mode, (1, 1)))
        self.channels = 1 if probe.ndim == 2 else int(probe.shape[2])
        self.dtype = probe.dtype

    def __repr__(self) -> str:
        return (f"DecodeImages({self.key!r}, size={self.size}, mode={self.mode!r}, "
                f"fit={self.fit!r}, layout={self.layout!r})")

    def __call__(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        """Decode ``batch[key]`` into one array; return the batch with it in place."""
        files = batch[self.key]
        height, width = self.size
        out = np.empty((len(files), height, width, self.channels), dtype=self.dtype)
        for i, data in enumerate(files):
            try:
                pixels = self.decode_one(data)
            except Exception as exc:  # noqa: BLE001 - Pillow raises many kinds for a bad file
                raise ValueError(f"DecodeImages: record {i} of the batch ({self.key!r}, "
                                 f"{len(data)} bytes) could not be decoded: {exc}") from exc
            out[i] = pixels.reshape(height, width, self.channels)
        result = dict(batch)
        result[self.out_key] = (np.ascontiguousarray(out.transpose(0, 3, 1, 2))
                                if self.layout == "CHW" else out)
        return result

    def decode_one(self, data: Any) -> np.ndarray:
        """One file's pixels, ``(height, width[, channels])`` as ``np.asarray`` gives them."""
        pil = self._pil
        if not isinstance(data, (bytes, bytearray)):
            data = np.ascontiguousarray(data).view(np.uint8).data  # a memoryview, no copy
        image = pil.Image.open(io.BytesIO(data))
        turned = False
        if self.exif:
            orientation = image.getexif().get(_ORIENTATION_TAG)
            turned = orientation in (5, 6, 7, 8)
        else:
            orientation = None
        width, height = image.size
        if turned:
            width, height = height, width
        box, need = self._region(width, height)
        if self.draft and image.format == "JPEG":
            # Draft sizes are in the file's own orientation.
            image.draft(None, (need[1], need[0]) if turned else need)
        image.load()
        if orientation is not None:
            image = pil.ImageOps.exif_transpose(image)
        if image.mode != self.mode:
            image = image.convert(self.mode)
        w, h = image.size
        if (w, h) != (width, height):  # a draft: the box is in full-size coordinates
            sx, sy = w / width, h / height
            box = (box[0] * sx, box[1] * sy, box[2] * sx, box[3] * sy)
        # Rounding must not put the box a hair outside the image (Pillow refuses that).
        box = (max(0.0, box[0]), max(0.0, box[1]), min(float(w), box[2]), min(float(h), box[3]))
        out_size = (self.size[1], self.size[0])
        return np.asarray(image.resize(out_size, self._filter, box=box))

    def _region(self, width: int, height: int) -> tuple[tuple[float, float, float, float],
                                                      tuple[int, int]]:
        """The part of a (width x height) image that becomes the output, and the size the
        whole image must at least have (decoded) for it: ``(box, (w, h))``."""
        out_h, out_w = self.size
        if self.fit == "stretch":
            return (0.0, 0.0, float(width), float(height)), (out_w, out_h)
        scale = max(out_w / width, out_h / height)
        crop_w, crop_h = out_w / scale, out_h / scale
        left, top = (width - crop_w) / 2, (height - crop_h) / 2
        return ((left, top, left + crop_w, top + crop_h),
                (math.ceil(width * scale), math.ceil(height * scale)))
