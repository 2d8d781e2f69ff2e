"""Claiming ahead: the next batch is claimed while the current one runs, bounded both ways."""

import threading
import time
from datetime import timedelta
from functools import partial
from typing import Any

import pytest
from django.db import connection

from django_jobs import schedule_job, schedule_jobs
from django_jobs.models import Attempt, AttemptOutcome, Job, JobStatus
from django_jobs.worker import Worker, serve
from django_jobs.worker.ahead import MOST_AHEAD
from django_jobs.worker.clock import SystemClock
from django_jobs.worker.dispatcher import CLAIMS_BESIDE_THREADS
from tests.conftest import wait_until
from tests.support.jobs import SLEPT
from tests.support.threads import in_a_thread

FAST = {"POLL_SECONDS": 0.02, "MAINTENANCE_SECONDS": 0.1, "RETRY_BASE_SECONDS": 0}
THREADS = 2


def jobs_with_two_long_ones_in_the_middle(
    behind: int, long: str = "tests.sleepy"
) -> tuple[list[int], list[int]]:
    """Short jobs first (the queue's pace is short), then two that hold both threads for a
    second, then ``behind`` short ones: the ids of the long ones and of those behind them."""
    SLEPT.clear()
    short = {"job": "tests.sleepy", "payload": {"seconds": 0}}
    specs = [{**short, "priority": 2} for _ in range(12)]
    specs += [{"job": long, "payload": {"seconds": 1.0}, "priority": 1}] * THREADS
    specs += [{**short, "priority": 0} for _ in range(behind)]
    rows = schedule_jobs(specs)
    return [row.pk for row in rows[12 : 12 + THREADS]], [row.pk for row in rows[12 + THREADS :]]


def held() -> int:
    """Jobs running whose handler has not returned (a returned one stays running until its
    outcome is written): what the worker holds."""
    running = set(Job.objects.filter(status=JobStatus.RUNNING).values_list("id", flat=True))
    return len(running - SLEPT)


def released(ids: list[int]) -> set[int]:
    rows = Attempt.objects.filter(job_id__in=ids, outcome=AttemptOutcome.RELEASED)
    return set(rows.values_list("job_id", flat=True))


def serving(worker: Worker) -> tuple[threading.Thread, threading.Event]:
    stop = threading.Event()
    thread = threading.Thread(target=serve, args=(worker, stop))
    thread.start()
    return thread, stop


@pytest.mark.django_db(transaction=True)
def test_claim_ahead_holds_at_most_a_few_jobs_per_thread_waiting_and_not_for_long(settings):
    settings.DJANGO_JOBS = {
        **FAST,
        "CLAIM_AHEAD_SECONDS": 0.05,
        "QUEUES": {"default": {"workers": THREADS}},
    }
    long_ones, behind = jobs_with_two_long_ones_in_the_middle(behind=6)
    thread, stop = serving(Worker(clock=SystemClock()))
    most = 0

    def all_done() -> bool:
        nonlocal most
        most = max(most, held())
        return Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 12 + THREADS + 6

    try:
        wait_until(all_done, timeout=20, interval=0.005)
    finally:
        stop.set()
        thread.join(10)
    assert most <= (1 + MOST_AHEAD) * THREADS
    # Claimed ahead while the long ones ran, then handed back for another worker to take,
    # without using an attempt; the rest waited pending, since the queue then counted slow.
    handed_back = released(behind)
    assert 1 <= len(handed_back) <= MOST_AHEAD * THREADS
    for job in Job.objects.filter(id__in=handed_back):
        assert job.attempts_used == 1 and job.attempt == 2
        first = job.attempts.get(number=1)
        assert (first.finished_at - first.started_at).total_seconds() < 0.9  # not a second
    assert not released(long_ones)


