#!/usr/bin/env python
"""Scaling benchmark: the drain rate and memory of ``runjobs`` as threads and processes grow.

    bash scripts/bench-scaling                                  # sets up the venv and the server
    DATABASE_URL=postgres://... python bench/scaling.py --out results.json
    python bench/scaling.py --database sqlite-wal --jobs 5000
    DATABASE_URL=postgres://... python bench/scaling.py --shapes 1x2,2x2

For each shape (P processes of T handler threads; ``--shapes``, by default
1x1, 1x2, 1x4, 1x8, 1x16, 2x4 and 4x4 on PostgreSQL, 1x1, 1x2, 1x4 and 2x2
on SQLite), the benchmark

1. empties every table of django_jobs, so that each shape starts alike;
2. enqueues ``--jobs`` ``demo.noop`` jobs with ``schedule_jobs()``, ``--batch``
   per call, then (PostgreSQL) ANALYZEs and CHECKPOINTs, or (SQLite)
   checkpoints the WAL;
3. starts P ``manage.py runjobs --queue default --workers T --burst``
   processes together and waits for all of them to exit;
4. reads the drain rate from the rows: jobs divided by the time from the first
   job's ``started_at`` to the last job's ``finished_at`` (the processes'
   start-up is left out, and shown apart); each process's peak resident memory
   and CPU time come from the kernel when the process is reaped (``wait4``:
   the peak RSS is /proc/PID/status's VmHWM at exit); on PostgreSQL the
   benchmark also samples how many connections the processes hold at most.

The benchmark talks to django-jobs only as users do: ``schedule_jobs()``,
``runjobs`` processes with the test project's default settings, and the rows.

``--database postgresql`` (the default) uses the server ``DATABASE_URL``
names, migrates it and empties its django_jobs tables: never point it at a
database whose jobs you want to keep. ``--database sqlite-wal`` uses a new
temporary SQLite file in WAL mode.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import harness
from harness import JOB_NAME, QUEUE, BenchError

REAP_POLL_SECONDS = 0.05
CONNECTIONS_POLL_SECONDS = 0.2
STOP_GRACE_SECONDS = 15.0
DEFAULT_SHAPES = {
    "postgresql": "1x1,1x2,1x4,1x8,1x16,2x4,4x4",
    "sqlite-wal": "1x1,1x2,1x4,2x2",
}


@dataclass(frozen=True)
class Shape:
    processes: int
    threads: int

    @property
    def label(self) -> str:
        return f"{self.processes}×{self.threads}"


@dataclass(frozen=True)
class Options:
    database: str
    shapes: list[Shape]
    jobs: int
    batch: int
    timeout: float
    worker_verbosity: int | None
    out: Path | None


@dataclass
class ShapeResult:
    """One shape's figures: rates in jobs per second, memory in MiB, times in seconds."""

    processes: int
    threads: int
    label: str
    jobs: int
    enqueue_rate: float = 0.0
    drain_seconds: float = 0.0
    drain_rate: float = 0.0
    start_up_seconds: float = 0.0
    start_spread_seconds: float = 0.0
    wall_seconds: float = 0.0
    peak_rss_mib: list[float] = field(default_factory=list)
    cpu_seconds: list[float] = field(default_factory=list)
    jobs_per_owner: list[int] = field(default_factory=list)
    peak_connections: int | None = None


# -- options and set-up -----------------------------------------------------------


def parse_shapes(text: str) -> list[Shape]:
    """``"1x4,2x4"`` (or ``1×4``) as shapes; ValueError on anything else."""
    shapes = []
    for item in text.split(","):
        processes, sep, threads = item.strip().replace("×", "x").partition("x")
        if not sep or not processes.isdigit() or not threads.isdigit():
            raise ValueError(f"a shape is PROCESSESxTHREADS, such as 2x4, not {item.strip()!r}")
        shape = Shape(int(processes), int(threads))
        if min(shape.processes, shape.threads) < 1:
            raise ValueError(f"a shape needs at least 1 process and 1 thread, not {item.strip()!r}")
        shapes.append(shape)
    return shapes


