"""Tests of the simulated network link (zrecord_testkit.netlink) that the remote-read tests and
benchmarks use.

Each test starts its own small TCP server on 127.0.0.1 and talks to it through a LinkProxy. The
timing assertions are bounds that follow from the delay model, not performance targets: a lower
bound that a correct proxy can never beat, and an upper bound loose enough for a busy machine
that a proxy which serializes its delays would still miss by far.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import signal
import socket
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from zrecord_testkit.netlink import LOOPBACK, Link, LinkProxy

pytestmark = pytest.mark.remote

Handler = Callable[[socket.socket], None]


class _Server:
    """A TCP server on loopback that runs ``handler`` on every connection, each in its own thread."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self.errors: list[BaseException] = []
        self._threads: list[threading.Thread] = []
        self._accepter = threading.Thread(target=self._accept, daemon=True)
        self._accepter.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                self._handler(conn)
            except BaseException as exc:  # noqa: BLE001 - reported by close() in the test's thread.
                self.errors.append(exc)

    def close(self) -> None:
        self._listener.close()
        for thread in self._threads:
            thread.join(timeout=5)
        if self.errors:
            raise self.errors[0]


@contextlib.contextmanager
def _serve_through(handler: Handler, link: Link) -> Iterator[tuple[_Server, LinkProxy]]:
    server = _Server(handler)
    try:
        with LinkProxy("127.0.0.1", server.port, link) as proxy:
            yield server, proxy
    finally:
        server.close()


def _connect(proxy: LinkProxy) -> socket.socket:
    sock = socket.create_connection(proxy.address)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(10)
    return sock


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    parts = bytearray()
    while len(parts) < n:
        chunk = sock.recv(n - len(parts))
        if not chunk:
            raise EOFError(f"EOF after {len(parts)} of {n} bytes")
        parts += chunk
    return bytes(parts)


def _recv_all(sock: socket.socket) -> bytes:
    parts = bytearray()
    while chunk := sock.recv(1 << 20):
        parts += chunk
    return bytes(parts)


def _echo(conn: socket.socket) -> None:
    # A proxy that stops resets its open connections; for an echo server that is a normal end.
    with contextlib.suppress(ConnectionResetError):
        while data := conn.recv(65536):
            conn.sendall(data)


def _wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


@pytest.mark.parametrize(
    "link",
    [LOOPBACK, Link("shaped", rtt_s=0.01, rate_bits_per_s=400e6)],
    ids=["loopback", "shaped"],
)
def test_bytes_exact_and_in_order_both_ways_with_half_close(link: Link) -> None:
    up = os.urandom(3 << 20)
    down = os.urandom(2 << 20)

    def handler(conn: socket.socket) -> None:
        # Send our payload while reading the client's, so both directions are busy at once.
        sender = threading.Thread(target=conn.sendall, args=(down,))
        sender.start()
        received = _recv_all(conn)  # Ends at the client's half-close: EOF came after every byte.
        sender.join()
        # The client has half-closed, but its receiving direction must still be open.
        conn.sendall(hashlib.sha256(received).digest() + struct.pack("<Q", len(received)))
        conn.shutdown(socket.SHUT_WR)

    with _serve_through(handler, link) as (server, proxy):
        with _connect(proxy) as sock:

            def send_then_half_close() -> None:
                sock.sendall(up)
                sock.shutdown(socket.SHUT_WR)

            sender = threading.Thread(target=send_then_half_close)
            sender.start()
            got = _recv_all(sock)
            sender.join()
        assert len(got) == len(down) + 40
        assert hashlib.sha256(got[: len(down)]).digest() == hashlib.sha256(down).digest()
        assert got[len(down) :] == hashlib.sha256(up).digest() + struct.pack("<Q", len(up))
        assert _wait_for(lambda: proxy.stats().connections_active == 0)
        stats = proxy.stats()
        assert stats.connections_accepted == 1
        assert stats.bytes_up == len(up)
        assert stats.bytes_down == len(down) + 40


def test_counters_count_connections_and_bytes() -> None:
    sizes = [1, 1000, 70000, 300000]
    with _serve_through(_echo, LOOPBACK) as (_, proxy):
        for size in sizes:
            payload = os.urandom(size)
            with _connect(proxy) as sock:
                sock.sendall(payload)
                assert _recv_exact(sock, size) == payload
        assert _wait_for(lambda: proxy.stats().connections_active == 0)
        stats = proxy.stats()
        assert stats.connections_accepted == len(sizes)
        assert stats.bytes_up == stats.bytes_down == sum(sizes)
        proxy.reset_byte_counters()
        assert proxy.stats().bytes_up == 0
        assert proxy.stats().connections_accepted == len(sizes)


