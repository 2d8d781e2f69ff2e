"""The records the runtime and the database driver hand each other.

A :class:`ClaimedJob` is what a claim returns; a :class:`Settlement` is
what :func:`django_jobs.outcomes.decide` makes of an attempt's end, and what
the driver writes. Plain data: no database, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .models import AttemptOutcome, JobStatus


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

    @property
    def pair(self) -> tuple[int, int]:
        return (self.id, self.attempt)


@dataclass(frozen=True)
class Settlement:
    """One attempt's end, as the driver writes it.

    The job's row changes only while ``owner`` still holds ``attempt``; its
    lease is cleared. ``None`` in ``run_at``, ``finished_at`` or
    ``last_error`` keeps the column's value.
    """

    job_id: int
    owner: str
    attempt: int
    outcome: AttemptOutcome
    status: JobStatus
    ended_at: datetime
    error: str = ""
    run_at: datetime | None = None
    finished_at: datetime | None = None
    last_error: str | None = None
    give_back: bool = False  # released: the attempt is not charged
    result: str | None = None  # succeeded: the return value as JSON text; None keeps the column

    @property
    def pair(self) -> tuple[int, int]:
        return (self.job_id, self.attempt)


@dataclass(frozen=True)
class Settled:
    """What a settle wrote: the settlements fenced out, and those ended ``cancelled``.

    A job that ``cancel_job()`` asked to stop ends cancelled whatever its
    attempt did, unless it succeeded: the settle statement reads the request
    on the row it writes, so a request that the heartbeat had not yet carried
    back is honoured too. Its attempt keeps its own outcome and error.
    """

    lost: list[Settlement]
    cancelled: frozenset[tuple[int, int]] = frozenset()
