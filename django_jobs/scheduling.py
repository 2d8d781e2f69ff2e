"""Enqueueing: ``schedule_job()`` and ``schedule_jobs()``.

Both write on the caller's database connection, so inside
``transaction.atomic()`` a job commits or rolls back with the caller's rows.
On PostgreSQL they then notify the queues of the jobs that are due, in the
same transaction, so that idle workers wake when it commits.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any

from django.db import IntegrityError, router, transaction
from django.utils import timezone

from . import signals
from .conf import (
    CONCURRENCY_KEY_MAX_LENGTH,
    SCHEDULE_NAME_MAX_LENGTH,
    UNIQUE_KEY_MAX_LENGTH,
    require_max_attempts,
    require_priority,
    require_queue_name,
    require_text,
    require_use_tz,
    settings,
)
from .db import get_driver
from .events import send
from .exceptions import UnknownJob
from .models import Job
from .payloads import encode_payload
from .registry import JobDefinition, get_definition, keyed_queues

logger = logging.getLogger(__name__)

JobRef = str | Callable[..., Any]


@dataclass(frozen=True)
class JobSpec:
    """One job for :func:`schedule_jobs`; the fields are ``schedule_job``'s arguments."""

    job: JobRef
    payload: Any = None
    run_at: datetime | None = None
    delay: timedelta | None = None
    queue: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    unique_key: str | None = None
    #: The recurring schedule the job runs for; set by the scheduler and run-now.
    schedule: str | None = None
    #: Jobs of a queue with the same key run at most ``@job(concurrency=N)`` at once.
    concurrency_key: str | None = None


def _resolve_run_at(run_at: datetime | None, delay: timedelta | None) -> datetime:
    require_use_tz()
    if run_at is not None and delay is not None:
        raise ValueError("give run_at or delay, not both")
    if delay is not None:
        if not isinstance(delay, timedelta):
            raise ValueError(f"delay must be a timedelta, got {delay!r}")
        try:
            return timezone.now() + delay
        except OverflowError:
            raise ValueError(
                f"delay must keep run_at within the years 1 to 9999, got {delay!r}"
            ) from None
    if run_at is None:
        return timezone.now()
    if not isinstance(run_at, datetime):
        raise ValueError(f"run_at must be a datetime, got {run_at!r}")
    if timezone.is_naive(run_at):
        raise ValueError("run_at must be timezone-aware")
    try:
        run_at.astimezone(dt_timezone.utc)  # as SQLite stores it: the calendar's ends overflow
    except OverflowError:
        raise ValueError(f"run_at must be from year 1 to 9999 in UTC, got {run_at!r}") from None
    return run_at


def check_job_options(*, queue: str | None, priority: int | None, max_attempts: int | None) -> None:
    """``ValueError`` for a queue, priority or max_attempts no job can have (None: the default).

    Shared by :func:`build_job` and the recurring schedules, so a schedule is
    refused when it is saved rather than on every tick.
    """
    if max_attempts is not None:
        require_max_attempts(max_attempts)
    if priority is not None:
        require_priority(priority)
    if queue is not None:
        require_queue_name(queue)


def build_job(spec: JobSpec) -> Job:
    """Validate a spec and return an unsaved :class:`Job`."""
    definition = get_definition(spec.job)
    if definition.unavailable is not None:
        raise UnknownJob(definition.unavailable)
    text = encode_payload(spec.payload)
    max_attempts = (
        spec.max_attempts
        if spec.max_attempts is not None
        else definition.max_attempts or int(settings.MAX_ATTEMPTS)
    )
    priority = spec.priority if spec.priority is not None else definition.priority
    queue = spec.queue if spec.queue is not None else definition.queue
    check_job_options(queue=queue, priority=priority, max_attempts=max_attempts)
    if spec.unique_key is not None:
        require_text(spec.unique_key, "unique_key", UNIQUE_KEY_MAX_LENGTH, blank=True)
    if spec.schedule is not None:
        require_text(spec.schedule, "schedule", SCHEDULE_NAME_MAX_LENGTH)
    key = concurrency_key(definition, spec.concurrency_key, queue)
    return unsaved_job(
        name=definition.name,
        queue=queue,
        payload=json.loads(text),
        priority=priority,
        run_at=_resolve_run_at(spec.run_at, spec.delay),
        max_attempts=max_attempts,
        unique_key=spec.unique_key,
        schedule=spec.schedule,
        concurrency_key=key,
        concurrency_limit=None if key is None else definition.concurrency,
    )


def concurrency_key(definition: JobDefinition, key: str | None, queue: str) -> str | None:
    """The concurrency key a new job of ``definition`` on ``queue`` carries: the one given,
    else the job's name, for a job with a concurrency limit; None for one without."""
    if definition.concurrency is None:
        if key is not None:
            raise ValueError(
                f"concurrency_key is given, but job {definition.name!r} has no concurrency "
                f"limit: declare one, as @job({definition.name!r}, concurrency=1)"
            )
        return None
    if queue not in keyed_queues():
        raise ValueError(
            f"job {definition.name!r} has a concurrency limit, which its workers hold on "
            f"queues that a job with a limit declares ({definition.queue!r}); queue {queue!r} "
            "has none: schedule it there, or declare a job with concurrency= on that queue"
        )
    if key is None:
        return definition.name
    return require_text(key, "concurrency_key", CONCURRENCY_KEY_MAX_LENGTH)


