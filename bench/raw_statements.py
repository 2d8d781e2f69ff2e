"""What django-jobs sends to the database, recorded once and sent again past it: the raw limits.

bench/peers/run_raw.py and bench/enqueue.py record the statements a call of
django-jobs sends (Django's ``execute_wrapper``: the text and the parameters
as they reach the database's cursor) and send them again, as recorded, on a
plain DB-API connection, so that what the raw loop costs is the database's
work and the round trip, and what the call costs beyond it is django-jobs'
and Django's. Django is imported inside the functions only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from harness import BenchError


@dataclass(frozen=True)
class Statement:
    sql: str
    params: list[Any]


@contextmanager
def recording(using: str = "default") -> Iterator[list[Statement]]:
    """The statements sent on Django's connection ``using`` meanwhile, with their parameters.

    What Django sends outside ``execute`` (psycopg's ``BEGIN``, every ``COMMIT``) is
    not among them; SQLite's ``BEGIN IMMEDIATE`` is.
    """
    from django.db import connections

    statements: list[Statement] = []

    def record(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        statements.append(Statement(sql, list(params or [])))
        return execute(sql, params, many, context)

    with connections[using].execute_wrapper(record):
        yield statements


def only(statements: Sequence[Statement], what: str) -> Statement:
    if len(statements) != 1:
        raise BenchError(f"{what} sent {len(statements)} statements; the raw loop expects one")
    return statements[0]


def qmark(sql: str) -> str:
    """A Django statement's ``%s`` placeholders as sqlite3's ``?`` (and ``%%`` as ``%``)."""
    return re.sub(r"%%|%s", lambda match: "?" if match.group() == "%s" else "%", sql)


class Sender:
    """Sends recorded statements again on ``raw``, a psycopg, MySQLdb or sqlite3 connection.

    On PostgreSQL each goes through psycopg's own cursor, which binds the
    parameters on the server, prepared (as the driver's ``hot_cursor``). On
    MariaDB each goes through a plain MySQLdb cursor, which binds them in the
    client, as under Django's; in autocommit each statement commits on its
    own. On SQLite a transaction the statements began (Django's ``BEGIN IMMEDIATE``)
    is committed after them, as Django does; in autocommit each statement
    commits on its own, as in Django.
    """

    def __init__(self, raw: Any, vendor: str) -> None:
        self.raw = raw
        self.sqlite = vendor == "sqlite"
        self.texts: dict[str, str] = {}
        self.cursor: Any = None
        #: what each execute() is given beside the statement (psycopg: prepare it)
        self.execute_options: dict[str, Any] = {}
        if vendor == "mysql":
            self.cursor = raw.cursor()
        elif not self.sqlite:
            import psycopg

            from django_jobs.db.prepared import NEVER_BY_COUNT

            if raw.prepare_threshold is None:  # else psycopg prepares nothing, as the driver knows
                raw.prepare_threshold = NEVER_BY_COUNT
            self.cursor = psycopg.Cursor(raw)
            self.execute_options = {"prepare": True}

    def send(self, statements: Sequence[Statement]) -> None:
        if any(is_copy(statement) for statement in statements):
            with self.raw.transaction():  # one transaction, as the driver's bulk insert
                self.send_each(statements)
            return
        if not self.sqlite:
            self.send_each(statements)
            return
        began = not self.raw.in_transaction
        for statement in statements:
            sql = self.texts.get(statement.sql)
            if sql is None:
                sql = self.texts[statement.sql] = qmark(statement.sql)
            self.raw.execute(sql, statement.params).fetchall()
        if began and self.raw.in_transaction:
            self.raw.commit()

    def send_each(self, statements: Sequence[Statement]) -> None:
        """Each statement in turn (psycopg or MySQLdb). A ``COPY`` (:func:`copy_of`) writes
        its rows, each after an id of the rows the statement before it returned."""
        rows: list[Any] = []
        for statement in statements:
            if is_copy(statement):
                with self.cursor.copy(statement.sql) as copy:
                    for (job_id,), values in zip(rows, statement.params, strict=True):
                        copy.write_row((job_id, *values))
                continue
            self.cursor.execute(statement.sql, statement.params, **self.execute_options)
            if self.cursor.description is not None:
                rows = self.cursor.fetchall()

    def close(self) -> None:
        if self.cursor is not None:
            self.cursor.close()


def is_copy(statement: Statement) -> bool:
    return statement.sql.startswith("COPY ")


def copy_of(sql: str, rows: list[Any]) -> Statement:
    """A ``COPY ... FROM STDIN`` the driver sent (``execute_wrapper`` sees none), as a
    statement :meth:`Sender.send` replays: ``rows`` are its rows without their ids, which
    the statement before it returned."""
    return Statement(sql, rows)


@contextmanager
def copying() -> Iterator[list[tuple[str, list[Any]]]]:
    """The ``COPY`` statements the PostgreSQL driver sends meanwhile, each with its rows'
    values but their ids (``execute_wrapper`` does not see them): the same rows, for the
    raw loop to copy again."""
    from django.db import connection

    from django_jobs.db import get_driver
    from django_jobs.db.inserts import copied_values

    copied: list[tuple[str, list[Any]]] = []
    driver = get_driver()
    if connection.vendor != "postgresql":
        yield copied
        return
    original = driver.copy_jobs

    def copy_jobs(rows: Any, now: Any) -> Any:
        copied.append((driver.copy_text(), [copied_values(0, row)[1:] for row in rows]))
        return original(rows, now)

    driver.copy_jobs = copy_jobs
    try:
        yield copied
    finally:
        del driver.copy_jobs


def record_schedule_jobs(name: str, size: int) -> list[Statement]:
    """What one ``schedule_jobs()`` of ``size`` no-op jobs of ``name`` sends, with its
    ``COPY`` (:func:`copy_of`) after the ids' statement where the driver copies."""
    from django_jobs.scheduling import JobSpec, schedule_jobs

    with recording() as statements, copying() as copied:
        schedule_jobs([JobSpec(name, {"n": number}) for number in range(size)])
    if copied:  # PostgreSQL's bulk path: the COPY goes after the ids' statement
        [(sql, rows)] = copied
        statements.insert(1, copy_of(sql, rows))
    return statements
