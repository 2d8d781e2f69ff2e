"""Worker processes register themselves, so the admin can list the live ones."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable
from datetime import datetime, timedelta

from ..models import Worker


def register_worker(owner: str, queues: Iterable[str], now: datetime, using: str) -> None:
    Worker.objects.using(using).update_or_create(
        id=owner,
        defaults={
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "queues": sorted(queues),
            "started_at": now,
            "last_heartbeat_at": now,
        },
    )


def refresh_worker(owner: str, queues: Iterable[str], now: datetime, using: str) -> None:
    """Mark the worker alive; register it again if a sweep removed it meanwhile."""
    if not Worker.objects.using(using).filter(id=owner).update(last_heartbeat_at=now):
        register_worker(owner, queues, now, using)


def unregister_worker(owner: str, using: str) -> None:
    Worker.objects.using(using).filter(id=owner).delete()


def sweep_workers(now: datetime, lease_seconds: float, using: str) -> int:
    """Remove registrations whose heartbeat is older than a lease."""
    cutoff = now - timedelta(seconds=lease_seconds)
    deleted, _ = Worker.objects.using(using).filter(last_heartbeat_at__lt=cutoff).delete()
    return deleted
