"""Recurring jobs: cron schedules that fire once per occurrence across every worker.

Each worker process's scheduler loop calls :func:`enqueue_due`. A schedule
fires by a guarded update that moves ``next_run_at`` forward only if it still
holds the value that was read, and enqueues the job in the same transaction:
however many workers race, each occurrence enqueues exactly one job. Runs
missed while no worker was up collapse into one; the next run is computed
from now.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from django.db import IntegrityError, router, transaction
from django.utils import timezone as dj_timezone

from .claims import get_claimer
from .conf import require_use_tz, settings
from .cron import get_zone, next_occurrence, normalise_cron
from .exceptions import JobsError
from .models import RecurringJob, ScheduleSource
from .payloads import encode_payload
from .registry import get_definition
from .scheduling import JobSpec, build_job, find_live_job

logger = logging.getLogger(__name__)

SCHEDULE_KEYS = {
    "cron",
    "job",
    "payload",
    "queue",
    "timezone",
    "enabled",
    "priority",
    "max_attempts",
    "overlap",
}


def check_schedule_parts(cron: str, job: str | Callable[..., Any], payload: Any, zone: str) -> str:
    """Raise a :class:`JobsError` for a bad cron, zone, payload or job; return the job name."""
    normalise_cron(cron)
    get_zone(zone)
    encode_payload(payload)
    return get_definition(job).name


def validate_schedule(
    name: str, cron: str, job: str | Callable[..., Any], payload: Any, zone: str
) -> str:
    """Check a schedule's parts; return its job name. Errors name the schedule."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError("a recurring job needs a non-empty name")
    try:
        return check_schedule_parts(cron, job, payload, zone)
    except JobsError as exc:
        raise type(exc)(f"recurring job {name!r}: {exc}") from None


def add_recurring_job(
    name: str,
    cron: str,
    job: str | Callable[..., Any],
    payload: Any = None,
    *,
    queue: str | None = None,
    timezone: str = "UTC",  # noqa: A002 - the documented argument name
    enabled: bool = True,
    priority: int | None = None,
    max_attempts: int | None = None,
    overlap: bool = True,
    source: str = ScheduleSource.CODE,
) -> RecurringJob:
    """Create or update the schedule ``name`` and return it.

    Safe to call at every startup on every instance: with the same cron and
    time zone, ``next_run_at`` is kept, so a restart never skips or repeats
    an occurrence; a changed cron or zone (or re-enabling) starts from now.
    """
    require_use_tz()
    job_name = validate_schedule(name, cron, job, payload, timezone)
    using = router.db_for_write(RecurringJob)
    values = {
        "job_name": job_name,
        "cron": cron,
        "payload": payload,
        "queue": queue,
        "timezone": timezone,
        "enabled": enabled,
        "priority": priority,
        "max_attempts": max_attempts,
        "overlap": overlap,
        "source": source,
    }
    now = dj_timezone.now()
    for _ in range(3):
        existing = RecurringJob.objects.using(using).filter(name=name).first()
        if existing is None:
            try:
                with transaction.atomic(using=using):
                    next_run_at = first_run_at(cron, timezone, now, enabled)
                    return RecurringJob.objects.using(using).create(
                        name=name, next_run_at=next_run_at, **values
                    )
            except IntegrityError:
                continue  # another instance created it meanwhile: update it instead
        restart = (
            existing.cron != cron
            or existing.timezone != timezone
            or (enabled and not existing.enabled)
            or existing.next_run_at is None
        )
        for field, value in values.items():
            setattr(existing, field, value)
        if restart:
            existing.next_run_at = first_run_at(cron, timezone, now, enabled)
        existing.save(using=using)
        return existing
    raise JobsError(f"recurring job {name!r} could not be saved")


def remove_recurring_job(name: str) -> bool:
    """Delete the schedule ``name``; True if it existed. Jobs it enqueued stay."""
    using = router.db_for_write(RecurringJob)
    deleted, _ = RecurringJob.objects.using(using).filter(name=name).delete()
    return bool(deleted)


