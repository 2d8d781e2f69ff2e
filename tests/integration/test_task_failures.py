"""A task's failure as Django's own receivers see it, a task that no longer imports, and
arguments that are not JSON."""

from __future__ import annotations

import logging
import sys
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import pytest
from django.utils import timezone

pytest.importorskip("django_jobs.backend", reason="needs django.tasks or the django-tasks backport")

from django_jobs import cancel_job, schedule_job  # noqa: E402
from django_jobs.exceptions import JobCancelled, PayloadError, UnknownJob  # noqa: E402
from django_jobs.models import Job, JobStatus  # noqa: E402
from django_jobs.tasks.framework import (  # noqa: E402
    ROOT,
    TaskResultStatus,
    task_backends,
    task_finished,
)
from django_jobs.tasks.results import RUNNER  # noqa: E402
from django_jobs.testing import FakeClock, run_until_empty  # noqa: E402
from django_jobs.worker import Worker, serve  # noqa: E402
from django_jobs.worker.clock import SystemClock  # noqa: E402
from tests.conftest import wait_until  # noqa: E402
from tests.support import tasks  # noqa: E402
from tests.support.threads import in_a_thread

pytestmark = pytest.mark.django_db


@pytest.fixture
def clock() -> FakeClock:
    """A second from now, so the tasks a test enqueues are due (see test_tasks_backend)."""
    return FakeClock(timezone.now() + timedelta(seconds=1))


@pytest.fixture
def finished() -> Any:
    """``task_finished`` as heard: each result with ``sys.exc_info()`` at that moment."""
    heard: list[tuple[Any, Any]] = []

    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
        heard.append((task_result, sys.exc_info()[1]))

    task_finished.connect(receiver)
    yield heard
    task_finished.disconnect(receiver)


def one_attempt(settings: Any) -> None:
    default = settings.TASKS["default"]
    settings.TASKS = {
        **settings.TASKS,
        "default": {**default, "OPTIONS": {**default.get("OPTIONS", {}), "MAX_ATTEMPTS": 1}},
    }


# -- task_finished while the failure is being handled ---------------------------------------


def test_task_failures_finished_is_sent_while_the_tasks_error_is_handled(
    worker, settings, caplog, finished
):
    """As ImmediateBackend: Django's own log line of the failure carries its traceback."""
    one_attempt(settings)
    queued = tasks.fail.enqueue("boom")
    ok = tasks.add.enqueue(1, 1)
    with caplog.at_level(logging.INFO, logger=ROOT):
        run_until_empty(worker())
    by_id = {result.id: error for result, error in finished}
    assert isinstance(by_id[queued.id], ValueError) and str(by_id[queued.id]) == "boom"
    assert by_id[ok.id] is None
    [line] = [
        r
        for r in caplog.records
        if r.name == ROOT and r.levelno == logging.ERROR and queued.id in r.getMessage()
    ]
    assert line.exc_info is not None and line.exc_info[0] is ValueError
    text = caplog.text
    assert "NoneType: None" not in text
    assert "raise ValueError(message)" in text  # the task's own frame, from its traceback


def test_task_failures_finished_for_a_retry_carries_the_error_too(worker, finished):
    queued = tasks.fail.enqueue("again")
    assert run_until_empty(worker()).retried == 1
    [(result, error)] = finished
    assert (result.id, result.status) == (queued.id, TaskResultStatus.READY)
    assert isinstance(error, ValueError)


@pytest.mark.django_db(transaction=True)
def test_task_failures_finished_for_a_cancel_carries_its_error(finished):
    """Ended by the worker or cancelled: what the task raised is not known, the error is."""
    queued = tasks.add.enqueue(1, 2)
    cancel_job(int(queued.id))
    [(result, error)] = finished
    assert result.status == TaskResultStatus.FAILED
    assert isinstance(error, JobCancelled) and "cancel_job() before it ran" in str(error)


# -- a task that no longer imports ----------------------------------------------------------


