"""Waiting for a job's end, and enqueueing from async code.

- :func:`wait_for` and :func:`await_job` return the job once it has ended (succeeded,
  dead-lettered or cancelled), read again from its row, and raise ``TimeoutError`` when
  it has not ended within ``timeout`` seconds. On PostgreSQL (with ``LISTEN`` on) they
  LISTEN on a connection of their own and mark the job ``awaited``, whose end a trigger
  then NOTIFYs: they read the row again as it ends. Elsewhere, and as the fallback, they
  read the row at first every :data:`FIRST_POLL_SECONDS`, then less often, up to every
  :data:`MAX_POLL_SECONDS`: a job that ends in milliseconds is seen in milliseconds, and
  a long wait costs a read a second. Neither may run inside ``transaction.atomic()``: the
  wait would hold the transaction (and, on PostgreSQL, the cleanup of every table) open,
  and a job enqueued in it could not start before it commits.
- :func:`aschedule_job` and :func:`aschedule_jobs` are :func:`schedule_job` and
  :func:`schedule_jobs` for async views, run in Django's thread for sync code as the async
  ORM's methods are.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connections, router

from .conf import settings
from .db import get_driver
from .db.notify import aends_heard, ends_heard, psycopg_can_listen
from .exceptions import JobsError
from .models import FINISHED_STATUSES, Job
from .scheduling import JobSpec, schedule_job, schedule_jobs

#: The first wait between two reads of the row (seconds); each wait doubles it ...
FIRST_POLL_SECONDS = 0.01
#: ... up to this.
MAX_POLL_SECONDS = 1.0


def job_id(job: Job | int | str) -> int:
    """The id of ``job``: a :class:`Job`, its id, or its id as text."""
    if isinstance(job, Job):
        if job.pk is None:
            raise JobsError("this job has no id: it was never saved, so it will never end")
        return int(job.pk)
    if isinstance(job, bool) or not isinstance(job, (int, str)):
        raise TypeError(f"expected a Job or a job id, got {type(job).__name__}")
    try:
        return int(job)
    except ValueError:
        raise TypeError(f"expected a Job or a job id, got {job!r}") from None


def check_timeout(timeout: float) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
        raise ValueError(f"timeout must be a number of seconds, 0 or more; got {timeout!r}")
    return float(timeout)


def refuse_in_transaction(using: str, what: str) -> None:
    if connections[using].in_atomic_block:
        raise JobsError(
            f"{what} inside transaction.atomic(): the wait would hold the transaction open,"
            " and a job enqueued in it cannot start before it commits. Wait after the"
            " transaction (transaction.on_commit(), or outside the atomic block)"
        )


def existing(found: Job | None, ident: int) -> Job:
    """``found``, or ``Job.DoesNotExist`` saying why there may be none."""
    if found is None:
        raise Job.DoesNotExist(
            f"no job {ident}: it was never enqueued, or was deleted (retention) since"
        )
    return found


def timed_out(ident: int, timeout: float, found: Job) -> TimeoutError:
    return TimeoutError(f"job {ident} has not ended within {timeout:g} s (it is {found.status})")


def wait_for(
    job: Job | int | str,
    *,
    timeout: float,
    using: str | None = None,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Job:
    """Wait until ``job`` (a :class:`Job` or its id) has ended; the job, read again.

    ``TimeoutError`` when it has not ended within ``timeout`` seconds; ``Job.DoesNotExist``
    when there is no such job."""
    ident, limit = job_id(job), check_timeout(timeout)
    using = using or router.db_for_write(Job)  # the jobs' database: a replica may lag
    refuse_in_transaction(using, "wait_for()")
    deadline = monotonic() + limit
    jobs = Job.objects.using(using).filter(pk=ident)
    found = existing(jobs.first(), ident)
    if found.status in FINISHED_STATUSES or limit == 0:
        return ended(found, ident, limit)
    with listening(using, ident) as heard:
        if heard is not None:
            jobs.filter(awaited__isnull=True).update(awaited=True)
        pause = FIRST_POLL_SECONDS
        while True:
            found = existing(jobs.first(), ident)
            left = deadline - monotonic()
            if found.status in FINISHED_STATUSES or left <= 0:
                return ended(found, ident, limit)
            if heard is None:
                sleep(min(pause, left))
            else:
                heard(min(pause, left))
            pause = min(pause * 2, MAX_POLL_SECONDS)


async def await_job(job: Job | int | str, *, timeout: float, using: str | None = None) -> Job:
    """:func:`wait_for` for async code: waits on the event loop, reads through Django's
    async ORM, listens through psycopg's async connection."""
    ident, limit = job_id(job), check_timeout(timeout)
    using = using or router.db_for_write(Job)  # the jobs' database: a replica may lag
    await sync_to_async(refuse_in_transaction)(using, "await_job()")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    jobs = Job.objects.using(using).filter(pk=ident)
    found = existing(await jobs.afirst(), ident)
    if found.status in FINISHED_STATUSES or limit == 0:
        return ended(found, ident, limit)
    async with alistening(using, ident) as heard:
        if heard is not None:
            await jobs.filter(awaited__isnull=True).aupdate(awaited=True)
        pause = FIRST_POLL_SECONDS
        while True:
            found = existing(await jobs.afirst(), ident)
            left = deadline - loop.time()
            if found.status in FINISHED_STATUSES or left <= 0:
                return ended(found, ident, limit)
            if heard is None:
                await asyncio.sleep(min(pause, left))
            else:
                await heard(min(pause, left))
            pause = min(pause * 2, MAX_POLL_SECONDS)


def ended(found: Job, ident: int, limit: float) -> Job:
    """``found`` if it has ended; else the time is up: ``TimeoutError``."""
    if found.status in FINISHED_STATUSES:
        return found
    raise timed_out(ident, limit, found)


def listens(using: str) -> bool:
    """Whether a waiter on ``using`` hears ends by NOTIFY (PostgreSQL, ``LISTEN`` on)."""
    return get_driver(using).listen and psycopg_can_listen()


@contextmanager
def listening(using: str, ident: int) -> Iterator[Callable[[float], bool] | None]:
    """Job ``ident``'s end heard, where a waiter listens; else None (it polls)."""
    if not listens(using):
        yield None
        return
    with ends_heard(settings.LISTEN_DATABASE or using, ident) as heard:
        yield heard


@asynccontextmanager
async def alistening(
    using: str, ident: int
) -> AsyncIterator[Callable[[float], Awaitable[bool]] | None]:
    """:func:`listening` on the event loop."""
    if not listens(using):
        yield None
        return
    async with aends_heard(settings.LISTEN_DATABASE or using, ident) as heard:
        yield heard


async def aschedule_job(job: Any, payload: Any = None, **options: Any) -> Job:
    """:func:`~django_jobs.schedule_job` for async code (the same arguments)."""
    return await sync_to_async(schedule_job)(job, payload, **options)


async def aschedule_jobs(specs: Iterable[JobSpec | Mapping[str, Any]]) -> list[Job]:
    """:func:`~django_jobs.schedule_jobs` for async code."""
    return await sync_to_async(schedule_jobs)(list(specs))
