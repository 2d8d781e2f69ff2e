#!/usr/bin/env python3
"""Start or stop a private PgBouncer in transaction mode, in front of a PostgreSQL server.

    python scripts/pgbouncer.py start DIR DATABASE_URL [ADDRESS...]   # prints it pooled
    python scripts/pgbouncer.py release DIR DBNAME       # drop its connections to DBNAME
    python scripts/pgbouncer.py stop DIR

It listens on a free port of 127.0.0.1 (and of each ADDRESS: the host side of network
namespaces a bench made) and passes every database name through to the
server of DATABASE_URL (``* = host=... port=...``), with trust authentication, as the
tests' servers have. ``release`` asks its console to drop the server connections it
keeps to a database (``KILL``, then ``RESUME``), so that the database can be dropped.
As root, it runs as the ``postgres`` system user. Its files and log live in DIR.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit


def binary() -> str:
    found = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not Path(found).exists():
        sys.exit("pgbouncer: not found (install Debian's 'pgbouncer')")
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def start(root: Path, url: str, addresses: list[str] | None = None) -> str:
    server = urlsplit(url)
    root.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    user = server.username or "postgres"
    port = free_port()
    (root / "users.txt").write_text(f'"{user}" ""\n')
    (root / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={server.hostname} port={server.port}\n"
        "[pgbouncer]\n"
        f"listen_addr = {','.join(['127.0.0.1', *(addresses or [])])}\n"
        f"listen_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {root / 'users.txt'}\n"
        f"admin_users = {user}\n"
        "pool_mode = transaction\n"
        "max_client_conn = 1000\ndefault_pool_size = 40\n"
        f"logfile = {root / 'pgbouncer.log'}\npidfile = {root / 'pgbouncer.pid'}\n"
    )
    # It reads its files first, then (as root) drops to the server's user.
    as_user = ["-u", "postgres"] if os.geteuid() == 0 else []
    subprocess.run([binary(), "-d", *as_user, str(root / "pgbouncer.ini")], check=True)
    deadline = time.monotonic() + 10
    while not port_open(port):
        if time.monotonic() > deadline:
            log = root / "pgbouncer.log"
            sys.exit(
                f"pgbouncer did not listen on {port}: {log.read_text() if log.exists() else ''}"
            )
        time.sleep(0.05)
    pooled = urlunsplit(server._replace(netloc=f"{user}@127.0.0.1:{port}"))
    (root / "url").write_text(pooled)
    return pooled


def release(root: Path, database: str) -> None:
    """Drop PgBouncer's connections to ``database`` (its console's KILL), then let new
    ones in again (RESUME)."""
    pooled = urlsplit((root / "url").read_text())
    psql = shutil.which("psql") or "psql"
    base = [psql, "-h", "127.0.0.1", "-p", str(pooled.port), "-U", pooled.username or "postgres"]
    for command in (f"KILL {database}", f"RESUME {database}"):
        subprocess.run(
            [*base, "-qAt", "-c", command, "pgbouncer"], check=False, capture_output=True
        )


def stop(root: Path) -> None:
    pid_file = root / "pgbouncer.pid"
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text())
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command == "start" and len(sys.argv) >= 4:
        print(start(Path(sys.argv[2]).resolve(), sys.argv[3], sys.argv[4:]))
    elif command == "release" and len(sys.argv) == 4:
        release(Path(sys.argv[2]).resolve(), sys.argv[3])
    elif command == "stop" and len(sys.argv) == 3:
        stop(Path(sys.argv[2]).resolve())
    else:
        sys.exit(__doc__)
