"""What every claimer does; the dialects differ only in how they lock.

A claim reads due rows, marks them running in one guarded UPDATE and inserts
their attempt rows, in one transaction. When a row's write is refused
(``IntegrityError``, ``DataError``: a row edited by hand, say), the claim is
tried again one row at a time, each in its own savepoint, so that row is
logged and skipped while the others are claimed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.core.checks import CheckMessage
from django.db import DataError, IntegrityError, connections, transaction

from ..models import Attempt, Job, JobStatus

logger = logging.getLogger(__name__)

CANDIDATE_COLUMNS = ("id", "name", "queue", "payload", "attempt", "attempts_used", "max_attempts")

# Errors that concern the data of one row, not the database: the claim skips that row.
ROW_ERRORS = (IntegrityError, DataError)


class Candidate(NamedTuple):
    """A due row as the claim's read returns it (the columns of ``CANDIDATE_COLUMNS``)."""

    id: int
    name: str
    queue: str
    payload: Any
    attempt: int
    attempts_used: int
    max_attempts: int


@dataclass(frozen=True)
class ClaimedJob:
    """A job this worker holds the lease on, as the claim read it."""

    id: int
    name: str
    queue: str
    raw_payload: Any
    attempt: int
    attempts_used: int
    max_attempts: int
    owner: str
    lease_expires_at: datetime


