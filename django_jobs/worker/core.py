"""The worker: claims due jobs, runs them, writes their outcomes.

``Worker.run_once(now)`` is one tick, run on the calling thread; tests call
it directly. ``Worker.run(stop_event)`` serves with threads until the event
is set (see :mod:`.server`). Every database call goes through the driver
(:mod:`django_jobs.db`) and has a deadline.
"""

from __future__ import annotations

import logging
import os
import random
import secrets
import socket
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from django.db import DatabaseError, connections, router

from ..clock import Clock, DatabaseClock
from ..conf import settings
from ..context import Progress
from ..db import ROW_ERRORS, ClaimedJob, DatabaseBusy, Driver, get_driver
from ..db.base import Renewed
from ..db.outage import with_backoff
from ..deadlines import deadline
from ..events import report_lease, report_outcome
from ..exceptions import UnknownJob
from ..maintenance.cleaner import prune_finished
from ..maintenance.rescuer import dead_letter_exhausted, reclaim_expired_leases
from ..maintenance.scheduler import enqueue_due
from ..models import AttemptOutcome, Job, JobStatus
from ..outcomes import HandlerResult, Settlement, cancel_honoured, cancelled, decide, released
from ..records import Settled
from ..registry import get_definition
from ..retry_policy import RetryPolicy
from .execution import make_context, run_handler
from .inflight import InFlight, Pairs
from .processes import sweep_workers
from .settler import Outcome, Settler

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Batches of finished jobs one maintenance pass may prune (of prune_finished's batch size).
PRUNE_BATCHES = 10


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
    cancelled: int = 0
    lost: int = 0

    def record(self, status: JobStatus | None) -> None:
        if status is None:
            self.lost += 1
        elif status == JobStatus.SUCCEEDED:
            self.succeeded += 1
        elif status == JobStatus.DEAD_LETTERED:
            self.dead_lettered += 1
        elif status == JobStatus.CANCELLED:
            self.cancelled += 1
        else:
            self.retried += 1


def due_again(settled: Settlement) -> bool:
    """The settlement leaves its job pending and due now."""
    return settled.status == JobStatus.PENDING and (
        settled.run_at is None or settled.run_at <= settled.ended_at
    )


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
        self.driver: Driver = get_driver(self.using)
        self.owner = owner or make_owner()
        self.rng = rng
        self.burst = burst
        self.force_event = threading.Event()
        self.lease_seconds = float(settings.LEASE_SECONDS)
        self.call_timeout_seconds = settings.call_timeout_seconds()
        self.policy = RetryPolicy.from_settings()
        self.jobs_run = 0  # attempts whose outcome this process wrote
        self._counting = threading.Lock()
        self.settler = Settler(self.write_outcomes)
        self.inflight = InFlight(
            self.owner,
            self.lease_seconds,
            settings.heartbeat_seconds(),
            self.record,
            renew=self.renew,
            release=self.release,
        )

    # -- one tick, on the calling thread ---------------------------------

    def run_once(self, now: datetime | None = None) -> TickResult:
        """Maintenance, then claim and run up to one batch per queue."""
        now = now or self.clock.now()
        result = TickResult(fired=enqueue_due(now, using=self.using))
        result.reclaimed = self.maintain(now)
        for name, count in self.queues.items():
            claimed = self.claim(name, now, count)
            result.claimed += len(claimed)
            done = [Outcome(job, run_handler(job, make_context(job))) for job in claimed]
            for status in self.write_outcomes(done):
                result.record(status)
        return result

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
        """Take back expired leases, dead-letter what has no attempt left, sweep workers."""
        with self.deadline("the maintenance pass"):
            reclaimed = reclaim_expired_leases(self.driver, now)
            dead_letter_exhausted(self.driver, now)
            sweep_workers(now, self.lease_seconds, self.using)
        return reclaimed

    def prune(self, now: datetime) -> int:
        """Delete finished jobs past their retention: at most ``PRUNE_BATCHES`` batches."""
        with self.deadline("pruning finished jobs"):
            return prune_finished(now, using=self.using, max_batches=PRUNE_BATCHES)

    def deadline(self, what: str, seconds: float | None = None) -> Any:
        """A deadline for one database call of this worker (see :mod:`django_jobs.deadlines`)."""
        return deadline(seconds or self.call_timeout_seconds, self.using, what)

    def claim(self, queue: str, now: datetime, limit: int) -> list[ClaimedJob]:
        with self.deadline("the claim"):
            claimed = self.driver.claim(queue, self.owner, now, self.lease_seconds, limit)
        if claimed and logger.isEnabledFor(logging.DEBUG):
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
        """Run a claimed job on this thread, without a heartbeat, and record its outcome."""
        return self.record(claimed, run_handler(claimed, make_context(claimed)))

    def record(self, claimed: ClaimedJob, result: HandlerResult) -> JobStatus | None:
        """Write one attempt's outcome now; the job's new status, or None if the lease was lost."""
        [status] = self.write_outcomes([Outcome(claimed, result)])
        return status

    def write_outcomes(self, outcomes: Sequence[Outcome]) -> list[JobStatus | None]:
        """Decide and write ``outcomes`` in one batch, through a brief outage.

        Retries for up to a lease (a release at shutdown: up to the grace
        period); if it still cannot write, the leases run out as after a
        crash. Each job leaves the held set once its outcome is written.
        """
        if not outcomes:
            return []
        decided = self.decide(outcomes, self.clock.now())
        patience = self.lease_seconds
        if all(o.result.outcome == AttemptOutcome.RELEASED for o in outcomes):
            patience = min(patience, float(settings.SHUTDOWN_GRACE_SECONDS))
        try:
            settled = self.settle(decided, patience)
        finally:
            self.release_held(outcomes)
        return self.written(outcomes, decided, settled)

    def decide(self, outcomes: Sequence[Outcome], now: datetime) -> list[Settlement]:
        return [decide(o.claimed, o.result, now, self.policy, self.rng) for o in outcomes]

    def release_held(self, outcomes: Sequence[Outcome]) -> None:
        """Their outcomes are written (or given up on): the jobs leave the held set."""
        for outcome in outcomes:
            if outcome.held is not None:
                self.inflight.settled(outcome.held)

    def claim_and_settle(self, queue: str, limit: int) -> list[ClaimedJob]:
        """Claim for ``queue``, writing the outcomes that wait in the settler in the same
        statement. If that fails, the outcomes go back to the settler, which writes them
        through the outage; a refused row makes the claim go again row by row."""
        carried = self.settler.take()
        if not carried:
            return self.claim_now(queue, limit)
        now = self.clock.now()
        decided = self.decide(carried, now)
        try:
            with self.deadline("the claim"):
                claimed, settled = self.driver.claim_and_settle(
                    queue, self.owner, now, self.lease_seconds, limit, decided
                )
        except DatabaseBusy:
            self.settler.give_back(carried)
            return []
        except ROW_ERRORS:
            self.settler.give_back(carried)
            return self.claim(queue, now, limit)
        except BaseException:
            self.settler.give_back(carried)
            raise
        self.release_held(carried)
        self.written(carried, decided, settled)
        return claimed

    def written(
        self, outcomes: Sequence[Outcome], decided: Sequence[Settlement], settled: Settled
    ) -> list[JobStatus | None]:
        """Log each written outcome; the jobs' new statuses, None where the lease was lost."""
        lost_pairs = {s.pair for s in settled.lost}
        decided = [cancel_honoured(s) if s.pair in settled.cancelled else s for s in decided]
        statuses: list[JobStatus | None] = []
        for outcome, written in zip(outcomes, decided, strict=True):
            if written.pair in lost_pairs:
                report_lease(
                    "job_lease_lost", written.job_id, written.attempt, outcome=written.outcome
                )
                statuses.append(None)
            else:
                report_outcome(outcome.claimed, outcome.result, written)
                statuses.append(written.status)
        with self._counting:
            self.jobs_run += len(outcomes) - len(lost_pairs)
        self.wake_for_due_again(
            [
                o.claimed.queue
                for o, s in zip(outcomes, decided, strict=True)
                if due_again(s) and s.pair not in lost_pairs
            ]
        )
        return statuses

    def wake_for_due_again(self, queues: Sequence[str]) -> None:
        """Wake the workers of ``queues``: a job there is due again at once (handed back at a
        stop, or retried with no backoff), so another worker need not wait for its poll.
        Best effort: a lost wake-up costs only that poll."""
        if not queues:
            return
        try:
            with self.deadline("waking the queues"):
                self.driver.notify(queues)
        except DatabaseError as exc:
            logger.debug("wake-up not sent: %s", exc, extra={"event": "wake_failed"})

    def settle(self, settlements: Sequence[Settlement], patience: float) -> Settled:
        def write() -> Settled:
            with self.deadline(f"recording {len(settlements)} outcome(s)"):
                return self.driver.settle(settlements)

        return with_backoff(write, give_up_after=patience, using=self.using)

    def renew(
        self, pairs: Pairs, now: datetime, timeout: float, progress: dict[int, Progress]
    ) -> Renewed:
        """The heartbeat's renewal, cut off after ``timeout`` (its give-up point);
        it writes the jobs' ``progress`` reports in the same statement."""
        with self.deadline("the lease renewal", timeout):
            return self.driver.renew(
                self.owner,
                pairs,
                now,
                self.lease_seconds,
                give_up_seconds=self.inflight.beat_seconds,
                progress=progress,
            )

    def release(self, pairs: Pairs, now: datetime) -> set[int]:
        """Hand held jobs back at shutdown, in one write bounded by the grace period."""
        grace = max(1.0, float(settings.SHUTDOWN_GRACE_SECONDS))
        settlements = [released(job_id, self.owner, attempt, now) for job_id, attempt in pairs]
        with self.deadline("handing jobs back", grace):
            settled = self.driver.settle(settlements)
        for job_id, attempt in sorted(settled.cancelled):
            report_lease("job_cancelled_at_stop", job_id, attempt)
        kept = {s.pair for s in settled.lost} | settled.cancelled
        handed_back = {s.job_id for s in settlements if s.pair not in kept}
        if handed_back:
            self.wake_for_due_again(list(self.queues))
        return handed_back

    def execute_held(self, claimed: ClaimedJob) -> JobStatus | None:
        """Run a claimed job while the heartbeat keeps its lease, then hand its outcome over.

        The job stays held until its outcome is written. With the settler
        running, this returns None at once (the status is not known yet);
        without it, the outcome is written here and its status returned.
        """
        ctx = make_context(claimed)
        try:
            timeout = self.timeout_for(claimed)
        except Exception as exc:  # a bad setting: a failed attempt, not a stuck job
            failed = HandlerResult.from_exception(AttemptOutcome.FAILED, exc, None)
            return self.record(claimed, failed)
        held = self.inflight.add(claimed, ctx, self.clock.now(), timeout)
        try:
            result = run_handler(claimed, ctx)
        finally:
            still_ours = self.inflight.finish(held)
        if not still_ours:
            return None
        if held.cancel_requested and result.outcome != AttemptOutcome.SUCCEEDED:
            result = cancelled(claimed)
        if self.settler.running:
            self.settler.submit(Outcome(claimed, result, held))
            return None
        [status] = self.write_outcomes([Outcome(claimed, result, held)])
        return status

    def timeout_for(self, claimed: ClaimedJob) -> float | None:
        """The job's ``@job(timeout=...)``, else its queue's ``timeout`` option."""
        try:
            timeout = get_definition(claimed.name).timeout
        except UnknownJob:
            timeout = None  # the attempt fails when the handler is looked up
        return timeout if timeout is not None else settings.queue_timeout(claimed.queue)

    # -- serving, with threads -------------------------------------------

    def run(self, stop_event: threading.Event) -> None:
        """Serve until ``stop_event`` is set, then wait for running handlers.

        Setting :attr:`force_event` as well stops the wait for running
        handlers; their jobs' leases then run out as after a crash.
        """
        from .server import Server

        Server(self).run(stop_event)

    def guarded(self, step: Callable[[], T]) -> T | None:
        """Run one step of a loop; log a failure and carry on serving."""
        try:
            return step()
        except DatabaseError as exc:  # an outage: one line, not a traceback each poll
            logger.warning(
                "worker step failed (%s: %s); retrying",
                type(exc).__name__,
                str(exc).strip().splitlines()[0] if str(exc).strip() else "",
                extra={"event": "worker_error"},
            )
        except Exception:
            logger.exception("worker step failed; retrying", extra={"event": "worker_error"})
        connections[self.using].close_if_unusable_or_obsolete()
        return None
