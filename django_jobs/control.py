"""The verbs people use on jobs, shared by the API, the admin and the commands.

Each changes a job with one guarded update (the job must still be in the state the
verb acts on) and says what it did: the admin reports a job that moved between the
page load and the click as skipped, rather than acting on it anyway.
"""

from __future__ import annotations

import logging
from datetime import datetime
from functools import partial

from django.db import IntegrityError, router, transaction
from django.utils import timezone

from .conf import require_queue_name
from .db import get_driver
from .events import report, report_cancelled, report_followed
from .exceptions import JobNotCancellable, JobNotWaiting
from .models import Job, JobStatus, Queue
from .queues import unknown_queue

logger = logging.getLogger(__name__)


#: The statuses ``retry_job()`` takes a job out of.
RETRYABLE_STATUSES = (JobStatus.DEAD_LETTERED, JobStatus.CANCELLED)


def retry_job(job_id: int, *, now: datetime | None = None, using: str | None = None) -> bool:
    """Put a dead-lettered or cancelled job back in its queue, due now, with a fresh budget.

    The cancel request and the progress of the last run are cleared, so the new run is
    not stopped by an old request; ``last_error`` stays readable until the next attempt
    ends. Returns False when the job is not dead-lettered or cancelled (already retried,
    say), or when a live job holds its ``unique_key``.
    """
    return retry_job_and_dependents(job_id, now=now, using=using) is not None


def retry_job_and_dependents(
    job_id: int, *, now: datetime | None = None, using: str | None = None
) -> list[int] | None:
    """:func:`retry_job`, saying what the retry did in the job's workflow: None when the
    job was not retried, else the ids put back to waiting (the dependents its failure had
    cancelled, and theirs; the job itself when what it depends on has not all succeeded),
    none for a job in no workflow."""
    driver = get_driver(using or router.db_for_write(Job))
    now = now or timezone.now()
    jobs = Job.objects.using(driver.using).filter(id=job_id, status__in=RETRYABLE_STATUSES)
    try:
        with driver.write_transaction():
            was = jobs.values_list("queue", "status", "workflow_pending").first()
            queue = None if was is None else was[0]
            back: list[int] = []
            changed = jobs.update(
                status=JobStatus.PENDING,
                run_at=now,
                attempts_used=0,
                finished_at=None,
                lease_owner=None,
                lease_expires_at=None,
                cancel_requested_at=None,
                progress_done=None,
                progress_total=None,
                progress_note="",
            )
            if changed and was is not None and was[2] is not None:
                back = driver.workflows.reopened(job_id, was[1], now)
            if changed and queue is not None:
                driver.wake([queue])
    except IntegrityError:
        report("job_retry_refused", job_id)
        return None
    if not changed:
        return None
    report("job_retried", job_id)
    return back


def run_job_now(job_id: int, *, now: datetime | None = None, using: str | None = None) -> Job:
    """Make a pending job that waits for a later ``run_at`` due now; return its row.

    It is a job scheduled for later (no attempt used yet: *run now*) or one waiting out
    the backoff after a failed attempt (*retry now*); nothing else about it changes, and
    the workers of its queue are woken. A job that is already due, running or finished
    raises :class:`~django_jobs.exceptions.JobNotWaiting`, saying which; an unknown id
    ``Job.DoesNotExist``.
    """
    driver = get_driver(using or router.db_for_write(Job))
    now = now or timezone.now()
    jobs = Job.objects.using(driver.using)
    with driver.write_transaction():
        waiting = jobs.filter(id=job_id, status=JobStatus.PENDING, run_at__gt=now)
        queue = waiting.values_list("queue", flat=True).first()
        if queue is not None and waiting.update(run_at=now):
            driver.wake([queue])
            job = jobs.get(id=job_id)
            report("job_run_now", job_id)
            return job
    job = jobs.get(id=job_id)
    if job.status == JobStatus.PENDING:
        raise JobNotWaiting(f"job #{job_id} is already due: a free worker takes it")
    raise JobNotWaiting(f"job #{job_id} is {job.status}: it is not waiting to run")


CANCEL_TRIES = 5


def cancel_job(job_id: int, *, now: datetime | None = None, using: str | None = None) -> Job:
    """Cancel a job; return its row as it is now.

    A pending or waiting job is cancelled at once and never runs (the jobs that wait
    for it are cancelled in turn, unless they ignore failed dependencies). A running job gets a
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
            unstarted = (JobStatus.PENDING, JobStatus.WAITING)
            cancelled = jobs.filter(id=job_id, status__in=unstarted).update(
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
            followed = driver.workflows.ended([job_id], now) if cancelled else None
        if cancelled:  # committed: say so
            job = jobs.get(id=job_id)
            # Once it commits, as every report: inside the caller's transaction, not before.
            transaction.on_commit(partial(report_cancelled, job), using=driver.using)
            if followed:
                report_followed(followed, driver.using)
            return job
        if requested:
            report("job_cancel_requested", job_id)
            return jobs.get(id=job_id)
        job = jobs.get(id=job_id)
        if job.status not in (JobStatus.PENDING, JobStatus.RUNNING):
            raise JobNotCancellable(f"job #{job_id} is {job.status}: there is nothing to cancel")
    raise JobNotCancellable(f"job #{job_id} kept changing; try again")


def pause_queue(
    name: str, *, force: bool = False, now: datetime | None = None, using: str | None = None
) -> bool:
    """Stop every worker, on every host, from starting jobs of queue ``name``.

    Once this commits, no claim takes a job of the queue; jobs already running finish
    (and a worker may still start the few it had claimed ahead, within a quarter of a
    second). The state is a row in the database: it holds across restarts until
    :func:`resume_queue`. Returns False if the queue was paused already.

    A queue that the project names nowhere and that no job or queue row in the database
    has is refused with a :class:`ValueError` naming the closest known queue (a typo
    would pause nothing that runs), unless ``force``.
    """
    require_queue_name(name)
    using = using or router.db_for_write(Job)
    if not force:
        refuse_unknown_queue(name, using)
    driver = get_driver(using)
    with transaction.atomic(using=driver.using):
        paused = driver.flow.pause(name, now or timezone.now())
    if paused:
        logger.info("queue %s paused", name, extra={"event": "queue_paused", "queue": name})
    return paused


def refuse_unknown_queue(name: str, using: str) -> None:
    """:class:`ValueError` for a queue the project names nowhere and the database has no
    job or row of."""
    problem = unknown_queue(name)
    if problem is None:
        return
    if Job.objects.using(using).filter(queue=name).exists():
        return
    if Queue.objects.using(using).filter(name=name).exists():
        return
    raise ValueError(
        f"{problem}, and no job is on it: pause it anyway with force=True "
        f"(`manage.py jobs pause {name} --force`)"
    )


def resume_queue(name: str, *, using: str | None = None) -> bool:
    """Serve queue ``name`` again: its workers are woken at once where the database has
    LISTEN, else at their next poll. Returns False if the queue was not paused."""
    require_queue_name(name)
    driver = get_driver(using or router.db_for_write(Job))
    with transaction.atomic(using=driver.using):
        resumed = driver.flow.resume(name)
    if resumed:
        logger.info("queue %s resumed", name, extra={"event": "queue_resumed", "queue": name})
    return resumed
