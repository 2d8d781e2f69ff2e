"""How many database connections one busy ``runjobs`` process holds.

The deploying guide sizes ``max_connections`` from this count. The test
samples the server's sessions while every handler thread is busy: on
PostgreSQL the process tags its connections with an ``application_name``
(``pg_stat_activity``); MariaDB/MySQL sessions have no such name, so there
the process's are the test database's sessions but the test's own
(``information_schema.PROCESSLIST``).
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from dataclasses import dataclass, field

import pytest
from django.db import connection

from django_jobs import schedule_job, schedule_jobs
from django_jobs.models import Job, JobStatus
from tests.conftest import RunjobsProcesses, database_env, database_url, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.skip_locked]

QUEUES = ("default", "emails")
THREADS_PER_QUEUE = 3


def connections_at_most(handler_threads: int, queues: int) -> int:
    """The most connections one process may hold: the scaling guide's formula.

    One per handler thread and per queue's dispatcher, plus the main thread
    (maintenance, schedules, registration), the settler, the lease renewal,
    the LISTEN connection, and for a moment the clock's and the listener's
    probe; where claims overlap (PostgreSQL), one more per queue of
    ``CLAIMS_BESIDE_THREADS`` threads or more, for the claim beside the dispatcher's.
    """
    from django_jobs.db import driver_class
    from django_jobs.worker.dispatcher import claims_overlap

    beside = claims_overlap(driver_class("default").claims_overlap, THREADS_PER_QUEUE)
    return handler_threads + (2 if beside else 1) * queues + 6


def tagged(application_name: str) -> dict[str, str]:
    """The DATABASE_URL (and, through a pooler, LISTEN_DATABASE_URL) of a worker whose
    sessions :func:`sessions` finds."""
    if connection.vendor == "mysql":
        return {"DATABASE_URL": database_url()}
    tag = f"?application_name={application_name}"
    env = {"DATABASE_URL": database_url() + tag}
    if "LISTEN_DATABASE_URL" in database_env():
        env["LISTEN_DATABASE_URL"] = database_url(direct=True) + tag
    return env


def sessions(application_name: str) -> list[tuple[int, str]]:
    """The worker's sessions on the server: (backend id, its current or last statement)."""
    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            cursor.execute(
                "SELECT ID, COALESCE(INFO, '') FROM information_schema.PROCESSLIST"
                " WHERE DB = DATABASE() AND ID <> CONNECTION_ID()"
            )
        else:
            cursor.execute(
                "SELECT pid, query FROM pg_stat_activity WHERE application_name = %s",
                [application_name],
            )
        return [(int(pid), str(query)) for pid, query in cursor.fetchall()]


def drop_sessions(ids: list[int]) -> None:
    """End the server sessions ``ids``, as a restart or an operator would."""
    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            for session in ids:
                cursor.execute(f"KILL {int(session)}")
        else:
            cursor.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", [ids])


@dataclass
class Sample:
    """What the server's sessions showed of one process over a run."""

    most: int = 0
    backends: set[int] = field(default_factory=set)
    statements: dict[int, str] = field(default_factory=dict)

    def take(self, application_name: str) -> None:
        rows = sessions(application_name)
        self.most = max(self.most, len(rows))
        for pid, query in rows:
            self.backends.add(pid)
            self.statements[pid] = query[:80]


