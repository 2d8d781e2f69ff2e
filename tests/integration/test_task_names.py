"""Each Django task is a job of its own name, its module path: in the admin, ``jobs list``,
logs and signals, with its own queue, attempts and timeout; the registry finds it."""

from __future__ import annotations

import logging
import sys
from datetime import timedelta
from functools import partial
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

pytest.importorskip("django_jobs.backend", reason="needs django.tasks or the django-tasks backport")

from django_jobs import add_recurring_job, schedule_job, signals  # noqa: E402
from django_jobs.exceptions import UnknownJob  # noqa: E402
from django_jobs.maintenance.scheduler import enqueue_due  # noqa: E402
from django_jobs.models import Job, JobStatus  # noqa: E402
from django_jobs.registry import _registry, get_definition, registered_names  # noqa: E402
from django_jobs.tasks.framework import TaskResultStatus, task_backends  # noqa: E402
from django_jobs.tasks.results import RUNNER, TaskTimedOut  # noqa: E402
from django_jobs.tasks.runner import run_task  # noqa: E402
from django_jobs.testing import FakeClock, run_until_empty  # noqa: E402
from django_jobs.worker import Worker, serve  # noqa: E402
from django_jobs.worker.clock import SystemClock  # noqa: E402
from tests.conftest import wait_until  # noqa: E402
from tests.support import tasks  # noqa: E402
from tests.support.threads import in_a_thread

pytestmark = pytest.mark.django_db

BOTH_QUEUES = {"default": 1, "emails": 1}


@pytest.fixture
def clock() -> FakeClock:
    """A second from now, so the tasks a test enqueues are due (see test_tasks_backend)."""
    return FakeClock(timezone.now() + timedelta(seconds=1))


def backend() -> Any:
    return task_backends["default"]


# -- the name ---------------------------------------------------------------------------


def test_task_names_a_task_is_a_job_named_by_its_module_path(worker):
    queued = tasks.add.enqueue(2, 3)
    row = Job.objects.get(pk=queued.id)
    assert row.name == "tests.support.tasks.add" == tasks.add.module_path
    assert row.payload == {"args": [2, 3], "kwargs": {}, "backend": "default", "run_after": None}
    assert run_until_empty(worker(queues=BOTH_QUEUES)).succeeded == 1
    assert tasks.add.get_result(queued.id).return_value == 5


def test_task_names_resolve_through_the_registry_without_registering(not_imported_lazy):
    """The registry holds no task: it asks the tasks package for a name it does not know."""
    assert (
        "tests.support.tasks.add" not in _registry and "tests.support.tasks.mail" not in _registry
    )
    definition = get_definition("tests.support.tasks.mail")
    assert (definition.name, definition.func) == ("tests.support.tasks.mail", run_task)
    assert (definition.queue, definition.priority) == ("emails", 10)
    assert get_definition(RUNNER).func is run_task  # the older rows' single name
    assert (
        "tests.support.tasks.add" in registered_names()
        and "tests.support.tasks.mail" in registered_names()
    )
    assert "tests.support.lazy_tasks.double" not in registered_names()  # not imported: not listed
    assert "tests.support.lazy_tasks" not in sys.modules


def test_task_names_get_their_own_queue_attempts_and_timeout(settings):
    slow = get_definition("tests.support.tasks.slow")
    assert (slow.queue, slow.priority, slow.max_attempts, slow.timeout) == ("emails", 3, 1, 0.3)
    add = get_definition("tests.support.tasks.add")
    assert (add.queue, add.max_attempts, add.timeout) == ("default", None, None)
    settings.TASKS = {
        **settings.TASKS,
        "default": {
            **settings.TASKS["default"],
            "OPTIONS": {"MODULES": ["tests.support.tasks"], "MAX_ATTEMPTS": 4},
        },
    }
    assert get_definition("tests.support.tasks.add").max_attempts == 4  # the backend's OPTIONS
    assert get_definition("tests.support.tasks.slow").max_attempts == 1  # the task's own


