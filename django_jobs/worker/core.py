"""The worker: the wiring of one process's parts, and the tick.

``Worker`` builds each part once, in order, each given what it needs and
nothing assigned into it afterwards: the jobs in flight and their heartbeat
(:mod:`.inflight`, which writes nothing), the follower (:mod:`.follower`, the
workflow steps of written ends), the outcome writer
(:mod:`.recording`, which releases held jobs through them), the settler
(:mod:`.settler`, which writes through the writer), the claimer
(:mod:`.claiming`) and the executor (:mod:`.execution`), the leadership and
the maintainer. ``Worker.run_once(now)`` is one tick on the calling thread,
through the same claimer, executor and writer as production (with no
settler or follower thread, each outcome is written at once, and its workflow steps
taken). Tests call it, or the
parts themselves (``worker.claimer.claim(...)``, ``worker.executor.execute(...)``,
``worker.writer.write(...)``). :func:`~.server.serve` hands the same parts
(:class:`Parts`) to a server, which serves with threads until its stop event
is set; it hands what the heartbeat returns (the timed-out jobs' outcomes)
and what a stop ends (the running jobs) to the writer. Every database call
goes through the driver (:mod:`django_jobs.db`) and has a deadline.
"""

from __future__ import annotations

import os
import random
import secrets
import socket
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from django.db import router

from ..conf import settings
from ..db import Driver, get_driver
from ..maintenance.scheduler import enqueue_due
from ..models import AttemptOutcome, Job, JobStatus
from ..outcomes import Settlement
from ..registry import discover_names
from ..retry_policy import RetryPolicy
from .claiming import Claimer
from .clock import Clock, DatabaseClock
from .deadlines import Deadlines
from .execution import Executor
from .follower import Follower
from .inflight import InFlight, driver_renewal
from .leader.leadership import Leadership
from .leader.maintainer import Maintainer
from .recording import OutcomeWriter
from .settler import Settler
from .waker import Doorbells


