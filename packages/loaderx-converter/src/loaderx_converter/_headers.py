"""What an encoded file is, read from its first bytes, without decoding it.

Two questions are answered here, both without Pillow on the common path:

- ``sniff(data)``: the container format of an image or audio file ("JPEG", "PNG", "WEBP",
  "WAV", "FLAC", ...), from its signature; recorded in the provenance of encoded columns.
- ``image_header(data)``: the size, the Pillow mode and the EXIF orientation that decoding
  the image with Pillow (as ``datasets`` does) would give, for PNG, JPEG and WebP files.

Invariants:
- ``image_header`` answers only when the answer is certain; anything it does not fully
  understand (another format, an animation, an EXIF or XMP block it would have to interpret
  beyond one plain orientation entry, a truncated header, a size Pillow would refuse as a
  decompression bomb) returns None, and the caller asks Pillow itself. So a file parsed here
  and the same file opened by Pillow agree; tests check the mode table against Pillow for
  every PNG colour type and bit depth.
- Nothing here allocates more than the header it reads: every offset and length is checked
  against the buffer's size before use.
"""

from __future__ import annotations

import re
import struct
import zlib
from dataclasses import dataclass

# Pillow refuses images above twice its MAX_IMAGE_PIXELS and warns above it; such files go to
# Pillow, which raises or warns exactly as it would when decoding.
_BOMB_PIXELS_DEFAULT = 89_478_485

# PNG (bit depth, colour type) -> the mode Pillow opens it in (PngImagePlugin); 16-bit grey
# with alpha opens as RGBA there.
PNG_MODES: dict[tuple[int, int], str] = {
    (1, 0): "1", (2, 0): "L", (4, 0): "L", (8, 0): "L", (16, 0): "I;16",
    (8, 2): "RGB", (16, 2): "RGB",
    (1, 3): "P", (2, 3): "P", (4, 3): "P", (8, 3): "P",
    (8, 4): "LA", (16, 4): "RGBA",
    (8, 6): "RGBA", (16, 6): "RGBA",
}
# PNG chunks that make Pillow's EXIF (and so the orientation datasets applies) differ from
# "none" in ways not read here: EXIF itself, a text chunk Pillow reads as EXIF, and animation.
# Uncompressed XMP (iTXt) is read here as Pillow reads it.
_PNG_TEXT = (b"tEXt", b"zTXt", b"iTXt")
# 8-bit PNG colour types whose pixel stream Pillow decodes with its "zip" decoder in one raw
# mode (PngImagePlugin's tile): grey, truecolour, palette, grey + alpha, truecolour + alpha.
_PNG_ZIP_RAWMODES = {0: "L", 2: "RGB", 3: "P", 4: "LA", 6: "RGBA"}
_PNG_XMP_KEYWORD = b"XML:com.adobe.xmp"
_JPEG_XMP_PREFIX = b"http://ns.adobe.com/xap/1.0/\x00"
# Where Pillow finds an orientation in XMP when EXIF has none (Image.getexif).
_XMP_ORIENTATION = re.compile(rb'tiff:Orientation(="|>)([0-9])')
# JPEG start-of-frame markers (not DHT 0xC4, JPG 0xC8, DAC 0xCC).
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_JPEG_MODES = {1: "L", 3: "RGB", 4: "CMYK"}
_ORIENTATION_TAG = 0x0112


@dataclass(frozen=True)
class ImageHeader:
    """What decoding would give: `width` x `height` before the EXIF turn, Pillow's `mode`,
    and the EXIF `orientation` (None when the file has none).

    For a PNG that Pillow's own zlib decoder can take as it is (8 bits per sample, not
    interlaced, every chunk before the pixels with a good checksum), `zip_rawmode` is the raw
    mode Pillow decodes it with and `idat` the compressed pixel stream (its IDAT chunks, in
    order): ``PIL.Image.frombytes(mode, size, idat, "zip", zip_rawmode)`` then gives exactly
    the pixels ``PIL.Image.open`` would, without the per-file work of opening.
    """

    format: str
    width: int
    height: int
    mode: str
    orientation: int | None
    zip_rawmode: str | None = None
    idat: bytes | memoryview = b""


