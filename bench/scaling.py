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

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
JOB_NAME = "demo.noop"
QUEUE = "default"
REAP_POLL_SECONDS = 0.05
CONNECTIONS_POLL_SECONDS = 0.2
STOP_GRACE_SECONDS = 15.0
DATABASES = ("postgresql", "sqlite-wal")
DEFAULT_SHAPES = {
    "postgresql": "1x1,1x2,1x4,1x8,1x16,2x4,4x4",
    "sqlite-wal": "1x1,1x2,1x4,2x2",
}


class BenchError(RuntimeError):
    pass


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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=DATABASES, default="postgresql")
    parser.add_argument(
        "--shapes", help="PROCESSESxTHREADS, comma-separated (default: per database, see above)"
    )
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs to drain per shape")
    parser.add_argument("--batch", type=int, default=500, help="jobs per schedule_jobs() call")
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
    if min(args.jobs, args.batch) < 1:
        parser.error("--jobs and --batch must be at least 1")
    return Options(
        args.database, shapes, args.jobs, args.batch, args.timeout, args.worker_verbosity, args.out
    )


def database_url(options: Options, work_dir: Path) -> str:
    if options.database == "sqlite-wal":
        return f"sqlite:///{work_dir / 'bench.sqlite3'}"
    url = os.environ.get("DATABASE_URL", "")
    if urlsplit(url).scheme not in ("postgres", "postgresql"):
        raise BenchError("set DATABASE_URL to a PostgreSQL database (as scripts/bench-scaling)")
    return url


def configure_environment(url: str) -> None:
    """Environment for this process and the workers; testproject/settings.py reads it."""
    os.environ.update(
        {
            "DATABASE_URL": url,
            "DJANGO_SETTINGS_MODULE": "testproject.settings",
            "DEBUG": "false",
            "PYTHONUNBUFFERED": "1",
        }
    )


def setup_django() -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def prepare_database(options: Options) -> None:
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0, interactive=False)
    if options.database == "sqlite-wal":
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA journal_mode=wal")


def empty_tables() -> None:
    """Delete every row of django_jobs' tables and reset their sequences (PostgreSQL: TRUNCATE)."""
    from django.apps import apps
    from django.core.management.color import no_style
    from django.db import connection

    models = apps.get_app_config("django_jobs").get_models()
    tables = [model._meta.db_table for model in models if model._meta.managed]
    flush = connection.ops.sql_flush(no_style(), sorted(set(tables)), reset_sequences=True)
    connection.ops.execute_sql_flush(flush)


def settle_database() -> None:
    """Fresh statistics and no dirty pages left over: each shape's drain starts alike."""
    from django.db import DatabaseError, connection

    from django_jobs.models import Attempt, Job

    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            return
        quote = connection.ops.quote_name
        for model in (Job, Attempt):
            cursor.execute(f"ANALYZE {quote(model._meta.db_table)}")
        try:
            cursor.execute("CHECKPOINT")
        except DatabaseError as exc:  # needs superuser or pg_checkpoint
            print(f"bench: no CHECKPOINT ({exc})", file=sys.stderr)


# -- describing the run -------------------------------------------------------------


def database_settings() -> dict[str, str]:
    from django.db import connection

    if connection.vendor == "sqlite":
        queries = {
            "version": "sqlite_version()",
            "journal_mode": "(SELECT * FROM pragma_journal_mode)",
            "synchronous": "(SELECT * FROM pragma_synchronous)",
        }
    else:
        names = ("server_version", "fsync", "synchronous_commit", "max_connections")
        queries = {name: f"current_setting('{name}')" for name in names}
        queries["version"] = queries.pop("server_version")
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(queries.values()))
        values = cursor.fetchone()
    return {name: str(value) for name, value in zip(queries, values, strict=True)}


def describe(settings: dict[str, str]) -> str:
    from django.db import connection

    rest = ", ".join(f"{name}={value}" for name, value in settings.items() if name != "version")
    version = settings["version"].split()[0]  # "15.18 (Debian 15.18-0+deb12u1)": 15.18
    return f"{connection.display_name} {version} ({rest})"


def run_info(options: Options) -> dict[str, Any]:
    import django
    from django.db import connection

    import django_jobs

    settings = database_settings()
    return {
        "bench": "scaling",
        "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "database": options.database,
        "database_description": describe(settings),
        "database_settings": settings,
        "vendor": connection.vendor,
        "python": sys.version.split()[0],
        "django": django.get_version(),
        "django_jobs": django_jobs.__version__,
        "cpus": os.cpu_count(),
        "jobs": options.jobs,
        "batch": options.batch,
        "job": JOB_NAME,
    }


# -- enqueueing -----------------------------------------------------------------------