def first_run_at(cron: str, zone: str, now: datetime, enabled: bool = True) -> datetime | None:
    """When a new, changed or re-enabled schedule first fires: its next occurrence after now."""
    return next_occurrence(cron, zone, now) if enabled else None


def enqueue_due(now: datetime, *, using: str | None = None, batch: int = 100) -> int:
    """Fire every enabled schedule due at ``now``; return how many jobs were enqueued."""
    using = using or router.db_for_write(RecurringJob)
    due = list(
        RecurringJob.objects.using(using)
        .filter(enabled=True, next_run_at__lte=now)
        .order_by("next_run_at")[:batch]
    )
    fired = 0
    for schedule in due:
        try:
            fired += fire(schedule, now, using)
        except Exception as exc:
            logger.error(
                "recurring job %r not fired: %s: %s",
                schedule.name,
                type(exc).__name__,
                exc,
                extra={"event": "recurring_error", "schedule": schedule.name},
            )
    return fired


def fire(schedule: RecurringJob, now: datetime, using: str) -> int:
    """Fire one due occurrence of ``schedule``; 1 if this call enqueued its job."""
    occurrence = schedule.next_run_at
    assert occurrence is not None
    following = next_occurrence(schedule.cron, schedule.timezone, max(now, occurrence))
    job = build_job(
        JobSpec(
            schedule.job_name,
            schedule.payload,
            run_at=occurrence,
            queue=schedule.queue,
            priority=schedule.priority,
            max_attempts=schedule.max_attempts,
            unique_key=None if schedule.overlap else f"recurring:{schedule.name}",
        )
    )
    with get_claimer(using).write_transaction():
        moved = (
            RecurringJob.objects.using(using)
            .filter(pk=schedule.pk, enabled=True, next_run_at=occurrence)
            .update(next_run_at=following, last_run_at=occurrence)
        )
        if not moved:
            return 0  # another worker fired this occurrence
        if job.unique_key is not None and find_live_job(job, using) is not None:
            logger.info(
                "recurring job %r: previous run still live; occurrence %s skipped",
                schedule.name,
                occurrence.isoformat(),
                extra={"event": "recurring_skipped", "schedule": schedule.name},
            )
            return 0
        job.save(using=using, force_insert=True)
    logger.info(
        "recurring job %r fired for %s: job #%s",
        schedule.name,
        occurrence.isoformat(),
        job.pk,
        extra={"event": "recurring_fired", "schedule": schedule.name, "job_id": job.pk},
    )
    return 1


def run_now(schedule: RecurringJob) -> Any:
    """Enqueue one run of ``schedule`` now, without moving it."""
    from .scheduling import schedule_job

    return schedule_job(
        schedule.job_name,
        schedule.payload,
        queue=schedule.queue,
        priority=schedule.priority,
        max_attempts=schedule.max_attempts,
    )


def sync_from_settings() -> None:
    """Add and update ``DJANGO_JOBS["RECURRING"]``; disable those removed from it."""
    declared: Mapping[str, Mapping[str, Any]] = settings.RECURRING or {}
    for name, options in declared.items():
        add_recurring_job(
            name,
            options["cron"],
            options["job"],
            options.get("payload"),
            queue=options.get("queue"),
            timezone=options.get("timezone", "UTC"),
            enabled=options.get("enabled", True),
            priority=options.get("priority"),
            max_attempts=options.get("max_attempts"),
            overlap=options.get("overlap", True),
            source=ScheduleSource.SETTINGS,
        )
    using = router.db_for_write(RecurringJob)
    removed = (
        RecurringJob.objects.using(using)
        .filter(source=ScheduleSource.SETTINGS)
        .exclude(name__in=list(declared))
        .update(enabled=False, source=ScheduleSource.SETTINGS_REMOVED)
    )
    if removed:
        logger.warning(
            "%s recurring job(s) removed from DJANGO_JOBS['RECURRING'] were disabled",
            removed,
            extra={"event": "recurring_disabled"},
        )
