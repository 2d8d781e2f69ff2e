"""When a dispatcher claims ahead, and how long a claimed job may wait for a thread."""

import threading
from typing import Any

from django_jobs.worker.ahead import (
    HOLD_SECONDS,
    MOST_AHEAD,
    Pace,
    Waiting,
    hold_seconds,
    stale,
)
from django_jobs.worker.dispatcher import BESIDE, MAIN


def test_pace_claims_ahead_only_once_jobs_have_run_and_were_short():
    pace = Pace(0.01)
    assert not pace.short  # nothing has run yet
    pace.add(0.001)
    assert pace.short
    pace.add(1.0)
    assert not pace.short  # one long job is enough to stop


def test_pace_after_a_job_waited_too_long_stays_slow_until_jobs_are_short_again():
    pace = Pace(0.01)
    pace.add(0.001)
    pace.slow(HOLD_SECONDS)
    runs = 0
    while not pace.short:
        pace.add(0.001)
        runs += 1
    assert 10 < runs < 30


def test_pace_holds_as_many_jobs_per_thread_as_run_while_a_claim_is_under_way():
    pace = Pace(0.01)
    pace.claimed(0.002)
    assert pace.ahead == 0  # no job has run yet: none held
    pace.add(0.004)
    assert pace.ahead == 1  # a job outlasts a claim: one a thread
    pace.average = 0.001
    assert pace.ahead == 2  # a claim takes two jobs' time
    pace.average = 0.0001
    assert pace.ahead == MOST_AHEAD  # however short the jobs, at most this many
    pace.average = 0.0
    assert pace.ahead == MOST_AHEAD
    pace.claimed(0.0)
    assert 0 < pace.claim_average < 0.002  # a running average of the claims
    pace.add(1.0)
    assert pace.ahead == 0  # long jobs: none held


def test_pace_with_a_bound_of_zero_never_claims_ahead():
    pace = Pace(0)
    pace.add(0.0)
    assert not pace.short


def test_hold_is_at_most_half_a_heartbeat():
    assert hold_seconds(60) == HOLD_SECONDS
    assert hold_seconds(0.2) == 0.1


def test_stale_counts_the_oldest_that_waited_longer_than_the_hold():
    waiting = [Waiting(since, None) for since in (1.0, 2.0, 3.0)]  # type: ignore[arg-type]
    assert stale(waiting, 1.5, now=lambda: 4.0) == 2
    assert stale(waiting, 5.0, now=lambda: 4.0) == 0


def test_a_limited_queue_claims_ahead_too_and_says_how_many_of_a_claim_would_wait():
    from django_jobs.worker.dispatcher import QueueState

    pace = Pace(0.01)
    pace.add(0.001)
    state = QueueState("limited", 2, pace, limited=True)
    assert state.capacity == 4  # the claim decides whether its limits leave room to spare
    assert state.ahead(4) == 2  # both threads free: 2 start now, 2 wait
    state.busy = 2
    assert state.ahead(2) == 2  # both threads busy: both wait
    state.busy = 1
    assert state.ahead(3) == 2


def test_two_claims_under_way_reserve_no_more_room_than_the_threads_may_hold():
    from django_jobs.worker.dispatcher import Dispatcher, QueueState

    pace = Pace(0.01)
    pace.add(0.001)
    pace.claimed(0.01)  # a claim takes ten jobs' time: as many ahead as it may hold
    state = QueueState("busy", 2, pace, overlapping=True)
    capacity = 2 * (1 + MOST_AHEAD)
    assert state.capacity == capacity
    half = capacity // 2
    parts: dict[str, Any] = dict.fromkeys(("claimer", "executor", "writer", "clock"))
    dispatcher = Dispatcher(state, **parts, using="default", hold=0.25)

    first = dispatcher.wait_for_room(threading.Event(), 1.0)
    assert first == half  # half the capacity: the other claim has the rest
    assert state.ahead(first, MAIN) == half - 2  # two start at once, the others wait
    with state.changed:
        assert dispatcher.room_beside() == 0  # the queue is not known to be busy yet
        state.saturated = True
        second = dispatcher.room_beside()
        assert second == capacity - half
    assert state.ahead(second, BESIDE) == second  # the first claim's jobs take the threads

    dispatcher.took(MAIN, [None] * first)  # type: ignore[list-item]
    assert (state.busy, state.reserved) == (first, second)
    assert state.room(MAIN) == 0  # the second claim's room and the first's jobs: all of it
    dispatcher.took(BESIDE, [])  # the second claim found nothing
    assert (state.busy, state.reserved, state.saturated) == (first, 0, False)


def test_a_claim_that_waits_holds_at_most_half_the_capacity_as_it_is_now():
    """The capacity shrinks as the jobs slow down (fewer held ahead) while a claim is under
    way: that claim, reserved at the capacity of its start, must not take all of the new
    one, or the other claimer waits for it exactly when a claim is slow."""
    from django_jobs.worker.dispatcher import Dispatcher, QueueState

    pace = Pace(0.01)
    pace.add(0.001)
    pace.claimed(0.01)
    state = QueueState("busy", 8, pace, overlapping=True, saturated=True)
    parts: dict[str, Any] = dict.fromkeys(("claimer", "executor", "writer", "clock"))
    dispatcher = Dispatcher(state, **parts, using="default", hold=0.25)
    waits = dispatcher.wait_for_room(threading.Event(), 1.0)
    assert waits == 8 * (1 + MOST_AHEAD) // 2  # half the capacity of its start
    pace.add(0.012)  # the jobs slow down: fewer held ahead, a smaller capacity
    assert state.capacity - waits < 8  # counted whole, the claim that waits leaves no room
    with state.changed:
        beside = dispatcher.room_beside()
    assert beside == state.capacity - state.capacity // 2 >= 8
    assert state.others(BESIDE) == state.capacity // 2 < waits


def test_a_queue_of_long_jobs_claims_beside_only_a_claim_that_waited_past_the_hold():
    """Without claiming ahead (long jobs, or jobs handed back as slow), a second claim
    would only double the round trips: none while the dispatcher's claim is quick; once it
    has waited past the hold (a lock, a slow commit), one for the threads that are free."""
    from django_jobs.worker.dispatcher import Dispatcher, QueueState

    state = QueueState("long", 8, Pace(0.01), overlapping=True, saturated=True)
    assert state.capacity == 8  # not short: nothing held ahead
    parts: dict[str, Any] = dict.fromkeys(("claimer", "executor", "writer", "clock"))
    dispatcher = Dispatcher(state, **parts, using="default", hold=0.25)
    waits = dispatcher.wait_for_room(threading.Event(), 1.0)
    assert waits == 8
    began = state.began[MAIN]
    with state.changed:
        assert dispatcher.room_beside(began + 0.2) == 0  # within the hold: a quick claim
        beside = dispatcher.room_beside(began + 0.3)
    assert beside == 8 - 8 // 2  # the room the claim that waits leaves, at most half
    dispatcher.took(BESIDE, [None] * beside)  # type: ignore[list-item]
    with state.changed:
        assert dispatcher.room_beside(began + 0.4) == 0  # its jobs hold the free threads