def parse_options(argv: list[str] | None = None) -> Options:
    parser = harness.option_parser(__doc__)
    harness.add_database_option(parser)
    parser.add_argument(
        "--shapes", help="PROCESSESxTHREADS, comma-separated (default: per database, see above)"
    )
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs to drain per shape")
    harness.add_batch_option(parser)
    parser.add_argument("--timeout", type=float, default=600.0, help="per shape (seconds)")
    parser.add_argument(
        "--worker-verbosity", type=int, help="runjobs --verbosity (default: runjobs' own)"
    )
    parser.add_argument("--out", type=Path, help="write the results to this JSON file")
    args = parser.parse_args(argv)
    try:
        shapes = parse_shapes(args.shapes or DEFAULT_SHAPES[args.database])
    except ValueError as exc:
        parser.error(str(exc))
    harness.require_at_least_one(parser, args, "jobs", "batch")
    return Options(
        args.database, shapes, args.jobs, args.batch, args.timeout, args.worker_verbosity, args.out
    )


def database_url(options: Options, work_dir: Path) -> str:
    if options.database == "sqlite-wal":
        return harness.sqlite_url(work_dir / "bench.sqlite3")
    return harness.postgresql_url("scripts/bench-scaling")


def prepare_database(options: Options) -> None:
    harness.migrate()
    if options.database == "sqlite-wal":
        harness.use_wal_journal()


# -- describing the run -------------------------------------------------------------


def database_settings() -> dict[str, str]:
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            return harness.sqlite_settings(cursor)
        names = ("server_version", "fsync", "synchronous_commit", "max_connections")
        settings = harness.server_settings(cursor, names)
    settings["version"] = settings.pop("server_version")
    return settings


def describe(settings: dict[str, str]) -> str:
    from django.db import connection

    rest = harness.format_settings({k: v for k, v in settings.items() if k != "version"})
    return f"{connection.display_name} {harness.short_version(settings['version'])} ({rest})"


def run_info(options: Options) -> dict[str, Any]:
    from django.db import connection

    settings = database_settings()
    database = {
        "database": options.database,
        "database_description": describe(settings),
        "database_settings": settings,
        "vendor": connection.vendor,
    }
    details = {"jobs": options.jobs, "batch": options.batch, "job": JOB_NAME}
    return harness.run_info("scaling", database, details)


# -- the processes --------------------------------------------------------------------


