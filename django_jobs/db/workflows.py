"""Workflows in the database: what a new job is linked with, and the steps a job's end takes.

A job enters a workflow when it is written with dependencies or inside a batch
(:meth:`Workflows.link`, a step of the one insert, in the same transaction): it is
marked ``workflow_pending`` (and so are the jobs it depends on that have not ended),
and stored ``waiting`` until what it depends on has succeeded.

Every end of such a job, whichever path ended it (a settle, the rescuer, a cancel),
then takes the same steps (:meth:`Workflows.ended`): the mark is taken off under the
row's lock, so the steps of one end are taken once; its batch counts it, and the
member that ends a batch enqueues the batch's callbacks, through the one insert; its
waiting dependents are released (``pending``) once all they wait for has succeeded,
or cancelled when it failed, and their ends take the same steps in turn (the cascade).
A settle writes a job's end and its steps in separate transactions where the settle is
one statement (PostgreSQL): a crash between them leaves the mark on an ended job, and
the leader takes the steps then (:meth:`Workflows.repair`).

Why dependents are locked before what they wait for is read: two dependencies of one job
ending at once, each in a transaction that cannot see the other's end, would each leave
the job waiting. Locked, the second waits for the first to commit, then reads both ends.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from django.db import transaction
from django.db.models import F, Max

from ..models import (
    FINISHED_STATUSES,
    Batch,
    Job,
    JobDependency,
    JobStatus,
)

if TYPE_CHECKING:
    from .statements import Statements

#: What ``last_error`` of a job the cascade cancelled starts with; the id of the job
#: that failed follows, so that a retry of that job can find the jobs to put back.
DEPENDENCY_FAILED = "DependencyFailed: job #"
#: The callbacks a batch may have, by the name of the argument that gives each.
CALLBACK_KINDS = ("on_finish", "on_success", "on_failure")
FAILED_STATUSES = (JobStatus.DEAD_LETTERED, JobStatus.CANCELLED)
#: The most ids one statement binds: below SQLite's oldest limit of 999 parameters, so a
#: fan-out of any size is read and written in pieces.
CHUNK = 900


def marks(values: Sequence[Any]) -> str:
    """One parameter's mark per value, for ``IN (...)``."""
    return ", ".join(["%s"] * len(values))


def chunks(ids: Sequence[int]) -> Iterator[Sequence[int]]:
    for start in range(0, len(ids), CHUNK):
        yield ids[start : start + CHUNK]


@dataclass
class Followed:
    """What the steps of some jobs' ends did, for the reporter: the dependents released
    and cancelled, the callbacks enqueued, the batches finished."""

    released: list[int] = field(default_factory=list)
    cancelled: list[Job] = field(default_factory=list)
    callbacks: list[Job] = field(default_factory=list)
    finished: list[Batch] = field(default_factory=list)
    #: Jobs whose steps failed (the database's error in ``error``): left to the leader.
    deferred: list[int] = field(default_factory=list)
    error: str = ""
    #: The queues of the released jobs that are due: woken through the database in the
    #: steps' transaction; a worker rings its own dispatchers of them too.
    woken: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(
            self.released or self.cancelled or self.callbacks or self.finished or self.deferred
        )

    def merge(self, other: Followed) -> Followed:
        return Followed(
            self.released + other.released,
            self.cancelled + other.cancelled,
            self.callbacks + other.callbacks,
            self.finished + other.finished,
            self.deferred + other.deferred,
            self.error or other.error,
            self.woken + [queue for queue in other.woken if queue not in self.woken],
        )


@dataclass(frozen=True)
class Link:
    """A new job's place in a workflow: the ids it depends on and its batch."""

    depends_on: tuple[int, ...] = ()
    ignore_failure: bool = False
    batch: int | None = None

    @property
    def linked(self) -> bool:
        """In a workflow at all: waits for something, or joins a batch."""
        return bool(self.depends_on) or self.batch is not None


def failed_error(job_id: int, name: str, status: str) -> str:
    """The ``last_error`` of a job cancelled because job ``job_id`` ended ``status``."""
    return f"{DEPENDENCY_FAILED}{job_id} ({name}) ended {status}: this job waited for it"


