"""Arguments no database can store are refused, with no database: the same everywhere.

A test here that reached the database would fail (no ``django_db`` mark), so each
refusal is also proven to come before any write.
"""

from datetime import datetime, timedelta, timezone

import pytest
from django.db.backends.base.operations import BaseDatabaseOperations
from django.test import override_settings

from django_jobs import JobSpec, ScheduleError, add_recurring_job, job, schedule_job, schedule_jobs
from django_jobs.checks import check_settings
from django_jobs.conf import (
    CRON_MAX_LENGTH,
    INT_MAX,
    JOB_NAME_MAX_LENGTH,
    QUEUE_NAME_MAX_LENGTH,
    SCHEDULE_NAME_MAX_LENGTH,
    UNIQUE_KEY_MAX_LENGTH,
    max_attempts_problem,
    text_problem,
)
from django_jobs.models import Job, RecurringJob
from django_jobs.registry import get_definition, unregister
from django_jobs.scheduling import build_job

UNSTORABLE = ["a\x00b", "\x00", "a\ud800", "\udfff"]
UNSTORABLE_ERROR = "without NUL characters or lone surrogates, got "
MAX_ATTEMPTS_RULE = "max_attempts must be a positive integer of at most 2147483647"
MAX_ATTEMPTS_ERROR = rf"^{MAX_ATTEMPTS_RULE}, got "
EAST, WEST = timezone(timedelta(hours=5)), timezone(timedelta(hours=-5))


def test_limits_are_the_model_fields():
    def length(model, field):
        return model._meta.get_field(field).max_length

    assert QUEUE_NAME_MAX_LENGTH == length(Job, "queue") == length(RecurringJob, "queue")
    assert JOB_NAME_MAX_LENGTH == length(Job, "name") == length(RecurringJob, "job_name")
    assert SCHEDULE_NAME_MAX_LENGTH == length(RecurringJob, "name") == length(Job, "schedule")
    assert UNIQUE_KEY_MAX_LENGTH == length(Job, "unique_key")
    assert CRON_MAX_LENGTH == length(RecurringJob, "cron")
    # max_attempts is a PositiveIntegerField: PostgreSQL's `integer`.
    assert BaseDatabaseOperations.integer_field_ranges["PositiveIntegerField"] == (0, INT_MAX)


@pytest.mark.parametrize("text", [*UNSTORABLE, "", "  ", "x" * 11, 5, None], ids=repr)
def test_text_problem_refuses_what_a_column_cannot_store(text):
    assert text_problem(text, 10) == (
        "must be a non-empty string of at most 10 characters without NUL characters or lone "
        "surrogates"
    )


def test_text_problem_accepts_its_edges():
    assert text_problem("x" * 10, 10) is None
    assert text_problem("\ufffd\U0001f600", 10) is None  # a surrogate pair's character is fine
    assert text_problem("  ", 10, blank=True) is None
    assert text_problem("", 10, blank=True) is not None


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (0, "must be a positive integer"),
        (True, "must be a positive integer"),
        ("3", "must be a positive integer"),
        (INT_MAX + 1, f"must be a positive integer of at most {INT_MAX}"),
        (2**63, f"must be a positive integer of at most {INT_MAX}"),
        (1, None),
        (INT_MAX, None),
    ],
    ids=repr,
)
def test_max_attempts_problem_names_the_range(value, problem):
    assert max_attempts_problem(value) == problem


# -- @job ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", [*UNSTORABLE, "j" * (JOB_NAME_MAX_LENGTH + 1)], ids=repr)
def test_job_decorator_refuses_a_name_no_column_can_store(name):
    with pytest.raises(ValueError, match=rf"^a job name .* at most 200 .*{UNSTORABLE_ERROR}"):
        job(name)


@pytest.mark.parametrize("queue", UNSTORABLE, ids=repr)
def test_job_decorator_refuses_an_unstorable_queue(queue):
    with pytest.raises(ValueError, match=rf"^queue .* at most 100 .*{UNSTORABLE_ERROR}"):
        job("unit.bad-queue", queue=queue)


def test_job_decorator_refuses_max_attempts_past_the_column():
    with pytest.raises(ValueError, match=MAX_ATTEMPTS_ERROR + "2147483648$"):
        job("unit.huge", max_attempts=INT_MAX + 1)
    with pytest.raises(ValueError, match="^max_attempts must be a positive integer, got True"):
        job("unit.bool", max_attempts=True)


def test_job_decorator_accepts_the_edges():
    name = "j" * JOB_NAME_MAX_LENGTH
    try:

        @job(name, queue="q" * QUEUE_NAME_MAX_LENGTH, max_attempts=INT_MAX)
        def handler(ctx, payload):
            return None

        assert get_definition(name).max_attempts == INT_MAX
    finally:
        unregister(name)


# -- schedule_job and schedule_jobs ---------------------------------------------------

