"""A worker cut off from PostgreSQL by a network fault must stop its handler in time.

Worker A reaches the database through a :class:`~tests.netfault.FaultProxy`;
worker B connects directly. A claims a long job, then the proxy black-holes
(or resets) A's traffic. A's handler must see ``ctx.cancelled`` before B
starts the next attempt, so that no two runs of the job overlap. Once the
network heals, A serves on. The handler touches no database: it writes what
it saw to a file (see ``example.watchful``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast
from urllib.parse import urlsplit

import pytest
from django.db import connection

from django_jobs import schedule_job
from django_jobs.models import Attempt, Job, JobStatus
from tests.conftest import RunjobsProcesses, database_url, wait_until
from tests.netfault import FaultProxy, Mode, fault_proxy

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.skip_locked]

LEASE_SECONDS = 3.0
RUNS_FOR = 3 * LEASE_SECONDS  # the cut-off worker's handler, unless cancelled
SHORT_LEASES = {"JOBS_LEASE_SECONDS": str(LEASE_SECONDS), "JOBS_MAINTENANCE_SECONDS": "0.5"}


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


@dataclass
class Run:
    """One attempt's run of the handler, as its own lines in the event file tell it."""

    job_id: int
    attempt: int
    pid: int
    started_at: float
    ended_at: float | None = None
    ended_by: str = ""


def read_runs(log: Path, job_id: int) -> dict[int, Run]:
    """The runs of job ``job_id`` by attempt number."""
    runs: dict[int, Run] = {}
    if not log.exists():
        return runs
    for line in log.read_text().splitlines():
        event = json.loads(line)
        if event["job_id"] != job_id:
            continue
        if event["event"] == "started":
            runs[event["attempt"]] = Run(job_id, event["attempt"], event["pid"], event["at"])
        else:
            run = runs[event["attempt"]]
            run.ended_at, run.ended_by = event["at"], event["event"]
    return runs


def assert_no_overlap(runs: dict[int, Run]) -> None:
    ordered = sorted(runs.values(), key=lambda run: run.started_at)
    for run, later in zip(ordered, ordered[1:], strict=False):
        assert run.ended_at is not None and run.ended_at <= later.started_at, (
            f"job #{run.job_id}: attempt {run.attempt} (pid {run.pid}) still ran when attempt "
            f"{later.attempt} (pid {later.pid}) started: {runs}"
        )


def timeline(first: Run, second: Run, faulted_at: float) -> str:
    def since(moment: float | None) -> str:
        return "never" if moment is None else f"fault+{moment - faulted_at:.1f}s"

    return (
        f"job #{first.job_id}: A (pid {first.pid}) {first.ended_by or 'ran on'} at "
        f"{since(first.ended_at)}; B (pid {second.pid}) started attempt {second.attempt} at "
        f"{since(second.started_at)}"
    )


def assert_cancelled_before_the_next_attempt(
    log: Path, job: Job, cut_off: int, rescuer: int, faulted_at: float
) -> None:
    """A's run saw ctx.cancelled before B's run began, and no two runs overlapped."""
    # If A's handler did not stop in time, wait (bounded) to see when it ended.
    wait_until(lambda: read_runs(log, job.pk)[1].ended_at is not None, timeout=RUNS_FOR + 5)
    runs = read_runs(log, job.pk)
    first, second = runs[1], runs[2]
    told = timeline(first, second, faulted_at)
    assert (first.pid, second.pid) == (cut_off, rescuer), told
    assert first.ended_by == "cancelled", f"A never saw ctx.cancelled: {told}"
    assert first.ended_at is not None and first.ended_at < second.started_at, told
    assert_no_overlap(runs)


def stop(runjobs: RunjobsProcesses, process: subprocess.Popen[bytes], timeout: float = 20) -> None:
    os.kill(process.pid, signal.SIGTERM)
    assert process.wait(timeout) == 0, runjobs.log(process)


def cut(proxy: FaultProxy, fault: str) -> None:
    """Cut the proxied worker off: ``blackhole``, ``reset``, or ``reset-then-blackhole``.

    The last one is a server that went away: open connections are reset, and
    reconnecting hangs (nothing answers).
    """
    for mode in fault.split("-then-"):
        proxy.set_mode(cast(Mode, mode))


