"""The jobs a worker process is running: their leases, deadlines and hand-back.

One heartbeat thread per process calls :meth:`InFlight.beat`, which renews
every due lease in one statement, gives up leases that could not be renewed
in time (cancelling their handlers), and times out handlers past their
``timeout``. A job whose attempt is over (given up, timed out, released) has
its handler's late result dropped.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connections

from .claims import ClaimedJob, Claimer
from .context import JobContext
from .execution import HandlerResult
from .heartbeat import LeaseKeeper, Renewal
from .leases import renew_leases
from .models import AttemptOutcome

logger = logging.getLogger(__name__)

Recorder = Callable[[ClaimedJob, HandlerResult], object]
Renewer = Callable[
    [Claimer, str, list[tuple[int, int]], datetime, float], tuple[set[int], datetime]
]


@dataclass
class Held:
    claimed: ClaimedJob
    ctx: JobContext
    keeper: LeaseKeeper
    timeout_at: datetime | None
    over: bool = False


class InFlight:
    def __init__(
        self,
        claimer: Claimer,
        owner: str,
        lease_seconds: float,
        beat_seconds: float,
        record: Recorder,
        renew: Renewer = renew_leases,
    ) -> None:
        self.renew = renew
        self.claimer = claimer
        self.owner = owner
        self.lease_seconds = lease_seconds
        self.beat_seconds = beat_seconds
        self.record = record
        self._held: dict[tuple[int, int], Held] = {}
        self._lock = threading.Lock()

    def add(
        self, claimed: ClaimedJob, ctx: JobContext, now: datetime, timeout: float | None
    ) -> Held:
        keeper = LeaseKeeper.start(
            now, claimed.lease_expires_at, self.lease_seconds, self.beat_seconds
        )
        timeout_at = now + timedelta(seconds=timeout) if timeout else None
        held = Held(claimed, ctx, keeper, timeout_at)
        with self._lock:
            self._held[(claimed.id, claimed.attempt)] = held
        return held

    def finish(self, held: Held) -> bool:
        """The handler returned: True if its result is still this worker's to record."""
        with self._lock:
            self._held.pop((held.claimed.id, held.claimed.attempt), None)
            over, held.over = held.over, True
        if over:
            logger.warning(
                "job #%s attempt %s: handler returned after its attempt was over; result dropped",
                held.claimed.id,
                held.claimed.attempt,
                extra={"event": "job_late_result", "job_id": held.claimed.id},
            )
        return not over

    def _end(self, held: Held) -> bool:
        """Mark an attempt over from the heartbeat side; False if the handler beat us to it."""
        with self._lock:
            if held.over:
                return False
            held.over = True
            self._held.pop((held.claimed.id, held.claimed.attempt), None)
        held.ctx.cancel()
        return True

    def snapshot(self) -> list[Held]:
        with self._lock:
            return list(self._held.values())

    # -- the heartbeat ----------------------------------------------------

    def beat(self, now: datetime) -> None:
        """One heartbeat pass at ``now``."""
        held = self.snapshot()
        due = [h for h in held if h.keeper.is_due(now)]
        if due:
            self._renew(due, now)
        for h in held:
            if not h.over and not h.keeper.check(now):
                self._give_up(h, "its lease could not be renewed in time")
            elif h.timeout_at is not None and now >= h.timeout_at and self._end(h):
                self._time_out(h)

    def _renew(self, due: list[Held], now: datetime) -> None:
        pairs = [(h.claimed.id, h.claimed.attempt) for h in due]
        deadline = min(h.keeper.try_deadline(now) for h in due)
        outcome: dict[str, object] = {}

        def attempt() -> None:
            try:
                outcome["result"] = self.renew(
                    self.claimer, self.owner, pairs, now, self.lease_seconds
                )
            except Exception as exc:
                outcome["error"] = exc
            finally:
                connections.close_all()

        thread = threading.Thread(target=attempt, name="django-jobs-renew", daemon=True)
        thread.start()
        thread.join(deadline)  # a hung database cannot hold the handler past its lease
        result = outcome.get("result")
        if not isinstance(result, tuple):
            logger.warning(
                "lease renewal failed (%s); retrying while the lease holds",
                outcome.get("error", "timed out"),
                extra={"event": "lease_renewal_failed"},
            )
            for h in due:
                if not h.keeper.record(Renewal.FAILED, now):
                    self._give_up(h, "its lease could not be renewed in time")
            return
        renewed, expires = result
        for h in due:
            if h.claimed.id in renewed:
                h.keeper.record(Renewal.RENEWED, now, expires)
            else:
                h.keeper.record(Renewal.REFUSED, now)
                self._give_up(h, "another worker holds its lease")

    def _give_up(self, held: Held, why: str) -> None:
        if self._end(held):
            logger.warning(
                "job #%s attempt %s: lease given up, %s; handler cancelled, nothing recorded",
                held.claimed.id,
                held.claimed.attempt,
                why,
                extra={"event": "job_lease_lost", "job_id": held.claimed.id},
            )

    def _time_out(self, held: Held) -> None:
        logger.warning(
            "job #%s attempt %s: timed out; handler cancelled",
            held.claimed.id,
            held.claimed.attempt,
            extra={"event": "job_timed_out", "job_id": held.claimed.id},
        )
        error = f"TimedOut: handler ran past its timeout on attempt {held.claimed.attempt}"
        self._record_guarded(held, HandlerResult(AttemptOutcome.TIMED_OUT, error))

    # -- shutdown ---------------------------------------------------------

    def cancel_all(self) -> None:
        """Ask every running handler to stop (a graceful shutdown began)."""
        for held in self.snapshot():
            held.ctx.cancel()

    def release_all(self) -> int:
        """Hand every job still running back to the queue without using an attempt."""
        released = 0
        for held in self.snapshot():
            if self._end(held):
                error = "Released: the worker stopped before the handler finished"
                if self._record_guarded(held, HandlerResult(AttemptOutcome.RELEASED, error)):
                    released += 1
        return released

    def _record_guarded(self, held: Held, result: HandlerResult) -> bool:
        try:
            self.record(held.claimed, result)
            return True
        except Exception:
            logger.exception(
                "job #%s: could not record %s; its lease will run out",
                held.claimed.id,
                result.outcome,
                extra={"event": "worker_error", "job_id": held.claimed.id},
            )
            return False
