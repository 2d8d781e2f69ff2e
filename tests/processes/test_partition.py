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

    attempt: int
    pid: int
    started_at: float
    ended_at: float | None = None
    ended_by: str = ""


def read_runs(log: Path) -> dict[int, Run]:
    runs: dict[int, Run] = {}
    if not log.exists():
        return runs
    for line in log.read_text().splitlines():
        event = json.loads(line)
        if event["event"] == "started":
            runs[event["attempt"]] = Run(event["attempt"], event["pid"], event["at"])
        else:
            run = runs[event["attempt"]]
            run.ended_at, run.ended_by = event["at"], event["event"]
    return runs


def assert_no_overlap(runs: dict[int, Run]) -> None:
    ordered = sorted(runs.values(), key=lambda run: run.started_at)
    for run, later in zip(ordered, ordered[1:], strict=False):
        assert run.ended_at is not None and run.ended_at <= later.started_at, (
            f"attempt {run.attempt} (pid {run.pid}) still ran when attempt {later.attempt} "
            f"(pid {later.pid}) started: {runs}"
        )


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
    payload = {"seconds": 3 * LEASE_SECONDS, "then_seconds": 0.5, "log": str(log)}
    job = schedule_job("example.watchful", payload, max_attempts=3)
    cut_off = runjobs_process.start(
        "--queue", "default", "--workers", "1", env={**SHORT_LEASES, "DATABASE_URL": through(proxy)}
    )
    wait_until(lambda: 1 in read_runs(log), timeout=30)
    assert Attempt.objects.get(job=job).owner.split(":")[1] == str(cut_off.pid)

    cut(proxy, fault)
    faulted_at = time.time()
    rescuer = runjobs_process.start("--queue", "default", env=SHORT_LEASES)
    wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED, timeout=30)
    # A must have stopped before B started; if it did not, wait (bounded) to see when it did.
    wait_until(lambda: read_runs(log)[1].ended_at is not None, timeout=3 * LEASE_SECONDS + 5)
    runs = read_runs(log)
    first, second = runs[1], runs[2]

    def since(moment: float | None) -> str:
        return "never" if moment is None else f"fault+{moment - faulted_at:.1f}s"

    timeline = (
        f"A (pid {first.pid}) {first.ended_by} at {since(first.ended_at)}; "
        f"B (pid {second.pid}) started attempt 2 at {since(second.started_at)}"
    )
    assert (first.pid, second.pid) == (cut_off.pid, rescuer.pid), timeline
    assert first.ended_by == "cancelled", f"A never saw ctx.cancelled: {timeline}"
    assert first.ended_at is not None and first.ended_at < second.started_at, timeline
    assert_no_overlap(runs)
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