@functools.cache
def job_defaults() -> tuple[tuple[str, Callable[[], Any]], ...]:
    """Each concrete field of :class:`Job` in order, with what makes its default."""
    return tuple((field.attname, field.get_default) for field in Job._meta.concrete_fields)


def unsaved_job(**values: Any) -> Job:
    """An unsaved :class:`Job` of ``values``, the other fields at their defaults.

    Built with every field's value in order, as Django makes the rows it
    loads: a third of the CPU of the keyword form, which looks up and pops
    each field's keyword. ``pre_init`` and ``post_init`` are sent as ever.
    """
    fields = [values[name] if name in values else default() for name, default in job_defaults()]
    return Job(*fields)  # type: ignore[misc]  # the plugin reads one positional as the id


def find_live_job(job: Job, using: str) -> Job | None:
    """The pending or running job of ``job``'s name and unique key, if any."""
    return (
        Job.objects.using(using)
        .live()
        .filter(name=job.name, unique_key=job.unique_key)
        .order_by("id")
        .first()
    )


def _insert_unique(job: Job, using: str) -> Job:
    existing = find_live_job(job, using)
    if existing is not None:
        return existing
    try:
        with transaction.atomic(using=using):
            job.save(using=using, force_insert=True)
    except IntegrityError:
        existing = find_live_job(job, using)
        if existing is None:
            raise
        return existing
    return job


def announce_enqueued(rows: Iterable[Job], using: str) -> None:
    """``job_enqueued`` for each of ``rows``, once the caller's transaction commits."""
    if not signals.job_enqueued.has_listeners(Job):
        return
    details = [{"job_id": row.pk, "name": row.name, "queue": row.queue} for row in rows]

    def announce() -> None:
        for detail in details:
            send(signals.job_enqueued, **detail)

    transaction.on_commit(announce, using=using)


def notify_due(inserted: Iterable[Job], using: str) -> None:
    """Wake the workers of the queues of the ``inserted`` jobs that are due now."""
    now = timezone.now()
    get_driver(using).wake({row.queue for row in inserted if row.run_at <= now})


def schedule_job(
    job: JobRef,
    payload: Any = None,
    *,
    run_at: datetime | None = None,
    delay: timedelta | None = None,
    queue: str | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    unique_key: str | None = None,
    concurrency_key: str | None = None,
) -> Job:
    """Enqueue one job and return its row.

    With ``unique_key``, a pending or running job of the same name and key is
    returned instead and nothing is inserted. With ``concurrency_key`` (a job
    declared with ``@job(concurrency=N)``), at most N jobs of its queue with
    that key run at once.
    """
    spec = JobSpec(
        job,
        payload,
        run_at,
        delay,
        queue,
        priority,
        max_attempts,
        unique_key,
        concurrency_key=concurrency_key,
    )
    row = build_job(spec)
    using = router.db_for_write(Job)
    if row.unique_key is not None:
        built, row = row, _insert_unique(row, using)
        notify_due([row] if row is built else [], using)
        announce_enqueued([row] if row is built else [], using)
    elif row.concurrency_key is not None:  # the driver's insert writes the plain columns
        row.save(using=using, force_insert=True)
        notify_due([row], using)
        announce_enqueued([row], using)
    else:
        get_driver(using).insert_jobs([row], timezone.now())
        announce_enqueued([row], using)
    logger.debug(
        "job %s #%s enqueued", row.name, row.pk, extra={"event": "job_enqueued", "job_id": row.pk}
    )
    return row


def schedule_jobs(specs: Iterable[JobSpec | Mapping[str, Any]]) -> list[Job]:
    """Enqueue many jobs; those without ``unique_key`` go in one INSERT.

    Every spec is validated before anything is written. Returns the rows in
    the order of ``specs``.
    """
    rows: list[Job] = []
    for spec in specs:
        if not isinstance(spec, JobSpec):
            spec = JobSpec(**spec)
        rows.append(build_job(spec))
    using = router.db_for_write(Job)
    plain = [row for row in rows if row.unique_key is None and row.concurrency_key is None]
    keyed = [row for row in rows if row.unique_key is None and row.concurrency_key is not None]
    with transaction.atomic(using=using):
        if plain:
            get_driver(using).insert_jobs(plain, timezone.now())
        if keyed:
            Job.objects.using(using).bulk_create(keyed)
            notify_due(keyed, using)
        result = [row if row.unique_key is None else _insert_unique(row, using) for row in rows]
        inserted = {id(row) for row in result}  # a unique key's existing job is not new
        notify_due(
            [row for row in rows if row.unique_key is not None and id(row) in inserted], using
        )
        announce_enqueued([row for row in rows if id(row) in inserted], using)
    logger.debug(
        "%s jobs enqueued", len(result), extra={"event": "job_enqueued", "count": len(result)}
    )
    return result
