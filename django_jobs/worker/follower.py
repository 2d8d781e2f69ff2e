"""The follower: takes the workflow steps of the ends this process wrote, off the claim path.

A settle that ends jobs in a workflow (with dependencies, or in a batch) commits first
and hands their ids here (:meth:`Follower.submit`). The steps of those ends (each counted
in its batch, the batch its end completes finished, its dependents released or
cancelled: :meth:`~django_jobs.db.workflows.Workflows.ended`) are then taken on the
follower's thread, in one transaction for the ends of every settle that committed
meanwhile. A dispatcher's claim never waits for them, and a fan-out's thousands of ends
share a few transactions, with one update of their batch's row in each.

Ends that arrive in a stream (``stream_size`` or more in the ``linger_seconds`` before:
a fan-out's members) wait up to ``linger_seconds`` for more, so that one transaction takes
the steps of many; an end that comes alone (a chain's step, whose dependent waits for it)
is followed at once.

What a crash (or a stop that runs out of time) leaves untaken is marked on the ended rows;
the leader takes those steps (:func:`~django_jobs.maintenance.rescuer.follow_unfollowed`),
as it does for steps the database refused. Without a started thread
(``Worker.run_once``, tests), :meth:`submit` takes the steps at once, on the calling
thread.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Collection
from datetime import datetime

from ..db import Driver
from ..events import report_followed
from .connections import HandOff
from .deadlines import Deadlines
from .waker import Doorbells

logger = logging.getLogger(__name__)

#: The most ends one transaction takes the steps of; more wait for the next.
MAX_BATCH = 5_000
#: How long ends arriving in a stream wait for more before their steps are taken.
LINGER_SECONDS = 0.02
#: How many ends in the linger before one make a stream.
STREAM_SIZE = 8


class Follower(HandOff[tuple[list[int], datetime]]):
    thread_name = "django-jobs-follower"

    def __init__(
        self,
        driver: Driver,
        *,
        deadline: Deadlines,
        doorbells: Doorbells,
        max_batch: int = MAX_BATCH,
        linger_seconds: float = LINGER_SECONDS,
        stream_size: int = STREAM_SIZE,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.driver = driver
        self.deadline = deadline
        self.doorbells = doorbells
        self.max_batch = max_batch
        self.linger_seconds = linger_seconds
        self.stream_size = stream_size
        self.monotonic = monotonic
        self._pending: set[int] = set()
        self._now: datetime | None = None  # the latest end among those pending
        self._first_at = 0.0  # when the oldest of those pending arrived (monotonic)
        self._recent: deque[tuple[float, int]] = deque()  # (arrived, ends) within a linger
        self._streaming = False  # a stream's worth of ends came in the linger before the last

    def submit(self, ids: Collection[int], now: datetime) -> None:
        """The jobs ``ids`` ended at ``now`` (their settle has committed): take their
        steps, at once if no thread is started."""
        if not ids:
            return
        if not self.running:
            self.take_steps(sorted(ids), now)
            return
        with self._cond:
            arrived = self.monotonic()
            while self._recent and self._recent[0][0] < arrived - self.linger_seconds:
                self._recent.popleft()
            self._streaming = sum(count for _, count in self._recent) >= self.stream_size
            self._recent.append((arrived, len(ids)))
            if not self._pending:
                self._first_at = arrived
            self._pending.update(ids)
            self._now = now if self._now is None else max(self._now, now)
            self._cond.notify()

    def take_steps(self, ids: list[int], now: datetime) -> None:
        """The steps of the ends of ``ids`` in one transaction, under a deadline; then ring
        this process's dispatchers of the queues a released job is due on, and report."""
        with self.deadline(f"taking the workflow steps of {len(ids)} job(s)"):
            followed = self.driver.follow(ids, now)
        self.doorbells.ring(followed.woken)
        report_followed(followed, self.driver.using)

    def _handle(self, taken: tuple[list[int], datetime]) -> None:
        ids, now = taken
        try:
            self.take_steps(ids, now)
        except Exception:  # the leader takes the steps; the follower must go on
            logger.exception(
                "could not take the workflow steps of %s job(s); the leader takes"
                " them within its next maintenance pass",
                len(ids),
                extra={"event": "workflow_steps_deferred", "job_ids": ids},
            )

    def linger(self, at: float) -> float:
        """How much longer the ends pending at ``at`` (monotonic) wait for more: while they
        arrive in a stream, up to ``linger_seconds`` from the oldest's arrival, unless a
        transaction's worth is waiting or a stop is asked; else none."""
        if self._stopping or not self._streaming or len(self._pending) >= self.max_batch:
            return 0.0
        return max(0.0, self._first_at + self.linger_seconds - at)

    def _next(self) -> tuple[list[int], datetime] | None:
        """Wait for ends to follow (or a stop); None once stopped and none is left."""
        with self._cond:
            while not self._pending or (wait := self.linger(self.monotonic())) > 0:
                if not self._pending:
                    if self._stopping:
                        return None
                    self._cond.wait()
                else:
                    self._cond.wait(wait)
            ids = sorted(self._pending)[: self.max_batch]
            self._pending.difference_update(ids)
            now = self._now
            assert now is not None
            if not self._pending:
                self._now = None
            return ids, now
