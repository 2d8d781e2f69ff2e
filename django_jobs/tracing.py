"""Traces of jobs through OpenTelemetry's API, when it is installed (``django-jobs[otel]``).

- The one way in (:func:`django_jobs.scheduling.enqueue`) runs inside a span
  ``enqueue <job name>`` (kind PRODUCER), and stores that span's context on the rows it
  writes (``Job.trace_context``: the W3C ``traceparent``, and ``tracestate`` where there
  is one), when the span is recording: a tracer provider is configured, and its sampler
  kept the span.
- Each attempt's handler runs inside a span ``process <job name>`` (kind CONSUMER), the
  current span on the handler's thread, so the handler's own spans are its children. On
  a job's first attempt its parent is the stored context: the trace goes on from the
  request that enqueued the job. A later attempt starts a trace of its own, linked to the
  stored context. Its attributes follow OpenTelemetry's messaging conventions; its status
  is the attempt's outcome, the exception recorded when the handler raised.

Without the package nothing of it is imported, and every function here does nothing;
with the package and no provider configured (the API's proxy or no-op provider), no span
is started and nothing is stored: one ``isinstance`` a call. The SDK, its exporters and
its setup are the project's (docs/how-to/observability.md).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .models import AttemptOutcome

if TYPE_CHECKING:
    from .db.records import ClaimedJob
    from .models import Job
    from .outcomes import HandlerResult

try:
    from opentelemetry import propagate, trace
    from opentelemetry.context import Context
except ImportError:  # the ``otel`` extra is not installed
    trace = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

#: The instrumentation's name, and ``messaging.system``'s value.
NAME = "django_jobs"
#: The stored context's keys: W3C Trace Context's headers.
CARRIED = ("traceparent", "tracestate")
#: While no tracer provider is configured, how long before it is looked up again (seconds).
PROVIDER_SECONDS = 1.0

# Until when (monotonic time) no provider is taken as configured, from the last lookup.
_unconfigured_until = -math.inf


def available() -> bool:
    """OpenTelemetry's API is installed."""
    return trace is not None


def get_tracer() -> Any:
    """The tracer of django-jobs' spans, from the global tracer provider; None while none
    is configured (the API's proxy, or its no-op): then no span is even started.

    While none is, it is looked up again at most every :data:`PROVIDER_SECONDS`: the API's
    lookup then reads the environment each time, which cost a busy worker's every job more
    than the rest of its tracing. A provider configured later is used within a second."""
    global _unconfigured_until
    now = time.monotonic()
    if now < _unconfigured_until:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        _unconfigured_until = now + PROVIDER_SECONDS
        return None
    from .version import __version__

    return provider.get_tracer(NAME, __version__)


def messaging_attributes(name: str, queue: str) -> dict[str, Any]:
    return {
        "messaging.system": NAME,
        "messaging.destination.name": queue,
        "django_jobs.job.name": name,
    }


@contextmanager
def enqueuing(rows: Sequence[Job]) -> Iterator[None]:
    """Around the one insert of ``rows``: a PRODUCER span, whose context each row carries
    (``trace_context``) when the span records. One span for a call, however many rows."""
    tracer = None if trace is None or not rows else get_tracer()
    if tracer is None:
        yield
        return
    names = sorted({row.name for row in rows})
    queues = sorted({row.queue for row in rows})
    attributes = messaging_attributes(names[0] if len(names) == 1 else "", queues[0])
    if len(names) > 1:
        del attributes["django_jobs.job.name"]
    if len(queues) > 1:
        del attributes["messaging.destination.name"]
    attributes["messaging.operation.type"] = "send"
    if len(rows) > 1:
        attributes["messaging.batch.message_count"] = len(rows)
    title = f"enqueue {names[0]}" if len(names) == 1 else "enqueue"
    with tracer.start_as_current_span(
        title, kind=trace.SpanKind.PRODUCER, attributes=attributes
    ) as span:
        if span.is_recording():
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            stored = {key: value for key, value in carrier.items() if key in CARRIED} or None
            for row in rows:
                if row.trace_context is None:
                    row.trace_context = stored
        yield


def stored_context(value: Any) -> dict[str, str] | None:
    """The carrier a claimed job's ``trace_context`` holds (JSON text, as some drivers read
    the column, or a mapping), or None: a value written by hand that is neither is ignored."""
    if isinstance(value, bytes | str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, Mapping) or not isinstance(value.get("traceparent"), str):
        return None
    return {key: str(value[key]) for key in CARRIED if isinstance(value.get(key), str)}


class Processing:
    """The span of one attempt (a no-op without OpenTelemetry): :meth:`raised` records the
    handler's exception, :meth:`ended` sets the status from the attempt's result."""

    def __init__(self, span: Any = None) -> None:
        self.span = span

    def raised(self, exc: BaseException) -> None:
        if self.span is not None and self.span.is_recording():
            self.span.record_exception(exc)

    def ended(self, result: HandlerResult) -> None:
        span = self.span
        if span is None or not span.is_recording():
            return
        span.set_attribute("django_jobs.outcome", result.outcome.value)
        if result.outcome == AttemptOutcome.SUCCEEDED:
            span.set_status(trace.Status(trace.StatusCode.OK))
        elif result.outcome in (AttemptOutcome.FAILED, AttemptOutcome.TIMED_OUT):
            span.set_status(trace.Status(trace.StatusCode.ERROR, result.error[:200] or None))


@contextmanager
def processing(claimed: ClaimedJob) -> Iterator[Processing]:
    """Around one attempt's handler: a CONSUMER span ``process <name>``, current on the
    calling thread; the first attempt's parent is the enqueue's stored context, a later
    attempt's trace is new and linked to it."""
    tracer = None if trace is None else get_tracer()
    if tracer is None:
        yield Processing()
        return
    stored = stored_context(claimed.trace_context)
    parent = propagate.extract(stored) if stored else None
    links = []
    if parent is not None and claimed.attempt > 1:
        enqueued = trace.get_current_span(parent).get_span_context()
        if enqueued.is_valid:
            links.append(trace.Link(enqueued, {"django_jobs.link": "enqueue"}))
        parent = None
    attributes = messaging_attributes(claimed.name, claimed.queue)
    attributes.update(
        {
            "messaging.operation.type": "process",
            "messaging.message.id": str(claimed.id),
            "django_jobs.attempt": claimed.attempt,
        }
    )
    with tracer.start_as_current_span(
        f"process {claimed.name}",
        context=parent if parent is not None else Context(),
        kind=trace.SpanKind.CONSUMER,
        attributes=attributes,
        links=links,
        record_exception=False,  # the handler's exceptions never reach here: see raised()
        set_status_on_exception=False,
    ) as span:
        yield Processing(span)