def make_owner() -> str:
    """A name for this worker process, unique across hosts and restarts."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


@dataclass(frozen=True)
class Parts:
    """One worker process's parts, as ``Worker`` built them: what the tick and the server
    (:func:`~.server.serve`) compose."""

    owner: str
    using: str
    queues: dict[str, int]
    clock: Clock
    deadline: Deadlines
    claimer: Claimer
    executor: Executor
    writer: OutcomeWriter
    doorbells: Doorbells
    inflight: InFlight
    settler: Settler
    follower: Follower
    maintainer: Maintainer
    leadership: Leadership
    call_timeout_seconds: float
    burst: bool
    force_event: threading.Event


@dataclass
class TickResult:
    fired: int = 0
    reclaimed: int = 0
    claimed: int = 0
    succeeded: int = 0
    retried: int = 0
    dead_lettered: int = 0
    released: int = 0
    cancelled: int = 0
    lost: int = 0

    def record(self, written: Settlement | None) -> None:
        """Count one outcome as written (None: its lease was lost)."""
        if written is None:
            self.lost += 1
        elif written.status == JobStatus.SUCCEEDED:
            self.succeeded += 1
        elif written.status == JobStatus.DEAD_LETTERED:
            self.dead_lettered += 1
        elif written.status == JobStatus.CANCELLED:
            self.cancelled += 1
        elif written.outcome == AttemptOutcome.RELEASED:
            self.released += 1
        else:
            self.retried += 1


def normalise_queues(queues: Mapping[str, int] | Iterable[str] | None) -> dict[str, int]:
    if queues is None:
        queues = list(settings.QUEUES)
    if isinstance(queues, Mapping):
        result = {str(name): int(count) for name, count in queues.items()}
    else:
        result = {str(name): settings.queue_workers(str(name)) for name in queues}
    if not result:
        raise ValueError("a worker needs at least one queue")
    for name, count in result.items():
        if count < 1:
            raise ValueError(f"queue {name!r} needs at least one worker thread, got {count}")
    return result


class Worker:
    def __init__(
        self,
        queues: Mapping[str, int] | Iterable[str] | None = None,
        *,
        clock: Clock | None = None,
        using: str | None = None,
        owner: str | None = None,
        rng: random.Random | None = None,
        burst: bool = False,
        supervisor: str | None = None,
    ) -> None:
        self.queues = normalise_queues(queues)
        # Every name this process can run made known before the first claim asks for them.
        discover_names()
        self.using = using or router.db_for_write(Job)
        self.clock: Clock = clock or DatabaseClock(self.using)
        self.driver: Driver = get_driver(self.using)
        self.owner = owner or make_owner()
        self.burst = burst
        self.force_event = threading.Event()
        self.lease_seconds = float(settings.LEASE_SECONDS)
        self.call_timeout_seconds = settings.call_timeout_seconds()
        self.deadline = Deadlines(self.using, self.call_timeout_seconds)
        beat = min(settings.heartbeat_seconds(), self.lease_seconds / 3)
        self.inflight = InFlight(
            self.owner,
            self.lease_seconds,
            beat,
            renew=driver_renewal(self.driver, self.owner, self.lease_seconds, beat, self.deadline),
        )
        self.doorbells = Doorbells(self.queues)
        self.follower = Follower(self.driver, deadline=self.deadline, doorbells=self.doorbells)
        self.writer = OutcomeWriter(
            self.driver,
            self.owner,
            list(self.queues),
            clock=self.clock,
            deadline=self.deadline,
            inflight=self.inflight,
            lease_seconds=self.lease_seconds,
            policy=RetryPolicy.from_settings(),
            rng=rng,
            doorbells=self.doorbells,
            follower=self.follower,
        )
        self.settler = Settler(self.writer.write, dry=self.doorbells.is_dry)
        self.claimer = Claimer(
            self.driver,
            self.owner,
            clock=self.clock,
            deadline=self.deadline,
            lease_seconds=self.lease_seconds,
            settler=self.settler,
            writer=self.writer,
        )
        self.executor = Executor(clock=self.clock, inflight=self.inflight, settler=self.settler)
        self.leadership = Leadership(
            self.driver,
            self.owner,
            clock=self.clock,
            lease_seconds=float(settings.LEADER_LEASE_SECONDS),
            call_timeout_seconds=self.call_timeout_seconds,
        )
        self.maintainer = Maintainer(
            self.driver,
            self.owner,
            self.queues,
            # The leader's chores end before its lease would: their deadline is its.
            deadline=self.leadership.deadline,
            lease_seconds=self.lease_seconds,
            jobs_run=lambda: self.writer.jobs_run,
            supervisor=supervisor,
            # A tick claims as many jobs as a queue has threads; a dispatcher twice that
            # while it claims ahead (the server says so: ``Server.__init__``).
            largest_claim=max(self.queues.values(), default=0),
        )

    # -- one tick, on the calling thread ---------------------------------

    def run_once(self, now: datetime | None = None) -> TickResult:
        """Maintenance, then claim and run up to one batch per queue, through the parts
        production uses. The tick runs every chore itself, leader or not: its caller
        decides when (a test, ``run_until_empty``); :func:`~.server.serve` leaves them to
        the leader."""
        now = now or self.clock.now()
        result = TickResult(fired=enqueue_due(now, using=self.using))
        result.reclaimed = self.maintainer.maintain(now)
        for name, count in self.queues.items():
            claimed = self.claimer.claim(name, now, count)
            result.claimed += len(claimed)
            for job in claimed:
                result.record(self.executor.execute(job))
        return result

    # -- serving, with threads -------------------------------------------

    def parts(self) -> Parts:
        return Parts(
            owner=self.owner,
            using=self.using,
            queues=self.queues,
            clock=self.clock,
            deadline=self.deadline,
            claimer=self.claimer,
            executor=self.executor,
            writer=self.writer,
            doorbells=self.doorbells,
            inflight=self.inflight,
            settler=self.settler,
            follower=self.follower,
            maintainer=self.maintainer,
            leadership=self.leadership,
            call_timeout_seconds=self.call_timeout_seconds,
            burst=self.burst,
            force_event=self.force_event,
        )
