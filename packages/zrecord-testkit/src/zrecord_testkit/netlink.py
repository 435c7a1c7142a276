"""A delaying, rate-limiting TCP proxy that simulates a network link on loopback.

This kernel has no netem or tbf queueing discipline, so ``tc`` cannot shape a link. Tests and
benchmarks instead put a :class:`LinkProxy` between an object-storage client and an
S3-compatible server on 127.0.0.1: the client connects to the proxy, and the proxy opens one
connection to the server for every connection it accepts and pumps bytes both ways through a
simulated link described by a :class:`Link` profile.

Delay model
    ``Link.rtt_s`` is the round-trip time. Each direction adds half of it (the one-way delay).
    Each direction is modelled as a pipe, not as a store-and-forward hop: a chunk read from one
    side at time ``t`` is written to the other side at ``finish + rtt_s / 2``, where ``finish``
    is the time its last bit leaves a serialization clock. Without a rate limit ``finish`` is
    ``t``; with a rate of ``R`` bits per second, ``finish = max(t, previous_finish) + 8 * len / R``.
    Many chunks are therefore in flight at once, and delay overlaps with sending: a stream of
    small writes arrives one one-way delay late, not one delay per write. The rate is per
    connection and per direction, as on a path whose bottleneck is the per-flow rate of the
    far end (an S3 front end, for instance). TCP's own windows, slow start and losses are not
    modelled: the proxy acknowledges bytes locally, so only the delay and the rate shape the
    transfer.

Connection setup
    A new TCP connection costs one round trip before its first byte can leave, as the three-way
    handshake does in reality. The client's ``connect()`` to the proxy returns at once (it is a
    loopback connection), so the proxy charges the handshake itself: it connects to the target
    one one-way delay after the accept (when the SYN would arrive there), and it releases no
    client byte whose serialization would start before one full round trip after the accept
    (when the client would have learned that the handshake completed). A first request on a
    fresh connection therefore takes two round trips to be answered, one on a reused connection.

Invariants
    * Bytes are delivered exactly once and in order in each direction.
    * A half-close (EOF) is delivered after every byte sent before it, one one-way delay late,
      and the other direction stays open until it too is closed.
    * A reset (or a failed write) on one side is delivered to the other side after the bytes
      that preceded it, as an RST (``SO_LINGER`` zero); the whole connection ends then.
    * Memory is bounded: each direction holds at most ``Link.inflight_limit_bytes()`` queued
      bytes plus one socket read (256 KiB), and the writing transport buffers at most about
      twice its 256 KiB high-water mark. Beyond that the proxy stops reading from the sender,
      so back-pressure reaches the sender through TCP. A slow receiver stops the queue from
      draining, so it slows the sender down the same way.

The proxy runs an asyncio event loop in its own daemon thread; every method of
:class:`LinkProxy` may be called from any other thread. The module is pure standard library, so
that any test or benchmark environment can import it (``zrecord_testkit.netlink``) and run it
alone as a process: ``python -m zrecord_testkit.netlink --help``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import fcntl
import signal
import socket
import struct
import sys
import termios
import threading
import time
from collections.abc import Coroutine, Iterator
from types import TracebackType
from typing import Any

__all__ = [
    "FAST_LAN",
    "LOOPBACK",
    "PROFILES",
    "SAME_REGION_S3",
    "Link",
    "LinkProxy",
    "LinkStats",
    "main",
    "proxied",
]

_KIB = 1024
_MIB = 1024 * 1024

# The per-direction bound on queued bytes is twice the bandwidth-delay product plus this much.
# A link with a small product (a LAN) still needs room for a few 256 KiB socket reads, or its
# serialization clock would run dry between them.
_MIN_INFLIGHT_BYTES = 256 * _KIB

# Timers fire late by up to a millisecond or two (epoll rounds its timeout up to whole
# milliseconds, and the loop thread shares the CPU). The bound covers this much extra time at
# the link rate, so that late releases do not pause the sender and cost throughput; without it a
# 2 Gbit/s link with a 1 ms round trip only reached about 140 MB/s on one connection.
_TIMER_SLACK_SECONDS = 0.004

# A link without a rate limit has no bandwidth-delay product, so it gets this fixed bound. At a
# 25 ms one-way delay 16 MiB still allows about 670 MB/s, more than the proxy itself sustains.
_UNLIMITED_INFLIGHT_BYTES = 16 * _MIB

# The writing transport pauses the pipe above this many buffered bytes; it is part of the
# memory bound stated in the module docstring.
_WRITE_HIGH_WATER = 256 * _KIB

# A rate-limited pipe splits reads into pieces that take about this long to serialize, so the
# far side sees a smooth stream rather than one burst per 256 KiB socket read.
_SLICE_SECONDS = 0.001
_MIN_SLICE_BYTES = 16 * _KIB

# How long a reset waits for the bytes before it to reach a peer that does not read, and how
# often it looks.
_RESET_FLUSH_TIMEOUT = 10.0
_RESET_POLL_SECONDS = 0.001

# The ioctl that reads a socket's unacknowledged send queue (Linux names it after terminals).
_TIOCOUTQ: int | None = getattr(termios, "TIOCOUTQ", None)

# asyncio wakes a timer when its due time is within the clock's resolution; a flush that runs
# that early must still count the head of the queue as due.
_CLOCK_SLACK = time.get_clock_info("monotonic").resolution


@dataclasses.dataclass(frozen=True)
class Link:
    """A simulated network path.

    ``rtt_s`` is the round-trip time in seconds; each direction adds ``rtt_s / 2``.
    ``rate_bits_per_s`` is the rate of each connection in each direction (``None``: unlimited).
    ``inflight_bytes`` overrides the per-direction bound on queued bytes (``None``: twice the
    bandwidth-delay product, with 4 ms added to the delay for timer lateness, plus 256 KiB; or
    16 MiB for an unlimited rate).
    """

    name: str
    rtt_s: float
    rate_bits_per_s: float | None = None
    inflight_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.rtt_s < 0:
            raise ValueError(f"rtt_s must be >= 0, not {self.rtt_s}")
        if self.rate_bits_per_s is not None and self.rate_bits_per_s <= 0:
            raise ValueError(f"rate_bits_per_s must be > 0 or None, not {self.rate_bits_per_s}")
        if self.inflight_bytes is not None and self.inflight_bytes <= 0:
            raise ValueError(f"inflight_bytes must be > 0 or None, not {self.inflight_bytes}")

    @property
    def one_way_s(self) -> float:
        """The delay each direction adds: half the round-trip time."""
        return self.rtt_s / 2

    @property
    def shaped(self) -> bool:
        """Whether the link delays or limits anything at all."""
        return self.rtt_s > 0 or self.rate_bits_per_s is not None

    def inflight_limit_bytes(self) -> int:
        """The bound on bytes queued in one direction of one connection."""
        if self.inflight_bytes is not None:
            return self.inflight_bytes
        if self.rate_bits_per_s is None:
            return _UNLIMITED_INFLIGHT_BYTES
        bdp = self.rate_bits_per_s / 8 * (self.rtt_s + _TIMER_SLACK_SECONDS)
        return int(2 * bdp) + _MIN_INFLIGHT_BYTES

    def slice_bytes(self) -> int:
        """The largest piece a rate-limited pipe queues as one unit (0: reads are not split)."""
        if self.rate_bits_per_s is None:
            return 0
        return max(_MIN_SLICE_BYTES, int(self.rate_bits_per_s / 8 * _SLICE_SECONDS))

    def describe(self) -> str:
        rate = "unlimited" if self.rate_bits_per_s is None else f"{self.rate_bits_per_s / 1e6:g} Mbit/s"
        return f"{self.name} (rtt {self.rtt_s * 1e3:g} ms, {rate} per connection per direction)"


# Same-region access to S3 from a compute instance: a round trip of tens of milliseconds to the
# first byte, and a single connection that tops out near 80 MB/s.
SAME_REGION_S3 = Link("same-region-s3", rtt_s=0.025, rate_bits_per_s=640e6)
# A fast local network to a storage server in the same rack.
FAST_LAN = Link("fast-lan", rtt_s=0.001, rate_bits_per_s=2e9)
# No shaping: the proxy only forwards, which measures its own overhead.
LOOPBACK = Link("loopback", rtt_s=0.0, rate_bits_per_s=None)

PROFILES: dict[str, Link] = {link.name: link for link in (SAME_REGION_S3, FAST_LAN, LOOPBACK)}


@dataclasses.dataclass(frozen=True)
class LinkStats:
    """A snapshot of a proxy's counters.

    ``bytes_up`` counts bytes delivered from clients to the target, ``bytes_down`` bytes
    delivered from the target to clients; bytes still queued in the link are not counted.
    """

    connections_accepted: int
    connections_active: int
    bytes_up: int
    bytes_down: int


class _Counters:
    """Counters written by the event loop thread and read from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.accepted = 0
        self.active = 0
        self.up = 0
        self.down = 0

    def add(self, *, accepted: int = 0, active: int = 0, up: int = 0, down: int = 0) -> None:
        with self._lock:
            self.accepted += accepted
            self.active += active
            self.up += up
            self.down += down

    def snapshot(self) -> LinkStats:
        with self._lock:
            return LinkStats(self.accepted, self.active, self.up, self.down)

    def reset_bytes(self) -> None:
        with self._lock:
            self.up = 0
            self.down = 0


