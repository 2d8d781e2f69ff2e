"""A task's job row as Django's ``TaskResult``, and a task's error as stored text.

The runtime stores an error line and a traceback per attempt (``Attempt.error``,
``Attempt.traceback``), secrets masked, as it does for every job. A task's
exception is stored as ``TaskFailed: <class path>: <first line of the message>``
with the task's own traceback; :func:`task_error` reads both back (and the older
rows, whose error text carried the traceback after its first line).
"""

from __future__ import annotations

import builtins
import traceback
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.utils.dateparse import parse_datetime

from .. import exceptions as jobs_exceptions
from ..models import AttemptOutcome, Job, JobStatus
from .declared import resolve_task
from .framework import Task, TaskError, TaskResult, TaskResultStatus

#: The job every task ran as before each task was a job name of its own (its module path);
#: its payload names the task. Rows of it still run.
RUNNER = "django_jobs.task"

PREFIX = "TaskFailed: "
MESSAGE_LIMIT = 200

STATUSES = {
    JobStatus.PENDING: TaskResultStatus.READY,
    JobStatus.RUNNING: TaskResultStatus.RUNNING,
    JobStatus.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    JobStatus.DEAD_LETTERED: TaskResultStatus.FAILED,
    JobStatus.CANCELLED: TaskResultStatus.FAILED,
}

#: The attempts that end in an error a ``TaskResult`` lists.
FAILED_OUTCOMES = {
    AttemptOutcome.FAILED,
    AttemptOutcome.TIMED_OUT,
    AttemptOutcome.LEASE_EXPIRED,
    AttemptOutcome.CANCELLED,
}


class TaskFailed(Exception):
    """A task raised: the message names the exception's class path and its first line;
    ``stored_traceback`` is the task's own traceback, the one its attempt stores."""

    def __init__(self, head: str, stored_traceback: str) -> None:
        super().__init__(head)
        self.stored_traceback = stored_traceback


class TaskTimedOut(Exception):
    """The attempt ran past its queue's ``timeout``; the worker cancelled it."""


class WorkerLost(Exception):
    """The worker running the attempt stopped renewing its lease (killed, cut off)."""


def class_path(kind: type[BaseException]) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


def failure_head(exc: BaseException) -> str:
    """``exc`` as :class:`TaskFailed`'s message: its class path and its message's first line."""
    try:
        message = str(exc)
    except Exception:
        message = ""
    first = message.strip().splitlines()[0][:MESSAGE_LIMIT] if message.strip() else ""
    return f"{class_path(type(exc))}: {first}" if first else class_path(type(exc))


