"""What ``runjobs`` makes sure of before it serves, and what it tells the operator."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import connections
from django.db.migrations.executor import MigrationExecutor

from .conf import require_queue_name, require_use_tz, settings
from .exceptions import JobsError
from .models import Job

APP_LABEL = "django_jobs"


class NotMigrated(JobsError):
    """The database lacks some of django-jobs' migrations."""


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


def check_ready(using: str) -> None:
    """What a worker needs before it can serve: good settings, ``USE_TZ``, migrated tables."""
    settings.validate()
    require_use_tz()
    require_migrated(using)


def served_queues(names: Iterable[str] | None, workers: int | None) -> dict[str, int]:
    """Queue name -> handler threads, from ``--queue`` and ``--workers`` (else ``QUEUES``)."""
    if workers is not None and workers < 1:
        raise ValueError("--workers must be at least 1")
    chosen = [require_queue_name(name, "--queue") for name in names or []]
    return {name: workers or settings.queue_workers(name) for name in chosen or settings.QUEUES}
