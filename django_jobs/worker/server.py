"""Serving with threads: :func:`serve`, given a worker's parts.

- One dispatcher thread per queue claims as many due jobs as it has idle
  handler threads, in one statement, and hands them over. When some of its
  threads are still busy it gathers the ones that free up for a moment
  (``GATHER_SECONDS``), so that claims are not one job at a time; it never
  holds more jobs than it has threads. It sleeps until a thread frees up,
  the waker says its queue has new jobs, or the poll interval passes.
- Handler threads run the jobs and hand their results to the settler, which
  writes them in batches (:mod:`.settler`).
- The heartbeat thread renews leases and does nothing else, so that no other
  database call can delay its give-up check.
- On PostgreSQL the waker listens for new jobs (:mod:`.waker`).
- The main thread runs the maintenance pass and the recurring scheduler,
  keeps the worker's registration fresh and logs the summary
  (:mod:`.summary`); in burst mode it checks whether the queues are drained
  (:mod:`.burst`).

On stop: say what it waits for, cancel running handlers, wait the grace
period, flush the settler, hand back what is still running in one write.
A second signal (the worker's ``force_event``) ends the wait: the running
jobs are handed back at once, in the same one write. Either way the
worker's registration is removed.
"""

from __future__ import annotations

import logging
import queue as queue_module
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from typing import TypeVar

from django.db import connections

from ..conf import settings
from ..db import ClaimedJob
from ..display import format_span
from .burst import BurstCheck, job_list
from .connections import guarded, tidy_connections
from .core import Parts, Worker
from .deadlines import apply_connect_timeout
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


# How long a dispatcher waits for more of its busy threads to free up before it claims.
GATHER_SECONDS = 0.002


@dataclass
class QueueState:
    """One queue's handler threads and how many of them are busy."""

    name: str
    threads: int
    busy: int = 0
    inbox: queue_module.SimpleQueue[ClaimedJob | None] = field(
        default_factory=queue_module.SimpleQueue
    )
    changed: threading.Condition = field(default_factory=threading.Condition)
    woken: threading.Event = field(default_factory=threading.Event)  # new jobs, says the waker

    def wake(self) -> None:
        self.woken.set()


