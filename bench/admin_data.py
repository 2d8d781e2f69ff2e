"""The rows bench/admin_pages.py times the admin against, and how they are made.

- the finished part, with a few set-based ``INSERT ... SELECT generate_series()``
  statements (pure SQL builders: the tables' quoted names in, statements out);
- the live part, with the ORM, deleted and made again on every run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import harness
from harness import BenchError, log, timed

FINISHED_DAYS = 6
SCHEDULED_EVERY = 10  # one finished job in ten was fired by a schedule
CANCELLED_EVERY = 100  # one finished job in a hundred was cancelled


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
    from django_jobs.models import Attempt, Job, RecurringJob, WorkerProcess

    tables = quoted_tables()
    for sql in delete_live_sql(tables):
        execute(sql)
    WorkerProcess.objects.all().delete()
    RecurringJob.objects.all().delete()
    names, queues = job_names(), queue_names()
    workers = [
        WorkerProcess(
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
    WorkerProcess.objects.bulk_create(workers)
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


def prepare_database(fill: Fill, now: datetime, reused: Path | None = None) -> None:
    """Migrate, fill the finished part unless it is in place, make the live part anew.

    ``reused``: the folder given to ``--reuse``, whose finished part must be in place.
    """
    harness.migrate()
    found = int(scalar(count_finished_sql(quoted_tables())))
    if found != fill.finished:
        if reused is not None:
            raise BenchError(
                f"--reuse: {reused} holds {found:,} finished jobs, not"
                f" {fill.finished:,}; fill it with --dir first"
            )
        harness.empty_tables()
        fill_finished(fill, now)
    else:
        log(f"reusing the {found:,} finished jobs in place")
    with timed("the live part"):
        fill_live(fill, now)
    with timed("VACUUM ANALYZE"):
        vacuum_analyze()
