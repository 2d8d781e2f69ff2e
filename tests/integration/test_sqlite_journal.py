"""SQLite's journal and transaction settings: django-jobs puts the file in WAL mode itself
(at ``migrate``, at ``runjobs`` start-up), and says what ``OPTIONS`` it wants where the
database is set up and served, not on every command."""

from __future__ import annotations

import gc
import logging
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.checks import run_checks
from django.core.management import call_command
from django.db import connection

from django_jobs import schedule_job
from django_jobs.checks import check_live_database
from django_jobs.db import get_driver
from django_jobs.db.journal import use_wal_mode
from django_jobs.models import Job, JobStatus
from tests.conftest import manage

pytestmark = [pytest.mark.journal_modes, pytest.mark.django_db(transaction=True)]

WANTED = (
    "{'transaction_mode': 'IMMEDIATE', 'timeout': 20, 'init_command': 'PRAGMA journal_mode=WAL;'}"
)


def file_journal_mode(name: Any = None) -> str:
    """The journal mode of the file, as a connection of its own reads it."""
    with sqlite3.connect(name or connection.settings_dict["NAME"], timeout=5) as db:
        return str(db.execute("PRAGMA journal_mode").fetchone()[0])


def records(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == event]


@pytest.fixture
def in_delete_mode() -> Iterator[None]:
    """The test database's file in SQLite's default journal mode, as a file starts."""
    gc.collect()  # leaving WAL needs the file to itself: close the connections of gone threads
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode=delete")
    assert file_journal_mode() == "delete"
    yield
    connection.close()


@pytest.fixture
def sqlite_options() -> Iterator[Callable[..., None]]:
    """Set the database's ``OPTIONS`` for one test: the next connection takes them."""
    saved = connection.settings_dict.get("OPTIONS") or {}

    def use(**options: Any) -> None:
        connection.close()
        connection.settings_dict["OPTIONS"] = options

    yield use
    use(**saved)


# -- the switch -------------------------------------------------------------------------------


def test_migrate_puts_the_sqlite_file_in_wal_mode_with_one_log_line(
    in_delete_mode: None, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="django_jobs"):
        call_command("migrate", verbosity=0)
    assert file_journal_mode() == "wal"
    [record] = records(caplog, "sqlite_wal_enabled")
    assert record.getMessage() == (
        f"put the SQLite file {connection.settings_dict['NAME']} (database 'default') in WAL "
        "mode; it stays with the file"
    )
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="django_jobs"):
        call_command("migrate", verbosity=0)
    assert records(caplog, "sqlite_wal_enabled") == []  # in WAL mode already: nothing to say


def test_runjobs_start_up_puts_the_sqlite_file_in_wal_mode(
    in_delete_mode: None, caplog: pytest.LogCaptureFixture
) -> None:
    job = schedule_job("tests.ok")
    with caplog.at_level(logging.INFO, logger="django_jobs"):
        call_command("runjobs", "--burst", verbosity=1)
    assert file_journal_mode() == "wal"
    assert len(records(caplog, "sqlite_wal_enabled")) == 1
    # ... before the database checks, which then find nothing to warn of.
    assert not [r for r in records(caplog, "system_check") if "W003" in r.getMessage()]
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED


def test_a_journal_mode_the_project_sets_is_left_alone(
    in_delete_mode: None,
    sqlite_options: Callable[..., None],
    caplog: pytest.LogCaptureFixture,
) -> None:
    sqlite_options(
        transaction_mode="IMMEDIATE", timeout=30, init_command="PRAGMA journal_mode=DELETE"
    )
    with caplog.at_level(logging.INFO, logger="django_jobs"):
        call_command("migrate", verbosity=0)
        call_command("runjobs", "--burst", verbosity=1)
    assert file_journal_mode() == "delete"
    assert records(caplog, "sqlite_wal_enabled") == []
    # The worker still says what it costs, and what to write instead.
    [warning] = [r for r in records(caplog, "system_check") if "W003" in r.getMessage()]
    assert warning.levelno == logging.WARNING
    assert (
        "HINT: OPTIONS['init_command'] sets the journal mode, so django-jobs leaves it: for "
        "WAL, set DATABASES['default']['OPTIONS'] = {'transaction_mode': 'IMMEDIATE', "
        "'timeout': 30, 'init_command': 'PRAGMA journal_mode=WAL;'}."
    ) in warning.getMessage()


