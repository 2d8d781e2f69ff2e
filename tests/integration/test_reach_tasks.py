"""A Django task on JobsBackend that no worker imports is refused where it is made.

A worker declares a task when it imports its module: as the apps load, or on demand
from an installed app's ``tasks`` module or a module of ``OPTIONS["MODULES"]``. A task
made after start-up anywhere else would be enqueued by the web process alone and fail on
every worker; ``@task`` refuses it with Django's ``InvalidTask``, and so does each
``enqueue()``. The modules here are the project's own, written for the test
(``project_module``): the test suite's own modules count as reached.
"""

from __future__ import annotations

import importlib
from datetime import timedelta
from typing import Any

import pytest
from django.apps import apps
from django.utils import timezone

pytest.importorskip("django_jobs.backend", reason="needs django.tasks or the django-tasks backport")

from django_jobs import schedule_job  # noqa: E402
from django_jobs.exceptions import UnknownJob  # noqa: E402
from django_jobs.models import Job  # noqa: E402
from django_jobs.tasks.framework import InvalidTask  # noqa: E402
from django_jobs.testing import FakeClock, run_until_empty  # noqa: E402

pytestmark = pytest.mark.django_db


@pytest.fixture
def clock() -> FakeClock:
    """A second from now: ``enqueue()`` makes a task due at the host's time."""
    return FakeClock(timezone.now() + timedelta(seconds=1))


DOUBLE = """
from django_jobs.tasks.framework import task


@task()
def double(n):
    return 2 * n
"""


def refusal(module: str) -> str:
    return (
        f"task '{module}.double' is refused: '{module}' is neither an installed app's tasks "
        "module nor listed in TASKS['default']['OPTIONS']['MODULES'] (define the task in an "
        "installed app's tasks.py, or list its module there)"
    )


def set_modules(settings: Any, *modules: str) -> None:
    default = settings.TASKS["default"]
    options = {**default.get("OPTIONS", {}), "MODULES": ["tests.support.tasks", *modules]}
    settings.TASKS = {**settings.TASKS, "default": {**default, "OPTIONS": options}}


def test_reach_task_made_after_start_up_outside_the_declared_modules_is_refused(
    project_module,
):
    project_module("refused.helpers", DOUBLE)
    with pytest.raises(InvalidTask) as caught:
        importlib.import_module("refused.helpers")  # as a view importing it lazily would
    assert str(caught.value) == refusal("refused.helpers")
    assert not Job.objects.exists()


def test_reach_task_of_a_listed_module_is_taken_until_no_longer_listed(
    project_module, settings, worker
):
    project_module("listed.helpers", DOUBLE)
    set_modules(settings, "listed.helpers")
    double = importlib.import_module("listed.helpers").double
    result = double.enqueue(21)
    run_until_empty(worker())
    assert double.get_result(result.id).return_value == 42

    set_modules(settings)  # a deploy that no longer lists it: refused at once, no row written
    with pytest.raises(InvalidTask) as caught:
        double.enqueue(1)
    assert str(caught.value) == refusal("listed.helpers")
    with pytest.raises(UnknownJob) as by_path:
        schedule_job("listed.helpers.double", {"args": [1], "kwargs": {}, "backend": "default"})
    assert str(by_path.value) == refusal("listed.helpers")
    assert Job.objects.count() == 1


def test_reach_task_made_while_the_apps_load_is_taken_wherever_it_is(
    project_module, monkeypatch, worker
):
    """A module the apps import as they load (an app's models, its ready()) is imported by
    every worker too: its tasks are declared there, whatever their module."""
    project_module("loaded.helpers", DOUBLE)
    with monkeypatch.context() as loading:
        loading.setattr(apps, "ready", False)
        double = importlib.import_module("loaded.helpers").double
    result = double.using(priority=5).enqueue(5)
    run_until_empty(worker())
    assert double.get_result(result.id).return_value == 10
