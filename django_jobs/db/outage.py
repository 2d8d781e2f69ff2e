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
    connection each time so that the next try reconnects. Only errors that
    can pass (:data:`PASSING`) are retried; the last one is raised when time
    is up.
    """
    deadline = monotonic() + give_up_after
    policy = RetryPolicy(base_seconds=first_wait, max_seconds=max_wait, jitter=0.0)
    tries = 0
    while True:
        tries += 1
        try:
            return write()
        except PASSING as exc:
            connections[using].close_if_unusable_or_obsolete()
            left = deadline - monotonic()
            if left <= 0:
                raise
            wait = backoff_seconds(tries, policy)
            logger.warning(
                "database write failed (%s: %s); retrying in %.1fs",
                type(exc).__name__,
                exc,
                min(wait, left),
                extra={"event": "write_retry"},
            )
            sleep(min(wait, left))
