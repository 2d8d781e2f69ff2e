"""The worker: claims due jobs, runs them on threads, takes back expired leases.

``Worker.run_once(now)`` is one tick, run on the calling thread; tests call it
directly. ``Worker.run(stop_event)`` serves until the event is set: one
dispatcher thread per queue claims as many jobs as it has free handler
threads, in one statement, and the main thread runs the maintenance pass.
"""

from __future__ import annotations

import logging
import os
import queue as queue_module
import random
import secrets
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from django.db import connections, router
from django.db.models import F, Q

from .claims import ClaimedJob, Claimer, get_claimer
from .clock import Clock, DatabaseClock
from .conf import settings
from .dbconnections import tidy_connections
from .execution import HandlerResult, execute, make_context, record_result, run_handler
from .inflight import InFlight
from .leases import dead_letter_exhausted, reclaim_expired_leases
from .models import AttemptOutcome, Job, JobStatus
from .recurring import enqueue_due
from .registration import refresh_worker, register_worker, sweep_workers, unregister_worker
from .registry import get_definition
from .retries import RetryPolicy
from .retrying import with_backoff

logger = logging.getLogger(__name__)


def make_owner() -> str:
    """A name for this worker process, unique across hosts and restarts."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


@dataclass
class TickResult:
    fired: int = 0
    reclaimed: int = 0
    claimed: int = 0
    succeeded: int = 0
    retried: int = 0
    dead_lettered: int = 0
    released: int = 0
    lost: int = 0

    def record(self, status: JobStatus | None) -> None:
        if status is None:
            self.lost += 1
        elif status == JobStatus.SUCCEEDED:
            self.succeeded += 1
        elif status == JobStatus.DEAD_LETTERED:
            self.dead_lettered += 1
        else:
            self.retried += 1


@dataclass
class QueueState:
    """One queue's handler threads and how many of them are busy."""

    name: str
    threads: int
    busy: int = 0
    inbox: queue_module.Queue[ClaimedJob | None] = field(default_factory=queue_module.Queue)
    changed: threading.Condition = field(default_factory=threading.Condition)


def normalise_queues(queues: Mapping[str, int] | Iterable[str] | None) -> dict[str, int]:
    if queues is None:
        queues = list(settings.QUEUES)
    if isinstance(queues, Mapping):
        result = {str(name): int(count) for name, count in queues.items()}
    else:
        result = {str(name): settings.queue_workers(str(name)) for name in queues}
    if not result:
        raise ValueError("a worker needs at least one queue")
    for name, count in result.items():
        if count < 1:
            raise ValueError(f"queue {name!r} needs at least one worker thread, got {count}")
    return result


