"""A job only the next deploy registers: imported when ``EXAMPLE_JOB_MODULES`` names this
module (``JOBS_EXAMPLE_JOB_MODULES``), as a worker started after that deploy would."""

from __future__ import annotations

from typing import Any

from django_jobs import JobContext, job

from .jobs import record


@job("example.next_deploy")
def next_deploy(ctx: JobContext, payload: dict[str, Any] | None) -> None:
    """``example.record``'s witness row, under a name the current deploy does not know."""
    record(ctx, payload)
