"""What a handler is given about the job it runs."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from .exceptions import JobCancelled


@dataclass
class JobContext:
    """Passed to every handler as its first argument."""

    job_id: int
    name: str
    queue: str
    attempt: int
    payload: Any
    _cancel_event: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def cancelled(self) -> bool:
        """True once the attempt has been cancelled (shutdown, lost lease, timeout)."""
        return self._cancel_event.is_set()

    def cancel(self) -> None:
        """Ask the handler to stop. Used by the worker; handlers read ``cancelled``."""
        self._cancel_event.set()

    def raise_if_cancelled(self) -> None:
        """Raise :class:`JobCancelled` if the attempt has been cancelled."""
        if self._cancel_event.is_set():
            raise JobCancelled(f"job {self.job_id} attempt {self.attempt} was cancelled")

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; return True early once cancelled."""
        return self._cancel_event.wait(max(0.0, seconds))
