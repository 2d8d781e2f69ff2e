"""Cron expressions read in a time zone: the next occurrence after an instant.

Five fields through croniter, plus ``@hourly``, ``@daily``, ``@midnight``,
``@weekly``, ``@monthly``, ``@yearly`` and ``@annually``. Occurrences are
found in the zone's wall time and then placed on the time line:

- one that falls in a skipped hour (clocks go forward) fires once, at the
  next valid instant (the moment the clocks jump);
- one that falls in a repeated hour (clocks go back) fires once, at its
  first passage.

:func:`validate_cron` is the check every entry point shares (the API, the
settings check, the admin form): it names the field that is wrong and refuses
an expression that no date matches (``0 0 30 2 *``).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, CroniterError, croniter

from .conf import CRON_MAX_LENGTH
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
FIELDS = (
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31"),
    ("month", "1-12 or jan-dec"),
    ("day-of-week", "0-7 or sun-sat"),
)
# Any date pattern a cron can name (a weekday of February 29th at worst) recurs
# within 40 years of any instant, so croniter's 50-year search settles whether
# an expression ever fires; the reference instant does not change the answer.
REFERENCE = datetime(2000, 1, 1)


def normalise_cron(cron: str) -> str:
    """The five-field form of ``cron``; :class:`ScheduleError` if it is not valid."""
    if not isinstance(cron, str) or not cron.strip():
        raise ScheduleError(f"a cron expression must be a non-empty string, got {cron!r}")
    if len(cron) > CRON_MAX_LENGTH:
        raise ScheduleError(
            f"a cron expression must be at most {CRON_MAX_LENGTH} characters (it is stored as "
            f"written), got {len(cron)}"
        )
    text = " ".join(cron.split())
    text = ALIASES.get(text.lower(), text)
    if len(text.split()) != 5:
        raise ScheduleError(
            f"{cron!r} is not a valid cron expression: use five fields "
            "(minute hour day-of-month month day-of-week) or an alias such as @daily"
        )
    if not croniter.is_valid(text):
        raise ScheduleError(f"{cron!r} is not a valid cron expression: {_field_problem(text)}")
    return text


def _field_problem(text: str) -> str:
    """Which field of a five-field expression croniter refuses, and why."""
    parts = text.split()
    for index, ((label, allowed), value) in enumerate(zip(FIELDS, parts, strict=True)):
        alone = " ".join(value if i == index else "*" for i in range(5))
        try:
            croniter.expand(alone)
        except CroniterError as exc:
            if "out of range" in str(exc) or "out of bands" in str(exc):
                return f"{label} {value!r} is out of range {allowed}"
            return f"{label} {value!r} is not valid (allowed: {allowed}, with * , - /)"
    return "its fields do not combine"


def validate_cron(cron: str) -> str:
    """The five-field form of a cron that can fire; :class:`ScheduleError` otherwise."""
    text = normalise_cron(cron)
    try:
        croniter(text, REFERENCE).get_next(datetime)
    except CroniterBadDateError:
        raise ScheduleError(
            f"{cron!r} never fires: no date matches its day-of-month, month and day-of-week "
            "(day-of-month and day-of-week combine with OR when both are set)"
        ) from None
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
    try:
        for _ in range(100_000):
            candidate = _place(iterator.get_next(datetime), zone)
            if candidate > after:
                return candidate
    except CroniterBadDateError:
        pass
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


def next_occurrences(cron: str, zone_name: str, after: datetime, count: int) -> list[datetime]:
    """The first ``count`` occurrences strictly after ``after``, in order (aware, UTC).

    For previews; :class:`ScheduleError` for a cron or zone that cannot be read.
    """
    found: list[datetime] = []
    current = after
    while len(found) < count:
        current = next_occurrence(cron, zone_name, current)
        found.append(current)
    return found
