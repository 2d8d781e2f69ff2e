"""Waking a queue's dispatcher before its poll.

:class:`Doorbells` are one event per queue this process serves, which its
dispatcher sleeps on. The waker rings them when a job is enqueued (PostgreSQL's
LISTEN, through a :class:`~django_jobs.db.notify.Listener` on a connection of its
own); the outcome writer rings them when an outcome it wrote freed a limited
queue's slot or left a job due again, which no database wake-up tells this
process without LISTEN. A ring is only an early look: claims, leases and
delivery are the same without it, and the dispatchers still poll.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from ..conf import settings
from ..db import get_driver
from ..db.notify import Listener, psycopg_can_listen

logger = logging.getLogger(__name__)

# How long one wait of the waker thread lasts: its loop ends this soon after stop().
WAKER_WAIT_SECONDS = 0.5


class Doorbell(threading.Event):
    """A queue's doorbell: set when its dispatcher should claim at once; ``dry`` while the
    dispatcher sleeps on it, its last claim having found fewer jobs than it had room for."""

    dry = False


class Doorbells:
    """One :class:`Doorbell` per served queue, and one more for its async lane if it has
    one (:meth:`add_lane`): a ring wakes both."""

    def __init__(self, queues: Iterable[str]) -> None:
        self.events = {queue: [Doorbell()] for queue in queues}

    def __getitem__(self, queue: str) -> Doorbell:
        return self.events[queue][0]

    def add_lane(self, queue: str) -> Doorbell:
        """A doorbell of its own for another dispatcher of ``queue``, rung with the first."""
        bell = Doorbell()
        self.events[queue] = [*self.events[queue], bell]
        return bell

    def is_dry(self, queue: str) -> bool:
        """Queue ``queue``'s dispatchers sleep with nothing to claim: no claim of it will
        carry an outcome before a wake-up or its poll."""
        bells = self.events.get(queue)
        return bells is not None and all(bell.dry for bell in bells)

    def ring(self, queues: Iterable[str]) -> None:
        """Wake the dispatchers of ``queues`` that this process runs (others: nothing)."""
        for queue in queues:
            for bell in self.events.get(queue, ()):
                bell.set()


class Waker:
    """A daemon thread that calls ``wake(queue)`` when a job is enqueued on a served queue,
    and for every served queue each time its connection opens (a job enqueued while it
    had none sent a notification that nothing heard).

    ``start()`` does nothing (and returns False) where LISTEN is unavailable
    or turned off; the thread ends by itself when its listener finds that
    notifications are not delivered. Either way the dispatchers poll.
    """

    def __init__(
        self,
        using: str,
        queues: Iterable[str],
        wake: Callable[[str], object],
        *,
        listener: Listener | None = None,
        wait_seconds: float = WAKER_WAIT_SECONDS,
    ) -> None:
        self.using = using
        self.queues = frozenset(queues)
        self.wake = wake
        # LISTEN_DATABASE: another alias of the same database (not through the pooler).
        listening = settings.LISTEN_DATABASE or using
        self.listener = listener or Listener(listening, probe_through=using)
        self.wait_seconds = wait_seconds
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        """Start listening; False (and no thread) where LISTEN is not used."""
        if not get_driver(self.using).listen:
            return False
        if not psycopg_can_listen():
            logger.info(
                "LISTEN needs psycopg 3.2 or newer: the worker polls every POLL_SECONDS",
                extra={"event": "listen_unavailable"},
            )
            return False
        self._thread = threading.Thread(target=self._run, name="django-jobs-waker", daemon=True)
        self._thread.start()
        return True

    def stop(self, timeout: float = 2.0) -> None:
        self.listener.stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        listener = self.listener
        opened = 0
        try:
            while not listener.stopping.is_set() and listener.delivering:
                names = listener.wait(self.wait_seconds)
                if listener.opened != opened:
                    # A connection opened (at start, or back after a loss): what was
                    # notified before it never arrives, so every queue looks once.
                    opened = listener.opened
                    names = set(self.queues)
                for queue in sorted(names & self.queues):
                    self._wake(queue)
        finally:
            listener.close()

    def _wake(self, queue: str) -> None:
        try:
            self.wake(queue)
        except Exception:
            logger.exception("waking queue %r failed", queue, extra={"event": "wake_failed"})
