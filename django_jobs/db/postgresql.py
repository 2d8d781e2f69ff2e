"""The PostgreSQL driver: one statement, one round trip, per claim and per settle batch.

- The claim selects due rows with ``FOR UPDATE SKIP LOCKED``, marks them
  running and inserts their attempt rows in one statement of data-modifying
  ``WITH`` queries. It commits on its own (autocommit), so no transaction is
  ever left open between two round trips: a worker cut off mid-claim leaves
  nothing locked on the server.
- A settle batch is one ``UPDATE ... FROM`` the settlements (one JSON array, one row
  each) over the job rows,
  fenced on id, owner and attempt, that closes the attempt rows of the jobs
  it matched in the same statement. The lease renewal is one fenced UPDATE.
- The statements' texts do not depend on how many rows they carry (arrays, or
  one JSON array, not lists of placeholders), so the server plans them alike.
- The hot-path statements are prepared on the server once per connection
  (``DJANGO_JOBS["PREPARED_STATEMENTS"]``, on by default): planning them
  costs more than running them. Django leaves its own statements
  unprepared, for the sake of transaction-mode poolers; turn this off
  behind a pooler that cannot keep prepared statements (PgBouncer before
  1.21, or without ``max_prepared_statements``). Where a statement is
  prepared, and what happens when the server loses it: :mod:`.prepared` (the
  driver's ``prepared`` part).
- ``notify`` sends ``pg_notify`` on the caller's connection: inside a
  transaction it is delivered only on commit.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from functools import partial
from typing import Any, NamedTuple, TypeVar

from ..conf import settings
from ..models import Job, JobStatus
from .base import Driver
from .inserts import (
    INSERTED_COLUMNS,
    WRITTEN_COLUMNS,
    copy_lines,
    inserted_values,
    written_ids,
)
from .notify import CHANNEL
from .postgresql_limits import PostgresFlowControl
from .prepared import PreparedStatements
from .records import (
    CANDIDATE_COLUMNS,
    LANE_WINDOW,
    RENEW_FIELDS,
    SETTLED_COLUMNS,
    Candidate,
    Cascade,
    ClaimedJob,
    ClaimRequest,
    DueRows,
    Health,
    Holder,
    Renewal,
    Settled,
    Settlement,
    TableStats,
    settlement_values,
    with_candidate,
)

T = TypeVar("T")

#: What the claim returns of a row: a candidate's columns (its run_at among them) and its
#: priority: its place in the claim order.
CLAIMED_COLUMNS = (*CANDIDATE_COLUMNS, "priority")
#: From this many new jobs with no unique key, the insert is a ``COPY``.
COPY_ROWS = 100


#: How the settle's statement reads each of :data:`SETTLED_COLUMNS` from its row of the
#: JSON it binds (``->>`` gives text): the settlements of a claim or a batch go as one
#: parameter, which psycopg sends as it is, where an array per column took it longer to
#: adapt, value by value, than the server took to run the statement.
SETTLED_CASTS = {
    "id": "::bigint",
    "attempt": "::integer",
    "give_back": "::integer",
    "run_at": "::timestamptz",
    "finished_at": "::timestamptz",
    "ended_at": "::timestamptz",
}


def iso_texts() -> Callable[[datetime | None], str | None]:
    """A settle's datetimes as its JSON holds them: ISO 8601, to the microsecond, with the
    offset (the database's timestamptz reads it as it is), None as null. Each distinct
    datetime is formatted once: a batch's outcomes share the moment they were decided, and
    a success's end is its finish too, so a batch of 45 formats one where it formatted 90."""
    texts: dict[datetime, str] = {}

    def iso(value: datetime | None) -> str | None:
        if value is None:
            return None
        text = texts.get(value)
        if text is None:
            text = texts[value] = value.isoformat()
        return text

    return iso


#: One encoder for every settle's JSON (``json.dumps`` makes one each call).
SETTLE_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


class ClaimedRow(NamedTuple):
    """A row the claim returns: a candidate, and its priority (its place in the claim order,
    with its run_at)."""

    candidate: Candidate
    priority: int

    @classmethod
    def read(cls, row: Sequence[Any]) -> ClaimedRow:
        return with_candidate(cls, row)

    @property
    def pair(self) -> tuple[int, int]:
        return (self.candidate.id, self.candidate.attempt)


class ClaimedOrSettledRow(NamedTuple):
    """A row the claim that carries outcomes returns: a claimed job, or a settled one (of
    whose job only the id and attempt are filled)."""

    claimed: bool
    job: ClaimedRow
    new_status: str | None
    workflow_pending: bool | None

    @classmethod
    def read(cls, row: Sequence[Any]) -> ClaimedOrSettledRow:
        claimed, *job, new_status, workflow_pending = row
        return cls(claimed, ClaimedRow.read(job), new_status, workflow_pending)


class SettledRow(NamedTuple):
    """A row a settle returns: the attempt it wrote, the job's new status, and whether its
    end has workflow steps to take."""

    id: int
    attempt: int
    new_status: str
    workflow_pending: bool | None


class PostgresDriver(Driver):
    supports_listen = True
    supports_skip_locked = True
    claims_in_one_statement = True
    claims_overlap = True
    cuts_off_calls = True
    has_row_estimates = True
    has_connect_timeout = True
    prepares_statements = True
    lock_suffix = " FOR UPDATE SKIP LOCKED"
    flow_class = PostgresFlowControl
    deletes_in_one_statement = True

    def __init__(self, using: str = "default") -> None:
        super().__init__(using)
        #: The hot cursor, its statements prepared while that holds.
        self.prepared = PreparedStatements(self, bool(settings.PREPARED_STATEMENTS))
        self.idle_bound_ms: int | None = None

    def names_condition(self, count: int) -> str:
        """One array parameter, whatever the number of names: one text, one prepared
        statement."""
        return f"{self.qn('name')} = ANY(%s::text[])"

    def names_params(self, names: Sequence[str]) -> list[Any]:
        return [list(names)]

    def names_key(self, names: Sequence[str] | None) -> str:
        return "" if names is None else ":names"

    def bound_session(self, seconds: float) -> None:
        """Nothing is set on the session (a transaction-mode pooler would pass it to other
        clients): a limited claim's transaction bounds itself (:meth:`transaction_bound`)."""
        self.idle_bound_ms = max(2000, math.ceil(seconds * 1000))

    def transaction_bound(self) -> tuple[str, list[Any]]:
        """A claim under limits holds the queue's lock for a few statements: if this client
        goes silent inside it, the server ends the transaction after the call's deadline
        (at least 2 s), rather than keep the lock until it notices the connection gone.
        ``SET LOCAL``'s way (``set_config(..., true)``): for this transaction only, a column
        of the statement that takes the lock, so it costs no round trip of its own."""
        if self.idle_bound_ms is None:
            return "", []
        return "set_config('idle_in_transaction_session_timeout', %s, true)", [
            str(self.idle_bound_ms)
        ]

    tells_health = True

    def read_health(self) -> Health:
        """The oldest transaction that holds the snapshot horizon back (a session's, or a
        prepared transaction's), and the jobs tables' rows and last autovacuum. A role
        without ``pg_read_all_stats`` sees other roles' sessions without their state and
        statement."""
        with self.connection.cursor() as cursor:
            cursor.execute(
                "SELECT pid, COALESCE(application_name, ''), COALESCE(state, ''),"
                " EXTRACT(EPOCH FROM (clock_timestamp() - xact_start))::float8,"
                " LEFT(COALESCE(query, ''), 200)"
                " FROM pg_stat_activity"
                " WHERE backend_xmin IS NOT NULL AND xact_start IS NOT NULL"
                " AND pid <> pg_backend_pid() AND datname = current_database()"
                " ORDER BY xact_start LIMIT 1"
            )
            session = cursor.fetchone()
            cursor.execute(
                "SELECT EXTRACT(EPOCH FROM (clock_timestamp() - prepared))::float8, gid"
                " FROM pg_prepared_xacts WHERE database = current_database()"
                " ORDER BY prepared LIMIT 1"
            )
            prepared = cursor.fetchone()
            cursor.execute(
                "SELECT relname, n_live_tup, n_dead_tup, last_autovacuum"
                " FROM pg_stat_user_tables WHERE relid IN (%s::regclass, %s::regclass)"
                " ORDER BY relname",
                [self.job_table, self.attempt_table],
            )
            tables = [TableStats(*row) for row in cursor.fetchall()]
        holder = None
        if session is not None:
            pid, application, state, seconds, query = session
            ending = f"SELECT pg_terminate_backend({pid});"
            holder = Holder(pid, application, state, seconds, query, ending)
        if prepared is not None and (holder is None or prepared[0] > holder.open_seconds):
            seconds, gid = prepared
            ending = f"ROLLBACK PREPARED '{gid}';"
            holder = Holder(0, f"prepared transaction {gid!r}", "prepared", seconds, "", ending)
        return Health(holder=holder, tables=tables)

    def begin_steps(self) -> None:
        """The steps' transaction commits without waiting for its flush to disk
        (``synchronous_commit`` off, for it alone): a server crash can lose only steps whose
        mark comes back with them, which the leader takes again; a later durable commit (a
        released job's claim) flushes them first. Bounded as :meth:`transaction_bound`: it
        holds a batch's row across statements."""
        settings = ["synchronous_commit", "off"]
        if self.idle_bound_ms is not None:
            settings += ["idle_in_transaction_session_timeout", str(self.idle_bound_ms)]
        calls = ", ".join(["set_config(%s, %s, true)"] * (len(settings) // 2))
        with self.connection.cursor() as cursor:
            cursor.execute(f"SELECT {calls}", settings)

    def settle_rows(self, settlements: Sequence[Settlement]) -> Settled:
        """The settle's one statement, inside the caller's transaction (no savepoint: a
        refused row fails the caller's transaction, whose caller settles apart)."""
        sql, params = self.settle_statement(settlements)
        with self.hot_cursor() as cursor:
            cursor.execute(sql, params)
            rows = [SettledRow._make(row) for row in cursor.fetchall()]
        return self.settled(settlements, rows)

    def hot_cursor(self) -> Any:
        """The cursor for hot-path statements, prepared where it is safe (:mod:`.prepared`)."""
        return self.prepared.hot_cursor()

    def own_transaction(self, work: Callable[[], T]) -> T:
        return self.prepared.own_transaction(work)

    def database_now(self) -> datetime | None:
        # CURRENT_TIMESTAMP is the start of the transaction; clock_timestamp() is now.
        with self.connection.cursor() as cursor:
            cursor.execute("SELECT clock_timestamp()")
            (value,) = cursor.fetchone()
        return value if isinstance(value, datetime) else None

    def notify(self, queues: Iterable[str]) -> None:
        """One statement on the caller's connection: delivered when its transaction commits."""
        names = sorted(set(queues))
        if names:
            with self.hot_cursor() as cursor:
                cursor.execute(
                    "SELECT pg_notify(%s, q) FROM unnest(%s::text[]) AS q", [CHANNEL, names]
                )

    def execute(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """Run one hot-path statement; a savepoint inside a transaction, so a refused row
        leaves the caller's transaction usable; else its own transaction: one round trip."""
        if self.connection.in_atomic_block:
            return self.own_transaction(partial(self.fetch_all, sql, params))
        return self.fetch_all(sql, params)

    def fetch_all(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        with self.hot_cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())

    def write_jobs(self, rows: Sequence[Job], now: datetime) -> list[int | None]:
        """Many rows with no unique key: :meth:`copy_jobs`. Otherwise one statement: the
        rows in order, passing over those whose key a live job holds, and the NOTIFY of
        the queues with a due job written.

        One row binds its values as they are (``schedule_job()``'s case: no arrays to
        build and dump); more bind one array per column.
        """
        if not rows:
            return []
        if len(rows) >= COPY_ROWS and all(row.unique_key is None for row in rows):
            return list(self.copy_jobs(rows, now))
        one = len(rows) == 1
        if one:
            sql = self.text("insert_jobs:True", lambda: self.insert_text(1))
            params = inserted_values(rows[0])
        else:
            sql = self.text("insert_jobs:False", lambda: self.insert_text(0))
            params = [list(column) for column in zip(*map(inserted_values, rows), strict=True)]
        if self.listen:
            params += [now, CHANNEL]
        with self.hot_cursor() as cursor:
            cursor.execute(sql, params)
            written = [row for row in cursor.fetchall() if row[0] is not None]
        return written_ids(rows, written)

    def copy_jobs(self, rows: Sequence[Job], now: datetime) -> list[int]:
        """Write ``rows`` with ``COPY``, the bulk path: their ids taken from the table's
        sequence first (one statement), so that the rows go in with them, in order; then
        the NOTIFY of the queues with a due job. Inside the caller's transaction (the one
        insert opens one for many rows): all are written or none. No row may carry a unique
        key: ``COPY`` cannot pass over one a live job holds."""
        with self.connection.cursor() as cursor:
            cursor.execute(self.text("job_ids", self.job_ids_text), [len(rows)])
            ids = [job_id for (job_id,) in cursor.fetchall()]
            with cursor.copy(self.text("copy_jobs", self.copy_text)) as copy:
                copy.write("".join(copy_lines(ids, rows)))
        if self.listen:
            self.notify({row.queue for row in rows if row.run_at <= now})
        return ids

    def job_ids_text(self) -> str:
        """``count`` new ids of the jobs table's sequence, in order."""
        table = self.job_table
        return (
            f"SELECT nextval(pg_get_serial_sequence('{table}', 'id'))"
            " FROM generate_series(1, %s) ORDER BY 1"
        )

    def copy_text(self) -> str:
        columns = ", ".join(self.qn(column) for column in ("id", *INSERTED_COLUMNS))
        return f"COPY {self.job_table} ({columns}) FROM STDIN"

    def insert_text(self, count: int) -> str:
        """The insert of :meth:`write_jobs`: one row's values bound as they are (``count``
        1), or many rows' as one array per column (0), kept in order."""
        qn, job = self.qn, self.job_table
        columns = ", ".join(qn(c) for c in INSERTED_COLUMNS)
        pending = f"'{JobStatus.PENDING.value}'"
        if count == 1:
            source = (
                f"VALUES (%s, %s, %s::jsonb, {pending}, %s::integer, %s::timestamptz, 0, 0,"
                " %s::integer, '', '', %s::timestamptz, %s, %s, %s, %s::integer, %s::jsonb)"
            )
        else:
            source = (
                f"SELECT v.name, v.queue, v.payload::jsonb, {pending}, v.priority, v.run_at,"
                " 0, 0, v.max_attempts, '', '', v.created_at, v.schedule, v.unique_key,"
                " v.concurrency_key, v.concurrency_limit, v.trace_context::jsonb"
                " FROM unnest(%s::text[], %s::text[], %s::text[], %s::integer[],"
                " %s::timestamptz[], %s::integer[], %s::timestamptz[], %s::text[], %s::text[],"
                " %s::text[], %s::integer[], %s::text[])"
                " WITH ORDINALITY AS v(name, queue, payload, priority, run_at, max_attempts,"
                " created_at, schedule, unique_key, concurrency_key, concurrency_limit,"
                " trace_context, n)"
                " ORDER BY v.n"
            )
        written = ", ".join(qn(c) for c in WRITTEN_COLUMNS)
        # A row whose name and key a live job holds meets the live key's partial unique
        # index, the one unique index a new row can meet: passed over, not returned.
        sql = (
            f"WITH r AS (INSERT INTO {job} ({columns}) {source} ON CONFLICT DO NOTHING"
            f" RETURNING {written}, {qn('queue')}, {qn('run_at')}) SELECT {written} FROM r"
        )
        if self.listen:  # a volatile call in a lateral subquery: run once per distinct due queue
            sql += (
                f" UNION ALL SELECT NULL, NULL, NULL FROM (SELECT DISTINCT {qn('queue')} AS q"
                f" FROM r WHERE {qn('run_at')} <= %s) d, LATERAL (SELECT pg_notify(%s, d.q)) n"
            )
        return sql

    def claim_batch(self, request: ClaimRequest) -> list[ClaimedJob]:
        sql, params = self.claim_sql(request)
        rows = [ClaimedRow.read(row) for row in self.execute(sql, params)]
        return self.claimed_jobs(rows, request)

    def claim_and_settle(
        self, request: ClaimRequest, settlements: Sequence[Settlement]
    ) -> tuple[list[ClaimedJob], Settled]:
        """Settle ``settlements`` and claim, in one statement: one round trip, one commit.

        The statement answers both the jobs it claimed and the settlements it
        wrote, in rows of one shape (:class:`ClaimedOrSettledRow`).

        It settles first: its ``UNION ALL`` reads ``settled`` before ``marked``, and so
        runs them in that order. The claim may lock rows it does not take: its
        snapshot, older than another claim's commit, still shows a row that claim took
        as pending; it locks the row's newest version, and READ COMMITTED's recheck
        passes over it but keeps the lock to the end of the statement. Settling after
        that, two workers' statements could each wait on a row the other locked so: a
        deadlock, which the server breaks after ``deadlock_timeout`` by failing one.
        Settling first, a statement waits only on claims that wait on nothing.
        """
        if not settlements:
            return self.claim(request), Settled([])
        if request.limits is not None:
            return self.flow.claim_limited(request, settlements)
        settle_ctes, settle_params = self.settle_ctes(settlements)
        claim_ctes, claim_params = self.claim_ctes(request)
        sql = self.text(
            "claim_and_settle" + self.claim_key(request),
            lambda: (
                f"WITH {settle_ctes}, {claim_ctes}"
                f" SELECT FALSE, {self.settled_as_claimed}, new_status, workflow_pending"
                f" FROM settled UNION ALL SELECT TRUE, {self.claimed_columns}, NULL, NULL"
                " FROM marked"
            ),
        )
        rows = [
            ClaimedOrSettledRow.read(row)
            for row in self.execute(sql, [*settle_params, *claim_params])
        ]
        written = [
            (*row.job.pair, row.new_status, row.workflow_pending) for row in rows if not row.claimed
        ]
        claimed = [row.job for row in rows if row.claimed]
        return self.claimed_jobs(claimed, request), self.settled(settlements, written)

    def execute_in_transaction(self, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
        """One hot-path statement inside the caller's transaction (no savepoint: a refused
        row fails the transaction, whose caller settles apart); its rows."""
        with self.hot_cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())

    def limited_claim_rows(
        self, sql: str, params: list[Any], request: ClaimRequest
    ) -> tuple[list[ClaimedJob], Sequence[Any]]:
        """Run a claim under limits' one statement (:mod:`.postgresql_limits`): the jobs it
        claimed, and what it counted (the columns each row has after the claimed ones)."""
        width = len(CLAIMED_COLUMNS)
        rows = self.execute_in_transaction(sql, params)
        claimed = [ClaimedRow.read(row[:width]) for row in rows if row[0] is not None]
        return self.claimed_jobs(claimed, request), rows[0][width:]

    def unlocked_claim_rows(
        self,
        sql: str,
        params: list[Any],
        request: ClaimRequest,
        settlements: Sequence[Settlement],
    ) -> tuple[list[ClaimedJob], Settled, bool]:
        """Run the claim that skips a limited queue's lock (:mod:`.postgresql_limits`), one
        statement: the jobs it claimed, what its settlements wrote, and whether it found
        room to claim."""
        claimed: list[ClaimedRow] = []
        written: list[tuple[int, int, str | None, bool | None]] = []
        room = False
        for kind, *row in self.execute(sql, params):
            if kind == 2:
                room = bool(row[-1])
                continue
            job = ClaimedRow.read(row[:-2])
            if kind == 0:
                claimed.append(job)
            else:
                written.append((*job.pair, row[-2], row[-1]))
        settled = self.settled(settlements, written) if settlements else Settled([])
        return self.claimed_jobs(claimed, request), settled, room

    def claimed_jobs(self, rows: list[ClaimedRow], request: ClaimRequest) -> list[ClaimedJob]:
        rows.sort(key=lambda row: (-row.priority, row.candidate.run_at, row.candidate.id))
        return [
            ClaimedJob(
                id=job.id,
                name=job.name,
                queue=job.queue,
                raw_payload=job.payload,
                attempt=job.attempt,
                attempts_used=job.attempts_used,
                max_attempts=job.max_attempts,
                owner=request.owner,
                lease_expires_at=request.expires_at,
                holds_slot=request.limits is not None,
                trace_context=job.trace_context,
                run_at=job.run_at,
                claimed_at=request.now,
            )
            for job in (row.candidate for row in rows)
        ]

    @property
    def claimed_columns(self) -> str:
        return ", ".join(self.qn(column) for column in CLAIMED_COLUMNS)

    @property
    def settled_as_claimed(self) -> str:
        """A settled row in a claimed one's columns: only its id and attempt filled."""
        return ", ".join(c if c in ("id", "attempt") else "NULL" for c in CLAIMED_COLUMNS)

    @property
    def nothing_claimed(self) -> str:
        """A row of a claimed one's columns, all NULL."""
        return ", ".join(["NULL"] * len(CLAIMED_COLUMNS))

    def claim_statement(self, request: ClaimRequest) -> tuple[str, list[Any]]:
        return self.claim_sql(request)

    def claim_sql(self, request: ClaimRequest) -> tuple[str, list[Any]]:
        ctes, params = self.claim_ctes(request)
        return self.text(
            "claim" + self.claim_key(request),
            lambda: f"WITH {ctes} SELECT {self.claimed_columns} FROM marked",
        ), params

    def claim_key(self, request: ClaimRequest) -> str:
        """What the text of ``request``'s claim depends on: its names, or that it is a
        lane's (:meth:`due_rows`)."""
        lane = request.among is not None and request.names is not None
        return ":lane" if lane else self.names_key(request.names)

    def claim_ctes(self, request: ClaimRequest) -> tuple[str, list[Any]]:
        """``picked`` (due rows, locked), ``marked`` (running, this owner's), ``started``."""
        rows = self.due_rows(request)
        params = [*rows.params, int(request.limit), *self.take_params(request)]
        key = "claim_ctes" + self.claim_key(request)
        return self.text(key, lambda: self.claim_ctes_text(rows)), params

    def due_rows(self, request: ClaimRequest, also: str = "") -> DueRows:
        """Where a claim finds the rows it may take (and ``also`` holds of, a condition on
        the row's columns unqualified); for a lane's
        (:attr:`~.records.ClaimRequest.among`), among the first
        :data:`~.records.LANE_WINDOW` due rows of the names the worker knows.

        The window is read without a lock, and the lane's rows in it are locked through the
        primary key (``FOR UPDATE OF j``), each row's own conditions checked again on its
        newest version. A nested loop reads the window a row at a time in claim order, so
        the lane's rows at the head cost what a plain claim does; a lane with nothing due
        reads the window, not the backlog of the other lane's rows.

        The conditions on ``j`` are one ``(...) IS TRUE``, the same test to a row, so that
        the planner cannot match the claim index's condition on them: given it, with
        statistics taken while hardly a job was due, it read each window row's ``j``
        through the claim index from its head, not by primary key, which is quadratic in
        the rows a claim passes over (a claim of 18 jobs read 9,000 buffers under load)."""
        queue, now, names, among = request.queue, request.now, request.names, request.among
        qn, job = self.qn, self.job_table
        extra = f" AND {also}" if also else ""
        if among is None or names is None:
            due, params = self.due_condition(queue, now, names)
            order = f" ORDER BY {self.claim_order}"
            return DueRows(f"FROM {job} j WHERE {due}{extra}", order, params)
        window, window_params = self.due_condition(queue, now, among)
        window += extra
        due, due_params = self.due_condition(queue, now)
        source = (
            f"FROM (SELECT {qn('id')}, {qn('name')} FROM {job} WHERE {window}"
            f" ORDER BY {self.claim_order} LIMIT {LANE_WINDOW}) w"
            f" JOIN {job} j ON j.{qn('id')} = w.{qn('id')}"
            f" WHERE w.{qn('name')} = ANY(%s::text[]) AND ({due}) IS TRUE"
        )
        return DueRows(source, "", [*window_params, *self.names_params(names), *due_params])

    def take_params(self, request: ClaimRequest) -> list[Any]:
        """What :meth:`take_ctes_text` binds."""
        now = self.adapt(request.now)
        return [request.owner, self.adapt(request.expires_at), now, request.owner, now]

    def claim_ctes_text(self, rows: DueRows) -> str:
        return (
            f"picked AS (SELECT j.{self.qn('id')} {rows.source}{rows.order}"
            f" LIMIT %s FOR UPDATE OF j SKIP LOCKED), {self.take_ctes_text()}"
        )

    def take_ctes_text(self) -> str:
        """``marked`` (the rows of a CTE ``picked`` marked running, this owner's) and
        ``started`` (their attempts); bound: owner, lease end, now, then owner and now."""
        qn, job, attempts = self.qn, self.job_table, self.attempt_table
        columns = ", ".join(f"j.{qn(c)}" for c in CLAIMED_COLUMNS)
        sql = (
            f"marked AS (UPDATE {job} j SET {qn('status')} = '{JobStatus.RUNNING.value}',"
            f" {qn('lease_owner')} = %s, {qn('lease_expires_at')} = %s, {qn('started_at')} = %s,"
            f" {qn('attempt')} = {self.next_attempt_sql('j')},"
            f" {qn('attempts_used')} = j.{qn('attempts_used')} + 1"
            f" FROM picked WHERE j.{qn('id')} = picked.{qn('id')}"
            f" RETURNING {columns}),"
            f" started AS (INSERT INTO {attempts}"
            f" ({qn('job_id')}, {qn('number')}, {qn('owner')}, {qn('started_at')}, {qn('error')})"
            f" SELECT {qn('id')}, {qn('attempt')}, %s, %s, '' FROM marked)"
        )
        return sql

    def settle(self, settlements: Sequence[Settlement]) -> Settled:
        if not settlements:
            return Settled([])
        sql, params = self.settle_statement(settlements)
        rows = [SettledRow._make(row) for row in self.execute(sql, params)]
        return self.settled(settlements, rows)

    def settle_statement(self, settlements: Sequence[Settlement]) -> tuple[str, list[Any]]:
        """The settle's one statement and its parameters."""
        ctes, params = self.settle_ctes(settlements)
        sql = self.text(
            "settle",
            lambda: f"WITH {ctes} SELECT id, attempt, new_status, workflow_pending FROM settled",
        )
        return sql, params

    def settle_ctes(self, settlements: Sequence[Settlement]) -> tuple[str, list[Any]]:
        """``v`` (the settlements), ``settled`` (the job rows they fenced in), ``closed``."""
        return self.text("settle_ctes", self.settle_ctes_text), self.settle_params(settlements)

    def settle_ctes_text(self) -> str:
        """The settled rows are found by their ids as one array (``= ANY``), which the
        planner reads through the primary key: the settlements' estimate is a set-returning
        function's default of 100 rows, for which, in a table of a few thousand rows, a
        join through the running rows' index or a scan of the table looked cheaper, and
        each settle then read every running job. Their guard is
        :meth:`own_running_guard`, for the same reason under stale statistics."""
        qn, job, attempts = self.qn, self.job_table, self.attempt_table
        fields = ", ".join(
            f"(e->>{i}){SETTLED_CASTS.get(column, '')} AS {column}"
            for i, column in enumerate(SETTLED_COLUMNS)
        )
        return (
            f"v AS (SELECT {fields} FROM jsonb_array_elements(%s::jsonb) AS e),"
            f" settled AS (UPDATE {job} j SET {self.settled_columns_sql('j', 'v')},"
            f" {qn('attempts_used')} = j.{qn('attempts_used')} - v.give_back,"
            f" {qn('result')} = COALESCE(v.result::jsonb, j.{qn('result')}),"
            f" {qn('lease_owner')} = NULL, {qn('lease_expires_at')} = NULL"
            f" FROM v WHERE j.{qn('id')} = ANY(ARRAY(SELECT id FROM v))"
            f" AND j.{qn('id')} = v.id AND j.{qn('lease_owner')} = v.owner"
            f" AND j.{qn('attempt')} = v.attempt AND {self.own_running_guard('j')}"
            f" RETURNING v.id, v.attempt, v.outcome, v.error, v.ended_at, v.traceback,"
            f" j.{qn('status')} AS new_status, j.{qn('workflow_pending')} AS workflow_pending),"
            f" closed AS (UPDATE {attempts} a SET {qn('outcome')} = settled.outcome,"
            f" {qn('finished_at')} = settled.ended_at, {qn('error')} = settled.error,"
            f" {qn('traceback')} = settled.traceback"
            f" FROM settled WHERE a.{qn('job_id')} = settled.id"
            f" AND a.{qn('number')} = settled.attempt AND a.{qn('outcome')} IS NULL)"
        )

    def settle_params(self, settlements: Sequence[Settlement]) -> list[str]:
        """The settlements as one JSON array of rows, each the values of
        :data:`SETTLED_COLUMNS` in order (:data:`SETTLED_CASTS`)."""
        return [SETTLE_JSON.encode(settlement_values(settlements, SETTLED_COLUMNS, iso_texts()))]

    def delete_expired(self, picked: Any, cascades: Sequence[Cascade]) -> tuple[int, int]:
        """The jobs ``picked`` locked (``FOR UPDATE SKIP LOCKED``) and deleted with the rows
        of ``cascades`` in one statement, its own transaction: where Django's cascade sends
        a statement for the pick, the lock, the read it collects by, each table and each
        hundred jobs, and builds a model instance and a literal per job. The foreign keys
        are checked as the statement ends, by which time the rows referring to the jobs
        are gone with them."""
        qn = self.qn
        pick, params = picked.query.get_compiler(self.using).as_sql()
        ids = "ARRAY(SELECT id FROM picked)"  # one array: each delete seeks its index by it
        ctes = [f"picked(id) AS MATERIALIZED ({pick}{self.lock_suffix})"]
        for number, cascade in enumerate(cascades):
            refers = " OR ".join(f"{qn(column)} = ANY({ids})" for column in cascade.columns)
            ctes.append(f"cascade{number} AS (DELETE FROM {qn(cascade.table)} WHERE {refers})")
        ctes.append(
            f"gone AS (DELETE FROM {self.job_table} WHERE {qn('id')} = ANY({ids}) RETURNING 1)"
        )
        sql = f"WITH {', '.join(ctes)} SELECT (SELECT count(*) FROM picked), count(*) FROM gone"
        [(count, deleted)] = self.execute(sql, list(params))
        return count, deleted

    def renew_sql(self, renewal: Renewal) -> tuple[str, list[Any]]:
        rows = renewal.values()
        columns = [[row[i] for row in rows] for i in range(len(RENEW_FIELDS))]
        return self.text("renew", self.renew_text), [
            renewal.expires,
            *columns,
            renewal.owner,
            renewal.now,
            float(renewal.give_up_seconds),
        ]

    def own_running_guard(self, table: str) -> str:
        """:meth:`running_guard` for a statement that writes rows it names by id (a settle,
        a renewal), written ``(...) IS TRUE``, the same test to a row, so that the planner
        cannot match it to the lease index's predicate: with statistics taken while few
        jobs ran, that index looked all but empty, and the statement read all of it (every
        running job) rather than probe the primary key for its own rows."""
        return f"({self.running_guard(table)}) IS TRUE"

    def renew_text(self) -> str:
        """One statement for any number of leases: the rows come as arrays."""
        qn, job = self.qn, self.job_table
        return (
            f"UPDATE {job} j SET {qn('lease_expires_at')} = %s, "
            + self.progress_assignments("j", "h")
            + " FROM unnest(%s::bigint[], %s::integer[], %s::boolean[], %s::bigint[],"
            f" %s::bigint[], %s::text[]) AS h({', '.join(RENEW_FIELDS)})"
            f" WHERE j.{qn('id')} = h.id AND j.{qn('attempt')} = h.attempt"
            f" AND j.{qn('lease_owner')} = %s AND {self.own_running_guard('j')}"
            f" AND j.{qn('lease_expires_at')} > %s::timestamptz + %s * interval '1 second'"
            f" RETURNING j.{qn('id')}, j.{qn('cancel_requested_at')}"
        )
