"""Faults with real runjobs processes: paused workers, a server restart, kill -9 storms."""

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import defaultdict

import pytest
from django.db import connection, connections

from django_jobs import schedule_job, schedule_jobs
from django_jobs.models import Attempt, Job, JobStatus
from testproject.example.models import Execution
from tests.conftest import ROOT, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def pause_holding_no_lock(process: subprocess.Popen) -> None:
    """SIGSTOP ``process`` at a moment it holds no SQLite write lock.

    SQLite has one lock for the whole database: a process paused while it
    holds it stalls every other process (see docs/explanation/guarantees.md). This test
    is about leases, so on SQLite it pauses the worker between two writes.
    """
    for _ in range(100):
        os.kill(process.pid, signal.SIGSTOP)
        if connection.vendor != "sqlite":
            return
        probe = sqlite3.connect(connection.settings_dict["NAME"], timeout=0.2)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return
        except sqlite3.OperationalError:
            os.kill(process.pid, signal.SIGCONT)
            time.sleep(0.01)
        finally:
            probe.close()
    raise AssertionError("the worker always held the write lock")


def test_fault_paused_worker_past_its_lease_writes_nothing_and_serves_on(
    runjobs_process, wal, tmp_path
):
    mark = tmp_path / "started"
    job = schedule_job("example.record", {"sleep": 2.0, "mark": str(mark)}, max_attempts=5)
    short = {"JOBS_LEASE_SECONDS": "1.5"}
    paused = runjobs_process.start("--queue", "default", "--workers", "2", env=short)
    # Paused once its handler runs: paused between the claim and the handler's start, it
    # hands the job back on waking (fenced out), and no handler of it runs there at all.
    wait_until(lambda: mark.exists() and f"{job.pk}:1" in mark.read_text(), timeout=20)
    pause_holding_no_lock(paused)
    try:
        rescuer = runjobs_process.start("--queue", "default", env=short)
        wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED, timeout=30)
        os.kill(rescuer.pid, signal.SIGTERM)
        assert rescuer.wait(20) == 0, runjobs_process.log(rescuer)
    finally:
        os.kill(paused.pid, signal.SIGCONT)
    outcomes = list(Attempt.objects.filter(job=job).values_list("number", "outcome"))
    assert outcomes == [(1, "lease_expired"), (2, "succeeded")]
    later = schedule_job("example.record", {})
    wait_until(lambda: Job.objects.get(pk=later.pk).status == JobStatus.SUCCEEDED, timeout=30)
    assert later.attempts.get().owner.split(":")[1] == str(paused.pid)  # it serves on
    # Its own handler of the first job ran on when woken; its result changed nothing: dropped
    # by the heartbeat if it had given the lease up first, else fenced out when written.
    dropped = ("result dropped", "was recorded; dropped")
    wait_until(lambda: any(d in runjobs_process.log(paused) for d in dropped), timeout=10)
    assert list(Attempt.objects.filter(job=job).values_list("number", "outcome")) == outcomes
    assert paused.poll() is None
    os.kill(paused.pid, signal.SIGTERM)
    assert paused.wait(20) == 0, runjobs_process.log(paused)


#: The server script and the environment variable naming the server's directory, by vendor:
#: the fault tests stop and start the server the test setup started (scripts/lib.sh).
SERVER_SCRIPTS = {
    "postgresql": ("pgserver.py", "JOBS_TEST_PG_DIR"),
    "mysql": ("mariadbserver.py", "JOBS_TEST_MARIADB_DIR"),
}


def restartable_server() -> tuple[str, str] | None:
    """The script and directory of the test database's server, if the setup started it."""
    script, variable = SERVER_SCRIPTS.get(connection.vendor, ("", ""))
    if not script or variable not in os.environ:
        return None
    return script, os.environ[variable]


