"""cancel_job(): a pending job never runs; a running one stops at its next heartbeat."""

import pytest

from django_jobs import JobNotCancellable, cancel_job
from django_jobs.models import AttemptOutcome, Job, JobStatus
from django_jobs.outcomes import HandlerResult, cancelled
from django_jobs.signals import job_cancelled, job_dead_lettered, job_failed, job_succeeded
from django_jobs.worker.execution import make_context
from tests.conftest import START, execute_held_on_a_thread, wait_until

pytestmark = pytest.mark.django_db

SIGNALS = {
    "succeeded": job_succeeded,
    "failed": job_failed,
    "dead_lettered": job_dead_lettered,
    "cancelled": job_cancelled,
}


def test_cancel_pending_job_is_cancelled_at_once_and_never_runs(worker, make_job, clock):
    job = make_job()
    cancelled = cancel_job(job.pk, now=START)
    assert (cancelled.status, cancelled.finished_at) == (JobStatus.CANCELLED, START)
    assert worker().run_once().claimed == 0
    assert not cancelled.attempts.exists()


@pytest.mark.django_db(transaction=True)  # the renewal runs on a thread of its own
def test_cancel_running_job_stops_it_at_the_next_heartbeat_and_records_cancelled(
    worker, make_job, clock
):
    job = make_job(name="tests.patient", payload={"seconds": 60}, max_attempts=3)
    w = worker()
    [claimed] = w.claimer.claim("default", clock.now(), 1)
    ctx = make_context(claimed)
    held = w.inflight.add(claimed, ctx, clock.now(), None)
    requested = cancel_job(job.pk)
    assert requested.status == JobStatus.RUNNING and requested.cancel_requested_at is not None
    assert not ctx.cancelled  # the worker hears of it at its next beat
    clock.advance(w.inflight.beat_seconds)
    w.inflight.beat(clock.now())
    assert ctx.cancelled and held.cancel_requested
    # The handler stops (JobCancelled); its attempt ends cancelled, and no retry follows.
    assert w.inflight.finish(held)
    assert w.writer.record(claimed, cancelled(claimed)) == JobStatus.CANCELLED
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED
    assert job.attempts.get().outcome == AttemptOutcome.CANCELLED


@pytest.mark.django_db(transaction=True)
def test_cancel_running_job_through_execute_held_ends_cancelled_not_retried(
    worker, make_job, clock
):
    """The handler raises JobCancelled once cancelled: recorded cancelled, not released."""
    job = make_job(name="tests.patient", payload={"seconds": 30}, max_attempts=3)
    w = worker()
    [claimed] = w.claimer.claim("default", clock.now(), 1)
    statuses = []

    thread = execute_held_on_a_thread(w, claimed, statuses)
    wait_until(w.inflight.snapshot)
    cancel_job(job.pk)
    clock.advance(w.inflight.beat_seconds)
    w.inflight.beat(clock.now())  # the heartbeat hears of the request
    thread.join(10)
    assert statuses == [JobStatus.CANCELLED]
    job.refresh_from_db()
    assert (job.status, job.attempts_used) == (JobStatus.CANCELLED, 1)
    assert job.attempts.get().outcome == AttemptOutcome.CANCELLED


def test_cancel_finished_job_changes_nothing_and_says_why(make_job):
    job = make_job(status=JobStatus.SUCCEEDED, finished_at=START)
    with pytest.raises(JobNotCancellable, match=rf"job #{job.pk} is succeeded"):
        cancel_job(job.pk)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED


def test_cancel_unknown_job_raises_does_not_exist():
    with pytest.raises(Job.DoesNotExist):
        cancel_job(999_999)


def test_cancel_requested_job_whose_worker_died_is_cancelled_not_run_again(
    worker, make_job, clock, settings
):
    settings.DJANGO_JOBS = {"LEASE_SECONDS": 10}
    job = make_job(max_attempts=5)
    w = worker()
    w.claimer.claim("default", clock.now(), 1)
    cancel_job(job.pk)
    clock.advance(11)  # the worker died: its lease lapses
    assert w.maintainer.maintain(clock.now()) == 1
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED
    assert job.attempts.get().outcome == AttemptOutcome.LEASE_EXPIRED
    assert w.run_once().claimed == 0


@pytest.mark.django_db(transaction=True)  # the renewal runs on a thread of its own
def test_cancel_a_handler_that_succeeds_anyway_keeps_its_success(worker, make_job, clock):
    job = make_job()
    w = worker()
    [claimed] = w.claimer.claim("default", clock.now(), 1)
    held = w.inflight.add(claimed, make_context(claimed), clock.now(), None)
    cancel_job(job.pk)
    clock.advance(w.inflight.beat_seconds)
    w.inflight.beat(clock.now())
    assert held.cancel_requested
    assert w.inflight.finish(held)
    assert w.writer.record(claimed, HandlerResult(AttemptOutcome.SUCCEEDED)) == JobStatus.SUCCEEDED
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED


@pytest.fixture
def outcome_signals():
    heard = []

    def receiver(sender, signal, **details):
        heard.append(next(name for name, s in SIGNALS.items() if s is signal))

    for signal in SIGNALS.values():
        signal.connect(receiver, sender=Job)
    yield heard
    for signal in SIGNALS.values():
        signal.disconnect(receiver, sender=Job)


@pytest.mark.parametrize("path", ["run_once", "execute_held"])
def test_cancel_requested_while_an_attempt_fails_ends_cancelled_not_retried(
    worker, make_job, clock, settings, outcome_signals, path
):
    """The request lands after the last renewal: the settle itself honours it."""
    settings.DJANGO_JOBS = {"RETRY_BASE_SECONDS": 0}
    job = make_job(name="tests.cancelled_then_fails", max_attempts=3)
    w = worker()
    if path == "run_once":
        result = w.run_once()
        assert (result.claimed, result.retried, result.cancelled) == (1, 0, 1)
    else:
        [claimed] = w.claimer.claim("default", clock.now(), 1)
        assert w.executor.execute(claimed).status == JobStatus.CANCELLED
    job.refresh_from_db()
    assert (job.status, job.finished_at) == (JobStatus.CANCELLED, START)
    assert job.last_error == "RuntimeError: failed after the cancel request"
    attempt = job.attempts.get()  # the attempt says what it did
    assert (attempt.outcome, attempt.error) == (AttemptOutcome.FAILED, job.last_error)
    assert outcome_signals == ["cancelled"]
    clock.advance(3600)
    assert w.run_once().claimed == 0  # not retried