def failure_trace(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def task_error(error: str, outcome: str | None, stored_traceback: str = "") -> TaskError:
    """The ``TaskError`` an attempt's stored error line and traceback stand for."""
    if error.startswith(PREFIX):
        head, _, trace = error[len(PREFIX) :].partition("\n")  # older rows: trace in the error
        path = head.partition(": ")[0]
        return TaskError(exception_class_path=path, traceback=stored_traceback or trace)
    if outcome == AttemptOutcome.TIMED_OUT:
        return TaskError(exception_class_path=class_path(TaskTimedOut), traceback=error)
    if outcome == AttemptOutcome.LEASE_EXPIRED:
        return TaskError(exception_class_path=class_path(WorkerLost), traceback=error)
    if outcome == AttemptOutcome.CANCELLED:
        return TaskError(
            exception_class_path=class_path(jobs_exceptions.JobCancelled), traceback=error
        )
    return TaskError(exception_class_path=_path_of_name(error.partition(":")[0]), traceback=error)


def _path_of_name(name: str) -> str:
    """The class path of an error the runtime stored by name (``PayloadError``, ...)."""
    for module in (jobs_exceptions, builtins):
        kind = getattr(module, name, None)
        if isinstance(kind, type) and issubclass(kind, BaseException):
            return class_path(kind)
    return class_path(Exception)


def run_after(payload: Mapping[str, Any]) -> datetime | None:
    value = payload.get("run_after")
    return parse_datetime(value) if isinstance(value, str) else None


#: What a task's job named by its path runs with when its payload leaves it out.
NAMED_DEFAULTS: dict[str, Any] = {"args": [], "kwargs": {}, "backend": "default", "run_after": None}


def task_payload(name: str, payload: Any, job_id: int) -> dict[str, Any]:
    """A task's job's payload as the runner reads it: ``task`` (the path), ``args``,
    ``kwargs``, ``backend``, ``run_after``; else ``ValueError``.

    A job named by its task's path may leave out what it does not need (a row
    written by ``schedule_job()`` or a recurring schedule): no arguments, the
    ``default`` alias. A :data:`RUNNER` row names the task in its payload.
    """
    if name == RUNNER:
        if not (
            isinstance(payload, dict)
            and isinstance(payload.get("task"), str)
            and isinstance(payload.get("args"), list)
            and isinstance(payload.get("kwargs"), dict)
            and isinstance(payload.get("backend"), str)
        ):
            raise ValueError(
                f"job #{job_id} is not a task's job: its payload has no task, args, kwargs"
            )
        return payload
    given = {} if payload is None else payload
    filled = {**NAMED_DEFAULTS, **given} if isinstance(given, dict) else None
    if not (
        filled is not None
        and isinstance(filled["args"], list)
        and isinstance(filled["kwargs"], dict)
        and isinstance(filled["backend"], str)
    ):
        raise ValueError(
            f"job #{job_id} cannot run task {name!r}: its payload must be null or an object "
            'with "args" (a list), "kwargs" (an object) and "backend" (a TASKS alias)'
        )
    return {**filled, "task": name}


def payload_of(job: Job) -> dict[str, Any]:
    return task_payload(job.name, job.payload, job.pk)


def task_named(name: str, payload: Any, job_id: int, queue: str = "default") -> Task:
    """The task a task's job runs, if the project declares it (see :mod:`.declared`)."""
    checked = task_payload(name, payload, job_id)
    return resolve_task(checked["task"], checked["backend"], queue)


def task_of(job: Job) -> Task:
    """The task a job runs, with the options it was enqueued with."""
    payload = payload_of(job)
    return task_named(job.name, payload, job.pk, job.queue).using(
        priority=job.priority,
        queue_name=job.queue,
        run_after=run_after(payload),
        backend=payload["backend"],
    )


#: The errors the worker records for an attempt it ended, as the exceptions they stand for.
ENDED_BY_WORKER = {class_path(kind): kind for kind in (TaskTimedOut, WorkerLost)} | {
    class_path(jobs_exceptions.JobCancelled): jobs_exceptions.JobCancelled
}


def ended_exception(result: TaskResult) -> BaseException | None:
    """The exception of ``result``'s last error, if the worker ended that attempt (a
    time-out, a lost lease, a cancel): what the task raised is not known then."""
    if not result.errors:
        return None
    error = result.errors[-1]
    kind = ENDED_BY_WORKER.get(error.exception_class_path)
    return kind(error.traceback) if kind is not None else None


def build_result(job: Job, attempts: Sequence[Mapping[str, Any]], task: Task) -> TaskResult:
    """The ``TaskResult`` of ``job`` and its ``attempts`` (``number``, ``owner``,
    ``started_at``, ``outcome``, ``error``, ``traceback``; in order)."""
    status = STATUSES[JobStatus(job.status)]
    errors = [
        task_error(row["error"], row["outcome"], row.get("traceback", ""))
        for row in attempts
        if row["outcome"] in FAILED_OUTCOMES
    ]
    if status == TaskResultStatus.FAILED and not errors and job.last_error:
        # Finished without an attempt of its own failing: cancelled before it ran, say.
        outcome = AttemptOutcome.CANCELLED if job.status == JobStatus.CANCELLED else None
        errors.append(task_error(job.last_error, outcome))
    finished = status in (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED)
    payload = payload_of(job)
    result: TaskResult[Any, Any] = TaskResult(
        task=task,
        id=str(job.pk),
        status=status,
        enqueued_at=job.created_at,
        started_at=attempts[0]["started_at"] if attempts else None,
        last_attempted_at=attempts[-1]["started_at"] if attempts else None,
        finished_at=job.finished_at if finished else None,
        args=payload["args"],
        kwargs=payload["kwargs"],
        backend=payload["backend"],
        errors=errors,
        worker_ids=[row["owner"] for row in attempts],
    )
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", job.result)
    return result
