"""Run one claimed job and record how its attempt ended."""

from __future__ import annotations

import logging
import random

from .claims import ClaimedJob, Claimer
from .clock import Clock
from .context import JobContext
from .exceptions import JobCancelled
from .leases import error_text, settle
from .models import AttemptOutcome, JobStatus
from .payloads import decode_payload
from .registry import get_definition
from .retries import RetryPolicy, next_run_at

logger = logging.getLogger(__name__)


def make_context(claimed: ClaimedJob, payload: object) -> JobContext:
    return JobContext(
        job_id=claimed.id,
        name=claimed.name,
        queue=claimed.queue,
        attempt=claimed.attempt,
        payload=payload,
    )


def execute(
    claimed: ClaimedJob,
    claimer: Claimer,
    clock: Clock,
    policy: RetryPolicy,
    rng: random.Random | None = None,
    ctx: JobContext | None = None,
) -> JobStatus | None:
    """Run the handler of ``claimed`` and settle its attempt.

    An unknown job name or a payload that does not decode fails the attempt
    like any error raised by the handler. Returns the job's new status, or
    None when the lease was lost before the outcome could be written.
    """
    extra = {"job_id": claimed.id, "attempt": claimed.attempt, "job_name": claimed.name}
    logger.debug("job #%s started", claimed.id, extra={"event": "job_started", **extra})
    try:
        definition = get_definition(claimed.name)
        payload = decode_payload(claimed.raw_payload)
        if ctx is None:
            ctx = make_context(claimed, payload)
        else:
            ctx.payload = payload
        definition.func(ctx, payload)
    except JobCancelled as exc:
        if ctx is not None and ctx.cancelled:
            return settle(
                claimer,
                claimed.id,
                claimed.owner,
                claimed.attempt,
                outcome=AttemptOutcome.RELEASED,
                now=clock.now(),
                error=error_text(exc),
            )
        return _fail(claimed, claimer, clock, policy, rng, exc, extra)
    except Exception as exc:
        return _fail(claimed, claimer, clock, policy, rng, exc, extra)
    status = settle(
        claimer,
        claimed.id,
        claimed.owner,
        claimed.attempt,
        outcome=AttemptOutcome.SUCCEEDED,
        now=clock.now(),
    )
    if status is not None:
        logger.info(
            "job %s #%s succeeded on attempt %s",
            claimed.name,
            claimed.id,
            claimed.attempt,
            extra={"event": "job_succeeded", **extra},
        )
    return status


def _fail(
    claimed: ClaimedJob,
    claimer: Claimer,
    clock: Clock,
    policy: RetryPolicy,
    rng: random.Random | None,
    exc: Exception,
    extra: dict[str, object],
) -> JobStatus | None:
    now = clock.now()
    retry_at = next_run_at(claimed.attempts_used, claimed.max_attempts, now, policy, rng)
    status = settle(
        claimer,
        claimed.id,
        claimed.owner,
        claimed.attempt,
        outcome=AttemptOutcome.FAILED,
        now=now,
        error=error_text(exc),
        retry_at=retry_at,
    )
    if status == JobStatus.DEAD_LETTERED:
        logger.error(
            "job %s #%s dead-lettered after attempt %s: %s",
            claimed.name,
            claimed.id,
            claimed.attempt,
            error_text(exc),
            exc_info=exc,
            extra={"event": "job_dead_lettered", **extra},
        )
    elif status is not None:
        logger.warning(
            "job %s #%s failed on attempt %s, retry at %s: %s",
            claimed.name,
            claimed.id,
            claimed.attempt,
            retry_at,
            error_text(exc),
            exc_info=exc,
            extra={"event": "job_failed", **extra},
        )
    return status
