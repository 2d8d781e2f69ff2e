"""A worker host's wall clock stepped while it runs (an NTP ``makestep``, a virtual
machine resumed, a ``date`` by hand), by 30 s either way, with 5-second leases.

Two ``runjobs``: one on time, one whose wall clock libfaketime steps (its monotonic
clock runs on untouched, as it does through a real step). Neither may take a live lease
from the other, nor the leader lease from a live leader: each job runs once, on one
attempt, and the leader keeps its lease in its epoch.

On SQLite the database's clock is the host's, and the stepped process's SQLite reads
the stepped one: its worker takes the step at its clock's next re-measure, 60 s after
its start, so the test must end before then (it does, by far, and checks it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from django.db import connection

from django_jobs import schedule_jobs
from django_jobs.models import Attempt, Job, JobStatus, Leader, WorkerProcess
from testproject.example.models import Execution
from tests.conftest import RunjobsProcesses, wait_until
from tests.support import faketime

pytestmark = pytest.mark.django_db(transaction=True)

LEADER_LEASE = 3.0  # the tests' runjobs default; leases of jobs: 5 s
RE_MEASURE_SECONDS = 60.0  # the worker clock's refresh period


def pid_of(owner: str) -> int:
    return int(owner.split(":")[1])


def leader() -> tuple[str, int] | None:
    row = Leader.objects.filter(expires_at__isnull=False).first()
    return None if row is None else (row.owner, row.epoch)


def holding(pid: int) -> int:
    """How many running jobs ``pid`` holds the lease of."""
    owners = Job.objects.filter(status=JobStatus.RUNNING).values_list("lease_owner", flat=True)
    return sum(1 for owner in owners if owner and pid_of(owner) == pid)


def jobs(count: int, seconds: float) -> list[int]:
    payload = {"sleep": seconds}
    return [
        job.pk for job in schedule_jobs([{"job": "example.record", "payload": payload}] * count)
    ]


def stop(runjobs: RunjobsProcesses, process: subprocess.Popen[bytes]) -> None:
    os.kill(process.pid, signal.SIGTERM)
    assert process.wait(30) == 0, runjobs.log(process)


@pytest.mark.parametrize(
    ("step", "leading"),
    [
        (30, "on time"),  # ahead, it would see the leader's lease and the others' as lapsed
        (-30, "stepped"),  # behind, its heartbeat and the leader's renewals would stall
    ],
)
def test_clock_step_of_a_hosts_wall_clock_takes_no_live_lease_and_no_leadership(
    runjobs_process: RunjobsProcesses, tmp_path: Path, step: int, leading: str
) -> None:
    library = faketime.library()
    if library is None:
        pytest.skip("needs libfaketime (apt-get install libfaketime)")
    clock = faketime.SteppedClock(library, tmp_path)
    args = ("--queue", "default", "--workers", "2")

    def start(which: str) -> subprocess.Popen[bytes]:
        return runjobs_process.start(*args, env=clock.env() if which == "stepped" else None)

    first = start(leading)
    row = wait_until(leader, timeout=40)
    assert pid_of(row[0]) == first.pid
    second = start("on time" if leading == "stepped" else "stepped")
    stepped = first if leading == "stepped" else second
    stepped_since = time.monotonic()
    wait_until(lambda: WorkerProcess.objects.filter(pid=second.pid).exists(), timeout=40)

    # Four 8-second jobs, on both workers: they run through the step.
    long = jobs(4, 8.0)
    wait_until(lambda: holding(first.pid) and holding(second.pid), timeout=20)
    clock.step(step)
    stepped_at = time.monotonic()
    leaders = {row}
    short = jobs(12, 0.5)  # and jobs scheduled after it: the stepped worker claims on
    done = [*long, *short]

    def all_done() -> bool:
        leaders.add(leader())
        return Job.objects.filter(pk__in=done, status=JobStatus.SUCCEEDED).count() == len(done)

    wait_until(all_done, timeout=60)
    while time.monotonic() < stepped_at + 2 * LEADER_LEASE + 2:  # the leader's lease lapses
        leaders.add(leader())
        time.sleep(0.1)
    leaders.add(leader())

    # Each job ran once: none was taken back from its live worker. (A job claimed ahead
    # and handed back unstarted leaves an attempt "released".)
    attempts = list(Attempt.objects.filter(job_id__in=done).values_list("job_id", "outcome"))
    assert not [pair for pair in attempts if pair[1] == "lease_expired"], attempts
    succeeded = Counter(job_id for job_id, outcome in attempts if outcome == "succeeded")
    assert succeeded == Counter(done)
    assert Counter(Execution.objects.values_list("job_id", flat=True)) == Counter(done)
    owners = {pid_of(owner) for owner in Attempt.objects.values_list("owner", flat=True)}
    assert stepped.pid in owners
    # The leader kept its lease, in its epoch, all along.
    assert leaders == {row}, leaders
    if connection.vendor == "sqlite":  # see the module's docstring
        assert time.monotonic() - stepped_since < RE_MEASURE_SECONDS
    for process in (second, first):
        stop(runjobs_process, process)
