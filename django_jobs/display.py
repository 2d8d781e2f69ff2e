"""How times and spans of time read, in the admin and the commands alike."""

from __future__ import annotations

from datetime import datetime, timedelta, tzinfo

from django.utils import timezone

#: ``2026-01-05 12:00:03 UTC``: to the second, with the zone's name.
TIME_FORMAT = "%Y-%m-%d %H:%M:%S %Z"


def format_time(value: datetime | None, zone: tzinfo | None = None) -> str:
    """A time to the second with its zone's name: in ``zone``, else the active time zone."""
    if value is None:
        return "-"
    return timezone.localtime(value, zone).strftime(TIME_FORMAT)


def format_age(age: timedelta | None) -> str:
    """How long ago, or how long waiting, in whole seconds: ``4 s``, ``3 min 5 s``; ``-``
    for None."""
    if age is None:
        return "-"
    return format_span(timedelta(seconds=max(int(age.total_seconds()), 0)), whole=True)


def format_span(span: timedelta, whole: bool = False) -> str:
    """``250 ms``, ``4.2 s``, ``42 s``, ``3 min 5 s``, ``3 h 5 min``, ``2 d 4 h``: two units
    at most; with ``whole``, whole seconds only."""
    seconds = max(span.total_seconds(), 0.0)
    if seconds < 1 and not whole:
        return f"{round(seconds * 1000)} ms"
    days, rest = divmod(int(seconds), 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h" if hours else f"{days} d"
    if hours:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    if minutes:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    return f"{seconds:.1f} s" if seconds < 10 and not whole else f"{int(seconds)} s"


def format_latency(seconds: float) -> str:
    """A claim's wait: milliseconds below a second, then a span."""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    return format_span_seconds(seconds)


def format_span_seconds(seconds: float) -> str:
    return format_span(timedelta(seconds=round(seconds)))
