#!/usr/bin/env python
"""Admin benchmark: every admin page's time with 1,000,000 finished jobs on PostgreSQL.

    bash scripts/bench-admin                          # a temporary server, filled, timed
    python bench/admin_pages.py --dir .tmp/admin-pg   # keep the filled server in that folder
    python bench/admin_pages.py --reuse .tmp/admin-pg --json .tmp/admin.json

The benchmark starts a private PostgreSQL server with production durability
(``PGSERVER_DURABLE=1 python3 scripts/pgserver.py start DIR``), migrates it, then
fills it:

- the finished part, with a few set-based ``INSERT ... SELECT generate_series()``
  statements: ``--finished`` jobs (99% succeeded, 1% cancelled), each with one
  attempt row, finished over the last six days (inside the default retention), one in
  ten fired by a recurring schedule;
- the live part, with the ORM: jobs due, scheduled and retrying, running jobs held by
  ``Worker`` rows with fresh heartbeats, dead letters with their attempts, recurring
  schedules. The live part is deleted and made again on every run, so that its times
  are fresh.

It ANALYZEs and VACUUMs the tables, then times each page with Django's test client
logged in as a superuser: one warm-up request, then ``--requests`` requests, of
which it reports the median and the slowest, the number of queries of a request
and the slowest query's time (its median over the requests). A page whose median
passes half a second is flagged; ``--explain-ms`` prints the plan (``EXPLAIN
(ANALYZE, BUFFERS)``) of every page's slowest query above that time.

With ``--dir DIR`` the server's data stays in DIR; a later run with ``--dir DIR``
or ``--reuse DIR`` finds the finished part there and fills only the live part (a
run of a few minutes rather than the fill's several). ``--reuse`` refuses a DIR
whose finished part is missing. Without either, a temporary folder is used and
deleted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from pathlib import Path
from typing import Any, NoReturn

ROOT = Path(__file__).resolve().parent.parent
SLOW_MS = 500.0
FINISHED_DAYS = 6
SCHEDULED_EVERY = 10  # one finished job in ten was fired by a schedule
CANCELLED_EVERY = 100  # one finished job in a hundred was cancelled
ADMIN_USER = "bench-admin"
DASHBOARD = "admin:django_jobs_dashboard"
DEEP_PAGE = 100  # the last page the job list offers: it counts at most 10,000 rows


class BenchError(RuntimeError):
    pass


@dataclass(frozen=True)
class Fill:
    """How many rows of each kind the database holds."""

    finished: int = 1_000_000
    due: int = 2_000
    scheduled: int = 1_000
    retrying: int = 500
    running: int = 40
    workers: int = 4
    dead_letters: int = 300
    schedules: int = 20

    def schedule_names(self) -> list[str]:
        return [f"bench-schedule-{number:02d}" for number in range(1, self.schedules + 1)]


@dataclass(frozen=True)
class Options:
    fill: Fill
    requests: int
    directory: Path | None
    reuse: bool
    json: Path | None
    explain_ms: float | None
    only: str | None


@dataclass(frozen=True)
class Page:
    label: str
    url: str
    note: str = ""  # why the page was not timed, when url is empty


@dataclass
class Timing:
    """One page's figures; times in milliseconds."""

    label: str
    url: str
    status: int = 0
    median_ms: float = 0.0
    max_ms: float = 0.0
    queries: int = 0
    slowest_query_ms: float = 0.0
    slowest_query: str = ""
    plan: str = ""
    note: str = ""
    statements: list[dict[str, Any]] = field(default_factory=list)  # the last request's

    @property
    def slow(self) -> bool:
        return self.median_ms > SLOW_MS or self.status != 200


# -- options --------------------------------------------------------------------------


