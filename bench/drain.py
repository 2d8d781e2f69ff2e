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
   pickup, which includes the processes' start-up, is reported as well.

The jobs of the first phase are deleted before the second, so the drain
starts with exactly ``--jobs`` pending jobs. Without ``DATABASE_URL``, or
with a SQLite one, the benchmark uses a new temporary SQLite file (never the
file the URL names, though its options are kept). Any other database is
migrated and its Job and Attempt rows are deleted: do not point it at a
database whose jobs you want to keep.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
JOB_NAME = "demo.noop"
QUEUE = "default"
DB_POLL_SECONDS = 0.05
STOP_GRACE_SECONDS = 10.0


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


@dataclass(frozen=True)
class Row:
    """One line of the results table; ``jobs`` is None when a rate makes no sense."""

    label: str
    seconds: float
    jobs: int | None = None

    def format(self) -> str:
        rate = f"{self.jobs / self.seconds:>10,.0f}" if self.jobs and self.seconds else f"{'-':>10}"
        return f"{self.label:<58}{self.seconds:>9.2f}{rate}"


class BenchError(RuntimeError):
    pass


# -- set-up ----------------------------------------------------------------


def parse_options(argv: list[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs to enqueue and drain")
    parser.add_argument("--workers", type=int, default=2, help="runjobs processes")
    parser.add_argument("--threads", type=int, default=2, help="handler threads per process")
    parser.add_argument("--batch", type=int, default=500, help="jobs per schedule_jobs() call")
    parser.add_argument("--poll", type=float, default=0.05, help="workers' POLL_SECONDS")
    parser.add_argument("--timeout", type=float, default=900.0, help="give up after (seconds)")
    parser.add_argument(
        "--worker-verbosity", type=int, default=1, help="runjobs --verbosity (1 logs each job)"
    )
    parser.add_argument(
        "--sqlite-wal", action="store_true", help="put the SQLite file in WAL journal mode"
    )
    args = parser.parse_args(argv)
    if min(args.jobs, args.workers, args.threads, args.batch) < 1:
        parser.error("--jobs, --workers, --threads and --batch must be at least 1")
    return Options(**vars(args))


def database_url(given: str, work_dir: Path) -> str:
    """``given``, or a new SQLite file in ``work_dir`` (keeping a SQLite URL's options)."""
    parts = urlsplit(given)
    if given and not parts.scheme.startswith("sqlite"):
        return given
    query = f"?{parts.query}" if parts.query else ""
    return f"sqlite:///{work_dir / 'bench.sqlite3'}{query}"


def configure_environment(url: str, options: Options) -> None:
    """Environment for this process and the workers; testproject/settings.py reads it."""
    os.environ.update(
        {
            "DATABASE_URL": url,
            "DJANGO_SETTINGS_MODULE": "testproject.settings",
            "DEBUG": "false",
            "JOBS_POLL_SECONDS": str(options.poll),
            "JOBS_LEASE_SECONDS": "60",
            "JOBS_MAINTENANCE_SECONDS": "5",
            "PYTHONUNBUFFERED": "1",
        }
    )


def setup_django() -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def prepare_database(options: Options) -> None:
    """Create or update the schema, then delete every job and attempt."""
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0, interactive=False)
    if options.sqlite_wal and connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA journal_mode=wal")
    delete_jobs()


def delete_jobs() -> None:
    from django.db import connection

    from django_jobs.models import Attempt, Job

    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        for model in (Attempt, Job):
            cursor.execute(f"DELETE FROM {quote(model._meta.db_table)}")


# -- describing the run -----------------------------------------------------


def database_description() -> str:
    from django.db import connection

    from django_jobs.db import get_driver

    if connection.vendor == "sqlite":
        queries = ["sqlite_version()", "'journal_mode=' || (SELECT * FROM pragma_journal_mode)"]
        queries.append("'synchronous=' || (SELECT * FROM pragma_synchronous)")
    else:
        queries = ["current_setting('server_version')", "'fsync=' || current_setting('fsync')"]
        queries.append("'synchronous_commit=' || current_setting('synchronous_commit')")
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(queries))
        values = [str(value) for value in cursor.fetchone()]
    claimer = type(get_driver()).__name__
    return f"{connection.display_name} {values[0]} ({', '.join(values[1:])}; {claimer})"


def print_header(options: Options) -> None:
    import django

    print(f"database: {database_description()}")
    print(
        f"python {sys.version.split()[0]}, django {django.get_version()},"
        f" {os.cpu_count()} cpus; {options.jobs:,} x {JOB_NAME};"
        f" {options.workers} runjobs processes x {options.threads} threads,"
        f" POLL_SECONDS={options.poll}, verbosity {options.worker_verbosity}"
    )


