"""The watchdog that cuts off overrunning database calls, with no database."""

import threading
import time

from django_jobs.worker.deadlines import Watchdog
from tests.conftest import wait_until


def test_watchdog_cuts_off_a_block_past_its_deadline_and_only_that_one():
    watchdog = Watchdog()
    cut = threading.Event()
    spared = threading.Event()
    late = watchdog.arm(0.05, cut.set)
    early = watchdog.arm(0.05, spared.set)
    assert watchdog.disarm(early) is False  # ended in time: never cut
    wait_until(cut.is_set, timeout=2)
    assert watchdog.disarm(late) is True
    assert not spared.is_set()


def test_watchdog_an_earlier_deadline_wakes_it_from_a_later_one():
    watchdog = Watchdog()
    watchdog.arm(60, lambda: None)
    cut = threading.Event()
    watchdog.arm(0.05, cut.set)
    wait_until(cut.is_set, timeout=2)


def test_watchdog_keeps_no_entries_of_blocks_that_ended_in_time():
    watchdog = Watchdog()
    for _ in range(10_000):
        watchdog.disarm(watchdog.arm(30, lambda: None))
    assert len(watchdog._heap) <= 1


def test_watchdog_is_not_woken_by_blocks_due_after_its_next_wake():
    # Each database call arms a deadline: waking the watchdog's thread for each would cost
    # a thread switch per call, though it has nothing to do before the earliest one.
    watchdog = Watchdog()
    token = watchdog.arm(30, lambda: None)
    wait_until(lambda: 0 < watchdog._wakes_at < time.monotonic() + 31, timeout=2)  # asleep
    watchdog.disarm(token)  # as each call ends in time: the next one armed comes first
    notified = []
    notify = watchdog._cond.notify
    watchdog._cond.notify = lambda n=1: (notified.append(n), notify(n))  # type: ignore[method-assign]
    for _ in range(100):
        watchdog.disarm(watchdog.arm(30, lambda: None))
    assert notified == []
    cut = threading.Event()
    watchdog.arm(0.05, cut.set)  # due before its next wake: woken
    wait_until(cut.is_set, timeout=2)
    assert notified
