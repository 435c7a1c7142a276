"""The files and folders of remote stores' mirrors (``_remote``), on the local disk: opened
without following links, relative to their folder's descriptor, and checked to be what the
mirror made; names made beside them with a lock that tells a live maker from a dead one.

Invariants of this module:
- No file or folder is opened through a symbolic link (O_NOFOLLOW, ``dir_fd``): one that is a
  link, another kind of file, another user's, linked twice or of another size is ``Damaged``,
  and the mirror that holds it is set aside and made again (``discard``).
- A name made beside mirrors (``locked_name``) has its lock, ``<name>.lock``, made and held
  (flock) before the name exists, until it is gone: a lock nobody holds is a dead process's,
  and ``reap`` removes what it left.
- Removing never follows a link (``remove``: rmtree's descriptor-based walk).
"""

from __future__ import annotations

import contextlib
import errno as _errno
import fcntl
import os
import shutil
import stat
import tempfile
import uuid
import weakref
from collections.abc import Callable

# Names made beside mirrors: a private mirror's folder in TMPDIR, and a mirror being made or set
# aside in its folder. Each has a lock beside it, `<name>.lock`, held (flock) by its maker from
# before the name exists until it is gone: one that can be taken is a dead process's (reap).
PRIVATE_PREFIX = "zrecord-remote-"
BUILD_PREFIX = ".zrecord-build-"
ASIDE_PREFIX = ".zrecord-gone-"
LOCK_SUFFIX = ".lock"
# Entries of a folder looked at when searching it for leftovers (TMPDIR can be large).
REAP_ENTRIES_MAX = 100_000
# What read_all reads at once.
_READ_BYTES = 1 << 20
# How the mirror opens its files and folders: never through a link, never inherited across exec,
# never waiting on a FIFO put in a file's place.
NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
NEW_FILE = os.O_RDWR | os.O_CREAT | os.O_EXCL | NOFOLLOW


class Damaged(Exception):
    """A mirror's file or folder is not what the mirror made: the mirror is set aside and made
    again from the store."""

    def __init__(self, ident: tuple[int, int], why: str) -> None:
        super().__init__(why)
        self.ident = ident  # the mirror's folder as found: discard sets aside only that one
        self.why = why


class Foreign(Exception):
    """A mirror's folder belongs to another user: never used, never removed."""

    def __init__(self, name: str, uid: int) -> None:
        super().__init__(name)
        self.name = name
        self.uid = uid


