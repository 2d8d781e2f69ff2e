"""Example jobs. ``django_jobs`` imports every installed app's ``jobs`` module."""

from __future__ import annotations

import logging
from typing import Any

from django_jobs import JobContext, job

logger = logging.getLogger(__name__)


@job("emails.welcome", queue="emails", max_attempts=3)
def send_welcome(ctx: JobContext, payload: dict[str, Any]) -> None:
    logger.info("welcome mail to %s (attempt %s)", payload["email"], ctx.attempt)


@job("reports.add")
def add(ctx: JobContext, payload: dict[str, Any]) -> int:
    return int(payload["a"]) + int(payload["b"])


@job("demo.flaky", max_attempts=3)
def flaky(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Fails until its ``succeed_on`` attempt."""
    if ctx.attempt < int(payload.get("succeed_on", 2)):
        raise RuntimeError(f"flaky failure on attempt {ctx.attempt}")


@job("demo.broken", max_attempts=2)
def broken(ctx: JobContext, payload: Any) -> None:
    raise ValueError("this job always fails")


@job("demo.noop")
def noop(ctx: JobContext, payload: Any) -> None:
    return None


@job("demo.keyed_noop", queue="keyed", concurrency=4)
def keyed_noop(ctx: JobContext, payload: Any) -> None:
    """A no-op under a concurrency key: at most 4 of a key at once (the soak's keyed jobs)."""
    return None


@job("example.record")
def record(ctx: JobContext, payload: dict[str, Any] | None) -> None:
    """Write a witness row, so tests can count how often each job ran; with ``mark`` (a
    file's path), first append ``job_id:attempt`` to it, so a test knows the handler runs."""
    import os
    import time

    from django.utils import timezone

    from .models import Execution

    started_at = timezone.now()
    mark = (payload or {}).get("mark")
    if mark:
        with open(mark, "a", encoding="utf-8") as file:
            file.write(f"{ctx.job_id}:{ctx.attempt}\n")
    seconds = float((payload or {}).get("sleep", 0))
    if seconds:
        time.sleep(seconds)
    Execution.objects.create(
        job_id=ctx.job_id,
        attempt=ctx.attempt,
        pid=os.getpid(),
        started_at=started_at,
        finished_at=timezone.now(),
    )


@job("example.keyed", queue="keyed", concurrency=1)
def keyed(ctx: JobContext, payload: dict[str, Any] | None) -> None:
    """``example.record`` under a concurrency limit: one job per key runs at once."""
    record(ctx, payload)


@job("example.patient")
def patient(ctx: JobContext, payload: dict[str, Any] | None) -> None:
    """Works for ``seconds``, stopping early (JobCancelled) once cancelled."""
    if ctx.wait(float((payload or {}).get("seconds", 1))):
        ctx.raise_if_cancelled()
    record(ctx, None)


@job("example.sleep")
def sleep(ctx: JobContext, payload: dict[str, Any] | None) -> None:
    """Sleeps, touching no database: its outcome is the worker's only write."""
    import time

    time.sleep(float((payload or {}).get("seconds", 1)))


@job("example.exit", max_attempts=2)
def exit_(ctx: JobContext, payload: Any) -> None:
    """Calls ``sys.exit()``, as a script turned into a handler might."""
    import sys

    sys.exit(f"giving up on attempt {ctx.attempt}")


# -- network faults: a handler that reports what it saw to a file -----------


def note_event(path: str, event: str, ctx: JobContext) -> None:
    """Append one JSON line (event, attempt, pid, wall time) to ``path``, in one write."""
    import json
    import os
    import time

    line = json.dumps(
        {
            "event": event,
            "job_id": ctx.job_id,
            "attempt": ctx.attempt,
            "pid": os.getpid(),
            "at": time.time(),
        }
    )
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


@job("example.watchful")
def watchful(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Works ``seconds`` (``then_seconds`` on later attempts) watching ``ctx.cancelled``.

    It touches no database, so that it works on while its worker is cut off
    from it: it records when it started and when it stopped, cancelled or
    finished, in the file at ``payload["log"]``.
    """
    import time

    seconds = float(payload["seconds"] if ctx.attempt == 1 else payload.get("then_seconds", 1))
    note_event(payload["log"], "started", ctx)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ctx.wait(0.05) or ctx.cancelled:
            note_event(payload["log"], "cancelled", ctx)
            ctx.raise_if_cancelled()
    note_event(payload["log"], "finished", ctx)


@job("example.watchful_timed", timeout=1.5)
def watchful_timed(ctx: JobContext, payload: dict[str, Any]) -> None:
    """``example.watchful`` with a 1.5-second timeout."""
    watchful(ctx, payload)


@job("example.counts", max_attempts=1)
def counts(ctx: JobContext, payload: Any) -> None:
    """Reports ``i`` of ``payload["total"]`` every ``payload["step"]`` seconds."""
    total = payload["total"]
    for done in range(total + 1):
        ctx.progress(done, total, f"step {done}")
        if done < total:
            ctx.wait(payload["step"])
            ctx.raise_if_cancelled()


# -- async handlers: run on the worker's event loop --------------------------


@job("example.async_add")
async def async_add(ctx: JobContext, payload: dict[str, Any]) -> int:
    """Awaits ``sleep`` seconds (0 by default), then returns ``a + b``."""
    import asyncio

    await asyncio.sleep(float(payload.get("sleep", 0)))
    return int(payload["a"]) + int(payload["b"])


@job("example.async_record")
async def async_record(ctx: JobContext, payload: dict[str, Any] | None) -> None:
    """``example.record`` through the async ORM: awaits ``sleep`` seconds, then writes its
    witness row."""
    import asyncio
    import os

    from django.utils import timezone

    from .models import Execution

    started_at = timezone.now()
    await asyncio.sleep(float((payload or {}).get("sleep", 0)))
    await Execution.objects.acreate(
        job_id=ctx.job_id,
        attempt=ctx.attempt,
        pid=os.getpid(),
        started_at=started_at,
        finished_at=timezone.now(),
    )


@job("example.async_watchful")
async def async_watchful(ctx: JobContext, payload: dict[str, Any]) -> None:
    """``example.watchful`` as a coroutine: works ``seconds`` in steps of
    ``ctx.asleep()``, noting to ``payload["log"]`` when it started, when it saw
    ``ctx.cancelled`` (a stop), when its task was cancelled (a timeout, a cancel,
    a hand-back) and when it finished. ``heedless``: it never looks at ``ctx``, so only
    its task's cancellation stops it."""
    import asyncio
    import time

    seconds = float(payload["seconds"] if ctx.attempt == 1 else payload.get("then_seconds", 1))
    note_event(payload["log"], "started", ctx)
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            step = min(0.05, max(0.0, deadline - time.monotonic()))
            if payload.get("heedless"):
                await asyncio.sleep(step)
            elif await ctx.asleep(step):
                note_event(payload["log"], "cancelled", ctx)
                ctx.raise_if_cancelled()
    except asyncio.CancelledError:
        note_event(payload["log"], "interrupted", ctx)
        raise
    note_event(payload["log"], "finished", ctx)


@job("example.async_watchful_timed", timeout=1.5)
async def async_watchful_timed(ctx: JobContext, payload: dict[str, Any]) -> None:
    """``example.async_watchful`` with a 1.5-second timeout."""
    await async_watchful(ctx, payload)


@job("example.async_blocking")
async def async_blocking(ctx: JobContext, payload: dict[str, Any] | None) -> None:
    """A coroutine that blocks the event loop with ``time.sleep(seconds)``: the mistake the
    worker reports."""
    import time

    time.sleep(float((payload or {}).get("seconds", 1)))


@job("example.async_counts", max_attempts=1)
async def async_counts(ctx: JobContext, payload: Any) -> None:
    """``example.counts`` as a coroutine."""
    total = payload["total"]
    for done in range(total + 1):
        ctx.progress(done, total, f"step {done}")
        if done < total:
            await ctx.asleep(payload["step"])
            ctx.raise_if_cancelled()


@job("example.async_snooze", max_attempts=1)
async def async_snooze(ctx: JobContext, payload: Any) -> str:
    """Snoozes ``times`` times for ``seconds``, then returns how many attempts it saw."""
    if ctx.attempt <= int(payload["times"]):
        ctx.snooze(float(payload.get("seconds", 0.1)))
    return f"ran on attempt {ctx.attempt}"


@job("example.async_broken", max_attempts=2)
async def async_broken(ctx: JobContext, payload: Any) -> None:
    raise ValueError("this async job always fails")
