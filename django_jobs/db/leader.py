"""The leader lease: one row per lease name, taken and renewed by a guarded update.

A part of the driver (``driver.leader``): :meth:`LeaderLease.lead` takes the
lease for a process, or renews it, only if that process holds it already or it
has lapsed; :meth:`LeaderLease.resign` ends it at a graceful stop, so another
process can take it at once. What the worker does with it:
:mod:`django_jobs.worker.leadership`.
"""

from __future__ import annotations

from datetime import datetime

from ..models import Leader
from .records import LeaderRow, lease_end
from .statements import Statements

#: The columns of a leader's first row.
LEADER_COLUMNS = ("name", "owner", "epoch", "elected_at", "expires_at")


class LeaderLease:
    """The leader lease on the driver's database."""

    def __init__(self, statements: Statements) -> None:
        self.statements = statements

    def lead(self, name: str, owner: str, now: datetime, lease_seconds: float) -> LeaderRow:
        """Take the leader lease ``name`` for ``owner``, or renew it, until ``now`` plus
        ``lease_seconds``; return the lease as it then stands, whoever holds it.

        A guarded update: it takes the lease only if ``owner`` holds it already or it
        has lapsed at ``now`` (the worker's reading of the database's clock). A new
        holder starts a new epoch; a renewal keeps it. The row is made on the first
        call. Round trips: the update, then the read of the row; the first call on an
        empty table adds an insert. The update is the lease's one write, so two
        processes never both take it.
        """
        statements = self.statements
        at, ends = statements.adapt(now), statements.adapt(lease_end(now, lease_seconds))
        # Each statement commits on its own, outside the caller's transaction if there is
        # none: a process cut off between an UPDATE and its COMMIT would leave the row
        # locked on the server, and every other process's try waiting on it, for as long
        # as the server takes to notice (TCP keepalives: minutes). The update is the one
        # write; the read after it only reports.
        with statements.connection.cursor() as cursor:
            cursor.execute(
                statements.text("lead", self.update_text),
                [owner, owner, at, ends, owner, name, owner, at],
            )
            if cursor.rowcount == 0 and not self.row(name):
                cursor.execute(self.insert_sql(), [name, owner, 1, at, ends])
        return self.row(name) or LeaderRow("", 0, None, None)

    def update_text(self) -> str:
        qn = self.statements.qn
        # Each assignment reads the row as it was: MariaDB and MySQL apply them left to
        # right and let later ones see earlier ones, so the owner is written last.
        return (
            f"UPDATE {qn(Leader._meta.db_table)} SET"
            f" {qn('epoch')} = CASE WHEN {qn('owner')} = %s THEN {qn('epoch')}"
            f" ELSE {qn('epoch')} + 1 END,"
            f" {qn('elected_at')} = CASE WHEN {qn('owner')} = %s THEN {qn('elected_at')}"
            " ELSE %s END,"
            f" {qn('expires_at')} = %s, {qn('owner')} = %s"
            f" WHERE {qn('name')} = %s AND ({qn('owner')} = %s"
            f" OR {qn('expires_at')} IS NULL OR {qn('expires_at')} <= %s)"
        )

    def insert_sql(self) -> str:
        """The first leader's row, unless another process has just written it."""
        return self.statements.insert_ignore_sql(Leader._meta.db_table, LEADER_COLUMNS)

    def row(self, name: str) -> LeaderRow | None:
        """The lease ``name`` as it stands; None before its first :meth:`lead`."""
        row = (
            Leader.objects.using(self.statements.using)
            .filter(name=name)
            .values_list("owner", "epoch", "elected_at", "expires_at")
            .first()
        )
        return None if row is None else LeaderRow(*row)

    def resign(self, name: str, owner: str, epoch: int, now: datetime) -> bool:
        """End ``owner``'s lease of epoch ``epoch`` at ``now``, so that another process
        can take it at once (a graceful stop); False if it no longer held it."""
        return bool(
            Leader.objects.using(self.statements.using)
            .filter(name=name, owner=owner, epoch=epoch)
            .update(expires_at=now)
        )