class Files:
    """The descriptors of one mirror's files (Mirror._open_placed); close() closes those not
    handed on (the shards' to the mirror, lru.u64's to its budget)."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.store: int | None = None
        self.index: int | None = None
        self.sums: int | None = None
        self.parts: int | None = None
        self.present: int | None = None
        self.lru: int | None = None
        self.shards: dict[int, int] = {}

    def close(self) -> None:
        for fd in (self.root, self.store, self.index, self.sums, self.parts, self.present, self.lru,
                   *self.shards.values()):
            if fd is not None:
                os.close(fd)
        self.shards = {}


class PrivateFolder:
    """A reader's private mirror folder, ``zrecord-remote-<hex>`` in TMPDIR (or `prefix<hex>`
    in `base`: write_dataset's staging folder), with its lock beside it (locked_name) held for
    the reader's life: the folder of a reader that died without close() (SIGKILL, a crash) is
    removed by the next reader that makes a private folder there (reap). cleanup() removes it
    at close(); its _finalizer also does when the reader is dropped unclosed, or at exit, and
    Mirror._adopt detaches it in a forked child (the folder stays the parent's, whose lock the
    child's copy of the descriptor shares). Where the file system cannot lock (some network
    and FUSE mounts: flock fails with one of NO_LOCKS), the folder is made without a lock, and
    one left by a process that died stays there."""

    def __init__(self, base: str | None = None, prefix: str = PRIVATE_PREFIX,
                 before_reap: Callable[[str], object] | None = None) -> None:
        base = tempfile.gettempdir() if base is None else base
        base_fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        lock: int | None
        try:
            reap(base, base_fd, (prefix,), before_reap)
            try:
                name, lock = locked_name(base_fd, prefix)
            except OSError as exc:
                if exc.errno not in NO_LOCKS:
                    raise
                name, lock = os.path.basename(tempfile.mkdtemp(prefix=prefix, dir=base)), None
            else:
                try:
                    os.mkdir(name, 0o700, dir_fd=base_fd)
                except BaseException:
                    unlock(base_fd, name, lock)
                    raise
        finally:
            os.close(base_fd)
        self.name = os.path.join(base, name)
        self._finalizer = weakref.finalize(self, _remove_private, base, name, lock, os.getpid())

    def cleanup(self) -> None:
        self._finalizer()

    def keep(self) -> None:
        """Leave the folder for good (a store whose upload failed, which the user is told
        of): its lock is removed, so that no reaper takes it, and released."""
        detached = self._finalizer.detach()
        if detached is None:
            return
        _, _, (base, name, lock, _), _ = detached
        if lock is not None:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(base, name + LOCK_SUFFIX))
            os.close(lock)


def _remove_private(base: str, name: str, lock: int | None, pid: int) -> None:
    """Remove private folder `name` of folder `base`, then its lock, if any, then release
    that: in process `pid`, which made it; a forked child that exits only closes its copy of
    the lock's descriptor (the folder is its parent's)."""
    if os.getpid() != pid:
        if lock is not None:
            os.close(lock)
        return
    try:
        shutil.rmtree(os.path.join(base, name), ignore_errors=True)
        if lock is not None:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(base, name + LOCK_SUFFIX))
    finally:
        if lock is not None:
            os.close(lock)


# What flock raises where a file system cannot lock.
NO_LOCKS = {_errno.ENOLCK, _errno.EOPNOTSUPP, _errno.ENOTSUP, _errno.ENOSYS, _errno.EINVAL}


def locked_name(base_fd: int, prefix: str) -> tuple[str, int]:
    """A new name `<prefix><hex>` in folder `base_fd` and its lock `<name>.lock`, made and held
    (flock) before anything of that name exists, so that reap never takes a live one for a
    leftover. A reaper that took the lock between its creation and the flock removed it: then
    another name is drawn."""
    for _ in range(8):
        name = prefix + uuid.uuid4().hex
        lock = name + LOCK_SUFFIX
        fd = os.open(lock, NEW_FILE, 0o600, dir_fd=base_fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if ident_of(os.stat(lock, dir_fd=base_fd, follow_symlinks=False)) == ident_of(os.fstat(fd)):
                return name, fd
        except (BlockingIOError, FileNotFoundError):
            pass
        except BaseException:
            # A file system that cannot lock (ENOLCK, ENOTSUP): no lock file is left behind.
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(lock, dir_fd=base_fd)
            raise
        os.close(fd)
    raise OSError(_errno.EAGAIN, "no lock of a new name could be taken (other processes took each)")


def unlock(base_fd: int, name: str, lock: int) -> None:
    """Remove the lock of `name` (locked_name), then release it."""
    with contextlib.suppress(OSError):
        os.unlink(name + LOCK_SUFFIX, dir_fd=base_fd)
    os.close(lock)


def reap(base: str, base_fd: int, prefixes: tuple[str, ...],
         before: Callable[[str], object] | None = None) -> None:
    """Remove what processes that died left in folder `base`: each `<prefix><hex>` whose lock,
    `<name>.lock`, is this user's and held by nobody, then the lock; `before(path)` first,
    while the lock is held (an OSError from it keeps the folder for a later reaper). Best
    effort: what cannot be removed now stays for a later reaper."""
    try:
        with os.scandir(base_fd) as entries:
            locks = [e.name for _, e in zip(range(REAP_ENTRIES_MAX), entries)
                     if e.name.startswith(prefixes) and e.name.endswith(LOCK_SUFFIX)]
    except OSError:
        return
    for lock in locks:
        try:
            fd = os.open(lock, os.O_RDWR | NOFOLLOW, dir_fd=base_fd)
        except OSError:
            continue
        try:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                # Still the lock of that name: one removed and released since this opened it
                # (a folder kept, PrivateFolder.keep) is not a leftover's (FileNotFoundError,
                # or another file there, leaves it).
                if ident_of(os.stat(lock, dir_fd=base_fd, follow_symlinks=False)) != ident_of(st):
                    continue
                if before is not None:
                    before(os.path.join(base, lock[:-len(LOCK_SUFFIX)]))
                remove(base, base_fd, lock[:-len(LOCK_SUFFIX)])
                os.unlink(lock, dir_fd=base_fd)
        except OSError:
            pass  # held (a live process's), or gone meanwhile
        finally:
            os.close(fd)


def discard(base: str, base_fd: int, key: str, ident: tuple[int, int]) -> None:
    """Set mirror `key` aside and remove it: renamed first, so that no opener finds it half
    removed (readers that have it open read on from their descriptors); not when what is there
    is no longer what was found damaged (another opener made it again meanwhile)."""
    name, lock = locked_name(base_fd, ASIDE_PREFIX)
    try:
        try:
            if ident_of(os.stat(key, dir_fd=base_fd, follow_symlinks=False)) != ident:
                return
            os.rename(key, name, src_dir_fd=base_fd, dst_dir_fd=base_fd)
        except FileNotFoundError:
            return
        remove(base, base_fd, name)
    finally:
        unlock(base_fd, name, lock)


def remove(base: str, base_fd: int, name: str) -> None:
    """Remove `name` from folder `base`, whatever it is, never following a link (rmtree's
    descriptor-based walk); what cannot be removed stays."""
    try:
        st = os.stat(name, dir_fd=base_fd, follow_symlinks=False)
    except OSError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(os.path.join(base, name), ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=base_fd)


def ident_of(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def identity_of(st: os.stat_result) -> bytes:
    """A file's identity as the file system tells it (spec §9.5): any change to it, by any
    program, changes the size or the times of its last change of contents and of status."""
    return f"{st.st_dev} {st.st_ino} {st.st_size} {st.st_mtime_ns} {st.st_ctime_ns}\n".encode()


def open_dir(dir_fd: int, name: str, ident: tuple[int, int]) -> int:
    """Folder `name` of folder `dir_fd`, opened without following a link and checked (_checked)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno not in (_errno.ENOENT, _errno.ELOOP, _errno.ENOTDIR):
            raise
        raise Damaged(ident, f"its {name} is missing, a symbolic link or no folder") from None
    return _checked(fd, name, ident, stat.S_IFDIR)


