"""Triggers that make the database refuse a write, as a sick database or a bad row would,
and one that logs the order of a statement's writes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.db import connection


@contextmanager
def refusing(name: str, event: str, table: str, condition: str = "1 = 1") -> Iterator[None]:
    """While open, ``event`` (``INSERT``, ``UPDATE``, ``UPDATE OF col``) on ``table`` fails.

    Only for rows matching ``condition``, SQL over ``NEW``/``OLD`` that every
    database reads alike. The failure is an integrity error on each, with
    ``name`` in its message.
    """
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                f"CREATE FUNCTION {name}() RETURNS trigger AS $$ BEGIN IF {condition} THEN"
                f" RAISE EXCEPTION '{name}' USING ERRCODE = 'check_violation';"
                " END IF; RETURN NEW; END $$ LANGUAGE plpgsql"
            )
            cursor.execute(
                f"CREATE TRIGGER {name} BEFORE {event} ON {table}"
                f" FOR EACH ROW EXECUTE FUNCTION {name}()"
            )
        elif connection.vendor == "mysql":
            if connection.in_atomic_block:  # CREATE TRIGGER commits the test's transaction
                raise RuntimeError("a trigger on MariaDB/MySQL needs django_db(transaction=True)")
            action, _, column = event.partition(" OF ")
            if column:  # no UPDATE OF: the column's change is part of the condition
                condition = f"NOT (NEW.{column} <=> OLD.{column}) AND ({condition})"
            # Errno 4025, CONSTRAINT_FAILED: an IntegrityError, as the others raise.
            cursor.execute(
                f"CREATE TRIGGER {name} BEFORE {action} ON {table} FOR EACH ROW BEGIN"
                f" IF {condition} THEN SIGNAL SQLSTATE '23000'"
                f" SET MYSQL_ERRNO = 4025, MESSAGE_TEXT = '{name}'; END IF; END"
            )
        else:
            cursor.execute(
                f"CREATE TRIGGER {name} BEFORE {event} ON {table} WHEN {condition}"
                f" BEGIN SELECT RAISE(ABORT, '{name}'); END"
            )
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute(f"DROP TRIGGER IF EXISTS {name} ON {table}")
                cursor.execute(f"DROP FUNCTION IF EXISTS {name}()")
            else:  # SQLite, MariaDB and MySQL
                cursor.execute(f"DROP TRIGGER IF EXISTS {name}")


@contextmanager
def ordered_status_writes() -> Iterator[Callable[[], list[str]]]:
    """While open, each change of a job row's status is logged in order: the new statuses,
    as ``written()`` reads them (inside the block: the log goes with it). On MariaDB and
    MySQL, CREATE TRIGGER commits: a test needs ``django_db(transaction=True)`` there."""
    from django_jobs.models import Job

    table = Job._meta.db_table
    vendor = connection.vendor
    with connection.cursor() as cursor:
        if vendor == "postgresql":
            cursor.execute("CREATE TABLE written_statuses (n serial PRIMARY KEY, status text)")
            cursor.execute(
                "CREATE FUNCTION log_status() RETURNS trigger AS $$ BEGIN"
                " INSERT INTO written_statuses (status) VALUES (NEW.status); RETURN NEW;"
                " END $$ LANGUAGE plpgsql"
            )
            cursor.execute(
                f"CREATE TRIGGER log_status BEFORE UPDATE OF status ON {table}"
                " FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status)"
                " EXECUTE FUNCTION log_status()"
            )
        elif vendor == "mysql":
            cursor.execute(
                "CREATE TABLE written_statuses (n integer AUTO_INCREMENT PRIMARY KEY, status text)"
            )
            cursor.execute(
                f"CREATE TRIGGER log_status BEFORE UPDATE ON {table} FOR EACH ROW BEGIN"
                " IF NOT (NEW.status <=> OLD.status) THEN"
                " INSERT INTO written_statuses (status) VALUES (NEW.status); END IF; END"
            )
        else:
            cursor.execute("CREATE TABLE written_statuses (n integer PRIMARY KEY, status text)")
            cursor.execute(
                f"CREATE TRIGGER log_status BEFORE UPDATE OF status ON {table}"
                " WHEN NEW.status IS NOT OLD.status"
                " BEGIN INSERT INTO written_statuses (status) VALUES (NEW.status); END"
            )

    def written() -> list[str]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT status FROM written_statuses ORDER BY n")
            return [status for (status,) in cursor.fetchall()]

    try:
        yield written
    finally:
        with connection.cursor() as cursor:
            if vendor == "postgresql":
                cursor.execute(f"DROP TRIGGER IF EXISTS log_status ON {table}")
                cursor.execute("DROP FUNCTION IF EXISTS log_status()")
            else:
                cursor.execute("DROP TRIGGER IF EXISTS log_status")
            cursor.execute("DROP TABLE IF EXISTS written_statuses")
