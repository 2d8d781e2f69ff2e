"""PostgreSQL's claim under limits: after the queue's lock, one statement.

:class:`~.limits.FlowControl` claims a limited queue in steps, one round trip each:
it locks the queue's row, counts the jobs running under a live lease by key, reads
the due rows within the room left, then marks them running and starts their
attempts. On PostgreSQL every step after the lock is one statement of ``WITH``
queries (:class:`PostgresFlowControl`), and the outcomes the claim carries are written
in the lock's statement (the statement after it sees what they wrote), so a limited
claim costs the lock's round trip, this one and the commit, where it cost five or six
and the commit.

The lock stays a statement of its own. A statement sees the rows committed when it
began: had it waited for the lock inside the claim's statement, it would count the
running jobs as they were before the claim that held the lock committed, and take
slots that claim had just filled. The statement after the lock begins once the lock
is held, and sees every claim before it.

The statement takes exactly what :func:`~.limits.claim_size` and
:func:`~.limits.within_key_limits` take, in SQL:

- ``room``: the jobs the claim may take, from the running count, the global limit
  and what is left of the rate window (bound: the window's free slots, known from
  the lock's row);
- the due rows in claim order, the keys that are full passed over in the read, and
  with keys, more rows than the room, as the steps read them;
- of a key, a row is taken while the key's running jobs and the rows of it before
  this one leave it a slot (``held + rank <= key_limit``), and past the first rows,
  those its idle threads start at once, while a slot of the key stays free besides
  (``held + rank < key_limit``).

A row the database refuses to claim fails the statement: the claim is made again in
steps, each row in a savepoint of its own (the steps' ``one_by_one``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Protocol, cast

from .limits import KEYED_SCAN_EXTRA, KEYED_SCAN_FACTOR, ClaimSteps, FlowControl, Limited, QueueRow
from .records import ClaimedJob, ClaimRequest, DueRows, QueueLimits, Settled, Settlement


class OneStatementSteps(ClaimSteps, Protocol):
    """What the one statement asks of the PostgreSQL driver, beside the claim's steps."""

    def settle_ctes(self, settlements: Sequence[Settlement]) -> tuple[str, list[Any]]: ...

    def settled(
        self,
        settlements: Sequence[Settlement],
        written: Iterable[tuple[int, int, str | None, bool | None]],
    ) -> Settled: ...

    def execute_in_transaction(self, sql: str, params: list[Any]) -> list[tuple[Any, ...]]: ...

    def take_ctes_text(self) -> str: ...

    def take_params(self, request: ClaimRequest) -> list[Any]: ...

    def due_rows(self, request: ClaimRequest, also: str = "") -> DueRows: ...

    def claim_key(self, request: ClaimRequest) -> str: ...

    def limited_claim_rows(
        self, sql: str, params: list[Any], request: ClaimRequest
    ) -> tuple[list[ClaimedJob], Sequence[Any]]: ...