def open_file(dir_fd: int, name: str, flags: int, ident: tuple[int, int], *,
               size: int | None = None) -> int:
    """File `name` of folder `dir_fd`, opened with `flags` without following a link and
    checked (_checked)."""
    try:
        fd = os.open(name, flags | NOFOLLOW, 0o600, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno not in (_errno.ENOENT, _errno.ELOOP, _errno.ENOTDIR, _errno.EISDIR, _errno.ENXIO):
            raise
        raise Damaged(ident, f"its {name} is missing, a symbolic link or no regular file") from None
    return _checked(fd, name, ident, stat.S_IFREG, size)


def _checked(fd: int, name: str, ident: tuple[int, int], kind: int, size: int | None = None) -> int:
    """`fd`, when it is a `kind` (stat.S_IFDIR or S_IFREG) of this user's, and a file with no
    other link and, when `size` is given, of that size: what the mirror made. Else Damaged
    (and `fd` closed)."""
    st = os.fstat(fd)
    why = ""
    if stat.S_IFMT(st.st_mode) != kind:
        why = "no folder" if kind == stat.S_IFDIR else "no regular file"
    elif st.st_uid != os.geteuid():
        why = f"another user's (uid {st.st_uid})"
    elif kind == stat.S_IFREG and st.st_nlink != 1:
        why = f"linked {st.st_nlink} times"
    elif size is not None and st.st_size != size:
        why = f"{st.st_size} bytes, not {size}"
    if why:
        os.close(fd)
        raise Damaged(ident, f"its {name} is {why}")
    return fd


def read_all(fd: int, size: int) -> bytes:
    parts, at = [], 0
    while at < size:
        chunk = os.pread(fd, min(size - at, _READ_BYTES), at)
        if not chunk:
            break
        parts.append(chunk)
        at += len(chunk)
    return b"".join(parts)


def read_small(dir_fd: int, name: str, ident: tuple[int, int]) -> bytes:
    """The first 4 KiB of file `name` of folder `dir_fd`, opened as open_file does."""
    fd = open_file(dir_fd, name, os.O_RDONLY, ident)
    try:
        return os.pread(fd, 4096, 0)
    finally:
        os.close(fd)


def write_new(dir_fd: int, name: str, data: bytes | bytearray) -> None:
    fd = os.open(name, NEW_FILE, 0o600, dir_fd=dir_fd)
    try:
        pwrite_all(fd, data, 0)
    finally:
        os.close(fd)


def pwrite_all(fd: int, data: bytes | bytearray | memoryview, at: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, at)
        view, at = view[n:], at + n
