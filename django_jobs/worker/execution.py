"""Run one claimed job's handler."""

from __future__ import annotations

import logging
from typing import Any

from .. import signals
from ..context import JobContext
from ..db import ClaimedJob
from ..events import send
from ..exceptions import JobCancelled, PayloadError, ResultError
from ..models import AttemptOutcome
from ..outcomes import HandlerResult
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
