"""Long-lived worker threads: their start, their database connections, and the guard of
their loops."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from django.db import DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from ..text import first_line

logger = logging.getLogger(__name__)

T = TypeVar("T")


def guarded(step: Callable[[], T], using: str) -> T | None:
    """Run one step of a loop; log a failure and carry on serving (None: it failed).

    A connection the failure left unusable is closed, so the next step reconnects.
    """
    try:
        return step()
    except DatabaseError as exc:  # an outage: one line, not a traceback each poll
        logger.warning(
            "worker step failed (%s: %s); retrying",
            type(exc).__name__,
            first_line(exc),
            extra={"event": "worker_error"},
        )
    except Exception:
        logger.exception("worker step failed; retrying", extra={"event": "worker_error"})
    connections[using].close_if_unusable_or_obsolete()
    return None


def tidy_connections() -> None:
    """Between two jobs: drop broken connections, keep healthy ones open.

    A worker thread is not a request: with ``CONN_MAX_AGE = 0`` Django's
    request cycle closes the connection after every request, which here would
    mean a new connection for every job. Healthy connections are kept; a
    positive ``CONN_MAX_AGE`` is honoured; a connection a handler broke, or
    left outside autocommit, is closed and reopened on its next use.
    """
    for connection in thread_connections():
        if connection.connection is None:
            continue
        if connection.get_autocommit() != connection.settings_dict["AUTOCOMMIT"]:
            connection.close()
            continue
        if connection.errors_occurred:
            if connection.is_usable():
                connection.errors_occurred = False
            else:
                connection.close()
                continue
        max_age = connection.settings_dict.get("CONN_MAX_AGE")
        if max_age and connection.close_at is not None and time.monotonic() >= connection.close_at:
            connection.close()


#: Each thread's connections, once it has one of every alias (:func:`thread_connections`).
_threads = threading.local()


def thread_connections() -> Sequence[BaseDatabaseWrapper]:
    """The calling thread's open-or-once-opened database connections (Django's wrappers).

    Asked between every two jobs, and Django's connection handler answers through asgiref's
    ``Local`` at some 2 µs an access: a twentieth of a no-op job's time. A thread's wrapper
    of an alias stays the same object (closing it keeps it), so once the thread has one of
    every alias the list is kept; until then each call asks again, as a handler may open
    another alias's connection at any job."""
    kept = getattr(_threads, "connections", None)
    if kept is not None:
        return kept
    found = connections.all(initialized_only=True)
    if len(found) == len(list(connections)):
        _threads.connections = found
    return found


def start_thread(name: str, target: Callable[..., object], *args: object) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, name=f"django-jobs-{name}", daemon=True)
    thread.start()
    return thread


class HandOff(Generic[T]):
    """A daemon thread that takes what other threads hand it (the settler's outcomes, the
    follower's ends), until it is stopped with nothing left: a subclass queues what it is
    given under ``_cond``, and says what to take next (:meth:`_next`) and how to handle it
    (:meth:`_handle`)."""

    thread_name = "django-jobs-hand-off"

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float) -> bool:
        """Handle what is queued, then end the thread; False if it did not end in
        ``timeout``."""
        thread = self._thread
        if thread is None:
            return True
        with self._cond:
            self._stopping = True
            self._cond.notify()
        thread.join(timeout)
        return not thread.is_alive()

    def _run(self) -> None:
        try:
            while (taken := self._next()) is not None:
                self._handle(taken)
        finally:
            connections.close_all()

    def _next(self) -> T | None:
        """Wait for the next thing to handle; None once stopped with nothing left."""
        raise NotImplementedError

    def _handle(self, taken: T) -> None:
        raise NotImplementedError
