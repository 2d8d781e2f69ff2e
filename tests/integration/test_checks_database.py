"""The checks that read the live database: SQLite's journal mode and the schedule rows."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.checks import CheckMessage
from django.db import connection, connections
from django.db.backends.sqlite3.base import DatabaseWrapper as SQLiteWrapper
from freezegun import freeze_time

from django_jobs import add_recurring_job, job
from django_jobs.checks import check_live_database
from django_jobs.models import RecurringJob
from django_jobs.registry import unregister
from tests.conftest import START, manage

pytestmark = pytest.mark.django_db


def on_sqlite() -> bool:
    return isinstance(connections["default"], SQLiteWrapper)


def live_checks(*ids: str) -> list[CheckMessage]:
    """The live-database messages with these ids, as ``check --database default`` runs them."""
    return [m for m in check_live_database(databases=["default"]) if m.id in ids]


def schedule_warnings() -> list[CheckMessage]:
    return live_checks("django_jobs.W004")


# -- SQLite's journal mode --------------------------------------------------------------------


@pytest.fixture
def journal_mode(request: pytest.FixtureRequest) -> Iterator[str]:
    """Set the test database's journal mode to the parameter; back to 'delete' after."""
    if not on_sqlite():
        pytest.skip("journal modes are SQLite's")
    with connection.cursor() as cursor:
        cursor.execute(f"PRAGMA journal_mode={request.param}")
    yield request.param
    connection.close()
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode=delete")


@pytest.mark.django_db(transaction=True)  # a journal mode cannot change inside a transaction
@pytest.mark.parametrize("journal_mode", ["delete", "truncate"], indirect=True)
def test_check_live_database_warns_of_sqlite_without_wal(journal_mode: str) -> None:
    [warning] = live_checks("django_jobs.W003")
    assert warning.msg.startswith(
        f"The SQLite database 'default' is in journal mode {journal_mode!r}, not 'wal': while "
        "any connection reads"
    )
    assert "lease renewals wait for it" in warning.msg
    assert "'init_command': 'PRAGMA journal_mode=WAL;'" in warning.hint
    assert "'transaction_mode': 'IMMEDIATE'" in warning.hint


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("journal_mode", ["wal"], indirect=True)
def test_check_live_database_is_quiet_for_sqlite_in_wal(journal_mode: str) -> None:
    assert live_checks("django_jobs.W003") == []


def test_check_live_database_runs_only_when_asked_for_the_jobs_database() -> None:
    # Django passes `databases` to the checks tagged "database" only with
    # `check --database` or `migrate`; plain `check` and `runserver` never read the database.
    assert check_live_database() == []
    assert check_live_database(databases=["other"]) == []
    assert check_live_database(databases=None) == []


def test_check_live_database_never_warns_of_the_journal_on_postgresql() -> None:
    if on_sqlite():
        pytest.skip("the journal is SQLite's")
    assert live_checks("django_jobs.W003") == []


# -- schedule rows in the database ------------------------------------------------------------


@pytest.fixture
def temporary_job() -> Iterator[str]:
    @job("tests.temporary")
    def temporary(ctx: object, payload: object) -> None:
        return None

    yield "tests.temporary"
    unregister("tests.temporary")


def test_check_live_database_warns_of_a_schedule_whose_job_is_gone(temporary_job: str) -> None:
    with freeze_time(START):
        add_recurring_job("orphan", "@daily", temporary_job)
    assert schedule_warnings() == []
    unregister(temporary_job)
    [warning] = schedule_warnings()
    assert warning.msg.startswith(
        "Recurring job 'orphan' (in the database) cannot fire: no job is registered under the "
        "name 'tests.temporary'"
    )
    assert "skips each of its occurrences" in warning.msg
    assert warning.hint.startswith("Register the job with @job")
    assert "remove_recurring_job('orphan')" in warning.hint


