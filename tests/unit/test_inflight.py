"""The heartbeat loop with a fake clock and a fake renewal: no database, no waiting."""

import threading
import time
from datetime import timedelta

from django_jobs.claims import ClaimedJob
from django_jobs.context import JobContext
from django_jobs.inflight import InFlight
from django_jobs.testing import FakeClock
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

    def __call__(self, claimer, owner, held, now, lease_seconds):
        self.calls += 1
        if self.mode == "raise":
            raise ConnectionError("database unreachable")
        if self.mode == "hang":
            self.release.wait(10)
        if self.mode == "refuse":
            return set(), now + timedelta(seconds=lease_seconds)
        return {job_id for job_id, _ in held}, now + timedelta(seconds=lease_seconds)


def setup(renewals: Renewals):
    recorded = []
    inflight = InFlight(None, "me", LEASE, 0.3, lambda c, r: recorded.append(r), renew=renewals)
    ctx = JobContext(1, "tests.ok", "default", 1, {})
    held = inflight.add(claimed(), ctx, START, timeout=None)
    return inflight, ctx, held, recorded


def test_inflight_renews_each_beat_and_keeps_the_lease():
    renewals = Renewals()
    inflight, ctx, held, _ = setup(renewals)
    clock = FakeClock(START)
    for _ in range(30):
        clock.advance(0.1)
        inflight.beat(clock.now())
    assert renewals.calls == 10 and not ctx.cancelled
    assert inflight.finish(held)


def test_inflight_a_raising_renewal_is_retried_then_given_up():
    renewals = Renewals()
    renewals.mode = "raise"
    inflight, ctx, held, recorded = setup(renewals)
    clock = FakeClock(START)
    clock.advance(0.3)
    inflight.beat(clock.now())
    assert not ctx.cancelled and renewals.calls == 1
    clock.advance(0.3)
    inflight.beat(clock.now())  # retried one beat later: fails at the give-up point
    assert ctx.cancelled and renewals.calls == 2
    assert not inflight.finish(held) and recorded == []  # nothing recorded


def test_inflight_a_hung_renewal_is_cut_off_at_the_lease_end():
    renewals = Renewals()
    renewals.mode = "hang"
    inflight, ctx, held, _ = setup(renewals)
    clock = FakeClock(START)
    clock.advance(0.6)  # the lease ends 0.3 s from here
    started = time.monotonic()
    inflight.beat(clock.now())
    waited = time.monotonic() - started
    renewals.release.set()
    assert 0.25 <= waited < 2
    assert ctx.cancelled


def test_inflight_refused_renewal_gives_up_at_once():
    renewals = Renewals()
    renewals.mode = "refuse"
    inflight, ctx, held, _ = setup(renewals)
    clock = FakeClock(START)
    clock.advance(0.3)
    inflight.beat(clock.now())
    assert ctx.cancelled and not inflight.finish(held)


def test_inflight_after_the_handler_returned_a_failing_renewal_does_not_matter():
    renewals = Renewals()
    inflight, ctx, held, _ = setup(renewals)
    assert inflight.finish(held)  # the handler returned: its outcome is ours to record
    renewals.mode = "raise"
    clock = FakeClock(START)
    clock.advance(5)
    inflight.beat(clock.now())
    assert renewals.calls == 0 and not ctx.cancelled