def parse_options(argv: list[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--finished", type=int, default=Fill.finished, help="finished jobs")
    parser.add_argument("--dead-letters", type=int, default=Fill.dead_letters)
    parser.add_argument("--due", type=int, default=Fill.due, help="pending jobs due now")
    parser.add_argument("--scheduled", type=int, default=Fill.scheduled)
    parser.add_argument("--retrying", type=int, default=Fill.retrying)
    parser.add_argument("--running", type=int, default=Fill.running)
    parser.add_argument("--workers", type=int, default=Fill.workers, help="Worker rows")
    parser.add_argument("--schedules", type=int, default=Fill.schedules, help="RecurringJob rows")
    parser.add_argument("--requests", type=int, default=5, help="timed requests per page")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--dir", type=Path, help="keep the server's data in DIR (fills if needed)")
    where.add_argument("--reuse", type=Path, metavar="DIR", help="a DIR filled by an earlier run")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the results as JSON")
    parser.add_argument(
        "--explain-ms",
        type=float,
        metavar="MS",
        help="print EXPLAIN (ANALYZE, BUFFERS) of each page's slowest query above MS",
    )
    parser.add_argument("--only", help="time only the pages whose label contains this text")
    args = parser.parse_args(argv)
    fill = Fill(
        finished=args.finished,
        due=args.due,
        scheduled=args.scheduled,
        retrying=args.retrying,
        running=args.running,
        workers=args.workers,
        dead_letters=args.dead_letters,
        schedules=args.schedules,
    )
    if min(asdict(fill).values()) < 0:
        parser.error("the row counts cannot be negative")
    if fill.running and not fill.workers:
        parser.error("running jobs need at least one worker (--workers)")
    if fill.finished < 1 or fill.dead_letters < 1 or fill.schedules < 1:
        parser.error("--finished, --dead-letters and --schedules must be at least 1")
    if args.requests < 1:
        parser.error("--requests must be at least 1")
    return Options(
        fill,
        args.requests,
        args.reuse or args.dir,
        args.reuse is not None,
        args.json,
        args.explain_ms,
        args.only,
    )


# -- the server -----------------------------------------------------------------------


@contextmanager
def postgres_server(directory: Path | None) -> Iterator[str]:
    """A durable private server in ``directory`` (a temporary one if None); its URL.

    A server already running there is used as it is and left running; one
    started here is stopped on the way out (a temporary folder is deleted).
    """
    temporary = directory is None
    root = (
        Path(tempfile.mkdtemp(prefix="django-jobs-admin-pg.")) if directory is None else directory
    )
    root = root.resolve()
    script = [sys.executable, str(ROOT / "scripts" / "pgserver.py")]
    running = (root / "data" / "postmaster.pid").exists() and (root / "url").exists()
    try:
        if running:
            url = (root / "url").read_text().strip()
        else:
            env = {**os.environ, "PGSERVER_DURABLE": "1"}
            started = subprocess.run(
                [*script, "start", str(root)], env=env, check=True, capture_output=True, text=True
            )
            url = started.stdout.strip()
        yield url
    finally:
        if not running:
            subprocess.run([*script, "stop", str(root)], check=False)
        if temporary:
            shutil.rmtree(root, ignore_errors=True)


def configure_environment(url: str) -> None:
    """Environment for this process; testproject/settings.py reads it."""
    os.environ.update(
        {"DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "testproject.settings", "DEBUG": "false"}
    )


def setup_django() -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import django

    django.setup()


# -- the SQL of the finished part (pure: the tables' quoted names in, statements out) ---


@dataclass(frozen=True)
class Tables:
    job: str
    attempt: str


def finished_jobs_sql(tables: Tables) -> str:
    """One statement: the finished jobs, oldest first (so the oldest has the lowest id).

    Parameters: ``count``, ``now``, ``span_seconds``, ``names`` and ``queues`` (text
    arrays, cycled through), ``schedules`` (a text array). Job ``i`` (``count`` down to
    1) finished ``i * span_seconds / count`` seconds before ``now``.
    """
    return f"""
        INSERT INTO {tables.job} (
            name, queue, payload, status, priority, run_at, attempt, attempts_used,
            max_attempts, lease_owner, lease_expires_at, unique_key, last_error,
            cancel_requested_at, result, progress_done, progress_total, progress_note,
            schedule, created_at, started_at, finished_at
        )
        SELECT
            (%(names)s::text[])[1 + g.i %% cardinality(%(names)s::text[])],
            (%(queues)s::text[])[1 + g.i %% cardinality(%(queues)s::text[])],
            jsonb_build_object('n', g.i),
            CASE WHEN g.i %% {CANCELLED_EVERY} = 0 THEN 'cancelled' ELSE 'succeeded' END,
            0,
            g.finished_at - interval '2 seconds',
            1, 1, 5, NULL, NULL, NULL, '',
            CASE WHEN g.i %% {CANCELLED_EVERY} = 0 THEN g.finished_at END,
            CASE WHEN g.i %% {CANCELLED_EVERY} <> 0 THEN jsonb_build_object('ok', true) END,
            NULL, NULL, '',
            CASE WHEN g.i %% {SCHEDULED_EVERY} = 0
                THEN (%(schedules)s::text[])[
                    1 + (g.i / {SCHEDULED_EVERY}) %% cardinality(%(schedules)s::text[])]
            END,
            g.finished_at - interval '2 seconds',
            g.finished_at - interval '1 second',
            g.finished_at
        FROM (
            SELECT i, %(now)s::timestamptz - i * (%(span_seconds)s / %(count)s::float8)
                * interval '1 second' AS finished_at
            FROM generate_series(%(count)s::bigint, 1, -1) AS i
        ) AS g
        ORDER BY g.i DESC
    """


def finished_attempts_sql(tables: Tables) -> str:
    """One statement: an attempt row for every finished job that has none."""
    return f"""
        INSERT INTO {tables.attempt} (
            job_id, number, owner, started_at, finished_at, outcome, error
        )
        SELECT j.id, 1, 'bench-host:' || (1000 + j.id %% 4) || ':finished', j.started_at,
            j.finished_at, CASE j.status WHEN 'cancelled' THEN 'cancelled' ELSE 'succeeded' END,
            ''
        FROM {tables.job} AS j
        WHERE j.status IN ('succeeded', 'cancelled')
            AND NOT EXISTS (SELECT 1 FROM {tables.attempt} AS a WHERE a.job_id = j.id)
    """


def count_finished_sql(tables: Tables) -> str:
    """The finished part's size, through the finished index's condition."""
    return f"SELECT count(*) FROM {tables.job} WHERE status IN ('succeeded', 'cancelled')"


def delete_live_sql(tables: Tables) -> list[str]:
    """Statements that delete the live part's jobs (and dead letters), attempts first."""
    live = "status IN ('pending', 'running', 'dead_lettered')"
    return [
        f"DELETE FROM {tables.attempt} WHERE job_id IN (SELECT id FROM {tables.job} WHERE {live})",
        f"DELETE FROM {tables.job} WHERE {live}",
    ]


def quoted_tables() -> Tables:
    from django.db import connection

    from django_jobs.models import Attempt, Job

    quote = connection.ops.quote_name
    return Tables(quote(Job._meta.db_table), quote(Attempt._meta.db_table))


# -- filling --------------------------------------------------------------------------


def job_names() -> list[str]:
    """The registered names: what a project's jobs are called."""
    from django_jobs.registry import registered_names

    return registered_names()


def queue_names() -> list[str]:
    from django_jobs.conf import settings

    return list(settings.QUEUES)


def scalar(sql: str, params: dict[str, Any] | None = None) -> Any:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params or {})
        row = cursor.fetchone()
    return row[0] if row else None


def execute(sql: str, params: dict[str, Any] | None = None) -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params or {})  # always bound: every statement escapes its %
        return int(cursor.rowcount)


def empty_tables() -> None:
    """Every django_jobs table emptied, its sequences reset (TRUNCATE)."""
    from django.apps import apps
    from django.core.management.color import no_style
    from django.db import connection

    models = apps.get_app_config("django_jobs").get_models()
    tables = sorted({model._meta.db_table for model in models if model._meta.managed})
    flush = connection.ops.sql_flush(no_style(), tables, reset_sequences=True)
    connection.ops.execute_sql_flush(flush)


def fill_finished(fill: Fill, now: datetime) -> None:
    tables = quoted_tables()
    params = {
        "count": fill.finished,
        "now": now,
        "span_seconds": float(FINISHED_DAYS * 86400),
        "names": job_names(),
        "queues": queue_names(),
        "schedules": fill.schedule_names(),
    }
    log(f"inserting {fill.finished:,} finished jobs")
    with timed("finished jobs"):
        execute(finished_jobs_sql(tables), params)
    with timed("their attempts"):
        execute(finished_attempts_sql(tables))


def fill_live(fill: Fill, now: datetime) -> None:
    """The live part, made anew: pending, running, dead letters, workers, schedules."""
    from django_jobs.models import Attempt, Job, RecurringJob, Worker

    tables = quoted_tables()
    for sql in delete_live_sql(tables):
        execute(sql)
    Worker.objects.all().delete()
    RecurringJob.objects.all().delete()
    names, queues = job_names(), queue_names()
    workers = [
        Worker(
            id=f"bench-host-{number}:{1000 + number}:live",
            host=f"bench-host-{number}",
            pid=1000 + number,
            queues=queues,
            started_at=now - timedelta(hours=6),
            last_heartbeat_at=now,
            jobs_run=fill.finished // max(fill.workers, 1),
        )
        for number in range(fill.workers)
    ]
    Worker.objects.bulk_create(workers)
    jobs, attempts = live_jobs(fill, now, names, queues, [w.id for w in workers])
    Job.objects.bulk_create(jobs, batch_size=1000)
    for attempt in attempts:
        attempt.job_id = attempt.job.pk
    Attempt.objects.bulk_create(attempts, batch_size=1000)
    RecurringJob.objects.bulk_create(schedules(fill, now, names))


ERROR = (
    'Traceback (most recent call last):\n  File "app/jobs.py", line 42, in send\n'
    "    response.raise_for_status()\nrequests.exceptions.HTTPError: 503 Server Error"
)


def live_jobs(
    fill: Fill, now: datetime, names: list[str], queues: list[str], owners: list[str]
) -> tuple[list[Any], list[Any]]:
    """The live part's Job rows and their Attempt rows (``attempt.job`` set, not saved)."""
    from django_jobs.models import Attempt, Job, JobStatus

    jobs: list[Job] = []
    attempts: list[Attempt] = []

    def add(number: int, **fields: Any) -> Job:
        job = Job(
            name=names[number % len(names)],
            queue=queues[number % len(queues)],
            payload={"n": number},
            created_at=now - timedelta(minutes=5),
            **fields,
        )
        jobs.append(job)
        return job

    def attempt(job: Job, number: int, **fields: Any) -> None:
        attempts.append(Attempt(job=job, number=number, **fields))

    for n in range(fill.due):
        add(n, status=JobStatus.PENDING, run_at=now - timedelta(seconds=n % 300))
    for n in range(fill.scheduled):
        add(n, status=JobStatus.PENDING, run_at=now + timedelta(minutes=1 + n % 600))
    for n in range(fill.retrying):
        start = now - timedelta(seconds=30)
        job = add(
            n,
            status=JobStatus.PENDING,
            run_at=now + timedelta(seconds=30 + n % 600),
            attempt=1,
            attempts_used=1,
            last_error=ERROR,
        )
        owner = owners[n % len(owners)] if owners else "bench-host:gone"
        attempt(job, 1, owner=owner, started_at=start, finished_at=start, outcome="failed")
    for n in range(fill.running):
        owner = owners[n % len(owners)]
        start = now - timedelta(seconds=n)
        job = add(
            n,
            status=JobStatus.RUNNING,
            run_at=start,
            started_at=start,
            attempt=1,
            attempts_used=1,
            lease_owner=owner,
            lease_expires_at=now + timedelta(minutes=5),
            progress_done=n,
            progress_total=100,
            progress_note="working",
        )
        attempt(job, 1, owner=owner, started_at=start)
    for n in range(fill.dead_letters):
        finished = now - timedelta(days=FINISHED_DAYS) * (n / fill.dead_letters)
        job = add(
            n,
            status=JobStatus.DEAD_LETTERED,
            run_at=finished,
            started_at=finished,
            finished_at=finished,
            attempt=3,
            attempts_used=3,
            max_attempts=3,
            last_error=ERROR,
        )
        for number in (1, 2, 3):
            started = finished - timedelta(minutes=3 - number)
            attempt(
                job,
                number,
                owner="bench-host:gone",
                started_at=started,
                finished_at=started,
                outcome="failed",
                error=ERROR,
            )
    return jobs, attempts


def schedules(fill: Fill, now: datetime, names: list[str]) -> list[Any]:
    from django_jobs.models import RecurringJob

    return [
        RecurringJob(
            name=name,
            job_name=names[number % len(names)],
            cron="*/5 * * * *",
            next_run_at=now + timedelta(minutes=5),
            last_run_at=now - timedelta(minutes=number % 5),
        )
        for number, name in enumerate(fill.schedule_names())
    ]


def vacuum_analyze() -> None:
    from django.apps import apps
    from django.db import connection

    quote = connection.ops.quote_name
    for model in apps.get_app_config("django_jobs").get_models():
        if model._meta.managed and not model._meta.proxy:
            execute(f"VACUUM ANALYZE {quote(model._meta.db_table)}")


def prepare_database(options: Options, now: datetime) -> None:
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    tables = quoted_tables()
    found = int(scalar(count_finished_sql(tables)))
    if found != options.fill.finished:
        if options.reuse:
            raise BenchError(
                f"--reuse: {options.directory} holds {found:,} finished jobs, not"
                f" {options.fill.finished:,}; fill it with --dir first"
            )
        empty_tables()
        fill_finished(options.fill, now)
    else:
        log(f"reusing the {found:,} finished jobs in place")
    with timed("the live part"):
        fill_live(options.fill, now)
    with timed("VACUUM ANALYZE"):
        vacuum_analyze()


# -- the pages ------------------------------------------------------------------------


def admin_pages(sample: dict[str, Any]) -> list[Page]:
    """The pages to time; ``sample`` names rows to open (job, dead_letter, schedule, name)."""
    from django.urls import NoReverseMatch, reverse

    from django_jobs.models import FINISHED_STATUSES, LIVE_STATUSES

    jobs = reverse("admin:django_jobs_job_changelist")
    pages = [
        Page("admin index", reverse("admin:index")),
        Page("app index", reverse("admin:app_list", args=["django_jobs"])),
        Page("jobs", jobs),
    ]
    for status in (*LIVE_STATUSES, *FINISHED_STATUSES):
        pages.append(Page(f"jobs, status={status.value}", f"{jobs}?status__exact={status.value}"))
    pages += [
        Page("jobs, queue=default", f"{jobs}?queue__exact=default"),
        Page(f"jobs, name={sample['name']}", f"{jobs}?name__exact={sample['name']}"),
        Page("jobs, search by id", f"{jobs}?q={sample['job']}"),
        Page(f"jobs, search {sample['name']}", f"{jobs}?q={sample['name']}"),
        Page("jobs, page 2", f"{jobs}?p=2"),
        Page(f"jobs, page {DEEP_PAGE:,}", f"{jobs}?p={DEEP_PAGE}"),
        Page("job page (1 attempt)", reverse("admin:django_jobs_job_change", args=[sample["job"]])),
        Page("dead letters", reverse("admin:django_jobs_deadletter_changelist")),
        Page(
            "dead letter page (3 attempts)",
            reverse("admin:django_jobs_deadletter_change", args=[sample["dead_letter"]]),
        ),
        Page("workers", reverse("admin:django_jobs_worker_changelist")),
        Page("recurring", reverse("admin:django_jobs_recurringjob_changelist")),
        Page(
            "schedule page",
            reverse("admin:django_jobs_recurringjob_change", args=[sample["schedule"]]),
        ),
    ]
    try:
        pages.append(Page("dashboard", reverse(DASHBOARD)))
    except NoReverseMatch:
        pages.append(Page("dashboard", "", note=f"not timed: {DASHBOARD} does not resolve"))
    return pages


def sample_rows(fill: Fill) -> dict[str, Any]:
    """A finished job from the middle of the table, a dead letter, a schedule, a name."""
    from django_jobs.models import Job, JobStatus, RecurringJob

    def ids(status: JobStatus) -> Any:
        return Job.objects.filter(status=status).order_by("id").values_list("id", flat=True)

    return {
        "job": ids(JobStatus.SUCCEEDED)[fill.finished // 2],
        "dead_letter": ids(JobStatus.DEAD_LETTERED)[fill.dead_letters // 2],
        "schedule": RecurringJob.objects.order_by("name").values_list("pk", flat=True)[0],
        "name": "demo.noop",
    }


def superuser_client() -> Any:
    from django.contrib.auth import get_user_model
    from django.test import Client

    user_model = get_user_model()
    user = user_model.objects.filter(username=ADMIN_USER).first()
    if user is None:
        user = user_model.objects.create_superuser(ADMIN_USER, "bench@example.com", None)
    client = Client()
    client.force_login(user)
    return client


@dataclass
class Query:
    """One statement a request ran, timed around the database driver's call."""

    sql: str
    params: Any
    ms: float


class QueryTimer:
    """``connection.execute_wrapper`` that times every statement (DEBUG's figures are in ms)."""

    def __init__(self) -> None:
        self.queries: list[Query] = []

    def __call__(
        self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        start = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.queries.append(Query(sql, params, 1000 * (time.perf_counter() - start)))


def time_page(client: Any, page: Page, requests: int) -> tuple[Timing, Query | None]:
    """The page's timing and its slowest query over all requests."""
    from django.db import connection

    timing = Timing(page.label, page.url, note=page.note)
    if not page.url:
        return timing, None
    client.get(page.url)  # warm-up: templates, caches, the session
    seconds: list[float] = []
    slowest: list[Query] = []
    for _ in range(requests):
        timer = QueryTimer()
        with connection.execute_wrapper(timer):
            start = time.perf_counter()
            response = client.get(page.url)
            seconds.append(time.perf_counter() - start)
        timing.status = response.status_code
        timing.queries = len(timer.queries)
        if timer.queries:
            slowest.append(max(timer.queries, key=lambda query: query.ms))
        timing.statements = [{"ms": round(q.ms, 2), "sql": q.sql} for q in timer.queries]
    timing.median_ms = 1000 * statistics.median(seconds)
    timing.max_ms = 1000 * max(seconds)
    worst = max(slowest, key=lambda query: query.ms, default=None)
    if worst is not None:
        timing.slowest_query_ms = statistics.median(query.ms for query in slowest)
        timing.slowest_query = worst.sql
    if timing.status != 200:
        timing.note = f"answered {timing.status}"
    return timing, worst


def explain(query: Query) -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {query.sql}", query.params)
        return "\n".join(row[0] for row in cursor.fetchall())


# -- the report -----------------------------------------------------------------------

COLUMNS = [
    ("page", 34),
    ("status", 7),
    ("median ms", 11),
    ("max ms", 9),
    ("queries", 9),
    ("slowest query ms", 18),
]


def table_row(timing: Timing) -> list[str]:
    """The page's cells, one per column, then its flag or note, if any."""
    if not timing.url:
        return [timing.label, "-", "-", "-", "-", "-", timing.note]
    figures = [
        timing.label,
        str(timing.status),
        f"{timing.median_ms:,.1f}",
        f"{timing.max_ms:,.1f}",
        str(timing.queries),
        f"{timing.slowest_query_ms:,.1f}",
    ]
    return figures + (["SLOW"] if timing.slow else [])


def format_table(timings: list[Timing]) -> str:
    """The results as a text table: the page left-aligned, the figures right-aligned."""
    widths = [width for _, width in COLUMNS]
    lines = []
    for row in [[name for name, _ in COLUMNS]] + [table_row(timing) for timing in timings]:
        cells, extra = row[: len(COLUMNS)], row[len(COLUMNS) :]
        line = cells[0][: widths[0] - 1].ljust(widths[0])
        line += "".join(
            cell.rjust(width) for cell, width in zip(cells[1:], widths[1:], strict=True)
        )
        lines.append(" ".join([line, *extra]).rstrip())
    return "\n".join(lines)


def run_info(options: Options) -> dict[str, Any]:
    import django
    from django.db import connection

    import django_jobs

    version = str(scalar("SELECT current_setting('server_version')")).split()[0]
    durability = {
        name: str(scalar(f"SELECT current_setting('{name}')"))
        for name in ("fsync", "synchronous_commit")
    }
    return {
        "bench": "admin_pages",
        "measured_at": datetime.now(dt_timezone.utc).isoformat(timespec="seconds"),
        "database": f"{connection.display_name} {version}",
        "database_settings": durability,
        "python": sys.version.split()[0],
        "django": django.get_version(),
        "django_jobs": django_jobs.__version__,
        "cpus": os.cpu_count(),
        "fill": asdict(options.fill),
        "requests": options.requests,
        "slow_ms": SLOW_MS,
    }


def print_report(info: dict[str, Any], timings: list[Timing]) -> None:
    fill = info["fill"]
    settings = ", ".join(f"{name}={value}" for name, value in info["database_settings"].items())
    print(f"\n{info['database']} ({settings})")
    print(
        f"python {info['python']}, django {info['django']}, django-jobs {info['django_jobs']},"
        f" {info['cpus']} cpus; {fill['finished']:,} finished jobs, {fill['dead_letters']:,}"
        f" dead letters, {fill['due'] + fill['scheduled'] + fill['retrying']:,} pending,"
        f" {fill['running']} running; median of {info['requests']} requests"
    )
    print(format_table(timings))
    slow = [timing.label for timing in timings if timing.url and timing.slow]
    print(f"over {SLOW_MS:.0f} ms or not 200: {', '.join(slow) or 'none'}")


# -- main -----------------------------------------------------------------------------


def log(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


@contextmanager
def timed(what: str) -> Iterator[None]:
    start = time.perf_counter()
    yield
    log(f"{what}: {time.perf_counter() - start:.1f} s")


def raise_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit, so that the server is stopped on the way out."""

    def handle(signum: int, frame: Any) -> NoReturn:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handle)


def measure(options: Options, report: Callable[[Timing], None]) -> list[Timing]:
    from django.utils import timezone

    prepare_database(options, timezone.now())
    client = superuser_client()
    pages = admin_pages(sample_rows(options.fill))
    if options.only:
        pages = [page for page in pages if options.only in page.label]
    timings = []
    for page in pages:
        timing, slowest = time_page(client, page, options.requests)
        if slowest and options.explain_ms is not None and slowest.ms > options.explain_ms:
            timing.plan = explain(slowest)
        report(timing)
        timings.append(timing)
    return timings


def report_progress(timing: Timing) -> None:
    log(f"{timing.label}: {timing.median_ms:.1f} ms {timing.note}".rstrip())
    if timing.plan:
        for statement in timing.statements:
            print(f"    {statement['ms']:8.1f} ms  {statement['sql'][:160]}", file=sys.stderr)
        print(f"--- {timing.label}: {timing.slowest_query}\n{timing.plan}\n", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    options = parse_options(argv)
    raise_on_sigterm()
    if options.reuse and options.directory and not options.directory.exists():
        print(f"bench failed: --reuse {options.directory}: no such folder", file=sys.stderr)
        return 1
    try:
        with postgres_server(options.directory) as url:
            configure_environment(url)
            setup_django()
            timings = measure(options, report_progress)
            info = run_info(options)
    except BenchError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        return 1
    print_report(info, timings)
    if options.json:
        data = {**info, "pages": [asdict(timing) | {"slow": timing.slow} for timing in timings]}
        options.json.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
