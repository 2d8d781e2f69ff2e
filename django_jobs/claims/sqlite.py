"""Claiming on SQLite, which has no row locks: a guarded update.

The transaction takes the write lock up front (``BEGIN IMMEDIATE``): a
deferred transaction that reads and then writes gets "database is locked" at
once whatever the busy timeout, while an immediate one waits its turn. The
candidates are then claimed by one UPDATE whose WHERE repeats every condition
of the read (``Claimer.due_condition``); a row that no longer matches changes
nothing and is skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone

from django.core.checks import CheckMessage, Warning
from django.db import OperationalError, transaction

from .base import ClaimedJob, Claimer

logger = logging.getLogger(__name__)


class GuardedUpdateClaimer(Claimer):
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

    def check_configuration(self) -> list[CheckMessage]:
        options = self.connection.settings_dict.get("OPTIONS") or {}
        if str(options.get("transaction_mode", "")).upper() == "IMMEDIATE":
            return []
        return [
            Warning(
                "SQLite transactions are DEFERRED: a view that reads and then enqueues a job "
                "inside transaction.atomic() can get 'database is locked' while a worker writes.",
                hint="Set DATABASES[...]['OPTIONS'] = {'transaction_mode': 'IMMEDIATE', "
                "'timeout': 20}.",
                id="django_jobs.W001",
            )
        ]

    def database_now(self) -> datetime | None:
        # SQLite reads this host's clock, at millisecond resolution.
        with self.connection.cursor() as cursor:
            cursor.execute("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')")
            (value,) = cursor.fetchone()
        return datetime.strptime(value, "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=timezone.utc)

    def claim(
        self, queue: str, owner: str, now: datetime, lease_seconds: float, limit: int = 1
    ) -> list[ClaimedJob]:
        try:
            return super().claim(queue, owner, now, lease_seconds, limit)
        except OperationalError as exc:
            if "locked" not in str(exc):
                raise
            logger.info(
                "database is locked; nothing claimed this tick", extra={"event": "claim_busy"}
            )
            return []
