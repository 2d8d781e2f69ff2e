"""Cron expressions read in a time zone: the next occurrence after an instant.

Five fields through croniter, plus ``@hourly``, ``@daily``, ``@midnight``,
``@weekly``, ``@monthly``, ``@yearly`` and ``@annually``. Occurrences are
found in the zone's wall time and then placed on the time line:

- one that falls in a skipped hour (clocks go forward) fires once, at the
  next valid instant (the moment the clocks jump);
- one that falls in a repeated hour (clocks go back) fires once, at its
  first passage.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from .exceptions import ScheduleError

ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
UTC = timezone.utc


def normalise_cron(cron: str) -> str:
    """The five-field form of ``cron``; :class:`ScheduleError` if it is not valid."""
    if not isinstance(cron, str) or not cron.strip():
        raise ScheduleError(f"a cron expression must be a non-empty string, got {cron!r}")
    text = " ".join(cron.split())
    text = ALIASES.get(text.lower(), text)
    if len(text.split()) != 5 or not croniter.is_valid(text):
        raise ScheduleError(
            f"{cron!r} is not a valid cron expression: use five fields "
            "(minute hour day-of-month month day-of-week) or an alias such as @daily"
        )
    return text


def get_zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise ScheduleError(f"unknown time zone {name!r}") from None


def _place(wall: datetime, zone: ZoneInfo) -> datetime:
    """The first instant whose wall time in ``zone`` is ``wall`` or, in a gap, just after it."""
    first = wall.replace(tzinfo=zone, fold=0)
    if first.astimezone(UTC).astimezone(zone).replace(tzinfo=None) == wall:
        return first.astimezone(UTC)  # exists (the first passage, if repeated)
    # In a gap: from the earliest reading, walk to the moment the clocks jump.
    instant = wall.replace(tzinfo=zone, fold=1).astimezone(UTC).replace(second=0, microsecond=0)
    while instant.astimezone(zone).replace(tzinfo=None) < wall:
        instant += timedelta(minutes=1)
    return instant


def next_occurrence(cron: str, zone_name: str, after: datetime) -> datetime:
    """The first occurrence of ``cron`` in ``zone_name`` strictly after ``after`` (aware, UTC)."""
    zone = get_zone(zone_name)
    wall = after.astimezone(zone).replace(tzinfo=None)
    # Start an hour of wall time back, so the repeated hour's first passage is not missed.
    iterator = croniter(normalise_cron(cron), wall - timedelta(hours=2))
    for _ in range(100_000):
        candidate = _place(iterator.get_next(datetime), zone)
        if candidate > after:
            return candidate
    raise ScheduleError(f"{cron!r} has no occurrence after {after.isoformat()}")


def occurrences(cron: str, zone_name: str, after: datetime, until: datetime) -> list[datetime]:
    """Every occurrence in ``(after, until]``, in order (for tests and previews)."""
    found: list[datetime] = []
    current = after
    while True:
        current = next_occurrence(cron, zone_name, current)
        if current > until:
            return found
        found.append(current)
