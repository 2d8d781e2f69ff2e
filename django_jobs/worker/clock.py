"""Clocks. Services take a :class:`Clock`; pure functions take ``now``.

Lease expiry must not depend on hosts' clocks agreeing, so the worker's
production clock follows the database server's clock. Nor may it depend on
this host's clock staying put: a step of the host's wall clock (an NTP
``makestep``, a virtual machine resumed, a ``date`` by hand) must not move
it. So it reads the database time now and then, and between readings it
advances on this host's monotonic clock, which no step of the wall clock
moves. Host time goes through :func:`django.utils.timezone.now`, so freezegun
works; the monotonic source is an argument, so tests step one and not the other.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Protocol, runtime_checkable

from django.utils import timezone

logger = logging.getLogger(__name__)

#: A re-measure whose round trip is longer (and longer than the kept one's) is not taken:
#: it could move the clock by half of it.
MAX_ROUND_TRIP_SECONDS = 0.5
#: The most readings one measure takes while their round trips are longer than that.
READINGS = 3

#: Where the database's clock is this host's (SQLite): how far the host's wall clock may run
#: ahead of the carried clock and still be followed at once. A clock being slewed (NTP
#: gaining on a lagging clock; chrony may slew by up to 8 %) drifts by a few milliseconds
#: a second, and the jobs stamped "now" on it are due now; a larger jump is a step, which
#: waits for the next re-measure.
SLEW_BOUND = timedelta(seconds=1)

#: A re-measure that moves the clock further than this (the database's clock was
#: stepped, or this host's monotonic clock drifted that far) is logged.
LOGGED_CORRECTION = timedelta(seconds=1)


@runtime_checkable
class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware (UTC)."""
        ...


class SystemClock:
    """The host's clock."""

    def now(self) -> datetime:
        return timezone.now()


@dataclass(frozen=True)
class Anchor:
    """One measure: the database's time halfway through its round trip, and this
    host's monotonic reading then."""

    database_at: datetime
    monotonic: float
    round_trip: float  # seconds, on the monotonic clock

    def at(self, monotonic: float) -> datetime:
        """The database's time at ``monotonic``, as this measure tells it."""
        return self.database_at + timedelta(seconds=monotonic - self.monotonic)


