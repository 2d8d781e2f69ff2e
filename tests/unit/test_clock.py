"""The database clock with a host clock and a database reading the test controls."""

import threading
import time
from datetime import timedelta

from django_jobs.testing import FakeClock
from django_jobs.worker.clock import DatabaseClock
from tests.conftest import START, wait_until


class Database:
    """A database clock reading that runs ahead by ``offset``, or raises, or hangs."""

    def __init__(self, host: FakeClock, offset: timedelta) -> None:
        self.host = host
        self.offset = offset
        self.mode = "ok"
        self.reads = 0
        self.release = threading.Event()

    def __call__(self):
        self.reads += 1
        if self.mode == "raise":
            raise ConnectionError("database unreachable")
        if self.mode == "hang":
            self.release.wait(10)
            raise ConnectionError("database unreachable")
        return self.host.now() + self.offset


def settle(clock: DatabaseClock) -> None:
    """Wait for the clock's re-measure thread, so that it logs while the test still runs."""
    if clock._measuring is not None:
        clock._measuring.join(5)
        assert not clock._measuring.is_alive()


def test_clock_first_reading_measures_the_offset():
    host = FakeClock(START)
    database = Database(host, timedelta(seconds=7))
    clock = DatabaseClock(host=host, refresh_seconds=60, read=database)
    assert clock.now() == START + timedelta(seconds=7)
    assert database.reads == 1


def test_clock_keeps_its_offset_when_a_re_measure_fails():
    host = FakeClock(START)
    database = Database(host, timedelta(seconds=7))
    clock = DatabaseClock(host=host, refresh_seconds=60, read=database)
    clock.now()
    database.mode = "raise"
    host.advance(61)
    assert clock.now() == host.now() + timedelta(seconds=7)  # no raise: the last offset
    wait_until(lambda: database.reads == 2)
    settle(clock)
    assert clock.offset == timedelta(seconds=7)


def test_clock_never_waits_for_a_hung_re_measure():
    host = FakeClock(START)
    database = Database(host, timedelta(seconds=-3))
    clock = DatabaseClock(host=host, refresh_seconds=60, read=database)
    clock.now()
    database.mode = "hang"
    host.advance(61)
    started = time.monotonic()
    for _ in range(100):
        assert clock.now() == host.now() - timedelta(seconds=3)
    assert time.monotonic() - started < 0.5
    wait_until(lambda: database.reads == 2)
    assert database.reads == 2  # one re-measure at a time, however many readings
    database.release.set()
    settle(clock)


def test_clock_re_measures_in_the_background_and_takes_the_new_offset():
    host = FakeClock(START)
    database = Database(host, timedelta(seconds=1))
    clock = DatabaseClock(host=host, refresh_seconds=60, read=database)
    clock.now()
    database.offset = timedelta(seconds=2)
    host.advance(61)
    clock.now()
    wait_until(lambda: clock.offset == timedelta(seconds=2))
    assert clock.now() == host.now() + timedelta(seconds=2)


def test_clock_re_measure_with_a_long_round_trip_keeps_the_last_offset():
    """A reading halfway through a 5 s round trip could be 2.5 s off: it is not taken."""
    host = FakeClock(START)
    database = Database(host, timedelta(seconds=1))
    clock = DatabaseClock(host=host, refresh_seconds=60, read=database)
    clock.now()

    def slow():  # the answer arrives at once; the reply then takes 5 s to come back
        reading = host.now() + timedelta(seconds=1)
        host.advance(5)
        return reading

    clock.read = slow
    host.advance(61)
    clock.measure()
    assert clock.offset == timedelta(seconds=1)  # taken, it would be 1 - 2.5 s
    clock.read = database  # a quick one is taken again
    database.offset = timedelta(seconds=2)
    host.advance(61)
    clock.measure()
    assert clock.offset == timedelta(seconds=2)
