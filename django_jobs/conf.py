"""The ``DJANGO_JOBS`` settings dict, with a default for every key.

Values are read from ``django.conf.settings`` on each access, so tests that
use ``override_settings`` see their values at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings as django_settings

DEFAULTS: dict[str, Any] = {
    # queue name -> options; "workers" is the number of handler threads.
    "QUEUES": {"default": {"workers": 2}},
    # How long a claim holds a job before another worker may take it back.
    "LEASE_SECONDS": 300,
    # How long an idle worker waits before it looks for due jobs again.
    "POLL_SECONDS": 1,
    # How often a worker renews the lease of a running job; None: a third of the lease.
    "HEARTBEAT_SECONDS": None,
    # How long a stopping worker waits for running handlers before handing their jobs back.
    "SHUTDOWN_GRACE_SECONDS": 20,
    # How often each worker process takes back jobs whose lease has expired.
    "MAINTENANCE_SECONDS": 15,
    "MAX_ATTEMPTS": 5,
    "RETRY_BASE_SECONDS": 30,
    "RETRY_MAX_SECONDS": 3600,
    "RETRY_JITTER": 0.2,
    "MAX_PAYLOAD_BYTES": 1024 * 1024,
    # Regexes of payload key names whose values are masked, besides Django's (API, KEY, ...).
    "HIDDEN_PAYLOAD_KEYS": (),
    # name -> {"cron", "job", "payload", "timezone", "queue", ...}; synced by runjobs.
    "RECURRING": {},
}


class JobsSettings:
    """Attribute access to ``settings.DJANGO_JOBS`` merged over :data:`DEFAULTS`."""

    def user_settings(self) -> Mapping[str, Any]:
        value = getattr(django_settings, "DJANGO_JOBS", None)
        return value if isinstance(value, Mapping) else {}

    def __getattr__(self, key: str) -> Any:
        if key not in DEFAULTS:
            raise AttributeError(f"unknown django-jobs setting {key!r}")
        return self.user_settings().get(key, DEFAULTS[key])

    def heartbeat_seconds(self) -> float:
        """The beat: ``HEARTBEAT_SECONDS``, else a third of ``LEASE_SECONDS``."""
        lease = float(self.LEASE_SECONDS)
        beat = self.HEARTBEAT_SECONDS
        return min(float(beat), lease / 3) if beat is not None else lease / 3

    def call_timeout_seconds(self) -> float:
        """The deadline of one database call of the worker: a beat, at most 30 s."""
        return min(30.0, self.heartbeat_seconds())

    def queue_workers(self, queue: str) -> int:
        """Handler threads for ``queue``: its ``workers`` option, else 1."""
        options = self.QUEUES.get(queue) or {}
        return int(options.get("workers", 1))


settings = JobsSettings()