BAD_SPECS = [
    ({"max_attempts": INT_MAX + 1}, MAX_ATTEMPTS_ERROR),
    ({"max_attempts": 2**64}, MAX_ATTEMPTS_ERROR),
    ({"queue": "q\x00"}, rf"^queue .* at most 100 .*{UNSTORABLE_ERROR}'q\\x00'$"),
    ({"queue": "\ud800"}, rf"^queue .*{UNSTORABLE_ERROR}"),
    ({"unique_key": "k\x00"}, rf"^unique_key .* at most 255 .*{UNSTORABLE_ERROR}'k\\x00'$"),
    ({"unique_key": "\udfff"}, rf"^unique_key .*{UNSTORABLE_ERROR}"),
    ({"unique_key": "k" * 256}, rf"^unique_key .* at most 255 .*{UNSTORABLE_ERROR}'kkk+\.\.\.k+'$"),
    ({"schedule": "s" * 201}, rf"^schedule .* at most 200 .*{UNSTORABLE_ERROR}"),
    ({"schedule": "s\x00"}, rf"^schedule .*{UNSTORABLE_ERROR}"),
    ({"delay": timedelta.max}, r"^delay must keep run_at within the years 1 to 9999, got "),
    ({"delay": timedelta.min}, r"^delay must keep run_at within the years 1 to 9999, got "),
    ({"run_at": datetime.max.replace(tzinfo=WEST)}, r"^run_at must be from year 1 to 9999 in UTC"),
    ({"run_at": datetime.min.replace(tzinfo=EAST)}, r"^run_at must be from year 1 to 9999 in UTC"),
]  # fmt: skip


@pytest.mark.parametrize(("options", "message"), BAD_SPECS, ids=repr)
def test_build_job_refuses_what_no_database_can_store(options, message):
    with pytest.raises(ValueError, match=message):
        build_job(JobSpec("tests.ok", **options))


@pytest.mark.parametrize(("options", "message"), BAD_SPECS, ids=repr)
def test_schedule_jobs_refuses_what_no_database_can_store_before_any_write(options, message):
    with pytest.raises(ValueError, match=message):
        schedule_jobs([JobSpec("tests.ok"), {"job": "tests.ok", **options}])


@pytest.mark.parametrize(
    ("options", "message"), [spec for spec in BAD_SPECS if "schedule" not in spec[0]], ids=repr
)
def test_schedule_job_refuses_what_no_database_can_store_before_any_write(options, message):
    with pytest.raises(ValueError, match=message):
        schedule_job("tests.ok", **options)


def test_build_job_accepts_the_edges():
    built = build_job(
        JobSpec(
            "tests.ok",
            queue="q" * QUEUE_NAME_MAX_LENGTH,
            max_attempts=INT_MAX,
            unique_key="k" * UNIQUE_KEY_MAX_LENGTH,
            schedule="s" * SCHEDULE_NAME_MAX_LENGTH,
            run_at=datetime.max.replace(tzinfo=timezone.utc),
        )
    )
    assert (built.max_attempts, len(built.unique_key or "")) == (INT_MAX, 255)
    assert build_job(JobSpec("tests.ok", unique_key=" ")).unique_key == " "
    assert build_job(JobSpec("tests.ok", delay=timedelta(days=365 * 7000))).run_at.year > 9000


# -- add_recurring_job and DJANGO_JOBS["RECURRING"] -----------------------------------------


@pytest.mark.parametrize("name", [*UNSTORABLE, "n" * (SCHEDULE_NAME_MAX_LENGTH + 1)], ids=repr)
def test_add_recurring_job_refuses_a_name_no_column_can_store(name):
    with pytest.raises(ValueError, match=r"^a recurring job's name .* at most 200 .*"):
        add_recurring_job(name, "@daily", "tests.ok")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"queue": "q\x00"}, rf"^recurring job 'nightly': queue .*{UNSTORABLE_ERROR}"),
        ({"queue": "\ud800"}, rf"^recurring job 'nightly': queue .*{UNSTORABLE_ERROR}"),
        ({"max_attempts": INT_MAX + 1}, "^recurring job 'nightly': max_attempts .* at most"),
    ],
    ids=repr,
)
def test_add_recurring_job_refuses_options_no_column_can_store(options, message):
    with pytest.raises(ScheduleError, match=message):
        add_recurring_job("nightly", "@daily", "tests.ok", **options)


QUEUE_RULE = "queue must be a non-empty string of at most 100 characters " + UNSTORABLE_ERROR


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"queue": "q\x00"}, QUEUE_RULE + "'q\\x00'"),
        ({"queue": "\udfff"}, QUEUE_RULE + "'\\udfff'"),
        ({"max_attempts": INT_MAX + 1}, f"{MAX_ATTEMPTS_RULE}, got 2147483648"),
    ],
    ids=repr,
)
def test_check_recurring_entry_refuses_options_no_column_can_store(options, message):
    entry = {"cron": "@daily", "job": "tests.ok", **options}
    with override_settings(DJANGO_JOBS={"RECURRING": {"nightly": entry}}):
        [error] = check_settings()
    assert error.id == "django_jobs.E006"
    assert error.msg.startswith("DJANGO_JOBS['RECURRING']['nightly']: ")
    assert message in error.msg


@pytest.mark.parametrize("name", UNSTORABLE, ids=repr)
def test_check_recurring_schedule_name_refuses_nul_and_surrogates(name):
    entry = {"cron": "@daily", "job": "tests.ok"}
    with override_settings(DJANGO_JOBS={"RECURRING": {name: entry}}):
        [error] = check_settings()
    assert error.id == "django_jobs.E005"
    assert f"at most 200 characters without NUL characters or lone surrogates: {name!r}" in (
        error.msg
    )
