"""The heartbeat loop with a fake clock and a fake renewal: no database, no waiting."""

import threading
import time
from datetime import timedelta

from django_jobs.context import JobContext
from django_jobs.db import ClaimedJob
from django_jobs.db.base import Renewed
from django_jobs.testing import FakeClock
from django_jobs.worker.inflight import InFlight
from tests.conftest import START

LEASE = 0.9  # seconds of fake time; a beat is 0.3


def claimed(job_id: int = 1) -> ClaimedJob:
    return ClaimedJob(
        job_id, "tests.ok", "default", "{}", 1, 1, 3, "me", START + timedelta(seconds=LEASE)
    )


class Renewals:
    def __init__(self) -> None:
        self.mode = "ok"
        self.calls = 0
        self.release = threading.Event()
        self.timeouts: list[float] = []
        self.progress: list[dict] = []
        self.lease = LEASE

    def __call__(self, held, now, timeout, progress):
        self.calls += 1
        self.timeouts.append(timeout)
        self.progress.append(progress)
        if self.mode == "raise":
            raise ConnectionError("database unreachable")
        if self.mode == "hang":
            self.release.wait(10)
        if self.mode == "refuse":
            return Renewed(set(), now + timedelta(seconds=self.lease), set())
        return Renewed({job_id for job_id, _ in held}, now + timedelta(seconds=self.lease), set())


def setup(renewals: Renewals, monotonic=time.monotonic):
    inflight = InFlight("me", LEASE, 0.3, renew=renewals, monotonic=monotonic)
    ctx = JobContext(1, "tests.ok", "default", 1, {})
    held = inflight.add(claimed(), ctx, START, timeout=None)
    return inflight, ctx, held


def test_inflight_renews_each_beat_and_keeps_the_lease():
    renewals = Renewals()
    inflight, ctx, held = setup(renewals)
    clock = FakeClock(START)
    for _ in range(30):
        clock.advance(0.1)
        inflight.beat(clock.now())
    assert renewals.calls == 10 and not ctx.cancelled
    assert inflight.finish(held)


def test_inflight_a_raising_renewal_is_retried_then_given_up():
    renewals = Renewals()
    renewals.mode = "raise"
    # The wait is measured on a clock held still: a slow host's failed call
    # (its warning included) must not move the retry past the fake clock's step.
    inflight, ctx, held = setup(renewals, monotonic=lambda: 0.0)
    clock = FakeClock(START)
    clock.advance(0.3)
    inflight.beat(clock.now())  # the lease ends at 0.9: the give-up point is 0.6
    assert not ctx.cancelled and renewals.calls == 1
    clock.advance(0.16)
    inflight.beat(clock.now())  # retried about halfway to the give-up point
    assert not ctx.cancelled and renewals.calls == 2
    clock.advance(0.14)
    assert inflight.beat(clock.now()) == []  # at the give-up point: no renewal is even tried
    assert ctx.cancelled and renewals.calls == 2
    assert not inflight.finish(held)  # nothing to record


def test_inflight_a_hung_renewal_is_cut_off_at_the_give_up_point():
    renewals = Renewals()
    renewals.mode = "hang"
    inflight, ctx, held = setup(renewals)
    clock = FakeClock(START)
    clock.advance(0.3)  # the give-up point is 0.3 s from here, the lease's end 0.6 s
    started = time.monotonic()
    inflight.beat(clock.now())
    waited = time.monotonic() - started
    assert renewals.timeouts == [0.3]  # the renewal's own deadline: the give-up point
    assert 0.25 <= waited < 0.55  # not until the lease's end
    assert ctx.cancelled  # judged when the wait ended, not at the beat's start
    renewals.release.set()


def test_inflight_a_renewal_still_hung_is_not_started_again():
    renewals = Renewals()
    renewals.mode = "hang"
    inflight = InFlight("me", 30, 10, renew=renewals)
    ctx = JobContext(1, "tests.ok", "default", 1, {})
    inflight.add(
        ClaimedJob(1, "tests.ok", "default", "{}", 1, 1, 3, "me", START + timedelta(seconds=30)),
        ctx,
        START,
        timeout=None,
    )
    inflight.renewer.call = _hang_for(0.05, inflight.renewer.call)
    clock = FakeClock(START)
    clock.advance(10)
    started = time.monotonic()
    inflight.beat(clock.now())  # the renewal hangs: the beat waits 0.05 s (a fake deadline)
    clock.advance(5.1)
    inflight.beat(clock.now())  # the retry is due, the renewal still hung: fails at once
    assert time.monotonic() - started < 5
    assert renewals.calls == 1 and not ctx.cancelled
    renewals.release.set()


def _hang_for(seconds, call):
    return lambda fn, timeout: call(fn, min(timeout, seconds))


