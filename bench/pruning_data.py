"""The rows bench/pruning.py drains and prunes: expired finished jobs, and fresh ones.

The expired rows are inserted by one set-based statement per table (pure SQL
builders: the tables' quoted names in, the statement out, its parameters bound);
the fresh jobs by the ORM.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from harness import JOB_NAME, QUEUE

EXPIRED_NAME = "bench.expired"  # never run: only pruned
EXPIRED_AGE_DAYS = (8, 38)  # finished between 38 and 8 days ago: past every default retention


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


def insert_expired_rows(count: int, now: datetime) -> None:
    """:func:`insert_expired` on any database, through the ORM (``bulk_create``): the same
    succeeded jobs, each with one attempt, finished past every default retention."""
    from django_jobs.models import Attempt, Job

    newest, oldest = (now - timedelta(days=days) for days in EXPIRED_AGE_DAYS)
    step = (newest - oldest) / max(1, count)
    jobs = [
        Job(
            name=EXPIRED_NAME,
            queue=QUEUE,
            payload={"n": n},
            status="succeeded",
            run_at=oldest + n * step,
            created_at=oldest + n * step,
            started_at=oldest + n * step,
            finished_at=oldest + n * step,
            attempt=1,
            attempts_used=1,
        )
        for n in range(count)
    ]
    Job.objects.bulk_create(jobs, batch_size=2000)
    ids = Job.objects.filter(name=EXPIRED_NAME).values_list("id", "finished_at")
    Attempt.objects.bulk_create(
        (
            Attempt(
                job_id=job_id,
                number=1,
                owner="bench-host:1:expired",
                started_at=at,
                finished_at=at,
                outcome="succeeded",
            )
            for job_id, at in ids.iterator()
        ),
        batch_size=2000,
    )


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