@pytest.mark.django_db(transaction=True)
def test_task_names_timeout_of_job_options_ends_the_attempt(settings):
    """``@job_options(timeout=0.3)``: the worker ends the attempt, not the queue's timeout."""
    settings.DJANGO_JOBS = {
        **settings.DJANGO_JOBS,
        "POLL_SECONDS": 0.02,
        "MAINTENANCE_SECONDS": 0.1,
        "QUEUES": {"default": {"workers": 1}, "emails": {"workers": 1}},
    }
    queued = tasks.slow.enqueue(1.0)
    quick = tasks.slow.enqueue(0)
    worker = Worker(clock=SystemClock())
    with in_a_thread(partial(serve, worker)):
        wait_until(
            lambda: (
                set(Job.objects.values_list("status", flat=True))
                == {JobStatus.DEAD_LETTERED, JobStatus.SUCCEEDED}
            ),
            timeout=10,
        )
    result = backend().get_result(queued.id)
    assert result.status == TaskResultStatus.FAILED
    assert [e.exception_class for e in result.errors] == [TaskTimedOut]
    assert backend().get_result(quick.id).return_value == "woke"


def test_task_names_list_and_filter_by_the_tasks_path(worker, admin_client):
    add, mail = tasks.add.enqueue(1, 1), tasks.mail.enqueue("ada@example.com")
    out = StringIO()
    call_command("jobs", "list", "--name", "tests.support.tasks.mail", stdout=out)
    lines = out.getvalue().splitlines()
    assert any(line.split()[:2] == [mail.id, "tests.support.tasks.mail"] for line in lines), lines
    assert not any(line.split()[:1] == [add.id] for line in lines)

    url = reverse("admin:django_jobs_job_changelist")
    response = admin_client.get(url, {"name": "tests.support.tasks.mail"})
    assert response.status_code == 200
    assert [job.pk for job in response.context["cl"].result_list] == [int(mail.id)]
    choices = [
        choice["display"]
        for spec in response.context["cl"].filter_specs
        if spec.title == "name"
        for choice in spec.choices(response.context["cl"])
    ]
    assert "tests.support.tasks.add" in choices and "tests.support.tasks.mail" in choices


@pytest.mark.django_db(transaction=True)
def test_task_names_logs_and_signals_carry_the_tasks_path(worker, caplog):
    heard: list[str] = []

    def receiver(sender: Any, name: str, **kwargs: Any) -> None:
        heard.append(name)

    signals.job_succeeded.connect(receiver)
    try:
        queued = tasks.add.enqueue(1, 2)
        with caplog.at_level(logging.DEBUG, logger="django_jobs"):
            assert run_until_empty(worker()).succeeded == 1
    finally:
        signals.job_succeeded.disconnect(receiver)
    assert heard == ["tests.support.tasks.add"]
    [line] = [r for r in caplog.records if getattr(r, "event", None) == "job_succeeded"]
    assert line.getMessage() == f"job tests.support.tasks.add #{queued.id} succeeded on attempt 1"


# -- what a name is not ------------------------------------------------------------------


def test_task_names_older_runner_rows_still_run(worker, make_job):
    payload = {
        "task": "tests.support.tasks.add",
        "args": [4, 5],
        "kwargs": {},
        "backend": "default",
    }
    row = make_job(name=RUNNER, payload=payload)
    assert worker().run_once().succeeded == 1
    result = backend().get_result(str(row.pk))
    assert (result.return_value, result.task.func) == (9, tasks.add.func)


