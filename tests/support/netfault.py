"""A TCP proxy on 127.0.0.1 that a test switches between network faults.

``FaultProxy(host, port)`` forwards every connection made to its own port to
``host:port``. The test sets its mode at any time:

- ``forward``: bytes flow both ways.
- ``blackhole``: a partition. Open connections stay open, but nothing is
  read or forwarded in either direction, so the peers' buffers fill and
  their calls hang. New connections are accepted and left silent. Going back
  to ``forward`` heals the partition: the connections carry on where they
  stopped, as TCP does once a link comes back.
- ``reset``: every open connection is closed with a RST (``SO_LINGER`` 0), on
  both sides; a new connection is reset as soon as it is accepted.

Each connection pair has one thread, which polls with short timeouts: every
thread stops by itself once its connection ends or the proxy is closed.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Literal

Mode = Literal["forward", "blackhole", "reset"]
MODES: tuple[Mode, ...] = ("forward", "blackhole", "reset")
POLL = 0.05
CHUNK = 65536


def reset_close(sock: socket.socket) -> None:
    """Close ``sock`` so that its peer gets a RST, not a FIN."""
    with suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with suppress(OSError):
        sock.close()


class FaultProxy:
    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self._mode: Mode = "forward"
        self._changed = threading.Condition()
        self._closed = False
        self._pairs: list[_Pair] = []
        self.accepted = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(POLL)
        self.port: int = self._listener.getsockname()[1]
        self._acceptor = threading.Thread(
            target=self._accept_loop, name="netfault-accept", daemon=True
        )
        self._acceptor.start()

    @property
    def mode(self) -> Mode:
        return self._mode

    def set_mode(self, mode: Mode) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; one of {', '.join(MODES)}")
        with self._changed:
            self._mode = mode
            self._changed.notify_all()
        if mode == "reset":
            for pair in self.pairs():
                pair.finished.wait(2)

    def pairs(self) -> list[_Pair]:
        """The connection pairs still open."""
        with self._changed:
            self._pairs = [pair for pair in self._pairs if not pair.finished.is_set()]
            return list(self._pairs)

    @property
    def open_connections(self) -> int:
        return len(self.pairs())

    def close(self) -> None:
        """Close every connection and the listener; join every thread."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        self._acceptor.join(5)
        with suppress(OSError):
            self._listener.close()
        with self._changed:
            pairs = list(self._pairs)
        for pair in pairs:
            pair.thread.join(5)
        alive = [pair.thread.name for pair in pairs if pair.thread.is_alive()]
        alive += [self._acceptor.name] if self._acceptor.is_alive() else []
        if alive:
            raise RuntimeError(f"proxy threads did not stop: {alive}")

    # -- the proxy's threads ----------------------------------------------

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            if self._mode == "reset":
                reset_close(client)
                continue
            pair = _Pair(self, client)
            with self._changed:
                self._pairs.append(pair)
            pair.thread.start()

    def _wait_while_blackholed(self) -> Mode | None:
        """Block while the proxy black-holes; the mode after, or None once closed."""
        with self._changed:
            while self._mode == "blackhole" and not self._closed:
                self._changed.wait(POLL * 4)
            return None if self._closed else self._mode


class _Pair:
    """One client connection and its upstream connection, pumped by one thread."""

    def __init__(self, proxy: FaultProxy, client: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.server: socket.socket | None = None
        self.finished = threading.Event()
        self.thread = threading.Thread(target=self._run, name="netfault-pair", daemon=True)

    def _run(self) -> None:
        try:
            self._pump()
        except OSError:
            pass
        finally:
            if self.proxy.mode == "reset" or self.proxy._closed:
                reset_close(self.client)
                if self.server is not None:
                    reset_close(self.server)
            else:
                with suppress(OSError):
                    self.client.close()
                if self.server is not None:
                    with suppress(OSError):
                        self.server.close()
            self.finished.set()

    def _pump(self) -> None:
        # Bytes read from one side and not yet written to the other.
        pending: dict[socket.socket, bytearray] = {}
        while True:
            mode = self.proxy._wait_while_blackholed()
            if mode is None or mode == "reset":
                return
            if self.server is None:  # connect upstream once the link is up
                self.server = socket.create_connection(self.proxy.upstream, timeout=2)
                for sock in (self.client, self.server):
                    sock.setblocking(False)
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                pending = {self.client: bytearray(), self.server: bytearray()}
            other = {self.client: self.server, self.server: self.client}
            readers = [sock for sock in other if not pending[other[sock]]]
            writers = [sock for sock in other if pending[sock]]
            readable, writable, _ = select.select(readers, writers, [], POLL)
            if self.proxy.mode != "forward":
                continue  # the link went down while we waited: leave the bytes where they are
            for sock in writable:
                sent = sock.send(pending[sock])
                del pending[sock][:sent]
            for sock in readable:
                data = sock.recv(CHUNK)
                if not data:
                    self._flush(pending)
                    return
                pending[other[sock]] += data

    def _flush(self, pending: dict[socket.socket, bytearray]) -> None:
        """Write out what is left after one side closed, briefly."""
        for sock, data in pending.items():
            if data:
                with suppress(OSError):
                    sock.setblocking(True)
                    sock.settimeout(1)
                    sock.sendall(data)


@contextmanager
def fault_proxy(host: str, port: int) -> Iterator[FaultProxy]:
    proxy = FaultProxy(host, port)
    try:
        yield proxy
    finally:
        proxy.close()
