"""The one reporter: every new job, outcome and lease event of a job becomes its log line
and its signal here, and a signal's receiver that raises is logged here.

A written outcome is reported by the job's new status (:data:`OUTCOMES`: log level, event
name, signal, line), and so is an end written off the worker (a lapsed lease the rescuer
took back, a pending job with no attempt left, a pending job cancelled); the lease events (a
lease given up, a time-out, a cancel request heard, a late result, a dropped progress
report, a lease the rescuer could not take back) by name (:data:`LEASE_EVENTS`).
Every line carries ``extra={"event": ..., "job_id": ...}``; event names match the signal
names. Metrics and traces plug in here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.dispatch import Signal

from . import signals, telemetry
from .db.workflows import DEPENDENCY_FAILED
from .models import AttemptOutcome, Batch, Job, JobStatus

if TYPE_CHECKING:
    from .db.records import ClaimedJob, ExhaustedRow, Settlement, UnleasedRow
    from .db.workflows import Followed
    from .outcomes import HandlerResult
    from .tasks.framework import TaskResult

    #: An outcome a worker wrote: the job as claimed, the handler's result, the settlement
    #: decided for it, and that settlement as written (None: the lease was lost before).
    Written = tuple[ClaimedJob, HandlerResult, Settlement, Settlement | None]

logger = logging.getLogger(__name__)


def send(signal: Signal, sender: Any = Job, **details: Any) -> None:
    """Send ``signal``; a receiver that raises is logged, never raised."""
    if not signal.has_listeners(sender):
        return
    for receiver, response in signal.send_robust(sender=sender, **details):
        if isinstance(response, Exception):
            job_id = details.get("job_id", getattr(details.get("task_result"), "id", None))
            logger.error(
                "a receiver of %s failed: %s: %s: %s",
                "a django-jobs signal" if sender is Job else "a task signal",
                getattr(receiver, "__qualname__", receiver),
                type(response).__name__,
                response,
                extra={"event": "signal_receiver_failed", "job_id": job_id},
            )


# -- an attempt starting, and Django's task signals ------------------------------------


def report_started(claimed: ClaimedJob) -> None:
    """``job_started``, on the worker's thread as the handler is called; how long the job
    waited from its ``run_at`` to its claim (``django_jobs_wait_seconds``)."""
    send(
        signals.job_started,
        job_id=claimed.id,
        name=claimed.name,
        queue=claimed.queue,
        attempt=claimed.attempt,
    )
    if claimed.waited is not None:
        telemetry.waited(claimed.name, claimed.queue, claimed.waited)


def report_ran(claimed: ClaimedJob, seconds: float) -> None:
    """The handler returned (or raised) after ``seconds``: ``django_jobs_run_seconds``."""
    telemetry.ran(claimed.name, claimed.queue, seconds)


def report_task(signal: Signal, result: TaskResult, raised: BaseException | None = None) -> None:
    """One of Django's task signals about ``result``, sent as its backends send it (by the
    backend's class); a backend no longer configured sends nothing, and says so. With
    ``raised`` (the task's error), sent while it is being handled, as ``ImmediateBackend``
    sends ``task_finished`` from its ``except`` block: ``sys.exc_info()`` in a receiver is it."""
    from .tasks.framework import task_backends  # only a project that runs tasks loads them

    try:
        sender = type(task_backends[result.backend])
    except Exception as exc:
        logger.warning(
            "task %s #%s: no signal sent, its backend %r is not configured (%s)",
            result.task.module_path,
            result.id,
            result.backend,
            exc,
            extra={"event": "task_signal_skipped", "job_id": result.id},
        )
        return
    if raised is None:
        send(signal, sender=sender, task_result=result)
        return
    try:
        raise raised
    except BaseException:
        send(signal, sender=sender, task_result=result)


# -- new jobs -------------------------------------------------------------------------


def report_enqueued(jobs: Sequence[Job], using: str) -> None:
    """The log line of each new job, and its ``job_enqueued`` once the transaction of the
    caller on ``using`` commits (at once in autocommit; never if it rolls back)."""
    if logger.isEnabledFor(logging.DEBUG):
        for job in jobs:
            logger.debug(
                "job %s #%s enqueued",
                job.name,
                job.pk,
                extra={"event": "job_enqueued", "job_id": job.pk, "job_name": job.name},
            )
    if not jobs or not signals.job_enqueued.has_listeners(Job):
        return
    details = [{"job_id": job.pk, "name": job.name, "queue": job.queue} for job in jobs]

    def announce() -> None:
        for detail in details:
            send(signals.job_enqueued, **detail)

    transaction.on_commit(announce, using=using)


# -- a job's plain events: claimed, refused, retried, made due, a cancel requested ------

#: name -> (log level, line); the line is formatted with ``job_id`` and the details.
JOB_EVENTS: dict[str, tuple[int, str]] = {
    "job_claimed": (logging.DEBUG, "job %(name)s #%(job_id)s claimed, attempt %(attempt)s"),
    "job_claim_failed": (  # the database refused the row: the claim takes the others
        logging.WARNING,
        "job #%(job_id)s cannot be claimed, skipped: %(error)s",
    ),
    "job_retried": (logging.INFO, "job #%(job_id)s retried"),
    "job_retry_refused": (
        logging.WARNING,
        "job #%(job_id)s not retried: a live job with the same unique_key exists",
    ),
    "job_run_now": (logging.INFO, "job #%(job_id)s made due now"),
    "job_cancel_requested": (  # cancel_job() on a running job; its worker's line is a lease event
        logging.INFO,
        "job #%(job_id)s: cancel requested; its worker stops it at its next heartbeat",
    ),
}


def report(event: str, job_id: int, **details: Any) -> None:
    """One event of job ``job_id`` (see :data:`JOB_EVENTS`); an ``attempt`` among the
    details is in the record's ``extra`` too."""
    level, line = JOB_EVENTS[event]
    if not logger.isEnabledFor(level):
        return
    extra: dict[str, Any] = {"event": event, "job_id": job_id}
    if "attempt" in details:
        extra["attempt"] = details["attempt"]
    logger.log(level, line, {"job_id": job_id, **details}, extra=extra)


def report_claimed(jobs: Sequence[ClaimedJob]) -> None:
    """The line of each job a claim took (at DEBUG: nothing to do at the default level)."""
    if logger.isEnabledFor(logging.DEBUG):
        for job in jobs:
            report("job_claimed", job.id, name=job.name, attempt=job.attempt)


def report_claim_refused(job_id: int, error: BaseException) -> None:
    """A due row the database refused to claim (the driver skipped it)."""
    report("job_claim_failed", job_id, error=f"{type(error).__name__}: {error}")


# -- written outcomes ------------------------------------------------------------------

Line = Callable[["ClaimedJob", "HandlerResult", "Settlement"], tuple[Any, ...]]


#: A signal to send, with the arguments that kind of outcome adds to the common ones.
Sent = tuple[Signal, dict[str, Any]]


@dataclass(frozen=True)
class Report:
    """How one kind of written outcome is told: log level, event name, signals, line."""

    level: int
    event: str
    signals: tuple[Sent, ...]
    line: Line


def _label(claimed: ClaimedJob) -> str:
    return f"job {claimed.name} #{claimed.id}"


OUTCOMES: dict[str, Report] = {
    "succeeded": Report(
        logging.DEBUG,
        "job_succeeded",
        ((signals.job_succeeded, {}),),
        lambda c, r, s: ("%s succeeded on attempt %s", _label(c), c.attempt),
    ),
    "released": Report(  # handed back at a stop: not an outcome anyone waits for
        logging.INFO,
        "job_released",
        (),
        lambda c, r, s: ("%s released on attempt %s", _label(c), c.attempt),
    ),
    "snoozed": Report(  # due again after its delay, no attempt used
        logging.INFO,
        "job_snoozed",
        (),
        lambda c, r, s: ("%s snoozed on attempt %s until %s", _label(c), c.attempt, s.run_at),
    ),
    "cancelled": Report(  # an attempt that ended otherwise says how
        logging.INFO,
        "job_cancelled",
        ((signals.job_cancelled, {}),),
        lambda c, r, s: (
            "%s cancelled on attempt %s%s",
            _label(c),
            c.attempt,
            "" if r.outcome == AttemptOutcome.CANCELLED else f" ({r.error})",
        ),
    ),
    "dead_lettered": Report(
        logging.ERROR,
        "job_dead_lettered",  # every failed attempt sends job_failed; the last, this too
        ((signals.job_failed, {"will_retry": False}), (signals.job_dead_lettered, {})),
        lambda c, r, s: (
            "%s dead-lettered after attempt %s: %s\n%s",
            _label(c),
            c.attempt,
            r.error,
            r.traceback,
        ),
    ),
    "failed": Report(  # pending again: a retry is due after the backoff
        logging.WARNING,
        "job_failed",
        ((signals.job_failed, {"will_retry": True}),),
        lambda c, r, s: (
            "%s %s on attempt %s, retry at %s: %s\n%s",
            _label(c),
            "timed out" if r.outcome == AttemptOutcome.TIMED_OUT else "failed",
            c.attempt,
            s.run_at,
            r.error,
            r.traceback,
        ),
    ),
}


def outcome_kind(status: JobStatus, outcome: AttemptOutcome) -> str:
    """The key of :data:`OUTCOMES` for a job left in ``status`` by an attempt's ``outcome``."""
    if status == JobStatus.PENDING:
        if outcome == AttemptOutcome.SNOOZED:
            return "snoozed"
        return "released" if outcome == AttemptOutcome.RELEASED else "failed"
    return str(status)


def report_outcome(claimed: ClaimedJob, result: HandlerResult, settled: Settlement) -> None:
    """The log line and the signal of an outcome that has been written (and committed)."""
    report = OUTCOMES[outcome_kind(settled.status, result.outcome)]
    if logger.isEnabledFor(report.level):
        logger.log(
            report.level,
            *report.line(claimed, result, settled),
            extra={
                "event": report.event,
                "job_id": claimed.id,
                "attempt": claimed.attempt,
                "job_name": claimed.name,
            },
        )
    _send_all(report, claimed.id, claimed.name, claimed.queue, claimed.attempt, settled.error)


def report_written(outcomes: Sequence[Written]) -> list[str]:
    """Report each outcome a worker wrote (:func:`report_outcome`; one whose lease was lost,
    ``job_lease_lost``) and return each one's kind (:data:`OUTCOMES`' keys, ``lease_lost``)."""
    kinds: list[str] = []
    for claimed, result, decided, written in outcomes:
        if written is None:
            kinds.append("lease_lost")
            report_lease("job_lease_lost", decided.job_id, decided.attempt, outcome=decided.outcome)
            telemetry.lease_lost()
        else:
            kinds.append(outcome_kind(written.status, result.outcome))
            report_outcome(claimed, result, written)
            telemetry.outcome(claimed.name, claimed.queue, kinds[-1])
    return kinds


def _send_all(report: Report, job_id: int, name: str, queue: str, attempt: int, error: str) -> None:
    """The signals of ``report``, with the arguments common to every outcome."""
    for signal, added in report.signals:
        send(signal, job_id=job_id, name=name, queue=queue, attempt=attempt, error=error, **added)


# -- ends decided off the worker: the rescuer, the maintenance pass, cancel_job() ------

#: How a lease taken back by the rescuer is logged, by the kind of end: level and words.
#: Its signals are those of the same kind of end written by a worker (:data:`OUTCOMES`).
LAPSED: dict[str, tuple[int, str]] = {
    "failed": (logging.WARNING, "due again"),
    "dead_lettered": (logging.ERROR, "dead-lettered"),
    "cancelled": (logging.WARNING, "cancelled"),
}


def report_lapsed(row: UnleasedRow, settled: Settlement) -> None:
    """A lease the rescuer took back (``settled``, from :func:`~django_jobs.outcomes.lapsed`),
    once its write has committed: logged as ``job_lease_expired``, and sent as a worker's
    failed attempt is (``job_failed``, then ``job_dead_lettered`` for the last one), or as
    its cancel (``job_cancelled``)."""
    kind = outcome_kind(settled.status, settled.outcome)
    level, words = LAPSED[kind]
    if logger.isEnabledFor(level):
        logger.log(
            level,
            "job #%s: %s; %s",
            row.id,
            settled.error,
            words,
            extra={
                "event": "job_lease_expired",
                "job_id": row.id,
                "attempt": row.attempt,
                "job_name": row.name,
            },
        )
    _send_all(OUTCOMES[kind], row.id, row.name, row.queue, row.attempt, settled.error)
    telemetry.outcome(row.name, row.queue, kind)
    telemetry.reclaimed()


def report_exhausted(row: ExhaustedRow, error: str) -> None:
    """A pending job dead-lettered with no attempt left (``error``), once that committed:
    no attempt ended, so ``job_dead_lettered`` alone."""
    logger.error(
        "job %s #%s dead-lettered: %s",
        row.name,
        row.id,
        error,
        extra={"event": "job_dead_lettered", "job_id": row.id, "job_name": row.name},
    )
    telemetry.outcome(row.name, row.queue, "dead_lettered")
    send(
        signals.job_dead_lettered,
        job_id=row.id,
        name=row.name,
        queue=row.queue,
        attempt=row.attempt,
        error=error,
    )


def report_cancelled(job: Job) -> None:
    """A pending or waiting job cancelled, once that committed (by ``cancel_job()``, or by
    the cascade of a dependency that failed, whose error it carries): it never ran, so its
    ``attempt`` is None."""
    logger.info("job #%s cancelled", job.pk, extra={"event": "job_cancelled", "job_id": job.pk})
    error = job.last_error if job.last_error.startswith(DEPENDENCY_FAILED) else None
    details = {"error": error} if error else {}
    send(
        signals.job_cancelled,
        job_id=job.pk,
        name=job.name,
        queue=job.queue,
        attempt=None,
        **details,
    )


def report_followed(followed: Followed, using: str) -> None:
    """What the workflow steps of some jobs' ends did, once they committed: each dependent
    released (a debug line) or cancelled (``job_cancelled``), each callback enqueued
    (``job_enqueued``), each batch finished (``batch_finished``)."""
    if not followed:
        return
    if followed.deferred:
        logger.warning(
            "workflow steps of job(s) %s not taken (%s): the leader takes them within its next"
            " maintenance pass",
            ", ".join(f"#{job_id}" for job_id in followed.deferred),
            followed.error,
            extra={"event": "workflow_steps_deferred", "job_ids": followed.deferred},
        )
    for job_id in followed.released:
        logger.debug(
            "job #%s released: what it waited for has succeeded",
            job_id,
            extra={"event": "job_released", "job_id": job_id},
        )
    report_enqueued(followed.callbacks, using)

    def announce() -> None:
        for job in followed.cancelled:
            report_cancelled(job)
        for batch in followed.finished:
            report_batch_finished(batch)

    transaction.on_commit(announce, using=using)


def report_batch_finished(batch: Batch) -> None:
    counts = {
        "total": batch.total,
        "succeeded": batch.succeeded,
        "dead_lettered": batch.dead_lettered,
        "cancelled": batch.cancelled,
    }
    logger.info(
        "batch #%s finished: %s of %s succeeded, %s dead-lettered, %s cancelled",
        batch.pk,
        batch.succeeded,
        batch.total,
        batch.dead_lettered,
        batch.cancelled,
        extra={"event": "batch_finished", "batch_id": batch.pk, **counts},
    )
    send(signals.batch_finished, sender=Batch, batch_id=batch.pk, **counts)


# -- lease events ----------------------------------------------------------------------

#: name -> (log level, line); each line starts with the job and its attempt.
LEASE_EVENTS: dict[str, tuple[int, str]] = {
    "job_lease_lost": (
        logging.WARNING,
        "lease lost before its outcome (%(outcome)s) was recorded; dropped",
    ),
    "job_lease_given_up": (
        logging.WARNING,
        "lease given up, %(why)s; handler cancelled, nothing recorded",
    ),
    "job_timed_out": (logging.WARNING, "timed out; handler cancelled"),
    "job_cancel_requested": (logging.INFO, "cancel requested; handler cancelled"),
    "job_cancelled_at_stop": (
        logging.INFO,
        "cancel requested; cancelled at the stop, not handed back",
    ),
    "job_blocked_loop": (
        logging.WARNING,
        "its async handler has held the event loop for %(seconds).1f s "
        "(ASYNC_BLOCKED_SECONDS is %(limit)s): it runs blocking code, and every async job "
        "of this worker waits for it; call blocking code through sync_to_async() or "
        "asyncio.to_thread()",
    ),
    "job_late_result": (
        logging.WARNING,
        "handler returned after its attempt was over; result dropped",
    ),
    "job_progress_dropped": (
        logging.WARNING,
        "its progress report cannot be stored (%(error)s); dropped",
    ),
    "job_outcome_refused": (
        logging.ERROR,
        "its outcome (%(outcome)s) %(why)s (%(error)s); recorded as a failed attempt",
    ),
    "job_outcome_unrecorded": (
        logging.ERROR,
        "not even its failure could be recorded (%(error)s); its lease will run out",
    ),
    "job_reclaim_failed": (  # the rescuer's write failed: the next pass tries again
        logging.WARNING,
        "lapsed lease could not be taken back, skipped: %(error)s",
    ),
}
#: The event name a lease, leader or recurring event is logged under, where it differs
#: from its key.
LOGGED_AS = {
    "job_lease_given_up": "job_lease_lost",
    "job_cancelled_at_stop": "job_cancelled",
    "leader_stops_acting": "leader_lost",
    "recurring_not_fired": "recurring_error",
    "recurring_passed": "recurring_error",
    "recurring_broken": "recurring_error",
}


def report_lease(event: str, job_id: int, attempt: int, **details: Any) -> None:
    """One lease event of job ``job_id``'s ``attempt`` (see :data:`LEASE_EVENTS`)."""
    level, line = LEASE_EVENTS[event]
    if logger.isEnabledFor(level):
        logger.log(
            level,
            "job #%s attempt %s: %s",
            job_id,
            attempt,
            line % details if details else line,
            extra={"event": LOGGED_AS.get(event, event), "job_id": job_id, "attempt": attempt},
        )


def report_loop_blocked(claimed: ClaimedJob | None, seconds: float, limit: float) -> None:
    """The worker's event loop has not turned for ``seconds``: ``claimed``'s async handler
    holds it, or something else does (None)."""
    if claimed is not None:
        report_lease("job_blocked_loop", *claimed.pair, seconds=seconds, limit=limit)
        return
    logger.warning(
        "the event loop of async handlers has not turned for %.1f s "
        "(ASYNC_BLOCKED_SECONDS is %s): something on it runs blocking code",
        seconds,
        limit,
        extra={"event": "job_blocked_loop"},
    )


# -- the leader lease ------------------------------------------------------------------

#: name -> (log level, line), formatted with the worker (``owner``), the lease's ``epoch``
#: and the details.
LEADER_EVENTS: dict[str, tuple[int, str]] = {
    "leader_elected": (
        logging.INFO,
        "worker %(owner)s leads (epoch %(epoch)s): it takes back expired leases, fires the "
        "recurring schedules and prunes finished jobs for every worker",
    ),
    "leader_lost": (  # another process took the lease
        logging.WARNING,
        "worker %(owner)s no longer leads: the leader lease (epoch %(epoch)s) is held by "
        "%(holder)s, epoch %(held)s",
    ),
    "leader_stops_acting": (  # not renewed: too little of the lease left to act on
        logging.WARNING,
        "worker %(owner)s stops acting as leader: it could not renew the leader lease "
        "(epoch %(epoch)s), which lapses at %(lapses)s",
    ),
    "leader_resigned": (
        logging.INFO,
        "worker %(owner)s hands over the leader lease (epoch %(epoch)s)",
    ),
}


def report_leader(event: str, owner: str, epoch: int, **details: Any) -> None:
    """One event of worker ``owner``'s leader lease (see :data:`LEADER_EVENTS`)."""
    level, line = LEADER_EVENTS[event]
    logger.log(
        level,
        line,
        {"owner": owner, "epoch": epoch, **details},
        extra={"event": LOGGED_AS.get(event, event), "owner": owner, "epoch": epoch},
    )


# -- recurring schedules ---------------------------------------------------------------

#: name -> (log level, line), formatted with the ``schedule``'s name and the details.
RECURRING_EVENTS: dict[str, tuple[int, str]] = {
    "recurring_fired": (
        logging.INFO,
        "recurring job %(schedule)r fired for %(occurrence)s: job #%(job_id)s",
    ),
    "recurring_skipped": (  # its previous run holds the unique key
        logging.INFO,
        "recurring job %(schedule)r: previous run still live; occurrence %(occurrence)s skipped",
    ),
    "recurring_not_fired": (logging.ERROR, "recurring job %(schedule)r not fired: %(error)s"),
    "recurring_passed": (  # the row cannot make a job: tried again at its next occurrence
        logging.ERROR,
        "recurring job %(schedule)r not fired for %(occurrence)s: %(error)s; occurrence "
        "skipped, next try at %(following)s",
    ),
    "recurring_broken": (  # no next occurrence: nothing to wait for
        logging.ERROR,
        "recurring job %(schedule)r not fired for %(occurrence)s: %(error)s; schedule "
        "disabled: fix its cron or time zone and enable it again",
    ),
    "recurring_disabled": (
        logging.WARNING,
        "%(count)s recurring job(s) removed from DJANGO_JOBS['RECURRING'] were disabled",
    ),
}


def report_recurring(event: str, schedule: str | None = None, **details: Any) -> None:
    """One event of recurring ``schedule`` (see :data:`RECURRING_EVENTS`); its name, and
    the ``job_id`` of a fired occurrence, are in the record's ``extra``."""
    level, line = RECURRING_EVENTS[event]
    extra: dict[str, Any] = {"event": LOGGED_AS.get(event, event)}
    if schedule is not None:
        extra["schedule"] = schedule
    if "job_id" in details:
        extra["job_id"] = details["job_id"]
    logger.log(level, line, {"schedule": schedule, **details}, extra=extra)
