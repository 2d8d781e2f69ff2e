"""The handler that runs every Django task, and Django's task signals at the right moments.

A task is enqueued as a job named by the task's module path (as Django's own
``Task`` pickles it), its arguments in the payload. The registry holds no
such name: it asks :func:`task_definition`, which answers only for a path the
project declares (:mod:`.declared`: nothing else is imported) and gives this
module's handler with the task's own queue, attempts and timeout. Rows of the
older single job, :data:`~.results.RUNNER`, name the task in their payload and
still run. The handler refuses anything that is not a ``Task`` and calls it as
Django's ``ImmediateBackend`` does: ``Task.call``. A task whose function is a
coroutine function runs through :func:`arun_task` instead, an async handler
the worker runs on its event loop (``Task.acall``).

``task_started`` is sent as the attempt starts, on the worker's thread;
``task_finished`` once the attempt's outcome is written, from the receivers
of django-jobs' own outcome signals, with the status the task then has
(``READY`` when a retry is due, ``SUCCESSFUL``, or ``FAILED``). After a
failure it is sent while the task's exception is being handled, as
``ImmediateBackend`` sends it, so a receiver (Django's own log line) has it in
``sys.exc_info()``.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.db import router
from django.dispatch import Signal
from django.utils import timezone
from django.utils.module_loading import import_string

from .. import events, signals
from ..context import JobContext
from ..exceptions import JobCancelled, UnknownJob
from ..models import Attempt, Job
from ..outcomes import TRACEBACK_LIMIT
from ..redaction import Mask, masker
from ..registry import Finder, JobDefinition, add_finder, get_definition, job
from ..text import keep_end
from .declared import declared_names, import_task_modules, made_here_but_refused, may_name
from .framework import (
    Task,
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
from .options import options_of
from .results import (
    RUNNER,
    TaskFailed,
    build_result,
    class_path,
    ended_exception,
    failure_head,
    failure_trace,
    task_named,
    task_of,
)

ATTEMPT_FIELDS = ("number", "owner", "started_at", "outcome", "error", "traceback")


class Ending(NamedTuple):
    """An attempt's result as the handler left it, kept for ``task_finished``."""

    succeeded: bool
    result: TaskResult
    #: What the task raised, re-raised around ``task_finished``.
    error: BaseException | None = None


#: Results of attempts whose outcome is being written, by (job id, attempt), for
#: ``task_finished``; bounded, for the attempts whose outcome is never written (a lost lease).
_ending: OrderedDict[tuple[int, int], Ending] = OrderedDict()
_ending_lock = threading.Lock()
ENDING_LIMIT = 1000


def load_result(job_id: int, using: str | None = None) -> TaskResult:
    """The ``TaskResult`` of job ``job_id``: two queries, the job and its attempts."""
    using = using or router.db_for_read(Job)
    row = Job.objects.using(using).filter(pk=job_id).first()
    if row is None or not is_task_job(row.name):
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
    """Run the task the job names; its return value is the job's result."""
    result = start_task(ctx, payload)
    task = result.task
    try:
        if task.takes_context:
            value = task.call(TaskContext(task_result=result), *result.args, **result.kwargs)
        else:
            value = task.call(*result.args, **result.kwargs)
        value = normalize_json(value)
    except JobCancelled:
        raise
    except BaseException as exc:  # SystemExit too: the task's failure, as the runtime treats it
        raise task_failed(ctx, result, exc) from None
    remember(ctx, result, value=value)
    return value


async def arun_task(ctx: JobContext, payload: Any) -> Any:
    """:func:`run_task` of a task whose function is a coroutine function, on the worker's
    event loop: its reads and signals run off the loop (``sync_to_async``), the task is
    awaited there (``Task.acall``)."""
    result = await sync_to_async(start_task)(ctx, payload)
    task = result.task
    try:
        if task.takes_context:
            value = await task.acall(TaskContext(task_result=result), *result.args, **result.kwargs)
        else:
            value = await task.acall(*result.args, **result.kwargs)
        value = normalize_json(value)
    except (JobCancelled, asyncio.CancelledError):
        raise
    except BaseException as exc:
        raise task_failed(ctx, result, exc) from None
    remember(ctx, result, value=value)
    return value


#: The handlers that run a Django task.
TASK_HANDLERS = (run_task, arun_task)


def start_task(ctx: JobContext, payload: Any) -> TaskResult:
    """The task's result as it starts (``RUNNING``), with ``task_started`` sent."""
    # A path the project does not declare fails here, as an unknown job's name does:
    # before a query, with nothing imported. One that no longer imports runs as a
    # stand-in that raises the import's error: the attempt fails as that error.
    task_named(ctx.name, payload, ctx.job_id, ctx.queue)
    result = load_result(ctx.job_id)
    object.__setattr__(result, "status", TaskResultStatus.RUNNING)
    events.report_task(task_started, result)
    return result


