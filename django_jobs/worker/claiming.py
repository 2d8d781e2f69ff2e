"""Claiming: take due jobs through the driver, carrying waiting outcomes along.

A claim takes as many due jobs of one queue as there are free threads, in
one statement, and commits before any of them runs. It takes only jobs whose
names this process knows (:func:`~django_jobs.registry.known_names`, bound as
one parameter): during a rolling deploy, a job of a name only the new code
registers waits, pending and with no attempt used, for a worker that knows it. Under load the
outcomes waiting in the settler ride in the same statement
(:meth:`Claimer.claim_and_settle`): one round trip and one commit carry a
batch of outcomes and the next batch of jobs. The claim is then the
statement of the outcome writer's one path
(:meth:`~.recording.OutcomeWriter.write`): decide, write, release, report.
"""

from __future__ import annotations

from datetime import datetime

from ..db import ROW_ERRORS, ClaimedJob, ClaimRequest, DatabaseBusy, Driver
from ..db.records import Settled
from ..events import report_claim_refused, report_claimed
from ..registry import known_names, queue_limits
from .clock import Clock
from .deadlines import Deadlines
from .recording import Decided, OutcomeWriter
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

    def request(
        self,
        queue: str,
        now: datetime,
        limit: int,
        names: tuple[str, ...] | None = None,
        ahead: int = 0,
    ) -> ClaimRequest:
        """The claim of ``queue``: of the jobs whose names this process knows, or of
        ``names`` (a lane's: the sync or the async handlers'), the same tuple until the
        registry grows: the driver binds it as it is."""
        limits = queue_limits(queue)
        return ClaimRequest(
            queue,
            self.owner,
            now,
            self.lease_seconds,
            limit,
            limits,
            report_claim_refused,
            names=known_names() if names is None else names,
            ahead=ahead,
            among=None if names is None else known_names(),
        )

    def claim(
        self,
        queue: str,
        now: datetime,
        limit: int,
        names: tuple[str, ...] | None = None,
        ahead: int = 0,
    ) -> list[ClaimedJob]:
        """Up to ``limit`` due jobs of ``queue`` at ``now`` (of ``names`` if given), claimed
        and committed."""
        with self.deadline("the claim"):
            claimed = self.driver.claim(self.request(queue, now, limit, names, ahead))
        report_claimed(claimed)
        return claimed

    def claim_and_settle(
        self,
        queue: str,
        limit: int,
        names: tuple[str, ...] | None = None,
        ahead: int = 0,
        carry: bool = True,
    ) -> list[ClaimedJob]:
        """Claim for ``queue``, writing the outcomes that wait in the settler in the same
        statement, through the writer's one path. If that fails, the outcomes go back to
        the settler, still held, which writes them through the outage: the database busy,
        nothing is claimed; a refused row, the claim goes again alone (the settler writes
        the outcomes row by row); any other error is raised."""
        carried = self.settler.take() if carry else []
        now = self.clock.now()
        if not carried:
            return self.claim(queue, now, limit, names, ahead)
        request = self.request(queue, now, limit, names, ahead)
        claimed: list[ClaimedJob] = []

        def claim_carrying(decided: list[Decided]) -> tuple[list[Decided], Settled]:
            with self.deadline("the claim"):
                jobs, settled = self.driver.claim_and_settle(
                    request, [d.settlement for d in decided]
                )
            claimed.extend(jobs)
            return decided, settled

        try:
            self.writer.write(
                carried,
                claim_carrying,
                now=now,
                carried_by=queue,
                not_written=self.settler.give_back,
            )
        except DatabaseBusy:
            return []
        except ROW_ERRORS:
            return self.claim(queue, now, limit, names, ahead)
        return claimed
