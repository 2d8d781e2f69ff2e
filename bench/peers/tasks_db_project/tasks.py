"""The django-tasks-db peer's tasks: a no-op, and one that records when it started."""

from __future__ import annotations

import os
import time

from django.tasks import task


@task
def noop(number: int) -> None:
    return None


@task
def record_start(log: str) -> None:
    """Append ``time.time()`` to ``log`` in one write."""
    started = time.time()
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{started!r}\n".encode())
    finally:
        os.close(fd)
