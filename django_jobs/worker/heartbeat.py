"""The rules of a lease heartbeat, for one held job, as a small pure unit.

While a handler runs, its worker renews the lease every beat. A renewal that
fails (a transient database error, or no answer in time) is tried again
before the give-up point: after a beat or half the time left until that
point, whichever is less. The keeper gives up as soon as a renewal is
refused (another worker holds the lease, or the lease lapsed) or when the
lease is one beat from lapsing with no successful renewal, so that the
handler stops before anyone else can claim the job. No renewal is tried at
or after the give-up point.

Time is an argument: ``LeaseKeeper`` never reads a clock itself.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta


class Renewal(enum.Enum):
    RENEWED = "renewed"  # the fenced update matched: the lease is extended
    REFUSED = "refused"  # it matched no row: another worker holds the job
    FAILED = "failed"  # it raised: the database could not be asked


@dataclass
class LeaseKeeper:
    """When to renew one lease, and when to give it up."""

    beat_seconds: float
    expires_at: datetime
    next_beat_at: datetime
    gave_up: bool = False

    @classmethod
    def start(
        cls, claimed_at: datetime, expires_at: datetime, lease_seconds: float, beat_seconds: float
    ) -> LeaseKeeper:
        beat = min(beat_seconds, lease_seconds / 3)
        return cls(beat, expires_at, claimed_at + timedelta(seconds=beat))

    @property
    def beat(self) -> timedelta:
        return timedelta(seconds=self.beat_seconds)

    @property
    def give_up_at(self) -> datetime:
        """One beat before the lease would lapse."""
        return self.expires_at - self.beat

    def is_due(self, now: datetime) -> bool:
        return not self.gave_up and now >= self.next_beat_at

    def must_give_up(self, now: datetime) -> bool:
        """True once the lease is a beat from lapsing with no renewal."""
        return self.gave_up or now >= self.give_up_at

    def time_to_give_up(self, now: datetime) -> float:
        """Seconds a renewal try may take: it is cut off at the give-up point."""
        return max(0.0, (self.give_up_at - now).total_seconds())

    def record(self, outcome: Renewal, now: datetime, expires_at: datetime | None = None) -> bool:
        """Record a renewal's outcome; return False once the lease is given up."""
        if self.gave_up:
            return False
        if outcome is Renewal.RENEWED:
            assert expires_at is not None
            self.expires_at = expires_at
            self.next_beat_at = now + self.beat
        elif outcome is Renewal.REFUSED:
            self.gave_up = True
        else:
            left = max(self.give_up_at - now, timedelta(0))
            self.next_beat_at = now + min(self.beat, left / 2)
        if self.must_give_up(now) and outcome is not Renewal.RENEWED:
            self.gave_up = True
        return not self.gave_up

    def check(self, now: datetime) -> bool:
        """Give up if the deadline passed without a renewal; return False once given up."""
        self.gave_up = self.must_give_up(now)
        return not self.gave_up
