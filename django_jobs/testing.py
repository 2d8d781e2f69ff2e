"""Helpers for testing code that uses django-jobs."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

from django.utils import timezone

from .worker import TickResult, Worker


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or timezone.now()
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> datetime:
        with self._lock:
            self._now += timedelta(seconds=seconds)
            return self._now

    def set(self, value: datetime) -> None:
        with self._lock:
            self._now = value


def run_until_empty(worker: Worker | None = None, *, max_ticks: int = 1000) -> TickResult:
    """Run due jobs on the calling thread until a tick claims nothing.

    Jobs scheduled for later (retries included) stay pending; move the
    worker's clock to run them.
    """
    worker = worker or Worker()
    total = TickResult()
    for _ in range(max_ticks):
        result = worker.run_once()
        for field in total.__dataclass_fields__:
            setattr(total, field, getattr(total, field) + getattr(result, field))
        if result.claimed == 0:
            return total
    raise RuntimeError(f"jobs were still due after {max_ticks} ticks")