# Queue markers that travel through a pipe behind the data before them.
_EOF = "eof"
_RESET = "reset"
_Item = tuple[float, bytes | memoryview | str]


def _unsent_bytes(transport: asyncio.Transport) -> int:
    """Bytes written to ``transport`` that its peer has not acknowledged yet.

    That is the transport's own buffer plus the kernel's send queue (``TIOCOUTQ``, where the
    platform has it; elsewhere the kernel's share is taken as zero).
    """
    pending = transport.get_write_buffer_size()
    sock = transport.get_extra_info("socket")
    if _TIOCOUTQ is not None and sock is not None:
        # The socket may have failed meanwhile; then nothing more will be sent anyway.
        with contextlib.suppress(OSError, ValueError):
            raw = fcntl.ioctl(sock.fileno(), _TIOCOUTQ, b"\0" * 4)
            pending += int(struct.unpack("i", raw)[0])
    return pending


def _abort_with_rst(transport: asyncio.Transport) -> None:
    """Close a transport at once with an RST instead of a FIN, as a reset peer's kernel would.

    An RST discards whatever is still queued towards the peer; :func:`_reset_after_flush` is the
    variant that lets earlier bytes arrive first.
    """
    sock = transport.get_extra_info("socket")
    if sock is not None:
        # The socket may already be gone if the peer reset it first; nothing is left to send then.
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


