"""Flow control in the database: paused queues, and claims under a queue's limits.

A part of the driver (``driver.flow``, a :class:`FlowControl`): it pauses and
resumes queues, and claims a queue that has limits. Every claim, limited or
not, passes over a paused queue: its candidate read and its write carry
:meth:`~.statements.Statements.paused_condition`, a probe of the queue's row by
its primary key, so a claim that starts after ``pause_queue()`` commits takes
nothing, on any worker.

A queue with limits (``QUEUES[name]["global_limit"]``, ``["rate_limit"]``, or jobs
declared with ``@job(concurrency=N)``) is claimed another way, in one
transaction of its own:

1. the queue's row is locked (``SELECT ... FOR UPDATE``; SQLite's claim holds
   the database's write lock already), so the claims of that queue run one at a
   time, whichever worker and host they come from: nothing can change what the
   next steps count until the claim commits. On PostgreSQL the same statement
   bounds the transaction (a client gone silent inside it is cut off);
2. the jobs of the queue running under a live lease are counted, by key: a
   job whose lease has lapsed holds no slot, whether or not it has been
   taken back yet (under a rate limit alone, nothing is counted). On MariaDB and
   SQLite the lock's statement counts them (:attr:`FlowControl.counts_in_lock`);
   PostgreSQL's counts in the statement after it;
3. the room left under the global limit and in the rate limit's window
   bounds the claim, and the jobs it would claim ahead of its idle threads
   are taken only with as many slots again to spare (:func:`claim_size`);
   due rows are read in claim order, passing keys that are full, and each is
   taken only while its key has a slot;
4. the rows are marked running and their attempts started, as any claim
   does; then, in one statement, the queue's row gets what changed: the rate
   window's count, and whether a worker now waits for a slot (``slot_wanted``,
   when a limit kept the claim short; taken off when the slots this claim's
   outcomes freed woke the queue's workers).

That is four statements and the commit, one more when the queue's row changes (on
MariaDB one more, which reads the marked rows back): limits cost the queues that have
them, and nothing to those without. PostgreSQL takes steps 2 to 4 in one statement
and writes the carried outcomes in the lock's (its ``flow_class``,
:mod:`.postgresql_limits`).
Outcomes carried by the claim are written first, in the same transaction, so the
slots they free count at once; they wake the queue's other workers only while its
row says one waits for a slot, so a limit that never binds sends no wake-up.

The steps of the claim it shares with a plain one (take the rows, write the
outcomes, wake a queue) are the driver's: it is given them (:class:`ClaimSteps`),
and imports nothing of :mod:`.base`.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from functools import partial
from typing import Any, NamedTuple, Protocol

from django.db import DatabaseError

from ..models import Queue
from ..text import first_line
from .records import (
    CANDIDATE_COLUMNS,
    ROW_ERRORS,
    Candidate,
    ClaimedJob,
    ClaimRequest,
    QueueLimits,
    Settled,
    Settlement,
    with_candidate,
)
from .statements import Statements

logger = logging.getLogger(__name__)

#: How many more due rows than it has room for a keyed claim reads, so that rows of full
#: keys at the head of the queue do not hide those behind them.
KEYED_SCAN_FACTOR = 2
KEYED_SCAN_EXTRA = 8
#: Under a rate limit alone, a claim under the lock that took all it asked for, with twice
#: as many starts left in the window, counts this many claims' worth more for its process:
#: the process's next claims in the window take those without the lock.
RESERVED_CLAIMS = 8


class Reserved(NamedTuple):
    """Starts of a rate window counted on the queue's row for this process's claims."""

    window: datetime
    starts: int


class LimitedCandidate(NamedTuple):
    """A due row as a limited claim reads it: a candidate, its key and that key's limit."""

    candidate: Candidate
    key: str | None
    key_limit: int | None