@pytest.mark.parametrize("fault", ["blackhole", "reset", "reset-then-blackhole"])
def test_partition_cut_off_worker_cancels_its_handler_before_another_takes_the_job(
    runjobs_process: RunjobsProcesses, proxy: FaultProxy, tmp_path: Path, fault: str
) -> None:
    log = tmp_path / "events.jsonl"
    payload = {"seconds": RUNS_FOR, "then_seconds": 0.5, "log": str(log)}
    job = schedule_job("example.watchful", payload, max_attempts=3)
    cut_off = runjobs_process.start(
        "--queue", "default", "--workers", "1", env={**SHORT_LEASES, "DATABASE_URL": through(proxy)}
    )
    wait_until(lambda: 1 in read_runs(log, job.pk), timeout=30)
    assert Attempt.objects.get(job=job).owner.split(":")[1] == str(cut_off.pid)

    cut(proxy, fault)
    faulted_at = time.time()
    rescuer = runjobs_process.start("--queue", "default", env=SHORT_LEASES)
    wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED, timeout=30)
    assert_cancelled_before_the_next_attempt(log, job, cut_off.pid, rescuer.pid, faulted_at)
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
    """A handler times out while the worker is cut off: its outcome cannot be written.

    Waiting for that write must not keep the worker from giving up the lease
    of the job it still runs.
    """
    log = tmp_path / "events.jsonl"
    payload = {"seconds": RUNS_FOR, "then_seconds": 0.5, "log": str(log)}
    long_job = schedule_job("example.watchful", payload, max_attempts=3)
    timed = schedule_job("example.watchful_timed", payload, max_attempts=3)  # times out at 1.5 s
    cut_off = runjobs_process.start(
        "--queue", "default", "--workers", "2", env={**SHORT_LEASES, "DATABASE_URL": through(proxy)}
    )
    wait_until(lambda: all(read_runs(log, job.pk) for job in (long_job, timed)), timeout=30)

    proxy.set_mode("blackhole")
    faulted_at = time.time()
    rescuer = runjobs_process.start("--queue", "default", env=SHORT_LEASES)
    wait_until(
        lambda: (
            Job.objects.filter(status=JobStatus.SUCCEEDED, pk__in=[long_job.pk, timed.pk]).count()
            == 2
        ),
        timeout=30,
    )
    assert_cancelled_before_the_next_attempt(log, long_job, cut_off.pid, rescuer.pid, faulted_at)
    assert_no_overlap(read_runs(log, timed.pk))
    assert read_runs(log, timed.pk)[1].ended_by == "cancelled"  # by its timeout

    proxy.set_mode("forward")
    stop(runjobs_process, rescuer)
    stop(runjobs_process, cut_off)


STOPS_WITHIN = LEASE_SECONDS + 2 + 5  # a lease, the grace period, and some slack


def test_partition_cut_off_worker_stops_on_sigterm(
    runjobs_process: RunjobsProcesses, proxy: FaultProxy, tmp_path: Path
) -> None:
    """A worker told to stop while cut off exits within a bounded time.

    It cannot hand its job back; the job's lease runs out as after a crash.
    """
    log = tmp_path / "events.jsonl"
    job = schedule_job("example.watchful", {"seconds": RUNS_FOR, "log": str(log)})
    cut_off = runjobs_process.start(
        "--queue",
        "default",
        "--workers",
        "1",
        env={
            **SHORT_LEASES,
            "JOBS_SHUTDOWN_GRACE_SECONDS": "2",
            "DATABASE_URL": through(proxy),
        },
    )
    wait_until(lambda: read_runs(log, job.pk), timeout=30)
    proxy.set_mode("blackhole")
    time.sleep(0.5)  # its threads are now inside calls that get no answer
    os.kill(cut_off.pid, signal.SIGTERM)
    try:
        cut_off.wait(STOPS_WITHIN)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the worker did not stop within {STOPS_WITHIN}s of SIGTERM while cut off")
    assert cut_off.returncode == 0, runjobs_process.log(cut_off)
    assert read_runs(log, job.pk)[1].ended_by == "cancelled"
