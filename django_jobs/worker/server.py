"""Serving with threads: what ``Worker.run`` does.

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
- The main thread runs the maintenance pass and the recurring scheduler, and
  keeps the worker's registration fresh.

On stop: cancel running handlers, wait the grace period, flush the settler,
hand back what is still running in one write.
"""

from __future__ import annotations

import logging
import queue as queue_module
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from django.db import connections
from django.db.models import F, Q

from ..conf import settings
from ..db import ClaimedJob
from ..deadlines import apply_connect_timeout
from ..maintenance.scheduler import enqueue_due
from ..models import Job, JobStatus
from .connections import tidy_connections
from .processes import refresh_worker, register_worker, unregister_worker
from .waker import Waker

if TYPE_CHECKING:
    from .core import Worker

logger = logging.getLogger(__name__)

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
    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.states = {name: QueueState(name, count) for name, count in worker.queues.items()}

    def run(self, stop_event: threading.Event) -> None:
        w = self.worker
        apply_connect_timeout(w.using, w.call_timeout_seconds)
        logger.info(
            "worker %s serving queues %s",
            w.owner,
            w.queues,
            extra={"event": "worker_started", "owner": w.owner},
        )
        w.guarded(self.register)
        heartbeat_stop = threading.Event()
        heartbeat = start_thread("heartbeat", self.keep_leases, heartbeat_stop)
        w.settler.start()
        threads = self.start_threads(stop_event)
        waker = Waker(w.using, self.states, wake=self.wake)
        waker.start()  # False where LISTEN is off or unavailable: the dispatchers poll
        try:
            self.main_loop(stop_event)
        finally:
            stop_event.set()
            for state in self.states.values():
                state.wake()
                with state.changed:
                    state.changed.notify_all()
            waker.stop()
            self.shut_down(threads)
            heartbeat_stop.set()
            heartbeat.join(5)
            w.inflight.close()
            if not w.force_event.is_set():
                w.guarded(self.unregister)
            connections.close_all()
            logger.info("worker %s stopped", w.owner, extra={"event": "worker_stopped"})

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
        w = self.worker
        maintenance_every = float(settings.MAINTENANCE_SECONDS)
        refresh_every = w.inflight.beat_seconds
        poll = float(settings.POLL_SECONDS)
        next_maintenance = next_refresh = 0.0
        elapsed = 0.0
        while not stop_event.is_set():
            steps: list[Callable[[], object]] = []
            if elapsed >= next_maintenance:
                steps += [lambda: w.rescue(w.clock.now()), lambda: w.prune(w.clock.now())]
                next_maintenance = elapsed + maintenance_every
            if elapsed >= next_refresh:
                steps.append(self.refresh_registration)
                next_refresh = elapsed + refresh_every
            steps.append(self.enqueue_due)
            if not self.run_steps(steps, stop_event):
                return
            if w.burst and w.guarded(self.is_drained):
                logger.info("no due or running jobs left; burst worker exits")
                return
            stop_event.wait(poll)
            elapsed += poll

    def run_steps(self, steps: list[Callable[[], object]], stop_event: threading.Event) -> bool:
        """Run the main loop's steps in turn, each guarded; False (and the rest skipped)
        once a stop is asked: each step may wait out its deadline on a database that
        does not answer, and a stop must not wait for every one of them."""
        for step in steps:
            if stop_event.is_set():
                return False
            self.worker.guarded(step)
        return not stop_event.is_set()

    def register(self) -> None:
        w = self.worker
        now = w.clock.now()  # the first reading measures the database clock
        with w.deadline("the worker registration"):
            register_worker(w.owner, w.queues, now, w.using)

    def unregister(self) -> None:
        w = self.worker
        with w.deadline("removing the worker registration"):
            unregister_worker(w.owner, w.using)

    def refresh_registration(self) -> None:
        w = self.worker
        with w.deadline("the worker registration"):
            refresh_worker(w.owner, w.queues, w.clock.now(), w.using, w.jobs_run)

    def enqueue_due(self) -> int:
        w = self.worker
        with w.deadline("the recurring scheduler"):
            return enqueue_due(w.clock.now(), using=w.using)

    def is_drained(self) -> bool:
        """True when no job on this worker's queues is due or running."""
        if any(state.busy or not state.inbox.empty() for state in self.states.values()):
            return False
        w = self.worker
        now = w.clock.now()
        due = Q(status=JobStatus.PENDING, run_at__lte=now, attempts_used__lt=F("max_attempts"))
        with w.deadline("the drain check"):
            return (
                not Job.objects.using(w.using)
                .filter(queue__in=list(w.queues))
                .filter(due | Q(status=JobStatus.RUNNING))
                .exists()
            )

    def shut_down(self, threads: list[threading.Thread]) -> None:
        """Cancel running handlers, wait up to the grace period, flush the settler,
        hand back what is still running."""
        w = self.worker
        w.inflight.cancel_all()
        grace = float(settings.SHUTDOWN_GRACE_SECONDS)
        all_ended = self.join(threads, time.monotonic() + grace)
        if w.force_event.is_set():
            return
        if not w.settler.stop(grace + w.call_timeout_seconds):
            logger.warning(
                "outcomes still being written at shutdown; their leases will run out",
                extra={"event": "worker_error"},
            )
        if not all_ended:
            released = w.inflight.release_all(w.clock.now())
            if released:
                logger.warning(
                    "handed %s running job(s) back after a %ss grace period",
                    released,
                    grace,
                    extra={"event": "jobs_released"},
                )

    def join(self, threads: list[threading.Thread], deadline: float) -> bool:
        """Wait for ``threads`` until ``deadline`` (monotonic); True if all ended."""
        for thread in threads:
            while thread.is_alive():
                if self.worker.force_event.is_set():
                    logger.warning("stopping without waiting for running jobs")
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
        w = self.worker
        tick = min(float(settings.POLL_SECONDS), w.inflight.beat_seconds / 4)
        while not stop.is_set():
            w.guarded(lambda: w.inflight.beat(w.clock.now()))
            stop.wait(tick)

    def dispatch(self, state: QueueState, stop_event: threading.Event) -> None:
        """A queue's dispatcher: claim as many jobs as there are idle threads."""
        w = self.worker
        poll = float(settings.POLL_SECONDS)
        failed = False
        try:
            while not stop_event.is_set():
                free = self.wait_for_threads(state, stop_event, poll)
                if stop_event.is_set():
                    break
                state.woken.clear()
                claimed = w.guarded(partial(w.claim_and_settle, state.name, free))
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
        w = self.worker
        try:
            while (claimed := state.inbox.get()) is not None:
                try:
                    w.guarded(partial(w.execute_held, claimed))
                finally:
                    with state.changed:
                        state.busy -= 1
                        state.changed.notify_all()
                tidy_connections()
        finally:
            connections.close_all()


def start_thread(name: str, target: Callable[..., object], *args: object) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, name=f"django-jobs-{name}", daemon=True)
    thread.start()
    return thread
