"""The worker's own metrics, recorded as events reports each end: with prometheus_client's
registry and with an OpenTelemetry meter provider (the SDK's in-memory reader)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from django_jobs import schedule_job, telemetry

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def clock(clock_ahead):
    return clock_ahead


@pytest.fixture(autouse=True)
def collected():
    """The worker's counters recorded, as ``runjobs --metrics-port`` has them."""
    telemetry.collect_prometheus()
    yield
    telemetry.collect_prometheus(False)


@pytest.fixture
def reader(monkeypatch):
    """A meter provider of the SDK's, as if configured, read in memory."""
    read = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[read])
    monkeypatch.setattr(telemetry.otel_metrics, "get_meter_provider", lambda: provider)
    telemetry.forget()  # the provider is looked up once a second
    yield read
    provider.shutdown()
    telemetry.forget()


def points(read: InMemoryMetricReader) -> dict[str, list]:
    data = read.get_metrics_data()
    found: dict[str, list] = {}
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


def sample(name: str, **labels: str) -> float:
    instruments = telemetry.prometheus()
    assert instruments is not None
    return instruments.registry.get_sample_value(name, labels) or 0.0


def drain(worker, clock) -> None:
    w = worker()
    for _ in range(5):
        while w.run_once().claimed:
            pass
        clock.advance(3600)  # past any retry's backoff


def test_each_end_counts_by_job_queue_and_kind(reader, worker, clock):
    before = {
        kind: sample("django_jobs_outcomes_total", job=name, queue="default", outcome=kind)
        for name, kind in (("tests.ok", "succeeded"), ("tests.fail", "failed"))
    }
    dead_before = sample(
        "django_jobs_outcomes_total", job="tests.fail", queue="default", outcome="dead_lettered"
    )
    runs_before = sample("django_jobs_run_seconds_count", job="tests.ok", queue="default")
    schedule_job("tests.ok")
    schedule_job("tests.ok")
    schedule_job("tests.fail")  # three attempts: two failed, then dead-lettered
    drain(worker, clock)

    ok = sample("django_jobs_outcomes_total", job="tests.ok", queue="default", outcome="succeeded")
    assert ok - before["succeeded"] == 2
    failed = sample(
        "django_jobs_outcomes_total", job="tests.fail", queue="default", outcome="failed"
    )
    assert failed - before["failed"] == 2
    dead = sample(
        "django_jobs_outcomes_total", job="tests.fail", queue="default", outcome="dead_lettered"
    )
    assert dead - dead_before == 1
    runs = sample("django_jobs_run_seconds_count", job="tests.ok", queue="default")
    assert runs - runs_before == 2

    found = points(reader)
    by_kind = {
        (p.attributes["job"], p.attributes["outcome"]): p.value
        for p in found["django_jobs.outcomes"]
    }
    assert by_kind == {
        ("tests.ok", "succeeded"): 2,
        ("tests.fail", "failed"): 2,
        ("tests.fail", "dead_lettered"): 1,
    }
    [run] = [p for p in found["django_jobs.run"] if p.attributes["job"] == "tests.ok"]
    assert run.count == 2 and run.sum >= 0


def test_a_worker_whose_metrics_no_one_serves_records_none(worker, clock, monkeypatch):
    """Without ``--metrics-port`` or a multiprocess directory, nothing reads the counters:
    a job's end does not touch them (each update takes a lock)."""
    ok = {"job": "tests.ok", "queue": "default", "outcome": "succeeded"}
    before = sample("django_jobs_outcomes_total", **ok)
    monkeypatch.delenv(telemetry.MULTIPROCESS_ENV, raising=False)
    telemetry.collect_prometheus(None)  # as a process starts: decided at its first record
    schedule_job("tests.ok")
    assert worker().run_once().succeeded == 1
    assert telemetry.prometheus() is None
    telemetry.collect_prometheus()
    assert sample("django_jobs_outcomes_total", **ok) == before
    schedule_job("tests.ok")
    assert worker().run_once().succeeded == 1
    assert sample("django_jobs_outcomes_total", **ok) == before + 1


def test_a_multiprocess_directory_is_read_so_its_process_records(monkeypatch, tmp_path):
    monkeypatch.setenv(telemetry.MULTIPROCESS_ENV, str(tmp_path))
    telemetry.collect_prometheus(None)
    assert telemetry.prometheus() is not None


def test_without_a_meter_provider_nothing_goes_to_opentelemetry():
    telemetry.forget()
    assert telemetry.otel() is None  # the API's proxy: no instrument is even made