@pytest.mark.parametrize("legacy", [False, True], ids=["named", "runner-row"])
def test_task_failures_a_task_that_no_longer_imports_fails_as_an_import_error(
    worker, make_job, monkeypatch, finished, legacy
):
    """Enqueued, then the task was renamed away: the attempt fails as the import does,
    ``task_finished`` is sent, and the result reads FAILED."""
    queued = tasks.nothing.enqueue()
    row = Job.objects.get(pk=queued.id)
    if legacy:
        payload = {"task": row.name, "args": [], "kwargs": {}, "backend": "default"}
        row = make_job(name=RUNNER, payload=payload)
        Job.objects.filter(pk=queued.id).delete()
    Job.objects.filter(pk=row.pk).update(max_attempts=1)
    monkeypatch.delattr(tasks, "nothing")
    assert run_until_empty(worker()).dead_lettered == 1
    result = task_backends["default"].get_result(str(row.pk))
    assert result.status == TaskResultStatus.FAILED
    assert result.task.module_path == "tests.support.tasks.nothing"
    [error] = result.errors
    assert error.exception_class_path == "builtins.ImportError"
    assert error.traceback.splitlines()[-1] == (
        'ImportError: Module "tests.support.tasks" does not define a "nothing" attribute/class'
    )
    [(sent, raised)] = finished
    assert (sent.id, sent.status) == (str(row.pk), TaskResultStatus.FAILED)
    assert isinstance(raised, ImportError)
    assert "tests.support.tasks.nothing" not in tasks.__dict__  # nothing declared it again


def test_task_failures_a_listed_module_that_is_gone_leaves_its_jobs_waiting(
    worker, make_job, settings, caplog
):
    """No worker can declare its tasks: their jobs wait, no attempt used, for one that can
    (a deploy that brings the module back), and the worker says why as it starts."""
    settings.TASKS = {
        **settings.TASKS,
        "default": {**settings.TASKS["default"], "OPTIONS": {"MODULES": ["tests.moved_away"]}},
    }
    row = make_job(name="tests.moved_away.send", payload=None, max_attempts=1)
    with caplog.at_level(logging.WARNING, logger="django_jobs"):
        assert run_until_empty(worker()).claimed == 0
    row.refresh_from_db()
    assert (row.status, row.attempts_used) == (JobStatus.PENDING, 0)
    [said] = [r for r in caplog.records if getattr(r, "event", "") == "task_module_not_imported"]
    assert "'tests.moved_away' cannot be imported (ModuleNotFoundError" in said.getMessage()


def test_task_failures_a_task_that_no_longer_imports_cannot_be_enqueued(monkeypatch):
    monkeypatch.delattr(tasks, "nothing")
    with pytest.raises(UnknownJob, match="task 'tests.support.tasks.nothing' cannot be imported"):
        schedule_job("tests.support.tasks.nothing")
    assert not Job.objects.exists()


# -- arguments that are not JSON --------------------------------------------------------------


WHEN = datetime(2026, 1, 5, tzinfo=timezone.get_current_timezone())


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [
        ((1, WHEN), {}, TypeError, "argument 2 is a datetime, not JSON"),
        ((), {"when": WHEN}, TypeError, "keyword argument 'when' is a datetime, not JSON"),
        ((1, [2, {"at": {WHEN}}]), {}, TypeError, "argument 2[1]['at'] is a set, not JSON"),
        ((), {"n": {object(): 1}}, TypeError, "keyword argument 'n' has a key that is an object"),
        ((b"\xff",), {}, TypeError, "argument 1 is bytes that are not UTF-8, not JSON"),
        ((float("nan"),), {}, PayloadError, "argument 1 is nan, not strict JSON"),
        ((), {"note": "a\x00b"}, PayloadError, "keyword argument 'note' contains a NUL"),
        ((), {"n": {1: 2}}, PayloadError, "keyword argument 'n' has a key that is not a string"),
    ],
    ids=repr,
)
def test_task_failures_an_argument_that_is_not_json_is_named(args, kwargs, error, message):
    with pytest.raises(error) as raised:
        tasks.echo.enqueue(*args, **kwargs)
    assert str(raised.value).startswith(message)
    assert not Job.objects.exists()


def test_task_failures_arguments_normalized_as_django_does():
    queued = tasks.echo.enqueue((1, 2), b"bytes", six={"seven": (7,)})
    assert (queued.args, queued.kwargs) == ([[1, 2], "bytes"], {"six": {"seven": [7]}})
    assert Job.objects.get(pk=queued.id).status == JobStatus.PENDING


@pytest.mark.django_db(transaction=True)
def test_task_failures_finished_from_the_settler_thread_carries_the_error(settings, finished):
    """Served as ``runjobs`` serves: the outcome is written, and the signal sent, by the
    settler's thread, not the handler's."""
    settings.DJANGO_JOBS = {
        **settings.DJANGO_JOBS,
        "POLL_SECONDS": 0.02,
        "MAINTENANCE_SECONDS": 0.1,
        "QUEUES": {"default": {"workers": 1}},
    }
    one_attempt(settings)
    queued = tasks.fail.enqueue("served")
    worker = Worker(clock=SystemClock())
    with in_a_thread(partial(serve, worker)):
        wait_until(lambda: finished, timeout=10)
    [(result, error)] = finished
    assert (result.id, result.status) == (queued.id, TaskResultStatus.FAILED)
    assert isinstance(error, ValueError) and str(error) == "served"
