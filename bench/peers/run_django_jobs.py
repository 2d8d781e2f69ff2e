"""django-jobs, driven by bench/peers/common.py; runs in the project's own .venv.

The jobs are the test project's: ``demo.noop`` for the enqueues and the drain,
``example.watchful`` (which appends its start time to a file, touching no
database) for the pickups. The drain is ONE ``runjobs --workers 2 --burst``
process; the idle worker is ``runjobs --workers 2``. ``--processes N --workers T``
give another shape (``runjobs --processes N`` is passed only when N > 1, so
a runjobs without that option runs the default). Settings are the test
project's defaults (``POLL_SECONDS`` 1) but for ``DATABASE_URL``: a PostgreSQL
database (the idle worker is woken by LISTEN/NOTIFY), a MariaDB one
(``mysql://``, opened in ``utf8mb4``; the idle worker polls: MariaDB has no
LISTEN) or a ``sqlite:///PATH`` file, which testproject/settings.py opens with
``transaction_mode`` ``IMMEDIATE`` and a 30 s ``timeout`` (the idle worker
polls).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import common
import harness  # bench/harness.py, on the path once common is imported
from harness import JOB_NAME, KEYED_JOB_NAME, KEYED_PER_KEY, KEYED_QUEUE, QUEUE, keyed_key

PICKUP_JOB_NAME = "example.watchful"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--processes", type=int, default=1, help="runjobs --processes")
    parser.add_argument("--workers", type=int, default=2, help="runjobs --workers")
    parser.add_argument(
        "--global-limit", type=int, default=0, help="the queue's global_limit (0: none)"
    )
    parser.add_argument("--rate-limit", default="", help="the queue's rate_limit ('': none)")
    parser.add_argument("--label", default="", help="the system's name in the report")
    parser.add_argument(
        "--keyed",
        action="store_true",
        help=f"the jobs are {KEYED_JOB_NAME} on the queue {KEYED_QUEUE!r}, under"
        f" concurrency keys of {KEYED_PER_KEY} jobs each",
    )


def shape(processes: int, workers: int) -> list[str]:
    """runjobs' options for ``processes`` x ``workers`` threads (no --processes for one)."""
    given = ["--processes", str(processes)] if processes > 1 else []
    return [*given, "--workers", str(workers)]


def describe_shape(processes: int, workers: int) -> str:
    """The shape in words, for the report."""
    if processes > 1:
        return f"runjobs --processes {processes} --workers {workers}"
    return f"1 runjobs process, --workers {workers}"


class DjangoJobs(common.System):
    name = "django-jobs"
    bulk_api = "schedule_jobs()"

    def __init__(
        self,
        processes: int = 1,
        workers: int = 2,
        global_limit: int = 0,
        rate_limit: str = "",
        keyed: bool = False,
        label: str = "",
    ) -> None:
        self.shape = shape(processes, workers)
        self.keyed = keyed
        self.job_name, self.queue = (KEYED_JOB_NAME, KEYED_QUEUE) if keyed else (JOB_NAME, QUEUE)
        if keyed:
            self.name += "+keyed"
        self.workers = describe_shape(processes, workers)
        # The queue's limits, for this process and the runjobs it starts (the test project
        # reads them from its environment).
        if global_limit:
            os.environ["JOBS_DEFAULT_GLOBAL_LIMIT"] = str(global_limit)
            self.name += "+global_limit"
        if rate_limit:
            os.environ["JOBS_DEFAULT_RATE_LIMIT"] = rate_limit
            self.name += "+rate_limit"
        self.name = label or self.name
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
        os.environ.setdefault("DEBUG", "false")
        harness.setup_django()

    def versions(self) -> dict[str, str]:
        return harness.package_versions("django-jobs", "Django", harness.dbapi_package())

    def prepare(self) -> None:
        harness.migrate()

    def delete_jobs(self) -> None:
        harness.delete_jobs()

    def enqueue_one(self, number: int) -> None:
        from django_jobs import schedule_job

        schedule_job(self.job_name, {"n": number}, concurrency_key=self.key(number))

    def enqueue_many(self, numbers: range) -> None:
        from django_jobs.scheduling import JobSpec, schedule_jobs

        schedule_jobs(
            [
                JobSpec(self.job_name, {"n": number}, concurrency_key=self.key(number))
                for number in numbers
            ]
        )

    def key(self, number: int) -> str | None:
        return keyed_key(number) if self.keyed else None

    def enqueue_pickup(self, log: Path) -> None:
        from django_jobs import schedule_job

        schedule_job(PICKUP_JOB_NAME, {"seconds": 0, "log": str(log)})

    def runjobs(self, *extra: str) -> list[str]:
        queues = ["--queue", self.queue]
        if self.queue != QUEUE:  # the pickups' job is on the default queue
            queues += ["--queue", QUEUE]
        return harness.runjobs_command(*queues, *extra)

    def drain_commands(self) -> list[list[str]]:
        return [self.runjobs(*self.shape, "--burst")]

    def idle_commands(self) -> list[list[str]]:
        return [self.runjobs(*self.shape)]

    def counts(self) -> tuple[int, int, int]:
        from django.db.models import Count

        from django_jobs.models import Attempt, Job, JobStatus

        rows = dict(Job.objects.order_by().values_list("status").annotate(count=Count("id")))
        succeeded = rows.pop(JobStatus.SUCCEEDED, 0)
        rows.pop(JobStatus.PENDING, 0)
        rows.pop(JobStatus.RUNNING, 0)
        started = int(Attempt.objects.exists())
        return started, succeeded, sum(rows.values())

    def unfinished(self) -> bool:
        return harness.unfinished()

    def describe_database(self) -> str | None:
        from django.db import connection

        if connection.vendor != "sqlite":
            return None
        with connection.cursor() as cursor:
            return harness.describe_sqlite(cursor)


if __name__ == "__main__":
    sys.exit(common.main(DjangoJobs, add_arguments=add_arguments))
