"""The verbs of django_jobs.control that the admin and the commands share: retry, run now."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from django_jobs import JobNotWaiting, cancel_job, retry_job, run_job_now
from django_jobs.db.notify import Listener
from django_jobs.models import Job, JobStatus
from django_jobs.outcomes import cancelled
from django_jobs.testing import FakeClock
from django_jobs.worker.execution import make_context
from tests.conftest import START, wait_until

pytestmark = pytest.mark.django_db

LATER = START + timedelta(hours=1)
COMPARED = ("status", "run_at", "attempt", "attempts_used", "finished_at", "last_error")


def row(job: Job) -> tuple[Any, ...]:
    return tuple(Job.objects.filter(pk=job.pk).values_list(*COMPARED).get())


@pytest.fixture
def listener() -> Iterator[Listener]:
    listening = Listener("default", first_backoff=0.05)
    try:
        assert listening.wait(0) == set()  # connected and probed: LISTEN is in place
        yield listening
    finally:
        listening.close()


def heard(listener: Listener, queue: str) -> bool:
    names: set[str] = set()

    def got_it() -> bool:
        names.update(listener.wait(0.05))
        return queue in names

    return bool(wait_until(got_it, timeout=5))


# -- retry_job ----------------------------------------------------------------------


def test_retry_job_puts_a_cancelled_job_back_due_now(make_job: Callable[..., Job]) -> None:
    job = make_job(
        status=JobStatus.CANCELLED,
        finished_at=START,
        cancel_requested_at=START,
        last_error="Cancelled: cancel_job() before it ran",
        run_at=LATER,
    )
    assert retry_job(job.pk, now=START) is True
    job.refresh_from_db()
    assert (job.status, job.run_at, job.finished_at) == (JobStatus.PENDING, START, None)
    assert job.cancel_requested_at is None


def test_retry_job_keeps_the_last_error_and_clears_the_progress(
    make_job: Callable[..., Job],
) -> None:
    job = make_job(
        status=JobStatus.DEAD_LETTERED,
        attempt=3,
        attempts_used=3,
        finished_at=START,
        last_error="RuntimeError: boom 3",
        progress_done=40,
        progress_total=100,
        progress_note="rows",
    )
    assert retry_job(job.pk, now=START) is True
    job.refresh_from_db()
    assert (job.attempt, job.attempts_used, job.last_error) == (3, 0, "RuntimeError: boom 3")
    assert (job.progress_done, job.progress_total, job.progress_note) == (None, None, "")


@pytest.mark.django_db(transaction=True)  # the renewal runs on a thread of its own
def test_retry_job_of_a_cancelled_job_is_not_cancelled_again_by_the_old_request(
    worker: Callable[..., Any], make_job: Callable[..., Job], clock: FakeClock
) -> None:
    job = make_job(max_attempts=3)
    w = worker()
    [claimed] = w.claimer.claim("default", clock.now(), 1)
    cancel_job(job.pk)  # asked to stop while running; it stops
    assert w.writer.record(claimed, cancelled(claimed)) == JobStatus.CANCELLED
    assert retry_job(job.pk, now=clock.now()) is True
    [again] = w.claimer.claim("default", clock.now(), 1)
    ctx = make_context(again)
    held = w.inflight.add(again, ctx, clock.now(), None)
    clock.advance(w.inflight.beat_seconds)
    w.inflight.beat(clock.now())  # the renewal reads the job's cancel request
    assert not held.cancel_requested
    assert not ctx.cancelled
    assert Job.objects.get(pk=job.pk).status == JobStatus.RUNNING


@pytest.mark.parametrize("status", [JobStatus.PENDING, JobStatus.RUNNING, JobStatus.SUCCEEDED])
def test_retry_job_leaves_a_job_that_is_live_or_succeeded(
    make_job: Callable[..., Job], status: JobStatus
) -> None:
    job = make_job(status=status, attempts_used=1, run_at=LATER)
    before = row(job)
    assert retry_job(job.pk, now=START) is False
    assert row(job) == before


def test_retry_job_of_a_cancelled_job_refused_while_a_live_job_has_its_unique_key(
    make_job: Callable[..., Job],
) -> None:
    make_job(unique_key="invoice-7")
    job = make_job(status=JobStatus.CANCELLED, finished_at=START, unique_key="invoice-7")
    before = row(job)
    assert retry_job(job.pk, now=START) is False
    assert row(job) == before


@pytest.mark.listen_notify
@pytest.mark.django_db(transaction=True)  # the listener is another connection
def test_retry_job_wakes_the_workers_of_its_queue(
    make_job: Callable[..., Job], listener: Listener
) -> None:
    job = make_job(status=JobStatus.DEAD_LETTERED, queue="emails", finished_at=START)
    assert retry_job(job.pk) is True
    assert heard(listener, "emails")


# -- run_job_now --------------------------------------------------------------------


def test_run_job_now_makes_a_scheduled_job_due_and_an_idle_worker_takes_it(
    worker: Callable[..., Any], make_job: Callable[..., Job], clock: FakeClock
) -> None:
    job = make_job(run_at=LATER)
    w = worker()
    assert w.run_once().claimed == 0  # scheduled for later
    ran = run_job_now(job.pk, now=clock.now())
    assert (ran.status, ran.run_at, ran.attempts_used) == (JobStatus.PENDING, START, 0)
    assert w.run_once().claimed == 1
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED


def test_run_job_now_retries_a_job_waiting_out_its_backoff_keeping_its_attempts(
    make_job: Callable[..., Job],
) -> None:
    job = make_job(attempt=2, attempts_used=2, run_at=LATER, last_error="RuntimeError: boom 2")
    ran = run_job_now(job.pk, now=START)
    assert row(ran) == (JobStatus.PENDING, START, 2, 2, None, "RuntimeError: boom 2")


def test_run_job_now_refuses_a_job_that_became_due_and_changes_nothing(
    make_job: Callable[..., Job],
) -> None:
    job = make_job(run_at=LATER)
    before = row(job)
    with pytest.raises(JobNotWaiting, match=rf"job #{job.pk} is already due"):
        run_job_now(job.pk, now=LATER)  # the page was loaded before run_at; clicked after
    assert row(job) == before


@pytest.mark.parametrize("status", [JobStatus.RUNNING, JobStatus.SUCCEEDED, JobStatus.CANCELLED])
def test_run_job_now_refuses_a_job_that_is_not_pending(
    make_job: Callable[..., Job], status: JobStatus
) -> None:
    job = make_job(status=status, run_at=LATER)  # claimed (or finished) since the page loaded
    before = row(job)
    with pytest.raises(JobNotWaiting, match=rf"job #{job.pk} is {status}"):
        run_job_now(job.pk, now=START)
    assert row(job) == before


def test_run_job_now_of_an_unknown_job_raises_does_not_exist() -> None:
    with pytest.raises(Job.DoesNotExist):
        run_job_now(999_999)


@pytest.mark.listen_notify
@pytest.mark.django_db(transaction=True)  # the listener is another connection
def test_run_job_now_wakes_the_workers_of_its_queue(
    make_job: Callable[..., Job], listener: Listener
) -> None:
    job = make_job(queue="emails", run_at=LATER + timedelta(days=365 * 10))
    run_job_now(job.pk)
    assert heard(listener, "emails")