def test_round_trip_costs_one_rtt_and_a_new_connection_one_more() -> None:
    rtt = 0.040
    with _serve_through(_echo, Link("rtt40", rtt_s=rtt)) as (_, proxy):
        # A first request waits for the simulated handshake, then makes its own round trip. The
        # handshake's clock starts when the proxy accepts, which can be before this thread runs
        # again after connect() (a busy machine once had it 3 ms before), so time from the connect.
        start = time.monotonic()
        with _connect(proxy) as sock:
            sock.sendall(b"ping")
            assert _recv_exact(sock, 4) == b"ping"
            first = time.monotonic() - start
            # Later requests on the open connection pay one round trip each.
            exchanges = []
            for _ in range(3):
                start = time.monotonic()
                sock.sendall(b"pong")
                assert _recv_exact(sock, 4) == b"pong"
                exchanges.append(time.monotonic() - start)
    assert 2 * rtt - 1e-4 <= first < 2 * rtt + 0.4
    assert all(rtt - 1e-4 <= t < rtt + 0.36 for t in exchanges), exchanges


def test_rate_limit_holds() -> None:
    size = 4 << 20
    rate = 80e6
    done: dict[str, float] = {}

    def handler(conn: socket.socket) -> None:
        received = 0
        while chunk := conn.recv(1 << 20):
            received += len(chunk)
            if received == size:
                done["at"] = time.monotonic()
        conn.sendall(struct.pack("<Q", received))

    with _serve_through(handler, Link("80mbit", rtt_s=0.0, rate_bits_per_s=rate)) as (_, proxy):
        with _connect(proxy) as sock:
            start = time.monotonic()
            sock.sendall(bytes(size))
            sock.shutdown(socket.SHUT_WR)
            assert struct.unpack("<Q", _recv_exact(sock, 8))[0] == size
    elapsed = done["at"] - start
    ideal = size * 8 / rate  # 0.42 s
    assert ideal * 0.9 <= elapsed < ideal + 4.0


def test_delay_overlaps_with_sending() -> None:
    # 200 writes spaced 2 ms apart through a 25 ms one-way delay: a pipe delivers the last one
    # about 25 ms after it was sent (about 0.45 s in all); a proxy that sleeps the delay for
    # every chunk would need 200 x 25 ms = 5 s.
    chunks, chunk_size = 200, 512
    total = chunks * chunk_size
    marks: dict[str, float] = {}

    def handler(conn: socket.socket) -> None:
        conn.sendall(conn.recv(1))  # The warm-up exchange.
        received = 0
        while received < total:
            chunk = conn.recv(65536)
            if not chunk:
                break
            if received == 0:
                marks["first"] = time.monotonic()
            received += len(chunk)
        marks["last"] = time.monotonic()
        conn.sendall(struct.pack("<Q", received))

    with _serve_through(handler, Link("rtt50", rtt_s=0.050)) as (_, proxy):
        with _connect(proxy) as sock:
            sock.sendall(b"w")
            assert _recv_exact(sock, 1) == b"w"
            start = time.monotonic()
            for _ in range(chunks):
                sock.sendall(b"x" * chunk_size)
                time.sleep(0.002)
            assert struct.unpack("<Q", _recv_exact(sock, 8))[0] == total
    assert marks["first"] - start >= 0.025 - 1e-4
    assert marks["last"] - start < 1.5


def test_backpressure_bounds_what_a_fast_sender_can_push() -> None:
    # The server reads nothing until told to, so only buffers can absorb the client's writes:
    # two loopback sockets' kernel buffers (a few MiB each) and the proxy's bounded queue. A
    # proxy without back-pressure would take everything the client offers.
    limit = 1 << 20
    release = threading.Event()
    offered = 96 << 20

    def handler(conn: socket.socket) -> None:
        release.wait(10)
        received = len(_recv_all(conn))
        conn.sendall(struct.pack("<Q", received))

    with _serve_through(handler, Link("bounded", rtt_s=0.002, inflight_bytes=limit)) as (_, proxy):
        with _connect(proxy) as sock:
            sock.setblocking(False)
            block = bytes(1 << 20)
            accepted = 0
            stalled_since: float | None = None
            while accepted < offered:
                try:
                    accepted += sock.send(block)
                    stalled_since = None
                except BlockingIOError:
                    now = time.monotonic()
                    stalled_since = stalled_since or now
                    if now - stalled_since > 0.3:
                        break
                    time.sleep(0.005)
            assert accepted < 48 << 20, f"the proxy kept taking data: {accepted} bytes"
            delivered_before_release = proxy.stats().bytes_up
            release.set()
            sock.settimeout(10)
            sock.shutdown(socket.SHUT_WR)
            assert struct.unpack("<Q", _recv_exact(sock, 8))[0] == accepted
        assert delivered_before_release <= accepted
        assert proxy.stats().bytes_up == accepted


