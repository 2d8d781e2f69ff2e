"""The rescuer: takes back the jobs of workers that stopped renewing their leases.

A running job whose lease expired (its worker was killed, or cut off from
the database) is due again at once, or dead-lettered when it has no attempt
left; its open attempt is closed as ``lease_expired``. Every write is fenced
by the state the row was read in. Off the hot path: ORM code, on the
maintenance interval.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.db import router
from django.db.models import Q

from ..db import ROW_ERRORS, Driver, get_driver
from ..models import Attempt, AttemptOutcome, Job, JobStatus
from ..outcomes import ERROR_LIMIT

logger = logging.getLogger(__name__)

RECLAIM_BATCH = 100


def reclaim_expired_leases(
    now: datetime, *, using: str | None = None, batch: int = RECLAIM_BATCH
) -> int:
    """Take back every running job without a live lease at ``now``.

    That is a lease that expired, or a running row with no expiry or no
    owner (written by hand, say). Each one's open attempt is closed as
    ``lease_expired``; the job is due again at once, or dead-lettered when it
    has no attempt left. A row that cannot be taken back is logged and
    passed: each read asks for as many more rows as were passed, so those
    rows never hide the ones behind them.
    """
    driver = get_driver(using or router.db_for_write(Job))
    reclaimed = 0
    passed: set[int] = set()
    while True:
        wanted = batch + len(passed)
        read = unleased_rows(driver, now, wanted)
        rows = [row for row in read if row.id not in passed]
        for row in rows:
            if reclaim_row(driver, row, now):
                reclaimed += 1
            else:
                passed.add(row.id)
        if not rows or len(read) < wanted:
            return reclaimed


def _without_live_lease(driver: Driver, now: datetime) -> Any:
    """Running rows that no lease holds (``Job.objects.unleased``)."""
    return Job.objects.using(driver.using).unleased(now)


UNLEASED_FIELDS = (
    "id",
    "lease_owner",
    "lease_expires_at",
    "attempt",
    "attempts_used",
    "max_attempts",
    "cancel_requested_at",
)


def unleased_rows(driver: Driver, now: datetime, limit: int) -> list[Any]:
    """Up to ``limit`` running rows without a live lease, with the fields of ``UNLEASED_FIELDS``."""
    return list(unleased_read(driver, now, limit))


def unleased_read(driver: Driver, now: datetime, limit: int) -> Any:
    """The read behind :func:`unleased_rows`.

    In no set order: ordering by id would lead SQLite's planner to walk the
    whole table, where the status alone finds the few running rows.
    """
    return (
        _without_live_lease(driver, now)
        .order_by()
        .values_list(*UNLEASED_FIELDS, named=True)[:limit]
    )


def _close_attempt(
    driver: Driver, job_id: int, number: int, outcome: str, now: datetime, error: str = ""
) -> None:
    Attempt.objects.using(driver.using).filter(
        job_id=job_id, number=number, outcome__isnull=True
    ).update(outcome=outcome, finished_at=now, error=error[:ERROR_LIMIT])


def _lease_lost_error(row: Any) -> str:
    if not row.lease_owner:
        return f"LeaseExpired: running with no lease owner on attempt {row.attempt}"
    held = f"worker {row.lease_owner}"
    if row.lease_expires_at is None:
        return f"LeaseExpired: {held} held attempt {row.attempt} with no lease expiry"
    return f"LeaseExpired: {held} lost its lease on attempt {row.attempt}"


def reclaim_row(driver: Driver, row: Any, now: datetime) -> bool:
    """Take back one row read by :func:`unleased_rows`, fenced by the state it was read in.

    The update matches only while the row is still running with the same
    owner (or none) and attempt, and still without a live lease at ``now``.
    Its open attempt, if it has one, is closed as ``lease_expired``.
    """
    exhausted = row.attempts_used >= row.max_attempts
    error = _lease_lost_error(row)
    values: dict[str, Any] = (
        {"status": JobStatus.DEAD_LETTERED, "finished_at": now, "last_error": error}
        if exhausted
        else {"status": JobStatus.PENDING, "run_at": now, "last_error": error}
    )
    if row.cancel_requested_at is not None:  # cancel_job() asked: it does not run again
        values = {"status": JobStatus.CANCELLED, "finished_at": now, "last_error": error}
    owned = (
        Q(lease_owner__isnull=True) if row.lease_owner is None else Q(lease_owner=row.lease_owner)
    )
    fenced = _without_live_lease(driver, now).filter(owned, id=row.id, attempt=row.attempt)
    try:
        with driver.write_transaction():
            # A row another session holds locked (a worker cut off mid-write
            # leaves its transaction open on the server) is passed, not waited for.
            locked = not driver.supports_skip_locked or (
                fenced.select_for_update(skip_locked=True).exists()
            )
            changed = locked and fenced.update(**values, lease_owner=None, lease_expires_at=None)
            if changed:
                _close_attempt(
                    driver, row.id, row.attempt, AttemptOutcome.LEASE_EXPIRED, now, error
                )
    except ROW_ERRORS as exc:
        logger.warning(
            "job #%s: lease could not be taken back, skipped: %s: %s",
            row.id,
            type(exc).__name__,
            exc,
            extra={"event": "job_reclaim_failed", "job_id": row.id},
        )
        return False
    if changed:
        logger.warning(
            "job #%s: %s; %s",
            row.id,
            error,
            "cancelled"
            if row.cancel_requested_at is not None
            else "dead-lettered"
            if exhausted
            else "due again",
            extra={"event": "job_lease_expired", "job_id": row.id, "attempt": row.attempt},
        )
    return bool(changed)


def dead_letter_exhausted(now: datetime, *, using: str | None = None) -> int:
    """Dead-letter pending jobs with no attempt left (rows written by hand, say).

    Where rows are locked one by one, the rows are locked first, passing any a
    claim holds: InnoDB's scan locks each pending row's index entry before the
    row, and the claim's update of a row it holds needs that entry (a deadlock).
    Such a row is claimable, so not exhausted: passing it loses nothing.
    """
    driver = get_driver(using or router.db_for_write(Job))
    with driver.write_transaction():
        rows = Job.objects.using(driver.using).exhausted()
        if driver.supports_skip_locked:
            ids = list(rows.select_for_update(skip_locked=True).values_list("id", flat=True))
            if not ids:
                return 0
            rows = rows.filter(id__in=ids)
        return rows.update(
            status=JobStatus.DEAD_LETTERED,
            finished_at=now,
            last_error="NoAttemptsLeft: pending with no attempt left",
            lease_owner=None,
            lease_expires_at=None,
        )
