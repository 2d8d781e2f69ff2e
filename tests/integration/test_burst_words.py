"""A burst worker says once what it waits for and, as it exits, what it leaves for later."""

import logging
import re
import threading
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import pytest
from django.db import connection
from django.utils import timezone

from django_jobs import schedule_job
from django_jobs.models import Job, JobStatus
from django_jobs.worker import Worker, serve
from django_jobs.worker.burst import BurstCheck
from django_jobs.worker.clock import SystemClock
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

FAST = {
    "POLL_SECONDS": 0.02,
    "MAINTENANCE_SECONDS": 0.1,
    "RETRY_BASE_SECONDS": 0,
    "QUEUES": {"default": {"workers": 1}},
}


def burst_worker() -> tuple[Worker, threading.Thread]:
    worker = Worker(clock=SystemClock(), burst=True)
    thread = threading.Thread(target=serve, args=(worker, threading.Event()))
    thread.start()
    return worker, thread


def said(caplog, event: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == event]


def drained(caplog) -> logging.LogRecord:
    """Serve a burst worker until it exits; its exit line."""
    caplog.set_level(logging.INFO, logger="django_jobs")
    _, thread = burst_worker()
    thread.join(10)
    assert not thread.is_alive()
    [exit_line] = said(caplog, "burst_drained")
    return exit_line


def test_burst_waiting_for_a_job_another_worker_runs_says_so_once_with_its_lease(
    settings, caplog, make_job
):
    settings.DJANGO_JOBS = FAST
    expires = timezone.now() + timedelta(seconds=30)
    other = make_job(status=JobStatus.RUNNING, lease_owner="far:1:ab", lease_expires_at=expires)
    caplog.set_level(logging.INFO, logger="django_jobs")
    _, thread = burst_worker()
    try:
        wait_until(lambda: said(caplog, "burst_waiting"), timeout=10)
        # It goes on checking, every poll (20 ms), but says nothing more about the same job.
        threading.Event().wait(0.2)
        assert thread.is_alive()
    finally:
        Job.objects.filter(pk=other.pk).update(status=JobStatus.SUCCEEDED, lease_owner=None)
        thread.join(10)
    assert not thread.is_alive()
    [line] = said(caplog, "burst_waiting")
    assert line.getMessage().startswith(
        f"burst: nothing due; waiting for 1 running job(s) to finish: #{other.pk} on far:1:ab, "
        "lease until "
    )
    # The lease's time left when the worker said it (a loaded machine may take seconds to
    # get there), to the second.
    [seconds] = re.findall(r"\(in (\d+) s\)$", line.getMessage())
    left = (expires - datetime.fromtimestamp(line.created, dt_timezone.utc)).total_seconds()
    assert abs(int(seconds) - left) <= 1.5, (seconds, left)
    assert line.job_ids == [other.pk]
    [exit_line] = said(caplog, "burst_drained")
    assert exit_line.getMessage() == "burst: nothing due or running on queues default; exiting"


def test_burst_waiting_for_its_own_long_job_names_it_here(settings, caplog):
    settings.DJANGO_JOBS = FAST
    # Long enough that the main loop's first turn (the election, the chores: a few writes,
    # slow on a loaded host) ends before the job does, and the drained check sees it run.
    job = schedule_job("tests.sleepy", {"seconds": 1.5})
    caplog.set_level(logging.INFO, logger="django_jobs")
    _, thread = burst_worker()
    thread.join(10)
    assert not thread.is_alive()
    [line] = said(caplog, "burst_waiting")
    assert line.getMessage() == (
        f"burst: nothing due; waiting for 1 running job(s) to finish: #{job.pk} here"
    )
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED


