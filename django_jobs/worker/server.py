"""Serving with threads: :func:`serve`, given a worker's parts.

- One dispatcher thread per queue claims as many due jobs as it has idle
  handler threads, in one statement, and hands them over. When some of its
  threads are still busy it gathers the ones that free up for a moment
  (``GATHER_SECONDS``), so that claims are not one job at a time. While the
  queue's jobs are short it claims the next batch as the current one runs,
  holding at most one job per thread waiting, never for long
  (:mod:`.ahead`); otherwise it never holds more jobs than it has threads.
  It sleeps until a thread frees up, the waker says its queue has new jobs,
  or the poll interval passes.
- Handler threads run the jobs and hand their results to the settler, which
  writes them in batches (:mod:`.settler`).
- The heartbeat thread renews leases and does nothing else, so that no other
  database call can delay its give-up check.
- On PostgreSQL the waker listens for new jobs (:mod:`.waker`).
- The main thread keeps the worker's registration fresh, takes part in the
  leader's election and, while this process leads (:mod:`.leader`),
  runs the maintenance pass and the recurring scheduler; it logs the summary
  (:mod:`.summary`); in burst mode it checks whether the queues are drained
  (:mod:`.burst`).

On stop: hand back the jobs waiting for a thread, say what it waits for,
cancel running handlers, wait the grace period, flush the settler, hand
back what is still running in one write.
A second signal (the worker's ``force_event``) ends the wait: the running
jobs are handed back at once, in the same one write. Either way the
worker's registration is removed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from typing import TypeVar

from django.db import connections

from ..conf import settings
from ..display import format_span
from ..registry import queue_limits
from .ahead import Pace, Waiting, hold_seconds, stale
from .burst import BurstCheck, job_list
from .connections import guarded, tidy_connections
from .core import Parts, Worker
from .deadlines import apply_connect_timeout
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


# How long a dispatcher waits for more of its busy threads to free up before it claims.
GATHER_SECONDS = 0.002


@dataclass
class QueueState:
    """One queue's handler threads and the jobs handed to them."""

    name: str
    threads: int
    pace: Pace
    busy: int = 0  # jobs handed over and not done: running, or waiting in the inbox
    inbox: deque[Waiting] = field(default_factory=deque)  # oldest first
    changed: threading.Condition = field(default_factory=threading.Condition)
    # Rung by the waker (new jobs) and the outcome writer (a slot freed, a job due again).
    woken: threading.Event = field(default_factory=threading.Event)
    closed: bool = False  # the dispatcher has stopped: the threads end once the inbox is empty
    limited: bool = False  # claimed under limits: never ahead, and again as a job ends

    def wake(self) -> None:
        self.woken.set()

    @property
    def capacity(self) -> int:
        """How many jobs its threads may hold: one more each while its jobs are short, unless
        the queue has limits (a job held waiting would hold a slot another worker could use)."""
        return self.threads * 2 if self.pace.short and not self.limited else self.threads


