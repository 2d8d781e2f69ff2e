#!/usr/bin/env python
"""Peers benchmark: django-jobs beside django-tasks-db and procrastinate, on PostgreSQL.

    bash scripts/bench-peers                      # sets up the virtualenvs and the server
    DATABASE_URL=postgres://... python bench/peers.py --jobs 2000 --only procrastinate

Each system gets a fresh database of its own on the server ``DATABASE_URL``
names (``bench_django_jobs``, ...: dropped and created again) and runs in its
own virtualenv, through a driver in bench/peers/ that measures, with the same
shape for every system (see bench/peers/common.py):

- bulk enqueue, jobs/s: ``--jobs`` no-op jobs in calls of ``--batch``;
- one-by-one enqueue, jobs/s: ``--jobs`` calls, each its own transaction;
- drain, jobs/s: those jobs, from the first pickup until all have succeeded;
- pickup latency of an idle worker: enqueue commit to handler start, p50 and
  p90 of ``--pickups`` jobs enqueued one at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
DRIVERS = ROOT / "bench" / "peers"
ENVS = ROOT / "bench" / ".envs"
STOP_GRACE_SECONDS = 30.0


@dataclass(frozen=True)
class Peer:
    name: str
    python: Path
    driver: str
    database: str


PEERS = [
    Peer("django-jobs", ROOT / ".venv/bin/python", "run_django_jobs.py", "bench_django_jobs"),
    Peer("django-tasks-db", ENVS / "tasks-db/bin/python", "run_tasks_db.py", "bench_tasks_db"),
    Peer(
        "procrastinate",
        ENVS / "procrastinate/bin/python",
        "run_procrastinate.py",
        "bench_procrastinate",
    ),
]


@dataclass(frozen=True)
class Options:
    jobs: int
    pickups: int
    batch: int
    timeout: float
    only: str | None


def parse_options(argv: list[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5_000, help="jobs to enqueue and drain")
    parser.add_argument("--pickups", type=int, default=30, help="jobs for the pickup latency")
    parser.add_argument("--batch", type=int, default=500, help="jobs per bulk enqueue call")
    parser.add_argument("--timeout", type=float, default=900.0, help="per system (seconds)")
    parser.add_argument("--only", choices=[peer.name for peer in PEERS], help="one system")
    args = parser.parse_args(argv)
    if min(args.jobs, args.batch) < 1 or args.pickups < 0:
        parser.error("--jobs and --batch must be at least 1, --pickups at least 0")
    return Options(**vars(args))


# -- the server -----------------------------------------------------------------


def server_url() -> str:
    url = os.environ.get("DATABASE_URL", "")
    if urlsplit(url).scheme not in ("postgres", "postgresql"):
        sys.exit("bench/peers.py: set DATABASE_URL to a PostgreSQL server (as scripts/bench-peers)")
    return url


def database_url(url: str, database: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{database}"))


def create_database(url: str, database: str) -> None:
    """Drop ``database`` if it exists and create it empty, then checkpoint.

    The checkpoint writes out what the previous system left dirty, so that its
    writes are not spread over the next system's run.
    """
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as connection:
        name = sql.Identifier(database)
        connection.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
        connection.execute(sql.SQL("CREATE DATABASE {}").format(name))
        connection.execute("CHECKPOINT")


def server_description(url: str) -> str:
    import psycopg

    query = "SELECT current_setting('server_version'), current_setting('fsync'),"
    query += " current_setting('synchronous_commit')"
    with psycopg.connect(url) as connection:
        version, fsync, synchronous_commit = connection.execute(query).fetchone() or ("?",) * 3
    return f"PostgreSQL {version} (fsync={fsync}, synchronous_commit={synchronous_commit})"


# -- running a driver -------------------------------------------------------------


def run_peer(peer: Peer, url: str, options: Options, work_dir: Path) -> dict[str, Any] | None:
    """Run ``peer``'s driver in its virtualenv; its result, or None if it failed."""
    if not peer.python.exists():
        print(f"{peer.name}: no virtualenv at {peer.python} (run scripts/bench-peers)")
        return None
    create_database(url, peer.database)
    log_dir = work_dir / peer.name
    log_dir.mkdir()
    result = log_dir / "result.json"
    command = [str(peer.python), str(DRIVERS / peer.driver), "--jobs", str(options.jobs)]
    command += ["--pickups", str(options.pickups), "--batch", str(options.batch)]
    command += ["--timeout", str(options.timeout), "--log-dir", str(log_dir)]
    command += ["--result", str(result)]
    env = {**os.environ, "DATABASE_URL": database_url(url, peer.database), "PYTHONUNBUFFERED": "1"}
    print(f"== {peer.name}", file=sys.stderr, flush=True)
    process = subprocess.Popen(command, cwd=ROOT, env=env)
    try:
        # Enqueues and pickups take far less than a drain; the drain has its own timeout.
        code = process.wait(options.timeout * 2)
    except subprocess.TimeoutExpired:
        print(f"{peer.name}: timed out", file=sys.stderr)
        code = None
    finally:
        stop(process)
    if code != 0 or not result.exists():
        print(f"{peer.name}: the driver failed (exit code {code})", file=sys.stderr)
        return None
    data: dict[str, Any] = json.loads(result.read_text())
    return data


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the driver by pid (it stops its own workers), SIGKILL it if it lingers."""
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(STOP_GRACE_SECONDS)


# -- the report -------------------------------------------------------------------

COLUMNS = [
    ("system", 16),
    ("workers", 33),
    ("bulk enqueue/s", 26),
    ("1-by-1 enqueue/s", 17),
    ("drain jobs/s", 13),
    ("start-up s", 11),
    ("pickup p50", 11),
    ("p90", 9),
]


def rate(value: float | None) -> str:
    return "none" if value is None else f"{value:,.0f}"


def milliseconds(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:,.0f} ms"


def table_row(result: dict[str, Any]) -> list[str]:
    bulk = rate(result["bulk_rate"])
    if result["bulk_api"]:
        bulk = f"{bulk} ({result['bulk_api']})"
    return [
        result["system"],
        result["workers"],
        bulk,
        rate(result["one_by_one_rate"]),
        rate(result["drain_rate"]),
        f"{result['drain_start_up_seconds']:.2f}",
        milliseconds(result["pickup_p50"]),
        milliseconds(result["pickup_p90"]),
    ]


def print_report(results: list[dict[str, Any]], description: str, options: Options) -> None:
    print(f"\n{description}; {os.cpu_count()} cpus")
    print(
        f"{options.jobs:,} no-op jobs; bulk calls of {options.batch};"
        f" pickup latency over {options.pickups} jobs"
    )
    cells = [[name for name, _ in COLUMNS]] + [table_row(result) for result in results]
    for row in cells:
        print("".join(cell.ljust(width) for cell, (_, width) in zip(row, COLUMNS, strict=True)))
    print("versions:")
    for result in results:
        versions = ", ".join(f"{name} {version}" for name, version in result["versions"].items())
        print(f"  {result['system']}: {versions}")


def raise_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit, so that the running driver is stopped on the way out."""

    def handle(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handle)


def main(argv: list[str] | None = None) -> int:
    options = parse_options(argv)
    raise_on_sigterm()
    url = server_url()
    peers = [peer for peer in PEERS if options.only in (None, peer.name)]
    results = []
    with tempfile.TemporaryDirectory(prefix="django-jobs-peers.") as name:
        for peer in peers:
            result = run_peer(peer, url, options, Path(name))
            if result is not None:
                results.append(result)
    print_report(results, server_description(url), options)
    return 0 if len(results) == len(peers) else 1


if __name__ == "__main__":
    sys.exit(main())
