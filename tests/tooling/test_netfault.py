"""The fault proxy itself, in front of an echo server on 127.0.0.1."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import suppress

import pytest

from tests.support.netfault import FaultProxy, fault_proxy


class EchoServer:
    """Echoes every byte back, one thread per connection; stops at close()."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)
        self.port: int = self.listener.getsockname()[1]
        self.stopped = threading.Event()
        self.threads = [threading.Thread(target=self.accept, daemon=True)]
        self.threads[0].start()

    def accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            thread = threading.Thread(target=self.echo, args=(conn,), daemon=True)
            self.threads.append(thread)
            thread.start()

    def echo(self, conn: socket.socket) -> None:
        conn.settimeout(0.05)
        with conn:
            while not self.stopped.is_set():
                try:
                    data = conn.recv(4096)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                with suppress(OSError):
                    conn.sendall(data)

    def close(self) -> None:
        self.stopped.set()
        for thread in list(self.threads):
            thread.join(5)
        self.listener.close()


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    echo = EchoServer()
    try:
        with fault_proxy("127.0.0.1", echo.port) as running:
            yield running
    finally:
        echo.close()


def connect(proxy: FaultProxy) -> socket.socket:
    client = socket.create_connection(("127.0.0.1", proxy.port), timeout=2)
    client.settimeout(2)
    return client


def test_proxy_forward_carries_bytes_both_ways(proxy: FaultProxy) -> None:
    with connect(proxy) as client:
        client.sendall(b"ping")
        assert client.recv(16) == b"ping"
    assert proxy.accepted == 1


def test_proxy_blackhole_stops_bytes_and_forward_heals_the_connection(proxy: FaultProxy) -> None:
    with connect(proxy) as client:
        client.sendall(b"one")
        assert client.recv(16) == b"one"
        proxy.set_mode("blackhole")
        client.sendall(b"two")
        client.settimeout(0.3)
        with pytest.raises(TimeoutError):
            client.recv(16)
        proxy.set_mode("forward")
        client.settimeout(2)
        assert client.recv(16) == b"two"  # the partition healed: the bytes arrive late


def test_proxy_blackhole_accepts_new_connections_and_stays_silent(proxy: FaultProxy) -> None:
    proxy.set_mode("blackhole")
    with connect(proxy) as client:
        client.sendall(b"hello")
        client.settimeout(0.3)
        with pytest.raises(TimeoutError):
            client.recv(16)
        proxy.set_mode("forward")
        client.settimeout(2)
        assert client.recv(16) == b"hello"


def test_proxy_reset_resets_open_and_new_connections(proxy: FaultProxy) -> None:
    with connect(proxy) as client:
        client.sendall(b"one")
        assert client.recv(16) == b"one"
        proxy.set_mode("reset")
        with pytest.raises(ConnectionResetError):
            client.recv(16)
    with pytest.raises(ConnectionResetError), connect(proxy) as late:  # reset at once
        late.sendall(b"two")
        late.recv(16)
    assert proxy.open_connections == 0
    proxy.set_mode("forward")
    with connect(proxy) as client:
        client.sendall(b"three")
        assert client.recv(16) == b"three"


def test_proxy_close_ends_every_connection_and_thread(proxy: FaultProxy) -> None:
    clients = [connect(proxy) for _ in range(3)]
    proxy.set_mode("blackhole")
    proxy.close()  # raises if a thread did not stop
    for client in clients:
        with client, pytest.raises(ConnectionResetError):
            client.recv(16)


def test_proxy_refuses_an_unknown_mode(proxy: FaultProxy) -> None:
    with pytest.raises(ValueError, match="unknown mode 'drop'"):
        proxy.set_mode("drop")  # type: ignore[arg-type]
