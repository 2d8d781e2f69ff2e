"""The scheduler: fires recurring schedules, once per occurrence across every worker.

Each worker process's main loop calls :func:`enqueue_due`. A schedule fires
by a guarded update that moves ``next_run_at`` forward only if it still
holds the value that was read, and enqueues the job in the same
transaction, through the one way in (:func:`~django_jobs.scheduling.enqueue`:
it wakes the queue and sends ``job_enqueued`` when the transaction commits):
however many workers race, each occurrence enqueues exactly one job. Runs
missed while no worker was up collapse into one; the next run is computed
from now.
"""

from __future__ import annotations

from datetime import datetime

from django.db import router
from django.db.models import Q

from ..cron import next_occurrence
from ..db import get_driver
from ..events import report_recurring
from ..models import Job, RecurringJob
from ..scheduling import JobSpec, build_job, enqueue


def enqueue_due(now: datetime, *, using: str | None = None, batch: int = 100) -> int:
    """Fire every enabled schedule due at ``now``; return how many jobs were enqueued.

    Reads the due schedules a page of ``batch`` at a time, in ``(next_run_at,
    id)`` order, and goes on past the last row read, so rows that fail stay
    behind and never starve the ones after them.
    """
    using = using or router.db_for_write(RecurringJob)
    fired = 0
    after: tuple[datetime, int] | None = None
    while True:
        page = _due_page(now, using, batch, after)
        for schedule in page:
            fired += _fire_logged(schedule, now, using)
        if len(page) < batch:
            return fired
        last = page[-1]
        assert last.next_run_at is not None
        after = (last.next_run_at, last.pk)


def next_due_at(after: datetime, using: str) -> datetime | None:
    """When the next enabled schedule falls due after ``after`` (None: none will)."""
    due = RecurringJob.objects.using(using).filter(enabled=True, next_run_at__gt=after)
    return due.order_by("next_run_at").values_list("next_run_at", flat=True).first()


def _due_page(
    now: datetime, using: str, batch: int, after: tuple[datetime, int] | None
) -> list[RecurringJob]:
    due = RecurringJob.objects.using(using).filter(enabled=True, next_run_at__lte=now)
    if after is not None:
        due = due.filter(Q(next_run_at__gt=after[0]) | Q(next_run_at=after[0], pk__gt=after[1]))
    return list(due.order_by("next_run_at", "pk")[:batch])


def _fire_logged(schedule: RecurringJob, now: datetime, using: str) -> int:
    try:
        return fire(schedule, now, using)
    except Exception as exc:
        report_recurring("recurring_not_fired", schedule.name, error=f"{type(exc).__name__}: {exc}")
        return 0


def fire(schedule: RecurringJob, now: datetime, using: str) -> int:
    """Fire one due occurrence of ``schedule``; 1 if this call enqueued its job.

    A row that cannot make a job (its job no longer registered, a stored
    payload or option that is not valid) is moved past the occurrence rather
    than left due, and one whose cron or zone gives no next occurrence is
    disabled: see :func:`_move_past`.
    """
    occurrence = schedule.next_run_at
    assert occurrence is not None
    spec = JobSpec(
        schedule.job_name,
        schedule.payload,
        run_at=occurrence,
        queue=schedule.queue,
        priority=schedule.priority,
        max_attempts=schedule.max_attempts,
        unique_key=None if schedule.overlap else f"recurring:{schedule.name}",  # one at a time
        schedule=schedule.name,
    )
    job: Job | None = None
    problem: Exception | None = None
    try:  # the row's own content: no database call in either
        job = build_job(spec)
    except Exception as exc:
        problem = exc
    try:
        following = next_occurrence(schedule.cron, schedule.timezone, max(now, occurrence))
    except Exception as exc:  # nothing to wait for: the schedule is disabled
        following, problem = None, exc
    if problem is not None or job is None:
        return _move_past(schedule, occurrence, following, problem, using)
    with get_driver(using).write_transaction():
        moved = (
            RecurringJob.objects.using(using)
            .filter(pk=schedule.pk, enabled=True, next_run_at=occurrence)
            .update(next_run_at=following, last_run_at=occurrence)
        )
        if not moved:
            return 0  # another worker fired this occurrence
        if enqueue([job], using)[0] is not job:  # its previous run holds the unique key
            report_recurring("recurring_skipped", schedule.name, occurrence=occurrence.isoformat())
            return 0
    report_recurring(
        "recurring_fired", schedule.name, occurrence=occurrence.isoformat(), job_id=job.pk
    )
    return 1


def _move_past(
    schedule: RecurringJob,
    occurrence: datetime,
    following: datetime | None,
    error: Exception | None,
    using: str,
) -> int:
    """Log why ``occurrence`` cannot fire, and take the row out of the due set; 0.

    Like cron when a command fails: the occurrence is skipped and the schedule
    tries again at its next one (``following``), so it resumes by itself once
    the job is registered again or the row is fixed. A cron or zone that gives
    no next occurrence (``following`` None) leaves nothing to wait for: the
    schedule is disabled, to be enabled again once fixed. Both writes are
    guarded by the occurrence read, so they never undo a fire by another worker.
    """
    guard = RecurringJob.objects.using(using).filter(
        pk=schedule.pk, enabled=True, next_run_at=occurrence
    )
    if following is None:
        moved, event, said = guard.update(enabled=False), "recurring_broken", {}
    else:
        moved = guard.update(next_run_at=following)
        event, said = "recurring_passed", {"following": following.isoformat()}
    if moved:
        error_text = f"{type(error).__name__}: {error}"
        report_recurring(
            event, schedule.name, error=error_text, occurrence=occurrence.isoformat(), **said
        )
    return 0
