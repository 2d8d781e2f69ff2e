"""Running a claimed job, as a pipeline of named steps.

:meth:`Executor.execute` gives the handler its context, finds its timeout,
holds the job (the heartbeat keeps its lease from then on), runs the
handler, judges the result against a cancel request, and hands the outcome
to the settler, which writes it in a batch, or, with no settler thread
(``Worker.run_once``, tests), at once. Production and the tick take this
same path. The job's definition is looked up once per attempt.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.db import router

from .. import tracing
from ..conf import settings
from ..context import JobContext
from ..db import ClaimedJob
from ..events import report_ran, report_started
from ..exceptions import JobCancelled, PayloadError, ResultError, Snooze, UnknownJob
from ..models import Attempt, AttemptOutcome
from ..outcomes import HandlerResult, Settlement, cancelled, snoozed
from ..payloads import decode_payload, encode_payload
from ..registry import JobDefinition, get_definition
from .clock import Clock
from .inflight import Held, InFlight, Outcome
from .settler import Settler

logger = logging.getLogger(__name__)


class Executor:
    """Runs claimed jobs on the calling thread while the heartbeat keeps their leases."""

    def __init__(self, *, clock: Clock, inflight: InFlight, settler: Settler) -> None:
        self.clock = clock
        self.inflight = inflight
        self.settler = settler

    def execute(self, claimed: ClaimedJob) -> Settlement | None:
        """Run ``claimed`` and hand its outcome on.

        Returns the outcome as written when it was written here (no settler
        thread); None when the settler writes it, or when the attempt ended on
        the heartbeat's side (its lease given up, a time-out) and the result
        was dropped.
        """
        ctx = make_context(claimed)
        definition = definition_of(claimed)
        held: Held | None = None
        try:
            timeout = timeout_for(claimed, definition)
        except Exception as exc:  # a bad setting: a failed attempt, not a stuck job
            result = HandlerResult.from_exception(AttemptOutcome.FAILED, exc, None)
        else:
            held = self.inflight.add(claimed, ctx, self.clock.now(), timeout)
            ran = self.run(held, definition)
            if ran is None:
                return None
            result = judge(held, ran)
        return self.settler.submit(Outcome(claimed, result, held))

    def run(self, held: Held, definition: Definition) -> HandlerResult | None:
        """The handler's result, or None if its attempt is over (the heartbeat ended it)."""
        try:
            result = run_handler(held.claimed, held.ctx, definition)
        finally:
            still_ours = self.inflight.finish(held)
        return result if still_ours else None


def judge(held: Held, result: HandlerResult) -> HandlerResult:
    """A handler stopped by ``cancel_job()`` ends cancelled, unless it succeeded anyway."""
    if held.cancel_requested and result.outcome != AttemptOutcome.SUCCEEDED:
        return cancelled(held.claimed)
    return result


#: A claimed job's definition, or why it has none (its attempt fails with it).
Definition = JobDefinition | UnknownJob


def definition_of(claimed: ClaimedJob) -> Definition:
    """The claimed job's definition, looked up once per attempt."""
    try:
        return get_definition(claimed.name)
    except UnknownJob as exc:
        return exc


def timeout_for(claimed: ClaimedJob, definition: Definition) -> float | None:
    """The job's ``@job(timeout=...)``, else its queue's ``timeout`` option."""
    timeout = definition.timeout if isinstance(definition, JobDefinition) else None
    return timeout if timeout is not None else settings.queue_timeout(claimed.queue)


def make_context(claimed: ClaimedJob) -> JobContext:
    return JobContext(
        job_id=claimed.id,
        name=claimed.name,
        queue=claimed.queue,
        attempt=claimed.attempt,
        payload=None,
    )


def run_handler(claimed: ClaimedJob, ctx: JobContext, definition: Definition) -> HandlerResult:
    """Call ``definition``'s handler and return how its attempt ended; never raises.

    Whatever the handler raises, ``SystemExit`` and ``KeyboardInterrupt``
    included, is a failed attempt: the worker stops only by its own stop
    event, never by a handler's exception. An unknown name or an undecodable
    payload is a failure too.
    """
    report_started(claimed)
    started = time.monotonic()
    with tracing.processing(claimed) as span:
        result = _run(claimed, ctx, definition, span)
        span.ended(result)
    report_ran(claimed, time.monotonic() - started)
    return result


def _run(
    claimed: ClaimedJob, ctx: JobContext, definition: Definition, span: tracing.Processing
) -> HandlerResult:
    try:
        if isinstance(definition, UnknownJob):
            raise definition
        ctx.payload = decode_payload(claimed.raw_payload)
        value = definition.func(ctx, ctx.payload)
        if value is None:
            return SUCCEEDED
        result = stored_result(value)
    except Snooze as exc:
        return snooze(claimed, exc.seconds)
    except JobCancelled as exc:
        outcome = AttemptOutcome.RELEASED if ctx.cancelled else AttemptOutcome.FAILED
        span.raised(exc)
        return _ended(claimed, outcome, exc)
    except BaseException as exc:  # SystemExit, KeyboardInterrupt too: the handler's, not ours
        span.raised(exc)
        return _ended(claimed, AttemptOutcome.FAILED, exc)
    return HandlerResult(AttemptOutcome.SUCCEEDED, result=result)


SUCCEEDED = HandlerResult(AttemptOutcome.SUCCEEDED)


def snooze(claimed: ClaimedJob, seconds: float) -> HandlerResult:
    """The handler snoozed: how many times the job had before (its attempts recorded as
    snoozed, one indexed count off the hot path) decides whether it may again."""
    try:
        before = (
            Attempt.objects.using(router.db_for_read(Attempt))
            .filter(job_id=claimed.id, outcome=AttemptOutcome.SNOOZED)
            .count()
        )
    except BaseException as exc:  # the database is away: a failed attempt, retried later
        return _ended(claimed, AttemptOutcome.FAILED, exc)
    return snoozed(seconds, before)


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
