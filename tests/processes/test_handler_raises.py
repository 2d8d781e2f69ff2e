"""A handler's BaseException, in a real ``runjobs`` process with one handler thread."""

import os
import signal

import pytest

from django_jobs import schedule_job
from django_jobs.models import Job, JobStatus
from testproject.example.models import Execution
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def status(job: Job) -> str:
    return Job.objects.get(pk=job.pk).status


def test_runjobs_handler_calling_sys_exit_fails_its_attempt_and_the_thread_serves_on(
    runjobs_process,
):
    doomed = schedule_job("example.exit")
    process = runjobs_process.start("--queue", "default", "--workers", "1")
    wait_until(lambda: status(doomed) == JobStatus.DEAD_LETTERED, timeout=30)
    attempts = list(
        Job.objects.get(pk=doomed.pk).attempts.values_list("number", "outcome", "error")
    )
    assert attempts == [
        (1, "failed", "SystemExit: giving up on attempt 1"),
        (2, "failed", "SystemExit: giving up on attempt 2"),
    ]
    after = schedule_job("example.record")
    wait_until(lambda: status(after) == JobStatus.SUCCEEDED, timeout=30)
    assert Execution.objects.filter(job_id=after.pk).count() == 1
    assert process.poll() is None, runjobs_process.log(process)
    os.kill(process.pid, signal.SIGTERM)
    assert process.wait(20) == 0, runjobs_process.log(process)
    assert "SystemExit: giving up on attempt 2" in runjobs_process.log(process)
