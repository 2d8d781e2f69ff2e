"""Run one claimed job's handler, and log how its attempt ended."""

from __future__ import annotations

import logging
from typing import Any

from .. import signals
from ..context import JobContext
from ..db import ClaimedJob
from ..events import send
from ..exceptions import JobCancelled, PayloadError, ResultError
from ..models import AttemptOutcome, JobStatus
from ..outcomes import HandlerResult, Settlement
from ..payloads import decode_payload, encode_payload
from ..registry import get_definition

logger = logging.getLogger(__name__)


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
    send(
        signals.job_started,
        job_id=claimed.id,
        name=claimed.name,
        queue=claimed.queue,
        attempt=claimed.attempt,
    )
    try:
        definition = get_definition(claimed.name)
        ctx.payload = decode_payload(claimed.raw_payload)
        value = definition.func(ctx, ctx.payload)
        if value is None:
            return SUCCEEDED
        result = stored_result(value)
    except JobCancelled as exc:
        outcome = AttemptOutcome.RELEASED if ctx.cancelled else AttemptOutcome.FAILED
        return _ended(claimed, outcome, exc)
    except BaseException as exc:  # SystemExit, KeyboardInterrupt too: the handler's, not ours
        return _ended(claimed, AttemptOutcome.FAILED, exc)
    return HandlerResult(AttemptOutcome.SUCCEEDED, result=result)


SUCCEEDED = HandlerResult(AttemptOutcome.SUCCEEDED)


def stored_result(value: Any) -> str:
    """A handler's return value as JSON text, or :class:`ResultError` saying why it is not."""
    try:
        return encode_payload(value, what="the return value")
    except PayloadError as exc:
        raise ResultError(f"the handler's return value cannot be stored: {exc}") from None


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


def log_outcome(claimed: ClaimedJob, result: HandlerResult, settled: Settlement) -> None:
    """One line per attempt: successes at DEBUG, failures at WARNING, dead letters at ERROR."""
    extra = {"job_id": claimed.id, "attempt": claimed.attempt, "job_name": claimed.name}
    label = f"job {claimed.name} #{claimed.id}"
    status = settled.status
    if status == JobStatus.SUCCEEDED:
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "%s succeeded on attempt %s",
                label,
                claimed.attempt,
                extra={"event": "job_succeeded", **extra},
            )
    elif status == JobStatus.CANCELLED:
        # Cancelled while it ran; an attempt that ended otherwise says how.
        how = "" if result.outcome == AttemptOutcome.CANCELLED else f" ({result.error})"
        logger.info(
            "%s cancelled on attempt %s%s",
            label,
            claimed.attempt,
            how,
            extra={"event": "job_cancelled", **extra},
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
            settled.run_at,
            result.error,
            result.traceback,
            extra={"event": "job_failed", **extra},
        )


def log_lease_lost(settled: Settlement) -> None:
    logger.warning(
        "job #%s attempt %s: lease lost before its outcome (%s) was recorded; dropped",
        settled.job_id,
        settled.attempt,
        settled.outcome,
        extra={"event": "job_lease_lost", "job_id": settled.job_id, "attempt": settled.attempt},
    )
