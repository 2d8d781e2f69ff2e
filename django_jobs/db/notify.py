"""Wake-ups on PostgreSQL: NOTIFY when a job is enqueued, LISTEN in each worker.

:func:`notify` sends the names of the queues that just got due jobs on the
caller's connection, so inside ``transaction.atomic()`` PostgreSQL delivers
them only on commit, and never for a transaction that rolls back. A worker
process runs one waker (:mod:`django_jobs.worker.waker`): a thread that
listens on a connection of its own (a :class:`Listener`) and wakes the
dispatcher of each notified queue, so an idle worker picks a new job up at
once instead of at its next poll. Polling stays: it is the fallback while
the listening connection is down, and the only path when LISTEN is off
(``DJANGO_JOBS["LISTEN"]``), on other databases, or behind a pooler that
does not deliver notifications (detected with a probe at every connection).

The channel name is fixed and versioned; the payload is the queue's name
alone, and an empty payload is the probe's.

The end of a job someone waits for (``wait_for()``, ``await_job()``: its row's
``awaited`` set) is NOTIFYed on :data:`END_CHANNEL` by a trigger (migration
0020), with the job's id: :func:`ends_heard` and :func:`aends_heard` listen for
one job's end on a connection of their own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any

from django.db import connections

from ..conf import settings
from ..retry_policy import RetryPolicy, backoff_seconds
from ..text import first_line

if TYPE_CHECKING:
    import psycopg

logger = logging.getLogger(__name__)

CHANNEL = "django_jobs_v1"
#: The ends of awaited jobs, by id (the trigger of migration 0020 sends them).
END_CHANNEL = "django_jobs_end_v1"

# How long a listener waits for its own probe before it concludes that
# notifications are not delivered (a transaction-mode pooler).
PROBE_SECONDS = 2.0
# Reconnection after a lost connection: 1 s, 2 s, 4 s, ... at most 30 s.
FIRST_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 30.0
# The listening connection's own bounds, merged under the database's OPTIONS:
# libpq's connect timeout, and TCP keepalives so a dead peer is noticed.
CONNECTION_DEFAULTS: dict[str, Any] = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
}


def psycopg_can_listen() -> bool:
    """Whether psycopg 3.2 or newer (``notifies(timeout=...)``) is installed."""
    try:
        import psycopg
    except ImportError:
        return False
    major, minor = (int(part) for part in psycopg.__version__.split(".")[:2])
    return (major, minor) >= (3, 2)


class Listener:
    """One connection of its own that LISTENs on :data:`CHANNEL`.

    :meth:`wait` returns the queue names notified within its timeout. After
    an error the connection is closed and reopened by a later :meth:`wait`,
    after a backoff; until then :meth:`wait` only sleeps. Each connection
    first sends itself a probe: if it does not come back (a pooler in
    transaction mode delivers no notifications), :attr:`delivering` turns
    False and the listener gives up for good. :attr:`opened` counts the connections
    opened: what was notified before one opened never reaches it.
    """

    def __init__(
        self,
        using: str = "default",
        *,
        probe_through: str | None = None,
        probe_seconds: float = PROBE_SECONDS,
        first_backoff: float = FIRST_BACKOFF_SECONDS,
        max_backoff: float = MAX_BACKOFF_SECONDS,
        stopping: threading.Event | None = None,
    ) -> None:
        self.using = using
        # The alias the jobs are written through, whose notifications must arrive here:
        # the probe is sent on it (by default the listening alias itself).
        self.probe_through = probe_through or using
        self.probe_seconds = probe_seconds
        self.first_backoff = first_backoff
        self.max_backoff = max_backoff
        # Set to cut short the sleeps and the probe's wait (the waker's stop).
        self.stopping = stopping or threading.Event()
        self.delivering = True
        self.failures = 0
        self.opened = 0
        self._connection: psycopg.Connection[Any] | None = None
        self._retry_at = 0.0
        self._early: set[str] = set()  # notified while the probe was awaited

    @property
    def backend_pid(self) -> int | None:
        """The server process of the listening connection, if it is open."""
        return self._connection.info.backend_pid if self._connection is not None else None

    def connection_params(self, using: str | None = None) -> dict[str, Any]:
        """The Django database's connection parameters (``using``, else the listening
        alias's), in autocommit, with our bounds."""
        params = {
            **CONNECTION_DEFAULTS,
            **connections[using or self.using].get_connection_params(),
        }
        params["autocommit"] = True
        return params

    def wait(self, timeout: float) -> set[str]:
        """The queue names notified within ``timeout`` seconds, and all arrived before.

        An empty set on timeout, and while disconnected or given up (then it
        sleeps ``timeout``). Opening a connection, with its probe, may take longer.
        """
        if self._connection is None and not self._connect():
            self.stopping.wait(timeout)
            return set()
        assert self._connection is not None  # noqa: S101 (for the type checker)
        names, self._early = self._early, set()
        try:
            names |= self._receive(self._connection, 0 if names else timeout)
        except Exception as exc:  # noqa: BLE001 (psycopg or socket: the connection is gone)
            self._close_connection()
            self._failed("lost its connection", exc)
        return names

    def close(self) -> None:
        self._close_connection()

    def _receive(self, connection: psycopg.Connection[Any], timeout: float) -> set[str]:
        # It returns at the first notification, with every other one read with it.
        batch = connection.notifies(timeout=timeout, stop_after=1)
        names = {notice.payload for notice in batch if notice.channel == CHANNEL}
        names.discard("")  # probes, this listener's or another worker's
        return names

    def _connect(self) -> bool:
        if not self.delivering or time.monotonic() < self._retry_at or self.stopping.is_set():
            return False
        import psycopg
        from psycopg import sql

        params = self.connection_params()
        connection = None
        try:
            connection = psycopg.connect(**params)
            connection.execute(sql.SQL("LISTEN {}").format(sql.Identifier(CHANNEL)))
            delivered = self._probe(connection, params)
        except Exception as exc:  # noqa: BLE001 (psycopg or socket: retried after a backoff)
            close_quietly(connection)
            self._failed("could not connect", exc)
            return False
        if not delivered:
            close_quietly(connection)
            if not self.stopping.is_set():
                self._give_up()
            return False
        self._connection = connection
        self.opened += 1
        if self.failures:
            logger.info("LISTEN connection restored", extra={"event": "listen_restored"})
        self.failures = 0
        return True

    def _probe(self, connection: psycopg.Connection[Any], params: dict[str, Any]) -> bool:
        """Notify the channel from another connection, on the alias the jobs are written
        through; True once it arrives here. (Through a pooler in transaction mode, the
        listener's own alias delivers nothing; another alias that reaches another
        database would deliver the probe of none of the jobs.)"""
        import psycopg

        if self.probe_through != self.using:
            params = self.connection_params(self.probe_through)
        with psycopg.connect(**params) as sender:
            sender.execute("SELECT pg_notify(%s, '')", [CHANNEL])
        deadline = time.monotonic() + self.probe_seconds
        while not self.stopping.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            for notice in connection.notifies(timeout=min(remaining, 0.2)):
                if notice.payload == "":
                    return True
                self._early.add(notice.payload)
        return False

    def _give_up(self) -> None:
        self.delivering = False
        logger.warning(
            "LISTEN is not delivered on database %r%s (e.g. behind a transaction-mode "
            "pooler): the worker polls every POLL_SECONDS (%ss). Set "
            "DJANGO_JOBS['LISTEN_DATABASE'] to an alias that reaches the same database "
            "without the pooler, or DJANGO_JOBS['LISTEN'] = False to skip this check.",
            self.using,
            "" if self.probe_through == self.using else f" from {self.probe_through!r}",
            settings.POLL_SECONDS,
            extra={"event": "listen_undelivered"},
        )

    def _failed(self, what: str, exc: BaseException) -> None:
        self.failures += 1
        policy = RetryPolicy(self.first_backoff, self.max_backoff, jitter=0.0)
        delay = backoff_seconds(self.failures, policy)
        self._retry_at = time.monotonic() + delay
        # One warning per outage; the retries that fail too are logged at DEBUG.
        level = logging.WARNING if self.failures == 1 else logging.DEBUG
        logger.log(
            level,
            "LISTEN connection %s (%s); polling until it reconnects, next try in %ss",
            what,
            first_line(exc),
            delay,
            extra={"event": "listen_lost", "failures": self.failures},
        )

    def _close_connection(self) -> None:
        connection, self._connection = self._connection, None
        close_quietly(connection)


