"""Enqueueing: ``schedule_job()`` and ``schedule_jobs()``.

Both, and every other way a job gets in (a task's enqueue, a schedule's Run
now, a recurring occurrence), validate the job (:func:`build_job`) and hand it
to :func:`enqueue`: the driver's one insert, on the caller's database
connection, so inside ``transaction.atomic()`` a job commits or rolls back with
the caller's rows. The insert wakes the queues of the jobs that are due (on
PostgreSQL, a NOTIFY delivered when the transaction commits), and each new job
is announced once it commits.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import router, transaction
from django.utils import timezone

from . import tracing
from .conf import check_job_options, resolve_run_at, settings
from .db import get_driver
from .db.workflows import Followed
from .events import report_enqueued, report_followed
from .exceptions import UnknownJob
from .models import Job
from .payloads import encode_payload
from .queues import check_scheduled_queue
from .registry import get_definition
from .workflows import links_for, plan_links

JobRef = str | Callable[..., Any]


@dataclass(frozen=True)
class JobSpec:
    """One job for :func:`schedule_jobs`; the fields are ``schedule_job``'s arguments."""

    job: JobRef
    payload: Any = None
    run_at: datetime | None = None
    delay: timedelta | None = None
    queue: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    unique_key: str | None = None
    #: The recurring schedule the job runs for; set by the scheduler and run-now.
    schedule: str | None = None
    #: Jobs of a queue with the same key run at most ``@job(concurrency=N)`` at once.
    concurrency_key: str | None = None
    #: What the job waits for: jobs (rows or ids), or other specs of the same call.
    depends_on: Sequence[Any] = ()
    #: Run once every dependency has ended, whatever its end (not only once they succeed).
    ignore_failed_dependencies: bool = False


def build_job(spec: JobSpec) -> Job:
    """Validate a spec and return an unsaved :class:`Job`."""
    definition = get_definition(spec.job)
    if definition.unavailable is not None:
        raise UnknownJob(definition.unavailable)
    queue = spec.queue if spec.queue is not None else definition.queue
    key = definition.concurrency_key(spec.concurrency_key, queue)
    text = encode_payload(spec.payload)
    max_attempts = (
        spec.max_attempts
        if spec.max_attempts is not None
        else definition.max_attempts or int(settings.MAX_ATTEMPTS)
    )
    priority = spec.priority if spec.priority is not None else definition.priority
    options = {
        "queue": queue,
        "priority": priority,
        "max_attempts": max_attempts,
        "unique_key": spec.unique_key,
        "schedule": spec.schedule,
        "concurrency_key": key,
    }
    check_job_options(**options)
    run_at = resolve_run_at(spec.run_at, spec.delay)
    check_scheduled_queue(queue, definition.queue)
    return Job.unsaved(
        name=definition.name,
        payload=json.loads(text),
        run_at=run_at,
        concurrency_limit=None if key is None else definition.concurrency,
        **options,
    )


def enqueue(
    rows: Sequence[Job], using: str, workflow: Callable[[list[Job]], Followed] | None = None
) -> list[Job]:
    """The one way in: every new job, built by :func:`build_job`, is written here.

    The driver's one insert writes ``rows`` (every column, keys included) and wakes
    the workers of their queues when the caller's transaction commits; each new job
    is announced (``job_enqueued``, on commit). Returns the rows in order, but where
    a pending or running job of a row's name holds its unique key: that job, which
    is not announced again. Many rows are all written or none.

    ``workflow``: the step that links the rows written into their workflow
    (dependencies, a batch), in the same transaction.
    """
    driver = get_driver(using)
    followed = None
    with tracing.enqueuing(rows):
        if len(rows) == 1 and workflow is None:
            result = driver.insert_jobs(rows, timezone.now())
        else:
            with transaction.atomic(using=using):
                result = driver.insert_jobs(rows, timezone.now())
                if workflow is not None:
                    followed = workflow(result)
    report_enqueued([job for job, row in zip(result, rows, strict=True) if job is row], using)
    if followed is not None:
        report_followed(followed, using)
    return result


def enqueue_specs(originals: Sequence[object], specs: Sequence[JobSpec]) -> list[Job]:
    """Build and write ``specs`` (``originals``: as the caller gave them, which a
    dependency on a spec of the call names), with their workflow if they have one."""
    rows = [build_job(spec) for spec in specs]
    using = router.db_for_write(Job)
    planned = plan_links(originals, specs, using)
    if planned is None:
        return enqueue(rows, using)

    def link(result: list[Job]) -> Followed:
        written = [
            (job, link)
            for job, row, link in zip(result, rows, links_for(result, planned, specs), strict=True)
            if job is row
        ]
        if not written:
            return Followed()
        jobs, links = zip(*written, strict=True)
        return get_driver(using).workflows.link(jobs, links, timezone.now())

    return enqueue(rows, using, link)


def schedule_job(
    job: JobRef,
    payload: Any = None,
    *,
    run_at: datetime | None = None,
    delay: timedelta | None = None,
    queue: str | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    unique_key: str | None = None,
    concurrency_key: str | None = None,
    depends_on: Sequence[Any] = (),
    ignore_failed_dependencies: bool = False,
) -> Job:
    """Enqueue one job and return its row.

    With ``unique_key``, a pending or running job of the same name and key is
    returned instead and nothing is inserted. With ``concurrency_key`` (a job
    declared with ``@job(concurrency=N)``), at most N jobs of its queue with
    that key run at once. With ``depends_on`` (jobs or their ids), the job waits
    until they have all succeeded (or, with ``ignore_failed_dependencies``, ended).
    """
    spec = JobSpec(
        job,
        payload,
        run_at,
        delay,
        queue,
        priority,
        max_attempts,
        unique_key,
        concurrency_key=concurrency_key,
        depends_on=tuple(depends_on),
        ignore_failed_dependencies=ignore_failed_dependencies,
    )
    return enqueue_specs([spec], [spec])[0]


def schedule_jobs(specs: Iterable[JobSpec | Mapping[str, Any]]) -> list[Job]:
    """Enqueue many jobs, in one INSERT where the database allows.

    Every spec is validated before anything is written. Returns the rows in
    the order of ``specs``. A spec's ``depends_on`` may name another spec of the
    call, by the spec object itself.
    """
    originals = list(specs)
    made = [spec if isinstance(spec, JobSpec) else JobSpec(**spec) for spec in originals]
    return enqueue_specs(originals, made)