class Runjobs:
    """One ``runjobs --burst`` process, reaped by this benchmark to read its resource use."""

    def __init__(self, command: list[str], log: Path) -> None:
        self.log = log
        self.process = harness.start_process(command, log)
        self.peak_rss_mib = 0.0
        self.cpu_seconds = 0.0

    @property
    def exited(self) -> bool:
        return self.process.returncode is not None

    def reap(self, block: bool = False) -> bool:
        """Collect the exit status and resource use, if the process has exited."""
        if self.exited:
            return True
        pid, status, usage = os.wait4(self.process.pid, 0 if block else os.WNOHANG)
        if pid == 0:
            return False
        self.process.returncode = os.waitstatus_to_exitcode(status)
        self.peak_rss_mib = usage.ru_maxrss / 1024  # KiB on Linux
        self.cpu_seconds = usage.ru_utime + usage.ru_stime
        return True

    def stop(self) -> None:
        """SIGTERM by pid, SIGKILL if it does not exit in time."""
        if self.reap():
            return
        os.kill(self.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        while not self.reap() and time.monotonic() < deadline:
            time.sleep(REAP_POLL_SECONDS)
        if not self.exited:
            os.kill(self.process.pid, signal.SIGKILL)
            self.reap(block=True)


def runjobs_command(shape: Shape, options: Options) -> list[str]:
    command = harness.runjobs_command("--queue", QUEUE, "--workers", str(shape.threads), "--burst")
    if options.worker_verbosity is not None:
        command += ["--verbosity", str(options.worker_verbosity)]
    return command


def connection_count() -> int | None:
    """Connections to this database other than the benchmark's own (PostgreSQL only)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def wait_for_exit(workers: list[Runjobs], timeout: float) -> int | None:
    """Reap every worker; the peak number of connections seen meanwhile (PostgreSQL)."""
    deadline = time.monotonic() + timeout
    peak: int | None = connection_count()
    next_sample = time.monotonic() + CONNECTIONS_POLL_SECONDS
    while not all(worker.reap() for worker in workers):
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:.0f} s")
        if time.monotonic() >= next_sample:
            count = connection_count()
            peak = None if count is None else max(peak or 0, count)
            next_sample = time.monotonic() + CONNECTIONS_POLL_SECONDS
        time.sleep(REAP_POLL_SECONDS)
    return peak


def run_workers(shape: Shape, options: Options, log_dir: Path, result: ShapeResult) -> float:
    """Start the shape's processes together, wait for them all; the launch's time.time()."""
    command = runjobs_command(shape, options)
    workers: list[Runjobs] = []
    launched = time.time()
    start = time.perf_counter()
    try:
        for number in range(shape.processes):
            log = log_dir / f"runjobs-{shape.processes}x{shape.threads}-{number}.log"
            workers.append(Runjobs(command, log))
        result.peak_connections = wait_for_exit(workers, options.timeout)
        result.wall_seconds = time.perf_counter() - start
        codes = [worker.process.returncode for worker in workers]
        if any(codes):
            raise BenchError(f"runjobs exited with codes {codes}")
    except BaseException:
        for worker in workers:
            worker.stop()
            harness.print_log_tail(worker.log)
        raise
    result.peak_rss_mib = [round(worker.peak_rss_mib, 1) for worker in workers]
    result.cpu_seconds = [round(worker.cpu_seconds, 2) for worker in workers]
    return launched


# -- reading the rows -----------------------------------------------------------------


def read_drain(total: int, launched: float, result: ShapeResult) -> None:
    """The drain's figures from the jobs and their attempts."""
    from django.db.models import Count, Min

    from django_jobs.models import Attempt

    first, last = harness.drain_span(total)
    result.drain_seconds = (last - first).total_seconds()
    result.drain_rate = total / result.drain_seconds
    result.start_up_seconds = first.timestamp() - launched
    owners = Attempt.objects.order_by().values("owner")
    owners = owners.annotate(first=Min("started_at"), jobs=Count("id")).order_by("first")
    firsts = [row["first"] for row in owners]
    result.start_spread_seconds = (firsts[-1] - firsts[0]).total_seconds() if firsts else 0.0
    result.jobs_per_owner = [row["jobs"] for row in owners]


def run_shape(shape: Shape, options: Options, log_dir: Path) -> ShapeResult:
    result = ShapeResult(shape.processes, shape.threads, shape.label, options.jobs)
    harness.empty_tables()
    result.enqueue_rate = options.jobs / harness.schedule_noop_jobs(options.jobs, options.batch)
    harness.settle_database()
    launched = run_workers(shape, options, log_dir, result)
    read_drain(options.jobs, launched, result)
    return result


# -- the report -----------------------------------------------------------------------

COLUMNS = [
    ("shape", 7),
    ("drain jobs/s", 13),
    ("drain s", 9),
    ("start-up s", 11),
    ("spread s", 10),
    ("peak RSS MiB", 20),
    ("CPU ms/job", 11),
    ("connections", 13),
]


def table_row(result: ShapeResult) -> list[str]:
    rss = ", ".join(f"{value:.0f}" for value in result.peak_rss_mib)
    cpu = 1000 * sum(result.cpu_seconds) / result.jobs
    connections = "-" if result.peak_connections is None else str(result.peak_connections)
    return [
        result.label,
        f"{result.drain_rate:,.0f}",
        f"{result.drain_seconds:.2f}",
        f"{result.start_up_seconds:.2f}",
        f"{result.start_spread_seconds:.2f}",
        rss,
        f"{cpu:.2f}",
        connections,
    ]


def format_table(results: list[ShapeResult]) -> str:
    rows = [table_row(result) for result in results]
    return harness.format_table(COLUMNS, rows, align=">" * len(COLUMNS))


def print_report(info: dict[str, Any], results: list[ShapeResult]) -> None:
    print(f"\n{info['database_description']}")
    print(
        f"{harness.software_line(info)}; {info['jobs']:,} x {JOB_NAME} per shape"
        " (PROCESSESxTHREADS: runjobs --burst processes x --workers)"
    )
    print(format_table(results))


# -- main -------------------------------------------------------------------------------


def run(options: Options, work_dir: Path) -> tuple[dict[str, Any], list[ShapeResult]]:
    harness.configure_environment(database_url(options, work_dir), PYTHONUNBUFFERED="1")
    harness.setup_django()
    prepare_database(options)
    info = run_info(options)
    print(info["database_description"], file=sys.stderr)
    results = []
    for shape in options.shapes:
        harness.heading(shape.label)
        results.append(run_shape(shape, options, work_dir))
    harness.empty_tables()
    return info, results


def main(argv: list[str] | None = None) -> int:
    options = parse_options(argv)
    harness.raise_on_sigterm()
    with harness.work_directory("django-jobs-scaling.") as work_dir:
        try:
            info, results = run(options, work_dir)
        except BenchError as exc:
            return harness.failed(exc)
    print_report(info, results)
    if options.out:
        data = {**info, "shapes": [asdict(result) for result in results]}
        harness.write_json(options.out, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
