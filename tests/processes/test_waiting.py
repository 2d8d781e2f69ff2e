"""``wait_for`` and ``await_job`` against a real ``runjobs`` process: a view's way of
waiting for a job it enqueued, for its end and its result."""

import pytest
from asgiref.sync import async_to_sync

from django_jobs import aschedule_job, await_job, schedule_job, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_wait_for_and_await_job_return_what_a_runjobs_process_ended(runjobs_process):
    runjobs_process.start("--queue", "default", env={"JOBS_POLL_SECONDS": "0.2"})
    done = wait_for(schedule_job("reports.add", {"a": 40, "b": 2}), timeout=30)
    assert done.status == "succeeded" and done.result == 42

    async def from_a_coroutine():
        job = await aschedule_job("demo.broken", max_attempts=1)
        return await await_job(job, timeout=30)

    failed = async_to_sync(from_a_coroutine)()
    assert failed.status == "dead_lettered" and "this job always fails" in failed.last_error
