"""A task's exception as an attempt's stored error, and back; no database."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("django_jobs.backend", reason="needs django.tasks or the django-tasks backport")

from django_jobs.conf import runs_tasks  # noqa: E402
from django_jobs.models import AttemptOutcome  # noqa: E402
from django_jobs.tasks.results import (  # noqa: E402
    PREFIX,
    failure_head,
    failure_trace,
    task_error,
)


def raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


def test_failure_head_and_trace_read_back_as_the_task_error():
    exc = raised(ValueError("missing\nsecond line"))
    head = failure_head(exc)
    assert head == "builtins.ValueError: missing"
    error = task_error(PREFIX + head, AttemptOutcome.FAILED, failure_trace(exc))
    assert error.exception_class is ValueError
    assert error.traceback.startswith("Traceback (most recent call last):\n")
    assert error.traceback.endswith("ValueError: missing\nsecond line\n")


def test_task_error_of_an_older_row_reads_the_trace_from_its_error_text():
    """Before attempts had a traceback column, the error carried it after its first line."""
    old = PREFIX + "builtins.KeyError: 'sku'\nTraceback (most recent call last):\nKeyError: 'sku'\n"
    error = task_error(old, AttemptOutcome.FAILED)
    assert error.exception_class is KeyError
    assert error.traceback == "Traceback (most recent call last):\nKeyError: 'sku'\n"


def test_failure_head_of_an_exception_whose_message_breaks():
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert failure_head(raised(Unprintable())).endswith(
        "test_failure_head_of_an_exception_whose_message_breaks.<locals>.Unprintable"
    )


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"BACKEND": "django_jobs.backend.JobsBackend"}, True),
        ({"BACKEND": "tests.unit.test_task_results.Subclass"}, True),
        ({"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}, False),
        ({"BACKEND": "no.such.Backend"}, False),
        ({}, False),
        ("django_jobs.backend.JobsBackend", False),
    ],
)
def test_runs_tasks_only_for_jobs_backends(params: Any, expected: bool):
    assert runs_tasks(params) is expected


from django_jobs.backend import JobsBackend  # noqa: E402


class Subclass(JobsBackend):
    pass
