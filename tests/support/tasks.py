"""Tasks of Django's Tasks framework that the tests run on JobsBackend and ImmediateBackend."""

from __future__ import annotations

import time
from typing import Any

from django_jobs.backend import job_options
from django_jobs.tasks.framework import TaskContext, task

CALLS: list[str] = []  # what the tasks saw, for the tests that run them in-process
# The modules tests.support.import_witness and tests.support.lazy_tasks, as imported.
IMPORTED: list[str] = []


@task()
def add(a: int, b: int) -> int:
    return a + b


@task()
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"args": list(args), "kwargs": kwargs}


@task()
def nothing() -> None:
    return None


@task()
def fail(message: str) -> None:
    raise ValueError(message)


@task()
async def async_add(a: int, b: int) -> int:
    return a + b


@task()
async def async_fail(message: str) -> None:
    raise KeyError(message)


@task()
def returns_object() -> Any:
    return object()


@task(takes_context=True)
def flaky(context: TaskContext, succeed_on: int) -> dict[str, Any]:
    """Fails until its ``succeed_on``-th attempt; returns what its context said."""
    CALLS.append(f"attempt {context.attempt}")
    if context.attempt < succeed_on:
        raise RuntimeError(f"failed on attempt {context.attempt}")
    return {"attempt": context.attempt, "id": context.task_result.id}


@task()
@job_options(max_attempts=2)
def twice(message: str) -> None:
    raise RuntimeError(message)


@task()
def leaks(api_key: str, note: str, *, password: str = "", nested: Any = None) -> None:
    raise RuntimeError(f"refused {api_key} and {password} and {nested} ({note})")


@task(queue_name="emails", priority=10)
def mail(to: str) -> str:
    return f"sent to {to}"


@task(priority=-50)
def low(n: int) -> int:
    return n


@task()
def deep(depth: int) -> None:
    """Fails with ``depth`` chained errors: a traceback longer than an attempt's error holds."""
    try:
        if depth:
            deep.func(depth - 1)
        raise ValueError("at the bottom")
    except ValueError as exc:
        raise ValueError(f"at depth {depth}") from exc


@task(queue_name="emails", priority=3)
@job_options(max_attempts=1, timeout=0.3)
def slow(seconds: float) -> str:
    """Sleeps past its own timeout when given more than 0.3 seconds."""
    time.sleep(seconds)
    return "woke"
