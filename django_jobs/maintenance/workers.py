"""The sweep of dead worker rows: a process that stopped renewing is removed from the
WorkerProcess table (the admin's Workers page, ``jobs status``) once a lease has passed."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import router

from ..conf import settings
from ..models import WorkerProcess


def sweep_workers(
    now: datetime, *, using: str | None = None, lease_seconds: float | None = None
) -> int:
    """Remove registrations whose heartbeat is older than a lease (``LEASE_SECONDS``)."""
    lease = float(settings.LEASE_SECONDS) if lease_seconds is None else lease_seconds
    cutoff = now - timedelta(seconds=lease)
    rows = WorkerProcess.objects.using(using or router.db_for_write(WorkerProcess))
    deleted, _ = rows.filter(last_heartbeat_at__lt=cutoff).delete()
    return deleted
