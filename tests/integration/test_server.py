"""The threaded runtime: batch claims within the free threads, one statement per claim cycle."""

import dataclasses
import itertools
import threading
import time

import pytest
from django.db import connection

from django_jobs import schedule_jobs
from django_jobs.models import Job, JobStatus
from django_jobs.worker import Worker, serve
from django_jobs.worker.clock import SystemClock
from tests.conftest import wait_until
from tests.support.jobs import SLEPT
from tests.support.leaders import believing_it_leads

FAST = {"POLL_SECONDS": 0.02, "MAINTENANCE_SECONDS": 0.1, "RETRY_BASE_SECONDS": 0}

# One claim cycle of the dispatcher: the claim carries the outcomes that wait.
# PostgreSQL: one statement. SQLite: begin, settle jobs and attempts, read, mark running,
# insert the attempts, commit. MariaDB/MySQL: the same, and the lock of the settled rows.
STATEMENTS_PER_CYCLE = {"postgresql": 1, "sqlite": 7, "mysql": 8}


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
        claimed = w.claimer.claim_and_settle("default", 4)
        for cycle in (1, 2):
            for job in claimed:
                w.executor.execute(job)  # its outcome waits in the settler
            with django_assert_num_queries(STATEMENTS_PER_CYCLE[connection.vendor]):
                claimed = w.claimer.claim_and_settle("default", 4)  # 4 outcomes out, 4 jobs in
            assert len(claimed) == 4
            assert Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 4 * cycle
        for job in claimed:
            w.executor.execute(job)
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


class SlowChores:
    """A maintainer whose recurring step takes longer than a poll, counting the passes."""

    def __init__(self) -> None:
        self.rescues = 0
        self.prune_behind = False

    def rescue(self, now):
        self.rescues += 1

    def prune(self, now):
        pass

    def refresh_registration(self, now):
        pass

    def check_health(self, now):
        pass

    def read_gauges(self, now):
        pass

    def enqueue_due(self, now):
        time.sleep(0.1)  # five polls of 0.02 s


def test_runtime_main_loop_measures_its_intervals_on_the_monotonic_clock(worker, settings):
    """Maintenance every 0.1 s while each pass of the loop takes 0.12 s: it runs at every
    pass. Adding up the poll timeouts instead (0.02 a pass) it ran every fifth."""
    settings.DJANGO_JOBS = FAST
    from django_jobs.worker.server import Server

    chores = SlowChores()
    # No database here: the lease is not asked for (the chores are the leader's).
    leader = believing_it_leads(worker())
    server = Server(dataclasses.replace(leader.parts(), maintainer=chores))
    stop = threading.Event()
    threading.Timer(1.2, stop.set).start()
    server.main_loop(stop)
    assert chores.rescues >= 7  # about 10 passes; every fifth would be 2


@pytest.mark.django_db
def test_run_once_counts_a_job_handed_back_as_released_not_retried(worker, make_job):
    job = make_job(name="tests.patient", payload={"seconds": 5})
    w = worker()
    w.inflight.cancel_all()  # a stop: the handler starts cancelled and hands its job back
    result = w.run_once()
    assert (result.claimed, result.released, result.retried) == (1, 1, 0)
    job.refresh_from_db()
    assert (job.status, job.attempts_used) == (JobStatus.PENDING, 0)


class PruningBehind(SlowChores):
    """A maintainer whose pruning uses its whole budget until ``left`` passes have run."""

    def __init__(self, left: int) -> None:
        super().__init__()
        self.left = left
        self.prunes: list[float] = []

    def prune(self, now):
        self.prunes.append(time.monotonic())
        self.left -= 1
        self.prune_behind = self.left > 0

    def enqueue_due(self, now):
        pass


def test_pruning_that_uses_its_whole_budget_comes_again_soon_until_caught_up(
    worker, settings, monkeypatch
):
    """Jobs that finish faster than one pass a maintenance interval deletes must not pile up
    (the soak at 1,730 jobs/s: 10,000 a 15 s pass fell minutes behind): a pass that used its
    budget brings the next forward, and once caught up pruning keeps its interval."""
    from django_jobs.worker.leader import chores as chores_module
    from django_jobs.worker.server import Server

    again = 0.2
    monkeypatch.setattr(chores_module, "PRUNE_AGAIN_SECONDS", again)

    settings.DJANGO_JOBS = {**FAST, "MAINTENANCE_SECONDS": 30, "POLL_SECONDS": 0.05}
    chores = PruningBehind(left=3)
    leader = believing_it_leads(worker())
    server = Server(dataclasses.replace(leader.parts(), maintainer=chores))
    stop = threading.Event()
    threading.Timer(2 * again + 0.6, stop.set).start()
    server.main_loop(stop)
    assert len(chores.prunes) == 3  # two passes behind, one that caught up; then 30 s
    gaps = [later - earlier for earlier, later in itertools.pairwise(chores.prunes)]
    assert all(again - 0.05 <= gap < again + 0.3 for gap in gaps), gaps