async def _reset_after_flush(transport: asyncio.Transport) -> None:
    """Reset ``transport`` once every byte written to it has been acknowledged by its peer.

    A real reset travels behind the data sent before it, and the receiver reads that data before
    it sees the reset. Here the bytes may still sit in the transport's buffer or the kernel's
    send queue, which an RST would discard, so the reset waits for both to empty. A peer that
    stops reading altogether gets its reset after ``_RESET_FLUSH_TIMEOUT`` seconds regardless.
    """
    deadline = time.monotonic() + _RESET_FLUSH_TIMEOUT
    try:
        while not transport.is_closing() and _unsent_bytes(transport) and time.monotonic() < deadline:
            await asyncio.sleep(_RESET_POLL_SECONDS)
    finally:
        # Also on cancellation (the proxy stops): the reset must still go out.
        if not transport.is_closing():
            _abort_with_rst(transport)


class _Pipe:
    """One direction of one proxied connection: a timed queue from a source to a destination."""

    def __init__(self, conn: _Connection, link: Link, up: bool, start_after: float) -> None:
        self._conn = conn
        self._loop = conn.loop
        self._one_way = link.one_way_s
        self._rate = link.rate_bits_per_s
        self._limit = link.inflight_limit_bytes()
        self._slice = link.slice_bytes()
        self._up = up
        # The serialization clock. It starts at `start_after` so that a client's first bytes
        # wait for the simulated handshake (see the module docstring).
        self._next_free = start_after
        self._queue: collections.deque[_Item] = collections.deque()
        self._queued_bytes = 0
        self._timer: asyncio.Handle | None = None
        self.src: asyncio.Transport | None = None
        self.dest: asyncio.Transport | None = None
        self._src_paused = False
        self._dest_paused = False
        # The source sent its EOF; nothing but a reset can follow it.
        self._eof_queued = False
        self._reset_queued = False
        # The destination cannot be written any more; everything pushed is discarded.
        self._dropped = False
        self.eof_delivered = False

    def _release_time(self, nbytes: int) -> float:
        now = self._loop.time()
        start = max(now, self._next_free)
        # The rate limiter is a serialization clock: each piece occupies the link for its own
        # length at the link rate, after the piece before it has left.
        self._next_free = start if self._rate is None else start + nbytes * 8 / self._rate
        return self._next_free + self._one_way

    def push(self, data: bytes) -> None:
        """Queue bytes read from the source."""
        if self._dropped or self._eof_queued or self._reset_queued:
            return
        size = len(data)
        step = self._slice or size
        if step >= size:
            self._queue.append((self._release_time(size), data))
        else:
            # Slicing a memoryview shares the buffer, so splitting a read copies nothing.
            view = memoryview(data)
            for offset in range(0, size, step):
                piece = view[offset : offset + step]
                self._queue.append((self._release_time(len(piece)), piece))
        self._queued_bytes += size
        if self._queued_bytes >= self._limit and not self._src_paused and self.src is not None:
            # Back-pressure: stop reading until the far side has taken some of the queue, so the
            # sender's kernel buffers fill and TCP slows the sender down.
            self._src_paused = True
            self.src.pause_reading()
        if self._timer is None and self._queue[0][0] <= self._loop.time() + _CLOCK_SLACK:
            # Nothing delays the head of the queue (an unshaped link): forward it at once rather
            # than through a timer, which keeps the proxy's own overhead low.
            self._flush()
        else:
            self._schedule()

    def push_marker(self, marker: str) -> None:
        """Queue an EOF or a reset behind every byte already queued."""
        if self._dropped or self._reset_queued or (marker == _EOF and self._eof_queued):
            return
        if marker == _EOF:
            self._eof_queued = True
        else:
            self._reset_queued = True
        self._queue.append((self._release_time(0), marker))
        self._schedule()

    def drop(self) -> None:
        """Forget the queue: the destination is gone, so nothing queued can be delivered."""
        self._dropped = True
        self._queue.clear()
        self._queued_bytes = 0
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def set_dest(self, dest: asyncio.Transport) -> None:
        self.dest = dest
        self._schedule()

    def set_dest_paused(self, paused: bool) -> None:
        self._dest_paused = paused
        if not paused:
            self._schedule()

    def _schedule(self) -> None:
        if self._timer is not None or not self._queue or self.dest is None or self._dest_paused:
            return
        when = self._queue[0][0]
        if when <= self._loop.time() + _CLOCK_SLACK:
            self._timer = self._loop.call_soon(self._flush)
        else:
            self._timer = self._loop.call_at(when, self._flush)

    def _flush(self) -> None:
        self._timer = None
        dest = self.dest
        if dest is None or self._dropped or dest.is_closing():
            # A destination that is closing has failed; its connection_lost callback, which is
            # already scheduled, drops this pipe and sends the reset on.
            return
        due = self._loop.time() + _CLOCK_SLACK
        while self._queue and self._queue[0][0] <= due and not self._dest_paused:
            # Take the due pieces up to the next marker, but no more than the transport's
            # high-water mark at once, so that the transport's buffer stays within the memory
            # bound of the module docstring.
            batch: list[bytes | memoryview] = []
            batch_bytes = 0
            marker: str | None = None
            while self._queue and self._queue[0][0] <= due and batch_bytes < _WRITE_HIGH_WATER:
                item = self._queue.popleft()[1]
                if isinstance(item, str):
                    marker = item
                    break
                batch.append(item)
                batch_bytes += len(item)
            # Count before writing: a write can reach the peer, and a thread that saw the bytes
            # arrive can read the counters, before this callback gets the CPU back.
            self._count(batch_bytes)
            if len(batch) == 1:
                dest.write(batch[0])
            elif batch:
                dest.writelines(batch)
            if marker == _RESET:
                self._conn.reset_all(towards=dest)
                return
            if marker == _EOF:
                if dest.can_write_eof():
                    # The transport sends the FIN after the bytes it still buffers.
                    dest.write_eof()
                self.eof_delivered = True
                self._conn.pipe_finished()
        if self._src_paused and self._queued_bytes < self._limit // 2 and self.src is not None:
            # Resume below half the bound, not just under it, so that reading does not flap
            # between paused and resumed on every piece.
            self._src_paused = False
            self.src.resume_reading()
        self._schedule()

    def _count(self, delivered: int) -> None:
        if not delivered:
            return
        self._queued_bytes -= delivered
        if self._up:
            self._conn.counters.add(up=delivered)
        else:
            self._conn.counters.add(down=delivered)