class FollowSteps(Protocol):
    """What the steps of a job's end ask of the driver beyond its statements."""

    def begin_steps(self) -> None: ...

    def insert_jobs(self, rows: Sequence[Job], now: datetime) -> list[Job]: ...

    def wake(self, queues: Iterable[str]) -> None: ...


class Workflows:
    """The driver's part for workflows (``driver.workflows``). Off the hot path of a
    plain job: a job in no workflow is never read here."""

    def __init__(self, statements: Statements, steps: FollowSteps) -> None:
        self.statements = statements
        self.steps = steps

    @property
    def jobs(self) -> Any:
        return Job.objects.using(self.statements.using)

    @property
    def batches(self) -> Any:
        return Batch.objects.using(self.statements.using)

    @property
    def links(self) -> Any:
        return JobDependency.objects.using(self.statements.using)

    @property
    def links_table(self) -> str:
        return self.statements.qn(JobDependency._meta.db_table)

    def insert_links(self, values: Sequence[tuple[int, int, bool]]) -> None:
        """The new jobs' links: (job, the job it waits for, ignore_failure) rows, a few
        hundred a statement (three parameters each)."""
        qn = self.statements.qn
        columns = ", ".join(qn(c) for c in ("job_id", "depends_on_id", "ignore_failure"))
        with self.statements.connection.cursor() as cursor:
            per_statement = max(CHUNK // 3, 1)
            for start in range(0, len(values), per_statement):
                some = values[start : start + per_statement]
                cursor.execute(
                    f"INSERT INTO {self.links_table} ({columns})"
                    f" VALUES {', '.join(['(%s, %s, %s)'] * len(some))}",
                    [value for row in some for value in row],
                )

    # The statements an end's steps run most (a fan-out's member, a chain's step) are
    # written out: the ORM's building of each cost more than the database's answer.

    def read(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        with self.statements.connection.cursor() as cursor:
            cursor.execute(sql, list(params))
            return list(cursor.fetchall())

    def set_where_ids(self, column: str, value: Any, ids: Sequence[int]) -> None:
        """Set ``column`` to ``value`` on the jobs ``ids``."""
        qn = self.statements.qn
        with self.statements.connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {self.statements.job_table} SET {qn(column)} = %s"
                f" WHERE {qn('id')} IN ({marks(ids)})",
                [value, *ids],
            )

    # -- a job's way in -----------------------------------------------------------------

    def link(self, rows: Sequence[Job], links: Sequence[Link], now: datetime) -> Followed:
        """Link ``rows`` (just written, in the caller's transaction) as ``links`` say: each
        waits for its dependencies, joins its batch. A row whose dependency has failed
        already is cancelled at once (its own dependents among ``rows`` too). A row with
        neither stays a plain job."""
        linked = [(row, link) for row, link in zip(rows, links, strict=True) if link.linked]
        if not linked:
            return Followed()
        rows, links = [row for row, _ in linked], [link for _, link in linked]
        depended = sorted({d for link in links for d in link.depends_on})
        statuses = self.lock_statuses(depended)
        unended = [d for d in depended if statuses[d][0] not in FINISHED_STATUSES]
        for some in chunks(unended):
            self.jobs.filter(id__in=some, workflow_pending__isnull=True).update(
                workflow_pending=True
            )
        self.insert_links(
            [
                (row.pk, d, link.ignore_failure)
                for row, link in zip(rows, links, strict=True)
                for d in link.depends_on
            ]
        )
        states = self.new_states(rows, links, statuses)
        for row, link in zip(rows, links, strict=True):
            status, error = states[row.pk]
            row.status, row.workflow_pending, row.batch_id = status, True, link.batch
            if error:
                row.last_error, row.finished_at = error, now
        self.write_new_states(rows, now)
        for batch, count in Counter(link.batch for link in links if link.batch).items():
            self.batches.filter(pk=batch).update(total=F("total") + count)
        cancelled = [row.pk for row in rows if row.status == JobStatus.CANCELLED]
        return self.ended(cancelled, now) if cancelled else Followed()

    def lock_statuses(self, ids: Sequence[int]) -> dict[int, tuple[str, str]]:
        """The status and name of the jobs ``ids``, each row locked (in id order)."""
        found: dict[int, tuple[str, str]] = {}
        for some in chunks(ids):
            read = self.jobs.select_for_update().filter(id__in=some).order_by("id")
            found.update(
                (pk, (status, name))
                for pk, status, name in read.values_list("id", "status", "name")
            )
        missing = sorted(set(ids) - set(found))
        if missing:  # deleted since the call checked them
            raise ValueError(f"depends_on: no job has the id {', '.join(map(str, missing))}")
        return found

    def new_states(
        self, rows: Sequence[Job], links: Sequence[Link], statuses: dict[int, tuple[str, str]]
    ) -> dict[int, tuple[str, str]]:
        """Each new row's status (and error): pending once all it waits for has
        succeeded, cancelled when one failed, else waiting; until nothing changes, as a
        new row may wait for another."""
        known = dict(statuses)
        for row in rows:
            known[row.pk] = (JobStatus.WAITING, row.name)
        states: dict[int, tuple[str, str]] = {}
        changed = True
        while changed:
            changed = False
            for row, link in zip(rows, links, strict=True):
                state = decide_waiting(
                    [(d, *known[d], link.ignore_failure) for d in link.depends_on]
                )
                if states.get(row.pk) != state:
                    states[row.pk], known[row.pk], changed = state, (state[0], row.name), True
        return states

    def write_new_states(self, rows: Sequence[Job], now: datetime) -> None:
        by_state: dict[tuple[str, str, int | None], list[int]] = defaultdict(list)
        for row in rows:
            error = row.last_error if row.status == JobStatus.CANCELLED else ""
            by_state[(row.status, error, row.batch_id)].append(row.pk)
        for (status, error, batch), ids in by_state.items():
            changes: dict[str, Any] = {"status": status, "workflow_pending": True, "batch": batch}
            if status == JobStatus.CANCELLED:
                changes.update(last_error=error, finished_at=now)
            for some in chunks(ids):
                self.jobs.filter(id__in=some).update(**changes)

    # -- a job's way out ----------------------------------------------------------------

    def ended(
        self, ids: Iterable[int], now: datetime, *, own_transaction: bool = False
    ) -> Followed:
        """Take the steps of the ends of the jobs ``ids`` that still have them to take,
        inside a transaction (the caller's, if it has one): count each in its batch
        (finishing the batch its end completes), release or cancel its dependents, and
        take the steps of those cancelled in turn. ``own_transaction``: the transaction
        is the steps' alone (the worker's follower), which the driver may relax
        (:meth:`~.base.Driver.begin_steps`)."""
        followed = Followed()
        todo = sorted(set(ids))
        using = self.statements.using
        relaxed = own_transaction and not transaction.get_connection(using).in_atomic_block
        with transaction.atomic(using=using):
            if relaxed:
                self.steps.begin_steps()
            while todo:
                some, todo = todo[:CHUNK], todo[CHUNK:]
                rows = self.lock_ends(some)
                if not rows:
                    continue
                taken = [pk for pk, _, _, _ in rows]
                self.set_where_ids("workflow_pending", False, taken)
                self.count_in_batches([row[:3] for row in rows], now, followed)
                depended = [pk for pk, _, _, has_dependents in rows if has_dependents]
                if depended:
                    todo += self.follow_dependents(depended, now, followed)
        return followed

    def lock_ends(self, ids: Sequence[int]) -> list[tuple[int, str, int | None, bool]]:
        """Those of ``ids`` that have ended with their steps still to take, each row locked
        (in id order): (id, status, batch, whether a job waits for it).

        The rows are found by id alone, the rest is checked here: with a condition on the
        status or the mark, the planner may scan the finished or the workflow index for
        them, whose statistics lag behind a drain (a fan-out's members counted pending
        when it was analyzed), reading every row of it for each end.

        A job that waits for one of them and is not seen here was linked after the
        statement began, by a transaction that held the row's lock once it had ended: it
        read the end and was stored pending or cancelled by it, so has nothing to wait for."""
        qn, job = self.statements.qn, self.statements.job_table
        rows = self.read(
            f"SELECT j.{qn('id')}, j.{qn('status')}, j.{qn('batch_id')},"
            f" j.{qn('workflow_pending')}, EXISTS (SELECT 1 FROM {self.links_table} l"
            f" WHERE l.{qn('depends_on_id')} = j.{qn('id')})"
            f" FROM {job} j WHERE j.{qn('id')} IN ({marks(ids)})"
            f" ORDER BY j.{qn('id')}{self.statements.row_lock}",
            ids,
        )
        return [
            (pk, status, batch, bool(has_dependents))
            for pk, status, batch, pending, has_dependents in rows
            if pending and status in FINISHED_STATUSES
        ]

    def count_in_batches(
        self, rows: Sequence[tuple[int, str, int | None]], now: datetime, followed: Followed
    ) -> None:
        """Count ended members in their batches, each batch's row locked by its update; the
        member that ends a batch finishes it (one transaction holds that lock at a time,
        so one finishes it).

        The count is first moved only where members are left to end after it, which is
        every end of a large batch but its last: the batch is then not finished, and is not
        read. Where that moved nothing, the count moves all the same and the batch is read
        and finished if done."""
        counts: dict[int, Counter[str]] = defaultdict(Counter)
        for _, status, batch in rows:
            if batch is not None:
                counts[batch][status] += 1
        for batch_id in sorted(counts):
            added = counts[batch_id]
            moved = {
                "succeeded": F("succeeded") + added[JobStatus.SUCCEEDED],
                "dead_lettered": F("dead_lettered") + added[JobStatus.DEAD_LETTERED],
                "cancelled": F("cancelled") + added[JobStatus.CANCELLED],
            }
            ended = F("succeeded") + F("dead_lettered") + F("cancelled") + added.total()
            if self.batches.filter(pk=batch_id, total__gt=ended).update(**moved):
                continue
            self.batches.filter(pk=batch_id).update(**moved)
            self.finish_if_done(batch_id, now, followed)

    def finish_if_done(self, batch_id: int, now: datetime, followed: Followed) -> None:
        batch = self.batches.select_for_update().filter(pk=batch_id).first()
        if batch is None or batch.finished_at is not None or batch.ended < batch.total:
            return
        # Ends are followed in the order their writes commit, each at the time its worker
        # stamped it: the member whose steps finish the batch may have ended before one
        # counted already. The batch finishes when the last of them ended.
        members = self.jobs.filter(batch_id=batch_id).aggregate(last=Max("finished_at"))
        now = max(now, members["last"] or now)
        outcome = "on_success" if batch.ended == batch.succeeded else "on_failure"
        kinds = [kind for kind in ("on_finish", outcome) if kind in batch.callbacks]
        rows = [callback_row(batch, batch.callbacks[kind], now) for kind in kinds]
        written = self.steps.insert_jobs(rows, now) if rows else []
        # The one insert writes a new job's own columns; a callback's batch is set after.
        self.jobs.filter(id__in=[job.pk for job in written]).update(batch=batch.pk)
        batch.finished_at = now
        batch.callback_jobs = {kind: job.pk for kind, job in zip(kinds, written, strict=True)}
        batch.save(update_fields=["finished_at", "callback_jobs"])
        followed.callbacks += [job for job, row in zip(written, rows, strict=True) if job is row]
        followed.finished.append(batch)

    def follow_dependents(
        self, ended: Sequence[int], now: datetime, followed: Followed
    ) -> list[int]:
        """Release the waiting dependents of ``ended`` whose dependencies all allow it, and
        cancel those one of which failed; the ids of those cancelled."""
        qn = self.statements.qn
        dependents = sorted(
            {
                job
                for (job,) in self.read(
                    f"SELECT {qn('job_id')} FROM {self.links_table}"
                    f" WHERE {qn('depends_on_id')} IN ({marks(ended)})",
                    ended,
                )
            }
        )
        cancelled: list[int] = []
        for some in chunks(dependents):
            cancelled += self.follow_waiting(some, now, followed)
        return cancelled

    def follow_waiting(self, jobs: Sequence[int], now: datetime, followed: Followed) -> list[int]:
        """Lock those of ``jobs`` still waiting, then read what they wait for: release the
        ones it allows (waking the queues of those due), cancel those one of whose
        dependencies failed (their ids). The rows are found by id alone, as in
        :meth:`lock_ends`: the waiting index's statistics lag behind too."""
        qn = self.statements.qn
        read = self.read(
            f"SELECT {qn('id')}, {qn('status')}, {qn('queue')},"
            f" CASE WHEN {qn('run_at')} <= %s THEN 1 ELSE 0 END FROM {self.statements.job_table}"
            f" WHERE {qn('id')} IN ({marks(jobs)}) ORDER BY {qn('id')}{self.statements.row_lock}",
            [self.statements.adapt(now), *jobs],
        )
        # Each waiting job's queue, to wake once it is released; None while it is not due.
        waking: dict[int, str | None] = {
            pk: queue if due else None
            for pk, status, queue, due in read
            if status == JobStatus.WAITING
        }
        if not waking:
            return []
        decided = {
            job: decide_waiting(deps) for job, deps in self.dependencies_of(list(waking)).items()
        }
        released = [job for job, (status, _) in decided.items() if status == JobStatus.PENDING]
        if released:
            self.set_where_ids("status", JobStatus.PENDING.value, released)
            woken = sorted({q for job in released if (q := waking[job]) is not None})
            self.steps.wake(woken)
            followed.released += released
            followed.woken += [queue for queue in woken if queue not in followed.woken]
        by_error: dict[str, list[int]] = defaultdict(list)
        for job, (status, error) in decided.items():
            if status == JobStatus.CANCELLED:
                by_error[error].append(job)
        for error, ids in by_error.items():
            self.jobs.filter(id__in=ids).update(
                status=JobStatus.CANCELLED, finished_at=now, last_error=error
            )
        cancelled = sorted(job for ids in by_error.values() for job in ids)
        if cancelled:
            followed.cancelled += list(self.jobs.filter(id__in=cancelled).order_by("id"))
        return cancelled

    def dependencies_of(self, jobs: Sequence[int]) -> dict[int, list[tuple[int, str, str, bool]]]:
        """Each job's dependencies: (id, status, name, whether a failure is ignored)."""
        found: dict[int, list[tuple[int, str, str, bool]]] = defaultdict(list)
        qn = self.statements.qn
        read = self.read(
            f"SELECT l.{qn('job_id')}, l.{qn('depends_on_id')}, d.{qn('status')}, d.{qn('name')},"
            f" l.{qn('ignore_failure')} FROM {self.links_table} l"
            f" INNER JOIN {self.statements.job_table} d ON d.{qn('id')} = l.{qn('depends_on_id')}"
            f" WHERE l.{qn('job_id')} IN ({marks(jobs)})",
            jobs,
        )
        for job, dependency, status, name, ignored in read:
            found[job].append((dependency, status, name, bool(ignored)))
        return found

    def closed(self, batch_id: int, now: datetime) -> Followed:
        """A batch's block has ended: finish the batch now if it has no member left to
        end (an empty batch's callbacks go in at once)."""
        followed = Followed()
        with transaction.atomic(using=self.statements.using):
            self.finish_if_done(batch_id, now, followed)
        return followed

    # -- a job put back -----------------------------------------------------------------

    def reopened(self, job_id: int, was: str, now: datetime) -> list[int]:
        """``retry_job()`` has just put job ``job_id`` (``was`` dead-lettered or
        cancelled) back to pending, in the caller's transaction: uncount it from its
        batch, have it wait again if what it depends on has not all succeeded, and put
        back to waiting the dependents its failure cancelled (and theirs). The ids put
        back to waiting, the job's own included if it waits."""
        self.uncount([(job_id, was)])
        back: list[int] = []
        if self.links.filter(job_id=job_id).exists():
            status, _ = decide_waiting(self.dependencies_of([job_id])[job_id])
            if status != JobStatus.PENDING:
                self.jobs.filter(id=job_id).update(status=JobStatus.WAITING)
                back.append(job_id)
        todo = [job_id]
        while todo:
            some, todo = todo[:CHUNK], todo[CHUNK:]
            for cancelled in chunks(self.cancelled_by(some)):
                self.uncount([(pk, JobStatus.CANCELLED) for pk in cancelled])
                self.jobs.filter(id__in=cancelled).update(
                    status=JobStatus.WAITING, finished_at=None, last_error=""
                )
                back += cancelled
                todo += cancelled
        return back

    def cancelled_by(self, failed: Sequence[int]) -> list[int]:
        """The dependents the cascade cancelled for the failure of one of ``failed``."""
        dependents = self.links.filter(depends_on_id__in=failed).values_list("job_id", flat=True)
        found: list[int] = []
        for some in chunks(sorted(set(dependents))):
            read = self.jobs.select_for_update().filter(id__in=some, status=JobStatus.CANCELLED)
            found += [
                pk
                for pk, error in read.order_by("id").values_list("id", "last_error")
                if any(error.startswith(f"{DEPENDENCY_FAILED}{f} ") for f in failed)
            ]
        return found

    def uncount(self, rows: Sequence[tuple[int, str]]) -> None:
        """Take ended jobs out of their batches' counts, their steps to take again."""
        ids = [pk for pk, _ in rows]
        read = self.jobs.filter(id__in=ids, workflow_pending=False).values_list("id", "batch_id")
        batches = dict(read)
        self.jobs.filter(id__in=ids, workflow_pending=False).update(workflow_pending=True)
        counts: dict[int, Counter[str]] = defaultdict(Counter)
        for pk, was in rows:
            if batches.get(pk) is not None:
                counts[batches[pk]][was] += 1
        for batch_id in sorted(counts):
            taken = counts[batch_id]
            self.batches.filter(pk=batch_id).update(
                succeeded=F("succeeded") - taken[JobStatus.SUCCEEDED],
                dead_lettered=F("dead_lettered") - taken[JobStatus.DEAD_LETTERED],
                cancelled=F("cancelled") - taken[JobStatus.CANCELLED],
            )

    # -- what a crash left --------------------------------------------------------------

    def repair(self, now: datetime, older_than: float, limit: int = 500) -> tuple[Followed, int]:
        """Take the steps of ends a crash left untaken: ended jobs still marked, ended
        before ``now`` less ``older_than`` seconds (a younger one is likely still being
        followed by the worker that ended it). What they did, and for how many jobs."""
        before = now - timedelta(seconds=older_than)
        stale = self.jobs.unfollowed().filter(finished_at__lte=before).order_by("id")
        ids = list(stale.values_list("id", flat=True)[:limit])
        return (self.ended(ids, now) if ids else Followed()), len(ids)


def decide_waiting(dependencies: Sequence[tuple[int, str, str, bool]]) -> tuple[str, str]:
    """What a waiting job becomes, given its dependencies (id, status, name, whether a
    failure is ignored): cancelled (and why) if one failed and that is not ignored,
    pending if all succeeded (or ended, where failures are ignored), else waiting."""
    ready = True
    for dependency, status, name, ignored in dependencies:
        if status in FAILED_STATUSES and not ignored:
            return JobStatus.CANCELLED, failed_error(dependency, name, status)
        if status != JobStatus.SUCCEEDED and not (ignored and status in FINISHED_STATUSES):
            ready = False
    return (JobStatus.PENDING, "") if ready else (JobStatus.WAITING, "")


def callback_row(batch: Batch, fields: Mapping[str, Any], now: datetime) -> Job:
    """A batch's callback as the row to insert: the job it was made with, due now (or
    after its delay), in the batch (``ctx.batch``) but not one of its members."""
    values = {key: value for key, value in fields.items() if key != "delay_seconds"}
    run_at = now + timedelta(seconds=float(fields.get("delay_seconds") or 0))
    return Job.unsaved(**values, run_at=run_at, created_at=now, batch_id=batch.pk)