@pytest.mark.django_db(transaction=True)
def test_claim_ahead_jobs_waiting_for_a_thread_are_handed_back_at_once_on_a_stop(settings):
    settings.DJANGO_JOBS = {
        **FAST,
        "CLAIM_AHEAD_SECONDS": 0.05,
        "SHUTDOWN_GRACE_SECONDS": 5,
        "QUEUES": {"default": {"workers": THREADS}},
    }
    # The long ones ignore the stop: their threads stay busy for the second.
    long_ones, behind = jobs_with_two_long_ones_in_the_middle(behind=2, long="tests.deaf")
    thread, stop = serving(Worker(clock=SystemClock()))
    try:
        wait_until(
            lambda: Job.objects.filter(id__in=behind, status=JobStatus.RUNNING).exists(),
            timeout=10,
            interval=0.002,
        )
        stop.set()
        # Never started: pending again at once, their attempt given back, while the long
        # ones still run; not when a thread frees up.
        wait_until(lambda: released(behind), timeout=0.5, interval=0.002)
        assert not SLEPT & set(long_ones)
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()
    for job in Job.objects.filter(id__in=released(behind)):
        assert job.status == JobStatus.PENDING and job.attempts_used == 0
    assert not Job.objects.filter(id__in=behind, status=JobStatus.SUCCEEDED).exists()


@pytest.mark.django_db(transaction=True)
def test_claim_ahead_off_holds_no_more_jobs_than_threads(settings):
    settings.DJANGO_JOBS = {
        **FAST,
        "CLAIM_AHEAD_SECONDS": 0,
        "QUEUES": {"default": {"workers": THREADS}},
    }
    long_ones, behind = jobs_with_two_long_ones_in_the_middle(behind=2)
    thread, stop = serving(Worker(clock=SystemClock()))
    most = 0

    def all_done() -> bool:
        nonlocal most
        most = max(most, held())
        return Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 12 + THREADS + 2

    try:
        wait_until(all_done, timeout=20, interval=0.005)
    finally:
        stop.set()
        thread.join(10)
    assert most <= THREADS
    assert not released(behind)


@pytest.mark.django_db(transaction=True)
def test_a_dispatcher_times_its_claims_to_know_how_many_jobs_to_hold_ahead(settings):
    """How many jobs per thread it holds follows its claims' time against its jobs': the
    dispatcher times each claim that took jobs."""
    from django_jobs.worker.dispatcher import Dispatcher
    from django_jobs.worker.server import Server

    settings.DJANGO_JOBS = {**FAST, "QUEUES": {"default": {"workers": THREADS}}}
    SLEPT.clear()
    schedule_jobs([{"job": "tests.sleepy", "payload": {"seconds": 0}}] * 30)
    server = Server(Worker(clock=SystemClock()).parts())
    [state] = [d.state for d in server.dispatchers if type(d) is Dispatcher]  # the threads' lane
    with in_a_thread(server.run):
        wait_until(lambda: Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 30, timeout=20)
    assert state.pace.claim_average is not None and state.pace.claim_average > 0
    assert state.pace.ahead >= 1  # short jobs: held ahead


