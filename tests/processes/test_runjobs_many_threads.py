"""One ``runjobs`` process with many handler threads on one queue, as the scaling bench runs it."""

from collections import Counter

import pytest

from django_jobs import schedule_jobs
from django_jobs.models import Attempt, Job, JobStatus
from testproject.example.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)

THREADS = 16


def test_runjobs_sixteen_threads_on_one_queue_run_each_job_once(runjobs_process):
    # Each job takes 20 ms, so that every thread has a job in hand at once and
    # each holds its own connection (PostgreSQL) or waits for the write lock (SQLite).
    jobs = schedule_jobs(
        [{"job": "example.record", "payload": {"n": n, "sleep": 0.02}} for n in range(320)]
    )
    process = runjobs_process.start("--burst", "--queue", "default", "--workers", str(THREADS))

    assert process.wait(120) == 0, runjobs_process.log(process)
    assert Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 320
    runs = Counter(Execution.objects.values_list("job_id", flat=True))
    assert set(runs) == {job.pk for job in jobs}
    assert set(runs.values()) == {1}
    assert Attempt.objects.filter(outcome="succeeded").count() == 320
    # Nothing went wrong on the way, such as a thread failing to connect.
    lines = runjobs_process.log(process).splitlines()
    assert [line for line in lines if " WARNING " in line or " ERROR " in line] == []