def test_task_names_a_listed_module_is_imported_as_the_worker_starts_and_its_tasks_run(
    worker, make_job, settings, monkeypatch
):
    """Nothing imported it yet: the worker does, as it starts, so its tasks are names the
    worker knows and claims."""
    monkeypatch.delitem(sys.modules, "tests.support.lazy_tasks", raising=False)
    monkeypatch.delattr(sys.modules["tests.support"], "lazy_tasks", raising=False)
    default = settings.TASKS["default"]
    modules = ["tests.support.tasks", "tests.support.lazy_tasks"]
    settings.TASKS = {**settings.TASKS, "default": {**default, "OPTIONS": {"MODULES": modules}}}
    row = make_job(name="tests.support.lazy_tasks.double", payload={"args": [21]})
    assert worker().run_once().succeeded == 1
    assert backend().get_result(str(row.pk)).return_value == 42


@pytest.mark.parametrize(
    "name",
    [
        "os.getcwd",
        "tests.support.import_witness.not_a_task",
        "tests.support.tasks.CALLS",
        "tests.nowhere",
    ],
)
def test_task_names_a_name_that_is_no_task_stays_an_unknown_job(worker, make_job, name):
    """Not declared (nothing imported), or not a ``Task``: an unknown name, which no worker
    claims: the row waits, pending, no attempt used, nothing imported."""
    sys.modules.pop("tests.support.import_witness", None)
    row = make_job(name=name, max_attempts=2)
    with pytest.raises(UnknownJob, match=f"no job is registered under the name {name!r}"):
        get_definition(name)
    with pytest.raises(UnknownJob):
        schedule_job(name)
    assert worker().run_once().claimed == 0
    row.refresh_from_db()
    assert (row.status, row.attempts_used, row.payload) == (JobStatus.PENDING, 0, {})
    assert "tests.support.import_witness" not in sys.modules


def test_task_names_schedule_job_takes_a_tasks_path(worker):
    """``schedule_job`` (a recurring schedule too) names a task: its queue and attempts, the
    ``default`` alias and no arguments unless the payload gives them."""
    mail = schedule_job("tests.support.tasks.mail", {"args": ["bob@example.com"]})
    assert (mail.queue, mail.priority, mail.max_attempts) == ("emails", 10, 5)
    bare = schedule_job("tests.support.tasks.nothing")
    assert run_until_empty(worker(queues=BOTH_QUEUES)).succeeded == 2
    assert backend().get_result(str(mail.pk)).return_value == "sent to bob@example.com"
    assert backend().get_result(str(bare.pk)).status == TaskResultStatus.SUCCESSFUL


def test_task_names_a_named_row_with_a_payload_that_is_no_tasks_fails(worker, make_job):
    row = make_job(name="tests.support.tasks.add", payload={"args": "1, 2"}, max_attempts=1)
    assert worker().run_once().dead_lettered == 1
    row.refresh_from_db()
    assert row.last_error == (
        f"ValueError: job #{row.pk} cannot run task 'tests.support.tasks.add': its payload must "
        "be null "
        'or an object with "args" (a list), "kwargs" (an object) and "backend" (a TASKS alias)'
    )


@pytest.fixture
def not_imported_lazy(monkeypatch: Any) -> None:
    monkeypatch.delitem(sys.modules, "tests.support.lazy_tasks", raising=False)
    monkeypatch.delattr(sys.modules["tests.support"], "lazy_tasks", raising=False)


def test_task_names_a_recurring_schedule_runs_a_task(worker, clock):
    """The scheduler enqueues a task's job by its path, as ``schedule_job`` does."""
    add_recurring_job(
        "nightly-mail", "* * * * *", "tests.support.tasks.mail", {"args": ["ops@example.com"]}
    )
    assert enqueue_due(clock.now() + timedelta(minutes=1)) == 1
    row = Job.objects.get(schedule="nightly-mail")
    assert (row.name, row.queue) == ("tests.support.tasks.mail", "emails")
    clock.advance(120)
    run_until_empty(worker(queues=BOTH_QUEUES))  # its leader fires the next occurrence too
    assert backend().get_result(str(row.pk)).return_value == "sent to ops@example.com"
