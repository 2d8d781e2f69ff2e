"""What a watchful handler (``example.watchful``) wrote of its runs, and the rules they
keep: no two runs of a job overlap; a worker cut off stops its handler in time."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from django_jobs.models import Job
from tests.conftest import wait_until


def lease_lapses_at(job: Job) -> float:
    """When the lease A holds on ``job`` lapses (wall time), read once A is cut off."""
    time.sleep(0.3)  # a renewal that was on its way when the link went down lands first
    expires_at = Job.objects.get(pk=job.pk).lease_expires_at
    assert expires_at is not None
    return expires_at.timestamp()


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


def assert_cancelled_in_time(
    log: Path, job: Job, faulted_at: float, lapses_at: float, beat: float, runs_for: float
) -> None:
    """A's run saw ctx.cancelled before its lease lapsed and before B's run began.

    The rule: a worker that cannot renew a lease gives it up (cancelling the
    handler) one beat before it lapses; half a beat is the margin allowed.
    """
    # If A's handler did not stop in time, wait (bounded) to see when it ended.
    wait_until(lambda: read_runs(log, job.pk)[1].ended_at is not None, timeout=runs_for + 5)
    runs = read_runs(log, job.pk)
    first, second = runs[1], runs[2]

    def since(moment: float | None) -> str:
        return "never" if moment is None else f"fault+{moment - faulted_at:.1f}s"

    told = (
        f"job #{job.pk}: A (pid {first.pid}) {first.ended_by} at {since(first.ended_at)}; "
        f"its lease lapsed at {since(lapses_at)}; B (pid {second.pid}) started attempt "
        f"{second.attempt} at {since(second.started_at)}"
    )
    assert first.ended_by == "cancelled", f"A never saw ctx.cancelled: {told}"
    assert first.ended_at is not None and first.ended_at < second.started_at, told
    assert first.ended_at <= lapses_at - beat / 2, f"A gave the lease up too late: {told}"
    assert_no_overlap(runs)
