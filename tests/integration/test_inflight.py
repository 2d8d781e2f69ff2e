"""The in-flight set against a real database: renewals (the heartbeat), progress, time-outs
and hand-backs, with a clock the test moves."""

from datetime import timedelta

import pytest
from django.db import connection

from django_jobs.models import AttemptOutcome, Job, JobStatus
from django_jobs.outcomes import HandlerResult
from django_jobs.progress import Progress
from django_jobs.registry import runnable
from django_jobs.worker.execution import make_context
from tests.conftest import wait_until
from tests.support.triggers import refusing

# The heartbeat renews on its own thread and connection: the rows must be committed.
pytestmark = pytest.mark.django_db(transaction=True)

LEASE = 30


@pytest.fixture
def lease_settings(settings):
    settings.DJANGO_JOBS = {"LEASE_SECONDS": LEASE, "RETRY_BASE_SECONDS": 0}


def start(worker, clock, make_job, **job):
    w = worker()
    make_job(**job)
    [claimed] = w.claimer.claim("default", clock.now(), 1)
    ctx = make_context(claimed)
    held = w.inflight.add(claimed, ctx, clock.now(), runnable(claimed.name, claimed.queue).timeout)
    return w, claimed, ctx, held


def renewals_refused_by_the_database():
    """Every change of lease_expires_at fails, as a sick database would."""
    return refusing("block_renewal", "UPDATE OF lease_expires_at", "django_jobs_job")


def test_heartbeat_keeps_a_long_job_leased_far_past_its_lease(
    worker, clock, make_job, lease_settings
):
    w, claimed, ctx, held = start(worker, clock, make_job)
    rival = worker(owner="rival")
    for _ in range(40):  # ten leases' worth of time
        clock.advance(LEASE / 4)
        w.inflight.beat(clock.now())
        assert rival.maintainer.maintain(clock.now()) == 0
        assert rival.claimer.claim("default", clock.now(), 1) == []
    assert not ctx.cancelled
    job = Job.objects.get(pk=claimed.id)
    assert job.lease_expires_at > clock.now()
    assert w.inflight.finish(held)
    assert w.writer.record(claimed, HandlerResult(AttemptOutcome.SUCCEEDED)) == JobStatus.SUCCEEDED
    assert job.attempts.count() == 1


def test_heartbeat_without_renewal_the_lease_is_taken(worker, clock, make_job, lease_settings):
    """The test above fails without the heartbeat: here is why."""
    _w, claimed, _ctx, _held = start(worker, clock, make_job)
    clock.advance(LEASE + 1)
    assert worker(owner="rival").maintainer.maintain(clock.now()) == 1


def test_heartbeat_refused_renewal_cancels_and_records_nothing(
    worker, clock, make_job, lease_settings
):
    w, claimed, ctx, held = start(worker, clock, make_job)
    Job.objects.filter(pk=claimed.id).update(lease_owner="someone-else")
    clock.advance(LEASE / 3)
    w.inflight.beat(clock.now())
    assert ctx.cancelled
    assert not w.inflight.finish(held)  # the handler's result is dropped
    job = Job.objects.get(pk=claimed.id)
    assert (job.status, job.lease_owner) == (JobStatus.RUNNING, "someone-else")
    assert job.attempts.get().outcome is None


def test_heartbeat_failing_renewals_keep_the_lease_until_the_deadline(
    worker, clock, make_job, lease_settings
):
    w, claimed, ctx, held = start(worker, clock, make_job)
    with renewals_refused_by_the_database():
        clock.advance(10)
        w.inflight.beat(clock.now())  # fails; retried before the give-up point (20)
        assert not ctx.cancelled
        clock.advance(5)
        w.inflight.beat(clock.now())  # the retry, halfway to the give-up point: fails too
        assert not ctx.cancelled
    clock.advance(2.5)
    w.inflight.beat(clock.now())  # the database is back in time for the next retry
    assert not ctx.cancelled
    assert Job.objects.get(pk=claimed.id).lease_expires_at == clock.now() + timedelta(seconds=LEASE)
    with renewals_refused_by_the_database():
        for _ in range(4):
            clock.advance(5)
            w.inflight.beat(clock.now())
    assert ctx.cancelled  # given up one beat before the lease lapsed
    assert Job.objects.get(pk=claimed.id).lease_expires_at > clock.now()
    assert not w.inflight.finish(held)


