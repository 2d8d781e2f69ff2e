import dataclasses
import time
from datetime import timedelta

import pytest

from django_jobs.db import ClaimRequest, get_driver
from django_jobs.models import Attempt, AttemptOutcome, Job, JobStatus
from django_jobs.outcomes import ERROR_LIMIT, HandlerResult, decide
from django_jobs.retry_policy import RetryPolicy
from tests.conftest import START
from tests.support.jobs import CALLS

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _reset_calls():
    CALLS.clear()


def test_run_once_success_finishes_the_job_and_its_attempt(worker, make_job):
    job = make_job(payload={"x": 1})
    result = worker().run_once()
    assert (result.claimed, result.succeeded) == (1, 1)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert (job.lease_owner, job.lease_expires_at, job.finished_at) == (None, None, START)
    assert CALLS == [(job.pk, 1, {"x": 1})]
    attempt = job.attempts.get()
    assert (attempt.outcome, attempt.finished_at, attempt.error) == ("succeeded", START, "")


def test_run_once_failure_retries_after_the_backoff(worker, make_job, settings):
    settings.DJANGO_JOBS = {"RETRY_BASE_SECONDS": 10, "RETRY_JITTER": 0.5}
    job = make_job(name="tests.fail")
    result = worker().run_once()
    assert result.retried == 1
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING
    assert START + timedelta(seconds=10) <= job.run_at <= START + timedelta(seconds=15)
    assert job.last_error == "RuntimeError: boom 1"
    assert (job.attempts_used, job.lease_owner) == (1, None)
    attempt = job.attempts.get()
    assert (attempt.outcome, attempt.error) == ("failed", "RuntimeError: boom 1")


def test_run_once_dead_letters_after_the_last_attempt(worker, make_job, clock, settings):
    settings.DJANGO_JOBS = {"RETRY_BASE_SECONDS": 10, "RETRY_JITTER": 0}
    job = make_job(name="tests.fail", max_attempts=3)
    w = worker()
    w.run_once()
    assert w.run_once().claimed == 0  # not due before its backoff
    clock.advance(10)
    w.run_once()
    clock.advance(20)
    assert w.run_once().dead_lettered == 1
    job.refresh_from_db()
    assert job.status == JobStatus.DEAD_LETTERED
    assert job.finished_at == START + timedelta(seconds=30)
    assert job.last_error == "RuntimeError: boom 3"
    outcomes = list(job.attempts.values_list("number", "outcome"))
    assert outcomes == [(1, "failed"), (2, "failed"), (3, "failed")]
    clock.advance(10**6)
    assert w.run_once().claimed == 0


def test_run_once_unknown_job_name_waits_pending_and_the_others_run(worker, make_job, clock):
    """A name the worker does not know is not claimed: no attempt is used, and the jobs of
    the names it knows, behind it in the claim order, run."""
    stale = make_job(name="removed.long.ago", max_attempts=1, priority=9)
    good = make_job()
    w = worker(queues={"default": 2})
    assert (w.run_once().claimed, w.run_once().claimed) == (1, 0)
    clock.advance(3600)
    assert w.run_once().claimed == 0
    stale.refresh_from_db()
    assert (stale.status, stale.attempts_used, stale.attempt) == (JobStatus.PENDING, 0, 0)
    assert not stale.attempts.exists()
    assert Job.objects.get(pk=good.pk).status == JobStatus.SUCCEEDED


def test_execute_unknown_name_that_reaches_a_handler_fails_saying_how_to_register(
    worker, make_job, clock
):
    """A claim of any name (``names=None``: a tool's) takes it: its attempt fails with the
    unknown name's error, which says how a job gets registered."""
    stale = make_job(name="removed.long.ago", max_attempts=1)
    w = worker()
    [claimed] = get_driver().claim(ClaimRequest("default", w.owner, clock.now(), 60, 1))
    assert w.executor.execute(claimed).status == JobStatus.DEAD_LETTERED
    stale.refresh_from_db()
    assert stale.last_error.startswith("UnknownJob: no job is registered under the name")
    assert "@job(name) in an installed app's jobs.py" in stale.last_error


