"""What a stopping ``runjobs`` says, what it hands back, and that it is no longer listed."""

import os
import re
import signal
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from django_jobs import schedule_job
from django_jobs.models import Attempt, Job, JobStatus, WorkerProcess
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

WORKERS_PAGE = "admin:django_jobs_workerprocess_changelist"


def lines(log: str, pattern: str) -> list[str]:
    return [line for line in log.splitlines() if re.search(pattern, line)]


def start_with_a_running_job(runjobs_process, seconds: float, **env: str):
    """A runjobs process whose handler runs the job: its mark written, not only its attempt
    (a job claimed ahead has its attempt before its handler starts)."""
    mark = runjobs_process.tmp_path / "started.mark"
    job = schedule_job("example.record", {"sleep": seconds, "mark": str(mark)})
    process = runjobs_process.start("--queue", "default", env=env)
    wait_until(lambda: mark.exists() and mark.read_text().strip(), timeout=20)
    return job, process


def listed_workers(admin_client) -> list[str]:
    response = admin_client.get(reverse(WORKERS_PAGE))
    assert response.status_code == 200
    return [worker.id for worker in response.context["cl"].result_list]


def status_text() -> str:
    out = StringIO()
    call_command("jobs", "status", stdout=out)
    return out.getvalue()


def test_runjobs_first_signal_says_once_which_jobs_it_waits_for_and_for_how_long(
    runjobs_process,
):
    job, process = start_with_a_running_job(runjobs_process, 1.0)
    os.kill(process.pid, signal.SIGTERM)
    assert process.wait(20) == 0, runjobs_process.log(process)
    log = runjobs_process.log(process)
    [line] = lines(log, "stop requested")
    assert f"waiting up to 20 s (SHUTDOWN_GRACE_SECONDS) for 1 running job(s): #{job.pk};" in line
    assert "a second SIGTERM or SIGINT hands them back and stops at once" in line
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED


def test_runjobs_first_signal_with_nothing_running_says_so(runjobs_process):
    process = runjobs_process.start("--queue", "default")
    wait_until(lambda: WorkerProcess.objects.filter(pid=process.pid).exists(), timeout=20)
    os.kill(process.pid, signal.SIGINT)
    assert process.wait(20) == 0, runjobs_process.log(process)
    [line] = lines(runjobs_process.log(process), "stop requested")
    assert line.endswith("stop requested; no job is running, stopping now")


def test_runjobs_second_signal_hands_the_job_back_at_once_and_says_so(runjobs_process):
    job, process = start_with_a_running_job(runjobs_process, 30.0)
    os.kill(process.pid, signal.SIGTERM)
    wait_until(lambda: "stop requested" in runjobs_process.log(process), timeout=10)
    os.kill(process.pid, signal.SIGINT)
    assert process.wait(10) == 1, runjobs_process.log(process)
    # At once, not a lease (5 s here) later: pending, with no owner, its attempt given back.
    job.refresh_from_db()
    assert (job.status, job.lease_owner, job.attempts_used) == (JobStatus.PENDING, None, 0)
    assert Attempt.objects.get(job=job).outcome == "released"
    log = runjobs_process.log(process)
    [line] = lines(log, "second stop signal")
    assert line.endswith(
        f"second stop signal: handed 1 job(s) back: #{job.pk}; another worker can take them now"
    )
    assert len(lines(log, "stop requested")) == 1


@pytest.mark.parametrize("stop", ["one signal", "two signals"])
def test_runjobs_stopped_worker_is_not_listed_in_the_admin_or_jobs_status(
    runjobs_process, admin_client, stop
):
    _, process = start_with_a_running_job(runjobs_process, 30.0, JOBS_SHUTDOWN_GRACE_SECONDS="0.2")
    [worker_id] = WorkerProcess.objects.filter(pid=process.pid).values_list("id", flat=True)
    assert listed_workers(admin_client) == [worker_id]
    assert worker_id in status_text()
    os.kill(process.pid, signal.SIGTERM)
    if stop == "two signals":
        os.kill(process.pid, signal.SIGINT)
    assert process.wait(20) in (0, 1), runjobs_process.log(process)
    assert listed_workers(admin_client) == []
    assert "No live workers." in status_text()
