"""``@job_options``: what a task's jobs get that Django's ``@task`` has no argument for.

A task's job is named by the task's module path, and that name's definition in
the registry carries these options, as ``@job(...)`` carries a plain job's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from ..conf import INT_MAX, is_int
from .framework import Task

F = TypeVar("F", bound=Callable[..., Any])

ATTRIBUTE = "django_jobs_options"


@dataclass(frozen=True)
class TaskOptions:
    """A task's own attempts and handler timeout (None: its backend's, then DJANGO_JOBS')."""

    max_attempts: int | None = None
    timeout: float | None = None


def max_attempts_of(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if not is_int(value, 1):
        raise ValueError(f"{where} must be an integer from 1 to {INT_MAX}, got {value!r}")
    return value


def timeout_of(value: Any, where: str) -> float | None:
    """Seconds, from a number or a ``timedelta``: finite and more than zero."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(
            f"{where} must be a number of seconds above 0 or a timedelta, got {value!r}"
        )
    return seconds


def job_options(
    *, max_attempts: int | None = None, timeout: float | timedelta | None = None
) -> Callable[[F], F]:
    """Give a task's jobs options Django's ``@task`` has no place for. Put it under ``@task``::

        @task(queue_name="emails")
        @job_options(max_attempts=8, timeout=30)
        def send_welcome(user_id): ...

    ``timeout`` (seconds, or a ``timedelta``) overrides the queue's ``timeout`` for this
    task, as ``@job(timeout=...)`` does for a job. Other backends ignore both, so the same
    task runs on ``ImmediateBackend`` in tests.
    """
    options = TaskOptions(
        max_attempts_of(max_attempts, "job_options(max_attempts=...)"),
        timeout_of(timeout, "job_options(timeout=...)"),
    )

    def decorate(func: F) -> F:
        if isinstance(func, Task):
            raise TypeError("put @job_options(...) under @task, on the function itself")
        setattr(func, ATTRIBUTE, options)
        return func

    return decorate


def options_of(task: Task) -> TaskOptions:
    found = getattr(task.func, ATTRIBUTE, None)
    return found if isinstance(found, TaskOptions) else TaskOptions()