def _bytes_view(data: bytes | memoryview) -> memoryview:
    """`data` as unsigned bytes (a buffer exported as signed chars reads 0xFF as -1)."""
    view = memoryview(data)
    return view if view.format == "B" else view.cast("B")


def sniff(data: bytes | memoryview) -> str | None:
    """The format of an encoded image or audio file from its signature, or None."""
    head = bytes(data[:16])
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "PNG"
    if head.startswith(b"\xff\xd8\xff"):
        return "JPEG"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WEBP"
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "WAV"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "GIF"
    if head[:2] == b"BM":
        return "BMP"
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return "TIFF"
    if head[:4] == b"fLaC":
        return "FLAC"
    if head[:4] == b"OggS":
        return "OGG"
    if head[:4] == b"FORM" and head[8:12] in (b"AIFF", b"AIFC"):
        return "AIFF"
    if head[:3] == b"ID3" or (len(head) > 1 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0):
        return "MP3"
    if head[4:8] == b"ftyp":
        brand = head[8:12]
        if brand in (b"avif", b"avis"):
            return "AVIF"
        if brand in (b"heic", b"heix", b"mif1", b"msf1"):
            return "HEIF"
        return "MP4"
    if head[:4] == b"\x00\x00\x01\x00":
        return "ICO"
    return None


def image_header(data: bytes | memoryview, bomb_pixels: int | None = None) -> ImageHeader | None:
    """The header of a PNG, JPEG or WebP file, or None when Pillow must be asked (see the
    module's invariants)."""
    view = _bytes_view(data)
    fmt = sniff(view)
    if fmt == "PNG":
        header = _png(view)
    elif fmt == "JPEG":
        header = _jpeg(view)
    elif fmt == "WEBP":
        header = _webp(view)
    else:
        return None
    if header is None or header.width <= 0 or header.height <= 0:
        return None
    limit = _BOMB_PIXELS_DEFAULT if bomb_pixels is None else bomb_pixels
    if header.width * header.height > limit:
        return None
    return header


def _png(view: memoryview) -> ImageHeader | None:
    size = len(view)
    if size < 33 or bytes(view[12:16]) != b"IHDR":
        return None
    width, height, depth, colour, method, filtering, interlace = struct.unpack_from(
        ">IIBBBBB", view, 16)
    mode = PNG_MODES.get((depth, colour))
    if mode is None or method != 0 or filtering != 0 or interlace not in (0, 1):
        return None
    pos = 8
    xmp: bytes | None = None
    idat: list[memoryview] = []
    while pos + 8 <= size:
        (length,) = struct.unpack_from(">I", view, pos)
        kind = bytes(view[pos + 4:pos + 8])
        end = pos + 12 + length
        if end > size:
            return None  # truncated: let Pillow say what it makes of it
        if kind == b"IDAT":
            idat.append(view[pos + 8:end - 4])
        elif not idat:
            # Pillow checks the checksum of every chunk before the pixels when it opens a file.
            (crc,) = struct.unpack_from(">I", view, end - 4)
            if zlib.crc32(view[pos + 4:end - 4]) != crc:
                return None
        if kind in (b"eXIf", b"acTL"):
            return None
        if kind in _PNG_TEXT:
            keyword = bytes(view[pos + 8:pos + 8 + min(length, 80)]).split(b"\x00", 1)[0]
            if keyword.startswith(b"Raw profile type"):
                return None
            if keyword == _PNG_XMP_KEYWORD:
                if kind != b"iTXt" or xmp is not None:
                    return None
                xmp = _png_itxt_text(bytes(view[pos + 8:pos + 8 + length]))
                if xmp is None:
                    return None
        if kind == b"IEND":
            rawmode = _PNG_ZIP_RAWMODES.get(colour) if depth == 8 and not interlace else None
            if rawmode is None or not idat:
                return ImageHeader("PNG", width, height, mode, _xmp_orientation(xmp))
            return ImageHeader("PNG", width, height, mode, _xmp_orientation(xmp), rawmode,
                               idat[0] if len(idat) == 1 else b"".join(idat))
        pos = end
    return None


