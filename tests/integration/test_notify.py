"""Wake-ups: NOTIFY from schedule_job(s), a Listener of its own, the Waker thread.

The LISTEN tests need PostgreSQL; the pooler test runs a real PgBouncer in
transaction mode, which scripts/test installs.
"""

import contextlib
import copy
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_jobs import JobSpec, add_recurring_job, schedule_job, schedule_jobs
from django_jobs.db import get_driver
from django_jobs.db.notify import CHANNEL, Listener
from django_jobs.maintenance.scheduler import enqueue_due
from django_jobs.models import RecurringJob
from django_jobs.worker.waker import Waker
from tests.conftest import ROOT, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

# scripts/test installs PgBouncer and sets this, so that CI never skips the pooler test quietly.
PGBOUNCER_REQUIRED = os.environ.get("JOBS_TEST_PGBOUNCER") == "required"
PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


@pytest.fixture
def listener() -> Iterator[Listener]:
    listening = Listener("default", first_backoff=0.05)
    try:
        assert listening.wait(0) == set()  # connected and probed: LISTEN is in place
        assert listening.backend_pid is not None
        yield listening
    finally:
        listening.close()


def received(listener: Listener, timeout: float = 0.3) -> set[str]:
    """Everything ``listener`` gets within ``timeout`` seconds."""
    names: set[str] = set()
    deadline = time.monotonic() + timeout
    while (remaining := deadline - time.monotonic()) > 0:
        names |= listener.wait(remaining)
    return names


# -- notify: what is sent, and when ------------------------------------------------


@pytest.mark.listen_notify
def test_notify_scheduled_job_wakes_a_waker_within_the_bound():
    woken: dict[str, float] = {}
    done = threading.Event()

    def wake(queue: str) -> None:
        woken[queue] = time.monotonic()
        done.set()

    waker = Waker("default", ["default"], wake)
    assert waker.start()
    try:
        wait_until(lambda: waker.listener.backend_pid is not None, timeout=5)
        started = time.monotonic()
        schedule_job("tests.ok")
        assert done.wait(2.0), "no wake-up within 2 s"
        assert woken["default"] - started < 2.0
    finally:
        waker.stop()
    assert not waker.is_alive()


@pytest.mark.listen_notify
def test_notify_rolled_back_enqueue_delivers_nothing(listener):
    with pytest.raises(RuntimeError), transaction.atomic():
        schedule_job("tests.ok")
        raise RuntimeError("roll back")
    schedule_job("tests.emails")  # committed: arrives, so the listener was listening
    assert received(listener) == {"emails"}


@pytest.mark.listen_notify
def test_notify_inside_a_transaction_is_delivered_on_commit(listener):
    with transaction.atomic():
        schedule_job("tests.ok")
        assert received(listener, 0.2) == set()
    assert received(listener) == {"default"}


@pytest.mark.listen_notify
def test_notify_schedule_jobs_on_two_queues_delivers_both_names(listener):
    schedule_jobs([{"job": "tests.ok"}, {"job": "tests.emails"}, {"job": "tests.ok"}])
    assert received(listener) == {"default", "emails"}


@pytest.mark.listen_notify
def test_notify_future_job_sends_nothing(listener):
    later = timezone.now() + timedelta(minutes=5)
    schedule_job("tests.ok", run_at=later)
    schedule_jobs([JobSpec("tests.ok", delay=timedelta(seconds=30))])
    assert received(listener) == set()


@pytest.mark.listen_notify
def test_notify_existing_unique_key_sends_nothing(listener):
    first = schedule_job("tests.ok", unique_key="one")
    assert received(listener) == {"default"}
    assert schedule_job("tests.ok", unique_key="one").pk == first.pk
    assert [job.pk for job in schedule_jobs([JobSpec("tests.ok", unique_key="one")])] == [first.pk]
    assert received(listener) == set()


@pytest.mark.listen_notify
def test_notify_setting_off_sends_nothing(listener, settings):
    settings.DJANGO_JOBS = {**settings.DJANGO_JOBS, "LISTEN": False}
    schedule_job("tests.ok")
    schedule_jobs([{"job": "tests.emails"}])
    assert received(listener) == set()


@pytest.mark.listen_notify
def test_notify_rides_in_the_insert_of_the_job():
    with CaptureQueriesContext(connection) as one:
        schedule_job("tests.ok")
    [insert] = [q["sql"] for q in one.captured_queries if "SAVEPOINT" not in q["sql"]]
    assert "INSERT" in insert and "pg_notify" in insert
    with CaptureQueriesContext(connection) as many:
        schedule_jobs([{"job": "tests.ok"} for _ in range(20)] + [{"job": "tests.emails"}])
    notifies = [q for q in many.captured_queries if "pg_notify" in q["sql"]]
    assert len(notifies) == 1


