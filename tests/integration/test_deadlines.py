"""Deadlines on database calls: a call that overruns is cut off, and the connection recovers."""

import threading
import time
from datetime import timedelta

import pytest
from django.db import DatabaseError, connection, connections, transaction
from django.utils import timezone

from django_jobs.models import Job, JobStatus
from django_jobs.worker.deadlines import CallerBusy, DatabaseTimeout, OffThread, deadline
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.skip_locked
def test_deadline_cuts_off_a_call_the_database_does_not_answer_in_time():
    started = time.monotonic()
    with pytest.raises(DatabaseTimeout, match="past its 0.3s deadline"):
        with deadline(0.3, what="a sleepy query"), connection.cursor() as cursor:
            cursor.execute(
                "SELECT SLEEP(3)" if connection.vendor == "mysql" else "SELECT pg_sleep(3)"
            )
    assert time.monotonic() - started < 2
    with connection.cursor() as cursor:  # the next call reconnects
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)


@pytest.mark.skip_locked
def test_deadline_cuts_off_a_call_on_a_connection_the_block_would_open():
    connection.close()  # as after a cut-off: the next block reconnects
    started = time.monotonic()
    with pytest.raises(DatabaseTimeout):
        with deadline(0.3, what="a sleepy query"), connection.cursor() as cursor:
            cursor.execute(
                "SELECT SLEEP(3)" if connection.vendor == "mysql" else "SELECT pg_sleep(3)"
            )
    assert time.monotonic() - started < 2


@pytest.mark.skipif(not connection.vendor == "mysql", reason="MariaDB's idle_transaction_timeout")
def test_deadline_bounds_a_transaction_its_connection_leaves_idle_on_the_server():
    """A worker cut off between two statements of a transaction (the link gone silent)
    must not leave its rows locked on the server until the connection times out."""
    if not connection.mysql_is_mariadb:
        pytest.skip("MySQL has no idle transaction timeout")
    job = Job.objects.create(name="tests.ok", run_at=timezone.now(), created_at=timezone.now())
    connection.close()
    with deadline(2):  # the connection it opens is the one a worker's calls use
        Job.objects.filter(pk=job.pk).exists()
    held: list[bool] = []

    def try_to_lock() -> None:
        try:
            with transaction.atomic():
                held.append(Job.objects.select_for_update(nowait=True).filter(pk=job.pk).exists())
        except DatabaseError:
            held.append(False)
        finally:
            connections.close_all()

    with pytest.raises(DatabaseError):
        with transaction.atomic():
            Job.objects.select_for_update().filter(pk=job.pk).exists()
            time.sleep(3.5)  # silent, as a client whose packets are dropped
            Job.objects.filter(pk=job.pk).exists()  # the server ended the session at 2 s
    other = threading.Thread(target=try_to_lock)
    other.start()
    other.join(10)
    assert held == [True]


def test_deadline_lets_a_call_in_time_through():
    with deadline(5), connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)
    with connection.cursor() as cursor:
        cursor.execute("SELECT 2")
        assert cursor.fetchone() == (2,)


def test_offthread_waits_at_most_its_timeout_and_refuses_while_busy():
    release = threading.Event()
    runner = OffThread("test-runner")
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        runner.call(lambda: release.wait(10), 0.1)
    assert time.monotonic() - started < 1
    with pytest.raises(CallerBusy):
        runner.call(lambda: 1, 5)  # the first call still runs: no second thread
    release.set()

    def answer():
        try:
            return runner.call(lambda: 42, 5)
        except CallerBusy:  # the first call's thread has not handed its result back yet
            return None

    assert wait_until(answer, timeout=5) == 42  # a fixed sleep was too short on a busy machine
    with pytest.raises(ZeroDivisionError):
        runner.call(lambda: 1 / 0, 5)
    runner.close()


def test_renewal_never_extends_a_lease_past_its_give_up_point(worker, clock, make_job):
    w = worker()
    make_job()
    [claimed] = w.claimer.claim("default", clock.now(), 1)
    pairs = [(claimed.id, claimed.attempt)]
    lease = w.lease_seconds
    beat = w.inflight.beat_seconds
    # Just past the give-up point (a beat before the lease's end): refused.
    late = claimed.lease_expires_at - timedelta(seconds=beat - 0.001)
    renewed, _, _ = w.driver.renew(w.owner, pairs, late, lease, give_up_seconds=beat)
    assert renewed == set()
    # Past the lease's end: refused, even with no margin.
    lapsed = claimed.lease_expires_at + timedelta(seconds=1)
    assert w.driver.renew(w.owner, pairs, lapsed, lease)[0] == set()
    assert Job.objects.get(pk=claimed.id).lease_expires_at == claimed.lease_expires_at
    # Before it: renewed.
    early = claimed.lease_expires_at - timedelta(seconds=beat + 1)
    renewed, expires, _ = w.driver.renew(w.owner, pairs, early, lease, give_up_seconds=beat)
    assert renewed == {claimed.id}
    assert Job.objects.get(pk=claimed.id).lease_expires_at == expires


def test_release_hands_every_held_job_back_in_one_transaction(
    worker, clock, make_job, django_assert_max_num_queries
):
    w = worker(queues={"default": 5})
    for _ in range(5):
        make_job(max_attempts=1)
    claimed = w.claimer.claim("default", clock.now(), 5)
    pairs = [(job.id, job.attempt) for job in claimed]
    with django_assert_max_num_queries(5):  # the same count for 1 job or 500
        assert w.writer.hand_back(pairs, clock.now()) == {id for id, _ in pairs}
    for job in Job.objects.all():
        assert (job.status, job.attempts_used, job.lease_owner) == (JobStatus.PENDING, 0, None)
        assert job.attempts.get().outcome == "released"


@pytest.mark.skip_locked
def test_apply_connect_timeout_bounds_new_connections_unless_one_is_set(settings):
    from django.db import connections

    from django_jobs.worker.deadlines import apply_connect_timeout

    options = connections["default"].settings_dict.setdefault("OPTIONS", {})
    saved = dict(options)
    try:
        options.pop("connect_timeout", None)
        apply_connect_timeout("default", 0.4)
        assert options["connect_timeout"] == 2  # libpq's least useful value
        options["connect_timeout"] = 7
        apply_connect_timeout("default", 30)
        assert options["connect_timeout"] == 7  # the project's own choice stands
    finally:
        options.clear()
        options.update(saved)
