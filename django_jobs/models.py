"""Jobs are rows: ``Job``, its ``Attempt`` rows, and ``RecurringJob`` schedules."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, NamedTuple

from django.core.checks import CheckMessage
from django.db import models
from django.db.models import F, Q
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init
from django.utils import timezone as tz


class JobStatus(models.TextChoices):
    #: Waits for the jobs it depends on (``depends_on``): no worker claims it yet.
    WAITING = "waiting", "waiting"
    PENDING = "pending", "pending"
    RUNNING = "running", "running"
    SUCCEEDED = "succeeded", "succeeded"
    DEAD_LETTERED = "dead_lettered", "dead-lettered"
    CANCELLED = "cancelled", "cancelled"


LIVE_STATUSES = (JobStatus.PENDING, JobStatus.RUNNING)
#: Not yet ended: what a workflow's cascade cancels, and what a batch waits for.
UNENDED_STATUSES = (JobStatus.WAITING, JobStatus.PENDING, JobStatus.RUNNING)
FINISHED_STATUSES = (JobStatus.SUCCEEDED, JobStatus.DEAD_LETTERED, JobStatus.CANCELLED)


class AttemptOutcome(models.TextChoices):
    SUCCEEDED = "succeeded", "succeeded"
    FAILED = "failed", "failed"
    LEASE_EXPIRED = "lease_expired", "lease expired"
    RELEASED = "released", "released"
    TIMED_OUT = "timed_out", "timed out"
    CANCELLED = "cancelled", "cancelled"
    SNOOZED = "snoozed", "snoozed"


class JobQuerySet(models.QuerySet["Job"]):
    """The states the code names, spelled out once."""

    def live(self) -> JobQuerySet:
        """Pending or running."""
        return self.filter(status__in=LIVE_STATUSES)

    def pending(self) -> JobQuerySet:
        return self.filter(status=JobStatus.PENDING)

    def due(self, now: datetime) -> JobQuerySet:
        """Pending, due at ``now``, with an attempt left: what a claim takes."""
        return self.filter(
            status=JobStatus.PENDING, run_at__lte=now, attempts_used__lt=F("max_attempts")
        )

    def exhausted(self) -> JobQuerySet:
        """Pending with no attempt left (a row written by hand, say): never claimable."""
        return self.filter(status=JobStatus.PENDING, attempts_used__gte=F("max_attempts"))

    def running(self) -> JobQuerySet:
        return self.filter(status=JobStatus.RUNNING)

    def unleased(self, now: datetime) -> JobQuerySet:
        """Running with no live lease at ``now``: expired, or without an expiry or an owner.

        Nobody can renew a lease without an owner, and one without an expiry
        never ends: both are as good as lapsed.
        """
        no_live_lease = (
            Q(lease_expires_at__lt=now)
            | Q(lease_expires_at__isnull=True)
            | Q(lease_owner__isnull=True)
            | Q(lease_owner="")
        )
        return self.running().filter(no_live_lease)

    def held_by(self, owners: Iterable[str]) -> JobQuerySet:
        """Running under one of ``owners``' leases."""
        return self.running().filter(lease_owner__in=list(owners))

    def finished(self) -> JobQuerySet:
        """Succeeded, dead-lettered or cancelled."""
        return self.filter(status__in=FINISHED_STATUSES)

    def dead_lettered(self) -> JobQuerySet:
        return self.filter(status=JobStatus.DEAD_LETTERED)

    def waiting(self) -> JobQuerySet:
        """Waiting for the jobs they depend on."""
        return self.filter(status=JobStatus.WAITING)

    def unfollowed(self) -> JobQuerySet:
        """Ended, but the workflow steps of their end not yet taken (their dependents
        released or cancelled, their batch counted): what a crash between a job's end and
        its steps leaves, which the leader repairs."""
        return self.finished().filter(workflow_pending=True)


#: Django's warnings that a database has no partial indexes or partial unique constraints:
#: on MariaDB and MySQL, migration 0011 makes what they give there (its text says how).
PARTIAL_INDEX_WARNINGS = frozenset({"models.W036", "models.W037"})


class PartialIndexesHandled:
    """A model whose partial indexes migration 0011 stands in for on MariaDB and MySQL."""

    @classmethod
    def check(cls, **kwargs: Any) -> list[CheckMessage]:
        messages: list[CheckMessage] = super().check(**kwargs)  # type: ignore[misc]
        return [m for m in messages if m.id not in PARTIAL_INDEX_WARNINGS]


