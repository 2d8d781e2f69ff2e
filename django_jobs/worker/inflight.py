"""The jobs a worker process is running: their leases, deadlines and hand-back.

A job is held from its claim until its outcome is durably written (or its
attempt is over): while the settler has its outcome queued, its lease is
still renewed. One heartbeat thread per process calls :meth:`InFlight.beat`, which renews
every due lease in one statement, gives up leases that could not be renewed
in time (cancelling their handlers), and times out handlers past their
``timeout``. A job whose attempt is over (given up, timed out, released) has
its handler's late result dropped.

The held set writes no outcome: :meth:`InFlight.beat` returns the timed-out
jobs' outcomes and :meth:`InFlight.end_running` the jobs to hand back at a
stop; their caller hands them to the outcome writer
(:class:`~django_jobs.worker.recording.OutcomeWriter`), which releases held
jobs through this set: each part is built once, the held set first.

The heartbeat itself never waits on the database past the give-up point:
the renewal runs on a thread of its own (:class:`~django_jobs.worker.deadlines.OffThread`)
and is waited for only until the earliest give-up point among the leases
it renews; then the leases are judged at the time the wait ended. Writes
that may wait out an outage (a timed-out job's outcome) never run on the
heartbeat's thread: its caller hands them to the writer's own thread
(:meth:`~django_jobs.worker.recording.OutcomeWriter.write_apart`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from ..context import JobContext
from ..db import ClaimedJob, Driver
from ..db.records import Pairs, Progress, Renewed
from ..events import report_lease
from ..models import AttemptOutcome
from ..outcomes import HandlerResult
from ..text import first_line
from .deadlines import CallerBusy, DatabaseTimeout, Deadlines, OffThread
from .heartbeat import LeaseKeeper, Renewal

logger = logging.getLogger(__name__)

# renew(pairs, now, timeout, progress) -> Renewed(ids renewed, new expiry, ids with a
# cancel request); timeout: seconds it may take; progress: reports to write, by job id.
Renewer = Callable[[Pairs, datetime, float, dict[int, Progress]], Renewed]
#: A job's progress is written at most this often.
PROGRESS_SECONDS = 1.0


def refuse_renewals(
    pairs: Pairs, now: datetime, timeout: float, progress: dict[int, Progress]
) -> Renewed:
    raise RuntimeError("InFlight was given no way to renew leases")


def driver_renewal(
    driver: Driver, owner: str, lease_seconds: float, beat_seconds: float, deadline: Deadlines
) -> Renewer:
    """The heartbeat's renewal through ``driver``, cut off after its ``timeout`` (the give-up
    point); it writes the jobs' progress reports in the same statement."""

    def renew(
        pairs: Pairs, now: datetime, timeout: float, progress: dict[int, Progress]
    ) -> Renewed:
        with deadline("the lease renewal", timeout):
            return driver.renew(
                owner, pairs, now, lease_seconds, give_up_seconds=beat_seconds, progress=progress
            )

    return renew


def may_be_the_rows(error: BaseException | None) -> bool:
    """Whether a failed renewal may have failed on what its rows carry, not on the database:
    it raised at once, rather than running out of time."""
    return error is not None and not isinstance(error, (TimeoutError, CallerBusy, DatabaseTimeout))


def error_line(error: BaseException | None) -> str:
    if error is None:
        return "no time left before the give-up point"
    return f"{type(error).__name__}: {first_line(error)}"


@dataclass
class Held:
    claimed: ClaimedJob
    ctx: JobContext
    keeper: LeaseKeeper
    timeout_at: datetime | None
    over: bool = False  # the attempt ended on the heartbeat's side (given up, timed out)
    returned: bool = False  # the handler returned: its outcome waits for the settler
    cancel_requested: bool = False  # cancel_job() asked: the attempt ends cancelled
    progress_sent: int = 0  # the version of the last progress report written
    progress_sent_at: datetime | None = None
    #: Stops the handler when its attempt ends on the heartbeat's side or is cancelled
    #: (an async handler's task is cancelled); None: the handler only reads ``ctx``.
    interrupt: Callable[[], None] | None = None

    def stop(self) -> None:
        """Cancel the handler: ``ctx.cancelled``, and its task cancelled if it has one."""
        self.ctx.cancel()
        if self.interrupt is not None:
            self.interrupt()

    def progress_due(self, now: datetime) -> bool:
        """A newer report waits, and the last write is at least a second old."""
        version, _ = self.ctx.reported_progress()
        if self.over or version == self.progress_sent:
            return False
        last = self.progress_sent_at
        return last is None or (now - last).total_seconds() >= PROGRESS_SECONDS


