"""The rescuer: takes back the jobs of workers that stopped renewing their leases.

A running job whose lease expired (its worker was killed, or cut off from
the database) ends as :func:`~django_jobs.outcomes.lapsed` decides: due again
at once, dead-lettered when it has no attempt left, cancelled when a cancel was
requested; its open attempt is closed as ``lease_expired``. Every write is
fenced by the state the row was read in, and reported by
:mod:`django_jobs.events` once it has committed. Off the hot path: ORM code, on
the maintenance interval.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db import router
from django.db.models import Q

from ..db import ROW_ERRORS, Driver, get_driver
from ..db.records import ExhaustedRow, Settlement, UnleasedRow
from ..db.workflows import Followed
from ..events import report_exhausted, report_followed, report_lapsed, report_lease
from ..models import FINISHED_STATUSES, Attempt, Job
from ..outcomes import error_text, exhausted, lapsed

RECLAIM_BATCH = 100
#: Pending jobs with no attempt left that one maintenance pass dead-letters (and reports).
EXHAUSTED_BATCH = 1000


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
        taken = reclaim_rows(driver, rows, now) if rows else set()
        if taken is None:  # the database refused the batch: one row at a time, passing the bad
            taken = {row.id for row in rows if reclaim_row(driver, row, now)}
        reclaimed += len(taken)
        passed.update(row.id for row in rows if row.id not in taken)
        if not rows or len(read) < wanted:
            return reclaimed


def _without_live_lease(driver: Driver, now: datetime) -> Any:
    """Running rows that no lease holds (``Job.objects.unleased``)."""
    return Job.objects.using(driver.using).unleased(now)


def unleased_rows(driver: Driver, now: datetime, limit: int) -> list[UnleasedRow]:
    """Up to ``limit`` running rows without a live lease."""
    return [UnleasedRow(*row) for row in unleased_read(driver, now, limit)]


def unleased_read(driver: Driver, now: datetime, limit: int) -> Any:
    """The read behind :func:`unleased_rows`.

    In no set order: ordering by id would lead SQLite's planner to walk the
    whole table, where the status alone finds the few running rows.
    """
    return _without_live_lease(driver, now).order_by().values_list(*UnleasedRow._fields)[:limit]


def _close_attempt(driver: Driver, settled: Settlement) -> None:
    Attempt.objects.using(driver.using).filter(
        job_id=settled.job_id, number=settled.attempt, outcome__isnull=True
    ).update(**_attempt_columns(settled))


def _job_columns(settled: Settlement) -> dict[str, Any]:
    """The job's columns ``settled`` writes (None keeps a column), its lease cleared."""
    kept = {"run_at": settled.run_at, "finished_at": settled.finished_at}
    return {
        "status": settled.status,
        "last_error": settled.last_error,
        **{column: value for column, value in kept.items() if value is not None},
        "lease_owner": None,
        "lease_expires_at": None,
    }


def reclaim_rows(driver: Driver, rows: list[UnleasedRow], now: datetime) -> set[int] | None:
    """Take back ``rows`` (read by :func:`unleased_rows`) in one transaction: the ids taken
    back, or None when the database refused the batch's writes (a bad row, say; the caller
    then goes one row at a time, :func:`reclaim_row`).

    The rows still without a live lease are locked and read again, passing any another
    session holds; each one's end is decided from the state read under its lock, so no
    renewal or settle can come between the decision and the write. The writes go in one
    UPDATE per set of columns (the rows of one lost worker's attempts share them), and the
    attempts are closed likewise: a dead worker's jobs come back in a handful of statements
    however many it held, well within the maintenance pass's deadline on a busy server.
    """
    try:
        with driver.write_transaction():
            held = _without_live_lease(driver, now).filter(id__in=[row.id for row in rows])
            if driver.supports_skip_locked:
                held = held.select_for_update(skip_locked=True)
            locked = [UnleasedRow(*row) for row in held.values_list(*UnleasedRow._fields)]
            ends = [(row, lapsed(row, now)) for row in locked]
            for columns, ids in _grouped(ends, _job_columns):
                Job.objects.using(driver.using).filter(id__in=ids).update(**columns)
            for columns, pairs in _grouped(ends, _attempt_columns, key=lambda s: s.pair):
                which = Q()
                for job_id, number in pairs:
                    which |= Q(job_id=job_id, number=number)
                Attempt.objects.using(driver.using).filter(which, outcome__isnull=True).update(
                    **columns
                )
            followed = _follow(driver, ends, now)
    except ROW_ERRORS:
        return None
    _report(driver, ends, followed)
    return {row.id for row in locked}


