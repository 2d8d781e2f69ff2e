"""Real ``manage.py runjobs`` subprocesses and real signals."""

import os
import signal
from collections import Counter

import pytest
from django.db import connection

from django_jobs import schedule_job, schedule_jobs
from django_jobs.models import Attempt, Job, JobStatus
from testproject.example.models import Execution
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(params=["delete", "wal"])
def journal_mode(request):
    """SQLite's two journal modes; other databases run the test once."""
    if connection.vendor != "sqlite":
        if request.param != "delete":
            pytest.skip("journal modes are SQLite's")
        yield None
        return
    with connection.cursor() as cursor:
        cursor.execute(f"PRAGMA journal_mode={request.param}")
        assert cursor.fetchone()[0] == request.param
    yield request.param
    connection.close()
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode=delete")


def test_runjobs_two_processes_run_each_of_500_jobs_exactly_once(runjobs_process, journal_mode):
    # Each job takes 10 ms, so that one process cannot drain them all before the
    # other has started: the claim takes a batch in one statement and is fast.
    jobs = schedule_jobs(
        [{"job": "example.record", "payload": {"n": n, "sleep": 0.01}} for n in range(500)]
    )
    # The workers keep the mode (else they would put the file in WAL mode).
    env = {"JOBS_SQLITE_JOURNAL_MODE": journal_mode} if journal_mode else {}
    workers = [runjobs_process.start("--burst", "--queue", "default", env=env) for _ in range(2)]
    for process in workers:
        assert process.wait(120) == 0, runjobs_process.log(process)
    if journal_mode:
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA journal_mode")
            assert cursor.fetchone()[0] == journal_mode
    assert Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 500
    runs = Counter(Execution.objects.values_list("job_id", flat=True))
    assert set(runs) == {job.pk for job in jobs}
    assert set(runs.values()) == {1}
    assert Attempt.objects.filter(outcome="succeeded").count() == 500
    assert len(set(Execution.objects.values_list("pid", flat=True))) == 2  # both worked


def test_runjobs_sigterm_mid_job_finishes_it_and_exits_0(runjobs_process, tmp_path):
    mark = tmp_path / "started"
    job = schedule_job("example.record", {"sleep": 1.0, "mark": str(mark)})
    process = runjobs_process.start("--queue", "default")
    # The handler's own mark: the attempt's row is written at the claim, before a handler
    # thread takes the job, and a stop in between hands the job back unstarted.
    wait_until(lambda: mark.exists() and mark.read_text() == f"{job.pk}:1\n", timeout=20)
    os.kill(process.pid, signal.SIGTERM)
    assert process.wait(20) == 0, runjobs_process.log(process)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert Execution.objects.filter(job_id=job.pk).count() == 1


def test_runjobs_sigkill_mid_job_is_reclaimed_after_the_lease(runjobs_process):
    job = schedule_job("example.record", {"sleep": 2.0}, max_attempts=3)
    short_lease = {"JOBS_LEASE_SECONDS": "1.5"}
    doomed = runjobs_process.start("--queue", "default", env=short_lease)
    wait_until(lambda: Attempt.objects.filter(job=job).exists(), timeout=20)
    os.kill(doomed.pid, signal.SIGKILL)
    doomed.wait(10)
    rescuer = runjobs_process.start("--queue", "default", env=short_lease)
    wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED, timeout=30)
    os.kill(rescuer.pid, signal.SIGTERM)
    assert rescuer.wait(20) == 0, runjobs_process.log(rescuer)
    outcomes = list(Attempt.objects.filter(job=job).values_list("number", "outcome"))
    assert outcomes == [(1, "lease_expired"), (2, "succeeded")]
    assert Execution.objects.filter(job_id=job.pk).count() == 1
    owners = set(Attempt.objects.filter(job=job).values_list("owner", flat=True))
    assert len(owners) == 2


def test_runjobs_rejects_bad_options(runjobs_process):
    process = runjobs_process.start("--workers", "0")
    assert process.wait(20) != 0
    assert "--workers must be at least 1" in runjobs_process.log(process)


# One process, and the same through a supervisor (`runjobs --processes 2`), which forwards
# the signals to its children.
PROCESSES = pytest.mark.parametrize("processes", [(), ("--processes", "2")], ids=["1", "2"])


@PROCESSES
def test_runjobs_sigterm_past_the_grace_releases_without_using_an_attempt(
    runjobs_process, processes
):
    job = schedule_job("example.record", {"sleep": 3.0}, max_attempts=1)
    quick_grace = {"JOBS_SHUTDOWN_GRACE_SECONDS": "0.3"}
    process = runjobs_process.start("--queue", "default", *processes, env=quick_grace)
    wait_until(lambda: Attempt.objects.filter(job=job).exists(), timeout=20)
    os.kill(process.pid, signal.SIGTERM)
    assert process.wait(20) == 0, runjobs_process.log(process)
    job.refresh_from_db()
    assert (job.status, job.attempts_used, job.lease_owner) == (JobStatus.PENDING, 0, None)
    assert Attempt.objects.get(job=job).outcome == "released"
    # A restart runs it, although max_attempts is 1.
    again = runjobs_process.start("--queue", "default", "--burst")
    assert again.wait(30) == 0, runjobs_process.log(again)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert list(job.attempts.values_list("outcome", flat=True)) == ["released", "succeeded"]
    assert Execution.objects.filter(job_id=job.pk).count() == 1


def test_runjobs_sigterm_cancels_a_handler_that_honours_ctx(runjobs_process):
    job = schedule_job("example.patient", {"seconds": 60})
    process = runjobs_process.start("--queue", "default")
    wait_until(lambda: Attempt.objects.filter(job=job).exists(), timeout=20)
    os.kill(process.pid, signal.SIGTERM)
    assert process.wait(10) == 0, runjobs_process.log(process)  # well within the 20 s grace
    job.refresh_from_db()
    assert (job.status, job.attempts_used) == (JobStatus.PENDING, 0)
    assert Attempt.objects.get(job=job).outcome == "released"


@PROCESSES
def test_runjobs_second_signal_exits_at_once_and_hands_the_job_back(runjobs_process, processes):
    job = schedule_job("example.record", {"sleep": 30.0})
    process = runjobs_process.start("--queue", "default", *processes)
    wait_until(lambda: Attempt.objects.filter(job=job).exists(), timeout=20)
    os.kill(process.pid, signal.SIGTERM)
    os.kill(process.pid, signal.SIGINT)
    assert process.wait(10) == 1, runjobs_process.log(process)
    job.refresh_from_db()  # due again at once: not left running until its lease runs out
    assert (job.status, job.lease_owner, job.attempts_used) == (JobStatus.PENDING, None, 0)
    assert Attempt.objects.get(job=job).outcome == "released"


def test_runjobs_a_job_longer_than_its_lease_keeps_it_and_runs_once(runjobs_process):
    job = schedule_job("example.record", {"sleep": 4.0})
    short_lease = {"JOBS_LEASE_SECONDS": "1.2"}
    workers = [runjobs_process.start("--queue", "default", env=short_lease) for _ in range(2)]
    wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED, timeout=30)
    assert list(job.attempts.values_list("outcome", flat=True)) == ["succeeded"]
    assert Execution.objects.filter(job_id=job.pk).count() == 1
    for process in workers:
        os.kill(process.pid, signal.SIGTERM)
        assert process.wait(20) == 0, runjobs_process.log(process)
