"""A leader lease the database is not asked about: a worker that believes it leads.

Two workers with one each both run the leader's chores, as two processes would whose
leases overlapped (a clock far off, a pause at the wrong moment): what the chores' own
guarded updates must make harmless.
"""

from __future__ import annotations

from datetime import datetime

from django_jobs.worker import Worker
from django_jobs.worker.leadership import Leadership


class ForcedLeadership(Leadership):
    def elect(self, now: datetime | None = None) -> bool:
        return True

    def acts(self, now: datetime | None = None) -> bool:
        return True

    def resign(self) -> None:
        pass


def believing_it_leads(worker: Worker) -> Worker:
    """``worker``, with a leadership that always says it leads."""
    old = worker.leadership
    worker.leadership = ForcedLeadership(
        worker.driver,
        worker.owner,
        clock=worker.clock,
        lease_seconds=old.lease.total_seconds(),
        call_timeout_seconds=old.chore_seconds,
    )
    return worker