def test_execute_payload_that_does_not_decode_fails_the_attempt(worker, make_job, clock):
    # Both databases check JSON on write, so hand the worker undecodable text
    # as a driver would return it from a column without that check.
    job = make_job(max_attempts=1)
    w = worker()
    [claimed] = w.claimer.claim("default", clock.now(), 1)
    broken = dataclasses.replace(claimed, raw_payload="{oops")
    assert w.executor.execute(broken).status == "dead_lettered"
    job.refresh_from_db()
    assert job.last_error.startswith("PayloadError: stored payload is not valid JSON")
    assert "oops" not in job.last_error
    assert CALLS == []
    make_job()
    assert w.run_once().succeeded == 1


def test_error_text_is_type_and_message_capped_without_traceback(worker, make_job):
    job = make_job(name="tests.long_error", max_attempts=1)
    worker().run_once()
    job.refresh_from_db()
    assert len(job.last_error) == ERROR_LIMIT
    assert job.last_error.startswith("ValueError: xxx")
    assert "Traceback" not in job.last_error
    assert job.attempts.get().error == job.last_error


def test_settle_is_fenced_by_owner_and_attempt(worker, make_job, clock):
    make_job()
    w = worker()
    [claimed] = w.claimer.claim("default", clock.now(), 1)
    success = HandlerResult(AttemptOutcome.SUCCEEDED)

    def settlement(**changes):
        job = dataclasses.replace(claimed, **changes)
        return decide(job, success, clock.now(), RetryPolicy())

    wrong_owner = settlement(owner="someone-else")
    stale_attempt = settlement(attempt=claimed.attempt - 1)
    assert w.driver.settle([wrong_owner, stale_attempt]).lost == [wrong_owner, stale_attempt]
    job = Job.objects.get(pk=claimed.id)
    assert job.status == JobStatus.RUNNING
    assert Attempt.objects.get(job=job).outcome is None
    assert w.driver.settle([settlement()]).lost == []
    assert Job.objects.get(pk=claimed.id).status == JobStatus.SUCCEEDED


def test_settle_after_the_lease_was_taken_writes_nothing(worker, make_job, clock, settings):
    settings.DJANGO_JOBS = {"LEASE_SECONDS": 10}
    job = make_job(max_attempts=5)
    first, second = worker(owner="first"), worker(owner="second")
    [lost] = first.claimer.claim("default", clock.now(), 1)
    clock.advance(11)
    assert second.maintainer.maintain(clock.now()) == 1  # the first worker's lease expired
    [taken] = second.claimer.claim("default", clock.now(), 1)
    assert taken.attempt == 2
    assert first.executor.execute(lost) is None  # its outcome is dropped
    job.refresh_from_db()
    assert (job.status, job.lease_owner, job.attempt) == (JobStatus.RUNNING, "second", 2)
    assert second.executor.execute(taken).status == JobStatus.SUCCEEDED
    outcomes = list(job.attempts.values_list("number", "owner", "outcome"))
    assert outcomes == [(1, "first", "lease_expired"), (2, "second", "succeeded")]


def test_maintain_reclaims_expired_leases_and_dead_letters_exhausted_ones(worker, make_job, clock):
    again = make_job(max_attempts=2)
    last = make_job(max_attempts=1)
    w = worker(queues={"default": 2})
    w.claimer.claim("default", clock.now(), 2)
    clock.advance(299)
    assert w.maintainer.maintain(clock.now()) == 0  # leases (300 s) still hold
    clock.advance(2)
    assert w.maintainer.maintain(clock.now()) == 2
    again.refresh_from_db()
    last.refresh_from_db()
    assert (again.status, again.run_at, again.lease_owner) == ("pending", clock.now(), None)
    assert last.status == JobStatus.DEAD_LETTERED
    assert "LeaseExpired" in last.last_error
    assert set(Attempt.objects.values_list("outcome", flat=True)) == {"lease_expired"}


