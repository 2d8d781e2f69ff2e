"""Ride out a brief database outage: retry a write with capped backoff."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from django.db import InterfaceError, OperationalError, connections

from ..retry_policy import RetryPolicy, backoff_seconds

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Errors that a reconnect or a moment's wait can clear. Any other database
# error (DataError, IntegrityError, ProgrammingError ...) fails the same way
# on every try, so it is raised at once.
PASSING = (OperationalError, InterfaceError)


def with_backoff(
    write: Callable[[], T],
    *,
    give_up_after: float,
    using: str = "default",
    first_wait: float = 1.0,
    max_wait: float = 30.0,
    sleep: Callable[[float], object] = time.sleep,
    monotonic: Callable[[], float] = time.monotonic,
) -> T:
    """Call ``write`` until it succeeds or ``give_up_after`` seconds have passed.

    Waits 1 s, 2 s, 4 s ... up to 30 s between tries, closing the broken
    connection each time so that the next try reconnects; a first failure
    that closed a dropped connection is tried again at once, on a new one. Only errors that
    can pass (:data:`PASSING`) are retried; the last one is raised when time
    is up.
    """
    deadline = monotonic() + give_up_after
    policy = RetryPolicy(base_seconds=first_wait, max_seconds=max_wait, jitter=0.0)
    waits = 0
    reconnected = False
    while True:
        try:
            return write()
        except PASSING as exc:
            connection = connections[using]
            was_open = connection.connection is not None
            connection.close_if_unusable_or_obsolete()
            left = deadline - monotonic()
            if left <= 0:
                raise
            if not reconnected and was_open and connection.connection is None:
                # A connection the server dropped (a restart, pg_terminate_backend):
                # closed now, so the next try reconnects; make it at once.
                logger.info(
                    "database write failed on a dropped connection (%s); retrying on a new one",
                    exc,
                    extra={"event": "write_retry"},
                )
                reconnected = True
                continue
            waits += 1
            wait = backoff_seconds(waits, policy)
            logger.warning(
                "database write failed (%s: %s); retrying in %.1fs",
                type(exc).__name__,
                exc,
                min(wait, left),
                extra={"event": "write_retry"},
            )
            sleep(min(wait, left))
