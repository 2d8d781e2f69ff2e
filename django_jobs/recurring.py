"""Recurring jobs: cron schedules that fire once per occurrence across every worker.

This module adds, changes and removes schedules; firing them is the
scheduler's (:mod:`django_jobs.maintenance.scheduler`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import datetime
from typing import Any

from django.db import (
    DatabaseError,
    IntegrityError,
    OperationalError,
    ProgrammingError,
    connections,
    router,
    transaction,
)
from django.utils import timezone as dj_timezone

from .conf import (
    SCHEDULE_NAME_MAX_LENGTH,
    check_job_options,
    require_text,
    require_use_tz,
    settings,
)
from .cron import get_zone, next_occurrence, validate_cron
from .events import report_recurring
from .exceptions import JobsError, NotMigrated, ScheduleError
from .models import RecurringJob, ScheduleSource
from .payloads import encode_payload
from .registry import get_definition

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
SAVE_TRIES = 10


def check_schedule_parts(
    cron: str,
    job: str | Callable[..., Any],
    payload: Any,
    zone: str,
    *,
    queue: str | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
) -> str:
    """Raise a :class:`JobsError` for anything that would keep a schedule from firing.

    A cron that is not valid or never fires, an unknown zone, a payload that is
    not JSON, a job that is not registered, or a queue, priority or
    max_attempts no job can have. Returns the job name.
    """
    validate_cron(cron)
    get_zone(zone)
    encode_payload(payload)
    check_schedule_options(queue=queue, priority=priority, max_attempts=max_attempts)
    return get_definition(job).name


def check_schedule_options(
    *, queue: str | None = None, priority: int | None = None, max_attempts: int | None = None
) -> None:
    """:class:`ScheduleError` for a queue, priority or max_attempts that no job can have."""
    try:
        check_job_options(queue=queue, priority=priority, max_attempts=max_attempts)
    except ValueError as exc:
        raise ScheduleError(str(exc)) from None


def validate_schedule(
    name: str,
    cron: str,
    job: str | Callable[..., Any],
    payload: Any,
    zone: str,
    **options: Any,
) -> str:
    """Check a schedule's parts; return its job name. Errors name the schedule."""
    require_text(name, "a recurring job's name", SCHEDULE_NAME_MAX_LENGTH)
    try:
        return check_schedule_parts(cron, job, payload, zone, **options)
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

    Safe to call at every startup on every instance, while schedulers fire:
    only the fields that differ are written, never ``next_run_at`` or
    ``last_run_at`` as read, so a restart never skips or repeats an
    occurrence. A changed cron or zone (or re-enabling) starts from now, by a
    guarded update that a concurrent fire makes retry.
    """
    require_use_tz()
    job_name = validate_schedule(
        name,
        cron,
        job,
        payload,
        timezone,
        queue=queue,
        priority=priority,
        max_attempts=max_attempts,
    )
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
    with table_required(name, using):
        return save_schedule(name, values, using)


def save_schedule(name: str, values: Mapping[str, Any], using: str) -> RecurringJob:
    """Create the schedule ``name`` with ``values``, or change it to them."""
    for _ in range(SAVE_TRIES):
        pk = (
            RecurringJob.objects.using(using).filter(name=name).values_list("pk", flat=True).first()
        )
        if pk is None:
            try:
                with transaction.atomic(using=using):
                    next_run_at = first_run_at(
                        values["cron"], values["timezone"], dj_timezone.now(), values["enabled"]
                    )
                    return RecurringJob.objects.using(using).create(
                        name=name, next_run_at=next_run_at, **values
                    )
            except IntegrityError:
                continue  # another instance created it meanwhile: update it instead
        schedule = change_schedule(pk, values, using=using)
        if schedule is not None:
            return schedule
    raise JobsError(f"recurring job {name!r} could not be saved")


@contextmanager
def table_required(name: str, using: str) -> Iterator[None]:
    """Say to run ``migrate`` if the schedules table does not exist yet.

    Only for a table that is missing: any other database error passes through
    as raised. In a transaction the work runs in a savepoint, so that the
    table can still be looked for after the failed statement (PostgreSQL
    refuses every statement in a transaction after one fails).
    """
    in_transaction = connections[using].in_atomic_block
    savepoint: AbstractContextManager[Any] = (
        transaction.atomic(using=using) if in_transaction else nullcontext()
    )
    try:
        with savepoint:
            yield
    except (OperationalError, ProgrammingError):
        if not table_missing(using):
            raise

        database = "" if using == "default" else f" --database {using}"
        command = f"python manage.py migrate{database}"
        raise NotMigrated(
            f"recurring job {name!r} was not saved: database {using!r} has no table "
            f"{RecurringJob._meta.db_table} yet: run `{command}` first. Or declare it in "
            'DJANGO_JOBS["RECURRING"]: `runjobs` adds the schedules listed there when it starts.'
        ) from None


def table_missing(using: str) -> bool:
    """Whether the schedules table is missing from ``using`` (False if that cannot be told)."""
    try:
        return RecurringJob._meta.db_table not in connections[using].introspection.table_names()
    except DatabaseError:
        return False


def change_schedule(
    pk: int, values: Mapping[str, Any], *, using: str | None = None
) -> RecurringJob | None:
    """Write to schedule ``pk`` those of ``values`` that differ; return it (None if gone).

    Never writes ``next_run_at`` or ``last_run_at`` as read: a schedule whose
    cron or zone changes, that is enabled again, or that has no next run,
    restarts from now by a compare-and-set on the row as read, retried if a
    scheduler fired it meanwhile. The admin's form and actions use this too.
    """
    using = using or router.db_for_write(RecurringJob)
    for _ in range(SAVE_TRIES):
        current = RecurringJob.objects.using(using).filter(pk=pk).first()
        if current is None:
            return None
        changes = {
            field: value for field, value in values.items() if getattr(current, field) != value
        }
        if _restarts(current, changes):
            # Strictly after the last fired occurrence too, whatever this host's clock says.
            after = dj_timezone.now()
            if current.last_run_at is not None and current.last_run_at > after:
                after = current.last_run_at
            changes["next_run_at"] = first_run_at(
                changes.get("cron", current.cron),
                changes.get("timezone", current.timezone),
                after,
                changes.get("enabled", current.enabled),
            )
        if not changes:
            return current
        if _compare_and_set(current, changes, using):
            current.refresh_from_db(using=using)
            return current
    raise JobsError(f"recurring job #{pk} could not be saved: it kept changing")


def _restarts(current: RecurringJob, changes: Mapping[str, Any]) -> bool:
    enabled = changes.get("enabled", current.enabled)
    return (
        "cron" in changes
        or "timezone" in changes
        or (enabled and not current.enabled)
        or (enabled and current.next_run_at is None)
    )


def _compare_and_set(current: RecurringJob, changes: Mapping[str, Any], using: str) -> bool:
    """Apply ``changes`` if the fields that decide the next run still hold what was read."""
    guard = RecurringJob.objects.using(using).filter(
        pk=current.pk, cron=current.cron, timezone=current.timezone, enabled=current.enabled
    )
    if "next_run_at" in changes:
        guard = guard.filter(next_run_at=current.next_run_at)  # None reads as IS NULL
    return bool(guard.update(**changes))


def remove_recurring_job(name: str) -> bool:
    """Delete the schedule ``name``; True if it existed. Jobs it enqueued stay."""
    using = router.db_for_write(RecurringJob)
    deleted, _ = RecurringJob.objects.using(using).filter(name=name).delete()
    return bool(deleted)


def first_run_at(cron: str, zone: str, now: datetime, enabled: bool = True) -> datetime | None:
    """When a new, changed or re-enabled schedule first fires: its next occurrence after now."""
    return next_occurrence(cron, zone, now) if enabled else None


def run_now(schedule: RecurringJob) -> Any:
    """Enqueue one run of ``schedule`` now, without moving it."""
    from .scheduling import JobSpec, schedule_jobs

    spec = JobSpec(
        schedule.job_name,
        schedule.payload,
        queue=schedule.queue,
        priority=schedule.priority,
        max_attempts=schedule.max_attempts,
        schedule=schedule.name,
    )
    return schedule_jobs([spec])[0]


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
        report_recurring("recurring_disabled", count=removed)
