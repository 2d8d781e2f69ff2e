"""Running a claimed job, as a pipeline of named steps.

:meth:`Executor.execute` gives the handler its context, reads what the
registry holds for it (:func:`~django_jobs.registry.runnable`: its definition and
timeout, once per attempt), holds the job (the heartbeat keeps its lease from then on), runs the
handler, judges the result against a cancel request, and hands the outcome
to the settler, which writes it in a batch, or, with no settler thread
(``Worker.run_once``, tests), at once. Production and the tick take this
same path.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.db import router

from .. import tracing
from ..context import JobContext
from ..db import ClaimedJob
from ..events import report_ran, report_started
from ..exceptions import JobCancelled, PayloadError, ResultError, Snooze, UnknownJob
from ..models import Attempt, AttemptOutcome
from ..outcomes import HandlerResult, Settlement, cancelled, snoozed
from ..payloads import decode_payload, encode_payload
from ..registry import JobDefinition, runnable
from .clock import Clock
from .connections import tidy_connections
from .inflight import Held, InFlight, Outcome
from .settler import Settler

logger = logging.getLogger(__name__)


class Executor:
    """Runs claimed jobs while the heartbeat keeps their leases: a sync handler on the
    calling thread (:meth:`execute`), an async one as a task of the worker's event loop
    (:meth:`begin` on the dispatcher's thread, then :meth:`arun` on the loop)."""

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
        started = self.begin(claimed)
        if isinstance(started, Outcome):
            return self.settler.submit(started)
        try:
            ran = run_handler(claimed, started.held.ctx, started.definition)
        finally:
            still_ours = self.inflight.finish(started.held)
        return self.end(started, ran) if still_ours else None

    def begin(
        self, claimed: ClaimedJob, interrupt: Callable[[], None] | None = None
    ) -> Started | Outcome:
        """Hold ``claimed`` (the heartbeat keeps its lease from now on) and say it started;
        the outcome at once when it cannot start (a bad timeout setting: a failed attempt,
        not a stuck job). ``interrupt``: how its attempt is stopped when it ends on the
        heartbeat's side (an async handler's task is cancelled)."""
        ctx = make_context(claimed)
        try:
            found = runnable(claimed.name, claimed.queue)
        except Exception as exc:
            result = HandlerResult.from_exception(AttemptOutcome.FAILED, exc, None)
            return Outcome(claimed, result)
        held = self.inflight.add(claimed, ctx, self.clock.now(), found.timeout, interrupt)
        report_started(claimed)
        return Started(held, found.definition)

    async def arun(self, started: Started) -> Settlement | None:
        """On the event loop: await the async handler, and hand its outcome on."""
        held = started.held
        try:
            ran = await arun_handler(held.claimed, held.ctx, started.definition)
        finally:
            still_ours = self.inflight.finish(held)
        if ran.outcome != AttemptOutcome.SUCCEEDED:  # it may have broken its connection
            await sync_to_async(tidy_connections)()
        return self.end(started, ran) if still_ours else None

    def end(self, started: Started, ran: HandlerResult) -> Settlement | None:
        """The handler's result, judged against a cancel request, to the settler."""
        held = started.held
        return self.settler.submit(Outcome(held.claimed, judge(held, ran), held))


@dataclass(frozen=True)
class Started:
    """A job held and announced, its handler about to run."""

    held: Held
    definition: Definition


def judge(held: Held, result: HandlerResult) -> HandlerResult:
    """A handler stopped by ``cancel_job()`` ends cancelled, unless it succeeded anyway."""
    if held.cancel_requested and result.outcome != AttemptOutcome.SUCCEEDED:
        return cancelled(held.claimed)
    return result


#: A claimed job's definition, or why it has none (its attempt fails with it).
Definition = JobDefinition | UnknownJob


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
    payload is a failure too. An async handler called here (the tick's, a
    test's) runs to its end through ``async_to_sync``.
    """
    started = time.monotonic()
    with tracing.processing(claimed) as span:
        try:
            defined = prepare(claimed, ctx, definition)
            if defined.is_async:
                result = returned(async_to_sync(defined.func)(ctx, ctx.payload))
            else:
                result = returned(defined.func(ctx, ctx.payload))
        except BaseException as exc:  # SystemExit, KeyboardInterrupt too: the handler's
            ended = raised(claimed, ctx, exc, span)
            result = snooze(claimed, ended.seconds) if isinstance(ended, Snooze) else ended
        span.ended(result)
    report_ran(claimed, time.monotonic() - started)
    return result


async def arun_handler(
    claimed: ClaimedJob, ctx: JobContext, definition: Definition
) -> HandlerResult:
    """:func:`run_handler` of an async handler, on the event loop. Its task cancelled by
    the worker (a timeout, ``cancel_job()``, a lease given up) ends as ``JobCancelled``
    does; the snooze count runs off the loop."""
    started = time.monotonic()
    with tracing.processing(claimed) as span:
        try:
            defined = prepare(claimed, ctx, definition)
            result = returned(await defined.func(ctx, ctx.payload))
        except BaseException as exc:  # CancelledError too: the task is ours to end
            ended = raised(claimed, ctx, exc, span)
            if isinstance(ended, Snooze):
                result = await sync_to_async(snooze)(claimed, ended.seconds)
            else:
                result = ended
        span.ended(result)
    report_ran(claimed, time.monotonic() - started)
    return result


def prepare(claimed: ClaimedJob, ctx: JobContext, definition: Definition) -> JobDefinition:
    """The handler's definition, its payload decoded into ``ctx``; raises what fails."""
    if isinstance(definition, UnknownJob):
        raise definition
    ctx.payload = decode_payload(claimed.raw_payload)
    return definition


def returned(value: Any) -> HandlerResult:
    """A handler's return value as its attempt's result."""
    if value is None:
        return SUCCEEDED
    return HandlerResult(AttemptOutcome.SUCCEEDED, result=stored_result(value))


def raised(
    claimed: ClaimedJob, ctx: JobContext, exc: BaseException, span: tracing.Processing
) -> HandlerResult | Snooze:
    """How an attempt whose handler raised ``exc`` ended (a snooze: the exception, whose
    count is read next). A cancel the worker asked for (``JobCancelled`` raised, an async
    handler's task cancelled) hands the job back; raised of itself, it is a failure."""
    if isinstance(exc, Snooze):
        return exc
    span.raised(exc)
    cancelled_ = isinstance(exc, (JobCancelled, asyncio.CancelledError)) and ctx.cancelled
    return _ended(claimed, AttemptOutcome.RELEASED if cancelled_ else AttemptOutcome.FAILED, exc)


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
