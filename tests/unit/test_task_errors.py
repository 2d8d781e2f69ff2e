"""A task's exception as an attempt's stored error, and back; no database."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("django_jobs.backend", reason="needs django.tasks or the django-tasks backport")

from django_jobs.apps import runs_tasks  # noqa: E402
from django_jobs.models import AttemptOutcome  # noqa: E402
from django_jobs.outcomes import ERROR_LIMIT  # noqa: E402
from django_jobs.tasks.results import PREFIX, failure_text, task_error  # noqa: E402


def raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


def test_failure_text_reads_back_as_the_task_error():
    text = failure_text(raised(ValueError("missing\nsecond line")))
    assert text.splitlines()[0] == "builtins.ValueError: missing"
    error = task_error(PREFIX + text, AttemptOutcome.FAILED)
    assert error.exception_class is ValueError
    assert error.traceback.startswith("Traceback (most recent call last):\n")
    assert error.traceback.endswith("ValueError: missing\nsecond line\n")


def test_failure_text_fits_an_attempt_error_with_room_to_mask():
    exc = raised(ValueError("x" * 5000))
    text = PREFIX + failure_text(exc)
    assert len(text) <= ERROR_LIMIT - 90
    assert text.splitlines()[2] == "  ..."


def test_failure_text_of_an_exception_whose_message_breaks():
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    head = failure_text(raised(Unprintable())).splitlines()[0]
    assert head.endswith(
        "test_failure_text_of_an_exception_whose_message_breaks.<locals>.Unprintable"
    )


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"BACKEND": "django_jobs.backend.JobsBackend"}, True),
        ({"BACKEND": "tests.unit.test_task_errors.Subclass"}, True),
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