class QueueRow(NamedTuple):
    """The queue's row, as a limited claim locks it: paused, how many of its jobs have
    started in the rate window the claim falls in, and whether a claim of a later window
    has committed already (``behind``: this claim's time is stale)."""

    paused: bool
    used: int
    behind: bool = False
    #: A claim found the limit full since a slot last woke the queue's workers.
    wanted: bool = False
    #: The queue's jobs running under a live lease, by key, read with the lock (where the
    #: driver counts them in the lock's statement, and the limits need them); else None.
    running: Counter[str | None] | None = None


class Limited(NamedTuple):
    """What a limited claim took, and whether a limit kept it short (a slot is wanted)."""

    jobs: list[ClaimedJob]
    short: bool
    #: The claim's own statement wrote the queue's row (:attr:`FlowControl.writes_claims`).
    marked: bool = False


class ClaimSteps(Protocol):
    """What flow control asks of the driver's claim: its steps, inside a transaction."""

    def take(self, rows: Sequence[Candidate], request: ClaimRequest) -> list[ClaimedJob]: ...

    def claim_and_settle(
        self, request: ClaimRequest, settlements: Sequence[Settlement]
    ) -> tuple[list[ClaimedJob], Settled]: ...

    def take_one(self, row: Candidate, request: ClaimRequest) -> list[ClaimedJob]: ...

    def settle_rows(self, settlements: Sequence[Settlement]) -> Settled: ...

    def wake(self, queues: Iterable[str]) -> None: ...

    def transaction_bound(self) -> tuple[str, list[Any]]: ...