def test_heartbeat_times_out_a_handler_and_retries_the_job(worker, clock, make_job, settings):
    settings.DJANGO_JOBS = {
        "LEASE_SECONDS": LEASE,
        "RETRY_BASE_SECONDS": 0,
        "QUEUES": {"default": {"workers": 1, "timeout": 5}},
    }
    w, claimed, ctx, held = start(worker, clock, make_job)
    clock.advance(4)
    w.inflight.beat(clock.now())
    assert not ctx.cancelled
    clock.advance(1)
    w.writer.write_apart(w.inflight.beat(clock.now()))  # as the heartbeat's thread does
    assert ctx.cancelled
    assert not w.inflight.finish(held)  # a late return is not a success
    # The outcome is written off the heartbeat's thread.
    wait_until(lambda: Job.objects.get(pk=claimed.id).status == JobStatus.PENDING)
    job = Job.objects.get(pk=claimed.id)
    assert (job.status, job.attempts_used) == (JobStatus.PENDING, 1)
    assert job.last_error.startswith("TimedOut")
    assert job.attempts.get().outcome == AttemptOutcome.TIMED_OUT


def test_hand_back_of_running_jobs_uses_no_attempt(worker, clock, make_job, lease_settings):
    w, claimed, ctx, held = start(worker, clock, make_job, max_attempts=1)
    w.inflight.cancel_all()
    assert ctx.cancelled
    assert w.writer.hand_back(w.inflight.end_running(), clock.now()) == {claimed.id}
    assert not w.inflight.finish(held)
    job = Job.objects.get(pk=claimed.id)
    assert (job.status, job.attempts_used, job.lease_owner) == (JobStatus.PENDING, 0, None)
    assert job.attempts.get().outcome == AttemptOutcome.RELEASED
    [again] = w.claimer.claim("default", clock.now(), 1)  # max_attempts=1, and it runs again
    assert (again.attempt, again.attempts_used) == (2, 1)


# What a handler could report if ctx.progress() let it through: text no database stores,
# a count past the columns' 64-bit range.
UNSTORABLE_REPORTS = {
    "nul": Progress(1, 2, "bad \x00 byte"),
    "surrogate": Progress(1, 2, "lone \udc80 half"),
    "count": Progress(2**63, None, ""),
}


@pytest.mark.parametrize("kind", sorted(UNSTORABLE_REPORTS))
def test_heartbeat_one_unstorable_report_costs_no_other_job_its_lease(
    worker, clock, make_job, lease_settings, caplog, kind
):
    w = worker(queues={"default": 3})
    for _ in range(3):
        make_job()
    claimed = w.claimer.claim("default", clock.now(), 3)
    contexts = [make_context(job) for job in claimed]
    for job, ctx in zip(claimed, contexts, strict=True):
        w.inflight.add(job, ctx, clock.now(), None)
    good, bad, quiet = contexts
    good.progress(3, 10, "copying")
    bad._progress, bad._progress_version = UNSTORABLE_REPORTS[kind], 1  # past the checks
    for _ in range(3):  # a lease's worth of beats: the bad report must not cost one
        clock.advance(LEASE / 3)
        w.inflight.beat(clock.now())
        rows = {row.pk: row for row in Job.objects.filter(pk__in=[job.id for job in claimed])}
        for job in claimed:
            assert rows[job.id].lease_expires_at == clock.now() + timedelta(seconds=LEASE)
        assert not any(ctx.cancelled for ctx in contexts)
    assert (rows[good.job_id].progress_done, rows[good.job_id].progress_note) == (3, "copying")
    assert rows[quiet.job_id].progress_done is None
    # Where the database refuses it (SQLite, MariaDB and MySQL store a NUL), the bad report
    # is dropped, once, with a line that says so.
    dropped = [
        r.job_id for r in caplog.records if getattr(r, "event", "") == "job_progress_dropped"
    ]
    stored = rows[bad.job_id].progress_done is not None
    assert dropped == ([] if stored else [bad.job_id])
    assert stored == (kind == "nul" and connection.vendor in ("sqlite", "mysql"))
