"""The storage device's own limits, measured beside the libraries in the same run.

A write or cold-read figure means little alone: the same library reads 700 MiB/s from one disk
and 90 from another. Every disk benchmark therefore reports the device's ceiling next to its
rows, measured in the same folder a few seconds apart:

- sequential write bandwidth: 4 MiB O_DIRECT writes (then fsync), the most a durable writer
  can reach;
- random read IOPS and bandwidth at a given block size and queue depth, O_DIRECT (no page
  cache): the most a cold gather can reach (`rand_read`, or `rand_read_depths` for a sweep
  of queue depths over one file);
- the block device's queue settings that shape buffered reads (`queue_settings`): readahead
  decides how much a page fault or a small read really fetches.

fio (Debian package `fio`) is used when it is on PATH; otherwise a probe of our own with the
same access pattern (O_DIRECT, aligned buffers; queue depth through threads). The result says
which tool measured it. `device_ceilings` (once per run) and `device_write_ceiling` (before
every round) are what the store benchmarks report beside their writes.
"""

from __future__ import annotations

import json
import mmap
import os
import shutil
import subprocess
import tempfile
import threading
import time
from typing import Any

ALIGN = 4096


def work_folder(path: str) -> str:
    """A --tmp argument: the folder, made (with its parents) if it does not exist yet."""
    os.makedirs(path, exist_ok=True)
    return path


def fs_type(path: str) -> str:
    """The file system type holding `path` (ext4, xfs, tmpfs, ...), from /proc/mounts."""
    real = os.path.realpath(path)
    best, kind = "", "unknown"
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and (real == parts[1] or real.startswith(parts[1].rstrip("/") + "/")):
                    if len(parts[1]) >= len(best):
                        best, kind = parts[1], parts[2]
    except OSError:
        pass
    return kind


def is_page_cache_only(path: str) -> bool:
    """True on file systems that live in memory (writes and reads never reach a device)."""
    return fs_type(path) in ("tmpfs", "ramfs")


def _fio(args: list[str]) -> dict[str, Any] | None:
    if shutil.which("fio") is None:
        return None
    out = subprocess.run(["fio", "--output-format=json", *args], capture_output=True, text=True)
    if out.returncode != 0:
        return None
    return json.loads(out.stdout[out.stdout.index("{"):])  # type: ignore[no-any-return]


def seq_write(folder: str, size_mib: int = 1024) -> dict[str, Any]:
    """Sequential 4 MiB O_DIRECT writes of `size_mib` then fsync: MiB/s."""
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        res = _fio(["--name=seqwrite", f"--directory={tmp}", "--rw=write", "--bs=4M",
                    f"--size={size_mib}M", "--direct=1", "--ioengine=libaio", "--iodepth=8",
                    "--end_fsync=1"])
        if res is not None:
            job = res["jobs"][0]["write"]
            return {"tool": "fio", "mib_s": job["bw_bytes"] / 2**20}
        return {"tool": "probe", "mib_s": _probe_seq_write(os.path.join(tmp, "probe"), size_mib)}


def _aligned(nbytes: int) -> mmap.mmap:
    return mmap.mmap(-1, nbytes)  # anonymous maps are page aligned


def _probe_seq_write(path: str, size_mib: int) -> float:
    block = 4 << 20
    buf = _aligned(block)
    buf.write(os.urandom(block))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
    try:
        t = time.perf_counter()
        for i in range(size_mib // 4):
            os.pwrite(fd, buf, i * block)
        os.fsync(fd)
        return size_mib / (time.perf_counter() - t)
    finally:
        os.close(fd)
        os.unlink(path)


def rand_read(path: str, block_bytes: int, depth: int, seconds: float = 3.0) -> dict[str, Any]:
    """Random O_DIRECT reads of `block_bytes` (rounded up to 4 KiB) at queue depth `depth`
    from the file `path`: IOPS and MiB/s."""
    bs = max(ALIGN, -(-block_bytes // ALIGN) * ALIGN)
    res = _fio(["--name=randread", f"--filename={path}", "--rw=randread", f"--bs={bs}",
                "--direct=1", "--ioengine=libaio", f"--iodepth={depth}", "--time_based",
                f"--runtime={seconds}", "--norandommap"])
    if res is not None:
        job = res["jobs"][0]["read"]
        return {"tool": "fio", "block_bytes": bs, "depth": depth, "iops": job["iops"],
                "mib_s": job["bw_bytes"] / 2**20}
    return _probe_rand_read(path, bs, depth, seconds)


def _probe_rand_read(path: str, bs: int, depth: int, seconds: float) -> dict[str, Any]:
    """Queue depth by `depth` threads, each issuing one O_DIRECT pread at a time."""
    size = os.path.getsize(path) // bs * bs
    counts = [0] * depth
    stop = time.perf_counter() + seconds

    def worker(k: int) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        buf = _aligned(bs)
        rng = __import__("random").Random(k)
        try:
            while time.perf_counter() < stop:
                os.preadv(fd, [buf], rng.randrange(size // bs) * bs)
                counts[k] += 1
        finally:
            os.close(fd)

    t = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(depth)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    dt = time.perf_counter() - t
    iops = sum(counts) / dt
    return {"tool": "probe", "block_bytes": bs, "depth": depth, "iops": iops,
            "mib_s": iops * bs / 2**20}


def rand_read_depths(path: str, block_bytes: int, depths: tuple[int, ...] = (1, 8, 32, 128),
                     seconds: float = 3.0) -> dict[str, Any]:
    """`rand_read` at each queue depth over the same file, one after the other:
    {"tool", "block_bytes", "file_bytes", "depths": {depth: {"iops", "mib_s"}}}."""
    runs = [rand_read(path, block_bytes, d, seconds) for d in depths]
    return {"tool": ",".join(sorted({r["tool"] for r in runs})), "block_bytes": runs[0]["block_bytes"],
            "file_bytes": os.path.getsize(path),
            "depths": {str(r["depth"]): {"iops": r["iops"], "mib_s": r["mib_s"]} for r in runs}}


def queue_settings(path: str) -> dict[str, Any]:
    """The block device under `path` and its queue settings (read_ahead_kb, rotational,
    max_sectors_kb, scheduler), from sysfs; empty where the file system has no block device
    of its own (tmpfs, overlay)."""
    dev = os.stat(path).st_dev
    base = f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}"
    if not os.path.isdir(base):
        return {}
    queue = os.path.join(base, "queue")
    if not os.path.isdir(queue):  # a partition: the queue belongs to its disk
        queue = os.path.join(base, "..", "queue")
    out: dict[str, Any] = {"device": os.path.basename(os.path.realpath(base))}
    for name in ("read_ahead_kb", "rotational", "max_sectors_kb", "scheduler"):
        try:
            with open(os.path.join(queue, name)) as f:
                text = f.read().strip()
        except OSError:
            continue
        out[name] = int(text) if text.isdigit() else text
    return out


def device_write_ceiling(folder: str) -> float | None:
    """The device's sequential write bandwidth under `folder` now (MiB/s); None on tmpfs."""
    if is_page_cache_only(folder):
        return None
    os.sync()
    return float(seq_write(folder)["mib_s"])


def device_ceilings(folder: str) -> dict[str, Any]:
    """The file system of the store folder and its device's sequential write bandwidth, once
    at the start of the run (each round measures it again: common.peers.measure_rounds)."""
    kind = fs_type(folder)
    out: dict[str, Any] = {"folder": folder, "fs": kind,
                           "page_cache_only": is_page_cache_only(folder)}
    if not out["page_cache_only"]:
        out["seq_write"] = seq_write(folder)
    return out