class FlowControl:
    """Paused queues, and the claims of a queue under its limits."""

    #: A claim under the lock that takes jobs of a queue whose claims may skip the lock
    #: (:meth:`lock_skippable`) writes the queue's row, even with nothing changed:
    #: PostgreSQL's claims that skip the lock tell by the row's version that one committed
    #: since their snapshot (:mod:`.postgresql_limits`).
    writes_claims = False
    #: The lock's statement also counts the queue's running jobs (one round trip less): a
    #: database whose statement reads what committed while it waited for the lock (MariaDB
    #: and MySQL read the locked row first, then the count, in ``READ COMMITTED``; SQLite's
    #: claim holds the write lock from its start). Not PostgreSQL, whose statement sees
    #: only what committed before it began.
    counts_in_lock = True

    def __init__(self, statements: Statements, steps: ClaimSteps) -> None:
        self.statements = statements
        self.steps = steps
        # The queues whose row this process has made sure of (:meth:`claim_limited`).
        self.queue_rows: set[str] = set()
        #: Queue -> the starts of its rate window counted for this process's claims and
        #: not yet taken (:meth:`take_reserved`).
        self.reserved: dict[str, Reserved] = {}
        self.reserving = threading.Lock()
        #: (queue, names) whose last claim here took nothing: the next one first asks,
        #: without a lock, whether anything is due (:meth:`claim_limited`).
        self.idle: set[tuple[str, tuple[str, ...] | None]] = set()

    # -- pause ------------------------------------------------------------------------

    def pause(self, queue: str, now: datetime) -> bool:
        """Pause ``queue`` at ``now`` (its row made if it has none): no claim takes its jobs
        until :meth:`resume`; False if it already was."""
        rows = Queue.objects.using(self.statements.using)
        if rows.filter(name=queue, paused_at__isnull=True).update(paused_at=now):
            return True
        self.make_queue_row(queue)
        return bool(rows.filter(name=queue, paused_at__isnull=True).update(paused_at=now))

    def resume(self, queue: str) -> bool:
        """Serve ``queue`` again and wake its workers (on commit); False if it was not
        paused."""
        resumed = bool(
            Queue.objects.using(self.statements.using)
            .filter(name=queue, paused_at__isnull=False)
            .update(paused_at=None)
        )
        if resumed:
            self.steps.wake([queue])
        return resumed

    def make_queue_row(self, queue: str) -> None:
        """The queue's row, unless another process has just made it; in a statement of its
        own, never inside a claim's transaction: there, on MariaDB and MySQL, the insert's
        shared lock on a row another process had just made, and the lock the claim takes
        next, would deadlock against another claim doing the same."""
        statements = self.statements
        with statements.connection.cursor() as cursor:
            cursor.execute(
                statements.insert_ignore_sql(
                    Queue._meta.db_table, ("name", "window_count", "slot_wanted")
                ),
                [queue, 0, False],
            )
        self.queue_rows.add(queue)

    # -- claims under limits ------------------------------------------------------

    def claim_limited(
        self, request: ClaimRequest, settlements: Sequence[Settlement] = (), freed: bool = False
    ) -> tuple[list[ClaimedJob], Settled]:
        """Write ``settlements``, then claim under the queue's limits, in one transaction;
        ``freed``: outcomes written just before, apart, freed slots (as ``settlements`` do).
        Under a rate limit alone, starts counted for this process already are claimed as a
        queue without limits is (:meth:`take_reserved`).

        A claim that writes nothing, after one of the same queue and names that took
        nothing, first asks whether any row is due (:meth:`any_due`): a worker polling a
        queue with nothing due takes neither the queue's lock nor, on SQLite, the write
        lock. The question is wider than the claim (no limit in it), never narrower."""
        idle = (request.queue, None if request.names is None else tuple(request.names))
        if not (settlements or freed) and idle in self.idle and not self.any_due(request):
            return [], Settled([])
        jobs, settled = self.claim_counted(request, settlements, freed)
        if jobs:
            self.idle.discard(idle)
        else:
            self.idle.add(idle)
        return jobs, settled

    def any_due(self, request: ClaimRequest) -> bool:
        """Whether the claim's queue has a row due that one of its names may take, read in
        a statement of its own, without a lock."""
        statements = self.statements
        due, params = statements.due_condition(request.queue, request.now, request.names)

        def build() -> str:
            return f"SELECT 1 FROM {statements.job_table} WHERE {due} LIMIT 1"

        with statements.hot_cursor() as cursor:
            cursor.execute(
                statements.text(f"any_due{statements.names_key(request.names)}", build), params
            )
            return cursor.fetchone() is not None

    def claim_counted(
        self, request: ClaimRequest, settlements: Sequence[Settlement], freed: bool
    ) -> tuple[list[ClaimedJob], Settled]:
        """:meth:`claim_limited`'s claim, whatever the last one took."""
        if reserved := self.take_reserved(request):
            jobs, settled = self.claim_reserved(request, settlements, reserved)
            if reserved >= request.limit or len(jobs) < reserved:
                return jobs, settled  # all it asked for, or the queue ran dry
            # The starts counted ahead ran out short of the claim: the rest under the lock.
            # Returned short, the claim would read as a queue run dry, and its worker would
            # sleep until the next window opens with jobs due and the window far from full.
            rest = replace(
                request,
                limit=request.limit - len(jobs),
                ahead=min(request.ahead, request.limit - len(jobs)),
            )
            again = partial(self.claim_limited, rest, freed=freed or bool(settlements))
            return self.and_then((jobs, settled), bool(settlements), request.queue, again)
        if request.queue not in self.queue_rows:
            self.make_queue_row(request.queue)
        settled = Settled([])
        one_by_one = False
        for _ in range(3):  # at most: a refused row (again one by one), a row deleted meanwhile
            granted: list[Reserved] = []
            try:
                written, claimed = self.statements.own_transaction(
                    partial(self.settle_and_claim, request, settlements, one_by_one, freed, granted)
                )
            except ROW_ERRORS:
                if settlements or one_by_one:
                    raise  # with outcomes: the caller settles apart, then claims again
                one_by_one = True  # a refused row: again, each in a savepoint, that one skipped
                continue
            if granted and not self.statements.connection.in_atomic_block:  # committed
                with self.reserving:
                    self.reserved[request.queue] = granted[0]
            if settlements:
                settled, settlements = written, ()
            if claimed is not None:
                return claimed, settled
            self.make_queue_row(request.queue)  # deleted since this process made it
        return [], settled

    @staticmethod
    def and_then(
        first: tuple[list[ClaimedJob], Settled],
        wrote: bool,
        queue: str,
        claim: Callable[[], tuple[list[ClaimedJob], Settled]],
    ) -> tuple[list[ClaimedJob], Settled]:
        """A claim in two transactions: what the first took and wrote (``first``,
        committed; ``wrote``: it wrote outcomes), with the jobs ``claim``, the second,
        takes. If the second fails after the first took jobs or wrote outcomes, those are
        returned all the same and the failure logged: raised, the jobs (marked running
        under this worker's lease) would be run by no one until their leases ran out, and
        the outcomes given back to be written again, as fenced out."""
        jobs, settled = first
        try:
            more, _ = claim()
        except DatabaseError as exc:
            if not (jobs or wrote):
                raise
            logger.warning(
                "the claim of queue %r under its lock failed (%s: %s); the %s job(s) claimed"
                " before it run",
                queue,
                type(exc).__name__,
                first_line(exc),
                len(jobs),
                extra={"event": "worker_error", "queue": queue},
            )
            return jobs, settled
        return jobs + more, settled

    def forget(self) -> None:
        """Forget what this process keeps of the queues' rows (a database replaced under
        it: a test's flush): which rows it made, the starts counted ahead for it."""
        self.queue_rows.clear()
        self.idle.clear()
        with self.reserving:
            self.reserved.clear()

    # -- a rate window's starts counted ahead for this process --------------------------

    def take_reserved(self, request: ClaimRequest) -> int:
        """How many of the starts counted for this process in the claim's rate window it
        takes (taken off the count; none under any other limit, or past the window)."""
        limits = request.limits
        if limits is None or limits.rate is None or not limits.rate_only:
            return 0
        window = limits.rate.window_start(request.now)
        with self.reserving:
            held = self.reserved.get(request.queue)
            if held is None or held.window != window:
                self.reserved.pop(request.queue, None)
                return 0
            taken = min(request.limit, held.starts)
            self.reserved[request.queue] = Reserved(window, held.starts - taken)
        return taken

    def claim_reserved(
        self, request: ClaimRequest, settlements: Sequence[Settlement], reserved: int
    ) -> tuple[list[ClaimedJob], Settled]:
        """A claim of up to ``reserved`` jobs whose starts the rate window counts already:
        as a queue without limits is claimed, without the lock; what it did not take is
        given back."""
        limits = request.limits
        assert limits is not None and limits.rate is not None
        jobs: list[ClaimedJob] = []
        try:
            jobs, settled = self.steps.claim_and_settle(
                replace(request, limits=None, limit=reserved, ahead=0), settlements
            )
        finally:
            window = limits.rate.window_start(request.now)
            with self.reserving:
                held = self.reserved.get(request.queue)
                if held is not None and held.window == window:
                    self.reserved[request.queue] = Reserved(
                        window, held.starts + reserved - len(jobs)
                    )
        return jobs, settled

    def reserve(self, request: ClaimRequest, row: QueueRow, taken: int) -> int:
        """How many starts more a claim under the lock counts for its process's next claims
        in the window (:data:`RESERVED_CLAIMS`): under a rate limit alone, once it took all
        it asked for, while twice as many are left; else none."""
        limits = request.limits
        if limits is None or limits.rate is None or not limits.rate_only or taken < request.limit:
            return 0
        left = limits.rate.jobs - row.used - taken
        reserved = min(RESERVED_CLAIMS * request.limit, left // 2)
        return reserved if reserved >= request.limit else 0

    def settle_and_claim(
        self,
        request: ClaimRequest,
        settlements: Sequence[Settlement],
        one_by_one: bool,
        freed: bool = False,
        granted: list[Reserved] | None = None,
    ) -> tuple[Settled, list[ClaimedJob] | None]:
        """A limited claim's transaction: ``settlements`` written, then the claim's
        statements under the queue's lock (None if the queue has no row to lock); the starts
        it counted for this process's next claims appended to ``granted``."""
        window = self.window(request)
        settled, row = self.settle_and_lock(request, window, settlements)
        freed = freed or bool(settlements)
        return settled, self.claim_locked(request, window, row, one_by_one, freed, granted)

    def settle_and_lock(
        self, request: ClaimRequest, window: datetime | None, settlements: Sequence[Settlement]
    ) -> tuple[Settled, QueueRow | None]:
        """``settlements`` written, then the queue's row locked (None if it has none)."""
        settled = self.steps.settle_rows(settlements) if settlements else Settled([])
        return settled, self.lock_queue(request, window)

    @staticmethod
    def window(request: ClaimRequest) -> datetime | None:
        """The start of the rate window the claim falls in; None without a rate limit."""
        limits = request.limits
        assert limits is not None
        return limits.rate.window_start(request.now) if limits.rate else None

    def claim_in_queue(
        self, request: ClaimRequest, one_by_one: bool = False, freed: bool = False
    ) -> list[ClaimedJob] | None:
        """The claim's statements under the queue's lock, inside the caller's transaction;
        None if the queue has no row to lock. ``one_by_one``: each row taken in a savepoint
        of its own, one the database refuses logged and skipped (as a plain claim does).
        ``freed``: outcomes written before it freed slots; if a worker waits for one (the
        queue's row says so), the queue's workers are woken on commit."""
        window = self.window(request)
        row = self.lock_queue(request, window)
        return self.claim_locked(request, window, row, one_by_one, freed)

    def claim_locked(
        self,
        request: ClaimRequest,
        window: datetime | None,
        row: QueueRow | None,
        one_by_one: bool,
        freed: bool,
        granted: list[Reserved] | None = None,
    ) -> list[ClaimedJob] | None:
        """:meth:`claim_in_queue` once the queue's row is locked (``row``; None: no row)."""
        if row is None:
            return None
        limits = request.limits
        assert limits is not None
        if freed and row.wanted:
            self.steps.wake([request.queue])  # the waiting workers hear it on commit
        claimed = self.claim_under(request, row, one_by_one)
        changed: dict[str, Any] = {}
        if window is not None and claimed.jobs:  # the rate window's count
            reserved = 0
            if granted is not None:  # a claim of its own: it can count starts ahead
                reserved = self.reserve(request, row, len(claimed.jobs))
                if reserved:
                    granted.append(Reserved(window, reserved))
            changed["window_start"] = self.statements.adapt(window)
            changed["window_count"] = row.used + len(claimed.jobs) + reserved
        wanted = (row.wanted and not freed) or claimed.short
        # Where no claim skips the lock (a rate limit), no row to write.
        written = self.writes_claims and self.lock_skippable(limits) and not claimed.marked
        if wanted != row.wanted or (claimed.jobs and written):
            changed["slot_wanted"] = wanted
        if changed:
            self.update_queue_row(request.queue, changed)
        return claimed.jobs

    def lock_skippable(self, limits: QueueLimits) -> bool:
        """Whether claims of a queue under ``limits`` may skip the queue's lock: none here
        (:mod:`.postgresql_limits` says where)."""
        return False

    def claim_under(self, request: ClaimRequest, row: QueueRow, one_by_one: bool) -> Limited:
        """The claim itself, the queue's row locked: its jobs, and whether the queue's limit
        (the global one, or a key's) kept it short of what its free threads could start."""
        limits = request.limits
        assert limits is not None
        if row.paused or row.behind:
            # Behind: a claim read its time before another's of the next window, which took
            # the lock first. Counted in its own window, its jobs would start in a window
            # already counted; in the newer one, they would start before it: it claims
            # nothing, and the next claim reads a fresh time. A window never moves backwards.
            return Limited([], short=False)
        running: Counter[str | None] = Counter()
        if limits.global_limit is not None or limits.keyed:  # a rate alone needs no count
            running = row.running if row.running is not None else self.running_by_key(request)
        free: int | None = None  # the room under the global limit and in the rate window
        if limits.global_limit is not None:
            free = limits.global_limit - sum(running.values())
        if limits.rate is not None:
            free = min(free if free is not None else limits.rate.jobs, limits.rate.jobs - row.used)
        room = claim_size(request, free)
        now_wanted = request.limit - request.ahead  # what its free threads would start
        full = limits.global_limit is not None and (
            limits.global_limit - sum(running.values()) < now_wanted
        )
        if room <= 0:
            return Limited([], short=full)
        rows, passed = self.limited_candidates(request, limits, running, room)
        if one_by_one:
            claimed = [job for row in rows for job in self.steps.take_one(row, request)]
        else:
            claimed = self.steps.take(rows, request) if rows else []
        # A key's limit passed rows over (rows read and not taken, or a key full, whose rows
        # the read passed over): then a slot freed of it is wanted too. Not a claim that
        # found none of its names' jobs while no key is full (a lane with nothing due).
        keyed_short = (
            limits.keyed
            and len(claimed) < now_wanted
            and bool(running)
            and (passed or self.a_key_is_full(request))
        )
        return Limited(claimed, short=full or keyed_short)

    def a_key_is_full(self, request: ClaimRequest) -> bool:
        """A key of the queue has as many jobs running under a live lease as its limit: its
        due rows are passed over in the read."""
        qn = self.statements.qn
        key, limit = qn("concurrency_key"), qn("concurrency_limit")
        return bool(
            self.running_groups(
                request,
                "a_key_is_full",
                "1",
                f" AND {key} IS NOT NULL",
                f" HAVING COUNT(*) >= MIN(COALESCE({limit}, 1)) LIMIT 1",
            )
        )

    def lock_queue(self, request: ClaimRequest, window: datetime | None) -> QueueRow | None:
        """Lock the claim's queue's row for the rest of the transaction; None if it has none.
        SQLite has no row locks (``row_lock`` is empty): its claim holds the database's write
        lock already. The window is compared in SQL, so no datetime is read back."""
        sql, params = self.lock_statement(request, window)
        with self.statements.hot_cursor() as cursor:
            cursor.execute(sql, params)
            found = cursor.fetchone()
        if found is None:
            return None
        row = self.queue_row(found)
        counted = self.counted_in_lock(request)
        if counted is None:
            return row
        return row._replace(running=self.running_read(counted, found[-5]))

    def counted_in_lock(self, request: ClaimRequest) -> str | None:
        """What the lock's statement counts of the queue's running jobs (where it counts
        them, :attr:`counts_in_lock`): ``"keys"`` under a key's limit, ``"total"`` under a
        global one; None under a rate alone, which needs no count."""
        limits = request.limits
        if not self.counts_in_lock or limits is None:
            return None
        if limits.keyed:
            return "keys"
        return "total" if limits.global_limit is not None else None

    @staticmethod
    def running_read(counted: str, value: Any) -> Counter[str | None]:
        """The running jobs by key, from the lock's column: a count (``"total"``), or the
        JSON array of each running job's key (``"keys"``; NULL where none runs)."""
        if counted == "total":
            return Counter({None: int(value or 0)})
        keys = json.loads(value) if value else []
        return Counter(keys)

    def lock_statement(
        self, request: ClaimRequest, window: datetime | None
    ) -> tuple[str, list[Any]]:
        """:meth:`lock_queue`'s statement: the transaction's bound where the driver has one,
        then the queue's running jobs where it counts them (:meth:`counted_in_lock`), then
        the four columns :meth:`queue_row` reads. The count is a subquery of the locked row,
        so it runs once the row is locked."""
        statements = self.statements
        qn = statements.qn
        start, count = qn("window_start"), qn("window_count")
        bound, bound_params = self.steps.transaction_bound()
        counted = self.counted_in_lock(request)
        queue, job = qn(Queue._meta.db_table), statements.job_table

        def running() -> str:
            if counted is None:
                return ""
            what = (
                f"{statements.json_array_agg}({qn('concurrency_key')})"
                if counted == "keys"
                else "COUNT(*)"
            )
            return (
                f"(SELECT {what} FROM {job} WHERE {statements.running_guard(job)}"
                f" AND {job}.{qn('queue')} = {queue}.{qn('name')}"
                f" AND {qn('lease_expires_at')} > %s) AS running, "
            )

        def build() -> str:
            return (
                f"SELECT {bound + ' AS bound, ' if bound else ''}{running()}"
                f"CASE WHEN {qn('paused_at')} IS NULL THEN 0 ELSE 1 END AS paused,"
                f" CASE WHEN {start} = %s THEN {count} ELSE 0 END AS used,"
                f" CASE WHEN {start} > %s THEN 1 ELSE 0 END AS behind,"
                f" CASE WHEN {qn('slot_wanted')} THEN 1 ELSE 0 END AS wanted"
                f" FROM {queue} WHERE {qn('name')} = %s{statements.row_lock}"
            )

        adapted = statements.adapt(window)
        counting = [statements.adapt(request.now)] if counted else []
        sql = statements.text(f"lock_queue:{bool(bound)}:{counted}", build)
        return sql, [*bound_params, *counting, adapted, adapted, request.queue]

    @staticmethod
    def queue_row(found: Sequence[Any]) -> QueueRow:
        """The queue's row as :meth:`lock_statement` reads it (its last four columns)."""
        paused, used, behind, wanted = found[-4:]
        return QueueRow(bool(paused), int(used), bool(behind), bool(wanted))

    def update_queue_row(self, queue: str, values: dict[str, Any]) -> None:
        """Write ``values`` (column -> value) on the queue's row, which the claim holds
        locked: the rate window's count, whether a worker waits for a slot."""
        statements = self.statements
        qn = statements.qn
        columns = sorted(values)

        def build() -> str:
            sets = ", ".join(f"{qn(column)} = %s" for column in columns)
            return f"UPDATE {qn(Queue._meta.db_table)} SET {sets} WHERE {qn('name')} = %s"

        with statements.hot_cursor() as cursor:
            cursor.execute(
                statements.text(f"update_queue_row:{','.join(columns)}", build),
                [*(values[column] for column in columns), queue],
            )

    def wake_freed(self, queues: Iterable[str]) -> list[str]:
        """Outcomes written apart (not by a claim) freed slots of ``queues``: of those a
        worker waits for a slot of (their rows say so), the workers are woken, on commit,
        and the mark is taken off; those queues, for this process to wake its own."""
        statements = self.statements
        qn = statements.qn
        table = qn(Queue._meta.db_table)
        names = sorted(set(queues))
        if not names:
            return []
        marks = ", ".join(["%s"] * len(names))
        with statements.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {qn('name')} FROM {table} WHERE {qn('slot_wanted')}"
                f" AND {qn('name')} IN ({marks})",
                names,
            )
            wanted = [name for (name,) in cursor.fetchall()]
            if wanted:
                cursor.execute(
                    f"UPDATE {table} SET {qn('slot_wanted')} = %s"
                    f" WHERE {qn('name')} IN ({', '.join(['%s'] * len(wanted))})",
                    [False, *wanted],
                )
        if wanted:
            self.steps.wake(wanted)
        return wanted

    def running_by_key(self, request: ClaimRequest) -> Counter[str | None]:
        """The queue's jobs running under a live lease at the claim's time, by key."""
        key = self.statements.qn("concurrency_key")
        rows = self.running_groups(request, "running_by_key", f"{key}, COUNT(*)")
        return Counter({key: int(count) for key, count in rows})

    def running_groups(
        self, request: ClaimRequest, name: str, columns: str, where: str = "", tail: str = ""
    ) -> list[tuple[Any, ...]]:
        """``columns`` of the queue's jobs running under a live lease at the claim's time, in
        groups by key (``where``: more conditions; ``tail``: what follows the grouping); the
        statement's text kept as ``name``."""
        statements = self.statements
        qn, job = statements.qn, statements.job_table

        def build() -> str:
            return (
                f"SELECT {columns} FROM {job}"
                f" WHERE {statements.running_guard(job)} AND {qn('queue')} = %s"
                f" AND {qn('lease_expires_at')} > %s{where}"
                f" GROUP BY {qn('concurrency_key')}{tail}"
            )

        with statements.hot_cursor() as cursor:
            cursor.execute(
                statements.text(name, build), [request.queue, statements.adapt(request.now)]
            )
            return list(cursor.fetchall())

    def limited_candidates(
        self,
        request: ClaimRequest,
        limits: QueueLimits,
        running: Counter[str | None],
        room: int,
    ) -> tuple[list[Candidate], bool]:
        """Up to ``room`` due rows in claim order, each key within its limit (counting the
        rows taken before it in this claim); and whether a key's limit passed over a row
        read."""
        statements = self.statements
        qn = statements.qn
        due, params = statements.due_condition(request.queue, request.now, request.names)
        busy = sorted(key for key in running if key is not None) if limits.keyed else []
        # The rows of full keys are passed over in the read itself.
        params += [value for name in busy for value in (name, running[name])]
        scan = room * KEYED_SCAN_FACTOR + KEYED_SCAN_EXTRA if limits.keyed else room

        def build() -> str:
            columns = ", ".join(qn(column) for column in CANDIDATE_COLUMNS)
            key, limit = qn("concurrency_key"), qn("concurrency_limit")
            sql = f"SELECT {columns}, {key}, {limit} FROM {statements.job_table} WHERE {due}"
            if busy:
                cases = " WHEN %s THEN %s" * len(busy)
                sql += (
                    f" AND ({key} IS NULL OR COALESCE({limit}, 1) > CASE {key}{cases} ELSE 0 END)"
                )
            return sql + f" ORDER BY {statements.claim_order} LIMIT %s{statements.lock_suffix}"

        with statements.hot_cursor() as cursor:
            cursor.execute(
                statements.text(
                    f"limited_candidates:{len(busy)}{statements.names_key(request.names)}", build
                ),
                [*params, scan],
            )
            read = [with_candidate(LimitedCandidate, row) for row in cursor.fetchall()]
        taken = within_key_limits(read, running, room, spare_after=request.limit - request.ahead)
        # Short of the room, every row read and not taken was passed over by its key.
        return taken, len(taken) < min(len(read), room)