class PostgresFlowControl(FlowControl):
    """:class:`~.limits.FlowControl` whose claim, once the queue is locked, is one statement."""

    @property
    def driver(self) -> OneStatementSteps:
        """The steps it is given: the PostgreSQL driver's, which take the one statement."""
        return cast(OneStatementSteps, self.steps)

    def settle_and_lock(
        self, queue: str, window: datetime | None, settlements: Sequence[Settlement]
    ) -> tuple[Settled, QueueRow | None]:
        """The outcomes the claim carries written in the statement that takes the lock: one
        round trip for both. The claim's statement, after it, sees what they wrote."""
        if not settlements:
            return super().settle_and_lock(queue, window, settlements)
        lock, lock_params = self.lock_statement(queue, window)
        ctes, settle_params = self.driver.settle_ctes(settlements)
        width = 5 if self.driver.transaction_bound()[0] else 4  # the lock's columns
        sql = self.statements.text(
            f"settle_and_lock:{width}",
            lambda: (
                f"WITH {ctes}, locked AS ({lock})"
                f" SELECT TRUE, locked.*, {', '.join(['NULL'] * 4)} FROM locked"
                f" UNION ALL SELECT FALSE, {', '.join(['NULL'] * width)},"
                " id, attempt, new_status, workflow_pending FROM settled"
            ),
        )
        rows = self.driver.execute_in_transaction(sql, [*settle_params, *lock_params])
        found = [row[1 : 1 + width] for row in rows if row[0]]
        written = [tuple(row[1 + width :]) for row in rows if not row[0]]
        settled = self.driver.settled(settlements, written)
        return settled, self.queue_row(found[0]) if found else None

    def claim_under(self, request: ClaimRequest, row: QueueRow, one_by_one: bool) -> Limited:
        limits = request.limits
        assert limits is not None
        if one_by_one or row.paused or row.behind:
            return super().claim_under(request, row, one_by_one)
        sql, params = self.limited_claim_sql(request, limits, row)
        jobs, (total, groups, room, passed) = self.driver.limited_claim_rows(sql, params, request)
        now_wanted = request.limit - request.ahead  # what its free threads would start
        full = limits.global_limit is not None and limits.global_limit - total < now_wanted
        if room <= 0:
            return Limited([], short=full)
        # A key's limit passed rows over: then a slot freed of it is wanted too.
        keyed_short = limits.keyed and len(jobs) < now_wanted and groups > 0 and bool(passed)
        return Limited(jobs, short=full or keyed_short)

    def limited_claim_sql(
        self, request: ClaimRequest, limits: QueueLimits, row: QueueRow
    ) -> tuple[str, list[Any]]:
        """The statement and its parameters; it returns the claimed rows (at least one row:
        with nothing claimed, one of NULLs), each followed by the running total, the number
        of keys running (a job without a key counts as one), and the room."""
        statements = self.statements
        # A keyed claim passes over the rows of full keys in its read: in a lane's window,
        # so that they do not fill it (the key bound unqualified, to the row read).
        key, limit = statements.qn("concurrency_key"), statements.qn("concurrency_limit")
        free_key = (
            f"({key} IS NULL OR COALESCE({limit}, 1) >"
            f" COALESCE((SELECT n FROM running WHERE k = {key}), 0))"
        )
        rows = self.driver.due_rows(request, free_key if limits.keyed else "")
        rate_free = None if limits.rate is None else limits.rate.jobs - row.used
        params: list[Any] = [
            request.queue,
            statements.adapt(request.now),
            request.limit,
            request.ahead,
            limits.global_limit,
            rate_free,
            *rows.params,
        ]
        if limits.keyed:
            params += [KEYED_SCAN_FACTOR, KEYED_SCAN_EXTRA, request.limit - request.ahead]
        params += self.driver.take_params(request)
        key = f"limited_claim:{limits.keyed}{self.driver.claim_key(request)}"
        return statements.text(key, lambda: self.limited_claim_text(rows, limits.keyed)), params

    def limited_claim_text(self, rows: DueRows, keyed: bool) -> str:
        statements = self.statements
        qn, job = statements.qn, statements.job_table
        key, limit = qn("concurrency_key"), qn("concurrency_limit")
        sql = (
            f"WITH running AS (SELECT {key} AS k, COUNT(*) AS n,"
            f" MIN(COALESCE({limit}, 1)) AS lim FROM {job}"
            f" WHERE {statements.running_guard(job)} AND {qn('queue')} = %s"
            f" AND {qn('lease_expires_at')} > %s GROUP BY {key}),"
            " totals AS (SELECT COALESCE(SUM(n), 0)::integer AS total,"
            " COUNT(*)::integer AS keys FROM running),"
            # claim_size(): all it asks for while as many slots again as it claims ahead
            # stay free; else only those its idle threads start at once.
            " room AS (SELECT CASE WHEN free IS NULL OR free - p.asked >= p.ahead THEN p.asked"
            " ELSE GREATEST(LEAST(p.asked - p.ahead, free), 0) END AS n"
            " FROM (SELECT %s::integer AS asked, %s::integer AS ahead) p,"
            " (SELECT LEAST(%s::integer - total, %s::integer) AS free FROM totals) f),"
        )
        if not keyed:
            sql += (
                f" picked AS (SELECT j.{qn('id')} {rows.source}{rows.order}"
                " LIMIT (SELECT n FROM room) FOR UPDATE OF j SKIP LOCKED),"
            )
        else:
            ranked_order = "priority DESC, run_at, id"
            sql += (
                f" candidates AS (SELECT j.{qn('id')} AS id, j.{qn('priority')} AS priority,"
                f" j.{qn('run_at')} AS run_at, j.{key} AS k, COALESCE(j.{limit}, 1) AS key_limit"
                f" {rows.source}{rows.order}"
                " LIMIT (SELECT CASE WHEN n > 0 THEN n * %s + %s ELSE 0 END"
                " FROM room) FOR UPDATE OF j SKIP LOCKED),"
                " ranked AS (SELECT c.*, COALESCE(r.n, 0) AS held,"
                f" ROW_NUMBER() OVER (PARTITION BY c.k ORDER BY {ranked_order}) AS rank"
                " FROM candidates c LEFT JOIN running r ON r.k = c.k),"
                " kept AS (SELECT ranked.*,"
                f" ROW_NUMBER() OVER (ORDER BY {ranked_order}) - 1 AS place FROM ranked"
                " WHERE k IS NULL OR held + rank <= key_limit),"
                " picked AS (SELECT id FROM kept"
                " WHERE k IS NULL OR place < %s OR held + rank < key_limit"
                " ORDER BY place LIMIT (SELECT n FROM room)),"
            )
        sql += f" {self.driver.take_ctes_text()}"
        # Whether a key's limit passed rows over: short of the room, a row read and not
        # taken; or a key full, whose rows the read passed over (claim_under()'s steps).
        passed = (
            "(SELECT COUNT(*) FROM picked) < LEAST((SELECT COUNT(*) FROM candidates),"
            " (SELECT n FROM room)) OR EXISTS (SELECT 1 FROM running"
            " WHERE k IS NOT NULL AND n >= lim)"
            if keyed
            else "FALSE"
        )
        return (
            f"{sql} SELECT marked.*, totals.total, totals.keys, (SELECT n FROM room),"
            f" {passed} FROM totals LEFT JOIN marked ON TRUE"
        )
