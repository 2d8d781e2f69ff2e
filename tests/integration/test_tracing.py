"""OpenTelemetry traces: the enqueue's span, its context on the row, each attempt's span
after it, with the OpenTelemetry SDK's in-memory exporter; and nothing of it without."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from django_jobs import schedule_job, schedule_jobs, tracing
from django_jobs.models import Job, JobStatus
from tests.conftest import ROOT
from tests.support import jobs as support

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def clock(clock_ahead):
    return clock_ahead


@pytest.fixture
def exporter(monkeypatch):
    """A tracer provider of the SDK's, recording every span in memory: the one
    django-jobs' spans come from, and the one ``tests.traced`` starts its own with."""
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    monkeypatch.setattr(tracing, "get_tracer", lambda: provider.get_tracer("django_jobs"))
    support.TRACER[:] = [provider.get_tracer("tests")]
    support.TRACED.clear()
    yield exported
    support.TRACER.clear()


def named(exported: InMemorySpanExporter, name: str) -> list:
    return [span for span in exported.get_finished_spans() if span.name == name]


def drain(worker) -> None:
    w = worker()
    for _ in range(10):
        if not w.run_once().claimed:
            return


def test_an_attempts_span_follows_the_request_that_enqueued_the_job(exporter, worker):
    with support.TRACER[0].start_as_current_span("request") as request:
        job = schedule_job("tests.traced")
    job.refresh_from_db()
    [enqueue] = named(exporter, "enqueue tests.traced")
    assert enqueue.kind == trace.SpanKind.PRODUCER
    assert enqueue.parent.span_id == request.get_span_context().span_id
    assert enqueue.attributes["messaging.system"] == "django_jobs"
    assert enqueue.attributes["messaging.destination.name"] == "default"
    ids = enqueue.get_span_context()
    assert job.trace_context == {
        "traceparent": f"00-{ids.trace_id:032x}-{ids.span_id:016x}-{ids.trace_flags:02x}",
    }

    drain(worker)
    [process] = named(exporter, "process tests.traced")
    assert process.kind == trace.SpanKind.CONSUMER
    assert process.context.trace_id == ids.trace_id and process.parent.span_id == ids.span_id
    assert dict(process.attributes) == {
        "messaging.system": "django_jobs",
        "messaging.destination.name": "default",
        "messaging.operation.type": "process",
        "messaging.message.id": str(job.pk),
        "django_jobs.job.name": "tests.traced",
        "django_jobs.attempt": 1,
        "django_jobs.outcome": "succeeded",
    }
    assert process.status.status_code == trace.StatusCode.OK
    # The handler's own spans are the attempt's children: it is current on its thread.
    [inside] = named(exporter, "inside the handler")
    assert inside.parent.span_id == process.context.span_id
    assert support.TRACED[0].span_id == process.context.span_id


def test_a_retry_starts_a_trace_of_its_own_linked_to_the_enqueue(exporter, worker, clock):
    job = schedule_job("tests.traced", "fail first")
    [enqueue] = named(exporter, "enqueue tests.traced")
    drain(worker)
    clock.advance(3600)  # past the retry's backoff
    drain(worker)
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED
    first, second = sorted(named(exporter, "process tests.traced"), key=lambda s: s.start_time)
    assert first.parent.span_id == enqueue.context.span_id
    assert first.status.status_code == trace.StatusCode.ERROR
    assert "the first attempt fails" in first.status.description
    [event] = first.events
    assert event.name == "exception"
    assert event.attributes["exception.type"] == "RuntimeError"
    assert second.parent is None and second.context.trace_id != enqueue.context.trace_id
    [link] = second.links
    assert link.context.span_id == enqueue.context.span_id
    assert second.attributes["django_jobs.attempt"] == 2
    assert second.status.status_code == trace.StatusCode.OK


def test_one_span_for_a_call_that_enqueues_many(exporter):
    rows = schedule_jobs([{"job": "tests.traced"}, {"job": "tests.emails"}])
    [enqueue] = named(exporter, "enqueue")
    assert enqueue.attributes["messaging.batch.message_count"] == 2
    assert "messaging.destination.name" not in enqueue.attributes
    written = Job.objects.filter(pk__in=[row.pk for row in rows])
    stored = {tuple(sorted(row.trace_context)) for row in written}
    assert stored == {("traceparent",)}


def test_with_no_provider_configured_nothing_is_stored(worker):
    """The API's no-op: the global provider of a process that configured none."""
    support.TRACED.clear()
    job = schedule_job("tests.traced")
    assert Job.objects.get(pk=job.pk).trace_context is None
    drain(worker)
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED
    assert not support.TRACED[0].is_valid


def test_a_provider_not_configured_is_looked_up_again_once_a_second(monkeypatch):
    """The API's lookup reads the environment while no provider is set: not at every job."""
    looked: list[float] = []
    now = [1000.0]
    proxy = trace.ProxyTracerProvider()
    provider = TracerProvider()
    found = [proxy]
    monkeypatch.setattr(tracing.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(tracing, "_unconfigured_until", -1.0)
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: looked.append(now[0]) or found[0])
    assert tracing.get_tracer() is None
    found[0] = provider  # configured after the first job
    now[0] += tracing.PROVIDER_SECONDS - 0.01
    assert tracing.get_tracer() is None
    assert looked == [1000.0]
    now[0] += 0.01
    assert tracing.get_tracer() is not None
    assert len(looked) == 2
    assert tracing.get_tracer() is not None  # a provider once found is asked every time
    assert len(looked) == 3


@pytest.mark.parametrize("written", ["not json", {"traceparent": 5}, ["00-ab"], {"x": "y"}])
def test_a_stored_context_written_by_hand_is_ignored(exporter, worker, written):
    job = schedule_job("tests.traced")
    Job.objects.filter(pk=job.pk).update(trace_context=written)
    drain(worker)
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED
    [process] = named(exporter, "process tests.traced")
    assert process.parent is None


def test_without_opentelemetry_nothing_of_it_is_imported_and_jobs_run(tmp_path):
    code = textwrap.dedent(
        """
        import sys
        sys.modules["opentelemetry"] = None  # as if the package were not installed
        import django
        django.setup()
        from django.core.management import call_command
        call_command("migrate", verbosity=0)
        from django_jobs import schedule_job, tracing
        from django_jobs.testing import run_until_empty
        assert not tracing.available()
        job = schedule_job("demo.noop")
        assert run_until_empty().succeeded == 1
        job.refresh_from_db()
        assert job.trace_context is None
        loaded = [name for name in sys.modules if name.startswith("opentelemetry.")]
        assert not loaded, loaded
        print("ran without opentelemetry")
        """
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "testproject.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
    }
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "ran without opentelemetry" in done.stdout