@dataclass(slots=True)
class Outcome:
    """A result waiting to be written; ``held`` is its entry in the held set, if any.
    Read-only, not frozen: one per job (:class:`~django_jobs.db.ClaimedJob`)."""

    claimed: ClaimedJob
    result: HandlerResult
    held: Held | None = None


class InFlight:
    def __init__(
        self,
        owner: str,
        lease_seconds: float,
        beat_seconds: float,
        renew: Renewer | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.owner = owner
        self.monotonic = monotonic  # measures a renewal's wait; tests may hold it still
        self.lease_seconds = lease_seconds
        self.beat_seconds = min(beat_seconds, lease_seconds / 3)
        self.renew: Renewer = renew or refuse_renewals  # the worker gives its driver's
        # One long-lived connection for every renewal, on a thread of its own.
        self.renewer = OffThread("django-jobs-renew", keep_connections=True)
        self.stopping = False
        self._held: dict[tuple[int, int], Held] = {}
        self._lock = threading.Lock()

    def add(
        self,
        claimed: ClaimedJob,
        ctx: JobContext,
        now: datetime,
        timeout: float | None,
        interrupt: Callable[[], None] | None = None,
    ) -> Held:
        keeper = LeaseKeeper.start(
            now, claimed.lease_expires_at, self.lease_seconds, self.beat_seconds
        )
        timeout_at = now + timedelta(seconds=timeout) if timeout else None
        held = Held(claimed, ctx, keeper, timeout_at, interrupt=interrupt)
        with self._lock:
            self._held[claimed.pair] = held
            if self.stopping:
                ctx.cancel()  # claimed just before a stop: the handler starts cancelled
        return held

    def finish(self, held: Held) -> bool:
        """The handler returned: True if its result is still this worker's to record.

        The job stays held, its lease renewed, until :meth:`settled`.
        """
        with self._lock:
            over = held.over
            if over:
                self._held.pop(held.claimed.pair, None)
            else:
                held.returned = True
        if over:
            report_lease("job_late_result", *held.claimed.pair)
        return not over

    def settled(self, held: Held) -> None:
        """Its outcome is written (or given up on): the job is no longer held."""
        with self._lock:
            held.over = True
            self._held.pop(held.claimed.pair, None)

    def _end(self, held: Held) -> bool:
        """Mark an attempt over from the heartbeat side; False if the handler beat us to it."""
        with self._lock:
            if held.over:
                return False
            held.over = True
            self._held.pop(held.claimed.pair, None)
        held.stop()
        return True

    def snapshot(self) -> list[Held]:
        with self._lock:
            return list(self._held.values())

    # -- the heartbeat ----------------------------------------------------

    def beat(self, now: datetime) -> list[Outcome]:
        """One heartbeat pass at ``now``; returns the outcomes of the handlers it timed out,
        for its caller to have written off the heartbeat's thread."""
        held = self.snapshot()
        reporting = [h for h in held if h.progress_due(now)]
        if reporting or any(h.keeper.is_due(now) for h in held):
            # Leases due within half a beat go along, so that the leases of jobs
            # claimed at different moments share one statement a beat; so do
            # the jobs with progress to write, whose leases it renews too.
            soon = now + timedelta(seconds=self.beat_seconds / 2)
            due = [h for h in held if h.keeper.is_due(soon) or h in reporting]
            now = self._renew(due, now)
        timed_out = []
        for h in held:
            if not h.over and not h.keeper.check(now):
                self._give_up(h, "its lease could not be renewed in time")
            elif (
                h.timeout_at is not None and not h.returned and now >= h.timeout_at and self._end(h)
            ):
                timed_out.append(self._time_out(h))
        return timed_out

    def _renew(self, due: list[Held], now: datetime) -> datetime:
        """Renew ``due`` leases, waiting at most until the first give-up point.

        The reports of jobs with progress ride in the same statement. If it
        fails, one report may be what the database refused (nothing a job
        brings may cost the others their leases): the leases are renewed
        alone at once, then each report is written on its own, and one the
        database refuses is dropped. Every call is made before the first
        give-up point, so each renews from ``now``. Returns the time at which
        the wait ended: ``now`` plus the time spent.
        """
        pairs = [(h.claimed.id, h.claimed.attempt) for h in due]
        reports = {h.claimed.id: h.ctx.reported_progress() for h in due}
        progress = {  # the reports not written yet: a written (or dropped) one is not sent again
            h.claimed.id: p
            for h in due
            if (p := reports[h.claimed.id][1]) is not None
            and reports[h.claimed.id][0] != h.progress_sent
        }
        started = self.monotonic()
        give_up_in = min(h.keeper.time_to_give_up(now) for h in due)

        def left() -> float:
            return give_up_in - (self.monotonic() - started)

        result, error = self._call_renew(pairs, now, give_up_in, progress)
        reported = set(reports)  # the jobs whose report is written (or given up on)
        if result is None and progress and may_be_the_rows(error):
            first_error = error
            result, error = self._call_renew(pairs, now, left(), {})
            if result is not None:
                logger.warning(
                    "lease renewal with progress failed (%s); leases renewed without it",
                    error_line(first_error),
                    extra={"event": "lease_renewal_failed"},
                )
                reported = set(reports) - set(progress)
                reported |= self._write_reports_alone(due, progress, now, left)
        after = now + timedelta(seconds=self.monotonic() - started)
        if result is None:
            logger.warning(
                "lease renewal failed (%s); retrying while the lease holds",
                error_line(error),
                extra={"event": "lease_renewal_failed"},
            )
            for h in due:
                if not h.keeper.record(Renewal.FAILED, after):
                    self._give_up(h, "its lease could not be renewed in time")
            return after
        renewed, expires, cancel_requested = result
        for h in due:
            if h.claimed.id in renewed:
                h.keeper.record(Renewal.RENEWED, now, expires)
                if h.claimed.id in reported:
                    h.progress_sent, h.progress_sent_at = reports[h.claimed.id][0], now
                if h.claimed.id in cancel_requested:
                    self._request_cancel(h)
            else:
                h.keeper.record(Renewal.REFUSED, after)
                self._give_up(h, "another worker holds its lease, or it lapsed")
        return after

    def _call_renew(
        self, pairs: Pairs, now: datetime, wait: float, progress: dict[int, Progress]
    ) -> tuple[Renewed | None, BaseException | None]:
        """One renewal on the renewer's thread, waited for at most ``wait`` seconds."""
        if wait <= 0:
            return None, None
        try:
            return self.renewer.call(lambda: self.renew(pairs, now, wait, progress), wait), None
        except Exception as exc:
            return None, exc

    def _write_reports_alone(
        self,
        due: list[Held],
        progress: dict[int, Progress],
        now: datetime,
        left: Callable[[], float],
    ) -> set[int]:
        """Write each report in a renewal of its own job; drop one the database refuses.

        Returns the jobs whose report is written or dropped; the others (no
        time left) are tried again at the next beat.
        """
        done: set[int] = set()
        for h in due:
            job_id = h.claimed.id
            if job_id not in progress:
                continue
            pair = [(job_id, h.claimed.attempt)]
            result, error = self._call_renew(pair, now, left(), {job_id: progress[job_id]})
            if result is None and not may_be_the_rows(error):
                break  # out of time, or the database itself: the next beat tries again
            done.add(job_id)
            if result is None:
                report_lease("job_progress_dropped", *h.claimed.pair, error=error_line(error))
        return done

    def _request_cancel(self, held: Held) -> None:
        """``cancel_job()`` asked for it: cancel the handler; its attempt ends cancelled."""
        if held.cancel_requested:
            return
        held.cancel_requested = True
        held.stop()
        report_lease("job_cancel_requested", *held.claimed.pair)

    def _give_up(self, held: Held, why: str) -> None:
        if self._end(held):
            report_lease("job_lease_given_up", *held.claimed.pair, why=why)

    def _time_out(self, held: Held) -> Outcome:
        """The handler ran past its timeout: its attempt's outcome (the job is no longer
        held: its attempt is over)."""
        report_lease("job_timed_out", *held.claimed.pair)
        error = f"TimedOut: handler ran past its timeout on attempt {held.claimed.attempt}"
        return Outcome(held.claimed, HandlerResult(AttemptOutcome.TIMED_OUT, error))

    # -- shutdown ---------------------------------------------------------

    def cancel_all(self) -> None:
        """Ask every running handler to stop, and every one started from now on."""
        with self._lock:
            self.stopping = True
        for held in self.snapshot():
            held.ctx.cancel()

    def running_ids(self) -> list[int]:
        """The jobs whose handler has not returned, by id."""
        return sorted(held.claimed.id for held in self.snapshot() if not held.returned)

    def end_running(self) -> Pairs:
        """End the attempt of every job still running (its handler cancelled, a late result
        dropped) and return them, to be handed back to the queue in one write."""
        running = [held for held in self.snapshot() if not held.returned]
        return sorted(held.claimed.pair for held in running if self._end(held))

    def close(self) -> None:
        self.renewer.close()