def _follow(
    driver: Driver, ends: list[tuple[UnleasedRow, Settlement]], now: datetime
) -> Followed | None:
    """Inside the transaction that wrote ``ends``: the workflow steps that follow from the
    jobs they finished (:meth:`~django_jobs.db.workflows.Workflows.ended`), or None."""
    in_workflows = [
        row.id
        for row, settled in ends
        if row.workflow_pending is not None and settled.status in FINISHED_STATUSES
    ]
    return driver.workflows.ended(in_workflows, now) if in_workflows else None


def _report(
    driver: Driver, ends: list[tuple[UnleasedRow, Settlement]], followed: Followed | None
) -> None:
    """Once the transaction that wrote ``ends`` has committed: each end, and what followed."""
    for row, settled in ends:
        report_lapsed(row, settled)
    if followed:
        report_followed(followed, driver.using)


def _attempt_columns(settled: Settlement) -> dict[str, Any]:
    """The attempt row's columns ``settled`` closes it with."""
    return {"outcome": settled.outcome, "finished_at": settled.ended_at, "error": settled.error}


def _grouped(
    ends: list[tuple[UnleasedRow, Settlement]],
    columns: Callable[[Settlement], dict[str, Any]],
    key: Callable[[Settlement], Any] = lambda settled: settled.job_id,
) -> list[tuple[dict[str, Any], list[Any]]]:
    """The ``columns`` of each end, with the ``key`` of every end that writes the same."""
    groups: dict[tuple[tuple[str, Any], ...], list[Any]] = {}
    for _, settled in ends:
        groups.setdefault(tuple(columns(settled).items()), []).append(key(settled))
    return [(dict(written), keys) for written, keys in groups.items()]


def reclaim_row(driver: Driver, row: UnleasedRow, now: datetime) -> bool:
    """Take back one row read by :func:`unleased_rows`, fenced by the state it was read in.

    The update matches only while the row is still running with the same
    owner (or none) and attempt, and still without a live lease at ``now``.
    It writes what :func:`~django_jobs.outcomes.lapsed` decides; its open
    attempt, if it has one, is closed as ``lease_expired``. Once that has
    committed, the end is reported (:func:`~django_jobs.events.report_lapsed`).
    """
    settled = lapsed(row, now)
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
            changed = locked and fenced.update(**_job_columns(settled))
            ends = [(row, settled)] if changed else []
            if changed:
                _close_attempt(driver, settled)
            followed = _follow(driver, ends, now)
    except ROW_ERRORS as exc:
        report_lease("job_reclaim_failed", row.id, row.attempt, error=error_text(exc))
        return False
    _report(driver, ends, followed)
    return bool(changed)


#: How long an ended job's workflow steps are left to the worker that ended it before the
#: leader takes them (it takes them in milliseconds; a crash leaves them for good).
UNFOLLOWED_SECONDS = 2.0


def follow_unfollowed(now: datetime, *, using: str | None = None) -> int:
    """Take the workflow steps of ends a crash left untaken (a worker killed between a
    job's end and its steps): its dependents released or cancelled, its batch counted and
    finished. How many jobs' steps were taken."""
    driver = get_driver(using or router.db_for_write(Job))
    followed, taken = driver.workflows.repair(now, UNFOLLOWED_SECONDS)
    report_followed(followed, driver.using)
    return taken


def dead_letter_exhausted(
    now: datetime, *, using: str | None = None, batch: int = EXHAUSTED_BATCH
) -> int:
    """Dead-letter up to ``batch`` pending jobs with no attempt left (rows written by hand,
    say), and report each once that has committed; the next pass takes the rest.

    Where rows are locked one by one, the rows are locked first, passing any a
    claim holds: InnoDB's scan locks each pending row's index entry before the
    row, and the claim's update of a row it holds needs that entry (a deadlock).
    Such a row is claimable, so not exhausted: passing it loses nothing.
    """
    driver = get_driver(using or router.db_for_write(Job))
    columns = exhausted(now)
    with driver.write_transaction():
        rows = Job.objects.using(driver.using).exhausted()
        read = rows.select_for_update(skip_locked=True) if driver.supports_skip_locked else rows
        found = [ExhaustedRow(*row) for row in read.values_list(*ExhaustedRow._fields)[:batch]]
        if not found:
            return 0
        dead_lettered = rows.filter(id__in=[row.id for row in found]).update(**columns)
        followed = driver.workflows.ended([row.id for row in found], now)
    for row in found:
        report_exhausted(row, str(columns["last_error"]))
    report_followed(followed, driver.using)
    return dead_lettered
