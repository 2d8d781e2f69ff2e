"""A leader lease the database is not asked about: a worker that believes it leads.

Two workers with one each both run the leader's chores, as two processes would whose
leases overlapped (a clock far off, a pause at the wrong moment): what the chores' own
guarded updates must make harmless. And the lease as the database holds it, for the
process tests that follow it (and the process that holds it).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django_jobs.models import Leader
from django_jobs.worker import Worker
from django_jobs.worker.leader.leadership import Leadership


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


def lease_of(owner: str, now: datetime, expires_at: datetime | None = None) -> Leader:
    """The leader lease as ``driver.leader.lead`` leaves it, written by hand: epoch 3, taken five
    minutes before ``now``, until ``expires_at`` (by default 30 s after ``now``)."""
    return Leader.objects.create(
        name=Leader.DEFAULT,
        owner=owner,
        epoch=3,
        elected_at=now - timedelta(minutes=5),
        expires_at=now + timedelta(seconds=30) if expires_at is None else expires_at,
    )


def leader() -> Leader | None:
    """The leader lease as the database holds it, if one was ever taken."""
    return Leader.objects.filter(expires_at__isnull=False).first()


def pid_of(owner: str) -> int:
    """The process id in a worker's owner id (``host:pid:random``)."""
    return int(owner.split(":")[1])
