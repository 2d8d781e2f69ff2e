"""``jobs prune``: delete the expired finished jobs now, by the maintenance pass's rules.

The cut-off of each finished status is ``now`` minus its retention
(``DJANGO_JOBS["RETENTION"]``, or ``--older-than`` for this run); the rows go
through :mod:`django_jobs.maintenance.cleaner`'s batches (one short
transaction each, through the finished index, locked rows passed over), with
its rest between batches on SQLite. A dry run counts the same rows instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from django_jobs.db import Driver, get_driver
from django_jobs.maintenance.cleaner import (
    PRUNE_BATCH,
    InFinishedIndex,
    cutoff_for,
    prune_status,
)
from django_jobs.models import FINISHED_STATUSES, Job, JobStatus

DURATION_PART = re.compile(r"(\d+)([wdhms])")
UNIT_SECONDS = {"w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1}
DURATION_EXAMPLES = "e.g. 7d, 12h, 30m, 45s, 2w or 1d12h"


def parse_duration(text: str) -> timedelta:
    """``7d``, ``12h``, ``30m``, ``45s``, ``2w``, or parts together (``1d12h``); above zero.

    :class:`ValueError` with the reason for anything else.
    """
    spec = text.strip().lower()
    parts = DURATION_PART.findall(spec)
    if not spec or "".join(number + unit for number, unit in parts) != spec:
        raise ValueError(
            f"not a duration: {text!r}; give whole numbers with a unit (w, d, h, m, s), "
            f"{DURATION_EXAMPLES}"
        )
    try:
        duration = timedelta(seconds=sum(int(n) * UNIT_SECONDS[unit] for n, unit in parts))
    except OverflowError:
        raise ValueError(f"duration too long: {text!r}") from None
    if duration <= timedelta(0):
        raise ValueError(f"a duration must be more than zero, got {text!r}")
    return duration


@dataclass(frozen=True)
class StatusPruned:
    """What pruning did (or, in a dry run, would do) to one finished status."""

    status: str
    kept: timedelta | None  # None: kept forever, so nothing goes
    cutoff: datetime | None  # jobs finished before it go
    count: int


def prune_statuses(
    now: datetime,
    *,
    using: str,
    retention: Mapping[str, timedelta | None],
    statuses: Iterable[str] | None = None,
    older_than: timedelta | None = None,
    dry_run: bool = False,
    batch: int = PRUNE_BATCH,
) -> list[StatusPruned]:
    """Delete (or count) the expired jobs of each finished status, in the statuses' order.

    ``older_than`` replaces the retention of every status pruned, those kept
    forever included; ``statuses`` limits the run to those named.
    """
    chosen = set(statuses) if statuses is not None else None
    driver = get_driver(using)
    results = []
    for status in FINISHED_STATUSES:
        if chosen is not None and status.value not in chosen:
            continue
        kept = older_than or retention.get(status.value)
        if kept is None:
            results.append(StatusPruned(status.value, None, None, 0))
            continue
        cutoff = cutoff_for(now, kept)
        count = (
            count_expired(driver, status, cutoff)
            if dry_run
            else prune_status(driver, status, cutoff, batch)[0]
        )
        results.append(StatusPruned(status.value, kept, cutoff, count))
    return results


def count_expired(driver: Driver, status: JobStatus, cutoff: datetime) -> int:
    """How many ``status`` jobs finished before ``cutoff``: the rows a prune would delete."""
    return (
        Job.objects.using(driver.using)
        .filter(InFinishedIndex(), status=status, finished_at__lt=cutoff)
        .count()
    )
