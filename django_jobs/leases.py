"""Lease changes after the claim: settle an attempt, take back expired leases.

Every write here is fenced by owner and attempt number: it matches only the
row whose lease is still held by that owner for that attempt. Zero rows
changed means the lease was lost; the result is dropped.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, router
from django.db.models import F, Q
from django.utils import timezone

from .claims import ROW_ERRORS, Claimer, get_claimer
from .models import Attempt, AttemptOutcome, Job, JobStatus
from .text import storable_text

logger = logging.getLogger(__name__)

ERROR_LIMIT = 2000
RECLAIM_BATCH = 100


def error_text(exc: BaseException, limit: int | None = ERROR_LIMIT) -> str:
    """Exception type and message, no stack trace, storable, capped at 2,000 characters."""
    try:
        message = str(exc)
    except Exception:
        message = "<the exception's message could not be read>"
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return storable_text(text)[:limit]


def _fenced(claimer: Claimer, job_id: int, owner: str, attempt: int) -> Any:
    return Job.objects.using(claimer.using).filter(
        id=job_id, lease_owner=owner, attempt=attempt, status=JobStatus.RUNNING
    )


def _close_attempt(
    claimer: Claimer, job_id: int, number: int, outcome: str, now: datetime, error: str = ""
) -> None:
    Attempt.objects.using(claimer.using).filter(
        job_id=job_id, number=number, outcome__isnull=True
    ).update(outcome=outcome, finished_at=now, error=error[:ERROR_LIMIT])


def settle(
    claimer: Claimer,
    job_id: int,
    owner: str,
    attempt: int,
    *,
    outcome: str,
    now: datetime,
    error: str = "",
    retry_at: datetime | None = None,
) -> JobStatus | None:
    """Record how an attempt ended. Returns the job's new status, or None if the lease was lost.

    ``succeeded`` finishes the job. A failure (``failed``, ``timed_out``) makes
    it due again at ``retry_at``, or dead-letters it when ``retry_at`` is None.
    ``released`` hands it back due now and gives its attempt back.
    """
    lease_cleared = {"lease_owner": None, "lease_expires_at": None}
    if outcome == AttemptOutcome.SUCCEEDED:
        status = JobStatus.SUCCEEDED
        values: dict[str, Any] = {"status": status, "finished_at": now, "last_error": ""}
    elif outcome == AttemptOutcome.RELEASED:
        status = JobStatus.PENDING
        values = {"status": status, "run_at": now, "attempts_used": F("attempts_used") - 1}
    elif outcome == AttemptOutcome.CANCELLED:
        status = JobStatus.CANCELLED
        values = {"status": status, "finished_at": now, "last_error": error[:ERROR_LIMIT]}
    elif retry_at is not None:
        status = JobStatus.PENDING
        values = {"status": status, "run_at": retry_at, "last_error": error[:ERROR_LIMIT]}
    else:
        status = JobStatus.DEAD_LETTERED
        values = {"status": status, "finished_at": now, "last_error": error[:ERROR_LIMIT]}
    with claimer.write_transaction():
        changed = _fenced(claimer, job_id, owner, attempt).update(**values, **lease_cleared)
        if changed:
            _close_attempt(claimer, job_id, attempt, outcome, now, error)
    if not changed:
        logger.warning(
            "job #%s attempt %s: lease lost before its outcome (%s) was recorded; dropped",
            job_id,
            attempt,
            outcome,
            extra={"event": "job_lease_lost", "job_id": job_id, "attempt": attempt},
        )
        return None
    return status


def _held_rows(claimer: Claimer, owner: str, held: list[tuple[int, int]]) -> Any:
    """The running rows of ``held`` (job id, attempt) pairs that ``owner`` still holds."""
    fence = Q()
    for job_id, attempt in held:
        fence |= Q(id=job_id, attempt=attempt)
    return Job.objects.using(claimer.using).filter(
        fence, lease_owner=owner, status=JobStatus.RUNNING
    )


def renew_leases(
    claimer: Claimer,
    owner: str,
    held: list[tuple[int, int]],
    now: datetime,
    lease_seconds: float,
    give_up_seconds: float = 0.0,
) -> tuple[set[int], datetime]:
    """Extend the leases of ``held`` (job id, attempt) pairs in one statement.

    Fenced like every lease write, and only while the lease stands more than
    ``give_up_seconds`` (the heartbeat's margin) past ``now``: a lease that
    has lapsed, or reached the point where its worker gives it up, is never
    extended again. Returns the ids whose lease was extended (the others
    were lost) and the new expiry.
    """
    expires = Claimer.lease_end(now, lease_seconds)
    rows = _held_rows(claimer, owner, held).filter(
        lease_expires_at__gt=now + timedelta(seconds=give_up_seconds)
    )
    with claimer.write_transaction():
        changed = rows.update(lease_expires_at=expires)
        if changed == len(held):
            return {job_id for job_id, _ in held}, expires
        renewed = _held_rows(claimer, owner, held).filter(lease_expires_at=expires)
        return set(renewed.values_list("id", flat=True)), expires


def release_leases(
    claimer: Claimer, owner: str, held: list[tuple[int, int]], now: datetime
) -> set[int]:
    """Hand ``held`` jobs back, due now, giving back the attempt each had used.

    One transaction with a fixed number of statements however many jobs are
    held, so a stop during an outage costs one deadline, not one per job.
    Returns the ids handed back.
    """
    error = "Released: the worker stopped before the handler finished"
    with claimer.write_transaction():
        rows = _held_rows(claimer, owner, held)
        ids = set(rows.values_list("id", flat=True))
        if not ids:
            return ids
        Job.objects.using(claimer.using).filter(id__in=ids).update(
            status=JobStatus.PENDING,
            run_at=now,
            attempts_used=F("attempts_used") - 1,
            lease_owner=None,
            lease_expires_at=None,
        )
        attempts = Q()
        for job_id, attempt in held:
            if job_id in ids:
                attempts |= Q(job_id=job_id, number=attempt)
        Attempt.objects.using(claimer.using).filter(attempts, outcome__isnull=True).update(
            outcome=AttemptOutcome.RELEASED, finished_at=now, error=error
        )
    return ids


def reclaim_expired_leases(claimer: Claimer, now: datetime, batch: int = RECLAIM_BATCH) -> int:
    """Take back every running job without a live lease at ``now``.

    That is a lease that expired, or a running row with no expiry or no
    owner (written by hand, say). Each one's open attempt is closed as
    ``lease_expired``; the job is due again at once, or dead-lettered when it
    has no attempt left. A row that cannot be taken back is logged and
    passed: each read asks for as many more rows as were passed, so those
    rows never hide the ones behind them.
    """
    reclaimed = 0
    passed: set[int] = set()
    while True:
        wanted = batch + len(passed)
        read = unleased_rows(claimer, now, wanted)
        rows = [row for row in read if row.id not in passed]
        for row in rows:
            if reclaim_row(claimer, row, now):
                reclaimed += 1
            else:
                passed.add(row.id)
        if not rows or len(read) < wanted:
            return reclaimed


def _without_live_lease(claimer: Claimer, now: datetime) -> Any:
    """Running rows that no lease holds: expired, without an expiry, or without an owner.

    Nobody can renew a lease without an owner, and one without an expiry
    never ends: both are as good as lapsed.
    """
    no_live_lease = (
        Q(lease_expires_at__lt=now)
        | Q(lease_expires_at__isnull=True)
        | Q(lease_owner__isnull=True)
        | Q(lease_owner="")
    )
    return Job.objects.using(claimer.using).filter(no_live_lease, status=JobStatus.RUNNING)


UNLEASED_FIELDS = (
    "id",
    "lease_owner",
    "lease_expires_at",
    "attempt",
    "attempts_used",
    "max_attempts",
)


def unleased_rows(claimer: Claimer, now: datetime, limit: int) -> list[Any]:
    """Up to ``limit`` running rows without a live lease, with the fields of ``UNLEASED_FIELDS``."""
    return list(unleased_read(claimer, now, limit))


def unleased_read(claimer: Claimer, now: datetime, limit: int) -> Any:
    """The read behind :func:`unleased_rows`.

    In no set order: ordering by id would lead SQLite's planner to walk the
    whole table, where the status alone finds the few running rows.
    """
    return (
        _without_live_lease(claimer, now)
        .order_by()
        .values_list(*UNLEASED_FIELDS, named=True)[:limit]
    )


def _lease_lost_error(row: Any) -> str:
    if not row.lease_owner:
        return f"LeaseExpired: running with no lease owner on attempt {row.attempt}"
    held = f"worker {row.lease_owner}"
    if row.lease_expires_at is None:
        return f"LeaseExpired: {held} held attempt {row.attempt} with no lease expiry"
    return f"LeaseExpired: {held} lost its lease on attempt {row.attempt}"


def reclaim_row(claimer: Claimer, row: Any, now: datetime) -> bool:
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
    owned = (
        Q(lease_owner__isnull=True) if row.lease_owner is None else Q(lease_owner=row.lease_owner)
    )
    fenced = _without_live_lease(claimer, now).filter(owned, id=row.id, attempt=row.attempt)
    try:
        with claimer.write_transaction():
            # A row another session holds locked (a worker cut off mid-write
            # leaves its transaction open on the server) is passed, not waited for.
            locked = not claimer.connection.features.has_select_for_update_skip_locked or (
                fenced.select_for_update(skip_locked=True).exists()
            )
            changed = locked and fenced.update(**values, lease_owner=None, lease_expires_at=None)
            if changed:
                _close_attempt(
                    claimer, row.id, row.attempt, AttemptOutcome.LEASE_EXPIRED, now, error
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
            "dead-lettered" if exhausted else "due again",
            extra={"event": "job_lease_expired", "job_id": row.id, "attempt": row.attempt},
        )
    return bool(changed)


def dead_letter_exhausted(claimer: Claimer, now: datetime) -> int:
    """Dead-letter pending jobs with no attempt left (rows written by hand, say)."""
    with claimer.write_transaction():
        return (
            Job.objects.using(claimer.using)
            .filter(status=JobStatus.PENDING, attempts_used__gte=F("max_attempts"))
            .update(
                status=JobStatus.DEAD_LETTERED,
                finished_at=now,
                last_error="NoAttemptsLeft: pending with no attempt left",
                lease_owner=None,
                lease_expires_at=None,
            )
        )


def retry_job(job_id: int, *, now: datetime | None = None, using: str | None = None) -> bool:
    """Put a dead-lettered job back in the queue, due now, with a fresh budget of attempts.

    Returns False when the job is not dead-lettered (already retried, say).
    """
    claimer = get_claimer(using or router.db_for_write(Job))
    try:
        with claimer.write_transaction():
            changed = (
                Job.objects.using(claimer.using)
                .filter(id=job_id, status=JobStatus.DEAD_LETTERED)
                .update(
                    status=JobStatus.PENDING,
                    run_at=now or timezone.now(),
                    attempts_used=0,
                    finished_at=None,
                    lease_owner=None,
                    lease_expires_at=None,
                )
            )
    except IntegrityError:
        logger.warning(
            "job #%s not retried: a live job with the same unique_key exists",
            job_id,
            extra={"event": "job_retry_refused", "job_id": job_id},
        )
        return False
    if changed:
        logger.info("job #%s retried", job_id, extra={"event": "job_retried", "job_id": job_id})
    return bool(changed)
