"""Prepared statements the server does not have as psycopg thinks it has them.

Behind a transaction-mode pooler (PgBouncer before 1.21), a client's statements
land on server connections that other clients prepared statements on, under the
same names (psycopg names them ``_pg3_0``, ``_pg3_1``... on each connection), or
that lack the ones it prepared: ``already exists`` (42P05), ``does not exist``
(26000). Here a session is made to look like such a server connection: the next
names are taken on it, or its statements deallocated behind psycopg's back. The
driver then stops preparing, says so once, and no statement fails.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from django_jobs import schedule_job, schedule_jobs
from django_jobs.db import ClaimRequest, get_driver
from django_jobs.db.records import QueueLimits, Settlement
from django_jobs.models import Attempt, AttemptOutcome, Job, JobStatus
from tests.conftest import START

pytestmark = [pytest.mark.prepared_statements, pytest.mark.django_db(transaction=True)]

LEASE = 60
LIMITED = QueueLimits(global_limit=5)


@pytest.fixture
def driver(settings: Any) -> Any:
    """A new driver that prepares, on a new session (whose names start at ``_pg3_0``)."""
    settings.DJANGO_JOBS = {**settings.DJANGO_JOBS, "PREPARED_STATEMENTS": True}
    connection.close()
    made = get_driver()
    assert made.prepared.prepare
    return made


@pytest.fixture(autouse=True)
def _warnings_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="django_jobs.db")


def turned_off(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The ``prepared_statements_off`` lines logged."""
    return [r for r in caplog.records if getattr(r, "event", "") == "prepared_statements_off"]


def take_next_names(count: int = 20) -> None:
    """Prepare, in this session, statements under the names psycopg gives its next ones:
    as another client of a pooler's server connection has."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM pg_prepared_statements")
        taken = {name for (name,) in cursor.fetchall()}
        for n in range(count):
            if f"_pg3_{n}" not in taken:
                cursor.execute(f"PREPARE _pg3_{n} AS SELECT {n}")


def replace_prepared_statements(other: bool) -> None:
    """Deallocate this session's prepared statements one by one, which psycopg does not
    see: as the next server connection a pooler hands out lacks them; ``other``: then
    prepare another statement, of one parameter, under each name, as another client of
    that server connection has."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM pg_prepared_statements")
        for (name,) in cursor.fetchall():
            cursor.execute(f"DEALLOCATE {connection.ops.quote_name(name)}")
            if other:
                cursor.execute(f"PREPARE {connection.ops.quote_name(name)} (int) AS SELECT $1")


def request(limits: QueueLimits | None = None) -> ClaimRequest:
    return ClaimRequest("default", "w1", START, LEASE, 10, limits)


def success(job_id: int) -> Settlement:
    attempt = Job.objects.get(pk=job_id).attempt
    return Settlement(job_id, "w1", attempt, AttemptOutcome.SUCCEEDED, JobStatus.SUCCEEDED, START)


def assert_turned_off_once(driver: Any, caplog: pytest.LogCaptureFixture) -> None:
    [warning] = turned_off(caplog)
    assert warning.levelno == logging.WARNING
    assert 'DJANGO_JOBS["PREPARED_STATEMENTS"]' in warning.getMessage()
    assert driver.prepared.prepare is False


def statuses(*job_ids: int) -> list[str]:
    return [Job.objects.get(pk=job_id).status for job_id in job_ids]


def test_prepared_insert_that_clashes_in_autocommit_is_sent_again_unprepared(driver, caplog):
    take_next_names()
    first = schedule_job("tests.ok")
    second = schedule_job("tests.ok")
    assert statuses(first.pk, second.pk) == [JobStatus.PENDING] * 2
    assert_turned_off_once(driver, caplog)


def prepared_here() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements")
        (count,) = cursor.fetchone()
    return int(count)


