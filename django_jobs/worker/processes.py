"""WorkerProcess processes register themselves, so the admin can list the live ones, and
remove their row as they stop (after a second signal too), so a stopped one is not listed.

A supervisor (``runjobs --processes``) registers a row of its own; its children's rows
name it in ``supervisor``. A worker's row keeps the job names it knows (``names``), for the
dashboard and ``jobs status`` to say which due jobs wait for a worker that knows theirs; a
supervisor's has none (it runs no job)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from ..models import WorkerProcess


def register_worker(
    owner: str,
    queues: Iterable[str],
    now: datetime,
    using: str,
    jobs_run: int = 0,
    supervisor: str | None = None,
    process_count: int = 0,
    names: Sequence[str] | None = None,
    largest_claim: int = 0,
) -> None:
    """Register process ``owner``; ``supervisor``: the id of the supervisor (``runjobs
    --processes``) whose child it is, under whose entry the Workers page lists it;
    ``process_count``: for a supervisor, how many children it runs (it serves no queue itself);
    ``names``: the job names it knows (None: a supervisor's, or a row that says nothing);
    ``largest_claim``: the most jobs one of its claims takes of a queue (0: it claims under
    a limit only with the queue's lock, :mod:`~django_jobs.db.postgresql_limits`)."""
    WorkerProcess.objects.using(using).update_or_create(
        id=owner,
        defaults={
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "queues": sorted(queues),
            "started_at": now,
            "last_heartbeat_at": now,
            "jobs_run": jobs_run,
            "supervisor": supervisor,
            "process_count": process_count,
            "names": None if names is None else list(names),
            "largest_claim": largest_claim,
        },
    )


def refresh_worker(
    owner: str,
    queues: Iterable[str],
    now: datetime,
    using: str,
    jobs_run: int = 0,
    supervisor: str | None = None,
    process_count: int = 0,
    names: Sequence[str] | None = None,
    names_changed: bool = False,
    largest_claim: int = 0,
) -> None:
    """Mark the worker alive with its count of finished attempts, and the names it knows if
    they ``names_changed`` since it last wrote them; register it again if a sweep removed
    it meanwhile."""
    fields: dict[str, Any] = {"last_heartbeat_at": now, "jobs_run": jobs_run}
    if names_changed:
        fields["names"] = None if names is None else list(names)
    rows = WorkerProcess.objects.using(using).filter(id=owner)
    if not rows.update(**fields):
        register_worker(
            owner, queues, now, using, jobs_run, supervisor, process_count, names, largest_claim
        )


def unregister_worker(owner: str, using: str) -> None:
    WorkerProcess.objects.using(using).filter(id=owner).delete()
