"""The database clock, with a host and a database reading the test controls.

The host has two clocks: a wall clock a test can step, as NTP or a resumed
virtual machine steps it, and a monotonic one that only moves forward, with time.
"""

import logging
import threading
import time
from datetime import timedelta

import pytest

from django_jobs.testing import FakeClock
from django_jobs.worker.clock import DatabaseClock
from tests.conftest import START, wait_until


class Host:
    """A wall clock and a monotonic clock: ``advance`` moves both, ``step`` the wall clock."""

    def __init__(self) -> None:
        self.wall = FakeClock(START)
        self.ticks = 1000.0

    def monotonic(self) -> float:
        return self.ticks

    def advance(self, seconds: float) -> None:
        self.ticks += seconds
        self.wall.advance(seconds)

    def step(self, seconds: float) -> None:
        self.wall.advance(seconds)

    def elapsed(self) -> float:
        return self.ticks - 1000.0


class Database:
    """A database's clock, ``offset`` from the true time and running ``rate`` times as fast
    as the host's monotonic clock; or a reading that raises, or hangs."""

    def __init__(self, host: Host, offset: timedelta) -> None:
        self.host = host
        self.offset = offset
        self.rate = 1.0
        self.mode = "ok"
        self.reads = 0
        self.release = threading.Event()

    def now(self):
        return START + self.offset + timedelta(seconds=self.host.elapsed() * self.rate)

    def __call__(self):
        self.reads += 1
        if self.mode == "raise":
            raise ConnectionError("database unreachable")
        if self.mode == "hang":
            self.release.wait(10)
            raise ConnectionError("database unreachable")
        return self.now()


def clock_of(host: Host, database: Database) -> DatabaseClock:
    return DatabaseClock(
        host=host.wall, refresh_seconds=60, read=database, monotonic=host.monotonic
    )


def settle(clock: DatabaseClock) -> None:
    """Wait for the clock's re-measure thread, so that it logs while the test still runs."""
    if clock._measuring is not None:
        clock._measuring.join(5)
        assert not clock._measuring.is_alive()


def test_clock_first_reading_measures_the_offset():
    host = Host()
    database = Database(host, timedelta(seconds=7))
    clock = clock_of(host, database)
    assert clock.now() == START + timedelta(seconds=7)
    assert database.reads == 1
    assert clock.offset == timedelta(seconds=7)


def test_clock_a_reading_is_placed_halfway_through_its_round_trip():
    host = Host()
    database = Database(host, timedelta(seconds=7))

    def answered_midway():  # 0.2 s to get there, 0.2 s to come back
        host.advance(0.2)
        reading = database.now()
        host.advance(0.2)
        return reading

    clock = DatabaseClock(
        host=host.wall, refresh_seconds=60, read=answered_midway, monotonic=host.monotonic
    )
    assert clock.now() == database.now()
    assert clock.offset == timedelta(seconds=7)


def test_clock_keeps_its_offset_when_a_re_measure_fails():
    host = Host()
    database = Database(host, timedelta(seconds=7))
    clock = clock_of(host, database)
    clock.now()
    database.mode = "raise"
    host.advance(61)
    assert clock.now() == database.now()  # no raise: the last measure, carried forward
    wait_until(lambda: database.reads == 2)
    settle(clock)
    assert clock.offset == timedelta(seconds=7)
    host.advance(30)
    assert clock.now() == database.now()
    assert database.reads == 2  # the next try is a refresh period after the failed one


def test_clock_never_waits_for_a_hung_re_measure():
    host = Host()
    database = Database(host, timedelta(seconds=-3))
    clock = clock_of(host, database)
    clock.now()
    database.mode = "hang"
    host.advance(61)
    started = time.monotonic()
    for _ in range(100):
        assert clock.now() == database.now()
    assert time.monotonic() - started < 0.5
    wait_until(lambda: database.reads == 2)
    assert database.reads == 2  # one re-measure at a time, however many readings
    database.release.set()
    settle(clock)


def test_clock_re_measures_in_the_background_and_takes_the_new_offset():
    host = Host()
    database = Database(host, timedelta(seconds=1))
    clock = clock_of(host, database)
    clock.now()
    database.offset = timedelta(seconds=2)
    host.advance(61)
    clock.now()
    wait_until(lambda: clock.offset == timedelta(seconds=2))
    assert clock.now() == database.now()


@pytest.mark.parametrize("step", [30, -30, 3600, -3600])
def test_clock_a_step_of_the_host_clock_does_not_move_it(step):
    """Between measures the clock advances on the monotonic clock alone."""
    host = Host()
    database = Database(host, timedelta(seconds=7))
    clock = clock_of(host, database)
    first = clock.now()
    host.advance(10)
    host.step(step)
    assert clock.now() == first + timedelta(seconds=10)
    host.advance(5)
    assert clock.now() == first + timedelta(seconds=15) == database.now()
    assert database.reads == 1  # the step did not make the measure look stale


@pytest.mark.parametrize("step", [30, -30])
def test_clock_a_re_measure_after_a_host_step_keeps_the_database_time(step):
    host = Host()
    database = Database(host, timedelta(seconds=7))
    clock = clock_of(host, database)
    clock.now()
    host.step(step)
    host.advance(61)
    clock.now()
    settle(clock)
    assert database.reads == 2
    assert clock.now() == database.now()
    assert clock.offset == timedelta(seconds=7 - step)  # the host's clock is what moved


