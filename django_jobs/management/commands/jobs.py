"""``manage.py jobs``: see and steer jobs and queues. A thin shell over ``stats``, ``control``
and pruning."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, router
from django.utils import timezone

from django_jobs import health
from django_jobs.conf import RETENTION_STATUSES, settings
from django_jobs.control import (
    RETRYABLE_STATUSES,
    cancel_job,
    pause_queue,
    resume_queue,
    retry_job_and_dependents,
)
from django_jobs.db.records import QueueLimits
from django_jobs.exceptions import JobNotCancellable
from django_jobs.maintenance.cleaner import StatusPruned, prune_statuses
from django_jobs.management.arguments import parse_duration
from django_jobs.management.output import (
    fields,
    format_age,
    format_duration,
    format_time,
    shorten,
    table,
    to_json,
)
from django_jobs.models import Attempt, Job, JobStatus
from django_jobs.redaction import mask_payload
from django_jobs.stats import (
    LeaderInfo,
    LiveWorker,
    QueueStats,
    WaitingName,
    limits_in_words,
    live_workers_and_leader,
    queue_stats,
    waiting_for_names,
)
from django_jobs.text import is_number_text

JOB_FIELDS = [field.attname for field in Job._meta.concrete_fields]
ATTEMPT_FIELDS = ["number", "owner", "started_at", "finished_at", "outcome", "error", "traceback"]
# What ``jobs retry`` did with an id, and how a table says it. All but "retried" fail the
# command, as ``jobs cancel`` of a finished job does.
RETRY_RESULTS = {
    "unknown": "unknown id",
    "refused": "refused: a live job has the same unique_key",
    "retried": "retried",
    "waiting": "retried: waiting for what it depends on",
    "not_retryable": "not dead-lettered or cancelled",
}
FAILED_RESULTS = ("unknown", "refused", "not_retryable")
# What ``jobs cancel`` did with an id. The last two fail the command.
CANCEL_RESULTS = {
    "cancelled": "cancelled",
    "requested": "running: asked to stop at its worker's next heartbeat",
    "finished": "already finished",
    "unknown": "unknown id",
}
CANCEL_FAILED = ("finished", "unknown")


class QueueVerb(NamedTuple):
    """``jobs pause`` or ``jobs resume``: the verb, and the (result, line) it prints when it
    changed the queue and when the queue was so already. Both exit 0."""

    act: Callable[..., bool]
    changed: tuple[str, str]
    unchanged: tuple[str, str]


QUEUE_VERBS = {
    "pause": QueueVerb(
        pause_queue,
        (
            "paused",
            "queue {name} paused; running jobs finish, none start until `jobs resume {name}`",
        ),
        ("paused_already", "queue {name} was paused already"),
    ),
    "resume": QueueVerb(
        resume_queue,
        ("resumed", "queue {name} resumed; its workers start its jobs again"),
        ("not_paused", "queue {name} was not paused"),
    ),
}


def job_id(text: str) -> int:
    if not is_number_text(text.strip()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a job id: {text!r}")
    return int(text)


#: Django's options of every command (``BaseCommand.create_parser``), as each subcommand takes
#: them: a value given after the subcommand is kept; one not given keeps the command's own.
DJANGO_OPTIONS: list[tuple[tuple[str, ...], dict[str, Any]]] = [
    (("-v", "--verbosity"), {"type": int, "choices": [0, 1, 2, 3]}),
    (("--settings",), {"metavar": "SETTINGS"}),
    (("--pythonpath",), {"metavar": "PYTHONPATH"}),
    (("--traceback",), {"action": "store_true"}),
    (("--no-color",), {"action": "store_true"}),
    (("--force-color",), {"action": "store_true"}),
    (("--skip-checks",), {"action": "store_true"}),
]


def django_options(parser: argparse.ArgumentParser) -> None:
    """Let ``jobs status --settings X -v 2`` work as ``jobs --settings X -v 2 status`` does."""
    for flags, options in DJANGO_OPTIONS:
        parser.add_argument(*flags, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **options)


def positive_int(text: str) -> int:
    value = int(text) if is_number_text(text.strip()) else 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1: {text!r}")
    return value


def duration(text: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class Command(BaseCommand):
    help = (
        "See and steer django-jobs: status, list, show, retry, cancel and prune jobs; "
        "pause and resume queues."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        common = CommandParser(add_help=False)
        common.add_argument("--json", action="store_true", help="One JSON document on stdout.")
        django_options(common)
        sub = parser.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")
        sub.add_parser(
            "status", parents=[common], help="Per queue: counts by status, oldest due; workers."
        )
        listing = sub.add_parser("list", parents=[common], help="Jobs, newest first.")
        listing.add_argument("--status", choices=JobStatus.values)
        listing.add_argument("--queue", metavar="Q")
        listing.add_argument("--name", metavar="N", help="The registered job name.")
        listing.add_argument("--limit", type=positive_int, default=50, metavar="K")
        show = sub.add_parser("show", parents=[common], help="A job's fields and its attempts.")
        show.add_argument("id", type=job_id)
        retry = sub.add_parser(
            "retry",
            parents=[common],
            help="Put dead-lettered or cancelled jobs back in their queue, due now.",
        )
        retry.add_argument("ids", nargs="*", type=job_id, metavar="ID")
        retry.add_argument("--all-dead-lettered", action="store_true")
        retry.add_argument(
            "--queue", metavar="Q", help="With --all-dead-lettered: this queue only."
        )
        cancel = sub.add_parser(
            "cancel",
            parents=[common],
            help="Cancel jobs: pending ones at once, running ones at their next heartbeat.",
        )
        cancel.add_argument("ids", nargs="+", type=job_id, metavar="ID")
        pause = sub.add_parser(
            "pause",
            parents=[common],
            help="Stop every worker from starting the queue's jobs (running ones finish).",
        )
        pause.add_argument("queue", metavar="NAME")
        pause.add_argument(
            "--force",
            action="store_true",
            help="Pause it even if the project names it nowhere and no job is on it.",
        )
        resume = sub.add_parser("resume", parents=[common], help="Serve a paused queue again.")
        resume.add_argument("queue", metavar="NAME")
        prune = sub.add_parser(
            "prune",
            parents=[common],
            help="Delete finished jobs past their retention now, with their attempts.",
        )
        prune.add_argument(
            "--dry-run", action="store_true", help="Count what would go; delete nothing."
        )
        prune.add_argument(
            "--status",
            action="append",
            dest="statuses",
            choices=RETENTION_STATUSES,
            metavar="S",
            help=f"Only this finished status (repeatable): {', '.join(RETENTION_STATUSES)}.",
        )
        prune.add_argument(
            "--older-than",
            type=duration,
            metavar="DURATION",
            help="Instead of RETENTION, for every status pruned: 7d, 12h, 30m, 45s, 2w, 1d12h.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        self.using = router.db_for_write(Job)
        self.as_json = options["json"]
        try:
            getattr(self, f"handle_{options['subcommand']}")(options)
        except DatabaseError as exc:  # one line, as for any other error: --traceback adds it
            raise CommandError(f"The database answered {type(exc).__name__}: {exc}") from exc

    def emit(self, document: Any, text: str) -> None:
        self.stdout.write(to_json(document) if self.as_json else text)

    def handle_status(self, options: dict[str, Any]) -> None:
        now = timezone.now()
        workers, leader = live_workers_and_leader(self.using, now)
        queues = queue_stats(self.using, now=now, workers=workers)
        waiting = waiting_for_names(self.using, now, workers)
        seen = health.read(self.using, now)
        document = {
            "now": now,
            "queues": [
                {
                    **vars(stats),
                    "limits": limits_document(stats.limits),
                    "pending": stats.pending,
                    "oldest_due_age_seconds": json_seconds(stats.oldest_due_age(now)),
                    "paused": stats.paused_at is not None,
                }
                for stats in queues
            ],
            "workers": [vars(worker) for worker in workers],
            "leader": None if leader is None else vars(leader),
            "waiting": [
                {**vars(w), "oldest_due_age_seconds": json_seconds(w.age(now))} for w in waiting
            ],
            "health": health.document(seen),
        }
        counts = [
            "waiting",
            "due",
            "scheduled",
            "retrying",
            "running",
            "succeeded",
            "dead_lettered",
        ]
        queue_table = table(
            ["queue", *counts, "cancelled", "oldest due", "served"],
            [
                [
                    s.queue,
                    *(getattr(s, c) for c in counts),
                    s.cancelled,
                    format_age(s.oldest_due_age(now)),
                    "yes" if s.served else "NO WORKER",
                ]
                for s in queues
            ],
        )
        worker_table = table(
            ["worker", "queues", "started", "last heartbeat", "running"],
            [
                [
                    label,
                    ",".join(w.queues),
                    format_time(w.started_at),
                    f"{format_age(now - w.last_heartbeat_at)} ago",
                    running,
                ]
                for label, w, running in grouped_workers(workers)
            ],
        )
        notes = [line for line in map(queue_line, queues) if line]
        notes += [waiting_line(w, now) for w in waiting]
        if notes:
            queue_table += "\n\n" + "\n".join(notes)
        workers_text = worker_table if workers else "No live workers."
        if workers or leader:
            workers_text += f"\n\n{leader_line(leader)}"
        told = health.summary(seen, now)
        if told:
            queue_table += f"\n\nDatabase: {told}"
            queue_table += "".join(f"\nWARNING: {problem}." for problem in health.problems(seen))
        self.emit(document, f"As of {format_time(now)}\n\n{queue_table}\n\n{workers_text}")

    def handle_pause(self, options: dict[str, Any]) -> None:
        self.steer(QUEUE_VERBS["pause"], options["queue"], force=options["force"])

    def handle_resume(self, options: dict[str, Any]) -> None:
        self.steer(QUEUE_VERBS["resume"], options["queue"])

    def steer(self, verb: QueueVerb, name: str, **options: Any) -> None:
        """Pause or resume queue ``name``; one line (or document) saying what it did."""
        try:
            changed = verb.act(name, using=self.using, **options)
        except ValueError as exc:  # a name no queue can have, or one named nowhere
            raise CommandError(str(exc)) from exc
        result, line = verb.changed if changed else verb.unchanged
        self.emit({"queue": name, "result": result}, line.format(name=name))

    def handle_list(self, options: dict[str, Any]) -> None:
        jobs = Job.objects.using(self.using).order_by("-id")
        for key in ("status", "queue", "name"):
            if options[key] is not None:
                jobs = jobs.filter(**{key: options[key]})
        rows = list(jobs[: options["limit"]])
        headers = ["id", "name", "queue", "status", "attempts", "run at", "finished", "last error"]
        text = table(
            headers,
            [
                [
                    job.id,
                    job.name,
                    job.queue,
                    job.status,
                    f"{job.attempts_used}/{job.max_attempts}",
                    format_time(job.run_at),
                    format_time(job.finished_at),
                    shorten(job.last_error, 50),
                ]
                for job in rows
            ],
        )
        self.emit({"jobs": [job_document(job) for job in rows]}, text if rows else "No jobs.")

    def handle_show(self, options: dict[str, Any]) -> None:
        job = Job.objects.using(self.using).filter(id=options["id"]).first()
        if job is None:
            raise CommandError(f"No job with id {options['id']}.")
        attempts = list(Attempt.objects.using(self.using).filter(job_id=job.id).order_by("number"))
        shown = job_document(job)
        document = {
            "job": shown,
            "attempts": [{name: getattr(a, name) for name in ATTEMPT_FIELDS} for a in attempts],
        }
        text = fields({name: show_value(value) for name, value in shown.items()})
        attempts_text = table(
            ["attempt", "outcome", "owner", "started", "finished", "took", "error"],
            [
                [
                    a.number,
                    a.outcome or "-",
                    a.owner,
                    format_time(a.started_at),
                    format_time(a.finished_at),
                    format_age(a.finished_at - a.started_at) if a.finished_at else "-",
                    shorten(a.error),
                ]
                for a in attempts
            ],
        )
        shown_attempts = attempts_text if attempts else "No attempts yet."
        self.emit(document, f"{text}\n\n{shown_attempts}{last_traceback(attempts)}")

    def handle_retry(self, options: dict[str, Any]) -> None:
        ids: list[int] = options["ids"]
        if options["all_dead_lettered"] == bool(ids):
            raise CommandError("Give job ids or --all-dead-lettered (one of them).")
        if options["queue"] is not None and not options["all_dead_lettered"]:
            raise CommandError("--queue goes with --all-dead-lettered.")
        if options["all_dead_lettered"]:
            dead = Job.objects.using(self.using).dead_lettered().order_by("id")
            if options["queue"] is not None:
                dead = dead.filter(queue=options["queue"])
            ids = list(dead.values_list("id", flat=True))
        results = [self.retry_one(id) for id in dict.fromkeys(ids)]
        text = table(
            ["id", "result"],
            [
                [
                    r["id"],
                    RETRY_RESULTS[r["result"]]
                    + (f" (it is {r['status']})" * bool(r["status"]))
                    + (f"; {r['dependents']} dependent(s) back to waiting" * bool(r["dependents"])),
                ]
                for r in results
            ],
        )
        self.emit({"results": results}, text if results else "No dead-lettered jobs.")
        failed = [str(r["id"]) for r in results if r["result"] in FAILED_RESULTS]
        if failed:
            raise CommandError(f"Not retried: job {', '.join(failed)}.")

    def handle_cancel(self, options: dict[str, Any]) -> None:
        results = [self.cancel_one(id) for id in dict.fromkeys(options["ids"])]
        text = table(
            ["id", "result"],
            [
                [r["id"], CANCEL_RESULTS[r["result"]] + (f" ({r['status']})" * bool(r["status"]))]
                for r in results
            ],
        )
        self.emit({"results": results}, text)
        failed = [str(r["id"]) for r in results if r["result"] in CANCEL_FAILED]
        if failed:
            raise CommandError(f"Not cancelled: job {', '.join(failed)}.")

    def handle_prune(self, options: dict[str, Any]) -> None:
        now = timezone.now()
        began = time.monotonic()
        results = prune_statuses(
            now,
            using=self.using,
            retention=settings.RETENTION,
            statuses=options["statuses"],
            older_than=options["older_than"],
            dry_run=options["dry_run"],
        )
        seconds = round(time.monotonic() - began, 3)
        total = sum(r.count for r in results)
        counted = "would_delete" if options["dry_run"] else "deleted"
        document = {
            "now": now,
            "dry_run": options["dry_run"],
            "statuses": [{**prune_document(r), counted: r.count} for r in results],
            counted: total,
            "seconds": seconds,
        }
        text = table(
            ["status", "older than", "finished before", counted.replace("_", " ")],
            [
                [
                    r.status,
                    format_duration(r.kept) if r.kept else "kept forever",
                    format_time(r.cutoff),
                    r.count,
                ]
                for r in results
            ],
        )
        if options["dry_run"]:
            summary = f"Would delete {total} finished job(s); dry run, nothing deleted"
        else:
            summary = f"Deleted {total} finished job(s)"
        self.emit(document, f"{text}\n\n{summary} ({seconds:.3f} s).")

    def cancel_one(self, id: int) -> dict[str, Any]:
        """``{"id", "result", "status"}``: status is given when the job had finished."""
        try:
            job = cancel_job(id, using=self.using)
        except Job.DoesNotExist:
            return {"id": id, "result": "unknown", "status": None}
        except JobNotCancellable:
            status = Job.objects.using(self.using).filter(id=id).values_list("status", flat=True)
            return {"id": id, "result": "finished", "status": status.first()}
        done = "cancelled" if job.status == JobStatus.CANCELLED else "requested"
        return {"id": id, "result": done, "status": None}

    def retry_one(self, id: int) -> dict[str, Any]:
        """``{"id", "result", "status", "dependents"}``: status is given when the job was
        not retryable; dependents, how many jobs its failure had cancelled went back to
        waiting (and theirs)."""
        back = retry_job_and_dependents(id, using=self.using)
        if back is not None:
            waits = id in back
            result = "waiting" if waits else "retried"
            return {"id": id, "result": result, "status": None, "dependents": len(back) - waits}
        found = Job.objects.using(self.using).filter(id=id).values_list("status", flat=True).first()
        if found is None:
            return {"id": id, "result": "unknown", "status": None, "dependents": 0}
        if found in RETRYABLE_STATUSES:
            return {"id": id, "result": "refused", "status": None, "dependents": 0}
        return {"id": id, "result": "not_retryable", "status": found, "dependents": 0}


def queue_line(stats: QueueStats) -> str:
    """The line under the queue table of a queue paused or limited; empty for the others."""
    said = []
    if stats.paused_at is not None:
        since = format_time(stats.paused_at)
        resume = f"`jobs resume {stats.queue}`"
        said.append(f"paused since {since}, none of its jobs start until {resume}")
    limits = stats.limits
    if limits is not None:
        slots = limits.global_limit
        in_use = f" ({stats.slots_in_use} of {slots} slots in use)" if slots is not None else ""
        said.append(f"limits: {limits_in_words(limits)}{in_use}")
    return f"Queue {stats.queue}: {'; '.join(said)}." if said else ""


def waiting_line(waiting: WaitingName, now: datetime) -> str:
    """The line under the queue table of due jobs no live worker knows the name of."""
    jobs = "1 job" if waiting.count == 1 else f"{waiting.count} jobs"
    oldest = "" if waiting.count == 1 else "the oldest "
    return (
        f"Queue {waiting.queue}: {jobs} waiting for a worker that knows `{waiting.name}`,"
        f" {oldest}for {format_age(waiting.age(now))}."
    )


def limits_document(limits: QueueLimits | None) -> dict[str, Any] | None:
    if limits is None:
        return None
    rate = limits.rate
    return {
        "global_limit": limits.global_limit,
        "rate": None if rate is None else {"jobs": rate.jobs, "seconds": rate.seconds},
        "keyed": limits.keyed,
    }


def grouped_workers(workers: list[LiveWorker]) -> list[tuple[str, LiveWorker, int]]:
    """(label, worker, running jobs) per line: each supervisor (``runjobs --processes``),
    its running jobs its children's, followed by its children, indented."""
    ids = {worker.id for worker in workers}
    children: dict[str, list[LiveWorker]] = {}
    for worker in workers:
        if worker.supervisor in ids:
            children.setdefault(str(worker.supervisor), []).append(worker)
    lines: list[tuple[str, LiveWorker, int]] = []
    for worker in workers:
        if worker.supervisor in ids:
            continue  # listed under its supervisor
        kids = children.get(worker.id, [])
        if not kids:
            lines.append((marked(worker.id, worker), worker, worker.running))
            continue
        running = worker.running + sum(kid.running for kid in kids)
        lines.append((marked(f"{worker.id} ({len(kids)} processes)", worker), worker, running))
        lines += [(marked(f"  {kid.id}", kid), kid, kid.running) for kid in kids]
    return lines