class Worker:
    def __init__(
        self,
        queues: Mapping[str, int] | Iterable[str] | None = None,
        *,
        clock: Clock | None = None,
        using: str | None = None,
        owner: str | None = None,
        rng: random.Random | None = None,
        burst: bool = False,
    ) -> None:
        self.queues = normalise_queues(queues)
        self.using = using or router.db_for_write(Job)
        self.clock: Clock = clock or DatabaseClock(self.using)
        self.claimer: Claimer = get_claimer(self.using)
        self.owner = owner or make_owner()
        self.rng = rng
        self.burst = burst
        self.force_event = threading.Event()
        self._states = {name: QueueState(name, count) for name, count in self.queues.items()}
        self.inflight = InFlight(
            self.claimer,
            self.owner,
            float(settings.LEASE_SECONDS),
            settings.heartbeat_seconds(),
            self.record,
        )

    # -- one tick, on the calling thread ---------------------------------

    def run_once(self, now: datetime | None = None) -> TickResult:
        """Maintenance, then claim and run up to one batch per queue."""
        now = now or self.clock.now()
        result = TickResult(fired=enqueue_due(now, using=self.using))
        result.reclaimed = self.maintain(now)
        for name, count in self.queues.items():
            for claimed in self.claim(name, now, count):
                result.claimed += 1
                result.record(self.execute(claimed))
        return result

    def maintain(self, now: datetime) -> int:
        """Take back expired leases; dead-letter pending jobs with no attempt left."""
        reclaimed = reclaim_expired_leases(self.claimer, now)
        dead_letter_exhausted(self.claimer, now)
        sweep_workers(now, float(settings.LEASE_SECONDS), self.using)
        return reclaimed

    def claim(self, queue: str, now: datetime, limit: int) -> list[ClaimedJob]:
        claimed = self.claimer.claim(queue, self.owner, now, float(settings.LEASE_SECONDS), limit)
        for job in claimed:
            logger.debug(
                "job %s #%s claimed, attempt %s",
                job.name,
                job.id,
                job.attempt,
                extra={"event": "job_claimed", "job_id": job.id, "attempt": job.attempt},
            )
        return claimed

    def execute(self, claimed: ClaimedJob) -> JobStatus | None:
        """Run a claimed job on this thread, without a heartbeat, and settle it."""
        return execute(claimed, self.claimer, self.clock, RetryPolicy.from_settings(), self.rng)

    def record(self, claimed: ClaimedJob, result: HandlerResult) -> JobStatus | None:
        """Settle an attempt, retrying through a brief database outage for up to a lease.

        A release at shutdown retries no longer than the grace period: if it
        cannot be written, the lease runs out as after a crash.
        """
        policy = RetryPolicy.from_settings()
        patience = float(settings.LEASE_SECONDS)
        if result.outcome == AttemptOutcome.RELEASED:
            patience = min(patience, float(settings.SHUTDOWN_GRACE_SECONDS))
        return with_backoff(
            lambda: record_result(claimed, result, self.claimer, self.clock, policy, self.rng),
            give_up_after=patience,
            using=self.using,
        )

    def execute_held(self, claimed: ClaimedJob) -> JobStatus | None:
        """Run a claimed job while the heartbeat keeps its lease; settle it if still ours."""
        ctx = make_context(claimed)
        held = self.inflight.add(claimed, ctx, self.clock.now(), self.timeout_for(claimed))
        result = run_handler(claimed, ctx)
        if not self.inflight.finish(held):
            return None
        return self.record(claimed, result)

    def timeout_for(self, claimed: ClaimedJob) -> float | None:
        """The job's ``@job(timeout=...)``, else its queue's ``timeout`` option."""
        try:
            timeout = get_definition(claimed.name).timeout
        except Exception:
            timeout = None
        if timeout is None:
            option = (settings.QUEUES.get(claimed.queue) or {}).get("timeout")
            timeout = float(option) if option else None
        return timeout

    # -- serving, with threads -------------------------------------------

    def run(self, stop_event: threading.Event) -> None:
        """Serve until ``stop_event`` is set, then wait for running handlers.

        Setting :attr:`force_event` as well stops the wait for running
        handlers; their jobs' leases then run out as after a crash.
        """
        logger.info(
            "worker %s serving queues %s",
            self.owner,
            self.queues,
            extra={"event": "worker_started", "owner": self.owner},
        )
        self._guarded(
            lambda: register_worker(self.owner, self.queues, self.clock.now(), self.using)
        )
        heartbeat_stop = threading.Event()
        heartbeat = self._thread("heartbeat", self._keep_leases, heartbeat_stop)
        threads = self._start_threads(stop_event)
        try:
            self._main_loop(stop_event)
        finally:
            stop_event.set()
            for state in self._states.values():
                with state.changed:
                    state.changed.notify_all()
            self._shut_down(threads)
            heartbeat_stop.set()
            heartbeat.join(5)
            if not self.force_event.is_set():
                self._guarded(lambda: unregister_worker(self.owner, self.using))
            connections.close_all()
            logger.info("worker %s stopped", self.owner, extra={"event": "worker_stopped"})

    def _shut_down(self, threads: list[threading.Thread]) -> None:
        """Cancel running handlers, wait up to the grace period, hand back what is left."""
        self.inflight.cancel_all()
        grace = float(settings.SHUTDOWN_GRACE_SECONDS)
        if not self._join(threads, time.monotonic() + grace) and not self.force_event.is_set():
            released = self.inflight.release_all()
            if released:
                logger.warning(
                    "handed %s running job(s) back after a %ss grace period",
                    released,
                    grace,
                    extra={"event": "jobs_released"},
                )

    def _keep_leases(self, stop: threading.Event) -> None:
        """The heartbeat thread: renew leases; keep this worker's registration fresh."""
        beat = self.inflight.beat_seconds
        tick = min(float(settings.POLL_SECONDS), beat / 4)
        refreshed_at = time.monotonic()
        try:
            while not stop.is_set():
                self._guarded(lambda: self.inflight.beat(self.clock.now()))
                if time.monotonic() - refreshed_at >= beat:
                    refreshed_at = time.monotonic()
                    self._guarded(
                        lambda: refresh_worker(
                            self.owner, self.queues, self.clock.now(), self.using
                        )
                    )
                stop.wait(tick)
        finally:
            connections.close_all()

    def _start_threads(self, stop_event: threading.Event) -> list[threading.Thread]:
        threads = []
        for state in self._states.values():
            threads.append(self._thread(f"claim-{state.name}", self._dispatch, state, stop_event))
            for number in range(state.threads):
                threads.append(self._thread(f"run-{state.name}-{number}", self._serve, state))
        return threads

    @staticmethod
    def _thread(name: str, target: object, *args: object) -> threading.Thread:
        thread = threading.Thread(target=target, args=args, name=f"django-jobs-{name}", daemon=True)  # type: ignore[arg-type]
        thread.start()
        return thread

    def _main_loop(self, stop_event: threading.Event) -> None:
        maintenance_every = float(settings.MAINTENANCE_SECONDS)
        poll = float(settings.POLL_SECONDS)
        next_maintenance = 0.0
        elapsed = 0.0
        while not stop_event.is_set():
            if elapsed >= next_maintenance:
                self._guarded(self.maintain_now)
                next_maintenance = elapsed + maintenance_every
            self._guarded(lambda: enqueue_due(self.clock.now(), using=self.using))
            if self.burst and self._guarded(self.is_drained):
                logger.info("no due or running jobs left; burst worker exits")
                return
            stop_event.wait(poll)
            elapsed += poll

    def maintain_now(self) -> int:
        return self.maintain(self.clock.now())

    def is_drained(self) -> bool:
        """True when no job on this worker's queues is due or running."""
        if any(state.busy or not state.inbox.empty() for state in self._states.values()):
            return False
        now = self.clock.now()
        due = Q(status=JobStatus.PENDING, run_at__lte=now, attempts_used__lt=F("max_attempts"))
        return (
            not Job.objects.using(self.using)
            .filter(queue__in=list(self.queues))
            .filter(due | Q(status=JobStatus.RUNNING))
            .exists()
        )

    def _guarded(self, step: object) -> object:
        """Run one step of a loop; log a failure and carry on serving."""
        try:
            return step()  # type: ignore[operator]
        except Exception:
            logger.exception("worker step failed; retrying", extra={"event": "worker_error"})
            connections[self.using].close_if_unusable_or_obsolete()
            return None

    def _dispatch(self, state: QueueState, stop_event: threading.Event) -> None:
        poll = float(settings.POLL_SECONDS)
        try:
            while not stop_event.is_set():
                with state.changed:
                    while state.busy >= state.threads and not stop_event.is_set():
                        state.changed.wait(poll)
                    free = state.threads - state.busy
                if stop_event.is_set():
                    break
                claimed = self._guarded(lambda n=free: self.claim(state.name, self.clock.now(), n))
                jobs: list[ClaimedJob] = claimed if isinstance(claimed, list) else []
                with state.changed:
                    state.busy += len(jobs)
                for job in jobs:
                    state.inbox.put(job)
                if len(jobs) < free:
                    stop_event.wait(poll)
        finally:
            for _ in range(state.threads):
                state.inbox.put(None)
            connections.close_all()

    def _serve(self, state: QueueState) -> None:
        try:
            while (claimed := state.inbox.get()) is not None:
                try:
                    self._guarded(lambda job=claimed: self.execute_held(job))
                finally:
                    with state.changed:
                        state.busy -= 1
                        state.changed.notify_all()
                tidy_connections()
        finally:
            connections.close_all()

    def _join(self, threads: list[threading.Thread], deadline: float) -> bool:
        """Wait for ``threads`` until ``deadline`` (monotonic); True if all ended."""
        for thread in threads:
            while thread.is_alive():
                if self.force_event.is_set():
                    logger.warning("stopping without waiting for running jobs")
                    return False
                if time.monotonic() >= deadline:
                    return False
                thread.join(0.05)
        return True
