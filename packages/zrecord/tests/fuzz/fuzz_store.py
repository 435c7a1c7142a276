"""Fuzz zrecord's reader with mutated copies of valid stores.

Every input is a seed store (make_corpus.py) changed by one to four mutations: raw bit flips,
boundary values written into header and index fields, truncations, extensions, missing or
extra files, and *semantic* changes made through storemodel (a record's stored bytes replaced
by a crafted zstd frame, shapes or item_shape changed, records moved between shards), most of
them followed by fix-ups that reseal checksums and sizes so that the change gets past the
first check and reaches deeper code. Each input is then opened with zrecord, verified, read
record by record, gathered in a shuffled order with repeats and iterated.

What counts as a finding:
- crash: the process died from a signal (SIGSEGV, SIGBUS, SIGABRT from a Zig panic, ...);
- hang: one input took longer than --timeout seconds;
- overallocation: an out-of-memory error (MemoryError, or the address-space limit hit) on an
  input whose declared record sizes are all below the read budget; the address space of the
  process running the inputs is limited (RLIMIT_AS) to its size after start-up plus
  ``--memory-mb``;
- unexpected exception: anything but a zrecord error (ZrecordError) escaping the API;
- inconsistency: a store that opened and passed verify() and then failed a read, or whose
  gather, per-record reads and iteration disagree, or one whose index was judged whole at open
  and whose shapes then failed (opened by part, a damaged index block fails the shapes: an outcome);
- leak: a file descriptor left open after the store was closed.

Engines:
- ``mutate`` (default): deterministic. Input ``i`` of run seed ``S`` is a pure function of
  (S, i) and the corpus, so ``--replay S:i`` rebuilds it. Inputs run in ``--jobs`` worker
  processes watched by this one, which catches signals and hangs and saves each finding's store
  under ``--findings``.
- ``atheris``: coverage-guided by libFuzzer through atheris (if installed), in-process. The
  fuzzer's bytes drive the same mutation choices. Native code is not instrumented, so the
  guidance sees the Python side only.

    python fuzz_store.py --seconds 60                  # CI's bounded run
    python fuzz_store.py --replay 1:1234 --keep DIR    # rebuild and rerun one input
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import storemodel as sm  # noqa: E402

# Records whose declared logical size exceeds this are neither read nor verified: a valid
# compressed store may declare records of up to 2 GiB in a few bytes, and allocating that is
# the caller's choice, not an overallocation by the reader.
READ_BUDGET_BYTES = 64 << 20

# ---------------------------------------------------------------------------------------------
# mutations
# ---------------------------------------------------------------------------------------------


def _pick(rng: Any, seq: list[Any]) -> Any:
    return seq[rng.randrange(len(seq))]


def _boundary(rng: Any, size: int, current: int) -> int:
    """A value for a field of `size` bytes: a boundary, a near miss of the current value, or
    random bits."""
    top = (1 << (8 * size)) - 1
    candidates = [0, 1, 2, 7, 8, 255, 256, top, top - 1, 1 << (8 * size - 1),
                  (1 << (8 * size - 1)) - 1, current + 1, current - 1, current * 2,
                  current + 8, current - 8, current << 8]
    if size >= 4:
        candidates += [1 << 31, (1 << 31) + 1, (1 << 32) - 1, 1 << 24, (1 << 24) + 1]
    if size >= 8:
        candidates += [1 << 32, 1 << 48, (1 << 48) + 1, 1 << 63, (1 << 62) + 1]
    if rng.randrange(5) == 0:
        return int.from_bytes(rng.randbytes(size), "little")
    return _pick(rng, candidates) & top


def _data_names(files: dict[str, Any]) -> list[str]:
    return sorted(n for n in files if n.startswith("data-") and isinstance(files[n], bytes))


def _header(files: dict[str, Any]) -> bytearray | None:
    h = files.get("header.zrh")
    return bytearray(h) if isinstance(h, (bytes, bytearray)) else None


def _entry_size(h: bytearray) -> int:
    if len(h) < 52:
        return 24
    es = sm.get(h, 48, 4)
    return es if 24 <= es <= 4096 else sm.entry_size(h[16], h[18])


def m_flip(files: dict[str, Any], rng: Any) -> str:
    names = [n for n, v in files.items() if isinstance(v, bytes) and v]
    if not names:
        return "flip:none"
    name = _pick(rng, names)
    data = bytearray(files[name])
    pos = rng.randrange(len(data))
    bit = rng.randrange(8)
    data[pos] ^= 1 << bit
    files[name] = bytes(data)
    return f"flip:{name}@{pos}.{bit}"


def m_header_field(files: dict[str, Any], rng: Any) -> str:
    h = _header(files)
    if h is None or len(h) < sm.HEADER_FIXED_BYTES:
        return "hfield:none"
    off, size, name = _pick(rng, sm.HEADER_FIELDS[1:])
    size = min(size, 8)
    sm.put(h, off, size, _boundary(rng, size, sm.get(h, off, size)))
    files["header.zrh"] = bytes(h)
    return f"hfield:{name}"


def m_header_slot(files: dict[str, Any], rng: Any) -> str:
    """A u64 of the variable part (item_shape, shard_sizes, dictionary) or the padding."""
    h = _header(files)
    if h is None or len(h) < sm.HEADER_FIXED_BYTES + 16:
        return "hslot:none"
    slot = sm.HEADER_FIXED_BYTES + 8 * rng.randrange((len(h) - sm.HEADER_FIXED_BYTES - 8) // 8)
    sm.put(h, slot, 8, _boundary(rng, 8, sm.get(h, slot, 8)))
    files["header.zrh"] = bytes(h)
    return f"hslot:{slot}"


def m_entry_field(files: dict[str, Any], rng: Any) -> str:
    h = _header(files)
    idx = files.get("index.zri")
    if h is None or not idx:
        return "efield:none"
    es = _entry_size(h)
    if len(idx) < es:
        return "efield:none"
    rec = rng.randrange(len(idx) // es)
    fields = list(sm.ENTRY_FIELDS)
    fields += [(24 + 4 * a, 4, f"shape{a}") for a in range((es - 24) // 4)]
    off, size, name = _pick(rng, fields)
    data = bytearray(idx)
    base = rec * es + off
    sm.put(data, base, size, _boundary(rng, size, sm.get(data, base, size)))
    files["index.zri"] = bytes(data)
    return f"efield:{rec}.{name}"


def m_entry_copy(files: dict[str, Any], rng: Any) -> str:
    """Copy one index entry over another (overlapping records) or swap two."""
    h = _header(files)
    idx = files.get("index.zri")
    if h is None or not idx:
        return "ecopy:none"
    es = _entry_size(h)
    n = len(idx) // es
    if n < 2:
        return "ecopy:none"
    i, j = rng.randrange(n), rng.randrange(n)
    data = bytearray(idx)
    a, b = data[i * es:(i + 1) * es], data[j * es:(j + 1) * es]
    data[i * es:(i + 1) * es] = b
    if rng.randrange(2):
        data[j * es:(j + 1) * es] = a
    files["index.zri"] = bytes(data)
    return f"ecopy:{i}<-{j}"


def m_resize(files: dict[str, Any], rng: Any) -> str:
    names = [n for n, v in files.items() if isinstance(v, bytes)]
    if not names:
        return "resize:none"
    name = _pick(rng, names)
    data = files[name]
    how = rng.randrange(4)
    if how == 0 and data:
        files[name] = data[:rng.randrange(len(data))]
    elif how == 1:
        files[name] = data + rng.randbytes(_pick(rng, [1, 7, 8, 24, 4096]))
    elif how == 2:
        files[name] = data + bytes(_pick(rng, [1, 8, 24, 64]))
    else:
        files[name] = b""
    return f"resize:{name}:{how}"


def m_files(files: dict[str, Any], rng: Any) -> str:
    """Missing, extra, misplaced or non-regular files."""
    how = rng.randrange(5)
    if how == 4:
        name = _pick(rng, sorted(files))
        files[name] = sm.FIFO
        return f"files:fifo:{name}"
    if how == 0:
        name = _pick(rng, sorted(files))
        del files[name]
        return f"files:del:{name}"
    if how == 1:
        name = _pick(rng, sorted(files))
        files[name] = None
        return f"files:dir:{name}"
    if how == 2:
        files[sm.shard_name(len(_data_names(files)))] = rng.randbytes(rng.randrange(64))
        return "files:extra-shard"
    names = _data_names(files)
    if len(names) >= 2:
        a, b = rng.sample(names, 2) if hasattr(rng, "sample") else (names[0], names[-1])
        files[a], files[b] = files[b], files[a]
    return "files:swap-shards"


def _crafted_frame(rng: Any, store: sm.Store, rec: sm.Record) -> bytes:
    """A zstd frame that differs from what the record needs in one chosen way."""
    import zstandard

    want = store.logical_size(rec)
    how = rng.randrange(9)
    payload_size = {0: want + 1, 1: max(0, want - 1), 2: want * 64 + 4096}.get(how, want)
    payload_size = min(payload_size, 1 << 20)
    # Low-entropy bytes (values 0..3) so that frames stay small; zero padding past 64 KiB.
    payload = bytes(b & 3 for b in rng.randbytes(min(payload_size, 1 << 16)))
    payload = payload.ljust(payload_size, b"\0")
    if how == 3:  # no content size field
        return zstandard.ZstdCompressor(write_content_size=False).compress(payload)
    if how == 4:  # two frames back to back
        c = zstandard.ZstdCompressor()
        return c.compress(payload[: want // 2]) + c.compress(payload[want // 2:])
    if how == 5:  # a skippable frame
        return b"\x50\x2a\x4d\x18" + (4).to_bytes(4, "little") + b"\0\0\0\0"
    if how == 6:  # the frame of another dictionary, or with one where none is expected
        d = zstandard.ZstdCompressionDict(bytes(range(256)) * 8, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
        return zstandard.ZstdCompressor(dict_data=d).compress(payload)
    if how == 7:  # a valid frame cut short
        frame = zstandard.ZstdCompressor().compress(payload)
        return frame[: rng.randrange(len(frame))] if frame else frame
    if how == 8:  # a frame declaring an enormous content size
        frame = bytearray(zstandard.ZstdCompressor(write_content_size=True).compress(payload))
        if len(frame) > 6 and frame[4] & 0xC0:
            frame[5:5 + 8] = (1 << 40).to_bytes(8, "little")[: len(frame[5:5 + 8])]
        return bytes(frame)
    return zstandard.ZstdCompressor().compress(payload)


def m_semantic(files: dict[str, Any], rng: Any) -> str:
    """Change the store's meaning and lay it out again with every checksum and size right."""
    try:
        store = sm.Store.decode({k: v for k, v in files.items() if isinstance(v, bytes)})
    except (KeyError, IndexError, ValueError):
        return "semantic:undecodable"
    recs = store.records
    how = rng.randrange(9)
    if how == 0 and recs:
        rec = _pick(rng, recs)
        rec.stored = _crafted_frame(rng, store, rec)
    elif how == 1 and recs:
        rec = _pick(rng, recs)
        data = bytearray(rec.stored)
        for _ in range(1 + rng.randrange(4)):
            if data:
                data[rng.randrange(len(data))] = rng.randrange(256)
        rec.stored = bytes(data)
    elif how == 2 and store.kind == 2 and recs:
        rec = _pick(rng, recs)
        rec.shape[rng.randrange(len(rec.shape))] = _boundary(rng, 4, rec.shape[0])
    elif how == 3 and store.kind == 1 and store.item_shape:
        a = rng.randrange(len(store.item_shape))
        store.item_shape[a] = _boundary(rng, 8, store.item_shape[a])
    elif how == 4:
        # Every code of 1.1 and the first reserved one, with parameters that fit it or not.
        store.dtype = rng.randrange(21)
        store.dtype_length = _pick(rng, [0, 1, 2, 3, 7, rng.randrange(1 << 32)])
        store.dtype_unit = _pick(rng, [0, 1, 7, 10, 13, 14, rng.randrange(256)])
        if rng.randrange(16) == 0:
            store.required_features = 1 << rng.randrange(64)
    elif how == 5:
        store.codec = rng.randrange(4)
        if store.codec != 2:
            store.dictionary = b"" if rng.randrange(2) else store.dictionary
    elif how == 6 and recs:
        _pick(rng, recs).shard = rng.randrange(store.data_shards + 1)
    elif how == 7:
        store.dictionary = rng.randbytes(_pick(rng, [0, 8, 100, 1024])) if rng.randrange(2) else \
            b"\x37\xa4\x30\xec" + store.dictionary[4:]
    elif recs:
        _pick(rng, recs).reserved = 1 + rng.randrange(255)
    files.clear()
    files.update(store.encode())
    return f"semantic:{how}"


