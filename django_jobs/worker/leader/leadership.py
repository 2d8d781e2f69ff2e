"""Which worker process leads, as this process sees it: the leader lease, taken and kept.

One process per database leads: it runs the chores that need doing once for everyone
(taking back expired leases, dead-lettering what has no attempt left, firing recurring
schedules, pruning finished jobs, sweeping stale workers); the others serve jobs only.
The lease is a row the driver takes and renews by a guarded update
(:meth:`~django_jobs.db.leader.LeaderLease.lead`), on the worker's clock (the database's, as
measured), for ``LEADER_LEASE_SECONDS``.

- The leader renews every third of the lease. The others try to take it every third
  of the lease too, and at the moment it lapses: a leader that died is followed within
  one lease of its last renewal.
- A chore has a deadline (a third of the lease at most), and a process acts as leader
  only while its lease holds past that deadline: when it cannot renew, it stops acting
  before the lease lapses, so it never acts while another may lead. A process that was
  stopped (SIGSTOP, a paused VM) past its lease finds, on waking, that it does not lead.
- A graceful stop ends the lease (:meth:`Leadership.resign`), so that another process
  takes over at its next try.

Nothing's correctness rests on this: every chore stays a guarded update, safe with two
processes that both believe they lead. The leader is there so that fifty processes do
not run fifty times the same queries.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from ...db import Driver
from ...db.records import LeaderRow
from ...display import format_time
from ...events import report_leader
from ...models import Leader
from ..clock import Clock
from ..deadlines import Deadlines

#: The one lease a database has today.
NAME = Leader.DEFAULT


class Leadership:
    """This process's view of the leader lease: whether it leads, and when to try again."""

    def __init__(
        self,
        driver: Driver,
        owner: str,
        *,
        clock: Clock,
        lease_seconds: float,
        call_timeout_seconds: float,
    ) -> None:
        self.driver = driver
        self.owner = owner
        self.clock = clock
        self.lease = timedelta(seconds=lease_seconds)
        # A chore's deadline, and so the margin by which a leader stops acting before its
        # lease lapses: the worker's call deadline, at most a third of the lease.
        self.chore_seconds = min(call_timeout_seconds, lease_seconds / 3)
        self.deadline = Deadlines(driver.using, self.chore_seconds)
        self.term: LeaderRow | None = None  # the lease this process holds, as last taken
        self.holds_until: datetime | None = None  # on this process's clock
        self.next_try: datetime | None = None
        self.seen: LeaderRow | None = None  # the lease as the last try found it

    @property
    def epoch(self) -> int | None:
        return self.term.epoch if self.term is not None else None

    def leads(self, now: datetime | None = None) -> bool:
        """True while this process holds the lease with room for one more chore."""
        if self.holds_until is None:
            return False
        now = now or self.clock.now()
        return now + timedelta(seconds=self.chore_seconds) < self.holds_until

    def acts(self, now: datetime | None = None) -> bool:
        """:meth:`leads`, saying once when a lease it could not renew runs too short to act
        on: from then on this process is not the leader, whatever the row says."""
        now = now or self.clock.now()
        if self.leads(now):
            return True
        if self.term is not None:
            lapses = format_time(self.holds_until) if self.holds_until else "once"
            report_leader("leader_stops_acting", self.owner, self.term.epoch, lapses=lapses)
            self.term = None
            self.holds_until = None
        return False

    def due(self, now: datetime) -> bool:
        """Time to renew the lease, or to try to take it."""
        return self.next_try is None or now >= self.next_try

    def elect(self, now: datetime | None = None) -> bool:
        """Take or renew the lease; True if this process leads. A failure (the database
        does not answer in time) is logged by the caller and keeps what it had: the
        lease held until now still holds until it lapses, and :meth:`leads` says so."""
        now = now or self.clock.now()
        third = self.lease / 3
        self.next_try = now + third  # a failed try waits as long as a lost one
        with self.deadline("the leader lease"):
            row = self.driver.leader.lead(NAME, self.owner, now, self.lease.total_seconds())
        self.seen = row
        if row.held_by(self.owner):
            self.took(row, now)
            return True
        self.lost(row)
        # Be there when the holder's lease lapses.
        if row.expires_at is not None and now < row.expires_at < self.next_try:
            self.next_try = row.expires_at
        return False

    def took(self, row: LeaderRow, now: datetime) -> None:
        if self.term is None or self.term.epoch != row.epoch:
            report_leader("leader_elected", self.owner, row.epoch)
        self.term = row
        self.holds_until = now + self.lease

    def lost(self, row: LeaderRow) -> None:
        """Another process holds the lease: if this one led, it no longer does."""
        if self.term is not None:
            holder = row.owner or "nobody"
            report_leader("leader_lost", self.owner, self.term.epoch, holder=holder, held=row.epoch)
        self.term = None
        self.holds_until = None

    def resign(self) -> None:
        """End this process's lease, if it holds one, so that another takes over now."""
        term = self.term
        if term is None:
            return
        self.term = None
        self.holds_until = None
        now = self.clock.now()
        with self.deadline("handing over the leader lease"):
            ended = self.driver.leader.resign(NAME, self.owner, term.epoch, now)
        if ended:
            report_leader("leader_resigned", self.owner, term.epoch)
