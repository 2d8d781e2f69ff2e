"""``manage.py readd_schedules --ready PATH --stop PATH``: re-add every schedule in a loop.

Reads the stored schedules once, then calls ``add_recurring_job`` with each
one's own cron, zone and options, over and over, as every ``runjobs`` start
does for the schedules in settings. Touches ``--ready`` after the first round
and stops once ``--stop`` exists: the tests race these against schedulers.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from django_jobs.models import RecurringJob
from django_jobs.recurring import add_recurring_job

MAX_SECONDS = 120


class Command(BaseCommand):
    help = "Re-add the stored recurring schedules, unchanged, until told to stop."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--ready", required=True, type=Path)
        parser.add_argument("--stop", required=True, type=Path)

    def handle(self, *args: Any, **options: Any) -> None:
        schedules = list(RecurringJob.objects.order_by("name"))
        deadline = time.monotonic() + MAX_SECONDS
        rounds = 0
        while not options["stop"].exists() and time.monotonic() < deadline:
            for schedule in schedules:
                add_recurring_job(
                    schedule.name,
                    schedule.cron,
                    schedule.job_name,
                    schedule.payload,
                    queue=schedule.queue,
                    timezone=schedule.timezone,
                    enabled=schedule.enabled,
                    priority=schedule.priority,
                    max_attempts=schedule.max_attempts,
                    overlap=schedule.overlap,
                    source=schedule.source,
                )
            rounds += 1
            if rounds == 1:
                options["ready"].touch()
        self.stdout.write(f"rounds {rounds}")
