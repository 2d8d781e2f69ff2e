"""The cleaner: deletes finished jobs, with their attempts, once their retention has passed.

``DJANGO_JOBS["RETENTION"]`` says how long each finished status is kept
after ``finished_at``; ``None`` keeps it forever. Pending and running jobs
are never touched. The work is cut into batches so that it never holds a
long lock nor an unbounded transaction: each batch is one short transaction
that picks up to ``batch`` expired ids through the finished index (on
PostgreSQL ``FOR UPDATE SKIP LOCKED``, so it never waits for a row another
session holds), deletes their attempts, then the jobs. Off the hot path:
ORM code, on the maintenance interval, but for the deletes: the
driver's (on PostgreSQL the whole batch is one statement), unless
Django's cascade is asked for (:func:`cascades`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any

from django.db.models import DO_NOTHING, Exists, F, Lookup, OuterRef
from django.db.models.deletion import Collector, get_candidate_relations_to_delete
from django.db.models.signals import post_delete, pre_delete

from ..conf import settings
from ..db import Driver, get_driver
from ..db.records import Cascade
from ..models import FINISHED_STATUSES, Batch, Job, JobStatus

logger = logging.getLogger(__name__)

PRUNE_BATCH = 1000
# The earliest time there is: the cut-off of a retention that reaches before it.
EARLIEST = datetime.min.replace(tzinfo=dt_timezone.utc)
FINISHED_INDEX = "django_jobs_finished_idx"


def _index_statuses(name: str) -> tuple[str, ...]:
    """The statuses in the condition of ``Job``'s partial index ``name``, in its order."""
    [index] = [index for index in Job._meta.indexes if index.name == name]
    assert index.condition is not None
    [(lookup, statuses)] = index.condition.children
    assert lookup == "status__in"
    return tuple(str(status) for status in statuses)


class InFinishedIndex(Lookup):
    """The condition of ``django_jobs_finished_idx``, written out as the index has it.

    SQLite uses a partial index only when the query repeats the index's
    condition term for term, with literals: ``status = 'succeeded'`` alone,
    let alone ``status = ?``, scans the whole table. The statuses come from
    the index's definition, never from input. A lookup, so that every Django
    version puts it in the WHERE clause as it is (not as ``... = true``).
    """

    lookup_name = "in_finished_index"

    def __init__(self) -> None:
        super().__init__(F("status"), None)

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, tuple[str | int, ...]]:
        column, params = compiler.compile(self.lhs)
        statuses = ", ".join(f"'{status}'" for status in _index_statuses(FINISHED_INDEX))
        return f"{column} IN ({statuses})", tuple(params)


def prune_finished(
    now: datetime, *, using: str, batch: int = PRUNE_BATCH, max_batches: int | None = None
) -> int:
    """Delete the finished jobs whose retention ended before ``now``; return how many.

    Works status by status, oldest first, ``batch`` jobs per transaction, and
    stops after ``max_batches`` batches (None: when nothing expired is left),
    so that one call's time is bounded: the rest waits for the next call.
    On SQLite, where every write takes the one write lock, the cleaner rests
    after each full batch as long as the batch held the lock, so that the
    claims and settles waiting for it get their turn.
    """
    _require_positive_int("batch", batch)
    if max_batches is not None:
        _require_positive_int("max_batches", max_batches)
    driver = get_driver(using)
    budget = max_batches
    deleted = 0
    for status, kept in expiring_statuses(settings.RETENTION):
        removed, used = prune_status(driver, status, cutoff_for(now, kept), batch, budget)
        deleted += removed
        budget = None if budget is None else budget - used
        if budget == 0:
            break
    if deleted:
        logger.info(
            "%s finished job(s) past their retention deleted",
            deleted,
            extra={"event": "jobs_pruned", "count": deleted},
        )
    if budget != 0:
        prune_batches(driver, now, batch)
    return deleted