@pytest.mark.without_listen_notify
def test_notify_is_a_no_op_without_listen_notify():
    with CaptureQueriesContext(connection) as context:
        get_driver().wake(["default", "emails"])
        schedule_job("tests.ok")
    assert not [q for q in context.captured_queries if "notify" in q["sql"]]
    assert not Waker("default", ["default"], lambda queue: None).start()


# -- the listener and the waker ------------------------------------------------------


@pytest.mark.listen_notify
def test_listener_ignores_empty_payloads(listener):
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, '')", [CHANNEL])  # another worker's probe
    assert received(listener) == set()


@pytest.mark.listen_notify
def test_listener_drains_everything_already_arrived(listener):
    for queue in ("a", "b", "c"):
        get_driver().wake([queue])
    time.sleep(0.1)  # all three have arrived before the wait
    started = time.monotonic()
    assert listener.wait(5.0) == {"a", "b", "c"}
    assert time.monotonic() - started < 1.0  # it returns at once, not at its timeout


@pytest.mark.listen_notify
def test_listener_reconnects_after_its_connection_is_killed(listener, caplog):
    old_pid = listener.backend_pid
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [old_pid])
    with caplog.at_level(logging.WARNING, logger="django_jobs.db.notify"):
        wait_until(lambda: listener.wait(0.1) == set() and listener.backend_pid is None, 5)
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.event == "listen_lost" and warning.exc_info is None
    assert "lost its connection" in warning.getMessage()
    wait_until(lambda: listener.wait(0.05) == set() and listener.backend_pid is not None, 5)
    assert listener.backend_pid != old_pid
    schedule_job("tests.ok")
    assert received(listener) == {"default"}


@pytest.mark.listen_notify
def test_waker_wakes_only_the_queues_it_serves():
    woken: list[str] = []
    waker = Waker("default", ["emails"], woken.append)
    assert waker.start()
    try:
        wait_until(lambda: woken == ["emails"], timeout=5)  # its connection opened
        schedule_jobs([{"job": "tests.ok"}, {"job": "tests.emails"}])
        wait_until(lambda: len(woken) > 1, timeout=2)
        time.sleep(0.1)
    finally:
        waker.stop()
    assert woken == ["emails", "emails"]


@pytest.mark.listen_notify
def test_waker_wakes_every_queue_when_its_connection_is_back():
    """A job enqueued while the listening connection was gone notified no one: once
    it is back, every served queue is woken, not left to its poll."""
    woken: list[str] = []
    listener = Listener("default", first_backoff=0.5)
    waker = Waker("default", ["default", "emails"], woken.append, listener=listener)
    assert waker.start()
    try:
        wait_until(lambda: sorted(woken) == ["default", "emails"], timeout=5)
        pid = listener.backend_pid
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
        wait_until(lambda: listener.failures, timeout=5)  # it found the connection gone
        woken.clear()
        schedule_job("tests.emails")  # its notification reaches no one
        wait_until(lambda: listener.backend_pid not in (None, pid), timeout=5)
        wait_until(lambda: sorted(woken) == ["default", "emails"], timeout=2)
    finally:
        waker.stop()


@pytest.mark.listen_notify
def test_waker_stops_within_a_second_and_closes_its_connection():
    waker = Waker("default", ["default"], lambda queue: None)
    assert waker.start()
    wait_until(lambda: waker.listener.backend_pid is not None, timeout=5)
    pid = waker.listener.backend_pid
    started = time.monotonic()
    waker.stop()
    assert not waker.is_alive() and time.monotonic() - started < 1.0
    wait_until(lambda: not listening(pid), timeout=5)


