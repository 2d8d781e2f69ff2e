"""The counts the dashboard and ``jobs status`` share: per queue, the workers, the last hour,
and the due jobs that wait for a worker that knows their name.

Each count is one grouped query whose condition is an index's partial condition, so
live counts read only the small live indexes, however many finished rows pile up.
Finished counts are exact by default: they read every finished row of the table once.
``overview(estimate_finished=True)`` (the admin) replaces them on PostgreSQL, once the
table holds more than ``EXACT_FINISHED_UP_TO`` finished rows, by the planner's row
estimates, read from one ``EXPLAIN`` (see ``docs/operations.md``).
"""

from __future__ import annotations

import json
import operator
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import reduce
from typing import Any, NamedTuple

from django.db import router
from django.db.models import Count, Min, Q
from django.db.models.functions import TruncMinute
from django.utils import timezone
from django.utils.translation import gettext, gettext_lazy

from .conf import settings
from .db import driver_class
from .db.records import QueueLimits
from .models import (
    FINISHED_STATUSES,
    Attempt,
    AttemptOutcome,
    Job,
    JobQuerySet,
    JobStatus,
    Leader,
    Queue,
    WorkerProcess,
)
from .registry import queue_limits


@dataclass
class QueueStats:
    """One queue's jobs by status; pending split by when it can next run."""

    queue: str
    waiting: int = 0  # waiting for the jobs they depend on (workflows)
    due: int = 0  # pending, run_at reached: a free worker takes it now
    scheduled: int = 0  # pending, run_at in the future, no attempt used yet
    retrying: int = 0  # pending, run_at in the future, waiting out a backoff
    running: int = 0
    succeeded: int = 0
    dead_lettered: int = 0
    cancelled: int = 0
    oldest_due_at: datetime | None = None
    served: bool = False  # a live worker serves this queue
    paused_at: datetime | None = None  # pause_queue(): none of its jobs start until resumed
    limits: QueueLimits | None = None  # what limits its claims (registry.queue_limits)
    slots_in_use: int = 0  # running under a live lease: what its limits count

    @property
    def pending(self) -> int:
        return self.due + self.scheduled + self.retrying

    @property
    def unserved(self) -> bool:
        """Jobs are due and no live worker serves the queue: they wait for nobody."""
        return self.due > 0 and not self.served

    def oldest_due_age(self, now: datetime) -> timedelta | None:
        """How long the oldest due job has waited past its run_at."""
        return None if self.oldest_due_at is None else max(now - self.oldest_due_at, timedelta())


@dataclass
class LiveWorker:
    """A registered ``runjobs`` process (``live_workers()``: heartbeat younger than a lease)."""

    id: str
    host: str
    pid: int
    queues: list[str]
    started_at: datetime
    last_heartbeat_at: datetime
    running: int = 0
    running_job_ids: list[int] = field(default_factory=list)
    supervisor: str | None = None  # runjobs --processes: the supervisor's id, for its children
    process_count: int = 0  # a supervisor's: how many children it runs; it serves no queue itself
    leads: bool = False  # it holds the leader lease: it runs the rescuer, scheduler and pruning
    names: list[str] | None = None  # the job names it claims; None: every name (an older worker)


@dataclass
class WaitingName:
    """Due jobs of one name and queue that no live worker of the queue knows how to run (a
    rolling deploy under way, or a name nobody registers): they stay pending, no attempt
    used, until a worker that knows the name serves the queue."""

    queue: str
    name: str
    count: int
    oldest_due_at: datetime

    def age(self, now: datetime) -> timedelta:
        """How long the oldest of them has waited past its run_at."""
        return max(now - self.oldest_due_at, timedelta())


@dataclass
class LeaderInfo:
    """The leader lease as it holds at ``now`` (``current_leader()``): who leads, since when."""

    owner: str  # the leading worker process's id (a child's, under runjobs --processes)
    epoch: int  # how many times the lease has passed to a new leader
    elected_at: datetime | None  # when this leader took the lease
    expires_at: datetime  # when the lease lapses unless renewed


@dataclass
class Minute:
    """One minute of the chart: attempts that ended in it, succeeded and failed."""

    start: datetime
    finished: int = 0
    failed: int = 0


