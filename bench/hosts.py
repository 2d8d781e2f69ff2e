#!/usr/bin/env python
"""Hosts benchmark: the drain of 1, 2, 4 and 8 worker hosts against one PostgreSQL server,
straight and through PgBouncer, and the connections the server holds.

    sudo bash scripts/bench-hosts                 # sets up the server, the pooler, the hosts
    python bench/hosts.py --pg-dir DIR --pg-url URL --pgbouncer-dir DIR2 --out results.json

Each host is a Linux network namespace with its own veth link to this machine
(``tests/support/hosts.py``): its ``runjobs`` reaches the server over that link only, as a
process on another machine would. For each way (straight to the server; through a
PgBouncer in transaction mode, with ``PREPARED_STATEMENTS`` off, server-side cursors
off and ``LISTEN_DATABASE`` on a direct alias) and each number of hosts, the benchmark

1. empties django_jobs' tables and enqueues ``--jobs`` ``demo.noop`` jobs;
2. starts one ``runjobs --queue default --workers T --burst`` on each host at once and
   waits for them to exit;
3. reads the drain rate from the rows (first ``started_at`` to last ``finished_at``, as
   bench/scaling.py does) and, sampled meanwhile, the most connections the server held
   to the database (through PgBouncer: its server connections, and the listeners).

It needs root (the namespaces) and the server of ``scripts/pgserver.py`` in ``--pg-dir``,
which it restarts to listen on the hosts' links too, and restarts again at the end. This
machine's cores are shared by every host: the figures say how the database and the
pooler carry many hosts, not how fast many machines would be.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import harness
import scaling
from harness import QUEUE, BenchError

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support.hosts import Hosts, listen_on, unavailable  # noqa: E402

WAYS = ("straight", "PgBouncer")


@dataclass(frozen=True)
class Options:
    hosts: list[int]
    threads: int
    jobs: int
    batch: int
    timeout: float
    pg_dir: Path
    pg_url: str
    pgbouncer_dir: Path | None
    out: Path | None


@dataclass
class HostsResult:
    """One run's figures, in the shape bench/chart.py draws (``shapes``)."""

    series: str
    hosts: int
    label: str
    jobs: int
    processes: int
    threads: int
    drain_seconds: float = 0.0
    drain_rate: float = 0.0
    start_up_seconds: float = 0.0
    peak_connections: int | None = None
    jobs_per_owner: list[int] = field(default_factory=list)


def parse_options(argv: list[str] | None = None) -> Options:
    parser = harness.option_parser(__doc__)
    parser.add_argument("--hosts", default="1,2,4,8", help="numbers of hosts, comma-separated")
    parser.add_argument("--threads", type=int, default=2, help="runjobs --workers per host")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs to drain per run")
    harness.add_batch_option(parser)
    parser.add_argument("--timeout", type=float, default=600.0, help="per run (seconds)")
    parser.add_argument("--pg-dir", type=Path, required=True, help="scripts/pgserver.py's DIR")
    parser.add_argument("--pg-url", required=True, help="that server's DATABASE_URL")
    parser.add_argument("--pgbouncer-dir", type=Path, help="a directory for PgBouncer's files")
    parser.add_argument("--out", type=Path, help="write the results to this JSON file")
    args = parser.parse_args(argv)
    try:
        hosts = sorted({int(part) for part in args.hosts.split(",")})
    except ValueError:
        parser.error(f"--hosts is numbers, comma-separated, not {args.hosts!r}")
    if min(hosts) < 1 or max(hosts) > 32:
        parser.error("--hosts takes 1 to 32 hosts")
    harness.require_at_least_one(parser, args, "jobs", "batch", "threads")
    return Options(
        hosts,
        args.threads,
        args.jobs,
        args.batch,
        args.timeout,
        args.pg_dir,
        args.pg_url,
        args.pgbouncer_dir,
        args.out,
    )


def server(verb: str, directory: Path) -> None:
    script = str(ROOT / "scripts" / "pgserver.py")
    subprocess.run([sys.executable, script, verb, str(directory)], check=True, timeout=120)


def pgbouncer(*args: str) -> str:
    script = str(ROOT / "scripts" / "pgbouncer.py")
    done = subprocess.run(
        [sys.executable, script, *args], check=True, timeout=60, capture_output=True, text=True
    )
    return done.stdout.strip()


def reached_at(url: str, address: str) -> str:
    """``url`` with its host:port replaced by ``address`` (and its port kept)."""
    parts = urlsplit(url)
    auth = f"{parts.username}@" if parts.username else ""
    return parts._replace(netloc=f"{auth}{address}:{parts.port}").geturl()


class HostRunjobs(scaling.Runjobs):
    """One ``runjobs --burst`` in a host's namespace, with the environment given."""

    def __init__(self, command: list[str], log: Path, env: dict[str, str]) -> None:
        self.log = log
        with open(log, "wb") as output:
            self.process = subprocess.Popen(  # noqa: S603
                command, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT
            )
        self.peak_rss_mib = 0.0
        self.cpu_seconds = 0.0


