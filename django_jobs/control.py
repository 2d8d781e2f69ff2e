"""The verbs people use on jobs, shared by the API, the admin and the commands."""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import IntegrityError, router
from django.utils import timezone

from .db import get_driver
from .events import send
from .exceptions import JobNotCancellable
from .models import Job, JobStatus
from .signals import job_cancelled

logger = logging.getLogger(__name__)


def retry_job(job_id: int, *, now: datetime | None = None, using: str | None = None) -> bool:
    """Put a dead-lettered job back in the queue, due now, with a fresh budget of attempts.

    Returns False when the job is not dead-lettered (already retried, say).
    """
    driver = get_driver(using or router.db_for_write(Job))
    try:
        with driver.write_transaction():
            changed = (
                Job.objects.using(driver.using)
                .filter(id=job_id, status=JobStatus.DEAD_LETTERED)
                .update(
                    status=JobStatus.PENDING,
                    run_at=now or timezone.now(),
                    attempts_used=0,
                    finished_at=None,
                    lease_owner=None,
                    lease_expires_at=None,
                )
            )
    except IntegrityError:
        logger.warning(
            "job #%s not retried: a live job with the same unique_key exists",
            job_id,
            extra={"event": "job_retry_refused", "job_id": job_id},
        )
        return False
    if changed:
        logger.info("job #%s retried", job_id, extra={"event": "job_retried", "job_id": job_id})
    return bool(changed)


CANCEL_TRIES = 5


def cancel_job(job_id: int, *, now: datetime | None = None, using: str | None = None) -> Job:
    """Cancel a job; return its row as it is now.

    A pending job is cancelled at once and never runs. A running job gets a
    cancel request: its worker's next heartbeat sets ``ctx.cancelled``, and
    unless the handler still succeeds, the attempt is recorded ``cancelled``
    and the job is not retried. A finished job raises
    :class:`~django_jobs.exceptions.JobNotCancellable`, an unknown id
    ``Job.DoesNotExist``.
    """
    driver = get_driver(using or router.db_for_write(Job))
    now = now or timezone.now()
    jobs = Job.objects.using(driver.using)
    for _ in range(CANCEL_TRIES):  # the job may move between the guarded updates: look again
        with driver.write_transaction():
            cancelled = jobs.filter(id=job_id, status=JobStatus.PENDING).update(
                status=JobStatus.CANCELLED,
                finished_at=now,
                cancel_requested_at=now,
                last_error="Cancelled: cancel_job() before it ran",
                lease_owner=None,
                lease_expires_at=None,
            )
            requested = not cancelled and jobs.filter(id=job_id, status=JobStatus.RUNNING).update(
                cancel_requested_at=now
            )
        if cancelled:  # committed: say so
            job = jobs.get(id=job_id)
            logger.info(
                "job #%s cancelled", job_id, extra={"event": "job_cancelled", "job_id": job_id}
            )
            send(job_cancelled, job_id=job.pk, name=job.name, queue=job.queue, attempt=None)
            return job
        if requested:
            logger.info(
                "job #%s: cancel requested; its worker stops it at its next heartbeat",
                job_id,
                extra={"event": "job_cancel_requested", "job_id": job_id},
            )
            return jobs.get(id=job_id)
        job = jobs.get(id=job_id)
        if job.status not in (JobStatus.PENDING, JobStatus.RUNNING):
            raise JobNotCancellable(f"job #{job_id} is {job.status}: there is nothing to cancel")
    raise JobNotCancellable(f"job #{job_id} kept changing; try again")
