"""Flow control in the database: paused queues, and claims under a queue's limits.

Every claim, limited or not, passes over a paused queue: its candidate read
and its write carry :func:`paused_condition`, a probe of the
queue's row by its primary key, so a claim that starts after
``pause_queue()`` commits takes nothing, on any worker.

A queue with limits (``QUEUES[name]["global_limit"]``, ``["rate_limit"]``, or jobs
declared with ``@job(concurrency=N)``) is claimed another way, in one
transaction of its own:

1. the queue's row is locked (``SELECT ... FOR UPDATE``; SQLite's claim holds
   the database's one write lock already), so the claims of that queue run
   one at a time, whichever worker and host they come from: nothing can
   change what the next steps count until the claim commits;
2. the jobs of the queue running under a live lease are counted, by key: a
   job whose lease has lapsed holds no slot, whether or not it has been
   taken back yet;
3. the room left under the global limit and in the rate limit's window
   bounds the claim; due rows are read in claim order, passing keys that are
   full, and each is taken only while its key has a slot;
4. the rows are marked running and their attempts started, as any claim
   does, and the rate window's count is written on the queue's row.

That is five statements and the commit (six with a rate limit; on PostgreSQL
one more, which bounds the transaction, and on MariaDB one more, which reads
the marked rows back), where PostgreSQL's plain claim is one statement:
limits cost the queues that have them, and nothing to those without.
Outcomes carried by the claim are written first, in the same transaction, so
the slots they free count at once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

from ..models import Queue
from .records import (
    CANDIDATE_COLUMNS,
    ROW_ERRORS,
    Candidate,
    ClaimedJob,
    ClaimRequest,
    QueueLimits,
    Settled,
    Settlement,
    as_candidate,
)

if TYPE_CHECKING:
    from .base import Driver

#: How many more due rows than it has room for a keyed claim reads, so that rows of full
#: keys at the head of the queue do not hide those behind them.
KEYED_SCAN_FACTOR = 4
KEYED_SCAN_EXTRA = 32


class LimitedCandidate(NamedTuple):
    """A due row as a limited claim reads it: a candidate's columns, its key and that
    key's limit."""

    id: int
    name: str
    queue: str
    payload: Any
    attempt: int
    attempts_used: int
    max_attempts: int
    key: str | None
    key_limit: int | None


class QueueRow(NamedTuple):
    """The queue's row, as a limited claim locks it: paused, how many of its jobs have
    started in the rate window the claim falls in, and whether a claim of a later window
    has committed already (``behind``: this claim's time is stale)."""

    paused: bool
    used: int
    behind: bool = False


# -- pause ----------------------------------------------------------------------------


def paused_condition(driver: Driver) -> str:
    """The condition a claim carries: the queue (bound once more) is not paused."""
    qn = driver.qn
    table = driver.qn(Queue._meta.db_table)
    return (
        f"NOT EXISTS (SELECT 1 FROM {table} WHERE {qn('name')} = %s"
        f" AND {qn('paused_at')} IS NOT NULL)"
    )


def pause(driver: Driver, queue: str, now: datetime) -> bool:
    """Pause ``queue`` at ``now`` (its row made if it has none); False if it already was."""
    rows = Queue.objects.using(driver.using)
    if rows.filter(name=queue, paused_at__isnull=True).update(paused_at=now):
        return True
    make_queue_row(driver, queue)
    return bool(rows.filter(name=queue, paused_at__isnull=True).update(paused_at=now))


def resume(driver: Driver, queue: str) -> bool:
    """Serve ``queue`` again and wake its workers (on commit); False if it was not paused."""
    resumed = bool(
        Queue.objects.using(driver.using)
        .filter(name=queue, paused_at__isnull=False)
        .update(paused_at=None)
    )
    if resumed:
        driver.wake([queue])
    return resumed


