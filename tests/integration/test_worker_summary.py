"""The worker's periodic summary: counts by outcome since the last line, on its own timer."""

import logging
import threading

import pytest

from django_jobs import schedule_job, schedule_jobs
from django_jobs.models import Job, JobStatus
from django_jobs.worker import Worker, serve
from django_jobs.worker.clock import SystemClock
from django_jobs.worker.summary import Summary
from tests.conftest import wait_until

FAST = {"POLL_SECONDS": 0.02, "MAINTENANCE_SECONDS": 0.1, "QUEUES": {"default": {"workers": 2}}}


def summaries(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == "worker_summary"]


@pytest.mark.django_db
def test_worker_summary_counts_each_outcome_kind_since_the_last_line(worker, make_job, caplog):
    w = worker()
    for name in ("tests.ok", "tests.ok", "tests.fail"):
        make_job(name=name)
    summary = Summary(w.writer, 60, start=100.0)
    caplog.set_level(logging.INFO, logger="django_jobs.worker.summary")
    for _ in range(3):
        w.run_once()
    summary.tick(159.9)
    assert summaries(caplog) == []  # not a minute yet
    summary.tick(160.0)
    [line] = summaries(caplog)
    assert line.levelno == logging.INFO
    assert line.getMessage() == "2 succeeded, 1 failed (retry due later) in the last 1 min"
    assert (line.counts, line.seconds, line.owner) == ({"succeeded": 2, "failed": 1}, 60, w.owner)
    summary.tick(220.0)
    assert len(summaries(caplog)) == 1  # nothing happened since: no line
    make_job(name="tests.ok")
    w.run_once()
    summary.tick(250.0)  # the next is due a minute after the silent one, at 280
    assert len(summaries(caplog)) == 1
    summary.tick(280.0)
    assert summaries(caplog)[-1].getMessage() == "1 succeeded in the last 1 min"


@pytest.mark.django_db
def test_worker_summary_seconds_0_turns_it_off(worker, make_job, caplog):
    w = worker()
    make_job(name="tests.ok")
    assert w.run_once().succeeded == 1
    summary = Summary(w.writer, 0, start=0.0)
    caplog.set_level(logging.INFO, logger="django_jobs.worker.summary")
    for now in (60.0, 600.0, 6000.0):
        summary.tick(now)
    summary.flush(6001.0)
    assert summaries(caplog) == []


@pytest.mark.django_db(transaction=True)
def test_worker_serving_logs_its_summary_every_summary_seconds_and_the_rest_at_its_stop(
    settings, caplog
):
    settings.DJANGO_JOBS = {**FAST, "SUMMARY_SECONDS": 0.5}
    caplog.set_level(logging.INFO, logger="django_jobs.worker.summary")
    schedule_jobs([{"job": "tests.ok"}] * 5)
    worker = Worker(clock=SystemClock())
    stop = threading.Event()
    thread = threading.Thread(target=serve, args=(worker, stop))
    thread.start()
    try:
        # The timer's lines say the first five, in one line or more (a busy machine drains
        # them over more than one interval).
        wait_until(lambda: succeeded(summaries(caplog)) == 5, timeout=10)
        said = len(summaries(caplog))
        schedule_job("tests.ok")
        wait_until(lambda: Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 6)
    finally:
        stop.set()  # at once: the last job's line comes from the stop, if not from the timer
        thread.join(10)
    assert [r.counts for r in summaries(caplog)[said:]] == [{"succeeded": 1}]


def succeeded(records: list) -> int:
    return sum(record.counts.get("succeeded", 0) for record in records)