def test_check_live_database_warns_of_a_schedule_row_with_a_bad_cron_or_zone() -> None:
    with freeze_time(START):
        add_recurring_job("bad-cron", "@daily", "tests.ok")
        add_recurring_job("bad-zone", "@daily", "tests.ok")
        add_recurring_job("fine", "@daily", "tests.ok")
    RecurringJob.objects.filter(name="bad-cron").update(cron="0 2 * *")
    RecurringJob.objects.filter(name="bad-zone").update(timezone="Mars/Olympus")
    warnings = schedule_warnings()
    assert [w.msg.split(":")[0] for w in warnings] == [
        "Recurring job 'bad-cron' (in the database) cannot fire",
        "Recurring job 'bad-zone' (in the database) cannot fire",
    ]
    assert "'0 2 * *' is not a valid cron expression" in warnings[0].msg
    assert "unknown time zone 'Mars/Olympus'" in warnings[1].msg
    assert "A cron is five fields" in warnings[0].hint


def test_check_live_database_leaves_disabled_and_settings_schedules_alone(settings: Any) -> None:
    with freeze_time(START):
        add_recurring_job("switched-off", "@daily", "tests.ok", enabled=False)
        add_recurring_job("declared", "@daily", "tests.ok")
    RecurringJob.objects.update(job_name="tests.gone")
    # "declared" is DJANGO_JOBS['RECURRING']'s: E006 speaks for it, and runjobs resyncs it.
    settings.DJANGO_JOBS = {"RECURRING": {"declared": {"cron": "@daily", "job": "tests.ok"}}}
    assert schedule_warnings() == []


@pytest.mark.rolled_back_ddl
def test_check_live_database_skips_schedules_when_the_table_is_missing() -> None:
    # As before `migrate` has created it (migrate runs the database checks first). The
    # rename is undone with the test's transaction; the check must leave that usable.
    table = connection.ops.quote_name(RecurringJob._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {table} RENAME TO {connection.ops.quote_name('renamed')}")
    assert schedule_warnings() == []
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)


# -- `manage.py check --database` on a database that is not there yet -------------------------


@pytest.mark.django_db(transaction=True)
def test_check_database_before_migrate_skips_what_it_cannot_read(fresh_database_url: str) -> None:
    result = manage("check", "--database", "default", url=fresh_database_url)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 0, result.stderr
    # Nor of the journal: the migrate that creates the tables puts the file in WAL mode.
    assert "django_jobs.W003" not in result.stderr


def test_check_database_on_an_unreachable_server_does_not_crash() -> None:
    result = manage("check", "--database", "default", url="postgres://postgres@127.0.0.1:1/jobs")
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 0, result.stderr


@pytest.mark.django_db(transaction=True)
def test_check_live_database_skips_the_journal_of_a_sqlite_file_it_cannot_open(
    tmp_path: Path,
) -> None:
    if not on_sqlite():
        pytest.skip("the journal is SQLite's")
    wrapper = connections["default"]
    name = wrapper.settings_dict["NAME"]
    wrapper.close()
    wrapper.settings_dict["NAME"] = str(tmp_path / "no-such-folder" / "jobs.sqlite3")
    try:
        assert live_checks("django_jobs.W003") == []
    finally:
        wrapper.close()
        wrapper.settings_dict["NAME"] = name


# -- after migrate: what only the tables migrate made can tell --------------------------------


def test_migrate_says_what_the_checks_find_of_its_new_tables(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """``migrate`` runs the checks before it migrates; what the driver finds of the tables
    once they are there (MariaDB's engine: test_mysql.py makes one) is said on its output,
    whatever its verbosity, unless silenced."""
    from django.core.checks import Error
    from django.core.management import call_command

    from django_jobs.db import get_driver

    error = Error("the jobs table is wrong", hint="fix it", id="django_jobs.E042")
    monkeypatch.setattr(get_driver("default"), "table_messages", lambda: [error])
    out = io.StringIO()
    call_command("migrate", verbosity=0, stdout=out)
    assert out.getvalue() == "?: (django_jobs.E042) the jobs table is wrong\n\tHINT: fix it\n"
    settings.SILENCED_SYSTEM_CHECKS = ["django_jobs.E042"]
    out = io.StringIO()
    call_command("migrate", verbosity=0, stdout=out)
    assert out.getvalue() == ""