class Server:
    def __init__(self, parts: Parts) -> None:
        self.parts = parts
        ahead = float(settings.CLAIM_AHEAD_SECONDS)
        self.states = {
            name: QueueState(
                name,
                count,
                Pace(ahead),
                woken=parts.doorbells[name],
                limited=queue_limits(name) is not None,
            )
            for name, count in parts.queues.items()
        }
        self.hold = hold_seconds(parts.inflight.beat_seconds)
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
            self.guarded(p.leadership.resign)
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
        return any(state.busy or state.inbox for state in self.states.values())

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
        """A queue's dispatcher: claim as many jobs as there is room for, and hand them over."""
        claimer = self.parts.claimer
        poll = float(settings.POLL_SECONDS)
        failed = False
        try:
            while not stop_event.is_set():
                room = self.wait_for_room(state, stop_event, poll)
                if stop_event.is_set():
                    break
                state.woken.clear()
                claimed = self.guarded(partial(claimer.claim_and_settle, state.name, room))
                if claimed is None and not failed:
                    # The first failure after a success is most often a connection the
                    # server dropped (a restart, pg_terminate_backend): guarded() closed
                    # it, so claim again at once on a new one rather than after a poll.
                    failed = True
                    continue
                failed = claimed is None
                jobs = claimed or []
                with state.changed:
                    since = time.monotonic()
                    state.busy += len(jobs)
                    state.inbox.extend(Waiting(since, job) for job in jobs)
                    state.changed.notify_all()
                if len(jobs) < room:  # the queue ran dry: sleep until woken or the next poll
                    self.sleep_dry(state, stop_event, poll)
        finally:
            with state.changed:
                waiting = list(state.inbox)
                state.inbox.clear()
                state.busy -= len(waiting)
                state.closed = True
                state.changed.notify_all()
            self.hand_back_waiting(waiting, "stopping")
            connections.close_all()

    def wait_for_room(self, state: QueueState, stop_event: threading.Event, poll: float) -> int:
        """Wait until there is room for a claim; return how many jobs to claim.

        Without claiming ahead: once a thread is free, gathering more for a
        moment. Claiming ahead: once a thread's worth of room is free, while
        the threads still run what they hold.
        """
        while True:
            self.hand_back_stale(state)
            with state.changed:
                if stop_event.is_set():
                    return 0
                capacity = state.capacity
                room = capacity - state.busy
                if capacity > state.threads and room >= state.threads:
                    return room
                if capacity == state.threads and room > 0:
                    return self.gather(state, stop_event)
                state.changed.wait(self.hold if state.inbox else poll)

    def gather(self, state: QueueState, stop_event: threading.Event) -> int:
        """With ``state.changed`` held and a thread free: wait a moment for the busy ones to
        free up too, so that claims are not one job at a time; return the free threads."""
        until = time.monotonic() + GATHER_SECONDS
        while state.busy and not stop_event.is_set():
            left = until - time.monotonic()
            if left <= 0:
                break
            state.changed.wait(left)
        return state.threads - state.busy

    def sleep_dry(self, state: QueueState, stop_event: threading.Event, poll: float) -> None:
        """The queue ran dry: sleep until the waker says it has jobs or the poll interval
        passes, handing back meanwhile the jobs that wait too long for a thread."""
        until = time.monotonic() + poll
        while not stop_event.is_set():
            left = until - time.monotonic()
            if left <= 0:
                return
            with state.changed:
                waiting = bool(state.inbox)
            if state.woken.wait(min(left, self.hold) if waiting else left):
                return
            self.hand_back_stale(state)

    def hand_back_stale(self, state: QueueState) -> None:
        """Hand back the jobs that waited longer than the hold for a thread: another worker
        may be idle. The queue counts as slow until its jobs are short again."""
        with state.changed:
            count = stale(list(state.inbox), self.hold)
            if not count:
                return
            taken = [state.inbox.popleft() for _ in range(count)]
            state.busy -= count
            state.pace.slow(time.monotonic() - taken[0].since)
            state.changed.notify_all()
        self.hand_back_waiting(taken, "waited too long for a thread")

    def hand_back_waiting(self, waiting: list[Waiting], why: str) -> None:
        """Hand back jobs that no handler started, in one write (no attempt used)."""
        if not waiting:
            return
        p = self.parts
        pairs = [(entry.claimed.id, entry.claimed.attempt) for entry in waiting]
        handed_back = self.guarded(lambda: p.writer.hand_back(pairs, p.clock.now())) or set()
        logger.info(
            "%s: handed %s claimed job(s) back before they started: %s",
            why,
            len(handed_back),
            job_list(sorted(handed_back)),
            extra={"event": "jobs_released", "job_ids": sorted(handed_back)},
        )

    def serve(self, state: QueueState) -> None:
        """A handler thread: run the jobs the dispatcher hands over."""
        executor = self.parts.executor
        try:
            while (waiting := self.next_job(state)) is not None:
                started = time.monotonic()
                if started - waiting.since > self.hold:  # the dispatcher has not yet seen it
                    with state.changed:
                        state.busy -= 1
                        state.pace.slow(started - waiting.since)
                        state.changed.notify_all()
                    self.hand_back_waiting([waiting], "waited too long for a thread")
                    continue
                try:
                    self.guarded(partial(executor.execute, waiting.claimed))
                finally:
                    with state.changed:
                        state.busy -= 1
                        state.pace.add(time.monotonic() - started)
                        state.changed.notify_all()
                    if state.limited:  # its slot is free once the outcome is written: claim
                        state.wake()
                tidy_connections()
        finally:
            connections.close_all()

    @staticmethod
    def next_job(state: QueueState) -> Waiting | None:
        """The oldest job waiting for a thread; None once the dispatcher has stopped."""
        with state.changed:
            while not state.inbox:
                if state.closed:
                    return None
                state.changed.wait()
            return state.inbox.popleft()


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