@dataclass
class Overview:
    """What the admin's dashboard and index summary show, read at ``now``."""

    now: datetime
    queues: list[QueueStats]
    workers: list[LiveWorker]  # registered, heartbeat fresh: they serve their queues
    stale_workers: list[LiveWorker]  # registered, more than LATE_BEATS beats missed
    finished_estimated: bool  # succeeded, dead_lettered, cancelled are estimates
    throughput: dict[str, list[Minute]] = field(default_factory=dict)  # by queue
    leader: LeaderInfo | None = None  # the leader lease, if one holds at ``now``
    #: Due jobs whose name no fresh worker of their queue knows (``waiting_for_names()``).
    waiting: list[WaitingName] = field(default_factory=list)

    @property
    def unserved_queues(self) -> list[QueueStats]:
        return [stats for stats in self.queues if stats.unserved]

    @property
    def paused_queues(self) -> list[QueueStats]:
        return [stats for stats in self.queues if stats.paused_at is not None]

    @property
    def leaderless(self) -> bool:
        """Workers are live and none leads: nobody takes back expired leases, fires the
        recurring schedules or prunes until one takes the lease."""
        return self.leader is None and bool(self.workers)


#: Beats a heartbeat may miss before its worker is flagged stale.
LATE_BEATS = 2
#: Up to this many finished rows (the planner's estimate) ``overview()`` counts them exactly.
EXACT_FINISHED_UP_TO = 100_000
#: The chart's span, in one-minute buckets.
CHART_MINUTES = 60
#: The attempt outcomes the chart counts as failed (each failed attempt, retried or not).
FAILED_OUTCOMES = (AttemptOutcome.FAILED, AttemptOutcome.TIMED_OUT, AttemptOutcome.LEASE_EXPIRED)


def heartbeat_is_stale(last_heartbeat_at: datetime, now: datetime) -> bool:
    """True once a worker has missed more than ``LATE_BEATS`` heartbeats.

    Its jobs are still leased to it until their leases expire; the flag tells an
    operator to look before the rescuer takes them back.
    """
    late = timedelta(seconds=LATE_BEATS * settings.heartbeat_seconds())
    return now - last_heartbeat_at > late


#: A rate limit in words, by its window's seconds.
RATE_WORDS = {
    1: gettext_lazy("%(jobs)s per second"),
    60: gettext_lazy("%(jobs)s per minute"),
    3600: gettext_lazy("%(jobs)s per hour"),
}


def limits_in_words(limits: QueueLimits | None) -> str:
    """``global limit 2, 100 per minute, per key``: what limits a queue's claims, as the
    admin and ``jobs status`` say it; empty when nothing does."""
    if limits is None:
        return ""
    words = []
    if limits.global_limit is not None:
        words.append(gettext("global limit %(limit)s") % {"limit": limits.global_limit})
    if limits.rate is not None:
        jobs, seconds = limits.rate
        rate = RATE_WORDS.get(seconds, gettext_lazy("%(jobs)s per %(seconds)s seconds"))
        words.append(str(rate) % {"jobs": jobs, "seconds": seconds})
    if limits.keyed:
        words.append(gettext("per key"))
    return ", ".join(words)


def resolve(using: str | None, now: datetime | None) -> tuple[str, datetime]:
    return using or router.db_for_read(Job), now or timezone.now()


def queue_stats(
    using: str | None = None,
    *,
    now: datetime | None = None,
    workers: Iterable[LiveWorker] | None = None,
) -> list[QueueStats]:
    """Per queue (the configured ones, any other that has jobs, and the paused ones), sorted
    by name.

    ``workers`` (else ``live_workers()``) tell which queues are served. Exact counts.
    """
    using, now = resolve(using, now)
    if workers is None:
        workers = live_workers(using, now)
    return count_queues(using, now, workers, estimate_finished=False)[0]


def overview(
    using: str | None = None,
    *,
    now: datetime | None = None,
    estimate_finished: bool = True,
    chart: bool = True,
    finished: bool = True,
) -> Overview:
    """Queues, workers fresh and stale, the leader, and (``chart``) the last hour, in a fixed
    number of queries.

    A queue counts as served only by a worker whose heartbeat is not stale.
    """
    using, now = resolve(using, now)
    fresh, stale, leader = registered_workers(using, now)
    queues, estimated = count_queues(
        using, now, fresh, estimate_finished=estimate_finished, finished=finished
    )
    return Overview(
        now=now,
        queues=queues,
        workers=grouped(fresh),
        stale_workers=grouped(stale),
        finished_estimated=estimated,
        throughput=throughput(using, now, [s.queue for s in queues]) if chart else {},
        leader=leader,
        waiting=waiting_for_names(using, now, fresh),
    )