def test_maintain_dead_letters_pending_jobs_without_attempts_left(worker, make_job):
    job = make_job(attempts_used=3, max_attempts=3)
    worker().run_once()
    job.refresh_from_db()
    assert job.status == JobStatus.DEAD_LETTERED
    assert "NoAttemptsLeft" in job.last_error


def test_retry_job_gives_a_dead_letter_a_fresh_budget(worker, make_job, clock):
    from django_jobs import retry_job

    job = make_job(name="tests.fail", max_attempts=1)
    worker().run_once()
    job.refresh_from_db()
    assert job.status == JobStatus.DEAD_LETTERED
    assert retry_job(job.pk, now=clock.now()) is True
    job.refresh_from_db()
    assert (job.status, job.attempts_used, job.run_at, job.finished_at) == (
        "pending",
        0,
        clock.now(),
        None,
    )
    assert retry_job(job.pk) is False  # not dead-lettered any more
    worker().run_once()
    assert list(job.attempts.values_list("number", flat=True)) == [1, 2]


def test_retry_job_refused_while_a_live_job_has_its_unique_key(make_job):
    from django_jobs import retry_job

    dead = make_job(status=JobStatus.DEAD_LETTERED, unique_key="k")
    make_job(unique_key="k")
    assert retry_job(dead.pk) is False
    assert Job.objects.get(pk=dead.pk).status == JobStatus.DEAD_LETTERED


def logged_text(caplog) -> str:
    return "\n".join(record.getMessage() for record in caplog.records)


def test_stored_errors_and_logs_mask_secrets_the_handler_popped(worker, make_job, caplog):
    payload = {
        "card_token": "4111111111111111",
        "name": "Ada Lovelace",
        "auth": {"api_key": "sk_live_abc123"},
    }
    job = make_job(name="tests.pops_secret", payload=payload)
    worker().run_once()
    job.refresh_from_db()
    assert job.last_error == "ValueError: card *** declined for Ada Lovelace with key '***'"
    assert job.attempts.get().error == job.last_error
    logged = logged_text(caplog)
    assert "card *** declined for Ada Lovelace" in logged and "Traceback" in logged
    assert "4111111111111111" not in logged and "sk_live_abc123" not in logged
    assert job.payload == payload  # the row keeps what the handler popped


def test_stored_errors_keep_values_of_ordinary_keys_readable(worker, make_job):
    job = make_job(name="tests.csv_error", payload={"file": "orders.csv", "batch": 2, "retries": 3})
    worker().run_once()
    job.refresh_from_db()
    assert job.last_error == "ValueError: row 2: expected 3 columns, got 2"


def test_stored_errors_mask_keys_named_by_hidden_payload_keys(worker, make_job, settings):
    settings.DJANGO_JOBS = {"HIDDEN_PAYLOAD_KEYS": ["^card$", "^pin$"]}
    payload = {"card": "4111111111111111", "name": "Ada Lovelace", "pin": 42}
    job = make_job(name="tests.leaky", payload=payload, max_attempts=1)
    worker().run_once()
    job.refresh_from_db()
    assert job.last_error == "ValueError: card *** declined for Ada Lovelace (pin ***)"


def test_stored_errors_keep_only_the_type_when_masking_fails(worker, make_job, settings, caplog):
    settings.DJANGO_JOBS = {"HIDDEN_PAYLOAD_KEYS": ["(unclosed"]}  # the system check says so
    payload = {"card_token": "4111111111111111", "name": "Ada", "auth": {"api_key": "sk_1"}}
    job = make_job(name="tests.pops_secret", payload=payload, max_attempts=1)
    assert worker().run_once().dead_lettered == 1
    job.refresh_from_db()
    assert job.last_error == "ValueError"
    assert "4111111111111111" not in logged_text(caplog)
    assert "could not be masked (error)" in logged_text(caplog)


