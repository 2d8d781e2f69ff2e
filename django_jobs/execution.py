"""Run one claimed job's handler, and record how its attempt ended."""

from __future__ import annotations

import logging
import random
import traceback
from dataclasses import dataclass

from .claims import ClaimedJob, Claimer
from .clock import Clock
from .context import JobContext
from .exceptions import JobCancelled
from .leases import ERROR_LIMIT, error_text, settle
from .models import AttemptOutcome, JobStatus
from .payloads import decode_payload
from .redaction import masker
from .registry import get_definition
from .retries import RetryPolicy, next_run_at
from .text import storable_text

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class HandlerResult:
    outcome: AttemptOutcome
    error: str = ""
    traceback: str = ""  # for the log; payload values masked like ``error``

    @classmethod
    def from_exception(
        cls, outcome: AttemptOutcome, exc: BaseException, raw_payload: object
    ) -> HandlerResult:
        """The attempt's end, with the secrets of the payload as stored masked.

        ``raw_payload`` is the column's value as claimed, not the handler's
        copy: a secret the handler popped or changed is still masked.
        """
        mask = masker(_stored_payload(raw_payload))
        trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        error = mask(error_text(exc, limit=None))[:ERROR_LIMIT]
        return cls(outcome, error, storable_text(mask(trace)))


def _stored_payload(raw_payload: object) -> object:
    try:
        return decode_payload(raw_payload)
    except Exception:
        return None  # not decodable: nothing of it is in the error either


def make_context(claimed: ClaimedJob) -> JobContext:
    return JobContext(
        job_id=claimed.id,
        name=claimed.name,
        queue=claimed.queue,
        attempt=claimed.attempt,
        payload=None,
    )


def run_handler(claimed: ClaimedJob, ctx: JobContext) -> HandlerResult:
    """Call the job's handler and return how its attempt ended; never raises.

    Whatever the handler raises, ``SystemExit`` and ``KeyboardInterrupt``
    included, is a failed attempt: the worker stops only by its own stop
    event, never by a handler's exception. An unknown name or an undecodable
    payload is a failure too.
    """
    logger.debug(
        "job #%s started",
        claimed.id,
        extra={"event": "job_started", "job_id": claimed.id, "attempt": claimed.attempt},
    )
    try:
        definition = get_definition(claimed.name)
        ctx.payload = decode_payload(claimed.raw_payload)
        definition.func(ctx, ctx.payload)
    except JobCancelled as exc:
        outcome = AttemptOutcome.RELEASED if ctx.cancelled else AttemptOutcome.FAILED
        return _ended(claimed, outcome, exc)
    except BaseException as exc:  # SystemExit, KeyboardInterrupt too: the handler's, not ours
        return _ended(claimed, AttemptOutcome.FAILED, exc)
    return HandlerResult(AttemptOutcome.SUCCEEDED)


def _ended(claimed: ClaimedJob, outcome: AttemptOutcome, exc: BaseException) -> HandlerResult:
    try:
        return HandlerResult.from_exception(outcome, exc, claimed.raw_payload)
    except Exception as failure:  # no traceback logged: it would show the unmasked error
        logger.error(
            "job #%s: its error could not be masked (%s); only its type is recorded",
            claimed.id,
            type(failure).__name__,
            extra={"event": "worker_error", "job_id": claimed.id},
        )
        return HandlerResult(outcome, type(exc).__name__)


def record_result(
    claimed: ClaimedJob,
    result: HandlerResult,
    claimer: Claimer,
    clock: Clock,
    policy: RetryPolicy,
    rng: random.Random | None = None,
) -> JobStatus | None:
    """Settle the attempt. Returns the job's new status, or None if the lease was lost."""
    now = clock.now()
    retry_at = None
    if result.outcome in (AttemptOutcome.FAILED, AttemptOutcome.TIMED_OUT):
        retry_at = next_run_at(claimed.attempts_used, claimed.max_attempts, now, policy, rng)
    status = settle(
        claimer,
        claimed.id,
        claimed.owner,
        claimed.attempt,
        outcome=result.outcome,
        now=now,
        error=result.error,
        retry_at=retry_at,
    )
    _log(claimed, result, status, retry_at)
    return status


def execute(
    claimed: ClaimedJob,
    claimer: Claimer,
    clock: Clock,
    policy: RetryPolicy,
    rng: random.Random | None = None,
) -> JobStatus | None:
    """Run the handler of ``claimed`` on this thread and settle its attempt."""
    result = run_handler(claimed, make_context(claimed))
    return record_result(claimed, result, claimer, clock, policy, rng)


def _log(
    claimed: ClaimedJob, result: HandlerResult, status: JobStatus | None, retry_at: object
) -> None:
    extra = {"job_id": claimed.id, "attempt": claimed.attempt, "job_name": claimed.name}
    label = f"job {claimed.name} #{claimed.id}"
    if status is None:
        return  # settle() logged the lost lease
    if status == JobStatus.SUCCEEDED:
        logger.info(
            "%s succeeded on attempt %s",
            label,
            claimed.attempt,
            extra={"event": "job_succeeded", **extra},
        )
    elif result.outcome == AttemptOutcome.RELEASED:
        logger.info(
            "%s released on attempt %s",
            label,
            claimed.attempt,
            extra={"event": "job_released", **extra},
        )
    elif status == JobStatus.DEAD_LETTERED:
        logger.error(
            "%s dead-lettered after attempt %s: %s\n%s",
            label,
            claimed.attempt,
            result.error,
            result.traceback,
            extra={"event": "job_dead_lettered", **extra},
        )
    else:
        logger.warning(
            "%s %s on attempt %s, retry at %s: %s\n%s",
            label,
            "timed out" if result.outcome == AttemptOutcome.TIMED_OUT else "failed",
            claimed.attempt,
            retry_at,
            result.error,
            result.traceback,
            extra={"event": "job_failed", **extra},
        )
