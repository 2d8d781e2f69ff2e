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

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import router, transaction
from django.utils import timezone

from . import tracing
from .conf import check_job_options, resolve_run_at, settings
from .db import get_driver
from .db.inserts import ENCODED_PAYLOAD
from .db.workflows import Followed
from .events import report_enqueued, report_followed
from .exceptions import UnknownJob
from .linking import links_for, plan_links
from .models import Job, init_signals
from .payloads import encoded
from .queues import check_scheduled_queue
from .registry import get_definition

JobRef = str | Callable[..., Any]


@dataclass(frozen=True, init=False)
class JobSpec:
    """One job for :func:`schedule_jobs`; the fields are ``schedule_job``'s arguments."""

    job: JobRef
    payload: Any
    run_at: datetime | None
    delay: timedelta | None
    queue: str | None
    priority: int | None
    max_attempts: int | None
    unique_key: str | None
    #: The recurring schedule the job runs for; set by the scheduler and run-now.
    schedule: str | None
    #: Jobs of a queue with the same key run at most ``@job(concurrency=N)`` at once.
    concurrency_key: str | None
    #: What the job waits for: jobs (rows or ids), or other specs of the same call.
    depends_on: Sequence[Any]
    #: Run once every dependency has ended, whatever its end (not only once they succeed).
    ignore_failed_dependencies: bool

    def __init__(
        self,
        job: JobRef,
        payload: Any = None,
        run_at: datetime | None = None,
        delay: timedelta | None = None,
        queue: str | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        unique_key: str | None = None,
        schedule: str | None = None,
        concurrency_key: str | None = None,
        depends_on: Sequence[Any] = (),
        ignore_failed_dependencies: bool = False,
    ) -> None:
        # One update of the instance's dict, where a frozen dataclass's own __init__ sets
        # each field through object.__setattr__: most of what a bulk call's specs cost to
        # make (1.4 µs a spec against 0.6).
        self.__dict__.update(
            job=job,
            payload=payload,
            run_at=run_at,
            delay=delay,
            queue=queue,
            priority=priority,
            max_attempts=max_attempts,
            unique_key=unique_key,
            schedule=schedule,
            concurrency_key=concurrency_key,
            depends_on=depends_on,
            ignore_failed_dependencies=ignore_failed_dependencies,
        )


def check_options(
    *,
    queue: Any,
    priority: Any,
    max_attempts: Any,
    unique_key: Any,
    schedule: Any,
    concurrency_key: Any,
) -> None:
    """:func:`~django_jobs.conf.check_job_options`, once for each set of options of a
    process's jobs, unique keys aside (each is checked on its own): the jobs of a call
    mostly share theirs."""
    if unique_key is not None:
        check_job_options(queue=None, priority=None, max_attempts=None, unique_key=unique_key)
    # The numbers' types too: True == 1, but a bool is no priority.
    options: tuple[Any, ...] = (queue, type(priority), priority, type(max_attempts))
    options += (max_attempts, schedule, concurrency_key)
    try:
        checked = options in _checked_options
    except TypeError:  # an unhashable value: no job has it, the check says why
        checked = False
    if checked:
        return
    check_job_options(
        queue=queue,
        priority=priority,
        max_attempts=max_attempts,
        schedule=schedule,
        concurrency_key=concurrency_key,
    )
    if len(_checked_options) >= CHECKED_OPTIONS:
        _checked_options.clear()
    _checked_options.add(options)


#: The sets of options :func:`check_options` found good, and how many it keeps.
_checked_options: set[tuple[Any, ...]] = set()
CHECKED_OPTIONS = 1000


@dataclass(frozen=True)
class Shared:
    """What every job of one call shares, read once per call rather than once a job: the
    time (its ``created_at``, and its ``run_at`` unless given), and the settings."""

    now: datetime
    max_attempts: int
    payload_limit: int
    #: Whether a receiver of Django's ``pre_init`` or ``post_init`` hears of each new row.
    init_signals: bool

    @classmethod
    def read(cls) -> Shared:
        return cls(
            timezone.now(),
            int(settings.MAX_ATTEMPTS),
            int(settings.MAX_PAYLOAD_BYTES),
            init_signals(Job),
        )


def build_job(spec: JobSpec, shared: Shared | None = None) -> Job:
    """Validate a spec and return an unsaved :class:`Job`."""
    shared = shared or Shared.read()
    return _Common.of(spec, shared).row(spec.payload, shared)


def build_jobs(specs: Sequence[JobSpec], shared: Shared) -> list[Job]:
    """:func:`build_job` of each of ``specs``. Those that differ only in their payload (a
    bulk call's, mostly) share one check of the rest and one layout of their rows."""
    commons: dict[tuple[Any, ...], _Common] = {}
    rows = []
    for spec in specs:
        key = _Common.key(spec)
        try:
            common = commons.get(key) if key is not None else None
        except TypeError:  # an unhashable option: no job has it, the check says why
            key = None
            common = None
        if common is None:
            common = _Common.of(spec, shared)
            if key is not None and len(commons) < CHECKED_OPTIONS:
                commons[key] = common
        rows.append(common.row(spec.payload, shared))
    return rows


@dataclass(frozen=True)
class _Common:
    """What a new job's row holds beside its payload, checked, and a maker of its rows."""

    make: Callable[[Any], Job]

    @staticmethod
    def key(spec: JobSpec) -> tuple[Any, ...] | None:
        """What decides a spec's common part; None for one that is its own (a unique key's:
        each is checked on its own). The numbers' types too, as :func:`check_options`'
        (``True == 1``, but a bool is no priority). Its dependencies are not a part of its
        row: they are linked after the insert."""
        if spec.unique_key is not None:
            return None
        return (
            spec.job,
            spec.queue,
            type(spec.priority),
            spec.priority,
            type(spec.max_attempts),
            spec.max_attempts,
            spec.schedule,
            spec.concurrency_key,
            spec.run_at,
            spec.delay,
        )

    @classmethod
    def of(cls, spec: JobSpec, shared: Shared) -> _Common:
        definition = get_definition(spec.job)
        if definition.unavailable is not None:
            raise UnknownJob(definition.unavailable)
        queue = spec.queue if spec.queue is not None else definition.queue
        key = definition.concurrency_key(spec.concurrency_key, queue)
        max_attempts = (
            spec.max_attempts
            if spec.max_attempts is not None
            else definition.max_attempts or shared.max_attempts
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
        check_options(**options)
        run_at = resolve_run_at(spec.run_at, spec.delay, shared.now)
        check_scheduled_queue(queue, definition.queue)
        values = {
            "name": definition.name,
            "run_at": run_at,
            "created_at": shared.now,
            "concurrency_limit": None if key is None else definition.concurrency,
            **options,
        }
        return cls(Job.maker(values, shared.init_signals))

    def row(self, payload: Any, shared: Shared) -> Job:
        text, decoded = encoded(payload, limit=shared.payload_limit)
        row = self.make(decoded)
        setattr(row, ENCODED_PAYLOAD, text)  # written as it was checked: not encoded again
        return row


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
    shared = Shared.read()
    rows = build_jobs(specs, shared)
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