def close_quietly(connection: psycopg.Connection[Any] | None) -> None:
    if connection is not None:
        try:
            connection.close()
        except Exception:  # noqa: BLE001, S110 (closing a broken connection)
            pass


# -- the end of one awaited job ----------------------------------------------------------


def listening_params(using: str) -> dict[str, Any]:
    """A listening connection's parameters: the Django alias's, in autocommit, bounded."""
    params = {**CONNECTION_DEFAULTS, **connections[using].get_connection_params()}
    params["autocommit"] = True
    return params


@contextmanager
def ends_heard(using: str, job_id: int) -> Iterator[Callable[[float], bool] | None]:
    """``heard(timeout)``: True once job ``job_id``'s end is NOTIFYed within ``timeout``
    seconds, on a connection of its own LISTENing from now on; None where it cannot
    listen (the connection failed: the caller polls)."""
    import psycopg
    from psycopg import sql

    try:
        connection = psycopg.connect(**listening_params(using))
        connection.execute(sql.SQL("LISTEN {}").format(sql.Identifier(END_CHANNEL)))
    except Exception as exc:  # noqa: BLE001 (psycopg or socket: polling will do)
        logger.info("waiting by polling: LISTEN failed (%s)", first_line(exc))
        yield None
        return
    wanted = str(job_id)

    def heard(timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            notices = connection.notifies(timeout=left, stop_after=1)
            try:
                if any(notice.payload == wanted for notice in notices):
                    return True
            finally:
                notices.close()
        return False

    try:
        yield heard
    finally:
        close_quietly(connection)


@asynccontextmanager
async def aends_heard(
    using: str, job_id: int
) -> AsyncIterator[Callable[[float], Awaitable[bool]] | None]:
    """:func:`ends_heard` on the event loop (psycopg's async connection)."""
    import psycopg
    from psycopg import sql

    params = listening_params(using)
    params.pop("cursor_factory", None)  # Django's cursor classes are sync ones
    try:
        connection = await psycopg.AsyncConnection.connect(**params)
        await connection.execute(sql.SQL("LISTEN {}").format(sql.Identifier(END_CHANNEL)))
    except Exception as exc:  # noqa: BLE001 (psycopg or socket: polling will do)
        logger.info("waiting by polling: LISTEN failed (%s)", first_line(exc))
        yield None
        return
    wanted = str(job_id)

    async def heard(timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            notices = connection.notifies(timeout=left, stop_after=1)
            try:
                async for notice in notices:
                    if notice.payload == wanted:
                        return True
            finally:
                await notices.aclose()
        return False

    try:
        yield heard
    finally:
        try:
            await connection.close()
        except Exception:  # noqa: BLE001, S110 (closing a broken connection)
            pass