def test_connections_of_a_busy_runjobs_process_stay_within_the_documented_count(
    runjobs_process: RunjobsProcesses,
) -> None:
    application_name = f"django-jobs-count-{uuid.uuid4().hex[:8]}"
    # A short job, then a long one, on every handler thread: a thread opens its
    # connection when it writes its first outcome and keeps it for the next job.
    jobs = schedule_jobs(
        [
            {"job": "example.sleep", "payload": {"seconds": seconds}, "queue": queue}
            for seconds in (0.2, 3.5)
            for queue in QUEUES
            for _ in range(THREADS_PER_QUEUE)
        ]
    )
    worker = runjobs_process.start(
        *[arg for queue in QUEUES for arg in ("--queue", queue)],
        "--workers",
        str(THREADS_PER_QUEUE),
        env={
            **tagged(application_name),
            "JOBS_LEASE_SECONDS": "3",  # renewals every second while the handlers sleep
        },
    )
    sample = Sample()
    deadline = time.monotonic() + 60
    ids = [job.pk for job in jobs]
    while Job.objects.filter(pk__in=ids, status=JobStatus.SUCCEEDED).count() < len(ids):
        assert time.monotonic() < deadline, runjobs_process.log(worker)
        sample.take(application_name)
        time.sleep(0.002)
    sample.take(application_name)
    os.kill(worker.pid, signal.SIGTERM)
    assert worker.wait(20) == 0, runjobs_process.log(worker)

    handler_threads = THREADS_PER_QUEUE * len(QUEUES)
    limit = connections_at_most(handler_threads, len(QUEUES))
    seen = "; ".join(f"{pid}: {query}" for pid, query in sorted(sample.statements.items()))
    assert sample.most <= limit, (
        f"{sample.most} connections at once for {handler_threads} handler threads on "
        f"{len(QUEUES)} queues (limit {limit}); {len(sample.backends)} opened: {seen}"
    )


@pytest.mark.listen_notify
def test_connections_dropped_by_the_server_a_worker_claims_again_at_once(
    runjobs_process: RunjobsProcesses,
) -> None:
    """After pg_terminate_backend (or a restart), the first claim fails on its dead
    connection: the worker claims again at once on a new one, not a poll later."""
    application_name = f"django-jobs-drop-{uuid.uuid4().hex[:8]}"
    worker = runjobs_process.start(
        "--queue",
        "default",
        env={
            **tagged(application_name),
            "JOBS_POLL_SECONDS": "5",  # a wake-up comes through LISTEN; a poll takes 5 s
        },
    )
    first = schedule_job("example.sleep", {"seconds": 0})
    wait_until(lambda: Job.objects.get(pk=first.pk).status == JobStatus.SUCCEEDED, timeout=30)

    def backends(listening: bool) -> list[int]:
        return [
            pid
            for pid, query in sessions(application_name)
            if query.startswith("LISTEN") == listening
        ]

    wait_until(lambda: backends(listening=True), timeout=10)  # the waker hears the next job
    drop_sessions(backends(listening=False))  # every other connection of the worker
    started = time.monotonic()
    job = schedule_job("example.sleep", {"seconds": 0})
    wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED, timeout=30)
    took = time.monotonic() - started
    os.kill(worker.pid, signal.SIGTERM)
    assert worker.wait(20) == 0, runjobs_process.log(worker)
    assert took < 2.5, f"{took:.1f}s to run a job after the drop\n{runjobs_process.log(worker)}"


@pytest.mark.without_listen_notify
def test_connections_dropped_by_the_server_a_polling_worker_claims_on_its_next_poll(
    runjobs_process: RunjobsProcesses,
) -> None:
    """Without wake-ups the next claim is a poll's: the one after the drop fails on its
    dead connection, and the worker claims again at once on a new one, not a poll later.

    The job is due before that poll, so it runs within a poll of the drop (and
    a little more); a poll later would be past it unless the poll came in
    the drop's first half second.
    """
    poll = 5.0
    application_name = f"django-jobs-drop-{uuid.uuid4().hex[:8]}"
    worker = runjobs_process.start(
        "--queue",
        "default",
        env={**tagged(application_name), "JOBS_POLL_SECONDS": str(poll)},
    )
    first = schedule_job("example.sleep", {"seconds": 0})
    wait_until(lambda: Job.objects.get(pk=first.pk).status == JobStatus.SUCCEEDED, timeout=30)
    drop_sessions([pid for pid, _ in sessions(application_name)])
    started = time.monotonic()
    job = schedule_job("example.sleep", {"seconds": 0})
    wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED, timeout=30)
    took = time.monotonic() - started
    os.kill(worker.pid, signal.SIGTERM)
    assert worker.wait(20) == 0, runjobs_process.log(worker)
    log = runjobs_process.log(worker)
    assert "worker step failed" in log, log  # a step after the drop met a dead connection
    assert took < poll + 0.5, f"{took:.1f}s to run a job after the drop\n{log}"
