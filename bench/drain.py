#!/usr/bin/env python
"""Drain benchmark: enqueue no-op jobs, then drain them with real ``runjobs`` processes.

    python bench/drain.py                              # a fresh temporary SQLite file
    DATABASE_URL=postgres://... python bench/drain.py  # migrate, then empty the jobs tables
    python bench/drain.py --jobs 2000 --workers 2 --threads 1

Three figures, each in jobs per second:

1. ``schedule_job()`` called once per job, each call its own transaction;
2. ``schedule_jobs()`` called with batches of ``--batch`` jobs;
3. the drain: ``--workers`` processes of ``manage.py runjobs --burst`` with
   ``--threads`` handler threads each, timed from their start until every job
   is ``succeeded`` (the benchmark polls the database). The time to the first
   pickup, which includes the processes' start-up, is reported as well, and the
   drain as the attempts' rows tell it: from the first one's start to the last
   one's end, which neither the processes' start-up nor the polling's step
   lengthens.

With ``--vacuum`` (PostgreSQL), the jobs table is vacuumed and analysed once the
jobs are in, before the drain: the claims then start from the statistics and the
visibility map a table that has been in use for a while has.

The jobs of the first phase are deleted before the second, so the drain
starts with exactly ``--jobs`` pending jobs. Without ``DATABASE_URL``, or
with a SQLite one, the benchmark uses a new temporary SQLite file (never the
file the URL names, though its options are kept). Any other database is
migrated and its Job and Attempt rows are deleted: do not point it at a
database whose jobs you want to keep.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import harness
from harness import JOB_NAME, QUEUE, BenchError

DB_POLL_SECONDS = 0.05
STOP_GRACE_SECONDS = 10.0
COLUMNS = [("phase", 58), ("seconds", 9), ("jobs/s", 10)]


@dataclass(frozen=True)
class Options:
    jobs: int
    workers: int
    threads: int
    batch: int
    poll: float
    timeout: float
    worker_verbosity: int
    sqlite_wal: bool
    vacuum: bool


@dataclass(frozen=True)
class Row:
    """One line of the results table; ``jobs`` is None when a rate makes no sense."""

    label: str
    seconds: float
    jobs: int | None = None

    def cells(self) -> list[str]:
        rate = f"{self.jobs / self.seconds:,.0f}" if self.jobs and self.seconds else "-"
        return [self.label, f"{self.seconds:.2f}", rate]


# -- set-up ----------------------------------------------------------------


def parse_options(argv: list[str] | None = None) -> Options:
    parser = harness.option_parser(__doc__)
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs to enqueue and drain")
    parser.add_argument("--workers", type=int, default=2, help="runjobs processes")
    parser.add_argument("--threads", type=int, default=2, help="handler threads per process")
    harness.add_batch_option(parser)
    parser.add_argument("--poll", type=float, default=0.05, help="workers' POLL_SECONDS")
    parser.add_argument("--timeout", type=float, default=900.0, help="give up after (seconds)")
    parser.add_argument(
        "--worker-verbosity", type=int, default=1, help="runjobs --verbosity (1 logs each job)"
    )
    parser.add_argument(
        "--sqlite-wal", action="store_true", help="put the SQLite file in WAL journal mode"
    )
    parser.add_argument(
        "--vacuum",
        action="store_true",
        help="PostgreSQL: VACUUM ANALYZE the jobs table once the jobs are in, before the drain",
    )
    args = parser.parse_args(argv)
    harness.require_at_least_one(parser, args, "jobs", "workers", "threads", "batch")
    return Options(**vars(args))


def configure_environment(url: str, options: Options) -> None:
    """Environment for this process and the workers; testproject/settings.py reads it."""
    harness.configure_environment(
        url,
        JOBS_POLL_SECONDS=str(options.poll),
        JOBS_LEASE_SECONDS="60",
        JOBS_MAINTENANCE_SECONDS="5",
        PYTHONUNBUFFERED="1",
    )


def prepare_database(options: Options) -> None:
    """Create or update the schema, then delete every job and attempt."""
    harness.migrate()
    if options.sqlite_wal:
        harness.use_wal_journal()
    harness.delete_jobs()


# -- describing the run -----------------------------------------------------


def database_description() -> str:
    from django.db import connection

    from django_jobs.db import get_driver

    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            settings = harness.sqlite_settings(cursor)
        else:
            names = ("server_version", "fsync", "synchronous_commit")
            settings = harness.server_settings(cursor, names)
            settings["version"] = settings.pop("server_version")
    version = settings.pop("version")
    claimer = type(get_driver()).__name__
    return f"{connection.display_name} {version} ({harness.format_settings(settings)}; {claimer})"


def print_header(options: Options) -> None:
    software = harness.software()
    print(f"database: {database_description()}")
    print(
        f"python {software['python']}, django {software['django']},"
        f" {software['cpus']} cpus; {options.jobs:,} x {JOB_NAME};"
        f" {options.workers} runjobs processes x {options.threads} threads,"
        f" POLL_SECONDS={options.poll}, verbosity {options.worker_verbosity}"
    )


def print_table(rows: list[Row]) -> None:
    print(harness.format_table(COLUMNS, [row.cells() for row in rows]))


# -- enqueueing -------------------------------------------------------------


def enqueue_one_by_one(count: int) -> Row:
    from django_jobs import schedule_job

    start = time.perf_counter()
    for number in range(count):
        schedule_job(JOB_NAME, {"n": number})
    return Row("enqueue: schedule_job(), 1 per call", time.perf_counter() - start, count)


def enqueue_in_batches(count: int, batch: int) -> Row:
    seconds = harness.schedule_noop_jobs(count, batch)
    return Row(f"enqueue: schedule_jobs(), {batch} per call", seconds, count)


def vacuum_jobs() -> None:
    """``VACUUM ANALYZE`` the jobs table (PostgreSQL; a vacuum runs outside a transaction,
    as Django's autocommit has it)."""
    from django.db import connection

    from django_jobs.models import Job

    if connection.vendor != "postgresql":
        raise BenchError("--vacuum is for PostgreSQL")
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {connection.ops.quote_name(Job._meta.db_table)}")


def count_jobs() -> int:
    from django_jobs.models import Job

    return Job.objects.filter(queue=QUEUE, name=JOB_NAME).count()


# -- draining ---------------------------------------------------------------


def start_workers(options: Options, log_dir: Path) -> list[subprocess.Popen[bytes]]:
    command = harness.runjobs_command(
        "--burst", "--queue", QUEUE, "--workers", str(options.threads)
    )
    command += ["--verbosity", str(options.worker_verbosity)]
    return [
        harness.start_process(command, log_dir / f"runjobs-{number}.log")
        for number in range(options.workers)
    ]


def has_started() -> bool:
    from django_jobs.models import Attempt

    return Attempt.objects.exists()


def is_drained() -> bool:
    """No job is left pending or running. Asked every poll: an ``EXISTS`` that stops at the
    first such row, where a count by status would read the whole jobs table each time (a
    core's worth of work over hundreds of thousands of rows, taken from the workers)."""
    from django_jobs.models import Job, JobStatus

    return not Job.objects.filter(status__in=[JobStatus.PENDING, JobStatus.RUNNING]).exists()


def check_all_succeeded(total: int) -> None:
    """Once drained: every job succeeded."""
    from django_jobs.models import JobStatus

    counts = harness.status_counts()
    if counts.get(JobStatus.SUCCEEDED, 0) != total or len(counts) != 1:
        raise BenchError(f"jobs did not all succeed: {counts}")


def attempts_span() -> float:
    """Seconds from the first attempt's start to the last one's end, as the rows say."""
    from django.db.models import Max, Min

    from django_jobs.models import Attempt

    span = Attempt.objects.aggregate(first=Min("started_at"), last=Max("finished_at"))
    if span["first"] is None or span["last"] is None:
        raise BenchError("no attempt has both started and ended")
    return (span["last"] - span["first"]).total_seconds()


def wait_for(
    predicate: Callable[[], bool], processes: list[subprocess.Popen[bytes]], deadline: float
) -> float:
    """Poll until ``predicate()``; return the perf_counter time it first held."""
    while True:
        if predicate():
            return time.perf_counter()
        if all(process.poll() is not None for process in processes):
            if predicate():  # the last job may have finished as the workers exited
                return time.perf_counter()
            codes = [process.returncode for process in processes]
            raise BenchError(f"every runjobs process exited (codes {codes}) before the drain ended")
        if time.monotonic() > deadline:
            raise BenchError("timed out waiting for the workers")
        time.sleep(DB_POLL_SECONDS)


def wait_for_exit(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        code = process.wait(STOP_GRACE_SECONDS * 3)
        if code != 0:
            raise BenchError(f"runjobs pid {process.pid} exited with code {code}")


def drain(options: Options, log_dir: Path) -> list[Row]:
    deadline = time.monotonic() + options.timeout
    processes: list[subprocess.Popen[bytes]] = []
    try:
        start = time.perf_counter()
        processes = start_workers(options, log_dir)
        first = wait_for(has_started, processes, deadline)
        done = wait_for(is_drained, processes, deadline)
        wait_for_exit(processes)
        check_all_succeeded(options.jobs)
    except Exception:
        print_logs(log_dir)
        raise
    finally:
        harness.stop_processes(processes, STOP_GRACE_SECONDS)
    label = f"drain: {options.workers} processes x {options.threads} threads"
    return [
        Row("drain: first job picked up (incl. start-up)", first - start),
        Row(f"{label}, start to all done", done - start, options.jobs),
        Row(f"{label}, first pickup to all done", done - first, options.jobs),
        Row(f"{label}, first start to last end (rows)", attempts_span(), options.jobs),
    ]


def print_logs(log_dir: Path) -> None:
    for path in sorted(log_dir.glob("runjobs-*.log")):
        harness.print_log_tail(path)


# -- main -------------------------------------------------------------------


def run(options: Options, work_dir: Path) -> list[Row]:
    url = harness.temporary_sqlite_url(os.environ.get("DATABASE_URL", ""), work_dir)
    configure_environment(url, options)
    harness.setup_django()
    prepare_database(options)
    print_header(options)
    rows = [enqueue_one_by_one(options.jobs)]
    harness.delete_jobs()
    rows.append(enqueue_in_batches(options.jobs, options.batch))
    if count_jobs() != options.jobs:
        raise BenchError(f"expected {options.jobs} jobs, found {count_jobs()}")
    if options.vacuum:
        vacuum_jobs()
    rows += drain(options, work_dir)
    return rows


def main(argv: list[str] | None = None) -> int:
    options = parse_options(argv)
    harness.raise_on_sigterm()
    with harness.work_directory() as work_dir:
        try:
            rows = run(options, work_dir)
        except BenchError as exc:
            return harness.failed(exc)
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
