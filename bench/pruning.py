#!/usr/bin/env python
"""Pruning benchmark: the drain rate of ``runjobs`` while the cleaner prunes expired jobs.

    bash scripts/bench-pruning                                   # sets up the venv and the server
    DATABASE_URL=postgres://... python bench/pruning.py --jobs 20000 --expired 200000
    DATABASE_URL=postgres://... python bench/pruning.py --rounds 2 --json .tmp/pruning.json

Each round drains ``--jobs`` fresh ``demo.noop`` jobs twice, on the PostgreSQL
database ``DATABASE_URL`` names (migrated, its django_jobs tables emptied: never
point it at jobs you want to keep):

1. **without** expired rows: the tables hold only the fresh jobs;
2. **with** ``--expired`` succeeded jobs (each with one attempt row) whose retention
   ended long ago, inserted by one set-based ``INSERT ... SELECT generate_series()``
   per table, for the worker's maintenance pass to prune while it drains.

Before each drain the benchmark ANALYZEs and CHECKPOINTs, then starts one
``manage.py runjobs --queue default --workers 2 --burst`` process (as the peers
bench runs django-jobs), with ``MAINTENANCE_SECONDS`` set by ``--maintenance-seconds``
so that pruning overlaps the drain, and waits for it to exit. It reports:

- the drain rate: the fresh jobs divided by the time from the first one's
  ``started_at`` to the last one's ``finished_at``, read from the rows; and, with
  expired rows, the rate while the cleaner pruned: the fresh jobs that finished
  between its first and its last pass of the drain, per second;
- how many expired rows the worker deleted in all (the rows counted before and
  after), and how many during the drain, in how many passes and batches (read from
  the worker's ``jobs_pruned`` log lines: one a pass, giving its count; a pass
  works in batches of the cleaner's ``PRUNE_BATCH``, all full but its last, since
  the expired jobs share one status).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
JOB_NAME = "demo.noop"
EXPIRED_NAME = "bench.expired"  # never run: only pruned
QUEUE = "default"
THREADS = 2
EXPIRED_AGE_DAYS = (8, 38)  # finished between 38 and 8 days ago: past every default retention
REAP_POLL_SECONDS = 0.05
STOP_GRACE_SECONDS = 15.0
# "2026-12-01 15:42:06,123 INFO MainThread django_jobs.maintenance.cleaner: 10000 finished ..."
PRUNED_LINE = re.compile(
    r"^(?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \S+ \S+ django_jobs\.maintenance\.cleaner: "
    r"(?P<count>\d+) finished job\(s\) past their retention deleted"
)


class BenchError(RuntimeError):
    pass


@dataclass(frozen=True)
class Options:
    jobs: int
    expired: int
    rounds: int
    batch: int
    maintenance_seconds: float
    timeout: float
    json: Path | None


@dataclass(frozen=True)
class Pass:
    """One maintenance pass that deleted rows: when it logged, and how many."""

    at: datetime
    count: int


@dataclass
class DrainResult:
    label: str
    jobs: int
    expired_before: int = 0
    expired_after: int = 0
    drain_seconds: float = 0.0
    drain_rate: float = 0.0
    pruned_during_drain: int = 0
    passes_during_drain: int = 0
    batches_during_drain: int = 0
    rate_while_pruning: float | None = None  # jobs/s from the first pass to the last
    passes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def pruned(self) -> int:
        return self.expired_before - self.expired_after


# -- options and set-up -----------------------------------------------------------


def parse_options(argv: list[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000, help="fresh jobs to drain, each time")
    parser.add_argument(
        "--expired", type=int, default=200_000, help="expired finished jobs to prune"
    )
    parser.add_argument("--rounds", type=int, default=1, help="drains without, then with, x N")
    parser.add_argument("--batch", type=int, default=500, help="jobs per schedule_jobs() call")
    parser.add_argument(
        "--maintenance-seconds",
        type=float,
        default=1.0,
        help="the worker's MAINTENANCE_SECONDS (how often it prunes)",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="per drain (seconds)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the results as JSON")
    args = parser.parse_args(argv)
    if min(args.jobs, args.expired, args.rounds, args.batch) < 1:
        parser.error("--jobs, --expired, --rounds and --batch must be at least 1")
    if args.maintenance_seconds <= 0:
        parser.error("--maintenance-seconds must be positive")
    return Options(
        args.jobs,
        args.expired,
        args.rounds,
        args.batch,
        args.maintenance_seconds,
        args.timeout,
        args.json,
    )


def database_url() -> str:
    url = os.environ.get("DATABASE_URL", "")
    if urlsplit(url).scheme not in ("postgres", "postgresql"):
        raise BenchError("set DATABASE_URL to a PostgreSQL database (as scripts/bench-pruning)")
    return url


def configure_environment(url: str, options: Options) -> None:
    """Environment for this process and the worker; testproject/settings.py reads it."""
    os.environ.update(
        {
            "DATABASE_URL": url,
            "DJANGO_SETTINGS_MODULE": "testproject.settings",
            "DEBUG": "false",
            "JOBS_MAINTENANCE_SECONDS": str(options.maintenance_seconds),
            "PYTHONUNBUFFERED": "1",
        }
    )


def setup_django() -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def empty_tables() -> None:
    """Every django_jobs table emptied, its sequences reset (TRUNCATE)."""
    from django.apps import apps
    from django.core.management.color import no_style
    from django.db import connection

    models = apps.get_app_config("django_jobs").get_models()
    tables = sorted({model._meta.db_table for model in models if model._meta.managed})
    flush = connection.ops.sql_flush(no_style(), tables, reset_sequences=True)
    connection.ops.execute_sql_flush(flush)


# -- the expired rows (pure SQL builders: the tables' quoted names in) --------------------


def expired_jobs_sql(job_table: str) -> str:
    """One statement: ``count`` succeeded jobs, long expired.

    One status only, so that the cleaner's passes cut them into full batches (it
    works status by status) and a pass's batches follow from its count. Parameters:
    ``count``, ``name``, ``queue``, ``newest`` and ``oldest`` (timestamps); the
    finished times are spread evenly between them, the oldest first.
    """
    return f"""
        INSERT INTO {job_table} (
            name, queue, payload, status, priority, run_at, attempt, attempts_used,
            max_attempts, last_error, progress_note, created_at, started_at, finished_at
        )
        SELECT %(name)s, %(queue)s, jsonb_build_object('n', g.i), 'succeeded',
            0, g.finished_at, 1, 1, 5, '', '', g.finished_at, g.finished_at, g.finished_at
        FROM (
            SELECT i, %(oldest)s::timestamptz
                + (%(newest)s::timestamptz - %(oldest)s::timestamptz) * (i / %(count)s::float8)
                AS finished_at
            FROM generate_series(1, %(count)s::bigint) AS i
        ) AS g
        ORDER BY g.i
    """


def expired_attempts_sql(job_table: str, attempt_table: str) -> str:
    """One statement: one attempt row for each finished job before ``%(newest)s``."""
    return f"""
        INSERT INTO {attempt_table} (
            job_id, number, owner, started_at, finished_at, outcome, error
        )
        SELECT j.id, 1, 'bench-host:1:expired', j.started_at, j.finished_at, 'succeeded', ''
        FROM {job_table} AS j
        WHERE j.status = 'succeeded' AND j.finished_at <= %(newest)s
    """


def expired_count_sql(job_table: str) -> str:
    """Finished jobs older than ``%(cutoff)s`` (the condition of the finished index)."""
    return (
        f"SELECT count(*) FROM {job_table}"
        " WHERE status IN ('succeeded', 'dead_lettered', 'cancelled') AND finished_at < %(cutoff)s"
    )


def tables() -> tuple[str, str]:
    from django.db import connection

    from django_jobs.models import Attempt, Job

    quote = connection.ops.quote_name
    return quote(Job._meta.db_table), quote(Attempt._meta.db_table)


def execute(sql: str, params: dict[str, Any]) -> Any:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone() if cursor.description else None


def insert_expired(count: int, now: datetime) -> None:
    job, attempt = tables()
    newest, oldest = (now - timedelta(days=days) for days in EXPIRED_AGE_DAYS)
    params = {"count": count, "name": EXPIRED_NAME, "queue": QUEUE}
    params |= {"newest": newest, "oldest": oldest}
    execute(expired_jobs_sql(job), params)
    execute(expired_attempts_sql(job, attempt), params)


def count_expired(now: datetime) -> int:
    job, _ = tables()
    cutoff = now - timedelta(days=min(EXPIRED_AGE_DAYS))
    return int(execute(expired_count_sql(job), {"cutoff": cutoff})[0])


def enqueue(count: int, batch: int) -> None:
    """``count`` fresh jobs, due now, as ``schedule_jobs()`` makes them (the ORM fills
    every field's default); the enqueue is not what this bench measures."""
    from django_jobs.conf import settings
    from django_jobs.models import Job

    jobs = [
        Job(name=JOB_NAME, queue=QUEUE, payload={"n": n}, max_attempts=settings.MAX_ATTEMPTS)
        for n in range(count)
    ]
    Job.objects.bulk_create(jobs, batch_size=batch)


def settle_database() -> None:
    """Fresh statistics and no dirty pages left over: each drain starts alike."""
    from django.db import DatabaseError, connection

    job, attempt = tables()
    with connection.cursor() as cursor:
        for table in (job, attempt):
            cursor.execute(f"ANALYZE {table}")
        try:
            cursor.execute("CHECKPOINT")
        except DatabaseError as exc:  # needs superuser or pg_checkpoint
            print(f"bench: no CHECKPOINT ({exc})", file=sys.stderr)


# -- the worker -------------------------------------------------------------------


def runjobs_command() -> list[str]:
    command = [sys.executable, str(ROOT / "manage.py"), "runjobs", "--queue", QUEUE]
    return command + ["--workers", str(THREADS), "--burst"]


def run_worker(log: Path, timeout: float) -> None:
    """One ``runjobs --burst`` process until it exits; SIGTERM then SIGKILL by pid if not."""
    with open(log, "wb") as output:
        process = subprocess.Popen(
            runjobs_command(), cwd=ROOT, stdout=output, stderr=subprocess.STDOUT
        )
    try:
        code = process.wait(timeout)
    except BaseException:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        print(f"--- last lines of {log.name}:\n{tail}", file=sys.stderr)
        raise
    if code != 0:
        raise BenchError(f"runjobs exited with code {code}; see {log}")


# -- reading the results ------------------------------------------------------------


def parse_passes(lines: list[str]) -> list[Pass]:
    """The cleaner's ``jobs_pruned`` lines of a worker's log (local times, as logged)."""
    passes = []
    for line in lines:
        match = PRUNED_LINE.match(line)
        if match:
            at = datetime.strptime(match["at"], "%Y-%m-%d %H:%M:%S,%f").astimezone()
            passes.append(Pass(at, int(match["count"])))
    return passes


def batches(count: int, batch: int) -> int:
    """Batches a pass took to delete ``count`` rows: full ones, and one short one if any."""
    return math.ceil(count / batch)


def passes_within(passes: list[Pass], first: datetime, last: datetime) -> list[Pass]:
    """The passes that ended inside ``[first, last]``."""
    return [one for one in passes if first <= one.at <= last]


def drain_span(total: int) -> tuple[datetime, datetime]:
    """First ``started_at`` and last ``finished_at`` of the fresh jobs, all succeeded."""
    from django.db.models import Count, Max, Min

    from django_jobs.models import Job, JobStatus

    rows = Job.objects.filter(name=JOB_NAME)
    statuses = dict(rows.order_by().values_list("status").annotate(count=Count("id")))
    if statuses.get(JobStatus.SUCCEEDED, 0) != total or sum(statuses.values()) != total:
        raise BenchError(f"expected {total} succeeded jobs, found {statuses}")
    span = rows.aggregate(first=Min("started_at"), last=Max("finished_at"))
    if span["first"] is None or span["last"] is None:
        raise BenchError(f"the jobs carry no started_at or finished_at: {span}")
    return span["first"], span["last"]


def rate_between(first: datetime, last: datetime) -> float:
    """Fresh jobs per second that finished between ``first`` and ``last``."""
    from django_jobs.models import Job

    done = Job.objects.filter(name=JOB_NAME, finished_at__gte=first, finished_at__lte=last)
    return done.count() / (last - first).total_seconds()


def drain(label: str, options: Options, expired: int, log_dir: Path) -> DrainResult:
    from django.utils import timezone

    from django_jobs.maintenance.cleaner import PRUNE_BATCH

    result = DrainResult(label, options.jobs)
    empty_tables()
    if expired:
        insert_expired(expired, timezone.now())
    enqueue(options.jobs, options.batch)
    settle_database()
    result.expired_before = count_expired(timezone.now())
    log = log_dir / f"runjobs-{label}.log"
    run_worker(log, options.timeout)
    result.expired_after = count_expired(timezone.now())
    first, last = drain_span(options.jobs)
    result.drain_seconds = (last - first).total_seconds()
    result.drain_rate = options.jobs / result.drain_seconds
    passes = parse_passes(log.read_text(errors="replace").splitlines())
    during = passes_within(passes, first, last)
    result.pruned_during_drain = sum(one.count for one in during)
    result.passes_during_drain = len(during)
    result.batches_during_drain = sum(batches(one.count, PRUNE_BATCH) for one in during)
    if len(during) > 1:
        result.rate_while_pruning = rate_between(during[0].at, during[-1].at)
    result.passes = [{"at": one.at.isoformat(), "count": one.count} for one in passes]
    return result


# -- the report -------------------------------------------------------------------

COLUMNS = [
    ("drain", 10),
    ("jobs", 9),
    ("drain jobs/s", 14),
    ("drain s", 9),
    ("while pruning", 15),
    ("expired before", 16),
    ("pruned", 9),
    ("pruned in drain", 17),
    ("passes", 8),
    ("batches", 9),
]


def table_row(result: DrainResult) -> list[str]:
    return [
        result.label,
        f"{result.jobs:,}",
        f"{result.drain_rate:,.0f}",
        f"{result.drain_seconds:.2f}",
        "-" if result.rate_while_pruning is None else f"{result.rate_while_pruning:,.0f}",
        f"{result.expired_before:,}",
        f"{result.pruned:,}",
        f"{result.pruned_during_drain:,}",
        str(result.passes_during_drain),
        str(result.batches_during_drain),
    ]


def format_table(results: list[DrainResult]) -> str:
    """The drains as a text table: the label left-aligned, the figures right-aligned."""
    widths = [width for _, width in COLUMNS]
    lines = []
    for row in [[name for name, _ in COLUMNS]] + [table_row(result) for result in results]:
        line = row[0].ljust(widths[0])
        line += "".join(cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True))
        lines.append(line.rstrip())
    return "\n".join(lines)