class _Side(asyncio.Protocol):
    """The protocol of one of a connection's two sockets (client or target)."""

    def __init__(self, conn: _Connection, is_client: bool) -> None:
        self._conn = conn
        self._is_client = is_client
        # The pipe this side's reads feed, and the pipe that writes to this side.
        self._out = conn.up if is_client else conn.down
        self._in = conn.down if is_client else conn.up
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.set_write_buffer_limits(high=_WRITE_HIGH_WATER)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            # Latency is the link's business, not Nagle's: forward small writes at once.
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._transport = transport
        self._conn.proxy.transports.add(transport)
        self._conn.side_made(self._is_client, transport)

    def data_received(self, data: bytes) -> None:
        self._out.push(data)

    def eof_received(self) -> bool:
        self._out.push_marker(_EOF)
        # True keeps the transport open for writing: the other direction may still carry data.
        return True

    def pause_writing(self) -> None:
        self._in.set_dest_paused(True)

    def resume_writing(self) -> None:
        self._in.set_dest_paused(False)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is not None:
            self._conn.proxy.transports.discard(self._transport)
        self._conn.side_lost(self._is_client, exc)


class _Connection:
    """One accepted client connection and the target connection made for it."""

    def __init__(self, proxy: _ProxyCore) -> None:
        self.proxy = proxy
        self.loop = proxy.loop
        self.counters = proxy.counters
        link = proxy.link
        self._one_way = link.one_way_s
        accepted_at = self.loop.time()
        self.up = _Pipe(self, link, up=True, start_after=accepted_at + link.rtt_s)
        self.down = _Pipe(self, link, up=False, start_after=accepted_at)
        self.client: asyncio.Transport | None = None
        self.target: asyncio.Transport | None = None
        self.connect_task: asyncio.Task[None] | None = None
        self._closing = False

    def side_made(self, is_client: bool, transport: asyncio.Transport) -> None:
        if is_client:
            self.client = transport
            self.up.src = transport
            self.down.set_dest(transport)
            self.counters.add(accepted=1, active=1)
            self.proxy.connections.add(self)
            self.connect_task = self.proxy.spawn(self._connect())
        elif self._closing:
            # The client went away while the connect was under way.
            transport.abort()
        else:
            self.target = transport
            self.down.src = transport
            self.up.set_dest(transport)

    async def _connect(self) -> None:
        # The SYN reaches the target one one-way delay after the client sent it.
        await asyncio.sleep(self._one_way)
        try:
            await self.loop.create_connection(
                lambda: _Side(self, is_client=False), self.proxy.target_host, self.proxy.target_port
            )
        except OSError:
            # The target refused or is unreachable. The client already holds an open socket,
            # so the closest equivalent of a refused connect is a reset one one-way delay later.
            await asyncio.sleep(self._one_way)
            self.reset_all()

    def side_lost(self, is_client: bool, exc: Exception | None) -> None:
        if self._closing or exc is None:
            # A transport closes without an error only when this proxy closed it.
            return
        # The peer reset its socket, or a write to it failed. The bytes it sent before are
        # queued already; the reset follows them to the other side. Nothing can reach this
        # side any more, so the direction towards it is dropped.
        lost_out = self.up if is_client else self.down
        lost_in = self.down if is_client else self.up
        lost_in.drop()
        # Also while the target connection is still being made (only the client can be lost
        # then): on a real path the SYN is ahead of the data and the reset, so the target gets
        # the connection, the bytes, then the reset; the pipe holds them until it exists. If the
        # connect fails, _connect ends everything.
        lost_out.push_marker(_RESET)

    def pipe_finished(self) -> None:
        if self.up.eof_delivered and self.down.eof_delivered:
            self.close()

    def reset_all(self, towards: asyncio.Transport | None = None) -> None:
        """End the connection with an RST to both sides.

        ``towards`` is the side a reset is being delivered to: it gets the bytes already written
        to it before the RST. The other side is cut off at once (it is the side that reset, or
        its peer is gone), as is everything when the proxy stops.
        """
        if self._closing:
            return
        self._closing = True
        self.up.drop()
        self.down.drop()
        for transport in (self.client, self.target):
            if transport is None or transport.is_closing():
                continue
            if transport is towards:
                self.proxy.spawn(_reset_after_flush(transport))
            else:
                _abort_with_rst(transport)
        self._finish()

    def close(self) -> None:
        """End the connection after both directions delivered their EOF."""
        if self._closing:
            return
        self._closing = True
        for transport in (self.client, self.target):
            if transport is not None:
                transport.close()
        self._finish()

    def _finish(self) -> None:
        if self.connect_task is not None and not self.connect_task.done():
            self.connect_task.cancel()
        if self in self.proxy.connections:
            self.proxy.connections.discard(self)
            self.counters.add(active=-1)


