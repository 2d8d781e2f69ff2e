import pytest
from django.db import DataError, IntegrityError, InterfaceError, OperationalError, ProgrammingError

from django_jobs.db.outage import with_backoff


class FakeTime:
    def __init__(self):
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def monotonic(self) -> float:
        return self.now


def flaky(failures: int):
    calls = {"n": 0}

    def write():
        calls["n"] += 1
        if calls["n"] <= failures:
            raise OperationalError("server closed the connection")
        return "written"

    return write, calls


def test_with_backoff_retries_with_doubling_capped_waits(db_free_connection):
    time = FakeTime()
    write, calls = flaky(7)
    result = with_backoff(write, give_up_after=300, sleep=time.sleep, monotonic=time.monotonic)
    assert result == "written"
    assert time.sleeps == [1, 2, 4, 8, 16, 30, 30]


def test_with_backoff_gives_up_after_its_time_with_the_last_error(db_free_connection):
    time = FakeTime()
    write, calls = flaky(1000)
    with pytest.raises(OperationalError):
        with_backoff(write, give_up_after=20, sleep=time.sleep, monotonic=time.monotonic)
    assert sum(time.sleeps) == 20
    assert time.sleeps == [1, 2, 4, 8, 5]


def test_with_backoff_does_not_retry_other_errors(db_free_connection):
    def write():
        raise ValueError("a bug, not an outage")

    with pytest.raises(ValueError):
        with_backoff(write, give_up_after=20, sleep=pytest.fail)


@pytest.fixture
def db_free_connection(monkeypatch):
    """with_backoff closes a broken connection; these tests have none to close."""
    from django.db import connections

    monkeypatch.setattr(connections["default"], "close_if_unusable_or_obsolete", lambda: None)


@pytest.mark.parametrize("error", [DataError, IntegrityError, ProgrammingError])
def test_with_backoff_raises_errors_a_retry_cannot_fix_at_once(db_free_connection, error):
    time = FakeTime()
    calls = []

    def write():
        calls.append(1)
        raise error("the same on every try")

    with pytest.raises(error):
        with_backoff(write, give_up_after=300, sleep=time.sleep, monotonic=time.monotonic)
    assert (len(calls), time.sleeps) == (1, [])


@pytest.mark.parametrize("error", [OperationalError, InterfaceError])
def test_with_backoff_retries_errors_that_can_pass(db_free_connection, error):
    time = FakeTime()
    calls = []

    def write():
        calls.append(1)
        if len(calls) < 3:
            raise error("connection lost")
        return "written"

    assert with_backoff(write, give_up_after=300, sleep=time.sleep, monotonic=time.monotonic) == (
        "written"
    )
    assert time.sleeps == [1, 2]


def test_with_backoff_retries_at_once_on_a_new_connection_after_a_dropped_one(monkeypatch):
    """A server restart drops the connection: the first retry reconnects without waiting."""
    from django.db import connections

    wrapper = connections["default"]
    monkeypatch.setattr(wrapper, "connection", object())  # open, and then found broken
    monkeypatch.setattr(wrapper, "close_if_unusable_or_obsolete", lambda: None)

    def closes() -> None:
        monkeypatch.setattr(wrapper, "connection", None)

    monkeypatch.setattr(wrapper, "close_if_unusable_or_obsolete", closes)
    time = FakeTime()
    write, calls = flaky(3)
    assert with_backoff(write, give_up_after=300, sleep=time.sleep, monotonic=time.monotonic)
    assert (calls["n"], time.sleeps) == (4, [1, 2])  # at once, then the backoff goes on
