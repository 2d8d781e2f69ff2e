"""Waiting for a job's end (``wait_for``, ``await_job``) and enqueueing from async code
(``aschedule_job``, ``aschedule_jobs``)."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.db import transaction

from django_jobs import (
    JobsError,
    JobSpec,
    aschedule_job,
    aschedule_jobs,
    await_job,
    schedule_job,
    wait_for,
)
from django_jobs import waiting as waiting_module
from django_jobs.db.notify import END_CHANNEL
from django_jobs.models import Job
from django_jobs.waiting import FIRST_POLL_SECONDS, MAX_POLL_SECONDS, listens

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def clock(clock_ahead):
    return clock_ahead


@pytest.fixture
def polling(monkeypatch):
    """Waits that poll, as on a database without LISTEN: the poll's schedule is the test's."""
    monkeypatch.setattr(waiting_module, "listens", lambda using: False)


class Waiting:
    """A monotonic clock that only a wait's sleeps move, and what it slept."""

    def __init__(self, on_sleep=None) -> None:
        self.now = 100.0
        self.slept: list[float] = []
        self.on_sleep = on_sleep

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        if self.on_sleep is not None:
            self.on_sleep()


def test_wait_for_returns_the_job_once_it_has_ended(worker, polling):
    job = schedule_job("tests.ok")
    w = worker()
    waiting = Waiting(on_sleep=lambda: w.run_once())
    done = wait_for(job, timeout=30, monotonic=waiting.monotonic, sleep=waiting.sleep)
    assert done.pk == job.pk and done.status == "succeeded"
    assert waiting.slept == [FIRST_POLL_SECONDS]  # the first read saw it pending


def test_wait_for_an_ended_job_reads_once_and_takes_its_id_too(worker):
    job = schedule_job("tests.ok")
    worker().run_once()
    waiting = Waiting()
    for ref in (job, job.pk, str(job.pk)):
        assert wait_for(ref, timeout=0, sleep=waiting.sleep).status == "succeeded"
    assert waiting.slept == []


def test_wait_for_times_out_reading_less_and_less_often(polling):
    job = schedule_job("tests.ok")  # no worker runs it
    waiting = Waiting()
    ended = rf"job {job.pk} has not ended within 10 s \(it is pending\)"
    with pytest.raises(TimeoutError, match=ended):
        wait_for(job, timeout=10, monotonic=waiting.monotonic, sleep=waiting.sleep)
    assert waiting.slept[:3] == [FIRST_POLL_SECONDS, 2 * FIRST_POLL_SECONDS, 4 * FIRST_POLL_SECONDS]
    assert max(waiting.slept) == MAX_POLL_SECONDS
    assert sum(waiting.slept) == pytest.approx(10)  # the last sleep ends at the deadline


def test_wait_for_inside_a_transaction_is_refused():
    with transaction.atomic():
        job = schedule_job("tests.ok")
        with pytest.raises(JobsError, match=r"inside transaction.atomic\(\)"):
            wait_for(job, timeout=1)


def test_wait_for_a_job_that_does_not_exist_or_a_bad_argument():
    with pytest.raises(Job.DoesNotExist, match="no job 987654321"):
        wait_for(987654321, timeout=1)
    with pytest.raises(TypeError, match="expected a Job or a job id"):
        wait_for("abc", timeout=1)
    with pytest.raises(JobsError, match="never saved"):
        wait_for(Job(name="tests.ok"), timeout=1)
    with pytest.raises(ValueError, match="timeout must be"):
        wait_for(1, timeout=-1)


def test_await_job_wakes_when_a_worker_ends_it(worker):
    job = schedule_job("tests.ok")
    w = worker()

    async def scenario() -> Job:
        waiter = asyncio.ensure_future(await_job(job, timeout=10))
        await asyncio.sleep(0.05)
        assert not waiter.done()
        await sync_to_async(w.run_once)()
        return await waiter

    done = async_to_sync(scenario)()
    assert done.pk == job.pk and done.status == "succeeded"


