"""Signals: sent after the change commits; a receiver that raises changes nothing."""

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import transaction

from django_jobs import schedule_job, schedule_jobs
from django_jobs.models import Job, JobStatus
from django_jobs.signals import (
    job_cancelled,
    job_dead_lettered,
    job_enqueued,
    job_failed,
    job_started,
    job_succeeded,
)
from django_jobs.worker.clock import SystemClock

pytestmark = pytest.mark.django_db(transaction=True)

SIGNALS = {
    "enqueued": job_enqueued,
    "started": job_started,
    "succeeded": job_succeeded,
    "failed": job_failed,
    "dead_lettered": job_dead_lettered,
    "cancelled": job_cancelled,
}


@pytest.fixture
def heard() -> Iterator[list[tuple[str, dict[str, Any]]]]:
    got: list[tuple[str, dict[str, Any]]] = []
    receivers = {}
    for label, signal in SIGNALS.items():

        def receiver(sender: Any, label: str = label, **details: Any) -> None:
            details.pop("signal")
            got.append((label, details))

        signal.connect(receiver, sender=Job)
        receivers[label] = receiver
    yield got
    for label, signal in SIGNALS.items():
        signal.disconnect(receivers[label], sender=Job)


def test_signals_a_job_enqueued_started_and_succeeded(worker, heard):
    job = schedule_job("tests.ok")
    worker(clock=SystemClock()).run_once()
    assert [label for label, _ in heard] == ["enqueued", "started", "succeeded"]
    assert heard[0][1] == {"job_id": job.pk, "name": "tests.ok", "queue": "default"}
    assert heard[2][1]["attempt"] == 1 and heard[2][1]["error"] == ""


def test_signals_each_failed_attempt_then_the_dead_letter(worker, heard, settings):
    settings.DJANGO_JOBS = {"RETRY_BASE_SECONDS": 0}
    schedule_jobs([{"job": "tests.fail", "max_attempts": 2}])
    w = worker(clock=SystemClock())
    w.run_once()
    w.run_once()
    told = [(label, details) for label, details in heard if label != "started"]
    assert [label for label, _ in told] == ["enqueued", "failed", "failed", "dead_lettered"]
    assert [details["will_retry"] for label, details in told if label == "failed"] == [
        True,
        False,
    ]
    assert [details["attempt"] for _, details in told[1:]] == [1, 2, 2]
    assert told[-1][1]["error"] == told[-2][1]["error"] == "RuntimeError: boom 2"
    assert "will_retry" not in told[-1][1]


def test_signals_enqueued_only_once_the_transaction_commits(heard):
    with pytest.raises(RuntimeError), transaction.atomic():
        schedule_job("tests.ok")
        raise RuntimeError("the view failed")
    assert heard == []
    with transaction.atomic():
        schedule_job("tests.ok")
        assert heard == []  # not yet: the transaction is still open
    assert [label for label, _ in heard] == ["enqueued"]


def test_signals_a_receiver_that_raises_is_logged_and_changes_no_outcome(worker, caplog):
    def broken(sender: Any, **details: Any) -> None:
        raise ValueError("receiver bug")

    job_succeeded.connect(broken, sender=Job)
    try:
        job = schedule_job("tests.ok")
        with caplog.at_level("ERROR", logger="django_jobs.events"):
            assert worker(clock=SystemClock()).run_once().succeeded == 1
    finally:
        job_succeeded.disconnect(broken, sender=Job)
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED
    assert any("receiver bug" in record.getMessage() for record in caplog.records)


def test_signals_cancelled(heard):
    from django_jobs import cancel_job

    job = schedule_job("tests.ok")
    cancel_job(job.pk)
    assert Job.objects.get(pk=job.pk).status == JobStatus.CANCELLED
    assert [label for label, _ in heard] == ["enqueued", "cancelled"]


def test_signals_cancel_of_a_pending_job_is_told_once_it_commits(heard):
    from django_jobs import cancel_job

    job = schedule_job("tests.ok")
    heard.clear()
    with pytest.raises(RuntimeError), transaction.atomic():
        cancel_job(job.pk)
        assert heard == []  # not before the caller's transaction commits
        raise RuntimeError("the caller rolls back")
    assert heard == []
    assert Job.objects.get(pk=job.pk).status == JobStatus.PENDING
    with transaction.atomic():
        cancel_job(job.pk)
        assert heard == []
    assert [label for label, _ in heard] == ["cancelled"]