class Batch(models.Model):
    """Jobs enqueued together inside ``with batch(...)``: when every member has ended, its
    callbacks are enqueued, once each (:mod:`django_jobs.workflows`).

    The counts are kept by each member's end, in the same guarded step that finishes the
    batch; ``callbacks`` holds each callback's job as it will be inserted, validated when
    the batch was made.
    """

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=200, blank=True, default="", help_text="Yours to set.")
    total = models.PositiveIntegerField(default=0, help_text="Members, callbacks not counted.")
    succeeded = models.PositiveIntegerField(default=0)
    dead_lettered = models.PositiveIntegerField(default=0)
    cancelled = models.PositiveIntegerField(default=0)
    callbacks = models.JSONField(
        default=dict,
        blank=True,
        help_text="on_finish, on_success, on_failure: the jobs to enqueue.",
    )
    callback_jobs = models.JSONField(
        default=dict, blank=True, help_text="The ids of the callbacks enqueued, by their kind."
    )
    created_at = models.DateTimeField(default=tz.now)
    finished_at = models.DateTimeField(
        null=True, blank=True, help_text="When its last member ended and its callbacks went in."
    )

    class Meta:
        db_table = "django_jobs_batch"
        ordering = ["-id"]
        verbose_name = "batch"
        verbose_name_plural = "batches"

    def __str__(self) -> str:
        label = f"batch #{self.pk}" + (f" {self.name}" if self.name else "")
        return f"{label} ({self.ended}/{self.total} ended)"

    @property
    def ended(self) -> int:
        return self.succeeded + self.dead_lettered + self.cancelled


