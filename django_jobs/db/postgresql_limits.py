"""PostgreSQL's claim under limits: one statement after the lock, or without it.

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

**Claims that skip the lock.** Under the lock, claims of a queue pass one at a time, each
behind the previous one's commit. Under a global limit that leaves room to spare, they
need not (:meth:`PostgresFlowControl.unlocked_claim_sql`, one statement in its own
transaction, as a plain claim): each worker's row says the most jobs one of its claims
takes of a queue (``largest_claim``; a worker's lanes of a queue claim one at a time, or
together where they overlap), and a claim skips the lock only while the jobs running under
a live lease and the largest claim of every worker serving the queue fit in the limit
together. Whatever claims are under way at once, each from a worker counted by the one
whose snapshot is latest, they take no more than that one counted room for. A worker's row
is in every such count until its claim commits: the claim locks it (``FOR KEY SHARE``), so
the sweep waits.

Keys need more: two claims under way at once, each counting a key's running jobs, could
each take its last slot. A process's claims of a keyed queue take turns (its lanes share
``QueueState.claiming``, and such a queue has no second claim beside its dispatcher's), so
while no other worker serves the queue, each sees all the one before it took: that claim
skips the lock too (and the global limit's condition holds, if the queue has one). It
takes what a claim under the lock would (:meth:`PostgresFlowControl.keyed_pick_ctes`), and
where a key's limit keeps it short it marks the queue's row as waiting for a slot in the
same statement, as a claim under the lock does.

A claim under the lock counts what every claim before it took, so the two kinds must not
overlap: a claim that skips the lock takes the queue's row's shared lock (``FOR KEY SHARE
SKIP LOCKED``), which a claim under the lock (``FOR UPDATE``) waits for; and it claims only
if the row it locked is the version its snapshot saw, as every claim under the lock that
takes jobs of a queue whose claims may skip it writes the row
(:attr:`~.limits.FlowControl.writes_claims`; in the claim's own statement, ``touched``).
A claim under the lock under way, or committed since the snapshot, sends the claim to the
lock.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from functools import partial
from typing import Any, Protocol, cast

from ..models import Queue, WorkerProcess
from .limits import KEYED_SCAN_EXTRA, KEYED_SCAN_FACTOR, ClaimSteps, FlowControl, Limited, QueueRow
from .records import (
    ROW_ERRORS,
    ClaimedJob,
    ClaimRequest,
    DueRows,
    QueueLimits,
    Settled,
    Settlement,
)
from .statements import Statements


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

    @property
    def claimed_columns(self) -> str: ...

    @property
    def settled_as_claimed(self) -> str: ...

    @property
    def nothing_claimed(self) -> str: ...

    def unlocked_claim_rows(
        self,
        sql: str,
        params: list[Any],
        request: ClaimRequest,
        settlements: Sequence[Settlement],
    ) -> tuple[list[ClaimedJob], Settled, bool]: ...


#: After a claim found too little room to skip the queue's lock, how long this process's
#: claims of that queue take the lock before they try without it again.
LOCKED_AFTER_MISS_SECONDS = 1.0


class PostgresFlowControl(FlowControl):
    """:class:`~.limits.FlowControl` whose claim, once the queue is locked, is one statement;
    and whose claims under a global limit that leaves room for every serving process's
    largest claim skip the lock, in one statement."""

    writes_claims = True
    #: The lock's statement sees what committed before it began, not what the claim it
    #: waited for wrote: the running jobs are counted in the statement after it.
    counts_in_lock = False

    def __init__(self, statements: Statements, steps: ClaimSteps) -> None:
        super().__init__(statements, steps)
        #: Queue -> until when its claims take the lock: a claim found too little room to
        #: skip it (:data:`LOCKED_AFTER_MISS_SECONDS`).
        self.locked_until: dict[str, datetime] = {}

    def forget(self) -> None:
        super().forget()
        self.locked_until.clear()

    @property
    def driver(self) -> OneStatementSteps:
        """The steps it is given: the PostgreSQL driver's, which take the one statement."""
        return cast(OneStatementSteps, self.steps)

    # -- claims that skip the queue's lock --------------------------------------------

    def claim_limited(
        self, request: ClaimRequest, settlements: Sequence[Settlement] = (), freed: bool = False
    ) -> tuple[list[ClaimedJob], Settled]:
        """Under a global limit alone, first without the queue's lock, in one statement that
        also writes ``settlements`` (:meth:`unlocked_claim_sql`); under the lock if that
        finds too little room."""
        if not self.may_skip_lock(request):
            return super().claim_limited(request, settlements, freed)
        if request.queue not in self.queue_rows:
            self.make_queue_row(request.queue)
        sql, params = self.unlocked_claim_sql(request, settlements)
        try:
            jobs, settled, room = self.driver.unlocked_claim_rows(sql, params, request, settlements)
        except ROW_ERRORS:
            if settlements:
                raise  # the caller settles apart, then claims again
            return super().claim_limited(request)  # a refused row: one by one, under the lock
        if room:
            return jobs, settled
        self.locked_until[request.queue] = request.now + timedelta(
            seconds=LOCKED_AFTER_MISS_SECONDS
        )
        again = partial(super().claim_limited, request, freed=freed or bool(settlements))
        return self.and_then((jobs, settled), bool(settlements), request.queue, again)

    def lock_skippable(self, limits: QueueLimits) -> bool:
        """A global limit, keys or both, and no rate limit: a rate window's count is written
        by every claim that takes jobs, under the lock."""
        return limits.rate is None and (limits.global_limit is not None or limits.keyed)

    def may_skip_lock(self, request: ClaimRequest) -> bool:
        """The queue's limits allow it (:meth:`lock_skippable`), and no claim of it here
        lately found too little room to skip the lock."""
        limits = request.limits
        if limits is None or not self.lock_skippable(limits):
            return False
        until = self.locked_until.get(request.queue)
        return until is None or request.now >= until

    def unlocked_claim_sql(
        self, request: ClaimRequest, settlements: Sequence[Settlement]
    ) -> tuple[str, list[Any]]:
        """The claim that skips the queue's lock, ``settlements`` written first. It claims
        only if:

        - this process's row allows a claim this large (locked, so the sweep cannot remove
          it before the claim commits: the others count it until then);
        - every process serving the queue says how large its claims are, and the jobs
          running under a live lease and all of those claims fit in the global limit, if
          there is one: so claims that skip the lock, under way together, never take more
          than the limit leaves;
        - with keys, no other process serves the queue: two claims counting a key's running
          jobs at once could each take its last slot. This process's claims of a keyed
          queue take turns (``QueueState.claiming``), each seeing the one before;
        - no claim under the lock holds the queue's row or has committed since this
          statement's snapshot (the row's version, read again as it is locked, is the one
          the snapshot saw): so the running jobs it counts are all there are, as a claim
          under the lock counts them;
        - no worker waits for a slot: the lock's claims wake them.

        The running jobs it counts leave out those whose outcomes it writes: a statement
        does not see what its own ``WITH`` queries wrote, and a slot the outcome frees
        would read as taken. With keys it takes what a claim under the lock would (a key's
        rows while it has slots, :meth:`keyed_pick_ctes`), and where a key's limit kept it
        short, it marks the queue's row as waiting for a slot, in the same statement, so
        that the outcome that frees one wakes the queue's workers.

        It returns, tagged 0, the claimed rows; 1, the settled ones; 2, one row saying
        whether it claimed (in the last column)."""
        limits = request.limits
        assert limits is not None
        statements = self.statements
        settle, settle_params = self.driver.settle_ctes(settlements) if settlements else ("", [])
        keyed = limits.keyed
        rows = self.driver.due_rows(request, self.free_key if keyed else "")
        now_wanted = request.limit - request.ahead  # what its free threads would start
        params: list[Any] = [
            *settle_params,
            request.owner,
            request.queue,
            request.queue,
            request.owner,
            request.queue,
            request.queue,
            statements.adapt(request.now),
            request.limit,
            limits.global_limit,
            *rows.params,
        ]
        if keyed:
            scan = request.limit * KEYED_SCAN_FACTOR + KEYED_SCAN_EXTRA
            params += [scan, now_wanted, request.limit]
        else:
            params.append(request.limit)
        params += self.driver.take_params(request)
        if keyed:
            params += [request.queue, now_wanted, request.limit]
        key = f"unlocked_claim:{bool(settlements)}:{keyed}{self.driver.claim_key(request)}"
        text = statements.text(key, lambda: self.unlocked_claim_text(rows, settle, keyed))
        return text, params

    def unlocked_claim_text(self, rows: DueRows, settle: str, keyed: bool) -> str:
        statements = self.statements
        qn, job = statements.qn, statements.job_table
        worker, largest = qn(WorkerProcess._meta.db_table), qn("largest_claim")
        queue = qn(Queue._meta.db_table)
        driver = self.driver
        key, limit = qn("concurrency_key"), qn("concurrency_limit")
        not_settled = f" AND {qn('id')} NOT IN (SELECT id FROM settled)" if settle else ""
        if keyed:
            running = (
                f"running AS (SELECT {key} AS k, COUNT(*) AS n,"
                f" MIN(COALESCE({limit}, 1)) AS lim FROM {job}"
                f" WHERE {statements.running_guard(job)} AND {qn('queue')} = %s"
                f" AND {qn('lease_expires_at')} > %s{not_settled} GROUP BY {key}),"
                " totals AS (SELECT COALESCE(SUM(n), 0)::integer AS total,"
                " COUNT(*)::integer AS keys FROM running),"
            )
        else:
            running = (
                f"running AS (SELECT COUNT(*) AS n FROM {job}"
                f" WHERE {statements.running_guard(job)} AND {qn('queue')} = %s"
                f" AND {qn('lease_expires_at')} > %s{not_settled}),"
                " totals AS (SELECT n AS total FROM running),"
            )
        open_room = "(SELECT CASE WHEN open THEN %s::integer ELSE 0 END FROM room)"
        sql = (
            f"WITH {settle + ', ' if settle else ''}"
            f"me AS (SELECT {largest} AS most FROM {worker}"
            f" WHERE {qn('id')} = %s FOR KEY SHARE),"
            f" seen AS (SELECT xmin AS v FROM {queue} WHERE {qn('name')} = %s),"
            f" held AS (SELECT xmin AS v, {qn('slot_wanted')} AS wanted FROM {queue}"
            f" WHERE {qn('name')} = %s FOR KEY SHARE SKIP LOCKED),"
            f" serving AS (SELECT COALESCE(SUM({largest}), 0) AS reserved,"
            f" COUNT(*) - COUNT({largest}) AS unknown,"
            f" COUNT(*) FILTER (WHERE {qn('id')} IS DISTINCT FROM %s) AS others FROM {worker}"
            f" WHERE {qn('queues')} @> jsonb_build_array(%s::text)),"
            f" {running}"
            " room AS (SELECT COALESCE((SELECT most FROM me) >= %s::integer"
            " AND s.unknown = 0"
            " AND t.total + s.reserved <= COALESCE(%s::integer, 2147483647)"
            " AND (SELECT v FROM held) = (SELECT v FROM seen)"
            f" AND NOT (SELECT wanted FROM held){' AND s.others = 0' if keyed else ''},"
            " FALSE) AS open FROM serving s, totals t),"
        )
        if keyed:
            sql += self.keyed_pick_ctes(rows, open_room, "%s::integer")
        else:
            sql += (
                f" picked AS (SELECT j.{qn('id')} {rows.source}{rows.order}"
                f" LIMIT {open_room} FOR UPDATE OF j SKIP LOCKED),"
            )
        sql += f" {driver.take_ctes_text()}"
        if keyed:  # short of what its free threads would start, a key's limit the cause
            sql += (
                f", wanting AS (UPDATE {queue} SET {qn('slot_wanted')} = TRUE"
                f" WHERE {qn('name')} = %s AND (SELECT open FROM room)"
                " AND (SELECT COUNT(*) FROM marked) < %s::integer"
                " AND (SELECT keys FROM totals) > 0"
                f" AND ({self.keyed_passed('%s::integer')}))"
            )
        sql += " "
        if settle:  # settled first, as PostgresDriver.claim_and_settle says why
            sql += (
                f"SELECT 1, {driver.settled_as_claimed}, new_status,"
                " workflow_pending FROM settled UNION ALL "
            )
        sql += f"SELECT 0, {driver.claimed_columns}, NULL, NULL FROM marked"
        return sql + f" UNION ALL SELECT 2, {driver.nothing_claimed}, NULL, open FROM room"

    # -- claims under the lock ----------------------------------------------------------

    def settle_and_lock(
        self, request: ClaimRequest, window: datetime | None, settlements: Sequence[Settlement]
    ) -> tuple[Settled, QueueRow | None]:
        """The outcomes the claim carries written in the statement that takes the lock: one
        round trip for both. The claim's statement, after it, sees what they wrote."""
        if not settlements:
            return super().settle_and_lock(request, window, settlements)
        lock, lock_params = self.lock_statement(request, window)
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
        marked = bool(jobs) and self.lock_skippable(limits)  # the statement's ``touched``
        return Limited(jobs, short=full or keyed_short, marked=marked)

    @property
    def free_key(self) -> str:
        """A row's key has a slot free, by the statement's ``running`` (the key bound
        unqualified, to the row read): a keyed claim passes over the rows of full keys in
        its read, in a lane's window, so that they do not fill it."""
        qn = self.statements.qn
        key, limit = qn("concurrency_key"), qn("concurrency_limit")
        return (
            f"({key} IS NULL OR COALESCE({limit}, 1) >"
            f" COALESCE((SELECT n FROM running WHERE k = {key}), 0))"
        )

    def limited_claim_sql(
        self, request: ClaimRequest, limits: QueueLimits, row: QueueRow
    ) -> tuple[str, list[Any]]:
        """The statement and its parameters; it returns the claimed rows (at least one row:
        with nothing claimed, one of NULLs), each followed by the running total, the number
        of keys running (a job without a key counts as one), and the room. Where claims of
        the queue may skip the lock, one that takes jobs writes the queue's row in the same
        statement (``touched``: :attr:`~.limits.FlowControl.writes_claims`)."""
        statements = self.statements
        rows = self.driver.due_rows(request, self.free_key if limits.keyed else "")
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
        touch = self.lock_skippable(limits)
        if touch:
            params.append(request.queue)
        key = f"limited_claim:{limits.keyed}:{touch}{self.driver.claim_key(request)}"
        return statements.text(
            key, lambda: self.limited_claim_text(rows, limits.keyed, touch)
        ), params

    def limited_claim_text(self, rows: DueRows, keyed: bool, touch: bool) -> str:
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
            scan = "(SELECT CASE WHEN n > 0 THEN n * %s + %s ELSE 0 END FROM room)"
            sql += self.keyed_pick_ctes(rows, scan, "(SELECT n FROM room)")
        sql += f" {self.driver.take_ctes_text()}"
        if touch:
            queue = qn(Queue._meta.db_table)
            sql += (
                f", touched AS (UPDATE {queue} SET {qn('slot_wanted')} = {qn('slot_wanted')}"
                f" WHERE {qn('name')} = %s AND EXISTS (SELECT 1 FROM marked))"
            )
        # Whether a key's limit passed rows over: short of the room, a row read and not
        # taken; or a key full, whose rows the read passed over (claim_under()'s steps).
        passed = self.keyed_passed("(SELECT n FROM room)") if keyed else "FALSE"
        return (
            f"{sql} SELECT marked.*, totals.total, totals.keys, (SELECT n FROM room),"
            f" {passed} FROM totals LEFT JOIN marked ON TRUE"
        )

    def keyed_pick_ctes(self, rows: DueRows, scan: str, take: str) -> str:
        """``candidates`` (up to ``scan`` due rows, locked, their keys' rows passed over
        where full), ``ranked``, ``kept`` and ``picked`` (up to ``take`` of them): of a
        key, a row is taken while the key's running jobs (the statement's ``running``) and
        the rows of it before this one leave it a slot, and past the first rows (a
        parameter: those the free threads start at once), while a slot of the key stays
        free besides. Bound after ``rows``' and ``scan``'s parameters."""
        qn = self.statements.qn
        key, limit = qn("concurrency_key"), qn("concurrency_limit")
        ranked_order = "priority DESC, run_at, id"
        return (
            f" candidates AS (SELECT j.{qn('id')} AS id, j.{qn('priority')} AS priority,"
            f" j.{qn('run_at')} AS run_at, j.{key} AS k, COALESCE(j.{limit}, 1) AS key_limit"
            f" {rows.source}{rows.order} LIMIT {scan} FOR UPDATE OF j SKIP LOCKED),"
            " ranked AS (SELECT c.*, COALESCE(r.n, 0) AS held,"
            f" ROW_NUMBER() OVER (PARTITION BY c.k ORDER BY {ranked_order}) AS rank"
            " FROM candidates c LEFT JOIN running r ON r.k = c.k),"
            " kept AS (SELECT ranked.*,"
            f" ROW_NUMBER() OVER (ORDER BY {ranked_order}) - 1 AS place FROM ranked"
            " WHERE k IS NULL OR held + rank <= key_limit),"
            " picked AS (SELECT id FROM kept"
            " WHERE k IS NULL OR place < %s OR held + rank < key_limit"
            f" ORDER BY place LIMIT {take}),"
        )

    @staticmethod
    def keyed_passed(room: str) -> str:
        """A key's limit passed rows over: fewer picked than the candidates read, up to
        ``room``; or a key is full, whose rows the read passed over."""
        return (
            f"(SELECT COUNT(*) FROM picked) < LEAST((SELECT COUNT(*) FROM candidates), {room})"
            " OR EXISTS (SELECT 1 FROM running WHERE k IS NOT NULL AND n >= lim)"
        )
