"""Django's Tasks framework, wherever it comes from.

Django 6.0 and later ship it as ``django.tasks``; on Django 5.2 the
``django-tasks`` backport provides the same API as ``django_tasks``. The
rest of django-jobs imports these names from here only.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

from django.core.exceptions import ImproperlyConfigured

INSTALL_HINT = (
    "django_jobs.backend needs Django's Tasks framework: Django 6.0 or newer, or on Django 5.2 "
    "the django-tasks backport (pip install 'django-jobs[tasks]', or pip install django-tasks, "
    "then add 'django_tasks' to INSTALLED_APPS)"
)


class TasksFrameworkMissing(ImproperlyConfigured, ImportError):
    """Neither ``django.tasks`` nor the ``django_tasks`` backport can be imported."""


def _import(*names: str) -> tuple[ModuleType, ...] | None:
    try:
        return tuple(importlib.import_module(name) for name in names)
    except ImportError:
        return None


def _load() -> tuple[str, tuple[ModuleType, ...]]:
    for root, utils in (
        ("django.tasks", "django.utils.json"),
        ("django_tasks", "django_tasks.utils"),
    ):
        modules = _import(
            root,
            f"{root}.base",
            f"{root}.backends.base",
            f"{root}.exceptions",
            f"{root}.signals",
            utils,
        )
        if modules is not None:
            return root, modules[1:]
    raise TasksFrameworkMissing(INSTALL_HINT)


if TYPE_CHECKING:
    from django.tasks import task, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import (
        TASK_MAX_PRIORITY,
        TASK_MIN_PRIORITY,
        Task,
        TaskContext,
        TaskError,
        TaskResult,
        TaskResultStatus,
    )
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    ROOT: str
else:
    ROOT, (_base, _backends, _exceptions, _signals, _utils) = _load()
    task_backends = importlib.import_module(ROOT).task_backends
    task = importlib.import_module(ROOT).task
    BaseTaskBackend = _backends.BaseTaskBackend
    TASK_MAX_PRIORITY = _base.TASK_MAX_PRIORITY
    TASK_MIN_PRIORITY = _base.TASK_MIN_PRIORITY
    Task = _base.Task
    TaskContext = _base.TaskContext
    TaskError = _base.TaskError
    TaskResult = _base.TaskResult
    TaskResultStatus = _base.TaskResultStatus
    # The backport spells it InvalidTaskError.
    InvalidTask = getattr(_exceptions, "InvalidTask", None) or _exceptions.InvalidTaskError
    TaskResultDoesNotExist = _exceptions.TaskResultDoesNotExist
    task_enqueued = _signals.task_enqueued
    task_started = _signals.task_started
    task_finished = _signals.task_finished
    normalize_json = _utils.normalize_json

__all__ = [
    "ROOT",
    "TASK_MAX_PRIORITY",
    "TASK_MIN_PRIORITY",
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "TasksFrameworkMissing",
    "normalize_json",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
