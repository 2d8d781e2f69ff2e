"""The settler: writes attempts' outcomes in batches, each row still fenced.

Handler threads hand their results over and go back to work at once. The
settler's thread writes whatever has gathered in one statement (up to
``MAX_BATCH``): while one batch is being written the next one gathers, so
under load a batch carries many outcomes and costs one commit, and an idle
worker's outcome is written at once. A job stays held, its lease renewed,
until its outcome is durably written. On a stop, :meth:`Settler.stop`
flushes what is queued before the worker hands back what is still running.

Without a started thread (``Worker.run_once``, tests), :meth:`submit`
writes on the calling thread.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db import connections

from ..db import ClaimedJob
from ..outcomes import HandlerResult

if TYPE_CHECKING:
    from .inflight import Held

logger = logging.getLogger(__name__)

MAX_BATCH = 500


@dataclass(frozen=True)
class Outcome:
    """A result waiting to be written; ``held`` is its entry in the held set, if any."""

    claimed: ClaimedJob
    result: HandlerResult
    held: Held | None = None


Writer = Callable[[Sequence[Outcome]], object]


class Settler:
    def __init__(self, write: Writer, max_batch: int = MAX_BATCH) -> None:
        self.write = write
        self.max_batch = max_batch
        self._inbox: queue.SimpleQueue[Outcome | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="django-jobs-settler", daemon=True)
        self._thread.start()

    def submit(self, outcome: Outcome) -> None:
        if self.running:
            self._inbox.put(outcome)
        else:
            self.write([outcome])

    def stop(self, timeout: float) -> bool:
        """Write what is queued, then end the thread; False if it did not end in ``timeout``."""
        thread = self._thread
        if thread is None:
            return True
        self._inbox.put(None)
        thread.join(timeout)
        return not thread.is_alive()

    def _run(self) -> None:
        try:
            stopping = False
            while not stopping:
                item = self._inbox.get()
                batch: list[Outcome] = []
                while item is not None:
                    batch.append(item)
                    if len(batch) >= self.max_batch:
                        break
                    try:
                        item = self._inbox.get_nowait()
                    except queue.Empty:
                        break
                else:
                    stopping = True
                if batch:
                    self._write(batch)
        finally:
            connections.close_all()

    def _write(self, batch: list[Outcome]) -> None:
        try:
            self.write(batch)
        except Exception:  # the writer logs what it can; the settler must go on
            logger.exception(
                "could not record %s outcome(s); their leases will run out",
                len(batch),
                extra={"event": "worker_error"},
            )
