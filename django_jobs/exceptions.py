"""Errors raised by django-jobs. All subclass :class:`JobsError`."""

from __future__ import annotations

import math
from datetime import timedelta

from .conf import MAX_DELAY_SECONDS


class JobsError(Exception):
    """Base class of every django-jobs error."""


class PermanentFailure(JobsError):
    """An attempt's failure that no retry can mend in this deployment (a task the project
    does not declare, say): the job is dead-lettered at once, whatever attempts it has
    left, with the error saying why."""


class UnknownJob(JobsError, LookupError):
    """A job name that no ``@job`` handler is registered under."""


class PayloadError(JobsError, ValueError):
    """A payload that is not strict JSON, or is too large."""


class ResultError(PayloadError):
    """A handler returned a value that cannot be stored as the job's result (not JSON)."""


class JobNotCancellable(JobsError):
    """``cancel_job()`` on a job that has finished: there is nothing to cancel."""


class JobCancelled(JobsError):
    """Raised by ``JobContext.raise_if_cancelled()`` once the attempt is cancelled."""


class DuplicateJobName(JobsError):
    """Two different functions registered under one job name."""


class ScheduleError(JobsError, ValueError):
    """A recurring schedule that cannot be used: a bad cron (or one that never fires), an
    unknown time zone, or options no job can have."""


class JobNotWaiting(JobsError):
    """``run_job_now()`` on a job that is not pending with a later ``run_at``: it is
    already due, running or finished."""


class NotMigrated(JobsError):
    """The database lacks some of django-jobs' migrations: ``runjobs`` refuses to start, and
    ``add_recurring_job()`` refuses to save, until ``migrate`` has run."""


class Snooze(JobsError):
    """Raised by a handler (or ``ctx.snooze(seconds)``): put the job back, due after
    ``seconds``, without using an attempt. The attempt is recorded as ``snoozed``; past
    ``DJANGO_JOBS["MAX_SNOOZES"]`` snoozes the job is dead-lettered instead. A delay past
    about a century (:data:`~django_jobs.conf.MAX_DELAY_SECONDS`) is refused with a
    :class:`ValueError`, which fails the attempt as any exception would."""

    def __init__(self, seconds: float | timedelta) -> None:
        value = seconds.total_seconds() if isinstance(seconds, timedelta) else seconds
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not (math.isfinite(value) and 0 <= value <= MAX_DELAY_SECONDS)
        ):
            raise ValueError(
                f"Snooze takes seconds from 0 to {MAX_DELAY_SECONDS} (about a century), or a "
                f"timedelta as long at most, got {seconds!r}. A date (a Retry-After header's, "
                "a timestamp in milliseconds) is not a delay: give the seconds until it."
            )
        self.seconds = float(value)
        super().__init__(f"snoozed for {self.seconds:g} s")