def enqueue(count: int, batch: int) -> float:
    """``count`` no-op jobs in calls of ``batch``; jobs per second."""
    from django_jobs import JobSpec, schedule_jobs

    start = time.perf_counter()
    for first in range(0, count, batch):
        numbers = range(first, min(first + batch, count))
        schedule_jobs([JobSpec(JOB_NAME, {"n": number}) for number in numbers])
    return count / (time.perf_counter() - start)


# -- the processes --------------------------------------------------------------------


class Runjobs:
    """One ``runjobs --burst`` process, reaped by this benchmark to read its resource use."""

    def __init__(self, command: list[str], log: Path) -> None:
        self.log = log
        with open(log, "wb") as output:
            self.process = subprocess.Popen(
                command, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT
            )
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

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def runjobs_command(shape: Shape, options: Options) -> list[str]:
    command = [sys.executable, str(ROOT / "manage.py"), "runjobs", "--queue", QUEUE]
    command += ["--workers", str(shape.threads), "--burst"]
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
            print(f"--- last lines of {worker.log.name}:\n{worker.tail()}", file=sys.stderr)
        raise
    result.peak_rss_mib = [round(worker.peak_rss_mib, 1) for worker in workers]
    result.cpu_seconds = [round(worker.cpu_seconds, 2) for worker in workers]
    return launched


# -- reading the rows -----------------------------------------------------------------


def read_drain(total: int, launched: float, result: ShapeResult) -> None:
    """The drain's figures from the jobs and their attempts."""
    from django.db.models import Count, Max, Min

    from django_jobs.models import Attempt, Job, JobStatus

    statuses = dict(Job.objects.order_by().values_list("status").annotate(count=Count("id")))
    if statuses.get(JobStatus.SUCCEEDED, 0) != total or sum(statuses.values()) != total:
        raise BenchError(f"expected {total} succeeded jobs, found {statuses}")
    span = Job.objects.aggregate(first=Min("started_at"), last=Max("finished_at"))
    if span["first"] is None or span["last"] is None:
        raise BenchError(f"the jobs carry no started_at or finished_at: {span}")
    result.drain_seconds = (span["last"] - span["first"]).total_seconds()
    result.drain_rate = total / result.drain_seconds
    result.start_up_seconds = span["first"].timestamp() - launched
    owners = Attempt.objects.order_by().values("owner")
    owners = owners.annotate(first=Min("started_at"), jobs=Count("id")).order_by("first")
    firsts = [row["first"] for row in owners]
    result.start_spread_seconds = (firsts[-1] - firsts[0]).total_seconds() if firsts else 0.0
    result.jobs_per_owner = [row["jobs"] for row in owners]


def run_shape(shape: Shape, options: Options, log_dir: Path) -> ShapeResult:
    result = ShapeResult(shape.processes, shape.threads, shape.label, options.jobs)
    empty_tables()
    result.enqueue_rate = enqueue(options.jobs, options.batch)
    settle_database()
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
    cells = [[name for name, _ in COLUMNS]] + [table_row(result) for result in results]
    lines = []
    for row in cells:
        line = "".join(cell.rjust(width) for cell, (_, width) in zip(row, COLUMNS, strict=True))
        lines.append(line.rstrip())
    return "\n".join(lines)


def print_report(info: dict[str, Any], results: list[ShapeResult]) -> None:
    print(f"\n{info['database_description']}")
    print(
        f"python {info['python']}, django {info['django']}, django-jobs {info['django_jobs']},"
        f" {info['cpus']} cpus; {info['jobs']:,} x {JOB_NAME} per shape"
        " (PROCESSESxTHREADS: runjobs --burst processes x --workers)"
    )
    print(format_table(results))


# -- main -------------------------------------------------------------------------------


def raise_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit, so that the workers are stopped on the way out."""

    def handle(signum: int, frame: Any) -> NoReturn:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handle)


def run(options: Options, work_dir: Path) -> tuple[dict[str, Any], list[ShapeResult]]:
    configure_environment(database_url(options, work_dir))
    setup_django()
    prepare_database(options)
    info = run_info(options)
    print(info["database_description"], file=sys.stderr)
    results = []
    for shape in options.shapes:
        print(f"== {shape.label}", file=sys.stderr, flush=True)
        results.append(run_shape(shape, options, work_dir))
    empty_tables()
    return info, results


def main(argv: list[str] | None = None) -> int:
    options = parse_options(argv)
    raise_on_sigterm()
    with tempfile.TemporaryDirectory(prefix="django-jobs-scaling.") as name:
        try:
            info, results = run(options, Path(name))
        except BenchError as exc:
            print(f"bench failed: {exc}", file=sys.stderr)
            return 1
    print_report(info, results)
    if options.out:
        data = {**info, "shapes": [asdict(result) for result in results]}
        options.out.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