def test_burst_exit_names_the_retry_it_leaves_for_a_later_run(settings, caplog):
    settings.DJANGO_JOBS = {**FAST, "RETRY_BASE_SECONDS": 30, "RETRY_JITTER": 0}
    job = schedule_job("tests.fail")
    caplog.set_level(logging.INFO, logger="django_jobs")
    _, thread = burst_worker()
    thread.join(10)
    assert not thread.is_alive()
    job.refresh_from_db()
    assert (job.status, job.attempts_used) == (JobStatus.PENDING, 1)
    [exit_line] = said(caplog, "burst_drained")
    message = exit_line.getMessage()
    assert message.startswith(
        "burst: nothing due or running on queues default; exiting; left for a later run: "
        f"1 job(s), the first job #{job.pk}'s retry, due at "
    )
    assert re.search(r"\(in (29|30) s\)$", message), message
    assert exit_line.due_later == 1
    assert said(caplog, "burst_waiting") == []  # a retry not yet due is not waited for


def test_burst_check_names_a_job_from_the_second_check_that_finds_it_running_and_once(
    worker, make_job, clock, caplog
):
    # Driven directly, on the worker's clock: the last jobs of a drain, which end before
    # the next check, go unnamed; a job still running at the next check is named once.
    w = worker(burst=True)
    lease = clock.now() + timedelta(seconds=30)
    brief = make_job(status=JobStatus.RUNNING, lease_owner="far:1:ab", lease_expires_at=lease)
    check = BurstCheck(w.parts())
    caplog.set_level(logging.INFO, logger="django_jobs")
    assert check.drained(busy=False) is False
    Job.objects.filter(pk=brief.pk).update(status=JobStatus.SUCCEEDED)
    long = make_job(status=JobStatus.RUNNING, lease_owner=w.owner, lease_expires_at=lease)
    assert check.drained(busy=True) is False  # first sight of the long one
    assert said(caplog, "burst_waiting") == []
    for _ in range(3):
        assert check.drained(busy=True) is False
    [line] = said(caplog, "burst_waiting")
    assert line.getMessage().endswith(f"to finish: #{long.pk} here")
    Job.objects.filter(pk=long.pk).update(status=JobStatus.SUCCEEDED)
    assert check.drained(busy=False) is True