def prune_batches(driver: Driver, now: datetime, batch: int = PRUNE_BATCH) -> int:
    """Delete up to ``batch`` finished batches none of whose jobs is left, finished before
    the longest retention of a finished status (none, while a status is kept forever)."""
    kept = [kept for _, kept in expiring_statuses(settings.RETENTION)]
    if len(kept) < len(FINISHED_STATUSES):
        return 0
    batches = Batch.objects.using(driver.using)
    members = Job.objects.using(driver.using).filter(batch=OuterRef("pk"))
    done = batches.filter(finished_at__lt=cutoff_for(now, max(kept))).exclude(Exists(members))
    ids = list(done.order_by("finished_at").values_list("id", flat=True)[:batch])
    if not ids:
        return 0
    with driver.write_transaction():
        deleted, _ = batches.filter(id__in=ids).exclude(Exists(members)).delete()
    return deleted


def prune_status(
    driver: Driver,
    status: JobStatus,
    cutoff: datetime,
    batch: int = PRUNE_BATCH,
    max_batches: int | None = None,
) -> tuple[int, int]:
    """Delete ``status`` jobs finished before ``cutoff``, ``batch`` a transaction, until
    none is left or ``max_batches`` were used: (jobs deleted, batches used).

    On SQLite, where every batch takes the one write lock, it rests after each
    full batch as long as the batch held it, so that the claims and settles
    waiting for the lock get their turn.
    """
    shares_one_lock = not driver.supports_skip_locked
    deleted = used = 0
    while max_batches is None or used < max_batches:
        began = time.monotonic()
        picked, removed = prune_batch(driver, status, cutoff, batch)
        deleted += removed
        used += 1
        if picked < batch:
            break
        if shares_one_lock and used != max_batches:
            time.sleep(time.monotonic() - began)
    return deleted, used


def cutoff_for(now: datetime, kept: timedelta) -> datetime:
    """``now - kept``, or the earliest time there is when that is before it."""
    try:
        return now - kept
    except OverflowError:
        return EARLIEST


def _require_positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def expiring_statuses(retention: dict[str, timedelta | None]) -> list[tuple[JobStatus, timedelta]]:
    """The finished statuses with a retention, each with it (``None`` keeps forever)."""
    return [
        (status, kept)
        for status in FINISHED_STATUSES
        if (kept := retention.get(status.value)) is not None
    ]


def expired_ids(driver: Driver, status: JobStatus, cutoff: datetime, batch: int) -> Any:
    """Up to ``batch`` ids of ``status`` jobs finished before ``cutoff``, oldest first.

    The status and ``finished_at`` range is what the partial index
    ``django_jobs_finished_idx`` holds, in its order: a seek, no sort. A plain
    read: see :func:`locked`.
    """
    rows = Job.objects.using(driver.using).filter(
        InFinishedIndex(), status=status, finished_at__lt=cutoff
    )
    return rows.order_by("finished_at").values_list("id", flat=True)[:batch]


def locked(driver: Driver, ids: list[int], status: JobStatus, cutoff: datetime) -> list[int]:
    """Of ``ids``, those still expired whose rows this transaction could lock, passing the
    ones another session holds. Locked by their ids, after a plain read found them: where
    the planner scans the table (InnoDB on a small one), a locking read of the expired rows
    locks, for a moment, every row it passes, due jobs too, and a claim's ``SKIP LOCKED``
    read in that moment passes them."""
    rows = Job.objects.using(driver.using).filter(pk__in=ids, status=status, finished_at__lt=cutoff)
    return list(rows.select_for_update(skip_locked=True).values_list("id", flat=True))


