"""What every claimer does; the dialects differ only in how they lock."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.core.checks import CheckMessage
from django.db import connections, transaction

from ..models import Attempt, Job, JobStatus

logger = logging.getLogger(__name__)

CANDIDATE_COLUMNS = ("id", "name", "queue", "payload", "attempt", "attempts_used", "max_attempts")


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


class Claimer(ABC):
    """Claims due jobs for one database alias."""

    def __init__(self, using: str = "default") -> None:
        self.using = using

    @property
    def connection(self) -> Any:
        return connections[self.using]

    def candidate_sql(self, queue: str, now: datetime, limit: int) -> tuple[str, list[Any]]:
        """The statement that reads due jobs, in claim order.

        The status is a literal so that the planner can match the partial
        claim index whatever the driver does with parameters.
        """
        qn = self.connection.ops.quote_name
        columns = ", ".join(qn(column) for column in CANDIDATE_COLUMNS)
        sql = (
            f"SELECT {columns} FROM {qn(Job._meta.db_table)}"
            f" WHERE {qn('status')} = '{JobStatus.PENDING.value}'"
            f" AND {qn('queue')} = %s AND {qn('run_at')} <= %s"
            f" AND {qn('attempts_used')} < {qn('max_attempts')}"
            f" ORDER BY {qn('priority')} DESC, {qn('run_at')} ASC, {qn('id')} ASC"
            f" LIMIT %s"
        )
        return sql, [queue, self.connection.ops.adapt_datetimefield_value(now), int(limit)]

    def read_candidates(self, queue: str, now: datetime, limit: int, suffix: str = "") -> list:
        sql, params = self.candidate_sql(queue, now, limit)
        with self.connection.cursor() as cursor:
            cursor.execute(sql + suffix, params)
            return list(cursor.fetchall())

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

    @abstractmethod
    def claim(
        self, queue: str, owner: str, now: datetime, lease_seconds: float, limit: int = 1
    ) -> list[ClaimedJob]:
        """Take up to ``limit`` due jobs of ``queue``; the claim commits before returning."""

    def _start_attempts(
        self, rows: Sequence[Sequence[Any]], owner: str, now: datetime, expires: datetime
    ) -> list[ClaimedJob]:
        """Write the attempt rows of freshly claimed jobs (inside the claim's transaction)."""
        claimed = [
            ClaimedJob(
                id=row[0],
                name=row[1],
                queue=row[2],
                raw_payload=row[3],
                attempt=row[4] + 1,
                attempts_used=row[5] + 1,
                max_attempts=row[6],
                owner=owner,
                lease_expires_at=expires,
            )
            for row in rows
        ]
        Attempt.objects.using(self.using).bulk_create(
            [
                Attempt(job_id=job.id, number=job.attempt, owner=owner, started_at=now)
                for job in claimed
            ]
        )
        return claimed

    @staticmethod
    def lease_end(now: datetime, lease_seconds: float) -> datetime:
        return now + timedelta(seconds=lease_seconds)

    @staticmethod
    def running_values(owner: str, now: datetime, expires: datetime) -> dict[str, Any]:
        from django.db.models import F

        return {
            "status": JobStatus.RUNNING,
            "lease_owner": owner,
            "lease_expires_at": expires,
            "attempt": F("attempt") + 1,
            "attempts_used": F("attempts_used") + 1,
            "started_at": now,
        }
