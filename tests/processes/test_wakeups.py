"""LISTEN/NOTIFY with a real runjobs process: an idle worker wakes well inside its poll,
for a job enqueued from here or a recurring schedule's occurrence."""

import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from django_jobs import add_recurring_job, schedule_job
from django_jobs.models import Job, JobStatus, RecurringJob
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

POLL = 5.0  # the fallback: a wake-up must come well before it
LEAD = 8.0  # a schedule falls due this long after the test starts its worker


def idle_and_listening() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND query LIKE 'LISTEN%%'"
        )
        return bool(cursor.fetchone()[0])


def succeeded(job: Job) -> bool:
    return Job.objects.filter(pk=job.pk, status=JobStatus.SUCCEEDED).exists()


@pytest.mark.listen_notify
def test_wakeups_listen_wakes_an_idle_worker_well_inside_its_poll(runjobs_process):
    process = runjobs_process.start("--queue", "default", env={"JOBS_POLL_SECONDS": str(POLL)})
    wait_until(idle_and_listening, timeout=15)
    time.sleep(0.5)  # past the first claim: the dispatcher now sleeps its poll
    started = time.monotonic()
    job = schedule_job("demo.noop")
    wait_until(lambda: succeeded(job), timeout=POLL * 2, interval=0.005)
    waited = time.monotonic() - started
    assert waited < POLL / 3, (waited, runjobs_process.log(process))


def test_wakeups_polling_still_works_with_listen_off(runjobs_process):
    process = runjobs_process.start(
        "--queue", "default", env={"JOBS_LISTEN": "false", "JOBS_POLL_SECONDS": "0.3"}
    )
    time.sleep(0.5)
    job = schedule_job("demo.noop")
    wait_until(lambda: succeeded(job), timeout=10)
    if connection.vendor == "postgresql":
        assert not idle_and_listening(), runjobs_process.log(process)


@pytest.mark.listen_notify
def test_wakeups_a_recurring_occurrence_starts_at_its_time_well_inside_the_poll(runjobs_process):
    add_recurring_job("soon", "0 0 1 1 *", "demo.noop")  # yearly: its next run is set below
    due = timezone.now() + timedelta(seconds=LEAD)
    RecurringJob.objects.filter(name="soon").update(next_run_at=due)
    process = runjobs_process.start("--queue", "default", env={"JOBS_POLL_SECONDS": str(POLL)})
    wait_until(idle_and_listening, timeout=LEAD)
    assert timezone.now() < due - timedelta(seconds=1), "the worker started too late to tell"
    job = wait_until(lambda: Job.objects.filter(schedule="soon").first(), timeout=LEAD + POLL)
    wait_until(lambda: succeeded(job), timeout=POLL * 2, interval=0.005)
    started_at = Job.objects.get(pk=job.pk).started_at
    assert started_at - due < timedelta(seconds=0.5), (due, runjobs_process.log(process))
