"""Maintenance beside a claim on a database with row locks: neither waits on the other."""

import threading

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