def count_queues(
    using: str,
    now: datetime,
    workers: Iterable[LiveWorker],
    *,
    estimate_finished: bool,
    finished: bool = True,
) -> tuple[list[QueueStats], bool]:
    """The queues' counts, and whether the finished ones are estimates (``finished``
    False: not counted at all, left 0)."""
    by_queue: dict[str, QueueStats] = {name: QueueStats(name) for name in settings.QUEUES}

    def stats_for(queue: str) -> QueueStats:
        return by_queue.setdefault(queue, QueueStats(queue))

    jobs = Job.objects.using(using).order_by()
    count_live(jobs, now, stats_for)
    for name, paused_at in Queue.objects.using(using).paused().values_list("name", "paused_at"):
        stats_for(name).paused_at = paused_at
    wanted = estimate_finished and finished
    estimates = estimated_finished(jobs, sorted(by_queue)) if wanted else None
    if estimates is not None:
        for (queue, status), rows in estimates.items():
            setattr(stats_for(queue), status, rows)
    elif finished:
        count_finished(jobs, stats_for)
    # A supervisor runs no job itself: its queues are served while a child of it serves them.
    served = {queue for worker in workers if not worker.process_count for queue in worker.queues}
    for stats in by_queue.values():
        stats.served = stats.queue in served
        stats.limits = queue_limits(stats.queue)
    return [by_queue[name] for name in sorted(by_queue)], estimates is not None


def count_live(jobs: JobQuerySet, now: datetime, stats_for: Any) -> None:
    # The claim index's condition: pending rows only.
    future = Q(run_at__gt=now)
    pending = (
        jobs.pending()
        .values("queue")
        .annotate(
            due=Count("id", filter=Q(run_at__lte=now)),
            scheduled=Count("id", filter=future & Q(attempts_used=0)),
            retrying=Count("id", filter=future & Q(attempts_used__gt=0)),
            oldest_due_at=Min("run_at", filter=Q(run_at__lte=now)),
        )
    )
    # The waiting index's condition (on MariaDB the claim index's leading columns).
    for waiting in jobs.waiting().values("queue").annotate(n=Count("id")):
        stats_for(waiting["queue"]).waiting = waiting["n"]
    for row in pending:
        stats = stats_for(row["queue"])
        stats.due, stats.scheduled, stats.retrying = row["due"], row["scheduled"], row["retrying"]
        stats.oldest_due_at = row["oldest_due_at"]
    # The lease index's condition: running rows only. A job holds a slot of its queue's
    # limits while its lease is live, whether or not the rescuer has taken it back yet.
    running = (
        jobs.running()
        .values("queue")
        .annotate(count=Count("id"), leased=Count("id", filter=Q(lease_expires_at__gt=now)))
    )
    for counted in running:
        stats = stats_for(counted["queue"])
        stats.running, stats.slots_in_use = counted["count"], counted["leased"]


def count_finished(jobs: JobQuerySet, stats_for: Any) -> None:
    """Exact: one grouped count over the finished index's condition."""
    finished = (
        jobs.filter(status__in=FINISHED_STATUSES).values("queue", "status").annotate(n=Count("id"))
    )
    for by_status in finished:
        setattr(stats_for(by_status["queue"]), by_status["status"], by_status["n"])


def estimated_finished(jobs: JobQuerySet, queues: list[str]) -> dict[tuple[str, str], int] | None:
    """The planner's estimate of each queue's finished rows by status, from one ``EXPLAIN``.

    None (count them exactly) unless the database is PostgreSQL and it estimates
    more than ``EXACT_FINISHED_UP_TO`` finished rows in all. The statement
    explained is a ``UNION ALL`` of one member per (queue, status), after a first
    member for all finished rows; each member's ``Plan Rows`` is its estimate.
    The planner never estimates fewer than one row, so an empty status reads ≈1.
    """
    if not driver_class(jobs.db).has_row_estimates:
        return None
    pairs = [(queue, str(status)) for queue in queues for status in FINISHED_STATUSES]
    members = [jobs.filter(status__in=FINISHED_STATUSES).values("id")] + [
        jobs.filter(queue=queue, status=status).values("id") for queue, status in pairs
    ]
    union = members[0].union(*members[1:], all=True).order_by()
    append = append_node(json.loads(union.explain(format="json"))[0]["Plan"])
    rows = [int(member["Plan Rows"]) for member in append.get("Plans", [])]
    if len(rows) != len(members) or rows[0] <= EXACT_FINISHED_UP_TO:
        return None
    return dict(zip(pairs, rows[1:], strict=True))