def _png_itxt_text(body: bytes) -> bytes | None:
    """The text of an uncompressed iTXt chunk as Pillow keeps it (valid UTF-8), else None."""
    parts = body.split(b"\x00", 1)
    if len(parts) != 2 or len(parts[1]) < 2 or parts[1][0] != 0:
        return None  # compressed, or malformed: Pillow decides
    rest = parts[1][2:].split(b"\x00", 2)  # language tag, translated keyword, text
    if len(rest) != 3:
        return None
    try:
        rest[2].decode("utf-8")
    except UnicodeDecodeError:
        return None
    return rest[2]


def _xmp_orientation(xmp: bytes | None) -> int | None:
    if not xmp:
        return None
    match = _XMP_ORIENTATION.search(xmp)
    return int(match[2]) if match else None


def _jpeg(view: memoryview) -> ImageHeader | None:
    size = len(view)
    pos = 2
    frame: tuple[int, int, int] | None = None
    orientation: int | None = None
    exif_seen = False
    xmp: bytes | None = None
    while pos + 4 <= size:
        if view[pos] != 0xFF:
            return None
        marker = view[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if 0xD0 <= marker <= 0xD8:
            pos += 2  # restart markers and a repeated start of image have no length
            continue
        if marker < 0xC0 or marker == 0xD9:
            return None  # junk or an early end of image: Pillow's own reading decides
        (length,) = struct.unpack_from(">H", view, pos + 2)
        body = pos + 4
        end = pos + 2 + length
        if length < 2 or end > size:
            return None
        if marker == 0xDA:  # start of scan: Pillow stops reading the header here
            break
        if marker in _JPEG_SOF:
            if frame is not None or length < 8:
                return None
            bits, height, width, layers = struct.unpack_from(">BHHB", view, body)
            if bits != 8 or layers not in _JPEG_MODES:
                return None
            frame = (width, height, layers)
        elif marker == 0xE1:
            app = bytes(view[body:min(end, body + 29)])
            if app.startswith(b"Exif\x00\x00"):
                if exif_seen:
                    return None  # several EXIF blocks: Pillow joins them
                exif_seen = True
                plain, orientation = _exif_orientation(view[body + 6:end])
                if not plain:
                    return None
            elif app.startswith(_JPEG_XMP_PREFIX):
                if xmp is not None:
                    return None  # several XMP blocks: Pillow keeps the last
                xmp = bytes(view[body + len(_JPEG_XMP_PREFIX):end])
        pos = end
    if frame is None:
        return None
    width, height, layers = frame
    if orientation is None:
        orientation = _xmp_orientation(xmp)
    return ImageHeader("JPEG", width, height, _JPEG_MODES[layers], orientation)


def _exif_orientation(tiff: memoryview) -> tuple[bool, int | None]:
    """(plain, orientation): the orientation entry of an EXIF block's first IFD (None when
    there is none); plain is False when the block is anything else than a well-formed first
    IFD with at most one plain SHORT orientation entry (then Pillow must read it)."""
    size = len(tiff)
    if size < 8:
        return False, None
    order = bytes(tiff[:4])
    if order == b"II*\x00":
        end = "<"
    elif order == b"MM\x00*":
        end = ">"
    else:
        return False, None
    (ifd,) = struct.unpack_from(end + "I", tiff, 4)
    if ifd < 8 or ifd + 2 > size:
        return False, None
    (count,) = struct.unpack_from(end + "H", tiff, ifd)
    if ifd + 2 + 12 * count > size:
        return False, None
    for k in range(count):
        tag, kind, n = struct.unpack_from(end + "HHI", tiff, ifd + 2 + 12 * k)
        if tag == _ORIENTATION_TAG:
            if kind != 3 or n != 1:
                return False, None
            (value,) = struct.unpack_from(end + "H", tiff, ifd + 2 + 12 * k + 8)
            return True, int(value)
    return True, None


def _webp(view: memoryview) -> ImageHeader | None:
    size = len(view)
    if size < 30:
        return None
    kind = bytes(view[12:16])
    if kind == b"VP8 ":
        # Frame tag (3 bytes), start code 9d 01 2a, then 14-bit width and height.
        if bytes(view[23:26]) != b"\x9d\x01\x2a":
            return None
        width, height = struct.unpack_from("<HH", view, 26)
        return ImageHeader("WEBP", width & 0x3FFF, height & 0x3FFF, "RGB", None)
    if kind == b"VP8L":
        if view[20] != 0x2F:
            return None
        (bits,) = struct.unpack_from("<I", view, 21)
        width = (bits & 0x3FFF) + 1
        height = ((bits >> 14) & 0x3FFF) + 1
        alpha = (bits >> 28) & 1
        return ImageHeader("WEBP", width, height, "RGBA" if alpha else "RGB", None)
    if kind == b"VP8X":
        flags = view[20]
        if flags & 0x02:  # an animation: Pillow's decoder decides
            return None
        width = int.from_bytes(view[24:27], "little") + 1
        height = int.from_bytes(view[27:30], "little") + 1
        orientation: int | None = None
        if flags & (0x04 | 0x08):  # XMP or EXIF chunks follow
            found = _webp_orientation(view)
            if found is None:
                return None
            orientation = found[0]
        return ImageHeader("WEBP", width, height, "RGBA" if flags & 0x10 else "RGB",
                           orientation)
    return None


def _webp_orientation(view: memoryview) -> tuple[int | None] | None:
    """(orientation,) from a WebP file's EXIF, else its XMP, as Pillow reads them; None when
    a chunk is not plain."""
    size = len(view)
    pos = 12
    exif: memoryview | None = None
    xmp: bytes | None = None
    while pos + 8 <= size:
        kind = bytes(view[pos:pos + 4])
        (length,) = struct.unpack_from("<I", view, pos + 4)
        end = pos + 8 + length
        if end > size:
            return None
        if kind == b"EXIF":
            if exif is not None:
                return None
            exif = view[pos + 8:end]
        elif kind == b"XMP ":
            if xmp is not None:
                return None
            xmp = bytes(view[pos + 8:end])
        pos = end + (length & 1)
    orientation: int | None = None
    if exif is not None:
        if bytes(exif[:6]) == b"Exif\x00\x00":
            exif = exif[6:]
        plain, orientation = _exif_orientation(exif)
        if not plain:
            return None
    if orientation is None:
        orientation = _xmp_orientation(xmp)
    return (orientation,)


def png_stream(data: bytes | memoryview) -> tuple[str, int, int, str, bytes | memoryview] | None:
    """(mode, width, height, zip raw mode, pixel stream) of a PNG that ``image_header`` already
    accepted with a `zip_rawmode`: the same chunks, found again without checking checksums
    (that was done), or None if the file is not such a PNG."""
    view = _bytes_view(data)
    size = len(view)
    if size < 33 or bytes(view[:8]) != b"\x89PNG\r\n\x1a\n" or bytes(view[12:16]) != b"IHDR":
        return None
    width, height, depth, colour, _, _, interlace = struct.unpack_from(">IIBBBBB", view, 16)
    rawmode = _PNG_ZIP_RAWMODES.get(colour) if depth == 8 and not interlace else None
    if rawmode is None:
        return None
    idat: list[memoryview] = []
    pos = 8
    while pos + 8 <= size:
        (length,) = struct.unpack_from(">I", view, pos)
        end = pos + 12 + length
        if end > size:
            return None
        kind = bytes(view[pos + 4:pos + 8])
        if kind == b"IDAT":
            idat.append(view[pos + 8:end - 4])
        elif kind == b"IEND":
            break
        pos = end
    if not idat:
        return None
    return (PNG_MODES[(depth, colour)], width, height, rawmode,
            idat[0] if len(idat) == 1 else b"".join(idat))