def database_server(verb: str) -> None:
    """``start`` or ``stop`` the test database's server."""
    server = restartable_server()
    assert server is not None
    script, directory = server
    subprocess.run(  # noqa: S603
        [sys.executable, str(ROOT / "scripts" / script), verb, directory],
        check=True,
    )


@pytest.mark.skip_locked
def test_fault_database_restart_mid_job_loses_nothing(runjobs_process):
    if restartable_server() is None:
        pytest.skip("needs the database server scripts/test starts (JOBS_TEST_PG_DIR, ...)")
    job = schedule_job("example.sleep", {"seconds": 2.0})
    worker = runjobs_process.start("--queue", "default", env={"JOBS_LEASE_SECONDS": "20"})
    wait_until(lambda: Attempt.objects.filter(job=job).exists(), timeout=20)
    connections.close_all()
    database_server("stop")
    time.sleep(3)  # the handler finishes while the server is down: its outcome must wait
    database_server("start")
    wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED, timeout=60)
    assert worker.poll() is None, runjobs_process.log(worker)
    assert list(job.attempts.values_list("outcome", flat=True)) == ["succeeded"]
    later = schedule_job("example.record", {})
    wait_until(lambda: Job.objects.get(pk=later.pk).status == JobStatus.SUCCEEDED, timeout=30)
    os.kill(worker.pid, signal.SIGTERM)
    assert worker.wait(20) == 0, runjobs_process.log(worker)


@pytest.fixture
def wal():
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA journal_mode=wal")
        yield
        connection.close()
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA journal_mode=delete")
    else:
        yield


def test_fault_kill_storm_every_job_succeeds_without_overlapping_attempts(runjobs_process, wal):
    rng = random.Random(20261130)
    total = 2000
    schedule_jobs(
        [
            {
                "job": "example.record",
                "payload": {"sleep": rng.choice([0, 0, 0.01, 0.05])},
                "max_attempts": 100,
            }
            for _ in range(total)
        ]
    )
    env = {"JOBS_LEASE_SECONDS": "1", "JOBS_MAINTENANCE_SECONDS": "0.2"}
    workers = [runjobs_process.start("--queue", "default", env=env) for _ in range(4)]
    killed = 0
    deadline = time.monotonic() + 150
    while Job.objects.filter(status=JobStatus.SUCCEEDED).count() < total:
        assert time.monotonic() < deadline, "the storm did not drain"
        time.sleep(0.4)
        # A worker still starting up holds no job: kill one that serves, so that kills
        # land mid-job (a start takes a second or two, several polls of this loop).
        serving = [i for i, w in enumerate(workers) if "serving queues" in runjobs_process.log(w)]
        if killed < 12 and serving:
            victim = rng.choice(serving)
            os.kill(workers[victim].pid, signal.SIGKILL)
            workers[victim].wait(10)
            workers[victim] = runjobs_process.start("--queue", "default", env=env)
            killed += 1
    assert killed >= 5
    assert Job.objects.filter(status=JobStatus.SUCCEEDED).count() == total
    assert Attempt.objects.filter(outcome="lease_expired").exists()  # kills landed mid-job
    by_job = defaultdict(list)
    for job_id, _number, started, finished in Attempt.objects.values_list(
        "job_id", "number", "started_at", "finished_at"
    ).order_by("job_id", "number"):
        by_job[job_id].append((started, finished))
    for attempts in by_job.values():
        for (_, finished), (next_started, _) in zip(attempts, attempts[1:], strict=False):
            assert finished <= next_started  # an attempt ended before the next began
    runs = defaultdict(list)
    for job_id, started, finished in Execution.objects.values_list(
        "job_id", "started_at", "finished_at"
    ):
        runs[job_id].append((started, finished))
    assert len(runs) == total
    for intervals in runs.values():
        intervals.sort()
        for (_, end), (start, _) in zip(intervals, intervals[1:], strict=False):
            assert end <= start  # no two runs of one job at once
    for process in workers:
        os.kill(process.pid, signal.SIGTERM)
        assert process.wait(30) == 0, runjobs_process.log(process)
