"""Claiming on databases with ``SELECT ... FOR UPDATE SKIP LOCKED`` (PostgreSQL, MySQL 8).

One transaction reads due rows, skipping those another worker has locked,
marks them running and writes their attempt rows. A failed claim rolls back
whole, so it never uses up an attempt.
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from ..models import Job
from .base import ClaimedJob, Claimer


class SkipLockedClaimer(Claimer):
    def claim(
        self, queue: str, owner: str, now: datetime, lease_seconds: float, limit: int = 1
    ) -> list[ClaimedJob]:
        expires = self.lease_end(now, lease_seconds)
        with transaction.atomic(using=self.using):
            rows = self.read_candidates(queue, now, limit, suffix=" FOR UPDATE SKIP LOCKED")
            if not rows:
                return []
            Job.objects.using(self.using).filter(id__in=[row[0] for row in rows]).update(
                **self.running_values(owner, now, expires)
            )
            return self._start_attempts(rows, owner, now, expires)
