"""The database seam: every statement on a job's hot path, behind one interface.

A :class:`Driver` claims due jobs (marks them running and starts their
attempts), settles many attempts at once (each row fenced on id, owner and
attempt), renews all of a process's leases in one statement, reads the
database's clock and, where the database has it, sends wake-ups. Each
database has its driver (:mod:`.postgresql`, :mod:`.sqlite`, :mod:`.mysql`);
this module holds what they share. Raw SQL lives in ``db/`` only, with
parameters bound and identifiers quoted; the ORM serves everything off the
hot path.

A driver is composed as Django's ``BaseDatabaseWrapper`` is: it builds on
:class:`~.statements.Statements` (the alias, its connection, the statements'
texts and the fragments they share), declares what its database can do, and
builds its parts in ``__init__``, each in a module of its own that imports
nothing of this one: the leader lease (``driver.leader``, :mod:`.leader`) and
flow control (``driver.flow``, :mod:`.limits`); PostgreSQL's adds its prepared
hot cursor (``driver.prepared``, :mod:`.prepared`). A database that needs its
own part names its class (``leader_class``, ``flow_class``).

When a claim's write is refused (``IntegrityError``, ``DataError``: a row
edited by hand, say), the claim is tried again one row at a time, each in
its own savepoint, so that row is logged and skipped while the others are
claimed.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime
from functools import partial
from typing import Any

from django.core.checks import CheckMessage
from django.db import DatabaseError, transaction

from ..conf import settings
from ..models import FINISHED_STATUSES, Job, JobStatus
from . import inserts
from .inserts import INSERTED_COLUMNS, WRITTEN_COLUMNS, inserted_values, written_ids
from .leader import LeaderLease
from .limits import FlowControl
from .records import (
    CANDIDATE_COLUMNS,
    CLOSED_COLUMNS,
    PROGRESS_COLUMNS,
    ROW_ERRORS,
    SETTLED_JOB_COLUMNS,
    Candidate,
    Cascade,
    ClaimedJob,
    ClaimRequest,
    Health,
    MarkedRow,
    Pairs,
    Progress,
    Renewal,
    Renewed,
    RenewedRow,
    RenewRow,
    Settled,
    Settlement,
    lease_end,
    settlement_values,
)
from .statements import Statements
from .workflows import Followed, Workflows


class DatabaseBusy(Exception):
    """The database could not take the write lock in time: nothing was written."""


class Driver(Statements):
    """The hot-path statements for one database alias.

    What the database can do is declared here, as class attributes a driver
    overrides (as Django's ``DatabaseFeatures`` does); the rest of the code
    reads them instead of the vendor's name.
    """

    #: LISTEN/NOTIFY: an enqueue wakes idle workers at once; without it they poll.
    supports_listen = False
    #: ``SELECT ... FOR UPDATE SKIP LOCKED``: concurrent claims and maintenance pass the
    #: rows another transaction holds, instead of one database-wide write lock.
    supports_skip_locked = False
    #: A claim, and a claim that carries outcomes, is one statement: one round trip.
    claims_in_one_statement = False
    #: Two claims of one queue from one process may be under way at once: each locks only
    #: the rows it takes. MariaDB's locking read locks the rows it passes over for a
    #: moment (two claims would each skip the other's), and SQLite's takes the one write
    #: lock.
    claims_overlap = False
    #: A call on the connection can be cut off at its deadline (a network socket; a local
    #: file is bounded by its busy timeout instead).
    cuts_off_calls = False
    #: The planner's row counts are cheap estimates worth showing past a large table.
    has_row_estimates = False
    #: A new connection takes a ``connect_timeout`` option (libpq's), which bounds it.
    has_connect_timeout = False
    #: The database is a file with a journal mode (SQLite's): django-jobs puts it in WAL
    #: mode, so that readers and the one writer do not wait for each other.
    has_journal_modes = False
    #: The hot-path statements may be prepared on the server (``PREPARED_STATEMENTS``).
    prepares_statements = False
    #: The database's clock is this host's (SQLite's): the worker's clock reads the host's
    #: itself, to the microsecond, not the database's reading of it (:meth:`database_now`).
    clock_is_hosts = False
    #: An UPDATE of a join names each column it assigns with its table (MariaDB's: the
    #: other table may have a column of the same name); SQLite's and PostgreSQL's may not.
    assigns_qualified = False
    #: Expired jobs and the rows that go with them are deleted in one statement
    #: (:meth:`delete_expired`): PostgreSQL's data-modifying ``WITH``.
    deletes_in_one_statement = False

    #: The parts a driver builds, as ``BaseDatabaseWrapper`` builds its ``features_class``.
    leader_class = LeaderLease
    flow_class = FlowControl
    workflows_class = Workflows

    def __init__(self, using: str = "default") -> None:
        super().__init__(using)
        # Wake-ups are sent where the database has them and DJANGO_JOBS["LISTEN"] is on.
        self.listen = self.supports_listen and bool(settings.LISTEN)
        #: The leader lease: ``lead``, ``resign``, ``row``.
        self.leader = self.leader_class(self)
        #: Flow control: ``pause``, ``resume``, and the claims of queues with limits.
        self.flow = self.flow_class(self, self)
        #: Workflows: the links of a new job, the steps of a job's end.
        self.workflows = self.workflows_class(self, self)

    def delete_expired(self, picked: Any, cascades: Sequence[Cascade]) -> tuple[int, int]:
        """Where :attr:`deletes_in_one_statement`: lock the jobs ``picked`` (a query of
        their ids, read without a lock; the rows another session holds are passed) and
        delete them, with the rows of ``cascades`` that refer to them, in one statement of
        its own; (ids picked, jobs deleted)."""
        raise NotImplementedError

    def delete_jobs(self, ids: Sequence[int], cascades: Sequence[Cascade]) -> int:
        """Inside the caller's transaction, which holds them: delete the jobs ``ids``, after
        the rows of ``cascades`` that refer to them (a foreign key checked at once, as
        InnoDB's, then finds none), a statement a table and column; how many jobs went."""
        qn, params = self.qn, list(ids)
        marks = self.placeholders(len(params))
        with self.connection.cursor() as cursor:
            for cascade in cascades:
                table = qn(cascade.table)
                for column in cascade.columns:
                    cursor.execute(f"DELETE FROM {table} WHERE {qn(column)} IN ({marks})", params)
            cursor.execute(f"DELETE FROM {self.job_table} WHERE {qn('id')} IN ({marks})", params)
            return int(cursor.rowcount)

    def bound_session(self, seconds: float) -> None:
        """On a connection a worker's calls run on under a deadline of ``seconds``: have the
        server give up what it would wait for longer, where it can (by default it cannot):
        a row lock, and a transaction left idle (the client gone silent mid-transaction)."""

    #: The database tells what holds back the cleanup of the jobs tables (read_health).
    tells_health = False

    def read_health(self) -> Health:
        """What the database tells of the jobs tables' cleanup (:mod:`django_jobs.health`):
        by default nothing (SQLite keeps no transaction horizon that others hold)."""
        return Health(told=False)

    def begin_steps(self) -> None:
        """First in the workflow steps' own transaction (:meth:`follow`): what the database
        may relax for it. By default nothing."""

    def check_configuration(self) -> list[CheckMessage]:
        """System-check errors about how the database is set up for jobs (every command)."""
        return []

    def check_database(self) -> list[CheckMessage]:
        """System-check warnings about the database's settings and the live database: the
        ``database`` checks, which ``migrate``, ``check --database`` and ``runjobs`` run."""
        return []

    def table_messages(self) -> list[CheckMessage]:
        """System-check messages about the jobs tables as ``migrate`` made them: part of
        :meth:`check_database`, and said again right after ``migrate``."""
        return []

    def journal_mode(self) -> str | None:
        """SQLite's journal mode of the live database file; None elsewhere or unreadable."""
        return None

    def transaction_bound(self) -> tuple[str, list[Any]]:
        """A column (its SQL and parameters) that, read in a transaction, has the server end
        that transaction if the client goes silent inside it, where it can (a claim under
        limits holds its queue's lock meanwhile; the lock's statement reads it): by default
        ``("", [])``, it cannot, or the session is bounded already (:meth:`bound_session`)."""
        return "", []

    def put_in_wal_mode(self) -> bool:
        """Put a database file with journal modes in WAL mode, unless the project chose its
        journal mode; whether it did (``DatabaseError`` if the database refused)."""
        return False

    def database_now(self) -> datetime | None:
        """The database server's clock (None if it cannot be read); not asked where the
        database's clock is this host's (:attr:`clock_is_hosts`)."""
        raise NotImplementedError

    def wake(self, queues: Iterable[str]) -> None:
        """Wake the workers of ``queues``, once the caller's transaction commits: the one way
        a wake-up is sent. Does nothing without LISTEN (or with it turned off)."""
        if self.listen:
            self.notify(queues)

    def notify(self, queues: Iterable[str]) -> None:
        """The database's own wake-up statement (drivers with ``supports_listen``)."""
        raise NotImplementedError

    def insert_jobs(self, rows: Sequence[Job], now: datetime) -> list[Job]:
        """The one insert of new jobs, on the caller's connection: ``rows`` in order, each
        with its id, but where a pending or running job of a row's name holds its unique
        key, that job (the row is not written). See :mod:`.inserts`.

        The workers of the queues that got a job due at ``now`` are woken when the
        caller's transaction commits.
        """
        return inserts.insert_jobs(self, rows, now)

    @property
    def insert_batch(self) -> int:
        """The most rows one insert statement carries: as many as the parameters the
        database binds allow (at most one a column)."""
        most = self.connection.features.max_query_params
        return 1000 if most is None else max(1, most // len(INSERTED_COLUMNS))

    def write_jobs(self, rows: Sequence[Job], now: datetime) -> list[int | None]:
        """Write ``rows`` in a statement per :attr:`insert_batch` rows, passing over those
        whose key a live job holds, and wake the workers of the queues of the due rows it
        wrote; the id of each row, None for one passed over."""
        ids: list[int | None] = []
        size = len(rows) if len(rows) == 1 else self.insert_batch
        adapt = self.adapter()
        for start in range(0, len(rows), size):
            batch = rows[start : start + size]
            text = partial(self.insert_text, len(batch))
            sql = self.text("insert_jobs", text) if len(batch) == 1 else text()
            params = [value for row in batch for value in inserted_values(row, adapt)]
            with self.hot_cursor() as cursor:
                cursor.execute(sql, params)
                ids += written_ids(batch, cursor.fetchall())
        written = zip(rows, ids, strict=True)
        self.wake(row.queue for row, job_id in written if job_id is not None and row.run_at <= now)
        return ids

    def insert_text(self, count: int) -> str:
        """An insert of ``count`` new jobs, their values as :func:`.inserted_values` gives
        them, that passes over a row whose key a live job holds and returns the others."""
        qn = self.qn
        columns = ", ".join(qn(column) for column in INSERTED_COLUMNS)
        one = (
            f"(%s, %s, %s, '{JobStatus.PENDING.value}', %s, %s, 0, 0, %s, '', '', %s, %s,"
            " %s, %s, %s, %s)"
        )
        returned = ", ".join(qn(column) for column in WRITTEN_COLUMNS)
        return (
            f"INSERT INTO {self.job_table} ({columns}) VALUES {', '.join([one] * count)}"
            f" ON CONFLICT DO NOTHING RETURNING {returned}"
        )

    # -- claiming -------------------------------------------------------------

    def candidate_sql(
        self, request: ClaimRequest, limit: int | None = None
    ) -> tuple[str, list[Any]]:
        """The statement that reads due jobs, in claim order (``limit``: the request's); its
        text built once (for claims of any names, once more)."""
        due, params = self.due_condition(request.queue, request.now, request.names)

        def build() -> str:
            columns = ", ".join(self.qn(column) for column in CANDIDATE_COLUMNS)
            return (
                f"SELECT {columns} FROM {self.job_table} WHERE {due}"
                f" ORDER BY {self.claim_order} LIMIT %s"
            )

        sql = self.text("candidates" + self.names_key(request.names), build)
        return sql, [*params, int(request.limit if limit is None else limit)]

    def claim_statement(self, request: ClaimRequest) -> tuple[str, list[Any]]:
        """The statement that finds the claim's rows (the one whose plan matters)."""
        sql, params = self.candidate_sql(request)
        return sql + self.lock_suffix, params

    def next_attempt_sql(self, table: str) -> str:
        """The claimed row's new attempt number.

        It follows both the job's counter and its highest attempt row, so a
        job whose counter was reset by hand does not reuse a number: an index
        probe on (job_id, number) that finds nothing in the common case.
        """
        qn, attempts = self.qn, self.attempt_table
        return (
            f"COALESCE((SELECT MAX(a.{qn('number')}) FROM {attempts} a"
            f" WHERE a.{qn('job_id')} = {table}.{qn('id')}"
            f" AND a.{qn('number')} > {table}.{qn('attempt')}), {table}.{qn('attempt')}) + 1"
        )

    def claim(self, request: ClaimRequest) -> list[ClaimedJob]:
        """Take up to ``request.limit`` due jobs; the claim commits before returning."""
        if request.limits is not None:
            return self.flow.claim_limited(request)[0]
        try:
            return self.claim_batch(request)
        except ROW_ERRORS:
            return self.claim_row_by_row(request)

    def claim_and_settle(
        self, request: ClaimRequest, settlements: Sequence[Settlement]
    ) -> tuple[list[ClaimedJob], Settled]:
        """Settle ``settlements`` and claim in one transaction: one commit for both.

        Returns the claimed jobs and what the settle wrote (see :meth:`settle`). A
        refused row (``ROW_ERRORS``) rolls both back: the caller settles
        apart and claims again, row by row.
        """
        if not settlements:
            return self.claim(request), Settled([])
        if request.limits is not None:
            claimed, settled = self.flow.claim_limited(request, settlements)
        else:
            with self.write_transaction():
                settled = self.settle_rows(settlements)
                claimed = self.claim_rows(request)
        return claimed, settled

    def claim_batch(self, request: ClaimRequest) -> list[ClaimedJob]:
        """The claim in one transaction: read, mark running, start the attempts."""
        with self.write_transaction():
            return self.claim_rows(request)

    def claim_rows(self, request: ClaimRequest) -> list[ClaimedJob]:
        """The claim's statements, inside the caller's transaction."""
        rows = self.read_candidates(request)
        return self.take(rows, request) if rows else []

    def read_candidates(self, request: ClaimRequest, limit: int | None = None) -> list[Candidate]:
        sql, params = self.candidate_sql(request, limit)
        with self.connection.cursor() as cursor:
            cursor.execute(sql + self.lock_suffix, params)
            return [Candidate(*row) for row in cursor.fetchall()]

    def claim_row_by_row(self, request: ClaimRequest) -> list[ClaimedJob]:
        """The claim after a refused write: each row in a savepoint, a refused one skipped.

        The read asks for as many more rows as were skipped, so rows that
        cannot be claimed never hide the rows behind them.
        """
        claimed: list[ClaimedJob] = []
        skipped: set[int] = set()
        with self.write_transaction():
            while len(claimed) < request.limit:
                wanted = request.limit - len(claimed)
                asked = wanted + len(skipped)
                read = self.read_candidates(request, asked)
                rows = [row for row in read if row.id not in skipped][:wanted]
                for row in rows:
                    taken = self.take_one(row, request)
                    claimed.extend(taken)
                    if not taken:
                        skipped.add(row.id)
                if not rows or len(read) < asked:
                    break
        return claimed

    def take_one(self, row: Candidate, request: ClaimRequest) -> list[ClaimedJob]:
        """Claim one row in a savepoint; skip it if the database refuses, and tell the
        request's ``refused`` (the caller reports it: ``db/`` imports nothing above it)."""
        try:
            with transaction.atomic(using=self.using):
                return self.take([row], request)
        except ROW_ERRORS as exc:
            if request.refused is not None:
                request.refused(row.id, exc)
            return []

    def take(self, rows: Sequence[Candidate], request: ClaimRequest) -> list[ClaimedJob]:
        """Mark ``rows`` running if they are still due and start their attempts.

        Runs inside the claim's transaction. Returns the rows it claimed, in
        the order given.
        """
        return self.claimed(rows, self.mark_running([row.id for row in rows], request), request)

    def claimed(
        self, rows: Sequence[Candidate], marked: Mapping[int, MarkedRow], request: ClaimRequest
    ) -> list[ClaimedJob]:
        """The jobs of ``rows`` that ``marked`` says were marked running, their attempts
        started (inside the claim's transaction)."""
        claimed = [
            ClaimedJob(
                id=row.id,
                name=row.name,
                queue=row.queue,
                raw_payload=row.payload,
                attempt=marked[row.id].attempt,
                attempts_used=marked[row.id].attempts_used,
                max_attempts=row.max_attempts,
                owner=request.owner,
                lease_expires_at=request.expires_at,
                holds_slot=request.limits is not None,
                trace_context=row.trace_context,
                run_at=self.read_time(row.run_at),
                claimed_at=request.now,
            )
            for row in rows
            if row.id in marked
        ]
        if claimed:
            self.start_attempts(claimed, request.now)
        return claimed

    def mark_running(self, ids: Sequence[int], request: ClaimRequest) -> dict[int, MarkedRow]:
        """One UPDATE, guarded by the read's conditions; job id -> its new attempt numbers."""
        sql, params = self.mark_running_sql(ids, request)
        with self.hot_cursor() as cursor:
            cursor.execute(sql, params)
            return {marked.id: marked for marked in map(MarkedRow._make, cursor.fetchall())}

    def mark_running_sql(self, ids: Sequence[int], request: ClaimRequest) -> tuple[str, list[Any]]:
        qn, job = self.qn, self.job_table
        due, due_params = self.due_condition(request.queue, request.now, request.names)
        placeholders = self.placeholders(len(ids))
        sql = (
            f"UPDATE {job} SET {qn('status')} = '{JobStatus.RUNNING.value}',"
            f" {qn('lease_owner')} = %s, {qn('lease_expires_at')} = %s, {qn('started_at')} = %s,"
            f" {qn('attempt')} = {self.next_attempt_sql(job)},"
            f" {qn('attempts_used')} = {qn('attempts_used')} + 1"
            f" WHERE {qn('id')} IN ({placeholders}) AND {due}"
            f" RETURNING {qn('id')}, {qn('attempt')}, {qn('attempts_used')}"
        )
        stamp = [request.owner, self.adapt(request.expires_at), self.adapt(request.now)]
        return sql, [*stamp, *ids, *due_params]

    def start_attempts(self, claimed: Sequence[ClaimedJob], now: datetime) -> None:
        """Insert the attempt rows of ``claimed``, in one statement."""
        qn = self.qn
        columns = ", ".join(qn(c) for c in ("job_id", "number", "owner", "started_at", "error"))
        values = ", ".join(["(%s, %s, %s, %s, '')"] * len(claimed))
        params: list[Any] = []
        for job in claimed:
            params += [job.id, job.attempt, job.owner, self.adapt(now)]
        with self.hot_cursor() as cursor:
            cursor.execute(f"INSERT INTO {self.attempt_table} ({columns}) VALUES {values}", params)

    # -- after the claim: every write fenced by owner and attempt --------------

    def settle(self, settlements: Sequence[Settlement]) -> Settled:
        """Write many attempts' ends at once.

        Each job row changes only while it is running under the
        settlement's owner and attempt; its open attempt row is closed with
        the outcome. A settlement fenced out changes nothing and is returned
        in ``lost``. A job with a cancel request ends cancelled unless its
        settlement succeeded (:meth:`settled_status_sql`): those are returned
        in ``cancelled``.
        """
        if not settlements:
            return Settled([])
        with self.write_transaction():
            settled = self.settle_rows(settlements)
        return settled

    def follow(self, ids: Collection[int], now: datetime) -> Followed:
        """Once a settle has committed: the steps of the ends it wrote of jobs in a workflow
        (``Settled.to_follow``; :meth:`.workflows.Workflows.ended`), in a transaction of
        their own, which the worker takes off its claim path (:mod:`django_jobs.worker.
        follower`). A crash in between, or steps the database refuses (returned as
        ``deferred``), leave them to the leader (:meth:`.workflows.Workflows.repair`): the
        settle has been written all the same."""
        if not ids:
            return Followed()
        try:
            return self.workflows.ended(ids, now, own_transaction=True)
        except DatabaseError as exc:
            return Followed(deferred=sorted(ids), error=f"{exc!r}"[:500])

    def settle_rows(self, settlements: Sequence[Settlement]) -> Settled:
        """The settle's statements, inside the caller's transaction."""
        raise NotImplementedError

    def assigned(self, target: str, column: str) -> str:
        """``column`` as an UPDATE of ``target`` assigns it: named with ``target`` where the
        database's UPDATE of a join asks it (:attr:`assigns_qualified`)."""
        return f"{target}.{self.qn(column)}" if self.assigns_qualified else self.qn(column)

    def settled_columns_sql(self, target: str, source: str) -> str:
        """The ``SET`` clauses of a settle for the outcome columns, from ``source`` (``v``).

        ``cancel_job()`` may have asked while the attempt ran, after the last
        renewal that would have carried the request back: whatever the
        attempt did short of succeeding, the job then ends cancelled, now,
        with the attempt's error, and is not retried.
        """
        qn, set_ = self.qn, partial(self.assigned, target)
        requested = (
            f"{target}.{qn('cancel_requested_at')} IS NOT NULL"
            f" AND {source}.status <> '{JobStatus.SUCCEEDED.value}'"
        )
        return (
            f"{set_('status')} = CASE WHEN {requested} THEN '{JobStatus.CANCELLED.value}'"
            f" ELSE {source}.status END,"
            f" {set_('run_at')} = COALESCE({source}.run_at, {target}.{qn('run_at')}),"
            f" {set_('finished_at')} = CASE WHEN {requested} THEN {source}.ended_at"
            f" ELSE COALESCE({source}.finished_at, {target}.{qn('finished_at')}) END,"
            f" {set_('last_error')} = CASE WHEN {requested} THEN {source}.error"
            f" ELSE COALESCE({source}.last_error, {target}.{qn('last_error')}) END"
        )

    def joined_update(
        self, table: str, columns: Sequence[str], count: int, set_: str, where: str
    ) -> str:
        """An UPDATE of ``table`` (named ``t``) joined to ``count`` rows of bound values of
        ``columns`` (named ``v``), in the database's own form: ``set_`` its ``SET``
        clauses, ``where`` the rows it writes. The settle of a database without one
        statement for it (SQLite, MariaDB)."""
        raise NotImplementedError

    def settle_jobs_sql(self, settlements: Sequence[Settlement]) -> tuple[str, list[Any]]:
        """The UPDATE of the job rows ``settlements`` end, each fenced (:meth:`joined_update`)."""
        qn, set_ = self.qn, partial(self.assigned, "t")
        assignments = (
            f"{self.settled_columns_sql('t', 'v')},"
            f" {set_('attempts_used')} = t.{qn('attempts_used')} - v.give_back,"
            f" {set_('result')} = COALESCE(v.result, t.{qn('result')}),"
            f" {set_('lease_owner')} = NULL, {set_('lease_expires_at')} = NULL"
        )
        fenced = (
            f"t.{qn('id')} = v.id AND t.{qn('lease_owner')} = v.owner"
            f" AND t.{qn('attempt')} = v.attempt AND {self.running_guard('t')}"
        )
        return self.update_from(
            self.job_table, SETTLED_JOB_COLUMNS, settlements, assignments, fenced
        )

    def close_attempts(self, cursor: Any, done: Sequence[Settlement]) -> None:
        """Close the attempt rows of the settlements written (:meth:`joined_update`)."""
        set_ = partial(self.assigned, "t")
        closed = ", ".join(
            f"{set_(column)} = v.{source}"
            for column, source in (
                ("outcome", "outcome"),
                ("finished_at", "ended_at"),
                ("error", "error"),
                ("traceback", "traceback"),
            )
        )
        qn = self.qn
        still_open = f"t.{qn('job_id')} = v.job_id AND t.{qn('number')} = v.number"
        still_open += f" AND t.{qn('outcome')} IS NULL"
        cursor.execute(
            *self.update_from(self.attempt_table, CLOSED_COLUMNS, done, closed, still_open)
        )

    def update_from(
        self,
        table: str,
        columns: Sequence[str],
        settlements: Sequence[Settlement],
        set_: str,
        where: str,
    ) -> tuple[str, list[Any]]:
        """:meth:`joined_update` of ``table`` from the ``columns`` of ``settlements``."""
        rows = settlement_values(settlements, columns, self.adapt)
        sql = self.joined_update(table, columns, len(rows), set_, where)
        return sql, [value for row in rows for value in row]

    @staticmethod
    def settled(
        settlements: Sequence[Settlement],
        written: Iterable[tuple[int, int, str | None, bool | None]],
    ) -> Settled:
        """:class:`Settled` from the (id, attempt, new status, workflow_pending) rows a
        settle wrote."""
        rows = {(job_id, attempt): (status, marked) for job_id, attempt, status, marked in written}
        cancelled = frozenset(
            s.pair
            for s in settlements
            if s.pair in rows
            and rows[s.pair][0] == JobStatus.CANCELLED
            and s.status != JobStatus.CANCELLED
        )
        to_follow = frozenset(
            job_id
            for (job_id, _), (status, marked) in rows.items()
            if marked and status in FINISHED_STATUSES
        )
        return Settled([s for s in settlements if s.pair not in rows], cancelled, to_follow)

    def renew(
        self,
        owner: str,
        held: Pairs,
        now: datetime,
        lease_seconds: float,
        give_up_seconds: float = 0.0,
        progress: Mapping[int, Progress] | None = None,
    ) -> Renewed:
        """Extend the leases of ``held`` (job id, attempt) pairs in one statement.

        Fenced like every lease write, and only while the lease stands more
        than ``give_up_seconds`` (the heartbeat's margin) past ``now``: a
        lease that has lapsed, or reached the point where its worker gives it
        up, is never extended again. Returns the ids whose lease was extended
        (the others were lost), the new expiry, and the renewed jobs with a
        cancel request: the heartbeat's statement carries them back. The same
        statement writes the ``progress`` reports (by job id) of renewed jobs.
        """
        expires = lease_end(now, lease_seconds)
        if not held:
            return Renewed(set(), expires, set())
        rows = [RenewRow(job_id, attempt, (progress or {}).get(job_id)) for job_id, attempt in held]
        renewed = self.renew_leases(Renewal(owner, rows, now, expires, give_up_seconds))
        requested = {row.id for row in renewed if row.cancel_requested_at is not None}
        return Renewed({row.id for row in renewed}, expires, requested)

    def renew_leases(self, renewal: Renewal) -> list[RenewedRow]:
        """The renewal's statement (:meth:`renew_sql`); the leases it extended."""
        sql, params = self.renew_sql(renewal)
        with self.hot_cursor() as cursor:
            cursor.execute(sql, params)
            return [RenewedRow._make(row) for row in cursor.fetchall()]

    def renew_sql(self, renewal: Renewal) -> tuple[str, list[Any]]:
        """One fenced UPDATE of the renewal's leases that returns those it extended."""
        raise NotImplementedError

    def progress_assignments(self, target: str, source: str) -> str:
        """``SET`` clauses that take a row's progress from ``source`` where it reported."""
        qn = self.qn
        return ", ".join(
            f"{self.assigned(target, column)} = CASE WHEN {source}.reported THEN {source}.{field}"
            f" ELSE {target}.{qn(column)} END"
            for column, field in PROGRESS_COLUMNS
        )