def claim_size(request: ClaimRequest, free: int | None) -> int:
    """How many jobs a limited claim takes, with ``free`` slots left under the queue's
    global limit and in its rate window (None: it has neither): all it asks for while as
    many slots again as it claims ahead stay free for the queue's other workers; else only
    those its free threads start at once. A job claimed ahead waits for a thread, holding
    its slot: near the limit that slot is better taken by a worker that runs it now."""
    if free is None or free - request.limit >= request.ahead:
        return request.limit
    return min(request.limit - request.ahead, free)


def within_key_limits(
    read: Sequence[LimitedCandidate],
    running: Counter[str | None],
    room: int,
    spare_after: int | None = None,
) -> list[Candidate]:
    """Up to ``room`` of the rows ``read``, in order, each taken only while its key has a
    slot (``running``: the key's jobs running already). Past the first ``spare_after`` rows
    (those claimed ahead), a row of a key is taken only while a slot of its key stays free."""
    taken: list[Candidate] = []
    counts = Counter(running)
    for row in read:
        if row.key is not None:
            ahead = spare_after is not None and len(taken) >= spare_after
            if counts[row.key] + (1 if ahead else 0) >= (row.key_limit or 1):
                continue
            counts[row.key] += 1
        taken.append(row.candidate)
        if len(taken) == room:
            break
    return taken
