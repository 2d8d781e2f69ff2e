"""The MariaDB and MySQL driver: row locks with ``SKIP LOCKED``, no ``RETURNING`` on UPDATE.

What both servers share, and so what this driver uses (MariaDB 10.6+, MySQL 8.0.1+):

- The claim is a locking read of the due rows, ``SELECT ... FOR UPDATE SKIP
  LOCKED``, that also computes each row's next attempt number; then one
  UPDATE marks them running (the rows are locked, so none changed in
  between; its WHERE repeats the read's conditions all the same) and one
  INSERT starts their attempts: neither server returns the rows an UPDATE
  wrote. With the commit and the two ``SET autocommit`` that Django's
  ``atomic()`` sends around a transaction on this backend, six round trips,
  where PostgreSQL takes one.
- A settle batch locks the job rows it names (``SELECT ... FOR UPDATE``),
  keeps those still running under the settlement's owner and attempt, and
  writes them and their attempt rows in two UPDATEs joined to a derived
  table of the settlements: six round trips in all, for the whole batch. A
  lease renewal locks and reads the leases it extends, then writes them:
  five. A claim that carries outcomes is both in one transaction: nine.
- An UPDATE joined to a derived table evaluates its assignments in no
  promised order: none of the statements here reads a column that another
  assignment of the same statement writes.
- No LISTEN: the workers poll (``DJANGO_JOBS["POLL_SECONDS"]``).
- New jobs: one row is one INSERT (its id from the connection); more rows are
  one INSERT with ``RETURNING`` on MariaDB (10.5+), and an INSERT per row on
  MySQL, which has no ``RETURNING``. With a unique key among them, the INSERT
  is ``INSERT IGNORE``: it passes over a row whose key a live job holds.

The transaction isolation must be ``READ COMMITTED`` (Django's default for
this backend): under ``REPEATABLE READ`` a locking range read also locks the
gaps between index entries, and a claim would hold up the inserts of new
jobs (:meth:`MySQLDriver.check_database`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, NamedTuple, TypeVar

from django.core.checks import CheckMessage, Error, Warning
from django.db import DatabaseError

from ..conf import settings
from ..models import Job, JobStatus
from .base import Driver
from .inserts import INSERTED_COLUMNS, WRITTEN_COLUMNS, inserted_values, written_ids
from .records import (
    CANDIDATE_COLUMNS,
    RENEW_FIELDS,
    SETTLEMENT_DATETIMES,
    Candidate,
    ClaimedJob,
    ClaimRequest,
    Health,
    Holder,
    MarkedRow,
    Renewal,
    RenewedRow,
    Settled,
    Settlement,
    with_candidate,
)

#: The oldest servers with ``SKIP LOCKED``.
MINIMUM_MARIADB = (10, 6)
MINIMUM_MYSQL = (8, 0, 1)

#: Isolation levels (as Django's ``OPTIONS["isolation_level"]`` spells them) and what each
#: costs django-jobs; ``READ COMMITTED`` (Django's default here) costs nothing.
ISOLATION_LEVELS = {"read uncommitted", "read committed", "repeatable read", "serializable"}


class LockedRow(NamedTuple):
    """A job row a settle or a renewal locked: what decides whether it writes it."""

    id: int
    lease_owner: str | None
    attempt: int
    status: str
    cancel_requested_at: datetime | None
    workflow_pending: bool | None


class ClaimReadRow(NamedTuple):
    """A row the claim's locking read returns: a candidate, and its next attempt number."""

    candidate: Candidate
    next_attempt: int


#: A row :meth:`MySQLDriver.read_by_id` reads.
Read = TypeVar("Read", "LockedRow", MarkedRow, "StandingLease")


class StandingLease(NamedTuple):
    """A lease a renewal locked and may extend."""

    id: int
    attempt: int
    cancel_requested_at: datetime | None


