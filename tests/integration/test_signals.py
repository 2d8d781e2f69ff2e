"""Signals: sent after the change commits; a receiver that raises changes nothing."""

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction

from django_jobs import schedule_job, schedule_jobs
from django_jobs.maintenance.rescuer import dead_letter_exhausted, reclaim_expired_leases
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
from tests.conftest import START

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


# -- ends decided off the worker: a lease taken back, a pending job with no attempt left --

LONG_AGO = START - timedelta(hours=2)


def died_with_its_worker(worker, **fields: Any) -> Job:
    """A job claimed by a worker that then died: its lease has lapsed by ``START``."""
    job = Job.objects.create(name="tests.ok", run_at=LONG_AGO, created_at=LONG_AGO, **fields)
    [claimed] = worker(owner="crashed").claimer.claim("default", LONG_AGO, 1)
    assert claimed.id == job.pk
    return job


def ends(heard: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    return [(label, details) for label, details in heard if label not in ("enqueued", "started")]


def test_signals_a_lapsed_lease_with_attempts_left_is_a_failed_attempt_retried(worker, heard):
    job = died_with_its_worker(worker, max_attempts=3)
    assert reclaim_expired_leases(START) == 1
    assert ends(heard) == [
        (
            "failed",
            {
                "job_id": job.pk,
                "name": "tests.ok",
                "queue": "default",
                "attempt": 1,
                "error": "LeaseExpired: worker crashed lost its lease on attempt 1",
                "will_retry": True,
            },
        )
    ]
    assert Job.objects.get(pk=job.pk).status == JobStatus.PENDING


def test_signals_a_lapsed_lease_on_the_last_attempt_fails_then_dead_letters(worker, heard):
    job = died_with_its_worker(worker, max_attempts=1)
    assert reclaim_expired_leases(START) == 1
    told = ends(heard)
    assert [label for label, _ in told] == ["failed", "dead_lettered"]
    assert told[0][1]["will_retry"] is False
    assert "will_retry" not in told[1][1]
    assert {details["job_id"] for _, details in told} == {job.pk}
    assert told[1][1]["error"] == Job.objects.get(pk=job.pk).last_error
    assert Job.objects.get(pk=job.pk).status == JobStatus.DEAD_LETTERED


def test_signals_a_lapsed_lease_with_a_cancel_requested_is_cancelled(worker, heard):
    from django_jobs import cancel_job

    job = died_with_its_worker(worker, max_attempts=3)
    cancel_job(job.pk)  # running: a request its dead worker never hears
    assert ends(heard) == []
    assert reclaim_expired_leases(START) == 1
    told = ends(heard)
    assert [label for label, _ in told] == ["cancelled"]
    assert (told[0][1]["job_id"], told[0][1]["attempt"]) == (job.pk, 1)
    assert Job.objects.get(pk=job.pk).status == JobStatus.CANCELLED


def test_signals_a_pending_job_with_no_attempt_left_is_dead_lettered(heard):
    job = Job.objects.create(
        name="tests.ok", run_at=LONG_AGO, attempt=2, attempts_used=2, max_attempts=2
    )
    assert dead_letter_exhausted(START) == 1
    assert ends(heard) == [
        (
            "dead_lettered",
            {
                "job_id": job.pk,
                "name": "tests.ok",
                "queue": "default",
                "attempt": 2,
                "error": "NoAttemptsLeft: pending with no attempt left",
            },
        )
    ]
    assert dead_letter_exhausted(START) == 0
    assert len(ends(heard)) == 1  # told once


def test_signals_a_receiver_that_raises_changes_nothing_the_maintenance_pass_wrote(worker, caplog):
    def broken(sender: Any, **details: Any) -> None:
        raise ValueError("pager down")

    lapsed = [died_with_its_worker(worker, max_attempts=1) for _ in range(2)]
    exhausted = [
        Job.objects.create(name="tests.ok", run_at=LONG_AGO, attempts_used=1, max_attempts=1)
        for _ in range(2)
    ]
    job_dead_lettered.connect(broken, sender=Job)
    try:
        with caplog.at_level("ERROR", logger="django_jobs.events"):
            assert reclaim_expired_leases(START) == 2
            assert dead_letter_exhausted(START) == 2
    finally:
        job_dead_lettered.disconnect(broken, sender=Job)
    statuses = set(
        Job.objects.filter(pk__in=[j.pk for j in lapsed + exhausted]).values_list(
            "status", flat=True
        )
    )
    assert statuses == {JobStatus.DEAD_LETTERED}
    failed = [r for r in caplog.records if getattr(r, "event", "") == "signal_receiver_failed"]
    assert len(failed) == 4 and all("pager down" in r.getMessage() for r in failed)


def status_seen_by_another_connection(job_id: int) -> str:
    """The job's status as a session other than the sender's reads it: committed only."""
    seen: list[str] = []

    def read() -> None:
        try:
            seen.append(Job.objects.values_list("status", flat=True).get(pk=job_id))
        finally:
            connection.close()

    thread = threading.Thread(target=read)
    thread.start()
    thread.join(10)
    return seen[0]


def test_signals_of_the_maintenance_pass_come_once_its_write_has_committed(worker):
    seen: list[str] = []

    def look(sender: Any, job_id: int, **details: Any) -> None:
        seen.append(status_seen_by_another_connection(job_id))

    died_with_its_worker(worker, max_attempts=1)
    Job.objects.create(name="tests.ok", run_at=LONG_AGO, attempts_used=1, max_attempts=1)
    job_dead_lettered.connect(look, sender=Job)
    try:
        assert reclaim_expired_leases(START) == 1
        assert dead_letter_exhausted(START) == 1
    finally:
        job_dead_lettered.disconnect(look, sender=Job)
    assert seen == [JobStatus.DEAD_LETTERED, JobStatus.DEAD_LETTERED]


def test_a_receiver_connected_after_a_send_hears_the_next_and_none_once_disconnected():
    """The signals keep the receivers they found for a sender (``use_caching``): one
    connected after a send that found none hears the next, and a disconnected one none."""
    schedule_job("tests.ok")  # sent with no receiver: none is what the signal keeps
    got: list[int] = []

    def receiver(sender: Any, job_id: int, **details: Any) -> None:
        got.append(job_id)

    job_enqueued.connect(receiver, sender=Job)
    try:
        job = schedule_job("tests.ok")
    finally:
        job_enqueued.disconnect(receiver, sender=Job)
    schedule_job("tests.ok")
    assert got == [job.pk]
