"""One queue's dispatcher and its handler threads (:class:`Dispatcher`).

- The dispatcher thread claims as many due jobs as it has idle handler
  threads, in one statement, and hands them over. When some of its threads
  are still busy it gathers the ones that free up for a moment
  (``GATHER_SECONDS``), so that claims are not one job at a time. While the
  queue's jobs are short it claims the next batch as the current one runs,
  holding at most a few jobs per thread waiting, never for long
  (:mod:`.ahead`); otherwise it never holds more jobs than it has threads.
  Where claims of a queue may overlap (PostgreSQL's) and it has
  :data:`CLAIMS_BESIDE_THREADS` threads or more, a second claim is under way
  on a second thread and connection while the queue is busy and its jobs are
  short, so that the claims' round trips and commits no longer run one after
  another; with long jobs, only while the dispatcher's claim has waited past
  the hold. The room a claim asks for is reserved until its jobs are handed
  over, and each claimer counts the other's claim as at most half of the
  capacity as it is now: a claim that waits never starves the other.
  It sleeps until a thread frees up, the waker says its queue has new jobs,
  or the poll interval passes.
- Handler threads run the jobs and hand their results to the settler, which
  writes them in batches (:mod:`.settler`).

On stop, the dispatcher hands back the jobs waiting for a thread, and its
handler threads end once they have none left; the server (:mod:`.server`)
waits for them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import TypeVar

from django.db import connections

from ..conf import settings
from ..db import ClaimedJob
from ..db.records import Rate
from ..registry import queue_limits
from .ahead import MOST_AHEAD, Pace, Waiting, stale
from .burst import job_list
from .claiming import Claimer
from .clock import Clock
from .connections import guarded, start_thread, tidy_connections
from .execution import Executor
from .recording import OutcomeWriter
from .waker import Doorbell

logger = logging.getLogger(__name__)

T = TypeVar("T")


# How long a dispatcher waits for more of its busy threads to free up before it claims.
GATHER_SECONDS = 0.002
#: The fewest handler threads of a queue for which a second claim is under way beside the
#: dispatcher's, where claims may overlap. Measured on PostgreSQL with no-op jobs, the two
#: claims drained 10-20 % faster at 8 and 16 threads, and 5-10 % slower at 2 and 4: there
#: a claim of half the room carries too few jobs for its commit (docs/performance.md).
CLAIMS_BESIDE_THREADS = 8


#: The claimers of a queue: the dispatcher's, and the second one where claims overlap.
MAIN = "main"
BESIDE = "beside"


def claims_overlap(driver_overlaps: bool, threads: int, keyed: bool = False) -> bool:
    """Whether a queue of ``threads`` handler threads has claims under way at once: on a
    driver whose claims may overlap, with :data:`CLAIMS_BESIDE_THREADS` or more, and not
    for a queue with concurrency keys: a process's claims of it may skip the queue's lock
    (:mod:`~django_jobs.db.postgresql_limits`), each counting its keys' running jobs as
    the claim before it left them, so they take turns."""
    return driver_overlaps and threads >= CLAIMS_BESIDE_THREADS and not keyed


@dataclass
class QueueState:
    """One queue's handler threads and the jobs handed to them."""

    name: str
    threads: int
    pace: Pace
    busy: int = 0  # jobs handed over and not done: running, or waiting in the inbox
    #: The room each claim under way reserved (by claimer: :data:`MAIN`, :data:`BESIDE`),
    #: until its jobs count as held.
    reservations: dict[str, int] = field(default_factory=dict)
    #: When each claim under way began (monotonic), by claimer.
    began: dict[str, float] = field(default_factory=dict)
    inbox: deque[Waiting] = field(default_factory=deque)  # oldest first
    #: The lock of :attr:`changed` and :attr:`arrived`, which guards the counts and the inbox.
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    #: What the claimers wait on: room freed (a job ended or went back), a claim ended.
    changed: threading.Condition = field(init=False, repr=False)
    #: What the handler threads wait on: jobs in the inbox, or the dispatcher stopped. A
    #: job that ends wakes the claimers only, not every idle thread of the queue: measured
    #: at 16 threads, the threads spent a quarter of their time taking the lock back after
    #: such wake-ups.
    arrived: threading.Condition = field(init=False, repr=False)
    # Rung by the waker (new jobs) and the outcome writer (a slot freed, a job due again).
    woken: Doorbell = field(default_factory=Doorbell)
    closed: bool = False  # the dispatcher has stopped: the threads end once the inbox is empty
    limited: bool = False  # claimed under limits: again as a job ends
    #: The names its claims take (a lane's: the sync or the async handlers'); None: every
    #: name this process knows.
    names: Callable[[], tuple[str, ...]] | None = None
    #: Held around each claim, and shared by the queue's lanes (sync and async): on MariaDB
    #: a locking read locks the rows it passes over for a moment, so two lanes claiming at
    #: once could each skip the other's jobs, due, until a poll.
    claiming: threading.Lock = field(default_factory=threading.Lock)
    #: Claims of it may be under way at once (:func:`claims_overlap`): a second claimer
    #: runs while it is busy, and no claim takes :attr:`claiming`.
    overlapping: bool = False
    #: Its last claim took all the room it asked for: the second claimer may claim.
    saturated: bool = False

    def __post_init__(self) -> None:
        self.changed = threading.Condition(self.lock)
        self.arrived = threading.Condition(self.lock)

    def wake(self) -> None:
        self.woken.set()

    @property
    def capacity(self) -> int:
        """How many jobs its threads may hold: more each while its jobs are short
        (:attr:`~.ahead.Pace.ahead`). Under limits, the claim takes those ahead only with
        room to spare (``ClaimRequest.ahead``): a job held waiting holds a slot."""
        return self.threads * (1 + self.pace.ahead)

    def ahead(self, room: int, claimer: str = MAIN) -> int:
        """Of ``claimer``'s claim of ``room`` jobs, how many would wait for a thread: the
        jobs of the other claim under way take the free threads first."""
        free = self.threads - self.busy - self.others(claimer)
        return max(0, room - max(0, free))

    @property
    def reserved(self) -> int:
        """The room of the claims under way."""
        return sum(self.reservations.values())

    def others(self, claimer: str) -> int:
        """The room the other claim under way holds as ``claimer`` sees it: what it
        reserved, at most half the capacity as it is now. The capacity shrinks when the
        jobs slow down; a claim that waits, reserved at the capacity of its start, must not
        hold all of it, or the other claimer is starved exactly while a claim is slow.
        What it brings beyond the capacity waits for a thread, handed back past the hold."""
        half = self.capacity // 2
        return sum(min(room, half) for name, room in self.reservations.items() if name != claimer)

    def room(self, claimer: str) -> int:
        """The room ``claimer`` (with no claim under way) may claim: the capacity less the
        jobs held and the other claim under way."""
        return self.capacity - self.busy - self.others(claimer)

    def waiting_since(self, claimer: str) -> float | None:
        """When the claim under way of the claimer other than ``claimer`` began."""
        began = [at for name, at in self.began.items() if name != claimer]
        return min(began, default=None)

    @property
    def largest_claim(self) -> int:
        """The most jobs one claim takes: as many as its threads may hold, claiming ahead."""
        return self.threads * (1 + MOST_AHEAD)