RAISED = [
    ("exit", "SystemExit: 3"),
    ("interrupt", "KeyboardInterrupt"),
    ("generator", "GeneratorExit"),
    ("abort", "HandlerAbort: stop everything"),
]


@pytest.mark.parametrize(("kind", "error"), RAISED)
def test_run_once_handler_raising_a_base_exception_fails_its_attempt(
    worker, make_job, clock, kind, error
):
    job = make_job(name="tests.raises_base", payload={"raise": kind}, max_attempts=2)
    w = worker()
    assert w.run_once().retried == 1
    job.refresh_from_db()
    assert (job.status, job.lease_owner, job.last_error) == (JobStatus.PENDING, None, error)
    clock.advance(3600)
    assert w.run_once().dead_lettered == 1
    job.refresh_from_db()
    assert job.status == JobStatus.DEAD_LETTERED
    attempts = list(job.attempts.values_list("number", "outcome", "error"))
    assert attempts == [(1, "failed", error), (2, "failed", error)]
    good = make_job()
    assert w.run_once().succeeded == 1  # the worker goes on serving
    assert Job.objects.get(pk=good.pk).status == JobStatus.SUCCEEDED


@pytest.mark.parametrize(("kind", "error"), RAISED)
def test_execute_held_handler_raising_a_base_exception_fails_its_attempt(
    worker, make_job, clock, kind, error
):
    job = make_job(name="tests.raises_base", payload={"raise": kind}, max_attempts=1)
    w = worker()
    [claimed] = w.claimer.claim("default", clock.now(), 1)
    assert w.executor.execute(claimed).status == JobStatus.DEAD_LETTERED
    assert w.inflight.snapshot() == []
    job.refresh_from_db()
    assert (job.status, job.last_error) == (JobStatus.DEAD_LETTERED, error)
    assert job.attempts.get().outcome == AttemptOutcome.FAILED


UNSTORABLE = [
    ("zero", "ValueError: bad \\x00 byte"),
    ("half", "ValueError: lone \ufffd surrogate"),
]


@pytest.mark.parametrize(("text", "stored"), UNSTORABLE)
def test_run_once_error_text_the_database_refuses_is_stored_readable(
    worker, make_job, clock, caplog, text, stored
):
    job = make_job(name="tests.unstorable_error", payload={"text": text}, max_attempts=2)
    w = worker()
    assert w.run_once().retried == 1
    job.refresh_from_db()
    assert (job.status, job.lease_owner, job.last_error) == (JobStatus.PENDING, None, stored)
    clock.advance(3600)
    assert w.run_once().dead_lettered == 1
    job.refresh_from_db()
    assert job.last_error == stored
    assert list(job.attempts.values_list("outcome", "error")) == [("failed", stored)] * 2
    logged = logged_text(caplog)
    assert stored in logged and "\x00" not in logged and "\udc80" not in logged


@pytest.mark.parametrize(("text", "stored"), UNSTORABLE)
def test_execute_held_error_text_the_database_refuses_lands_at_once(
    worker, make_job, clock, settings, text, stored
):
    settings.DJANGO_JOBS = {"LEASE_SECONDS": 6}  # how long a failing outcome write is retried
    job = make_job(name="tests.unstorable_error", payload={"text": text}, max_attempts=1)
    w = worker()
    [claimed] = w.claimer.claim("default", clock.now(), 1)
    started = time.monotonic()
    assert w.executor.execute(claimed).status == JobStatus.DEAD_LETTERED
    assert time.monotonic() - started < 3
    job.refresh_from_db()
    assert (job.status, job.last_error) == (JobStatus.DEAD_LETTERED, stored)
    assert job.attempts.get().error == stored
