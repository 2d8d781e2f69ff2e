"""Workflows: jobs that wait for other jobs (``depends_on``), chains, and batches with
callbacks. See ``docs/how-to/workflows.md``.

This module is what the API adds on top of the one way in (:mod:`django_jobs.scheduling`):
:func:`chain`, :func:`batch` and its callbacks, and what a handler sees of its workflow
(``ctx.dependency_results``, ``ctx.batch``). How a call's jobs are linked to what they
wait for and to the open batch is :mod:`django_jobs.linking`'s; the steps a job's end
takes are the driver's (:mod:`django_jobs.db.workflows`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from django.db import router, transaction
from django.utils import timezone

from .db import get_driver
from .db.workflows import CALLBACK_KINDS
from .events import report_followed
from .linking import joining
from .models import Batch, Job, JobDependency
from .scheduling import JobSpec, build_job, schedule_job, schedule_jobs

# -- chains and batches ------------------------------------------------------------------


def chain(*specs: JobSpec | Mapping[str, Any]) -> list[Job]:
    """Enqueue ``specs`` so that each waits for the one before to succeed; the rows, in
    order. A spec's own ``depends_on`` is kept and added to."""
    made: list[JobSpec] = []
    for spec in specs:
        one = spec if isinstance(spec, JobSpec) else JobSpec(**spec)
        if made:
            one = replace(one, depends_on=(*one.depends_on, made[-1]))
        made.append(one)
    return schedule_jobs(made)


@contextmanager
def batch(
    *,
    on_finish: Any = None,
    on_success: Any = None,
    on_failure: Any = None,
    name: str = "",
    using: str | None = None,
) -> Iterator[Batch]:
    """Every job enqueued inside the block joins the batch; when they have all ended,
    ``on_finish`` is enqueued, and ``on_success`` if all succeeded or ``on_failure`` if
    not, once each. A callback is ``(job name, payload)`` or a ``JobSpec``, checked here.
    The block is a transaction: if it raises, nothing of it is kept."""
    given = {"on_finish": on_finish, "on_success": on_success, "on_failure": on_failure}
    callbacks = {kind: callback_fields(kind, spec) for kind, spec in given.items() if spec}
    using = using or router.db_for_write(Job)
    with transaction.atomic(using=using):
        row = Batch.objects.using(using).create(name=name, callbacks=callbacks)
        with joining(row.pk, using):
            yield row
        followed = get_driver(using).workflows.closed(row.pk, timezone.now())
        report_followed(followed, using)
    row.refresh_from_db(using=using)


def callback_fields(kind: str, spec: Any) -> dict[str, Any]:
    """What a batch stores of a callback: the columns of its job, checked as
    ``schedule_job()`` checks them (:class:`~django_jobs.exceptions.UnknownJob` for a name
    no job is registered under)."""
    assert kind in CALLBACK_KINDS
    if isinstance(spec, tuple) and len(spec) == 2:
        spec = JobSpec(spec[0], spec[1])
    elif isinstance(spec, Mapping):
        spec = JobSpec(**spec)
    if not isinstance(spec, JobSpec):
        raise ValueError(f"{kind}: give (job name, payload) or a JobSpec, not {spec!r}")
    if spec.run_at is not None or spec.depends_on:
        raise ValueError(
            f"{kind}: a callback runs when its batch finishes: give it a delay, not a run_at"
            " or dependencies"
        )
    row = build_job(replace(spec, delay=None))
    fields = {
        name: getattr(row, name)
        for name in (
            "name",
            "queue",
            "payload",
            "priority",
            "max_attempts",
            "unique_key",
            "concurrency_key",
            "concurrency_limit",
        )
    }
    delay = spec.delay.total_seconds() if isinstance(spec.delay, timedelta) else spec.delay
    return {**fields, "delay_seconds": float(delay or 0)}


# -- what a handler sees -----------------------------------------------------------------


@dataclass
class BatchView:
    """A job's batch as its handler sees it (``ctx.batch``): its id and counts, as of
    when it was read (:meth:`refresh` reads them again), and :meth:`add`."""

    id: int
    using: str
    name: str = ""
    total: int = 0
    succeeded: int = 0
    dead_lettered: int = 0
    cancelled: int = 0
    finished: bool = False

    @classmethod
    def read(cls, batch_id: int, using: str) -> BatchView:
        view = cls(batch_id, using)
        view.refresh()
        return view

    def refresh(self) -> None:
        row = Batch.objects.using(self.using).get(pk=self.id)
        self.name, self.total = row.name, row.total
        self.succeeded, self.dead_lettered, self.cancelled = (
            row.succeeded,
            row.dead_lettered,
            row.cancelled,
        )
        self.finished = row.finished_at is not None

    def add(self, job: Any, payload: Any = None, **options: Any) -> Job:
        """Enqueue a sibling: a new member of this batch, which finishes only once it has
        ended too. :class:`ValueError` if the batch has finished already."""
        with transaction.atomic(using=self.using):
            still_open = Batch.objects.using(self.using).select_for_update()
            if not still_open.filter(pk=self.id, finished_at__isnull=True).exists():
                raise ValueError(f"batch #{self.id} has finished: no job can join it now")
            with joining(self.id, self.using):
                row = schedule_job(job, payload, **options)
        self.refresh()
        return row


def batch_of(job_id: int) -> BatchView | None:
    """The batch job ``job_id`` is a member or a callback of, if any."""
    using = router.db_for_read(Job)
    batch_id = Job.objects.using(using).filter(pk=job_id).values_list("batch_id", flat=True)
    found = batch_id.first()
    return None if found is None else BatchView.read(found, using)


def dependency_results(job_id: int) -> dict[int, Any]:
    """The stored result of each job ``job_id`` depends on, by id (None: none stored)."""
    links = JobDependency.objects.using(router.db_for_read(Job)).filter(job_id=job_id)
    return dict(links.values_list("depends_on_id", "depends_on__result"))