def make_queue_row(driver: Driver, queue: str) -> None:
    """The queue's row, unless another process has just made it; in a statement of its own,
    never inside a claim's transaction: there, on MariaDB and MySQL, the insert's shared
    lock on a row another process had just made, and the lock the claim takes next, would
    deadlock against another claim doing the same."""
    with driver.connection.cursor() as cursor:
        cursor.execute(
            driver.insert_ignore_sql(Queue._meta.db_table, ("name", "window_count")),
            [queue, 0],
        )
    driver.queue_rows.add(queue)


# -- claims under limits ----------------------------------------------------------


def claim_limited(
    driver: Driver, request: ClaimRequest, settlements: Sequence[Settlement] = ()
) -> tuple[list[ClaimedJob], Settled]:
    """Write ``settlements``, then claim under the queue's limits, in one transaction."""
    if request.queue not in driver.queue_rows:
        make_queue_row(driver, request.queue)
    settled = Settled([])
    one_by_one = False
    for _ in range(3):  # at most: a refused row (again one by one), a row deleted meanwhile
        try:
            written, claimed = driver.own_transaction(
                partial(settle_and_claim, driver, request, settlements, one_by_one)
            )
        except ROW_ERRORS:
            if settlements or one_by_one:
                raise  # with outcomes: the caller settles apart, then claims again
            one_by_one = True  # a refused row: again, each row in a savepoint, that one skipped
            continue
        if settlements:
            settled, settlements = written, ()
        if claimed is not None:
            return claimed, settled
        make_queue_row(driver, request.queue)  # deleted since this process made it
    return [], settled


def settle_and_claim(
    driver: Driver, request: ClaimRequest, settlements: Sequence[Settlement], one_by_one: bool
) -> tuple[Settled, list[ClaimedJob] | None]:
    """A limited claim's transaction: ``settlements`` written, then the claim's statements
    under the queue's lock (None if the queue has no row to lock)."""
    settled = Settled([])
    if settlements:
        settled = driver.settle_rows(settlements)
        # Their slots are free: the queue's other workers hear it on commit.
        driver.wake([request.queue])
    return settled, claim_in_queue(driver, request, one_by_one)


def claim_in_queue(
    driver: Driver, request: ClaimRequest, one_by_one: bool = False
) -> list[ClaimedJob] | None:
    """The claim's statements under the queue's lock, inside the caller's transaction;
    None if the queue has no row to lock. ``one_by_one``: each row taken in a savepoint of
    its own, one the database refuses logged and skipped (as a plain claim does)."""
    limits = request.limits
    assert limits is not None
    driver.bound_transaction()
    window = limits.rate.window_start(request.now) if limits.rate else None
    row = lock_queue(driver, request.queue, window)
    if row is None:
        return None
    if row.paused or row.behind:
        # Behind: a claim read its time before another's of the next window, which took the
        # lock first. Counted in its own window, its jobs would start in a window already
        # counted; in the newer one, they would start before it: it claims nothing, and the
        # next claim reads a fresh time. A window never moves backwards.
        return []
    running = running_by_key(driver, request)
    room = request.limit
    if limits.global_limit is not None:
        room = min(room, limits.global_limit - sum(running.values()))
    if limits.rate is not None:
        room = min(room, limits.rate.jobs - row.used)
    if room <= 0:
        return []
    rows = limited_candidates(driver, request, limits, running, room)
    if one_by_one:
        claimed = [job for row in rows for job in driver.take_one(row, request)]
    else:
        claimed = driver.take(rows, request) if rows else []
    if window is not None and claimed:
        count_in_window(driver, request.queue, window, row.used + len(claimed))
    return claimed


