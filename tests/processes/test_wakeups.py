"""LISTEN/NOTIFY with a real runjobs process: an idle worker wakes well inside its poll."""

import time

import pytest
from django.db import connection

from django_jobs import schedule_job
from django_jobs.models import Job, JobStatus
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

POLL = 5.0  # the fallback: a wake-up must come well before it


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