def listening(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
        return bool(cursor.fetchone()[0])


@pytest.mark.listen_notify
def test_waker_does_not_start_with_the_setting_off(settings):
    settings.DJANGO_JOBS = {**settings.DJANGO_JOBS, "LISTEN": False}
    waker = Waker("default", ["default"], lambda queue: None)
    assert not waker.start() and not waker.is_alive()


# -- behind a pooler in transaction mode ----------------------------------------------


@pytest.fixture
def pgbouncer_alias() -> Iterator[str]:
    """A database alias that reaches the test database through PgBouncer, transaction mode
    (scripts/pgbouncer.py). Its files are in a directory of /tmp that the server's user,
    whom PgBouncer runs as under root, can reach (pytest's are root's alone)."""
    if not Path(PGBOUNCER).exists():
        if PGBOUNCER_REQUIRED:
            raise AssertionError(f"{PGBOUNCER} is missing")
        pytest.skip("pgbouncer is missing (apt-get install pgbouncer)")
    default = connections["default"].settings_dict
    script = [sys.executable, str(ROOT / "scripts" / "pgbouncer.py")]
    server = f"postgres://{default['USER']}@{default['HOST']}:{default['PORT']}/postgres"
    directory = tempfile.mkdtemp(prefix="django-jobs-test-pgbouncer.")
    pooled = subprocess.run(  # noqa: S603
        [*script, "start", directory, server],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.strip()
    alias = "through_pgbouncer"
    connections.settings[alias] = {
        **copy.deepcopy(default),
        "PORT": pooled.rsplit(":", 1)[1].split("/")[0],
    }
    try:
        yield alias
    finally:
        subprocess.run([*script, "stop", directory], check=False, timeout=30)  # noqa: S603
        shutil.rmtree(directory, ignore_errors=True)
        with contextlib.suppress(AttributeError):  # never opened on this thread
            del connections[alias]
        del connections.settings[alias]


def undelivered(waker: Waker, caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """Start ``waker``, wait until its listener gives up; the warnings it gave up with."""
    with caplog.at_level(logging.WARNING, logger="django_jobs.db.notify"):
        assert waker.start()
        try:
            wait_until(lambda: not waker.is_alive(), timeout=10)
        finally:
            waker.stop()
    assert waker.listener.delivering is False
    return [r for r in caplog.records if r.event == "listen_undelivered"]


@pytest.mark.listen_notify
def test_waker_behind_a_transaction_pooler_detects_it_and_stops(pgbouncer_alias, caplog):
    waker = Waker(pgbouncer_alias, ["default"], lambda queue: None)
    [warning] = undelivered(waker, caplog)
    assert caplog.records == [warning]
    assert warning.event == "listen_undelivered"
    assert "LISTEN is not delivered" in warning.getMessage()
    assert "polls every POLL_SECONDS" in warning.getMessage()


@pytest.mark.listen_notify
def test_waker_behind_a_transaction_pooler_listens_on_the_listen_database(
    pgbouncer_alias, settings, caplog
):
    psycopg = pytest.importorskip("psycopg")
    # The jobs go through the pooler; LISTEN_DATABASE names an alias straight to the
    # server. The probe goes the way a wake-up does: sent through the pooler, heard here.
    settings.DJANGO_JOBS = {"LISTEN_DATABASE": "default"}
    woken: list[str] = []
    waker = Waker(pgbouncer_alias, ["default", "emails"], woken.append)
    assert waker.listener.using == "default"
    assert waker.listener.probe_through == pgbouncer_alias
    with caplog.at_level(logging.WARNING, logger="django_jobs.db.notify"):
        assert waker.start()
        try:
            # An enqueue through the pooler, committed there, wakes the listener here.
            wait_until(lambda: sorted(woken) == ["default", "emails"], timeout=10)  # opened
            woken.clear()
            # (On a connection of its own: the test's alias is not one Django's test case
            # lets a test query.)
            with psycopg.connect(**Listener(pgbouncer_alias).connection_params()) as sender:
                sender.execute("SELECT pg_notify(%s, 'emails')", [CHANNEL])
            wait_until(lambda: woken == ["emails"], timeout=5)
            assert waker.is_alive()
        finally:
            waker.stop()
    assert waker.listener.delivering is True
    assert [r for r in caplog.records if r.event == "listen_undelivered"] == []


@pytest.mark.listen_notify
def test_a_listen_database_that_hears_nothing_of_the_jobs_database_is_found_out(
    pgbouncer_alias, settings, caplog
):
    # Listening through the pooler too: the probe, sent through the pooler, never comes.
    settings.DJANGO_JOBS = {"LISTEN_DATABASE": pgbouncer_alias}
    [warning] = undelivered(Waker("default", ["default"], lambda queue: None), caplog)
    assert warning.getMessage().startswith(
        f"LISTEN is not delivered on database {pgbouncer_alias!r} from 'default'"
    )
    assert "DJANGO_JOBS['LISTEN_DATABASE']" in warning.getMessage()


@pytest.mark.listen_notify
def test_notify_a_job_due_again_after_its_outcome_wakes_its_queue(listener, worker, make_job):
    """Handed back at a stop, or retried with no backoff: another worker takes it at once."""
    from django_jobs.models import AttemptOutcome
    from django_jobs.outcomes import HandlerResult
    from django_jobs.worker.settler import Outcome

    make_job(queue="emails")
    make_job()
    w = worker(queues={"default": 1, "emails": 1})
    claim = w.claimer.claim
    released, done = claim("emails", timezone.now(), 1) + claim("default", timezone.now(), 1)
    assert received(listener, 0.2) == set()
    w.writer.write([Outcome(done, HandlerResult(AttemptOutcome.SUCCEEDED))])
    assert received(listener, 0.3) == set()  # finished: nothing to wake for
    w.writer.write([Outcome(released, HandlerResult(AttemptOutcome.RELEASED, "stop"))])
    assert received(listener) == {"emails"}
    [again] = w.claimer.claim("emails", timezone.now(), 1)
    assert w.writer.hand_back([again.pair], timezone.now()) == {again.id}  # the stop's hand-back
    assert received(listener) == {"default", "emails"}


@pytest.mark.listen_notify
def test_notify_off_in_the_settings_the_worker_sends_no_wake_up_either(settings, worker):
    """LISTEN is read once per driver, and every wake-up goes through Driver.wake: a
    worker's wake for a job due again honours DJANGO_JOBS["LISTEN"] as an enqueue does."""
    settings.DJANGO_JOBS = {"LISTEN": False}
    w = worker()
    with CaptureQueriesContext(connection) as context:
        w.writer.wake(["default"])
        get_driver().wake(["default"])
        schedule_job("tests.ok")
    assert not [q for q in context.captured_queries if "notify" in q["sql"]]
    settings.DJANGO_JOBS = {"LISTEN": True}
    with CaptureQueriesContext(connection) as context:
        worker().writer.wake(["default"])
    assert [q for q in context.captured_queries if "pg_notify" in q["sql"]]


@pytest.mark.listen_notify
def test_notify_a_recurring_occurrence_wakes_its_queue(listener):
    add_recurring_job("woken", "* * * * *", "tests.ok", queue="emails")
    now = timezone.now()
    RecurringJob.objects.filter(name="woken").update(next_run_at=now - timedelta(seconds=1))
    assert enqueue_due(now) == 1
    assert received(listener) == {"emails"}


@pytest.mark.listen_notify
@pytest.mark.parametrize("options", [{"unique_key": "u"}, {"concurrency_key": "k"}])
def test_notify_rides_in_the_insert_of_a_unique_or_keyed_job(listener, options):
    with CaptureQueriesContext(connection) as one:
        schedule_job("tests.keyed", **options)
    [insert] = [q["sql"] for q in one.captured_queries if "SAVEPOINT" not in q["sql"]]
    assert "INSERT" in insert and "pg_notify" in insert
    assert received(listener) == {"keyed"}


# -- the bulk path: COPY ------------------------------------------------------------


def bulk(count: int, **extra) -> list[dict]:
    return [{"job": "tests.ok", "payload": {"n": n}, **extra} for n in range(count)]


@pytest.mark.listen_notify
def test_copy_writes_many_jobs_in_order_and_wakes_each_queue_once(listener):
    from django_jobs.db.postgresql import COPY_ROWS
    from django_jobs.models import Job

    specs = bulk(COPY_ROWS) + [{"job": "tests.emails", "payload": [1, "two"]}]
    with CaptureQueriesContext(connection) as captured:
        jobs = schedule_jobs(specs)
    sql = [q["sql"] for q in captured.captured_queries]
    assert any(s.startswith("COPY ") for s in sql), sql
    assert not any("INSERT" in s for s in sql), sql
    assert len([s for s in sql if "pg_notify" in s]) == 1
    ids = [job.pk for job in jobs]
    assert ids == sorted(ids) and len(set(ids)) == len(specs)
    rows = {row.pk: row for row in Job.objects.filter(pk__in=ids)}
    assert [rows[i].payload for i in ids] == [s["payload"] for s in specs]
    assert {rows[i].status for i in ids} == {"pending"}
    assert (rows[ids[-1]].queue, rows[ids[-1]].max_attempts, rows[ids[-1]].priority) == (
        "emails",
        7,
        5,
    )
    assert received(listener) == {"default", "emails"}


@pytest.mark.listen_notify
def test_copy_rolls_back_with_the_callers_transaction(listener):
    from django_jobs.db.postgresql import COPY_ROWS
    from django_jobs.models import Job

    with contextlib.suppress(RuntimeError), transaction.atomic():
        schedule_jobs(bulk(COPY_ROWS))
        raise RuntimeError("the view failed")
    assert not Job.objects.exists()
    assert received(listener) == set()
    schedule_jobs(bulk(COPY_ROWS))  # the ids taken by the rolled-back COPY are skipped
    assert Job.objects.count() == COPY_ROWS


@pytest.mark.listen_notify
def test_a_bulk_call_with_a_unique_key_is_one_insert_that_honours_it():
    from django_jobs.db.postgresql import COPY_ROWS

    first = schedule_job("tests.ok", unique_key="kept")
    specs = bulk(COPY_ROWS) + [{"job": "tests.ok", "unique_key": "kept"}]
    with CaptureQueriesContext(connection) as captured:
        jobs = schedule_jobs(specs)
    assert not any(q["sql"].startswith("COPY ") for q in captured.captured_queries)
    assert jobs[-1].pk == first.pk
