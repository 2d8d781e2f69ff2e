"""A real ``runjobs --burst`` with running rows that no live lease holds."""

from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone

from django_jobs.db import ClaimRequest, get_driver
from django_jobs.models import Attempt, Job, JobStatus
from testproject.example.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)


def test_runjobs_burst_reclaims_and_runs_rows_without_a_live_lease(runjobs_process):
    long_ago = timezone.now() - timedelta(hours=1)
    crashed = Job.objects.create(name="example.record", run_at=long_ago, created_at=long_ago)
    [claimed] = get_driver().claim(ClaimRequest("default", "crashed-worker", long_ago, 5))
    assert claimed.id == crashed.pk
    ownerless = Job.objects.bulk_create(
        Job(
            name="example.record",
            status=JobStatus.RUNNING,
            run_at=long_ago,
            created_at=long_ago,
            attempt=1,
            attempts_used=1,
            lease_expires_at=long_ago - timedelta(minutes=1),  # a batch ahead of the crashed job
        )
        for _ in range(101)
    )
    no_expiry = [
        Job.objects.create(
            name="example.record",
            status=JobStatus.RUNNING,
            run_at=long_ago,
            created_at=long_ago,
            attempt=1,
            attempts_used=1,
            lease_owner=owner,
            lease_expires_at=None,
        )
        for owner in ("gone-worker", None)
    ]
    Attempt.objects.create(job=no_expiry[0], number=1, owner="gone-worker", started_at=long_ago)
    process = runjobs_process.start("--burst", "--queue", "default")
    assert process.wait(30) == 0, runjobs_process.log(process)
    everyone = [crashed, *ownerless, *no_expiry]
    assert Job.objects.filter(status=JobStatus.SUCCEEDED).count() == len(everyone)
    runs = Counter(Execution.objects.values_list("job_id", flat=True))
    assert runs == Counter(job.pk for job in everyone)
    outcomes = list(Attempt.objects.filter(job=crashed).values_list("number", "outcome"))
    assert outcomes == [(1, "lease_expired"), (2, "succeeded")]
    assert list(no_expiry[0].attempts.values_list("number", "outcome")) == [
        (1, "lease_expired"),
        (2, "succeeded"),
    ]
