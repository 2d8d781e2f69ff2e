"""Durable queued, scheduled and recurring jobs in your Django project's own database."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .context import JobContext
from .exceptions import (
    DuplicateJobName,
    JobCancelled,
    JobNotCancellable,
    JobNotWaiting,
    JobsError,
    NotMigrated,
    PayloadError,
    ResultError,
    ScheduleError,
    Snooze,
    UnknownJob,
)
from .registry import job
from .version import __version__ as __version__

__all__ = [
    "DuplicateJobName",
    "JobCancelled",
    "JobContext",
    "JobNotCancellable",
    "JobNotWaiting",
    "JobSpec",
    "JobsError",
    "NotMigrated",
    "PayloadError",
    "ResultError",
    "ScheduleError",
    "Snooze",
    "UnknownJob",
    "add_recurring_job",
    "aschedule_job",
    "aschedule_jobs",
    "await_job",
    "batch",
    "cancel_job",
    "chain",
    "job",
    "pause_queue",
    "remove_recurring_job",
    "resume_queue",
    "retry_job",
    "run_job_now",
    "schedule_job",
    "schedule_jobs",
    "wait_for",
]

if TYPE_CHECKING:
    from .control import cancel_job, pause_queue, resume_queue, retry_job, run_job_now
    from .recurring import add_recurring_job, remove_recurring_job
    from .scheduling import JobSpec, schedule_job, schedule_jobs
    from .waiting import aschedule_job, aschedule_jobs, await_job, wait_for
    from .workflows import batch, chain

_LAZY = {
    "schedule_job": "scheduling",
    "schedule_jobs": "scheduling",
    "JobSpec": "scheduling",
    "retry_job": "control",
    "cancel_job": "control",
    "run_job_now": "control",
    "pause_queue": "control",
    "resume_queue": "control",
    "add_recurring_job": "recurring",
    "remove_recurring_job": "recurring",
    "aschedule_job": "waiting",
    "aschedule_jobs": "waiting",
    "wait_for": "waiting",
    "await_job": "waiting",
    "batch": "workflows",
    "chain": "workflows",
}


def __getattr__(name: str) -> Any:
    # These import the models, which need the app registry to be ready.
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
