"""Writing outcomes: decide, write, release, report.

:meth:`OutcomeWriter.write` is the one path of every outcome: it turns
handlers' results into settlements (:func:`~django_jobs.outcomes.decide`),
writes them in one statement, lets the jobs leave the held set once their
outcome is written (or given up on), and reports each written outcome
(:mod:`django_jobs.events`). The statement is the settler's batch
(:meth:`OutcomeWriter.settle_batch`, with its backoff and deadline) or a
claim that carries the outcomes (:meth:`~.claiming.Claimer.claim_and_settle`).
The settler calls it for batches, the claimer for the outcomes its claim
carries, the executor for one outcome written inline, and the heartbeat's
caller for the outcomes of timed-out handlers, on a thread of their own
(:meth:`OutcomeWriter.write_apart`). The hand-back at a stop
(:meth:`OutcomeWriter.hand_back`) writes released jobs in one bounded write. The ends
written of jobs in a workflow go to the follower (:mod:`.follower`), which takes their
steps once the write has committed.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import NamedTuple

from django.db import DatabaseError

from ..conf import settings
from ..db import ROW_ERRORS, Driver
from ..db.outage import with_backoff
from ..db.records import ClaimedJob, Pairs, Settled
from ..events import report_lease, report_written
from ..models import AttemptOutcome, JobStatus
from ..outcomes import HandlerResult, Settlement, decide, released, unrecorded
from ..retry_policy import RetryPolicy
from .clock import Clock
from .deadlines import Deadlines
from .follower import Follower
from .inflight import InFlight, Outcome
from .waker import Doorbells

logger = logging.getLogger(__name__)


class Decided(NamedTuple):
    """An outcome and the settlement decided for it (for an outcome that could not be
    decided or written, its attempt's failure stands in for both)."""

    outcome: Outcome
    settlement: Settlement


#: A statement that writes a batch's settlements, given the decided outcomes: returns them
#: as written (one the database refused may be decided again as its attempt's failure) and
#: what the write reported (:class:`~django_jobs.db.records.Settled`).
Statement = Callable[[list[Decided]], tuple[list[Decided], Settled]]
#: Where the outcomes go, still held, that a statement did not write.
Unwritten = Callable[[Sequence[Outcome]], object]
#: How :meth:`OutcomeWriter.write_apart` leaves the calling thread.
Defer = Callable[[Callable[[], object]], None]


def run_on_a_thread(write: Callable[[], object]) -> None:
    """The default ``defer``: run ``write`` on a daemon thread of its own."""

    def run() -> None:
        from django.db import connections

        try:
            write()
        finally:
            connections.close_all()

    threading.Thread(target=run, name="django-jobs-write", daemon=True).start()


def due_again(settled: Settlement) -> bool:
    """The settlement leaves its job pending and due now."""
    return settled.status == JobStatus.PENDING and (
        settled.run_at is None or settled.run_at <= settled.ended_at
    )


class OutcomeWriter:
    """Writes attempts' outcomes for one worker process, each row fenced by owner and attempt."""

    def __init__(
        self,
        driver: Driver,
        owner: str,
        queues: Sequence[str],
        *,
        clock: Clock,
        deadline: Deadlines,
        inflight: InFlight,
        lease_seconds: float,
        policy: RetryPolicy,
        rng: random.Random | None = None,
        doorbells: Doorbells | None = None,
        follower: Follower | None = None,
        defer: Defer = run_on_a_thread,
    ) -> None:
        self.driver = driver
        self.doorbells = doorbells or Doorbells(queues)
        # Takes the workflow steps of the ends written, once they have committed.
        self.follower = follower or Follower(driver, deadline=deadline, doorbells=self.doorbells)
        self.owner = owner
        self.queues = list(queues)
        self.clock = clock
        self.deadline = deadline
        self.inflight = inflight
        self.lease_seconds = lease_seconds
        self.policy = policy
        self.rng = rng
        self.defer = defer  # how write_apart() leaves the calling thread
        self.jobs_run = 0  # attempts whose outcome this process wrote
        # Written outcomes by kind (events.OUTCOMES' keys, "lease_lost") since take_counts().
        self.counts: Counter[str] = Counter()
        self._counting = threading.Lock()

    def record(self, claimed: ClaimedJob, result: HandlerResult) -> JobStatus | None:
        """Write one attempt's outcome now; the job's new status, or None if the lease was lost."""
        [written] = self.write([Outcome(claimed, result)])
        return None if written is None else written.status

    def write(
        self,
        outcomes: Sequence[Outcome],
        statement: Statement | None = None,
        *,
        now: datetime | None = None,
        carried_by: str | None = None,
        not_written: Unwritten | None = None,
    ) -> list[Settlement | None]:
        """Write ``outcomes`` in one batch: decide each (at ``now``), write them in
        ``statement``, let the jobs leave the held set, then report each as written.

        The statement is the settler's batch (:meth:`settle_batch`) unless a claim
        carries the outcomes: it passes its own, the queue it claims for (``carried_by``,
        see :meth:`written`) and ``not_written``, which takes the outcomes back, still
        held, if the statement raises (the error is raised again). With no
        ``not_written`` they are given up on: the jobs leave the held set and their
        leases run out as after a crash. Returns each outcome as written, None where the
        lease was lost.
        """
        if not outcomes:
            return []
        try:
            decided = self.decide(outcomes, now or self.clock.now())
            decided, settled = (statement or self.settle_batch)(decided)
        except BaseException:
            (not_written or self.release_held)(outcomes)
            raise
        self.release_held(outcomes)
        return self.written(decided, settled, carried_by)

    def write_apart(self, outcomes: Sequence[Outcome]) -> None:
        """:meth:`write` on a thread of its own (``defer``): for the heartbeat, which must
        not wait out an outage. Outcomes it cannot write are logged; their leases run out."""

        def write() -> None:
            try:
                self.write(outcomes)
            except Exception:
                logger.exception(
                    "could not record the outcome of job(s) %s; their leases will run out",
                    ", ".join(f"#{o.claimed.id}" for o in outcomes),
                    extra={"event": "worker_error", "job_ids": [o.claimed.id for o in outcomes]},
                )

        if outcomes:
            self.defer(write)

    def decide(self, outcomes: Sequence[Outcome], now: datetime) -> list[Decided]:
        """Each outcome with its settlement. One that cannot be decided (a delay no date
        holds, a bad setting) is decided as its attempt's failure instead: nothing one job
        brings costs the others their outcomes."""
        return [self.decide_one(outcome, now) for outcome in outcomes]

    def decide_one(self, outcome: Outcome, now: datetime) -> Decided:
        try:
            result = outcome.result
            # Read for a snooze only: a setting read costs 2 µs, and every outcome made one.
            snoozed = result.outcome == AttemptOutcome.SNOOZED
            most = int(settings.MAX_SNOOZES) if snoozed else 0
            settlement = decide(outcome.claimed, result, now, self.policy, self.rng, most)
            return Decided(outcome, settlement)
        except Exception as exc:
            return self.failed_instead(outcome, now, "could not be decided", exc)

    def failed_instead(self, outcome: Outcome, now: datetime, why: str, exc: Exception) -> Decided:
        """``outcome`` as its attempt's failure, decided under the default retry policy (which
        cannot fail), logged with why."""
        claimed = outcome.claimed
        error = f"{type(exc).__name__}: {exc}"
        report_lease(
            "job_outcome_refused",
            *claimed.pair,
            outcome=outcome.result.outcome,
            why=why,
            error=error,
        )
        failure = replace(outcome, result=unrecorded(claimed, outcome.result, why, exc))
        return Decided(failure, decide(claimed, failure.result, now, RetryPolicy(), self.rng))

    def settle_batch(self, decided: list[Decided]) -> tuple[list[Decided], Settled]:
        """The settler's statement: the batch in one write, through a brief outage.

        Retries for up to a lease (a release at shutdown: up to the grace
        period). If the database refuses the batch, each outcome is written
        on its own (:meth:`settle_each`).
        """
        patience = self.lease_seconds
        if all(d.outcome.result.outcome == AttemptOutcome.RELEASED for d in decided):
            patience = min(patience, float(settings.SHUTDOWN_GRACE_SECONDS))
        try:
            return decided, self.settle([d.settlement for d in decided], patience)
        except ROW_ERRORS:
            return self.settle_each(decided, patience)

    def settle(self, settlements: Sequence[Settlement], patience: float) -> Settled:
        def write() -> Settled:
            with self.deadline(f"recording {len(settlements)} outcome(s)"):
                return self.driver.settle(settlements)

        return with_backoff(write, give_up_after=patience, using=self.driver.using)

    def settle_each(
        self, decided: Sequence[Decided], patience: float
    ) -> tuple[list[Decided], Settled]:
        """After the database refused a batch: each outcome on its own, and one it refuses
        again as its attempt's failure. One refused even so is left to its lease, which
        runs out as after a crash."""
        final: list[Decided] = []
        lost: list[Settlement] = []
        cancelled: set[tuple[int, int]] = set()
        to_follow: set[int] = set()
        for one in decided:
            try:
                settled = self.settle([one.settlement], patience)
            except ROW_ERRORS as exc:
                one = self.failed_instead(one.outcome, one.settlement.ended_at, "was refused", exc)
                try:
                    settled = self.settle([one.settlement], patience)
                except ROW_ERRORS as again:
                    error = f"{type(again).__name__}: {again}"
                    report_lease("job_outcome_unrecorded", *one.settlement.pair, error=error)
                    settled = Settled([one.settlement])
            final.append(one)
            lost += settled.lost
            cancelled |= settled.cancelled
            to_follow |= settled.to_follow
        return final, Settled(lost, frozenset(cancelled), frozenset(to_follow))

    def release_held(self, outcomes: Sequence[Outcome]) -> None:
        """Their outcomes are written (or given up on): the jobs leave the held set."""
        for outcome in outcomes:
            if outcome.held is not None:
                self.inflight.settled(outcome.held)

    def written(
        self, decided: Sequence[Decided], settled: Settled, carried_by: str | None = None
    ) -> list[Settlement | None]:
        """Each outcome as written, None where the lease was lost; wake the queues of the jobs
        due again, and those of jobs that held a limited queue's slots where a worker waits
        for one (but the queue whose claim carried the outcomes, ``carried_by``: a limited
        claim wakes its own queue in its transaction), then report each outcome."""
        final = [settled.as_written(d.settlement) for d in decided]
        ends = [
            (claimed, s)
            for claimed, s in zip((d.outcome.claimed for d in decided), final, strict=True)
            if s
        ]
        due = [claimed.queue for claimed, s in ends if due_again(s)]
        freed = [c.queue for c, _ in ends if c.holds_slot and c.queue != carried_by]
        self.wake(due)
        self.wake_freed([queue for queue in freed if queue not in due])
        kinds = report_written(
            [
                (d.outcome.claimed, d.outcome.result, d.settlement, written)
                for d, written in zip(decided, final, strict=True)
            ]
        )
        self.follow(settled, [d.settlement for d in decided])
        with self._counting:
            self.jobs_run += len(decided) - len(settled.lost)
            self.counts.update(kinds)
        return final

    def take_counts(self) -> Counter[str]:
        """The written outcomes by kind since the last call (the worker's summary)."""
        with self._counting:
            counts, self.counts = self.counts, Counter()
        return counts

    def hand_back(self, pairs: Pairs, now: datetime) -> set[int]:
        """Hand held jobs back at shutdown, in one write bounded by the grace period."""
        grace = max(1.0, float(settings.SHUTDOWN_GRACE_SECONDS))
        settlements = [released(job_id, self.owner, attempt, now) for job_id, attempt in pairs]
        with self.deadline("handing jobs back", grace):
            settled = self.driver.settle(settlements)
        for job_id, attempt in sorted(settled.cancelled):
            report_lease("job_cancelled_at_stop", job_id, attempt)
        self.follow(settled, settlements)
        kept = {s.pair for s in settled.lost} | settled.cancelled
        handed_back = {s.job_id for s in settlements if s.pair not in kept}
        if handed_back:
            self.wake(self.queues)  # a settlement names no queue: wake this process's
        return handed_back

    def follow(self, settled: Settled, settlements: Sequence[Settlement]) -> None:
        """Hand the ends ``settled`` wrote of jobs in a workflow to the follower, at the
        time the last of them ended."""
        if settled.to_follow:
            now = max(s.ended_at for s in settlements if s.job_id in settled.to_follow)
            self.follower.submit(settled.to_follow, now)

    def wake_freed(self, queues: Sequence[str]) -> None:
        """Slots of limited ``queues`` are free: wake those a worker waits for a slot of
        (:meth:`~django_jobs.db.limits.FlowControl.wake_freed`), this process's dispatchers
        at once. Best effort, as :meth:`wake`."""
        if not queues:
            return
        try:
            with self.deadline("waking the queues"):
                woken = self.driver.flow.wake_freed(queues)
        except DatabaseError as exc:
            logger.debug("wake-up not sent: %s", exc, extra={"event": "wake_failed"})
            woken = list(queues)  # unknown: this process's dispatchers look for themselves
        self.doorbells.ring(woken)

    def wake(self, queues: Sequence[str]) -> None:
        """Wake the workers of ``queues``: a job there is due again at once (handed back at a
        stop, or retried with no backoff), or a limited queue's slot is free, so no worker
        need wait for its poll: this process's dispatchers at once (no database wake-up
        reaches them without LISTEN), the others through the database. Best effort: a lost
        wake-up costs only that poll."""
        if not queues:
            return
        self.doorbells.ring(queues)
        try:
            with self.deadline("waking the queues"):
                self.driver.wake(queues)
        except DatabaseError as exc:
            logger.debug("wake-up not sent: %s", exc, extra={"event": "wake_failed"})
