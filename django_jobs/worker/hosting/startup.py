"""What ``runjobs`` makes sure of before it serves, and what it tells the operator."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from datetime import datetime

from django.core.checks import WARNING, CheckMessage, Tags, run_checks
from django.db import OperationalError, connections
from django.db.migrations.executor import MigrationExecutor
from django.db.models import Count
from django.utils import timezone

from ...conf import require_queue_name, require_use_tz, settings
from ...db.journal import use_wal_mode
from ...exceptions import JobsError, NotMigrated
from ...models import Job
from ...queues import closest_queue, known_queues
from ...text import first_line

logger = logging.getLogger(__name__)

APP_LABEL = "django_jobs"


def unapplied_migrations(using: str) -> list[str]:
    """Names of django-jobs' migrations not yet applied to database ``using``."""
    executor = MigrationExecutor(connections[using])
    targets = [key for key in executor.loader.graph.leaf_nodes() if key[0] == APP_LABEL]
    return [
        migration.name
        for migration, _ in executor.migration_plan(targets)
        if migration.app_label == APP_LABEL
    ]


def require_migrated(using: str) -> None:
    """Raise :class:`NotMigrated`, saying what to run, if the jobs tables are not up to date;
    then make the database ready to serve (:func:`prepare_database`)."""
    require_migrations_applied(using)
    prepare_database(using)


def require_migrations_applied(using: str) -> None:
    """Raise :class:`NotMigrated`, saying what to run, if the jobs tables are not up to date."""
    missing = unapplied_migrations(using)
    if not missing:
        return
    command = "python manage.py migrate" + ("" if using == "default" else f" --database {using}")
    if Job._meta.db_table not in connections[using].introspection.table_names():
        raise NotMigrated(f"Database {using!r} has no django_jobs tables: run `{command}` first.")
    raise NotMigrated(
        f"Database {using!r} lacks django_jobs migration(s) {', '.join(missing)}: "
        f"run `{command}` first."
    )


class DatabaseCheckFailed(JobsError):
    """A system check tagged ``database`` found an error: ``runjobs`` stops, as ``migrate``."""


def prepare_database(using: str) -> None:
    """Put a SQLite file in WAL mode, then run the database checks and log what they find."""
    use_wal_mode(using)
    log_database_checks(using)


def log_database_checks(using: str) -> None:
    """Run the system checks tagged ``database`` on ``using``, as ``migrate`` does.

    ``runjobs`` is connected anyway, and the person starting it is the one who
    should hear of the database's settings (``django_jobs.W001``, ``W003``...).
    Each warning is logged and the worker starts; an error (not silenced) raises
    :class:`DatabaseCheckFailed`, as it stops ``migrate``.
    """
    found = [
        message
        for message in run_checks(
            tags=[Tags.database], databases=[using], include_deployment_checks=False
        )
        if not message.is_silenced()
    ]
    errors = [str(message) for message in found if message.is_serious()]
    if errors:
        raise DatabaseCheckFailed("System check identified errors:\n" + "\n".join(errors))
    for message in found:
        logger.log(
            logging.WARNING if message.level >= WARNING else logging.INFO,
            "%s",
            one_line(message),
            extra={"event": "system_check", "check_id": message.id},
        )


def one_line(message: CheckMessage) -> str:
    """A check's message as one log line: ``(id) message HINT: hint``."""
    text = f"({message.id}) {message.msg}"
    return f"{text} HINT: {message.hint}" if message.hint else text


class DatabaseUnreachable(JobsError):
    """The database could not be reached and the caller would not wait."""


def wait_for_database(
    using: str,
    stop: threading.Event,
    *,
    wait: bool = True,
    first_wait: float = 1.0,
    max_wait: float = 30.0,
    connect: Callable[[], object] | None = None,
) -> bool:
    """Connect to ``using``, trying again (1 s, 2 s, 4 s ... 30 s) until it answers.

    A worker started before its database (a container started first, a
    server restarting) logs one line a try and serves once it can. Returns
    False if ``stop`` was set meanwhile. With ``wait=False`` (``--burst``),
    raises :class:`DatabaseUnreachable` at the first failure instead.
    """
    connect = connect or connections[using].ensure_connection
    delay = first_wait
    while not stop.is_set():
        try:
            connect()
            return True
        except OperationalError as exc:
            if not wait:
                raise DatabaseUnreachable(
                    f"Database {using!r} is unreachable: {first_line(exc)}"
                ) from None
            logger.warning(
                "database %r is unreachable (%s); trying again in %.0fs",
                using,
                first_line(exc),
                delay,
                extra={"event": "database_unreachable"},
            )
            connections[using].close()
            stop.wait(delay)
            delay = min(delay * 2, max_wait)
    return False


def check_configured() -> None:
    """What a worker needs before it touches the database: good settings, ``USE_TZ``."""
    settings.validate()
    require_use_tz()


def served_queues(names: Iterable[str] | None, workers: int | None) -> dict[str, int]:
    """Queue name -> handler threads, from ``--queue`` and ``--workers`` (else ``QUEUES``)."""
    if workers is not None and workers < 1:
        raise ValueError("--workers must be at least 1")
    chosen = [require_queue_name(name, "--queue") for name in names or []]
    warn_unknown_queues(chosen)
    return {name: workers or settings.queue_workers(name) for name in chosen or settings.QUEUES}


def warn_unknown_queues(chosen: list[str]) -> None:
    """A warning for each ``--queue`` the project names nowhere (a typo, most likely), with
    the closest it does name. The worker serves it all the same: a job can be scheduled
    onto any queue."""
    if not chosen:
        return
    known = known_queues()
    for name in chosen:
        if name in known:
            continue
        close = closest_queue(name, known)
        guess = f"did you mean {close!r}? " if close else ""
        logger.warning(
            "--queue %r is not in DJANGO_JOBS['QUEUES'] and no registered job, schedule or "
            "task backend uses it; %sserving it anyway (a job can be scheduled onto any queue)",
            name,
            guess,
            extra={"event": "unknown_queue", "queue": name},
        )


def unserved_due_counts(served: Iterable[str], now: datetime, using: str) -> dict[str, int]:
    """Due pending jobs per queue outside ``served``, in one query."""
    rows = (
        Job.objects.using(using)
        .due(now)
        .exclude(queue__in=list(served))
        .values("queue")
        .annotate(count=Count("id"))
        .order_by("queue")
    )
    return {row["queue"]: row["count"] for row in rows}


def log_unserved_due(served: Iterable[str], using: str, now: datetime | None = None) -> int:
    """Log how many due jobs sit on queues this worker does not serve; return that number.

    A warning when one of those queues is not in ``DJANGO_JOBS['QUEUES']``
    (no worker started without ``--queue`` runs it), else an info line.
    """
    counts = unserved_due_counts(served, now or timezone.now(), using)
    total = sum(counts.values())
    if not total:
        return 0
    undeclared = sorted(set(counts) - set(settings.QUEUES))
    listed = ", ".join(f"{queue!r} ({count})" for queue, count in counts.items())
    message = f"{total} due job(s) on queues this worker does not serve: {listed}"
    if undeclared:
        message += (
            f"; {', '.join(map(repr, undeclared))} not in DJANGO_JOBS['QUEUES'], "
            "so only a worker started with --queue runs them"
        )
    logger.log(
        logging.WARNING if undeclared else logging.INFO,
        message,
        extra={"event": "unserved_jobs", "queues": counts},
    )
    return total
