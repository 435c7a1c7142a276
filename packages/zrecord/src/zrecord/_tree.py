"""What lies at a path that is not a store: the stores below a folder, and writes that never
finished (for ``zrecord info``).

Invariants of this module:
- The walk is bounded: at most `depth_max` levels below the folder and at most
  ``DIRECTORIES_MAX`` directories read; `truncated` says when the bound stopped it.
- Symbolic links are never followed, so the walk stays inside the tree and lists no store
  twice; links to directories are counted instead.
- A store's directory and a temporary directory are never entered, and neither are other
  hidden directories (``.git``, caches): zrecord and the converter make no hidden names but
  their temporaries.
- Whether a temporary's writer is alive is read from its lock ([ZR-PUB-006]): the writer holds
  an exclusive flock on ``<temporary>.lock`` for its whole life, so a lock that can be taken
  has no writer. The probe takes the lock without waiting and releases it at once; a writer
  that is creating the temporary already holds the lock by then (it locks before ``mkdir``),
  and a writer reaping stale temporaries that finds it held leaves the entry for later.
- Process ids are never read: they prove nothing across PID namespaces and NFS clients.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from dataclasses import dataclass, field
from typing import Any

from zrecord import _manifest
from zrecord._dataset import open_dataset
from zrecord._objects import is_url
from zrecord._paths import HEADER_NAME
from zrecord._reader import open_store
from zrecord._types import StorageOptions
from zrecord.errors import StoreOSError, ZrecordError

# The marker in a temporary's name after `.<name>` (zig/src/staging.zig, spec [ZR-PUB-001]).
TEMPORARY_MARKER = ".zr-tmp-"
LOCK_SUFFIX = ".lock"
INDEX_NAME = "index.zri"
# Directories a walk reads at most, whatever the depth allows (`zrecord info /` ends).
DIRECTORIES_MAX = 100_000
# Entries of one directory looked at when searching it for temporaries of one name.
SIBLINGS_MAX = 100_000

ALIVE, GONE, UNKNOWN = "alive", "gone", "unknown"
# What each state of an unfinished write tells a user who looked for the store (the CLI and
# `open` say the same).
WRITER_SAYS = {
    ALIVE: "its writer is alive: a writer is still writing it (a live process holds its "
           "lock), and the store appears when that writer's close() publishes it",
    GONE: "its writer is gone, so nothing will finish it (the next write of the same path "
          "removes it; one staged for an s3:// URL in a zrecord-create-* folder, the next "
          "create by URL staged beside that folder)",
    UNKNOWN: "whether its writer is alive cannot be told (it has no lock file to ask)",
}


def is_temporary_name(name: str) -> bool:
    """Whether `name` is a writer's temporary directory name, ``.<name>.zr-tmp-<suffix>``."""
    return (name.startswith(".") and TEMPORARY_MARKER in name[1:]
            and not name.endswith(LOCK_SUFFIX))


def writer_state(temporary: str) -> str:
    """``"alive"`` when the lock of temporary directory `temporary` is held, ``"gone"`` when
    it can be taken (its writer died), ``"unknown"`` without a lock file (another tool's
    temporary, or one whose writer had not locked yet) or where locks cannot be taken."""
    lock = temporary + LOCK_SUFFIX
    flags = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        # NFS maps flock onto byte-range locks, which need the file open for writing; a
        # read-only mount or a foreign file still allows the read-only attempt locally.
        fd = os.open(lock, os.O_RDWR | flags)
    except FileNotFoundError:
        return UNKNOWN
    except OSError:
        try:
            fd = os.open(lock, os.O_RDONLY | flags)
        except OSError:
            return UNKNOWN
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return UNKNOWN
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        return ALIVE if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN) else UNKNOWN
    finally:
        os.close(fd)  # releases the lock if it was taken
    return GONE


def unfinished_writes(path: str) -> list[tuple[str, str]]:
    """(temporary directory, writer state) of every unfinished write of `path`, a live one
    first: a live writer is the news, the store may appear soon."""
    writes = [(t, writer_state(t)) for t in temporaries_of(path)]
    return sorted(writes, key=lambda w: w[1] != ALIVE)


