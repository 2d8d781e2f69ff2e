"""A worker cut off from PostgreSQL by a network fault must stop its handler in time.

Worker A reaches the database through a :class:`~tests.support.netfault.FaultProxy`;
worker B connects directly. A claims a long job, then the proxy black-holes
(or resets) A's traffic. A's handler must see ``ctx.cancelled`` before B
starts the next attempt, so that no two runs of the job overlap. Once the
network heals, A serves on. The handler touches no database: it writes what
it saw to a file (see ``example.watchful``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast
from urllib.parse import urlsplit

import pytest
from django.db import connection

from django_jobs import schedule_job
from django_jobs.models import Attempt, Job, JobStatus
from tests.conftest import RunjobsProcesses, database_url, wait_until
from tests.support.netfault import FaultProxy, Mode, fault_proxy
from tests.support.runs import (
    assert_cancelled_in_time,
    assert_no_overlap,
    lease_lapses_at,
    read_runs,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.skip_locked]


def leases(seconds: float = 3.0, **more: str) -> dict[str, str]:
    """Settings for a worker with short leases (a beat is a third of a lease)."""
    return {"JOBS_LEASE_SECONDS": str(seconds), "JOBS_MAINTENANCE_SECONDS": "0.5", **more}


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    settings = connection.settings_dict
    with fault_proxy(settings["HOST"] or "127.0.0.1", int(settings["PORT"])) as running:
        yield running


def through(proxy: FaultProxy) -> str:
    """The test database's URL, by way of the proxy."""
    url = urlsplit(database_url())
    auth, _, _ = url.netloc.rpartition("@")
    netloc = f"{auth}@127.0.0.1:{proxy.port}" if auth else f"127.0.0.1:{proxy.port}"
    return url._replace(netloc=netloc).geturl()


def start_cut_off(
    runjobs: RunjobsProcesses, proxy: FaultProxy, workers: int, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    """Start worker A, which reaches the database through the proxy."""
    return runjobs.start(
        "--queue", "default", "--workers", str(workers), env={**env, "DATABASE_URL": through(proxy)}
    )


def cut(proxy: FaultProxy, fault: str) -> float:
    """Cut worker A off: ``blackhole``, ``reset`` or ``reset-then-blackhole``; return when.

    The last one is a server that went away: open connections are reset, and
    reconnecting hangs (nothing answers).
    """
    for mode in fault.split("-then-"):
        proxy.set_mode(cast(Mode, mode))
    return time.time()


def stop(runjobs: RunjobsProcesses, process: subprocess.Popen[bytes], timeout: float = 20) -> None:
    os.kill(process.pid, signal.SIGTERM)
    assert process.wait(timeout) == 0, runjobs.log(process)


@pytest.mark.parametrize("fault", ["blackhole", "reset", "reset-then-blackhole"])
def test_partition_cut_off_worker_cancels_its_handler_before_another_takes_the_job(
    runjobs_process: RunjobsProcesses, proxy: FaultProxy, tmp_path: Path, fault: str
) -> None:
    lease, runs_for = 3.0, 9.0
    log = tmp_path / "events.jsonl"
    payload = {"seconds": runs_for, "then_seconds": 0.5, "log": str(log)}
    job = schedule_job("example.watchful", payload, max_attempts=3)
    cut_off = start_cut_off(runjobs_process, proxy, 1, leases(lease))
    wait_until(lambda: 1 in read_runs(log, job.pk), timeout=30)
    assert Attempt.objects.get(job=job).owner.split(":")[1] == str(cut_off.pid)

    faulted_at = cut(proxy, fault)
    lapses_at = lease_lapses_at(job)
    rescuer = runjobs_process.start("--queue", "default", env=leases(lease))
    wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED, timeout=30)
    assert [run.pid for run in read_runs(log, job.pk).values()] == [cut_off.pid, rescuer.pid]
    assert_cancelled_in_time(log, job, faulted_at, lapses_at, lease / 3, runs_for)
    assert list(job.attempts.order_by("number").values_list("number", "outcome")) == [
        (1, "lease_expired"),
        (2, "succeeded"),
    ]

    # The network heals: A reconnects and serves on.
    proxy.set_mode("forward")
    stop(runjobs_process, rescuer)
    later = schedule_job("example.record", {})
    wait_until(lambda: Job.objects.get(pk=later.pk).status == JobStatus.SUCCEEDED, timeout=30)
    assert later.attempts.get().owner.split(":")[1] == str(cut_off.pid)
    assert list(job.attempts.order_by("number").values_list("outcome", flat=True)) == [
        "lease_expired",
        "succeeded",
    ]  # A's late result of the first job changed nothing
    stop(runjobs_process, cut_off)