def test_a_failing_instrument_costs_the_job_nothing(worker, clock, monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("exporter gone")

    monkeypatch.setattr(telemetry.Bound, "outcome", broken)
    job = schedule_job("tests.ok")
    assert worker().run_once().succeeded == 1
    job.refresh_from_db()
    assert job.status == "succeeded"
    assert "a metric could not be recorded" in caplog.text


def test_a_lease_the_rescuer_takes_back_counts_as_a_reclaim_and_an_end(make_job, clock):
    from django_jobs.maintenance.rescuer import reclaim_expired_leases

    now = clock.now()
    reclaims = sample("django_jobs_reclaims_total")
    failed = sample("django_jobs_outcomes_total", job="tests.ok", queue="default", outcome="failed")
    make_job(
        status="running",
        lease_owner="gone",
        lease_expires_at=now - timedelta(minutes=1),
        attempt=1,
        attempts_used=1,
        max_attempts=3,
    )
    assert reclaim_expired_leases(now) == 1
    assert sample("django_jobs_reclaims_total") - reclaims == 1
    after = sample("django_jobs_outcomes_total", job="tests.ok", queue="default", outcome="failed")
    assert after - failed == 1


def test_the_wait_is_from_run_at_to_the_attempts_start(worker, clock, reader):
    from django_jobs.models import Attempt, Job

    count = sample("django_jobs_wait_seconds_count", job="tests.ok", queue="default")
    total = sample("django_jobs_wait_seconds_sum", job="tests.ok", queue="default")
    job = schedule_job("tests.ok")  # due at the host's now; the workers' clock is a minute on
    assert worker().run_once().succeeded == 1
    run_at = Job.objects.get(pk=job.pk).run_at
    waited = (Attempt.objects.get(job_id=job.pk).started_at - run_at).total_seconds()
    assert 59 < waited < 70
    assert sample("django_jobs_wait_seconds_count", job="tests.ok", queue="default") == count + 1
    added = sample("django_jobs_wait_seconds_sum", job="tests.ok", queue="default") - total
    assert added == pytest.approx(waited, abs=0.001)
    [point] = points(reader)["django_jobs.wait"]
    assert point.count == 1 and point.sum == pytest.approx(waited, abs=0.001)


def test_the_leader_reads_the_database_gauges_for_opentelemetry(reader, worker, clock, make_job):
    """The database-wide gauges go to OpenTelemetry from the leader's reading, named with
    dots; the exporter's callbacks never read the database themselves."""
    for _ in range(3):
        make_job(queue="default", run_at=clock.now() - timedelta(seconds=30))
    w = worker()
    w.maintainer.read_gauges(clock.now())
    found = points(reader)
    depth = {
        p.attributes["status"]: p.value
        for p in found["django_jobs.queue_depth"]
        if p.attributes["queue"] == "default"
    }
    assert depth["due"] == 3 and depth["running"] == 0
    [age] = [p for p in found["django_jobs.oldest_due_age"] if p.attributes["queue"] == "default"]
    assert age.value == pytest.approx(30, abs=1)
    assert "django_jobs.workers" in found


def test_a_process_that_does_not_lead_observes_no_database_gauge(reader, monkeypatch):
    from django_jobs.metrics import WORKERS

    assert telemetry.otel() is not None  # the instruments, made as a job's end makes them
    telemetry.database_read(None)  # never read here: this process has not led
    assert "django_jobs.workers" not in points(reader)
    telemetry.database_read({WORKERS: [((), 2)]})
    [point] = points(reader)["django_jobs.workers"]
    assert point.value == 2
    # It led, and no longer does: its last reading goes stale and is no longer observed.
    later = telemetry.time.monotonic() + 3 * telemetry.GAUGE_SECONDS + 1
    monkeypatch.setattr(telemetry.time, "monotonic", lambda: later)
    assert "django_jobs.workers" not in points(reader)


def test_the_gauges_are_a_leader_chore(worker, monkeypatch):
    from django_jobs.worker.leader.chores import Chores

    w = worker()
    read: list[object] = []
    monkeypatch.setattr(w.maintainer, "read_gauges", read.append)
    for chore in ("rescue", "prune", "check_health", "enqueue_due", "refresh_registration"):
        monkeypatch.setattr(w.maintainer, chore, lambda now: None)
    monkeypatch.setattr(w.leadership, "due", lambda now: False)
    leads = True
    monkeypatch.setattr(w.leadership, "acts", lambda now: leads)
    chores = Chores(w.maintainer, w.leadership, w.clock, registration_seconds=10)
    start = telemetry.time.monotonic()
    for at in (start, start + telemetry.GAUGE_SECONDS - 1, start + telemetry.GAUGE_SECONDS):
        for step in chores.due(at):
            step()
    assert len(read) == 2  # at the start, then once its interval has passed
    leads = False
    for step in chores.due(start + 2 * telemetry.GAUGE_SECONDS):
        step()
    assert len(read) == 2  # not read by a process that does not lead
