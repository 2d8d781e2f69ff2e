"""The health of the jobs tables: a transaction left open elsewhere is found and named,
with how to end it, by ``jobs status``, check W020 and the leader's log."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import DatabaseError, connection

from django_jobs import health
from django_jobs.checks import check_live_database
from django_jobs.db import get_driver
from django_jobs.worker.leader.chores import Chores

pytestmark = pytest.mark.django_db(transaction=True)

servers = pytest.mark.skipif(
    connection.vendor == "sqlite", reason="SQLite has no sessions that hold a horizon"
)


@pytest.fixture
def forgotten() -> Iterator[int]:
    """Another session, its transaction left open after a read (a shell someone forgot),
    on a connection of its own outside Django's: its pid (PostgreSQL) or thread id
    (MariaDB)."""
    raw = connection.get_new_connection(connection.get_connection_params())
    cursor = raw.cursor()
    if connection.vendor == "postgresql":
        raw.autocommit = True
        cursor.execute("SET application_name = 'forgotten shell'")
        raw.autocommit = False
        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        pid = raw.info.backend_pid
    else:
        cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        pid = raw.thread_id()
    cursor.execute("SELECT COUNT(*) FROM django_jobs_job")
    cursor.fetchall()
    yield pid
    raw.rollback()
    raw.close()


@servers
def test_an_open_transaction_is_named_with_how_to_end_it(forgotten):
    time.sleep(0.2)
    seen = health.read()
    assert seen.holder is not None and seen.holder.pid == forgotten
    assert seen.holder.open_seconds >= 0.2
    [problem] = health.problems(seen, horizon_seconds=0.1)
    assert f"pid {forgotten}" in problem
    if connection.vendor == "postgresql":
        assert "forgotten shell, idle in transaction" in problem
        assert f"SELECT pg_terminate_backend({forgotten});" in problem
        assert "its last statement: SELECT COUNT(*) FROM django_jobs_job" in problem
        assert {t.table for t in seen.tables} == {"django_jobs_job", "django_jobs_attempt"}
    else:
        assert f"KILL {forgotten};" in problem
        assert seen.history_length is not None
    assert health.problems(seen) == []  # under the default 300 s


@servers
def test_jobs_status_and_the_check_warn_past_the_setting(forgotten, settings):
    settings.DJANGO_JOBS = {**settings.DJANGO_JOBS, "HEALTH_HORIZON_SECONDS": 0.1}
    time.sleep(0.2)
    out = StringIO()
    call_command("jobs", "status", stdout=out)
    text = out.getvalue()
    assert "Database: oldest open transaction" in text
    assert "WARNING: a transaction has been open for" in text and f"pid {forgotten}" in text
    out = StringIO()
    call_command("jobs", "status", "--json", stdout=out)
    document = json.loads(out.getvalue())["health"]
    assert document["holder"]["pid"] == forgotten and len(document["problems"]) == 1
    warnings = [m for m in check_live_database(databases=["default"]) if m.id.endswith("W020")]
    assert len(warnings) == 1 and f"pid {forgotten}" in warnings[0].msg


@servers
def test_no_warning_under_the_setting(forgotten):
    assert not [m for m in check_live_database(databases=["default"]) if m.id.endswith("W020")]


@servers
def test_a_database_that_refuses_the_read_says_so(monkeypatch):
    """A role without the privilege to read other sessions (MariaDB's PROCESS): unknown,
    said, and nothing else breaks."""

    def refused():
        raise DatabaseError("Access denied; you need the PROCESS privilege")

    monkeypatch.setattr(get_driver(), "read_health", refused)
    seen = health.read()
    assert seen.unknown.startswith("DatabaseError: Access denied") and not health.problems(seen)
    out = StringIO()
    call_command("jobs", "status", stdout=out)
    assert "Database: unknown (DatabaseError: Access denied" in out.getvalue()


@servers
def test_the_leader_logs_it(forgotten, worker, settings, caplog):
    settings.DJANGO_JOBS = {**settings.DJANGO_JOBS, "HEALTH_HORIZON_SECONDS": 0.1}
    time.sleep(0.2)
    with caplog.at_level(logging.WARNING, logger="django_jobs.health"):
        [problem] = worker().maintainer.check_health(None)
    [record] = [r for r in caplog.records if getattr(r, "event", "") == "jobs_table_health"]
    assert problem in record.getMessage()


def test_the_health_is_a_leader_chore_every_few_minutes(worker, monkeypatch):
    w = worker()
    ran: list[object] = []
    monkeypatch.setattr(w.maintainer, "check_health", ran.append)
    for chore in ("rescue", "prune", "enqueue_due", "refresh_registration"):
        monkeypatch.setattr(w.maintainer, chore, lambda now: None)
    monkeypatch.setattr(w.leadership, "acts", lambda now: True)  # this process leads
    monkeypatch.setattr(w.leadership, "due", lambda now: False)
    chores = Chores(w.maintainer, w.leadership, w.clock, registration_seconds=10)
    start = time.monotonic()
    for at in (start, start + health.LOG_SECONDS - 1, start + health.LOG_SECONDS):
        for step in chores.due(at):
            step()
    assert len(ran) == 2  # at the start, then once its interval has passed


@servers
@pytest.mark.django_db(transaction=True)
def test_the_dashboard_flags_it(forgotten, admin_client, settings):
    settings.DJANGO_JOBS = {**settings.DJANGO_JOBS, "HEALTH_HORIZON_SECONDS": 0.1}
    time.sleep(0.2)
    text = admin_client.get("/admin/django_jobs/dashboard/").content.decode()
    assert 'class="error jobs-flag-health"' in text and f"pid {forgotten}" in text
    assert "Database: oldest open transaction" in text
    settings.DJANGO_JOBS = {**settings.DJANGO_JOBS, "HEALTH_HORIZON_SECONDS": 300}
    text = admin_client.get("/admin/django_jobs/dashboard/").content.decode()
    assert "jobs-flag-health" not in text


def test_the_recent_claim_latency_is_read_from_the_last_attempts(make_job):
    """How long the last claims waited from their job's run_at, on every database; an
    attempt older than the window, and an earlier attempt of a job due again since, are
    left out."""
    from datetime import timedelta

    from django.utils import timezone

    from django_jobs.models import Attempt

    now = timezone.now()  # as jobs status reads it

    def claimed(waited_ms: int, ago: timedelta = timedelta(seconds=1), number: int = 1):
        started = now - ago
        job = make_job(run_at=started - timedelta(milliseconds=waited_ms))
        Attempt.objects.create(job=job, number=number, owner="w", started_at=started)
        return job

    assert health.read(now=now).pickup is None  # no claim yet
    for waited in (2, 3, 4, 5, 6, 7, 8, 9, 10, 400):
        claimed(waited)
    claimed(90_000, ago=timedelta(seconds=health.PICKUP_SECONDS + 1))  # too old
    retried = claimed(1)
    retried.run_at = now + timedelta(minutes=1)  # due again: its first attempt's wait is gone
    retried.save()
    pickup = health.read(now=now).pickup
    assert pickup is not None
    assert (pickup.samples, pickup.p50, pickup.p95, pickup.max) == (10, 0.006, 0.4, 0.4)
    assert "recent claims waited 6 ms (p50), 400 ms (p95) over the last 10" in health.summary(
        health.read(now=now), now
    )
    out = StringIO()
    call_command("jobs", "status", "--json", stdout=out)
    assert json.loads(out.getvalue())["health"]["pickup"]["samples"] == 10
