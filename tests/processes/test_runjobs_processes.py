"""``runjobs --processes 2``: a real supervisor, its real children and real signals."""

from __future__ import annotations

import os
import re
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from django_jobs import schedule_job, schedule_jobs
from django_jobs.models import Attempt, Job, JobStatus, WorkerProcess
from testproject.example.models import Execution
from tests.conftest import RunjobsProcesses, manage, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

TWO = ("--processes", "2", "--queue", "default")


def child_pids(log: str) -> list[int]:
    """Every child the supervisor's log says it started, restarts included."""
    return [int(pid) for pid in re.findall(r"pid (\d+) MainThread \S+server: worker", log)]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def supervised(runjobs_process: RunjobsProcesses) -> Iterator[RunjobsProcesses]:
    """``runjobs_process``; at teardown, the children too are killed (by their pids)."""
    try:
        yield runjobs_process
    finally:
        for process in runjobs_process.processes:
            for pid in child_pids(runjobs_process.log(process)):
                if alive(pid):
                    os.kill(pid, signal.SIGKILL)


def registered_children(supervisor_pid: int) -> list[WorkerProcess]:
    """The children's rows, if the supervisor's own row (``pid``) is there and they name it."""
    top = WorkerProcess.objects.filter(pid=supervisor_pid, supervisor__isnull=True).first()
    assert top is None or top.process_count == 2  # it serves through its children only
    return list(WorkerProcess.objects.filter(supervisor=top.id)) if top else []


def test_runjobs_processes_2_run_each_of_300_jobs_exactly_once(supervised):
    jobs = schedule_jobs(
        [{"job": "example.record", "payload": {"n": n, "sleep": 0.01}} for n in range(300)]
    )
    process = supervised.start("--burst", *TWO)
    assert process.wait(120) == 0, supervised.log(process)
    runs = Counter(Execution.objects.values_list("job_id", flat=True))
    assert runs == Counter(job.pk for job in jobs)  # each exactly once
    assert Attempt.objects.filter(outcome="succeeded").count() == 300
    pids = set(Execution.objects.values_list("pid", flat=True))
    assert pids == set(child_pids(supervised.log(process)))  # both children worked
    assert len(pids) == 2 and process.pid not in pids
    assert not WorkerProcess.objects.exists()  # every row removed, the supervisor's too


def test_runjobs_processes_sigterm_finishes_the_jobs_and_leaves_no_child(supervised):
    jobs = [schedule_job("example.record", {"sleep": 1.5}) for _ in range(2)]
    process = supervised.start(*TWO)
    children = wait_until(lambda: len(registered_children(process.pid)) == 2, timeout=30)
    assert children
    wait_until(lambda: Attempt.objects.count() == 2, timeout=20)
    os.kill(process.pid, signal.SIGTERM)
    assert process.wait(20) == 0, supervised.log(process)
    log = supervised.log(process)
    assert "stopping (waiting for the running jobs)" in log
    assert "stopped: 2 worker processes ended; exit status 0" in log
    assert not any(alive(pid) for pid in child_pids(log))
    for job in jobs:
        job.refresh_from_db()
        assert job.status == JobStatus.SUCCEEDED
    assert Counter(Execution.objects.values_list("job_id", flat=True)) == {j.pk: 1 for j in jobs}
    assert not WorkerProcess.objects.exists()


def test_runjobs_processes_sigint_to_the_process_group_is_one_graceful_stop(supervised, tmp_path):
    """A terminal's Ctrl-C signals the whole foreground group: the children, in groups of
    their own, must not see it besides the supervisor's forwarded SIGTERM (two signals
    would stop them at once, handing the job back).

    The signal goes once the handler runs: a job claimed but not yet handed to a thread
    is handed back by a graceful stop too, so its attempt's row is not enough."""
    mark = tmp_path / "running"
    job = schedule_job("example.record", {"sleep": 1.5, "mark": str(mark)})
    process = supervised.start(*TWO, start_new_session=True)
    wait_until(mark.exists, timeout=30)
    os.killpg(process.pid, signal.SIGINT)
    assert process.wait(20) == 0, supervised.log(process)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED, supervised.log(process)
    assert list(job.attempts.values_list("outcome", flat=True)) == ["succeeded"]
    assert "stopping at once" not in supervised.log(process)


def test_runjobs_processes_kill_9_of_a_child_restarts_it_and_its_job_runs_once(supervised):
    job = schedule_job("example.record", {"sleep": 2.0}, max_attempts=3)
    process = supervised.start(*TWO, env={"JOBS_LEASE_SECONDS": "1.5"})
    wait_until(lambda: len(registered_children(process.pid)) == 2, timeout=30)
    attempt = wait_until(lambda: Attempt.objects.filter(job=job).first(), timeout=20)
    doomed = int(attempt.owner.split(":")[1])
    os.kill(doomed, signal.SIGKILL)
    wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED, timeout=30)
    log = supervised.log(process)
    assert f"(pid {doomed}) ended (killed by SIGKILL)" in log
    assert "starting it again in 1.0 s" in log
    wait_until(lambda: len(child_pids(supervised.log(process))) == 3, timeout=20)  # restarted
    wait_until(
        lambda: (
            {row.pid for row in registered_children(process.pid)}
            == set(child_pids(supervised.log(process))) - {doomed}
        ),
        timeout=20,
    )
    outcomes = list(job.attempts.values_list("number", "outcome"))
    assert outcomes == [(1, "lease_expired"), (2, "succeeded")]
    assert Execution.objects.filter(job_id=job.pk).count() == 1
    os.kill(process.pid, signal.SIGTERM)
    assert process.wait(20) == 0, supervised.log(process)


def test_runjobs_processes_children_stop_when_the_supervisor_is_killed(supervised):
    process = supervised.start(*TWO)
    wait_until(lambda: len(registered_children(process.pid)) == 2, timeout=30)
    pids = child_pids(supervised.log(process))
    os.kill(process.pid, signal.SIGKILL)
    process.wait(10)
    wait_until(lambda: not any(alive(pid) for pid in pids), timeout=20)
    assert "the supervisor is gone; stopping" in supervised.log(process)
    wait_until(lambda: WorkerProcess.objects.filter(pid__in=pids).count() == 0, timeout=10)


def test_runjobs_processes_a_child_that_cannot_start_is_not_restarted(supervised, tmp_path: Path):
    # Settings the supervisor takes and its children (told by their environment) do not.
    (tmp_path / "child_settings.py").write_text(
        "import os\nfrom testproject.settings import *\n"
        "if 'DJANGO_JOBS_PROCESS' in os.environ:\n"
        "    DJANGO_JOBS = {**DJANGO_JOBS, 'LEASE_SECONDS': float('inf')}\n"
    )
    env = {"DJANGO_SETTINGS_MODULE": "child_settings", "PYTHONPATH": str(tmp_path)}
    process = supervised.start(*TWO, env=env)
    assert process.wait(60) == 1, supervised.log(process)
    log = supervised.log(process)
    assert "(django_jobs.E003) DJANGO_JOBS['LEASE_SECONDS'] must be a positive finite" in log
    assert "cannot start with these settings (exit status 78); stopping the others" in log
    assert "starting it again" not in log
    assert log.count("started 2 worker processes") == 1


def test_runjobs_processes_checks_once_before_starting_a_child(fresh_database_url):
    result = manage("runjobs", *TWO, "--burst", url=fresh_database_url, JOBS_POLL_SECONDS="0.05")
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [  # said once, by the supervisor: no child started
        "CommandError: Database 'default' has no django_jobs tables: "
        "run `python manage.py migrate` first."
    ]
