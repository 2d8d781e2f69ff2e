"""Deadlines for database calls: a call that overruns is cut off, not waited for.

A database that stops answering (packets dropped, a hung server) leaves a
client blocked in a socket read with no end: TCP notices nothing for minutes
or hours, and neither PostgreSQL's ``statement_timeout`` nor its keepalives
help when the server never sees the query. The worker cannot afford that:
the lease rule (give up one beat before the lease lapses) must run on time.

:func:`deadline` arms a process-wide watchdog thread for the duration of a
block. If the block is still running when its time is up, the watchdog cuts
the thread's connection off: it shuts the socket down, which wakes the
blocked read with an error at once. The block then raises :class:`DatabaseTimeout`, a
:class:`django.db.OperationalError`, and the broken connection is closed so
that the next call reconnects. New connections are bounded separately by
libpq's ``connect_timeout`` (:func:`apply_connect_timeout`).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import os
import queue
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from typing import Any, TypeVar

from django.db import OperationalError, connections

from ..db import driver_class, get_driver

logger = logging.getLogger(__name__)

T = TypeVar("T")


class DatabaseTimeout(OperationalError):
    """A database call ran past its deadline and was cut off."""


class Watchdog:
    """One thread that fires the cut-offs of overrunning blocks, in deadline order."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.monotonic = monotonic
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int]] = []
        self._armed: dict[int, Callable[[], None]] = {}
        self._fired: set[int] = set()
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None
        # When the watchdog wakes next by itself (monotonic): a block due later needs no
        # wake-up, so arming one costs no thread switch.
        self._wakes_at = -math.inf

    def arm(self, seconds: float, cut: Callable[[], None]) -> int:
        with self._cond:
            self._drop_disarmed()
            token = next(self._ids)
            self._armed[token] = cut
            entry = (self.monotonic() + max(0.0, seconds), token)
            heapq.heappush(self._heap, entry)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="django-jobs-watchdog", daemon=True
                )
                self._thread.start()
            if entry[0] < self._wakes_at:
                self._cond.notify()  # the watchdog sleeps until a later deadline: wake it
        return token

    def _drop_disarmed(self) -> None:
        """Pop the entries of blocks that ended in time (most calls: the heap stays small)."""
        while self._heap and self._heap[0][1] not in self._armed:
            heapq.heappop(self._heap)

    def _sleep(self, seconds: float) -> None:
        """Wait, under the lock, ``seconds`` or until an earlier deadline is armed."""
        self._wakes_at = self.monotonic() + seconds
        self._cond.wait(seconds)
        self._wakes_at = -math.inf

    def disarm(self, token: int) -> bool:
        """Stop watching ``token``; True if its cut-off already fired."""
        with self._cond:
            self._armed.pop(token, None)
            if token in self._fired:
                self._fired.discard(token)
                return True
            return False

    def _run(self) -> None:
        while True:
            with self._cond:
                self._drop_disarmed()
                if not self._heap:
                    self._sleep(60)
                    continue
                due, token = self._heap[0]
                wait = due - self.monotonic()
                if wait > 0:
                    self._sleep(wait)
                    continue
                self._wakes_at = -math.inf  # awake: anything armed now is seen before a sleep
                heapq.heappop(self._heap)
                cut = self._armed.pop(token)
                self._fired.add(token)
                # Cut under the lock: the block cannot exit (and its connection
                # be reused for something else) while it is being cut.
                try:
                    cut()
                except Exception:  # a cut-off must never kill the watchdog
                    logger.exception("could not cut off an overrunning database call")


watchdog = Watchdog()

#: The driver connections whose server sessions :func:`deadline` has bounded.
_bounded_sessions: weakref.WeakSet[Any] = weakref.WeakSet()


def cut_off(connection: Any, raw: Any, fd: int) -> None:
    """Wake a thread blocked on ``connection`` (a Django database wrapper) with an error.

    ``raw`` is the driver connection the block runs on and ``fd`` its socket,
    both read on the block's own thread when it was armed: mysqlclient refuses
    ``fileno()`` from another thread while a call runs. A block that closed or
    replaced its connection is left alone: that descriptor may be another's now.

    Only network databases are cut off. A SQLite call waits at most its busy
    timeout (the ``timeout`` option) for the lock, and the heartbeat never
    waits on it past the give-up point (:class:`OffThread`).
    """
    if connection.connection is not raw:
        return
    # A duplicate of the descriptor: shutting it down acts on the socket the
    # driver reads, and closing the duplicate leaves the driver's own open.
    with socket.socket(fileno=os.dup(fd)) as sock:
        sock.shutdown(socket.SHUT_RDWR)


