"""Probes of the machine: what is in the page cache, what a process read, what memory a process
(or a process tree) holds, and memory cgroups that bound a child's memory, page cache included.

posix_fadvise(DONTNEED) eviction, mincore(2) residency, /proc/PID/io read_bytes, durable
writes (fsync of a tree), the PSS of a process tree (sampled in the background by `PeakPss`),
this process's memory, and memory cgroups. The device's own ceilings are common.device's.
Nothing here measures a store or a loader: the benchmarks call these around what they time.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import signal
import threading
import time
from typing import Any

import numpy as np

# -- the page cache ---------------------------------------------------------------------------


PAGE = mmap.PAGESIZE


def evict(paths: list[str]) -> None:
    """Drop the clean, unmapped page-cache pages of every file in `paths`."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


@functools.cache
def _libc() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long)
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte))
    return libc


def resident_bytes(paths: list[str]) -> int:
    """Bytes of `paths` in the page cache, by mincore(2) over a fresh mapping of each file.

    Mapping a file faults nothing in, and unmapping it leaves the cache as it was, so the
    probe changes nothing it measures.
    """
    libc, total = _libc(), 0
    for p in paths:
        size = os.path.getsize(p)
        if size == 0:
            continue
        fd = os.open(p, os.O_RDONLY)
        try:
            addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            if addr in (None, ctypes.c_void_p(-1).value):
                raise OSError(ctypes.get_errno(), f"mmap of {p} failed")
            try:
                vec = (ctypes.c_ubyte * ((size + PAGE - 1) // PAGE))()
                if libc.mincore(addr, size, vec) != 0:
                    raise OSError(ctypes.get_errno(), f"mincore of {p} failed")
                total += int((np.frombuffer(vec, np.uint8) & 1).sum()) * PAGE
            finally:
                libc.munmap(addr, size)
        finally:
            os.close(fd)
    return total


def percent_resident(paths: list[str]) -> float:
    return 100.0 * resident_bytes(paths) / max(1, sum(os.path.getsize(p) for p in paths))


def folder_files(path: str) -> list[str]:
    return [os.path.join(d, f) for d, _, files in os.walk(path) for f in sorted(files)]


# -- the memory of a process tree ------------------------------------------------------------


def tree_pids(pid: int) -> list[int]:
    """`pid` and its descendants, following the children of every thread (Grain, for one,
    starts its worker processes from a thread other than the main one)."""
    pids, seen = [pid], []
    while pids:
        p = pids.pop()
        if p in seen:
            continue
        seen.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    pids.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return seen


def tree_pss_bytes(pid: int) -> int:
    """Sum of Pss over `pid` and its descendants (`tree_pids`)."""
    total = 0
    for p in tree_pids(pid):
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                total += next(int(x.split()[1]) * 1024 for x in f if x.startswith("Pss:"))
        except (FileNotFoundError, ProcessLookupError, PermissionError, StopIteration):
            continue
    return total


class PeakPss:
    """Samples the process tree's PSS in a background thread; `peak` is the maximum seen."""

    def __init__(self, interval: float = 0.02) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self._thread.start()

    def _run(self, interval: float) -> None:
        me = os.getpid()
        while not self._stop.is_set():
            self.peak = max(self.peak, tree_pss_bytes(me))
            time.sleep(interval)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, tree_pss_bytes(os.getpid()))
        return self.peak


# -- device bytes read ------------------------------------------------------------------------


def read_bytes(pid: int | str = "self") -> int | None:
    """Bytes the process made the kernel fetch from storage (/proc/PID/io read_bytes:
    readahead included, page-cache hits excluded); None where the kernel does not say."""
    try:
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def tree_read_bytes(pid: int) -> int | None:
    values = [read_bytes(p) for p in tree_pids(pid)]
    return sum(v for v in values if v is not None) if any(v is not None for v in values) else None


# -- memory -----------------------------------------------------------------------------------


def mem_total_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/meminfo has no MemTotal")


def process_memory() -> dict[str, float]:
    """This process's RSS (anonymous and file-mapped parts) and PSS, in MiB; page-cache pages
    it has not mapped are in none of them."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key = line.split(":", 1)[0]
            if key in ("VmRSS", "RssAnon", "RssFile"):
                out[key.lower().replace("vm", "")] = int(line.split()[1]) / 1024
    with open("/proc/self/smaps_rollup") as f:
        out["pss"] = next(int(x.split()[1]) for x in f if x.startswith("Pss:")) / 1024
    return out


# -- memory cgroups ---------------------------------------------------------------------------


CGROUP_ROOT = "/sys/fs/cgroup"


def read_text(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


class CgroupUnavailable(RuntimeError):
    """Why this process cannot bound a child's memory with a cgroup of its own."""


def own_cgroup(version: str) -> str:
    """This process's memory cgroup as /proc/self/cgroup names it ("/": the root)."""
    for line in read_text("/proc/self/cgroup").splitlines():
        hier, ctrls, path = line.split(":", 2)
        if (version == "v1" and "memory" in ctrls.split(",")) or (version == "v2" and hier == "0"):
            return path
    return "/"


def cgroup_base() -> tuple[str, str]:
    """(version, folder): where a loader's memory cgroup can be made, checked by making and
    removing one. The folder is this process's own memory cgroup (on a host's shell, the
    root; in a container or a session's cgroup, that one), so that a loader stays inside
    whatever limits and accounting its parent has. Raises CgroupUnavailable with the reason."""
    if os.path.isfile(os.path.join(CGROUP_ROOT, "memory", "memory.limit_in_bytes")):
        version, mount = "v1", os.path.join(CGROUP_ROOT, "memory")
    elif "memory" in read_text(os.path.join(CGROUP_ROOT, "cgroup.controllers")).split():
        version, mount = "v2", CGROUP_ROOT
    else:
        raise CgroupUnavailable(f"no memory controller at {CGROUP_ROOT}/memory (cgroup v1) nor "
                                f"in {CGROUP_ROOT}/cgroup.controllers (v2)")
    base = os.path.join(mount, own_cgroup(version).lstrip("/"))
    if not os.path.isdir(base):  # a path of another cgroup namespace: the mount's root
        base = mount
    if version == "v2" and "memory" not in read_text(
            os.path.join(base, "cgroup.subtree_control")).split():
        raise CgroupUnavailable(f"the v2 cgroup {base} does not enable the memory controller "
                                "for its children (cgroup.subtree_control)")
    try:
        MemoryCgroup(version, base, "probe", 1 << 30).remove()
    except OSError as exc:
        raise CgroupUnavailable(f"cannot make a memory cgroup in {base}: {exc}") from exc
    return version, base


class MemoryCgroup:
    """A memory cgroup of one loader's process tree, with a limit on what its processes may
    hold, page cache included. At the limit the kernel reclaims the group's own pages, file
    pages that a process has mapped as well (which posix_fadvise(DONTNEED) never evicts), so
    the page cache a loader can keep is bounded whatever way it reads.

    `command` wraps a command line so that its process enters the group before it execs the
    command: all that it and its children then allocate or bring into the page cache is
    charged to the group. `remove` (also on leaving a with block) kills what is left in the
    group (only this benchmark's processes) and removes it.
    """

    def __init__(self, version: str, base: str, name: str, limit: int) -> None:
        self.version = version
        self.path = os.path.join(base, f"zr-bench-{os.getpid()}-{name}")
        os.mkdir(self.path)
        try:
            limit_file = "memory.limit_in_bytes" if version == "v1" else "memory.max"
            with open(os.path.join(self.path, limit_file), "w") as f:
                f.write(str(limit))
        except OSError:
            self.remove()
            raise

    def __enter__(self) -> MemoryCgroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def command(self, cmd: list[str]) -> list[str]:
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"',
                os.path.join(self.path, "cgroup.procs"), *cmd]

    def usage_file(self) -> str:
        """The file that says what the group is charged now."""
        return os.path.join(self.path, "memory.usage_in_bytes" if self.version == "v1"
                            else "memory.current")

    def stats(self) -> dict[str, int]:
        """peak (bytes charged at most; absent where a v2 kernel lacks memory.peak), limit_hits
        (v1: charges that met the limit; v2: memory.events max) and oom_kills."""
        def fields(name: str) -> dict[str, int]:
            pairs = (line.split() for line in read_text(os.path.join(self.path, name)).splitlines())
            return {p[0]: int(p[1]) for p in pairs if len(p) == 2 and p[1].isdigit()}

        def number(name: str) -> int | None:
            text = read_text(os.path.join(self.path, name)).strip()
            return int(text) if text.isdigit() else None

        if self.version == "v1":
            out = {"peak": number("memory.max_usage_in_bytes"),
                   "limit_hits": number("memory.failcnt"),
                   "oom_kills": fields("memory.oom_control").get("oom_kill")}
        else:
            events = fields("memory.events")
            out = {"peak": number("memory.peak"), "limit_hits": events.get("max"),
                   "oom_kills": events.get("oom_kill")}
        return {k: v for k, v in out.items() if v is not None}

    def remove(self) -> None:
        """Kill the processes left in the group, then remove it (rmdir waits for the kernel
        to let go of them)."""
        deadline = time.monotonic() + 10
        while True:
            pids = [int(p) for p in read_text(os.path.join(self.path, "cgroup.procs")).split()]
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:  # EBUSY while a process is still on its way out
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