class Server:
    def __init__(self, parts: Parts) -> None:
        self.parts = parts
        self.states = {name: QueueState(name, count) for name, count in parts.queues.items()}
        self.summary = Summary(parts.writer, float(settings.SUMMARY_SECONDS), time.monotonic())
        self.burst = BurstCheck(parts)

    def guarded(self, step: Callable[[], T]) -> T | None:
        return guarded(step, self.parts.using)

    def run(self, stop_event: threading.Event) -> None:
        p = self.parts
        apply_connect_timeout(p.using, p.call_timeout_seconds)
        logger.info(
            "worker %s serving queues %s",
            p.owner,
            p.queues,
            extra={"event": "worker_started", "owner": p.owner},
        )
        # The first reading of the clock measures the database's.
        self.guarded(lambda: p.maintainer.register(p.clock.now()))
        heartbeat_stop = threading.Event()
        heartbeat = start_thread("heartbeat", self.keep_leases, heartbeat_stop)
        p.settler.start()
        threads = self.start_threads(stop_event)
        waker = Waker(p.using, self.states, wake=self.wake)
        waker.start()  # False where LISTEN is off or unavailable: the dispatchers poll
        try:
            self.main_loop(stop_event)
        finally:
            asked = stop_event.is_set()  # else: drained in burst mode, or the loop failed
            stop_event.set()
            for state in self.states.values():
                state.wake()
                with state.changed:
                    state.changed.notify_all()
            waker.stop()
            self.shut_down(threads, asked)
            heartbeat_stop.set()
            heartbeat.join(5)
            p.inflight.close()
            self.summary.flush(time.monotonic())
            # A stopped worker is not listed (admin, `jobs status`): its row goes, after a
            # second signal too. If the database does not answer, the sweep removes it.
            self.guarded(p.maintainer.unregister)
            connections.close_all()
            logger.info("worker %s stopped", p.owner, extra={"event": "worker_stopped"})

    def wake(self, queue: str) -> None:
        """The waker's callback: new jobs on ``queue``."""
        self.states[queue].wake()

    def start_threads(self, stop_event: threading.Event) -> list[threading.Thread]:
        threads = []
        for state in self.states.values():
            threads.append(start_thread(f"claim-{state.name}", self.dispatch, state, stop_event))
            for number in range(state.threads):
                threads.append(start_thread(f"run-{state.name}-{number}", self.serve, state))
        return threads

    # -- the main thread ---------------------------------------------------

    def main_loop(self, stop_event: threading.Event) -> None:
        """Maintenance, registration and schedules, each on its interval, measured on the
        monotonic clock (a step that waits out its deadline does not shift the others)."""
        p = self.parts
        every = {
            "maintenance": float(settings.MAINTENANCE_SECONDS),
            "registration": p.inflight.beat_seconds,
        }
        next_at = dict.fromkeys(every, time.monotonic())
        poll = float(settings.POLL_SECONDS)
        while not stop_event.is_set():
            steps: list[Callable[[], object]] = []
            started = time.monotonic()
            if started >= next_at["maintenance"]:
                steps += [
                    lambda: p.maintainer.rescue(p.clock.now()),
                    lambda: p.maintainer.prune(p.clock.now()),
                ]
                next_at["maintenance"] = started + every["maintenance"]
            if started >= next_at["registration"]:
                steps.append(lambda: p.maintainer.refresh_registration(p.clock.now()))
                next_at["registration"] = started + every["registration"]
            steps.append(lambda: p.maintainer.enqueue_due(p.clock.now()))
            if not self.run_steps(steps, stop_event):
                return
            self.summary.tick(time.monotonic())
            if p.burst and self.guarded(lambda: self.burst.drained(self.is_busy())):
                self.guarded(self.burst.say_drained)
                return
            stop_event.wait(poll)

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
        return any(state.busy or not state.inbox.empty() for state in self.states.values())

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

    def hand_back(self, why: str) -> None:
        """Hand back every job still running, in one write, and say which went back."""
        p = self.parts
        tried, handed_back = p.inflight.hand_back_running(p.clock.now())
        kept = [job_id for job_id in tried if job_id not in handed_back]
        if not tried:
            if p.force_event.is_set():
                logger.info("%s: no job left to hand back", why, extra={"event": "jobs_released"})
            return
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
        thread and are waited for only until the give-up point.
        """
        p = self.parts
        tick = min(float(settings.POLL_SECONDS), p.inflight.beat_seconds / 4)
        while not stop.is_set():
            self.guarded(lambda: p.inflight.beat(p.clock.now()))
            stop.wait(tick)

    def dispatch(self, state: QueueState, stop_event: threading.Event) -> None:
        """A queue's dispatcher: claim as many jobs as there are idle threads."""
        claimer = self.parts.claimer
        poll = float(settings.POLL_SECONDS)
        failed = False
        try:
            while not stop_event.is_set():
                free = self.wait_for_threads(state, stop_event, poll)
                if stop_event.is_set():
                    break
                state.woken.clear()
                claimed = self.guarded(partial(claimer.claim_and_settle, state.name, free))
                if claimed is None and not failed:
                    # The first failure after a success is most often a connection the
                    # server dropped (a restart, pg_terminate_backend): guarded() closed
                    # it, so claim again at once on a new one rather than after a poll.
                    failed = True
                    continue
                failed = claimed is None
                jobs = claimed or []
                with state.changed:
                    state.busy += len(jobs)
                for job in jobs:
                    state.inbox.put(job)
                if len(jobs) < free:  # the queue ran dry: sleep until woken or the next poll
                    state.woken.wait(poll)
        finally:
            for _ in range(state.threads):
                state.inbox.put(None)
            connections.close_all()

    def wait_for_threads(self, state: QueueState, stop_event: threading.Event, poll: float) -> int:
        """Wait until a thread is free, then gather more for a moment; return how many."""
        with state.changed:
            while state.busy >= state.threads and not stop_event.is_set():
                state.changed.wait(poll)
            if state.busy:
                until = time.monotonic() + GATHER_SECONDS
                while state.busy and not stop_event.is_set():
                    left = until - time.monotonic()
                    if left <= 0:
                        break
                    state.changed.wait(left)
            return state.threads - state.busy

    def serve(self, state: QueueState) -> None:
        """A handler thread: run the jobs the dispatcher hands over."""
        executor = self.parts.executor
        try:
            while (claimed := state.inbox.get()) is not None:
                try:
                    self.guarded(partial(executor.execute, claimed))
                finally:
                    with state.changed:
                        state.busy -= 1
                        state.changed.notify_all()
                tidy_connections()
        finally:
            connections.close_all()


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


def start_thread(name: str, target: Callable[..., object], *args: object) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, name=f"django-jobs-{name}", daemon=True)
    thread.start()
    return thread
