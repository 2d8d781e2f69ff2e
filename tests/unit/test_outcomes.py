"""The one way out, as a table: what an attempt's end makes of its job, without a database.

Each row is a handler's outcome, whether the job has attempts left, whether ``cancel_job()``
asked while it ran, and how many times it has snoozed; and what the Settlement says: the
job's status, when it runs again, whether the attempt is given back, when it finished and
what becomes of its last error.

The cancel request here is the one the worker saw (the heartbeat's renewal brought it back):
``judge()`` turns the handler's result into ``cancelled`` before ``decide()``. A request that
comes after the last renewal is applied by the settle statement itself, in SQL
(``Driver.settle``), and is tested on every database in tests/integration/test_cancel.py.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_jobs.context import JobContext
from django_jobs.db.records import ClaimedJob, Settlement
from django_jobs.models import AttemptOutcome, JobStatus
from django_jobs.outcomes import HandlerResult, cancelled, decide, snoozed
from django_jobs.retry_policy import RetryPolicy
from django_jobs.worker.execution import judge
from django_jobs.worker.heartbeat import LeaseKeeper
from django_jobs.worker.inflight import Held
from tests.conftest import START

POLICY = RetryPolicy(base_seconds=30, max_seconds=3600, jitter=0)  # no jitter: one date
BACKOFF = timedelta(seconds=30)  # after the first attempt, base * 2 ** 0
DELAY = 45.0  # a snooze's delay
MAX_SNOOZES = 3
ERROR = "ValueError: boom"
RESULT = '{"ok": true}'

SUCCEEDED, FAILED, TIMED_OUT = (
    AttemptOutcome.SUCCEEDED,
    AttemptOutcome.FAILED,
    AttemptOutcome.TIMED_OUT,
)
CANCELLED, RELEASED, SNOOZED = (
    AttemptOutcome.CANCELLED,
    AttemptOutcome.RELEASED,
    AttemptOutcome.SNOOZED,
)
PENDING, DEAD = JobStatus.PENDING, JobStatus.DEAD_LETTERED
DONE, ENDED = JobStatus.SUCCEEDED, JobStatus.CANCELLED

LEFT, NONE_LEFT = "attempts left", "none left"
ASKED, NOT_ASKED = "cancel asked", "no cancel"
UNDER, AT = MAX_SNOOZES - 1, MAX_SNOOZES

# run_at: "-" keeps the column, "now", "backoff" (now + the policy's backoff), "delay" (the
# snooze's). finished_at: "-" keeps it, "now". last_error: "kept" (None: the column keeps
# the previous attempt's), "cleared", "error" (the handler's), "cancel" (the cancelled
# attempt's), "snoozes" (past MAX_SNOOZES).
CANCEL_ENDS = (ENDED, "-", False, "now", "cancel")


def rows(
    outcome: AttemptOutcome,
    expected: dict[tuple[str, str, int], tuple[JobStatus, str, bool, str, str]],
) -> list[object]:
    return [
        pytest.param(outcome, left, asked, snoozes, *want, id=f"{outcome}-{left}-{asked}-{snoozes}")
        for (left, asked, snoozes), want in expected.items()
    ]


def every(
    want: tuple[JobStatus, str, bool, str, str], *, asked: tuple[str, ...] = (ASKED, NOT_ASKED)
):
    return {
        (left, a, snoozes): want
        for left in (LEFT, NONE_LEFT)
        for a in asked
        for snoozes in (UNDER, AT)
    }


RETRIED = (PENDING, "backoff", False, "-", "error")
FAILED_FOR_GOOD = (DEAD, "-", False, "now", "error")
FAILURE = {
    **every(CANCEL_ENDS, asked=(ASKED,)),
    (LEFT, NOT_ASKED, UNDER): RETRIED,
    (LEFT, NOT_ASKED, AT): RETRIED,
    (NONE_LEFT, NOT_ASKED, UNDER): FAILED_FOR_GOOD,
    (NONE_LEFT, NOT_ASKED, AT): FAILED_FOR_GOOD,
}
TABLE = [
    # A success stands, even when a cancel was asked: the work is done.
    *rows(SUCCEEDED, every((DONE, "-", False, "now", "cleared"))),
    # A failure or a time-out is retried after the backoff, or dead-lettered with none left.
    *rows(FAILED, FAILURE),
    *rows(TIMED_OUT, FAILURE),
    *rows(
        CANCELLED,
        {
            **every(CANCEL_ENDS, asked=(ASKED,)),
            **every((ENDED, "-", False, "now", "error"), asked=(NOT_ASKED,)),
        },
    ),
    # Handed back at a stop: due now, the attempt not charged, the last error kept.
    *rows(
        RELEASED,
        {
            **every(CANCEL_ENDS, asked=(ASKED,)),
            **every((PENDING, "now", True, "-", "kept"), asked=(NOT_ASKED,)),
        },
    ),
    # Snoozed: due after its delay, the attempt not charged, until MAX_SNOOZES.
    *rows(
        SNOOZED,
        {
            **every(CANCEL_ENDS, asked=(ASKED,)),
            (LEFT, NOT_ASKED, UNDER): (PENDING, "delay", True, "-", "kept"),
            (NONE_LEFT, NOT_ASKED, UNDER): (PENDING, "delay", True, "-", "kept"),
            (LEFT, NOT_ASKED, AT): (DEAD, "-", False, "now", "snoozes"),
            (NONE_LEFT, NOT_ASKED, AT): (DEAD, "-", False, "now", "snoozes"),
        },
    ),
]


def claimed_job(left: str) -> ClaimedJob:
    used = 1 if left == LEFT else 3
    return ClaimedJob(7, "tests.ok", "default", "{}", used, used, 3, "host:1", START)


def handler_result(outcome: AttemptOutcome, snoozes: int) -> HandlerResult:
    if outcome == SNOOZED:
        return snoozed(DELAY, snoozes)
    if outcome == SUCCEEDED:
        return HandlerResult(outcome, result=RESULT, snoozes=snoozes)
    return HandlerResult(outcome, ERROR, "Traceback ...", snoozes=snoozes)


def held(claimed: ClaimedJob, asked: str) -> Held:
    ctx = JobContext(claimed.id, claimed.name, claimed.queue, claimed.attempt, {})
    keeper = LeaseKeeper.start(START, claimed.lease_expires_at, 30, 10)
    return Held(claimed, ctx, keeper, None, cancel_requested=asked == ASKED)


def settle(outcome: AttemptOutcome, left: str, asked: str, snoozes: int) -> Settlement:
    claimed = claimed_job(left)
    result = judge(held(claimed, asked), handler_result(outcome, snoozes))
    return decide(claimed, result, START, POLICY, max_snoozes=MAX_SNOOZES)


@pytest.mark.parametrize(
    ("outcome", "left", "asked", "snoozes", "status", "run_at", "give_back", "finished", "last"),
    TABLE,
)
def test_outcomes_decide_by_the_table(
    outcome, left, asked, snoozes, status, run_at, give_back, finished, last
):
    settled = settle(outcome, left, asked, snoozes)
    claimed = claimed_job(left)
    runs_at = {"-": None, "now": START, "backoff": START + BACKOFF}
    runs_at["delay"] = START + timedelta(seconds=DELAY)
    last_errors = {
        "kept": None,
        "cleared": "",
        "error": ERROR,
        "cancel": cancelled(claimed).error,
        "snoozes": (
            f"Snoozed {AT + 1} times, past DJANGO_JOBS['MAX_SNOOZES'] ({MAX_SNOOZES}): "
            "dead-lettered rather than snoozed again"
        ),
    }
    assert settled.status == status
    assert settled.run_at == runs_at[run_at]
    assert settled.give_back is give_back
    assert settled.finished_at == {"-": None, "now": START}[finished]
    assert settled.last_error == last_errors[last]
    # Every end is fenced on the attempt it ends and dated now.
    assert (settled.job_id, settled.owner, settled.attempt) == (7, "host:1", claimed.attempt)
    assert settled.ended_at == START
    assert settled.result == (RESULT if status == DONE else None)


def test_outcomes_table_covers_every_combination():
    combinations = {(p.values[0], p.values[1], p.values[2], p.values[3]) for p in TABLE}
    outcomes = (SUCCEEDED, FAILED, TIMED_OUT, CANCELLED, RELEASED, SNOOZED)
    assert len(TABLE) == len(combinations) == len(outcomes) * 2 * 2 * 2


def test_outcomes_cancel_asked_records_cancelled_on_the_attempt():
    settled = settle(FAILED, LEFT, ASKED, UNDER)
    assert settled.outcome == CANCELLED
    assert settled.error == settled.last_error


def test_outcomes_past_max_snoozes_record_why_on_the_attempt():
    settled = settle(SNOOZED, LEFT, NOT_ASKED, AT)
    assert settled.outcome == SNOOZED
    assert settled.error == settled.last_error
    assert "MAX_SNOOZES" in settled.error
