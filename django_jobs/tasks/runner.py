"""The job that runs every Django task, and Django's task signals at the right moments.

A task is enqueued as one job named :data:`~.results.RUNNER` whose payload
names the task by its module path (as Django's own ``Task`` pickles it) with
its arguments. The runner resolves that path only if the project declares it
(:mod:`.declared`: nothing else is imported), refuses anything that is not a
``Task``, and calls it as Django's ``ImmediateBackend`` does: ``Task.call``,
which runs a coroutine function to completion with ``async_to_sync``.

``task_started`` is sent as the attempt starts, on the worker's thread;
``task_finished`` once the attempt's outcome is written, from the receivers
of django-jobs' own outcome signals, with the status the task then has
(``READY`` when a retry is due, ``SUCCESSFUL``, or ``FAILED``).
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import router
from django.dispatch import Signal
from django.utils import timezone

from .. import events, signals
from ..context import JobContext
from ..exceptions import JobCancelled
from ..models import Attempt, Job
from ..redaction import Mask, masker
from ..registry import job
from .framework import (
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    normalize_json,
    task_backends,
    task_finished,
    task_started,
)
from .results import (
    RUNNER,
    TaskFailed,
    build_result,
    class_path,
    failure_text,
    task_named,
    task_of,
)

logger = logging.getLogger(__name__)

ATTEMPT_FIELDS = ("number", "owner", "started_at", "outcome", "error")

#: Results of attempts whose outcome is being written, by (job id, attempt), for
#: ``task_finished``; bounded, for the attempts whose outcome is never written (a lost lease).
_ending: OrderedDict[tuple[int, int], tuple[bool, TaskResult]] = OrderedDict()
_ending_lock = threading.Lock()
ENDING_LIMIT = 1000


def load_result(job_id: int, using: str | None = None) -> TaskResult:
    """The ``TaskResult`` of job ``job_id``: two queries, the job and its attempts."""
    using = using or router.db_for_read(Job)
    row = Job.objects.using(using).filter(pk=job_id, name=RUNNER).first()
    if row is None:
        raise TaskResultDoesNotExist(f"no task result with id {str(job_id)!r}")
    attempts = list(
        Attempt.objects.using(using)
        .filter(job_id=job_id)
        .order_by("number")
        .values(*ATTEMPT_FIELDS)
    )
    return build_result(row, attempts, task_of(row))


@job(RUNNER)
def run_task(ctx: JobContext, payload: Any) -> Any:
    """Run the task the payload names; its return value is the job's result."""
    # A path the project does not declare fails here, as an unknown job's name does:
    # before a query, with nothing imported.
    task_named(payload, ctx.job_id)
    result = load_result(ctx.job_id)
    object.__setattr__(result, "status", TaskResultStatus.RUNNING)
    task = result.task
    send(task_started, result)
    try:
        if task.takes_context:
            value = task.call(TaskContext(task_result=result), *result.args, **result.kwargs)
        else:
            value = task.call(*result.args, **result.kwargs)
        value = normalize_json(value)
    except JobCancelled:
        raise
    except BaseException as exc:  # SystemExit too: the task's failure, as the runtime treats it
        text = mask_arguments(task.func, task.takes_context, result.args, result.kwargs)(
            failure_text(exc)
        )
        error = TaskError(
            exception_class_path=class_path(type(exc)), traceback=text.partition("\n")[2]
        )
        remember(ctx, result, errors=[*result.errors, error])
        raise TaskFailed(text) from None
    remember(ctx, result, value=value)
    return value


def mask_arguments(
    func: Any, takes_context: bool, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> Mask:
    """A masker for the task's secrets: arguments whose names are secret, positional ones too."""
    try:
        bound = inspect.signature(func).bind_partial(
            *([None] if takes_context else []), *args, **kwargs
        )
        named: dict[str, Any] = dict(bound.arguments)
    except (TypeError, ValueError):
        named = {}
    if takes_context:
        named.pop("context", None)
    return masker({"arguments": named, "kwargs": dict(kwargs)})


def remember(
    ctx: JobContext, result: TaskResult, *, value: Any = None, errors: list[TaskError] | None = None
) -> None:
    """Keep the attempt's result for ``task_finished``, unless the worker already ended it."""
    if ctx.cancelled:  # timed out, given up or cancelled: the outcome is not this one
        return
    succeeded = errors is None
    if errors is not None:
        object.__setattr__(result, "errors", errors)
    else:
        object.__setattr__(result, "_return_value", value)
    with _ending_lock:
        _ending[(ctx.job_id, ctx.attempt)] = (succeeded, result)
        while len(_ending) > ENDING_LIMIT:
            _ending.popitem(last=False)


def _take(job_id: int, attempt: int | None) -> tuple[bool, TaskResult] | None:
    if attempt is None:
        return None
    with _ending_lock:
        return _ending.pop((job_id, attempt), None)


def send(signal: Signal, result: TaskResult) -> None:
    """Send one of Django's task signals as its backends do; a receiver that raises is logged."""
    try:
        sender = type(task_backends[result.backend])
    except Exception as exc:
        logger.warning(
            "task %s #%s: no signal sent, its backend %r is not configured (%s)",
            result.task.module_path,
            result.id,
            result.backend,
            exc,
            extra={"event": "task_signal_skipped", "job_id": result.id},
        )
        return
    events.send(signal, sender=sender, task_result=result)


FINISHED_STATUS = {
    signals.job_succeeded: TaskResultStatus.SUCCESSFUL,
    signals.job_failed: TaskResultStatus.READY,  # a retry is due
    signals.job_dead_lettered: TaskResultStatus.FAILED,
    signals.job_cancelled: TaskResultStatus.FAILED,
}


def announce_finished(
    sender: Any, signal: Signal, job_id: int, name: str, attempt: int | None = None, **details: Any
) -> None:
    """``task_finished`` for a task's attempt whose outcome has just been written."""
    if name != RUNNER or details.get("will_retry") is False:  # job_dead_lettered follows
        return
    status = FINISHED_STATUS[signal]
    kept = _take(job_id, attempt)
    if kept is not None and kept[0] == (status == TaskResultStatus.SUCCESSFUL):
        result = kept[1]
    else:  # the worker ended it (a timeout, a cancel), or it never ran: read it back
        try:
            result = load_result(job_id)
        except ValueError:  # no task to report on: refused, or not a task (its error says so)
            return
    object.__setattr__(result, "status", status)
    if status != TaskResultStatus.READY and result.finished_at is None:
        object.__setattr__(result, "finished_at", timezone.now())
    send(task_finished, result)


for _signal in FINISHED_STATUS:
    _signal.connect(announce_finished, sender=Job, dispatch_uid="django_jobs.tasks.finished")
