"""A job only the next deploy registers: imported when ``EXAMPLE_JOB_MODULES`` names this
module (``JOBS_EXAMPLE_JOB_MODULES``), as a worker started after that deploy would. It lies
outside the example app, whose modules ``manage.py check`` reads for jobs no worker would
import (W006): this one is imported by a worker of that deploy."""

from __future__ import annotations

from typing import Any

from django_jobs import JobContext, job
from testproject.example.jobs import record


@job("example.next_deploy")
def next_deploy(ctx: JobContext, payload: dict[str, Any] | None) -> None:
    """``example.record``'s witness row, under a name the current deploy does not know."""
    record(ctx, payload)