def test_clock_re_measure_is_due_after_refresh_seconds_of_monotonic_time():
    host = Host()
    database = Database(host, timedelta(0))
    clock = clock_of(host, database)
    clock.now()
    host.step(3600)  # an hour on the wall clock is no refresh period
    clock.now()
    host.advance(59)
    clock.now()
    assert database.reads == 1
    host.advance(2)
    clock.now()
    wait_until(lambda: database.reads == 2)
    settle(clock)


def test_clock_a_re_measure_corrects_drift():
    """The database's clock runs 1 ms a second faster than this host's monotonic one."""
    host = Host()
    database = Database(host, timedelta(0))
    database.rate = 1.001
    clock = clock_of(host, database)
    clock.now()
    host.advance(60)
    assert clock.now() == START + timedelta(seconds=60)  # 60 ms behind the database
    clock.measure()
    assert clock.now() == database.now() == START + timedelta(seconds=60.06)


def test_clock_never_goes_backwards_it_waits_for_the_database_to_catch_up():
    """The database's clock was stepped back 5 s (or this host's monotonic clock ran
    5 s fast): the clock stands still until the database's time reaches it."""
    host = Host()
    database = Database(host, timedelta(seconds=7))
    clock = clock_of(host, database)
    clock.now()
    host.advance(10)
    reached = clock.now()
    assert reached == START + timedelta(seconds=17)
    database.offset = timedelta(seconds=2)
    clock.measure()
    assert clock.offset == timedelta(seconds=2)  # taken: it follows the database from here
    for _ in range(5):
        assert clock.now() == reached  # the database's time is still behind it
        host.advance(1)
    assert clock.now() == database.now() == reached
    host.advance(1)
    assert clock.now() == database.now() == reached + timedelta(seconds=1)


def test_clock_a_large_correction_is_logged(caplog):
    host = Host()
    database = Database(host, timedelta(0))
    clock = clock_of(host, database)
    clock.now()
    database.offset = timedelta(seconds=30)
    host.advance(61)
    with caplog.at_level(logging.WARNING, logger="django_jobs.worker.clock"):
        clock.now()
        settle(clock)
    [record] = [r for r in caplog.records if getattr(r, "event", "") == "clock_corrected"]
    assert "+30.000s" in record.getMessage()


def test_clock_re_measure_with_a_long_round_trip_keeps_the_last_offset():
    """A reading halfway through a 5 s round trip could be 2.5 s off: it is not taken."""
    host = Host()
    database = Database(host, timedelta(seconds=1))
    clock = clock_of(host, database)
    clock.now()

    def slow():  # the answer arrives at once; the reply then takes 5 s to come back
        reading = database.now()
        host.advance(5)
        return reading

    clock.read = slow
    host.advance(61)
    clock.measure()
    assert clock.offset == timedelta(seconds=1)  # taken, it would be 1 - 2.5 s
    assert clock.now() == database.now()
    clock.read = database  # a quick one is taken again
    database.offset = timedelta(seconds=2)
    host.advance(61)
    clock.measure()
    assert clock.offset == timedelta(seconds=2)
    assert clock.now() == database.now()


def test_clock_a_slow_first_reading_is_read_again_at_once():
    """The first reading also opens the connection: 20 s of it before the database answers
    (a loaded server) put the clock 10 s behind the database's, and every attempt a worker
    stamped for a minute looked 10 s older than it was. A reading that slow is read again
    at once, on the open connection, and the quick one is kept."""
    host = Host()
    database = Database(host, timedelta(seconds=3))
    readings = []

    def connects_first():
        if not readings:
            host.advance(20)  # connecting
        readings.append(database.now())
        return readings[-1]

    clock = DatabaseClock(
        host=host.wall, refresh_seconds=60, read=connects_first, monotonic=host.monotonic
    )
    assert clock.now() == database.now()
    assert len(readings) == 2
    assert clock.offset == timedelta(seconds=3)


def host_clock_of(host: Host) -> DatabaseClock:
    """The clock of a database whose clock is this host's (SQLite): nothing to read."""
    return DatabaseClock(
        host=host.wall,
        refresh_seconds=60,
        read=lambda: None,
        monotonic=host.monotonic,
        follows_host=True,
    )


def test_clock_on_the_hosts_clock_follows_a_slew_at_once():
    """NTP slewing a lagging wall clock makes it gain milliseconds a second on the monotonic
    clock: a job stamped "now" on it must be due at the worker's now, not a re-measure later."""
    host = Host()
    clock = host_clock_of(host)
    clock.now()
    for _ in range(10):
        host.advance(1)
        host.step(0.005)  # 5 ms a second
    assert clock.now() == host.wall.now()
    assert host.wall.now() - (START + timedelta(seconds=10)) == timedelta(seconds=0.05)


@pytest.mark.parametrize("step", [1, 30, 3600])
def test_clock_on_the_hosts_clock_waits_for_a_re_measure_to_take_a_step(step):
    host = Host()
    clock = host_clock_of(host)
    first = clock.now()
    host.advance(10)
    host.step(step)
    assert clock.now() == first + timedelta(seconds=10)


def test_clock_of_another_database_does_not_follow_the_hosts_slew():
    host = Host()
    database = Database(host, timedelta(0))
    clock = clock_of(host, database)
    first = clock.now()
    host.advance(10)
    host.step(0.05)
    assert clock.now() == first + timedelta(seconds=10) == database.now()
