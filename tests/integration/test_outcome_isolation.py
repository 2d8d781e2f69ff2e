"""Nothing one job brings costs another job of its batch its outcome: an outcome that cannot
be decided, or that the database refuses, fails its own attempt; the others are written and
no job is left held."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import IntegrityError

from django_jobs import schedule_job
from django_jobs.db import DatabaseBusy
from django_jobs.models import Attempt, AttemptOutcome, Job, JobStatus
from django_jobs.outcomes import HandlerResult
from django_jobs.worker.execution import make_context
from django_jobs.worker.settler import Outcome
from tests.conftest import START

pytestmark = pytest.mark.django_db(transaction=True)

SUCCESS = HandlerResult(AttemptOutcome.SUCCEEDED)
# A delay no date can be made of, as a handler could bring one past Snooze's own check.
UNDECIDABLE = HandlerResult(AttemptOutcome.SNOOZED, "Snoozed", delay=float("nan"))


def claim_three(w: Any) -> list[Any]:
    for _ in range(3):
        schedule_job("tests.ok", {}, run_at=START)
    claimed = w.claimer.claim("default", START, 3)
    assert len(claimed) == 3
    return [(job, w.inflight.add(job, make_context(job), START, None)) for job in claimed]


def outcomes_of(held: list[Any], bad: HandlerResult) -> list[Outcome]:
    (first, h1), (middle, h2), (last, h3) = held
    return [Outcome(first, SUCCESS, h1), Outcome(middle, bad, h2), Outcome(last, SUCCESS, h3)]


def assert_innocents_succeeded_once(held: list[Any], why: str) -> None:
    (first, _), (middle, _), (last, _) = held
    for job in (first, last):
        row = Job.objects.get(pk=job.id)
        assert row.status == JobStatus.SUCCEEDED
        assert list(Attempt.objects.filter(job_id=job.id).values_list("outcome", flat=True)) == [
            AttemptOutcome.SUCCEEDED
        ]
    bad = Job.objects.get(pk=middle.id)
    assert (bad.status, bad.lease_owner) == (JobStatus.PENDING, None)  # retried later
    assert why in bad.last_error
    assert Attempt.objects.get(job_id=middle.id).outcome == AttemptOutcome.FAILED


@pytest.mark.parametrize("path", ["written apart", "carried by a claim"])
def test_an_outcome_that_cannot_be_decided_fails_alone_and_its_batch_is_written(
    worker, path
) -> None:
    w = worker(queues={"default": 3})
    held = claim_three(w)
    outcomes = outcomes_of(held, UNDECIDABLE)
    if path == "written apart":
        w.writer.write(outcomes)
    else:
        w.settler.linger_seconds = 60.0  # the claim takes them before the settler's thread
        w.settler.start()
        try:
            for outcome in outcomes:
                w.settler.submit(outcome)
            assert w.claimer.claim_and_settle("default", 3) == []
        finally:
            assert w.settler.stop(5)
    assert_innocents_succeeded_once(held, "(snoozed) could not be decided: ValueError")
    assert w.inflight.snapshot() == []  # no job left held, its lease renewed forever


def test_an_outcome_the_database_refuses_fails_alone_and_its_batch_is_written(
    worker,
) -> None:
    from tests.support.triggers import refusing

    w = worker(queues={"default": 3})
    held = claim_three(w)
    middle = held[1][0]
    condition = f"NEW.id = {middle.id} AND NEW.status = 'succeeded'"
    with refusing("test_refuse_settle", "UPDATE", "django_jobs_job", condition):
        w.writer.write(outcomes_of(held, SUCCESS))
    assert_innocents_succeeded_once(held, "(succeeded) was refused:")
    assert w.inflight.snapshot() == []


def test_a_snooze_too_long_for_any_date_fails_its_attempt_saying_why(worker) -> None:
    w = worker()
    job = schedule_job("tests.snoozes", {"seconds": 2.5e11}, run_at=START)
    w.run_once(START)
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING
    assert job.last_error.startswith("ValueError: Snooze takes seconds from 0 to 3153600000")
    assert Attempt.objects.get(job_id=job.pk).outcome == AttemptOutcome.FAILED
    assert w.inflight.snapshot() == []


@pytest.mark.parametrize(
    ("error", "claims"),
    [(DatabaseBusy("locked"), 0), (IntegrityError("refused"), 1), (RuntimeError("a bug"), None)],
    ids=["busy", "refused", "bug"],
)
def test_a_claim_that_fails_gives_its_outcomes_back_still_held(
    worker, monkeypatch, error, claims
) -> None:
    """The database busy: nothing is claimed; a refused row: the claim goes again alone; any
    other error is raised. Each time the outcomes go back to the settler, their jobs held."""
    w = worker(queues={"default": 3})
    held = claim_three(w)
    schedule_job("tests.ok", {}, run_at=START)
    outcomes = outcomes_of(held, SUCCESS)
    given_back: list[Outcome] = []
    monkeypatch.setattr(w.settler, "take", lambda: list(outcomes))
    monkeypatch.setattr(w.settler, "give_back", given_back.extend)

    def fails(*args: Any) -> Any:
        raise error

    monkeypatch.setattr(w.claimer.driver, "claim_and_settle", fails)
    if claims is None:
        with pytest.raises(RuntimeError):
            w.claimer.claim_and_settle("default", 3)
    else:
        assert len(w.claimer.claim_and_settle("default", 3)) == claims
    assert given_back == outcomes and len(w.inflight.snapshot()) == 3
    rows = Job.objects.filter(pk__in=[job.id for job, _ in held])
    assert {row.status for row in rows} == {JobStatus.RUNNING}  # nothing written
    w.writer.write(given_back)  # the settler's turn
    assert {row.status for row in rows.all()} == {JobStatus.SUCCEEDED}
    assert w.inflight.snapshot() == []
