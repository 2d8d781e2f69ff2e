"""Clocks. Services take a :class:`Clock`; pure functions take ``now``.

Lease expiry must not depend on hosts' clocks agreeing, so the worker's
production clock follows the database server's clock: it reads the database
time now and then and corrects the host clock by the measured offset. Host
time goes through :func:`django.utils.timezone.now`, so freezegun works.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Protocol, runtime_checkable

from django.utils import timezone

logger = logging.getLogger(__name__)

#: A re-measure whose round trip is longer (and longer than the kept one's) is not taken:
#: it could move the offset by half of it.
MAX_ROUND_TRIP_SECONDS = 0.5
MAX_ROUND_TRIP = timedelta(seconds=MAX_ROUND_TRIP_SECONDS)


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

    The offset is measured on first use, on the calling thread. After that,
    :meth:`now` never waits for the database: every ``refresh_seconds`` it
    starts a re-measure on a thread of its own and goes on with the last
    offset, which it also keeps when a re-measure fails or times out (the
    heartbeat reads this clock, and a database outage must not stop it).
    On SQLite the database's clock is this host's system clock.
    """

    def __init__(
        self,
        using: str = "default",
        refresh_seconds: float = 60.0,
        host: Clock | None = None,
        timeout_seconds: float = 5.0,
        read: Callable[[], datetime | None] | None = None,
    ) -> None:
        self.using = using
        self.host: Clock = host or SystemClock()
        self.read = read or self._read_database
        self.refresh_seconds = refresh_seconds
        self.timeout_seconds = timeout_seconds
        self._offset: timedelta | None = None
        self._round_trip = timedelta(0)  # the kept measure's
        self._measured_at: datetime | None = None
        self._measuring: threading.Thread | None = None
        self._lock = threading.Lock()

    def now(self) -> datetime:
        host_now = self.host.now()
        if self._offset is None:
            self.measure()
            host_now = self.host.now()
        elif self._is_stale(host_now):
            self._remeasure_in_background()
        assert self._offset is not None
        return host_now + self._offset

    def _is_stale(self, host_now: datetime) -> bool:
        with self._lock:
            if self._measuring is not None and self._measuring.is_alive():
                return False
            return self._measured_at is None or (
                abs((host_now - self._measured_at).total_seconds()) > self.refresh_seconds
            )

    def _remeasure_in_background(self) -> None:
        with self._lock:
            if self._measuring is not None and self._measuring.is_alive():
                return
            self._measuring = threading.Thread(
                target=self._remeasure, name="django-jobs-clock", daemon=True
            )
            self._measuring.start()

    def _remeasure(self) -> None:
        from django.db import connections

        try:
            self.measure()
        except Exception as exc:
            with self._lock:  # try again after another refresh period
                self._measured_at = self.host.now()
            logger.warning(
                "could not read the database clock (%s: %s); keeping the last offset",
                type(exc).__name__,
                exc,
                extra={"event": "clock_measure_failed"},
            )
        finally:
            connections.close_all()

    def _read_database(self) -> datetime | None:
        from ..db import get_driver
        from .deadlines import deadline

        with deadline(self.timeout_seconds, self.using, "reading the database clock"):
            return get_driver(self.using).database_now()

    def measure(self) -> timedelta:
        """Read the database's clock and store its offset from this host's.

        The reading is taken to fall halfway through its round trip, so a
        measure is wrong by up to half of it. A re-measure whose round trip
        is longer than both :data:`MAX_ROUND_TRIP_SECONDS` and the kept
        measure's (a slow answer, a stalled thread) keeps the last offset.
        """
        before = self.host.now()
        db_now = self.read()
        after = self.host.now()
        round_trip = after - before
        if db_now is None:
            offset = timedelta(0)
        else:
            if timezone.is_naive(db_now):
                db_now = timezone.make_aware(db_now, dt_timezone.utc)
            offset = db_now - (before + round_trip / 2)
        with self._lock:
            self._measured_at = after
            if self._offset is not None and round_trip > max(MAX_ROUND_TRIP, self._round_trip):
                logger.info(
                    "database clock re-measure kept the last offset: its round trip took %.2fs",
                    round_trip.total_seconds(),
                    extra={"event": "clock_measure_slow"},
                )
                return self._offset
            self._offset, self._round_trip = offset, round_trip
        return offset

    @property
    def offset(self) -> timedelta | None:
        return self._offset
