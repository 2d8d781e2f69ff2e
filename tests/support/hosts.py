"""Worker hosts that are really apart: Linux network namespaces, a veth pair each.

``Hosts(count)`` makes ``count`` namespaces. Host ``i`` has one link to this machine,
a veth pair: its end, inside the namespace, is ``198.18.K.(4i+2)/30``; this machine's
end is ``198.18.K.(4i+1)``, where the database server listens for it (``K`` is picked
per run, in 198.18.0.0/15, the range set aside for benchmarks). A process started with
:meth:`Hosts.run` lives in the namespace: the only way out is its link, which
:meth:`Hosts.cut` takes down (its packets go nowhere, as when a switch port dies: open
connections hang, nothing is reset) and :meth:`Hosts.heal` brings back up.

It needs root and ``ip`` (iproute2). :func:`unavailable` says why they cannot be made
here; the tests skip with that reason, unless ``JOBS_TEST_NETNS=required`` (CI), where
they fail. Everything made is removed by :meth:`Hosts.close`, also after a failure.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REQUIRED = os.environ.get("JOBS_TEST_NETNS") == "required"
PREFIX = "djh"  # of every namespace and link made here


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603
        ["ip", *args], check=check, capture_output=True, text=True, timeout=30
    )


def unavailable() -> str | None:
    """Why namespaces cannot be made here, or None."""
    if shutil.which("ip") is None:
        return "needs iproute2's ip (apt-get install iproute2)"
    if os.geteuid() != 0:
        return "needs root to make network namespaces (CI runs as root)"
    probe = f"{PREFIX}probe{os.getpid() % 10000}"
    made = ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot make a network namespace: {made.stderr.strip()}"
    ip("netns", "del", probe, check=False)
    return None


@dataclass(frozen=True)
class Host:
    index: int
    namespace: str
    link: str  # this machine's end of the veth pair
    address: str  # the host's own address, in its namespace
    server_address: str  # this machine's end: where the database listens for the host


class Hosts:
    def __init__(self, count: int) -> None:
        token = secrets.token_hex(2)
        self.subnet = int(token, 16) % 256  # K of 198.18.K.0/24
        self.hosts: list[Host] = []
        try:
            for index in range(count):
                self.hosts.append(self._make(index, token))
        except BaseException:
            self.close()
            raise

    def _make(self, index: int, token: str) -> Host:
        namespace, link, peer = (f"{PREFIX}{token}{part}{index}" for part in ("n", "a", "b"))
        base = 4 * index
        server, own = f"198.18.{self.subnet}.{base + 1}", f"198.18.{self.subnet}.{base + 2}"
        ip("netns", "add", namespace)
        host = Host(index, namespace, link, own, server)
        self.hosts.append(host)  # removed by close() from here on
        ip("link", "add", link, "type", "veth", "peer", "name", peer)
        ip("link", "set", peer, "netns", namespace)
        ip("addr", "add", f"{server}/30", "dev", link)
        ip("link", "set", link, "up")
        inside = ("netns", "exec", namespace, "ip")
        ip(*inside, "addr", "add", f"{own}/30", "dev", peer)
        ip(*inside, "link", "set", peer, "up")
        ip(*inside, "link", "set", "lo", "up")
        self.hosts.pop()
        return host

    def __getitem__(self, index: int) -> Host:
        return self.hosts[index]

    def __len__(self) -> int:
        return len(self.hosts)

    @property
    def server_addresses(self) -> list[str]:
        return [host.server_address for host in self.hosts]

    def command(self, index: int, args: Sequence[str]) -> list[str]:
        """``args`` run inside host ``index``'s namespace."""
        return ["ip", "netns", "exec", self.hosts[index].namespace, *args]

    def cut(self, index: int) -> None:
        """Take host ``index``'s link down: its packets go nowhere, both ways."""
        ip("link", "set", self.hosts[index].link, "down")

    def heal(self, index: int) -> None:
        ip("link", "set", self.hosts[index].link, "up")

    def close(self) -> None:
        for host in self.hosts:
            ip("link", "del", host.link, check=False)  # both ends go
            ip("netns", "del", host.namespace, check=False)
        self.hosts = []


def listen_on(server_dir: Path, addresses: Sequence[str]) -> None:
    """Have the test database's server (scripts/pgserver.py) listen on ``addresses`` too,
    from its next start (empty: on 127.0.0.1 only)."""
    listen = server_dir / "listen"
    if addresses:
        listen.write_text("\n".join(addresses) + "\n")
    elif listen.exists():
        listen.unlink()
