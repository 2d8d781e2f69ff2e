"""``manage.py fire_schedules --start ISO --minutes N``: a scheduler loop on a moved clock.

Calls ``enqueue_due`` once for each minute from ``start`` (plus 30 s) on,
without waiting for real minutes: the tests race several of these processes.
With ``--after PATH`` (repeatable) it first waits, up to a minute, for those
files to exist, so that it starts while other processes are already busy.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_jobs.maintenance.scheduler import enqueue_due

WAIT_SECONDS = 60


class Command(BaseCommand):
    help = "Run the recurring scheduler over a range of minutes, as fast as it can."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--start", required=True, type=datetime.fromisoformat)
        parser.add_argument("--minutes", required=True, type=int)
        parser.add_argument("--after", action="append", default=[], type=Path)

    def handle(self, *args: Any, **options: Any) -> None:
        deadline = time.monotonic() + WAIT_SECONDS
        while not all(path.exists() for path in options["after"]):
            if time.monotonic() > deadline:
                raise CommandError(f"{options['after']} did not all appear in {WAIT_SECONDS}s")
            time.sleep(0.01)
        fired = 0
        for minute in range(options["minutes"] + 1):
            now = options["start"] + timedelta(minutes=minute, seconds=30)
            fired += enqueue_due(now)
        self.stdout.write(f"fired {fired}")
