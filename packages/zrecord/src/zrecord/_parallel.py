"""Writing a dataset with several processes: :func:`write_dataset`.

The inputs are cut into runs of ``inputs_per_part`` consecutive inputs, one part each; worker
processes take runs from a queue, call the user's function on each input of a run and append
what it returns to the run's part. The dataset's records are the inputs' records in input
order, whatever the number of workers: the same call with 1 or 8 workers writes the same
parts and so the same dataset digest.

Invariants of this module:
- Nothing is published until every part is: parts are written into a staging folder inside
  the dataset's (``.parts.zr-tmp-*``, locked for the run, so that the next run removes one
  whose writer died), moved into it once all are done, and only then is the
  manifest created. A failure of any input, of a worker or of the publishing removes the
  staging folder and the parts moved out of it, so a failed run publishes nothing and leaves
  nothing, and its error names the input (its position and repr) and carries the worker's
  traceback.
- The calling process is one of the writers: it takes runs from the back while ``workers - 1``
  worker processes take them from the front, so a small import is done before they have
  started; it also counts progress and publishes. A failure anywhere stops the workers at
  once (``_stop_workers``).
- What is published is version 1 of a new dataset, or the next version of the one that
  ``extend`` found, of the same schema: a dataset that another writer published at the path
  meanwhile is refused, never replaced by a later version number.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import json
import math
import multiprocessing
import os
import pickle
import queue
import re
import secrets
import shutil
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

import numpy as np

from zrecord._dataset import (
    dataset_versions,
    extend_dataset,
    latest_manifest,
    named_parts,
    publish_dataset,
)
from zrecord._dtypes import data_shards_value
from zrecord._kinds import Dense, Ragged
from zrecord._manifest import Schema
from zrecord._mirror_files import PrivateFolder
from zrecord._objects import is_url, redact
from zrecord._paths import store_location
from zrecord._publish import check_destination, publish_folder
from zrecord._types import StorageOptions
from zrecord.console import progress_bar
from zrecord.errors import (
    ImmutableStoreError,
    SchemaError,
    StoreExistsError,
    StoreOSError,
    WorkerError,
    ZrecordError,
)

# The staging folder of a run, with a hex name after it, locked beside it (`.lock`): a
# writer's temporary as `zrecord info` knows them (`.NAME.zr-tmp-`).
STAGING_PREFIX = ".parts.zr-tmp-"
# The staging folder of a run that uploads its parts (in cache_dir, or TMPDIR).
UPLOAD_STAGING_PREFIX = "zrecord-dataset-"
# Parts a dataset is cut into when the caller does not say (at most; fewer with fewer inputs).
PARTS_DEFAULT = 64
# How often a worker reports its inputs done to the parent's progress bar, at most (seconds).
# One report per input (a pickled message through a pipe, taken by the parent's drain thread
# while the parent writes parts of its own) held two workers importing 100,000 small inputs
# to 2.9 s, against 1.9 s with a report every tenth of a second (docs/benchmarks.md).
REPORT_SECONDS = 0.1


@dataclass(frozen=True)
class _Spec:
    """What each worker needs to write its parts (picklable)."""

    fn: Callable[[Any], Any]
    dtype: Any
    item_shape: tuple[int, ...] | None
    ndim: int | None
    codec: str
    data_shards: int
    dict_bytes: bytes | None
    sync: bool


class _InputFailed(Exception):
    """An input that raised in a worker: its position, its repr, the error and the worker's
    traceback (as args, so that it pickles back to the parent)."""

    def as_error(self) -> WorkerError:
        index, shown, error, trace = self.args
        out = WorkerError(f"input {index} ({shown}) failed: {error}; nothing was published.\n"
                          f"The worker's traceback:\n{trace}")
        out.input_index = index
        return out


# A worker's progress queue and the writing settings (set by _start_worker). The settings,
# the user's function among them, reach a worker as the initializer's arguments: inherited,
# not pickled, by a forked worker, so that a function defined in a notebook works there.
_progress: Any = None
_spec: _Spec | None = None


def _start_worker(progress: Any, spec: _Spec) -> None:
    global _progress, _spec
    _progress, _spec = progress, spec


def _start_child(progress: Any, spec: _Spec, parent: int) -> None:
    """A worker process's initializer: _start_worker, and a thread that ends the worker when
    the process that started it is gone (`_exit_with`)."""
    _start_worker(progress, spec)
    threading.Thread(target=_exit_with, args=(parent,), name="zrecord-parent-watch",
                     daemon=True).start()


def _exit_with(parent: int) -> None:
    """Exit at once when `parent`, the process that ran write_dataset, is gone: one killed
    (SIGKILL, the out-of-memory killer) cannot stop its workers, which went on idle forever,
    a forked one holding the lock of the run's staging folder, so that the next run took that
    folder's writer for alive and never removed it. Seen as this process's parent changing (a
    worker of "forkserver" has the fork server for a parent, which ends with the caller) and,
    on POSIX, as `parent` no longer existing."""
    start = os.getppid()
    while os.getppid() == start and _exists(parent):
        time.sleep(PARENT_POLL_S)
    os._exit(1)


def _exists(pid: int) -> bool:
    """Whether process `pid` exists (always True where that cannot be asked without harm:
    os.kill(pid, 0) ends the process on Windows)."""
    if os.name != "posix":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# How often a worker looks whether the process that started it is still there.
PARENT_POLL_S = 0.25


def _write_part_here(folder: str, name: str, first: int, inputs: Sequence[Any]) -> int:
    """`_write_part` in a worker, with the settings it was started with."""
    assert _spec is not None, "a worker writes only after _start_worker"
    return _write_part(_spec, folder, name, first, inputs)


class _Abandoned(Exception):
    """A part given up (`_write_part`'s `abandon` said so): another part failed."""


def _write_part(spec: _Spec, folder: str, name: str, first: int, inputs: Sequence[Any],
                abandon: Callable[[], bool] | None = None) -> int:
    """Write the part `name` in `folder` from `inputs` (positions `first`...) and return its
    record count; _InputFailed for an input that raised (the part is not published), and
    _Abandoned when `abandon()`, asked every REPORT_SECONDS between inputs, says so."""
    path = os.path.join(folder, name)
    # A writer that cannot be made, or a part that cannot be published, fails as it is: no
    # input is to blame.
    writer = (Dense.create(path, spec.dtype, spec.item_shape or (), codec=spec.codec,  # type: ignore[arg-type]
                           data_shards=spec.data_shards, dict_bytes=spec.dict_bytes,
                           sync=spec.sync, index_cache=None)
              if spec.item_shape is not None else
              Ragged.create(path, spec.dtype, spec.ndim or 1, codec=spec.codec,  # type: ignore[arg-type]
                            data_shards=spec.data_shards, dict_bytes=spec.dict_bytes,
                            sync=spec.sync, index_cache=None))
    total = 0
    # Inputs and records done since the last report, and when the next report is due.
    done, done_records, due = 0, 0, time.monotonic() + REPORT_SECONDS
    with writer:  # an exception aborts the part: nothing of it is published
        for index, item in enumerate(inputs, first):
            try:
                records = _append(writer, spec, spec.fn(item))
            except _WriteFailed as failed:
                # The system refused the part's write (a full disk): no input is to blame.
                raise failed.error from None
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's function may raise anything
                # (sys.exit() included, which reached the caller as a bare SystemExit): reported
                # with its input. A Ctrl-C is not the input's doing and goes on as it is.
                shown = repr(item)
                raise _InputFailed(index, shown if len(shown) <= 200 else shown[:200] + "...",
                                   f"{type(exc).__name__}: {exc}", traceback.format_exc()) from None
            total += records
            done, done_records = done + 1, done_records + records
            if time.monotonic() >= due:
                if abandon is not None and abandon():
                    raise _Abandoned()
                if _progress is not None:
                    _progress.put((done, done_records))
                    done, done_records = 0, 0
                due = time.monotonic() + REPORT_SECONDS
    if _progress is not None and done:
        _progress.put((done, done_records))
    return total


class _WriteFailed(Exception):
    """The system refused a part's append (`error`, an OSError: a full disk, a quota): raised
    as it is, not as a failure of the input whose records were being written."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


def _put(writer: Any, records: Any) -> None:
    """`writer.append(records)`, its OSError as _WriteFailed (the records' own errors, a
    SchemaError for the wrong dtype, stay the input's)."""
    try:
        writer.append(records)
    except OSError as exc:
        raise _WriteFailed(exc) from None


def _append(writer: Any, spec: _Spec, out: Any) -> int:
    """Append what the user's function returned for one input; the records appended."""
    if out is None:
        return 0
    if spec.item_shape is not None and isinstance(out, np.ndarray):
        if out.ndim != len(spec.item_shape) + 1:
            raise SchemaError(f"fn returned an array of shape {out.shape} for a Dense dataset of "
                              f"item_shape {spec.item_shape}: return an array of shape "
                              f"(n, *item_shape) holding n records (one record x as x[None]), or "
                              "an iterable of records")
        _put(writer, out)
        return int(out.shape[0])
    if spec.item_shape is None and isinstance(out, np.ndarray) and out.ndim == spec.ndim:
        raise SchemaError(f"fn returned one array of shape {out.shape} for a Ragged dataset of "
                          f"ndim {spec.ndim}: return an iterable of records (one record x as "
                          "[x])")
    if spec.item_shape is not None:
        n = 0
        for record in out:
            _put(writer, np.asarray(record)[None])
            n += 1
        return n
    records = list(out)
    _put(writer, records)
    return len(records)


def _runs(count: int, per_part: int) -> list[tuple[int, int]]:
    return [(a, min(a + per_part, count)) for a in range(0, count, per_part)]


def write_dataset(path: Any, fn: Callable[[Any], Any], inputs: Iterable[Any], *, dtype: Any,
                  item_shape: Sequence[int] | None = None, ndim: int | None = None,
                  codec: str, workers: int = 1, inputs_per_part: int | None = None,
                  data_shards: int = 1, dict_bytes: bytes | None = None, sync: bool = True,
                  extend: bool = False, progress: bool = True, start_method: str = "spawn",
                  storage_options: StorageOptions | None = None) -> int:
    """Write a dataset at `path` (a local folder) from `fn` applied to each of `inputs`, with
    `workers` processes, and publish it; return the version published.

    ``fn(input)`` returns the input's records: for a Dense dataset (`item_shape` given) an
    array of shape ``(n, *item_shape)`` or an iterable of arrays of `item_shape`; for a Ragged
    one (`ndim` given) an iterable of arrays of rank `ndim`; None for none. The inputs are cut
    into parts of `inputs_per_part` consecutive inputs (default: so that there are at most 64
    parts); each part is a store with `codec`, `data_shards` and `dict_bytes`, and the
    dataset's records are in input order whatever `workers` is. With ``workers > 1`` the
    inputs must pickle, and with ``start_method="spawn"`` (the default) `fn` too (a function
    of a module, or of a script that calls this under ``if __name__ == "__main__":``);
    ``start_method="fork"`` (Linux) hands `fn` to the workers without pickling it (a function
    defined in a notebook).

    With ``workers > 1`` the calling process writes parts too (from the end of the inputs,
    while the worker processes start). If any input raises (``sys.exit()`` included), or a
    worker dies, the workers are stopped, nothing is published (a folder the run made is
    removed) and :class:`WorkerError` says which input (its position and repr) with the
    worker's traceback. A `path` inside a published store is refused
    (:class:`ImmutableStoreError`) before anything is made. A dataset that exists at `path` (or is published there
    by another writer meanwhile) is refused with :class:`StoreExistsError` unless `extend`,
    which publishes its next version: its parts, then the new ones, which must have its schema
    (:class:`SchemaError` before anything is written). `progress` shows inputs and records done
    on stderr.

    `path` may be an ``s3://bucket/prefix`` URL (`storage_options` as for
    :meth:`zrecord.Dense.open`): the parts are written in a private temporary folder (under
    ``storage_options["cache_dir"]`` when given), uploaded as :func:`zrecord.publish_folder`
    uploads stores, and the manifest is then created where none of that version exists; the
    local folder is removed either way. A failed upload publishes no version (parts already
    uploaded are stores no manifest names)."""
    items = list(inputs)
    if not items:
        raise ValueError("write_dataset needs at least one input")
    if (item_shape is None) == (ndim is None):
        raise ValueError("write_dataset takes item_shape (a Dense dataset) or ndim (a Ragged "
                         f"one), exactly one; got item_shape={item_shape!r}, ndim={ndim!r}")
    if not _positive_int(workers):
        raise ValueError(f"workers must be a positive int; got {workers!r}")
    if inputs_per_part is not None and not _positive_int(inputs_per_part):
        raise ValueError(f"inputs_per_part must be a positive int (or None: at most "
                         f"{PARTS_DEFAULT} parts); got {inputs_per_part!r}")
    per_part = inputs_per_part or math.ceil(len(items) / PARTS_DEFAULT)
    # The arguments are judged here, as the parts' writers will judge them, before anything
    # is made or any worker starts; an existing dataset must have this schema to be extended.
    schema = Schema.of_arguments(dtype, item_shape, ndim, codec, dict_bytes)
    data_shards = data_shards_value(data_shards)
    if workers > 1 and start_method not in multiprocessing.get_all_start_methods():
        raise ValueError(f"start_method must be one of {', '.join(multiprocessing.get_all_start_methods())} "
                         f"on this system; got {start_method!r}")
    made = _made_here(path, storage_options)
    try:
        return _write_and_publish(path, fn, items, schema, _runs(len(items), per_part),
                                  (dtype, ndim, codec, data_shards, dict_bytes, sync, extend,
                                   progress, start_method, workers), storage_options)
    except BaseException:
        # The folders this run made (the dataset's and any missing above it), empty again:
        # removed with the run, the deepest first; one that holds anything stays.
        for folder in made:
            try:
                os.rmdir(folder)
            except OSError:
                break
        raise


def _made_here(path: Any, storage_options: StorageOptions | None) -> list[str]:
    """The local folders that making `path` makes (it and its missing parents), deepest
    first; none for a URL or a folder that exists."""
    where = store_location(path, storage_options, role="the dataset")
    if is_url(where):
        return []
    made: list[str] = []
    folder = os.path.abspath(where)
    while not os.path.lexists(folder):
        made.append(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return made


def _write_and_publish(path: Any, fn: Callable[[Any], Any], items: list[Any], schema: Schema,
                       runs: list[tuple[int, int]], settings: tuple[Any, ...],
                       storage_options: StorageOptions | None) -> int:
    """write_dataset once its arguments have passed."""
    dtype, ndim, codec, data_shards, dict_bytes, sync, extend, progress, start_method, workers = settings
    folder = _destination(path, extend, storage_options, schema)
    spec = _Spec(fn, dtype, schema.item_shape, ndim, codec, data_shards, dict_bytes, sync)
    token = secrets.token_hex(4)
    cache_dir = (storage_options or {}).get("cache_dir")
    # Uploaded from there by publish_folder, which refuses a writer's temporary: a private
    # folder as a reader's mirror has, reaped alike. Locally, locked for the run: one a run
    # left when it died (SIGKILL, a crash) is shown by `zrecord info` as a write whose writer
    # is gone, and removed by the next run here.
    base, prefix = ((tempfile.gettempdir() if cache_dir is None else str(cache_dir),
                     UPLOAD_STAGING_PREFIX) if is_url(folder) else (folder, STAGING_PREFIX))
    try:
        staging = PrivateFolder(base, prefix, None if is_url(folder) else _remove_moved)
    except OSError as exc:
        if isinstance(exc, ZrecordError):
            raise
        raise StoreOSError(exc.errno or errno.EIO, f"cannot make the folder the parts are "
                           f"written in, in {base!r}: {exc.strerror or exc}; nothing was "
                           "written") from exc
    try:
        names = _write_parts(spec, staging.name, token, items, runs,
                             workers, progress, start_method, redact(folder))
        return _publish(folder, staging.name, names, extend, progress, storage_options)
    finally:
        staging.cleanup()


def _publish(folder: str, staging: str, names: list[str], extend: bool, progress: bool,
             storage_options: StorageOptions | None) -> int:
    """Move (or upload) the parts written in `staging` into the dataset and publish its
    version; a failure removes the parts moved that no manifest names (uploaded ones stay,
    as write_dataset's docstring says). A failure after the manifest was published (its
    folder not flushed) removes none: the version names them."""
    moved: list[str] = []
    try:
        if is_url(folder):
            publish_folder(staging, folder, storage_options=storage_options, progress=progress,
                           verify=False)
        else:
            # Journalled first: a run killed after moving parts, before the manifest names
            # them, leaves published stores that nothing names, which the next run here
            # removes as it removes this run's staging folder (_remove_moved).
            _write_journal(staging, names)
            for name in names:
                os.rename(os.path.join(staging, name), os.path.join(folder, name))
                moved.append(name)
        if extend and dataset_versions(folder, storage_options=storage_options):
            return extend_dataset(folder, names, storage_options=storage_options)
        # Version 1 exactly: a dataset another writer published here meanwhile is refused
        # (StoreExistsError), never published over with the next version number.
        return publish_dataset(folder, names, version=1, storage_options=storage_options)
    except BaseException:
        # Unreadable manifests (OSError): which parts they name cannot be told; all stay.
        with contextlib.suppress(OSError):
            _remove_unnamed(folder, moved)
        raise


# In a run's staging folder: the parts it moves into the dataset folder (a JSON list of names).
_JOURNAL = "moving.json"


def _write_journal(staging: str, names: list[str]) -> None:
    path = os.path.join(staging, _JOURNAL)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(names, f)
        f.flush()
        os.fsync(f.fileno())


def _remove_moved(staging: str) -> None:
    """Before the staging folder of a run that died is removed: the parts it had moved into
    the dataset folder (its journal) that no version of the dataset names, removed."""
    try:
        with open(os.path.join(staging, _JOURNAL), encoding="utf-8") as f:
            names = json.load(f)
    except FileNotFoundError:
        return  # it died before moving anything
    except ValueError:
        return  # a journal cut short: it died while writing it, before moving anything
    if isinstance(names, list):  # anything else is not a journal this module wrote
        # Unreadable manifests (OSError): the folder stays for a later reaper (reap keeps
        # what raises OSError).
        _remove_unnamed(os.path.dirname(staging), names)


def _remove_unnamed(folder: str, names: Iterable[object]) -> None:
    """The parts among `names` (write_dataset's part names) in the dataset folder `folder`
    that no version of it names, removed. OSError, nothing removed, when its manifests
    cannot be read: which parts they name cannot be told."""
    try:
        named = named_parts(folder)
    except (ZrecordError, ValueError) as exc:
        raise OSError(errno.EIO, f"the manifests of {folder!r} cannot be read ({exc})") from exc
    for name in names:
        if isinstance(name, str) and name not in named and _PART_NAME.fullmatch(name):
            shutil.rmtree(os.path.join(folder, name), ignore_errors=True)


# The names write_dataset gives its parts.
_PART_NAME = re.compile(r"part-[0-9a-f]{8}-[0-9]{5,}")


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _destination(path: Any, extend: bool, storage_options: StorageOptions | None,
                 schema: Schema) -> str:
    """The dataset's folder (made if missing) or s3:// prefix, once it is known that it may be
    written there: no web server, no dataset unless `extend`, and then one of `schema`."""
    where = store_location(path, storage_options, role="the dataset")
    url = is_url(where)
    if url and not where.startswith("s3://"):
        raise ValueError(f"write_dataset writes a local folder or an s3:// prefix; got "
                         f"{redact(where)!r}: a web server cannot be written to (write the "
                         "dataset locally and serve its folder)")
    folder = where if url else os.path.abspath(where)
    if url:
        # Inside a published store, a store itself, or being published to: refused now, not
        # after every input was written (publish_folder refused it only at the upload).
        check_destination(where, storage_options=storage_options, folder=True)
    else:
        store = _store_around(folder)
        if store is not None:
            raise ImmutableStoreError(errno.EROFS, f"{where!r} lies inside the published store "
                                      f"{store!r}: published stores are immutable and nothing "
                                      "is written inside one; write the dataset beside it")
        os.makedirs(folder, exist_ok=True)
    versions = dataset_versions(folder, storage_options=storage_options)
    if versions and not extend:
        raise StoreExistsError(f"{redact(where)!r} holds a dataset already: pass extend=True to "
                               "publish its next version with new parts, or write elsewhere")
    if versions:
        latest = latest_manifest(folder, storage_options)
        if latest.schema != schema:
            raise SchemaError(f"{redact(where)!r} holds a {latest.schema.describe()} dataset "
                              f"(version {latest.version}); these arguments write "
                              f"{schema.describe()} parts: the parts of a dataset share one "
                              "schema (nothing was written)")
    return folder


def _store_around(folder: str) -> str | None:
    """The published store that `folder` is, or lies inside (a folder above it holding
    header.zrh), else None."""
    at = folder
    while True:
        if os.path.isfile(os.path.join(at, "header.zrh")):
            return at
        parent = os.path.dirname(at)
        if parent == at:
            return None
        at = parent


def _write_parts(spec: _Spec, staging: str, token: str, items: list[Any],
                 runs: list[tuple[int, int]], workers: int, progress: bool, start_method: str,
                 shown: str) -> list[str]:
    """Write every run's part into `staging`; their names in order, or WorkerError. With
    `workers` > 1 this process is one of them: `workers - 1` processes take runs from the
    front, this one from the back, so a small import is done before they have started."""
    names = [f"part-{token}-{k:05d}" for k in range(len(runs))]
    with progress_bar(progress, len(items), f"{shown}: write", unit="inputs") as update:
        _start_worker(None, spec)
        if workers == 1 or len(runs) == 1:
            for k in range(len(runs)):
                _write_here(spec, staging, names[k], items, runs[k], update)
            return names
        context = multiprocessing.get_context(start_method)
        counts = context.Queue()
        stop = threading.Event()
        drain = threading.Thread(target=_drain, args=(counts, update, stop), daemon=True)
        children = min(workers, len(runs)) - 1
        finished = False
        try:
            with ProcessPoolExecutor(children, mp_context=context, initializer=_start_child,
                                     initargs=(counts, spec, os.getpid())) as pool:
                try:
                    _share(pool, children, spec, staging, names, items, runs, update, drain)
                except BaseException:
                    _stop_workers(pool)
                    raise
            finished = True
        except (pickle.PicklingError, AttributeError, TypeError) as exc:
            if "pickle" not in str(exc):
                raise
            what, advice = _unpicklable(spec, items, start_method)
            raise TypeError(f"write_dataset with workers={workers} and start_method="
                            f"{start_method!r} sends {'fn and ' if start_method != 'fork' else ''}"
                            f"the inputs to its workers, and {what} does not pickle ({exc}): "
                            f"{advice}") from exc
        finally:
            if finished:
                # The workers have exited, their reports are in the queue: all are counted.
                counts.put(None)
            else:
                # A worker stopped while it held the queue's lock would hold a put forever.
                stop.set()
            if drain.is_alive():
                drain.join()
    return names


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """End a failed run's workers now: the parts not begun are dropped, those being written
    are abandoned (their staging folder is removed), so that the error is raised at once, not
    after the parts queued to the workers have been written for nothing."""
    terminate = getattr(pool, "terminate_workers", None)  # Python 3.14
    if terminate is not None:
        terminate()
        return
    # Before 3.14, the pool's own table of its processes (which shutdown() clears).
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()


_FN_ADVICE = ("use a function of a module (a script calls write_dataset under `if __name__ == "
              "\"__main__\":`), or on Linux start_method=\"fork\" for a function defined in a "
              "notebook")
_INPUT_ADVICE = ("inputs are pickled whatever the start method: give inputs that pickle "
                 "(paths, numbers, tuples of them) and open what they name in fn, or workers=1")


def _unpicklable(spec: _Spec, items: list[Any], start_method: str) -> tuple[str, str]:
    """What of the run does not pickle, as a message says it (fn, sent to spawned workers,
    or the first input that does not), and what to do."""
    if start_method != "fork":
        try:
            pickle.dumps(spec.fn)
        except Exception:  # noqa: BLE001 - whatever pickling raises says the same
            return f"fn ({spec.fn!r})", _FN_ADVICE
    for index, item in enumerate(items):
        try:
            pickle.dumps(item)
        except Exception:  # noqa: BLE001 - as above
            shown = repr(item)
            return (f"input {index} ({shown if len(shown) <= 200 else shown[:200] + '...'})",
                    _INPUT_ADVICE)
    return "what it sends", f"{_FN_ADVICE}; {_INPUT_ADVICE}"


def _write_here(spec: _Spec, staging: str, name: str, items: list[Any], run: tuple[int, int],
                update: Callable[[int], object], abandon: Callable[[], bool] | None = None) -> None:
    """One run's part written by this process (given up, _Abandoned, when `abandon()`)."""
    a, b = run
    try:
        _write_part(spec, staging, name, a, items[a:b], abandon)
    except _InputFailed as exc:
        raise exc.as_error() from None
    update(b - a)


def _share(pool: ProcessPoolExecutor, children: int, spec: _Spec, staging: str, names: list[str],
           items: list[Any], runs: list[tuple[int, int]], update: Callable[[int], object],
           drain: threading.Thread) -> None:
    """The runs, shared between the pool's `children` (from the front, one queued for each
    beside the one it writes) and this process (from the back); the first failure found is
    raised and the runs not begun are dropped."""
    todo = collections.deque(range(len(runs)))
    in_flight: dict[Any, int] = {}
    while todo or in_flight:
        while todo and len(in_flight) < 2 * children:
            k = todo.popleft()
            a, b = runs[k]
            in_flight[pool.submit(_write_part_here, staging, names[k], a, items[a:b])] = k
        if not drain.is_alive() and drain.ident is None:
            # Started once the workers are (a forked worker must not inherit the queue's lock
            # held by a thread of the parent).
            drain.start()
        if todo:
            k = todo.pop()
            with contextlib.suppress(_Abandoned):  # a worker failed: its error is raised below
                _write_here(spec, staging, names[k], items, runs[k], update,
                            lambda: any(f.done() and not f.cancelled() and f.exception() is not None
                                        for f in in_flight))
            done = {f for f in in_flight if f.done()}
        else:
            done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
        failed = sorted((in_flight.pop(f), f.exception()) for f in done)
        failed = [(k, exc) for k, exc in failed if exc is not None]
        if failed:
            for other in in_flight:
                other.cancel()
            raise _worker_error(failed, runs)


def _worker_error(failed: list[tuple[int, BaseException | None]],
                  runs: list[tuple[int, int]]) -> BaseException:
    """What the parts that failed in the workers (part, its exception) raise here: an input's
    failure as it is; a dead worker as the inputs of the parts it broke (the one it was
    writing, and those queued to the pool then, which cannot be told apart)."""
    for _, exc in failed:
        if isinstance(exc, _InputFailed):
            return exc.as_error()
    broken = [k for k, exc in failed if isinstance(exc, BrokenProcessPool)]
    if broken:
        first, last = runs[broken[0]][0], runs[broken[-1]][1] - 1
        return WorkerError(f"a worker process died while writing inputs {first}..{last} ({failed[0][1]}); "
                           "nothing was published")
    exc = failed[0][1]
    assert exc is not None
    return exc


def _drain(counts: Any, update: Callable[[int], object], stop: threading.Event) -> None:
    """Count the inputs workers report done until told to stop (None in the queue, or `stop`
    set when the workers were ended)."""
    while not stop.is_set():
        try:
            item = counts.get(timeout=0.1)
        except queue.Empty:
            continue
        if item is None:
            return
        update(item[0])


__all__ = ["write_dataset"]
