"""When the main thread runs its chores: each on its interval, measured on the monotonic
clock (a step that waits out its deadline does not shift the others); the leader's only
while this process leads (:mod:`.leadership`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

from ...conf import settings
from ...health import LOG_SECONDS
from ...telemetry import GAUGE_SECONDS
from ..clock import Clock
from .leadership import Leadership
from .maintainer import Maintainer

#: How soon the next pruning pass comes after one that used its whole budget, while
#: finished jobs pass their retention faster than one pass a maintenance interval deletes
#: them (the main loop's poll bounds it from below).
PRUNE_AGAIN_SECONDS = 1.0


class Chores:
    """The main loop's chores: the election, the maintenance pass, pruning (sooner while it
    falls behind), the jobs tables' health, the database-wide gauges for OpenTelemetry, the
    registration and the recurring schedules. All are due at once as it is built."""

    def __init__(
        self,
        maintainer: Maintainer,
        leadership: Leadership,
        clock: Clock,
        *,
        registration_seconds: float,
        health_seconds: float = LOG_SECONDS,
        gauge_seconds: float = GAUGE_SECONDS,
    ) -> None:
        self.maintainer = maintainer
        self.leadership = leadership
        self.clock = clock
        self.every = {
            "maintenance": float(settings.MAINTENANCE_SECONDS),
            "pruning": float(settings.MAINTENANCE_SECONDS),
            "registration": registration_seconds,
            "health": health_seconds,
            "gauges": gauge_seconds,
        }
        self.next_at = dict.fromkeys(self.every, time.monotonic())

    def due(self, started: float) -> list[Callable[[], object]]:
        """The steps due at ``started`` (monotonic), in the order they run."""
        maintainer, leader = self.maintainer, self.leadership
        steps: list[Callable[[], object]] = []
        if leader.due(self.clock.now()):
            steps.append(leader.elect)
        # The leader's chores: each checks, as it starts, that the lease still holds.
        if started >= self.next_at["maintenance"]:
            steps.append(self.as_leader(maintainer.rescue))
            self.next_at["maintenance"] = started + self.every["maintenance"]
        if started >= self.next_at["pruning"]:
            steps.append(self.pruning)
            self.next_at["pruning"] = started + self.every["pruning"]
        if started >= self.next_at["health"]:
            steps.append(self.as_leader(maintainer.check_health))
            self.next_at["health"] = started + self.every["health"]
        if started >= self.next_at["gauges"]:
            steps.append(self.as_leader(maintainer.read_gauges))
            self.next_at["gauges"] = started + self.every["gauges"]
        if started >= self.next_at["registration"]:
            steps.append(lambda: maintainer.refresh_registration(self.clock.now()))
            self.next_at["registration"] = started + self.every["registration"]
        maintainer.next_due_at = None  # read again if this process still leads
        steps.append(self.as_leader(maintainer.enqueue_due))
        return steps

    def wait(self, poll: float) -> float:
        """The main loop's wait: the poll, or less when the leader's next schedule falls due
        sooner, so that an occurrence fires at its time (and its job wakes its queue)."""
        due = self.maintainer.next_due_at
        if due is None:
            return poll
        return min(poll, max(0.0, (due - self.clock.now()).total_seconds()))

    def pruning(self) -> object:
        """The pruning pass; when it used its whole budget, the next comes in
        :data:`PRUNE_AGAIN_SECONDS`, so that pruning keeps up with the jobs that finish."""
        deleted = self.as_leader(self.maintainer.prune)()
        if self.maintainer.prune_behind:
            again = time.monotonic() + PRUNE_AGAIN_SECONDS
            self.next_at["pruning"] = min(self.next_at["pruning"], again)
        return deleted

    def as_leader(self, chore: Callable[[datetime], object]) -> Callable[[], object]:
        """``chore`` as a main-loop step: run at the clock's now if this process leads."""

        def step() -> object:
            now = self.clock.now()
            return chore(now) if self.leadership.acts(now) else None

        return step
