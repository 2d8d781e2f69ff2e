"""The verbs people use on jobs, shared by the API, the admin and the commands."""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import IntegrityError, router
from django.utils import timezone

from .db import get_driver
from .models import Job, JobStatus

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
