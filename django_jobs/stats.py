"""The counts the dashboard and ``jobs status`` share: per queue, and the live workers.

Each count is one grouped query whose condition is an index's partial condition, so
live counts read only the small live indexes, however many finished rows pile up.
Finished counts are exact: they read every finished row of the table once (see
``docs/operations.md`` for what that costs at a million rows).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import router
from django.db.models import Count, Min, Q
from django.utils import timezone

from .conf import settings
from .models import FINISHED_STATUSES, Job, JobStatus, Worker


@dataclass
class QueueStats:
    """One queue's jobs by status; pending split by when it can next run."""

    queue: str
    due: int = 0  # pending, run_at reached: a free worker takes it now
    scheduled: int = 0  # pending, run_at in the future, no attempt used yet
    retrying: int = 0  # pending, run_at in the future, waiting out a backoff
    running: int = 0
    succeeded: int = 0
    dead_lettered: int = 0
    cancelled: int = 0
    oldest_due_at: datetime | None = None
    served: bool = False  # a live worker serves this queue

    @property
    def pending(self) -> int:
        return self.due + self.scheduled + self.retrying

    def oldest_due_age(self, now: datetime) -> timedelta | None:
        """How long the oldest due job has waited past its run_at."""
        return None if self.oldest_due_at is None else max(now - self.oldest_due_at, timedelta())


@dataclass
class LiveWorker:
    """A ``runjobs`` process whose heartbeat is younger than a lease."""

    id: str
    host: str
    pid: int
    queues: list[str]
    started_at: datetime
    last_heartbeat_at: datetime
    running: int = 0
    running_job_ids: list[int] = field(default_factory=list)


#: Beats a heartbeat may miss before its worker is flagged stale.
LATE_BEATS = 2


def heartbeat_is_stale(last_heartbeat_at: datetime, now: datetime) -> bool:
    """True once a worker has missed more than ``LATE_BEATS`` heartbeats.

    Its jobs are still leased to it until their leases expire; the flag tells an
    operator to look before the rescuer takes them back.
    """
    late = timedelta(seconds=LATE_BEATS * settings.heartbeat_seconds())
    return now - last_heartbeat_at > late


def resolve(using: str | None, now: datetime | None) -> tuple[str, datetime]:
    return using or router.db_for_read(Job), now or timezone.now()


def queue_stats(
    using: str | None = None,
    *,
    now: datetime | None = None,
    workers: Iterable[LiveWorker] | None = None,
) -> list[QueueStats]:
    """Per queue (the configured ones, and any other that has jobs), sorted by name.

    ``workers`` (else ``live_workers()``) tell which queues are served.
    """
    using, now = resolve(using, now)
    by_queue: dict[str, QueueStats] = {name: QueueStats(name) for name in settings.QUEUES}

    def stats_for(queue: str) -> QueueStats:
        return by_queue.setdefault(queue, QueueStats(queue))

    jobs = Job.objects.using(using).order_by()
    # The claim index's condition: pending rows only.
    future = Q(run_at__gt=now)
    pending = (
        jobs.filter(status=JobStatus.PENDING)
        .values("queue")
        .annotate(
            due=Count("id", filter=Q(run_at__lte=now)),
            scheduled=Count("id", filter=future & Q(attempts_used=0)),
            retrying=Count("id", filter=future & Q(attempts_used__gt=0)),
            oldest_due_at=Min("run_at", filter=Q(run_at__lte=now)),
        )
    )
    for row in pending:
        stats = stats_for(row["queue"])
        stats.due, stats.scheduled, stats.retrying = row["due"], row["scheduled"], row["retrying"]
        stats.oldest_due_at = row["oldest_due_at"]
    # The lease index's condition: running rows only.
    running = jobs.filter(status=JobStatus.RUNNING).values("queue").annotate(count=Count("id"))
    for counted in running:
        stats_for(counted["queue"]).running = counted["count"]
    # The finished index's condition.
    finished = (
        jobs.filter(status__in=FINISHED_STATUSES).values("queue", "status").annotate(n=Count("id"))
    )
    for by_status in finished:
        setattr(stats_for(by_status["queue"]), by_status["status"], by_status["n"])
    if workers is None:
        workers = live_workers(using, now)
    served = {queue for worker in workers for queue in worker.queues}
    for stats in by_queue.values():
        stats.served = stats.queue in served
    return [by_queue[name] for name in sorted(by_queue)]


def live_workers(
    using: str | None = None, now: datetime | None = None, lease_seconds: float | None = None
) -> list[LiveWorker]:
    """Registered workers whose last heartbeat is younger than a lease, with their jobs."""
    using, now = resolve(using, now)
    lease = float(settings.LEASE_SECONDS if lease_seconds is None else lease_seconds)
    rows = Worker.objects.using(using).filter(last_heartbeat_at__gte=now - timedelta(seconds=lease))
    workers = [
        LiveWorker(
            id=row.id,
            host=row.host,
            pid=row.pid,
            queues=list(row.queues or []),
            started_at=row.started_at,
            last_heartbeat_at=row.last_heartbeat_at,
        )
        for row in rows
    ]
    attach_running_jobs(workers, using)
    return workers


def attach_running_jobs(workers: Iterable[LiveWorker], using: str) -> None:
    by_id = {worker.id: worker for worker in workers}
    if not by_id:
        return
    held = (
        Job.objects.using(using)
        .filter(status=JobStatus.RUNNING, lease_owner__in=by_id)
        .order_by("id")
        .values_list("lease_owner", "id", named=True)
    )
    for row in held:
        worker = by_id[str(row.lease_owner)]
        worker.running += 1
        worker.running_job_ids.append(row.id)
