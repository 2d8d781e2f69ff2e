"""Async handlers in process: the tick runs them to their end, the server on its event
loop; the names each lane claims; a CancelledError of the handler's own is a failure."""

import threading
from functools import partial

import pytest

from django_jobs import schedule_jobs
from django_jobs.models import Attempt, Job, JobStatus
from django_jobs.registry import async_names, get_definition, sync_names
from django_jobs.worker import Worker, serve
from django_jobs.worker.clock import SystemClock
from django_jobs.worker.dispatcher import Dispatcher
from tests.conftest import START, wait_until
from tests.support.threads import in_a_thread

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_tick_runs_an_async_handler_to_its_end(worker, make_job):
    job = make_job(name="tests.async_ok", payload={"n": 3})
    result = worker().run_once()
    assert result.succeeded == 1
    job.refresh_from_db()
    assert (job.status, job.result) == (JobStatus.SUCCEEDED, {"n": 3})


def test_a_cancelled_error_of_the_handlers_own_is_a_failed_attempt(worker, make_job):
    job = make_job(name="tests.async_cancels_itself", max_attempts=1)
    worker().run_once()
    job.refresh_from_db()
    assert job.status == JobStatus.DEAD_LETTERED
    assert job.last_error == "CancelledError: an inner task was cancelled"
    assert Attempt.objects.get(job=job).outcome == "failed"


def test_each_lane_claims_the_names_of_its_kind_of_handler():
    assert {"tests.async_ok", "example.async_add"} <= set(async_names())
    assert {"tests.ok", "reports.add"} <= set(sync_names())
    assert not set(async_names()) & set(sync_names())
    assert get_definition("tests.async_ok").is_async
    assert not get_definition("tests.ok").is_async


def test_a_django_task_of_a_coroutine_function_is_run_as_an_async_handler():
    pytest.importorskip("django_jobs.backend")
    from django_jobs.tasks.runner import arun_task, run_task

    assert get_definition("tests.support.tasks.async_add").func is arun_task
    assert get_definition("tests.support.tasks.add").func is run_task
    assert "tests.support.tasks.async_add" in async_names()


def test_the_server_runs_async_handlers_on_its_loop_and_sync_ones_on_threads(settings):
    settings.DJANGO_JOBS = {
        "POLL_SECONDS": 0.02,
        "QUEUES": {"default": {"workers": 1, "async_concurrency": 5}},
    }
    jobs = schedule_jobs([{"job": "tests.async_where"}] * 10 + [{"job": "tests.ok"}] * 3)
    with in_a_thread(partial(serve, Worker(clock=SystemClock()))) as thread:
        wait_until(lambda: Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 13, timeout=20)
    assert not thread.is_alive()
    results = {job.result for job in Job.objects.filter(pk__in=[j.pk for j in jobs[:10]])}
    assert results == {"django-jobs-loop"}


def test_a_queues_two_lanes_claim_one_at_a_time(settings, worker):
    """On MariaDB a locking read locks, for a moment, the rows it passes over: the async
    lane claiming at the same instant as the sync lane made it skip a due sync job, which
    then waited a poll. The lanes of a queue share one lock around their claims, which
    they take unless claims may overlap (PostgreSQL's, which lock only the rows they take)
    and the queue has threads enough for a second claim beside its dispatcher's."""
    from django_jobs.db import driver_class
    from django_jobs.worker.dispatcher import CLAIMS_BESIDE_THREADS
    from django_jobs.worker.eventloop import AsyncDispatcher
    from django_jobs.worker.server import Server

    many = CLAIMS_BESIDE_THREADS
    settings.DJANGO_JOBS = {"QUEUES": {"default": {"workers": many}, "other": {"workers": 1}}}
    server = Server(worker(queues={"default": many, "other": many - 1}).parts())
    lanes = {(type(d) is AsyncDispatcher, d.state.name): d.state for d in server.dispatchers}
    assert set(lanes) == {(False, "default"), (True, "default"), (False, "other"), (True, "other")}
    for queue in ("default", "other"):
        assert lanes[(True, queue)].claiming is lanes[(False, queue)].claiming
    assert lanes[(False, "default")].claiming is not lanes[(False, "other")].claiming
    overlap = driver_class("default").claims_overlap
    assert {lanes[(lane, "default")].overlapping for lane in (False, True)} == {overlap}
    assert {lanes[(lane, "other")].overlapping for lane in (False, True)} == {False}


