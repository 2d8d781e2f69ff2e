"""Triggers that make the database refuse a write, as a sick database or a bad row would."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection


@contextmanager
def refusing(name: str, event: str, table: str, condition: str = "1 = 1") -> Iterator[None]:
    """While open, ``event`` (``INSERT``, ``UPDATE``, ``UPDATE OF col``) on ``table`` fails.

    Only for rows matching ``condition``, SQL over ``NEW``/``OLD`` that both
    databases read alike. The failure is an integrity error on both, with
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
            else:
                cursor.execute(f"DROP TRIGGER IF EXISTS {name}")