def claim_waiting_for(session: Any) -> bool:
    """Whether a claim waits for ``session``'s transaction (a row lock or a key it holds)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted"
            " AND transactionid::text = %s",
            [session.execute("SELECT pg_current_xact_id()::text").fetchone()[0]],
        )
        return cursor.fetchone() is not None


@pytest.mark.overlapping_claims
@pytest.mark.django_db(transaction=True)
def test_a_busy_queue_claims_beside_a_claim_that_waits_where_claims_overlap(settings):
    """A claim under way need not be the only one: while a claim of a busy queue of short
    jobs waits (here for another session's key), a second claim takes and runs jobs, where
    the queue has threads enough (:data:`CLAIMS_BESIDE_THREADS`). Neither takes more than
    its share of the room, and no job runs twice."""
    import psycopg

    threads = CLAIMS_BESIDE_THREADS
    capacity = (1 + MOST_AHEAD) * threads  # the most one claim at a time may hold
    settings.DJANGO_JOBS = {
        **FAST,
        "CLAIM_AHEAD_SECONDS": 0.05,
        "QUEUES": {"default": {"workers": threads}},
    }
    SLEPT.clear()
    # Short (claimed ahead), yet not so short that the threads run them all out before
    # the claim that waits has waited: at most 1,600 a second.
    short = {"job": "tests.sleepy", "payload": {"seconds": 0.005}}
    ids = [row.pk for row in schedule_jobs([short] * 4000)]
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    worker = Worker(queues={"default": threads}, clock=SystemClock())
    with psycopg.connect(**params) as session, in_a_thread(partial(serve, worker)):
        wait_until(lambda: succeeded(ids) >= 200, timeout=10)  # its jobs count as short
        # Due in a moment, ahead of the rest: the claim that takes it inserts its attempt
        # 1, which this session holds uncommitted: that claim waits for the session's end.
        delay = timedelta(seconds=0.3)
        first = schedule_job("tests.sleepy", {"seconds": 0}, priority=9, delay=delay)
        session.execute(
            "INSERT INTO django_jobs_attempt (job_id, number, owner, started_at, error)"
            " VALUES (%s, 1, 'a session of the test', now(), '')",
            [first.pk],
        )
        wait_until(lambda: claim_waiting_for(session), timeout=10, interval=0.005)
        before = succeeded(ids)
        most = 0
        # Until more jobs than one claim at a time could hold have run: half a second on
        # two quiet cores. The bound keeps the wait well within the claim's deadline.
        until = time.monotonic() + 3
        while (during := succeeded(ids) - before) <= capacity and time.monotonic() < until:
            most = max(most, held())
        assert claim_waiting_for(session)  # the whole time
        session.rollback()
        wait_until(lambda: succeeded([*ids, first.pk]) == len(ids) + 1, timeout=30)
    # With one claim at a time, the jobs held when the claim began at most (none, tried).
    assert during > capacity
    # The claim that waits holds a thread's worth of room at least, which the other never
    # takes: what the worker held besides stayed below the most it may hold.
    assert most <= capacity - threads
    # Each job ran once; any other attempt is one handed back unstarted (a job that waited
    # past the hold for a thread, on a slow machine).
    attempts = Attempt.objects.filter(job_id__in=[*ids, first.pk])
    assert attempts.filter(outcome=AttemptOutcome.SUCCEEDED).count() == len(ids) + 1
    assert set(attempts.values_list("outcome", flat=True)) <= {
        AttemptOutcome.SUCCEEDED,
        AttemptOutcome.RELEASED,
    }


def test_a_queue_of_few_threads_claims_one_claim_at_a_time_on_every_database(settings, worker):
    """Below :data:`CLAIMS_BESIDE_THREADS` a second claim drains slower (its claims, of half
    the room, carry too few jobs for their commits): one claim at a time, whatever the
    database; at it, a second claimer where claims may overlap."""
    from django_jobs.db import driver_class
    from django_jobs.worker.server import Server

    many = CLAIMS_BESIDE_THREADS
    settings.DJANGO_JOBS = {"QUEUES": {"few": {"workers": many - 1}, "many": {"workers": many}}}
    server = Server(worker(queues={"few": many - 1, "many": many}).parts())
    overlapping = {d.state.name: d.state.overlapping for d in server.dispatchers}
    assert overlapping == {"few": False, "many": driver_class("default").claims_overlap}


def test_a_queue_with_keyed_jobs_claims_one_claim_at_a_time_whatever_its_threads(settings, worker):
    """Its claims may skip the queue's lock where one process serves it, each counting its
    keys' running jobs as the claim before it left them: two under way at once could each
    take a key's last slot."""
    from django_jobs.worker.server import Server

    many = CLAIMS_BESIDE_THREADS
    settings.DJANGO_JOBS = {"QUEUES": {"keyed": {"workers": many}}}  # tests.keyed's queue
    server = Server(worker(queues={"keyed": many}).parts())
    assert {d.state.overlapping for d in server.dispatchers} == {False}


def succeeded(ids: list[int]) -> int:
    return Job.objects.filter(id__in=ids, status=JobStatus.SUCCEEDED).count()
