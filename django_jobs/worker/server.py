"""Serving with threads: :func:`serve`, given a worker's parts.

- One dispatcher per queue claims its jobs and hands them to its handler
  threads, which run them and hand their results to the settler
  (:mod:`.dispatcher`, :mod:`.settler`).
- The follower's thread takes the workflow steps of the ends written, off the
  claim path (:mod:`.follower`).
- The heartbeat thread renews leases and does nothing else, so that no other
  database call can delay its give-up check.
- On PostgreSQL the waker listens for new jobs (:mod:`.waker`) and wakes the
  queue's dispatcher (:meth:`Server.wake`).
- The main thread keeps the worker's registration fresh, takes part in the
  leader's election and, while this process leads (:mod:`.leader`),
  runs the maintenance pass and the recurring scheduler; it logs the summary
  (:mod:`.summary`); in burst mode it checks whether the queues are drained
  (:mod:`.burst`).

On stop: hand back the jobs waiting for a thread, say what it waits for,
cancel running handlers, wait the grace period, flush the settler, hand
back what is still running in one write, then take the workflow steps still pending.
A second signal (the worker's ``force_event``) ends the wait: the running
jobs are handed back at once, in the same one write. Either way the
worker's registration is removed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from django.db import connections

from ..conf import settings
from ..display import format_span
from ..registry import async_names, queue_limits, sync_names
from .ahead import Pace, hold_seconds
from .burst import BurstCheck, job_list
from .connections import guarded, start_thread
from .core import Parts, Worker
from .deadlines import apply_connect_timeout
from .dispatcher import Dispatcher, QueueState, claims_overlap
from .eventloop import AsyncDispatcher, EventLoop
from .leader.chores import Chores
from .summary import Summary
from .waker import Waker

logger = logging.getLogger(__name__)

T = TypeVar("T")


def serve(worker: Worker, stop_event: threading.Event) -> None:
    """Serve ``worker``'s queues until ``stop_event`` is set, then wait for running handlers.

    Setting the worker's ``force_event`` as well stops the wait for running
    handlers: their jobs are handed back at once.
    """
    Server(worker.parts()).run(stop_event)


def largest_claim(dispatchers: list[Dispatcher]) -> int:
    """The most jobs a process's claims of one of ``dispatchers``' queues take together: a
    lane's largest claim (the room its claims under way reserve, however many:
    :mod:`.dispatcher`), and where a queue's lanes claim at once
    (``QueueState.overlapping``), its lanes' together; where they take turns
    (``QueueState.claiming``), the largest lane's."""
    by_queue: dict[str, list[int]] = {}
    for dispatcher in dispatchers:
        by_queue.setdefault(dispatcher.state.name, []).append(dispatcher.largest_claim)
    overlapping = {d.state.name for d in dispatchers if d.state.overlapping}
    return max(
        (sum(lanes) if queue in overlapping else max(lanes) for queue, lanes in by_queue.items()),
        default=0,
    )


