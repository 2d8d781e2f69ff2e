import threading
import time

import pytest
from django.test import override_settings

from django_jobs import JobCancelled, JobContext
from django_jobs.checks import check_settings
from django_jobs.conf import settings
from django_jobs.db import get_driver
from django_jobs.db.postgresql import PostgresDriver
from django_jobs.db.sqlite import SQLiteDriver


def make_context():
    return JobContext(job_id=1, name="n", queue="default", attempt=1, payload=None)


def test_context_wait_returns_early_once_cancelled():
    ctx = make_context()
    threading.Timer(0.05, ctx.cancel).start()
    started = time.monotonic()
    assert ctx.wait(5) is True
    assert time.monotonic() - started < 2
    assert ctx.cancelled


def test_context_wait_times_out_when_not_cancelled():
    ctx = make_context()
    assert ctx.wait(0.01) is False
    ctx.raise_if_cancelled()  # no error
    ctx.cancel()
    with pytest.raises(JobCancelled):
        ctx.raise_if_cancelled()


@pytest.mark.parametrize("count", [2**63, -1, 1.5, True, "3"])
def test_context_progress_refuses_a_count_the_columns_cannot_hold(count):
    ctx = make_context()
    with pytest.raises(ValueError, match="from 0 to 2\\*\\*63 - 1"):
        ctx.progress(count)
    with pytest.raises(ValueError, match="total must be"):
        ctx.progress(1, count)
    assert ctx.reported_progress() == (0, None)  # nothing kept to be written


def test_context_progress_keeps_the_largest_count_and_a_storable_note():
    ctx = make_context()
    ctx.progress(2**63 - 1, 2**63 - 1, note="bad \x00 byte, lone \udc80 half" + "x" * 300)
    _, report = ctx.reported_progress()
    assert (report.done, report.total) == (2**63 - 1, 2**63 - 1)
    assert report.note.startswith("bad \\x00 byte, lone \ufffd half")
    assert len(report.note) == 200


def test_conf_defaults_and_overrides():
    assert settings.LEASE_SECONDS == 300
    with override_settings(DJANGO_JOBS={"LEASE_SECONDS": 2.5}):
        assert settings.LEASE_SECONDS == 2.5
        assert settings.MAX_ATTEMPTS == 5
    with pytest.raises(AttributeError):
        _ = settings.NOT_A_KEY


@override_settings(DJANGO_JOBS={"LEASE_SECOND": 10, "MAX_ATTEMPT": 3})
def test_check_unknown_key_suggests_the_closest():
    errors = check_settings()
    assert [e.id for e in errors] == ["django_jobs.E002", "django_jobs.E002"]
    assert "Unknown DJANGO_JOBS key 'LEASE_SECOND'" in errors[0].msg
    assert errors[0].hint == "Did you mean 'LEASE_SECONDS'?"
    assert errors[1].hint == "Did you mean 'MAX_ATTEMPTS'?"


@override_settings(
    DJANGO_JOBS={
        "LEASE_SECONDS": 0,
        "RETRY_JITTER": -1,
        "POLL_SECONDS": "1",
        "MAX_ATTEMPTS": 0,
        "QUEUES": {"a": {"workers": 0}},
    }
)
def test_check_bad_values_are_errors():
    messages = [e.msg for e in check_settings()]
    assert any("LEASE_SECONDS" in m for m in messages)
    assert any("RETRY_JITTER" in m for m in messages)
    assert any("POLL_SECONDS" in m for m in messages)
    assert any("MAX_ATTEMPTS" in m for m in messages)
    assert any("QUEUES" in m for m in messages)


def test_check_good_settings_pass():
    assert check_settings() == []


def test_get_driver_follows_the_database_vendor():
    from django.db import connection

    driver = get_driver()
    expected = {"postgresql": PostgresDriver, "sqlite": SQLiteDriver}[connection.vendor]
    assert type(driver) is expected


@override_settings(DJANGO_JOBS={"LEASE_SECONDS": 30, "HEARTBEAT_SECONDS": 5})
def test_heartbeat_is_stale_after_two_missed_beats() -> None:
    from datetime import UTC, datetime, timedelta

    from django_jobs.stats import heartbeat_is_stale

    now = datetime(2026, 1, 5, 12, tzinfo=UTC)
    assert not heartbeat_is_stale(now - timedelta(seconds=10), now)
    assert heartbeat_is_stale(now - timedelta(seconds=10.5), now)
