"""The pure parts of flow control: rates and their windows, snooze decisions, @job(concurrency)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from django_jobs import Snooze, job
from django_jobs.conf import parse_rate
from django_jobs.db.records import ClaimedJob, Rate
from django_jobs.models import AttemptOutcome, JobStatus
from django_jobs.outcomes import decide, snoozed
from django_jobs.retry_policy import RetryPolicy

NOW = datetime(2026, 1, 5, 12, 0, 42, 500000, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "rate"),
    [("100/m", (100, 60)), ("5/s", (5, 1)), ("3 / hour", (3, 3600)), ("1/Minute", (1, 60))],
)
def test_parse_rate_reads_a_count_per_window(text: str, rate: tuple[int, int]) -> None:
    assert parse_rate(text) == rate


@pytest.mark.parametrize("text", ["100", "100/d", "0/m", "-1/m", "x/m", "1.5/m", "1/m/s", 100])
def test_parse_rate_refuses_what_is_not_a_rate(text: object) -> None:
    with pytest.raises(ValueError, match="rate"):
        parse_rate(text)


@pytest.mark.parametrize("text", ["\u00b2/s", "\u0661\u0660/s", "\uff11\uff10/m"], ids=repr)
def test_parse_rate_takes_ascii_digits_only(text: str) -> None:
    """``str.isdigit`` takes a superscript two, which ``int()`` refuses, and Arabic-Indic
    or full-width digits, which ``int()`` reads as 10: a count is written 0 to 9."""
    with pytest.raises(ValueError, match="a rate's count is a whole number from 1 to"):
        parse_rate(text)


def test_windows_are_aligned_on_the_clock_the_same_for_every_worker() -> None:
    assert Rate(100, 60).window_start(NOW) == datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
    assert Rate(1, 3600).window_start(NOW) == datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
    assert Rate(1, 1).window_start(NOW) == datetime(2026, 1, 5, 12, 0, 42, tzinfo=UTC)


def claimed() -> ClaimedJob:
    return ClaimedJob(1, "tests.snoozes", "default", {}, 3, 2, 5, "w1", NOW)


def test_a_snooze_is_due_after_its_delay_and_gives_its_attempt_back() -> None:
    settled = decide(claimed(), snoozed(30, 4), NOW, RetryPolicy(), max_snoozes=5)
    assert (settled.status, settled.outcome, settled.give_back) == (
        JobStatus.PENDING,
        AttemptOutcome.SNOOZED,
        True,
    )
    assert settled.run_at == NOW + timedelta(seconds=30)


def test_a_snooze_past_the_cap_dead_letters_the_job_saying_why() -> None:
    settled = decide(claimed(), snoozed(30, 5), NOW, RetryPolicy(), max_snoozes=5)
    assert settled.status == JobStatus.DEAD_LETTERED
    assert settled.last_error == settled.error
    assert "Snoozed 6 times, past DJANGO_JOBS['MAX_SNOOZES'] (5)" in settled.error


@pytest.mark.parametrize("seconds", [-1, float("nan"), float("inf"), "30", True])
def test_snooze_refuses_what_is_not_a_delay(seconds: object) -> None:
    with pytest.raises(ValueError, match="Snooze takes seconds"):
        Snooze(seconds)  # type: ignore[arg-type]


def test_snooze_takes_a_timedelta() -> None:
    assert Snooze(timedelta(minutes=2)).seconds == 120


@pytest.mark.parametrize("concurrency", [0, -1, 1.5, "1", True])
def test_job_refuses_a_concurrency_that_is_not_a_count(concurrency: object) -> None:
    with pytest.raises(ValueError, match="concurrency"):
        job("tests.never_registered", concurrency=concurrency)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "meant"),
    [("100/min", "100/m"), ("5/sec", "5/s"), ("3/hours", "3/h"), ("10/Minutes", "10/m")],
)
def test_parse_rate_names_the_window_a_spelling_meant(text: str, meant: str) -> None:
    with pytest.raises(ValueError, match=f"got '{text}'; did you mean '{meant}'\\?$"):
        parse_rate(text)


@pytest.mark.parametrize("text", ["100/d", "100/x1", "100/"])
def test_parse_rate_guesses_no_window_it_cannot_tell(text: str) -> None:
    with pytest.raises(ValueError) as refused:
        parse_rate(text)
    assert "did you mean" not in str(refused.value)
