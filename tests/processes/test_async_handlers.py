"""Async handlers in a real ``runjobs`` process: on its event loop, with every guarantee a
sync handler has (timeout, cancel, graceful stop, kill -9, limits, progress), and the
blocked loop reported without costing a lease."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from django_jobs import cancel_job, schedule_job, schedule_jobs
from django_jobs.models import Attempt, Job, JobStatus
from testproject.example.models import Execution
from tests.conftest import wait_until
from tests.processes.test_flow_control import most_at_once

pytestmark = pytest.mark.django_db(transaction=True)


def events(log: Path) -> list[str]:
    """What ``example.async_watchful`` noted, in order."""
    if not log.exists():
        return []
    return [json.loads(line)["event"] for line in log.read_text().splitlines()]


def status(job: Job) -> str:
    return Job.objects.get(pk=job.pk).status


def thread_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def stop(runjobs_process, process) -> None:
    os.kill(process.pid, signal.SIGTERM)
    assert process.wait(30) == 0, runjobs_process.log(process)


def test_many_async_jobs_wait_at_once_on_one_loop_beside_sync_ones(runjobs_process):
    """300 jobs each awaiting a second, with two handler threads: they run together on
    the loop (a few seconds, not 150), in a handful of threads; sync jobs of the same
    queue run on their threads meanwhile, and the async ORM works in a handler."""
    asleep = schedule_jobs(
        [{"job": "example.async_add", "payload": {"a": n, "b": 1, "sleep": 1}} for n in range(300)]
    )
    synced = schedule_jobs([{"job": "reports.add", "payload": {"a": n, "b": 2}} for n in range(20)])
    recorded = schedule_job("example.async_record", {"sleep": 0.2})
    started = time.monotonic()
    process = runjobs_process.start(
        "--queue", "default", env={"JOBS_WORKERS": "2", "JOBS_ASYNC_CONCURRENCY": "300"}
    )
    most_threads = 0

    def all_done() -> bool:
        nonlocal most_threads
        most_threads = max(most_threads, thread_count(process.pid))
        return not Job.objects.exclude(status=JobStatus.SUCCEEDED).exists()

    wait_until(all_done, timeout=60, interval=0.05)
    took = time.monotonic() - started
    log = runjobs_process.log(process)
    assert took < 30, (took, log)  # one at a time on two threads: 150 s
    # Running together: the 300 attempts' starts lie within a few seconds of each other.
    starts = sorted(Attempt.objects.filter(job__in=asleep).values_list("started_at", flat=True))
    assert (starts[-1] - starts[0]).total_seconds() < 5, log
    assert most_threads < 40, (most_threads, log)  # not a thread a job
    results = dict(Job.objects.filter(pk__in=[j.pk for j in asleep]).values_list("pk", "result"))
    assert [results[j.pk] for j in asleep] == [n + 1 for n in range(300)]
    assert [j.result for j in Job.objects.filter(pk__in=[j.pk for j in synced]).order_by("pk")] == [
        n + 2 for n in range(20)
    ]
    assert Execution.objects.filter(job_id=recorded.pk).count() == 1
    stop(runjobs_process, process)


def test_an_async_job_past_its_timeout_has_its_task_cancelled(runjobs_process, tmp_path):
    log = tmp_path / "events.jsonl"
    job = schedule_job(
        "example.async_watchful_timed",
        {"seconds": 30, "log": str(log), "heedless": True},
        max_attempts=1,
    )
    process = runjobs_process.start("--queue", "default")
    wait_until(lambda: status(job) == JobStatus.DEAD_LETTERED, timeout=30)
    assert Attempt.objects.get(job=job).outcome == "timed_out"
    wait_until(lambda: events(log) == ["started", "interrupted"], timeout=5)
    stop(runjobs_process, process)


def test_cancel_job_cancels_an_async_jobs_task(runjobs_process, tmp_path):
    log = tmp_path / "events.jsonl"
    payload = {"seconds": 60, "log": str(log), "heedless": True}
    job = schedule_job("example.async_watchful", payload)
    process = runjobs_process.start("--queue", "default")
    wait_until(lambda: events(log) == ["started"], timeout=20)
    cancel_job(job.pk)
    wait_until(lambda: status(job) == JobStatus.CANCELLED, timeout=20)
    assert Attempt.objects.get(job=job).outcome == "cancelled"
    assert events(log) == ["started", "interrupted"]
    stop(runjobs_process, process)


def test_a_stop_lets_async_jobs_see_ctx_cancelled_and_hands_them_back(runjobs_process, tmp_path):
    log = tmp_path / "events.jsonl"
    job = schedule_job("example.async_watchful", {"seconds": 60, "log": str(log)})
    process = runjobs_process.start("--queue", "default")
    wait_until(lambda: events(log) == ["started"], timeout=20)
    os.kill(process.pid, signal.SIGTERM)
    assert process.wait(10) == 0, runjobs_process.log(process)  # well within the 20 s grace
    assert events(log) == ["started", "cancelled"]  # it saw the stop, not a cancelled task
    job.refresh_from_db()
    assert (job.status, job.attempts_used) == (JobStatus.PENDING, 0)
    assert Attempt.objects.get(job=job).outcome == "released"


def test_a_stop_gives_running_async_jobs_the_grace_period(runjobs_process, tmp_path):
    """A coroutine that never looks at ``ctx`` is not cancelled by a stop: it finishes
    within the grace period, and its outcome is written before the worker exits."""
    log = tmp_path / "events.jsonl"
    job = schedule_job(
        "example.async_watchful", {"seconds": 1.5, "log": str(log), "heedless": True}
    )
    process = runjobs_process.start("--queue", "default")
    wait_until(lambda: events(log) == ["started"], timeout=20)
    stop(runjobs_process, process)
    assert events(log) == ["started", "finished"]
    assert status(job) == JobStatus.SUCCEEDED


def test_a_stop_past_the_grace_hands_async_jobs_back_and_a_restart_runs_them(runjobs_process):
    jobs = schedule_jobs(
        [{"job": "example.async_record", "payload": {"sleep": 3}, "max_attempts": 1}] * 5
    )
    quick_grace = {"JOBS_SHUTDOWN_GRACE_SECONDS": "0.5"}
    process = runjobs_process.start("--queue", "default", env=quick_grace)
    wait_until(lambda: Attempt.objects.filter(job__in=jobs).count() == 5, timeout=20)
    stop(runjobs_process, process)
    assert set(
        Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("status", flat=True)
    ) == {JobStatus.PENDING}
    assert set(Attempt.objects.filter(job__in=jobs).values_list("outcome", flat=True)) == {
        "released"
    }
    again = runjobs_process.start("--queue", "default", "--burst")
    assert again.wait(30) == 0, runjobs_process.log(again)
    assert Job.objects.filter(pk__in=[j.pk for j in jobs], status=JobStatus.SUCCEEDED).count() == 5
    assert Execution.objects.filter(job_id__in=[j.pk for j in jobs]).count() == 5


def test_async_jobs_of_a_killed_worker_are_taken_back_and_run_once(runjobs_process):
    jobs = schedule_jobs(
        [{"job": "example.async_record", "payload": {"sleep": 2}, "max_attempts": 3}] * 3
    )
    short_lease = {"JOBS_LEASE_SECONDS": "1.5"}
    doomed = runjobs_process.start("--queue", "default", env=short_lease)
    wait_until(lambda: Attempt.objects.filter(job__in=jobs).count() == 3, timeout=20)
    os.kill(doomed.pid, signal.SIGKILL)
    doomed.wait(10)
    rescuer = runjobs_process.start("--queue", "default", env=short_lease)
    ids = [j.pk for j in jobs]
    wait_until(
        lambda: Job.objects.filter(pk__in=ids, status=JobStatus.SUCCEEDED).count() == 3,
        timeout=40,
    )
    stop(runjobs_process, rescuer)
    for job in jobs:
        outcomes = list(Attempt.objects.filter(job=job).values_list("number", "outcome"))
        assert outcomes == [(1, "lease_expired"), (2, "succeeded")]
    assert sorted(Execution.objects.filter(job_id__in=ids).values_list("job_id", flat=True)) == ids


def test_a_blocked_loop_is_reported_with_its_job_and_costs_no_lease(runjobs_process):
    """A coroutine that sleeps 3 s without awaiting, under a 1.2 s lease: the heartbeat,
    on a thread of its own, keeps the lease, and the worker names the job."""
    job = schedule_job("example.async_blocking", {"seconds": 3}, max_attempts=1)
    env = {"JOBS_LEASE_SECONDS": "1.2", "JOBS_ASYNC_BLOCKED_SECONDS": "0.3"}
    process = runjobs_process.start("--queue", "default", env=env)
    wait_until(lambda: status(job) == JobStatus.SUCCEEDED, timeout=30)
    assert list(Attempt.objects.filter(job=job).values_list("outcome", flat=True)) == ["succeeded"]
    stop(runjobs_process, process)
    log = runjobs_process.log(process)
    assert "async handlers on its event loop, at once per queue: {'default': 100}" in log, log
    assert f"job #{job.pk} attempt 1: its async handler has held the event loop for" in log, log
    assert log.count("has held the event loop") == 1, log  # once per stall


def test_a_global_limit_holds_for_async_jobs(runjobs_process):
    jobs = schedule_jobs([{"job": "example.async_record", "payload": {"sleep": 0.2}}] * 20)
    env = {"JOBS_POLL_SECONDS": "0.1", "JOBS_DEFAULT_GLOBAL_LIMIT": "3"}
    workers = [runjobs_process.start("--burst", "--queue", "default", env=env) for _ in range(2)]
    for process in workers:
        assert process.wait(120) == 0, runjobs_process.log(process)
    runs = list(Execution.objects.filter(job_id__in=[j.pk for j in jobs]))
    assert len(runs) == 20
    assert most_at_once((run.started_at, run.finished_at) for run in runs) == 3


def test_an_async_handlers_progress_reaches_the_row(runjobs_process):
    process = runjobs_process.start("--queue", "default")
    job = schedule_job("example.async_counts", {"total": 25, "step": 0.1})
    seen: list[int] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and status(job) in (JobStatus.PENDING, JobStatus.RUNNING):
        done = Job.objects.get(pk=job.pk).progress_done
        if done is not None and done not in seen:
            seen.append(done)
        time.sleep(0.02)
    wait_until(lambda: status(job) == JobStatus.SUCCEEDED, timeout=10)
    assert len(seen) >= 2 and seen == sorted(seen), (seen, runjobs_process.log(process))
    stop(runjobs_process, process)


def test_async_failures_retries_and_snoozes_end_as_sync_ones_do(runjobs_process):
    broken = schedule_job("example.async_broken")
    snoozing = schedule_job("example.async_snooze", {"times": 2, "seconds": 0.1})
    process = runjobs_process.start("--queue", "default", "--burst")
    assert process.wait(60) == 0, runjobs_process.log(process)
    broken.refresh_from_db()
    assert broken.status == JobStatus.DEAD_LETTERED
    assert broken.last_error == "ValueError: this async job always fails"
    tracebacks = list(Attempt.objects.filter(job=broken).values_list("traceback", flat=True))
    assert len(tracebacks) == 2 and all("in async_broken" in t for t in tracebacks)
    snoozing.refresh_from_db()
    assert (snoozing.status, snoozing.result, snoozing.attempts_used) == (
        JobStatus.SUCCEEDED,
        "ran on attempt 3",
        1,
    )
