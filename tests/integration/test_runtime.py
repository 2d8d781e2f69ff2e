"""The threaded runtime: batch claims within the free threads, one statement per claim cycle."""

import threading

import pytest
from django.db import connection

from django_jobs import schedule_jobs
from django_jobs.clock import SystemClock
from django_jobs.models import Job, JobStatus
from django_jobs.worker import Worker, serve
from tests.conftest import wait_until
from tests.jobs import SLEPT

FAST = {"POLL_SECONDS": 0.02, "MAINTENANCE_SECONDS": 0.1, "RETRY_BASE_SECONDS": 0}

# One claim cycle of the dispatcher: the claim carries the outcomes that wait.
# PostgreSQL: one statement. SQLite: begin, settle jobs and attempts, read, mark running,
# insert the attempts, commit.
STATEMENTS_PER_CYCLE = {"postgresql": 1, "sqlite": 7}


@pytest.mark.django_db(transaction=True)
def test_runtime_never_holds_more_jobs_than_it_has_threads(settings):
    settings.DJANGO_JOBS = {**FAST, "QUEUES": {"default": {"workers": 2}}}
    # Unequal lengths, so that one thread often frees up while the other still runs.
    schedule_jobs(
        [{"job": "tests.sleepy", "payload": {"seconds": (0.01, 0.1)[n % 2]}} for n in range(12)]
    )
    worker = Worker(clock=SystemClock())
    stop = threading.Event()
    thread = threading.Thread(target=serve, args=(worker, stop))
    most = 0

    def all_done() -> bool:
        # Held and not yet returned: running rows whose handler has not returned. (A job
        # whose handler returned stays running until its outcome is written.)
        nonlocal most
        running = set(Job.objects.filter(status=JobStatus.RUNNING).values_list("id", flat=True))
        most = max(most, len(running - SLEPT))
        return Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 12

    thread.start()
    try:
        wait_until(all_done, timeout=20, interval=0.005)
    finally:
        stop.set()
        thread.join(10)
    assert 1 <= most <= 2


@pytest.mark.django_db(transaction=True)
def test_runtime_claim_cycle_costs_one_statement_whatever_the_batch(
    settings, django_assert_num_queries
):
    settings.DJANGO_JOBS = {**FAST, "QUEUES": {"default": {"workers": 4}}}
    schedule_jobs([{"job": "tests.ok"}] * 12)
    w = Worker(clock=SystemClock())
    w.settler.linger_seconds = 60  # only the claims write the outcomes
    w.settler.start()
    try:
        claimed = w.claim_and_settle("default", 4)
        for cycle in (1, 2):
            for job in claimed:
                w.execute_held(job)  # its outcome waits in the settler
            with django_assert_num_queries(STATEMENTS_PER_CYCLE[connection.vendor]):
                claimed = w.claim_and_settle("default", 4)  # 4 outcomes out, 4 jobs in
            assert len(claimed) == 4
            assert Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 4 * cycle
        for job in claimed:
            w.execute_held(job)
        assert w.settler.stop(10)  # the stop writes what is left
    finally:
        w.inflight.close()
    assert Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 12
    assert w.inflight.snapshot() == []


def test_runtime_stop_between_main_loop_steps_skips_the_rest(worker):
    """Each step may wait out its deadline on a database that does not answer: a stop
    asked during one must not wait for the others too."""
    from django_jobs.worker.server import Server

    server = Server(worker().parts())
    stop = threading.Event()
    ran: list[str] = []
    steps = [
        lambda: ran.append("rescue"),
        lambda: (ran.append("prune"), stop.set()),
        lambda: ran.append("refresh registration"),
        lambda: ran.append("recurring"),
    ]
    assert server.run_steps(steps, stop) is False
    assert ran == ["rescue", "prune"]