@contextmanager
def deadline(seconds: float, using: str = "default", what: str = "database call") -> Iterator[None]:
    """Cut the block's database calls on ``using`` off after ``seconds``.

    The connection is opened first if need be (bounded by ``connect_timeout``,
    :func:`apply_connect_timeout`), so that its socket is known before the
    block runs. Use it outside transactions: a cut-off rolls the transaction
    back and closes the connection.

    A cut-off ends the call here, not on the server: a transaction cut off
    between two statements (the link went silent) would hold its rows locked
    there for hours, and a row lock may be waited for far past ``seconds``. So
    a new connection's session is told to give both up within ``seconds``,
    where the database can (:meth:`~django_jobs.db.base.Driver.bound_session`).
    """
    if not driver_class(using).cuts_off_calls:
        yield  # a local file: bounded by the busy timeout
        return
    connection = connections[using]
    connection.ensure_connection()
    raw = connection.connection
    fd = raw.fileno()
    token = watchdog.arm(seconds, lambda: cut_off(connection, raw, fd))
    try:
        if raw not in _bounded_sessions:
            get_driver(using).bound_session(seconds)
            _bounded_sessions.add(raw)
        yield
    except Exception as exc:
        if watchdog.disarm(token):
            connection.close()
            raise DatabaseTimeout(f"{what} ran past its {seconds:.1f}s deadline") from exc
        raise
    else:
        if watchdog.disarm(token):
            connection.close()  # cut just as it finished: the work is done, the socket is not


class Deadlines:
    """The deadlines of one worker's calls on ``using``: ``seconds`` each, unless told.

    ``deadlines(what)`` (or ``deadlines(what, seconds)``) is :func:`deadline`
    for one block.
    """

    def __init__(self, using: str, seconds: float) -> None:
        self.using = using
        self.seconds = seconds

    def __call__(self, what: str, seconds: float | None = None) -> Any:
        return deadline(seconds or self.seconds, self.using, what)


def apply_connect_timeout(using: str, seconds: float) -> None:
    """Give new PostgreSQL connections of ``using`` a ``connect_timeout``, unless one is set.

    libpq waits for a connection that a silent network never completes; this
    bounds it. Affects this process only.
    """
    if not driver_class(using).has_connect_timeout:
        return
    options = connections[using].settings_dict.setdefault("OPTIONS", {})
    options.setdefault("connect_timeout", max(2, math.ceil(seconds)))


class CallerBusy(RuntimeError):
    """The previous call on an :class:`OffThread` has not returned yet."""


class OffThread:
    """Runs calls one at a time on a daemon thread of its own, waiting a bounded time.

    The caller never waits past its ``timeout``; a call still running then is
    left to finish (or be cut off by its own :func:`deadline`), and until it
    does, further calls fail at once with :class:`CallerBusy` instead of
    piling up threads or connections. The thread keeps its connection from
    one call to the next (``keep_connections``), dropping it only when a
    call broke it; without that, its connections are closed after each call.
    """

    def __init__(self, name: str, keep_connections: bool = False) -> None:
        self.name = name
        self.keep_connections = keep_connections
        self._lock = threading.Lock()
        self._inbox: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = (
            queue.SimpleQueue()
        )
        self._pending: Future[Any] | None = None
        self._thread: threading.Thread | None = None

    def call(self, fn: Callable[[], T], timeout: float) -> T:
        """``fn()``'s result; :class:`TimeoutError` if it takes over ``timeout`` seconds."""
        with self._lock:
            if self._pending is not None and not self._pending.done():
                raise CallerBusy(f"{self.name}: the previous call has not returned")
            future: Future[T] = Future()
            self._pending = future
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            self._inbox.put((fn, future))
        try:
            return future.result(max(0.0, timeout))
        except FutureTimeout:
            raise TimeoutError(f"{self.name}: no answer within {timeout:.1f}s") from None

    def close(self) -> None:
        """Let the thread end once its current call returns (closing its connections)."""
        self._inbox.put(None)

    def _run(self) -> None:
        try:
            while (item := self._inbox.get()) is not None:
                fn, future = item
                try:
                    future.set_result(fn())
                except BaseException as exc:
                    future.set_exception(exc)
                finally:
                    self._tidy()
        finally:
            connections.close_all()

    def _tidy(self) -> None:
        if not self.keep_connections:
            connections.close_all()
            return
        for connection in connections.all(initialized_only=True):
            # Not close_if_unusable_or_obsolete(): CONN_MAX_AGE = 0 would close it every call.
            if connection.connection is not None and connection.errors_occurred:
                if connection.is_usable():
                    connection.errors_occurred = False
                else:
                    connection.close()
