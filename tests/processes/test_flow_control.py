"""Flow control from outside: real ``runjobs`` processes under a queue's limits, checked
from the handlers' own witness rows, and a kill -9 that must not leak a slot."""

from __future__ import annotations

import os
import signal
from collections import Counter, defaultdict
from collections.abc import Iterable
from datetime import datetime

import pytest
from django.db import connections

from django_jobs import schedule_job, schedule_jobs
from django_jobs.models import Attempt, Job, JobStatus
from testproject.example.models import Execution
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

QUICK_POLL = {"JOBS_POLL_SECONDS": "0.1"}


def most_at_once(runs: Iterable[tuple[datetime, datetime]]) -> int:
    """The most runs under way at one instant (a run ending as another starts: not both)."""
    runs = list(runs)
    edges = sorted(
        [(start, 1) for start, _ in runs] + [(end, -1) for _, end in runs],
        key=lambda edge: (edge[0], edge[1]),  # at one instant an end before a start
    )
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


def runs_of(job_ids: Iterable[int]) -> list[Execution]:
    return list(Execution.objects.filter(job_id__in=list(job_ids)))


def test_four_processes_never_run_two_jobs_of_one_key_at_once_and_run_every_job(
    runjobs_process,
) -> None:
    jobs = schedule_jobs(
        [
            # Five keys one at a time: at least 2 s of work, which one process cannot run
            # alone before the others have started.
            {"job": "example.keyed", "payload": {"sleep": 0.05}, "concurrency_key": f"k{n % 5}"}
            for n in range(200)
        ]
    )
    key_of = {job.pk: job.concurrency_key for job in jobs}
    workers = [
        runjobs_process.start("--burst", "--queue", "keyed", "--workers", "4", env=QUICK_POLL)
        for _ in range(4)
    ]
    runjobs_process.finish(workers, 150)
    assert Job.objects.filter(pk__in=key_of, status=JobStatus.SUCCEEDED).count() == 200
    runs = runs_of(key_of)
    assert Counter(run.job_id for run in runs) == Counter(dict.fromkeys(key_of, 1))
    by_key: dict[str, list[tuple[datetime, datetime]]] = defaultdict(list)
    for run in runs:
        by_key[key_of[run.job_id]].append((run.started_at, run.finished_at))
    assert {key: most_at_once(spans) for key, spans in by_key.items()} == {
        f"k{n}": 1 for n in range(5)
    }
    assert most_at_once((r.started_at, r.finished_at) for r in runs) > 1  # keys ran side by side
    assert len({run.pid for run in runs}) > 1  # more than one process took part


def test_a_global_limit_holds_across_processes_and_their_threads(runjobs_process) -> None:
    jobs = schedule_jobs(
        [{"job": "example.record", "queue": "limited", "payload": {"sleep": 0.05}}] * 60
    )
    env = {**QUICK_POLL, "JOBS_GLOBAL_LIMIT": "2"}
    workers = [runjobs_process.start("--burst", "--queue", "limited", env=env) for _ in range(3)]
    runjobs_process.finish(workers, 150)
    runs = runs_of(job.pk for job in jobs)
    assert len(runs) == 60
    assert most_at_once((run.started_at, run.finished_at) for run in runs) == 2


def test_a_worker_killed_mid_job_frees_its_key_when_its_lease_lapses(runjobs_process) -> None:
    env = {**QUICK_POLL, "JOBS_LEASE_SECONDS": "4", "JOBS_MAINTENANCE_SECONDS": "1"}
    held = schedule_job("example.keyed", {"sleep": 60}, concurrency_key="account-7")
    first = runjobs_process.start("--queue", "keyed", env=env)
    wait_until(lambda: Attempt.objects.filter(job=held).exists(), timeout=30)
    waiting = schedule_job("example.keyed", {"sleep": 0}, concurrency_key="account-7")
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    killed_at = Job.objects.get(pk=held.pk).lease_expires_at
    runjobs_process.start("--queue", "keyed", env=env)
    assert wait_until(lambda: runs_of([waiting.pk]), timeout=40), "the key's slot leaked"
    [run] = runs_of([waiting.pk])
    assert killed_at is not None and run.started_at >= killed_at  # not before the lease lapsed


