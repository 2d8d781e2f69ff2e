"""Claiming ahead: a dispatcher claims the next jobs while its threads run the current ones.

A claim is a round trip with a commit. When a queue's jobs are short, the
threads would wait for it after every batch; so while the queue's jobs take
less than ``CLAIM_AHEAD_SECONDS`` on average, its dispatcher may hold more
jobs per thread, waiting for a thread, and claims as soon as a thread's
worth of room is free: the next batch is claimed while the current one
runs. It holds one per thread, or as many as the threads run while a claim
takes its round trip and commit (the claims' running average against the
jobs'), at most :data:`MOST_AHEAD`: jobs that take a tenth of a claim keep
their threads busy through it, and the claims are deep enough that their
round trips and commits are not what the jobs wait for. Bounded both ways:

- a waiting job is held no longer than :data:`HOLD_SECONDS` (and half a
  heartbeat): a job that waited longer is handed back (pending, the attempt
  given back, no attempt used) for any worker to take, and the queue counts
  as slow until its jobs are short again. A handler never starts one.
- on a stop, the waiting jobs are handed back at once.

Jobs that take longer than the bound on average are claimed only for idle
threads, as without it: a long job never keeps another waiting behind it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import NamedTuple

from ..db import ClaimedJob

#: The longest a claimed job waits for a thread before it is handed back.
HOLD_SECONDS = 0.25
#: The weight of the latest job in the running average of a queue's run times.
WEIGHT = 0.2
#: The most jobs per thread a dispatcher holds waiting for a thread. With three, two
#: threads of no-op jobs ran each claim's eight after its round trip; with eight, their
#: drain rose by half or more on PostgreSQL (docs/performance.md, "Claims eight deep").
MOST_AHEAD = 8


class Waiting(NamedTuple):
    """A claimed job handed to a queue's threads, and when (monotonic)."""

    since: float
    claimed: ClaimedJob


class Pace:
    """A queue's running average of how long its jobs take, and whether to claim ahead."""

    def __init__(self, bound: float) -> None:
        self.bound = bound
        self.average: float | None = None  # unknown until a job has run
        self.claim_average: float | None = None  # unknown until a claim has taken jobs

    def add(self, seconds: float) -> None:
        self.average = moved(self.average, seconds)

    def claimed(self, seconds: float) -> None:
        """A claim that took jobs took ``seconds``, its round trip and commit."""
        self.claim_average = moved(self.claim_average, seconds)

    def slow(self, seconds: float) -> None:
        """A job waited ``seconds`` for a thread: count the queue's jobs that long."""
        self.average = max(self.average or 0.0, seconds)

    @property
    def short(self) -> bool:
        return self.bound > 0 and self.average is not None and self.average < self.bound

    @property
    def ahead(self) -> int:
        """How many jobs per thread to hold waiting: none unless the jobs are short; then
        as many as a thread runs while a claim is under way, one to :data:`MOST_AHEAD`."""
        if not self.short:
            return 0
        assert self.average is not None
        if self.claim_average is None or self.claim_average <= self.average:
            return 1
        if self.average <= 0:
            return MOST_AHEAD
        return min(MOST_AHEAD, math.ceil(self.claim_average / self.average))


def moved(average: float | None, seconds: float) -> float:
    """The running ``average`` with ``seconds`` added (:data:`WEIGHT`); the first, as it is."""
    return seconds if average is None else average + WEIGHT * (seconds - average)


def hold_seconds(beat_seconds: float) -> float:
    """How long a job may wait for a thread: :data:`HOLD_SECONDS`, at most half a beat, so
    its lease (renewed from its start) never runs short."""
    return min(HOLD_SECONDS, beat_seconds / 2)


def stale(waiting: list[Waiting], hold: float, now: Callable[[], float] = time.monotonic) -> int:
    """How many of ``waiting`` (oldest first) have waited longer than ``hold``."""
    cutoff = now() - hold
    count = 0
    for entry in waiting:
        if entry.since > cutoff:
            break
        count += 1
    return count