class Claimer:
    """Claims due jobs for one database alias."""

    # Appended to the candidate read: how the dialect keeps two claims apart.
    lock_suffix = ""

    def __init__(self, using: str = "default") -> None:
        self.using = using

    @property
    def connection(self) -> Any:
        return connections[self.using]

    def due_condition(self, queue: str, now: datetime) -> tuple[str, list[Any]]:
        """What makes a row claimable: the candidate read and the claim's UPDATE share it.

        The status is a literal so that the planner can match the partial
        claim index whatever the driver does with parameters.
        """
        qn = self.connection.ops.quote_name
        sql = (
            f"{qn('status')} = '{JobStatus.PENDING.value}'"
            f" AND {qn('queue')} = %s AND {qn('run_at')} <= %s"
            f" AND {qn('attempts_used')} < {qn('max_attempts')}"
        )
        return sql, [queue, self.connection.ops.adapt_datetimefield_value(now)]

    def candidate_sql(self, queue: str, now: datetime, limit: int) -> tuple[str, list[Any]]:
        """The statement that reads due jobs, in claim order."""
        qn = self.connection.ops.quote_name
        columns = ", ".join(qn(column) for column in CANDIDATE_COLUMNS)
        due, params = self.due_condition(queue, now)
        sql = (
            f"SELECT {columns} FROM {qn(Job._meta.db_table)} WHERE {due}"
            f" ORDER BY {qn('priority')} DESC, {qn('run_at')} ASC, {qn('id')} ASC"
            f" LIMIT %s"
        )
        return sql, [*params, int(limit)]

    def read_candidates(
        self, queue: str, now: datetime, limit: int, suffix: str = ""
    ) -> list[Candidate]:
        sql, params = self.candidate_sql(queue, now, limit)
        with self.connection.cursor() as cursor:
            cursor.execute(sql + suffix, params)
            return [Candidate(*row) for row in cursor.fetchall()]

    @contextmanager
    def write_transaction(self) -> Iterator[None]:
        """A transaction for a group of writes on the jobs tables."""
        with transaction.atomic(using=self.using):
            yield

    def database_now(self) -> datetime | None:
        """The database server's clock (None if it cannot be read)."""
        # PostgreSQL's CURRENT_TIMESTAMP is the start of the transaction.
        sql = (
            "SELECT clock_timestamp()"
            if self.connection.vendor == "postgresql"
            else "SELECT CURRENT_TIMESTAMP"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql)
            (value,) = cursor.fetchone()
        return value if isinstance(value, datetime) else None

    def check_configuration(self) -> list[CheckMessage]:
        """System-check messages about how the database is set up for jobs."""
        return []

    # -- claiming -------------------------------------------------------------

    def claim(
        self, queue: str, owner: str, now: datetime, lease_seconds: float, limit: int = 1
    ) -> list[ClaimedJob]:
        """Take up to ``limit`` due jobs of ``queue``; the claim commits before returning."""
        expires = self.lease_end(now, lease_seconds)
        try:
            with self.write_transaction():
                rows = self.read_candidates(queue, now, limit, self.lock_suffix)
                return self.take(rows, queue, owner, now, expires) if rows else []
        except ROW_ERRORS:
            return self.claim_row_by_row(queue, owner, now, expires, limit)

    def claim_row_by_row(
        self, queue: str, owner: str, now: datetime, expires: datetime, limit: int
    ) -> list[ClaimedJob]:
        """The claim after a refused write: each row in a savepoint, a refused one skipped.

        The read asks for as many more rows as were skipped, so rows that
        cannot be claimed never hide the rows behind them.
        """
        claimed: list[ClaimedJob] = []
        skipped: set[int] = set()
        with self.write_transaction():
            while len(claimed) < limit:
                wanted = limit - len(claimed)
                asked = wanted + len(skipped)
                read = self.read_candidates(queue, now, asked, self.lock_suffix)
                rows = [row for row in read if row.id not in skipped][:wanted]
                for row in rows:
                    taken = self.take_one(row, queue, owner, now, expires)
                    claimed.extend(taken)
                    if not taken:
                        skipped.add(row.id)
                if not rows or len(read) < asked:
                    break
        return claimed

    def take_one(
        self, row: Candidate, queue: str, owner: str, now: datetime, expires: datetime
    ) -> list[ClaimedJob]:
        """Claim one row in a savepoint; log and skip it if the database refuses."""
        try:
            with transaction.atomic(using=self.using):
                return self.take([row], queue, owner, now, expires)
        except ROW_ERRORS as exc:
            logger.warning(
                "job #%s cannot be claimed, skipped: %s: %s",
                row.id,
                type(exc).__name__,
                exc,
                extra={"event": "job_claim_failed", "job_id": row.id},
            )
            return []

    def take(
        self,
        rows: Sequence[Candidate],
        queue: str,
        owner: str,
        now: datetime,
        expires: datetime,
    ) -> list[ClaimedJob]:
        """Mark ``rows`` running if they are still due and start their attempts.

        Runs inside the claim's transaction. Returns the rows it claimed, in
        the order given.
        """
        started = self.mark_running([row.id for row in rows], queue, owner, now, expires)
        claimed = [
            ClaimedJob(
                id=row.id,
                name=row.name,
                queue=row.queue,
                raw_payload=row.payload,
                attempt=started[row.id][0],
                attempts_used=started[row.id][1],
                max_attempts=row.max_attempts,
                owner=owner,
                lease_expires_at=expires,
            )
            for row in rows
            if row.id in started
        ]
        if claimed:
            Attempt.objects.using(self.using).bulk_create(
                [
                    Attempt(job_id=job.id, number=job.attempt, owner=owner, started_at=now)
                    for job in claimed
                ]
            )
        return claimed

    def mark_running(
        self, ids: Sequence[int], queue: str, owner: str, now: datetime, expires: datetime
    ) -> dict[int, tuple[int, int]]:
        """One UPDATE, guarded by the read's conditions; job id -> (attempt, attempts_used).

        The new attempt number follows both the job's counter and its highest
        attempt row, so a job whose counter was reset by hand does not reuse
        a number.
        """
        sql, params = self.mark_running_sql(ids, queue, owner, now, expires)
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            if self.update_returns_rows:
                return {job_id: (attempt, used) for job_id, attempt, used in cursor.fetchall()}
            qn = self.connection.ops.quote_name
            placeholders = ", ".join(["%s"] * len(ids))
            cursor.execute(
                f"SELECT {qn('id')}, {qn('attempt')}, {qn('attempts_used')}"
                f" FROM {qn(Job._meta.db_table)} WHERE {qn('id')} IN ({placeholders})"
                f" AND {qn('status')} = '{JobStatus.RUNNING.value}'"
                f" AND {qn('lease_owner')} = %s AND {qn('lease_expires_at')} = %s",
                [*ids, owner, self.connection.ops.adapt_datetimefield_value(expires)],
            )
            return {job_id: (attempt, used) for job_id, attempt, used in cursor.fetchall()}

    @property
    def update_returns_rows(self) -> bool:
        """Whether the database has ``UPDATE ... RETURNING`` (PostgreSQL, SQLite 3.35+)."""
        connection = self.connection
        features = connection.features
        if hasattr(features, "can_return_rows_from_update"):  # Django 6.0+
            return bool(features.can_return_rows_from_update)
        if connection.vendor == "sqlite":
            return bool(features.can_return_columns_from_insert)  # SQLite 3.35+
        return connection.vendor == "postgresql"  # MySQL and MariaDB have none

    def mark_running_sql(
        self, ids: Sequence[int], queue: str, owner: str, now: datetime, expires: datetime
    ) -> tuple[str, list[Any]]:
        qn = self.connection.ops.quote_name
        adapt = self.connection.ops.adapt_datetimefield_value
        job, attempts = qn(Job._meta.db_table), qn(Attempt._meta.db_table)
        # The highest attempt row above the job's counter, else the counter: an
        # index probe on (job_id, number) that finds nothing in the common case.
        highest = (
            f"COALESCE((SELECT MAX({attempts}.{qn('number')}) FROM {attempts}"
            f" WHERE {attempts}.{qn('job_id')} = {job}.{qn('id')}"
            f" AND {attempts}.{qn('number')} > {job}.{qn('attempt')}), {job}.{qn('attempt')})"
        )
        due, due_params = self.due_condition(queue, now)
        placeholders = ", ".join(["%s"] * len(ids))
        returning = (
            f" RETURNING {qn('id')}, {qn('attempt')}, {qn('attempts_used')}"
            if self.update_returns_rows
            else ""
        )
        sql = (
            f"UPDATE {job} SET {qn('status')} = '{JobStatus.RUNNING.value}',"
            f" {qn('lease_owner')} = %s, {qn('lease_expires_at')} = %s, {qn('started_at')} = %s,"
            f" {qn('attempt')} = {highest} + 1,"
            f" {qn('attempts_used')} = {qn('attempts_used')} + 1"
            f" WHERE {qn('id')} IN ({placeholders}) AND {due}{returning}"
        )
        return sql, [owner, adapt(expires), adapt(now), *ids, *due_params]

    @staticmethod
    def lease_end(now: datetime, lease_seconds: float) -> datetime:
        return now + timedelta(seconds=lease_seconds)