def test_a_rate_limit_holds_in_every_window_across_processes(runjobs_process) -> None:
    """Eight processes claim across many window boundaries: however their claims' times and
    the queue's lock interleave, no window's attempts (by their ``started_at``, the claim's
    time) outnumber the limit."""
    jobs = schedule_jobs([{"job": "example.record", "payload": {"sleep": 0}}] * 150)
    env = {"JOBS_POLL_SECONDS": "0.01", "JOBS_DEFAULT_RATE_LIMIT": "20/s"}
    workers = [
        runjobs_process.start("--burst", "--queue", "default", "--workers", "4", env=env)
        for _ in range(8)
    ]
    runjobs_process.finish(workers, 150)
    ids = [job.pk for job in jobs]
    statuses = Counter(Job.objects.filter(pk__in=ids).values_list("status", flat=True))
    assert statuses == {JobStatus.SUCCEEDED: 150}, "\n".join(
        [str(Job.objects.exclude(status=JobStatus.SUCCEEDED).values()[:3])]
        + [runjobs_process.log(process) for process in workers]
    )
    starts = Attempt.objects.filter(job_id__in=ids).values_list("started_at", flat=True)
    per_window = Counter(int(started.timestamp()) for started in starts)
    assert max(per_window.values()) <= 20, sorted(per_window.items())
    assert len(per_window) >= 8  # 150 jobs at 20 a second: the claims crossed boundaries


def queue_version(queue: str) -> str:
    """The queue's row's version (``xmin``): a claim under the lock that takes jobs of a
    queue whose claims may skip it writes a new one."""
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT xmin::text FROM django_jobs_queue WHERE name = %s", [queue])
        return cursor.fetchone()[0]


@pytest.mark.skipif(
    connections["default"].vendor != "postgresql", reason="PostgreSQL's claims without the lock"
)
def test_a_global_limit_above_every_workers_claims_is_claimed_without_the_lock(
    runjobs_process,
) -> None:
    """Three processes under a limit their claims cannot all fill: every job runs once, and
    no claim took the queue's lock (one that takes jobs under it writes the queue's row)."""
    from django_jobs.models import Queue

    Queue.objects.create(name="limited")
    before = queue_version("limited")
    # Work enough that a process which starts first cannot run it all alone before the
    # others have started (90 jobs of 10 ms once did, on two threads, in half a second).
    jobs = schedule_jobs(
        [{"job": "example.record", "queue": "limited", "payload": {"sleep": 0.1}}] * 90
    )
    env = {**QUICK_POLL, "JOBS_GLOBAL_LIMIT": "1000"}
    workers = [runjobs_process.start("--burst", "--queue", "limited", env=env) for _ in range(3)]
    runjobs_process.finish(workers, 150)
    runs = runs_of(job.pk for job in jobs)
    assert Counter(run.job_id for run in runs) == Counter({job.pk: 1 for job in jobs})
    assert len({run.pid for run in runs}) > 1
    assert queue_version("limited") == before


@pytest.mark.skipif(
    connections["default"].vendor != "postgresql", reason="PostgreSQL's claims without the lock"
)
def test_a_keyed_queue_one_process_serves_is_claimed_without_the_lock(runjobs_process) -> None:
    """One process of four threads, keys that never fill (four slots each, one job each):
    every job runs once, and no claim took the queue's lock (one that takes jobs under it
    writes the queue's row)."""
    from django_jobs.models import Queue

    Queue.objects.create(name="keyed")
    before = queue_version("keyed")
    jobs = schedule_jobs(
        [{"job": "demo.keyed_noop", "concurrency_key": f"k{n}"} for n in range(90)]
    )
    worker = runjobs_process.start("--burst", "--queue", "keyed", "--workers", "4", env=QUICK_POLL)
    runjobs_process.finish([worker], 150)
    ids = [job.pk for job in jobs]
    assert Job.objects.filter(pk__in=ids, status=JobStatus.SUCCEEDED).count() == 90
    assert Attempt.objects.filter(job_id__in=ids).count() == 90  # each claimed once
    assert queue_version("keyed") == before