def test_a_workers_row_says_the_most_jobs_one_claim_of_its_lanes_takes(settings, worker):
    """Other processes claim under a global limit without the queue's lock only while it
    leaves room for this one's largest claim: a tick's is a queue's threads; a server's is
    its largest lane's (its threads and as many jobs ahead as it may hold for each; an async
    lane's concurrency, at most a batch) where the lanes of a queue claim one at a time, and
    their sum where they claim at once, of the queues with limits only."""
    from django_jobs.db import driver_class
    from django_jobs.models import WorkerProcess
    from django_jobs.worker.ahead import MOST_AHEAD
    from django_jobs.worker.dispatcher import CLAIMS_BESIDE_THREADS
    from django_jobs.worker.eventloop import ASYNC_CLAIM_BATCH
    from django_jobs.worker.server import Server

    settings.DJANGO_JOBS = {
        "QUEUES": {
            "default": {"workers": 3, "async_concurrency": 5, "global_limit": 1000},
            "other": {"workers": 1, "async_concurrency": 1000, "global_limit": 1000},
        }
    }
    ticking = worker(queues={"default": 3, "other": 1})
    assert ticking.maintainer.largest_claim == 3
    settings.DJANGO_JOBS["QUEUES"]["other"]["async_concurrency"] = 2
    assert (
        Server(worker(queues={"default": 3, "other": 1}).parts()).parts.maintainer.largest_claim
        == 3 * (1 + MOST_AHEAD)  # the sync lane's, claiming ahead
    )
    settings.DJANGO_JOBS["QUEUES"]["other"]["async_concurrency"] = 1000
    server = Server(ticking.parts())
    assert server.parts.maintainer.largest_claim == ASYNC_CLAIM_BATCH
    server.parts.maintainer.register(START)
    assert WorkerProcess.objects.get(id=ticking.owner).largest_claim == ASYNC_CLAIM_BATCH
    # Where a queue's lanes claim at once (PostgreSQL, threads enough), its lanes' together.
    settings.DJANGO_JOBS["QUEUES"]["other"]["async_concurrency"] = 2
    many = CLAIMS_BESIDE_THREADS
    sync_lane = many * (1 + MOST_AHEAD)
    together = driver_class("default").claims_overlap
    assert Server(
        worker(queues={"default": many, "other": 1}).parts()
    ).parts.maintainer.largest_claim == (sync_lane + 5 if together else sync_lane)
    # A queue without limits is claimed apart from the limited ones: its lanes, however
    # large, do not count, or they would leave a small global limit no room to skip the lock.
    settings.DJANGO_JOBS = {
        "QUEUES": {
            "default": {"workers": 3, "async_concurrency": 2},
            "other": {"workers": 1, "async_concurrency": 2, "global_limit": 1000},
        }
    }
    mixed = Server(worker(queues={"default": many, "other": 1}).parts())
    assert mixed.parts.maintainer.largest_claim == 1 + MOST_AHEAD  # "other"'s sync lane
    settings.DJANGO_JOBS = {"QUEUES": {"default": {"workers": 3}, "other": {"workers": 1}}}
    unlimited = Server(worker(queues={"default": many, "other": 1}).parts())
    assert unlimited.parts.maintainer.largest_claim == 0


def test_a_lane_whose_last_claim_took_nothing_leaves_the_outcomes_to_the_others(settings, worker):
    """The settler's outcomes go with the next claim of the queue, whichever lane makes it.
    A lane that found nothing last time most likely finds nothing again: carried by its
    claim, the outcomes would make a transaction of it (under limits, the queue's lock)."""
    from django_jobs.worker.server import Server

    settings.DJANGO_JOBS = {"POLL_SECONDS": 0.05}
    server = Server(worker(queues={"default": 1}).parts())
    [lane] = [d for d in server.dispatchers if type(d) is Dispatcher]
    carried: list[bool] = []

    class Recording:
        def claim_and_settle(self, queue, room, names, ahead, carry):
            carried.append(carry)
            return []

    lane.claimer = Recording()
    stop = threading.Event()
    thread = threading.Thread(target=lane.dispatch, args=(stop,))
    thread.start()
    try:
        wait_until(lambda: len(carried) >= 2, timeout=5)
    finally:
        stop.set()
        lane.rouse()
        thread.join(5)
    assert carried[:2] == [True, False]