def _reset_after_sent(sock: socket.socket) -> None:
    """Close ``sock`` with an RST once the peer has acknowledged every byte written to it.

    An RST discards what the kernel has not sent yet, so the wait makes sure the proxy has all
    the bytes; whether they then reach the far side before the reset is the proxy's business.
    """
    deadline = time.monotonic() + 10
    while struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]:
        assert time.monotonic() < deadline, "the proxy did not take the bytes"
        time.sleep(0.002)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _read_until_error(sock: socket.socket) -> tuple[bytes, str]:
    # Start late, so that the proxy's buffers towards this side fill up before the reset comes:
    # the reset must still wait for them.
    time.sleep(0.2)
    parts = bytearray()
    try:
        while chunk := sock.recv(1 << 20):
            parts += chunk
    except ConnectionResetError:
        return bytes(parts), "reset"
    return bytes(parts), "eof"


@pytest.mark.parametrize("who", ["server", "client"])
def test_reset_is_delivered_after_the_data_before_it(who: str) -> None:
    payload = os.urandom(8 << 20)
    seen: dict[str, tuple[bytes, str]] = {}

    def handler(conn: socket.socket) -> None:
        if who == "server":
            conn.sendall(payload)
            _reset_after_sent(conn)
        else:
            seen["server"] = _read_until_error(conn)

    with _serve_through(handler, Link("rtt10", rtt_s=0.010)) as (server, proxy):
        sock = _connect(proxy)
        if who == "server":
            with sock:
                got, how = _read_until_error(sock)
        else:
            sock.sendall(payload)
            _reset_after_sent(sock)
            # Longer than the proxy's own 10 s wait for the far side's acknowledgements: a CI
            # run (2 cores, the rest of the suite beside it) once took more than the default 5 s.
            # (Rare in CI, not reproduced here: nothing arrived in 15 s; the message says what the
            # server side raised, if anything, and where the proxy's connection stood.)
            assert _wait_for(lambda: "server" in seen, timeout=15.0), \
                f"server side: {server.errors!r}; proxy: {proxy.stats()!r}"
            got, how = seen["server"]
        assert (len(got), how) == (len(payload), "reset")
        assert got == payload
        assert _wait_for(lambda: proxy.stats().connections_active == 0)


def test_a_reset_before_the_target_connection_exists_follows_the_data() -> None:
    # The client sends and resets before the proxy's connection to the server exists (it waits
    # one one-way delay, 100 ms here): the server must still get the connection, the bytes, then
    # the reset, as it would on a real path, where the SYN is ahead of both. (The proxy used to
    # drop the connection without a word; a busy CI machine hit that with the test above.)
    payload = os.urandom(256 << 10)
    seen: dict[str, tuple[bytes, str]] = {}

    def handler(conn: socket.socket) -> None:
        seen["server"] = _read_until_error(conn)

    with _serve_through(handler, Link("rtt200", rtt_s=0.200)) as (server, proxy):
        sock = _connect(proxy)
        sock.sendall(payload)
        _reset_after_sent(sock)
        # The reset left the client before the connect did.
        assert proxy.stats().bytes_up == 0
        assert _wait_for(lambda: "server" in seen), \
            f"server side: {server.errors!r}; proxy: {proxy.stats()!r}"
        got, how = seen["server"]
        assert (len(got), how) == (len(payload), "reset")
        assert got == payload
        assert _wait_for(lambda: proxy.stats().connections_active == 0)


def test_refused_target_resets_the_client() -> None:
    with socket.create_server(("127.0.0.1", 0)) as placeholder:
        port = placeholder.getsockname()[1]
    # Nothing listens on `port` now.
    with LinkProxy("127.0.0.1", port, Link("rtt4", rtt_s=0.004)) as proxy, _connect(proxy) as sock:
        with pytest.raises(ConnectionResetError):
            sock.sendall(b"hello")
            sock.recv(1)
        assert _wait_for(lambda: proxy.stats().connections_active == 0)


def test_stop_resets_open_connections_and_restarts() -> None:
    server = _Server(_echo)
    try:
        proxy = LinkProxy("127.0.0.1", server.port, LOOPBACK).start()
        with pytest.raises(RuntimeError):
            proxy.start()
        sock = _connect(proxy)
        sock.sendall(b"a")
        assert _recv_exact(sock, 1) == b"a"
        proxy.stop()
        proxy.stop()
        with sock, pytest.raises((ConnectionResetError, EOFError)):
            _recv_exact(sock, 1)
        with proxy, _connect(proxy) as again:
            again.sendall(b"b")
            assert _recv_exact(again, 1) == b"b"
        assert proxy.stats().connections_accepted == 2
    finally:
        server.close()


def test_cli_forwards_until_interrupted() -> None:
    server = _Server(_echo)
    proc = subprocess.Popen(
        [sys.executable, "-m", "zrecord_testkit.netlink", "--target", f"127.0.0.1:{server.port}",
         "--profile", "fast-lan", "--rtt-ms", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening on 127.0.0.1:"), line
        port = int(line.split()[2].rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"through the cli")
            assert _recv_exact(sock, 15) == b"through the cli"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
        assert proc.returncode == 0
        assert "1 connections, 15 bytes up, 15 bytes down" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        server.close()
