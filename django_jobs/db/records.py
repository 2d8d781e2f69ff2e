"""The records the runtime and the database drivers speak in: plain data.

A :class:`ClaimRequest` asks a driver for due jobs; a :class:`Candidate` is a
due row as a claim reads it (its columns, :data:`CANDIDATE_COLUMNS`, declared
here once: a wider row a driver reads holds a candidate, :func:`with_candidate`),
and a :class:`ClaimedJob` is what a claim returns; a :class:`Settlement` is what
:func:`django_jobs.outcomes.decide` makes of an attempt's end and what the
driver writes, and :class:`Settled` what the settle answers (and so how each
settlement was written). A renewal
carries :class:`RenewRow` rows (with a handler's ``Progress``) in a
:class:`Renewal` and answers :class:`Renewed`. What a settle binds of a
settlement, by the names its statements give the columns, is built in one place
(:func:`settlement_values`), for every driver. Rows a driver reads are read into named tuples,
never by position.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from functools import cached_property
from typing import Any, NamedTuple, TypeVar

from django.db import DataError, IntegrityError

from ..display import format_latency
from ..models import AttemptOutcome, JobStatus
from ..progress import Progress

#: Errors that concern the data of one row, not the database: a claim skips that row, a
#: settle writes the others.
ROW_ERRORS = (IntegrityError, DataError)


#: (job id, attempt) pairs: the fencing token of each lease.
Pairs = Sequence[tuple[int, int]]

#: The columns a claim reads of a due row (:class:`Candidate`), in its order.
CANDIDATE_COLUMNS = (
    "id",
    "name",
    "queue",
    "payload",
    "attempt",
    "attempts_used",
    "max_attempts",
    "trace_context",
    "run_at",
)

Wide = TypeVar("Wide", bound=tuple[Any, ...])


def lease_end(now: datetime, lease_seconds: float) -> datetime:
    return now + timedelta(seconds=lease_seconds)


class Rate(NamedTuple):
    """A rate limit: at most ``jobs`` jobs start in each window of ``seconds``."""

    jobs: int
    seconds: int

    def window_start(self, now: datetime) -> datetime:
        """The start of the window ``now`` falls in: windows are aligned on the epoch (a
        minute's starts at :00), the same for every worker."""
        stamp = int(now.timestamp())
        start = stamp - stamp % self.seconds
        return datetime.fromtimestamp(start, tz=now.tzinfo or timezone.utc)


@dataclass(frozen=True)
class QueueLimits:
    """What limits a queue's claims, across every worker: ``global_limit`` jobs running at
    once, ``rate`` starts per window, and (``keyed``) the concurrency limits its jobs'
    keys carry. A claim under limits takes the queue's lock first (:mod:`.limits`)."""

    global_limit: int | None = None
    rate: Rate | None = None
    keyed: bool = False

    @property
    def global_only(self) -> bool:
        """A global limit is the queue's only one."""
        return self.global_limit is not None and self.rate is None and not self.keyed

    @property
    def rate_only(self) -> bool:
        """A rate limit is the queue's only one."""
        return self.rate is not None and self.global_limit is None and not self.keyed


#: How many due jobs of its queue a lane's claim looks at (:attr:`ClaimRequest.among`): far
#: more than the jobs claimed at once, so the other lane's rows locked by claims in flight
#: do not fill it.
LANE_WINDOW = 1000


@dataclass(frozen=True)
class ClaimRequest:
    """A claim: up to ``limit`` due jobs of ``queue`` at ``now``, leased to ``owner``;
    ``limits``, when the queue has any. A row the database refuses to claim is skipped and
    told to ``refused`` (its id and the error), if given: the driver reports nothing.
    ``names``: only jobs of these names (those the worker knows how to run), bound as one
    parameter of the claim's statement; None takes a job of any name. ``ahead``: how many
    of the ``limit`` would wait for a thread (claimed ahead): a claim under limits takes
    them only while the limits leave room to spare (:mod:`.limits`). ``among``: a lane's
    claim (``names``, its handlers' names, of a worker whose queue has two lanes) takes its
    jobs among the first :data:`LANE_WINDOW` due jobs of ``among`` (every name the worker
    knows), where the driver can: so a lane with nothing to take reads that many rows, not
    the whole backlog of the other lane's jobs."""

    queue: str
    owner: str
    now: datetime
    lease_seconds: float
    limit: int = 1
    limits: QueueLimits | None = None
    refused: Callable[[int, BaseException], None] | None = None
    names: tuple[str, ...] | None = None
    ahead: int = 0
    among: tuple[str, ...] | None = None

    @cached_property
    def expires_at(self) -> datetime:
        """When the leases it takes end (worked out once: every job claimed reads it)."""
        return self.now + timedelta(seconds=self.lease_seconds)


class DueRows(NamedTuple):
    """Where a claim reads the rows it may take (:meth:`~.postgresql.PostgresDriver.due_rows`):
    ``source``, its ``FROM ... WHERE ...`` (the jobs table as ``j``), then ``order``, the
    ``ORDER BY`` to add (none for a lane's window: its rows come in claim order, and a sort
    would read all of it); ``params``, what ``source`` binds."""

    source: str
    order: str
    params: list[Any]


class Candidate(NamedTuple):
    """A due row as the claim's read returns it (the columns of ``CANDIDATE_COLUMNS``)."""

    id: int
    name: str
    queue: str
    payload: Any
    attempt: int
    attempts_used: int
    max_attempts: int
    trace_context: Any
    run_at: Any  # as the database's cursor reads it: Statements.read_time() makes it aware


def with_candidate(wide: Callable[..., Wide], row: Sequence[Any]) -> Wide:
    """A row read as the candidate's columns and then others, as ``wide`` holds it: a
    named tuple whose first field is the :class:`Candidate`, the others' after it (a
    limited claim's read, MariaDB's locking read, PostgreSQL's claimed row)."""
    width = len(CANDIDATE_COLUMNS)
    return wide(Candidate._make(row[:width]), *row[width:])


class MarkedRow(NamedTuple):
    """A row the claim's UPDATE returns: the job and its new attempt numbers."""

    id: int
    attempt: int
    attempts_used: int


@dataclass(slots=True)
class ClaimedJob:
    """A job this worker holds the lease on, as the claim read it.

    Read-only by convention, not frozen: one is made for every job claimed, and a frozen
    dataclass's ``__init__`` (a ``object.__setattr__`` per field) costs three times as
    much; the same holds for :class:`Settlement`."""

    id: int
    name: str
    queue: str
    raw_payload: Any
    attempt: int
    attempts_used: int
    max_attempts: int
    owner: str
    lease_expires_at: datetime
    #: Claimed under its queue's limits: its end frees a slot other workers may wait for.
    holds_slot: bool = False
    #: The enqueue's trace context as the column holds it (JSON text or a mapping), or None.
    trace_context: Any = None
    #: When it was due, and when the claim took it (its attempt's ``started_at``).
    run_at: datetime | None = None
    claimed_at: datetime | None = None

    @property
    def waited(self) -> float | None:
        """Seconds from when it was due to its claim (none if it was claimed early)."""
        if self.run_at is None or self.claimed_at is None:
            return None
        return max(0.0, (self.claimed_at - self.run_at).total_seconds())

    @property
    def pair(self) -> tuple[int, int]:
        return (self.id, self.attempt)


@dataclass(slots=True)
class Settlement:
    """One attempt's end, as the driver writes it (read-only, as :class:`ClaimedJob`).

    The job's row changes only while ``owner`` still holds ``attempt``; its
    lease is cleared. ``None`` in ``run_at``, ``finished_at`` or
    ``last_error`` keeps the column's value.
    """

    job_id: int
    owner: str
    attempt: int
    outcome: AttemptOutcome
    status: JobStatus
    ended_at: datetime
    error: str = ""
    run_at: datetime | None = None
    finished_at: datetime | None = None
    last_error: str | None = None
    give_back: bool = False  # released: the attempt is not charged
    result: str | None = None  # succeeded: the return value as JSON text; None keeps the column
    traceback: str = ""  # the attempt's, where its handler raised (masked, bounded)

    @property
    def pair(self) -> tuple[int, int]:
        return (self.job_id, self.attempt)


#: A settlement's value under each name a settle's statements give a column of their source:
#: the job's columns (``id``, ...) and its attempt row's (``job_id``, ``number``, ...).
SETTLEMENT_VALUES: dict[str, Callable[[Settlement], Any]] = {
    "id": lambda s: s.job_id,
    "job_id": lambda s: s.job_id,
    "owner": lambda s: s.owner,
    "attempt": lambda s: s.attempt,
    "number": lambda s: s.attempt,
    "status": lambda s: str(s.status),
    "run_at": lambda s: s.run_at,
    "finished_at": lambda s: s.finished_at,
    "last_error": lambda s: s.last_error,
    "give_back": lambda s: int(s.give_back),
    "outcome": lambda s: str(s.outcome),
    "error": lambda s: s.error,
    "ended_at": lambda s: s.ended_at,
    "result": lambda s: s.result,
    "traceback": lambda s: s.traceback,
}
#: The settle source's columns that hold a datetime (a driver may adapt or cast them).
SETTLEMENT_DATETIMES = frozenset({"run_at", "finished_at", "ended_at"})
#: What a settle writes of each settlement, in the order PostgreSQL's statement binds it.
SETTLED_COLUMNS = (
    "id",
    "owner",
    "attempt",
    "status",
    "run_at",
    "finished_at",
    "last_error",
    "give_back",
    "outcome",
    "error",
    "ended_at",
    "result",
    "traceback",
)
#: What a settle writes on the job row, where the attempt row takes a statement of its own
#: (SQLite, MariaDB): all but what goes on the attempt row alone.
SETTLED_JOB_COLUMNS = tuple(c for c in SETTLED_COLUMNS if c not in ("outcome", "traceback"))
#: What closes the attempt row of a settlement written, where that is a statement of its own.
CLOSED_COLUMNS = ("job_id", "number", "outcome", "error", "ended_at", "traceback")


def settlement_values(
    settlements: Sequence[Settlement],
    columns: Sequence[str],
    adapt: Callable[[Any], Any] | None = None,
) -> list[list[Any]]:
    """Each settlement's values for ``columns`` (names of :data:`SETTLEMENT_VALUES`), its
    datetimes made the database's by ``adapt``: one list a row."""
    read = [
        (SETTLEMENT_VALUES[column], adapt if adapt and column in SETTLEMENT_DATETIMES else None)
        for column in columns
    ]
    return [
        [value(s) if made is None else made(value(s)) for value, made in read] for s in settlements
    ]


class UnleasedRow(NamedTuple):
    """A running row without a live lease, as the rescuer read it: what its write is fenced
    by (``lease_owner``, ``lease_expires_at``, ``attempt``) and what decides its end."""

    id: int
    name: str
    queue: str
    lease_owner: str | None
    lease_expires_at: datetime | None
    attempt: int
    attempts_used: int
    max_attempts: int
    cancel_requested_at: datetime | None
    #: In a workflow (not NULL): its end takes the workflow's steps.
    workflow_pending: bool | None = None


class Cascade(NamedTuple):
    """A table whose rows are deleted with the jobs they refer to (by any of ``columns``),
    as the cleaner deletes expired jobs."""

    table: str
    columns: tuple[str, ...]


class ExhaustedRow(NamedTuple):
    """A pending row with no attempt left, as the maintenance pass read it."""

    id: int
    name: str
    queue: str
    attempt: int


@dataclass(frozen=True)
class Settled:
    """What a settle wrote: the settlements fenced out, and those ended ``cancelled``.

    A job that ``cancel_job()`` asked to stop ends cancelled whatever its
    attempt did, unless it succeeded: the settle statement reads the request
    on the row it writes, so a request that the heartbeat had not yet carried
    back is honoured too. Its attempt keeps its own outcome and error.
    """

    lost: list[Settlement]
    cancelled: frozenset[tuple[int, int]] = frozenset()
    #: The jobs it ended that are in a workflow, whose end has steps to take, once the
    #: settle has committed (:meth:`django_jobs.db.base.Driver.follow`).
    to_follow: frozenset[int] = frozenset()

    def as_written(self, settlement: Settlement) -> Settlement | None:
        """``settlement`` as the settle wrote it: None if it was fenced out; for a job with a
        cancel request, cancelled at the attempt's end (the attempt keeps its outcome and
        error)."""
        if self.lost and any(s.pair == settlement.pair for s in self.lost):
            return None
        if settlement.pair not in self.cancelled:
            return settlement
        return replace(
            settlement,
            status=JobStatus.CANCELLED,
            run_at=None,
            finished_at=settlement.ended_at,
            last_error=settlement.error,
        )


class Renewed(NamedTuple):
    """What a renewal statement answers: the leases extended, their new end, and which of
    those jobs ``cancel_job()`` asked to stop."""

    renewed: set[int]
    expires: datetime
    cancel_requested: set[int]


class RenewRow(NamedTuple):
    """One lease to renew, with the progress report to write (None: nothing new)."""

    id: int
    attempt: int
    progress: Progress | None

    @property
    def reported(self) -> bool:
        return self.progress is not None

    @property
    def done(self) -> int | None:
        return None if self.progress is None else self.progress.done

    @property
    def total(self) -> int | None:
        return None if self.progress is None else self.progress.total

    @property
    def note(self) -> str:
        return "" if self.progress is None else self.progress.note


# A renewal source's fields, in the order the drivers bind them.
RENEW_FIELDS = ("id", "attempt", "reported", "done", "total", "note")


@dataclass(frozen=True)
class Renewal:
    """One renewal statement's worth: ``owner``'s leases of ``rows`` extended to
    ``expires``, each only while it stands past ``now`` plus ``give_up_seconds``."""

    owner: str
    rows: Sequence[RenewRow]
    now: datetime
    expires: datetime
    give_up_seconds: float

    @property
    def margin(self) -> datetime:
        """The give-up point: a lease that ends before it is not extended."""
        return self.now + timedelta(seconds=self.give_up_seconds)

    def values(self) -> list[list[Any]]:
        """Each row's values, in the order of :data:`RENEW_FIELDS`."""
        return [[getattr(row, name) for name in RENEW_FIELDS] for row in self.rows]


class RenewedRow(NamedTuple):
    """A lease a renewal extended, as its statement returns it."""

    id: int
    cancel_requested_at: datetime | None


# The progress columns and the renewal source's fields that fill them.
PROGRESS_COLUMNS = (
    ("progress_done", "done"),
    ("progress_total", "total"),
    ("progress_note", "note"),
)


class LeaderRow(NamedTuple):
    """The leader lease as a driver's ``lead()`` left it: who holds it, since when, until
    when, and its epoch (how many times it has passed to a new leader)."""

    owner: str
    epoch: int
    elected_at: datetime | None
    expires_at: datetime | None

    def held_by(self, owner: str) -> bool:
        return self.owner == owner


# -- the health of the jobs tables (django_jobs.health) ---------------------------------


@dataclass(frozen=True)
class Holder:
    """The session whose open transaction holds the horizon back."""

    pid: int
    application: str  # its application_name (PostgreSQL), user@host (MariaDB); "" if unknown
    state: str  # "idle in transaction", "active", ...
    open_seconds: float  # how long its transaction has been open
    query: str = ""  # the start of its last statement, where the database shows it
    ending: str = ""  # the statement that ends it (pg_terminate_backend, KILL, ROLLBACK ...)

    def describe(self) -> str:
        parts = [f"pid {self.pid}"]
        if self.application:
            parts.append(self.application)
        if self.state:
            parts.append(self.state)
        return ", ".join(parts)


@dataclass(frozen=True)
class TableStats:
    """One jobs table, as PostgreSQL's statistics count it."""

    table: str
    live_rows: int
    dead_rows: int
    last_autovacuum: datetime | None


@dataclass(frozen=True)
class Pickup:
    """The recent claim latency: how long the last claims waited from their job's ``run_at``
    (due) to their attempt's start, in seconds, over ``samples`` claims."""

    samples: int
    p50: float
    p95: float
    max: float

    def describe(self) -> str:
        return (
            f"recent claims waited {format_latency(self.p50)} (p50), "
            f"{format_latency(self.p95)} (p95) over the last {self.samples:,}"
        )


@dataclass(frozen=True)
class Health:
    """What the database tells of the jobs tables' cleanup (None: it cannot tell)."""

    #: The oldest transaction (or prepared transaction) that holds the horizon back.
    holder: Holder | None = None
    tables: list[TableStats] = field(default_factory=list)
    #: MariaDB and MySQL: InnoDB's history list length (undo records not purged yet).
    history_length: int | None = None
    #: Why nothing could be read (no privilege, not reachable), if so.
    unknown: str = ""
    #: False where the database keeps no such horizon to tell of (SQLite).
    told: bool = True
    #: The recent claim latency; None when no claim started in the last PICKUP_SECONDS.
    pickup: Pickup | None = None

    @property
    def horizon_seconds(self) -> float | None:
        return None if self.holder is None else self.holder.open_seconds
