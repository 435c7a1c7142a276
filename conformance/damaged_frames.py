"""Damages zstd frames, re-seals them in a store, and reports what readers return for them.

Spec section 6.2 decides which frames a reader rejects as `decode`, whatever its zstd decoder
would do (issue [H3], decision record 0006). This experiment measures how far readers are from
that: it compresses varied records with and without a trained dictionary, changes one to four
bytes of each frame after its header, stores the results with their checksums re-sealed (so the
damage reaches the decoder, as it does only in a store whose writer put it there), and reads
every record with

- each zrecord build given by ``--reader LABEL=PYTHONPATH:LIBZSTD_DIR`` (either part may be
  empty; LIBZSTD_DIR holds the ``libzstd.so.1`` that the build loads, so one build runs under
  several zstd releases), each in its own process;
- the reference reader (conformance/reference/), which applies the spec's own checks and then
  decodes with ``zstandard``'s libzstd: a frame it rejects is one the spec rejects, unless
  [ZR-COD-019] leaves it to the decoder;
- a walk of every frame (the checks of [ZR-COD-016], spec section 6.3's steps on each literals
  Huffman tree description) and a decoding of every Huffman-coded literals stream as RFC 8878
  describes it, which tells whether the stream is consumed exactly ([ZR-COD-019] (a));
- with ``--strict LIBZSTD_DIR``, a libzstd built with ``-DHUF_DISABLE_FAST_DECODE``, decoding
  dictionary frames with a prepared dictionary (history: the whole dictionary) and with
  ``ZSTD_decompress_usingDict`` (history: the content only), which tells (e) from the rest;
- with ``--release VERSION=LIBZSTD_DIR`` (in release order), other libzstd releases, to label a
  frame by the first release that refuses it.

It prints, per reader, how many records it returned, how many of those the spec rejects (by
rule), how many it leaves to the decoder (by kind), and how many differ from the bytes that the
reference reader's or the strict decoder returned for the same frame.

    python conformance/damaged_frames.py --count 20000 \\
        --reader 1.5.4=: --reader 1.5.7=:/path/to/zstd-1.5.7/lib --strict /path/to/strict/lib
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import zstandard

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from reference import reader as ref  # noqa: E402
from reference import writer as rw  # noqa: E402

CODECS = {"zstd": 1, "zstd_dict": 2}


def _fast_xxh64() -> None:
    """The reference modules hash in pure Python, far too slow for 20,000 records; zrecord's
    native XXH64 computes the same function (conformance vectors check both against each other)."""
    from zrecord import _native

    def xxh64(data: bytes) -> int:
        return int(_native.xxh64(np.frombuffer(data, np.uint8)))

    rw.xxh64 = xxh64
    ref.xxh64 = xxh64


# ---- the records and the damage ------------------------------------------------------------


def _records(rng: random.Random) -> list[bytes]:
    """Records of the kinds a store holds: JSON-like rows, small integers, text with repeats,
    incompressible bytes, sizes from 40 bytes to 300 KiB (several blocks)."""
    out = []
    words = [b"alpha", b"beta", b"gamma", b"delta", b"zeta", b"omega", b"kappa"]
    for k in range(160):
        size = rng.choice([40, 100, 300, 700, 1500, 4000, 9000, 20000, 70000, 300000])
        kind = k % 4
        if kind == 0:
            row = b'{"id": %d, "name": "%s", "score": %d}\n'
            raw = b"".join(row % (i, rng.choice(words), rng.randrange(999)) for i in range(size // 30 + 1))
        elif kind == 1:
            raw = np.cumsum(np.array([rng.randrange(-3, 4) for _ in range(size // 2 + 1)]), dtype=np.int16).tobytes()
        elif kind == 2:
            raw = b" ".join(rng.choice(words) for _ in range(size // 5 + 1))
        else:
            raw = bytes(rng.randrange(256) for _ in range(min(size, 4000))) * (size // 4000 + 1)
        out.append(raw[:size])
    return out


def make_frames(count: int, seed: int) -> tuple[bytes, dict[str, list[tuple[bytes, bytes]]]]:
    """A trained dictionary and, per codec, `count / 2` (payload, damaged frame) pairs."""
    rng = random.Random(seed)
    payloads = _records(rng)
    dictionary = zstandard.train_dictionary(16384, [p[:2000] for p in payloads] * 4).as_bytes()
    zdict = zstandard.ZstdCompressionDict(dictionary)
    bases: dict[str, list[tuple[bytes, bytes]]] = {"zstd": [], "zstd_dict": []}
    for level in (1, 3, 9, 19):
        plain = zstandard.ZstdCompressor(level=level, write_content_size=True, write_checksum=False)
        with_dict = zstandard.ZstdCompressor(level=level, dict_data=zdict, write_content_size=True,
                                             write_checksum=False)
        for p in payloads:
            bases["zstd"].append((p, plain.compress(p)))
            bases["zstd_dict"].append((p, with_dict.compress(p)))
    damaged: dict[str, list[tuple[bytes, bytes]]] = {"zstd": [], "zstd_dict": []}
    for codec, pairs in bases.items():
        for _ in range(count // 2):
            payload, frame = rng.choice(pairs)
            header = ref.parse_frame_header(frame)
            assert not isinstance(header, str)
            mutant = bytearray(frame)
            for _ in range(rng.randint(1, 4)):
                at = rng.randrange(header.size, len(frame))
                mutant[at] = rng.randrange(256) if rng.random() < 0.5 else mutant[at] ^ (1 << rng.randrange(8))
            damaged[codec].append((payload, bytes(mutant)))
    return dictionary, damaged


def write_store(path: Path, codec: str, pairs: list[tuple[bytes, bytes]], dictionary: bytes) -> None:
    records = [rw.Stored((len(p),), len(p), frame) for p, frame in pairs]
    files = rw.build(kind="ragged", dtype_code=3, ndim=1, codec_code=CODECS[codec], data_shards=1,
                     records=records, dictionary=dictionary if codec == "zstd_dict" else b"")
    rw.write_files(path, files)


# ---- the readers ---------------------------------------------------------------------------


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=12).hexdigest()


def worker(store: str, out: str) -> None:
    """Run in a child process: reads every record of `store` with the zrecord that Python finds
    there (PYTHONPATH) over the libzstd the loader finds (LD_LIBRARY_PATH)."""
    import zrecord

    results = []
    with zrecord.open_store(store) as s:
        for i in range(len(s)):
            try:
                results.append(["ok", _digest(s[i].tobytes())])
            except zrecord.errors.ZrecordError as exc:
                results.append([type(exc).__name__, str(exc)[-160:]])
    Path(out).write_text(json.dumps({"zstd": zrecord.__zstd_version__, "results": results}))


def run_reader(spec: str, store: Path, tmp: Path) -> tuple[str, list[list[str]]]:
    pythonpath, _, libdir = spec.partition(":")
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    if libdir:
        env["LD_LIBRARY_PATH"] = libdir
    out = tmp / f"out-{os.getpid()}-{hashlib.md5(spec.encode() + bytes(store)).hexdigest()}.json"
    subprocess.run([sys.executable, __file__, "--worker", str(store), str(out)], env=env, check=True)
    got = json.loads(out.read_text())
    return got["zstd"], got["results"]


def reference_verdicts(store: Path) -> list[tuple[str, str]]:
    """("ok", digest) or (rule, message) per record, by the reference reader."""
    s = ref.open_store(store)
    out = []
    for i in range(s.record_count):
        try:
            out.append(("ok", _digest(s.read(i).tobytes())))
        except ref.FormatViolation as exc:
            out.append((exc.rule, str(exc)))
    return out


class StrictDecoder:
    """libzstd without its Huffman fast path, through ctypes: `whole` decodes with a prepared
    dictionary (a DDict, history the whole dictionary), `content` with ZSTD_decompress_usingDict
    (history the content after the repeat offsets)."""

    def __init__(self, libdir: str, dictionary: bytes) -> None:
        lib = ctypes.CDLL(str(Path(libdir) / "libzstd.so.1"))
        lib.ZSTD_createDCtx.restype = ctypes.c_void_p
        lib.ZSTD_createDDict.restype = ctypes.c_void_p
        lib.ZSTD_createDDict.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        for name in ("ZSTD_decompressDCtx", "ZSTD_decompress_usingDDict", "ZSTD_decompress_usingDict"):
            getattr(lib, name).restype = ctypes.c_size_t
        lib.ZSTD_isError.argtypes = [ctypes.c_size_t]
        self.lib = lib
        self.dctx = ctypes.c_void_p(lib.ZSTD_createDCtx())
        self.dictionary = dictionary
        self.ddict = ctypes.c_void_p(lib.ZSTD_createDDict(dictionary, len(dictionary)))

    def decode(self, frame: bytes, size: int, history: str | None) -> str | None:
        """The digest of what the frame decodes to, or None if libzstd refuses it."""
        dst = ctypes.create_string_buffer(max(size, 1))
        args = (self.dctx, dst, ctypes.c_size_t(size), frame, ctypes.c_size_t(len(frame)))
        if history is None:
            n = self.lib.ZSTD_decompressDCtx(*args)
        elif history == "whole":
            n = self.lib.ZSTD_decompress_usingDDict(*args, self.ddict)
        else:
            n = self.lib.ZSTD_decompress_usingDict(*args, self.dictionary, ctypes.c_size_t(len(self.dictionary)))
        if self.lib.ZSTD_isError(n) or n != size:
            return None
        return _digest(dst.raw[:size])


# ---- what the spec's walk of a frame sees ----------------------------------------------------


def frame_facts(frame: bytes) -> list[str]:
    """What a walk of the frame's blocks finds that libzstd releases judge differently: the
    reserved bits of Symbol_Compression_Modes, a Number_of_Sequences of 0 in two bytes or with
    bytes after it, and a literals Huffman tree description that spec section 6.3's steps
    reject (its weights' two initial states truncated, or otherwise)."""
    from reference import dictionary as refdict

    header = ref.parse_frame_header(frame)
    facts: list[str] = []
    if isinstance(header, str):
        return facts
    for kind, size, body in ref.iter_blocks(frame, header.size):
        if kind == 2 and len(body) == size:
            facts += _compressed_block_facts(body, refdict)
    return facts


def _compressed_block_facts(body: bytes, refdict: object) -> list[str]:
    facts: list[str] = []
    lit = ref.literals_section(body) if body else None
    if lit is None or lit[2] > len(body):
        return facts
    kind, hsize, end = lit
    if kind == 2:
        try:
            refdict._huffman(body[:end], hsize)  # type: ignore[attr-defined]
        except refdict._Malformed as exc:  # type: ignore[attr-defined]
            truncated = "initial states" in str(exc)
            facts.append("Huffman weights' initial states truncated" if truncated
                         else f"Huffman tree description malformed by section 6.3's steps ({exc})")
    problem = ref.sequences_header_problem(body)
    if problem is not None:
        facts.append(problem)
    return facts


# ---- whether the literals' Huffman streams are consumed exactly (RFC 8878 section 4.2.2) ---


def _huffman_weights(description: bytes, refdict: object) -> list[int]:
    """Every symbol's weight, the implied last one included."""
    refdict._huffman(description, 0)  # type: ignore[attr-defined]
    h = description[0]
    if h >= 128:
        weights = [(description[1 + k // 2] >> 4) if k % 2 == 0 else (description[1 + k // 2] & 15)
                   for k in range(h - 127)]
    else:
        weights = refdict._fse_weights(description[1 : 1 + h])  # type: ignore[attr-defined]
    total = sum(1 << (w - 1) for w in weights if w)
    rest = (1 << total.bit_length()) - total
    return weights + [rest.bit_length()]


def _stream_consumption(stream: bytes, count: int, table: list[int], nbits: list[int], depth: int) -> str:
    """Decodes `count` symbols from one backward Huffman stream as the RFC describes (bits
    below its start read as 0): "exact", "left" (bits left over) or "over" (read below bit 0)."""
    if not stream or stream[-1] == 0:
        return "over"
    avail = 8 * (len(stream) - 1) + stream[-1].bit_length() - 1
    value = int.from_bytes(stream, "little")
    for _ in range(count):
        shift = avail - depth
        peek = (value >> shift) & ((1 << depth) - 1) if shift >= 0 else (value << -shift) & ((1 << depth) - 1)
        avail -= nbits[table[peek]]
    return "exact" if avail == 0 else "left" if avail > 0 else "over"


def literals_consumption(frame: bytes, dictionary: bytes) -> str | None:
    """"exact", "left" or "over" for the worst Huffman-coded literals stream of the frame, or
    None if it has none (or one this walk cannot follow, which the decoders refuse anyway)."""
    from reference import dictionary as refdict

    header = ref.parse_frame_header(frame)
    if isinstance(header, str):
        return None
    weights = _huffman_weights(dictionary[8:], refdict) if dictionary[:4] == refdict.DICTIONARY_MAGIC else None
    worst = None
    try:
        for kind, _, body in ref.iter_blocks(frame, header.size):
            if kind == 2:
                weights, verdict = _block_literals(body, weights, refdict)
                if verdict and (worst is None or verdict != "exact"):
                    worst = verdict
    except (refdict._Malformed, IndexError, ValueError):  # type: ignore[attr-defined]
        return worst
    return worst


def _block_literals(body: bytes, weights: list[int] | None, refdict: object) -> tuple[list[int] | None, str | None]:
    lit = ref.literals_section(body)
    if lit is None or lit[0] < 2 or lit[2] > len(body):
        return weights, None
    kind, hsize, end = lit
    value = int.from_bytes(body[:hsize], "little")
    bits = {3: 10, 4: 14, 5: 18}[hsize]
    regen = (value >> 4) & ((1 << bits) - 1)
    data = body[hsize:end]
    if kind == 2:
        h = data[0]
        dlen = 1 + ((h - 127 + 1) // 2 if h >= 128 else h)
        weights = _huffman_weights(data[:dlen], refdict)
        data = data[dlen:]
    if weights is None:
        return weights, None
    depth = sum(1 << (w - 1) for w in weights if w).bit_length() - 1  # the weights sum to 2^depth
    table: list[int] = []
    for w, sym in sorted((w, sym) for sym, w in enumerate(weights) if w):
        table += [sym] * (1 << (w - 1))
    nbits = [depth + 1 - w if w else 0 for w in weights]
    if (value >> 2) & 3 == 0 and hsize == 3:
        return weights, _stream_consumption(data, regen, table, nbits, depth)
    sizes = [int.from_bytes(data[2 * k : 2 * k + 2], "little") for k in range(3)]
    sizes.append(len(data) - 6 - sum(sizes))
    segment = (regen + 3) // 4
    counts = [segment, segment, segment, regen - 3 * segment]
    verdicts, at = [], 6
    for size, count in zip(sizes, counts, strict=True):
        verdicts.append(_stream_consumption(data[at : at + size], count, table, nbits, depth))
        at += size
    return weights, next((v for v in verdicts if v != "exact"), "exact")


# ---- the report ----------------------------------------------------------------------------


def judge(codec: str, pairs: list[tuple[bytes, bytes]], verdicts: list[tuple[str, str]],
          strict: StrictDecoder | None, releases: dict[str, StrictDecoder],
          dictionary: bytes) -> list[dict[str, object]]:
    """Per record: the spec's verdict (reference reader), the strict decoder's, the verdicts of
    other libzstd releases (`releases`, for labels only) and the walk's facts."""
    out = []
    history = None if codec == "zstd" else "whole"
    for (payload, frame), (rule, detail) in zip(pairs, verdicts, strict=True):
        row: dict[str, object] = {"rule": rule, "ref": detail if rule == "ok" else None}
        if rule in ("ok", "ZR-IDX-005"):
            if strict is not None:
                row["strict"] = strict.decode(frame, len(payload), history and "content")
                if history:
                    row["strict_whole"] = strict.decode(frame, len(payload), history)
            row["releases"] = {v: dec.decode(frame, len(payload), history) is not None for v, dec in releases.items()}
            row["facts"] = frame_facts(frame)
            row["literals"] = literals_consumption(frame, b"" if codec == "zstd" else dictionary)
        out.append(row)
    return out


def classify(row: dict[str, object], got: list[str]) -> str:
    """Where a record a reader returned stands against the spec."""
    rule, facts = row["rule"], list(row.get("facts") or [])  # type: ignore[call-overload]
    walk = [f for f in facts if not f.startswith("Huffman")]
    if walk:
        return f"spec rejects (walk): {walk[0]}"
    if rule not in ("ok", "ZR-IDX-005"):
        return f"spec rejects ({rule})"
    if facts:
        return f"left to the decoder: {facts[0]}"
    literals = {"left": "bits left over", "over": "read below its start"}.get(str(row.get("literals")))
    if literals:
        return f"left to the decoder: a Huffman literals stream {literals}"
    if rule == "ZR-IDX-005":
        releases = row.get("releases") or {}
        refused = [v for v, ok in releases.items() if not ok]  # type: ignore[union-attr]
        since = f"refused from libzstd {refused[0]}" if refused else "refused by libzstd 1.5.7"
        return f"left to the decoder: an over-read sequences bitstream or an offset of 0 ({since})"
    if "strict" in row and row["strict"] is None:
        if row.get("strict_whole") is not None:
            return "left to the decoder: a match reaches into the dictionary's header"
        return "valid, but refused by libzstd without its Huffman fast path"
    return "valid"


def report(label: str, zstd: str, results: list[list[str]], rows: list[dict[str, object]]) -> dict:
    kinds: Counter[str] = Counter()
    differs: Counter[str] = Counter()
    for got, row in zip(results, rows, strict=True):
        if got[0] != "ok":
            continue
        kind = classify(row, got)
        kinds[kind] += 1
        others = [o for o in ("ref", "strict", "strict_whole") if row.get(o) is not None and row[o] != got[1]]
        if others:
            differs[f"{kind}: bytes other than the {' and '.join(others)} decoder's"] += 1
    returned = sum(kinds.values())
    print(f"\n{label} (libzstd {zstd}): returned {returned} of {len(results)}")
    for kind, n in sorted(kinds.items(), key=lambda kv: -kv[1]):
        print(f"  {n:6d}  {kind}")
    for kind, n in sorted(differs.items(), key=lambda kv: -kv[1]):
        print(f"  {n:6d}  of them, {kind}")
    return {"label": label, "zstd": zstd, "returned": returned, "kinds": dict(kinds), "differs": dict(differs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--reader", action="append", default=[], metavar="LABEL=PYTHONPATH:LIBDIR")
    parser.add_argument("--strict", metavar="LIBDIR")
    parser.add_argument("--release", action="append", default=[], metavar="VERSION=LIBDIR",
                        help="another libzstd, in release order, to label frames by the release that refuses them")
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    _fast_xxh64()
    dictionary, damaged = make_frames(args.count, args.seed)
    strict = StrictDecoder(args.strict, dictionary) if args.strict else None
    releases = {v: StrictDecoder(d, dictionary) for v, _, d in (r.partition("=") for r in args.release)}
    summary = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for codec, pairs in damaged.items():
            store = tmp / codec
            write_store(store, codec, pairs, dictionary)
            rows = judge(codec, pairs, reference_verdicts(store), strict, releases, dictionary)
            spec_rejects = Counter(str(r["rule"]) for r in rows if r["rule"] != "ok")
            print(f"\n== codec {codec}: {len(pairs)} damaged frames; the spec rejects "
                  f"{sum(spec_rejects.values())} ({dict(spec_rejects.most_common())})")
            for spec in args.reader:
                label, _, where = spec.partition("=")
                zstd, results = run_reader(where, store, tmp)
                summary.append({"codec": codec, **report(label, zstd, results, rows)})
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