class MySQLDriver(Driver):
    supports_skip_locked = True
    cuts_off_calls = True
    has_connect_timeout = True
    lock_suffix = " FOR UPDATE SKIP LOCKED"
    assigns_qualified = True

    # -- the server and its settings -------------------------------------------

    @property
    def is_mariadb(self) -> bool:
        return bool(self.connection.mysql_is_mariadb)

    def server_text(self, version: tuple[int, ...] | None = None) -> str:
        """``MariaDB 10.11.19``: the server's name and ``version`` (its own, unless told)."""
        number = ".".join(str(part) for part in version or self.connection.mysql_version)
        return f"{'MariaDB' if self.is_mariadb else 'MySQL'} {number}"

    def bound_session(self, seconds: float) -> None:
        """Two waits, bounded by the deadline, as the calls are:

        - a row lock is waited for ``innodb_lock_wait_timeout`` (50 s unless set), past the
          deadline, which would then cut the connection off: the session waits a whole
          number of seconds within it instead (error 1205, the connection kept), unless the
          project's ``init_command`` sets it;
        - a transaction whose client went silent between two statements keeps its row
          locks until ``wait_timeout`` (8 hours): MariaDB's ``idle_transaction_timeout``
          (MySQL has none) ends it after ``seconds``, at least 2.
        """
        options = self.connection.settings_dict.get("OPTIONS") or {}
        settings_ = []
        if "innodb_lock_wait_timeout" not in str(options.get("init_command") or ""):
            settings_.append(f"innodb_lock_wait_timeout = {max(1, math.floor(seconds))}")
        if self.is_mariadb:
            settings_.append(f"idle_transaction_timeout = {max(2, math.ceil(seconds))}")
        if settings_:
            with self.cursor() as cursor:
                cursor.execute("SET SESSION " + ", SESSION ".join(settings_))

    def check_configuration(self) -> list[CheckMessage]:
        return self.isolation_messages()

    def isolation_level(self) -> str:
        """The isolation level Django sets on this alias's connections."""
        options = self.connection.settings_dict.get("OPTIONS") or {}
        return str(options.get("isolation_level", "read committed")).lower()

    def isolation_messages(self) -> list[CheckMessage]:
        level = self.isolation_level()
        fix = (
            f"Set DATABASES[{self.using!r}]['OPTIONS']['isolation_level'] = 'read committed' "
            "(Django's default for MariaDB and MySQL), or leave it out."
        )
        if level == "read committed" or level not in ISOLATION_LEVELS:
            return []
        if level == "read uncommitted":
            return [
                Error(
                    f"The database {self.using!r} reads uncommitted rows (isolation level "
                    "'read uncommitted'): the recurring scheduler could take a job another "
                    "transaction has not committed, and may roll back, for its occurrence, "
                    "and skip the occurrence.",
                    hint=fix,
                    id="django_jobs.E040",
                )
            ]
        return [
            Warning(
                f"The database {self.using!r} runs its transactions at isolation level "
                f"{level!r}: a claim's locking read then also locks the gaps between the "
                "index entries it passes, which holds up the inserts of new jobs "
                "(schedule_job() waits, or fails with a deadlock), and a schedule_job() with a "
                "unique_key that loses a race inside a transaction cannot see the winner's row "
                "and raises IntegrityError instead of returning it.",
                hint=fix,
                id="django_jobs.W040",
            )
        ]

    def check_database(self) -> list[CheckMessage]:
        try:
            self.connection.ensure_connection()
        except DatabaseError:
            return []  # not reachable: the other checks and runjobs say so
        messages = self.version_messages(tuple(self.connection.mysql_version))
        messages += self.table_messages()
        messages += self.packet_messages()
        return messages

    tells_health = True

    def read_health(self) -> Health:
        """The oldest open InnoDB transaction (which holds purge back) and its session, and
        InnoDB's history list length. Both need the ``PROCESS`` privilege."""
        with self.connection.cursor() as cursor:
            cursor.execute(
                "SELECT t.trx_mysql_thread_id, COALESCE(CONCAT(p.USER, '@', p.HOST), ''),"
                " COALESCE(p.COMMAND, ''),"
                " TIMESTAMPDIFF(MICROSECOND, t.trx_started, NOW(6)) / 1000000,"
                " LEFT(COALESCE(t.trx_query, ''), 200)"
                " FROM information_schema.INNODB_TRX t"
                " LEFT JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id"
                " WHERE t.trx_mysql_thread_id <> CONNECTION_ID()"
                " ORDER BY t.trx_started LIMIT 1"
            )
            oldest = cursor.fetchone()
            cursor.execute(
                "SELECT `COUNT` FROM information_schema.INNODB_METRICS"
                " WHERE NAME = 'trx_rseg_history_len'"
            )
            history = cursor.fetchone()
        holder = None
        if oldest is not None:
            pid, who, state, seconds, query = oldest
            ending = f"KILL {int(pid)};"
            holder = Holder(int(pid), who, state.lower(), float(seconds), query, ending)
        return Health(holder=holder, history_length=None if history is None else int(history[0]))

    def table_messages(self) -> list[CheckMessage]:
        return self.engine_messages(self.table_engine())

    def version_messages(self, version: tuple[int, ...]) -> list[CheckMessage]:
        """E041: a server without ``SKIP LOCKED``."""
        minimum = MINIMUM_MARIADB if self.is_mariadb else MINIMUM_MYSQL
        if version >= minimum:
            return []
        wanted = ".".join(map(str, minimum))
        return [
            Error(
                f"django-jobs needs {'MariaDB' if self.is_mariadb else 'MySQL'} {wanted} "
                f"or newer (SELECT ... FOR UPDATE SKIP LOCKED); the database "
                f"{self.using!r} is {self.server_text(version)}.",
                hint="Upgrade the server.",
                id="django_jobs.E041",
            )
        ]

    def engine_messages(self, engine: str | None) -> list[CheckMessage]:
        """E042: the jobs table in a storage engine without row locks (not InnoDB)."""
        messages: list[CheckMessage] = []
        if engine is not None and engine.lower() != "innodb":
            messages.append(
                Error(
                    f"The jobs table of the database {self.using!r} uses the storage engine "
                    f"{engine}, not InnoDB: it has no row locks or transactions, so two workers "
                    "could run the same job.",
                    hint=f"ALTER TABLE {Job._meta.db_table} ENGINE=InnoDB (and the other "
                    "django_jobs_* tables), or set default_storage_engine=InnoDB before migrate.",
                    id="django_jobs.E042",
                )
            )
        return messages

    def server_variable(self, name: str) -> str | None:
        try:
            with self.connection.cursor() as cursor:
                cursor.execute("SELECT @@" + name)
                row = cursor.fetchone()
        except DatabaseError:
            return None
        (value,) = row if row is not None else (None,)
        return None if value is None else str(value)

    def table_engine(self) -> str | None:
        """The storage engine of the jobs table; None before ``migrate`` made it."""
        try:
            with self.connection.cursor() as cursor:
                cursor.execute(
                    "SELECT engine FROM information_schema.tables"
                    " WHERE table_schema = DATABASE() AND table_name = %s",
                    [Job._meta.db_table],
                )
                row = cursor.fetchone()
        except DatabaseError:
            return None
        (engine,) = row if row is not None else (None,)
        return None if engine is None else str(engine)

    def packet_messages(self) -> list[CheckMessage]:
        """W041: ``max_allowed_packet`` smaller than a payload django-jobs accepts."""
        packet = self.server_variable("max_allowed_packet")
        payload = int(settings.MAX_PAYLOAD_BYTES or 0)
        if packet is None or not payload:
            return []
        # A payload's JSON, escaped in the statement, with the row's other values around it.
        needed = 2 * payload + 64 * 1024
        if int(packet) >= needed:
            return []
        return [
            Warning(
                f"The database {self.using!r} takes statements of at most "
                f"{int(packet):,} bytes (max_allowed_packet), and DJANGO_JOBS"
                f"['MAX_PAYLOAD_BYTES'] accepts payloads of {payload:,} bytes: the INSERT of "
                "a large payload can be refused with 'MySQL server has gone away' (2006).",
                hint=f"Set max_allowed_packet to at least {needed:,} on the server, or lower "
                "MAX_PAYLOAD_BYTES.",
                id="django_jobs.W041",
            )
        ]

    def database_now(self) -> datetime | None:
        with self.connection.cursor() as cursor:
            cursor.execute("SELECT UTC_TIMESTAMP(6)")
            (value,) = cursor.fetchone()
        if not isinstance(value, datetime):
            return None
        return value.replace(tzinfo=UTC)

    # -- statements ------------------------------------------------------------

    def insert_ignore_sql(self, table: str, columns: Sequence[str]) -> str:
        """``INSERT IGNORE``: no ``ON CONFLICT`` here. (``ON DUPLICATE KEY UPDATE`` would
        not tell a conflict apart: Django's connections count found rows, not changed.)"""
        names = ", ".join(self.qn(c) for c in columns)
        values = ", ".join(["%s"] * len(columns))
        return f"INSERT IGNORE INTO {self.qn(table)} ({names}) VALUES ({values})"

    @staticmethod
    def derived(columns: Sequence[str], count: int) -> str:
        """A derived table of ``count`` rows of bound values, ``columns`` in each:
        ``SELECT %s AS a, ... UNION ALL SELECT ...``.

        A datetime (a column of :data:`~.records.SETTLEMENT_DATETIMES`) is cast in every
        row (it arrives as text, and the union's column would be text). Numbers and text
        are not: a cast would wrap a number too big for the column or cut a text too long,
        where the write should be refused (strict mode).
        """

        def value(name: str) -> str:
            return "CAST(%s AS DATETIME(6))" if name in SETTLEMENT_DATETIMES else "%s"

        first = ", ".join(f"{value(name)} AS {name}" for name in columns)
        other = ", ".join(value(name) for name in columns)
        return " UNION ALL ".join([f"SELECT {first}"] + [f"SELECT {other}"] * (count - 1))

    @contextmanager
    def cursor(self) -> Iterator[Any]:
        with self.connection.cursor() as cursor:
            yield cursor

    # -- new jobs --------------------------------------------------------------

    def write_jobs(self, rows: Sequence[Job], now: datetime) -> list[int | None]:
        """One INSERT, which says the ids it wrote (one row: from the connection). With a
        unique key among the rows, ``INSERT IGNORE`` passes over a row whose key a live
        job holds (on the unique index of its ``live_unique_key``, migration 0011); only
        then, as IGNORE would also let through what strict mode refuses."""
        if not rows:
            return []
        if len(rows) > 1 and not self.connection.features.can_return_rows_from_bulk_insert:
            # MySQL: no RETURNING, and ids of a multi-row insert are not said
            return [job_id for row in rows for job_id in self.write_jobs([row], now)]
        qn = self.qn
        ignore = " IGNORE" if any(row.unique_key is not None for row in rows) else ""
        columns = ", ".join(qn(column) for column in INSERTED_COLUMNS)
        one = (
            f"(%s, %s, %s, '{JobStatus.PENDING.value}', %s, %s, 0, 0, %s, '', '', %s, %s,"
            " %s, %s, %s, %s)"
        )
        values = ", ".join([one] * len(rows))
        sql = f"INSERT{ignore} INTO {self.job_table} ({columns}) VALUES {values}"
        adapt = self.adapter()
        params = [value for row in rows for value in inserted_values(row, adapt)]
        with self.cursor() as cursor:
            if len(rows) == 1:
                cursor.execute(sql, params)
                return [cursor.lastrowid if cursor.rowcount else None]
            written = ", ".join(qn(column) for column in WRITTEN_COLUMNS)
            cursor.execute(f"{sql} RETURNING {written}", params)
            return written_ids(rows, cursor.fetchall())

    # -- claiming --------------------------------------------------------------

    def claim_rows(self, request: ClaimRequest) -> list[ClaimedJob]:
        """The locking read, which also reads each row's next attempt number; the UPDATE
        that writes those numbers; the INSERT of the attempts."""
        sql, params = self.claim_statement(request)
        with self.cursor() as cursor:
            cursor.execute(sql, params)
            read = cursor.fetchall()
        if not read:
            return []
        locked = [with_candidate(ClaimReadRow, row) for row in read]
        rows = [row.candidate for row in locked]
        attempts = {row.candidate.id: int(row.next_attempt) for row in locked}
        marked = self.mark_locked(rows, attempts, request)
        return self.claimed(rows, marked, request)

    def claim_statement(self, request: ClaimRequest) -> tuple[str, list[Any]]:
        """The claim's locking read: the due rows in claim order, each with its next attempt
        number (:meth:`~.base.Driver.next_attempt_sql`)."""
        due, params = self.due_condition(request.queue, request.now, request.names)

        def build() -> str:
            columns = ", ".join(self.qn(column) for column in CANDIDATE_COLUMNS)
            job = self.job_table
            return (
                f"SELECT {columns}, {self.next_attempt_sql(job)} FROM {job} WHERE {due}"
                f" ORDER BY {self.claim_order} LIMIT %s{self.lock_suffix}"
            )

        key = "claim_read" + self.names_key(request.names)
        return self.text(key, build), [*params, int(request.limit)]

    def mark_locked(
        self, rows: Sequence[Candidate], attempts: Mapping[int, int], request: ClaimRequest
    ) -> dict[int, MarkedRow]:
        """Mark the rows the claim's read locked running, each with the attempt number it
        read: none can have changed since, so each is written (the WHERE says so again)."""
        qn, job = self.qn, self.job_table
        due, due_params = self.due_condition(request.queue, request.now, request.names)
        ids = [row.id for row in rows]
        placeholders = self.placeholders(len(ids))
        cases = " ".join(["WHEN %s THEN %s"] * len(ids))
        sql = (
            f"UPDATE {job} SET {qn('status')} = '{JobStatus.RUNNING.value}',"
            f" {qn('lease_owner')} = %s, {qn('lease_expires_at')} = %s, {qn('started_at')} = %s,"
            f" {qn('attempt')} = CASE {qn('id')} {cases} END,"
            f" {qn('attempts_used')} = {qn('attempts_used')} + 1"
            f" WHERE {qn('id')} IN ({placeholders}) AND {due}"
        )
        stamp = [request.owner, self.adapt(request.expires_at), self.adapt(request.now)]
        numbered = [value for job_id in ids for value in (job_id, attempts[job_id])]
        with self.cursor() as cursor:
            cursor.execute(sql, [*stamp, *numbered, *ids, *due_params])
            if cursor.rowcount != len(ids):
                return self.read_marked(cursor, ids, request)
        return {row.id: MarkedRow(row.id, attempts[row.id], row.attempts_used + 1) for row in rows}

    def mark_running(self, ids: Sequence[int], request: ClaimRequest) -> dict[int, MarkedRow]:
        """The claim one row at a time (after a refused write): the UPDATE numbers the
        attempt itself, and the rows it wrote are read back."""
        sql, params = self.mark_running_sql(ids, request)
        with self.cursor() as cursor:
            cursor.execute(sql.split(" RETURNING ")[0], params)
            return self.read_marked(cursor, ids, request)

    def read_marked(
        self, cursor: Any, ids: Sequence[int], request: ClaimRequest
    ) -> dict[int, MarkedRow]:
        """The rows of ``ids`` this claim marked running, read back in its transaction."""
        qn = self.qn
        mine = (
            f" AND {qn('lease_owner')} = %s AND {self.running_guard(self.job_table)}"
            f" AND {qn('started_at')} = %s"
        )
        return self.read_by_id(
            cursor, MarkedRow, ids, mine, [request.owner, self.adapt(request.now)]
        )

    def read_by_id(
        self, cursor: Any, record: type[Read], ids: Sequence[int], more: str, params: list[Any]
    ) -> dict[int, Read]:
        """The job rows ``ids`` where ``more`` holds, read into ``record`` (whose fields are
        the columns, the id first), by id: through the primary key alone. Where ``more``
        names the status, the optimizer could otherwise read the lease index's entries of
        every running job instead (an estimate of 20 rows for 2,000 in a fresh table), a
        locking read locking each in passing."""
        columns = ", ".join(self.qn(field) for field in record._fields)
        cursor.execute(
            f"SELECT {columns} FROM {self.job_table} FORCE INDEX (PRIMARY)"
            f" WHERE {self.qn('id')} IN ({self.placeholders(len(ids))}){more}",
            [*ids, *params],
        )
        return {row[0]: row for row in map(record._make, cursor.fetchall())}

    # -- settling --------------------------------------------------------------

    def lock_jobs(self, cursor: Any, ids: Sequence[int]) -> dict[int, LockedRow]:
        """Lock the job rows ``ids`` (waiting for another writer, up to the lock wait
        timeout) and read what decides their writes."""
        return self.read_by_id(cursor, LockedRow, ids, " FOR UPDATE", [])

    @staticmethod
    def holds(row: LockedRow | None, owner: str, attempt: int) -> bool:
        return (
            row is not None
            and row.status == JobStatus.RUNNING.value
            and row.lease_owner == owner
            and row.attempt == attempt
        )

    def settle_rows(self, settlements: Sequence[Settlement]) -> Settled:
        if not settlements:
            return Settled([])
        with self.cursor() as cursor:
            locked = self.lock_jobs(cursor, sorted({s.job_id for s in settlements}))
            fenced_in = [
                s for s in settlements if self.holds(locked.get(s.job_id), s.owner, s.attempt)
            ]
            if not fenced_in:
                return self.settled(settlements, [])
            cursor.execute(*self.settle_jobs_sql(fenced_in))
            self.close_attempts(cursor, fenced_in)
        written = []
        for s in fenced_in:
            cancelled = (
                locked[s.job_id].cancel_requested_at is not None and s.status != JobStatus.SUCCEEDED
            )
            status = JobStatus.CANCELLED.value if cancelled else str(s.status)
            written.append((s.job_id, s.attempt, status, locked[s.job_id].workflow_pending))
        return self.settled(settlements, written)

    def joined_update(
        self, table: str, columns: Sequence[str], count: int, set_: str, where: str
    ) -> str:
        """``UPDATE ... JOIN`` a derived table (:meth:`derived`)."""
        source = self.derived(columns, count)
        return f"UPDATE {table} t JOIN ({source}) v ON {where} SET {set_}"

    # -- renewing --------------------------------------------------------------

    def renew_leases(self, renewal: Renewal) -> list[RenewedRow]:
        """Lock and read the leases that still stand past the give-up point, then extend
        them (and write their progress): two statements and the commit."""
        with self.write_transaction(), self.cursor() as cursor:
            standing = self.standing_leases(cursor, renewal)
            if standing:
                self.extend_leases(cursor, renewal, standing)
        return [RenewedRow(lease.id, lease.cancel_requested_at) for lease in standing]

    def standing_leases(self, cursor: Any, renewal: Renewal) -> list[StandingLease]:
        """The renewal's leases that stand past its give-up point, locked."""
        qn, job = self.qn, self.job_table
        attempts = {row.id: row.attempt for row in renewal.rows}
        standing = self.read_by_id(
            cursor,
            StandingLease,
            list(attempts),
            f" AND {qn('lease_owner')} = %s"
            f" AND {self.running_guard(job)} AND {qn('lease_expires_at')} > %s FOR UPDATE",
            [renewal.owner, self.adapt(renewal.margin)],
        )
        return [lease for lease in standing.values() if attempts.get(lease.id) == lease.attempt]

    def extend_leases(
        self, cursor: Any, renewal: Renewal, standing: Sequence[StandingLease]
    ) -> None:
        """Extend the ``standing`` leases, each with its progress: one UPDATE."""
        qn, job = self.qn, self.job_table
        kept = {lease.id for lease in standing}
        rows = [values for values in renewal.values() if values[0] in kept]  # by id
        flat = [value for row in rows for value in row]
        cursor.execute(
            f"UPDATE {job} j JOIN ({self.derived(RENEW_FIELDS, len(rows))}) h"
            f" ON j.{qn('id')} = h.id AND j.{qn('attempt')} = h.attempt"
            f" SET j.{qn('lease_expires_at')} = %s, "
            + self.progress_assignments("j", "h")
            + f" WHERE j.{qn('lease_owner')} = %s AND {self.running_guard('j')}",
            [*flat, self.adapt(renewal.expires), renewal.owner],
        )
