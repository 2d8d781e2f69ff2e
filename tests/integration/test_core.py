import threading
from functools import partial

import pytest

from django_jobs import schedule_job, schedule_jobs
from django_jobs.models import Job, JobStatus
from django_jobs.testing import FakeClock, run_until_empty
from django_jobs.worker import Worker, serve
from django_jobs.worker.clock import DatabaseClock, SystemClock
from django_jobs.worker.connections import guarded
from tests.conftest import wait_until
from tests.support.jobs import ok
from tests.support.threads import in_a_thread

FAST = {"POLL_SECONDS": 0.02, "MAINTENANCE_SECONDS": 0.1, "RETRY_BASE_SECONDS": 0}


@pytest.mark.django_db(transaction=True)
def test_worker_run_serves_on_threads_until_stopped(settings):
    settings.DJANGO_JOBS = {**FAST, "QUEUES": {"default": {"workers": 3}, "emails": {}}}
    schedule_jobs([{"job": ok, "payload": n} for n in range(30)] + [{"job": "tests.emails"}] * 3)
    worker = Worker(clock=SystemClock())
    assert worker.queues == {"default": 3, "emails": 1}
    with in_a_thread(partial(serve, worker)) as thread:
        wait_until(lambda: Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 33)
        schedule_job(ok, "late")  # a job enqueued while the worker idles is picked up
        wait_until(lambda: Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 34)
    assert not thread.is_alive()


@pytest.mark.django_db(transaction=True)
def test_worker_burst_exits_once_nothing_is_due_or_running(settings):
    settings.DJANGO_JOBS = FAST
    schedule_jobs([{"job": ok}] * 5 + [{"job": "tests.fail", "max_attempts": 2}])
    thread = threading.Thread(
        target=serve, args=(Worker(["default"], burst=True), threading.Event())
    )
    thread.start()
    thread.join(20)
    assert not thread.is_alive()
    statuses = sorted(Job.objects.values_list("status", flat=True))
    assert statuses == ["dead_lettered"] + ["succeeded"] * 5


@pytest.mark.django_db
def test_run_until_empty_runs_due_jobs_and_leaves_future_ones(worker, make_job, clock):
    from datetime import timedelta

    for _ in range(4):
        make_job()
    later = make_job(run_at=clock.now() + timedelta(hours=1))
    result = run_until_empty(worker())
    assert (result.claimed, result.succeeded) == (4, 4)
    assert Job.objects.get(pk=later.pk).status == JobStatus.PENDING


@pytest.mark.django_db
def test_database_clock_follows_the_database():
    clock = DatabaseClock()
    offset = clock.measure()
    assert abs(offset.total_seconds()) < 5
    assert abs((clock.now() - SystemClock().now()).total_seconds()) < 5


@pytest.mark.django_db
def test_worker_needs_queues_with_threads():
    with pytest.raises(ValueError, match="at least one worker thread"):
        Worker({"default": 0}, clock=FakeClock())
    with pytest.raises(ValueError, match="at least one queue"):
        Worker([], clock=FakeClock())


@pytest.mark.django_db(transaction=True)
def test_worker_timed_out_handler_that_ignores_ctx_is_not_a_success(settings, caplog):
    settings.DJANGO_JOBS = {**FAST, "QUEUES": {"default": {"workers": 2}}}
    stubborn = schedule_job("tests.stubborn", 4.0)  # keeps its thread for 4 s, timeout 0.3 s
    worker = Worker(clock=SystemClock())
    with in_a_thread(partial(serve, worker)):
        wait_until(lambda: Job.objects.get(pk=stubborn.pk).status == JobStatus.DEAD_LETTERED)
        others = schedule_jobs([{"job": ok}] * 5)
        wait_until(
            lambda: (
                Job.objects.filter(pk__in=[j.pk for j in others], status="succeeded").count() == 5
            ),
        )
        assert "result dropped" not in caplog.text  # the other thread served them meanwhile
        wait_until(lambda: "result dropped" in caplog.text, timeout=8)
    stubborn.refresh_from_db()
    assert stubborn.status == JobStatus.DEAD_LETTERED  # the late return changed nothing
    assert stubborn.last_error.startswith("TimedOut")
    assert list(stubborn.attempts.values_list("outcome", flat=True)) == ["timed_out"]


@pytest.mark.django_db(transaction=True)
def test_worker_a_clock_re_measure_failing_as_a_handler_starts_costs_no_attempt(make_job):
    from datetime import timedelta

    from tests.conftest import START

    host = FakeClock(START)
    readings = {"fail": False}

    def read_database():
        if readings["fail"]:
            raise ConnectionError("database unreachable")
        return host.now()

    clock = DatabaseClock(
        host=host,
        refresh_seconds=60,
        read=read_database,
        monotonic=lambda: host.now().timestamp(),  # the host's clocks move together here
    )
    w = Worker({"default": 1}, clock=clock, owner="blip")
    make_job()
    [claimed] = w.claimer.claim("default", w.clock.now(), 1)
    readings["fail"] = True  # a blip just as the re-measure comes due
    host.advance(61)
    assert w.executor.execute(claimed).status == JobStatus.SUCCEEDED
    job = Job.objects.get(pk=claimed.id)
    assert (job.attempts_used, list(job.attempts.values_list("outcome", flat=True))) == (
        1,
        ["succeeded"],
    )
    assert clock.offset == timedelta(0)


@pytest.mark.django_db
def test_worker_a_database_outage_is_logged_in_one_line_not_a_traceback(worker, caplog):
    from django.db import OperationalError

    def step():
        raise OperationalError("connection refused\n\tIs the server running?")

    def bug():
        raise KeyError("a bug")

    w = worker()
    assert guarded(step, w.using) is None
    assert guarded(bug, w.using) is None
    outage, crash = [r for r in caplog.records if r.getMessage().startswith("worker step")]
    assert outage.levelname == "WARNING" and outage.exc_info is None
    assert outage.getMessage() == (
        "worker step failed (OperationalError: connection refused); retrying"
    )
    assert crash.levelname == "ERROR" and crash.exc_info is not None  # a bug keeps its trace