def environment(
    way: str, hosts: Hosts, index: int, options: Options, pooled: str
) -> dict[str, str]:
    address = hosts[index].server_address
    straight = reached_at(options.pg_url, address)
    env = {**os.environ, "DATABASE_URL": straight, "PYTHONUNBUFFERED": "1"}
    if way == "PgBouncer":
        env.update(
            DATABASE_URL=reached_at(pooled, address),
            JOBS_PGBOUNCER="1",
            LISTEN_DATABASE_URL=straight,
        )
    return env


def run_hosts(
    way: str, count: int, hosts: Hosts, options: Options, pooled: str, log_dir: Path
) -> HostsResult:
    result = HostsResult(way, count, f"{count}", options.jobs, count, options.threads)
    harness.empty_tables()
    harness.schedule_noop_jobs(options.jobs, options.batch)
    harness.settle_database()
    command = harness.runjobs_command(
        "--queue", QUEUE, "--workers", str(options.threads), "--burst"
    )
    workers: list[scaling.Runjobs] = []
    launched = time.time()
    try:
        for index in range(count):
            log = log_dir / f"runjobs-{way}-{count}-{index}.log"
            env = environment(way, hosts, index, options, pooled)
            workers.append(HostRunjobs(hosts.command(index, command), log, env))
        result.peak_connections = scaling.wait_for_exit(workers, options.timeout)
        codes = [worker.process.returncode for worker in workers]
        if any(codes):
            raise BenchError(f"runjobs exited with codes {codes}")
    except BaseException:
        for worker in workers:
            worker.stop()
            harness.print_log_tail(worker.log)
        raise
    figures = scaling.ShapeResult(count, options.threads, result.label, options.jobs)
    scaling.read_drain(options.jobs, launched, figures)
    result.drain_seconds, result.drain_rate = figures.drain_seconds, figures.drain_rate
    result.start_up_seconds, result.jobs_per_owner = (
        figures.start_up_seconds,
        figures.jobs_per_owner,
    )
    return result


COLUMNS = [("way", 11), ("hosts", 6), ("drain jobs/s", 13), ("drain s", 9), ("connections", 12)]


def print_report(info: dict[str, Any], results: list[HostsResult]) -> None:
    print(f"\n{info['database_description']}")
    print(
        f"{harness.software_line(info)}; {info['jobs']:,} x demo.noop per run, one runjobs "
        f"--workers {info['threads']} --burst per host"
    )
    rows = [
        [
            result.series,
            str(result.hosts),
            f"{result.drain_rate:,.0f}",
            f"{result.drain_seconds:.2f}",
            "-" if result.peak_connections is None else str(result.peak_connections),
        ]
        for result in results
    ]
    print(harness.format_table(COLUMNS, rows, align="<>>>>"))


def run(options: Options, hosts: Hosts, work_dir: Path) -> tuple[dict[str, Any], list[HostsResult]]:
    harness.configure_environment(options.pg_url, PYTHONUNBUFFERED="1")
    harness.setup_django()
    harness.migrate()
    info = scaling.run_info(
        scaling.Options("postgresql", [], options.jobs, options.batch, options.timeout, None, None)
    )
    info.update(
        title="django-jobs: drain rate by worker hosts, straight and through PgBouncer",
        x_title=f"worker hosts (network namespaces), one runjobs --workers {options.threads} each",
        threads=options.threads,
    )
    pooled = ""
    if options.pgbouncer_dir is not None:
        pooled = pgbouncer(
            "start", str(options.pgbouncer_dir), options.pg_url, *hosts.server_addresses
        )
    results = []
    try:
        for way in WAYS if pooled else WAYS[:1]:
            for count in options.hosts:
                harness.heading(f"{way}, {count} host(s)")
                results.append(run_hosts(way, count, hosts, options, pooled, work_dir))
        harness.empty_tables()
    finally:
        if options.pgbouncer_dir is not None:
            pgbouncer("stop", str(options.pgbouncer_dir))
    return info, results


def main(argv: list[str] | None = None) -> int:
    options = parse_options(argv)
    why = unavailable()
    if why:
        print(f"bench/hosts.py: {why}", file=sys.stderr)
        return 2
    harness.raise_on_sigterm()
    hosts = Hosts(max(options.hosts))
    try:
        listen_on(options.pg_dir, hosts.server_addresses)
        server("stop", options.pg_dir)
        server("start", options.pg_dir)
        with harness.work_directory("django-jobs-hosts.") as work_dir:
            try:
                info, results = run(options, hosts, work_dir)
            except BenchError as exc:
                return harness.failed(exc)
    finally:
        from django.conf import settings

        if settings.configured:
            from django.db import connections

            connections.close_all()
        listen_on(options.pg_dir, [])
        server("stop", options.pg_dir)
        server("start", options.pg_dir)
        hosts.close()
    print_report(info, results)
    if options.out:
        data = {**info, "shapes": [asdict(result) for result in results]}
        harness.write_json(options.out, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