class Server:
    def __init__(self, parts: Parts) -> None:
        self.parts = parts
        self.hold = hold_seconds(parts.inflight.beat_seconds)
        ahead = float(settings.CLAIM_AHEAD_SECONDS)
        # Async handlers known: each queue gets an async lane, run on one event loop.
        self.loop = EventLoop(float(settings.ASYNC_BLOCKED_SECONDS)) if async_names() else None
        lanes = {name: self.dispatcher(name, count, ahead) for name, count in parts.queues.items()}
        self.dispatchers: list[Dispatcher] = list(lanes.values())
        if self.loop is not None:
            self.dispatchers += [
                self.async_dispatcher(lane.state, self.loop) for lane in lanes.values()
            ]
        # What its row tells other processes claiming under a global limit: the most its
        # claims of one limited queue take together. A queue without limits is claimed
        # apart from them; its lanes, however large, would leave a small limit no room.
        parts.maintainer.largest_claim = largest_claim(
            [d for d in self.dispatchers if d.state.limited]
        )
        self.summary = Summary(parts.writer, float(settings.SUMMARY_SECONDS), time.monotonic())
        self.burst = BurstCheck(parts)

    def dispatcher(self, name: str, threads: int, ahead: float) -> Dispatcher:
        """Queue ``name``'s dispatcher: rung by its doorbell, claiming under its limits."""
        p = self.parts
        limits = queue_limits(name)
        keyed = limits is not None and limits.keyed
        state = QueueState(
            name,
            threads,
            Pace(ahead),
            woken=p.doorbells[name],
            limited=limits is not None,
            names=None if self.loop is None else sync_names,
            overlapping=claims_overlap(p.claimer.driver.claims_overlap, threads, keyed),
        )
        return Dispatcher(state, hold=self.hold, **self.dispatcher_parts())

    def async_dispatcher(self, sync: QueueState, loop: EventLoop) -> AsyncDispatcher:
        """The async lane of ``sync``'s queue: up to its ``async_concurrency`` jobs on the
        loop, claimed one claim at a time with the sync lane's."""
        name = sync.name
        state = QueueState(
            name,
            settings.queue_async_concurrency(name),
            Pace(0.0),  # never claims ahead: a task starts as soon as it is claimed
            woken=self.parts.doorbells.add_lane(name),
            limited=queue_limits(name) is not None,
            names=async_names,
            claiming=sync.claiming,
            overlapping=sync.overlapping,
        )
        return AsyncDispatcher(state, loop=loop, hold=self.hold, **self.dispatcher_parts())

    def dispatcher_parts(self) -> dict[str, Any]:
        p = self.parts
        return {
            "claimer": p.claimer,
            "executor": p.executor,
            "writer": p.writer,
            "clock": p.clock,
            "using": p.using,
        }

    def guarded(self, step: Callable[[], T]) -> T | None:
        return guarded(step, self.parts.using)

    def run(self, stop_event: threading.Event) -> None:
        p = self.parts
        apply_connect_timeout(p.using, p.call_timeout_seconds)
        lanes = {
            d.state.name: d.state.threads
            for d in self.dispatchers
            if isinstance(d, AsyncDispatcher)
        }
        logger.info(
            "worker %s serving queues %s%s",
            p.owner,
            p.queues,
            f"; async handlers on its event loop, at once per queue: {lanes}" if lanes else "",
            extra={"event": "worker_started", "owner": p.owner},
        )
        # The first reading of the clock measures the database's.
        self.guarded(lambda: p.maintainer.register(p.clock.now()))
        heartbeat_stop = threading.Event()
        heartbeat = start_thread("heartbeat", self.keep_leases, heartbeat_stop)
        p.follower.start()
        p.settler.start()
        if self.loop is not None:
            self.loop.start()
        threads = self.start_threads(stop_event)
        waker = Waker(p.using, p.queues, wake=self.wake)
        waker.start()  # False where LISTEN is off or unavailable: the dispatchers poll
        try:
            self.main_loop(stop_event)
        finally:
            asked = stop_event.is_set()  # else: drained in burst mode, or the loop failed
            stop_event.set()
            for dispatcher in self.dispatchers:
                dispatcher.rouse()
            waker.stop()
            self.shut_down(threads, asked)
            if self.loop is not None:
                self.loop.stop(p.call_timeout_seconds)
            heartbeat_stop.set()
            heartbeat.join(5)
            p.inflight.close()
            self.summary.flush(time.monotonic())
            self.guarded(self.leave)
            connections.close_all()
            logger.info("worker %s stopped", p.owner, extra={"event": "worker_stopped"})

    def leave(self) -> None:
        """The stop's last writes: the leader lease handed over, this worker's row removed
        (a stopped worker is not listed in the admin or by `jobs status`, after a second
        signal too). Once one fails, the other is not tried: a database that does not
        answer would make the stop wait out a second connection's timeout, and what is
        left is done without it (the lease runs out, the sweep removes the row)."""
        self.parts.leadership.resign()
        self.parts.maintainer.unregister()

    def wake(self, queue: str) -> None:
        """The waker's callback: new jobs on ``queue``, for each of its dispatchers."""
        self.parts.doorbells.ring([queue])

    def start_threads(self, stop_event: threading.Event) -> list[threading.Thread]:
        threads = []
        for dispatcher in self.dispatchers:
            threads += dispatcher.start(stop_event)
        return threads

    # -- the main thread ---------------------------------------------------

    def main_loop(self, stop_event: threading.Event) -> None:
        """The election, maintenance, registration and schedules, each when it falls due
        (:class:`~.leader.chores.Chores`); the summary; in burst mode, the drained check."""
        p = self.parts
        chores = Chores(
            p.maintainer, p.leadership, p.clock, registration_seconds=p.inflight.beat_seconds
        )
        poll = float(settings.POLL_SECONDS)
        while not stop_event.is_set():
            if not self.run_steps(chores.due(time.monotonic()), stop_event):
                return
            self.summary.tick(time.monotonic())
            if p.burst and self.guarded(lambda: self.burst.drained(self.is_busy())):
                self.guarded(self.burst.say_drained)
                return
            stop_event.wait(chores.wait(poll))

    def run_steps(self, steps: list[Callable[[], object]], stop_event: threading.Event) -> bool:
        """Run the main loop's steps in turn, each guarded; False (and the rest skipped)
        once a stop is asked: each step may wait out its deadline on a database that
        does not answer, and a stop must not wait for every one of them."""
        for step in steps:
            if stop_event.is_set():
                return False
            self.guarded(step)
        return not stop_event.is_set()

    def is_busy(self) -> bool:
        """A handler of this worker holds a job, or one waits for a handler."""
        return any(dispatcher.is_busy() for dispatcher in self.dispatchers)

    def shut_down(self, threads: list[threading.Thread], asked: bool = True) -> None:
        """Say what the stop waits for (``asked``: a stop was asked for), cancel running
        handlers, wait up to the grace period (a second signal ends the wait), flush the
        settler, hand back what is still running."""
        p = self.parts
        grace = float(settings.SHUTDOWN_GRACE_SECONDS)
        if asked:
            say_stopping(p.inflight.running_ids(), grace)
        p.inflight.cancel_all()
        all_ended = self.join(threads, time.monotonic() + grace)
        forced = p.force_event.is_set()
        if forced:  # the hand-back first: that is what the second signal promises
            self.hand_back("second stop signal")
        wait = p.call_timeout_seconds if forced else grace + p.call_timeout_seconds
        if not p.settler.stop(wait):
            logger.warning(
                "outcomes still being written at shutdown; their leases will run out",
                extra={"event": "worker_error"},
            )
        if not all_ended and not forced:
            self.hand_back(f"grace period of {format_span(timedelta(seconds=grace))} over")
        if not p.follower.stop(p.call_timeout_seconds):
            logger.warning(
                "workflow steps still being taken at shutdown; the leader takes what is left",
                extra={"event": "worker_error"},
            )

    def hand_back(self, why: str) -> None:
        """Hand back every job still running, in one write, and say which went back.

        Their attempts end (a late result is dropped); if the write fails, their
        leases run out as after a crash.
        """
        p = self.parts
        now = p.clock.now()
        pairs = p.inflight.end_running()
        if not pairs:
            if p.force_event.is_set():
                logger.info("%s: no job left to hand back", why, extra={"event": "jobs_released"})
            return
        try:
            handed_back = p.writer.hand_back(pairs, now)
        except Exception:
            logger.exception(
                "could not hand back %s running job(s); their leases will run out",
                len(pairs),
                extra={"event": "worker_error"},
            )
            handed_back = set()
        kept = [job_id for job_id, _ in pairs if job_id not in handed_back]
        parts = []
        if handed_back:
            parts.append(
                f"handed {len(handed_back)} job(s) back: {job_list(sorted(handed_back))}; "
                "another worker can take them now"
            )
        if kept:
            parts.append(f"not handed back: {job_list(kept)} (their leases run out)")
        logger.warning(
            "%s: %s",
            why,
            "; ".join(parts),
            extra={"event": "jobs_released", "job_ids": sorted(handed_back), "kept": kept},
        )

    def join(self, threads: list[threading.Thread], deadline: float) -> bool:
        """Wait for ``threads`` until ``deadline`` (monotonic); True if all ended, False
        at the deadline or at once on a second signal (``force_event``)."""
        for thread in threads:
            while thread.is_alive():
                if self.parts.force_event.is_set():
                    return False
                if time.monotonic() >= deadline:
                    return False
                thread.join(0.05)
        return True

    # -- the other threads -------------------------------------------------

    def keep_leases(self, stop: threading.Event) -> None:
        """The heartbeat thread: renew leases, give up those it cannot, time out handlers.

        It makes no database call of its own: renewals run on their own
        thread and are waited for only until the give-up point, and the
        timed-out handlers' outcomes are written on a thread of their own.
        """
        p = self.parts
        tick = min(float(settings.POLL_SECONDS), p.inflight.beat_seconds / 4)
        while not stop.is_set():
            timed_out = self.guarded(lambda: p.inflight.beat(p.clock.now()))
            p.writer.write_apart(timed_out or [])
            stop.wait(tick)


def say_stopping(running: list[int], grace: float) -> None:
    """The one line of the first stop signal: what the stop waits for, and for how long."""
    extra = {"event": "worker_stopping", "job_ids": running, "grace_seconds": grace}
    if not running:
        logger.info("stop requested; no job is running, stopping now", extra=extra)
    elif grace <= 0:
        logger.info(
            "stop requested; handing %s running job(s) back at once "
            "(SHUTDOWN_GRACE_SECONDS is 0): %s",
            len(running),
            job_list(running),
            extra=extra,
        )
    else:
        logger.info(
            "stop requested; waiting up to %s (SHUTDOWN_GRACE_SECONDS) for %s running "
            "job(s): %s; a second SIGTERM or SIGINT hands them back and stops at once",
            format_span(timedelta(seconds=grace)),
            len(running),
            job_list(running),
            extra=extra,
        )
