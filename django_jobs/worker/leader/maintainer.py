"""The chores of a worker process off the jobs' path, each under its deadline.

Taking back expired leases, dead-lettering what has no attempt left,
pruning finished jobs, firing recurring schedules and keeping the
process's registration fresh. The tick (``Worker.run_once``) and the
server's main loop run the same ones; the server, all but the registration
only while its process leads (:mod:`.leadership`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime

from ... import telemetry
from ...db import Driver
from ...health import log_problems
from ...maintenance.cleaner import PRUNE_BATCH, prune_finished
from ...maintenance.rescuer import (
    dead_letter_exhausted,
    follow_unfollowed,
    reclaim_expired_leases,
)
from ...maintenance.scheduler import enqueue_due, next_due_at
from ...maintenance.workers import sweep_workers
from ...metrics import readings
from ...registry import known_names
from ...stats import overview
from ..deadlines import Deadlines
from ..processes import refresh_worker, register_worker, unregister_worker

# Batches of finished jobs one maintenance pass may prune (of prune_finished's batch size).
PRUNE_BATCHES = 10


class Maintainer:
    def __init__(
        self,
        driver: Driver,
        owner: str,
        queues: Iterable[str],
        *,
        deadline: Deadlines,
        lease_seconds: float,
        jobs_run: Callable[[], int],
        supervisor: str | None = None,
        largest_claim: int = 0,
    ) -> None:
        self.driver = driver
        self.using = driver.using
        self.owner = owner
        self.queues = list(queues)
        self.deadline = deadline
        self.lease_seconds = lease_seconds
        self.jobs_run = jobs_run
        self.supervisor = supervisor  # runjobs --processes: the row this process is listed under
        #: The most jobs one claim of this process takes of a queue, written in its row.
        self.largest_claim = largest_claim
        #: When the next recurring schedule falls due, as the last :meth:`enqueue_due` read it.
        self.next_due_at: datetime | None = None
        #: The job names the registration last wrote (:func:`known_names`).
        self.names_written: tuple[str, ...] | None = None
        #: The last :meth:`prune` used its whole budget: more is past its retention, and
        #: the next pass comes sooner (:class:`~.chores.Chores`).
        self.prune_behind = False

    def maintain(self, now: datetime) -> int:
        """Take back expired leases; dead-letter pending jobs with no attempt left; prune.

        Pruning has a deadline of its own, after the rest: a backlog of
        finished jobs never delays the rescuer, and one pass deletes at most
        ``PRUNE_BATCHES`` short batches (the next passes go on).
        """
        reclaimed = self.rescue(now)
        self.prune(now)
        return reclaimed

    def rescue(self, now: datetime) -> int:
        """Take back expired leases, dead-letter what has no attempt left, take the workflow
        steps a crash left untaken, sweep workers."""
        with self.deadline("the maintenance pass"):
            reclaimed = reclaim_expired_leases(now, using=self.using)
            dead_letter_exhausted(now, using=self.using)
            follow_unfollowed(now, using=self.using)
            sweep_workers(now, using=self.using, lease_seconds=self.lease_seconds)
        return reclaimed

    def prune(self, now: datetime) -> int:
        """Delete finished jobs past their retention: at most ``PRUNE_BATCHES`` batches; say
        whether that was the whole budget (:attr:`prune_behind`)."""
        self.prune_behind = False
        with self.deadline("pruning finished jobs"):
            deleted = prune_finished(
                now, using=self.using, batch=PRUNE_BATCH, max_batches=PRUNE_BATCHES
            )
        self.prune_behind = deleted >= PRUNE_BATCHES * PRUNE_BATCH
        return deleted

    def check_health(self, now: datetime) -> list[str]:
        """Log what holds back the cleanup of the jobs tables' dead rows (the leader's, every
        ``health.LOG_SECONDS``): one process per database reads it, not every worker."""
        with self.deadline("the jobs tables' health"):
            return log_problems(self.using)

    def read_gauges(self, now: datetime) -> None:
        """Read the database-wide gauges for OpenTelemetry's exporter (the leader's, every
        ``telemetry.GAUGE_SECONDS``, while a meter provider is configured): one process per
        database reads them, as the Prometheus view does at each scrape."""
        if telemetry.otel() is None:
            return
        with self.deadline("the metrics' gauges"):
            seen = overview(self.using, now=now, chart=False, finished=False)
        telemetry.database_read(readings(seen))

    def enqueue_due(self, now: datetime) -> int:
        """Fire the recurring schedules due at ``now``; note when the next falls due after
        it (:attr:`next_due_at`), so that the leader's loop wakes for it. (One left due,
        its fire having failed, is tried again after the poll.)"""
        with self.deadline("the recurring scheduler"):
            fired = enqueue_due(now, using=self.using)
            self.next_due_at = next_due_at(now, self.using)
        return fired

    def register(self, now: datetime) -> None:
        names = known_names()
        with self.deadline("the worker registration"):
            register_worker(
                self.owner,
                self.queues,
                now,
                self.using,
                supervisor=self.supervisor,
                names=names,
                largest_claim=self.largest_claim,
            )
        self.names_written = names

    def refresh_registration(self, now: datetime) -> None:
        """The registration's heartbeat; the names the process knows written again only
        after its registry grew (a task declared since, say)."""
        names = known_names()
        with self.deadline("the worker registration"):
            refresh_worker(
                self.owner,
                self.queues,
                now,
                self.using,
                self.jobs_run(),
                self.supervisor,
                names=names,
                names_changed=names != self.names_written,
                largest_claim=self.largest_claim,
            )
        self.names_written = names

    def unregister(self) -> None:
        with self.deadline("removing the worker registration"):
            unregister_worker(self.owner, self.using)
