"""WorkerProcess processes register themselves, so the admin can list the live ones, and
remove their row as they stop (after a second signal too), so a stopped one is not listed.

A supervisor (``runjobs --processes``) registers a row of its own; its children's rows
name it in ``supervisor``."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable
from datetime import datetime

from ..models import WorkerProcess


def register_worker(
    owner: str,
    queues: Iterable[str],
    now: datetime,
    using: str,
    jobs_run: int = 0,
    supervisor: str | None = None,
    process_count: int = 0,
) -> None:
    """Register process ``owner``; ``supervisor``: the id of the supervisor (``runjobs
    --processes``) whose child it is, under whose entry the Workers page lists it;
    ``process_count``: for a supervisor, how many children it runs (it serves no queue itself)."""
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
) -> None:
    """Mark the worker alive with its count of finished attempts; register it again
    if a sweep removed it meanwhile."""
    rows = WorkerProcess.objects.using(using).filter(id=owner)
    if not rows.update(last_heartbeat_at=now, jobs_run=jobs_run):
        register_worker(owner, queues, now, using, jobs_run, supervisor, process_count)


def unregister_worker(owner: str, using: str) -> None:
    WorkerProcess.objects.using(using).filter(id=owner).delete()