def lock_queue(driver: Driver, queue: str, window: datetime | None) -> QueueRow | None:
    """Lock the queue's row for the rest of the transaction; None if it has none. SQLite
    has no row locks (``row_lock`` is empty): its claim holds the database's write lock
    already. The window is compared in SQL, so no datetime is read back."""
    qn = driver.qn
    start, count = qn("window_start"), qn("window_count")

    def build() -> str:
        return (
            f"SELECT CASE WHEN {qn('paused_at')} IS NULL THEN 0 ELSE 1 END,"
            f" CASE WHEN {start} = %s THEN {count} ELSE 0 END,"
            f" CASE WHEN {start} > %s THEN 1 ELSE 0 END"
            f" FROM {qn(Queue._meta.db_table)} WHERE {qn('name')} = %s{driver.row_lock}"
        )

    adapted = driver.adapt(window)
    with driver.hot_cursor() as cursor:
        cursor.execute(driver.text("lock_queue", build), [adapted, adapted, queue])
        found = cursor.fetchone()
    if found is None:
        return None
    paused, used, behind = found
    return QueueRow(bool(paused), int(used), bool(behind))


def running_by_key(driver: Driver, request: ClaimRequest) -> Counter[str | None]:
    """The queue's jobs running under a live lease at the claim's time, by key."""
    qn = driver.qn

    def build() -> str:
        return (
            f"SELECT {qn('concurrency_key')}, COUNT(*) FROM {driver.job_table}"
            f" WHERE {driver.running_guard(driver.job_table)} AND {qn('queue')} = %s"
            f" AND {qn('lease_expires_at')} > %s GROUP BY {qn('concurrency_key')}"
        )

    with driver.hot_cursor() as cursor:
        cursor.execute(
            driver.text("running_by_key", build), [request.queue, driver.adapt(request.now)]
        )
        return Counter({key: int(count) for key, count in cursor.fetchall()})


def limited_candidates(
    driver: Driver,
    request: ClaimRequest,
    limits: QueueLimits,
    running: Counter[str | None],
    room: int,
) -> list[Candidate]:
    """Up to ``room`` due rows in claim order, each key within its limit (counting the
    rows taken before it in this claim)."""
    qn = driver.qn
    due, params = driver.due_condition(request.queue, request.now)
    busy = sorted(key for key in running if key is not None) if limits.keyed else []
    # The rows of full keys are passed over in the read itself.
    params += [value for name in busy for value in (name, running[name])]
    scan = room * KEYED_SCAN_FACTOR + KEYED_SCAN_EXTRA if limits.keyed else room

    def build() -> str:
        columns = ", ".join(qn(column) for column in CANDIDATE_COLUMNS)
        key, limit = qn("concurrency_key"), qn("concurrency_limit")
        sql = f"SELECT {columns}, {key}, {limit} FROM {driver.job_table} WHERE {due}"
        if busy:
            cases = " WHEN %s THEN %s" * len(busy)
            sql += f" AND ({key} IS NULL OR COALESCE({limit}, 1) > CASE {key}{cases} ELSE 0 END)"
        return sql + f" ORDER BY {driver.claim_order} LIMIT %s{driver.lock_suffix}"

    with driver.hot_cursor() as cursor:
        cursor.execute(driver.text(f"limited_candidates:{len(busy)}", build), [*params, scan])
        read = [LimitedCandidate._make(row) for row in cursor.fetchall()]
    taken: list[Candidate] = []
    counts = Counter(running)
    for row in read:
        if row.key is not None:
            if counts[row.key] >= (row.key_limit or 1):
                continue
            counts[row.key] += 1
        taken.append(as_candidate(row))
        if len(taken) == room:
            break
    return taken


def count_in_window(driver: Driver, queue: str, window: datetime, count: int) -> None:
    """The rate window's count, on the row the claim holds locked."""
    qn = driver.qn

    def build() -> str:
        return (
            f"UPDATE {qn(Queue._meta.db_table)} SET {qn('window_start')} = %s,"
            f" {qn('window_count')} = %s WHERE {qn('name')} = %s"
        )

    with driver.hot_cursor() as cursor:
        cursor.execute(driver.text("count_in_window", build), [driver.adapt(window), count, queue])