MUTATIONS = [m_flip, m_header_field, m_header_slot, m_entry_field, m_entry_copy, m_resize,
             m_files, m_semantic, m_semantic]


def fix_ups(files: dict[str, Any], rng: Any) -> list[str]:
    """Reseal what the mutations broke, each with some probability, innermost first."""
    done = []
    h = _header(files)
    idx = files.get("index.zri")
    if h is None or len(h) < sm.HEADER_FIXED_BYTES:
        return done
    es = _entry_size(h)
    if isinstance(idx, bytes) and rng.randrange(2):
        # Record checksums of entries whose range lies inside an existing shard.
        data = bytearray(idx)
        for i in range(len(data) // es):
            off, size, shard = sm.get(data, i * es, 8), sm.get(data, i * es + 8, 4), data[i * es + 12]
            blob = files.get(sm.shard_name(shard))
            if isinstance(blob, bytes) and off + size <= len(blob):
                sm.put(data, i * es + 16, 8, sm.xxh64(blob[off:off + size]))
        files["index.zri"] = idx = bytes(data)
        done.append("sums")
    if rng.randrange(2):
        shards = h[20]
        pos = sm.HEADER_FIXED_BYTES + (8 * h[18] if h[16] == 1 else 0)
        total = 0
        for k in range(shards):
            blob = files.get(sm.shard_name(k))
            if isinstance(blob, bytes) and pos + 8 * k + 8 <= len(h) - 8:
                sm.put(h, pos + 8 * k, 8, len(blob))
                total += len(blob)
        sm.put(h, 40, 8, total)
        done.append("shards")
    if isinstance(idx, bytes) and rng.randrange(3):
        sm.put(h, 56, 8, len(idx))
        sm.put(h, 64, 8, sm.xxh64(idx))
        if rng.randrange(2):
            sm.put(h, 24, 8, len(idx) // es)
        done.append("index")
    if rng.randrange(3):
        sm.put(h, 12, 4, len(h))
        done.append("hsize")
    if rng.randrange(5):
        sm.reseal_header(h)
        done.append("reseal")
    files["header.zrh"] = bytes(h)
    return done


def make_input(corpus: list[tuple[str, dict[str, bytes]]], rng: Any) -> tuple[str, dict[str, Any], list[str]]:
    """One mutated store: (seed name, files, what was done)."""
    name, seed_files = _pick(rng, corpus)
    files: dict[str, Any] = dict(seed_files)
    ops = []
    for _ in range(1 + rng.randrange(4)):
        mutation = _pick(rng, MUTATIONS)
        before = dict(files)
        try:
            ops.append(mutation(files, rng))
        except (ValueError, IndexError, KeyError, OverflowError, TypeError):
            # A mutation that does not apply to what earlier ones left is skipped whole.
            files.clear()
            files.update(before)
            ops.append(f"{mutation.__name__}:skipped")
    if rng.randrange(4):
        ops += fix_ups(files, rng)
    return name, files, ops


def load_corpus(path: str) -> list[tuple[str, dict[str, bytes]]]:
    return [(name, sm.read_store(os.path.join(path, name))) for name in sorted(os.listdir(path))]


# ---------------------------------------------------------------------------------------------
# the target and its oracle
# ---------------------------------------------------------------------------------------------


class Finding(Exception):
    """A behaviour that a hostile input must never cause."""


def exercise(path: str, rng: Any) -> tuple[str, int]:
    """Open, verify and read the store at `path` every way the API allows; return an outcome
    label and the largest declared record size, or raise Finding."""
    import zrecord
    from zrecord import ZrecordError

    try:
        store = zrecord.open_store(path)
    except MemoryError as exc:
        raise Finding(f"overallocation at open: {exc!r}") from exc
    except ZrecordError as exc:
        return f"open:{type(exc).__name__}", 0
    with store:
        n = len(store)
        store.info()
        try:
            sizes = _declared_sizes(store)
        except ZrecordError as exc:
            # A store opened by part ([ZR-PRT-009]) judged none of its index at open: reading
            # the shapes judges every block, and a damaged one fails here. Any other open
            # judged the whole index, so the shapes must read.
            if store.index_info()["source"] != "by_part":
                raise Finding(f"inconsistency: the shapes of an opened store failed: {exc!r}") from exc
            return f"index:{type(exc).__name__}", 0
        readable = [i for i in range(n) if sizes[i] <= READ_BUDGET_BYTES]
        largest = int(sizes.max()) if n else 0
        failed = _verify_readable(store, readable)
        if failed is not None:
            return f"verify:{failed}", largest
        # The store verified: every readable record must now read, and agree every way.
        reads = _read_every_way(store, readable, rng)
        if reads is None:
            return "read:LimitError-numpy", largest
        single, order = reads
        _check_read_paths(store, path, readable, single, order)
        return "ok", largest


def _declared_sizes(store: Any) -> Any:
    """Each record's logical size in bytes as the index declares it (an int64 array)."""
    import numpy as np

    import zrecord

    n = len(store)
    if isinstance(store, zrecord.Ragged):
        return store.shapes().prod(axis=1).astype(np.int64) * store.dtype.itemsize \
            if n else np.zeros(0, np.int64)
    record_size = int(np.prod(store.item_shape, dtype=np.int64)) * store.dtype.itemsize
    return np.full(n, record_size, np.int64)


def _verify_readable(store: Any, readable: list[int]) -> str | None:
    """Verify the `readable` records (the whole store at once when every record is readable).
    Returns None if they verified, else the class name of the zrecord error verify raised."""
    from zrecord import ZrecordError

    try:
        if len(readable) == len(store):
            store.verify()
        else:
            for i in readable:
                store.verify(i, i + 1)
    except MemoryError as exc:
        raise Finding(f"overallocation in verify: {exc!r}") from exc
    except ZrecordError as exc:
        # Reads must fail too (or succeed on the records that are intact), never crash.
        for i in readable[:64]:
            try:
                store[i]
            except ZrecordError:
                pass
        return type(exc).__name__
    return None


def _read_every_way(store: Any, readable: list[int], rng: Any) -> tuple[list[Any], list[int]] | None:
    """Read the `readable` records of a verified store one by one, gathered in a shuffled
    order with repeats (drawn from `rng`) and, when all are readable, by iteration; raise
    Finding where two ways disagree. Returns the single reads and the gather's order, or None
    when the records declare shapes NumPy cannot hold."""
    import numpy as np

    import zrecord
    from zrecord import ZrecordError

    try:
        single = [store[i] for i in readable]
        order = [readable[rng.randrange(len(readable))] for _ in range(2 * len(readable))]
        batch = store[np.array(order, dtype=np.int64)] if order else []
        if len(readable) == len(store):
            iterated = list(store)
            for a, b in zip(single, iterated):
                # Bytes, not values: NaN and NaT are unequal to themselves.
                if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
                    raise Finding("iteration and indexing disagree")
    except MemoryError as exc:
        raise Finding(f"overallocation reading a verified store: {exc!r}") from exc
    except ZrecordError as exc:
        # Empty records may declare shapes NumPy cannot hold (alone or stacked); saying so
        # is the right answer.
        if isinstance(exc, zrecord.errors.LimitError) and "NumPy" in str(exc):
            return None
        raise Finding(f"a verified store failed a read: {exc!r}") from exc
    pos = {rec: k for k, rec in enumerate(readable)}
    for j, rec in enumerate(order):
        a, b = batch[j], single[pos[rec]]
        if a.shape != b.shape or a.tobytes() != b.tobytes():
            raise Finding(f"gather and indexing disagree at record {rec}")
    return single, order


def _check_read_paths(store: Any, path: str, readable: list[int], single: list[Any], order: list[int]) -> None:
    """Every read path must agree with the single reads: the hinted one (pread for every
    record, as for a cold batch) and, where the file system allows O_DIRECT, the one of
    cache="bypass"."""
    import numpy as np

    import zrecord

    if not order:
        return
    pos = {rec: k for k, rec in enumerate(readable)}
    idx = np.array(order, dtype=np.int64)
    store.prefetch(idx)
    store._handle.set_reads(2)
    others = [("hinted", store[idx])]
    try:
        bypass = zrecord.open_store(path, cache="bypass")
    except OSError:
        bypass = None
    if bypass is not None:
        with bypass:
            others.append(("bypass", bypass[idx]))
    for how, got in others:
        for j, rec in enumerate(order):
            a, b = got[j], single[pos[rec]]
            if a.shape != b.shape or a.tobytes() != b.tobytes():
                raise Finding(f"the {how} read and indexing disagree at record {rec}")


def exercise_cli(path: str) -> None:
    """The `zrecord` commands on the same store: each returns an exit status, never raises."""
    import contextlib
    import io

    from zrecord.cli import main as cli_main

    # The CLI decodes no record above --max-record-bytes, whatever the store declares.
    budget = str(READ_BUDGET_BYTES)
    for argv in (["info", path, "--json"], ["stats", path, "--json"],
                 ["head", path, "-n", "3", "--json", "--max-record-bytes", budget],
                 ["verify", path, "--json", "-q", "--max-record-bytes", budget]):
        sink = io.StringIO()
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            rc = cli_main(argv)
        # 0 ok, 1 not a valid store, 3 out of memory or not every record checked; never 2
        # (these arguments are valid) and never an interrupt or a closed pipe.
        if rc not in (0, 1, 3):
            raise Finding(f"zrecord {argv[0]} exited {rc}")


def run_input(path: str, rng: Any) -> str:
    """exercise() (and on one input in four the CLI) with every escape that is not a zrecord
    error turned into a Finding."""
    try:
        outcome, _ = exercise(path, rng)
        # The CLI bounds its own memory ([R1] item 7), so it runs whatever the record sizes.
        if rng.randrange(4) == 0:
            exercise_cli(path)
        return outcome
    except Finding:
        raise
    except MemoryError as exc:
        raise Finding(f"overallocation: {exc!r}") from exc
    except Exception as exc:  # noqa: BLE001 - anything else escaping the API is the finding
        raise Finding("unexpected exception: " + "".join(
            traceback.format_exception_only(type(exc), exc)).strip()) from exc


def limit_memory(extra_mb: int) -> None:
    """Cap the address space at its current size plus `extra_mb`."""
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    limit = vm + (extra_mb << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


# ---------------------------------------------------------------------------------------------
# the deterministic engine
# ---------------------------------------------------------------------------------------------


def input_rng(seed: int, i: int) -> random.Random:
    return random.Random(f"zrecord-fuzz:{seed}:{i}")


def _selftest(what: str) -> None:
    """Misbehave on purpose, so that tests can check that the supervisor catches each kind."""
    if what == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif what == "hang":
        time.sleep(3600)
    elif what == "memory":
        try:
            # Far more than --memory-mb: only the address-space limit makes this fail.
            bytearray(16 << 30)
        except MemoryError as exc:
            raise Finding(f"overallocation: {exc!r}") from exc


def _open_fds() -> set[str]:
    return {os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
            if os.path.exists(f"/proc/self/fd/{fd}")}


def worker(args: argparse.Namespace) -> int:
    """Run inputs i = first, first + stride, ... and report each on stdout."""
    import numpy  # noqa: F401 - imported before the memory limit is measured

    import zrecord  # noqa: F401

    corpus = load_corpus(args.corpus)
    limit_memory(args.memory_mb)
    out = sys.stdout
    i = args.first
    fds = _open_fds()
    selftest = os.environ.get("ZRECORD_FUZZ_SELFTEST")
    while True:
        rng = input_rng(args.seed, i)
        _, files, _ = make_input(corpus, rng)
        path = os.path.join(args.work, f"in-{i}")
        sm.write_store(path, files)
        out.write(f"B {i}\n")
        out.flush()
        try:
            if selftest and i % 50 == 7:
                _selftest(selftest)
            outcome = run_input(path, rng)
            # Every store was closed: a descriptor still open is a leak on some path.
            if _open_fds() != fds:
                raise Finding(f"file descriptors leaked: {sorted(_open_fds() - fds)}")
            out.write(f"E {i} {outcome}\n")
        except Finding as exc:
            out.write(f"F {i} {json.dumps(str(exc))}\n")
            fds = _open_fds()
        out.flush()
        shutil.rmtree(path)
        i += args.stride


def save_finding(findings: str, seed: int, i: int, kind: str, detail: str,
                 corpus: list[tuple[str, dict[str, bytes]]]) -> str:
    rng = input_rng(seed, i)
    name, files, ops = make_input(corpus, rng)
    dest = os.path.join(findings, f"{kind}-{seed}-{i}")
    shutil.rmtree(dest + ".store", ignore_errors=True)
    sm.write_store(dest + ".store", files)
    with open(dest + ".json", "w") as f:
        json.dump({"kind": kind, "detail": detail, "seed": seed, "input": i, "seed_store": name,
                   "mutations": ops, "replay": f"--replay {seed}:{i}"}, f, indent=1)
    return dest


def _scratch_root() -> str | None:
    """A memory-backed directory for the inputs if there is one: each input is a directory
    written and removed, which costs milliseconds on some disk file systems."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


def supervise(args: argparse.Namespace) -> int:
    """Run inputs in --jobs worker processes for --seconds, save each finding's store under
    --findings and print a summary; return 1 if there was any finding."""
    corpus_dir = args.corpus
    tmp = tempfile.mkdtemp(prefix="zrecord-fuzz-", dir=_scratch_root())
    if corpus_dir is None:
        from make_corpus import write_corpus

        corpus_dir = os.path.join(tmp, "corpus")
        write_corpus(corpus_dir)
    corpus = load_corpus(corpus_dir)
    os.makedirs(args.findings, exist_ok=True)
    deadline = time.monotonic() + args.seconds
    run = _Supervisor(args, tmp, corpus_dir, corpus)
    for slot in range(args.jobs):
        run.spawn(slot)
    try:
        run.watch(deadline)
    finally:
        for w in run.workers.values():
            w["proc"].kill()
            w["proc"].wait()
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps({"seconds": args.seconds, "execs": run.execs, "findings": len(run.findings),
                      "outcomes": dict(sorted(run.stats.items()))}, indent=1))
    for f in run.findings:
        print(f)
    return 1 if run.findings else 0


class _Supervisor:
    """The worker processes of one run of the deterministic engine, and what they reported:
    the inputs run (execs), the count of each outcome and the findings saved."""

    def __init__(self, args: argparse.Namespace, tmp: str, corpus_dir: str,
                 corpus: list[tuple[str, dict[str, bytes]]]) -> None:
        self.args = args
        self.tmp = tmp
        self.corpus_dir = corpus_dir
        self.corpus = corpus
        self.workers: dict[int, dict[str, Any]] = {}
        self.next_first = 0
        self.stats: dict[str, int] = {}
        self.findings: list[str] = []
        self.execs = 0

    def spawn(self, slot: int) -> None:
        """Start a worker in `slot`, on its own work folder."""
        args = self.args
        work = os.path.join(self.tmp, f"w{slot}-{self.next_first}")
        os.mkdir(work)
        # Each worker restarts at a fresh block of inputs so that a restart never repeats one.
        first = self.next_first
        self.next_first += 1 << 32
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--seed", str(args.seed),
               "--first", str(args.start + first), "--stride", "1", "--corpus", self.corpus_dir,
               "--work", work, "--memory-mb", str(args.memory_mb)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        os.set_blocking(proc.stdout.fileno(), False)
        self.workers[slot] = {"proc": proc, "buf": b"", "current": None, "since": time.monotonic(),
                              "work": work}

    def finding(self, kind: str, i: int, detail: str) -> None:
        dest = save_finding(self.args.findings, self.args.seed, i, kind, detail, self.corpus)
        self.findings.append(f"{kind} input {self.args.seed}:{i}: {detail} -> {dest}.json")
        print(f"FINDING {self.findings[-1]}", flush=True)

    def watch(self, deadline: float) -> None:
        """Read the workers' reports and replace the workers that died or hung, until
        `deadline`; report progress every 30 s."""
        last_report = time.monotonic()
        while time.monotonic() < deadline:
            fds = {w["proc"].stdout.fileno(): slot for slot, w in self.workers.items()}
            ready, _, _ = select.select(list(fds), [], [], 0.5)
            now = time.monotonic()
            for fd in ready:
                self.read_reports(self.workers[fds[fd]], fd, now)
            for slot, w in list(self.workers.items()):
                self.reap(slot, w, now)
            if now - last_report > 30:
                last_report = now
                print(f"[{int(self.args.seconds - (deadline - now))} s] {self.execs} execs, "
                      f"{len(self.findings)} findings", flush=True)

    def read_reports(self, w: dict[str, Any], fd: int, now: float) -> None:
        """Read worker `w`'s lines: "B i" (input i begins), "E i outcome" (it ended) or
        "F i detail" (it was a finding)."""
        chunk = os.read(fd, 1 << 16)
        w["buf"] += chunk
        *lines, w["buf"] = w["buf"].split(b"\n")
        for line in lines:
            tag, num, *rest = line.decode().split(" ", 2)
            if tag == "B":
                w["current"], w["since"] = int(num), now
                continue
            self.execs += 1
            w["current"] = None
            if tag == "E":
                self.stats[rest[0]] = self.stats.get(rest[0], 0) + 1
            else:
                self.stats["FINDING"] = self.stats.get("FINDING", 0) + 1
                self.finding("finding", int(num), json.loads(rest[0]))

    def reap(self, slot: int, w: dict[str, Any], now: float) -> None:
        """Kill worker `w` if its input has run past --timeout; once it has exited, save the
        input it was running as a finding (hang, crash or exit) and start a new worker in
        `slot`."""
        proc = w["proc"]
        hung = w["current"] is not None and now - w["since"] > self.args.timeout
        if hung:
            proc.kill()
        rc = proc.poll()
        if rc is None and not hung:
            return
        rc = proc.wait()
        err = proc.stderr.read().decode(errors="replace")[-2000:]
        if w["current"] is not None:
            i = w["current"]
            kind = "hang" if hung else ("crash" if rc < 0 else "exit")
            self.execs += 1
            self.stats[kind.upper()] = self.stats.get(kind.upper(), 0) + 1
            why = f"signal {-rc}" if rc < 0 and not hung else f"rc {rc}"
            self.finding(kind, i, f"{why}; stderr: {err.strip()[-600:]}")
        else:
            print(f"worker exited unexpectedly (rc {rc}): {err}", file=sys.stderr)
        shutil.rmtree(w["work"], ignore_errors=True)
        self.spawn(slot)


def replay(args: argparse.Namespace) -> int:
    seed_text, i_text = args.replay.split(":")
    seed, i = int(seed_text), int(i_text)
    tmp = tempfile.mkdtemp(prefix="zrecord-replay-")
    corpus_dir = args.corpus
    if corpus_dir is None:
        from make_corpus import write_corpus

        corpus_dir = os.path.join(tmp, "corpus")
        write_corpus(corpus_dir)
    rng = input_rng(seed, i)
    name, files, ops = make_input(load_corpus(corpus_dir), rng)
    path = args.keep or os.path.join(tmp, "store")
    sm.write_store(path, files)
    print(f"input {seed}:{i} from {name}: {ops} at {path}", flush=True)
    limit_memory(args.memory_mb)
    print(run_input(path, rng))
    return 0


# ---------------------------------------------------------------------------------------------
# the atheris engine
# ---------------------------------------------------------------------------------------------


class _ProviderRandom:
    """The few random.Random methods the mutators use, drawn from libFuzzer's bytes."""

    def __init__(self, fdp: Any) -> None:
        self.fdp = fdp

    def randrange(self, n: int) -> int:
        return self.fdp.ConsumeIntInRange(0, n - 1) if n > 1 else 0

    def randbytes(self, n: int) -> bytes:
        got = self.fdp.ConsumeBytes(n)
        return got + bytes(n - len(got))


def run_atheris(args: argparse.Namespace, rest: list[str]) -> int:
    import atheris

    tmp = tempfile.mkdtemp(prefix="zrecord-atheris-")
    corpus_dir = args.corpus
    if corpus_dir is None:
        from make_corpus import write_corpus

        corpus_dir = os.path.join(tmp, "corpus")
        write_corpus(corpus_dir)
    corpus = load_corpus(corpus_dir)
    counter = [0]

    def one_input(data: bytes) -> None:
        rng = _ProviderRandom(atheris.FuzzedDataProvider(data))
        _, files, _ = make_input(corpus, rng)
        counter[0] += 1
        path = os.path.join(tmp, f"in-{counter[0]}")
        sm.write_store(path, files)
        try:
            run_input(path, random.Random(counter[0]))
        finally:
            shutil.rmtree(path)

    limit_memory(args.memory_mb)
    with atheris.instrument_imports():
        import zrecord  # noqa: F401
    atheris.Setup([sys.argv[0], f"-max_total_time={args.seconds}", f"-timeout={args.timeout}",
                   f"-rss_limit_mb={args.memory_mb + 1024}", *rest], one_input)
    atheris.Fuzz()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=["mutate", "atheris"], default="mutate")
    ap.add_argument("--seconds", type=int,
                    default=int(os.environ.get("ZRECORD_FUZZ_SECONDS", "60")),
                    help="how long to run (default $ZRECORD_FUZZ_SECONDS or 60)")
    ap.add_argument("--seed", type=int, default=int(os.environ.get("ZRECORD_FUZZ_SEED", "1")))
    ap.add_argument("--start", type=int, default=0, help="first input number")
    ap.add_argument("--jobs", type=int, default=max(1, min(2, os.cpu_count() or 1)))
    ap.add_argument("--timeout", type=int, default=20, help="seconds one input may take")
    ap.add_argument("--memory-mb", type=int, default=1024,
                    help="address space an input may add to the process (RLIMIT_AS)")
    ap.add_argument("--corpus", help="seed stores (default: written by make_corpus.py)")
    ap.add_argument("--findings", default=os.path.join(os.getcwd(), "fuzz-findings"))
    ap.add_argument("--replay", help="SEED:I: rebuild input I of run SEED and run it here")
    ap.add_argument("--keep", help="with --replay: write the input store here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--stride", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    args, rest = ap.parse_known_args(argv)
    if args.worker:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        return worker(args)
    if args.replay:
        return replay(args)
    if args.engine == "atheris":
        return run_atheris(args, rest)
    return supervise(args)


if __name__ == "__main__":
    sys.exit(main())