class DatabaseClock:
    """The database's time, carried forward on this host's monotonic clock.

    The database's clock is measured on first use, on the calling thread.
    After that, :meth:`now` never waits for the database: every
    ``refresh_seconds`` (of monotonic time) it starts a re-measure on a thread
    of its own and goes on with the last measure, which it also keeps when a
    re-measure fails or times out (the heartbeat reads this clock, and a
    database outage must not stop it). A step of this host's wall clock moves
    nothing; a re-measure corrects the drift between the two machines' clocks.

    It never goes backwards: when a re-measure puts it earlier than a time it
    has returned (the database's clock was stepped back, or this host's
    monotonic clock ran fast), it stands still until the database's time
    catches up. On SQLite the database's clock is this host's wall clock
    (``follows_host``): a step of it is taken at the next re-measure, and a
    slew (a wall clock gaining less than :data:`SLEW_BOUND` on the carried
    one) at once, so a job stamped "now" on it is due now.
    """

    def __init__(
        self,
        using: str = "default",
        refresh_seconds: float = 60.0,
        host: Clock | None = None,
        timeout_seconds: float = 5.0,
        read: Callable[[], datetime | None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        follows_host: bool | None = None,
    ) -> None:
        self.using = using
        # None: the driver says, on first use (its ``clock_is_hosts``); False when ``read``
        # is given.
        self.follows_host = follows_host if follows_host is not None or read is None else False
        self.host: Clock = host or SystemClock()
        self.read = read or self._read_database
        self.monotonic = monotonic
        self.refresh_seconds = refresh_seconds
        self.timeout_seconds = timeout_seconds
        self._anchor: Anchor | None = None
        self._offset: timedelta | None = None  # the kept measure's, from the host's wall clock
        self._latest: datetime | None = None  # the latest time returned: none is earlier
        self._measured_at: float | None = None  # monotonic: when the last measure was tried
        self._measuring: threading.Thread | None = None
        self._lock = threading.Lock()

    def now(self) -> datetime:
        # Read by every handler thread several times a job: one taking of the lock each.
        # Measured at 16 threads of no-op jobs, the second one, for the staleness alone,
        # was where the threads queued (py-spy: 9 % of the worker's samples on the two).
        if self._anchor is None:
            self.measure()
        if self.follows_host is None:
            from ..db import get_driver

            self.follows_host = get_driver(self.using).clock_is_hosts
        with self._lock:
            stale = self._stale()
            assert self._anchor is not None
            now = self._anchor.at(self.monotonic())
            if self.follows_host:
                now = self.slewed(now)
            if self._latest is not None and now < self._latest:
                now = self._latest
            self._latest = now
        if stale:
            self._remeasure_in_background()
        return now

    def slewed(self, carried: datetime) -> datetime:
        """The host's wall clock where it runs ahead of ``carried`` by less than
        :data:`SLEW_BOUND` (a slew), else ``carried`` (a step waits for a re-measure)."""
        wall = self.host.now()
        return wall if timedelta(0) < wall - carried < SLEW_BOUND else carried

    def _stale(self) -> bool:
        """With the lock held: a refresh period has passed since the last measure was
        tried, and none is under way."""
        if self._measuring is not None and self._measuring.is_alive():
            return False
        return (
            self._measured_at is None or self.monotonic() - self._measured_at > self.refresh_seconds
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
                self._measured_at = self.monotonic()
            logger.warning(
                "could not read the database clock (%s: %s); keeping the last measure",
                type(exc).__name__,
                exc,
                extra={"event": "clock_measure_failed"},
            )
        finally:
            connections.close_all()

    def _read_database(self) -> datetime | None:
        from ..db import get_driver
        from .deadlines import deadline

        driver = get_driver(self.using)
        if driver.clock_is_hosts:
            return None  # the host's own clock: see measure()
        with deadline(self.timeout_seconds, self.using, "reading the database clock"):
            return driver.database_now()

    def measure(self) -> timedelta:
        """Read the database's clock; return its offset from this host's wall clock.

        The reading is taken to fall halfway through its round trip, timed on
        the monotonic clock, so a measure is wrong by up to half of it. A reading
        whose round trip is longer than :data:`MAX_ROUND_TRIP_SECONDS` (the
        first one opens the connection, a thread stalls) is read again at once,
        up to :data:`READINGS` times in all, and the shortest is kept. A
        re-measure whose round trip is still longer than both that and the kept
        measure's keeps the last measure. The offset is for the record:
        :meth:`now` does not read the wall clock.
        """
        measured, db_now, host_midpoint = self._reading()
        for _ in range(READINGS - 1):
            if measured.round_trip <= MAX_ROUND_TRIP_SECONDS:
                break
            again = self._reading()
            if again[0].round_trip < measured.round_trip:
                measured, db_now, host_midpoint = again
        with self._lock:
            self._measured_at = self.monotonic()
            kept = self._anchor
            if kept is not None and measured.round_trip > max(
                MAX_ROUND_TRIP_SECONDS, kept.round_trip
            ):
                logger.info(
                    "database clock re-measure kept the last measure: its round trip took %.2fs",
                    measured.round_trip,
                    extra={"event": "clock_measure_slow"},
                )
                assert self._offset is not None
                return self._offset
            self._anchor, self._offset = measured, db_now - host_midpoint
        if kept is not None:
            log_correction(measured.database_at - kept.at(measured.monotonic))
        return db_now - host_midpoint

    def _reading(self) -> tuple[Anchor, datetime, datetime]:
        """One reading of the database's clock: the measure it makes, the database's time
        and this host's wall clock halfway through."""
        before, host_before = self.monotonic(), self.host.now()
        db_now = self.read()
        after, host_after = self.monotonic(), self.host.now()
        host_midpoint = host_before + (host_after - host_before) / 2
        if db_now is None:  # the database's clock is the host's, or cannot be read
            db_now = host_midpoint
        elif timezone.is_naive(db_now):
            db_now = timezone.make_aware(db_now, dt_timezone.utc)
        return Anchor(db_now, before + (after - before) / 2, after - before), db_now, host_midpoint

    @property
    def offset(self) -> timedelta | None:
        """The kept measure's offset of the database's clock from this host's wall clock."""
        return self._offset


def log_correction(correction: timedelta) -> None:
    """Log a re-measure that moved the clock far (forwards at once; backwards, the
    clock stands still until the database's time catches up)."""
    if abs(correction) > LOGGED_CORRECTION:
        logger.warning(
            "database clock re-measure moved the clock by %+.3fs",
            correction.total_seconds(),
            extra={"event": "clock_corrected"},
        )
