"""The ends the rescuer and the maintenance pass write, decided without a database."""

from datetime import timedelta

import pytest

from django_jobs.db.records import UnleasedRow
from django_jobs.models import AttemptOutcome, JobStatus
from django_jobs.outcomes import ERROR_LIMIT, EXHAUSTED_ERROR, exhausted, lapsed
from tests.conftest import START


def unleased(**overrides: object) -> UnleasedRow:
    fields: dict[str, object] = {
        "id": 7,
        "name": "tests.ok",
        "queue": "default",
        "lease_owner": "host:1",
        "lease_expires_at": START - timedelta(seconds=1),
        "attempt": 2,
        "attempts_used": 2,
        "max_attempts": 3,
        "cancel_requested_at": None,
    }
    fields.update(overrides)
    return UnleasedRow(**fields)  # type: ignore[arg-type]


def test_lapsed_with_an_attempt_left_is_due_again_at_once():
    settled = lapsed(unleased(), START)
    assert (settled.status, settled.run_at, settled.finished_at) == (
        JobStatus.PENDING,
        START,
        None,
    )
    assert (settled.job_id, settled.owner, settled.attempt) == (7, "host:1", 2)
    assert (settled.outcome, settled.ended_at) == (AttemptOutcome.LEASE_EXPIRED, START)
    assert (
        settled.error
        == settled.last_error
        == "LeaseExpired: worker host:1 lost its lease on attempt 2"
    )
    assert not settled.give_back  # a lapsed lease spends its attempt


def test_lapsed_on_the_last_attempt_is_dead_lettered():
    settled = lapsed(unleased(attempts_used=3), START)
    assert (settled.status, settled.run_at, settled.finished_at) == (
        JobStatus.DEAD_LETTERED,
        None,
        START,
    )
    assert settled.outcome == AttemptOutcome.LEASE_EXPIRED


@pytest.mark.parametrize("attempts_used", [1, 3])
def test_lapsed_with_a_cancel_requested_is_cancelled_whatever_is_left(attempts_used):
    row = unleased(attempts_used=attempts_used, cancel_requested_at=START - timedelta(minutes=1))
    settled = lapsed(row, START)
    assert (settled.status, settled.run_at, settled.finished_at) == (
        JobStatus.CANCELLED,
        None,
        START,
    )
    assert settled.last_error.startswith("LeaseExpired")


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"lease_owner": None}, "LeaseExpired: running with no lease owner on attempt 2"),
        (
            {"lease_expires_at": None},
            "LeaseExpired: worker host:1 held attempt 2 with no lease expiry",
        ),
    ],
    ids=["no-owner", "no-expiry"],
)
def test_lapsed_says_whose_lease_was_lost(overrides, error):
    settled = lapsed(unleased(**overrides), START)
    assert settled.error == settled.last_error == error
    assert settled.owner == ("" if overrides.get("lease_owner", "x") is None else "host:1")


def test_lapsed_error_fits_an_attempt_whatever_the_owner_name():
    settled = lapsed(unleased(lease_owner="w" * 5000), START)
    assert len(settled.error) == ERROR_LIMIT


def test_exhausted_dead_letters_and_clears_any_lease():
    assert exhausted(START) == {
        "status": JobStatus.DEAD_LETTERED,
        "finished_at": START,
        "last_error": EXHAUSTED_ERROR,
        "lease_owner": None,
        "lease_expires_at": None,
    }