class _ProxyCore:
    """The state that lives on the event loop thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, target_host: str, target_port: int,
                 link: Link, counters: _Counters) -> None:
        self.loop = loop
        self.target_host = target_host
        self.target_port = target_port
        self.link = link
        self.counters = counters
        self.connections: set[_Connection] = set()
        self.server: asyncio.Server | None = None
        # Connects and delayed resets under way; stopping cancels and then awaits them.
        self.tasks: set[asyncio.Task[None]] = set()
        # Every open socket, including those of finished connections that are still flushing;
        # stopping aborts them all (Server.wait_closed waits for them from Python 3.12 on).
        self.transports: set[asyncio.Transport] = set()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = self.loop.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    def new_client(self) -> asyncio.Protocol:
        return _Side(_Connection(self), is_client=True)


class LinkProxy:
    """A TCP proxy from ``listen_host:listen_port`` to ``target_host:target_port`` through ``link``.

    ``listen_port=0`` picks a free port; read it from :attr:`port` after :meth:`start`. Use it
    as a context manager, or call :meth:`start` and :meth:`stop`.
    """

    def __init__(self, target_host: str, target_port: int, link: Link = LOOPBACK,
                 listen_host: str = "127.0.0.1", listen_port: int = 0) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.link = link
        self.listen_host = listen_host
        self._listen_port = listen_port
        self._port: int | None = None
        self._counters = _Counters()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._core: _ProxyCore | None = None
        self._ready = threading.Event()
        self._stopped: asyncio.Future[None] | None = None
        self._error: BaseException | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> LinkProxy:
        """Start listening; returns once the listening socket is bound."""
        if self._thread is not None:
            raise RuntimeError("LinkProxy already started")
        self._ready.clear()
        self._error = None
        self._thread = threading.Thread(target=self._run, name=f"LinkProxy-{self.link.name}", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            self._thread = None
            raise self._error
        return self

    def stop(self) -> None:
        """Stop listening, reset every open connection, and join the loop thread."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._request_stop)
        thread.join()
        self._thread = None
        self._loop = None
        self._core = None

    def __enter__(self) -> LinkProxy:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # -- addresses and counters ------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port the proxy listens on (only after :meth:`start`)."""
        if self._port is None:
            raise RuntimeError("LinkProxy not started")
        return self._port

    @property
    def address(self) -> tuple[str, int]:
        return (self.listen_host, self.port)

    def url_for(self, path: str = "", scheme: str = "http") -> str:
        """The URL of ``path`` on the target as seen through the proxy, e.g. an S3 endpoint URL."""
        if path and not path.startswith("/"):
            path = "/" + path
        return f"{scheme}://{self.listen_host}:{self.port}{path}"

    def stats(self) -> LinkStats:
        """A consistent snapshot of the counters, safe to call from any thread."""
        return self._counters.snapshot()

    def reset_byte_counters(self) -> None:
        """Zero the byte counters (connection counts stay), e.g. between benchmark phases."""
        self._counters.reset_bytes()

    # -- the loop thread -------------------------------------------------------------------------

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # noqa: BLE001 - handed to start() or, later, lost with the thread.
            self._error = exc
        finally:
            self._ready.set()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        core = _ProxyCore(loop, self.target_host, self.target_port, self.link, self._counters)
        self._core = core
        self._stopped = loop.create_future()
        server = await loop.create_server(core.new_client, self.listen_host, self._listen_port,
                                          reuse_address=True)
        core.server = server
        self._port = int(server.sockets[0].getsockname()[1])
        self._ready.set()
        try:
            await self._stopped
        finally:
            server.close()
            for conn in list(core.connections):
                conn.reset_all()
            tasks = list(core.tasks)
            for task in tasks:
                task.cancel()
            # The cancelled connects and resets must finish, and the aborted transports run
            # their connection_lost callbacks, before the loop closes.
            await asyncio.gather(*tasks, return_exceptions=True)
            for transport in list(core.transports):
                transport.abort()
            await server.wait_closed()
            await asyncio.sleep(0)

    def _request_stop(self) -> None:
        if self._stopped is not None and not self._stopped.done():
            self._stopped.set_result(None)


