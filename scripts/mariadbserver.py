#!/usr/bin/env python3
"""Start or stop a private MariaDB server for the tests, on 127.0.0.1.

    python scripts/mariadbserver.py start DIR   # prints the DATABASE_URL
    python scripts/mariadbserver.py stop DIR

The server's data, socket, log and pid file live in DIR (created if needed)
and it listens on a free port of 127.0.0.1; started again after a stop, it
keeps its port and data. As root it runs as the ``mysql`` system user. The
``root`` account answers without a password on 127.0.0.1 only. Tests need no
crash safety: unless ``MARIADBSERVER_DURABLE=1``, commits are not flushed.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

SERVER_USER = "mysql"


def binary(*names: str) -> str:
    for name in names:
        for where in (shutil.which(name), f"/usr/sbin/{name}", f"/usr/bin/{name}"):
            if where and os.access(where, os.X_OK):
                return where
    sys.exit(f"mariadbserver: {names[0]} not found (install Debian's 'mariadb-server')")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def client(root: Path) -> list[str]:
    return [binary("mariadb", "mysql"), f"--socket={root / 'mysqld.sock'}", "-uroot"]


def start(root: Path) -> str:
    root.mkdir(parents=True, exist_ok=True)
    data = root / "data"
    as_root = os.geteuid() == 0
    if as_root:
        shutil.chown(root, SERVER_USER, SERVER_USER)
    root.chmod(0o755)
    user = [f"--user={SERVER_USER}"] if as_root else []
    if not (data / "mysql").exists():
        subprocess.run(
            [
                binary("mariadb-install-db", "mysql_install_db"),
                f"--datadir={data}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                *user,
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    port_file = root / "port"
    port = int(port_file.read_text()) if port_file.exists() else free_port()
    port_file.write_text(str(port))
    options = [
        "--no-defaults",  # not the machine's my.cnf: this server is the tests' alone
        f"--datadir={data}",
        f"--socket={root / 'mysqld.sock'}",
        f"--pid-file={root / 'mysqld.pid'}",
        f"--log-error={root / 'server.log'}",
        "--bind-address=127.0.0.1",
        f"--port={port}",
        "--max-connections=300",
        "--character-set-server=utf8mb4",
        "--collation-server=utf8mb4_unicode_ci",
        "--innodb-buffer-pool-size=256M",
        "--skip-name-resolve",
        *user,
    ]
    if os.environ.get("MARIADBSERVER_DURABLE") != "1":
        options += [
            "--innodb-flush-log-at-trx-commit=0",
            "--sync-binlog=0",
            "--innodb-doublewrite=0",
        ]
    log = open(root / "mysqld.out", "ab")  # noqa: SIM115 - the server's own output
    subprocess.Popen(  # noqa: S603 - Debian's server binary
        [binary("mariadbd", "mysqld"), *options],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    deadline = time.monotonic() + 60
    while True:
        ready = subprocess.run([*client(root), "-e", "SELECT 1"], capture_output=True)
        if ready.returncode == 0:
            break
        if time.monotonic() > deadline:
            sys.exit(f"mariadbserver: not up after 60 s; see {root / 'server.log'}")
        time.sleep(0.2)
    subprocess.run(
        [
            *client(root),
            "-e",
            "CREATE DATABASE IF NOT EXISTS django_jobs CHARACTER SET utf8mb4;"
            " CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';"
            " GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;",
        ],
        check=True,
    )
    url = f"mysql://root@127.0.0.1:{port}/django_jobs"
    (root / "url").write_text(url)
    return url


def stop(root: Path) -> None:
    pid_file = root / "mysqld.pid"
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text().strip())
    try:
        os.kill(pid, 15)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in {"start", "stop"}:
        sys.exit(__doc__)
    target = Path(sys.argv[2]).resolve()
    if sys.argv[1] == "start":
        print(start(target))
    else:
        stop(target)
