"""How a job's attempt ends, whoever ends it: pure functions, no database.

:func:`decide` turns a claimed job and its handler's result into a
:class:`Settlement`: the job's next status, when it runs again, what is
recorded on the attempt. The database driver only writes what was decided
(:meth:`django_jobs.db.base.Driver.settle`), fenced by owner and attempt.
:func:`released` is an attempt handed back at a stop; :func:`lapsed` one whose
lease the rescuer took back; :func:`exhausted` what a pending job with no
attempt left is written with.
"""

from __future__ import annotations

import random
import traceback
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import partial

from .conf import MAX_DELAY_SECONDS
from .db.records import ClaimedJob, Settlement, UnleasedRow
from .exceptions import PermanentFailure
from .models import AttemptOutcome, JobStatus
from .payloads import decode_payload
from .redaction import masker
from .retry_policy import RetryPolicy, next_run_at
from .text import keep_end, storable_text

ERROR_LIMIT = 2000
#: How much of a traceback an attempt keeps: its first line and its end, where the frame that
#: raised is (see :func:`~django_jobs.text.keep_end`).
TRACEBACK_LIMIT = 10_000
RELEASED_ERROR = "Released: the worker stopped before the handler finished"
EXHAUSTED_ERROR = "NoAttemptsLeft: pending with no attempt left"


def error_text(exc: BaseException, limit: int | None = ERROR_LIMIT) -> str:
    """Exception type and message, no stack trace, storable, capped at 2,000 characters."""
    try:
        message = str(exc)
    except Exception:
        message = "<the exception's message could not be read>"
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return storable_text(text)[:limit]


@dataclass(frozen=True)
class HandlerResult:
    """How a handler ended: the attempt's outcome and, for a failure, its error."""

    outcome: AttemptOutcome
    error: str = ""
    traceback: str = ""  # stored on the attempt and logged; payload values masked like ``error``
    result: str | None = None  # a success's return value, as JSON text (None: no value)
    delay: float = 0.0  # snoozed: seconds until the job is due again
    snoozes: int = 0  # snoozed: the job's snoozes before this one
    permanent: bool = False  # failed in a way no retry can mend: dead-lettered at once

    @classmethod
    def from_exception(
        cls, outcome: AttemptOutcome, exc: BaseException, raw_payload: object
    ) -> HandlerResult:
        """The attempt's end, with the secrets of the payload as stored masked.

        ``raw_payload`` is the column's value as claimed, not the handler's
        copy: a secret the handler popped or changed is still masked. An
        exception with a ``stored_traceback`` (text) is stored with that instead
        of its own: the one of the task it stands for.
        """
        mask = masker(_stored_payload(raw_payload))
        trace = getattr(exc, "stored_traceback", None)  # the task runner's TaskFailed has one
        if not isinstance(trace, str):
            trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        error = mask(error_text(exc, limit=None))[:ERROR_LIMIT]
        permanent = isinstance(exc, PermanentFailure)
        return cls(
            outcome,
            error,
            keep_end(storable_text(mask(trace)), TRACEBACK_LIMIT),
            permanent=permanent,
        )


def _stored_payload(raw_payload: object) -> object:
    try:
        return decode_payload(raw_payload)
    except Exception:
        return None  # not decodable: nothing of it is in the error either


def decide(
    claimed: ClaimedJob,
    result: HandlerResult,
    now: datetime,
    policy: RetryPolicy,
    rng: random.Random | None = None,
    max_snoozes: int = 100,
) -> Settlement:
    """What ``result`` means for ``claimed`` at ``now``.

    Succeeded finishes the job. A failure or a timeout makes it due again
    after the policy's backoff, or dead-letters it when no attempt is left, or
    at once when no retry can mend it (``result.permanent``).
    Released hands it back due now and gives its attempt back. Cancelled
    finishes it without a retry. Snoozed makes it due after its delay and
    gives its attempt back, unless the job has snoozed ``max_snoozes`` times
    already: then it is dead-lettered, saying so.
    """
    error = result.error[:ERROR_LIMIT]

    def settled(status: JobStatus, **changes: object) -> Settlement:
        return Settlement(
            claimed.id,
            claimed.owner,
            claimed.attempt,
            result.outcome,
            status,
            now,
            error,
            traceback=result.traceback,
            **changes,  # type: ignore[arg-type]
        )

    outcome = result.outcome
    if outcome == AttemptOutcome.SUCCEEDED:
        return settled(JobStatus.SUCCEEDED, finished_at=now, last_error="", result=result.result)
    if outcome == AttemptOutcome.RELEASED:
        return settled(JobStatus.PENDING, run_at=now, give_back=True)
    if outcome == AttemptOutcome.CANCELLED:
        return settled(JobStatus.CANCELLED, finished_at=now, last_error=error)
    if outcome == AttemptOutcome.SNOOZED:
        if result.snoozes >= max_snoozes:
            error = (
                f"Snoozed {result.snoozes + 1} times, past DJANGO_JOBS['MAX_SNOOZES'] "
                f"({max_snoozes}): dead-lettered rather than snoozed again"
            )
            return replace(
                settled(JobStatus.DEAD_LETTERED, finished_at=now, last_error=error), error=error
            )
        return settled(JobStatus.PENDING, run_at=later(now, result.delay), give_back=True)
    retry_at = None
    if not result.permanent:
        retry_at = next_run_at(claimed.attempts_used, claimed.max_attempts, now, policy, rng)
    if retry_at is None:
        return settled(JobStatus.DEAD_LETTERED, finished_at=now, last_error=error)
    return settled(JobStatus.PENDING, run_at=retry_at, last_error=error)