def append_node(plan: dict[str, Any]) -> dict[str, Any]:
    """The plan's ``Append`` (the union's members), below any node on top of it (a sort)."""
    while plan.get("Node Type") != "Append" and len(plan.get("Plans", [])) == 1:
        plan = plan["Plans"][0]
    return plan


def chart_start(now: datetime, minutes: int = CHART_MINUTES) -> datetime:
    """The start of the chart's first minute: ``minutes`` whole minutes end with ``now``'s."""
    current = now.astimezone(UTC).replace(second=0, microsecond=0)
    return current - timedelta(minutes=minutes - 1)


def throughput(
    using: str, now: datetime, queues: Iterable[str], minutes: int = CHART_MINUTES
) -> dict[str, list[Minute]]:
    """Per queue, attempts that ended succeeded and failed in each of the last ``minutes``.

    An attempt that ended in the window belongs to a job that is still live, or
    that finished in the window (a job finishes with its last attempt): the job
    side reads the three partial indexes (claim, lease, and the finished index
    bounded to the window), the attempts come through their (job, number) index.
    No attempt is read for the jobs that finished before the window.
    """
    start = chart_start(now, minutes)
    end = start + timedelta(minutes=minutes)
    charts = {
        queue: [Minute(start + timedelta(minutes=i)) for i in range(minutes)] for queue in queues
    }
    in_window = (
        Q(job__status=JobStatus.PENDING, job__attempt__gt=0)  # never claimed: no attempt
        | Q(job__status=JobStatus.RUNNING)
        | Q(job__status__in=FINISHED_STATUSES, job__finished_at__gte=start)
    )
    ended = (
        Attempt.objects.using(using)
        .filter(in_window, finished_at__gte=start, finished_at__lt=end)
        .filter(outcome__in=[AttemptOutcome.SUCCEEDED, *FAILED_OUTCOMES])
        .annotate(minute=TruncMinute("finished_at", tzinfo=UTC))
        .values("job__queue", "minute", "outcome")
        .annotate(n=Count("id"))
        .order_by()
    )
    for row in ended:
        bucket = charts.setdefault(
            row["job__queue"], [Minute(start + timedelta(minutes=i)) for i in range(minutes)]
        )[int((row["minute"] - start).total_seconds() // 60)]
        if row["outcome"] == AttemptOutcome.SUCCEEDED:
            bucket.finished += row["n"]
        else:
            bucket.failed += row["n"]
    return charts


def known_by_queue(workers: Iterable[LiveWorker]) -> dict[str, set[str] | None]:
    """Per queue its live workers serve, the job names they know between them; None where
    one of them claims every name (a worker older than the names on its row). A supervisor
    runs no job: its children count."""
    known: dict[str, set[str] | None] = {}
    for worker in workers:
        if worker.process_count:
            continue
        for queue in worker.queues:
            names = known.get(queue, set())
            if names is None or worker.names is None:
                known[queue] = None
            else:
                known[queue] = names | set(worker.names)
    return known


def waiting_for_names(
    using: str | None = None,
    now: datetime | None = None,
    workers: Iterable[LiveWorker] | None = None,
) -> list[WaitingName]:
    """The due jobs, by queue and name, that the live ``workers`` (else ``live_workers()``)
    of their queue do not know how to run, the oldest first: one grouped query, none when
    no worker is live or every queue has a worker that claims every name. A queue no live
    worker serves is not looked at: it is unserved (``QueueStats.unserved``)."""
    using, now = resolve(using, now)
    if workers is None:
        workers = live_workers(using, now)
    unknown = [
        Q(queue=queue) & ~Q(name__in=sorted(names))
        for queue, names in sorted(known_by_queue(workers).items())
        if names is not None
    ]
    if not unknown:
        return []
    rows = (
        Job.objects.using(using)
        .due(now)
        .filter(reduce(operator.or_, unknown))
        .values("queue", "name")
        .annotate(count=Count("id"), oldest_due_at=Min("run_at"))
        .order_by("oldest_due_at", "queue", "name")
    )
    return [WaitingName(**row) for row in rows]


def current_leader(using: str | None = None, now: datetime | None = None) -> LeaderInfo | None:
    """The leader lease if it holds at ``now`` (it expires later), else None: one query,
    of the one row by its primary key. A lease that lapsed or was handed over marks nobody."""
    using, now = resolve(using, now)
    lease = Leader.objects.using(using).held(now).filter(name=Leader.DEFAULT).first()
    if lease is None or lease.expires_at is None:  # the filter leaves none without an end
        return None
    return LeaderInfo(
        owner=lease.owner,
        epoch=lease.epoch,
        elected_at=lease.elected_at,
        expires_at=lease.expires_at,
    )


def live_workers(
    using: str | None = None, now: datetime | None = None, lease_seconds: float | None = None
) -> list[LiveWorker]:
    """Registered workers whose last heartbeat is younger than a lease, with their jobs;
    the one that holds the leader lease at ``now`` ``leads``."""
    return live_workers_and_leader(using, now, lease_seconds)[0]


def live_workers_and_leader(
    using: str | None = None, now: datetime | None = None, lease_seconds: float | None = None
) -> tuple[list[LiveWorker], LeaderInfo | None]:
    """``live_workers()``, and the leader lease it marked them by (``current_leader()``)."""
    using, now = resolve(using, now)
    lease = float(settings.LEASE_SECONDS if lease_seconds is None else lease_seconds)
    rows = WorkerProcess.objects.using(using).filter(
        last_heartbeat_at__gte=now - timedelta(seconds=lease)
    )
    workers = [as_live_worker(row) for row in rows]
    attach_running_jobs(workers, using)
    leader = current_leader(using, now)
    mark_leader(workers, leader)
    return workers, leader


class Registered(NamedTuple):
    """What ``registered_workers()`` read."""

    fresh: list[LiveWorker]
    stale: list[LiveWorker]
    leader: LeaderInfo | None


def registered_workers(using: str | None = None, now: datetime | None = None) -> Registered:
    """Every registered worker, with its jobs: heartbeat fresh, heartbeat stale; and the
    leader lease, the worker that holds it marked ``leads``.

    Stale is ``heartbeat_is_stale()``: a row older than a lease that the rescuer
    has not swept yet is stale too.
    """
    using, now = resolve(using, now)
    workers = [
        as_live_worker(row)
        for row in WorkerProcess.objects.using(using).order_by("host", "pid", "id")
    ]
    attach_running_jobs(workers, using)
    leader = current_leader(using, now)
    mark_leader(workers, leader)
    fresh = [w for w in workers if not heartbeat_is_stale(w.last_heartbeat_at, now)]
    stale = [w for w in workers if heartbeat_is_stale(w.last_heartbeat_at, now)]
    return Registered(fresh, stale, leader)


def mark_leader(workers: Iterable[LiveWorker], leader: LeaderInfo | None) -> None:
    for worker in workers:
        worker.leads = leader is not None and worker.id == leader.owner


def grouped(workers: list[LiveWorker]) -> list[LiveWorker]:
    """``workers`` with each supervisor's children after it, its running jobs theirs."""
    children: dict[str, list[LiveWorker]] = {}
    for worker in workers:
        if worker.supervisor is not None:
            children.setdefault(worker.supervisor, []).append(worker)
    ids = {worker.id for worker in workers}
    result: list[LiveWorker] = []
    for worker in workers:
        if worker.supervisor in ids:
            continue  # listed after its supervisor
        result.append(worker)
        for child in children.get(worker.id, []):
            worker.running += child.running
            result.append(child)
    return result


def as_live_worker(row: WorkerProcess) -> LiveWorker:
    return LiveWorker(
        id=row.id,
        host=row.host,
        pid=row.pid,
        queues=list(row.queues or []),
        started_at=row.started_at,
        last_heartbeat_at=row.last_heartbeat_at,
        supervisor=row.supervisor,
        process_count=row.process_count,
        names=None if row.names is None else list(row.names),
    )


def attach_running_jobs(workers: Iterable[LiveWorker], using: str) -> None:
    by_id = {worker.id: worker for worker in workers}
    if not by_id:
        return
    held = (
        Job.objects.using(using)
        .held_by(by_id)
        .order_by("id")
        .values_list("lease_owner", "id", named=True)
    )
    for row in held:
        worker = by_id[str(row.lease_owner)]
        worker.running += 1
        worker.running_job_ids.append(row.id)