def summary(results: list[DrainResult]) -> str:
    """The median drain rate of each kind, and the one with expired rows as a share."""
    rates: dict[str, list[float]] = {}
    for result in results:
        rates.setdefault(result.label, []).append(result.drain_rate)
    medians = {label: statistics.median(values) for label, values in rates.items()}
    text = ", ".join(f"{label}: {rate:,.0f} jobs/s" for label, rate in medians.items())
    if medians.get("without") and "with" in medians:
        text += f"; with pruning at {100 * medians['with'] / medians['without']:.0f}%"
    return f"median drain ({text})"


def run_info(options: Options) -> dict[str, Any]:
    import django
    from django.db import connection

    import django_jobs
    from django_jobs.maintenance.cleaner import PRUNE_BATCH
    from django_jobs.worker.core import PRUNE_BATCHES

    settings = {}
    for name in ("server_version", "fsync", "synchronous_commit"):
        settings[name] = str(execute(f"SELECT current_setting('{name}')", {})[0])
    version = settings.pop("server_version").split()[0]
    return {
        "bench": "pruning",
        "measured_at": datetime.now(dt_timezone.utc).isoformat(timespec="seconds"),
        "database": f"{connection.display_name} {version}",
        "database_settings": settings,
        "python": sys.version.split()[0],
        "django": django.get_version(),
        "django_jobs": django_jobs.__version__,
        "cpus": os.cpu_count(),
        "jobs": options.jobs,
        "expired": options.expired,
        "threads": THREADS,
        "maintenance_seconds": options.maintenance_seconds,
        "prune_batch": PRUNE_BATCH,
        "prune_batches_per_pass": PRUNE_BATCHES,
        "command": " ".join(runjobs_command()[1:]),
    }


