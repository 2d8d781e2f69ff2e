"""Clocks. Services take a :class:`Clock`; pure functions take ``now``.

Lease expiry must not depend on hosts' clocks agreeing, so the worker's
production clock follows the database server's clock: it reads the database
time now and then and corrects the host clock by the measured offset. Host
time goes through :func:`django.utils.timezone.now`, so freezegun works.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Protocol, runtime_checkable

from django.utils import timezone


@runtime_checkable
class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware (UTC)."""
        ...


class SystemClock:
    """The host's clock."""

    def now(self) -> datetime:
        return timezone.now()


class DatabaseClock:
    """The host's clock corrected by its measured offset from the database's.

    The offset is measured on first use and again every ``refresh_seconds``.
    On SQLite the database's clock is this host's system clock.
    """

    def __init__(
        self, using: str = "default", refresh_seconds: float = 60.0, host: Clock | None = None
    ) -> None:
        self.using = using
        self.host: Clock = host or SystemClock()
        self.refresh_seconds = refresh_seconds
        self._offset: timedelta | None = None
        self._measured_at: datetime | None = None
        self._lock = threading.Lock()

    def now(self) -> datetime:
        host_now = self.host.now()
        with self._lock:
            stale = self._measured_at is None or (
                abs((host_now - self._measured_at).total_seconds()) > self.refresh_seconds
            )
        if stale:
            self.measure()
            host_now = self.host.now()
        assert self._offset is not None
        return host_now + self._offset

    def measure(self) -> timedelta:
        """Read the database's clock and store its offset from this host's."""
        from .claims import get_claimer

        before = self.host.now()
        db_now = get_claimer(self.using).database_now()
        after = self.host.now()
        if db_now is None:
            offset = timedelta(0)
        else:
            if timezone.is_naive(db_now):
                db_now = timezone.make_aware(db_now, dt_timezone.utc)
            offset = db_now - (before + (after - before) / 2)
        with self._lock:
            self._offset = offset
            self._measured_at = after
        return offset

    @property
    def offset(self) -> timedelta | None:
        return self._offset
