"""The health of the jobs tables: what holds back the database's cleanup of their dead rows.

django-jobs lives in the project's own database, so it is exposed to the failure that
wears database queues down in production: a transaction left open elsewhere (a shell, a
stuck request, a forgotten ``BEGIN`` in a reporting tool) pins the snapshot horizon;
every job's claim and end leave dead row versions that vacuum (InnoDB's purge, on
MariaDB) may not remove while it is open; the jobs table and its indexes swell, and each
claim reads more of them, until the queue falls behind. :func:`read` says, where the
database can tell:

- how long the oldest transaction that holds the horizon back has been open, and which
  session it is (its pid, application name, state and its statement's start);
- the jobs tables' live and dead rows and when autovacuum last cleaned them (PostgreSQL),
  or InnoDB's history list length (MariaDB: the undo records purge has yet to remove);
- on every database, the recent claim latency: how long the last claims waited from their
  job's ``run_at`` (:class:`Pickup`), the first thing to grow as dead rows pile up.

:func:`problems` turns it into warnings, past ``DJANGO_JOBS["HEALTH_HORIZON_SECONDS"]``.
They are shown by ``jobs status``, the admin's dashboard and the system check W020 (which
``runjobs`` runs at start), and logged by the leader every few minutes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
from datetime import datetime, timedelta

from django.db import DatabaseError, connections, router, transaction
from django.utils import timezone

from .conf import settings
from .db.records import Health, Pickup
from .display import format_span, format_span_seconds
from .models import Attempt, Job

logger = logging.getLogger(__name__)

#: How often the leader reads the health and logs what is wrong (seconds).
LOG_SECONDS = 300
#: The claims the recent claim latency is read from: at most this many of the last ...
PICKUP_SAMPLES = 1000
#: ... that started within this many seconds.
PICKUP_SECONDS = 300


def read(using: str | None = None, now: datetime | None = None) -> Health:
    """The health of the jobs tables of ``using`` (the jobs' database), from its driver, and
    the recent claim latency; a database that does not answer gives a :class:`Health` that
    says so."""
    from .db import get_driver

    using = using or router.db_for_write(Job)
    driver = get_driver(using)
    # Inside a transaction (a test's, a check's), a savepoint keeps a refused read (no
    # privilege) from breaking it.
    inside = connections[using].in_atomic_block
    try:
        with transaction.atomic(using=using) if inside else contextlib.nullcontext():
            told = driver.read_health() if driver.tells_health else Health(told=False)
            return dataclasses.replace(told, pickup=recent_pickup(using, now or timezone.now()))
    except DatabaseError as exc:
        return Health(unknown=f"{type(exc).__name__}: {exc}".splitlines()[0][:200])


def recent_pickup(using: str, now: datetime) -> Pickup | None:
    """The claim latency of the last :data:`PICKUP_SAMPLES` attempts that started within
    :data:`PICKUP_SECONDS` of ``now``.

    Read by the attempts' primary key from the newest back (one index's end, however many
    finished rows the table holds), then kept to those recent enough. An earlier attempt
    of a job due again since (a retry's, a snooze's) would show a negative wait against the
    job's new ``run_at``, and is left out."""
    since = now - timedelta(seconds=PICKUP_SECONDS)
    rows = (
        Attempt.objects.using(using)
        .order_by("-id")
        .values_list("started_at", "job__run_at")[:PICKUP_SAMPLES]
    )
    waits = sorted(
        (started - due).total_seconds()
        for started, due in rows
        if started >= since and started >= due
    )
    if not waits:
        return None
    return Pickup(
        samples=len(waits),
        p50=percentile(waits, 0.50),
        p95=percentile(waits, 0.95),
        max=waits[-1],
    )


def percentile(ordered: list[float], fraction: float) -> float:
    """The nearest-rank percentile of an ordered, non-empty list."""
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def problems(health: Health, horizon_seconds: float | None = None) -> list[str]:
    """What is wrong, each a sentence with the offending session and what to do."""
    limit = float(settings.HEALTH_HORIZON_SECONDS if horizon_seconds is None else horizon_seconds)
    holder = health.holder
    if holder is None or holder.open_seconds < limit:
        return []
    open_for = format_span_seconds(holder.open_seconds)
    return [
        f"a transaction has been open for {open_for} ({holder.describe()}): while it is, the"
        " database cannot clean up the jobs tables' dead rows, and claims slow down as they"
        " pile up. End it"
        + (f" ({holder.ending})" if holder.ending else "")
        + " and find what left it open"
        + (f"; its last statement: {holder.query}" if holder.query else "")
    ]


def summary(health: Health, now: datetime) -> str:
    """One line of what the database tells (``jobs status``); "" where it tells nothing."""
    if health.unknown:
        return f"unknown ({health.unknown})"
    parts = []
    if health.told:
        if health.holder is not None:
            parts.append(
                f"oldest open transaction {format_span_seconds(health.holder.open_seconds)}"
                f" ({health.holder.describe()})"
            )
        else:
            parts.append("no open transaction holds back cleanup")
    for table in health.tables:
        vacuumed = (
            "never autovacuumed"
            if table.last_autovacuum is None
            else f"autovacuumed {format_span(now - table.last_autovacuum)} ago"
        )
        parts.append(
            f"{table.table} {table.live_rows:,} live / {table.dead_rows:,} dead rows, {vacuumed}"
        )
    if health.history_length is not None:
        parts.append(f"InnoDB history list length {health.history_length:,}")
    if health.pickup is not None:
        parts.append(health.pickup.describe())
    return "; ".join(parts)


def document(health: Health) -> dict[str, object]:
    """``health`` for ``jobs status --json``."""
    holder = health.holder
    return {
        "horizon_seconds": health.horizon_seconds,
        "holder": None if holder is None else vars(holder),
        "tables": [vars(table) for table in health.tables],
        "history_length": health.history_length,
        "unknown": health.unknown or None,
        "pickup": None if health.pickup is None else vars(health.pickup),
        "problems": problems(health),
    }


def log_problems(using: str | None = None) -> list[str]:
    """Read the health and log each problem (the leader's chore); the problems."""
    found = problems(read(using))
    for problem in found:
        logger.warning(
            "jobs tables: %s",
            problem,
            extra={"event": "jobs_table_health"},
        )
    return found