def print_report(info: dict[str, Any], results: list[DrainResult]) -> None:
    settings = ", ".join(f"{name}={value}" for name, value in info["database_settings"].items())
    print(f"\n{info['database']} ({settings})")
    print(
        f"python {info['python']}, django {info['django']}, django-jobs {info['django_jobs']},"
        f" {info['cpus']} cpus; {info['jobs']:,} x {JOB_NAME} per drain, one"
        f" runjobs --workers {info['threads']} --burst; MAINTENANCE_SECONDS="
        f"{info['maintenance_seconds']:g}, up to {info['prune_batches_per_pass']} batches of"
        f" {info['prune_batch']:,} a pass"
    )
    print(format_table(results))
    print(summary(results))


# -- main -------------------------------------------------------------------------


def raise_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit, so that the worker is stopped on the way out."""

    def handle(signum: int, frame: Any) -> NoReturn:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handle)


def run(options: Options, work_dir: Path) -> tuple[dict[str, Any], list[DrainResult]]:
    from django.core.management import call_command

    configure_environment(database_url(), options)
    setup_django()
    call_command("migrate", verbosity=0, interactive=False)
    info = run_info(options)
    print(info["database"], file=sys.stderr)
    results = []
    for number in range(1, options.rounds + 1):
        for label, expired in (("without", 0), ("with", options.expired)):
            print(f"== round {number}: {label} expired rows", file=sys.stderr, flush=True)
            results.append(drain(label, options, expired, work_dir))
    empty_tables()
    return info, results


def main(argv: list[str] | None = None) -> int:
    options = parse_options(argv)
    raise_on_sigterm()
    with tempfile.TemporaryDirectory(prefix="django-jobs-pruning.") as name:
        try:
            info, results = run(options, Path(name))
        except BenchError as exc:
            print(f"bench failed: {exc}", file=sys.stderr)
            return 1
    print_report(info, results)
    if options.json:
        data = {
            **info,
            "drains": [asdict(result) | {"pruned": result.pruned} for result in results],
        }
        options.json.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
