"""What differs on MariaDB and MySQL, handled: isolation, the server's version and engine,
packet size, lock waits, collations, four-byte text. The rest of the suite runs unchanged."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import OperationalError, connection, connections, transaction
from django.test import override_settings

from django_jobs import schedule_job
from django_jobs.db import get_driver
from django_jobs.models import Job, JobStatus
from django_jobs.worker import deadlines
from tests.conftest import manage

pytestmark = [
    pytest.mark.skipif(connection.vendor != "mysql", reason="MariaDB's and MySQL's own"),
    pytest.mark.django_db,
]


def ids(messages: list[Any]) -> list[str]:
    return [message.id for message in messages]


@pytest.fixture
def options() -> Iterator[dict[str, Any]]:
    """The alias's OPTIONS, put back as they were."""
    options = connection.settings_dict.setdefault("OPTIONS", {})
    saved = dict(options)
    yield options
    options.clear()
    options.update(saved)


# -- system checks ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        (None, []),  # Django's default for this backend: read committed
        ("read committed", []),
        ("READ COMMITTED", []),
        ("repeatable read", ["django_jobs.W040"]),
        ("serializable", ["django_jobs.W040"]),
        ("read uncommitted", ["django_jobs.E040"]),
    ],
)
def test_isolation_level_that_costs_a_guarantee_is_said(options, level, expected):
    options.pop("isolation_level", None)
    if level is not None:
        options["isolation_level"] = level
    assert ids(get_driver().check_configuration()) == expected


def test_the_live_server_passes_the_database_checks():
    assert get_driver().check_database() == []


def test_server_without_skip_locked_is_an_error_with_the_fix():
    driver = get_driver()
    older = (10, 5, 9) if driver.is_mariadb else (8, 0, 0)
    [error] = driver.version_messages(older)
    assert error.id == "django_jobs.E041"
    assert ".".join(map(str, older)) in error.msg and "SKIP LOCKED" in error.msg
    assert driver.version_messages(tuple(connection.mysql_version)) == []


def test_jobs_table_outside_innodb_is_an_error_with_the_fix():
    driver = get_driver()
    assert driver.table_engine() == "InnoDB"  # what migrate made here
    [error] = driver.engine_messages("MyISAM")
    assert error.id == "django_jobs.E042" and "ENGINE=InnoDB" in error.hint


def test_payloads_larger_than_the_server_takes_are_warned_of():
    packet = int(get_driver().server_variable("max_allowed_packet") or 0)
    with override_settings(DJANGO_JOBS={"MAX_PAYLOAD_BYTES": packet}):
        [warning] = get_driver().packet_messages()
    assert warning.id == "django_jobs.W041" and "max_allowed_packet" in warning.msg
    with override_settings(DJANGO_JOBS={"MAX_PAYLOAD_BYTES": packet // 4}):
        assert get_driver().packet_messages() == []


# -- a worker's session gives up a lock wait within its deadline -------------------------


@pytest.mark.django_db(transaction=True)
def test_worker_session_gives_up_a_row_lock_within_the_calls_deadline():
    """InnoDB waits 50 s for a row lock unless told; a worker's calls have a deadline of a
    few seconds, past which the connection is cut off. A session that a deadline bounded
    waits within it, and the connection outlives the failed wait."""
    job = schedule_job("tests.ok")
    connections["default"].close()
    with deadlines.deadline(2.5), connection.cursor() as cursor:  # bounds the new session
        cursor.execute("SELECT @@SESSION.innodb_lock_wait_timeout")
        assert cursor.fetchone() == (2,)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                list(Job.objects.select_for_update().filter(pk=job.pk))
                held.set()
                release.wait(30)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        started = time.monotonic()
        with pytest.raises(OperationalError) as raised, deadlines.deadline(10):
            Job.objects.filter(pk=job.pk).update(priority=5)
        waited = time.monotonic() - started
    finally:
        release.set()
        holder.join(10)
    assert raised.value.args[0] == 1205  # lock wait timeout, not a cut-off connection
    assert 1.5 < waited < 5, waited
    assert connection.is_usable()
    connections["default"].close()  # the next test's connection: unbounded again


# -- text ------------------------------------------------------------------------------


def test_unique_keys_compare_exactly_as_on_postgresql():
    """Not by the server's case-insensitive default collation: two keys, two jobs."""
    upper = schedule_job("tests.ok", unique_key="Report-1")
    lower = schedule_job("tests.ok", unique_key="report-1")
    again = schedule_job("tests.ok", unique_key="report-1")
    assert upper.pk != lower.pk and again.pk == lower.pk
    assert Job.objects.filter(queue="Default").count() == 0  # queues too


def test_a_live_unique_key_is_unique_again_once_the_job_finished():
    first = schedule_job("tests.ok", unique_key="k")
    Job.objects.filter(pk=first.pk).update(status=JobStatus.SUCCEEDED)
    second = schedule_job("tests.ok", unique_key="k")
    assert second.pk != first.pk


def test_four_byte_text_is_stored_as_given():
    job = schedule_job("tests.ok", {"note": "deploy 🚀 done"})
    job.refresh_from_db()
    assert job.payload == {"note": "deploy 🚀 done"}


@pytest.mark.django_db(transaction=True)
def test_migrate_says_at_once_that_the_jobs_table_is_not_innodb(fresh_database_url):
    """``migrate`` runs the database checks before the tables exist: a jobs table made in
    another engine is said right after it, not first when ``runjobs`` starts. (The table is
    made MyISAM here by hand, after a first migrate: the schema's keys are too long for
    MyISAM to make it; the second migrate skips its checks, which find nothing on a
    database without the tables.)"""
    first = manage("migrate", url=fresh_database_url)
    assert first.returncode == 0, first.stderr
    assert "E042" not in first.stdout + first.stderr
    schema = fresh_database_url.rsplit("/", 1)[1]
    qn = connection.ops.quote_name
    with connection.cursor() as cursor:  # MyISAM has no foreign keys: drop the one to the jobs
        cursor.execute(
            "SELECT table_name, constraint_name FROM information_schema.referential_constraints"
            " WHERE constraint_schema = %s AND referenced_table_name = %s",
            [schema, Job._meta.db_table],
        )
        for table, constraint in cursor.fetchall():
            cursor.execute(
                f"ALTER TABLE {qn(schema)}.{qn(table)} DROP FOREIGN KEY {qn(constraint)}"
            )
        cursor.execute(f"ALTER TABLE {qn(schema)}.{qn(Job._meta.db_table)} ENGINE=MyISAM")
    again = manage("migrate", "--skip-checks", url=fresh_database_url)
    assert again.returncode == 0, again.stderr
    assert (
        again.stdout.count(
            "?: (django_jobs.E042) The jobs table of the database 'default' uses the storage "
            "engine MyISAM, not InnoDB"
        )
        == 1
    ), again.stdout