def test_await_job_times_out():
    job = schedule_job("tests.ok")
    with pytest.raises(TimeoutError, match="it is pending"):
        async_to_sync(await_job)(job.pk, timeout=0.05)


def test_aschedule_job_and_jobs_write_rows_as_their_sync_twins():
    async def scenario() -> tuple[Job, list[Job]]:
        one = await aschedule_job("tests.ok", {"n": 1}, queue="default", priority=3)
        many = await aschedule_jobs([JobSpec("tests.ok", {"n": 2}), {"job": "tests.ok"}])
        return one, many

    one, many = async_to_sync(scenario)()
    assert Job.objects.get(pk=one.pk).priority == 3
    assert [j.payload for j in Job.objects.filter(pk__in=[j.pk for j in many]).order_by("pk")] == [
        {"n": 2},
        None,
    ]


# -- PostgreSQL: the end of an awaited job is NOTIFYed -------------------------------------


@pytest.fixture
def listener():
    """A connection of the test's own LISTENing on the ends' channel (PostgreSQL)."""
    if not listens("default"):
        pytest.skip("ends are NOTIFYed on PostgreSQL only")
    import psycopg
    from django.db import connection

    from django_jobs.db.notify import listening_params

    with psycopg.connect(**listening_params(connection.alias)) as listening:
        listening.execute(f"LISTEN {END_CHANNEL}")
        yield listening


def heard(listening, seconds: float = 1.0) -> list[str]:
    return [n.payload for n in listening.notifies(timeout=seconds) if n.channel == END_CHANNEL]


def test_the_end_of_an_awaited_job_is_notified_and_no_other(worker, listener):
    awaited = schedule_job("tests.ok")
    schedule_job("tests.ok")  # its end sends nothing
    Job.objects.filter(pk=awaited.pk).update(awaited=True)
    worker(queues={"default": 2}).run_once()
    assert Job.objects.filter(status="succeeded").count() == 2
    assert heard(listener) == [str(awaited.pk)]  # the other's end sent nothing


def test_wait_for_is_woken_by_the_notify_not_by_its_poll(worker, monkeypatch):
    """With the polls a minute apart, the waiter still sees the end within moments."""
    if not listens("default"):
        pytest.skip("ends are NOTIFYed on PostgreSQL only")
    monkeypatch.setattr(waiting_module, "FIRST_POLL_SECONDS", 60.0)
    monkeypatch.setattr(waiting_module, "MAX_POLL_SECONDS", 60.0)
    job = schedule_job("tests.ok")
    w = worker()
    threading_timer = __import__("threading").Timer(0.3, lambda: run_and_close(w))
    threading_timer.start()
    started = __import__("time").monotonic()
    done = wait_for(job, timeout=30)
    took = __import__("time").monotonic() - started
    threading_timer.join()
    assert done.status == "succeeded" and took < 5, took
    assert Job.objects.get(pk=job.pk).awaited is True


def test_await_job_is_woken_by_the_notify_not_by_its_poll(worker, monkeypatch):
    if not listens("default"):
        pytest.skip("ends are NOTIFYed on PostgreSQL only")
    monkeypatch.setattr(waiting_module, "FIRST_POLL_SECONDS", 60.0)
    monkeypatch.setattr(waiting_module, "MAX_POLL_SECONDS", 60.0)
    job = schedule_job("tests.ok")
    w = worker()

    async def scenario() -> tuple[Job, float]:
        loop = asyncio.get_running_loop()
        waiter = asyncio.ensure_future(await_job(job, timeout=30))
        await asyncio.sleep(0.3)
        assert not waiter.done()
        started = loop.time()
        await sync_to_async(w.run_once)()
        done = await waiter
        return done, loop.time() - started

    done, took = async_to_sync(scenario)()
    assert done.status == "succeeded" and took < 5, took


def run_and_close(w) -> None:
    from django.db import connections

    try:
        w.run_once()
    finally:
        connections.close_all()
