"""What every part of a driver speaks through: one database alias and its statements.

:class:`Statements` holds the alias and its connection, names quoted for it
(:meth:`~Statements.qn`) and statements' texts built once
(:meth:`~Statements.text`), datetimes made the database's, the cursor and the
transactions the hot path runs in, the jobs tables' names, and the SQL
fragments more than one part writes: what makes a row due (a paused queue has
none, :meth:`~Statements.paused_condition`), the claim order, the guard of a
running row, an insert that passes over a row already there, and how a read
locks its rows.

The driver (:class:`~.base.Driver`) builds on it, and a database's driver
overrides what its database does otherwise (PostgreSQL's prepared hot cursor,
SQLite's write transaction, MariaDB's ``INSERT IGNORE``). The driver's parts
(:mod:`.leader`, :mod:`.limits`, :mod:`.prepared`) are given it and import this
module, never :mod:`.base`: nothing in ``db/`` imports in a circle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, TypeVar

from django.db import connections, transaction

from ..models import Attempt, Job, JobStatus, Queue

T = TypeVar("T")


class Statements:
    """The statements of one database alias, and the fragments the driver's parts share."""

    #: Appended to the candidate read inside a claim: how the database keeps two claims apart.
    lock_suffix = ""
    #: Appended to a read of one row the transaction must hold until it ends (a limited
    #: claim's queue row); SQLite has none: its write transaction holds the whole database.
    row_lock = " FOR UPDATE"
    #: The aggregate that gathers a column's values into a JSON array (NULL over no rows on
    #: MariaDB and MySQL, ``[]`` on SQLite).
    json_array_agg = "JSON_ARRAYAGG"

    def __init__(self, using: str = "default") -> None:
        self.using = using
        self._quoted: dict[str, str] = {}
        self._texts: dict[str, str] = {}

    @property
    def connection(self) -> Any:
        return connections[self.using]

    def qn(self, name: str) -> str:
        """``name`` quoted for this database (remembered: it is on every statement's path)."""
        quoted = self._quoted.get(name)
        if quoted is None:
            quoted = self._quoted[name] = str(self.connection.ops.quote_name(name))
        return quoted

    def text(self, key: str, build: Callable[[], str]) -> str:
        """A statement's text, built once: the hot path only binds its parameters."""
        text = self._texts.get(key)
        if text is None:
            text = self._texts[key] = build()
        return text

    @property
    def job_table(self) -> str:
        return self.qn(Job._meta.db_table)

    @property
    def attempt_table(self) -> str:
        return self.qn(Attempt._meta.db_table)

    @staticmethod
    def read_time(value: Any) -> datetime | None:
        """A datetime column as a raw cursor returns it (SQLite: text; MariaDB: naive, in
        UTC as Django writes it; PostgreSQL: aware), as an aware datetime."""
        if value is None:
            return None
        if isinstance(value, str):
            value = datetime.fromisoformat(value)
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)

    def adapt(self, value: datetime | None) -> Any:
        return None if value is None else self.connection.ops.adapt_datetimefield_value(value)

    def adapter(self) -> Callable[[datetime | None], Any]:
        """:meth:`adapt` for the rows of one insert, each time adapted once: the rows of a
        bulk call mostly share their times, and each adaptation looks the connection up
        and converts the time (equal times adapt alike, whatever their zone)."""
        adapt = self.connection.ops.adapt_datetimefield_value
        adapted: dict[datetime, Any] = {}

        def adapt_once(value: datetime | None) -> Any:
            if value is None:
                return None
            found = adapted.get(value)
            if found is None:
                found = adapted[value] = adapt(value)
            return found

        return adapt_once

    @contextmanager
    def write_transaction(self) -> Iterator[None]:
        """A transaction for a group of writes on the jobs tables."""
        with transaction.atomic(using=self.using):
            yield

    def own_transaction(self, work: Callable[[], T]) -> T:
        """``work`` in a transaction of the driver's own (a savepoint inside the caller's),
        in which nothing but the driver's statements run: a driver may run it again
        (PostgreSQL's, when the server lost its prepared statements)."""
        with self.write_transaction():
            return work()

    def hot_cursor(self) -> Any:
        """The cursor for hot-path statements (a driver may prepare them)."""
        return self.connection.cursor()

    # -- fragments the parts share ---------------------------------------------------

    def due_condition(
        self, queue: str, now: datetime, names: Sequence[str] | None = None
    ) -> tuple[str, list[Any]]:
        """What makes a row claimable: the candidate read and the claim's write share it.

        The status is a literal so that the planner can match the partial
        claim index whatever the driver does with parameters. A paused queue has
        nothing claimable (:meth:`paused_condition`). With ``names`` (a claim's: the
        names its worker knows), only a row of one of them (:meth:`names_condition`).
        """
        qn = self.qn
        sql = (
            f"{qn('status')} = '{JobStatus.PENDING.value}'"
            f" AND {qn('queue')} = %s AND {qn('run_at')} <= %s"
            f" AND {qn('attempts_used')} < {qn('max_attempts')}"
            f" AND {self.paused_condition()}"
        )
        params = [queue, self.adapt(now), queue]
        if names is None:
            return sql, params
        return f"{sql} AND {self.names_condition(len(names))}", [
            *params,
            *self.names_params(names),
        ]

    def names_condition(self, count: int) -> str:
        """The job's name is one of ``count`` names (:meth:`names_params` binds them): here
        an ``IN`` list of as many parameters, its text one per number of names (the
        statements' keys say it: :meth:`names_key`). PostgreSQL and SQLite bind the list as
        one parameter (an array, a JSON array)."""
        if not count:
            return "1 = 0"
        return f"{self.qn('name')} IN ({self.placeholders(count)})"

    def names_params(self, names: Sequence[str]) -> list[Any]:
        """What :meth:`names_condition` binds of ``names``: here, each name."""
        return list(names)

    def names_key(self, names: Sequence[str] | None) -> str:
        """What a claim statement's text depends on of its ``names``, for its key in
        :meth:`text`: here their number (an ``IN`` list), and whether there are any."""
        return "" if names is None else f":names{len(names)}"

    def paused_condition(self) -> str:
        """The condition every claim carries, in its read and its write: the queue (bound
        once more) is not paused. A probe of the queue's row by its primary key, so a
        claim that starts after ``pause_queue()`` commits takes nothing, on any worker."""
        qn = self.qn
        return (
            f"NOT EXISTS (SELECT 1 FROM {qn(Queue._meta.db_table)} WHERE {qn('name')} = %s"
            f" AND {qn('paused_at')} IS NOT NULL)"
        )

    @property
    def claim_order(self) -> str:
        qn = self.qn
        return f"{qn('priority')} DESC, {qn('run_at')} ASC, {qn('id')} ASC"

    def running_guard(self, table: str) -> str:
        return f"{table}.{self.qn('status')} = '{JobStatus.RUNNING.value}'"

    def insert_ignore_sql(self, table: str, columns: Sequence[str]) -> str:
        """An insert of one row into ``table`` that does nothing on a conflict of its key
        (``INSERT IGNORE`` on MariaDB and MySQL)."""
        names = ", ".join(self.qn(c) for c in columns)
        values = ", ".join(["%s"] * len(columns))
        return f"INSERT INTO {self.qn(table)} ({names}) VALUES ({values}) ON CONFLICT DO NOTHING"

    @staticmethod
    def placeholders(count: int) -> str:
        """``%s, %s, ...``: ``count`` bound values, in an ``IN (...)`` list."""
        return ", ".join(["%s"] * count)
