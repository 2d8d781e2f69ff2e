"""The settler's batching, with a fake writer: no database."""

import threading
import time
from datetime import timedelta

from django_jobs.db import ClaimedJob
from django_jobs.models import AttemptOutcome
from django_jobs.outcomes import HandlerResult
from django_jobs.worker.settler import Outcome, Settler
from tests.conftest import START, wait_until


def outcome(job_id: int, queue: str = "default") -> Outcome:
    claimed = ClaimedJob(
        job_id, "tests.ok", queue, "{}", 1, 1, 3, "me", START + timedelta(seconds=30)
    )
    return Outcome(claimed, HandlerResult(AttemptOutcome.SUCCEEDED))


class Writes:
    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.lock = threading.Lock()

    def __call__(self, batch):
        with self.lock:
            self.batches.append([o.claimed.id for o in batch])
        return [f"written #{o.claimed.id}" for o in batch]

    @property
    def ids(self) -> list[int]:
        with self.lock:
            return [job_id for batch in self.batches for job_id in batch]


def test_settler_without_its_thread_writes_on_the_calling_thread():
    writes = Writes()
    assert Settler(writes).submit(outcome(1)) == "written #1"
    assert writes.batches == [[1]]


def test_settler_with_its_thread_queues_and_returns_nothing_yet():
    writes = Writes()
    settler = Settler(writes, linger_seconds=30)
    settler.start()
    try:
        assert settler.submit(outcome(1)) is None
        assert writes.batches == []
    finally:
        settler.stop(5)
    assert writes.batches == [[1]]


def test_settler_writes_what_waited_its_linger_in_one_batch():
    writes = Writes()
    linger = 1.0
    settler = Settler(writes, linger_seconds=linger)
    settler.start()
    try:
        submitted = time.monotonic()
        for job_id in (1, 2, 3):
            settler.submit(outcome(job_id))
        time.sleep(0.05)
        if time.monotonic() - submitted < linger:  # a loaded host may sleep past it
            assert writes.batches == []  # still lingering: a claim may carry them
        wait_until(lambda: writes.ids == [1, 2, 3], timeout=5)
        assert writes.batches == [[1, 2, 3]]
    finally:
        settler.stop(2)


def test_settler_take_hands_waiting_outcomes_to_a_claim_and_writes_nothing_itself():
    writes = Writes()
    settler = Settler(writes, linger_seconds=0.3)
    settler.start()
    try:
        settler.submit(outcome(1))
        settler.submit(outcome(2))
        assert [o.claimed.id for o in settler.take(limit=1)] == [1]
        assert [o.claimed.id for o in settler.take()] == [2]
        time.sleep(0.4)
        assert writes.batches == []
    finally:
        settler.stop(2)


def test_settler_writes_outcomes_a_claim_gave_back_at_once():
    writes = Writes()
    settler = Settler(writes, linger_seconds=30)
    settler.start()
    try:
        settler.submit(outcome(1))
        taken = settler.take()
        settler.give_back(taken)
        wait_until(lambda: writes.ids == [1], timeout=2)
    finally:
        settler.stop(2)


def test_settler_writes_at_once_the_outcomes_of_a_queue_whose_dispatcher_sleeps_dry():
    """No claim of a dry queue will carry them: a chain's step is written without lingering
    (and what waits beside it), while another queue's outcome alone waits for a claim."""
    from django_jobs.worker.waker import Doorbells

    writes, doorbells = Writes(), Doorbells(["default", "busy"])
    doorbells["default"].dry = True
    settler = Settler(writes, linger_seconds=30, dry=doorbells.is_dry)
    settler.start()
    try:
        busy = outcome(2, "busy")
        settler.submit(busy)
        time.sleep(0.1)
        assert writes.ids == []  # its queue's dispatcher claims: it lingers for a claim
        settler.submit(outcome(1))
        wait_until(lambda: writes.ids == [2, 1], timeout=2)
    finally:
        settler.stop(2)


def test_settler_stop_writes_everything_queued_first():
    writes = Writes()
    settler = Settler(writes, linger_seconds=30)
    settler.start()
    for job_id in range(5):
        settler.submit(outcome(job_id))
    assert settler.stop(2)
    assert writes.ids == [0, 1, 2, 3, 4]


def test_settler_batches_are_capped():
    writes = Writes()
    settler = Settler(writes, max_batch=2, linger_seconds=30)
    settler.start()
    for job_id in range(5):
        settler.submit(outcome(job_id))
    assert settler.stop(2)
    assert writes.batches == [[0, 1], [2, 3], [4]]


def test_settler_goes_on_after_a_failed_write():
    calls: list[int] = []

    def write(batch):
        calls.append(len(batch))
        if len(calls) == 1:
            raise RuntimeError("database gone")

    settler = Settler(write, linger_seconds=0)
    settler.start()
    settler.submit(outcome(1))
    wait_until(lambda: calls == [1], timeout=2)
    settler.submit(outcome(2))
    wait_until(lambda: calls == [1, 1], timeout=2)
    assert settler.stop(2)
