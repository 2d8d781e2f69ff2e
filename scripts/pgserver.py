#!/usr/bin/env python3
"""Start or stop a private PostgreSQL server for the tests, on 127.0.0.1.

    python scripts/pgserver.py start DIR   # prints the DATABASE_URL
    python scripts/pgserver.py stop DIR

The cluster lives in DIR (created if needed) and listens on a free port of
127.0.0.1 (and on the addresses listed in DIR/listen, one per line: the host
side of network namespaces a test made); started again after a stop, it keeps
its port and data (the fault tests stop and start it under running workers).
As root, the server runs as the ``postgres`` system user, since PostgreSQL
refuses to run as root. ``PGSERVER_DURABLE=1`` keeps PostgreSQL's durability
(benchmarks); ``PGSERVER_PRELOAD=pg_stat_statements`` loads that module.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path


def bindir() -> Path:
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4])
    )
    if found:
        return Path(found[-1]).parent
    pg_ctl = shutil.which("pg_ctl")
    if pg_ctl:
        return Path(pg_ctl).parent
    sys.exit("pgserver: PostgreSQL server binaries not found (install Debian's 'postgresql')")


def as_server_user(args: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *args]
    return args


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(root: Path) -> str:
    root.mkdir(parents=True, exist_ok=True)
    data, log = root / "data", root / "server.log"
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    root.chmod(0o755)
    bins = bindir()
    if not (data / "PG_VERSION").exists():
        subprocess.run(
            as_server_user(
                [
                    str(bins / "initdb"),
                    "-D",
                    str(data),
                    "-A",
                    "trust",
                    "-U",
                    "postgres",
                    "-E",
                    "UTF8",
                    "--no-sync",
                ]
            ),
            check=True,
            stdout=subprocess.DEVNULL,
        )
    port_file = root / "port"
    port = int(port_file.read_text()) if port_file.exists() else free_port()
    port_file.write_text(str(port))
    # More addresses to listen on (the host side of network namespaces a test made), one
    # per line of DIR/listen: a test writes it and starts the server again.
    extra = root / "listen"
    addresses = ["127.0.0.1", *(extra.read_text().split() if extra.exists() else [])]
    allow_test_hosts(data)
    listen = ",".join(addresses)
    options = f"-c listen_addresses={listen} -p {port} -k {root} -c max_connections=200"
    if os.environ.get("PGSERVER_DURABLE") != "1":
        # Tests need no crash safety; benchmarks set PGSERVER_DURABLE=1 to keep it.
        options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    preload = os.environ.get("PGSERVER_PRELOAD")
    if preload:  # e.g. pg_stat_statements, for a benchmark that reads what was sent
        options += f" -c shared_preload_libraries={preload}"
    subprocess.run(
        as_server_user(
            [
                str(bins / "pg_ctl"),
                "-D",
                str(data),
                "-o",
                options,
                "-l",
                str(log),
                "-w",
                "-t",
                "60",
                "start",
            ]
        ),
        check=True,
        stdout=subprocess.DEVNULL,
    )
    url = f"postgres://postgres@127.0.0.1:{port}/django_jobs"
    psql = [str(bins / "psql"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-qAt"]
    exists = subprocess.run(
        [*psql, "-c", "SELECT 1 FROM pg_database WHERE datname = 'django_jobs'"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not exists:
        subprocess.run(
            [*psql, "-c", "CREATE DATABASE django_jobs"], check=True, stdout=subprocess.DEVNULL
        )
    (root / "url").write_text(url)
    return url


def allow_test_hosts(data: Path) -> None:
    """Let in, with trust as from 127.0.0.1, the range the tests give the hosts they make
    (198.18.0.0/15, set aside for benchmarks: never a real network's)."""
    hba = data / "pg_hba.conf"
    line = "host all all 198.18.0.0/15 trust\n"
    if line not in hba.read_text():
        with hba.open("a") as out:
            out.write(line)


def stop(root: Path) -> None:
    data = root / "data"
    if (data / "postmaster.pid").exists():
        subprocess.run(
            as_server_user([str(bindir() / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"]),
            check=False,
            stdout=subprocess.DEVNULL,
        )


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in {"start", "stop"}:
        sys.exit(__doc__)
    target = Path(sys.argv[2]).resolve()
    if sys.argv[1] == "start":
        print(start(target))
    else:
        stop(target)
