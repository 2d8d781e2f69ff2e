"""ctx.progress() through a real runjobs process: the row follows the handler."""

import time

import pytest

from django_jobs import schedule_job
from django_jobs.models import Job, JobStatus
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_progress_reaches_the_row_while_the_handler_runs(runjobs_process):
    process = runjobs_process.start("--queue", "default")
    job = schedule_job("example.counts", {"total": 25, "step": 0.1})  # about 2.5 s
    seen: list[int] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        row = Job.objects.get(pk=job.pk)
        if row.status != JobStatus.PENDING and row.status != JobStatus.RUNNING:
            break
        if row.progress_done is not None and row.progress_done not in seen:
            seen.append(row.progress_done)
            assert (row.progress_total, row.progress_note) == (25, f"step {row.progress_done}")
        time.sleep(0.02)
    wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED, timeout=10)
    # Written while it ran, rising, and no more often than once a second.
    assert len(seen) >= 2 and seen == sorted(seen), (seen, runjobs_process.log(process))
    assert len(seen) <= 4, seen
