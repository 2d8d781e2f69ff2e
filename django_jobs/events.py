"""One place that sends a job's signal, and logs a receiver that raised."""

from __future__ import annotations

import logging
from typing import Any

from django.dispatch import Signal

from . import signals
from .models import AttemptOutcome, Job, JobStatus

logger = logging.getLogger(__name__)


def send(signal: Signal, **details: Any) -> None:
    """Send ``signal`` about a job; a receiver that raises is logged, never raised."""
    if not signal.has_listeners(Job):
        return
    for receiver, response in signal.send_robust(sender=Job, **details):
        if isinstance(response, Exception):
            logger.error(
                "a receiver of a django-jobs signal failed: %s: %s: %s",
                getattr(receiver, "__qualname__", receiver),
                type(response).__name__,
                response,
                extra={"event": "signal_receiver_failed", "job_id": details.get("job_id")},
            )


def signal_for(status: JobStatus, outcome: AttemptOutcome) -> Signal | None:
    """The signal that reports an attempt's written outcome (None for a hand-back)."""
    if outcome == AttemptOutcome.RELEASED and status == JobStatus.PENDING:
        return None
    return {
        JobStatus.SUCCEEDED: signals.job_succeeded,
        JobStatus.DEAD_LETTERED: signals.job_dead_lettered,
        JobStatus.CANCELLED: signals.job_cancelled,
        JobStatus.PENDING: signals.job_failed,
    }.get(status)
