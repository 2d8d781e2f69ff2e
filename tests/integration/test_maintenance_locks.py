"""Maintenance beside a claim on a database with row locks: neither waits on the other."""

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction

from django_jobs.db import get_driver
from django_jobs.maintenance.rescuer import dead_letter_exhausted
from django_jobs.models import Job, JobStatus
from tests.conftest import START

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.skip_locked]


def test_dead_letter_exhausted_passes_a_row_a_claim_holds_without_a_deadlock():
    """A claim locks its row, then marks it running. Dead-lettering meanwhile must not
    wait on that row: on InnoDB its scan locks the row's index entry first, and the
    claim's update needs that entry (error 1213, one of the two rolled back)."""
    Job.objects.bulk_create(
        Job(name="tests.ok", status=JobStatus.SUCCEEDED, run_at=START, created_at=START)
        for _ in range(300)
    )
    claimed = Job.objects.create(name="tests.ok", run_at=START, created_at=START)
    exhausted = Job.objects.create(
        name="tests.ok", run_at=START, created_at=START, attempts_used=3, max_attempts=3
    )
    if connection.vendor == "mysql":
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE TABLE {get_driver().job_table}")
            cursor.fetchall()
    outcome: list[object] = []

    def maintain() -> None:
        try:
            outcome.append(dead_letter_exhausted(START))
        except Exception as exc:
            outcome.append(exc)
        finally:
            connections.close_all()

    with transaction.atomic():
        Job.objects.select_for_update().filter(pk=claimed.pk).exists()  # the claim's read
        thread = threading.Thread(target=maintain)
        thread.start()
        thread.join(1.0)  # done, or (before the fix) waiting on the claim's row
        Job.objects.filter(pk=claimed.pk).update(status=JobStatus.RUNNING)  # the claim's mark
    thread.join(10)
    assert outcome == [1]
    assert Job.objects.get(pk=exhausted.pk).status == JobStatus.DEAD_LETTERED
    assert Job.objects.get(pk=claimed.pk).status == JobStatus.RUNNING


def test_pruning_never_hides_a_due_job_from_a_claim():
    """A claim's SKIP LOCKED read passes the rows another session holds. Pruning locks only
    the rows it deletes, found first by a plain read: a locking scan locks, for a moment,
    every row it passes (InnoDB, where the planner scans a small table), and a claim in
    that moment passed a due job, and its worker slept a poll."""
    from django_jobs.db.records import ClaimRequest
    from django_jobs.maintenance.cleaner import prune_batch

    Job.objects.bulk_create(
        Job(
            name="tests.ok",
            status=JobStatus.SUCCEEDED,
            run_at=START,
            created_at=START,
            finished_at=START,
        )
        for _ in range(3)
    )
    due = Job.objects.create(name="tests.ok", run_at=START, created_at=START)
    driver = get_driver()
    stop = threading.Event()
    passes: list[int] = []

    def maintain() -> None:
        try:
            while not stop.is_set():
                prune_batch(driver, JobStatus.SUCCEEDED, START - timedelta(days=1), 100)
                passes.append(1)
        finally:
            connections.close_all()

    thread = threading.Thread(target=maintain)
    thread.start()
    reads = misses = 0
    try:
        until = time.monotonic() + 1.5
        while time.monotonic() < until:
            with transaction.atomic():
                read = driver.read_candidates(ClaimRequest("default", "w", START, 60, 10))
                transaction.set_rollback(True)
            reads += 1
            misses += due.pk not in [row.id for row in read]
    finally:
        stop.set()
        thread.join(10)
    assert len(passes) > 20 and reads > 20
    assert misses == 0, f"{misses} of {reads} claims passed the due job"
