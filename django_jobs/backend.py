"""``JobsBackend``: Django's Tasks framework, run durably by django-jobs.

::

    TASKS = {"default": {"BACKEND": "django_jobs.backend.JobsBackend", "QUEUES": ["default"]}}

``task.enqueue()`` writes a job row on the caller's connection (it commits
with the caller's transaction); ``manage.py runjobs`` runs it with leases,
retries and dead letters; ``get_result()`` reads it back. On Django 5.2 it
needs the ``django-tasks`` backport (see :mod:`django_jobs.tasks.framework`).
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import router, transaction

from .conf import JOB_NAME_MAX_LENGTH
from .conf import settings as jobs_settings
from .tasks.arguments import json_arguments
from .tasks.declared import declare, is_module_name, require_reached
from .tasks.framework import (
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_enqueued,
)
from .tasks.options import TaskOptions, job_options, max_attempts_of, options_of
from .text import is_number_text

# Nothing here imports django_jobs' models at load: a project without "django_jobs" in
# INSTALLED_APPS gets the check's error (django_jobs.E031), not a RuntimeError.

__all__ = ["JobsBackend", "TaskOptions", "job_options", "options_of"]

OPTION_KEYS = {"MAX_ATTEMPTS", "MODULES"}
NOT_INSTALLED = (
    "TASKS[{alias!r}] is a JobsBackend, but 'django_jobs' is not in INSTALLED_APPS: "
    "its tasks cannot be enqueued or run."
)
NOT_INSTALLED_HINT = (
    "Add 'django_jobs' to INSTALLED_APPS and run `manage.py migrate`, or use another task backend."
)


def _modules(value: Any, where: str) -> frozenset[str]:
    if value is None:
        return frozenset()
    if not isinstance(value, list | tuple) or not all(is_module_name(name) for name in value):
        raise ImproperlyConfigured(
            f"{where} must be a list of dotted module names, such as ['myapp.emails'], "
            f"got {value!r}"
        )
    return frozenset(value)


class JobsBackend(BaseTaskBackend):
    """Tasks as django-jobs jobs: durable, leased, retried, dead-lettered, in the admin.

    ``OPTIONS``: ``MAX_ATTEMPTS``, the attempts a task gets unless its
    ``@job_options`` say otherwise (default: ``DJANGO_JOBS["MAX_ATTEMPTS"]``);
    ``MODULES``, the modules besides installed apps' ``tasks`` whose tasks a
    worker may import (see :mod:`django_jobs.tasks.declared`).
    A Django priority (-100 to 100, higher first) is the job's priority as it
    is; ``run_after`` is the job's ``run_at``.
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True
    #: ``django_jobs`` registers the task runner when a ``TASKS`` backend says this.
    runs_on_django_jobs = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        unknown = set(self.options) - OPTION_KEYS
        if unknown:
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}]['OPTIONS'] has unknown keys {sorted(unknown)}; "
                f"known: {sorted(OPTION_KEYS)}"
            )
        try:
            self.max_attempts = max_attempts_of(
                self.options.get("MAX_ATTEMPTS"), f"TASKS[{alias!r}]['OPTIONS']['MAX_ATTEMPTS']"
            )
        except ValueError as exc:
            raise ImproperlyConfigured(str(exc)) from None
        self.task_modules = _modules(
            self.options.get("MODULES"), f"TASKS[{alias!r}]['OPTIONS']['MODULES']"
        )

    def validate_task(self, task: Task) -> None:
        """Django's checks, a path that fits a job's name, a module a worker imports (see
        :func:`~django_jobs.tasks.declared.require_reached`); then ``task``'s path is one
        this process's rows may name."""
        super().validate_task(task)
        if len(task.module_path) > JOB_NAME_MAX_LENGTH:
            raise InvalidTask(
                f"Task path {task.module_path!r} is longer than a job's name may be "
                f"({JOB_NAME_MAX_LENGTH} characters)."
            )
        if not apps.ready or apps.is_installed("django_jobs"):  # else: E031 says what is wrong
            require_reached(task, self.alias, self.task_modules)
        declare(task)

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """Write the task's job row, named by its module path; ``task_enqueued`` is sent
        once it commits."""
        self.validate_task(task)
        require_installed(self.alias)
        from .events import report_task
        from .models import Job
        from .scheduling import schedule_job

        args, kwargs = json_arguments(args, kwargs)
        payload = {
            "args": args,
            "kwargs": kwargs,
            "backend": self.alias,
            "run_after": task.run_after.isoformat() if task.run_after else None,
        }
        row = schedule_job(
            task.module_path,
            payload,
            run_at=task.run_after,
            queue=task.queue_name,
            priority=task.priority,
            max_attempts=options_of(task).max_attempts or self.max_attempts,
        )
        result: TaskResult[Any, Any] = TaskResult(
            task=task,
            id=str(row.pk),
            status=TaskResultStatus.READY,
            enqueued_at=row.created_at,
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=args,
            kwargs=kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        transaction.on_commit(
            lambda: report_task(task_enqueued, result), using=router.db_for_write(Job)
        )
        return result

    def get_result(self, result_id: str) -> TaskResult:
        """The task's result as it is now; ``TaskResultDoesNotExist`` for an unknown id."""
        if not isinstance(result_id, str) or not is_number_text(result_id):
            raise TaskResultDoesNotExist(f"no task result with id {result_id!r}")
        require_installed(self.alias)
        from .tasks.runner import load_result

        return load_result(int(result_id))

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        """``django_jobs`` missing from ``INSTALLED_APPS`` (E031); a queue of ``QUEUES``
        that ``DJANGO_JOBS["QUEUES"]`` does not declare (W030)."""
        if not apps.is_installed("django_jobs"):
            return [
                checks.Error(
                    NOT_INSTALLED.format(alias=self.alias),
                    hint=NOT_INSTALLED_HINT,
                    id="django_jobs.E031",
                )
            ]
        try:
            declared = set(jobs_settings.QUEUES)
        except ImproperlyConfigured:
            return []  # django_jobs.E001 or E004 says what is wrong
        return [
            checks.Warning(
                f"TASKS[{self.alias!r}]['QUEUES'] names {queue!r}, which DJANGO_JOBS['QUEUES'] "
                "does not declare: `manage.py runjobs` does not serve it.",
                hint=f"Add {queue!r} to DJANGO_JOBS['QUEUES'], or run "
                f"`manage.py runjobs --queue {queue}`.",
                id="django_jobs.W030",
            )
            for queue in sorted(self.queues - declared)
        ]


def require_installed(alias: str) -> None:
    """``ImproperlyConfigured`` as check E031 says, before anything imports the models."""
    if not apps.is_installed("django_jobs"):
        raise ImproperlyConfigured(f"{NOT_INSTALLED.format(alias=alias)} {NOT_INSTALLED_HINT}")
