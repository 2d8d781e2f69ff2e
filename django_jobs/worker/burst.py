"""When a burst worker (``runjobs --burst``) is done, and what it says while it waits.

A burst worker exits once no job on its queues is due (or due within a second)
or running, but for the jobs of names it does not know, which wait for a worker that
does. While
nothing is due but jobs still run (here, or on another worker whose lease
may have to run out first), it says once which jobs it waits for and until
when their leases hold; when it exits, it names the jobs it leaves for a
later run (a retry after its backoff, a job scheduled later).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from ..display import format_age, format_time
from ..models import Job, JobStatus, Queue
from ..registry import known_names
from .core import Parts

logger = logging.getLogger(__name__)

#: Jobs a line names one by one; the rest are counted.
NAMED = 5
#: A job due this soon is waited for, not left for a later run: its ``run_at`` was stamped
#: by the enqueuing host's clock, which may run a moment ahead of the worker's (the
#: database's).
DUE_SOON = timedelta(seconds=1)


def job_list(ids: Sequence[int]) -> str:
    """``#12, #13, #14``; past :data:`NAMED` ids, ``and 3 more``."""
    named = ", ".join(f"#{job_id}" for job_id in ids[:NAMED])
    rest = len(ids) - NAMED
    return f"{named} and {rest} more" if rest > 0 else named


def when(at: datetime, now: datetime) -> str:
    """``2026-01-05 12:00:30 UTC (in 28 s)``."""
    return f"{format_time(at)} (in {format_age(at - now)})"


class BurstCheck:
    """The drain check of one burst worker, and what it has said while it waits."""

    def __init__(self, parts: Parts) -> None:
        self.parts = parts
        self.waiting: set[int] = set()  # the running jobs the previous check waited for
        self.told: set[int] = set()  # the ones a line has named

    def jobs(self) -> Any:
        p = self.parts
        return Job.objects.using(p.using).filter(queue__in=list(p.queues))

    def due(self, now: datetime) -> Any:
        """The jobs a claim could take now or within :data:`DUE_SOON`: none of a paused
        queue's, nor of a name this process does not know (they wait for a worker that
        does)."""
        paused = Queue.objects.using(self.parts.using).paused().values("name")
        due = self.jobs().due(now + DUE_SOON).exclude(queue__in=paused)
        return due.filter(name__in=known_names())

    def drained(self, busy: bool) -> bool:
        """True when no job on the worker's queues is due or running (``busy``: a handler
        here holds a job), as one statement sees them. While it waits for running jobs
        only, say so once: at the second check that finds the same job running, so that
        the last jobs of a drain, which end before the next check, go unnamed."""
        p = self.parts
        now = p.clock.now()
        jobs = self.jobs()
        with p.deadline("the drain check"):
            # One statement first, so one snapshot: asked in two, a job settled from
            # running back to due between them would be seen in neither.
            if not (self.due(now) | jobs.running()).exists():
                self.waiting = set()
                return not busy
            if self.due(now).exists():
                self.waiting = set()
                return False
            running = list(
                jobs.running()
                .order_by("id")
                .values_list("id", "lease_owner", "lease_expires_at", named=True)[: NAMED + 1]
            )
            count = len(running) if len(running) <= NAMED else jobs.running().count()
        ids = {row.id for row in running}
        if (ids & self.waiting) - self.told:
            self.say_waiting(running, count, now)
            self.told |= ids
        self.waiting = ids
        return False

    def say_waiting(self, running: Sequence[Any], count: int, now: datetime) -> None:
        owner = self.parts.owner
        named = [
            f"#{row.id} here"
            if row.lease_owner == owner
            else f"#{row.id} on {row.lease_owner or 'no worker'}"
            + (f", lease until {when(row.lease_expires_at, now)}" if row.lease_expires_at else "")
            for row in running[:NAMED]
        ]
        more = f" and {count - NAMED} more" if count > NAMED else ""
        logger.info(
            "burst: nothing due; waiting for %s running job(s) to finish: %s%s",
            count,
            "; ".join(named),
            more,
            extra={"event": "burst_waiting", "job_ids": [row.id for row in running]},
        )

    def say_drained(self) -> None:
        """The exit line: nothing due or running; the jobs left for a later run, if any."""
        p = self.parts
        now = p.clock.now()
        later = self.jobs().filter(status=JobStatus.PENDING, run_at__gt=now)
        with p.deadline("the jobs due later"):
            first = later.order_by("run_at", "id").values_list(
                "id", "run_at", "attempts_used", named=True
            )[:1]
            first_row = first[0] if first else None
            count = later.count() if first_row is not None else 0
        left = ""
        if first_row is not None:
            what = f"job #{first_row.id}" + ("'s retry" if first_row.attempts_used else "")
            due = when(first_row.run_at, now)
            left = f"; left for a later run: {count} job(s), the first {what}, due at {due}"
        with p.deadline("the paused queues"):
            paused = sorted(
                Queue.objects.using(p.using)
                .paused()
                .filter(name__in=list(p.queues))
                .values_list("name", flat=True)
            )
        if paused:
            left += f"; paused, not waited for: {', '.join(paused)} (`jobs resume NAME`)"
        with p.deadline("the jobs of names not known"):
            unknown_rows = self.jobs().due(now).exclude(name__in=known_names())
            unknown = unknown_rows.count()
        if unknown:
            with p.deadline("the names not known"):
                ordered = unknown_rows.order_by("name").values_list("name", flat=True)
                names = list(ordered.distinct()[: NAMED + 1])
            left += (
                f"; {unknown} job(s) due of names this worker does not know, not waited for:"
                f" {', '.join(names[:NAMED])}"
                f"{' ...' if len(names) > NAMED else ''} (register each with @job"
                " in an installed app's jobs.py, which runjobs imports)"
            )
        logger.log(
            logging.WARNING if unknown else logging.INFO,
            "burst: nothing due or running on queues %s; exiting%s",
            ", ".join(p.queues),
            left,
            extra={
                "event": "burst_drained",
                "due_later": count,
                "paused": paused,
                "unknown_names": unknown,
            },
        )
