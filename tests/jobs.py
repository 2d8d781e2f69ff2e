"""Handlers the tests schedule. Imported by the tests that need them."""

from __future__ import annotations

from typing import Any

from django_jobs import JobContext, job

CALLS: list[tuple[int, int, Any]] = []


@job("tests.ok")
def ok(ctx: JobContext, payload: Any) -> None:
    CALLS.append((ctx.job_id, ctx.attempt, payload))


@job("tests.fail", max_attempts=3)
def fail(ctx: JobContext, payload: Any) -> None:
    raise RuntimeError(f"boom {ctx.attempt}")


@job("tests.long_error")
def long_error(ctx: JobContext, payload: Any) -> None:
    raise ValueError("x" * 5000)


@job("tests.emails", queue="emails", priority=5, max_attempts=7)
def emails(ctx: JobContext, payload: Any) -> None:
    return None


@job("tests.leaky", max_attempts=1)
def leaky(ctx: JobContext, payload: Any) -> None:
    raise ValueError(
        f"card {payload['card']} declined for {payload['name']} (pin {payload['pin']})"
    )


@job("tests.stubborn", timeout=0.3, max_attempts=1)
def stubborn(ctx: JobContext, payload: Any) -> None:
    """Ignores ctx: keeps its thread past its timeout, then returns as if it had succeeded."""
    import time

    time.sleep(1.0)