def test_partition_timed_out_job_does_not_hold_up_the_other_leases(
    runjobs_process: RunjobsProcesses, proxy: FaultProxy, tmp_path: Path
) -> None:
    """A handler times out while its worker is cut off: its outcome cannot be written.

    Waiting for that write must not keep the worker from giving up the lease
    of the job it still runs. The timeout (1.5 s) comes before the first
    beat (2 s), so the outcome write is the first call to hang.
    """
    lease, runs_for = 6.0, 10.0
    log = tmp_path / "events.jsonl"
    payload = {"seconds": runs_for, "then_seconds": 0.5, "log": str(log)}
    long_job = schedule_job("example.watchful", payload, max_attempts=3)
    timed = schedule_job("example.watchful_timed", payload, max_attempts=3)
    cut_off = start_cut_off(runjobs_process, proxy, 2, leases(lease))
    wait_until(lambda: all(read_runs(log, job.pk) for job in (long_job, timed)), timeout=30)

    faulted_at = cut(proxy, "blackhole")
    lapses_at = lease_lapses_at(long_job)
    rescuer = runjobs_process.start("--queue", "default", env=leases(lease))
    both = [long_job.pk, timed.pk]
    wait_until(
        lambda: Job.objects.filter(pk__in=both, status=JobStatus.SUCCEEDED).count() == 2,
        timeout=30,
    )
    assert_cancelled_in_time(log, long_job, faulted_at, lapses_at, lease / 3, runs_for)
    assert read_runs(log, timed.pk)[1].ended_by == "cancelled"  # by its timeout
    assert_no_overlap(read_runs(log, timed.pk))

    proxy.set_mode("forward")
    stop(runjobs_process, rescuer)
    stop(runjobs_process, cut_off)


def test_partition_cut_off_worker_stops_on_sigterm_within_a_bounded_time(
    runjobs_process: RunjobsProcesses, proxy: FaultProxy, tmp_path: Path
) -> None:
    """A worker told to stop while cut off exits 0 within a lease, the grace period and slack.

    It cannot hand its job back; the job's lease runs out as after a crash.
    """
    lease, grace = 3.0, 2.0
    stops_within = lease + grace + 5
    log = tmp_path / "events.jsonl"
    job = schedule_job("example.watchful", {"seconds": 30, "log": str(log)})
    env = leases(lease, JOBS_SHUTDOWN_GRACE_SECONDS=str(grace))
    cut_off = start_cut_off(runjobs_process, proxy, 1, env)
    wait_until(lambda: read_runs(log, job.pk), timeout=30)
    cut(proxy, "blackhole")
    time.sleep(0.5)  # its threads are now inside calls that get no answer
    os.kill(cut_off.pid, signal.SIGTERM)
    cut_off.wait(stops_within)  # else StillRunning, with its threads' stacks
    output = runjobs_process.log(cut_off)
    assert cut_off.returncode == 0, output
    assert read_runs(log, job.pk)[1].ended_by == "cancelled"
    # Its last writes (the leader lease, its row) try the database once between them: a
    # second try would wait out another connection's timeout.
    failed = "MainThread django_jobs.worker.connections: worker step failed"
    assert output.partition("stop requested")[2].count(failed) == 1, output
