"""The write pass's extraction (decoding images and audio, flattening lists) in worker processes.

``convert(..., workers=N)`` with N > 1: N worker processes turn the batches of a split into
records, and this process writes them, in order, as one store per column. What a worker runs
is the same ``extract`` of the same readers (their check-pass state sent to each worker once),
so the stores are byte for byte those of ``workers=1``: the number of workers changes the time
a conversion takes, never its result.

Invariants:
- A worker is this interpreter running ``serve`` (``python -c``), fed through two pipes of its
  own: it never imports the caller's ``__main__``, so a script without an ``if __name__ ==
  "__main__"`` guard, or a notebook, converts with workers as it does without (the
  multiprocessing start methods other than fork import ``__main__`` again in each child).
- Batch k goes to worker k mod N and results are read back in batch order. At most
  ``IN_FLIGHT`` batches per worker are handed out and not yet read back (each bounded by the
  converter's batch byte target), so memory stays bounded by the batch, not by the dataset.
  A worker drains its pipe on a thread of its own, so a batch sent to it never waits for a
  result it is writing back.
- A batch travels as Arrow IPC bytes of its rows only (a slice of a memory-mapped table
  pickles with its whole buffers; IPC writes the slice), and comes back as the records the
  writer appends.
- An error raised while extracting is raised here as it was raised there (its class and
  message; the worker's traceback is its ``__cause__``); a worker that dies (killed, out of
  memory) is a :class:`WorkerError` naming the rows it held. Either way nothing is published
  (the caller discards its staging folder), and every worker is gone when the call returns.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import os
import pickle
import queue
import signal
import struct
import subprocess
import sys
import threading
import traceback
from collections.abc import Iterator
from typing import Any, BinaryIO

import pyarrow as pa

from loaderx_converter.errors import WorkerError

# Batches handed to one worker and not yet read back.
IN_FLIGHT = 2
# How long a worker may take to leave once its input is closed, before it is killed.
_EXIT_WAIT_S = 10.0
_LENGTH = struct.Struct("<Q")


def column_of(table: pa.Table, name: str) -> pa.Array:
    """One column of a batch as a single Arrow array."""
    col = table.column(name)
    return col.chunk(0) if col.num_chunks == 1 else pa.concat_arrays(col.chunks)


def extract(readers: dict[str, Any], plans: dict[str, Any], columns: list[str], table: pa.Table,
            row0: int) -> dict[str, Any]:
    """The records of every column of one batch (rows from `row0`), as the writers append them."""
    return {c: readers[c].extract(column_of(table, c), plan=plans[c], row0=row0) for c in columns}


def _to_bytes(table: pa.Table) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def _send(pipe: BinaryIO, message: Any) -> None:
    data = pickle.dumps(message, protocol=5)
    pipe.write(_LENGTH.pack(len(data)))
    pipe.write(data)
    pipe.flush()


def _receive(pipe: BinaryIO) -> Any:
    """The next message, or None at the end of the stream (or a stream cut short)."""
    head = pipe.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    (size,) = _LENGTH.unpack(head)
    data = pipe.read(size)
    return pickle.loads(data) if len(data) == size else None


def serve(read_fd: int, write_fd: int) -> None:
    """A worker's life, until its input ends: ("split", readers, plans, columns) says what
    the batches that follow are; each ("batch", first row, Arrow IPC bytes) is answered with
    ("ok", records by column) or ("error", the exception, the traceback's text)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the caller's Ctrl-C ends the caller, which ends us
    source, sink = os.fdopen(read_fd, "rb"), os.fdopen(write_fd, "wb")
    tasks: queue.Queue[Any] = queue.Queue()

    def drain() -> None:
        while (task := _receive(source)) is not None:
            tasks.put(task)
        tasks.put(None)
    threading.Thread(target=drain, daemon=True).start()
    readers: dict[str, Any] = {}
    plans: dict[str, Any] = {}
    columns: list[str] = []
    while (task := tasks.get()) is not None:
        if task[0] == "split":
            _, readers, plans, columns = task
            continue
        try:
            table = pa.ipc.open_stream(task[2]).read_all()
            reply: tuple[Any, ...] = ("ok", extract(readers, plans, columns, table, task[1]))
        except Exception as exc:  # noqa: BLE001 - sent back and raised by the caller
            reply = ("error", _portable(exc), traceback.format_exc())
        try:
            _send(sink, reply)
        except BrokenPipeError:
            return  # the caller is gone (it failed, or was interrupted): nothing to answer


def _portable(exc: Exception) -> Exception:
    """`exc` if it survives pickling both ways (an exception class whose constructor takes
    other arguments than it keeps does not), else a WorkerError with its class and message."""
    try:
        pickle.loads(pickle.dumps(exc, protocol=5))
    except Exception:  # noqa: BLE001 - any failure to pickle or unpickle
        return WorkerError(f"convert: {type(exc).__module__}.{type(exc).__qualname__}: {exc} "
                           "(raised in a worker process; its class does not pickle)")
    return exc


class _Worker:
    """One worker process and its two pipes."""

    def __init__(self) -> None:
        to_child, from_parent = os.pipe()
        to_parent, from_child = os.pipe()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        # A session of its own (POSIX): the terminal sends Ctrl-C to its foreground process
        # group, and a worker in it that was still starting (its interpreter, its imports)
        # printed a KeyboardInterrupt traceback. This process stops its workers itself (and
        # they end when its pipes close). SIGINT is ignored from the first line too, where
        # there are no sessions (serve ignores it as well, for callers of serve itself).
        code = ("import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                f"from loaderx_converter._workers import serve; serve({to_child}, {from_child})")
        try:
            self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL,
                                         pass_fds=(to_child, from_child), env=env,
                                         start_new_session=os.name == "posix")
        except BaseException:
            os.close(from_parent)
            os.close(to_parent)
            raise
        finally:
            os.close(to_child)
            os.close(from_child)
        self.tasks = os.fdopen(from_parent, "wb")
        self.results = os.fdopen(to_parent, "rb")

    def send(self, message: tuple[Any, ...], what: str) -> None:
        try:
            _send(self.tasks, message)
        except (BrokenPipeError, ValueError):  # ValueError: closed by an earlier failure
            raise self.died(what) from None

    def died(self, what: str) -> WorkerError:
        try:
            self.tasks.close()
        except OSError:
            pass  # its buffer could not reach a dead worker
        try:
            code = self.proc.wait(_EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            code = None
        how = (f"was killed by signal {-code}" if code is not None and code < 0 else
               f"exited with status {code}" if code is not None else "stopped answering")
        return WorkerError(f"convert: a worker process {how} while extracting {what} (killed, "
                           "or out of memory?); nothing was published. Run again with fewer "
                           "workers, or with workers=1 to extract in this process")

    def close(self, abort: bool = False) -> None:
        """Ends the worker: its input closed, it leaves once idle; with `abort` (the
        conversion failed, its work is not wanted) it is killed at once."""
        if abort:
            self.proc.kill()
        for pipe in (self.tasks, self.results):
            try:
                pipe.close()
            except OSError:
                pass  # a pipe to a dead worker
        try:
            self.proc.wait(_EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Team:
    """`workers` worker processes for one conversion, started at once (their interpreters
    start while the check pass runs) and ended by ``close``."""

    def __init__(self, workers: int) -> None:
        self.members: list[_Worker] = []
        try:
            for _ in range(workers):
                self.members.append(_Worker())
        except BaseException:
            self.close(abort=True)
            raise

    def close(self, abort: bool = False) -> None:
        """Ends every worker (`_Worker.close`)."""
        for worker in self.members:
            worker.close(abort)

    def __enter__(self) -> Team:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        self.close(abort=kind is not None)

    def extracted(self, batches: Iterator[tuple[int, pa.Table]], readers: dict[str, Any],
                  plans: dict[str, Any], columns: list[str],
                  split: str) -> Iterator[tuple[int, dict[str, Any]]]:
        """(rows, records by column) of each of `batches` ((first row, table) in order),
        extracted by the workers and yielded in order."""
        alone = {c: _for_worker(r) for c, r in readers.items()}
        for worker in self.members:
            worker.send(("split", alone, plans, columns), f"the first rows of split {split!r}")
        pending: collections.deque[tuple[int, int, _Worker]] = collections.deque()
        for k, (row0, table) in enumerate(batches):
            worker = self.members[k % len(self.members)]
            worker.send(("batch", row0, _to_bytes(table.select(columns))), _rows(row0, table.num_rows, split))
            pending.append((row0, table.num_rows, worker))
            if len(pending) >= IN_FLIGHT * len(self.members):
                yield _result(pending.popleft(), split)
        while pending:
            yield _result(pending.popleft(), split)


class _Feature:
    """A column's ``datasets`` feature as a worker gets it: its repr for messages at once, the
    feature itself unpickled only if a reader asks for more (decoding a remote file), so that
    a worker does not import ``datasets`` (a second of its start) to extract plain rows."""

    def __init__(self, feature: Any) -> None:
        self._text = repr(feature)
        self._pickled = pickle.dumps(feature, protocol=5)
        self._feature: Any = None

    def __repr__(self) -> str:
        return self._text

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            # Its own attributes before they exist (unpickling), and the protocols' dunders:
            # the object's own lookup says they are missing.
            return object.__getattribute__(self, name)
        if self._feature is None:
            self._feature = pickle.loads(self._pickled)
        return getattr(self._feature, name)


def _for_worker(reader: Any) -> Any:
    """A copy of `reader` to send to the workers: it decodes on the worker's own thread (the
    processes are the parallelism) and names its feature by a _Feature."""
    alone = copy.copy(reader)
    alone.pool = None
    alone.where = dataclasses.replace(reader.where, feature=_Feature(reader.where.feature))
    return alone


def _rows(row0: int, rows: int, split: str) -> str:
    return f"rows {row0}..{row0 + rows - 1} of split {split!r}"


def _result(job: tuple[int, int, _Worker], split: str) -> tuple[int, dict[str, Any]]:
    row0, rows, worker = job
    reply = _receive(worker.results)
    if reply is None:
        raise worker.died(_rows(row0, rows, split))
    if reply[0] == "ok":
        return rows, reply[1]
    raise reply[1] from WorkerError(f"in the worker process that extracted "
                                    f"{_rows(row0, rows, split)}:\n{reply[2]}")