def test_burst_check_is_not_fooled_by_a_job_settled_back_to_due_between_two_queries(
    worker, make_job, clock
):
    # A failed attempt's retry, due at once, is written while the check runs: after a
    # query that saw the job running and not due, before one that looks for running jobs.
    # Two queries would see nothing due and nothing running, and the worker would exit
    # with the retry left behind.
    w = worker(burst=True)
    lease = clock.now() + timedelta(seconds=30)
    job = make_job(status=JobStatus.RUNNING, lease_owner="far:1:ab", lease_expires_at=lease)
    settled = []

    def settle_after_the_first_look(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if not settled and "django_jobs_job" in sql:
            settled.append(sql)
            Job.objects.filter(pk=job.pk).update(
                status=JobStatus.PENDING, run_at=clock.now(), lease_owner=None
            )
        return result

    check = BurstCheck(w.parts())
    with connection.execute_wrapper(settle_after_the_first_look):
        assert check.drained(busy=False) is False
    assert settled
    assert check.drained(busy=False) is False  # the retry is due: not drained either


def test_burst_exits_past_a_paused_queues_due_job_naming_the_queue(settings, caplog):
    from django_jobs import pause_queue

    settings.DJANGO_JOBS = FAST
    job = schedule_job("tests.ok")
    pause_queue("default")
    caplog.set_level(logging.INFO, logger="django_jobs")
    _, thread = burst_worker()
    thread.join(10)
    assert not thread.is_alive(), "a burst worker waited for a paused queue's job"
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING
    [exit_line] = said(caplog, "burst_drained")
    assert exit_line.getMessage().endswith("; paused, not waited for: default (`jobs resume NAME`)")
    assert exit_line.paused == ["default"]


def test_a_keyed_job_waiting_for_its_key_starts_as_the_running_one_ends(settings):
    """No wake-up comes from the database without LISTEN: the handler that ends a limited
    job wakes its own dispatcher, which does not wait out its poll."""
    settings.DJANGO_JOBS = {**FAST, "POLL_SECONDS": 5, "QUEUES": {"keyed": {"workers": 2}}}
    for _ in range(2):
        schedule_job("tests.keyed", {}, concurrency_key="a")
    worker = Worker(queues={"keyed": 2}, clock=SystemClock(), burst=True)
    thread = threading.Thread(target=serve, args=(worker, threading.Event()))
    thread.start()
    thread.join(15)
    assert not thread.is_alive()
    rows = Job.objects.order_by("started_at").values_list("started_at", "finished_at", named=True)
    first, second = rows
    assert first.finished_at is not None and second.started_at is not None
    gap = (second.started_at - first.finished_at).total_seconds()
    assert gap < 1, f"the second job started {gap:.1f} s after the first ended: a poll"


@pytest.mark.host_clock
def test_a_job_enqueued_just_before_a_tick_is_due_at_it():
    """Where the database's clock is this host's, the worker's clock reads it to the
    microsecond: SQLite's own reading, to the millisecond, put the worker up to a
    millisecond behind the clock that stamped ``run_at``, and a tick in that millisecond
    left the job pending (``run_until_empty()`` returned with it ``READY``)."""
    from django_jobs.testing import run_until_empty
    from django_jobs.worker.clock import DatabaseClock

    worker = Worker(queues={"default": 1}, clock=DatabaseClock())
    worker.clock.now()  # measured before the jobs are enqueued, as a running worker's is
    for _ in range(100):
        stamped = timezone.now()
        assert worker.clock.now() >= stamped
    for _ in range(20):
        job = schedule_job("tests.ok")
        assert run_until_empty(worker).succeeded == 1
        assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED
    worker.inflight.close()


def test_burst_waits_for_a_job_due_within_a_second(settings, caplog):
    """Its ``run_at`` was stamped by the enqueuing host's clock, which may run a moment
    ahead of the worker's: a burst worker runs it rather than leave it for a later run."""
    settings.DJANGO_JOBS = FAST
    job = schedule_job("tests.ok", run_at=timezone.now() + timedelta(seconds=0.5))
    assert drained(caplog).due_later == 0
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED


def test_burst_exits_past_a_job_of_a_name_it_does_not_know_and_says_so(settings, caplog, make_job):
    """Such a job waits for a worker that knows its name: a burst worker does not wait
    with it (it would never exit)."""
    settings.DJANGO_JOBS = FAST
    waiting = make_job(name="tests.from_the_next_deploy", run_at=timezone.now())
    exit_line = drained(caplog)
    assert Job.objects.get(pk=waiting.pk).status == JobStatus.PENDING
    assert exit_line.getMessage() == (
        "burst: nothing due or running on queues default; exiting; 1 job(s) due of names this"
        " worker does not know, not waited for: tests.from_the_next_deploy (register each with"
        " @job in an installed app's jobs.py, which runjobs imports)"
    )
    assert exit_line.levelname == "WARNING"  # work is left that no run of it will do
    assert exit_line.unknown_names == 1


@pytest.mark.skipif(
    connection.vendor == "sqlite",
    reason="SQLite's main loop writes too (the election, the registration): it waits for the"
    " write lock as the claim does",
)
def test_burst_exits_while_its_claim_waits_for_the_queues_lock(settings, caplog):
    """Burst workers sharing a limited queue claim one at a time under its lock, each
    waiting for the others' claims most of the time: a claim under way must not keep a
    worker that finds nothing due or running from exiting, or none of them ever does.
    Here another session holds the queue's lock while the worker's claim waits for it."""
    from django_jobs.db import get_driver

    settings.DJANGO_JOBS = {**FAST, "QUEUES": {"default": {"rate_limit": "1000/m"}}}
    caplog.set_level(logging.INFO, logger="django_jobs")
    get_driver().flow.make_queue_row("default")
    other = connection.copy()
    try:
        other.set_autocommit(False)
        with other.cursor() as cursor:
            cursor.execute("SELECT 1 FROM django_jobs_queue WHERE name = 'default' FOR UPDATE")
        _, thread = burst_worker()
        try:
            assert wait_until(lambda: said(caplog, "burst_drained"), timeout=5)
        finally:
            other.rollback()
    finally:
        other.close()
    thread.join(20)
    assert not thread.is_alive()
