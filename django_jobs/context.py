"""What a handler is given about the job it runs."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any, NoReturn

from .exceptions import JobCancelled, Snooze
from .progress import Progress

if TYPE_CHECKING:
    from .workflows import BatchView

#: Guards the making of a context's cancel event against its cancel (any context's: both
#: are rare, and a lock per context would cost every attempt what the event did).
_cancelling = threading.Lock()


@dataclass
class JobContext:
    """Passed to every handler as its first argument."""

    job_id: int
    name: str
    queue: str
    attempt: int
    payload: Any
    _is_cancelled: bool = field(default=False, repr=False)
    #: Made by the first :meth:`wait` only: a thread's event costs each attempt as much as
    #: the rest of its context, and most handlers never wait.
    _cancel_event: threading.Event | None = field(default=None, repr=False)
    _progress: Progress | None = field(default=None, repr=False)
    _progress_version: int = field(default=0, repr=False)
    #: Called by :meth:`cancel`, on the cancelling thread: how an event loop hears of it.
    _on_cancel: list[Callable[[], None]] = field(default_factory=list, repr=False)
    _cancelled_async: asyncio.Event | None = field(default=None, repr=False)

    @cached_property
    def dependency_results(self) -> dict[int, Any]:
        """The stored result of each job this one depends on, by id (None for one that
        stored none); empty for a job with no dependencies. Read once, when first used."""
        from .workflows import dependency_results

        return dependency_results(self.job_id)

    @cached_property
    def batch(self) -> BatchView | None:
        """The batch this job is a member (or a callback) of: its id and counts, and
        ``add()`` for a new member; None outside a batch. Read when first used."""
        from .workflows import batch_of

        return batch_of(self.job_id)

    @property
    def cancelled(self) -> bool:
        """True once the attempt has been cancelled (shutdown, lost lease, timeout)."""
        return self._is_cancelled

    def cancel(self) -> None:
        """Ask the handler to stop. Used by the worker; handlers read ``cancelled``."""
        with _cancelling:
            self._is_cancelled = True
            event = self._cancel_event
        if event is not None:
            event.set()
        for hook in list(self._on_cancel):
            try:
                hook()
            except RuntimeError:  # its event loop has closed: nothing is left to wake
                pass

    def raise_if_cancelled(self) -> None:
        """Raise :class:`JobCancelled` if the attempt has been cancelled."""
        if self._is_cancelled:
            raise JobCancelled(f"job {self.job_id} attempt {self.attempt} was cancelled")

    def snooze(self, seconds: float | timedelta) -> NoReturn:
        """End this attempt and run the job again after ``seconds`` (or a timedelta),
        without using an attempt: raises :class:`~django_jobs.exceptions.Snooze`."""
        raise Snooze(seconds)

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; return True early once cancelled."""
        with _cancelling:
            if self._is_cancelled:
                return True
            if self._cancel_event is None:
                self._cancel_event = threading.Event()
            event = self._cancel_event
        return event.wait(max(0.0, seconds))

    async def asleep(self, seconds: float) -> bool:
        """In an async handler: sleep up to ``seconds`` without holding the event loop;
        return True early once cancelled (as :meth:`wait` does on a thread)."""
        if self._is_cancelled:
            return True
        if self._cancelled_async is None:
            event = self._cancelled_async = asyncio.Event()
            loop = asyncio.get_running_loop()

            def wake() -> None:
                loop.call_soon_threadsafe(event.set)

            self._on_cancel.append(wake)
            if self._is_cancelled:  # cancelled as the hook went in
                return True
        try:
            await asyncio.wait_for(self._cancelled_async.wait(), max(0.0, seconds))
        except asyncio.TimeoutError:
            return False
        return True

    def progress(self, done: int, total: int | None = None, note: str = "") -> None:
        """Report how far the handler is: ``done`` of ``total``, with a short note.

        Cheap to call as often as you like: nothing is written here. The
        worker's heartbeat writes the latest report to the job's row, at most
        once a second per job, in its lease renewal. The admin shows it as a bar.
        """
        self._progress = Progress.made(done, total, note)
        self._progress_version += 1

    def reported_progress(self) -> tuple[int, Progress | None]:
        """The last report and its version (the worker writes newer ones only)."""
        return self._progress_version, self._progress