class Job(PartialIndexesHandled, models.Model):
    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=200, help_text="The registered job name.")
    queue = models.CharField(max_length=100, default="default")
    payload = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=20, choices=JobStatus.choices, default=JobStatus.PENDING)
    priority = models.IntegerField(default=0, help_text="Higher runs first.")
    run_at = models.DateTimeField(default=tz.now, help_text="Not claimed before this.")
    attempt = models.PositiveIntegerField(
        default=0, help_text="Number of the latest attempt (the fencing token)."
    )
    attempts_used = models.PositiveIntegerField(
        default=0, help_text="Attempts charged against max_attempts."
    )
    max_attempts = models.PositiveIntegerField(default=5)
    lease_owner = models.CharField(max_length=255, null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    unique_key = models.CharField(max_length=255, null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    cancel_requested_at = models.DateTimeField(
        null=True, blank=True, help_text="When cancel_job() asked the job's worker to stop it."
    )
    result = models.JSONField(
        null=True, blank=True, help_text="The handler's return value, once it succeeded."
    )
    # ctx.progress(done, total, note): written at most once a second per job.
    progress_done = models.BigIntegerField(null=True, blank=True)
    progress_total = models.BigIntegerField(null=True, blank=True)
    progress_note = models.CharField(max_length=200, blank=True, default="")
    schedule = models.CharField(
        max_length=200, null=True, blank=True, help_text="The recurring schedule that fired it."
    )
    # @job(concurrency=N) with schedule_job(..., concurrency_key=K): at most N jobs of the
    # queue with key K run at once (docs/how-to/flow-control.md).
    concurrency_key = models.CharField(
        max_length=200,
        null=True,
        blank=True,
        help_text="Jobs of a queue with the same key run at most concurrency_limit at once.",
    )
    concurrency_limit = models.PositiveIntegerField(
        null=True, blank=True, help_text="How many jobs with this key may run at once."
    )
    # The enqueue's trace context (W3C ``traceparent``, ``tracestate``), when it was made
    # inside a recording OpenTelemetry span: its attempts' spans follow it (docs/how-to/
    # observability.md). NULL without tracing.
    trace_context = models.JSONField(
        null=True,
        blank=True,
        editable=False,
        help_text="The trace context of the span that enqueued it (W3C traceparent).",
    )
    # True once wait_for() or await_job() waits for its end: on PostgreSQL its end is then
    # NOTIFYed to them (a trigger); NULL otherwise, and no end of it notifies anyone.
    awaited = models.BooleanField(
        null=True,
        blank=True,
        editable=False,
        help_text="Someone waits for its end (wait_for, await_job).",
    )
    created_at = models.DateTimeField(default=tz.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Workflows (docs/how-to/workflows.md): the batch the job is a member or a callback of,
    # and whether its end has steps not yet taken (NULL: a job in no workflow, whose end
    # has none; True until its end's steps are taken, then False).
    batch = models.ForeignKey(
        Batch,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="jobs",
        db_index=False,
        db_constraint=False,
    )
    workflow_pending = models.BooleanField(
        null=True,
        blank=True,
        help_text="Its end releases dependents or counts in a batch, and that is still to do.",
    )

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-id"]
        indexes = [
            # The claim reads live, due jobs of one queue in this order; the
            # index holds pending rows only, so it stays small however many
            # finished rows pile up.
            models.Index(
                fields=["queue", "-priority", "run_at", "id"],
                condition=Q(status="pending"),
                name="django_jobs_claim_idx",
            ),
            # The maintenance pass looks for running jobs whose lease expired.
            models.Index(
                fields=["lease_expires_at"],
                condition=Q(status="running"),
                name="django_jobs_lease_idx",
            ),
            # Finished jobs by status and age (the admin, dead letters, retention).
            # Finished rows only, so a claim or a retry writes no entry in it.
            models.Index(
                fields=["status", "finished_at"],
                condition=Q(status__in=["succeeded", "dead_lettered", "cancelled"]),
                name="django_jobs_finished_idx",
            ),
            # The jobs a recurring schedule fired, newest first (its admin page).
            models.Index(
                fields=["schedule", "-id"],
                condition=Q(schedule__isnull=False),
                name="django_jobs_schedule_idx",
            ),
            # Jobs waiting for others, by queue (the dashboard's and `jobs status`' counts).
            models.Index(
                fields=["queue"],
                condition=Q(status="waiting"),
                name="django_jobs_waiting_idx",
            ),
            # A batch's members (its admin page); jobs in no batch have no entry.
            models.Index(
                fields=["batch", "id"],
                condition=Q(batch__isnull=False),
                name="django_jobs_batch_idx",
            ),
            # Ended jobs whose workflow steps are still to take (the leader's repair).
            models.Index(
                fields=["workflow_pending"],
                condition=Q(workflow_pending=True),
                name="django_jobs_workflow_idx",
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["name", "unique_key"],
                condition=Q(status__in=["pending", "running"]) & Q(unique_key__isnull=False),
                name="django_jobs_unique_live_key",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} #{self.pk} ({self.status})"

    @classmethod
    def unsaved(cls, **values: Any) -> Job:
        """An unsaved job of ``values``, the other fields at their defaults.

        Built with every field's value in order, as Django makes the rows it
        loads: a third of the CPU of the keyword form, which looks up and pops
        each field's keyword; the constant defaults are laid out once
        (:func:`_layout`), and only a default that is made anew each time (a
        callable's: ``created_at``) is called, when ``values`` does not give it.
        ``pre_init`` and ``post_init`` are sent as ever.
        """
        return cls.built(values, init_signals(cls))

    @classmethod
    def built(cls, values: dict[str, Any], signals: bool) -> Job:
        """:meth:`unsaved`, told whether ``pre_init`` or ``post_init`` has a receiver (a
        caller that builds many asks once: :func:`init_signals`)."""
        layout = _layout()
        fields = list(layout.constants)
        for name, value in values.items():
            fields[layout.position[name]] = value
        for at, name, make in layout.made:
            if name not in values:
                fields[at] = make()
        if signals:
            return cls(*fields)  # type: ignore[misc]  # the plugin reads one positional as the id
        # What Model.__init__ does with every field given in order, and no receiver of its
        # signals to tell: each value under its attname, and a new state.
        job = cls.__new__(cls)
        job.__dict__.update(zip(layout.attnames, fields, strict=True))
        job._state = ModelState()
        return job

    @classmethod
    def maker(cls, values: dict[str, Any], signals: bool) -> Callable[[Any], Job]:
        """A maker of unsaved jobs that share ``values``, each given its payload: :meth:`built`
        for many rows, with the shared part laid out once."""
        layout = _layout()
        if signals or any(name not in values for _, name, _ in layout.made):
            return lambda payload: cls.built({**values, "payload": payload}, signals)
        fields = list(layout.constants)
        for name, value in values.items():
            fields[layout.position[name]] = value
        shared = dict(zip(layout.attnames, fields, strict=True))

        def make(payload: Any) -> Job:
            job = cls.__new__(cls)
            state = job.__dict__
            state.update(shared)
            state["payload"] = payload
            job._state = ModelState()
            return job

        return make


def init_signals(model: type[models.Model]) -> bool:
    """Whether ``pre_init`` or ``post_init`` has a receiver for ``model``."""
    return pre_init.has_listeners(model) or post_init.has_listeners(model)


class Layout(NamedTuple):
    """Job's concrete fields in order: each one's position, the constant defaults, and the
    defaults made anew for each row (a callable's), with their position and name."""

    position: dict[str, int]
    attnames: tuple[str, ...]
    constants: tuple[Any, ...]
    made: tuple[tuple[int, str, Callable[[], Any]], ...]


@functools.cache
def _layout() -> Layout:
    fields = Job._meta.concrete_fields
    made = tuple(
        (at, field.attname, field.get_default)
        for at, field in enumerate(fields)
        if field.has_default() and callable(field.default)
    )
    constants = tuple(
        None if any(at == m[0] for m in made) else field.get_default()
        for at, field in enumerate(fields)
    )
    position = {field.attname: at for at, field in enumerate(fields)}
    return Layout(position, tuple(position), constants, made)


class JobDependency(models.Model):
    """``job`` waits for ``depends_on`` to succeed (or, with ``ignore_failure``, to end)."""

    id = models.BigAutoField(primary_key=True)
    job = models.ForeignKey(
        Job, on_delete=models.CASCADE, related_name="dependency_links", db_index=False
    )
    depends_on = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="dependent_links")
    ignore_failure = models.BooleanField(
        default=False, help_text="The job runs once this dependency ends, whatever its end."
    )

    class Meta:
        db_table = "django_jobs_dependency"
        ordering = ["job_id", "depends_on_id"]
        verbose_name = "dependency"
        verbose_name_plural = "dependencies"
        constraints = [
            models.UniqueConstraint(
                fields=["job", "depends_on"], name="django_jobs_dependency_once"
            ),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} waits for job {self.depends_on_id}"


class DeadLetter(Job):
    """Dead-lettered jobs, for the admin's "Dead letters" list."""

    class Meta:
        proxy = True
        verbose_name = "dead letter"
        verbose_name_plural = "dead letters"


class Attempt(models.Model):
    id = models.BigAutoField(primary_key=True)
    # No index of its own: the unique (job, number) constraint's index serves lookups by job.
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="attempts", db_index=False)
    number = models.PositiveIntegerField()
    owner = models.CharField(max_length=255)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=20, choices=AttemptOutcome.choices, null=True, blank=True)
    error = models.TextField(blank=True, default="")
    # Where the handler raised: the end of the traceback, masked like ``error``. Its database
    # default serves the claim's INSERT, which does not name it.
    traceback = models.TextField(blank=True, default="", db_default="")

    class Meta:
        ordering = ["job_id", "number"]
        constraints = [
            models.UniqueConstraint(fields=["job", "number"], name="django_jobs_attempt_number"),
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} of job {self.job_id}"


class ScheduleSource(models.TextChoices):
    CODE = "code", "code"
    SETTINGS = "settings", "settings"
    SETTINGS_REMOVED = "settings_removed", "removed from settings"


class RecurringJob(PartialIndexesHandled, models.Model):
    name = models.CharField(max_length=200, unique=True)
    job_name = models.CharField(max_length=200)
    cron = models.CharField(max_length=200)
    payload = models.JSONField(null=True, blank=True)
    queue = models.CharField(max_length=100, null=True, blank=True)
    priority = models.IntegerField(null=True, blank=True)
    max_attempts = models.PositiveIntegerField(null=True, blank=True)
    timezone = models.CharField(max_length=64, default="UTC")
    enabled = models.BooleanField(default=True)
    overlap = models.BooleanField(
        default=True, help_text="Enqueue a new run while the previous one is live."
    )
    next_run_at = models.DateTimeField(null=True, blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    source = models.CharField(
        max_length=20,
        choices=ScheduleSource.choices,
        default=ScheduleSource.CODE,
        help_text="Where the schedule is declared: DJANGO_JOBS['RECURRING'] or code.",
    )
    created_at = models.DateTimeField(default=tz.now)

    class Meta:
        ordering = ["name"]
        indexes = [
            models.Index(
                fields=["next_run_at"],
                condition=Q(enabled=True),
                name="django_jobs_recurring_due_idx",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class WorkerProcess(models.Model):
    """A live ``runjobs`` process, refreshed by its heartbeat.

    Not the runtime's :class:`django_jobs.worker.Worker`: this is its row, which the
    admin's Workers page and ``jobs status`` list.
    """

    id = models.CharField(primary_key=True, max_length=255, help_text="host:pid:random")
    host = models.CharField(max_length=255)
    pid = models.IntegerField()
    queues = models.JSONField(default=list)
    started_at = models.DateTimeField()
    last_heartbeat_at = models.DateTimeField(db_index=True)
    jobs_run = models.PositiveBigIntegerField(
        default=0, help_text="Attempts this process has finished, as of its last heartbeat."
    )
    supervisor = models.CharField(
        max_length=255,
        null=True,
        blank=True,
        help_text="The id of the supervisor (runjobs --processes) whose child this process is.",
    )
    process_count = models.PositiveIntegerField(
        default=0,
        help_text="A supervisor's number of worker processes; 0 for one that runs jobs itself.",
    )
    names = models.JSONField(
        null=True,
        blank=True,
        help_text="The job names this process knows and so claims; empty for a supervisor, and"
        " for a process older than the field, which claims every name.",
    )
    largest_claim = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="The most jobs one claim of this process takes of a queue: the room other"
        " processes leave it under a global limit before they claim without the queue's lock."
        " 0 for a process that always takes the lock; empty for one older than the field.",
    )

    class Meta:
        db_table = "django_jobs_worker"
        ordering = ["host", "pid"]
        verbose_name = "worker"
        verbose_name_plural = "workers"

    def __str__(self) -> str:
        return self.id


class LeaderQuerySet(models.QuerySet["Leader"]):
    def held(self, now: datetime) -> LeaderQuerySet:
        """Leases that hold at ``now``: owned, and not yet lapsed or handed over."""
        return self.filter(expires_at__gt=now).exclude(owner="")


class Leader(models.Model):
    """Which worker process leads: the one that takes back expired leases, fires the
    recurring schedules, prunes finished jobs and sweeps stale workers for the whole
    database, so that fifty processes do not each do it.

    One row per database, taken and renewed by a guarded update on the database's clock
    (:mod:`django_jobs.worker.leader.leadership`). ``epoch`` counts the changes of leader: a
    process that led and lost the lease finds a newer epoch when it comes back. Nothing's
    correctness rests on it; every chore stays guarded as if two processes led at once.
    """

    #: The one lease a database has today, by its name.
    DEFAULT = "default"

    name = models.CharField(primary_key=True, max_length=64)
    owner = models.CharField(
        max_length=255, blank=True, default="", help_text="The worker process that leads."
    )
    epoch = models.PositiveBigIntegerField(
        default=0, help_text="How many times the lease has passed to a new leader."
    )
    elected_at = models.DateTimeField(
        null=True, blank=True, help_text="When this leader took the lease."
    )
    expires_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the lease lapses unless renewed; another process may take it then.",
    )

    objects = LeaderQuerySet.as_manager()

    class Meta:
        db_table = "django_jobs_leader"
        verbose_name = "leader"
        verbose_name_plural = "leaders"

    def __str__(self) -> str:
        return f"{self.name}: {self.owner or 'nobody'} (epoch {self.epoch})"


class QueueQuerySet(models.QuerySet["Queue"]):
    def paused(self) -> QueueQuerySet:
        return self.filter(paused_at__isnull=False)


class Queue(models.Model):
    """A queue's state in the database, shared by every worker on every host: whether it
    is paused, and the window its rate limit counts starts in.

    A queue needs no row to be served: one is made when it is first paused, or when a
    worker first claims from it under a limit. A limited claim locks the row, which
    keeps the claims of that queue one at a time however many workers serve it
    (:mod:`django_jobs.db.limits`); on PostgreSQL, claims under a global limit with room
    to spare share the row's lock instead (:mod:`django_jobs.db.postgresql_limits`).
    """

    name = models.CharField(primary_key=True, max_length=100)
    paused_at = models.DateTimeField(
        null=True, blank=True, help_text="When pause_queue() paused it; empty: it is served."
    )
    window_start = models.DateTimeField(
        null=True, blank=True, help_text="The start of the rate limit's current window."
    )
    window_count = models.PositiveIntegerField(
        default=0, help_text="Jobs of the queue started in that window."
    )
    slot_wanted = models.BooleanField(
        default=False,
        help_text="A claim found the queue's limit full: the next slot freed wakes its workers.",
    )

    objects = QueueQuerySet.as_manager()

    class Meta:
        db_table = "django_jobs_queue"
        ordering = ["name"]
        verbose_name = "queue"
        verbose_name_plural = "queues"

    def __str__(self) -> str:
        return f"{self.name} (paused)" if self.paused_at else self.name
