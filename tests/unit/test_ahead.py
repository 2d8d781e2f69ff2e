"""When a dispatcher claims ahead, and how long a claimed job may wait for a thread."""

from django_jobs.worker.ahead import (
    HOLD_SECONDS,
    MOST_AHEAD,
    Pace,
    Waiting,
    hold_seconds,
    stale,
)


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
