"""The SQLite driver: no row locks, so guarded updates under the write lock.

Every write transaction takes the write lock up front (``BEGIN IMMEDIATE``):
a deferred transaction that reads and then writes gets "database is locked"
at once whatever the busy timeout, while an immediate one waits its turn.
The claim reads its candidates and marks them running by one UPDATE whose
WHERE repeats every condition of the read (``Driver.due_condition``); a row
that no longer matches changes nothing and is skipped. A settle batch is one
``UPDATE ... FROM (VALUES ...)`` fenced on id, owner and attempt, then one
UPDATE of the attempt rows it matched, in one transaction: one commit for
the whole batch. RETURNING and UPDATE FROM need SQLite 3.35 or newer.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from django.core.checks import CheckMessage, Error, Warning
from django.db import DatabaseError, OperationalError, transaction

from ..models import Job
from .base import DatabaseBusy, Driver
from .records import (
    RENEW_FIELDS,
    ClaimedJob,
    ClaimRequest,
    Renewal,
    RenewedRow,
    Settled,
    Settlement,
)


def values_table(name: str, columns: Sequence[str], count: int) -> str:
    """``name(columns) AS (VALUES (%s, ...), ...)``: ``count`` rows of bound values as a
    table, for a ``WITH``."""
    one = f"({', '.join(['%s'] * len(columns))})"
    return f"{name}({', '.join(columns)}) AS (VALUES {', '.join([one] * count)})"


logger = logging.getLogger(__name__)

MINIMUM_SQLITE = (3, 35, 0)
WAL_COMMAND = "PRAGMA journal_mode=WAL;"


def wanted_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` as django-jobs wants them: ``IMMEDIATE`` transactions, a busy timeout
    (the project's, else 20 s) and WAL in ``init_command`` (instead of any other journal
    mode, after which the project's other statements follow)."""
    statements = str(options.get("init_command") or "").split(";")
    others = [f"{s.strip()};" for s in statements if s.strip() and "journal_mode" not in s.lower()]
    wanted = {
        "transaction_mode": "IMMEDIATE",
        "timeout": options.get("timeout", 20),
        "init_command": " ".join([WAL_COMMAND, *others]),
    }
    return {**wanted, **{key: value for key, value in options.items() if key not in wanted}}


#: How many names tuples' JSON arrays :meth:`SQLiteDriver.names_params` keeps.
NAMES_KEPT = 4


