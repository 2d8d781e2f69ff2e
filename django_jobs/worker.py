"""The worker: claims due jobs, runs them, takes back expired leases.

``Worker.run_once(now)`` is one tick, run on the calling thread; tests call it
directly. ``Worker.run(stop_event)`` serves with threads until the event is
set (see :mod:`django_jobs.serving`).
"""

from __future__ import annotations

import logging
import os
import random
import secrets
import socket
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from django.db import connections, router

from .claims import ClaimedJob, Claimer, get_claimer
from .clock import Clock, DatabaseClock
from .conf import settings
from .exceptions import UnknownJob
from .execution import HandlerResult, execute, make_context, record_result, run_handler
from .inflight import InFlight
from .leases import dead_letter_exhausted, reclaim_expired_leases
from .models import AttemptOutcome, Job, JobStatus
from .recurring import enqueue_due
from .registration import sweep_workers
from .registry import get_definition
from .retries import RetryPolicy
from .retrying import with_backoff
from .serving import Server

logger = logging.getLogger(__name__)

T = TypeVar("T")


def make_owner() -> str:
    """A name for this worker process, unique across hosts and restarts."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


@dataclass
class TickResult:
    fired: int = 0
    reclaimed: int = 0
    claimed: int = 0
    succeeded: int = 0
    retried: int = 0
    dead_lettered: int = 0
    released: int = 0
    lost: int = 0

    def record(self, status: JobStatus | None) -> None:
        if status is None:
            self.lost += 1
        elif status == JobStatus.SUCCEEDED:
            self.succeeded += 1
        elif status == JobStatus.DEAD_LETTERED:
            self.dead_lettered += 1
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
    ) -> None:
        self.queues = normalise_queues(queues)
        self.using = using or router.db_for_write(Job)
        self.clock: Clock = clock or DatabaseClock(self.using)
        self.claimer: Claimer = get_claimer(self.using)
        self.owner = owner or make_owner()
        self.rng = rng
        self.burst = burst
        self.force_event = threading.Event()
        self.inflight = InFlight(
            self.claimer,
            self.owner,
            float(settings.LEASE_SECONDS),
            settings.heartbeat_seconds(),
            self.record,
        )

    # -- one tick, on the calling thread ---------------------------------

    def run_once(self, now: datetime | None = None) -> TickResult:
        """Maintenance, then claim and run up to one batch per queue."""
        now = now or self.clock.now()
        result = TickResult(fired=enqueue_due(now, using=self.using))
        result.reclaimed = self.maintain(now)
        for name, count in self.queues.items():
            for claimed in self.claim(name, now, count):
                result.claimed += 1
                result.record(self.execute(claimed))
        return result

    def maintain(self, now: datetime) -> int:
        """Take back expired leases; dead-letter pending jobs with no attempt left."""
        reclaimed = reclaim_expired_leases(self.claimer, now)
        dead_letter_exhausted(self.claimer, now)
        sweep_workers(now, float(settings.LEASE_SECONDS), self.using)
        return reclaimed

    def claim(self, queue: str, now: datetime, limit: int) -> list[ClaimedJob]:
        claimed = self.claimer.claim(queue, self.owner, now, float(settings.LEASE_SECONDS), limit)
        for job in claimed:
            logger.debug(
                "job %s #%s claimed, attempt %s",
                job.name,
                job.id,
                job.attempt,
                extra={"event": "job_claimed", "job_id": job.id, "attempt": job.attempt},
            )
        return claimed

    def claim_now(self, queue: str, limit: int) -> list[ClaimedJob]:
        return self.claim(queue, self.clock.now(), limit)

    def execute(self, claimed: ClaimedJob) -> JobStatus | None:
        """Run a claimed job on this thread, without a heartbeat, and settle it."""
        return execute(claimed, self.claimer, self.clock, RetryPolicy.from_settings(), self.rng)

    def record(self, claimed: ClaimedJob, result: HandlerResult) -> JobStatus | None:
        """Settle an attempt, retrying through a brief database outage for up to a lease.

        A release at shutdown retries no longer than the grace period: if it
        cannot be written, the lease runs out as after a crash.
        """
        policy = RetryPolicy.from_settings()
        patience = float(settings.LEASE_SECONDS)
        if result.outcome == AttemptOutcome.RELEASED:
            patience = min(patience, float(settings.SHUTDOWN_GRACE_SECONDS))
        return with_backoff(
            lambda: record_result(claimed, result, self.claimer, self.clock, policy, self.rng),
            give_up_after=patience,
            using=self.using,
        )

    def execute_held(self, claimed: ClaimedJob) -> JobStatus | None:
        """Run a claimed job while the heartbeat keeps its lease; settle it if still ours."""
        ctx = make_context(claimed)
        held = self.inflight.add(claimed, ctx, self.clock.now(), self.timeout_for(claimed))
        result = run_handler(claimed, ctx)
        if not self.inflight.finish(held):
            return None
        return self.record(claimed, result)

    def timeout_for(self, claimed: ClaimedJob) -> float | None:
        """The job's ``@job(timeout=...)``, else its queue's ``timeout`` option."""
        try:
            timeout = get_definition(claimed.name).timeout
        except UnknownJob:
            timeout = None  # the attempt fails when the handler is looked up
        if timeout is None:
            option = (settings.QUEUES.get(claimed.queue) or {}).get("timeout")
            timeout = float(option) if option else None
        return timeout

    # -- serving, with threads -------------------------------------------

    def run(self, stop_event: threading.Event) -> None:
        """Serve until ``stop_event`` is set, then wait for running handlers.

        Setting :attr:`force_event` as well stops the wait for running
        handlers; their jobs' leases then run out as after a crash.
        """
        Server(self).run(stop_event)

    def maintain_now(self) -> int:
        return self.maintain(self.clock.now())

    def guarded(self, step: Callable[[], T]) -> T | None:
        """Run one step of a loop; log a failure and carry on serving."""
        try:
            return step()
        except Exception:
            logger.exception("worker step failed; retrying", extra={"event": "worker_error"})
            connections[self.using].close_if_unusable_or_obsolete()
            return None
