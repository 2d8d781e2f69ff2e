"""``manage.py demo``: enqueue example jobs, run a worker until they are done, report."""

from __future__ import annotations

import logging
import shlex
import sys
import threading
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from django_jobs import schedule_job, schedule_jobs
from django_jobs.models import Job, JobStatus
from django_jobs.worker import Worker, serve


def python_command(executable: str, project_dir: Path) -> str:
    """How to run this Python from the project directory: relative when it lives inside it.

    The demo runs under the project's virtualenv, so a bare ``python`` in the
    hints it prints would miss Django outside that virtualenv.
    """
    path = Path(executable)
    if path.is_absolute() and path.is_relative_to(project_dir):
        path = path.relative_to(project_dir)
    return shlex.quote(str(path))


class Command(BaseCommand):
    help = "Enqueue some example jobs, run a worker until they are done, print what happened."

    def handle(self, *args: Any, **options: Any) -> None:
        call_command("migrate", verbosity=0)
        Job.objects.all().delete()
        schedule_job("emails.welcome", {"email": "ada@example.com"})
        schedule_jobs([{"job": "reports.add", "payload": {"a": n, "b": n}} for n in range(5)])
        schedule_job("demo.flaky", {"succeed_on": 2})
        schedule_job("demo.broken", {"why": "to show a dead letter"})
        # async def handlers: awaited together on the worker's event loop, not a thread each
        schedule_jobs(
            [
                {"job": "example.async_add", "payload": {"a": n, "b": 1, "sleep": 0.5}}
                for n in range(3)
            ]
        )
        self.stdout.write(f"enqueued {Job.objects.count()} jobs; running a burst worker...")

        self._log_to_stdout()
        # A burst worker exits when nothing is due; retries become due after
        # their backoff, so run again until every job has finished.
        while Job.objects.filter(status__in=[JobStatus.PENDING, JobStatus.RUNNING]).exists():
            serve(Worker(burst=True), threading.Event())
            time.sleep(0.1)

        self.stdout.write("\n  id  job                status         attempts  last error")
        for job in Job.objects.order_by("id"):
            self.stdout.write(
                f"{job.pk:>4}  {job.name:<18} {job.status:<14} "
                f"{job.attempts_used}/{job.max_attempts:<7} {job.last_error[:50]}"
            )
        dead = Job.objects.filter(status=JobStatus.DEAD_LETTERED).count()
        python = python_command(sys.executable, Path(settings.BASE_DIR))
        self.stdout.write(
            f"\n{Job.objects.filter(status=JobStatus.SUCCEEDED).count()} succeeded, "
            f"{dead} dead-lettered. See them in the admin: {python} manage.py createsuperuser, "
            f"{python} manage.py runserver, then /admin/django_jobs/deadletter/"
        )

    def _log_to_stdout(self) -> None:
        class Brief(logging.Formatter):
            """One line a record: the demo leaves tracebacks to the real logs."""

            def format(self, record: logging.LogRecord) -> str:
                return super().format(record).split("\n", 1)[0]

            def formatException(self, ei: Any) -> str:  # noqa: N802 - logging's name
                return ""

        handler = logging.StreamHandler(self.stdout)
        handler.setFormatter(Brief("  %(levelname)-7s %(message)s"))
        logger = logging.getLogger("django_jobs")
        logger.handlers[:] = [handler]
        logger.setLevel(logging.INFO)
