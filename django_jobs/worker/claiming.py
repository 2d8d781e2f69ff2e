"""Claiming: take due jobs through the driver, carrying waiting outcomes along.

A claim takes as many due jobs of one queue as there are free threads, in
one statement, and commits before any of them runs. Under load the
outcomes waiting in the settler ride in the same statement
(:meth:`Claimer.claim_and_settle`): one round trip and one commit carry a
batch of outcomes and the next batch of jobs.
"""

from __future__ import annotations

from datetime import datetime

from ..db import ROW_ERRORS, ClaimedJob, ClaimRequest, DatabaseBusy, Driver
from ..events import report_claim_refused, report_claimed
from ..registry import queue_limits
from .clock import Clock
from .deadlines import Deadlines
from .recording import OutcomeWriter
from .settler import Settler


class Claimer:
    """Claims for one worker process, under its owner name and lease."""

    def __init__(
        self,
        driver: Driver,
        owner: str,
        *,
        clock: Clock,
        deadline: Deadlines,
        lease_seconds: float,
        settler: Settler,
        writer: OutcomeWriter,
    ) -> None:
        self.driver = driver
        self.owner = owner
        self.clock = clock
        self.deadline = deadline
        self.lease_seconds = lease_seconds
        self.settler = settler
        self.writer = writer

    def request(self, queue: str, now: datetime, limit: int) -> ClaimRequest:
        limits = queue_limits(queue)
        return ClaimRequest(
            queue, self.owner, now, self.lease_seconds, limit, limits, report_claim_refused
        )

    def claim(self, queue: str, now: datetime, limit: int) -> list[ClaimedJob]:
        """Up to ``limit`` due jobs of ``queue`` at ``now``, claimed and committed."""
        with self.deadline("the claim"):
            claimed = self.driver.claim(self.request(queue, now, limit))
        report_claimed(claimed)
        return claimed

    def claim_and_settle(self, queue: str, limit: int) -> list[ClaimedJob]:
        """Claim for ``queue``, writing the outcomes that wait in the settler in the same
        statement. If that fails, the outcomes go back to the settler, which writes them
        through the outage; a refused row makes the claim go again row by row."""
        carried = self.settler.take()
        now = self.clock.now()
        if not carried:
            return self.claim(queue, now, limit)
        try:
            decided = self.writer.decide(carried, now)
            with self.deadline("the claim"):
                claimed, settled = self.driver.claim_and_settle(
                    self.request(queue, now, limit), [d.settlement for d in decided]
                )
        except DatabaseBusy:
            self.settler.give_back(carried)
            return []
        except ROW_ERRORS:
            self.settler.give_back(carried)
            return self.claim(queue, now, limit)
        except BaseException:
            self.settler.give_back(carried)
            raise
        self.writer.release_held(carried)
        self.writer.written(decided, settled, carried_by=queue)
        return claimed