def test_nothing_is_prepared_behind_a_pooler_in_or_out_of_the_callers_transaction(driver, caplog):
    """Behind a pooler a prepared statement's name can meet another client's statement of
    as many parameters, which the server would run without an error: none is prepared."""
    driver.prepared.behind_pooler = True  # as found through PgBouncer
    take_next_names()
    taken = prepared_here()
    with transaction.atomic():
        one = schedule_job("tests.ok")
        many = schedule_jobs([{"job": "tests.ok"}, {"job": "tests.ok"}])
        assert Job.objects.count() == 3  # the caller's transaction goes on
    alone = schedule_job("tests.ok")
    now = timezone.now()
    assert len(driver.claim(ClaimRequest("default", "w1", now, LEASE, 10, None))) == 4
    assert statuses(one.pk, alone.pk, *(job.pk for job in many)) == [JobStatus.RUNNING] * 4
    assert prepared_here() == taken
    assert turned_off(caplog) == []  # nothing prepared, nothing clashed


def test_prepared_inserts_in_the_callers_transaction_straight_to_the_server_are_prepared(
    driver, caplog
):
    with transaction.atomic():
        schedule_job("tests.ok")
    assert driver.prepared.behind_pooler is False
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
            ['%INSERT INTO "django_jobs_job"%'],
        )
        assert cursor.fetchone() == (1,)
    assert turned_off(caplog) == []


def test_prepared_claim_that_clashes_in_autocommit_is_sent_again_unprepared(
    driver, caplog, make_job
):
    job = make_job()
    take_next_names()
    assert [claimed.id for claimed in driver.claim(request())] == [job.pk]
    assert_turned_off_once(driver, caplog)


@pytest.mark.parametrize("how", ["settle", "claim_and_settle"])
def test_prepared_settle_that_clashes_in_autocommit_is_sent_again_unprepared(
    driver, caplog, make_job, how
):
    job, later = make_job(), make_job(run_at=START.replace(year=2030))
    [claimed] = driver.claim(request())  # prepared as _pg3_0
    take_next_names()
    if how == "settle":
        assert driver.settle([success(claimed.id)]).lost == []
    else:
        taken, settled = driver.claim_and_settle(request(), [success(claimed.id)])
        assert taken == [] and settled.lost == []
    assert statuses(job.pk, later.pk) == [JobStatus.SUCCEEDED, JobStatus.PENDING]
    assert_turned_off_once(driver, caplog)


@pytest.mark.parametrize("other", [False, True], ids=["lacks it", "has another"])
def test_prepared_statement_the_server_lacks_is_sent_again_unprepared(
    driver, caplog, make_job, other
):
    first, second = make_job(), make_job()
    assert len(driver.claim(ClaimRequest("default", "w1", START, LEASE, 1))) == 1
    replace_prepared_statements(other)
    assert [claimed.id for claimed in driver.claim(request())] == [second.pk]
    assert statuses(first.pk, second.pk) == [JobStatus.RUNNING] * 2
    assert_turned_off_once(driver, caplog)


@pytest.mark.parametrize("outcomes", [False, True], ids=["claim", "with outcomes"])
def test_prepared_limited_claim_that_clashes_runs_its_transaction_again(
    driver, caplog, make_job, outcomes
):
    done, waiting = make_job(), make_job()
    settlements = []
    if outcomes:
        [claimed] = driver.claim(ClaimRequest("default", "w1", START, LEASE, 1, LIMITED))
        settlements = [success(claimed.id)]
    take_next_names()
    claimed, settled = driver.claim_and_settle(request(LIMITED), settlements)
    expected = [waiting.pk] if outcomes else [done.pk, waiting.pk]
    assert [job.id for job in claimed] == expected and settled.lost == []
    if outcomes:
        assert statuses(done.pk) == [JobStatus.SUCCEEDED]
        outcome = Attempt.objects.get(job_id=done.pk).outcome
        assert outcome == AttemptOutcome.SUCCEEDED  # written once, by the second run
    assert_turned_off_once(driver, caplog)


def test_prepared_settle_in_the_callers_transaction_runs_its_savepoint_again(
    driver, caplog, make_job
):
    job = make_job()
    [claimed] = driver.claim(request())
    take_next_names()
    with transaction.atomic():
        assert driver.settle([success(claimed.id)]).lost == []
        assert statuses(job.pk) == [JobStatus.SUCCEEDED]  # the caller's transaction goes on
    assert statuses(job.pk) == [JobStatus.SUCCEEDED]
    assert_turned_off_once(driver, caplog)
