"""The settler: writes attempts' outcomes in batches, each row still fenced.

Handler threads hand their results over and go back to work at once. A
job stays held, its lease renewed, until its outcome is durably written.
Outcomes are written one of two ways, whichever comes first:

- a dispatcher about to claim takes what is waiting (:meth:`Settler.take`)
  and settles it in the claim's own statement: under load, one round trip
  and one commit carry a batch of outcomes and the next batch of jobs;
- otherwise the settler's thread writes what has waited ``linger_seconds``
  (outcomes a failed claim gave back), in one statement; at once when the queue's
  dispatcher sleeps with nothing to claim (no claim will carry it: a chain's step, whose
  end its dependent waits for).

On a stop, :meth:`Settler.stop` writes what is queued before the worker
hands back what is still running. Without a started thread
(``Worker.run_once``, tests), :meth:`submit` writes on the calling thread and
returns the outcome as written.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence

from ..db.records import Settlement
from .connections import HandOff
from .inflight import Outcome

logger = logging.getLogger(__name__)

MAX_BATCH = 500
# How long an outcome waits for a claim to carry it before the settler writes it itself.
LINGER_SECONDS = 0.005


#: Writes outcomes in one batch: each as written, None where its lease was lost.
Writer = Callable[[Sequence[Outcome]], Sequence[Settlement | None]]


class Settler(HandOff[list[Outcome]]):
    thread_name = "django-jobs-settler"

    def __init__(
        self,
        write: Writer,
        max_batch: int = MAX_BATCH,
        linger_seconds: float = LINGER_SECONDS,
        dry: Callable[[str], bool] = lambda queue: False,
    ) -> None:
        super().__init__()
        self.write = write
        self.max_batch = max_batch
        self.linger_seconds = linger_seconds
        # Whether a queue's dispatcher sleeps with nothing to claim (Doorbells.is_dry).
        self.dry = dry
        self._pending: deque[tuple[float, Outcome]] = deque()

    def submit(self, outcome: Outcome) -> Settlement | None:
        """Queue ``outcome`` for the next batch (None); with no thread, write it now and
        return it as written (None if its lease was lost)."""
        if not self.running:
            [written] = self.write([outcome])
            return written
        with self._cond:
            self._pending.append((time.monotonic(), outcome))
            if len(self._pending) == 1 or self.dry(outcome.claimed.queue):
                self._cond.notify()
        return None

    def take(self, limit: int | None = None) -> list[Outcome]:
        """Take up to ``limit`` waiting outcomes, for a claim to settle in its statement."""
        limit = self.max_batch if limit is None else limit
        with self._cond:
            taken: list[Outcome] = []
            while self._pending and len(taken) < limit:
                taken.append(self._pending.popleft()[1])
            return taken

    def give_back(self, outcomes: Sequence[Outcome]) -> None:
        """Outcomes a claim could not write: the settler's thread writes them at once."""
        if not self.running:
            self.write(outcomes)
            return
        with self._cond:
            self._pending.extendleft((0.0, outcome) for outcome in reversed(outcomes))
            self._cond.notify()

    def _next(self) -> list[Outcome] | None:
        """Wait until the oldest outcome has lingered (or a stop); None once stopped and empty."""
        with self._cond:
            while True:
                if self._pending:
                    age = time.monotonic() - self._pending[0][0]
                    if (
                        self._stopping
                        or age >= self.linger_seconds
                        or any(self.dry(o.claimed.queue) for _, o in self._pending)
                    ):
                        batch: list[Outcome] = []
                        while self._pending and len(batch) < self.max_batch:
                            batch.append(self._pending.popleft()[1])
                        return batch
                    self._cond.wait(self.linger_seconds - age)
                elif self._stopping:
                    return None
                else:
                    self._cond.wait()

    def _handle(self, batch: list[Outcome]) -> None:
        try:
            self.write(batch)
        except Exception:  # the writer logs what it can; the settler must go on
            logger.exception(
                "could not record %s outcome(s); their leases will run out",
                len(batch),
                extra={"event": "worker_error"},
            )
