"""Django tasks enqueued through JobsBackend, run by a real ``manage.py runjobs``."""

from __future__ import annotations

import os
import signal

import pytest

pytest.importorskip("django_jobs.backend", reason="needs django.tasks or the django-tasks backport")

from django_jobs.models import Job  # noqa: E402
from django_jobs.tasks.framework import TaskResultStatus  # noqa: E402
from tests.conftest import wait_until  # noqa: E402
from tests.support import tasks  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)


def test_runjobs_runs_tasks_sync_async_and_retried(runjobs_process):
    results = [
        tasks.add.enqueue(2, 3),
        tasks.async_add.enqueue(4, 5),
        tasks.flaky.enqueue(2),
        tasks.mail.enqueue("ada@example.com"),
    ]
    process = runjobs_process.start()

    def finished() -> bool:
        for result in results:
            result.refresh()
        return all(result.is_finished for result in results)

    wait_until(finished, timeout=30)
    assert [r.status for r in results] == [TaskResultStatus.SUCCESSFUL] * 4, runjobs_process.log(
        process
    )
    assert [r.return_value for r in results[:2]] == [5, 9]
    assert results[2].return_value == {"attempt": 2, "id": results[2].id}
    assert results[3].return_value == "sent to ada@example.com"
    [owner] = set(results[2].worker_ids)
    assert len(results[2].worker_ids) == 2 and f":{process.pid}:" in owner
    # Each a job of its own name: the worker found them by path, having imported
    # tests.support.tasks (OPTIONS["MODULES"]) as it started.
    names = dict(Job.objects.values_list("pk", "name"))
    assert [names[int(r.id)] for r in results] == [
        "tests.support.tasks.add",
        "tests.support.tasks.async_add",
        "tests.support.tasks.flaky",
        "tests.support.tasks.mail",
    ]
    os.kill(process.pid, signal.SIGTERM)
    assert process.wait(20) == 0, runjobs_process.log(process)