class SQLiteDriver(Driver):
    row_lock = ""  # the claim's write transaction (BEGIN IMMEDIATE) holds the database
    json_array_agg = "json_group_array"
    has_journal_modes = True
    # SQLite reads this host's clock, and to the millisecond only (strftime's '%f'): taken as
    # the database's time, it put the worker's clock up to a millisecond behind the clock
    # that stamped a job's run_at, and a job enqueued in that millisecond was not yet due.
    clock_is_hosts = True
    #: The JSON arrays :meth:`names_params` made of the last few names tuples (a worker's
    #: lanes, sync and async, pass one each), by the tuple's id.
    names_json: dict[int, tuple[Sequence[str], str]] = {}

    @contextmanager
    def write_transaction(self) -> Iterator[None]:
        connection = self.connection
        if connection.in_atomic_block:
            with transaction.atomic(using=self.using):
                yield
            return
        connection.ensure_connection()
        saved = connection.transaction_mode
        connection.transaction_mode = "IMMEDIATE"
        try:
            with transaction.atomic(using=self.using):
                connection.transaction_mode = saved
                yield
        finally:
            connection.transaction_mode = saved

    def names_condition(self, count: int) -> str:
        """One JSON array parameter, whatever the number of names: one text."""
        return f"{self.qn('name')} IN (SELECT value FROM json_each(%s))"

    def names_params(self, names: Sequence[str]) -> list[Any]:
        """The names as one JSON array, made once for each of a worker's names tuples (it
        passes the same tuple to every claim until its registry grows)."""
        made = self.names_json.get(id(names))
        if made is None or made[0] is not names:
            if len(self.names_json) >= NAMES_KEPT:
                self.names_json = {}
            made = (names, json.dumps(list(names)))
            self.names_json = {**self.names_json, id(names): made}
        return [made[1]]

    def names_key(self, names: Sequence[str] | None) -> str:
        return "" if names is None else ":names"

    def check_configuration(self) -> list[CheckMessage]:
        if sqlite3.sqlite_version_info >= MINIMUM_SQLITE:
            return []
        return [
            Error(
                f"django-jobs needs SQLite 3.35 or newer (UPDATE ... RETURNING); "
                f"this Python has {sqlite3.sqlite_version}.",
                hint="Use a Python built against a newer SQLite.",
                id="django_jobs.E030",
            )
        ]

    @property
    def options(self) -> Mapping[str, Any]:
        return self.connection.settings_dict.get("OPTIONS") or {}

    def check_database(self) -> list[CheckMessage]:
        messages: list[CheckMessage] = []
        if str(self.options.get("transaction_mode", "")).upper() != "IMMEDIATE":
            messages.append(
                Warning(
                    f"SQLite transactions on database {self.using!r} are DEFERRED: a view that "
                    "reads and then enqueues a job inside transaction.atomic() can get "
                    "'database is locked' at once, whatever the timeout, while a worker writes.",
                    hint=f"Set {self.options_text()}.",
                    id="django_jobs.W001",
                )
            )
        return messages + self.journal_warnings()

    def journal_warnings(self) -> list[CheckMessage]:
        """W003: a SQLite file whose readers hold up the workers' writes (not in WAL mode).

        Every ``runjobs`` process reads and writes on several connections at once
        (each handler thread, the lease renewal's own connection, the settler), and
        the web processes that enqueue are more: there is always more than one.
        Before the jobs tables exist it says nothing: the ``migrate`` that creates
        them puts the file in WAL mode.
        """
        mode = self.journal_mode()
        if mode is None or mode == "wal" or not self.migrated():
            return []
        if self.journal_mode_chosen():
            why = "OPTIONS['init_command'] sets the journal mode, so django-jobs leaves it: for WAL"
        else:
            why = (
                "django-jobs puts the file in WAL mode at the end of `migrate` and when "
                "`runjobs` starts, unless OPTIONS['init_command'] sets a journal mode (a "
                "runjobs that finds the file locked logs so and serves on); to set it on "
                "every connection instead"
            )
        return [
            Warning(
                f"The SQLite database {self.using!r} is in journal mode {mode!r}, not 'wal': "
                "while any connection reads (a view, the admin, a running handler), the "
                "workers' claims, outcome writes and lease renewals wait for it, up to the "
                "busy timeout, and then fail, and so do the views that enqueue; a lease that "
                "cannot be renewed in time is given up.",
                hint=f"{why}, set {self.options_text()}. WAL stays set on the file once set.",
                id="django_jobs.W003",
            )
        ]

    def options_text(self) -> str:
        """The ``OPTIONS`` django-jobs asks for, keeping the project's others, to paste."""
        return f"DATABASES[{self.using!r}]['OPTIONS'] = {wanted_options(self.options)!r}"

    def migrated(self) -> bool:
        """Whether the jobs table exists (else ``migrate`` has yet to run, or it is not
        reachable)."""
        try:
            return Job._meta.db_table in self.connection.introspection.table_names()
        except DatabaseError:
            return False

    def journal_mode(self) -> str | None:
        if self.connection.is_in_memory_db():
            return None
        try:
            with self.connection.cursor() as cursor:
                cursor.execute("PRAGMA journal_mode")
                found = cursor.fetchone()
        except DatabaseError:
            return None  # not reachable: nothing to say about its journal
        if found is None:
            return None
        (mode,) = found
        return str(mode).lower()

    def journal_mode_chosen(self) -> bool:
        """Whether the project sets the journal mode itself (in ``OPTIONS['init_command']``)."""
        return "journal_mode" in str(self.options.get("init_command") or "").lower()

    def put_in_wal_mode(self) -> bool:
        connection = self.connection
        if connection.is_in_memory_db() or self.journal_mode_chosen():
            return False
        if connection.in_atomic_block:
            return False  # SQLite changes the journal mode outside transactions only
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA journal_mode")
            (mode,) = cursor.fetchone()
            if str(mode).lower() == "wal":
                return False
            # Waits for the other connections up to the busy timeout, then "database is locked".
            cursor.execute("PRAGMA journal_mode=WAL")
            (mode,) = cursor.fetchone()
        if str(mode).lower() != "wal":
            raise OperationalError(f"SQLite kept the journal mode {mode!r}")
        return True

    def claim(self, request: ClaimRequest) -> list[ClaimedJob]:
        try:
            return super().claim(request)
        except OperationalError as exc:
            if "locked" not in str(exc):
                raise
            logger.info(
                "database is locked; nothing claimed this tick", extra={"event": "claim_busy"}
            )
            return []

    def claim_and_settle(
        self, request: ClaimRequest, settlements: Sequence[Settlement]
    ) -> tuple[list[ClaimedJob], Settled]:
        try:
            return super().claim_and_settle(request, settlements)
        except OperationalError as exc:
            if "locked" not in str(exc):
                raise
            raise DatabaseBusy(str(exc)) from exc

    def settle_rows(self, settlements: Sequence[Settlement]) -> Settled:
        if not settlements:
            return Settled([])
        qn = self.qn
        sql, params = self.settle_jobs_sql(settlements)
        # Unqualified: SQLite's RETURNING names the target's columns only, not by its alias.
        returning = (
            f" RETURNING {qn('id')}, {qn('attempt')}, {qn('status')}, {qn('workflow_pending')}"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql + returning, params)
            written = [tuple(row) for row in cursor.fetchall()]
            pairs = {(job_id, attempt) for job_id, attempt, _, _ in written}
            done = [s for s in settlements if s.pair in pairs]
            if done:
                self.close_attempts(cursor, done)
        return self.settled(settlements, written)

    def joined_update(
        self, table: str, columns: Sequence[str], count: int, set_: str, where: str
    ) -> str:
        """``UPDATE ... FROM`` a table of ``VALUES`` (:func:`values_table`)."""
        source = values_table("v", columns, count)
        return f"WITH {source} UPDATE {table} AS t SET {set_} FROM v WHERE {where}"

    def renew_leases(self, renewal: Renewal) -> list[RenewedRow]:
        """The renewal's statement in a write transaction of its own, the lock taken first."""
        with self.write_transaction():
            return super().renew_leases(renewal)

    def renew_sql(self, renewal: Renewal) -> tuple[str, list[Any]]:
        qn, job = self.qn, self.job_table
        rows = renewal.values()
        sql = (
            f"WITH {values_table('h', RENEW_FIELDS, len(rows))}"
            f" UPDATE {job} SET {qn('lease_expires_at')} = %s, "
            + self.progress_assignments(job, "h")
            + f" FROM h WHERE {job}.{qn('id')} = h.id AND {job}.{qn('attempt')} = h.attempt"
            f" AND {job}.{qn('lease_owner')} = %s AND {self.running_guard(job)}"
            f" AND {job}.{qn('lease_expires_at')} > %s"
            # The column itself: SQLite 3.40 answers 1 for `cancel_requested_at IS NOT NULL`
            # in this RETURNING even where the column is NULL.
            f" RETURNING {qn('id')}, {qn('cancel_requested_at')}"
        )
        flat = [value for row in rows for value in row]
        params = [self.adapt(renewal.expires), renewal.owner, self.adapt(renewal.margin)]
        return sql, [*flat, *params]