def later(now: datetime, seconds: float) -> datetime:
    """``now`` plus ``seconds``, at most :data:`~django_jobs.conf.MAX_DELAY_SECONDS` of them:
    no delay a handler brings can make a date past what a datetime holds."""
    return now + timedelta(seconds=min(seconds, MAX_DELAY_SECONDS))


def unrecorded(
    claimed: ClaimedJob, result: HandlerResult, why: str, exc: Exception
) -> HandlerResult:
    """The failed attempt that stands for ``result`` when its outcome could not be decided
    or written (``why``): the job is retried, or dead-lettered, like any other failure."""
    failure = HandlerResult.from_exception(AttemptOutcome.FAILED, exc, claimed.raw_payload)
    error = f"The attempt's outcome ({str(result.outcome)}) {why}: {failure.error}"
    return replace(failure, error=error[:ERROR_LIMIT])


def snoozed(seconds: float, snoozes: int) -> HandlerResult:
    """A handler that raised :class:`~django_jobs.exceptions.Snooze` (its ``snoozes``-th
    time before)."""
    return HandlerResult(
        AttemptOutcome.SNOOZED, f"Snoozed for {seconds:g} s", delay=seconds, snoozes=snoozes
    )


def cancelled(claimed: ClaimedJob) -> HandlerResult:
    """The end of an attempt whose job ``cancel_job()`` stopped while it ran."""
    return HandlerResult(
        AttemptOutcome.CANCELLED,
        f"Cancelled: cancel_job() stopped attempt {claimed.attempt} while it ran",
    )


def released(job_id: int, owner: str, attempt: int, now: datetime) -> Settlement:
    """A job handed back at shutdown, its handler still running: due now, attempt given back."""
    return Settlement(
        job_id,
        owner,
        attempt,
        AttemptOutcome.RELEASED,
        JobStatus.PENDING,
        now,
        RELEASED_ERROR,
        run_at=now,
        give_back=True,
    )


def lapsed(row: UnleasedRow, now: datetime) -> Settlement:
    """A running job whose lease lapsed (its worker died, or was cut off), taken back at
    ``now``: a failed attempt, outcome ``lease_expired``.

    The job is due again at once, dead-lettered when no attempt is left, or cancelled when
    ``cancel_job()`` asked (it does not run again). ``owner`` is ``""`` for a row that
    had none.
    """
    error = lease_lost_error(row)[:ERROR_LIMIT]
    ended = partial(
        Settlement,
        row.id,
        row.lease_owner or "",
        row.attempt,
        AttemptOutcome.LEASE_EXPIRED,
        ended_at=now,
        error=error,
        last_error=error,
    )
    if row.cancel_requested_at is not None:
        return ended(JobStatus.CANCELLED, finished_at=now)
    if row.attempts_used >= row.max_attempts:
        return ended(JobStatus.DEAD_LETTERED, finished_at=now)
    return ended(JobStatus.PENDING, run_at=now)


def lease_lost_error(row: UnleasedRow) -> str:
    """Why ``row``'s attempt ended: whose lease was lost, or that it had none."""
    if not row.lease_owner:
        return f"LeaseExpired: running with no lease owner on attempt {row.attempt}"
    held = f"worker {row.lease_owner}"
    if row.lease_expires_at is None:
        return f"LeaseExpired: {held} held attempt {row.attempt} with no lease expiry"
    return f"LeaseExpired: {held} lost its lease on attempt {row.attempt}"


def exhausted(now: datetime) -> dict[str, object]:
    """The columns a pending job with no attempt left (a row written by hand, say) is
    dead-lettered with at ``now``: no attempt ends, none could start."""
    return {
        "status": JobStatus.DEAD_LETTERED,
        "finished_at": now,
        "last_error": EXHAUSTED_ERROR,
        "lease_owner": None,
        "lease_expires_at": None,
    }
