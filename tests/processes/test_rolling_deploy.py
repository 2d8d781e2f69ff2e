"""A rolling deploy with real ``runjobs`` processes: a job of a name only the next deploy
registers waits for a worker of that deploy, no attempt used, and then runs."""

from __future__ import annotations

import pytest
from django.utils import timezone

from django_jobs import schedule_job
from django_jobs.models import Job, JobStatus, WorkerProcess
from django_jobs.stats import waiting_for_names
from testproject.example.models import Execution
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

NEXT_DEPLOY = {"JOBS_EXAMPLE_JOB_MODULES": "testproject.next_deploy"}


def test_runjobs_leaves_a_job_of_a_name_it_does_not_know_to_a_worker_that_knows_it(
    runjobs_process,
):
    now = timezone.now()
    # Written by the next deploy's web process: this one does not know the name either.
    new = Job.objects.create(
        name="example.next_deploy", queue="default", payload={}, run_at=now, created_at=now
    )
    known = schedule_job("example.record")
    old = runjobs_process.start("--queue", "default")
    wait_until(lambda: Job.objects.get(pk=known.pk).status == JobStatus.SUCCEEDED, timeout=30)
    wait_until(lambda: waiting_for_names(), timeout=30)  # its row says what it knows
    [waiting] = waiting_for_names()
    assert (waiting.name, waiting.count) == ("example.next_deploy", 1)
    [row] = WorkerProcess.objects.all()
    assert "example.record" in row.names and "example.next_deploy" not in row.names
    new.refresh_from_db()
    assert (new.status, new.attempts_used, new.attempt) == (JobStatus.PENDING, 0, 0)
    # The deploy reaches the workers: one that knows the name starts, and runs the job.
    deployed = runjobs_process.start("--burst", "--queue", "default", env=NEXT_DEPLOY)
    assert deployed.wait(60) == 0, runjobs_process.log(deployed)
    new.refresh_from_db()
    assert (new.status, new.attempts_used) == (JobStatus.SUCCEEDED, 1), runjobs_process.log(old)
    assert Execution.objects.filter(job_id=new.pk).count() == 1
    assert waiting_for_names() == []


def test_runjobs_burst_of_the_old_deploy_exits_leaving_the_new_name_pending(runjobs_process):
    now = timezone.now()
    new = Job.objects.create(
        name="example.next_deploy", queue="default", payload={}, run_at=now, created_at=now
    )
    old = runjobs_process.start("--burst", "--queue", "default")
    assert old.wait(60) == 0, runjobs_process.log(old)
    assert "1 job(s) due of names this worker does not know" in runjobs_process.log(old)
    new.refresh_from_db()
    assert (new.status, new.attempts_used) == (JobStatus.PENDING, 0)
