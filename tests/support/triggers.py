"""Triggers that make the database refuse a write, as a sick database or a bad row would."""

from __future__ import annotations

from collections.abc import Iterator
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