def marked(label: str, worker: LiveWorker) -> str:
    """A worker's label, ``(leader)`` after it for the process that holds the leader lease."""
    return f"{label} (leader)" if worker.leads else label


def leader_line(leader: LeaderInfo | None) -> str:
    """The line under the workers: which process leads, in which epoch, since when."""
    if leader is None:
        return "No leader yet: the rescuer, the recurring scheduler and pruning wait for one."
    since = format_time(leader.elected_at)
    return f"Leader: {leader.owner} (epoch {leader.epoch}, since {since})."


def last_traceback(attempts: list[Attempt]) -> str:
    """The traceback of the latest attempt that has one, as a block of ``jobs show``'s text
    (``--json`` gives every attempt's)."""
    traced = [a for a in attempts if a.traceback]
    if not traced:
        return ""
    return f"\n\nTraceback of attempt {traced[-1].number}:\n{traced[-1].traceback.rstrip()}"


def job_document(job: Job) -> dict[str, Any]:
    document = {name: getattr(job, name) for name in JOB_FIELDS}
    document["payload"] = mask_payload(job.payload)
    return document


def prune_document(result: StatusPruned) -> dict[str, Any]:
    return {
        "status": result.status,
        "older_than_seconds": json_seconds(result.kept),
        "cutoff": result.cutoff,
    }


def show_value(value: Any) -> str:
    if value is None:
        return "-"
    if hasattr(value, "tzinfo"):
        return format_time(value)
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def json_seconds(age: Any) -> float | None:
    return None if age is None else age.total_seconds()