def test_inflight_a_handler_claimed_as_the_worker_stops_starts_cancelled():
    renewals = Renewals()
    inflight, ctx, _held = setup(renewals)
    inflight.cancel_all()
    assert ctx.cancelled
    late = JobContext(2, "tests.ok", "default", 1, {})
    inflight.add(claimed(2), late, START, timeout=None)
    assert late.cancelled


def test_inflight_a_timed_out_outcome_is_returned_not_written():
    renewals = Renewals()
    inflight = InFlight("me", LEASE, 0.3, renew=renewals)
    ctx = JobContext(1, "tests.ok", "default", 1, {})
    held = inflight.add(claimed(), ctx, START, timeout=0.1)
    [timed_out] = inflight.beat(START + timedelta(seconds=0.2))
    assert ctx.cancelled and inflight.snapshot() == [] and not inflight.finish(held)
    assert (timed_out.claimed, timed_out.result.outcome) == (claimed(), "timed_out")
    assert inflight.beat(START + timedelta(seconds=0.3)) == []  # once


def test_inflight_refused_renewal_gives_up_at_once():
    renewals = Renewals()
    renewals.mode = "refuse"
    inflight, ctx, held = setup(renewals)
    clock = FakeClock(START)
    clock.advance(0.3)
    inflight.beat(clock.now())
    assert ctx.cancelled and not inflight.finish(held)


def test_inflight_a_returned_job_keeps_its_lease_until_its_outcome_is_written():
    renewals = Renewals()
    inflight, ctx, held = setup(renewals)
    assert inflight.finish(held)  # the handler returned: its outcome waits for the settler
    clock = FakeClock(START)
    clock.advance(0.3)
    inflight.beat(clock.now())
    assert renewals.calls == 1 and not ctx.cancelled  # still held: renewed
    inflight.settled(held)  # the outcome is written
    clock.advance(0.3)
    inflight.beat(clock.now())
    assert renewals.calls == 1 and inflight.snapshot() == []


def test_inflight_leases_due_within_half_a_beat_share_one_renewal():
    renewals = Renewals()
    inflight = InFlight("me", LEASE, 0.3, renew=renewals)
    for job_id, claimed_at in ((1, 0.0), (2, 0.1), (3, 0.2)):
        start = START + timedelta(seconds=claimed_at)
        job = ClaimedJob(
            job_id, "tests.ok", "default", "{}", 1, 1, 3, "me", start + timedelta(seconds=LEASE)
        )
        inflight.add(job, JobContext(job_id, "tests.ok", "default", 1, {}), start, timeout=None)
    clock = FakeClock(START)
    for _ in range(24):
        clock.advance(0.05)
        inflight.beat(clock.now())
    # 0.3: jobs 1 and 2 (due 0.4); 0.5: all three; then one renewal a beat (0.8, 1.1).
    # One renewal per lease and beat would have made 10.
    assert renewals.calls == 4


def test_inflight_writes_progress_at_most_once_a_second_with_a_renewal():
    renewals = Renewals()
    renewals.lease = 30
    inflight = InFlight("me", 30, 10, renew=renewals)
    ctx = JobContext(1, "tests.ok", "default", 1, {})
    inflight.add(
        ClaimedJob(1, "tests.ok", "default", "{}", 1, 1, 3, "me", START + timedelta(seconds=30)),
        ctx,
        START,
        timeout=None,
    )
    clock = FakeClock(START)
    inflight.beat(clock.now())
    assert renewals.calls == 0  # no beat due, nothing reported: no statement
    ctx.progress(1, 10, "first")
    inflight.beat(clock.now())
    assert renewals.progress == [{1: (1, 10, "first")}]
    for done in range(2, 5):  # reports faster than a second: none written before it
        clock.advance(0.3)
        ctx.progress(done, 10)
        inflight.beat(clock.now())
    assert renewals.calls == 1
    clock.advance(0.1)
    inflight.beat(clock.now())  # a second on: the latest report only
    assert renewals.progress == [{1: (1, 10, "first")}, {1: (4, 10, "")}]
    clock.advance(1)
    inflight.beat(clock.now())  # nothing new: no statement until the beat is due
    assert renewals.calls == 2


def test_inflight_progress_rides_along_with_the_beat_of_other_jobs():
    renewals = Renewals()
    inflight, ctx, _ = setup(renewals)
    clock = FakeClock(START)
    clock.advance(0.3)
    ctx.progress(7)
    inflight.beat(clock.now())
    assert renewals.calls == 1 and renewals.progress == [{1: (7, None, "")}]


def test_inflight_ends_the_running_jobs_for_a_hand_back():
    renewals = Renewals()
    inflight, ctx, held = setup(renewals)
    returned = inflight.add(claimed(2), JobContext(2, "tests.ok", "default", 1, {}), START, None)
    assert inflight.finish(returned)  # its outcome waits for the settler: not handed back
    assert inflight.end_running() == [(1, 1)]
    assert ctx.cancelled and not inflight.finish(held)  # a late result is dropped
    assert inflight.end_running() == []