def test_an_in_memory_database_is_left_alone(caplog: pytest.LogCaptureFixture) -> None:
    connection.close()
    name = connection.settings_dict["NAME"]
    connection.settings_dict["NAME"] = ":memory:"
    try:
        with caplog.at_level(logging.INFO, logger="django_jobs"):
            assert use_wal_mode("default") is None
        assert get_driver("default").journal_mode() is None
    finally:
        connection.close()
        connection.settings_dict["NAME"] = name
    assert caplog.records == []  # nothing tried, nothing to say


def test_a_file_locked_past_the_busy_timeout_is_logged_and_left_as_it_is(
    in_delete_mode: None,
    sqlite_options: Callable[..., None],
    caplog: pytest.LogCaptureFixture,
) -> None:
    sqlite_options(transaction_mode="IMMEDIATE", timeout=0.1)
    other = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        with caplog.at_level(logging.INFO, logger="django_jobs"):
            assert use_wal_mode("default") is None
    finally:
        other.execute("ROLLBACK")
        other.close()
    [record] = records(caplog, "sqlite_wal_failed")
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        f"could not put the SQLite file {connection.settings_dict['NAME']} (database "
        "'default') in WAL mode (database is locked): its readers hold up every write until "
        "it is; see django_jobs.W003"
    )
    assert file_journal_mode() == "delete"


def test_migrate_of_a_fresh_file_says_it_on_its_output(tmp_path: Path) -> None:
    # The test project configures no logging: the line goes to migrate's own output.
    database = tmp_path / "fresh.sqlite3"
    first = manage("migrate", url=f"sqlite:///{database}")
    assert first.returncode == 0, first.stderr
    assert "django_jobs.W003" not in first.stderr  # the tables were not there yet
    line = f"  Put the SQLite file {database} (database 'default') in WAL mode; it stays with"
    assert first.stdout.count(line) == 1, first.stdout
    assert file_journal_mode(database) == "wal"
    again = manage("migrate", url=f"sqlite:///{database}")
    assert "WAL" not in again.stdout


# -- what the checks say ----------------------------------------------------------------------


def test_w001_gives_the_whole_options_dict_to_paste(sqlite_options: Callable[..., None]) -> None:
    sqlite_options()  # startproject's settings: no OPTIONS
    [warning] = [m for m in check_live_database(databases=["default"]) if m.id.endswith("W001")]
    assert warning.msg == (
        "SQLite transactions on database 'default' are DEFERRED: a view that reads and then "
        "enqueues a job inside transaction.atomic() can get 'database is locked' at once, "
        "whatever the timeout, while a worker writes."
    )
    assert warning.hint == f"Set DATABASES['default']['OPTIONS'] = {WANTED}."


def test_w001_is_a_database_check_not_said_on_every_command(
    sqlite_options: Callable[..., None],
) -> None:
    sqlite_options()
    # What `runserver`, `shell`, `makemigrations` ... run: no W001.
    assert "django_jobs.W001" not in {m.id for m in run_checks()}
    # What `migrate`, `check --database default` and `runjobs` run.
    assert "django_jobs.W001" in {m.id for m in run_checks(databases=["default"])}


def test_runjobs_logs_w001_at_start_up_and_serves(
    sqlite_options: Callable[..., None], caplog: pytest.LogCaptureFixture
) -> None:
    sqlite_options(timeout=30)
    job = schedule_job("tests.ok")
    with caplog.at_level(logging.INFO, logger="django_jobs"):
        call_command("runjobs", "--burst", verbosity=1)
    [warning] = [r for r in records(caplog, "system_check") if "W001" in r.getMessage()]
    assert warning.levelno == logging.WARNING
    assert warning.getMessage().startswith("(django_jobs.W001) SQLite transactions on database")
    assert warning.getMessage().endswith(
        "HINT: Set DATABASES['default']['OPTIONS'] = {'transaction_mode': 'IMMEDIATE', "
        "'timeout': 30, 'init_command': 'PRAGMA journal_mode=WAL;'}."
    )
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED


def test_runjobs_keeps_w001_quiet_when_silenced(
    sqlite_options: Callable[..., None], caplog: pytest.LogCaptureFixture, settings: Any
) -> None:
    settings.SILENCED_SYSTEM_CHECKS = ["django_jobs.W001"]
    sqlite_options(timeout=30)
    with caplog.at_level(logging.INFO, logger="django_jobs"):
        call_command("runjobs", "--burst", verbosity=1)
    assert records(caplog, "system_check") == []