class Dispatcher:
    """One queue's claim-ahead loop (the dispatcher thread) and its handler threads."""

    #: Where the queue's claims may overlap, a second claimer runs beside the dispatcher
    #: while the queue is busy (:meth:`claim_beside`).
    claims_beside = True

    def __init__(
        self,
        state: QueueState,
        *,
        claimer: Claimer,
        executor: Executor,
        writer: OutcomeWriter,
        clock: Clock,
        using: str,
        hold: float,
    ) -> None:
        self.state = state
        self.claimer = claimer
        self.executor = executor
        self.writer = writer
        self.clock = clock
        self.using = using
        self.hold = hold  # the longest a claimed job waits for a thread (:mod:`.ahead`)

    def start(self, stop_event: threading.Event) -> list[threading.Thread]:
        """Start the dispatcher thread, until ``stop_event``, and the handler threads."""
        state = self.state
        threads = [start_thread(f"claim-{state.name}", self.dispatch, stop_event)]
        for number in range(state.threads):
            threads.append(start_thread(f"run-{state.name}-{number}", self.serve))
        return threads

    def wake(self) -> None:
        """New jobs on the queue: claim without waiting for the poll."""
        self.state.wake()

    def rouse(self) -> None:
        """The stop event is set: wake the dispatcher from its sleep or its wait for room."""
        state = self.state
        state.wake()
        with state.changed:
            state.changed.notify_all()

    @property
    def largest_claim(self) -> int:
        """The most jobs one of its claims takes."""
        return self.state.largest_claim

    def is_busy(self) -> bool:
        """A handler holds a job, or one waits for a handler. Not a claim under way: a
        burst worker asks it beside one snapshot of the database, in which a job a claim
        under way takes is due or running already (one due later, it hands back at its
        stop). Counted, it kept burst workers that share a limited queue from ever
        exiting: each one's claims waited for the queue's lock behind the others' almost
        all the time."""
        state = self.state
        return bool(state.busy or state.inbox)

    def guarded(self, step: Callable[[], T]) -> T | None:
        return guarded(step, self.using)

    def dispatch(self, stop_event: threading.Event) -> None:
        """A queue's dispatcher: claim as many jobs as there is room for, and hand them over."""
        state = self.state
        poll = float(settings.POLL_SECONDS)
        ended = threading.Event()
        beside = (
            start_thread(f"claim-{state.name}-beside", self.claim_beside, stop_event, ended)
            if state.overlapping and self.claims_beside
            else None
        )
        failed = False
        # A lane whose last claim took nothing leaves the outcomes waiting in the settler to
        # a lane that claims (the queue's other lane), or to the settler: carried by its
        # claim, they would make a transaction of a claim that most likely takes nothing.
        carry = True
        try:
            while not stop_event.is_set():
                room = self.wait_for_room(stop_event, poll)
                if stop_event.is_set():
                    self.took(MAIN, [])
                    break
                state.woken.clear()
                names = None if state.names is None else state.names()
                if names == ():  # no handler of this lane: nothing to claim
                    self.took(MAIN, [])
                    self.sleep_dry(stop_event, poll)
                    continue
                claimed = self.claim(MAIN, room, names, carry)
                if claimed is None and not failed:
                    # The first failure after a success is most often a connection the
                    # server dropped (a restart, pg_terminate_backend): guarded() closed
                    # it, so claim again at once on a new one rather than after a poll.
                    failed = True
                    continue
                failed = claimed is None
                jobs = claimed or []
                carry = bool(jobs)
                if len(jobs) < room:  # the queue ran dry: sleep until woken or the next poll
                    self.sleep_dry(stop_event, self.dry_wait(poll))
        finally:
            ended.set()
            if beside is not None:  # its claim under way hands its jobs over first
                self.rouse()
                beside.join()
            with state.changed:
                waiting = list(state.inbox)
                state.inbox.clear()
                state.busy -= len(waiting)
                state.closed = True
                state.changed.notify_all()
                state.arrived.notify_all()
            self.hand_back_waiting(waiting, "stopping")
            self.wait_for_running()
            connections.close_all()

    def claim_beside(self, stop_event: threading.Event, ended: threading.Event) -> None:
        """The second claimer of a queue whose claims may overlap: while the queue is busy,
        a claim of its own under way beside the dispatcher's, on its own connection
        (:meth:`room_beside`). The dispatcher ends it before it hands back what waits."""
        state = self.state
        poll = float(settings.POLL_SECONDS)
        try:
            while not (stop_event.is_set() or ended.is_set()):
                with state.changed:
                    room = self.room_beside()
                    if not room:  # again once a claim waits past the hold, if one is under way
                        state.changed.wait(min(poll, self.hold) if state.began else poll)
                        continue
                names = None if state.names is None else state.names()
                if names == ():
                    self.took(BESIDE, [])
                    continue
                claimed = self.claim(BESIDE, room, names, True)
                if claimed is not None and len(claimed) >= room:
                    state.wake()  # more are due: the dispatcher may be asleep after a dry claim
        finally:
            connections.close_all()

    def room_beside(self, now: float | None = None) -> int:
        """With ``state.changed`` held: the room a claim beside the dispatcher's reserves,
        or 0 while none is wanted. It is wanted while the queue is busy (the last claim took
        all it asked for): with short jobs (claiming ahead) once a thread's worth of room is
        free, so that a claim's round trip is no longer what the threads wait for; with
        long ones only while the dispatcher's claim has waited past the hold (a lock, a
        slow commit), for the threads that are free."""
        state = self.state
        room = state.room(BESIDE)
        if not state.saturated or room <= 0:
            return 0
        if state.capacity > state.threads:
            return self.reserve(BESIDE, room) if room >= state.threads else 0
        since = state.waiting_since(BESIDE)
        now = time.monotonic() if now is None else now
        if since is None or now - since <= self.hold:
            return 0
        return self.reserve(BESIDE, room)

    def claim(
        self, claimer: str, room: int, names: tuple[str, ...] | None, carry: bool
    ) -> list[ClaimedJob] | None:
        """``claimer``'s claim of ``room`` jobs (reserved) of ``names``, carrying the
        waiting outcomes if ``carry``, and hand them over; None if the claim failed."""
        state = self.state
        with state.changed:
            ahead = state.ahead(room, claimer)
        claim = partial(self.claimer.claim_and_settle, state.name, room, names, ahead, carry)
        claimed = None
        try:
            began = time.monotonic()
            if state.overlapping:
                claimed = self.guarded(claim)
            else:
                with state.claiming:
                    claimed = self.guarded(claim)
            if claimed:
                state.pace.claimed(time.monotonic() - began)
        finally:
            self.took(claimer, claimed or [])
        if claimed:
            self.hand_over(claimed)
        return claimed

    def reserve(self, claimer: str, room: int) -> int:
        """With ``state.changed`` held: reserve ``room`` for ``claimer``'s claim (as much
        of it as one claim takes); the room reserved."""
        room = self.claim_room(room)
        self.state.reservations[claimer] = room
        self.state.began[claimer] = time.monotonic()
        return room

    def claim_room(self, room: int) -> int:
        """How much of ``room`` one claim takes: all of it; where claims overlap, half the
        capacity at most (a thread's worth at least), so that a claim that waits leaves the
        other room to take and run jobs meanwhile."""
        state = self.state
        if not state.overlapping:
            return room
        return min(room, max(state.threads, state.capacity // 2))

    def took(self, claimer: str, jobs: list[ClaimedJob]) -> None:
        """``claimer``'s claim took ``jobs``: they count as held, in the same moment as its
        reservation ends, so that no other claim sees their room free."""
        state = self.state
        with state.changed:
            room = state.reservations.pop(claimer, 0)
            state.began.pop(claimer, None)
            state.busy += len(jobs)
            state.saturated = room > 0 and len(jobs) >= room
            state.changed.notify_all()

    def hand_over(self, jobs: list[ClaimedJob]) -> None:
        """Put claimed jobs (counted by :meth:`took`) in the inbox for the handler threads."""
        state = self.state
        with state.changed:
            since = time.monotonic()
            state.inbox.extend(Waiting(since, job) for job in jobs)
            state.arrived.notify(len(jobs))
            state.changed.notify_all()  # a claimer waits a hold at most while jobs wait

    def wait_for_running(self) -> None:
        """At a stop, once nothing waits: the handler threads end by themselves."""

    def wait_for_room(self, stop_event: threading.Event, poll: float) -> int:
        """Wait until there is room for a claim; reserve it and return how many jobs to
        claim (none once ``stop_event`` is set).

        Without claiming ahead: once a thread is free, gathering more for a
        moment. Claiming ahead: once a thread's worth of room is free, while
        the threads still run what they hold.
        """
        state = self.state
        while True:
            self.hand_back_stale()
            with state.changed:
                if stop_event.is_set():
                    return 0
                capacity = state.capacity
                room = state.room(MAIN)
                if capacity > state.threads and room >= state.threads:
                    return self.reserve(MAIN, room)
                if capacity == state.threads and room > 0:
                    room = self.gather(stop_event)
                    if room > 0:
                        return self.reserve(MAIN, room)
                    continue
                state.changed.wait(self.hold if state.inbox else poll)

    def gather(self, stop_event: threading.Event) -> int:
        """With ``state.changed`` held and a thread free: wait a moment for the busy ones to
        free up too, so that claims are not one job at a time; return the free threads."""
        state = self.state
        until = time.monotonic() + GATHER_SECONDS
        while state.busy and not stop_event.is_set():
            left = until - time.monotonic()
            if left <= 0:
                break
            state.changed.wait(left)
        return state.threads - state.busy - state.others(MAIN)

    def dry_wait(self, poll: float) -> float:
        """How long a claim that took less than its room sleeps: the poll interval, or under
        a rate limit until its next window opens, if sooner. A full window frees no slot a
        worker could be woken for; the next one is known, and the same for every worker."""
        limits = queue_limits(self.state.name) if self.state.limited else None
        if limits is None or limits.rate is None:
            return poll
        return min(poll, until_next_window(limits.rate, self.clock.now()))

    def sleep_dry(self, stop_event: threading.Event, poll: float) -> None:
        """The queue ran dry: sleep until the waker says it has jobs or the poll interval
        passes, handing back meanwhile the jobs that wait too long for a thread."""
        state = self.state
        until = time.monotonic() + poll
        state.woken.dry = True  # the settler writes this queue's outcomes without lingering
        try:
            while not stop_event.is_set():
                left = until - time.monotonic()
                if left <= 0:
                    return
                with state.changed:
                    waiting = bool(state.inbox)
                if state.woken.wait(min(left, self.hold) if waiting else left):
                    return
                self.hand_back_stale()
        finally:
            state.woken.dry = False

    def hand_back_stale(self) -> None:
        """Hand back the jobs that waited longer than the hold for a thread: another worker
        may be idle. The queue counts as slow until its jobs are short again."""
        state = self.state
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
        pairs = [(entry.claimed.id, entry.claimed.attempt) for entry in waiting]
        writer, clock = self.writer, self.clock
        handed_back = self.guarded(lambda: writer.hand_back(pairs, clock.now())) or set()
        logger.info(
            "%s: handed %s claimed job(s) back before they started: %s",
            why,
            len(handed_back),
            job_list(sorted(handed_back)),
            extra={"event": "jobs_released", "job_ids": sorted(handed_back)},
        )

    def serve(self) -> None:
        """A handler thread: run the jobs the dispatcher hands over."""
        state = self.state
        executor = self.executor
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
                state.arrived.wait()
            return state.inbox.popleft()


#: How long after its next window opens a dispatcher held by a rate limit claims again:
#: past the database's clock reading (the windows are counted on it) and the claim's own.
WINDOW_MARGIN_SECONDS = 0.005


def until_next_window(rate: Rate, now: datetime) -> float:
    """Seconds from ``now`` until the rate window after ``now``'s opens, and a margin."""
    opens = rate.window_start(now) + timedelta(seconds=rate.seconds)
    return max(0.0, (opens - now).total_seconds()) + WINDOW_MARGIN_SECONDS
