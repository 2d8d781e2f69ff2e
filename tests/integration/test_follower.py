"""The follower: the workflow steps of written ends are taken off the claim path, the ends
of many settles in one transaction, a lone end at once, and what is pending at a stop."""

from __future__ import annotations

import threading
import time

import pytest

from django_jobs import batch, schedule_jobs
from django_jobs.db import get_driver
from django_jobs.models import Batch, Job, JobStatus
from django_jobs.worker.deadlines import Deadlines
from django_jobs.worker.follower import Follower
from django_jobs.worker.waker import Doorbells

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def clock(clock_ahead):
    return clock_ahead


class Follows:
    """``driver.follow`` as the follower calls it, recorded; held at ``gate`` until set."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.driver = get_driver()
        self.real = self.driver.follow
        self.calls: list[list[int]] = []
        self.gate = threading.Event()
        self.gate.set()
        monkeypatch.setattr(self.driver, "follow", self)

    def __call__(self, ids, now):
        self.gate.wait(10)
        self.calls.append(sorted(ids))
        return self.real(ids, now)

    def wait_for(self, count: int, seconds: float = 5.0) -> float:
        """Wait until ``count`` calls were made; the seconds it took."""
        started = time.monotonic()
        while len(self.calls) < count and time.monotonic() - started < seconds:
            time.sleep(0.005)
        return time.monotonic() - started


def members_of_a_batch(count: int) -> tuple[Batch, list[Job]]:
    """A batch of ``count`` members with an ``on_finish`` callback, each already succeeded
    as a settle writes it (its mark still on)."""
    with batch(on_finish=("tests.ok", {})) as b:
        members = schedule_jobs([{"job": "tests.ok"}] * count)
    Job.objects.filter(batch=b).update(status=JobStatus.SUCCEEDED, finished_at=b.created_at)
    return b, members


def test_a_lone_end_is_followed_at_once_and_a_stream_waits_for_more(monkeypatch):
    follows = Follows(monkeypatch)
    b, members = members_of_a_batch(4)
    driver = get_driver()
    # A long linger: an end taken before it ran out was not made to wait for one.
    follower = Follower(
        driver,
        deadline=Deadlines(driver.using, 10),
        doorbells=Doorbells(["default"]),
        linger_seconds=5.0,
        stream_size=1,  # one end in the linger before makes a stream
    )
    follower.start()
    try:
        first, *rest = (m.pk for m in members)
        follower.submit([first], b.created_at)
        assert follows.wait_for(1) < 2.5  # not held for the linger: nothing came before it
        for pk in rest:  # then three in a stream: they wait for more
            follower.submit([pk], b.created_at)
        time.sleep(0.2)
        assert follows.calls == [[first]]
    finally:
        assert follower.stop(10)  # a stop takes what waits, without lingering
    assert follows.calls == [[first], sorted(rest)]
    b.refresh_from_db()
    assert (b.total, b.succeeded) == (4, 4) and b.finished_at is not None
    assert Job.objects.filter(pk=b.callback_jobs["on_finish"], status="pending").exists()
    assert not Job.objects.filter(pk__in=[m.pk for m in members], workflow_pending=True).exists()


def test_a_claim_does_not_wait_for_the_steps_of_the_ends_it_writes(worker, monkeypatch):
    """The worker's outcomes are written and its tick returns while the steps of their
    ends are held; the follower takes them after."""
    follows = Follows(monkeypatch)
    with batch(on_finish=("tests.ok", {})) as b:
        members = schedule_jobs([{"job": "tests.ok"}] * 3)
    w = worker()
    w.follower.start()
    follows.gate.clear()
    try:
        assert sum(w.run_once().succeeded for _ in range(4)) == 3
        ended = Job.objects.filter(pk__in=[m.pk for m in members])
        assert all(job.status == JobStatus.SUCCEEDED and job.workflow_pending for job in ended)
        b.refresh_from_db()
        assert (b.succeeded, b.finished_at) == (0, None)  # not counted yet
    finally:
        follows.gate.set()
        assert w.follower.stop(10)
    b.refresh_from_db()
    assert b.succeeded == 3 and b.finished_at is not None and "on_finish" in b.callback_jobs
    assert sorted(pk for call in follows.calls for pk in call) == sorted(m.pk for m in members)


def test_the_steps_transaction_alone_commits_without_waiting_for_its_flush(monkeypatch):
    """On PostgreSQL the follower's transaction sets ``synchronous_commit`` off for itself
    alone: not for the session after it, nor for a caller's transaction that takes steps."""
    from django.db import connection, transaction

    if connection.vendor != "postgresql":
        pytest.skip("synchronous_commit is PostgreSQL's")
    b, members = members_of_a_batch(2)
    workflows = get_driver().workflows
    seen: list[str] = []
    count = workflows.count_in_batches

    def counting(*args):
        with connection.cursor() as cursor:
            cursor.execute("SHOW synchronous_commit")
            seen.append(cursor.fetchone()[0])
        return count(*args)

    monkeypatch.setattr(workflows, "count_in_batches", counting)
    with connection.cursor() as cursor:  # whatever the server's own setting
        cursor.execute("SET synchronous_commit = on")
    try:
        get_driver().follow([members[0].pk], b.created_at)
        with transaction.atomic():  # a caller's own transaction (cancel_job, the rescuer)
            workflows.ended([members[1].pk], b.created_at, own_transaction=True)
        with connection.cursor() as cursor:
            cursor.execute("SHOW synchronous_commit")
            after = cursor.fetchone()[0]
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET synchronous_commit")
    assert seen == ["off", "on"] and after == "on"
    b.refresh_from_db()
    assert b.succeeded == 2 and b.finished_at is not None


def test_a_release_rings_this_process_dispatcher_of_the_jobs_queue():
    """A released job is claimed by this process at once, without waiting for the
    database's wake-up to come back (or for a poll where there is none)."""
    from django.utils import timezone

    from django_jobs import chain

    first, second = chain({"job": "tests.ok"}, {"job": "tests.ok", "queue": "next"})
    Job.objects.filter(pk=first.pk).update(status=JobStatus.SUCCEEDED, finished_at=timezone.now())
    driver, doorbells = get_driver(), Doorbells(["default", "next"])
    follower = Follower(driver, deadline=Deadlines(driver.using, 10), doorbells=doorbells)
    follower.submit([first.pk], timezone.now())  # no thread: taken at once
    assert Job.objects.get(pk=second.pk).status == JobStatus.PENDING
    assert doorbells["next"].is_set() and not doorbells["default"].is_set()
