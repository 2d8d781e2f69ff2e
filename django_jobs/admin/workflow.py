"""A job's place in its workflow, as its page draws it: what it waits for, what waits for
it, and its batch. Shared by the job pages and the batch page."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.urls import reverse
from django.utils.http import urlencode

from ..models import Batch, Job, JobDependency

#: How many jobs each side of a job's graph draws; the rest are linked as a list.
SHOWN_EACH_SIDE = 20


@dataclass(frozen=True)
class Node:
    """A job as the graph draws it."""

    id: int
    name: str
    status: str
    url: str


@dataclass(frozen=True)
class Side:
    """The jobs on one side of the graph, at most :data:`SHOWN_EACH_SIDE`, and how many in
    all (the rest behind ``more_url``)."""

    nodes: list[Node]
    count: int
    more_url: str

    @property
    def more(self) -> int:
        return self.count - len(self.nodes)


@dataclass(frozen=True)
class Workflow:
    waits_for: Side
    waited_for_by: Side
    batch: Batch | None
    batch_url: str


def job_url(job_id: int) -> str:
    return reverse("admin:django_jobs_job_change", args=[job_id])


def jobs_list_url(**lookups: Any) -> str:
    return f"{reverse('admin:django_jobs_job_changelist')}?{urlencode(lookups)}"


def node(job: Job) -> Node:
    return Node(job.pk, job.name, job.status, job_url(job.pk))


def side(links: Any, related: str, lookup: str, job_id: int) -> Side:
    """One side of ``job_id``'s graph from its dependency ``links`` (``related``: the job
    each link names on that side)."""
    shown = [node(getattr(link, related)) for link in links[:SHOWN_EACH_SIDE]]
    count = len(shown) if len(shown) < SHOWN_EACH_SIDE else links.count()
    return Side(shown, count, jobs_list_url(**{lookup: job_id}))


def workflow_of(job: Job | None) -> Workflow | None:
    """``job``'s graph; None, without a query, for a job in no workflow."""
    if job is None or (job.workflow_pending is None and job.batch_id is None):
        return None
    links = JobDependency.objects.using(job._state.db).order_by("id")
    waits_for = side(
        links.filter(job=job).select_related("depends_on"),
        "depends_on",
        "dependent_links__job__id__exact",
        job.pk,
    )
    waited_for_by = side(
        links.filter(depends_on=job).select_related("job"),
        "job",
        "dependency_links__depends_on__id__exact",
        job.pk,
    )
    batch = job.batch if job.batch_id is not None else None
    batch_url = "" if batch is None else reverse("admin:django_jobs_batch_change", args=[batch.pk])
    if not (waits_for.count or waited_for_by.count or batch):
        return None
    return Workflow(waits_for, waited_for_by, batch, batch_url)
