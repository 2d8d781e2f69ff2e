"""Workflows: jobs that wait for other jobs (``depends_on``), chains, and batches with
callbacks. See ``docs/how-to/workflows.md``.

This module is what the API adds to the one way in (:mod:`django_jobs.scheduling`): it
checks a call's dependencies before anything is written (:func:`plan_links`), holds the
batch a ``with batch(...)`` block opens, and gives a handler its dependencies' results and
its batch. The steps a job's end takes are the driver's (:mod:`django_jobs.db.workflows`).
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.db import router, transaction
from django.utils import timezone

from .db import get_driver
from .db.workflows import CALLBACK_KINDS, Link
from .events import report_followed
from .models import Batch, Job, JobDependency

if TYPE_CHECKING:
    from .scheduling import JobSpec

#: A batch a ``with batch(...)`` block (or ``ctx.batch.add``) has open in this context.
_open: contextvars.ContextVar[OpenBatch | None] = contextvars.ContextVar(
    "django_jobs_open_batch", default=None
)


@dataclass(frozen=True)
class OpenBatch:
    """The batch every job enqueued in this context joins."""

    id: int
    using: str


def open_batch() -> OpenBatch | None:
    return _open.get()


@contextmanager
def joining(batch_id: int, using: str) -> Iterator[None]:
    token = _open.set(OpenBatch(batch_id, using))
    try:
        yield
    finally:
        _open.reset(token)


# -- the way in: dependencies checked, then linked ----------------------------------------


def plan_links(
    originals: Sequence[object], specs: Sequence[JobSpec], using: str
) -> list[tuple[tuple[int | None, int | None], ...]] | None:
    """Each spec's dependencies as (job id, None) for a job written before, or (None,
    index) for another spec of this call (named by the spec object itself, ``originals``);
    None when no spec has any and no batch is open. :class:`ValueError`, before anything is
    written, for an unknown id, a job of another database, a spec not of this call, or a
    cycle."""
    batch = open_batch()
    if batch is None and not any(spec.depends_on for spec in specs):
        return None
    if batch is not None and batch.using != using:
        raise ValueError(
            f"the open batch #{batch.id} is on database {batch.using!r}, these jobs go to "
            f"{using!r}: a batch's jobs are all on its database"
        )
    index = {id(original): n for n, original in enumerate(originals)}
    planned = [
        tuple(dependency_ref(ref, index, using) for ref in spec.depends_on) for spec in specs
    ]
    check_known([d for refs in planned for d, _ in refs if d is not None], using)
    check_acyclic([[n for _, n in refs if n is not None] for refs in planned])
    return planned


def dependency_ref(
    ref: object, index: Mapping[int, int], using: str
) -> tuple[int | None, int | None]:
    if isinstance(ref, Job):
        if ref.pk is None:
            raise ValueError(f"depends_on: {ref!r} is not saved: it has no id to wait for")
        if ref._state.db not in (None, using):
            raise ValueError(
                f"depends_on: job #{ref.pk} is on database {ref._state.db!r}, this job goes "
                f"to {using!r}: a job can only wait for jobs of its own database"
            )
        return ref.pk, None
    if isinstance(ref, int) and not isinstance(ref, bool):
        return ref, None
    from .scheduling import JobSpec

    if id(ref) in index:
        return None, index[id(ref)]
    if isinstance(ref, Mapping | JobSpec):
        raise ValueError(
            "depends_on: a spec a job waits for must be one of the same schedule_jobs() call"
            " (the spec object itself)"
        )
    raise ValueError(f"depends_on: {ref!r} is neither a Job, a job id, nor a spec of the same call")


def check_known(ids: Sequence[int], using: str) -> None:
    if not ids:
        return
    found = set(Job.objects.using(using).filter(id__in=set(ids)).values_list("id", flat=True))
    missing = sorted(set(ids) - found)
    if missing:
        raise ValueError(f"depends_on: no job has the id {', '.join(map(str, missing))}")


def check_acyclic(edges: Sequence[Sequence[int]]) -> None:
    """:class:`ValueError` naming a cycle among the specs of one call, if there is one."""
    state = [0] * len(edges)  # 0 unseen, 1 on the path, 2 done
    for start in range(len(edges)):
        stack = [(start, iter(edges[start]))]
        if state[start]:
            continue
        state[start] = 1
        while stack:
            node, following = stack[-1]
            nxt = next(following, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
            elif state[nxt] == 1:
                path = [n for n, _ in stack]
                cycle = path[path.index(nxt) :] + [nxt]
                raise ValueError(
                    "depends_on: the specs make a cycle ("
                    + " -> ".join(f"spec {n}" for n in cycle)
                    + "): none of them could ever run"
                )
            elif state[nxt] == 0:
                state[nxt] = 1
                stack.append((nxt, iter(edges[nxt])))


def links_for(
    written: Sequence[Job],
    planned: Sequence[tuple[tuple[int | None, int | None], ...]],
    specs: Sequence[JobSpec],
) -> list[Link]:
    """Each row's :class:`Link`, its dependencies on specs of the call made ids."""
    batch = open_batch()
    return [
        Link(
            tuple(d if d is not None else written[n].pk for d, n in refs),  # type: ignore[index]
            spec.ignore_failed_dependencies,
            None if batch is None else batch.id,
        )
        for refs, spec in zip(planned, specs, strict=True)
    ]


# -- chains and batches ------------------------------------------------------------------


def chain(*specs: JobSpec | Mapping[str, Any]) -> list[Job]:
    """Enqueue ``specs`` so that each waits for the one before to succeed; the rows, in
    order. A spec's own ``depends_on`` is kept and added to."""
    from .scheduling import JobSpec, schedule_jobs

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
    from .scheduling import JobSpec, build_job

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
        from .scheduling import schedule_job

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