def cascades(using: str) -> list[Cascade] | None:
    """What deleting jobs deletes with them, where the database may do it in the jobs'
    statement: each table whose rows refer to jobs ``on_delete=CASCADE`` and which Django
    itself would delete in one query (no rows of its own cascade from them, no receiver of
    their delete signals). None where Django's cascade must do it: a receiver of a job's
    ``pre_delete`` or ``post_delete``, or a relation it must follow row by row (a project's
    model referring to jobs with ``SET_NULL``, say). Read at each batch: a receiver may be
    connected at any time."""
    if pre_delete.has_listeners(Job) or post_delete.has_listeners(Job):
        return None
    collector: Any = Collector(using)  # its stubs take no model class, as it does
    meta: Any = Job._meta
    tables: dict[str, list[str]] = {}
    relations: list[Any] = list(get_candidate_relations_to_delete(meta))
    for related in relations:
        field, model = related.field, related.related_model
        if field.remote_field.on_delete is DO_NOTHING:
            continue
        if not collector.can_fast_delete(model, from_field=field):
            return None
        tables.setdefault(model._meta.db_table, []).append(field.column)
    return [Cascade(table, tuple(columns)) for table, columns in tables.items()]


def prune_batch(driver: Driver, status: JobStatus, cutoff: datetime, batch: int) -> tuple[int, int]:
    """Delete one batch, in one transaction: (ids picked, jobs deleted).

    Nothing can change the picked rows before they are deleted: PostgreSQL and
    MariaDB hold their row locks, SQLite's write transaction the database's lock.
    On PostgreSQL the batch is one statement (:meth:`~django_jobs.db.base.Driver.
    delete_expired`), elsewhere a delete a table after the pick
    (:meth:`~django_jobs.db.base.Driver.delete_jobs`), unless Django's cascade must delete
    it (:func:`cascades`).
    """
    tables = cascades(driver.using)
    if driver.deletes_in_one_statement and tables is not None:
        return driver.delete_expired(expired_ids(driver, status, cutoff, batch), tables)
    with driver.write_transaction():
        ids = list(expired_ids(driver, status, cutoff, batch))
        if ids and driver.supports_skip_locked:
            ids = locked(driver, ids, status, cutoff)
        if not ids:
            return 0, 0
        if tables is not None:
            return len(ids), driver.delete_jobs(ids, tables)
        # The cascade deletes the attempts first, then the jobs.
        _, counts = Job.objects.using(driver.using).filter(pk__in=ids).only("pk").delete()
    return len(ids), counts.get(Job._meta.label, 0)


# -- pruning now: ``jobs prune`` and its dry run -------------------------------------


@dataclass(frozen=True)
class StatusPruned:
    """What pruning did (or, in a dry run, would do) to one finished status."""

    status: str
    kept: timedelta | None  # None: kept forever, so nothing goes
    cutoff: datetime | None  # jobs finished before it go
    count: int


def prune_statuses(
    now: datetime,
    *,
    using: str,
    retention: Mapping[str, timedelta | None],
    statuses: Iterable[str] | None = None,
    older_than: timedelta | None = None,
    dry_run: bool = False,
    batch: int = PRUNE_BATCH,
) -> list[StatusPruned]:
    """Delete (or count) the expired jobs of each finished status, in the statuses' order.

    ``older_than`` replaces the retention of every status pruned, those kept
    forever included; ``statuses`` limits the run to those named.
    """
    chosen = set(statuses) if statuses is not None else None
    driver = get_driver(using)
    results = []
    for status in FINISHED_STATUSES:
        if chosen is not None and status.value not in chosen:
            continue
        kept = older_than or retention.get(status.value)
        if kept is None:
            results.append(StatusPruned(status.value, None, None, 0))
            continue
        cutoff = cutoff_for(now, kept)
        count = (
            count_expired(driver, status, cutoff)
            if dry_run
            else prune_status(driver, status, cutoff, batch)[0]
        )
        results.append(StatusPruned(status.value, kept, cutoff, count))
    return results


def count_expired(driver: Driver, status: JobStatus, cutoff: datetime) -> int:
    """How many ``status`` jobs finished before ``cutoff``: the rows a prune would delete."""
    return (
        Job.objects.using(driver.using)
        .filter(InFinishedIndex(), status=status, finished_at__lt=cutoff)
        .count()
    )
