"""Async handlers: the worker's event loop, and each queue's async lane that feeds it.

- :class:`EventLoop` runs one asyncio loop on a thread of its own. Each
  async job is a task on it; nothing else of the worker runs there (the
  heartbeat, the claims and the outcome writes keep their own threads), so a
  coroutine that blocks the loop delays the other async jobs, never a lease.
  A watchdog thread says which job holds the loop once it has not turned for
  ``ASYNC_BLOCKED_SECONDS``.
- :class:`AsyncDispatcher` is a queue's second dispatcher: it claims only the
  names whose handlers are coroutine functions, as many as the queue's
  ``async_concurrency`` has room for, and starts each as a task. The job is
  held (its lease kept) and announced on the dispatcher's thread
  (:meth:`~.execution.Executor.begin`), where a signal's receivers may use the
  ORM; the task awaits the handler and hands its outcome to the settler.

A job's task is cancelled (:class:`Launch`) when its attempt ends on the
heartbeat's side (a timeout, a lease given up) or ``cancel_job()`` asks; a
stop only sets ``ctx.cancelled`` and gives the running tasks the grace
period, after which the server hands their jobs back, which cancels them.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

from ..db import ClaimedJob
from ..events import report_loop_blocked
from .connections import start_thread
from .dispatcher import Dispatcher, QueueState
from .inflight import Outcome

#: The most jobs one claim of an async lane takes, however much room it has.
ASYNC_CLAIM_BATCH = 200


class Launch:
    """One job's task on the loop, and how any thread cancels it, before it exists too."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.task: asyncio.Task[Any] | None = None
        self.cancelled = False  # on the loop's thread only

    def interrupt(self) -> None:
        """Cancel the task (from any thread); one not created yet starts cancelled."""
        try:
            self.loop.call_soon_threadsafe(self._cancel)
        except RuntimeError:  # the loop has closed: the task is gone with it
            pass

    def _cancel(self) -> None:
        self.cancelled = True
        if self.task is not None:
            self.task.cancel()


class EventLoop:
    """One asyncio event loop on a daemon thread, and a watchdog of it; the loop is made
    by :meth:`start`."""

    loop: asyncio.AbstractEventLoop

    def __init__(
        self, blocked_seconds: float, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self.blocked_seconds = blocked_seconds
        self.monotonic = monotonic
        self.turned = monotonic()  # when the loop last ran its own turn callback
        self.running: dict[asyncio.Task[Any], ClaimedJob] = {}  # written on the loop only
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._threads = [
            start_thread("loop", self._run),
            start_thread("loop-watch", self._watch),
        ]

    def launch(
        self,
        launch: Launch,
        coroutine: Coroutine[Any, Any, object],
        claimed: ClaimedJob,
        done: Callable[[], None],
    ) -> None:
        """Run ``coroutine`` as ``claimed``'s task; ``done()`` on the loop once it ends."""
        self.loop.call_soon_threadsafe(self._create, launch, coroutine, claimed, done)

    def _create(
        self,
        launch: Launch,
        coroutine: Coroutine[Any, Any, object],
        claimed: ClaimedJob,
        done: Callable[[], None],
    ) -> None:
        task = self.loop.create_task(coroutine, name=f"django-jobs-job-{claimed.id}")
        launch.task = task
        if launch.cancelled:  # interrupted before it was created
            task.cancel()
        self.running[task] = claimed

        def ended(task: asyncio.Task[Any]) -> None:
            self.running.pop(task, None)
            done()

        task.add_done_callback(ended)

    def stop(self, timeout: float) -> None:
        """Cancel what still runs, stop the loop and wait up to ``timeout`` for its thread."""
        self._stopping.set()
        if not self._threads:  # never started
            return
        try:
            self.loop.call_soon_threadsafe(self._cancel_all)
        except RuntimeError:  # already closed
            return
        for thread in self._threads:
            thread.join(timeout)

    def _cancel_all(self) -> None:
        for task in list(self.running):
            task.cancel()
        self.loop.call_later(0.05, self.loop.stop)

    # -- the loop's thread, and its watchdog -------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._turn)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    def _turn(self) -> None:
        self.turned = self.monotonic()
        if not self._stopping.is_set():
            self.loop.call_later(self.blocked_seconds / 4, self._turn)

    def _watch(self) -> None:
        """Say once per stall which job holds the loop, when it has not turned in time."""
        said = None
        while not self._stopping.wait(self.blocked_seconds / 4):
            turned = self.turned
            stalled = self.monotonic() - turned
            if stalled < self.blocked_seconds or said == turned:
                continue
            said = turned
            self.say_blocked(stalled)

    def say_blocked(self, seconds: float) -> None:
        report_loop_blocked(self.holding(), seconds, self.blocked_seconds)

    def holding(self) -> ClaimedJob | None:
        """The job whose task runs on the loop now, if one does (read from another thread:
        the loop's current task, which asyncio keeps per loop)."""
        try:
            task = asyncio.current_task(self.loop)
        except RuntimeError:
            return None
        return None if task is None else self.running.get(task)


class AsyncDispatcher(Dispatcher):
    """A queue's async lane: claims its async handlers' jobs, runs them on the loop."""

    claims_beside = False  # it never claims ahead: a task starts as soon as it is claimed

    def __init__(self, state: QueueState, *, loop: EventLoop, **parts: Any) -> None:
        super().__init__(state, **parts)
        self.loop = loop

    def start(self, stop_event: threading.Event) -> list[threading.Thread]:
        """Only the dispatcher's thread: the loop runs the jobs."""
        return [start_thread(f"claim-async-{self.state.name}", self.dispatch, stop_event)]

    @property
    def largest_claim(self) -> int:
        """Its room, at most :data:`ASYNC_CLAIM_BATCH`: it never claims ahead."""
        return min(self.state.threads, ASYNC_CLAIM_BATCH)

    def claim_room(self, room: int) -> int:
        return min(room, ASYNC_CLAIM_BATCH)

    def hand_over(self, jobs: list[ClaimedJob]) -> None:
        """Announce each job (held since the claim), and start it as a task."""
        for claimed in jobs:
            launch = Launch(self.loop.loop)
            started = self.executor.begin(claimed, launch.interrupt)
            if isinstance(started, Outcome):  # it could not start: its failure is written
                self.executor.settler.submit(started)
                self.done()
                continue
            self.loop.launch(launch, self.executor.arun(started), claimed, self.done)

    def done(self) -> None:
        """A job's task ended (on the loop): its slot is free."""
        state = self.state
        with state.changed:
            state.busy -= 1
            state.changed.notify_all()
        if state.limited:  # its limit's slot is free once the outcome is written: claim
            state.wake()

    def wait_for_running(self) -> None:
        """At a stop: wait until the running tasks end (by themselves within the grace
        period, or cancelled as the server hands their jobs back)."""
        state = self.state
        with state.changed:
            while state.busy:
                state.changed.wait(0.1)
