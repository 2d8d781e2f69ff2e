"""django-tasks-db, driven by bench/peers/common.py; runs in bench/.envs/tasks-db (Django 6).

The project is bench/peers/tasks_db_project. The drain is TWO ``db_worker``
processes (a worker runs one task at a time) with ``--batch``, which makes a
worker exit once it finds no ready task; the driver still waits for every
task to have succeeded (polling the database) and then SIGTERMs whatever runs.
Its connection is kept between tasks (``CONN_MAX_AGE`` 600, see the settings).

``--defaults`` runs the peer as its documentation has a user run it: two plain
``db_worker`` processes (no ``--batch``: they run until stopped) and Django's own
``CONN_MAX_AGE`` of 0, a new connection for each task.
The idle worker for the pickups is one ``db_worker`` with its default
``--interval`` of 1 second. django-tasks-db has no bulk enqueue. The database
is PostgreSQL, MariaDB (Django's mysql backend) or a SQLite file, as
``DATABASE_URL`` says (see the project's settings).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import common
import harness  # bench/harness.py, on the path once common is imported

HERE = Path(__file__).resolve().parent


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--defaults",
        action="store_true",
        help="db_worker without --batch, and Django's CONN_MAX_AGE of 0",
    )


class TasksDb(common.System):
    name = "django-tasks-db"
    workers = "2 db_worker processes"
    bulk_api = None

    def __init__(self, defaults: bool = False) -> None:
        self.defaults = defaults
        if defaults:
            self.name += " (defaults)"
            self.workers = "2 db_worker, no --batch, CONN_MAX_AGE 0"
            os.environ["TASKS_DB_CONN_MAX_AGE"] = "0"
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tasks_db_project.settings")
        # The workers import the tasks module by its dotted path.
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
        import django

        django.setup()

    def versions(self) -> dict[str, str]:
        return harness.package_versions("django-tasks-db", "Django", harness.dbapi_package())

    def prepare(self) -> None:
        harness.migrate()

    def delete_jobs(self) -> None:
        from django.db import connection
        from django_tasks_db.models import DBTaskResult

        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {connection.ops.quote_name(DBTaskResult._meta.db_table)}")

    def enqueue_one(self, number: int) -> None:
        from tasks_db_project.tasks import noop

        noop.enqueue(number)

    def enqueue_pickup(self, log: Path) -> None:
        from tasks_db_project.tasks import record_start

        record_start.enqueue(str(log))

    def db_worker(self, *extra: str) -> list[str]:
        return [sys.executable, "-m", "django", "db_worker", *extra]

    def drain_commands(self) -> list[list[str]]:
        if self.defaults:
            return [self.db_worker(), self.db_worker()]
        return [self.db_worker("--batch"), self.db_worker("--batch")]

    def idle_commands(self) -> list[list[str]]:
        return [self.db_worker()]

    def counts(self) -> tuple[int, int, int]:
        from django.db.models import Count
        from django_tasks_db.compat import TaskResultStatus
        from django_tasks_db.models import DBTaskResult

        rows = dict(
            DBTaskResult.objects.order_by().values_list("status").annotate(count=Count("id"))
        )
        rows.pop(TaskResultStatus.READY, 0)
        succeeded = rows.pop(TaskResultStatus.SUCCESSFUL, 0)
        running = rows.pop(TaskResultStatus.RUNNING, 0)
        otherwise = sum(rows.values())
        return succeeded + running + otherwise, succeeded, otherwise

    def unfinished(self) -> bool:
        from django_tasks_db.compat import TaskResultStatus
        from django_tasks_db.models import DBTaskResult

        waiting = (TaskResultStatus.READY, TaskResultStatus.RUNNING)
        return DBTaskResult.objects.order_by().filter(status__in=waiting).exists()

    def describe_database(self) -> str | None:
        from django.db import connection

        if connection.vendor != "sqlite":
            return None
        with connection.cursor() as cursor:
            return harness.describe_sqlite(cursor)


if __name__ == "__main__":
    sys.exit(common.main(TasksDb, add_arguments=add_arguments))