@contextlib.contextmanager
def proxied(target_host: str, target_port: int, link: Link = LOOPBACK) -> Iterator[LinkProxy]:
    """``with proxied(host, port, link) as proxy:`` — a started proxy, stopped on exit."""
    proxy = LinkProxy(target_host, target_port, link)
    with proxy:
        yield proxy


def _parse_target(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, not {text!r}")
    return host or "127.0.0.1", int(port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m zrecord_testkit.netlink",
        description="Forward TCP connections to a target through a simulated network link.")
    parser.add_argument("--target", required=True, type=_parse_target, help="HOST:PORT to forward to")
    parser.add_argument("--profile", default=SAME_REGION_S3.name, choices=sorted(PROFILES),
                        help="link profile (default: %(default)s)")
    parser.add_argument("--listen-host", default="127.0.0.1")
    parser.add_argument("--listen-port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--rtt-ms", type=float, help="override the profile's round-trip time")
    parser.add_argument("--rate-mbit", type=float,
                        help="override the profile's rate per connection per direction (0: unlimited)")
    args = parser.parse_args(argv)

    link = PROFILES[args.profile]
    if args.rtt_ms is not None:
        link = dataclasses.replace(link, name="custom", rtt_s=args.rtt_ms / 1e3)
    if args.rate_mbit is not None:
        rate = None if args.rate_mbit == 0 else args.rate_mbit * 1e6
        link = dataclasses.replace(link, name="custom", rate_bits_per_s=rate)
    host, port = args.target
    proxy = LinkProxy(host, port, link, listen_host=args.listen_host, listen_port=args.listen_port)
    # Stop on Ctrl-C and on SIGTERM alike. SIGINT is installed explicitly because a shell that
    # starts the proxy in the background (`python -m zrecord_testkit.netlink ... &`) makes it
    # ignore SIGINT otherwise.
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda _signum, _frame: stop.set())
    with proxy:
        print(f"listening on {proxy.listen_host}:{proxy.port} -> {host}:{port} via {link.describe()}",
              flush=True)
        try:
            # A timed wait, not a bare one, so that the main thread keeps running signal handlers.
            while not stop.wait(0.5):
                pass
        finally:
            stats = proxy.stats()
            print(f"\n{stats.connections_accepted} connections, {stats.bytes_up} bytes up, "
                  f"{stats.bytes_down} bytes down", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