def task_failed(ctx: JobContext, result: TaskResult, exc: BaseException) -> TaskFailed:
    """What the job raises for a task that raised ``exc``: its error and traceback, masked;
    the task's own error kept for ``task_finished``."""
    task = result.task
    mask = mask_arguments(task.func, task.takes_context, result.args, result.kwargs)
    trace = keep_end(mask(failure_trace(exc)), TRACEBACK_LIMIT)
    error = TaskError(exception_class_path=class_path(type(exc)), traceback=trace)
    remember(ctx, result, errors=[*result.errors, error], raised=exc)
    return TaskFailed(mask(failure_head(exc)), trace)


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
    ctx: JobContext,
    result: TaskResult,
    *,
    value: Any = None,
    errors: list[TaskError] | None = None,
    raised: BaseException | None = None,
) -> None:
    """Keep the attempt's result (and what it raised) for ``task_finished``, unless the
    worker already ended it."""
    if ctx.cancelled:  # timed out, given up or cancelled: the outcome is not this one
        return
    succeeded = errors is None
    if errors is not None:
        object.__setattr__(result, "errors", errors)
    else:
        object.__setattr__(result, "_return_value", value)
    with _ending_lock:
        _ending[(ctx.job_id, ctx.attempt)] = Ending(succeeded, result, raised)
        while len(_ending) > ENDING_LIMIT:
            _ending.popitem(last=False)


def _take(job_id: int, attempt: int | None) -> Ending | None:
    if attempt is None:
        return None
    with _ending_lock:
        return _ending.pop((job_id, attempt), None)


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
    if not is_task_job(name) or details.get("will_retry") is False:  # job_dead_lettered follows
        return
    status = FINISHED_STATUS[signal]
    kept = _take(job_id, attempt)
    error: BaseException | None = None
    if kept is not None and kept.succeeded == (status == TaskResultStatus.SUCCESSFUL):
        result, error = kept.result, kept.error
    else:  # the worker ended it (a timeout, a cancel), or it never ran: read it back
        try:
            result = load_result(job_id)
        except (ValueError, TaskResultDoesNotExist):  # refused, or not a task: its error says so
            return
        if status != TaskResultStatus.SUCCESSFUL:
            error = ended_exception(result)
    object.__setattr__(result, "status", status)
    if status != TaskResultStatus.READY and result.finished_at is None:
        object.__setattr__(result, "finished_at", timezone.now())
    events.report_task(task_finished, result, raised=error)


for _signal in FINISHED_STATUS:
    _signal.connect(announce_finished, sender=Job, dispatch_uid="django_jobs.tasks.finished")


# -- a task's module path as a job name ---------------------------------------------------


def task_definition(name: str) -> JobDefinition | None:
    """:func:`run_task` under a task's module path, with the task's queue, priority,
    attempts and timeout; None for a name that is no task the project declares.

    Nothing is imported for a path outside the declared modules. A declared path
    that no longer imports still names a task: its rows run and fail as that import
    does, but no new job of it can be enqueued; nor can one of a task made in this
    process whose module is no longer allowed (the definition says why).
    """
    if not may_name(name):
        refused = made_here_but_refused(name)  # enqueued by its path: say how to declare it
        return None if refused is None else JobDefinition(name, run_task, unavailable=refused)
    try:
        found = import_string(name)
    except Exception as exc:  # ImportError, or what the module raised as it was imported
        reason = f"task {name!r} cannot be imported: {type(exc).__name__}: {exc}"
        return JobDefinition(name, run_task, unavailable=reason)
    if not isinstance(found, Task):
        return None
    options = options_of(found)
    return JobDefinition(
        name,
        arun_task if iscoroutinefunction(found.func) else run_task,
        queue=found.queue_name,
        priority=found.priority,
        max_attempts=options.max_attempts or backend_max_attempts(found.backend),
        timeout=options.timeout,
    )


def backend_max_attempts(alias: str) -> int | None:
    try:
        return getattr(task_backends[alias], "max_attempts", None)
    except Exception:  # not configured (any more): DJANGO_JOBS' attempts
        return None


def is_task_job(name: str) -> bool:
    """Whether jobs named ``name`` run a task: :data:`RUNNER`, or a task's module path."""
    try:
        return get_definition(name).func in TASK_HANDLERS
    except UnknownJob:
        return False


add_finder(
    "django_jobs.tasks",
    Finder(find=task_definition, names=declared_names, discover=import_task_modules),
)
