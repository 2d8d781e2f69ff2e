import random
from datetime import timedelta

import pytest

from django_jobs.retry_policy import RetryPolicy, backoff_seconds, next_run_at
from tests.conftest import START

POLICY = RetryPolicy(base_seconds=30, max_seconds=3600, jitter=0.2)


@pytest.mark.parametrize(
    ("attempt", "expected"), [(1, 30), (2, 60), (3, 120), (7, 1920), (8, 3600)]
)
def test_backoff_doubles_until_the_ceiling(attempt, expected):
    assert backoff_seconds(attempt, POLICY) == expected


@pytest.mark.parametrize("attempt", [36, 1000, 1001, 10**9, 10**30])
def test_backoff_huge_attempts_give_the_ceiling_without_overflow(attempt):
    assert backoff_seconds(attempt, POLICY) == 3600


@pytest.mark.parametrize("attempt", [1, 5, 10**9])
def test_backoff_zero_base_stays_zero(attempt):
    assert backoff_seconds(attempt, RetryPolicy(0, 3600, 0.2)) == 0
    assert next_run_at(attempt, 10**10, START, RetryPolicy(0, 3600, 0.2)) == START


def test_next_run_at_jitter_stays_within_its_fraction():
    rng = random.Random(1)
    delays = [(next_run_at(2, 5, START, POLICY, rng) - START).total_seconds() for _ in range(2000)]
    assert min(delays) >= 60
    assert max(delays) <= 60 * 1.2
    assert max(delays) - min(delays) > 60 * 0.15  # the jitter is really spread


def test_next_run_at_jitter_on_the_ceiling():
    rng = random.Random(2)
    for _ in range(200):
        delay = next_run_at(10**9, 10**10, START, POLICY, rng) - START
        assert timedelta(seconds=3600) <= delay <= timedelta(seconds=4320)


def test_next_run_at_none_when_no_attempt_is_left():
    assert next_run_at(5, 5, START, POLICY) is None
    assert next_run_at(4, 5, START, POLICY) is not None


def test_next_run_at_never_goes_past_a_century_whatever_the_policy():
    huge = RetryPolicy(base_seconds=1e12, max_seconds=1e12, jitter=10)
    run_at = next_run_at(1, 5, START, huge, random.Random(1))
    assert run_at == START + timedelta(seconds=100 * 365 * 86400)


def test_decide_makes_a_date_of_any_delay_a_result_brings():
    from django_jobs.db.records import ClaimedJob
    from django_jobs.models import AttemptOutcome
    from django_jobs.outcomes import HandlerResult, decide

    claimed = ClaimedJob(1, "n", "q", "{}", 1, 1, 5, "w", START)
    snoozed = HandlerResult(AttemptOutcome.SNOOZED, delay=1e13)
    settled = decide(claimed, snoozed, START, RetryPolicy())
    assert settled.run_at == START + timedelta(seconds=100 * 365 * 86400)
