"""Flow control in the database: paused queues, and claims under a queue's limits.

Every claim, limited or not, passes over a paused queue: its candidate read
and its write carry :meth:`QueueControl.paused_condition`, a probe of the
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

That is five statements and the commit (four without a rate limit), where
PostgreSQL's plain claim is one: limits cost the queues that have them, and
nothing to those without. Outcomes carried by the claim are written first,
in the same transaction, so the slots they free count at once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from ..models import Queue
from .records import (
    CANDIDATE_COLUMNS,
    Candidate,
    ClaimedJob,
    ClaimRequest,
    QueueLimits,
    Settled,
    Settlement,
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

    @property
    def candidate(self) -> Candidate:
        return Candidate(
            self.id,
            self.name,
            self.queue,
            self.payload,
            self.attempt,
            self.attempts_used,
            self.max_attempts,
        )


class QueueRow(NamedTuple):
    """The queue's row, as a limited claim locks it."""

    paused_at: datetime | None
    window_start: datetime | None
    window_count: int


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
    ensure_queue_row(driver, queue)
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


def paused_queues(driver: Driver) -> dict[str, datetime]:
    """Every paused queue, and since when."""
    rows = Queue.objects.using(driver.using).paused().values_list("name", "paused_at")
    return {name: at for name, at in rows if at is not None}


def ensure_queue_row(driver: Driver, queue: str) -> None:
    """The queue's row, made unless another process has just made it."""
    with driver.connection.cursor() as cursor:
        cursor.execute(
            driver.insert_ignore_sql(Queue._meta.db_table, ("name", "window_count")),
            [queue, 0],
        )


# -- claims under limits ----------------------------------------------------------


def claim_limited(
    driver: Driver, request: ClaimRequest, settlements: Sequence[Settlement] = ()
) -> tuple[list[ClaimedJob], Settled]:
    """Write ``settlements``, then claim under the queue's limits, in one transaction."""
    if request.queue not in driver.queue_rows:
        make_queue_row(driver, request.queue)
    settled = Settled([])
    for _ in range(2):
        with driver.write_transaction():
            if settlements:
                settled, settlements = driver.settle_rows(settlements), ()
            claimed = claim_in_queue(driver, request)
        if claimed is not None:
            return claimed, settled
        make_queue_row(driver, request.queue)  # deleted since this process made it
    return [], settled


def make_queue_row(driver: Driver, queue: str) -> None:
    """The queue's row, made before a claim's transaction, in a statement of its own: made
    inside it, on MariaDB and MySQL, the insert's shared lock on a row another process has
    just made, and the lock the claim takes next, would deadlock against another claim
    doing the same."""
    ensure_queue_row(driver, queue)
    driver.queue_rows.add(queue)


def claim_in_queue(driver: Driver, request: ClaimRequest) -> list[ClaimedJob] | None:
    """The claim's statements under the queue's lock, inside the caller's transaction;
    None if the queue has no row to lock."""
    limits = request.limits
    assert limits is not None
    driver.bound_transaction()
    row = lock_queue(driver, request.queue)
    if row is None:
        return None
    if row.paused_at is not None:
        return []
    running = running_by_key(driver, request)
    room = request.limit
    if limits.global_limit is not None:
        room = min(room, limits.global_limit - sum(running.values()))
    window = limits.rate.window_start(request.now) if limits.rate else None
    used = row.window_count if window is not None and row.window_start == window else 0
    if limits.rate is not None:
        room = min(room, limits.rate.jobs - used)
    if room <= 0:
        return []
    rows = limited_candidates(driver, request, limits, running, room)
    claimed = driver.take(rows, request) if rows else []
    if window is not None and claimed:
        count_in_window(driver, request.queue, window, used + len(claimed))
    return claimed


def lock_queue(driver: Driver, queue: str) -> QueueRow | None:
    """Lock the queue's row for the rest of the transaction; None if it has none. SQLite
    has no row locks: its claim holds the database's write lock already."""
    rows = Queue.objects.using(driver.using).select_for_update().filter(name=queue)
    found = rows.values_list("paused_at", "window_start", "window_count").first()
    return None if found is None else QueueRow(*found)


def running_by_key(driver: Driver, request: ClaimRequest) -> Counter[str | None]:
    """The queue's jobs running under a live lease at the claim's time, by key."""
    qn = driver.qn
    sql = (
        f"SELECT {qn('concurrency_key')}, COUNT(*) FROM {driver.job_table}"
        f" WHERE {driver.running_guard(driver.job_table)} AND {qn('queue')} = %s"
        f" AND {qn('lease_expires_at')} > %s GROUP BY {qn('concurrency_key')}"
    )
    with driver.connection.cursor() as cursor:
        cursor.execute(sql, [request.queue, driver.adapt(request.now)])
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
    columns = ", ".join(qn(column) for column in CANDIDATE_COLUMNS)
    due, params = driver.due_condition(request.queue, request.now)
    sql = (
        f"SELECT {columns}, {qn('concurrency_key')}, {qn('concurrency_limit')}"
        f" FROM {driver.job_table} WHERE {due}"
    )
    busy = sorted(key for key in running if key is not None)
    if limits.keyed and busy:  # the rows of full keys are passed over in the read itself
        key = qn("concurrency_key")
        sql += (
            f" AND ({key} IS NULL OR COALESCE({qn('concurrency_limit')}, 1) > CASE {key}"
            + " WHEN %s THEN %s" * len(busy)
            + " ELSE 0 END)"
        )
        params += [value for name in busy for value in (name, running[name])]
    scan = room * KEYED_SCAN_FACTOR + KEYED_SCAN_EXTRA if limits.keyed else room
    sql += f" ORDER BY {driver.claim_order} LIMIT %s{driver.lock_suffix}"
    with driver.connection.cursor() as cursor:
        cursor.execute(sql, [*params, scan])
        read = [LimitedCandidate._make(row) for row in cursor.fetchall()]
    taken: list[Candidate] = []
    counts = Counter(running)
    for row in read:
        if row.key is not None:
            if counts[row.key] >= (row.key_limit or 1):
                continue
            counts[row.key] += 1
        taken.append(row.candidate)
        if len(taken) == room:
            break
    return taken


def count_in_window(driver: Driver, queue: str, window: datetime, count: int) -> None:
    Queue.objects.using(driver.using).filter(name=queue).update(
        window_start=window, window_count=count
    )