def print_table(rows: list[Row]) -> None:
    print(f"{'phase':<58}{'seconds':>9}{'jobs/s':>10}")
    for row in rows:
        print(row.format())


# -- enqueueing -------------------------------------------------------------


def enqueue_one_by_one(count: int) -> Row:
    from django_jobs import schedule_job

    start = time.perf_counter()
    for number in range(count):
        schedule_job(JOB_NAME, {"n": number})
    return Row("enqueue: schedule_job(), 1 per call", time.perf_counter() - start, count)


def enqueue_in_batches(count: int, batch: int) -> Row:
    from django_jobs.scheduling import JobSpec, schedule_jobs

    start = time.perf_counter()
    for first in range(0, count, batch):
        numbers = range(first, min(first + batch, count))
        schedule_jobs([JobSpec(JOB_NAME, {"n": number}) for number in numbers])
    label = f"enqueue: schedule_jobs(), {batch} per call"
    return Row(label, time.perf_counter() - start, count)


def count_jobs() -> int:
    from django_jobs.models import Job

    return Job.objects.filter(queue=QUEUE, name=JOB_NAME).count()


# -- draining ---------------------------------------------------------------


def start_workers(options: Options, log_dir: Path) -> list[subprocess.Popen[bytes]]:
    command = [sys.executable, str(ROOT / "manage.py"), "runjobs", "--burst", "--queue", QUEUE]
    command += ["--workers", str(options.threads), "--verbosity", str(options.worker_verbosity)]
    processes = []
    for number in range(options.workers):
        with open(log_dir / f"runjobs-{number}.log", "wb") as log:
            processes.append(
                subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
            )
    return processes


def stop_workers(processes: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each live worker by pid, then SIGKILL those that do not exit in time."""
    for process in processes:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    for process in processes:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()


def status_counts() -> dict[str, int]:
    from django.db.models import Count

    from django_jobs.models import Job

    rows = Job.objects.order_by().values_list("status").annotate(count=Count("id"))
    return dict(rows)


def has_started() -> bool:
    from django_jobs.models import Attempt

    return Attempt.objects.exists()


def is_finished(total: int) -> bool:
    from django_jobs.models import JobStatus

    counts = status_counts()
    finished_otherwise = sum(
        count
        for status, count in counts.items()
        if status not in (JobStatus.PENDING, JobStatus.RUNNING, JobStatus.SUCCEEDED)
    )
    if finished_otherwise:
        raise BenchError(f"jobs did not all succeed: {counts}")
    return counts.get(JobStatus.SUCCEEDED, 0) >= total


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
        done = wait_for(lambda: is_finished(options.jobs), processes, deadline)
        wait_for_exit(processes)
    except Exception:
        print_logs(log_dir)
        raise
    finally:
        stop_workers(processes)
    label = f"drain: {options.workers} processes x {options.threads} threads"
    return [
        Row("drain: first job picked up (incl. start-up)", first - start),
        Row(f"{label}, start to all done", done - start, options.jobs),
        Row(f"{label}, first pickup to all done", done - first, options.jobs),
    ]


def print_logs(log_dir: Path, lines: int = 20) -> None:
    for path in sorted(log_dir.glob("runjobs-*.log")):
        tail = path.read_text(errors="replace").splitlines()[-lines:]
        print(f"--- last lines of {path.name}:", *tail, sep="\n", file=sys.stderr)


# -- main -------------------------------------------------------------------


@contextmanager
def work_directory() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="django-jobs-bench.") as name:
        yield Path(name)


def raise_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit, so that the workers are stopped on the way out."""

    def handle(signum: int, frame: Any) -> NoReturn:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handle)


def run(options: Options, work_dir: Path) -> list[Row]:
    url = database_url(os.environ.get("DATABASE_URL", ""), work_dir)
    configure_environment(url, options)
    setup_django()
    prepare_database(options)
    print_header(options)
    rows = [enqueue_one_by_one(options.jobs)]
    delete_jobs()
    rows.append(enqueue_in_batches(options.jobs, options.batch))
    if count_jobs() != options.jobs:
        raise BenchError(f"expected {options.jobs} jobs, found {count_jobs()}")
    rows += drain(options, work_dir)
    return rows


def main(argv: list[str] | None = None) -> int:
    options = parse_options(argv)
    raise_on_sigterm()
    with work_directory() as work_dir:
        try:
            rows = run(options, work_dir)
        except BenchError as exc:
            print(f"bench failed: {exc}", file=sys.stderr)
            return 1
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
