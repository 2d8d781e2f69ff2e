"""A handler's return value is the job's result: stored as JSON, or the attempt fails."""

import pytest

from django_jobs.db import ClaimRequest, get_driver
from django_jobs.models import AttemptOutcome, Job, JobStatus
from django_jobs.outcomes import HandlerResult, decide
from django_jobs.retry_policy import RetryPolicy
from tests.conftest import START

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("value", [{"n": 1, "tags": ["a", "b"]}, [1, 2.5], "done", 7, True])
def test_result_of_a_succeeded_job_is_its_return_value(worker, make_job, value):
    job = make_job(name="tests.returns", payload={"value": value})
    assert worker().run_once().succeeded == 1
    job.refresh_from_db()
    assert (job.status, job.result) == (JobStatus.SUCCEEDED, value)


def test_result_of_a_handler_returning_nothing_is_null(worker, make_job):
    job = make_job(name="tests.ok")
    worker().run_once()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED and job.result is None


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("object", "the return value is an object, not JSON"),
        ("nan", "the return value['ratio'] is nan, not strict JSON"),
    ],
)
def test_result_that_is_not_json_fails_the_attempt_with_a_clear_error(
    worker, make_job, value, error
):
    job = make_job(name="tests.returns", payload={"value": value}, max_attempts=1)
    assert worker().run_once().dead_lettered == 1
    job.refresh_from_db()
    assert job.status == JobStatus.DEAD_LETTERED and job.result is None
    assert job.last_error == f"ResultError: the handler's return value cannot be stored: {error}"
    assert job.attempts.get().outcome == AttemptOutcome.FAILED


@pytest.mark.django_db(transaction=True)
def test_result_rides_in_the_claim_that_carries_its_outcome(make_job):
    """The combined claim-and-settle statement writes the result as the settle alone does."""
    for _ in range(2):
        make_job()
    driver = get_driver()
    [done] = driver.claim(ClaimRequest("default", "w1", START, 60))
    succeeded = HandlerResult(AttemptOutcome.SUCCEEDED, result='{"rows": 3}')
    settled = decide(done, succeeded, START, RetryPolicy())
    claimed, written = driver.claim_and_settle(ClaimRequest("default", "w1", START, 60), [settled])
    assert written.lost == [] and len(claimed) == 1
    assert Job.objects.get(pk=done.id).result == {"rows": 3}


def test_result_is_kept_by_an_outcome_that_carries_none(make_job):
    make_job()
    driver = get_driver()
    [job] = driver.claim(ClaimRequest("default", "w1", START, 60))
    job_row = Job.objects.get(pk=job.id)
    job_row.result = {"kept": True}  # a result written earlier (by hand, say)
    job_row.save(update_fields=["result"])
    succeeded = decide(job, HandlerResult(AttemptOutcome.SUCCEEDED), START, RetryPolicy())
    assert succeeded.result is None
    assert driver.settle([succeeded]).lost == []
    assert Job.objects.get(pk=job.id).result == {"kept": True}
