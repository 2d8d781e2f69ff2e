"""The links a call's new jobs are given: the jobs each waits for (``depends_on``),
checked before anything is written (:func:`plan_links`) and made ids once the rows are
(:func:`links_for`), and the batch a ``with batch(...)`` block (or ``ctx.batch.add``) has
open (:func:`joining`). :mod:`django_jobs.scheduling` asks this module; the driver writes
the links (:meth:`~django_jobs.db.workflows.Workflows.link`).
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from .db.workflows import Link
from .models import Job


class JobSpec(Protocol):
    """What linking reads of a :class:`~django_jobs.scheduling.JobSpec`."""

    @property
    def depends_on(self) -> Sequence[Any]: ...

    @property
    def ignore_failed_dependencies(self) -> bool: ...


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
    if id(ref) in index:
        return None, index[id(ref)]
    if isinstance(ref, Mapping) or hasattr(ref, "depends_on"):  # a spec, of another call
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