def temporaries_of(path: str) -> list[str]:
    """The temporary directories a writer of `path` made beside it (``.NAME.zr-tmp-*``),
    sorted; empty when the parent cannot be read."""
    parent, name = os.path.split(os.path.normpath(path))
    prefix = "." + name + TEMPORARY_MARKER
    found: list[str] = []
    try:
        with os.scandir(parent or ".") as entries:
            for k, entry in enumerate(entries):
                if k >= SIBLINGS_MAX:
                    break
                if (entry.name.startswith(prefix) and is_temporary_name(entry.name)
                        and entry.is_dir(follow_symlinks=False)):
                    found.append(os.path.join(parent, entry.name))
    except OSError:
        return []
    return sorted(found)


def is_store_dir(path: str) -> bool:
    """Whether `path` holds a regular ``header.zrh`` (a published store, valid or not)."""
    try:
        return stat.S_ISREG(os.stat(os.path.join(path, HEADER_NAME), follow_symlinks=False).st_mode)
    except (OSError, ValueError):
        return False


def has_store_files(path: str) -> bool:
    """Whether `path` holds a store's index without its header (a store that lost it)."""
    return os.path.lexists(os.path.join(path, INDEX_NAME))


@dataclass
class Survey:
    """The stores, unfinished writes and problems found below a folder, paths relative to it."""

    stores: list[dict[str, Any]] = field(default_factory=list)
    unfinished: list[dict[str, Any]] = field(default_factory=list)
    # Stores that do not open and directories that cannot be read: path, error and the exit
    # status the problem calls for (1: not a valid store, 3: the system refused).
    problems: list[dict[str, Any]] = field(default_factory=list)
    # Folders holding a dataset's manifests that open as a dataset (its parts are among the
    # stores); one that does not open is a problem instead.
    datasets: list[str] = field(default_factory=list)
    links_not_followed: int = 0
    truncated: bool = False


def _disk_bytes(path: str) -> int:
    """Total size of the regular files in store directory `path` (a store is flat)."""
    total = 0
    with os.scandir(path) as entries:
        for entry in entries:
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total


def describe_store(path: str, storage_options: StorageOptions | None = None) -> dict[str, Any]:
    """A store's line of the table: kind, dtype, shape, records, codec and size on disk (for
    a URL, the caller's: listing it gives its objects' sizes)."""
    with open_store(path, storage_options=storage_options) as store:
        info = store.info()
    row = {"kind": info["kind"], "dtype": info["dtype"]}
    if info["kind"] == "Dense":
        row["item_shape"] = info["item_shape"]
    else:
        row["ndim"] = info["ndim"]
    row.update(records=info["records"], codec=info["codec"],
               disk_bytes=0 if is_url(path) else _disk_bytes(path))
    return row


# Names an s3:// folder's survey lists at most (a request lists LISTED_PAGE): beyond, the
# survey is truncated.
LISTED_PAGE = 1000
LISTED_NAMES_MAX = 100_000


def remote_survey(url: str, storage_options: StorageOptions | None, depth_max: int, *,
                  describe: bool = True) -> Survey:
    """`survey` of an s3:// prefix that is not a store: its stores (prefixes below it that
    hold header.zrh, at most `depth_max` levels down; none inside another), uploads that
    never finished (index.zri without header.zrh) and datasets, found by listing it (at most
    LISTED_NAMES_MAX names). A store's size is that of its objects."""
    from zrecord._objects import Client, storage_settings  # _objects imports nothing of this

    url = url.rstrip("/")  # the stores' URLs are url/rel
    client = Client(url, storage_settings(storage_options))
    found = Survey()
    sizes: dict[str, int] = {}
    kinds: dict[str, set[str]] = {"header": set(), "index": set(), "manifest": set()}
    after: str | None = None
    listed = 0
    while True:
        page = client.listed_sizes(LISTED_PAGE, after=after)
        for name, size in page:
            folder, _, base = name.rpartition("/")
            sizes[folder] = sizes.get(folder, 0) + size
            kind = ("header" if base == HEADER_NAME else "index" if base == INDEX_NAME
                    else "manifest" if _manifest.version_of(base) is not None else None)
            if kind is not None:
                kinds[kind].add(folder)
        listed += len(page)
        if len(page) < LISTED_PAGE:
            break
        if listed >= LISTED_NAMES_MAX:
            found.truncated = True
            break
        after = page[-1][0]
    stores = kinds["header"]

    def inside_a_store(rel: str) -> bool:
        parts = rel.split("/")
        return any("/".join(parts[:k]) in stores for k in range(len(parts)))

    for rel in sorted(stores):
        if not rel or inside_a_store(rel):
            continue
        if rel.count("/") >= depth_max:
            found.truncated = True
            continue
        try:
            row = (describe_store(f"{url}/{rel}", storage_options) | {"disk_bytes": sizes[rel]}
                   if describe else {})
            found.stores.append({"path": rel, **row})
        except (ZrecordError, OSError, MemoryError) as exc:
            found.problems.append(_problem(rel, exc))
    for rel in sorted(kinds["index"] - stores):
        if rel and not inside_a_store(rel):
            found.problems.append({"path": rel, "status": 1, "error": (
                f"has {INDEX_NAME} but no {HEADER_NAME}: not a published store (ZR-PUB-004): "
                "an upload that did not finish")})
    for rel in sorted(kinds["manifest"]):
        if rel and not inside_a_store(rel):
            _judge_dataset(found, f"{url}/{rel}", rel, storage_options)
    return found


