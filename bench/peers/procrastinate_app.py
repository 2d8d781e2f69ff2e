"""The procrastinate peer's app: a no-op task, and one that records when it started.

``DATABASE_URL`` (a libpq connection URI) names the database.
"""

from __future__ import annotations

import os
import time

import procrastinate

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=os.environ["DATABASE_URL"])
)


@app.task(name="noop")
def noop(number: int) -> None:
    return None


@app.task(name="record_start")
def record_start(log: str) -> None:
    """Append ``time.time()`` to ``log`` in one write."""
    started = time.time()
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{started!r}\n".encode())
    finally:
        os.close(fd)


@app.task(name="async_wait")
async def async_wait(seconds: float) -> None:
    """Awaits ``seconds``, as a call to a slow API would (bench/async_jobs.py)."""
    import asyncio

    await asyncio.sleep(seconds)