def _problem(rel: str, exc: BaseException) -> dict[str, Any]:
    runtime = isinstance(exc, (MemoryError, StoreOSError)) or (
        isinstance(exc, OSError) and not isinstance(exc, ZrecordError))
    return {"path": rel, "error": str(exc), "status": 3 if runtime else 1}


def _judge_dataset(found: Survey, path: str, rel: str,
                   storage_options: StorageOptions | None = None) -> None:
    """A folder holding manifests: its latest version opened, every part checked against its
    entry (spec §12.4), as a dataset (else a problem, with the dataset's error)."""
    try:
        open_dataset(path, storage_options=storage_options).close()
    except (ZrecordError, OSError, MemoryError, ValueError) as exc:
        found.problems.append(_problem(rel, exc))
        return
    found.datasets.append(rel)


def survey(root: str, depth_max: int, *, describe: bool = True) -> Survey:
    """Walk folder `root` (which is not a store) at most `depth_max` levels deep; with
    `describe`, open each store found for its line of the table (else only its path)."""
    found = Survey()
    pending = [("", 0)]  # (path relative to root, depth); depth-first, in name order
    read = 0
    while pending:
        rel, depth = pending.pop()
        if read >= DIRECTORIES_MAX:
            found.truncated = True
            break
        read += 1
        here = os.path.join(root, rel) if rel else root
        children: list[str] = []
        manifests = False
        try:
            with os.scandir(here) as entries:
                for entry in entries:
                    if entry.is_symlink():
                        found.links_not_followed += entry.is_dir(follow_symlinks=True)
                    elif entry.is_dir(follow_symlinks=False):
                        children.append(entry.name)
                    elif _manifest.version_of(entry.name) is not None:
                        manifests = True
        except OSError as exc:
            if not rel:
                raise  # the folder asked about cannot be read: the caller says so
            found.problems.append(_problem(rel, exc))
            continue
        if manifests:
            _judge_dataset(found, here, rel or ".")
        deeper: list[tuple[str, int]] = []
        for name in sorted(children):
            child_rel = os.path.join(rel, name) if rel else name
            child = os.path.join(root, child_rel)
            if is_temporary_name(name):
                found.unfinished.append({"path": child_rel, "writer": writer_state(child)})
            elif name.startswith("."):
                continue
            elif is_store_dir(child):
                try:
                    row = describe_store(child) if describe else {}
                    found.stores.append({"path": child_rel, **row})
                except (ZrecordError, OSError, MemoryError) as exc:
                    found.problems.append(_problem(child_rel, exc))
            elif has_store_files(child):
                found.problems.append({"path": child_rel, "status": 1, "error": (
                    f"has {INDEX_NAME} but no {HEADER_NAME}: not a published store (ZR-PUB-004)")})
            elif depth + 1 < depth_max:
                deeper.append((child_rel, depth + 1))
            else:
                found.truncated = True
        pending.extend(reversed(deeper))
    return found
